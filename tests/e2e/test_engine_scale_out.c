/* Two engines behind one subject (`llmbus serve --engines 2`, docs/design.md §9), as an operator
 * scaling out relies on:
 *   - both engines announce themselves (SchedulerStats with model, block size, capacity) and
 *     take their KV geometry from their own worker;
 *   - the input processor spreads distinct prompts over both engines (each request id names
 *     its engine: "...@<eid>");
 *   - 20 aborts sent through the shared llm.abort.default queue group each reach the engine
 *     that runs the request: every stream ends with finish_reason abort, and afterwards
 *     neither engine runs or holds anything (every block free) — before routing, an abort
 *     reached the wrong engine half the time and the request ran to its full length;
 *   - prompts sharing a long prefix stick to one engine (prefix affinity), whose prefix cache
 *     then hits;
 *   - a short prompt (no prefix to follow) reaches both engines, with the same greedy tokens;
 *   - `llmbus status --json` lists both engines and each one's actors, read from the bus. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/subject.h"
#include "tests/e2e/stack.h"

#define NUM_ABORTS 20
#define LONG_MAX_TOKENS 3000
#define WAIT_STATS_MS 30000
#define NUM_ENGINES 2

static const char *model;
static struct e2e_stack s;

/* The latest SchedulerStats of each engine ("0", "1"), from our own subscription. */
static struct {
  pthread_mutex_t mu;
  struct llb_scheduler_stats last[NUM_ENGINES];
  char model[NUM_ENGINES][128];
  uint64_t count[NUM_ENGINES];
  struct llb_arena arena;
} seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_any_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus, (void)user;
  pthread_mutex_lock(&seen.mu);
  llb_arena_reset(&seen.arena);
  struct llb_scheduler_stats st;
  if (llb_scheduler_stats_decode(msg->data, msg->len, &seen.arena, &st) == LLB_STATUS_OK && st.engine_id.len == 1 &&
      st.engine_id.data[0] >= '0' && st.engine_id.data[0] < '0' + NUM_ENGINES) {
    int e = st.engine_id.data[0] - '0';
    snprintf(seen.model[e], sizeof seen.model[e], "%s", st.model.data ? st.model.data : "");
    st.engine_id = st.model = st.instance = llb_str_c(NULL);
    seen.last[e] = st;
    seen.count[e]++;
  }
  pthread_mutex_unlock(&seen.mu);
}

/* Waits for a SchedulerStats of engine e newer than the one counted `after`; copies it. */
static int wait_engine_stats(int e, uint64_t after, struct llb_scheduler_stats *out) {
  for (double end = e2e_now_s() + WAIT_STATS_MS / 1000.0; e2e_now_s() < end;) {
    pthread_mutex_lock(&seen.mu);
    bool got = seen.count[e] > after;
    if (got) *out = seen.last[e];
    pthread_mutex_unlock(&seen.mu);
    if (got) return 0;
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "e2e: no SchedulerStats from engine %d within %d ms\n", e, WAIT_STATS_MS);
  return -1;
}

static uint64_t engine_stats_count(int e) {
  pthread_mutex_lock(&seen.mu);
  uint64_t n = seen.count[e];
  pthread_mutex_unlock(&seen.mu);
  return n;
}

/* The engine an id names ("...@<eid>"), -1 if none of ours. */
static int engine_of(const char *request_id) {
  const char *at = strrchr(request_id, '@');
  return at && at[1] >= '0' && at[1] < '0' + NUM_ENGINES && at[2] == '\0' ? at[1] - '0' : -1;
}

static void both_engines_announce_themselves(void) {
  for (int e = 0; e < NUM_ENGINES; e++) {
    struct llb_scheduler_stats st;
    assert_int_equal(wait_engine_stats(e, 0, &st), 0);
    fprintf(stderr, "e2e: engine %d: model=%s blocks=%d block_size=%d max_num_seqs=%d max_model_len=%d\n", e,
            seen.model[e], st.num_total_blocks, st.block_size, st.max_num_seqs, st.max_model_len);
    assert_true(st.num_total_blocks > 0);
    assert_true(st.block_size > 0);
    assert_true(st.max_model_len > 0);
    assert_non_null(strstr(model, seen.model[e]));
  }
}

