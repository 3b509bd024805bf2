/* llmbus-kv-manager as a process against a real nats-server: KVStep version 2 over the bus
 * (resync, allocation, prefix hit, release by block id), malformed and version-1 input answered
 * with an error while the actor keeps serving, recovery (a lost reply, a restarted scheduler:
 * both by resync), heartbeat and clean drain. The test plays the scheduler, which owns the
 * block tables (docs/design.md §4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bus/bus.h"
#include "schemas/control.h"
#include "schemas/kv_step.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core machine under sanitizers */
#define NUM_BLOCKS 8
#define BLOCK_SIZE 4

static struct nats_test_server srv;
static struct bus *client;
static pid_t kv_pid;
static char kv_subject[BUS_SUBJECT_MAX];
static uint64_t next_step = 10;
static struct llb_arena arena;

static pid_t spawn_kv_manager(void) {
  const char *build = getenv("LLMBUS_BUILD_DIR");
  if (!build) return -1;
  char bin[512];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus-kv-manager", build);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char nb[16], bs[16];
    snprintf(nb, sizeof nb, "%d", NUM_BLOCKS);
    snprintf(bs, sizeof bs, "%d", BLOCK_SIZE);
    execl(bin, bin, "--nats", srv.url, "--num-blocks", nb, "--block-size", bs, "--engine-id",
          "t1", "--instance", "kvtest", "--heartbeat-ms", "200", (char *)NULL);
    fprintf(stderr, "exec %s failed\n", bin);
    _exit(127);
  }
  return pid;
}

static int group_setup(void **state) {
  (void)state;
  if (!nats_test_server_bin()) return -1;
  if (nats_test_server_start(&srv, 0, false) != 0) return -1;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.name = "test_engine_kv";
  o.install_signal_handlers = false;
  if (bus_connect(&o, &client) != LLB_STATUS_OK) return -1;
  if (bus_subject_engine("llm", "t1", "kv", kv_subject, sizeof kv_subject) != LLB_STATUS_OK)
    return -1;
  llb_arena_init(&arena, NULL, 0);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (kv_pid > 0) {
    kill(kv_pid, SIGKILL);
    waitpid(kv_pid, NULL, 0);
  }
  bus_destroy(client);
  llb_arena_destroy(&arena);
  nats_test_server_stop(&srv);
  return 0;
}

/* Sends raw bytes to the kv subject and decodes the KVStepResult that comes back. */
static void request_raw(const void *data, size_t len, struct llb_kv_step_result *out) {
  struct bus_msg *reply = NULL;
  llb_status st = bus_request(client, kv_subject, data, len, NULL, WAIT_MS, &reply);
  if (st != LLB_STATUS_OK) fail_msg("kv request: %s", llb_err_last());
  llb_arena_reset(&arena);
  st = llb_kv_step_result_decode(reply->data, reply->len, &arena, out);
  bus_msg_destroy(reply);
  if (st != LLB_STATUS_OK) fail_msg("KVStepResult decode: %s", llb_err_last());
}

/* One KVStep; with `held` (resync) the block state is rebuilt from that list first. */
static void request_step_held(const struct llb_kv_op *ops, int32_t n, uint64_t step, const int32_t *held,
                              int32_t num_held, bool resync, struct llb_kv_step_result *out) {
  struct llb_kv_step m = {.step = step, .ops = ops, .num_ops = n, .held_block_ids = held,
                          .num_held_block_ids = num_held, .resync = resync};
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_step_encode_buf(&m, &b), LLB_STATUS_OK);
  request_raw(b.data, b.len, out);
  llb_buf_free(&b);
  if (out->error.code != 0) fail_msg("step %llu refused: %s", (unsigned long long)step, out->error.message.data);
  assert_int_equal(out->step, step);
  assert_int_equal(out->num_results, n);
}

static void request_step(const struct llb_kv_op *ops, int32_t n, uint64_t step, struct llb_kv_step_result *out) {
  request_step_held(ops, n, step, NULL, 0, false, out);
}

static struct llb_kv_op op_alloc(const char *id, int32_t tokens, const uint64_t *h, int32_t nh) {
  return (struct llb_kv_op){.kind = LLB_KV_OP_KIND_ALLOCATE, .req_id = llb_str_c(id),
                            .num_tokens = tokens, .block_hashes = h, .num_block_hashes = nh,
                            .lookup = true};
}
static struct llb_kv_op op_release(const int32_t *ids, int32_t n) {
  return (struct llb_kv_op){.kind = LLB_KV_OP_KIND_RELEASE, .block_ids = ids, .num_block_ids = n};
}

static int32_t a_blocks[3], b_blocks[3]; /* the blocks the test (as scheduler) holds */

