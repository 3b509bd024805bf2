/* Preemption under memory pressure gives identical tokens: with a KV cache of 16 blocks of
 * 16 tokens (kv_manager, scheduler and worker all told so), 6 requests that each fit alone
 * but together need far more blocks run at once; the scheduler preempts (recompute) and
 * resumes them with their output_token_ids, and every request ends with the tokens it gives
 * alone. SchedulerStats.num_preemptions must show that preemption really happened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/e2e/stack.h"

#define NUM_REQUESTS 6
#define NUM_BLOCKS "16"
/* + a ~38-token templated prompt (its first block, the template's system text, is shared
 * through the prefix cache): 5 blocks each, 4 of them own, so 6 x 4 + 1 = 25 > 16 blocks
 * at once, while one request alone needs at most 6 with the scheduler's lookahead. (20
 * tokens, 19 blocks at once, were absorbed without any preemption.) */
#define MAX_TOKENS 40
#define STATS_WAIT_MS 15000

static const char *model;
static struct e2e_stack s;

static const char *const prompts[NUM_REQUESTS] = {
    "Tell me about the moon.",      "Describe a forest at night.", "Explain how a bicycle works.",
    "Write about a rainy city.",    "Describe the ocean.",         "Tell me about mountains.",
};

static void make_request(int i, struct e2e_request *r) {
  memset(r, 0, sizeof *r);
  r->request_id = "pressure";
  r->prompt = prompts[i];
  llb_sampling_params_init(&r->sp);
  r->sp.max_tokens = MAX_TOKENS;
  r->sp.ignore_eos = true;
  if (i % 2 == 0) {
    r->sp.temperature = 0.0f;
  } else {
    r->sp.temperature = 0.8f;
    r->sp.top_p = 0.9f;
    r->sp.has_seed = true;
    r->sp.seed = 4242u + (uint64_t)i;
  }
}

static void test_preempted_requests_resume_with_identical_tokens(void **state) {
  (void)state;
  static struct e2e_result alone[NUM_REQUESTS], conc[NUM_REQUESTS];
  static struct e2e_pending pending[NUM_REQUESTS];
  static const char *const kv_args[] = {"--num-blocks", NUM_BLOCKS, "--block-size", "16", NULL};
  static const char *const sched_args[] = {"--num-blocks", NUM_BLOCKS, "--block-size", "16", E2E_SLOW_STEP_FLAGS, NULL};
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_KV_MANAGER] = kv_args;
  o.actor_args[E2E_ACTOR_GPU_WORKER] = kv_args;
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_args;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);

  double t0 = e2e_now_s();
  for (int i = 0; i < NUM_REQUESTS; i++) {
    struct e2e_request r;
    make_request(i, &r);
    assert_int_equal(e2e_generate(&s, &r, &alone[i]), 0);
    if (alone[i].error_code != 0) e2e_print_result("alone", &alone[i]);
    assert_int_equal(alone[i].error_code, 0);
    assert_int_equal(alone[i].num_tokens, MAX_TOKENS);
  }
  fprintf(stderr, "e2e: %d requests alone in %.1f s\n", NUM_REQUESTS, e2e_now_s() - t0);
  struct llb_scheduler_stats st;
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  uint64_t preemptions_alone = st.num_preemptions;
  assert_int_equal(st.num_total_blocks, atoi(NUM_BLOCKS));

  t0 = e2e_now_s();
  for (int i = 0; i < NUM_REQUESTS; i++) {
    struct e2e_request r;
    make_request(i, &r);
    assert_int_equal(e2e_submit(&s, &r, &pending[i]), 0);
  }
  int differ = 0;
  for (int i = 0; i < NUM_REQUESTS; i++) {
    assert_int_equal(e2e_collect(&pending[i], E2E_WAIT_OUTPUT_MS), 0);
    conc[i] = pending[i].result;
    char what[64];
    snprintf(what, sizeof what, "request %d (%s) under pressure", i, i % 2 ? "seeded" : "greedy");
    if (conc[i].error_code != 0) e2e_print_result(what, &conc[i]);
    differ += conc[i].error_code != 0 || !e2e_same_tokens(what, &alone[i], &conc[i]);
  }
  fprintf(stderr, "e2e: %d concurrent requests in %.1f s\n", NUM_REQUESTS, e2e_now_s() - t0);
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  fprintf(stderr, "e2e: preemptions alone=%llu total=%llu; free blocks %d/%d\n",
          (unsigned long long)preemptions_alone, (unsigned long long)st.num_preemptions, st.num_free_blocks,
          st.num_total_blocks);
  assert_int_equal(differ, 0);
  assert_true(st.num_preemptions > preemptions_alone);
  assert_int_equal(st.num_free_blocks, st.num_total_blocks);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_preempted_requests_resume_with_identical_tokens, NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
