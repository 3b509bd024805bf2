/* bus/jetstream against a real nats-server with JetStream: the requests stream and an
 * engine's durable consumer are created idempotently, a message stays until acknowledged
 * (an unacknowledged one comes back after ack_wait with the same stream sequence and a
 * higher delivery count, in-progress acks hold it back), and the stream survives a
 * nats-server restart on the same store. A publish that no stream takes yet is sent again until
 * one does (as during a cluster's leader election), and a retry with the same message id is
 * stored once. Without JetStream, or without the stream, the calls say so. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "bus/bus.h"
#include "bus/jetstream.h"
#include "tests/integration/nats_test_server.h"

#define ACK_WAIT_MS 400
#define SUBJECT "llm.engine.0.requests"

static struct nats_test_server srv;

static struct bus *connect_prefixed(const char *url, const char *prefix) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.prefix = prefix;
  o.reconnect_wait_min_ms = 20;
  o.reconnect_wait_max_ms = 200;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) fail_msg("bus_connect: %s", llb_err_last());
  return b;
}

static struct bus *connect_to(const char *url) { return connect_prefixed(url, NULL); }

static struct bus_js_pull *pull_for(struct bus *b) {
  const struct bus_js_pull_config c = {.engine_id = "0", .ack_wait_ms = ACK_WAIT_MS, .max_ack_pending = 64};
  struct bus_js_pull *p = NULL;
  if (bus_js_pull_create(b, &c, &p) != LLB_STATUS_OK) fail_msg("pull: %s", llb_err_last());
  return p;
}

static uint64_t publish(struct bus *b, const char *text) {
  const struct bus_out_msg m = {.subject = SUBJECT, .data = text, .len = strlen(text)};
  uint64_t seq = 0;
  if (bus_js_publish(b, &m, NULL, 5000, &seq) != LLB_STATUS_OK) fail_msg("publish: %s", llb_err_last());
  return seq;
}

/* Fetches until one message arrives or timeout_ms passes (fetch errors while the client
 * reconnects are retried). */
