/* Killing the gpu_worker, the kv_manager or the scheduler mid-generation (SIGKILL; `llmbus
 * serve` restarts it) costs seconds, not the scheduler's 60 s execute timeout, and no token: the scheduler
 * sees the new instance in the heartbeats, abandons the steps in flight, recomputes every
 * running request and goes on. Every greedy request ends with exactly the tokens of the
 * fault-free run; the time from the kill to the first token that only a step sent after the
 * kill can have produced is printed and must stay under KILL_TO_TOKEN_MAX_S. A worker frozen
 * (SIGSTOP) past three heartbeats is recovered from the same way. With argv[2]
 * "sync" the engine runs with --no-async-scheduling (one step in flight). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schemas/engine_core_outputs.h"
#include "tests/e2e/stack.h"

#define NUM_REQUESTS 4
#define MAX_TOKENS 64
#define TOKENS_BEFORE_KILL 8 /* each request has this many tokens when the actor is killed */
/* Steps in flight (asynchronous scheduling: 2) plus one whose outputs may be on the wire:
 * tokens beyond this many after the kill come from steps sent after it. */
#define TOKENS_IN_FLIGHT 3
/* A bound for a loaded 2-core CI machine under ASan (a worker restart loads the model), far
 * under the 60 s the old execute-timeout path took, so the old behaviour still fails; the
 * measured times (~1 s) are printed and recorded in README.md. */
#define KILL_TO_TOKEN_MAX_S 20.0
#define POLL_MS 5
#define STATS_WAIT_MS 15000
#define FREEZE_S 3.0 /* > 3 heartbeats of 500 ms */

static const char *model;
static struct e2e_stack s;
static struct e2e_result reference[NUM_REQUESTS];

static const char *const prompts[NUM_REQUESTS] = {
    "Tell me about the moon.", "Describe a forest at night.", "Explain how a bicycle works.",
    "Write about a rainy city."};

static void make_request(int i, struct e2e_request *r) {
  memset(r, 0, sizeof *r);
  r->request_id = "kill";
  r->prompt = prompts[i];
  llb_sampling_params_init(&r->sp);
  r->sp.max_tokens = MAX_TOKENS;
  r->sp.ignore_eos = true;
  r->sp.temperature = 0.0f;
}

/* heartbeats every 500 ms (the e2e stack's interval); argv[2] "sync": --no-async-scheduling */
static const char *const *serve_args;

