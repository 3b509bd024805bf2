/* Disaggregated prefill/decode (`llmbus serve --engines 2 --roles prefill,decode`, issue 36;
 * docs/scaling.md), as a user of it relies on:
 *   - each engine announces its role in its SchedulerStats;
 *   - greedy and seeded requests, one at a time and 8 at once, give exactly the tokens of an
 *     aggregated `serve` of the same model (the reference, run first in the same test), while
 *     each of them really was handed over: the prefill engine's outputs name the decode engine
 *     (EngineCoreOutput.handed_off_to) and the decode engine's first output the tokens the
 *     prefill side delivered (handed_off_token_ids), seen on the engines' outputs subjects; and
 *     their KV came over the bus from the prefill engine's worker (serve --roles turns on
 *     --kv-transfer): the decode engine computed only their last known tokens;
 *   - a request whose first token ends it (max_tokens 1) finishes on the prefill engine, with
 *     no hand-off;
 *   - a stop string matched by the first token's text ends the client's stream once (STOP),
 *     and the decode engine stops the request too: both engines idle afterwards;
 *   - an abort of a request running on the decode engine reaches it (the input processor sends
 *     aborts of a prefill engine's ids to the decode engines too): finish_reason abort, both
 *     engines idle with every block free;
 *   - a forged hand-off (more KV tokens than prompt + outputs) published straight on the decode
 *     engine's requests subject is refused with an error naming the field, and the engine goes
 *     on serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "tests/e2e/stack.h"

#define NUM_PROMPTS 4
#define NUM_CASES (2 * NUM_PROMPTS) /* greedy and seeded per prompt */
#define MAX_TOKENS 24
#define LONG_MAX_TOKENS 3000
#define WAIT_STATS_MS 30000
#define NUM_ENGINES 2
/* actors/scheduler/handoff.h HANDOFF_FAULT_ENV: the schedulers' fault hook, a marker file's path */
#define HANDOFF_FAULT_ENV "LLMBUS_FAULT_EXIT_AFTER_HANDOFF_STORED"

static const char *model;
static struct e2e_stack s;

static const char *const prompts[NUM_PROMPTS] = {
    "Write a story about a dragon.",
    "Name three primary colors and say why they are called primary.",
    "Explain in two sentences how a bicycle stays upright.",
    "What is the capital of France? Answer with a short paragraph about its history.",
};

/* What the engines said on their subjects: roles (stats), hand-offs (outputs). */
static struct {
  pthread_mutex_t mu;
  struct llb_arena arena;
  int role[NUM_ENGINES];            /* -1 until stats came */
  int handed_off_to_decode;         /* engine 0's outputs naming engine 1 */
  int continued_with_history;       /* engine 1's outputs naming delivered tokens */
  int prefill_tokens;               /* tokens in engine 0's outputs */
  int32_t running[NUM_ENGINES], waiting[NUM_ENGINES], free_blocks[NUM_ENGINES], total_blocks[NUM_ENGINES];
  uint64_t prompt_tokens[NUM_ENGINES]; /* tokens computed catching up with a context, cumulative */
  uint64_t stats_count[NUM_ENGINES];
} seen = {.mu = PTHREAD_MUTEX_INITIALIZER, .role = {-1, -1}};

static void on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus, (void)user;
  pthread_mutex_lock(&seen.mu);
  llb_arena_reset(&seen.arena);
  struct llb_scheduler_stats st;
  if (llb_scheduler_stats_decode(msg->data, msg->len, &seen.arena, &st) == LLB_STATUS_OK && st.engine_id.len == 1 &&
      st.engine_id.data[0] >= '0' && st.engine_id.data[0] < '0' + NUM_ENGINES) {
    const int e = st.engine_id.data[0] - '0';
    seen.role[e] = (int)st.role;
    seen.running[e] = st.num_running_reqs;
    seen.waiting[e] = st.num_waiting_reqs;
    seen.free_blocks[e] = st.num_free_blocks;
    seen.total_blocks[e] = st.num_total_blocks;
    seen.prompt_tokens[e] = st.prompt_tokens_total;
    seen.stats_count[e]++;
  }
  pthread_mutex_unlock(&seen.mu);
}

