/* 32 requests in flight at once give exactly the token ids each gives alone (docs/design.md §5),
 * greedy and seeded (temperature 0.8, top_p 0.9, fixed seeds), through every actor with the
 * real model: first each of 12 distinct requests (4 prompts x greedy / two seeds) alone, one
 * after the other; then 32 requests (each distinct one two or three times) at once, and the
 * token ids are compared exactly. Two ctest tests run this file:
 *   test_engine_concurrent_matches_alone            the default 512-token step budget;
 *   test_engine_chunked_prefill_matches_alone (argv[2] = "chunked") with the scheduler's
 *     --max-num-batched-tokens 64, so that prefills are chunked and share steps with the
 *     decodes of requests admitted earlier. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/e2e/stack.h"

#define NUM_REQUESTS 32
#define NUM_DISTINCT 12 /* request i is distinct request i % NUM_DISTINCT */
#define MAX_TOKENS 8

static const char *model;
static struct e2e_stack s;

static const char *const prompts[] = {
    "Name a color.",
    "What is a bus?",
    "Say hello in French.",
    /* Long enough to need several 64-token chunks. */
    "Here is a short story to summarise in a few words. A small robot lived in a lighthouse on a "
    "rocky island. Every night it climbed the stairs, cleaned the lamp and watched the ships pass. "
    "One winter the lamp broke during a storm, and the robot used its own light to guide a fishing "
    "boat safely home. Summarise it.",
};
#define NUM_PROMPTS ((int)(sizeof prompts / sizeof prompts[0]))

/* Distinct request d: prompt d % 4; greedy, or seeded with one of two seeds. */
static bool is_greedy(int d) { return d / NUM_PROMPTS == 0; }

static void make_request(int i, struct e2e_request *r, char *id, size_t cap) {
  int d = i % NUM_DISTINCT;
  memset(r, 0, sizeof *r);
  snprintf(id, cap, "conc-%d", i);
  r->request_id = id;
  r->prompt = prompts[d % NUM_PROMPTS];
  llb_sampling_params_init(&r->sp);
  r->sp.max_tokens = MAX_TOKENS;
  if (is_greedy(d)) {
    r->sp.temperature = 0.0f;
  } else {
    r->sp.temperature = 0.8f;
    r->sp.top_p = 0.9f;
    r->sp.has_seed = true;
    r->sp.seed = 1000u * (uint64_t)(d / NUM_PROMPTS) + 7u;
  }
}

/* All NUM_REQUESTS submitted before any is read; results into out[]. */
static void run_concurrent(struct e2e_stack *s, struct e2e_result *out) {
  static struct e2e_pending pending[NUM_REQUESTS];
  char ids[NUM_REQUESTS][32];
  e2e_stack_reset_max_running(s);
  double t0 = e2e_now_s();
  for (int i = 0; i < NUM_REQUESTS; i++) {
    struct e2e_request r;
    make_request(i, &r, ids[i], sizeof ids[i]);
    assert_int_equal(e2e_submit(s, &r, &pending[i]), 0);
  }
  for (int i = 0; i < NUM_REQUESTS; i++) {
    assert_int_equal(e2e_collect(&pending[i], E2E_WAIT_OUTPUT_MS), 0);
    out[i] = pending[i].result;
  }
  fprintf(stderr, "e2e: %d concurrent requests in %.1f s, max running seen %d\n", NUM_REQUESTS,
          e2e_now_s() - t0, e2e_stack_max_running(s));
}

static void check_same(const char *phase, const struct e2e_result *alone, const struct e2e_result *conc) {
  int differ = 0;
  for (int i = 0; i < NUM_REQUESTS; i++) {
    char what[96];
    int d = i % NUM_DISTINCT;
    snprintf(what, sizeof what, "%s request %d (%s)", phase, i, is_greedy(d) ? "greedy" : "seeded");
    if (conc[i].error_code != 0 || !conc[i].finished) {
      e2e_print_result(what, &conc[i]);
      differ++;
      continue;
    }
    if (!e2e_same_tokens(what, &alone[d], &conc[i])) differ++;
  }
  assert_int_equal(differ, 0);
}

static bool chunked;

static void test_concurrent_requests_give_the_tokens_each_gives_alone(void **state) {
  (void)state;
  static struct e2e_result alone[NUM_DISTINCT], conc[NUM_REQUESTS];
  /* Stats every 20 ms: on a GPU all 32 requests can finish within a second (the default period). */
  static const char *const sched_args[] = {E2E_SLOW_STEP_FLAGS, "--stats-interval-ms", "20", NULL};
  static const char *const chunked_args[] = {E2E_SLOW_STEP_FLAGS, "--stats-interval-ms", "20", "--max-num-batched-tokens",
                                             "64", NULL};
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_SCHEDULER] = chunked ? chunked_args : sched_args;
  char id[32];

  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  double t0 = e2e_now_s();
  for (int i = 0; i < NUM_DISTINCT; i++) {
    struct e2e_request r;
    make_request(i, &r, id, sizeof id);
    assert_int_equal(e2e_generate(&s, &r, &alone[i]), 0);
    if (alone[i].error_code != 0) e2e_print_result("alone", &alone[i]);
    assert_int_equal(alone[i].error_code, 0);
    assert_true(alone[i].num_tokens >= 1 && alone[i].num_tokens <= MAX_TOKENS);
  }
  fprintf(stderr, "e2e: %d distinct requests alone in %.1f s\n", NUM_DISTINCT, e2e_now_s() - t0);
  /* Not a constant answer: the prompts, and greedy vs seeded, must give different tokens. */
  int distinct = 0;
  for (int i = 1; i < NUM_DISTINCT; i++)
    distinct += alone[i].num_tokens != alone[0].num_tokens ||
                memcmp(alone[i].token_ids, alone[0].token_ids, (size_t)alone[0].num_tokens * 4) != 0;
  assert_true(distinct >= NUM_DISTINCT / 2);

  run_concurrent(&s, conc);
  check_same(chunked ? "chunked (budget 64)" : "concurrent", alone, conc);
  /* They were batched: the stats of the run saw requests running at once (with a 64-token
   * budget fewer are admitted at a time, but decodes still share steps with prefill chunks). */
  assert_true(e2e_stack_max_running(&s) >= (chunked ? 4 : NUM_REQUESTS / 2));
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  chunked = argc > 2 && strcmp(argv[2], "chunked") == 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_concurrent_requests_give_the_tokens_each_gives_alone, NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
