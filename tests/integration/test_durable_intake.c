/* The scheduler's durable intake (actors/scheduler/durable_intake.h) against a real
 * nats-server with JetStream: a consumer that stops delivering while requests wait for the
 * engine (here: its pull subscription unsubscribed under it, BUS_JS_FAULT_DEAF_ENV) is found
 * by the stall watch and subscribed again, so the waiting request arrives; an idle consumer, and
 * one that delivers nothing because the intake holds max_ack_pending requests, are not taken
 * for stalled. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/scheduler/durable_intake.h"
#include "base/log.h"
#include "bus/bus.h"
#include "bus/jetstream.h"
#include "bus/subject.h"
#include "tests/integration/nats_test_server.h"

#define ACK_WAIT_MS 400
#define STALL_MS 500
#define MAX_SEQS 16

static struct nats_test_server srv;

struct delivered {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t seqs[MAX_SEQS];
  int n;
};

static bool on_deliver(void *user, const struct bus_msg *msg, uint64_t stream_seq, bool replayed, const char *refuse) {
  (void)msg;
  (void)replayed;
  (void)refuse;
  struct delivered *d = user;
  pthread_mutex_lock(&d->mu);
  if (d->n < MAX_SEQS) d->seqs[d->n++] = stream_seq;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return true;
}

/* Waits (up to timeout_ms) until at least n deliveries; returns how many there are. */
static int wait_delivered(struct delivered *d, int n, int64_t timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (timeout_ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&d->mu);
  while (d->n < n && pthread_cond_timedwait(&d->cv, &d->mu, &ts) == 0) {
  }
  const int got = d->n;
  pthread_mutex_unlock(&d->mu);
  return got;
}

static struct bus *connect_bus(void) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) fail_msg("bus_connect: %s", llb_err_last());
  return b;
}

static struct durable_intake *start_intake(struct bus *b, const char *eid, int32_t max_ack_pending,
                                           struct delivered *d) {
  const struct durable_intake_config c = {.bus = b, .prefix = "llm", .engine_id = eid, .ack_wait_ms = ACK_WAIT_MS,
                                          .max_ack_pending = max_ack_pending, .stall_ms = STALL_MS,
                                          .deliver = on_deliver, .user = d};
  struct durable_intake *in = NULL;
  if (durable_intake_start(&c, &in) != LLB_STATUS_OK) fail_msg("durable_intake_start: %s", llb_err_last());
  return in;
}

static uint64_t publish(struct bus *b, const char *eid, const char *text) {
  char subject[BUS_SUBJECT_MAX];
  if (bus_subject_engine("llm", eid, "requests", subject, sizeof subject) != LLB_STATUS_OK) fail_msg("subject");
  const struct bus_out_msg m = {.subject = subject, .data = text, .len = strlen(text)};
  uint64_t seq = 0;
  if (bus_js_publish(b, &m, NULL, 5000, &seq) != LLB_STATUS_OK) fail_msg("publish: %s", llb_err_last());
  return seq;
}

static uint64_t stalls(struct durable_intake *in) {
  struct durable_intake_counters c;
  durable_intake_get_counters(in, &c);
  return c.stalls;
}

/* Runs first: the fault hook goes to the process's first pull. */
static void test_stalled_consumer_is_subscribed_again_and_the_waiting_request_arrives(void **state) {
  (void)state;
  setenv(BUS_JS_FAULT_DEAF_ENV, "1", 1); /* deaf after the first message */
  struct bus *b = connect_bus();
  struct delivered d = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  struct durable_intake *in = start_intake(b, "0", 64, &d);
  unsetenv(BUS_JS_FAULT_DEAF_ENV);
  const uint64_t s1 = publish(b, "0", "one");
  assert_int_equal(wait_delivered(&d, 1, 10000), 1);
  assert_int_equal(d.seqs[0], s1);
  durable_intake_done(in, s1);
  assert_int_equal(stalls(in), 0);
  /* the subscription is deaf now: the request waits in the stream, undelivered */
  const uint64_t s2 = publish(b, "0", "two");
  assert_int_equal(wait_delivered(&d, 2, 30000), 2); /* without the stall watch it never comes */
  assert_int_equal(d.seqs[1], s2);
  assert_int_equal(stalls(in), 1);
  durable_intake_done(in, s2);
  const uint64_t s3 = publish(b, "0", "three"); /* the new subscription keeps delivering */
  assert_int_equal(wait_delivered(&d, 3, 10000), 3);
  assert_int_equal(d.seqs[2], s3);
  durable_intake_done(in, s3);
  durable_intake_destroy(in);
  bus_destroy(b);
}

static void test_idle_or_full_consumer_is_not_taken_for_stalled(void **state) {
  (void)state;
  struct bus *b = connect_bus();
  struct delivered d = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  struct durable_intake *in = start_intake(b, "1", 2, &d);
  /* idle for several stall windows */
  assert_int_equal(wait_delivered(&d, 1, 4 * STALL_MS), 0);
  assert_int_equal(stalls(in), 0);
  /* two requests held (max_ack_pending), a third waiting for one of them to finish */
  const uint64_t s1 = publish(b, "1", "a"), s2 = publish(b, "1", "b"), s3 = publish(b, "1", "c");
  assert_int_equal(wait_delivered(&d, 2, 10000), 2);
  assert_int_equal(wait_delivered(&d, 3, 4 * STALL_MS), 2);
  assert_int_equal(stalls(in), 0);
  assert_int_equal(d.seqs[0], s1);
  assert_int_equal(d.seqs[1], s2);
  durable_intake_done(in, s1);
  assert_int_equal(wait_delivered(&d, 3, 10000), 3);
  assert_int_equal(d.seqs[2], s3);
  assert_int_equal(stalls(in), 0);
  durable_intake_done(in, s2);
  durable_intake_done(in, s3);
  durable_intake_destroy(in);
  bus_destroy(b);
}

static int setup(void **state) {
  (void)state;
  return nats_test_server_start(&srv, 0, true) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  nats_test_server_stop(&srv);
  return 0;
}

int main(void) {
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stalled_consumer_is_subscribed_again_and_the_waiting_request_arrives),
      cmocka_unit_test(test_idle_or_full_consumer_is_not_taken_for_stalled),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  (void)bus_shutdown(5000);
  return rc;
}