static void test_kv_manager_process_starts_and_sends_heartbeats(void **state) {
  (void)state;
  struct bus_sub *hb = NULL;
  char hb_subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_health("llm", "kv_manager", "kvtest", hb_subject, sizeof hb_subject),
                   LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(client, hb_subject, &hb), LLB_STATUS_OK);
  assert_int_equal(bus_flush(client, WAIT_MS), LLB_STATUS_OK);
  kv_pid = spawn_kv_manager();
  assert_true(kv_pid > 0);
  struct bus_msg *m = NULL;
  /* ready=true means start() ran: the kv subscription exists. */
  bool ready = false;
  for (int i = 0; i < 100 && !ready; i++) {
    if (bus_sub_next_msg(hb, WAIT_MS, &m) != LLB_STATUS_OK) fail_msg("no heartbeat: %s", llb_err_last());
    struct llb_heartbeat h;
    llb_arena_reset(&arena);
    assert_int_equal(llb_heartbeat_decode(m->data, m->len, &arena, &h), LLB_STATUS_OK);
    assert_string_equal(h.actor.data, "kv_manager");
    assert_string_equal(h.instance.data, "kvtest");
    assert_int_equal(h.pid, kv_pid);
    ready = h.ready;
    bus_msg_destroy(m);
  }
  assert_true(ready);
  bus_unsubscribe(hb);
}

static void test_allocate_gives_blocks_and_counts_free(void **state) {
  (void)state;
  const uint64_t h[2] = {0x1111, 0x2222};
  struct llb_kv_op ops[1] = {op_alloc("a", 9, h, 2)};
  struct llb_kv_step_result r;
  /* a new kv_manager takes steps only once it was told what is held: the first one resyncs */
  request_step_held(ops, 1, next_step++, NULL, 0, true, &r);
  assert_string_equal(r.results[0].req_id.data, "a");
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
  assert_int_equal(r.results[0].num_cached_tokens, 0);
  assert_int_equal(r.results[0].num_block_ids, 3); /* ceil(9 / 4) */
  for (int i = 0; i < 3; i++) {
    assert_in_range(r.results[0].block_ids[i], 0, NUM_BLOCKS - 1);
    for (int k = 0; k < i; k++) assert_int_not_equal(r.results[0].block_ids[i], r.results[0].block_ids[k]);
    a_blocks[i] = r.results[0].block_ids[i];
  }
  assert_int_equal(r.num_free_blocks, NUM_BLOCKS - 3);
  assert_int_equal(r.num_total_blocks, NUM_BLOCKS);
  struct llb_kv_op cache = {.kind = LLB_KV_OP_KIND_CACHE, .block_hashes = h, .num_block_hashes = 2,
                            .block_ids = a_blocks, .num_block_ids = 2};
  request_step(&cache, 1, next_step++, &r);
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
}

static void test_prefix_hit_reuses_cached_blocks_then_release_returns_all(void **state) {
  (void)state;
  const uint64_t h[2] = {0x1111, 0x2222};
  struct llb_kv_op ops[1] = {op_alloc("b", 12, h, 2)};
  struct llb_kv_step_result r;
  request_step(ops, 1, next_step++, &r);
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
  assert_int_equal(r.results[0].num_cached_tokens, 2 * BLOCK_SIZE);
  assert_int_equal(r.results[0].num_block_ids, 3);
  for (int i = 0; i < 3; i++) b_blocks[i] = r.results[0].block_ids[i];
  assert_int_equal(b_blocks[0], a_blocks[0]);
  /* b shares a's first two blocks, so only one new block was taken. */
  assert_int_equal(r.num_free_blocks, NUM_BLOCKS - 4);
  assert_true(r.prefix_cache_hits >= 2 * BLOCK_SIZE);
  /* a ends: only its own block reaches zero; then b: its three */
  const int32_t a_own[1] = {a_blocks[2]}, b_all[3] = {b_blocks[2], b_blocks[1], b_blocks[0]};
  struct llb_kv_op rel[3] = {op_release(a_own, 1), op_release(b_all, 3), op_release(a_own, 1)};
  request_step(rel, 3, next_step++, &r);
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
  assert_int_equal(r.results[1].status, LLB_STATUS_OK);
  assert_int_equal(r.results[2].status, LLB_STATUS_INVALID_ARGUMENT); /* already free */
  assert_int_equal(r.num_free_blocks, NUM_BLOCKS);
}

