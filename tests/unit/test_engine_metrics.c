/* actors/scheduler/engine_metrics: the scheduler's gauges and counters follow its stats,
 * iteration_tokens_total gets one sample per applied step, and the periodic engine_stats log
 * line says throughput, queue and cache state over its interval (vLLM's LoggingStatLogger). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "actors/scheduler/engine_metrics.h"
#include "base/log.h"

#define SEC 1000000000LL

static void expect_line(const char *text, const char *line) {
  for (const char *p = text; (p = strstr(p, line)); p++)
    if ((p == text || p[-1] == '\n') && p[strlen(line)] == '\n') return;
  print_error("missing line: %s\nin:\n%s\n", line, text);
  fail();
}

/* Runs update with stderr captured into buf[cap]. */
static bool update_captured(struct sched_engine_metrics *m, const struct sched_stats *s, int64_t now, char *buf,
                            size_t cap) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  int saved = dup(STDERR_FILENO);
  dup2(fds[1], STDERR_FILENO);
  bool logged = sched_engine_metrics_update(m, s, now);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fds[1]);
  ssize_t n = read(fds[0], buf, cap - 1);
  close(fds[0]);
  buf[n > 0 ? n : 0] = '\0';
  return logged;
}

static void test_series_follow_stats_and_iterations_are_sampled(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  struct sched_engine_metrics *m;
  assert_int_equal(sched_engine_metrics_create(r, 0, &m), LLB_STATUS_OK);
  struct sched_stats s = {.num_running = 3, .num_waiting = 2, .kv_cache_usage = 0.5, .prefix_cache_queries = 100,
                          .prefix_cache_hits = 40, .num_preemptions = 1, .num_prompt_tokens = 0,
                          .num_generation_tokens = 0};
  sched_engine_metrics_update(m, &s, 1 * SEC);
  s.num_prompt_tokens = 200; /* a prefill step of 200 tokens */
  sched_engine_metrics_update(m, &s, 2 * SEC);
  s.num_generation_tokens = 3; /* a decode step of 3 requests */
  sched_engine_metrics_update(m, &s, 3 * SEC);
  sched_engine_metrics_update(m, &s, 4 * SEC); /* nothing computed: no sample */
  char *t;
  size_t n;
  assert_int_equal(llb_metrics_render(r, &t, &n), LLB_STATUS_OK);
  expect_line(t, "llmbus:num_requests_running 3");
  expect_line(t, "llmbus:num_requests_waiting 2");
  expect_line(t, "llmbus:kv_cache_usage_perc 0.5");
  expect_line(t, "llmbus:prefix_cache_queries_total 100");
  expect_line(t, "llmbus:prefix_cache_hits_total 40");
  expect_line(t, "llmbus:num_preemptions_total 1");
  expect_line(t, "llmbus:iteration_tokens_total_count 2");
  expect_line(t, "llmbus:iteration_tokens_total_bucket{le=\"5\"} 1");
  expect_line(t, "llmbus:iteration_tokens_total_bucket{le=\"200\"} 2");
  expect_line(t, "llmbus:iteration_tokens_total_sum 203");
  free(t);
  sched_engine_metrics_destroy(m);
  llb_metrics_destroy(r);
}

static void test_engine_stats_line_reports_the_interval(void **state) {
  (void)state;
  struct sched_engine_metrics *m;
  assert_int_equal(sched_engine_metrics_create(NULL, 10 * SEC, &m), LLB_STATUS_OK);
  struct sched_stats s = {.num_prompt_tokens = 1000, .num_generation_tokens = 50, .prefix_cache_queries = 100,
                          .prefix_cache_hits = 10};
  char buf[1024];
  assert_false(update_captured(m, &s, 100 * SEC, buf, sizeof buf)); /* starts the interval */
  s = (struct sched_stats){.num_running = 4, .num_waiting = 1, .kv_cache_usage = 0.125, .num_preemptions = 2,
                           .num_prompt_tokens = 1500, .num_generation_tokens = 250, .prefix_cache_queries = 300,
                           .prefix_cache_hits = 160, .step = 77};
  assert_false(update_captured(m, &s, 105 * SEC, buf, sizeof buf)); /* before the interval ends */
  assert_true(update_captured(m, &s, 110 * SEC, buf, sizeof buf));
  assert_non_null(strstr(buf, "event=engine_stats interval_s=10.0 prompt_throughput_tok_s=50.0 "
                              "generation_throughput_tok_s=20.0 running=4 waiting=1 kv_cache_usage_pct=12.5 "
                              "prefix_cache_hit_rate_pct=75.0 preemptions=2 step=77\n"));
  assert_non_null(strstr(buf, "level=info"));
  sched_engine_metrics_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_series_follow_stats_and_iterations_are_sampled),
      cmocka_unit_test(test_engine_stats_line_reports_the_interval),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
