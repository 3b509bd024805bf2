/* base/metrics_merge: every actor's Prometheus text on the api server's one /metrics page. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics_merge.h"

/* The api server's own series (process, bus) and its view of the engine (HTTP requests), as the
 * api server registers them: two registries. */
struct registries {
  struct llb_metrics *own, *view;
};

static int setup(void **state) {
  struct registries *g = calloc(1, sizeof *g);
  assert_int_equal(llb_metrics_create(&g->own), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_add_const_label(g->own, "engine", "0"), LLB_STATUS_OK);
  llb_series_set(llb_metric_series(llb_metrics_gauge(g->own, "process_open_fds", "Open file descriptors.", 0, NULL), NULL), 12);
  assert_int_equal(llb_metrics_create(&g->view), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_add_const_label(g->view, "model_name", "smol"), LLB_STATUS_OK);
  static const char *const engine[] = {"engine"}, *const status[] = {"status"};
  static const char *const e0[] = {"0"}, *const s400[] = {"400"};
  llb_series_set(llb_metric_series(llb_metrics_gauge(g->view, "llmbus:num_requests_waiting",
                                                     "Requests waiting in the engine's queue.", 1, engine), e0), 2);
  llb_series_add(llb_metric_series(llb_metrics_counter(g->view, "llmbus:request_errors_total",
                                                       "Failed requests by HTTP status.", 1, status), s400), 3);
  *state = g;
  return 0;
}

static int teardown(void **state) {
  struct registries *g = *state;
  llb_metrics_destroy(g->own);
  llb_metrics_destroy(g->view);
  free(g);
  return 0;
}

static const char scheduler[] =
    "# HELP llmbus:num_requests_waiting Requests queued.\n"
    "# TYPE llmbus:num_requests_waiting gauge\n"
    "llmbus:num_requests_waiting{engine=\"0\"} 2\n"
    "# HELP process_open_fds Open file descriptors.\n"
    "# TYPE process_open_fds gauge\n"
    "process_open_fds{engine=\"0\"} 30\n"
    "# HELP llmbus:iteration_tokens_total Tokens per step.\n"
    "# TYPE llmbus:iteration_tokens_total histogram\n"
    "llmbus:iteration_tokens_total_bucket{engine=\"0\",le=\"1\"} 4\n"
    "llmbus:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\"} 9\n"
    "llmbus:iteration_tokens_total_sum{engine=\"0\"} 77\n"
    "llmbus:iteration_tokens_total_count{engine=\"0\"} 9\n";