static void on_outputs(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus, (void)user;
  pthread_mutex_lock(&seen.mu);
  llb_arena_reset(&seen.arena);
  struct llb_engine_core_outputs outs;
  if (llb_engine_core_outputs_decode(msg->data, msg->len, &seen.arena, &outs) == LLB_STATUS_OK) {
    for (int32_t i = 0; i < outs.num_outputs; i++) {
      const struct llb_engine_core_output *o = &outs.outputs[i];
      if (strcmp(outs.engine_id.data, "0") == 0 && o->handed_off_to.len == 1 && o->handed_off_to.data[0] == '1')
        seen.handed_off_to_decode++;
      if (strcmp(outs.engine_id.data, "1") == 0 && o->num_handed_off_token_ids > 0) seen.continued_with_history++;
      if (strcmp(outs.engine_id.data, "0") == 0) seen.prefill_tokens += o->num_new_token_ids;
    }
  }
  pthread_mutex_unlock(&seen.mu);
}

static void counts(int *handed, int *continued) {
  pthread_mutex_lock(&seen.mu);
  *handed = seen.handed_off_to_decode;
  *continued = seen.continued_with_history;
  pthread_mutex_unlock(&seen.mu);
}

/* Waits for a stats of engine e taken after now; true when it says idle with every block free
 * (within 30 stats: a prefill engine holds a hand-off's blocks until the decode engine fetched
 * them, or, when the decode engine's prefix cache held part of them, until the export expires). */