static int group_setup(void **state) {
  (void)state;
  const struct e2e_stack_options o = {.serve_args = serve_args};
  if (e2e_stack_start(&s, model, &o) != 0) return -1;
  for (int i = 0; i < NUM_REQUESTS; i++) {
    struct e2e_request r;
    make_request(i, &r);
    if (e2e_generate(&s, &r, &reference[i]) != 0 || reference[i].error_code != 0 ||
        reference[i].num_tokens != MAX_TOKENS) {
      e2e_print_result("fault-free", &reference[i]);
      return -1;
    }
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  return e2e_stack_stop(&s);
}

/* Reads whatever output is there for every unfinished request (each waits up to wait_ms).
 * Returns the number of unfinished requests, -1 on an error. */
static int poll_all(struct e2e_pending *p, int64_t wait_ms) {
  int open = 0;
  for (int i = 0; i < NUM_REQUESTS; i++) {
    if (p[i].result.finished) continue;
    int rc;
    while ((rc = e2e_poll(&p[i], wait_ms)) == 0) wait_ms = 0;
    if (rc < 0) return -1;
    open += !p[i].result.finished;
  }
  return open;
}

static int32_t pid_of(enum e2e_actor actor) {
  pthread_mutex_lock(&s.mu);
  int32_t pid = s.actors[actor].last_pid;
  pthread_mutex_unlock(&s.mu);
  return pid;
}

/* Runs the requests, SIGKILLs `victim` once each has TOKENS_BEFORE_KILL tokens (or, with
 * freeze_s > 0, SIGSTOPs it for freeze_s seconds: alive but silent), and checks that every
 * request completes with the fault-free tokens (after a kill: quickly). */
/* The engine's outputs, watched across a scheduler kill (NULL otherwise). */
static struct bus_sub *watch_outputs;

/* After a scheduler kill: the first output the new scheduler sent of each request (the one
 * marked resync) must already hold more than the client had at the kill: the replay resumed
 * from the output processor's history (one prefill of prompt + known outputs) instead of
 * generating every token again. */
static void check_replays_resumed(struct e2e_pending *p, const int32_t *at_kill) {
  int32_t first_resync[NUM_REQUESTS];
  for (int i = 0; i < NUM_REQUESTS; i++) first_resync[i] = -1;
  struct bus_msg *m = NULL;
  while (bus_sub_next_msg(watch_outputs, 200, &m) == LLB_STATUS_OK) {
    struct llb_arena arena;
    llb_arena_init(&arena, NULL, 0);
    struct llb_engine_core_outputs outs;
    if (llb_engine_core_outputs_decode(m->data, m->len, &arena, &outs) == LLB_STATUS_OK)
      for (int32_t k = 0; k < outs.num_outputs; k++)
        for (int i = 0; i < NUM_REQUESTS; i++)
          if (outs.outputs[k].resync && first_resync[i] < 0 &&
              strcmp(outs.outputs[k].request_id.data, p[i].result.request_id) == 0)
            first_resync[i] = outs.outputs[k].num_new_token_ids;
    llb_arena_destroy(&arena);
    bus_msg_destroy(m);
  }
  for (int i = 0; i < NUM_REQUESTS; i++) {
    fprintf(stderr, "e2e: request %d: %d tokens at the kill, the replay's first output holds %d\n", i,
            at_kill[i], first_resync[i]);
    assert_true(first_resync[i] > at_kill[i]);
  }
}

static void fault_mid_generation(enum e2e_actor victim, const char *name, double freeze_s) {
  static struct e2e_pending p[NUM_REQUESTS];
  memset(p, 0, sizeof p);
  struct llb_scheduler_stats before; /* the previous test's preemptions are in its counts */
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &before), 0);
  for (int i = 0; i < NUM_REQUESTS; i++) {
    struct e2e_request r;
    make_request(i, &r);
    assert_int_equal(e2e_submit(&s, &r, &p[i]), 0);
  }
  double start = e2e_now_s();
  for (;;) {
    int ready = 0;
    assert_true(poll_all(p, POLL_MS) >= 0);
    for (int i = 0; i < NUM_REQUESTS; i++) ready += p[i].result.num_tokens >= TOKENS_BEFORE_KILL;
    if (ready == NUM_REQUESTS) break;
    assert_true(e2e_now_s() - start < E2E_WAIT_OUTPUT_MS / 1000.0);
  }
  for (int i = 0; i < NUM_REQUESTS; i++) assert_false(p[i].result.finished); /* mid-generation */
  int32_t at_kill[NUM_REQUESTS];
  for (int i = 0; i < NUM_REQUESTS; i++) at_kill[i] = p[i].result.num_tokens;
  if (watch_outputs) { /* what came before the kill is not the replay's */
    struct bus_msg *m = NULL;
    while (bus_sub_next_msg(watch_outputs, 1, &m) == LLB_STATUS_OK) bus_msg_destroy(m);
  }
  const int32_t pid = pid_of(victim);
  assert_true(pid > 0);
  assert_int_equal(kill(pid, freeze_s > 0 ? SIGSTOP : SIGKILL), 0);
  const double t_kill = e2e_now_s();
  double first_token_s = -1, first_new_step_token_s = -1;
  bool frozen = freeze_s > 0;
  int open = NUM_REQUESTS;
  while (open > 0) {
    if (frozen && e2e_now_s() - t_kill >= freeze_s) {
      assert_int_equal(kill(pid, SIGCONT), 0);
      frozen = false;
    }
    open = poll_all(p, POLL_MS);
    assert_true(open >= 0);
    const double now = e2e_now_s();
    for (int i = 0; i < NUM_REQUESTS; i++) {
      if (first_token_s < 0 && p[i].result.num_tokens > at_kill[i]) first_token_s = now - t_kill;
      if (first_new_step_token_s < 0 && p[i].result.num_tokens > at_kill[i] + TOKENS_IN_FLIGHT)
        first_new_step_token_s = now - t_kill;
    }
    assert_true(now - t_kill < E2E_WAIT_OUTPUT_MS / 1000.0);
  }
  const double all_done_s = e2e_now_s() - t_kill;
  if (watch_outputs) check_replays_resumed(p, at_kill);
  int differ = 0;
  for (int i = 0; i < NUM_REQUESTS; i++) {
    char what[64];
    snprintf(what, sizeof what, "request %d across the %s kill", i, name);
    if (p[i].result.error_code != 0) e2e_print_result(what, &p[i].result);
    differ += p[i].result.error_code != 0 || !e2e_same_tokens(what, &reference[i], &p[i].result);
    e2e_pending_release(&p[i]);
  }
  pthread_mutex_lock(&s.mu);
  const int32_t new_pid = s.actors[victim].last_pid;
  pthread_mutex_unlock(&s.mu);
  struct llb_scheduler_stats after;
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &after), 0);
  fprintf(stderr, "e2e: %s pid %d %s -> %d: first token after %.3f s, first token of a step sent "
          "after the fault after %.3f s, all %d requests done after %.3f s; preemptions %llu -> %llu\n",
          name, pid, freeze_s > 0 ? "frozen" : "killed", new_pid, first_token_s, first_new_step_token_s,
          NUM_REQUESTS, all_done_s, (unsigned long long)before.num_preemptions,
          (unsigned long long)after.num_preemptions);
  assert_int_equal(differ, 0);
  /* the failure was acted on: running requests were recomputed (a new scheduler counts from
   * zero: it replayed them from the stream instead) */
  if (victim != E2E_ACTOR_SCHEDULER)
    assert_true(after.num_preemptions >= before.num_preemptions + NUM_REQUESTS);
  if (freeze_s > 0) {
    assert_int_equal(new_pid, pid); /* the same process, back */
    return;
  }
  assert_true(new_pid != pid); /* the supervisor restarted it and the new one beats */
  assert_true(first_new_step_token_s >= 0);
  assert_true(first_new_step_token_s < KILL_TO_TOKEN_MAX_S);
}