/* Not inlined: gcc's -Wdangling-pointer misreads the returned text inlined into a caller. */
static __attribute__((noinline)) char *render(struct llb_metrics_merge *m, void **state, int64_t now_ns) {
  const struct registries *g = *state;
  char *text;
  size_t len;
  assert_int_equal(llb_metrics_merge_render(m, g->own, g->view, now_ns, &text, &len), LLB_STATUS_OK);
  assert_int_equal(strlen(text), len);
  return text;
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static void test_one_family_one_help_and_type_and_every_actors_samples_labelled(void **state) {
  struct llb_metrics_merge *m;
  assert_int_equal(llb_metrics_merge_create(10000, &m), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_merge_put(m, "scheduler", "host-1", scheduler, strlen(scheduler), 1000), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_merge_put(m, "input_processor", "host-2", scheduler, strlen(scheduler), 1000), LLB_STATUS_OK);
  char *text = render(m, state, 2000);
  assert_int_equal(count(text, "# TYPE process_open_fds gauge\n"), 1); /* families merged, not repeated */
  assert_int_equal(count(text, "# HELP process_open_fds"), 1);
  assert_non_null(strstr(text, "process_open_fds{engine=\"0\"} 12\n")); /* ours as they are */
  assert_non_null(strstr(text, "process_open_fds{actor=\"scheduler\",actor_instance=\"host-1\",engine=\"0\"} 30\n"));
  assert_non_null(
      strstr(text, "llmbus:iteration_tokens_total_bucket{actor=\"input_processor\",actor_instance=\"host-2\",engine=\"0\","
                   "le=\"+Inf\"} 9\n"));
  /* the samples of a family stay together: ours, then the scheduler's, under the one TYPE */
  const char *type = strstr(text, "# TYPE process_open_fds");
  const char *next = strstr(type + 1, "# ");
  assert_non_null(strstr(type, "actor=\"scheduler\""));
  assert_true(strstr(type, "actor=\"scheduler\"") < next);
  assert_int_equal(llb_metrics_merge_dropped(m), 0);
  free(text);
  llb_metrics_merge_destroy(m);
}

/* A family the engine's actors publish is theirs: the api server's view of it (its HTTP requests,
 * its copy of the stats) would count requests twice in a sum over the scrape. What only the api
 * server knows (errors by HTTP status) stays, and with no actor's text the view is all there is. */
static void test_the_engines_series_replace_the_api_servers_view_of_them(void **state) {
  struct llb_metrics_merge *m;
  assert_int_equal(llb_metrics_merge_create(1000, &m), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_merge_put(m, "scheduler", "h", scheduler, strlen(scheduler), 0), LLB_STATUS_OK);
  char *text = render(m, state, 1);
  assert_int_equal(count(text, "llmbus:num_requests_waiting{"), 1);
  assert_non_null(strstr(text, "llmbus:num_requests_waiting{actor=\"scheduler\",actor_instance=\"h\",engine=\"0\"} 2\n"));
  assert_null(strstr(text, "model_name=\"smol\",engine"));
  assert_non_null(strstr(text, "llmbus:request_errors_total{model_name=\"smol\",status=\"400\"} 3\n"));
  assert_int_equal(llb_metrics_merge_dropped(m), 0); /* yielding is not dropping */
  free(text);
  text = render(m, state, 5000000000LL); /* the scheduler's text is past the window */
  assert_non_null(strstr(text, "llmbus:num_requests_waiting{model_name=\"smol\",engine=\"0\"} 2\n"));
  free(text);
  llb_metrics_merge_destroy(m);
}

static void test_a_text_not_refreshed_within_the_window_is_forgotten(void **state) {
  struct llb_metrics_merge *m;
  assert_int_equal(llb_metrics_merge_create(1000, &m), LLB_STATUS_OK); /* 1 s */
  assert_int_equal(llb_metrics_merge_put(m, "scheduler", "h", scheduler, strlen(scheduler), 0), LLB_STATUS_OK);
  char *text = render(m, state, 500000000LL);
  assert_non_null(strstr(text, "actor=\"scheduler\""));
  free(text);
  text = render(m, state, 2000000000LL);
  assert_null(strstr(text, "actor=\"scheduler\""));
  assert_null(strstr(text, "llmbus:iteration_tokens_total")); /* a family with no sample is not written */
  free(text);
  llb_metrics_merge_destroy(m);
}

static void test_hostile_lines_are_dropped_and_the_rest_kept(void **state) {
  static const char bad[] =
      "# TYPE process_open_fds counter\n"          /* not the gauge we said: its samples go */
      "process_open_fds{engine=\"0\"} 1\n"
      "# TYPE good gauge\n"
      "good{engine=\"0\"} 5\n"
      "good{actor=\"forged\"} 6\n"                 /* would clash with the label we add */
      "good{engine=\"0\" 7\n"                      /* unterminated label set */
      "good{engine=\"0\"} seven\n"                 /* not a number */
      "other_family 8\n"                           /* not of the family its TYPE named */
      "good{engine=\"0\",x=\"a\\\"b\"} 9 1700000000000\n" /* escapes and a timestamp: fine */
      "# TYPE weird nonsense\n"
      "weird 1\n";
  struct llb_metrics_merge *m;
  assert_int_equal(llb_metrics_merge_create(10000, &m), LLB_STATUS_OK);
  assert_int_equal(llb_metrics_merge_put(m, "kv_manager", "h", bad, strlen(bad), 0), LLB_STATUS_OK);
  char *text = render(m, state, 1);
  assert_non_null(strstr(text, "# TYPE good gauge\n"));
  assert_non_null(strstr(text, "good{actor=\"kv_manager\",actor_instance=\"h\",engine=\"0\"} 5\n"));
  assert_non_null(strstr(text, "good{actor=\"kv_manager\",actor_instance=\"h\",engine=\"0\",x=\"a\\\"b\"} 9 1700000000000\n"));
  assert_null(strstr(text, "forged"));
  assert_null(strstr(text, "seven"));
  assert_null(strstr(text, "other_family"));
  assert_null(strstr(text, "weird"));
  assert_int_equal(count(text, "process_open_fds{"), 1); /* only ours */
  assert_true(llb_metrics_merge_dropped(m) >= 6);
  free(text);
  /* names that are no plain tokens, and texts over the bound, are refused at the door */
  assert_int_equal(llb_metrics_merge_put(m, "kv\"manager", "h", "x", 1, 0), LLB_STATUS_INVALID_ARGUMENT);
  char *big = calloc(LLB_METRICS_MERGE_MAX_TEXT + 1, 1);
  assert_int_equal(llb_metrics_merge_put(m, "kv_manager", "h", big, LLB_METRICS_MERGE_MAX_TEXT + 1, 0), LLB_STATUS_TOO_LARGE);
  free(big);
  llb_metrics_merge_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_one_family_one_help_and_type_and_every_actors_samples_labelled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_the_engines_series_replace_the_api_servers_view_of_them, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_text_not_refreshed_within_the_window_is_forgotten, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_lines_are_dropped_and_the_rest_kept, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