static bool engine_idle(int e) {
  for (int k = 0; k < 30; k++) {
    pthread_mutex_lock(&seen.mu);
    const uint64_t after = seen.stats_count[e];
    pthread_mutex_unlock(&seen.mu);
    for (double end = e2e_now_s() + WAIT_STATS_MS / 1000.0; e2e_now_s() < end;) {
      pthread_mutex_lock(&seen.mu);
      const bool got = seen.stats_count[e] > after;
      const bool idle = seen.running[e] == 0 && seen.waiting[e] == 0 && seen.free_blocks[e] == seen.total_blocks[e];
      pthread_mutex_unlock(&seen.mu);
      if (got && idle) return true;
      if (got) break;
      struct timespec ts = {0, 50 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  return false;
}

/* Engine e's prompt_tokens_total in a SchedulerStats taken after now. */
static uint64_t prompt_tokens_now(int e) {
  pthread_mutex_lock(&seen.mu);
  const uint64_t after = seen.stats_count[e];
  pthread_mutex_unlock(&seen.mu);
  for (double end = e2e_now_s() + WAIT_STATS_MS / 1000.0; e2e_now_s() < end;) {
    pthread_mutex_lock(&seen.mu);
    const bool got = seen.stats_count[e] > after;
    const uint64_t n = seen.prompt_tokens[e];
    pthread_mutex_unlock(&seen.mu);
    if (got) return n;
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  fail_msg("no SchedulerStats from engine %d", e);
  return 0;
}

static void request_of(int c, char *id, size_t cap, struct e2e_request *r) {
  snprintf(id, cap, "pd-%d", c);
  *r = (struct e2e_request){.request_id = id, .prompt = prompts[c % NUM_PROMPTS]};
  llb_sampling_params_init(&r->sp);
  r->sp.max_tokens = MAX_TOKENS;
  r->sp.ignore_eos = true;
  if (c < NUM_PROMPTS) {
    r->sp.temperature = 0.0f;
  } else { /* seeded sampling: the counter-based sampler keys on (seed, output position) */
    r->sp.temperature = 0.8f;
    r->sp.top_p = 0.95f;
    r->sp.has_seed = true;
    r->sp.seed = 1234 + (uint64_t)c;
  }
}

static struct e2e_result reference[NUM_CASES];

static void run_alone(struct e2e_result *out) {
  for (int c = 0; c < NUM_CASES; c++) {
    char id[32];
    struct e2e_request r;
    request_of(c, id, sizeof id, &r);
    assert_int_equal(e2e_generate(&s, &r, &out[c]), 0);
    assert_int_equal(out[c].error_code, 0);
    assert_int_equal(out[c].num_tokens, MAX_TOKENS);
  }
}

static void run_together(struct e2e_result *out) {
  static struct e2e_pending p[NUM_CASES];
  char ids[NUM_CASES][32];
  for (int c = 0; c < NUM_CASES; c++) {
    struct e2e_request r;
    request_of(c, ids[c], sizeof ids[c], &r);
    assert_int_equal(e2e_submit(&s, &r, &p[c]), 0);
  }
  for (int c = 0; c < NUM_CASES; c++) {
    assert_int_equal(e2e_collect(&p[c], E2E_WAIT_OUTPUT_MS), 0);
    out[c] = p[c].result;
    e2e_pending_release(&p[c]);
    assert_int_equal(out[c].error_code, 0);
  }
}

static void aggregated_reference(void) {
  static const char *const serve_args[] = {"--threads", "2", "--num-blocks", "512", NULL};
  struct e2e_stack_options o = {.serve_args = serve_args};
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  run_alone(reference);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

static void roles_are_announced(void) {
  for (double end = e2e_now_s() + WAIT_STATS_MS / 1000.0; e2e_now_s() < end;) {
    pthread_mutex_lock(&seen.mu);
    const bool both = seen.role[0] >= 0 && seen.role[1] >= 0;
    pthread_mutex_unlock(&seen.mu);
    if (both) break;
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(seen.role[0], LLB_ENGINE_ROLE_PREFILL);
  assert_int_equal(seen.role[1], LLB_ENGINE_ROLE_DECODE);
}

static void disaggregated_tokens_equal_aggregated(void) {
  struct e2e_result got[NUM_CASES];
  int handed0, continued0, handed1, continued1;
  counts(&handed0, &continued0);
  const uint64_t decode_prompt0 = prompt_tokens_now(1);
  run_alone(got);
  counts(&handed1, &continued1);
  /* the KV of each prompt came from the prefill engine's worker: the decode engine computed only
   * each request's last known token (without the transfer: its whole prompt, 20-40 tokens) */
  const uint64_t decode_prompt = prompt_tokens_now(1) - decode_prompt0;
  fprintf(stderr, "e2e: the decode engine computed %llu context tokens for %d hand-offs\n",
          (unsigned long long)decode_prompt, NUM_CASES);
  assert_true(decode_prompt <= 2 * NUM_CASES);
  for (int c = 0; c < NUM_CASES; c++) {
    char what[64];
    snprintf(what, sizeof what, "request %d alone, disaggregated vs aggregated", c);
    assert_true(e2e_same_tokens(what, &reference[c], &got[c]));
    assert_non_null(strstr(got[c].request_id, "@0")); /* routed to the prefill engine */
  }
  fprintf(stderr, "e2e: alone: %d hand-offs sent by engine 0, %d continued by engine 1\n", handed1 - handed0,
          continued1 - continued0);
  assert_int_equal(handed1 - handed0, NUM_CASES);
  assert_int_equal(continued1 - continued0, NUM_CASES);
  run_together(got);
  counts(&handed0, &continued0);
  for (int c = 0; c < NUM_CASES; c++) {
    char what[64];
    snprintf(what, sizeof what, "request %d of 8 at once, disaggregated vs aggregated", c);
    assert_true(e2e_same_tokens(what, &reference[c], &got[c]));
  }
  fprintf(stderr, "e2e: 8 at once: %d hand-offs sent, %d continued\n", handed0 - handed1, continued0 - continued1);
  assert_int_equal(handed0 - handed1, NUM_CASES);
  assert_int_equal(continued0 - continued1, NUM_CASES);
}

/* Batch invariance through prefill -> decode: each handed-off request's tokens are its tokens
 * alone whatever else the decode engine runs beside it. Two n = 2 requests (never split: served
 * aggregated on the decode engine) keep 4 other sequences decoding in its batch while the 8 cases
 * are handed to it, then are aborted. */
static void handed_off_tokens_hold_beside_what_else_the_decode_engine_runs(void) {
  struct e2e_pending companion[2];
  char cid[2][32];
  for (int k = 0; k < 2; k++) {
    struct e2e_request r;
    request_of(k + 1, cid[k], sizeof cid[k], &r);
    snprintf(cid[k], sizeof cid[k], "pd-beside-%d", k);
    r.request_id = cid[k];
    r.sp.n = 2;
    r.sp.max_tokens = LONG_MAX_TOKENS;
    assert_int_equal(e2e_submit(&s, &r, &companion[k]), 0);
  }
  for (int k = 0; k < 2; k++) { /* decoding on the decode engine before the hand-offs arrive */
    while (companion[k].result.num_tokens < 2) assert_int_equal(e2e_next(&companion[k], E2E_WAIT_OUTPUT_MS), 0);
    assert_non_null(strstr(companion[k].result.request_id, "@1"));
  }
  int handed0, continued0, handed1, continued1;
  counts(&handed0, &continued0);
  struct e2e_result got[NUM_CASES];
  run_together(got);
  counts(&handed1, &continued1);
  for (int c = 0; c < NUM_CASES; c++) {
    char what[96];
    snprintf(what, sizeof what, "request %d of 8 beside 4 aggregated sequences on the decode engine", c);
    assert_true(e2e_same_tokens(what, &reference[c], &got[c]));
  }
  assert_int_equal(handed1 - handed0, NUM_CASES); /* the companions were not handed over */
  for (int k = 0; k < 2; k++) { /* they decoded beside the 8 all along: what they sent meanwhile */
    const int32_t before = companion[k].result.num_tokens;
    while (e2e_poll(&companion[k], 0) == 0) {
    }
    fprintf(stderr, "e2e: beside the 8 hand-offs, companion %d decoded %d tokens on the decode engine\n", k,
            companion[k].result.num_tokens - before);
    assert_true(companion[k].result.num_tokens - before >= MAX_TOKENS);
    assert_false(companion[k].result.finished);
    assert_int_equal(e2e_send_abort(&s, companion[k].result.request_id), 0);
    int rc;
    while ((rc = e2e_next(&companion[k], E2E_WAIT_OUTPUT_MS)) == 0) {
    }
    assert_int_equal(rc, 1);
    e2e_pending_release(&companion[k]);
  }
}

static void a_first_token_that_ends_it_stays_on_the_prefill_engine(void) {
  int handed0, continued0, handed1, continued1;
  counts(&handed0, &continued0);
  char id[32];
  struct e2e_request r;
  request_of(0, id, sizeof id, &r);
  r.sp.max_tokens = 1;
  struct e2e_result out;
  assert_int_equal(e2e_generate(&s, &r, &out), 0);
  assert_int_equal(out.num_tokens, 1);
  assert_int_equal(out.token_ids[0], reference[0].token_ids[0]);
  assert_int_equal(out.finish_reason, LLB_FINISH_REASON_LENGTH);
  counts(&handed1, &continued1);
  assert_int_equal(handed1, handed0);
}

static void a_stop_string_in_the_first_token_ends_it_on_both_engines(void) {
  /* the greedy first token of prompt 0, as text, is the stop string: the prefill engine's output
   * processor ends the client's stream; the decode engine's must not go on */
  char id[32];
  struct e2e_request r;
  request_of(0, id, sizeof id, &r);
  r.sp.max_tokens = LONG_MAX_TOKENS;
  r.sp.num_stop = 1;
  snprintf(r.sp.stop[0], sizeof r.sp.stop[0], "%s", "The");
  struct e2e_result out;
  assert_int_equal(e2e_generate(&s, &r, &out), 0);
  fprintf(stderr, "e2e: stop string in the first token: finish_reason=%d tokens=%d\n", (int)out.finish_reason,
          out.num_tokens);
  assert_int_equal(out.finish_reason, LLB_FINISH_REASON_STOP);
  assert_true(out.num_tokens < 8);
  for (int e = 0; e < NUM_ENGINES; e++) assert_true(engine_idle(e));
}

static void an_abort_reaches_the_decode_engine(void) {
  char id[32];
  struct e2e_request r;
  request_of(1, id, sizeof id, &r);
  r.sp.max_tokens = LONG_MAX_TOKENS;
  struct e2e_pending p;
  assert_int_equal(e2e_submit(&s, &r, &p), 0);
  while (p.result.num_tokens < 4) assert_int_equal(e2e_next(&p, E2E_WAIT_OUTPUT_MS), 0);
  assert_int_equal(e2e_send_abort(&s, p.result.request_id), 0);
  int rc;
  while ((rc = e2e_next(&p, E2E_WAIT_OUTPUT_MS)) == 0) {
  }
  assert_int_equal(rc, 1);
  assert_int_equal(p.result.finish_reason, LLB_FINISH_REASON_ABORT);
  assert_true(p.result.num_tokens < LONG_MAX_TOKENS);
  e2e_pending_release(&p);
  for (int e = 0; e < NUM_ENGINES; e++) assert_true(engine_idle(e));
}

static void a_forged_hand_off_is_refused(void) {
  struct e2e_pending p;
  memset(&p, 0, sizeof p);
  llb_arena_init(&p.arena, NULL, 0);
  assert_int_equal(bus_new_inbox(s.bus, p.inbox, sizeof p.inbox), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(s.bus, p.inbox, &p.sub), LLB_STATUS_OK);
  static const int32_t prompt[5] = {504, 3545, 314, 260, 5012}, outputs[1] = {1345};
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.max_tokens = 8;
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  const struct llb_engine_core_request q = {
      .version = 1, .request_id = llb_str_c("forged-1"), .external_id = llb_str_c("forged-1"),
      .prompt_token_ids = prompt, .num_prompt_token_ids = 5, .sampling_params = &sp, .eos_token_id = -1,
      .reply_to = llb_str_c(p.inbox), .has_kv_transfer_params = true,
      .kv_transfer_params = {.do_remote_prefill = true, .remote_engine_id = llb_str_c("0"),
                             .remote_request_id = llb_str_c("forged-1"), .remote_num_blocks = 4096,
                             .num_tokens = 100000},
      .output_token_ids = outputs, .num_output_token_ids = 1};
  struct llb_buf b = {0};
  assert_int_equal(llb_engine_core_request_encode_buf(&q, &b), LLB_STATUS_OK);
  assert_int_equal(bus_publish(s.bus, "llm.engine.1.requests", b.data, b.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&b);
  int rc;
  while ((rc = e2e_next(&p, E2E_WAIT_OUTPUT_MS)) == 0) {
  }
  fprintf(stderr, "e2e: forged hand-off: code %d, \"%s\"\n", p.result.error_code, p.result.error_message);
  assert_int_equal(rc, 1);
  assert_int_equal(p.result.error_code, LLB_STATUS_ABORTED);
  assert_non_null(strstr(p.result.error_message, "num_tokens"));
  assert_int_equal(p.result.num_tokens, 0);
  e2e_pending_release(&p);
}

/* Issue 36 item 3, the window handoff_replayed covers: P's scheduler dies after D's stream stored
 * the hand-off and before P's own output of it (the fault hook of actors/scheduler/handoff.h ends
 * it there, once). P's successor gets the request again from P's stream with the delivered first
 * token from P's output processor, hands it off at admission without sampling again, and D's
 * stream drops the second copy (Nats-Msg-Id): the client gets the aggregated tokens, the first
 * token once, and D continues the request once. */
static void a_prefill_scheduler_dying_after_the_hand_off_was_stored_loses_nothing(const char *const *serve_args) {
  char dir[] = "/tmp/llb-pd-fault.XXXXXX", marker[64];
  assert_non_null(mkdtemp(dir));
  snprintf(marker, sizeof marker, "%s/fired", dir);
  setenv(HANDOFF_FAULT_ENV, marker, 1);
  struct e2e_stack_options o = {.serve_args = serve_args};
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  unsetenv(HANDOFF_FAULT_ENV); /* the stack's processes have it; this one does not need it */
  pthread_mutex_lock(&seen.mu);
  seen.role[0] = seen.role[1] = -1;
  pthread_mutex_unlock(&seen.mu);
  assert_int_equal(bus_subscribe(s.bus, "llm.engine.*.stats", NULL, on_stats, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe(s.bus, "llm.engine.*.outputs", NULL, on_outputs, NULL, NULL), LLB_STATUS_OK);
  roles_are_announced(); /* the router too heard them (same stats): the request is disaggregated */
  int handed0, continued0, handed1, continued1;
  counts(&handed0, &continued0);
  pthread_mutex_lock(&seen.mu);
  const int prefill0 = seen.prefill_tokens;
  pthread_mutex_unlock(&seen.mu);
  char id[32];
  struct e2e_request r;
  request_of(0, id, sizeof id, &r);
  struct e2e_result got;
  assert_int_equal(e2e_generate(&s, &r, &got), 0);
  assert_int_equal(access(marker, F_OK), 0); /* the scheduler did die in the window */
  counts(&handed1, &continued1);
  pthread_mutex_lock(&seen.mu);
  const int prefill_tokens = seen.prefill_tokens - prefill0;
  pthread_mutex_unlock(&seen.mu);
  fprintf(stderr, "e2e: P's scheduler killed after the hand-off was stored: %d tokens, %d sent by P, handed off %d, "
          "continued %d\n", got.num_tokens, prefill_tokens, handed1 - handed0, continued1 - continued0);
  assert_int_equal(got.error_code, 0);
  assert_true(e2e_same_tokens("request 0 across P's scheduler's death after its hand-off", &reference[0], &got));
  assert_int_equal(prefill_tokens, 1);            /* P sampled the first token once: not again on replay */
  assert_int_equal(handed1 - handed0, 1);         /* P's successor's output names D */
  assert_int_equal(continued1 - continued0, 1);   /* D admitted the hand-off once */
  assert_int_equal(e2e_stack_stop(&s), 0);
  unlink(marker);
  rmdir(dir);
}

static void test_prefill_decode_gives_the_aggregated_tokens(void **state) {
  (void)state;
  llb_arena_init(&seen.arena, NULL, 0);
  double t0 = e2e_now_s();
  aggregated_reference();
  static const char *const serve_args[] = {"--engines", "2", "--roles", "prefill,decode",
                                           "--disagg-min-prompt-tokens", "0", "--max-prefill-queue-size", "0",
                                           "--threads", "2",
                                           "--num-blocks", "512", NULL};
  struct e2e_stack_options o = {.serve_args = serve_args};
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  assert_int_equal(bus_subscribe(s.bus, "llm.engine.*.stats", NULL, on_stats, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe(s.bus, "llm.engine.*.outputs", NULL, on_outputs, NULL, NULL), LLB_STATUS_OK);
  roles_are_announced();
  a_forged_hand_off_is_refused();
  disaggregated_tokens_equal_aggregated();
  handed_off_tokens_hold_beside_what_else_the_decode_engine_runs();
  a_first_token_that_ends_it_stays_on_the_prefill_engine();
  a_stop_string_in_the_first_token_ends_it_on_both_engines();
  an_abort_reaches_the_decode_engine();
  fprintf(stderr, "e2e: prefill/decode scenario in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_stop(&s), 0);
  a_prefill_scheduler_dying_after_the_hand_off_was_stored_loses_nothing(serve_args);
  llb_arena_destroy(&seen.arena);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_prefill_decode_gives_the_aggregated_tokens, NULL,
                                               e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
