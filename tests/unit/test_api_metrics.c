/* actors/api_server/api_server_metrics: the api server's counters, histograms and engine gauges, in the
 * Prometheus text base/metrics renders for them (the names, labels and buckets users scrape). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_metrics.h"

static void expect_line(const char *text, const char *line) {
  const char *p = strstr(text, line);
  if (!p || (p != text && p[-1] != '\n') || p[strlen(line)] != '\n') {
    print_error("missing line: %s\n", line);
    fail();
  }
}

/* The view as GET /metrics renders it (before merging): caller frees. */
/* Not inlined: gcc's -Wdangling-pointer misreads the returned text inlined into a caller. */
static __attribute__((noinline)) char *render(struct api_server_metrics *m) {
  char *text;
  size_t len;
  assert_int_equal(llb_metrics_render(api_server_metrics_registry(m), &text, &len), LLB_STATUS_OK);
  return text;
}

/* The value of the sample line that starts with `series` followed by a space. */
static double value_of(const char *text, const char *series) {
  const size_t n = strlen(series);
  for (const char *p = strstr(text, series); p; p = strstr(p + 1, series))
    if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
  print_error("missing series: %s\n", series);
  fail();
  return 0;
}

static void test_histograms_are_cumulative_with_sum_and_count(void **state) {
  (void)state;
  struct api_server_metrics *m;
  assert_int_equal(api_server_metrics_create("smol", &m), LLB_STATUS_OK);
  api_server_metrics_request_started(m);
  api_server_metrics_request_started(m);
  api_server_metrics_request_ended(m);
  api_server_metrics_request_succeeded(m, "stop", 5, 7, 0.03, 0.9);
  api_server_metrics_request_succeeded(m, "length", 3, 16, 0.5, 2.0);
  api_server_metrics_observe_itl(m, 0.02, 1);
  api_server_metrics_request_failed(m, 429);
  char *text = render(m);
  expect_line(text, "# HELP llmbus:time_to_first_token_seconds Time to first token.");
  expect_line(text, "# TYPE llmbus:time_to_first_token_seconds histogram");
  expect_line(text, "# TYPE llmbus:request_success_total counter");
  expect_line(text, "llmbus:request_success_total{model_name=\"smol\",finished_reason=\"abort\"} 0");
  expect_line(text, "llmbus:request_success_total{model_name=\"smol\",finished_reason=\"other\"} 0");
  expect_line(text, "llmbus:num_requests_running{model_name=\"smol\"} 1");
  expect_line(text, "llmbus:request_success_total{model_name=\"smol\",finished_reason=\"stop\"} 1");
  expect_line(text, "llmbus:request_success_total{model_name=\"smol\",finished_reason=\"length\"} 1");
  expect_line(text, "llmbus:request_errors_total{model_name=\"smol\",status=\"429\"} 1");
  expect_line(text, "llmbus:prompt_tokens_total{model_name=\"smol\"} 8");
  expect_line(text, "llmbus:generation_tokens_total{model_name=\"smol\"} 23");
  expect_line(text, "llmbus:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.02\"} 0");
  expect_line(text, "llmbus:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.04\"} 1");
  expect_line(text, "llmbus:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.5\"} 2");
  expect_line(text, "llmbus:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"+Inf\"} 2");
  expect_line(text, "llmbus:time_to_first_token_seconds_count{model_name=\"smol\"} 2");
  assert_true(fabs(value_of(text, "llmbus:time_to_first_token_seconds_sum{model_name=\"smol\"}") - 0.53) < 1e-9);
  expect_line(text, "llmbus:inter_token_latency_seconds_count{model_name=\"smol\"} 1");
  expect_line(text, "llmbus:e2e_request_latency_seconds_bucket{model_name=\"smol\",le=\"1\"} 1");
  free(text);
  api_server_metrics_destroy(m);
}

/* A stall shows: one sample per token gap, not one mean per request. */
static void test_inter_token_latency_is_one_sample_per_gap(void **state) {
  (void)state;
  struct api_server_metrics *m;
  assert_int_equal(api_server_metrics_create("smol", &m), LLB_STATUS_OK);
  for (int i = 0; i < 9; i++) api_server_metrics_observe_itl(m, 0.02, 1);
  api_server_metrics_observe_itl(m, 3.0, 1); /* one stall of 3 s among ten gaps */
  api_server_metrics_observe_itl(m, 0.01, 2); /* two tokens after one 20 ms gap */
  char *text = render(m);
  expect_line(text, "llmbus:inter_token_latency_seconds_count{model_name=\"smol\"} 12");
  expect_line(text, "llmbus:inter_token_latency_seconds_bucket{model_name=\"smol\",le=\"0.01\"} 2");
  expect_line(text, "llmbus:inter_token_latency_seconds_bucket{model_name=\"smol\",le=\"2.5\"} 11");
  expect_line(text, "llmbus:inter_token_latency_seconds_bucket{model_name=\"smol\",le=\"5\"} 12");
  free(text);
  api_server_metrics_destroy(m);
}

static void test_engine_gauges_keep_the_latest_stats_per_engine(void **state) {
  (void)state;
  struct api_server_metrics *m;
  assert_int_equal(api_server_metrics_create("we\"ird", &m), LLB_STATUS_OK);
  struct llb_scheduler_stats s = {.engine_id = llb_str_c("0"), .num_waiting_reqs = 4, .num_running_reqs = 2,
                                  .kv_cache_usage = 0.25f, .prefix_cache_queries = 100, .prefix_cache_hits = 40,
                                  .num_preemptions = 3};
  api_server_metrics_engine_stats(m, &s);
  s.num_waiting_reqs = 1;
  api_server_metrics_engine_stats(m, &s);
  s.engine_id = llb_str_c("1");
  s.num_waiting_reqs = 9;
  api_server_metrics_engine_stats(m, &s);
  char *text = render(m);
  expect_line(text, "llmbus:num_requests_waiting{model_name=\"we\\\"ird\",engine=\"0\"} 1");
  expect_line(text, "llmbus:num_requests_waiting{model_name=\"we\\\"ird\",engine=\"1\"} 9");
  expect_line(text, "llmbus:kv_cache_usage_perc{model_name=\"we\\\"ird\",engine=\"0\"} 0.25");
  expect_line(text, "llmbus:prefix_cache_hits_total{model_name=\"we\\\"ird\",engine=\"0\"} 40");
  expect_line(text, "llmbus:num_preemptions_total{model_name=\"we\\\"ird\",engine=\"1\"} 3");
  free(text);
  api_server_metrics_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_histograms_are_cumulative_with_sum_and_count),
      cmocka_unit_test(test_inter_token_latency_is_one_sample_per_gap),
      cmocka_unit_test(test_engine_gauges_keep_the_latest_stats_per_engine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