static void test_gpu_worker_killed_mid_generation_costs_seconds_and_no_token(void **state) {
  (void)state;
  fault_mid_generation(E2E_ACTOR_GPU_WORKER, "gpu_worker", 0);
}

static void test_kv_manager_killed_mid_generation_costs_seconds_and_no_token(void **state) {
  (void)state;
  fault_mid_generation(E2E_ACTOR_KV_MANAGER, "kv_manager", 0);
}

/* The scheduler holds every request's state: its successor gets the unfinished ones again
 * from the JetStream stream (unacknowledged: a request is acknowledged only when finished),
 * recomputes them from their prompts and the outputs the output processor already had (its
 * history: one prefill instead of one step per token), and the output processor drops the
 * positions it already sent, so each client sees its tokens exactly once, equal to the
 * fault-free run. */
static void test_scheduler_killed_mid_generation_replays_from_the_stream(void **state) {
  (void)state;
  assert_int_equal(bus_subscribe_sync(s.bus, "llm.engine.0.outputs", &watch_outputs), LLB_STATUS_OK);
  assert_int_equal(bus_flush(s.bus, 5000), LLB_STATUS_OK);
  fault_mid_generation(E2E_ACTOR_SCHEDULER, "scheduler", 0);
  bus_unsubscribe(watch_outputs);
  watch_outputs = NULL;
}

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Waits until the scheduler beats with a pid other than `old` (its restart). */
static int32_t wait_new_scheduler(int32_t old) {
  const double t0 = e2e_now_s();
  while (e2e_now_s() - t0 < 60.0) {
    const int32_t pid = pid_of(E2E_ACTOR_SCHEDULER);
    if (pid > 0 && pid != old) return pid;
    sleep_s(0.02);
  }
  return -1;
}

/* A request the scheduler dies running, again and again (here: killed as soon as it runs it,
 * its first new token, as a request that crashes it would): after --max-deliver (3) deliveries
 * the next scheduler does not run it but copies it to llm.engine.0.dead_letter and its client
 * gets an error saying so; the engine goes on serving. */
