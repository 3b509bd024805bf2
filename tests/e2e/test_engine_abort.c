/* An abort mid-stream frees every block: a long request (max_tokens 200, ignore_eos) is
 * aborted after a few streamed outputs with AbortRequest{the id of its first RequestOutput}
 * on llm.abort.default; its stream ends with finish_reason abort, the following
 * SchedulerStats show no running or waiting request and every KV block free (usage 0), and
 * the engine then serves the next request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/subject.h"
#include "tests/e2e/stack.h"

/* Long enough that the request still runs when the next SchedulerStats comes (1 s) on a GPU
 * too (~1-2 ms a token there); it is aborted after 3 outputs anyway. */
#define LONG_MAX_TOKENS 4000
#define STATS_WAIT_MS 15000

static const char *model;
static struct e2e_stack s;

static bool all_free(const struct llb_scheduler_stats *st) {
  return st->num_running_reqs == 0 && st->num_waiting_reqs == 0 && st->kv_cache_usage == 0.0f &&
         st->num_free_blocks == st->num_total_blocks && st->num_total_blocks > 0;
}

static void print_stats(const char *what, const struct llb_scheduler_stats *st) {
  fprintf(stderr, "e2e: %s: step=%llu running=%d waiting=%d kv_cache_usage=%g free=%d/%d\n", what,
          (unsigned long long)st->step, st->num_running_reqs, st->num_waiting_reqs,
          (double)st->kv_cache_usage, st->num_free_blocks, st->num_total_blocks);
}

static void test_abort_mid_stream_frees_every_block(void **state) {
  (void)state;
  static struct e2e_pending p;
  assert_int_equal(e2e_stack_start(&s, model, NULL), 0);
  double t0 = e2e_now_s();

  struct e2e_request r = {.request_id = "long", .prompt = "Tell me a very long story about a dragon."};
  llb_sampling_params_init(&r.sp);
  r.sp.temperature = 0.0f;
  r.sp.max_tokens = LONG_MAX_TOKENS;
  r.sp.ignore_eos = true;
  assert_int_equal(e2e_submit(&s, &r, &p), 0);
  while (p.result.num_outputs < 3) assert_int_equal(e2e_next(&p, E2E_WAIT_OUTPUT_MS), 0);
  assert_true(p.result.request_id[0] != '\0');

  /* While it runs, the engine holds blocks for it. */
  struct llb_scheduler_stats st;
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  print_stats("while running", &st);
  assert_int_equal(st.num_running_reqs, 1);
  assert_true(st.num_free_blocks < st.num_total_blocks);
  assert_true(st.kv_cache_usage > 0.0f);

  fprintf(stderr, "e2e: aborting %s after %d outputs, %d tokens\n", p.result.request_id, p.result.num_outputs,
          p.result.num_tokens);
  assert_int_equal(e2e_send_abort(&s, p.result.request_id), 0);
  int rc;
  while ((rc = e2e_next(&p, E2E_WAIT_OUTPUT_MS)) == 0) {
  }
  assert_int_equal(rc, 1);
  e2e_print_result("aborted", &p.result);
  assert_int_equal(p.result.finish_reason, LLB_FINISH_REASON_ABORT);
  assert_true(p.result.num_tokens < LONG_MAX_TOKENS);
  e2e_pending_release(&p);

  /* The SchedulerStats published after the stream ended: nothing running, every block free.
   * A few periods are allowed for the abort's step in flight to finish. */
  bool freed = false;
  for (int i = 0; i < 3 && !freed; i++) {
    assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
    print_stats("after the abort", &st);
    freed = all_free(&st);
  }
  assert_true(freed);

  /* The engine goes on serving. */
  struct e2e_result next;
  struct e2e_request r2 = {.request_id = "after-abort", .prompt = "Name a color."};
  llb_sampling_params_init(&r2.sp);
  r2.sp.temperature = 0.0f;
  r2.sp.max_tokens = 8;
  assert_int_equal(e2e_generate(&s, &r2, &next), 0);
  e2e_print_result("after abort", &next);
  assert_int_equal(next.error_code, 0);
  assert_true(next.num_tokens >= 1);
  assert_true(next.finish_reason == LLB_FINISH_REASON_LENGTH || next.finish_reason == LLB_FINISH_REASON_STOP);
  fprintf(stderr, "e2e: abort scenario in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_abort_mid_stream_frees_every_block, NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