static void aborts_reach_their_engines(void) {
  static struct e2e_pending p[NUM_ABORTS];
  char ids[NUM_ABORTS][32];
  int per_engine[NUM_ENGINES] = {0};
  for (int i = 0; i < NUM_ABORTS; i++) {
    snprintf(ids[i], sizeof ids[i], "long-%d", i);
    char prompt[128];
    snprintf(prompt, sizeof prompt, "Story %d: tell me a very long tale about dragon number %d.", i, i * 7);
    struct e2e_request r = {.request_id = ids[i], .prompt = prompt};
    llb_sampling_params_init(&r.sp);
    r.sp.temperature = 0.0f;
    r.sp.max_tokens = LONG_MAX_TOKENS;
    r.sp.ignore_eos = true;
    assert_int_equal(e2e_submit(&s, &r, &p[i]), 0);
  }
  for (int i = 0; i < NUM_ABORTS; i++) {
    while (p[i].result.num_outputs < 2) assert_int_equal(e2e_next(&p[i], E2E_WAIT_OUTPUT_MS), 0);
    int e = engine_of(p[i].result.request_id);
    assert_true(e >= 0);
    per_engine[e]++;
  }
  fprintf(stderr, "e2e: %d requests running: %d on engine 0, %d on engine 1\n", NUM_ABORTS, per_engine[0],
          per_engine[1]);
  for (int e = 0; e < NUM_ENGINES; e++) assert_true(per_engine[e] >= NUM_ABORTS / 4);
  for (int i = 0; i < NUM_ABORTS; i++) assert_int_equal(e2e_send_abort(&s, p[i].result.request_id), 0);
  for (int i = 0; i < NUM_ABORTS; i++) {
    int rc;
    while ((rc = e2e_next(&p[i], E2E_WAIT_OUTPUT_MS)) == 0) {
    }
    assert_int_equal(rc, 1);
    assert_int_equal(p[i].result.finish_reason, LLB_FINISH_REASON_ABORT);
    assert_true(p[i].result.num_tokens < LONG_MAX_TOKENS);
    e2e_pending_release(&p[i]);
  }
  /* Nothing left anywhere: a misrouted abort would leave its request running there. */
  for (int e = 0; e < NUM_ENGINES; e++) {
    bool idle = false;
    for (int k = 0; k < 4 && !idle; k++) {
      struct llb_scheduler_stats st;
      assert_int_equal(wait_engine_stats(e, engine_stats_count(e), &st), 0);
      fprintf(stderr, "e2e: engine %d after the aborts: running=%d waiting=%d free=%d/%d\n", e, st.num_running_reqs,
              st.num_waiting_reqs, st.num_free_blocks, st.num_total_blocks);
      idle = st.num_running_reqs == 0 && st.num_waiting_reqs == 0 && st.num_free_blocks == st.num_total_blocks;
    }
    assert_true(idle);
  }
}

static void greedy(const char *id, const char *prompt, int max_tokens, struct e2e_result *out) {
  struct e2e_request r = {.request_id = id, .prompt = prompt};
  llb_sampling_params_init(&r.sp);
  r.sp.temperature = 0.0f;
  r.sp.max_tokens = max_tokens;
  r.sp.ignore_eos = true;
  assert_int_equal(e2e_generate(&s, &r, out), 0);
  assert_int_equal(out->error_code, 0);
}

