/* llmbus-scheduler + llmbus-kv-manager as processes against a real nats-server, with a fake
 * worker in the test (answers every SchedulerOutput with token 7 per scheduled request):
 * a request runs to max_tokens through the step loop, its first output carries the prompt
 * and params, an invalid request gets an ERROR output to its reply_to, stats are published,
 * a request survives a kv_manager restart, and both actors drain and exit 0 on SIGTERM. */
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
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 20000
#define SAMPLED_TOKEN 7

static struct nats_test_server srv;
static struct bus *client;
static pid_t kv_pid, sched_pid;
static struct llb_arena arena;
static struct bus_sub *outputs_sub, *stats_sub;
static int worker_steps;

static pid_t spawn(const char *name, const char *const *extra) {
  char bin[512];
  snprintf(bin, sizeof bin, "%s/cmd/%s", getenv("LLMBUS_BUILD_DIR"), name);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *argv[32] = {bin, "--nats", srv.url, "--engine-id", "t2", "--num-blocks", "64",
                            "--block-size", "4"};
    int n = 9;
    for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* The fake worker: one sampled token per scheduled request. */
static void on_execute(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)user;
  static struct llb_arena a;
  llb_arena_reset(&a);
  struct llb_scheduler_output so;
  if (llb_scheduler_output_decode(msg->data, msg->len, &a, &so) != LLB_STATUS_OK) return;
  worker_steps++;
  struct llb_str ids[64];
  int32_t num_sampled[64], tokens[64];
  int32_t n = so.num_scheduled_reqs < 64 ? so.num_scheduled_reqs : 64;
  for (int32_t i = 0; i < n; i++) {
    ids[i] = so.num_scheduled_tokens[i].req_id;
    num_sampled[i] = 1;
    tokens[i] = SAMPLED_TOKEN;
  }
  struct llb_model_runner_output mo = {.version = LLB_SCHEMA_VERSION, .step = so.step,
                                       .req_ids = ids, .num_reqs = n, .sampled_token_ids = tokens,
                                       .num_sampled_token_ids = n, .num_sampled = num_sampled};
  struct llb_buf b = {0};
  if (llb_model_runner_output_encode_buf(&mo, &b) == LLB_STATUS_OK)
    bus_respond(bus, msg, b.data, b.len, NULL);
  llb_buf_free(&b);
}

static int group_setup(void **state) {
  (void)state;
  if (nats_test_server_start(&srv, 0, false) != 0) return -1;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.name = "test_engine_scheduler";
  o.install_signal_handlers = false;
  if (bus_connect(&o, &client) != LLB_STATUS_OK) return -1;
  llb_arena_init(&arena, NULL, 0);
  if (bus_subscribe(client, "llm.engine.t2.execute", NULL, on_execute, NULL, NULL) ||
      bus_subscribe_sync(client, "llm.engine.t2.outputs", &outputs_sub) ||
      bus_subscribe_sync(client, "llm.engine.t2.stats", &stats_sub) || bus_flush(client, WAIT_MS))
    return -1;
  const char *kv_extra[] = {NULL};
  const char *sched_extra[] = {"--max-model-len", "64", "--kv-timeout-ms", "3000",
                               "--execute-timeout-ms", "3000", NULL};
  kv_pid = spawn("llmbus-kv-manager", kv_extra);
  sched_pid = spawn("llmbus-scheduler", sched_extra);
  /* Ready when both heartbeats said ready. */
  struct bus_sub *hb = NULL;
  if (bus_subscribe_sync(client, "llm.health.*.*", &hb)) return -1; /* heartbeats, not .metrics */
  bool kv_ready = false, sched_ready = false;
  for (int i = 0; i < 200 && !(kv_ready && sched_ready); i++) {
    struct bus_msg *m = NULL;
    if (bus_sub_next_msg(hb, WAIT_MS, &m)) return -1;
    struct llb_heartbeat h;
    llb_arena_reset(&arena);
    if (llb_heartbeat_decode(m->data, m->len, &arena, &h) == LLB_STATUS_OK && h.ready) {
      if (strcmp(h.actor.data, "kv_manager") == 0) kv_ready = true;
      if (strcmp(h.actor.data, "scheduler") == 0) sched_ready = true;
    }
    bus_msg_destroy(m);
  }
  bus_unsubscribe(hb);
  return kv_ready && sched_ready ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  if (sched_pid > 0) kill(sched_pid, SIGKILL), waitpid(sched_pid, NULL, 0);
  if (kv_pid > 0) kill(kv_pid, SIGKILL), waitpid(kv_pid, NULL, 0);
  bus_destroy(client);
  llb_arena_destroy(&arena);
  nats_test_server_stop(&srv);
  return 0;
}