static struct bus_js_msg *fetch_one(struct bus_js_pull *p, int64_t timeout_ms) {
  int64_t deadline = llb_now_ns() + timeout_ms * 1000000;
  while (llb_now_ns() < deadline) {
    struct bus_js_msg *m = NULL;
    int32_t n = 0;
    if (bus_js_pull_fetch(p, 1, 100, &m, &n) == LLB_STATUS_OK && n == 1) return m;
    if (n == 0) {
      struct timespec ts = {0, 20 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static void test_stream_and_consumer_creation_is_idempotent(void **state) {
  (void)state;
  struct bus *b = connect_to(srv.url);
  for (int i = 0; i < 3; i++) assert_int_equal(bus_js_requests_stream_ensure(b, 0, 1, 5000), LLB_STATUS_OK);
  struct bus_js_pull *p1 = pull_for(b);
  bus_js_pull_destroy(p1);
  struct bus_js_pull *p2 = pull_for(b); /* the existing consumer, found again */
  uint64_t s1 = publish(b, "one"), s2 = publish(b, "two");
  assert_true(s2 == s1 + 1);
  struct bus_js_msg *m = fetch_one(p2, 5000);
  assert_non_null(m);
  assert_int_equal(m->stream_seq, s1);
  assert_int_equal(m->num_delivered, 1);
  assert_int_equal(m->msg.len, 3);
  assert_memory_equal(m->msg.data, "one", 3);
  assert_int_equal(bus_js_ack(b, m), LLB_STATUS_OK);
  bus_js_msg_destroy(m);
  m = fetch_one(p2, 5000);
  assert_non_null(m);
  assert_int_equal(m->stream_seq, s2);
  assert_int_equal(bus_js_ack(b, m), LLB_STATUS_OK);
  bus_js_msg_destroy(m);
  assert_null(fetch_one(p2, 2 * ACK_WAIT_MS)); /* acknowledged: gone for good */
  bus_js_pull_destroy(p2);
  bus_destroy(b);
}

static void test_unacknowledged_message_comes_back_after_ack_wait(void **state) {
  (void)state;
  struct bus *b = connect_to(srv.url);
  struct bus_js_pull *p = pull_for(b);
  uint64_t seq = publish(b, "again");
  struct bus_js_msg *m = fetch_one(p, 5000);
  assert_non_null(m);
  assert_int_equal(m->stream_seq, seq);
  bus_js_msg_destroy(m); /* dropped as a dead scheduler would */
  m = fetch_one(p, 10 * ACK_WAIT_MS);
  assert_non_null(m);
  assert_int_equal(m->stream_seq, seq); /* the same message, one delivery more */
  assert_int_equal(m->num_delivered, 2);
  assert_int_equal(bus_js_ack(b, m), LLB_STATUS_OK);
  bus_js_msg_destroy(m);
  bus_js_pull_destroy(p);
  bus_destroy(b);
}

static void test_in_progress_acks_hold_back_redelivery(void **state) {
  (void)state;
  struct bus *b = connect_to(srv.url);
  struct bus_js_pull *p = pull_for(b);
  uint64_t seq = publish(b, "long generation");
  struct bus_js_msg *m = fetch_one(p, 5000);
  assert_non_null(m);
  for (int i = 0; i < 12; i++) { /* 3 x ack_wait, kept alive every quarter of it */
    assert_int_equal(bus_js_in_progress(b, m), LLB_STATUS_OK);
    struct bus_js_msg *again = NULL;
    int32_t n = 0;
    assert_int_equal(bus_js_pull_fetch(p, 1, ACK_WAIT_MS / 4, &again, &n), LLB_STATUS_OK);
    assert_int_equal(n, 0);
  }
  assert_int_equal(m->stream_seq, seq);
  assert_int_equal(bus_js_ack(b, m), LLB_STATUS_OK);
  bus_js_msg_destroy(m);
  bus_js_pull_destroy(p);
  bus_destroy(b);
}

static void test_stream_survives_server_restart(void **state) {
  (void)state;
  struct bus *b = connect_to(srv.url);
  struct bus_js_pull *p = pull_for(b);
  uint64_t seq = publish(b, "kept on disk");
  assert_int_equal(nats_test_server_restart(&srv), 0); /* same port, same store */
  struct bus_js_msg *m = fetch_one(p, 20000);
  assert_non_null(m);
  assert_int_equal(m->stream_seq, seq);
  assert_memory_equal(m->msg.data, "kept on disk", 12);
  assert_int_equal(bus_js_ack(b, m), LLB_STATUS_OK);
  bus_js_msg_destroy(m);
  bus_js_pull_destroy(p);
  bus_destroy(b);
}

static void test_publish_that_no_stream_takes_fails_after_its_timeout(void **state) {
  (void)state;
  struct bus *b = connect_to(srv.url);
  const struct bus_out_msg m = {.subject = "other.engine.0.requests", .data = "x", .len = 1};
  int64_t t0 = llb_now_ns();
  assert_int_equal(bus_js_publish(b, &m, "x-1", 800, NULL), LLB_STATUS_NO_SERVER);
  assert_true(llb_now_ns() - t0 >= 750 * 1000000LL); /* retried for its whole timeout, not refused at once */
  assert_non_null(strstr(llb_err_last(), "no stream leader took other.engine.0.requests"));
  bus_destroy(b);
}

struct late_publish {
  struct bus *bus;
  llb_status st;
  uint64_t seq;
};

static void *publish_late(void *arg) {
  struct late_publish *lp = arg;
  const struct bus_out_msg m = {.subject = "late.engine.0.requests", .data = "late", .len = 4};
  lp->st = bus_js_publish(lp->bus, &m, "late-1", 10000, &lp->seq);
  return NULL;
}

/* As while a cluster elects the stream's leader: nobody takes the subject for a while. */
static void test_publish_waits_for_a_stream_to_take_it(void **state) {
  (void)state;
  struct late_publish lp = {.bus = connect_to(srv.url), .st = LLB_STATUS_INTERNAL};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, publish_late, &lp), 0);
  struct timespec ts = {0, 700 * 1000000};
  nanosleep(&ts, NULL);
  struct bus *late = connect_prefixed(srv.url, "late");
  assert_int_equal(bus_js_requests_stream_ensure(late, 0, 1, 5000), LLB_STATUS_OK);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(lp.st, LLB_STATUS_OK);
  assert_int_equal(lp.seq, 1);
  bus_destroy(late);
  bus_destroy(lp.bus);
}

static void test_retry_with_the_same_message_id_is_stored_once(void **state) {
  (void)state;
  struct bus *b = connect_to(srv.url);
  struct bus_js_pull *p = pull_for(b);
  const struct bus_out_msg m = {.subject = SUBJECT, .data = "once", .len = 4};
  uint64_t s1 = 0, s2 = 0, s3 = 0;
  assert_int_equal(bus_js_publish(b, &m, "req-a@0", 5000, &s1), LLB_STATUS_OK);
  assert_int_equal(bus_js_publish(b, &m, "req-a@0", 5000, &s2), LLB_STATUS_OK); /* a retry */
  assert_int_equal(s2, s1);
  assert_int_equal(bus_js_publish(b, &m, "req-b@0", 5000, &s3), LLB_STATUS_OK); /* another request */
  assert_int_equal(s3, s1 + 1);
  for (uint64_t want = s1; want <= s3; want += s3 - s1) {
    struct bus_js_msg *got = fetch_one(p, 5000);
    assert_non_null(got);
    assert_int_equal(got->stream_seq, want);
    assert_int_equal(bus_js_ack(b, got), LLB_STATUS_OK);
    bus_js_msg_destroy(got);
  }
  assert_null(fetch_one(p, 2 * ACK_WAIT_MS));
  bus_js_pull_destroy(p);
  bus_destroy(b);
}

/* A single server cannot hold 3 replicas: the stream is made (or kept) with one, not refused. */
static void test_stream_with_more_replicas_than_servers_is_kept_not_refused(void **state) {
  (void)state;
  struct bus *b = connect_prefixed(srv.url, "rep");
  assert_int_equal(bus_js_requests_stream_ensure(b, 0, 3, 5000), LLB_STATUS_OK); /* created with 1 */
  assert_int_equal(bus_js_requests_stream_ensure(b, 0, 3, 5000), LLB_STATUS_OK); /* exists with 1 */
  assert_int_equal(bus_js_requests_stream_ensure(b, 0, 1, 5000), LLB_STATUS_OK);
  const struct bus_out_msg m = {.subject = "rep.engine.0.requests", .data = "r", .len = 1};
  assert_int_equal(bus_js_publish(b, &m, NULL, 5000, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_js_requests_stream_ensure(b, 0, 0, 5000), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_js_requests_stream_ensure(b, 0, BUS_JS_MAX_REPLICAS + 1, 5000), LLB_STATUS_INVALID_ARGUMENT);
  bus_destroy(b);
}

static void test_server_without_jetstream_is_named(void **state) {
  (void)state;
  struct nats_test_server plain;
  assert_int_equal(nats_test_server_start(&plain, 0, false), 0);
  struct bus *b = connect_to(plain.url);
  assert_int_equal(bus_js_requests_stream_ensure(b, 0, 1, 500), LLB_STATUS_NOT_FOUND);
  assert_non_null(strstr(llb_err_last(), "-js"));
  bus_destroy(b);
  nats_test_server_stop(&plain);
}

static void test_stream_name_follows_the_prefix(void **state) {
  (void)state;
  char name[BUS_JS_NAME_MAX];
  assert_int_equal(bus_js_requests_stream_name("acme.llm", name, sizeof name), LLB_STATUS_OK);
  assert_string_equal(name, "ACME_LLM_REQUESTS");
  assert_int_equal(bus_js_requests_stream_name("bad prefix", name, sizeof name), LLB_STATUS_INVALID_ARGUMENT);
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
      cmocka_unit_test(test_stream_name_follows_the_prefix),
      cmocka_unit_test(test_stream_and_consumer_creation_is_idempotent),
      cmocka_unit_test(test_unacknowledged_message_comes_back_after_ack_wait),
      cmocka_unit_test(test_in_progress_acks_hold_back_redelivery),
      cmocka_unit_test(test_stream_survives_server_restart),
      cmocka_unit_test(test_publish_that_no_stream_takes_fails_after_its_timeout),
      cmocka_unit_test(test_publish_waits_for_a_stream_to_take_it),
      cmocka_unit_test(test_retry_with_the_same_message_id_is_stored_once),
      cmocka_unit_test(test_stream_with_more_replicas_than_servers_is_kept_not_refused),
      cmocka_unit_test(test_server_without_jetstream_is_named),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  (void)bus_shutdown(5000);
  return rc;
}