static void a_shared_prefix_sticks_to_one_engine(void) {
  static const char system_prompt[] =
      "You are the archivist of a vast library. Every answer you give must be precise, cite the shelf and the "
      "row where the book stands, and mention the year the book was written. You never guess; when a book is "
      "missing you say so plainly and suggest the nearest book on the same subject. Question: ";
  static struct e2e_result res[4];
  int first = -1;
  for (int q = 0; q < 4; q++) {
    char prompt[sizeof system_prompt + 64], id[16];
    snprintf(prompt, sizeof prompt, "%swhere is book number %d?", system_prompt, q * 13 + 1);
    snprintf(id, sizeof id, "shared-%d", q);
    greedy(id, prompt, 4, &res[q]);
    int e = engine_of(res[q].request_id);
    fprintf(stderr, "e2e: shared-prefix request %d on engine %d, cached tokens %d of %d\n", q, e,
            res[q].num_cached_tokens, res[q].num_prompt_tokens);
    if (q == 0) first = e;
    assert_int_equal(e, first);
    if (q > 0) assert_true(res[q].num_cached_tokens >= 32);
  }
}

static void either_engine_gives_the_same_tokens(void) {
  /* A raw prompt shorter than one KV block has no prefix to stick to: the router picks by
   * load, ties at random, so a few tries reach both engines (all 16 on one: p = 2^-15). */
  struct e2e_result r[NUM_ENGINES];
  bool have[NUM_ENGINES] = {false};
  for (int attempt = 0; attempt < 16 && !(have[0] && have[1]); attempt++) {
    struct e2e_request q = {.request_id = "same", .prompt = "One, two, three,", .raw = true};
    llb_sampling_params_init(&q.sp);
    q.sp.temperature = 0.0f;
    q.sp.max_tokens = 24;
    q.sp.ignore_eos = true;
    struct e2e_result out;
    assert_int_equal(e2e_generate(&s, &q, &out), 0);
    assert_int_equal(out.error_code, 0);
    int e = engine_of(out.request_id);
    assert_true(e >= 0);
    if (!have[e]) r[e] = out, have[e] = true;
  }
  assert_true(have[0] && have[1]);
  assert_true(e2e_same_tokens("same prompt on engines 0 and 1", &r[0], &r[1]));
}

/* `llmbus status --json` against the stack: both engines, each with its five actors. */
static void status_lists_engines_and_actors(void) {
  char cmd[2 * PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "%s/cmd/llmbus status --nats %s --json --wait-ms 2500 2>/dev/null", s.build_dir,
           s.srv.url);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  json_error_t err;
  json_t *root = json_loadf(p, 0, &err);
  assert_int_equal(pclose(p), 0);
  assert_non_null(root);
  json_t *engines = json_object_get(root, "engines"), *actors = json_object_get(root, "actors");
  assert_int_equal(json_array_size(engines), NUM_ENGINES);
  int per_engine[NUM_ENGINES] = {0};
  size_t i;
  json_t *a;
  json_array_foreach(actors, i, a) {
    const char *eid = json_string_value(json_object_get(a, "engine_id"));
    if (eid && strlen(eid) == 1 && eid[0] >= '0' && eid[0] < '0' + NUM_ENGINES) per_engine[eid[0] - '0']++;
  }
  fprintf(stderr, "e2e: llmbus status: %zu engines, %zu actors (%d on engine 0, %d on engine 1)\n",
          json_array_size(engines), json_array_size(actors), per_engine[0], per_engine[1]);
  for (int e = 0; e < NUM_ENGINES; e++) assert_true(per_engine[e] >= 4); /* kv, worker, scheduler, output */
  json_decref(root);
}

static void test_two_engines_behind_one_subject(void **state) {
  (void)state;
  llb_arena_init(&seen.arena, NULL, 0);
  static const char *const serve_args[] = {"--engines", "2", "--threads", "2", "--num-blocks", "512", NULL};
  struct e2e_stack_options o = {.serve_args = serve_args};
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  assert_int_equal(bus_subscribe(s.bus, "llm.engine.*.stats", NULL, on_any_stats, NULL, NULL), LLB_STATUS_OK);
  double t0 = e2e_now_s();
  both_engines_announce_themselves();
  aborts_reach_their_engines();
  a_shared_prefix_sticks_to_one_engine();
  either_engine_gives_the_same_tokens();
  status_lists_engines_and_actors();
  fprintf(stderr, "e2e: scale-out scenario in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_stop(&s), 0);
  llb_arena_destroy(&seen.arena);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_two_engines_behind_one_subject, NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
