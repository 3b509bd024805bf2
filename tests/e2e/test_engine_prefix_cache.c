/* Requests sharing a ~400-token system prompt hit the prefix cache, and the cache changes
 * no token: one request, then others with the same system prompt and other user questions;
 * SchedulerStats.prefix_cache_hits grows, RequestOutput metrics.num_cached_tokens > 0 for the
 * later ones, and their outputs equal the same requests on a stack whose kv_manager and
 * scheduler run with --no-prefix-caching (where nothing is cached). Both stacks run the actors
 * directly (`llmbus serve` cannot pass actor flags). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/e2e/stack.h"

#define NUM_QUESTIONS 3
#define MAX_TOKENS 8
#define STATS_WAIT_MS 15000

static const char *model;
static struct e2e_stack s;
static char system_prompt[4096];

static const char *const questions[NUM_QUESTIONS] = {
    "When does the library open on Saturdays?",
    "Can I borrow a laptop?",
    "Is there a quiet room for studying?",
};

static const char *const topics[] = {"opening hours", "loans",  "late fees", "study rooms",
                                     "printing",      "events", "children",  "accessibility"};

/* About 400 tokens (with the chat template's own: ~420) of rules for a library assistant, built once. */
static void build_system_prompt(void) {
  size_t n = (size_t)snprintf(system_prompt, sizeof system_prompt,
                              "You are the friendly assistant of the Riverside Public Library. "
                              "Follow these rules carefully.\n");
  for (int i = 0; i < 19 && n < sizeof system_prompt; i++)
    n += (size_t)snprintf(system_prompt + n, sizeof system_prompt - n,
                          "Rule %d: when a visitor asks about %s, answer politely in one short "
                          "sentence.\n",
                          i + 1, topics[i % 8]);
}

static void make_request(int q, struct e2e_request *r, struct llb_chat_message msgs[2]) {
  memset(r, 0, sizeof *r);
  msgs[0] = (struct llb_chat_message){.role = llb_str_c("system"),
                                    .content = llb_str_c(system_prompt)};
  msgs[1] = (struct llb_chat_message){.role = llb_str_c("user"),
                                    .content = llb_str_c(questions[q])};
  r->request_id = "prefix";
  r->messages = msgs;
  r->num_messages = 2;
  llb_sampling_params_init(&r->sp);
  r->sp.max_tokens = MAX_TOKENS;
  if (q == NUM_QUESTIONS - 1) { /* one seeded request among the greedy ones */
    r->sp.temperature = 0.8f;
    r->sp.top_p = 0.9f;
    r->sp.has_seed = true;
    r->sp.seed = 77;
  } else {
    r->sp.temperature = 0.0f;
  }
}

/* The latest SchedulerStats published after now (covers every finished step). */
static struct llb_scheduler_stats stats_after_now(void) {
  struct llb_scheduler_stats st;
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  return st;
}

static void test_shared_system_prompt_hits_the_prefix_cache_without_changing_tokens(void **state) {
  (void)state;
  static struct e2e_result cached[NUM_QUESTIONS], uncached[NUM_QUESTIONS];
  struct llb_chat_message msgs[2];
  struct e2e_request r;
  build_system_prompt();

  static const char *const sched_args[] = {E2E_SLOW_STEP_FLAGS, NULL};
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_args;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  double t0 = e2e_now_s();
  uint64_t hits_before = stats_after_now().prefix_cache_hits;
  uint64_t hits_prev = hits_before;
  for (int q = 0; q < NUM_QUESTIONS; q++) {
    make_request(q, &r, msgs);
    assert_int_equal(e2e_generate(&s, &r, &cached[q]), 0);
    e2e_print_result("cached", &cached[q]);
    assert_int_equal(cached[q].error_code, 0);
    assert_true(cached[q].num_tokens >= 1);
    assert_true(cached[q].num_prompt_tokens >= 400);
    struct llb_scheduler_stats st = stats_after_now();
    fprintf(stderr, "e2e: after request %d: prefix_cache_queries=%llu hits=%llu\n", q,
            (unsigned long long)st.prefix_cache_queries, (unsigned long long)st.prefix_cache_hits);
    if (q > 0) {
      /* Everything up to the system prompt's last full block at least. */
      assert_true(cached[q].num_cached_tokens >= 384);
      assert_true(cached[q].num_cached_tokens < cached[q].num_prompt_tokens);
      assert_true(st.prefix_cache_hits > hits_prev);
    }
    hits_prev = st.prefix_cache_hits;
  }
  assert_true(hits_prev > hits_before);
  fprintf(stderr, "e2e: %d requests with the prefix cache in %.1f s\n", NUM_QUESTIONS, e2e_now_s() - t0);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);

  /* The later requests (those that hit) again, with the prefix cache off. */
  static const char *const no_cache[] = {"--no-prefix-caching", NULL};
  static const char *const sched_no_cache[] = {"--no-prefix-caching", E2E_SLOW_STEP_FLAGS, NULL};
  o.actor_args[E2E_ACTOR_KV_MANAGER] = no_cache;
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_no_cache;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  t0 = e2e_now_s();
  int differ = 0;
  for (int q = 1; q < NUM_QUESTIONS; q++) {
    make_request(q, &r, msgs);
    assert_int_equal(e2e_generate(&s, &r, &uncached[q]), 0);
    assert_int_equal(uncached[q].error_code, 0);
    assert_int_equal(uncached[q].num_cached_tokens, 0);
    char what[64];
    snprintf(what, sizeof what, "question %d with vs without prefix cache", q);
    differ += !e2e_same_tokens(what, &cached[q], &uncached[q]);
  }
  assert_int_equal(differ, 0);
  assert_int_equal(stats_after_now().prefix_cache_hits, 0);
  fprintf(stderr, "e2e: %d requests without the prefix cache in %.1f s\n", NUM_QUESTIONS - 1, e2e_now_s() - t0);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_shared_system_prompt_hits_the_prefix_cache_without_changing_tokens, NULL,
                                e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
