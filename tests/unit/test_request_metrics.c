/* actors/output_processor/request_metrics over the output processor's stats hooks: the
 * per-request metrics a user reads in Prometheus — finish reasons as the client sees them,
 * one inter-token sample per token gap, duplicates not counted, vLLM's phase intervals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "actors/output_processor/request_metrics.h"
#include "test_output_common.h"

#define SEC 1000000000LL
#define T0 (1795000000LL * SEC) /* arrival, wall clock */

struct fixture {
  struct tokenizer *tok;
  struct output_processor *p;
  struct llb_metrics *r;
  struct output_processor_request_metrics *m;
  struct output_processor_result res;
  int32_t *ids;
  int64_t num_ids;
};

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof *f);
  f->tok = test_load_tokenizer();
  assert_int_equal(output_processor_create(f->tok, &f->p), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_create(&f->r), LLB_STATUS_OK);
  assert_int_equal(output_processor_request_metrics_create(f->r, &f->m), LLB_STATUS_OK);
  output_processor_set_stats_hooks(f->p, output_processor_request_metrics_hooks(), f->m);
  output_processor_result_init(&f->res);
  f->ids = test_byte_tokens(f->tok, "abcdefghijklmnop", &f->num_ids);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  output_processor_result_free(&f->res);
  output_processor_destroy(f->p);
  output_processor_request_metrics_destroy(f->m);
  llb_metrics_destroy(f->r);
  tokenizer_destroy(f->tok);
  free(f->ids);
  free(f);
  return 0;
}

static void reg(struct fixture *f, const char *id, const struct llb_sampling_params *sp) {
  struct output_processor_request_info info = test_info(id, sp);
  info.arrival_time_ns = T0;
  assert_int_equal(output_processor_register(f->p, &info), LLB_STATUS_OK);
}

/* k tokens from output position pos, arriving here at T0 + at_ms. */
static void step(struct fixture *f, const char *id, int64_t pos, int32_t k, enum output_processor_finish_reason why,
                 int64_t at_ms) {
  struct output_processor_engine_output eo = {.request_id = id, .new_token_ids = f->ids + pos, .num_new_tokens = k,
                                     .first_output_pos = pos, .finish_reason = why, .stop_token_id = -1,
                                     .num_cached_tokens = -1, .queued_time_ns = T0 + 10 * 1000000LL,
                                     .scheduled_time_ns = T0 + 110 * 1000000LL,
                                     .timestamp_ns = T0 + at_ms * 1000000LL};
  output_processor_process(f->p, &eo, T0 + at_ms * 1000000LL, &f->res);
  output_processor_result_clear(&f->res);
}

static void expect_line(const char *text, const char *line) {
  for (const char *p = text; (p = strstr(p, line)); p++)
    if ((p == text || p[-1] == '\n') && p[strlen(line)] == '\n') return;
  print_error("missing line: %s\n", line);
  fail();
}

static char *render(struct fixture *f) {
  char *t = NULL;
  size_t n;
  assert_int_equal(llb_metrics_render(f->r, &t, &n), LLB_STATUS_OK);
  return t;
}

static void test_streamed_request_ending_by_length_counts_length_and_every_token_gap(void **state) {
  struct fixture *f = *state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  reg(f, "r1", &sp);
  step(f, "r1", 0, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, 500);    /* first token: TTFT 0.5 s */
  step(f, "r1", 1, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, 520);    /* gap 20 ms */
  step(f, "r1", 1, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, 530);    /* a duplicate (replayed): not counted */
  step(f, "r1", 2, 2, OUTPUT_PROCESSOR_FINISH_REASON_NONE, 3520);   /* a 3 s stall, 2 tokens: 2 gaps of 1.5 s */
  step(f, "r1", 4, 1, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, 3540); /* gap 20 ms, finished by max_tokens */
  char *t = render(f);
  expect_line(t, "llmbus:request_success_total{finished_reason=\"length\"} 1");
  expect_line(t, "llmbus:request_success_total{finished_reason=\"stop\"} 0");
  expect_line(t, "llmbus:prompt_tokens_total 3");
  expect_line(t, "llmbus:generation_tokens_total 5");
  expect_line(t, "llmbus:time_to_first_token_seconds_bucket{le=\"0.25\"} 0");
  expect_line(t, "llmbus:time_to_first_token_seconds_bucket{le=\"0.5\"} 1");
  expect_line(t, "llmbus:inter_token_latency_seconds_count 4");
  expect_line(t, "llmbus:inter_token_latency_seconds_bucket{le=\"0.025\"} 2");
  expect_line(t, "llmbus:inter_token_latency_seconds_bucket{le=\"1\"} 2");
  expect_line(t, "llmbus:inter_token_latency_seconds_bucket{le=\"2.5\"} 4");
  expect_line(t, "llmbus:e2e_request_latency_seconds_bucket{le=\"2.5\"} 0");
  expect_line(t, "llmbus:e2e_request_latency_seconds_bucket{le=\"5\"} 1");
  /* queued T0+10 ms, scheduled T0+110 ms, first token T0+500, last T0+3540 */
  expect_line(t, "llmbus:request_queue_time_seconds_sum 0.10000000000000001");
  expect_line(t, "llmbus:request_prefill_time_seconds_sum 0.39000000000000001");
  expect_line(t, "llmbus:request_decode_time_seconds_sum 3.04");
  expect_line(t, "llmbus:request_inference_time_seconds_sum 3.4300000000000002");
  expect_line(t, "llmbus:request_prompt_tokens_bucket{le=\"5\"} 1");
  expect_line(t, "llmbus:request_generation_tokens_bucket{le=\"2\"} 0");
  expect_line(t, "llmbus:request_generation_tokens_bucket{le=\"5\"} 1");
  free(t);
}

static void test_finish_reasons_are_the_clients(void **state) {
  struct fixture *f = *state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  struct llb_sampling_params sps = sp;
  snprintf(sps.stop[0], sizeof sps.stop[0], "cd");
  sps.num_stop = 1;
  reg(f, "s", &sps); /* a stop string ends it here while the engine still runs it: "stop" */
  step(f, "s", 0, 4, OUTPUT_PROCESSOR_FINISH_REASON_NONE, 100);
  reg(f, "a", &sp);
  step(f, "a", 0, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, 100);
  assert_int_equal(output_processor_abort(f->p, "a", T0 + 200 * 1000000LL, &f->res), LLB_STATUS_OK);
  output_processor_result_clear(&f->res);
  reg(f, "e", &sp);
  assert_int_equal(output_processor_fail(f->p, "e", LLB_STATUS_QUEUE_FULL, "full", T0 + 5 * 1000000LL, &f->res), LLB_STATUS_OK);
  output_processor_result_clear(&f->res);
  char *t = render(f);
  expect_line(t, "llmbus:request_success_total{finished_reason=\"stop\"} 1");
  expect_line(t, "llmbus:request_success_total{finished_reason=\"abort\"} 1");
  expect_line(t, "llmbus:request_success_total{finished_reason=\"error\"} 1");
  expect_line(t, "llmbus:request_success_total{finished_reason=\"length\"} 0");
  /* the failed request had no token: no TTFT, no prefill, but an e2e sample */
  expect_line(t, "llmbus:time_to_first_token_seconds_count 2");
  expect_line(t, "llmbus:e2e_request_latency_seconds_count 3");
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_streamed_request_ending_by_length_counts_length_and_every_token_gap, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_finish_reasons_are_the_clients, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
