/* The scheduler's failure detection (actors/scheduler/peer_health.h) against a real nats-server:
 * a worker replaced before the scheduler ever saw one of its periodic beats.
 *
 * Found by chaos_pd_short: the scheduler and then the worker of one engine SIGKILLed ~0.2 s
 * apart. The new scheduler took its KV geometry from the old worker's beat, sent its first step
 * to it, and the old worker died before its next beat: the successor's first beat then looked
 * like the first worker ever seen, nothing was taken as a failure, and the step waited the
 * 60 s execute timeout (requests answered 503). The watch now starts from the beat the geometry
 * came from (peer_health_config.worker_seen). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "actors/scheduler/peer_health.h"
#include <time.h>
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core machine */
#define HEARTBEAT_MS 200

static struct nats_test_server srv;

static struct bus *connect_or_fail(const char *name) {
  return nats_test_connect(srv.url, name, "llm");
}

/* One beat of engine e0's `actor`, as that actor publishes it. */
static void publish_beat(struct bus *b, const char *actor, const char *instance, int32_t pid, uint64_t seq) {
  const struct llb_heartbeat hb = {.actor = llb_str_c(actor), .instance = llb_str_c(instance),
                                   .pid = pid, .seq = seq, .ready = true, .engine_id = llb_str_c("e0"),
                                   .num_gpu_blocks = 64, .block_size = 16};
  uint8_t buf[1024];
  size_t len = 0;
  assert_int_equal(llb_heartbeat_encode(&hb, buf, sizeof buf, &len), LLB_STATUS_OK);
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_engine_health("llm", "e0", actor, subject, sizeof subject), LLB_STATUS_OK);
  assert_int_equal(bus_publish(b, subject, buf, len, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(b, WAIT_MS), LLB_STATUS_OK);
}

static void publish_worker_beat(struct bus *b, const char *instance, int32_t pid, uint64_t seq) {
  publish_beat(b, "gpu_worker", instance, pid, seq);
}

struct fixture {
  struct bus *sched, *worker;
  struct peer_health *h;
};

static void create_health(struct fixture *f, const struct peer_beat *seen) {
  f->sched = connect_or_fail("scheduler");
  f->worker = connect_or_fail("worker");
  const struct peer_health_config c = {.bus = f->sched, .prefix = "llm", .engine_id = "e0",
                                       .heartbeat_ms = HEARTBEAT_MS, .missed_beats = 1000, .worker_seen = seen};
  assert_int_equal(peer_health_create(&c, &f->h), LLB_STATUS_OK);
  assert_int_equal(bus_flush(f->sched, WAIT_MS), LLB_STATUS_OK); /* subscribed before the beats */
}

static void destroy_health(struct fixture *f) {
  bus_destroy(f->worker);
  bus_destroy(f->sched);
  peer_health_destroy(f->h);
}

/* Takes a failure within WAIT_MS; its text in what. */
static bool take_within(struct peer_health *h, char *what, size_t cap, int64_t wait_ms) {
  const int64_t end = llb_now_ns() + wait_ms * 1000000;
  do {
    if (peer_health_take(h, what, cap)) return true;
    nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
  } while (llb_now_ns() < end);
  return false;
}

static void test_a_worker_replaced_before_its_next_beat_is_a_failure(void **state) {
  (void)state;
  struct fixture f;
  const struct peer_beat seen = {.instance = "host-100", .pid = 100, .seq = 7, .ready = true};
  create_health(&f, &seen);
  publish_worker_beat(f.worker, "host-200", 200, 1); /* the successor's first beat */
  char what[384] = "";
  assert_true(take_within(f.h, what, sizeof what, WAIT_MS));
  assert_non_null(strstr(what, "host-100 (pid 100) replaced by host-200 (pid 200)"));
  uint64_t failures = 0, recoveries = 0;
  peer_health_counters(f.h, &failures, &recoveries);
  assert_int_equal(failures, 1);
  destroy_health(&f);
}

static void test_the_same_worker_beating_on_is_no_failure(void **state) {
  (void)state;
  struct fixture f;
  const struct peer_beat seen = {.instance = "host-100", .pid = 100, .seq = 7, .ready = true};
  create_health(&f, &seen);
  publish_worker_beat(f.worker, "host-100", 100, 8);
  publish_worker_beat(f.worker, "host-200", 200, 1); /* then a forged or real other instance: */
  char what[384] = "";
  assert_true(take_within(f.h, what, sizeof what, WAIT_MS)); /* the beat of 100 went through first */
  assert_non_null(strstr(what, "replaced by host-200"));
  assert_false(take_within(f.h, what, sizeof what, 3 * HEARTBEAT_MS)); /* one failure, taken once */
  destroy_health(&f);
}

static void test_without_a_seen_worker_the_first_beat_is_the_first_worker(void **state) {
  (void)state;
  struct fixture f;
  create_health(&f, NULL);
  publish_worker_beat(f.worker, "host-200", 200, 1);
  publish_worker_beat(f.worker, "host-200", 200, 2);
  char what[384] = "";
  assert_false(take_within(f.h, what, sizeof what, 3 * HEARTBEAT_MS));
  destroy_health(&f);
}

/* Which peers failed decides whether exports survive (the scheduler's kv_only): a kv_manager
 * replaced alone is kv-only; a worker replaced in the same take is not, whichever failure the
 * take's text names (it names only the last). */
static void test_a_take_says_whether_only_the_kv_manager_failed(void **state) {
  (void)state;
  struct fixture f;
  const struct peer_beat seen = {.instance = "host-100", .pid = 100, .seq = 7, .ready = true};
  create_health(&f, &seen);
  publish_beat(f.worker, "kv_manager", "kv-1", 300, 1); /* first kv_manager seen */
  char what[384] = "";
  assert_false(take_within(f.h, what, sizeof what, 3 * HEARTBEAT_MS));
  publish_beat(f.worker, "kv_manager", "kv-2", 301, 1);
  assert_true(take_within(f.h, what, sizeof what, WAIT_MS));
  assert_non_null(strstr(what, "kv_manager kv-1"));
  assert_true(peer_health_taken_kv_only(f.h));
  /* both in one take: the worker and (one interval later, as replacements are rate limited)
   * the kv_manager, which the text then names */
  publish_worker_beat(f.worker, "host-200", 200, 1);
  nanosleep(&(struct timespec){.tv_nsec = (HEARTBEAT_MS + 50) * 1000000L}, NULL);
  publish_beat(f.worker, "kv_manager", "kv-3", 302, 1);
  nanosleep(&(struct timespec){.tv_nsec = 100 * 1000000L}, NULL);
  assert_true(take_within(f.h, what, sizeof what, WAIT_MS));
  assert_false(peer_health_taken_kv_only(f.h));
  destroy_health(&f);
}

static int start_server(void **state) {
  (void)state;
  return nats_test_server_start(&srv, 0, false);
}

static int stop_server(void **state) {
  (void)state;
  nats_test_server_stop(&srv);
  return 0;
}

int main(void) {
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary (ops/install-deps.sh installs it)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_worker_replaced_before_its_next_beat_is_a_failure),
      cmocka_unit_test(test_the_same_worker_beating_on_is_no_failure),
      cmocka_unit_test(test_without_a_seen_worker_the_first_beat_is_the_first_worker),
      cmocka_unit_test(test_a_take_says_whether_only_the_kv_manager_failed),
  };
  return cmocka_run_group_tests(tests, start_server, stop_server);
}