static void test_request_that_keeps_killing_the_scheduler_is_dead_lettered(void **state) {
  (void)state;
  struct bus_sub *dead = NULL;
  assert_int_equal(bus_subscribe_sync(s.bus, "llm.engine.0.dead_letter", &dead), LLB_STATUS_OK);
  assert_int_equal(bus_flush(s.bus, 5000), LLB_STATUS_OK);
  struct e2e_request r;
  make_request(0, &r);
  r.request_id = "poison";
  r.sp.max_tokens = E2E_MAX_TOKENS - 12; /* far longer than the three kills take */
  static struct e2e_pending p;
  memset(&p, 0, sizeof p);
  assert_int_equal(e2e_submit(&s, &r, &p), 0);
  const double t0 = e2e_now_s();
  while (p.result.num_tokens == 0) { /* the first scheduler runs it */
    assert_true(e2e_poll(&p, 100) >= 0);
    assert_true(e2e_now_s() - t0 < E2E_WAIT_OUTPUT_MS / 1000.0);
  }
  for (int k = 0; k < 3; k++) {
    const int32_t pid = pid_of(E2E_ACTOR_SCHEDULER);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_true(wait_new_scheduler(pid) > 0);
    if (k == 2) break;
    /* delivered again to the new one ack_wait (1 s) after the last in-progress ack: killed again
     * once it runs it (a new token), long before the request could finish. What the killed one
     * sent reached this subscription while its successor started (a restart takes far longer
     * than a loopback hop): drained without waiting, so that none of the new one's tokens is
     * swallowed by a wait for silence. */
    int rc;
    while ((rc = e2e_poll(&p, 1)) == 0) continue;
    assert_int_equal(rc, 2);
    const int32_t had = p.result.num_tokens;
    const double t1 = e2e_now_s();
    while (p.result.num_tokens == had) {
      assert_true(e2e_poll(&p, 100) >= 0);
      assert_false(p.result.finished);
      assert_true(e2e_now_s() - t1 < E2E_WAIT_OUTPUT_MS / 1000.0);
    }
  }
  assert_int_equal(e2e_collect(&p, E2E_WAIT_OUTPUT_MS), 0);
  fprintf(stderr, "e2e: after 3 scheduler kills: finished=%d error %d '%s' (%d tokens before)\n",
          p.result.finished, p.result.error_code, p.result.error_message, p.result.num_tokens);
  assert_true(p.result.finished);
  assert_true(p.result.error_code != 0);
  assert_non_null(strstr(p.result.error_message, "dead-lettered: delivered "));
  assert_non_null(strstr(p.result.error_message, "(max_deliver 3)"));
  e2e_pending_release(&p);
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(dead, 10000, &m), LLB_STATUS_OK);
  const char *why = bus_msg_header(m, "Llmbus-Dead-Letter-Reason");
  assert_non_null(why);
  assert_non_null(strstr(why, "(max_deliver 3)"));
  assert_true(m->len > 0); /* the EngineCoreRequest itself, for inspection */
  bus_msg_destroy(m);
  (void)bus_unsubscribe(dead);
  /* the engine goes on: the same prompt (another id) completes with the fault-free tokens */
  struct e2e_request again;
  make_request(0, &again);
  struct e2e_result res;
  assert_int_equal(e2e_generate(&s, &again, &res), 0);
  assert_int_equal(res.error_code, 0);
  assert_true(e2e_same_tokens("after the dead letter", &reference[0], &res));
}

/* A worker that hangs (SIGSTOP) sends no heartbeat: after --peer-missed-beats (3) intervals of
 * 500 ms the scheduler abandons its steps and recomputes; the worker, resumed, answers again. */
static void test_gpu_worker_silent_for_three_beats_is_recovered_from(void **state) {
  (void)state;
  fault_mid_generation(E2E_ACTOR_GPU_WORKER, "gpu_worker", FREEZE_S);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  static const char *const async_args[] = {"--heartbeat-ms", "500", NULL};
  static const char *const sync_args[] = {"--heartbeat-ms", "500", "--no-async-scheduling", NULL};
  serve_args = argc > 2 && strcmp(argv[2], "sync") == 0 ? sync_args : async_args;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpu_worker_killed_mid_generation_costs_seconds_and_no_token),
      cmocka_unit_test(test_kv_manager_killed_mid_generation_costs_seconds_and_no_token),
      cmocka_unit_test(test_gpu_worker_silent_for_three_beats_is_recovered_from),
      cmocka_unit_test(test_scheduler_killed_mid_generation_replays_from_the_stream),
      cmocka_unit_test(test_request_that_keeps_killing_the_scheduler_is_dead_lettered),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
