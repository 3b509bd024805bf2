/* base/metrics: the Prometheus text exposition format 0.0.4, histogram bucketing, labels and
 * their escaping, bounded cardinality, atomic updates from many threads, process metrics. */
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/metrics.h"

/* `line` must be one whole line of `text`. */
static void expect_line(const char *text, const char *line) {
  for (const char *p = text; (p = strstr(p, line)); p++)
    if ((p == text || p[-1] == '\n') && p[strlen(line)] == '\n') return;
  print_error("missing line: %s\nin:\n%s\n", line, text);
  fail();
}

/* Not inlined: gcc's -Wdangling-pointer misreads the returned text inlined into a caller. */
static __attribute__((noinline)) char *render(struct llb_metrics *r) {
  char *t = NULL;
  size_t n = 0;
  assert_int_equal(llb_metrics_render(r, &t, &n), LLB_STATUS_OK);
  assert_int_equal(strlen(t), n);
  return t;
}

static void test_counter_and_gauge_render_with_help_type_and_labels(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_add_const_label(r, "engine", "0"), LLB_STATUS_OK);
  const char *lbl[] = {"finished_reason"};
  struct llb_metric *c = llb_metrics_counter(r, "llmbus:request_success_total", "Finished\nrequests \\ done.", 1, lbl);
  const char *stop = "stop", *weird = "a\"b\\c\nd";
  llb_series_add(llb_metric_series(c, &stop), 2);
  llb_series_add(llb_metric_series(c, &stop), 1.5);
  llb_series_add(llb_metric_series(c, &stop), -7); /* a counter never goes down */
  llb_series_add(llb_metric_series(c, &weird), 1);
  struct llb_series *g = llb_metric_series(llb_metrics_gauge(r, "llmbus:kv_cache_usage_perc", "KV.", 0, NULL), NULL);
  llb_series_set(g, 0.25);
  llb_series_add(g, -0.5);
  char *t = render(r);
  expect_line(t, "# HELP llmbus:request_success_total Finished\\nrequests \\\\ done.");
  expect_line(t, "# TYPE llmbus:request_success_total counter");
  expect_line(t, "llmbus:request_success_total{engine=\"0\",finished_reason=\"stop\"} 3.5");
  expect_line(t, "llmbus:request_success_total{engine=\"0\",finished_reason=\"a\\\"b\\\\c\\nd\"} 1");
  expect_line(t, "# TYPE llmbus:kv_cache_usage_perc gauge");
  expect_line(t, "llmbus:kv_cache_usage_perc{engine=\"0\"} -0.25");
  /* HELP and TYPE come before the family's samples */
  assert_true(strstr(t, "# TYPE llmbus:request_success_total") < strstr(t, "llmbus:request_success_total{"));
  free(t);
  llb_metrics_destroy(r);
}

static void test_histogram_buckets_are_cumulative_le_with_inf_sum_count(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  const double b[] = {0.1, 0.5, 1};
  struct llb_series *h = llb_metric_series(llb_metrics_histogram(r, "lat_seconds", "Latency.", b, 3, 0, NULL), NULL);
  llb_series_observe(h, 0.1);  /* on a bound: counted in le="0.1" (upper bounds are inclusive) */
  llb_series_observe(h, 0.3);
  llb_series_observe(h, 0.5);
  llb_series_observe(h, 7.0);  /* above every bound: +Inf only */
  llb_series_observe(h, NAN);  /* ignored */
  char *t = render(r);
  expect_line(t, "# TYPE lat_seconds histogram");
  expect_line(t, "lat_seconds_bucket{le=\"0.1\"} 1");
  expect_line(t, "lat_seconds_bucket{le=\"0.5\"} 3");
  expect_line(t, "lat_seconds_bucket{le=\"1\"} 3");
  expect_line(t, "lat_seconds_bucket{le=\"+Inf\"} 4");
  expect_line(t, "lat_seconds_sum 7.9000000000000004");
  expect_line(t, "lat_seconds_count 4");
  assert_true(llb_series_value(h) == 4);
  free(t);
  llb_metrics_destroy(r);
}

