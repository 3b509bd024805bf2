/* llmbus-scheduler's flags into a scheduler_actor_options (cmd/actor/scheduler_options.h):
 * the model's context and vocabulary fill what the flags leave open, and a bad flag is an
 * error naming it before anything starts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmd/actor/scheduler_options.h"
#include "tests/unit/random_llama.h"

static struct scheduler_actor_options base_cfg(void) {
  struct scheduler_actor_options c;
  scheduler_actor_options_init(&c);
  c.sched.num_blocks = 64;
  c.sched.block_size = 16;
  c.sched.max_num_seqs = 8;
  c.sched.max_num_batched_tokens = 256;
  return c;
}

/* A tiny LLaMA GGUF with context 300 and vocabulary 512, in a temp file (path in buf). */
static void write_model(char *path, size_t cap) {
  const struct random_llama_shape sh = {.name = "tiny", .n_layers = 1, .embd = 64, .n_heads = 2, .n_kv_heads = 1,
                                        .head_dim = 32, .ffn = 128, .vocab = 512, .context = 300,
                                        .rope_base = 10000.0f};
  void *buf = NULL;
  size_t size = 0;
  assert_int_equal(random_llama_gguf(&sh, 7, &buf, &size), LLB_STATUS_OK);
  snprintf(path, cap, "/tmp/llb_sched_cfg_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, buf, size), (ssize_t)size);
  close(fd);
  free(buf);
}

static void test_model_fills_what_the_flags_leave_open(void **state) {
  (void)state;
  char path[64];
  write_model(path, sizeof path);
  struct scheduler_actor_options c = base_cfg();
  struct scheduler_flags f = {.policy = "priority", .model_path = path, .engine_id = "e1", .heartbeat_ms = 250};
  bool from_worker = true;
  assert_int_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_OK);
  assert_int_equal(c.sched.max_model_len, 300); /* below the 4096 cap: the model's context */
  assert_int_equal(c.sched.vocab_size, 512);
  assert_int_equal(c.sched.policy, SCHED_POLICY_PRIORITY);
  assert_true(c.sched.enable_prefix_caching && c.sched.async_scheduling);
  assert_int_equal(c.peer_heartbeat_ms, 250); /* the engine's actors beat at this actor's interval */
  assert_string_equal(c.model_name, strrchr(path, '/') + 1);
  assert_false(from_worker);
  /* given flags win over the model; speculative decoding turns async scheduling off */
  c = base_cfg();
  c.sched.num_blocks = 0;
  c.peer_heartbeat_ms = -1;
  f.max_model_len = 128;
  f.vocab_size = 100;
  f.num_speculative_tokens = 3;
  assert_int_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_OK);
  assert_int_equal(c.sched.max_model_len, 128);
  assert_int_equal(c.sched.vocab_size, 100);
  assert_false(c.sched.async_scheduling);
  assert_int_equal(c.sched.num_speculative_tokens, 3);
  assert_int_equal(c.peer_heartbeat_ms, 0); /* -1: no failure detection from heartbeats */
  assert_true(from_worker);                 /* --num-blocks 0: the worker's heartbeat says */
  unlink(path);
}

static void test_bad_flags_are_named(void **state) {
  (void)state;
  struct scheduler_actor_options c = base_cfg();
  bool from_worker;
  struct scheduler_flags f = {.policy = "lifo", .max_model_len = 128, .vocab_size = 100};
  assert_int_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "--policy 'lifo'"));
  f.policy = "fcfs";
  c.peer_missed_beats = 0;
  assert_int_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "--peer-missed-beats"));
  c = base_cfg();
  c.sched.num_blocks = -1;
  assert_int_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "--num-blocks"));
  c = base_cfg();
  c.sched.max_num_batched_tokens = 0; /* sched_create's own range checks run too */
  assert_int_not_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_OK);
  /* no --max-model-len and no readable model: the error names the file */
  c = base_cfg();
  f.max_model_len = 0;
  f.model_path = "/nonexistent/m.gguf";
  assert_int_not_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_OK);
  assert_non_null(strstr(llb_err_last(), "/nonexistent/m.gguf"));
  /* with --max-model-len an unreadable model only loses the vocabulary check */
  f.max_model_len = 64;
  assert_int_equal(scheduler_actor_options_resolve(&f, &c, &from_worker), LLB_STATUS_OK);
  assert_int_equal(c.sched.max_model_len, 64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_fills_what_the_flags_leave_open),
      cmocka_unit_test(test_bad_flags_are_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
