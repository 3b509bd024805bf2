/* bus/peer_watch: heartbeat observations of one engine peer -> replaced / missing / fine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "bus/peer_watch.h"

#define MS 1000000LL
#define INTERVAL_MS 500

static struct peer_watch *make_watch(void) {
  struct peer_watch_config c = {.interval_ms = INTERVAL_MS, .max_missed_beats = 3};
  struct peer_watch *w = NULL;
  assert_int_equal(peer_watch_create(&c, &w), LLB_STATUS_OK);
  return w;
}

static enum peer_watch_verdict beat(struct peer_watch *w, const char *inst, int32_t pid, uint64_t seq,
                                    int64_t now_ms) {
  struct peer_beat b = {.instance = inst, .pid = pid, .seq = seq, .ready = true};
  return peer_watch_observe(w, &b, now_ms * MS);
}

static void test_steady_beats_of_one_instance_are_fine(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  assert_int_equal(beat(w, "h-10", 10, 0, 0), PEER_WATCH_VERDICT_FIRST);
  for (uint64_t i = 1; i < 20; i++) {
    assert_int_equal(beat(w, "h-10", 10, i, (int64_t)i * INTERVAL_MS), PEER_WATCH_VERDICT_FINE);
    assert_int_equal(peer_watch_check(w, (int64_t)i * INTERVAL_MS * MS + 1400 * MS), PEER_WATCH_VERDICT_FINE);
  }
  peer_watch_destroy(w);
}

static void test_new_pid_or_instance_is_reported_replaced_once(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  assert_int_equal(beat(w, "h-10", 10, 0, 0), PEER_WATCH_VERDICT_FIRST);
  assert_int_equal(beat(w, "h-11", 11, 0, 200), PEER_WATCH_VERDICT_REPLACED);
  struct peer_watch_view v;
  peer_watch_get(w, &v);
  assert_string_equal(v.instance, "h-11");
  assert_string_equal(v.prev_instance, "h-10");
  assert_int_equal(v.prev_pid, 10);
  assert_int_equal(beat(w, "h-11", 11, 1, 700), PEER_WATCH_VERDICT_FINE);
  /* same instance id, new pid (an explicit --instance kept across a restart) */
  assert_int_equal(beat(w, "h-11", 12, 0, 900), PEER_WATCH_VERDICT_REPLACED);
  peer_watch_destroy(w);
}

static void test_beats_of_the_replaced_instance_do_not_flap(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  beat(w, "old", 10, 5, 0);
  assert_int_equal(beat(w, "new", 11, 0, 100), PEER_WATCH_VERDICT_REPLACED);
  assert_int_equal(beat(w, "old", 10, 6, 200), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, "new", 11, 1, 600), PEER_WATCH_VERDICT_FINE);
  peer_watch_destroy(w);
}

static void test_replacements_are_reported_at_most_once_per_interval(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  beat(w, "a", 10, 0, 0);
  assert_int_equal(beat(w, "b", 11, 0, 1000), PEER_WATCH_VERDICT_REPLACED);
  /* forged (or flapping) instances right after: refused, the watched one stays "b" */
  assert_int_equal(beat(w, "c", 12, 0, 1100), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, "d", 13, 0, 1499), PEER_WATCH_VERDICT_IGNORED);
  struct peer_watch_view v;
  peer_watch_get(w, &v);
  assert_string_equal(v.instance, "b");
  /* a real new instance keeps beating and is reported one interval later */
  assert_int_equal(beat(w, "c", 12, 1, 1500), PEER_WATCH_VERDICT_REPLACED);
  peer_watch_destroy(w);
}

static void test_silence_beyond_the_missed_beats_is_missing_once_then_back(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  beat(w, "a", 10, 0, 0);
  assert_int_equal(peer_watch_next_check_ns(w), 3 * INTERVAL_MS * MS + 1);
  assert_int_equal(peer_watch_check(w, 3 * INTERVAL_MS * MS), PEER_WATCH_VERDICT_FINE);
  assert_int_equal(peer_watch_check(w, 3 * INTERVAL_MS * MS + 1), PEER_WATCH_VERDICT_MISSING);
  assert_int_equal(peer_watch_check(w, 10000 * MS), PEER_WATCH_VERDICT_FINE);
  assert_int_equal(peer_watch_next_check_ns(w), INT64_MAX);
  struct peer_watch_view v;
  peer_watch_get(w, &v);
  assert_true(v.missing);
  assert_int_equal(beat(w, "a", 10, 1, 10000), PEER_WATCH_VERDICT_BACK);
  peer_watch_get(w, &v);
  assert_false(v.missing);
  assert_int_equal(peer_watch_check(w, 10000 * MS + 1000 * MS), PEER_WATCH_VERDICT_FINE);
  peer_watch_destroy(w);
}

static void test_a_peer_never_seen_is_not_missing(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  assert_int_equal(peer_watch_check(w, 1000000 * MS), PEER_WATCH_VERDICT_FINE);
  assert_int_equal(peer_watch_next_check_ns(w), INT64_MAX);
  peer_watch_destroy(w);
}

static void test_replayed_or_malformed_beats_are_ignored(void **state) {
  (void)state;
  struct peer_watch *w = make_watch();
  char long_id[PEER_WATCH_INSTANCE_MAX + 2];
  memset(long_id, 'x', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = '\0';
  assert_int_equal(beat(w, "", 10, 0, 0), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, long_id, 10, 0, 0), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, "a", 0, 0, 0), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, "a", -5, 0, 0), PEER_WATCH_VERDICT_IGNORED);
  struct peer_beat nul = {.instance = NULL, .pid = 1};
  assert_int_equal(peer_watch_observe(w, &nul, 0), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, "a", 10, 7, 0), PEER_WATCH_VERDICT_FIRST);
  /* a replayed beat must not keep a silent peer alive */
  assert_int_equal(beat(w, "a", 10, 7, 1400), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(beat(w, "a", 10, 3, 1400), PEER_WATCH_VERDICT_IGNORED);
  assert_int_equal(peer_watch_check(w, 1501 * MS), PEER_WATCH_VERDICT_MISSING);
  peer_watch_destroy(w);
}

static void test_bad_configs_are_refused(void **state) {
  (void)state;
  struct peer_watch *w = NULL;
  struct peer_watch_config c = {.interval_ms = 0, .max_missed_beats = 3};
  assert_int_equal(peer_watch_create(&c, &w), LLB_STATUS_INVALID_ARGUMENT);
  c = (struct peer_watch_config){.interval_ms = 500, .max_missed_beats = 0};
  assert_int_equal(peer_watch_create(&c, &w), LLB_STATUS_INVALID_ARGUMENT);
  c = (struct peer_watch_config){.interval_ms = INT64_MAX / 2, .max_missed_beats = 3};
  assert_int_equal(peer_watch_create(&c, &w), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(w);
  peer_watch_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steady_beats_of_one_instance_are_fine),
      cmocka_unit_test(test_new_pid_or_instance_is_reported_replaced_once),
      cmocka_unit_test(test_beats_of_the_replaced_instance_do_not_flap),
      cmocka_unit_test(test_replacements_are_reported_at_most_once_per_interval),
      cmocka_unit_test(test_silence_beyond_the_missed_beats_is_missing_once_then_back),
      cmocka_unit_test(test_a_peer_never_seen_is_not_missing),
      cmocka_unit_test(test_replayed_or_malformed_beats_are_ignored),
      cmocka_unit_test(test_bad_configs_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