/* Tokens that arrive together after one gap (the api server's inter-token latency): n samples
 * of one value at once, as n single observations would count them. */
static void test_observe_n_counts_n_samples_of_one_value(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  const double b[] = {0.01, 0.1};
  struct llb_series *h = llb_metric_series(llb_metrics_histogram(r, "gap_seconds", "Gap.", b, 2, 0, NULL), NULL);
  llb_series_observe_n(h, 0.05, 3);
  llb_series_observe_n(h, 0.005, 1);
  llb_series_observe_n(h, 0.5, 0); /* nothing */
  char *t = render(r);
  expect_line(t, "gap_seconds_bucket{le=\"0.01\"} 1");
  expect_line(t, "gap_seconds_bucket{le=\"0.1\"} 4");
  expect_line(t, "gap_seconds_bucket{le=\"+Inf\"} 4");
  expect_line(t, "gap_seconds_count 4");
  free(t);
  llb_metrics_destroy(r);
}

/* A served model's name is a constant label of the api server's registry: up to 255 bytes are
 * kept whole, escaped like any label value. */
static void test_a_long_constant_label_is_kept_whole(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  char name[256];
  memset(name, 'm', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  name[10] = '"';
  assert_int_equal(llb_metrics_add_const_label(r, "model_name", name), LLB_STATUS_OK);
  llb_series_add(llb_metric_series(llb_metrics_counter(r, "x_total", "", 0, NULL), NULL), 1);
  char *t = render(r);
  char line[600];
  snprintf(line, sizeof line, "x_total{model_name=\"%.10s\\\"%s\"} 1", name, name + 11);
  expect_line(t, line);
  free(t);
  llb_metrics_destroy(r);
}

static void test_bad_names_labels_and_bounds_are_refused(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  const char *le[] = {"le"}, *bad[] = {"a-b"};
  const double desc[] = {1, 0.5}, inf[] = {INFINITY};
  assert_null(llb_metrics_counter(r, "9lives", "", 0, NULL));
  assert_null(llb_metrics_counter(r, "a b", "", 0, NULL));
  assert_null(llb_metrics_histogram(r, "h", "", NULL, 0, 1, le));
  assert_null(llb_metrics_counter(r, "c", "", 1, bad));
  assert_null(llb_metrics_histogram(r, "h", "", desc, 2, 0, NULL));
  assert_null(llb_metrics_histogram(r, "h", "", inf, 1, 0, NULL));
  /* the same family twice is shared; another shape under its name is refused */
  struct llb_metric *a = llb_metrics_counter(r, "x_total", "", 0, NULL);
  assert_non_null(a);
  assert_ptr_equal(llb_metrics_counter(r, "x_total", "", 0, NULL), a);
  assert_null(llb_metrics_gauge(r, "x_total", "", 0, NULL));
  /* constant labels only before the first family */
  assert_int_not_equal(llb_metrics_add_const_label(r, "engine", "0"), LLB_STATUS_OK);
  char *t = render(r);
  expect_line(t, "x_total 0");
  free(t);
  llb_metrics_destroy(r);
}

static void test_label_values_beyond_the_bound_fold_into_other(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  const char *lbl[] = {"subject"};
  struct llb_metric *c = llb_metrics_counter(r, "msgs_total", "", 1, lbl);
  for (int i = 0; i < LLB_METRICS_MAX_SERIES + 50; i++) {
    char v[32];
    snprintf(v, sizeof v, "s%d", i);
    const char *vp = v;
    llb_series_add(llb_metric_series(c, &vp), 1);
  }
  char *t = render(r);
  expect_line(t, "msgs_total{subject=\"s0\"} 1");
  expect_line(t, "msgs_total{subject=\"other\"} 50");
  int lines = 0;
  for (const char *p = t; (p = strstr(p, "msgs_total{")); p++) lines++;
  assert_int_equal(lines, LLB_METRICS_MAX_SERIES + 1);
  free(t);
  llb_metrics_destroy(r);
}

struct hammer {
  struct llb_series *c, *h;
};

static void *hammer_main(void *arg) {
  struct hammer *hm = arg;
  for (int i = 0; i < 20000; i++) {
    llb_series_add(hm->c, 1);
    llb_series_observe(hm->h, 0.5);
  }
  return NULL;
}

static void test_updates_from_many_threads_are_not_lost(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  const double b[] = {1};
  struct hammer hm = {llb_metric_series(llb_metrics_counter(r, "n_total", "", 0, NULL), NULL),
                      llb_metric_series(llb_metrics_histogram(r, "h", "", b, 1, 0, NULL), NULL)};
  pthread_t t[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &hm), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  char *text = render(r);
  expect_line(text, "n_total 80000");
  expect_line(text, "h_bucket{le=\"1\"} 80000");
  expect_line(text, "h_sum 40000");
  free(text);
  llb_metrics_destroy(r);
}

static void test_counter_set_mirrors_a_monotonic_source(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  struct llb_series *c = llb_metric_series(llb_metrics_counter(r, "p_total", "", 0, NULL), NULL);
  llb_series_set(c, 10);
  llb_series_set(c, 4); /* a counter never goes back */
  assert_true(llb_series_value(c) == 10);
  llb_metrics_destroy(r);
}

static void test_process_metrics_are_read_from_proc(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_register_process(r), LLB_STATUS_OK);
  /* some CPU time: at least 3 clock ticks' worth (/proc counts in 10 ms ticks; a fixed loop
   * finished inside one tick on a fast run and read 0) */
  volatile double x = 0;
  const clock_t c0 = clock();
  while (clock() - c0 < CLOCKS_PER_SEC / 30)
    for (int i = 0; i < 100000; i++) x += sqrt((double)i);
  char *t = render(r);
  double rss = 0, start = 0, fds = 0, cpu = 0;
  const char *p;
  assert_non_null(p = strstr(t, "\nprocess_resident_memory_bytes "));
  rss = strtod(p + strlen("\nprocess_resident_memory_bytes "), NULL);
  assert_non_null(p = strstr(t, "\nprocess_start_time_seconds "));
  start = strtod(p + strlen("\nprocess_start_time_seconds "), NULL);
  assert_non_null(p = strstr(t, "\nprocess_open_fds "));
  fds = strtod(p + strlen("\nprocess_open_fds "), NULL);
  assert_non_null(p = strstr(t, "\nprocess_cpu_seconds_total "));
  cpu = strtod(p + strlen("\nprocess_cpu_seconds_total "), NULL);
  assert_true(rss > 1e6);                         /* a live process holds more than 1 MB */
  assert_true(start > 1.7e9 && start < 4e9);      /* seconds since the epoch, not ticks */
  assert_true(fds >= 3);                          /* stdin, stdout, stderr at least */
  assert_true(cpu > 0);
  free(t);
  llb_metrics_destroy(r);
}

static void test_bucket_helpers_follow_vllm(void **state) {
  (void)state;
  double b[32];
  int n = llb_metrics_buckets_1_2_5(1000, b, 32);
  assert_int_equal(n, 10);
  assert_true(b[0] == 1 && b[1] == 2 && b[2] == 5 && b[9] == 1000);
  int nt;
  const double *t = llb_metrics_buckets_ttft(&nt);
  assert_true(t[0] == 0.001 && t[nt - 1] == 2560.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counter_and_gauge_render_with_help_type_and_labels),
      cmocka_unit_test(test_histogram_buckets_are_cumulative_le_with_inf_sum_count),
      cmocka_unit_test(test_observe_n_counts_n_samples_of_one_value),
      cmocka_unit_test(test_a_long_constant_label_is_kept_whole),
      cmocka_unit_test(test_bad_names_labels_and_bounds_are_refused),
      cmocka_unit_test(test_label_values_beyond_the_bound_fold_into_other),
      cmocka_unit_test(test_updates_from_many_threads_are_not_lost),
      cmocka_unit_test(test_counter_set_mirrors_a_monotonic_source),
      cmocka_unit_test(test_process_metrics_are_read_from_proc),
      cmocka_unit_test(test_bucket_helpers_follow_vllm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