static void test_garbage_and_truncated_get_error_reply_and_actor_keeps_serving(void **state) {
  (void)state;
  struct llb_kv_step_result r;
  uint8_t garbage[64];
  for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (uint8_t)(i * 37 + 11);
  request_raw(garbage, sizeof garbage, &r);
  assert_int_equal(r.error.code, LLB_STATUS_MALFORMED);
  assert_true(r.error.message.len > 0);
  assert_int_equal(r.num_results, 0);

  struct llb_kv_op ops[1] = {op_alloc("c", 5, NULL, 0)};
  struct llb_kv_step m = {.step = next_step, .ops = ops, .num_ops = 1};
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_step_encode_buf(&m, &b), LLB_STATUS_OK);
  request_raw(b.data, b.len - 3, &r);
  assert_int_equal(r.error.code, LLB_STATUS_MALFORMED);
  assert_int_equal(r.num_results, 0);
  /* A message of another kind is refused too, naming what was expected. */
  request_raw((const uint8_t *)"", 0, &r);
  assert_true(r.error.code != 0);
  /* A version-1 scheduler's step: refused as malformed, saying why. */
  m.version = 1;
  assert_int_equal(llb_kv_step_encode_buf(&m, &b), LLB_STATUS_OK);
  request_raw(b.data, b.len, &r);
  assert_int_equal(r.error.code, LLB_STATUS_MALFORMED);
  assert_non_null(strstr(r.error.message.data, "version"));
  /* A held list with a duplicate: the whole step is refused. */
  const int32_t dup[2] = {1, 1};
  m = (struct llb_kv_step){.step = next_step, .ops = ops, .num_ops = 1, .held_block_ids = dup,
                           .num_held_block_ids = 2, .resync = true};
  assert_int_equal(llb_kv_step_encode_buf(&m, &b), LLB_STATUS_OK);
  request_raw(b.data, b.len, &r);
  assert_int_equal(r.error.code, LLB_STATUS_INVALID_ARGUMENT);
  llb_buf_free(&b);

  /* Nothing of the bad messages was applied; the next valid step is served. */
  request_step(ops, 1, next_step++, &r);
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
  assert_int_equal(r.results[0].num_block_ids, 2);
  assert_int_equal(r.num_free_blocks, NUM_BLOCKS - 2);
}

static void test_resync_frees_the_blocks_of_a_lost_reply(void **state) {
  (void)state;
  /* "c" got 2 blocks in the previous test; a scheduler that lost that reply holds none: its
   * resync (nothing held) gives them back, and the same step allocates again. */
  struct llb_kv_op ops[1] = {op_alloc("c", 5, NULL, 0)};
  struct llb_kv_step_result r;
  request_step_held(ops, 1, next_step++, NULL, 0, true, &r);
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
  assert_int_equal(r.results[0].num_block_ids, 2);
  assert_int_equal(r.num_free_blocks, NUM_BLOCKS - 2); /* not 4: nothing leaked */
}

static void test_restarted_scheduler_is_refused_until_it_resyncs(void **state) {
  (void)state;
  /* A restarted scheduler starts again at step 1: without a resync its step is refused (the
   * kv_manager cannot know what it holds); with one, all the pool is available to it. */
  struct llb_kv_op ops[1] = {op_alloc("d", NUM_BLOCKS * BLOCK_SIZE, NULL, 0)};
  struct llb_kv_step m = {.step = 1, .ops = ops, .num_ops = 1};
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_step_encode_buf(&m, &b), LLB_STATUS_OK);
  struct llb_kv_step_result r;
  request_raw(b.data, b.len, &r);
  llb_buf_free(&b);
  assert_int_equal(r.error.code, LLB_STATUS_STATE_LOST);
  request_step_held(ops, 1, 1, NULL, 0, true, &r);
  next_step = 2;
  assert_int_equal(r.results[0].status, LLB_STATUS_OK);
  assert_int_equal(r.results[0].num_block_ids, NUM_BLOCKS);
  assert_int_equal(r.num_free_blocks, 0);
  int32_t d_blocks[NUM_BLOCKS];
  for (int i = 0; i < NUM_BLOCKS; i++) d_blocks[NUM_BLOCKS - 1 - i] = r.results[0].block_ids[i];
  /* Full pool: a further allocation is refused without changing anything. */
  struct llb_kv_op more[2] = {op_alloc("e", 1, NULL, 0), op_release(d_blocks, NUM_BLOCKS)};
  request_step(more, 2, next_step++, &r);
  assert_int_equal(r.results[0].status, LLB_STATUS_QUEUE_FULL);
  assert_int_equal(r.results[1].status, LLB_STATUS_OK);
  assert_int_equal(r.num_free_blocks, NUM_BLOCKS);
}

static void test_sigterm_drains_and_exits_zero(void **state) {
  (void)state;
  assert_int_equal(kill(kv_pid, SIGTERM), 0);
  int status = 0;
  assert_int_equal(waitpid(kv_pid, &status, 0), kv_pid);
  kv_pid = 0;
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void) {
  if (!nats_test_server_bin()) {
    fprintf(stderr, "nats-server not found: skipping\n");
    return 77;
  }
  if (!getenv("LLMBUS_BUILD_DIR")) {
    fprintf(stderr, "LLMBUS_BUILD_DIR not set (run under ctest)\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kv_manager_process_starts_and_sends_heartbeats),
      cmocka_unit_test(test_allocate_gives_blocks_and_counts_free),
      cmocka_unit_test(test_prefix_hit_reuses_cached_blocks_then_release_returns_all),
      cmocka_unit_test(test_garbage_and_truncated_get_error_reply_and_actor_keeps_serving),
      cmocka_unit_test(test_resync_frees_the_blocks_of_a_lost_reply),
      cmocka_unit_test(test_restarted_scheduler_is_refused_until_it_resyncs),
      cmocka_unit_test(test_sigterm_drains_and_exits_zero),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