static void send_request(const char *id, const int32_t *prompt, int32_t n, int32_t max_tokens) {
  struct llb_sampling_params p;
  llb_sampling_params_init(&p);
  p.max_tokens = max_tokens;
  p.temperature = 0;
  struct llb_engine_core_request r = {
      .version = LLB_SCHEMA_VERSION, .request_id = llb_str_c(id), .external_id = llb_str_c(id),
      .prompt_token_ids = prompt, .num_prompt_token_ids = n, .sampling_params = &p,
      .eos_token_id = -1, .arrival_time = 1.5, .reply_to = llb_str_c("client.inbox.1"),
      .parent_request_id = llb_str_c("parent-x"), .client_index = 2};
  struct llb_buf b = {0};
  assert_int_equal(llb_engine_core_request_encode_buf(&r, &b), LLB_STATUS_OK);
  assert_int_equal(bus_publish(client, "llm.engine.t2.requests", b.data, b.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&b);
}

/* Reads EngineCoreOutputs until `id` finishes; returns its finish reason, its tokens in
 * tokens[*n_tokens] and copies of its first output's fields. */
struct seen {
  int32_t tokens[64];
  int32_t n_tokens, num_outputs, first_prompt_len, first_index, error_code;
  int32_t first_pos_ok;
  char reply_to[64], parent[64];
  bool first_had_params;
  enum llb_finish_reason finish;
};

static void collect(const char *id, struct seen *s) {
  memset(s, 0, sizeof(*s));
  s->first_pos_ok = 1;
  while (s->finish == LLB_FINISH_REASON_NONE) {
    struct bus_msg *m = NULL;
    if (bus_sub_next_msg(outputs_sub, WAIT_MS, &m)) fail_msg("no EngineCoreOutputs for %s", id);
    struct llb_engine_core_outputs eo;
    llb_arena_reset(&arena);
    assert_int_equal(llb_engine_core_outputs_decode(m->data, m->len, &arena, &eo), LLB_STATUS_OK);
    assert_string_equal(eo.engine_id.data, "t2");
    for (int32_t i = 0; i < eo.num_outputs; i++) {
      const struct llb_engine_core_output *o = &eo.outputs[i];
      if (strcmp(o->request_id.data, id) != 0) continue;
      if (s->num_outputs++ == 0) {
        s->first_prompt_len = o->num_prompt_token_ids;
        s->first_had_params = o->sampling_params != NULL;
        s->first_index = o->index;
        snprintf(s->parent, sizeof s->parent, "%s", o->parent_request_id.data);
      } else if (o->num_prompt_token_ids != 0 || o->sampling_params) {
        fail_msg("a later output of %s carries the prompt again", id);
      }
      snprintf(s->reply_to, sizeof s->reply_to, "%s", o->reply_to.data);
      if (o->first_output_pos != s->n_tokens) s->first_pos_ok = 0;
      for (int32_t t = 0; t < o->num_new_token_ids && s->n_tokens < 64; t++)
        s->tokens[s->n_tokens++] = o->new_token_ids[t];
      s->finish = o->finish_reason;
      s->error_code = o->error.code;
    }
    bus_msg_destroy(m);
  }
}

static void test_request_runs_to_max_tokens_through_the_step_loop(void **state) {
  (void)state;
  int32_t prompt[10];
  for (int i = 0; i < 10; i++) prompt[i] = 100 + i;
  send_request("r1", prompt, 10, 5);
  struct seen s;
  collect("r1", &s);
  assert_int_equal(s.finish, LLB_FINISH_REASON_LENGTH);
  assert_int_equal(s.n_tokens, 5);
  for (int i = 0; i < 5; i++) assert_int_equal(s.tokens[i], SAMPLED_TOKEN);
  assert_true(s.first_pos_ok);
  assert_int_equal(s.first_prompt_len, 10);
  assert_true(s.first_had_params);
  assert_int_equal(s.first_index, 2);
  assert_string_equal(s.parent, "parent-x");
  assert_string_equal(s.reply_to, "client.inbox.1");
  assert_true(worker_steps >= 5);
}

static void test_prompt_too_long_gets_error_output_to_reply_to(void **state) {
  (void)state;
  int32_t prompt[100];
  for (int i = 0; i < 100; i++) prompt[i] = i + 1;
  send_request("too-long", prompt, 100, 4); /* max_model_len is 64 */
  struct seen s;
  collect("too-long", &s);
  assert_int_equal(s.finish, LLB_FINISH_REASON_ERROR);
  assert_int_not_equal(s.error_code, 0);
  assert_string_equal(s.reply_to, "client.inbox.1");
  assert_int_equal(s.n_tokens, 0);
  /* The engine keeps serving. */
  int32_t p2[3] = {5, 6, 7};
  send_request("r2", p2, 3, 2);
  collect("r2", &s);
  assert_int_equal(s.finish, LLB_FINISH_REASON_LENGTH);
  assert_int_equal(s.n_tokens, 2);
}

/* Stats arrive on the engine's subject; the ones queued since the subscription may predate the
 * earlier tests' steps (published on a timer), so read on until one counts steps. */
static void test_scheduler_publishes_stats(void **state) {
  (void)state;
  struct llb_scheduler_stats st = {0};
  for (int i = 0; i < 64 && st.step == 0; i++) {
    struct bus_msg *m = NULL;
    assert_int_equal(bus_sub_next_msg(stats_sub, WAIT_MS, &m), LLB_STATUS_OK);
    llb_arena_reset(&arena);
    assert_int_equal(llb_scheduler_stats_decode(m->data, m->len, &arena, &st), LLB_STATUS_OK);
    bus_msg_destroy(m);
    assert_string_equal(st.engine_id.data, "t2");
    assert_int_equal(st.num_total_blocks, 64);
  }
  assert_true(st.step > 0);
}

static void test_request_survives_kv_manager_restart(void **state) {
  (void)state;
  /* With the kv_manager killed, r3's KV round trips fail (no responders): the scheduler
   * preempts, backs off (100 ms doubling) and completes r3 once a fresh, empty kv_manager
   * is back. */
  assert_int_equal(kill(kv_pid, SIGKILL), 0);
  waitpid(kv_pid, NULL, 0);
  int32_t prompt[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  send_request("r3", prompt, 9, 6);
  usleep(700 * 1000);
  const char *kv_extra[] = {NULL};
  kv_pid = spawn("llmbus-kv-manager", kv_extra);
  struct seen s;
  collect("r3", &s);
  assert_int_equal(s.finish, LLB_FINISH_REASON_LENGTH);
  assert_int_equal(s.n_tokens, 6);
  assert_true(s.first_pos_ok);
}

static void test_actors_drain_and_exit_zero_on_sigterm(void **state) {
  (void)state;
  pid_t pids[2] = {sched_pid, kv_pid};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(kill(pids[i], SIGTERM), 0);
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  sched_pid = kv_pid = 0;
}

int main(void) {
  if (!nats_test_server_bin()) return 77;
  if (!getenv("LLMBUS_BUILD_DIR")) {
    fprintf(stderr, "LLMBUS_BUILD_DIR not set (run under ctest)\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_request_runs_to_max_tokens_through_the_step_loop),
      cmocka_unit_test(test_prompt_too_long_gets_error_output_to_reply_to),
      cmocka_unit_test(test_scheduler_publishes_stats),
      cmocka_unit_test(test_request_survives_kv_manager_restart),
      cmocka_unit_test(test_actors_drain_and_exit_zero_on_sigterm),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
