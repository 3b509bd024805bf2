/* bus/ against a real nats-server: request/reply, queue groups, trace headers, streamed
 * replies, heartbeats, size limits, no server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "bus/bus.h"
#include "base/log.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core machine */

static struct nats_test_server srv;

static struct bus *connect_or_fail(const char *name) {
  return nats_test_connect(srv.url, name, NULL);
}

/* A counter with a condition to wait on. */
struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int count;
};

static void waiter_init(struct waiter *w) {
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->count = 0;
}

static void waiter_add(struct waiter *w) {
  pthread_mutex_lock(&w->mu);
  w->count++;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static bool waiter_wait(struct waiter *w, int target, int timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  pthread_mutex_lock(&w->mu);
  while (w->count < target)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != 0) break;
  bool ok = w->count >= target;
  pthread_mutex_unlock(&w->mu);
  return ok;
}

/* ---- request / reply ---- */

static void echo_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)user;
  char out[256];
  int n = snprintf(out, sizeof out, "echo:%.*s", (int)m->len, (const char *)m->data);
  assert_int_equal(bus_respond(b, m, out, (size_t)n, NULL), LLB_STATUS_OK);
}

static void test_request_reply_round_trip(void **state) {
  (void)state;
  struct bus *resp = connect_or_fail("responder");
  struct bus *req = connect_or_fail("requester");
  assert_int_equal(bus_subscribe(resp, "llm.test.echo", NULL, echo_handler, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(resp, WAIT_MS), LLB_STATUS_OK);
  struct bus_msg *r = NULL;
  assert_int_equal(bus_request(req, "llm.test.echo", "hi", 2, NULL, WAIT_MS, &r), LLB_STATUS_OK);
  assert_int_equal(r->len, 7);
  assert_memory_equal(r->data, "echo:hi", 7);
  bus_msg_destroy(r);

  /* Round-trip latency (informative: sanitizers and a loaded machine make it noisy). */
  int n = 200;
  int64_t t0 = llb_now_ns();
  for (int i = 0; i < n; i++) {
    assert_int_equal(bus_request(req, "llm.test.echo", "x", 1, NULL, WAIT_MS, &r), LLB_STATUS_OK);
    bus_msg_destroy(r);
  }
  double us = (double)(llb_now_ns() - t0) / 1000.0 / n;
  fprintf(stderr, "request/reply round trip: %.1f us mean over %d\n", us, n);

  /* Nobody listens: a clear error, not a long timeout. */
  llb_status st = bus_request(req, "llm.test.nobody", "x", 1, NULL, WAIT_MS, &r);
  assert_int_equal(st, LLB_STATUS_NOT_FOUND);
  assert_non_null(strstr(llb_err_last(), "llm.test.nobody"));
  bus_destroy(req);
  bus_destroy(resp);
}

/* ---- subscriptions delivered on the loop thread ---- */

/* The loop thread's id, from a heartbeat callback (which runs there). */
struct loop_probe {
  pthread_t loop;
  atomic_bool loop_known;
  struct waiter got;
  _Atomic int next;        /* the sequence number expected next */
  _Atomic int out_of_order, off_loop;
};

static llb_status probe_beat(void *user, uint8_t *buf, size_t cap, size_t *len) {
  struct loop_probe *p = user;
  (void)cap;
  if (!atomic_load(&p->loop_known)) {
    p->loop = pthread_self();
    atomic_store(&p->loop_known, true);
  }
  buf[0] = 'b';
  *len = 1;
  return LLB_STATUS_OK;
}

static void loop_handler(struct bus *b, const struct bus_msg *m, void *user) {
  struct loop_probe *p = user;
  if (!atomic_load(&p->loop_known) || !pthread_equal(p->loop, pthread_self())) atomic_fetch_add(&p->off_loop, 1);
  char num[16] = "";
  snprintf(num, sizeof num, "%.*s", (int)(m->len < 15 ? m->len : 15), (const char *)m->data);
  if (atoi(num) != atomic_load(&p->next)) atomic_fetch_add(&p->out_of_order, 1);
  atomic_fetch_add(&p->next, 1);
  if (m->reply) assert_int_equal(bus_respond(b, m, "loop", 4, NULL), LLB_STATUS_OK); /* a publish from the loop */
  waiter_add(&p->got);
}

static void test_on_loop_handlers_run_on_the_loop_thread_in_order(void **state) {
  (void)state;
  struct bus *resp = connect_or_fail("loop-responder");
  struct bus *req = connect_or_fail("loop-requester");
  struct loop_probe p = {0};
  waiter_init(&p.got);
  assert_int_equal(bus_heartbeat_start(resp, "probe", "one", 60000, 16, probe_beat, &p), LLB_STATUS_OK);
  for (int i = 0; i < 500 && !atomic_load(&p.loop_known); i++) usleep(10 * 1000);
  assert_true(atomic_load(&p.loop_known));
  assert_int_equal(bus_subscribe_on_loop(resp, "llm.test.loop", NULL, loop_handler, &p, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(resp, WAIT_MS), LLB_STATUS_OK);
  const int n = 300;
  for (int i = 0; i < n; i++) {
    char num[16];
    int len = snprintf(num, sizeof num, "%d", i);
    assert_int_equal(bus_publish(req, "llm.test.loop", num, (size_t)len, NULL), LLB_STATUS_OK);
  }
  struct bus_msg *r = NULL; /* answered from the loop thread */
  assert_int_equal(bus_request(req, "llm.test.loop", "300", 3, NULL, WAIT_MS, &r), LLB_STATUS_OK);
  assert_int_equal(r->len, 4);
  assert_memory_equal(r->data, "loop", 4);
  bus_msg_destroy(r);
  assert_true(waiter_wait(&p.got, n + 1, WAIT_MS));
  assert_int_equal(atomic_load(&p.off_loop), 0);
  assert_int_equal(atomic_load(&p.out_of_order), 0);

  /* a queue group on the loop shares as any queue group; at most 8 on the loop */
  struct loop_probe q = {0};
  waiter_init(&q.got);
  q.loop = p.loop;
  atomic_store(&q.loop_known, true);
  assert_int_equal(bus_subscribe_on_loop(resp, "llm.test.loopq", "workers", loop_handler, &q, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(resp, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_request(req, "llm.test.loopq", "0", 1, NULL, WAIT_MS, &r), LLB_STATUS_OK);
  bus_msg_destroy(r);
  assert_int_equal(atomic_load(&q.off_loop), 0);
  for (int i = 2; i < 8; i++)
    assert_int_equal(bus_subscribe_on_loop(resp, "llm.test.loopx", NULL, loop_handler, &q, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_on_loop(resp, "llm.test.loopx", NULL, loop_handler, &q, NULL), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "at most 8"));
  bus_destroy(req);
  bus_destroy(resp);
}

/* A slow handler on the loop thread: counts, then sleeps 20 ms. */
static void slow_loop_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  (void)m;
  atomic_fetch_add((atomic_int *)user, 1);
  usleep(20 * 1000);
}

/* bus_destroy while the loop thread is inside a handler with messages still waiting (no drain)
 * returns only after that delivery, and frees nothing a delivery still uses (under ASan: a
 * use-after-free of the subscription when the loop thread went on delivering after the free). */
static void test_destroy_waits_for_a_delivery_on_the_loop(void **state) {
  (void)state;
  struct bus *resp = connect_or_fail("loop-destroy");
  struct bus *req = connect_or_fail("loop-destroy-pub");
  atomic_int calls = 0;
  assert_int_equal(bus_subscribe_on_loop(resp, "llm.test.loopslow", NULL, slow_loop_handler, &calls, NULL),
                   LLB_STATUS_OK);
  assert_int_equal(bus_flush(resp, WAIT_MS), LLB_STATUS_OK);
  for (int i = 0; i < 50; i++) assert_int_equal(bus_publish(req, "llm.test.loopslow", "x", 1, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(req, WAIT_MS), LLB_STATUS_OK);
  for (int i = 0; i < 500 && atomic_load(&calls) == 0; i++) usleep(1000);
  assert_true(atomic_load(&calls) > 0);
  bus_destroy(resp); /* the loop thread is delivering: 50 x 20 ms would outlast this */
  const int after = atomic_load(&calls);
  usleep(60 * 1000);
  assert_int_equal(atomic_load(&calls), after); /* no delivery after bus_destroy returned */
  assert_true(after < 50);
  bus_destroy(req);
}

/* ---- cork ---- */

static void count_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  (void)m;
  waiter_add(user);
}

/* What a corked thread publishes is written when it uncorks, in order; bus_request and bus_flush
 * uncork first (a corked request must not wait for its own cork). */
static void test_cork_holds_publishes_until_uncork(void **state) {
  (void)state;
  struct bus *pub = connect_or_fail("cork-publisher");
  struct bus *sub = connect_or_fail("cork-subscriber");
  struct waiter got;
  waiter_init(&got);
  assert_int_equal(bus_subscribe(sub, "llm.test.cork", NULL, count_handler, &got, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe(sub, "llm.test.corkecho", NULL, echo_handler, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(sub, WAIT_MS), LLB_STATUS_OK);

  bus_cork(pub);
  assert_int_equal(bus_publish(pub, "llm.test.cork", "a", 1, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_publish(pub, "llm.test.cork", "b", 1, NULL), LLB_STATUS_OK);
  assert_false(waiter_wait(&got, 1, 1000)); /* a second: held back, not written */
  bus_uncork(pub);
  assert_true(waiter_wait(&got, 2, WAIT_MS));

  bus_cork(pub); /* a request while corked: the held publish and the request go out */
  assert_int_equal(bus_publish(pub, "llm.test.cork", "c", 1, NULL), LLB_STATUS_OK);
  struct bus_msg *r = NULL;
  assert_int_equal(bus_request(pub, "llm.test.corkecho", "x", 1, NULL, WAIT_MS, &r), LLB_STATUS_OK);
  bus_msg_destroy(r);
  assert_true(waiter_wait(&got, 3, WAIT_MS));
  bus_cork(pub); /* and a flush */
  assert_int_equal(bus_publish(pub, "llm.test.cork", "d", 1, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(pub, WAIT_MS), LLB_STATUS_OK);
  assert_true(waiter_wait(&got, 4, WAIT_MS));
  bus_uncork(pub); /* nothing held: nothing happens */
  bus_uncork(NULL);
  bus_destroy(pub);
  bus_destroy(sub);
}

/* A handler that reports bus_sub_pending on its first call, then holds until released. */
struct pending_probe {
  struct bus_sub *_Atomic sub;
  struct waiter entered, release;
  _Atomic int64_t first_pending, last_pending;
  _Atomic int calls, done; /* handler calls begun, ended (one delivery thread: in order) */
};

static void pending_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  (void)m;
  struct pending_probe *p = user;
  struct bus_sub *sub = atomic_load(&p->sub);
  const int call = atomic_fetch_add(&p->calls, 1);
  if (call == 0) {
    waiter_add(&p->entered);
    assert_true(waiter_wait(&p->release, 1, WAIT_MS)); /* the others queue meanwhile */
    atomic_store(&p->first_pending, bus_sub_pending(sub));
  }
  atomic_store(&p->last_pending, bus_sub_pending(sub));
  atomic_fetch_add(&p->done, 1);
}

/* bus_sub_pending counts what is queued behind the message being handled (the worker parks
 * its threads only when it is 0): 3 behind the first of 4, none behind the last. */
static void test_sub_pending_counts_what_waits_behind_the_handler(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("pending");
  struct pending_probe p = {.first_pending = -2, .last_pending = -2};
  waiter_init(&p.entered);
  waiter_init(&p.release);
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe(b, "llm.test.pending", NULL, pending_handler, &p, &sub), LLB_STATUS_OK);
  atomic_store(&p.sub, sub);
  assert_int_equal(bus_flush(b, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_sub_pending(sub), 0);
  assert_int_equal(bus_publish(b, "llm.test.pending", "1", 1, NULL), LLB_STATUS_OK);
  assert_true(waiter_wait(&p.entered, 1, WAIT_MS));
  for (int i = 0; i < 3; i++) assert_int_equal(bus_publish(b, "llm.test.pending", "x", 1, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(b, WAIT_MS), LLB_STATUS_OK);
  for (int i = 0; i < 200 && bus_sub_pending(sub) < 3; i++) usleep(10000); /* delivered to the queue */
  waiter_add(&p.release);
  for (int i = 0; i < 2000 && atomic_load(&p.done) < 4; i++) usleep(10000);
  assert_int_equal(atomic_load(&p.done), 4);
  assert_int_equal(atomic_load(&p.first_pending), 3);
  assert_int_equal(atomic_load(&p.last_pending), 0);
  assert_int_equal(bus_sub_pending(NULL), -1);
  bus_destroy(b);
}

static void slow_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  (void)m;
  waiter_add(user);
}

static void test_request_timeout_names_subject(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("timeout");
  struct waiter w;
  waiter_init(&w);
  assert_int_equal(bus_subscribe(b, "llm.test.silent", NULL, slow_handler, &w, NULL), LLB_STATUS_OK);
  struct bus_msg *r = NULL;
  assert_int_equal(bus_request(b, "llm.test.silent", "x", 1, NULL, 200, &r), LLB_STATUS_TIMEOUT);
  assert_null(r);
  assert_non_null(strstr(llb_err_last(), "llm.test.silent"));
  /* A request's timeout is not the connection's: a later drain is clean. */
  assert_int_equal(bus_drain(b, WAIT_MS), LLB_STATUS_OK);
  bus_destroy(b);
}

/* ---- queue groups ---- */

#define QUEUE_N 200
struct queue_member {
  struct waiter *total;
  pthread_mutex_t mu;
  int count;
  unsigned char seen[QUEUE_N];
};

static void queue_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  struct queue_member *q = user;
  int i = atoi((const char *)m->data);
  pthread_mutex_lock(&q->mu);
  q->count++;
  if (i >= 0 && i < QUEUE_N) q->seen[i]++;
  pthread_mutex_unlock(&q->mu);
  waiter_add(q->total);
}

static void test_queue_group_shares_messages_without_duplicates(void **state) {
  (void)state;
  struct bus *a = connect_or_fail("q-a"), *c = connect_or_fail("q-b"), *p = connect_or_fail("q-pub");
  struct waiter total;
  waiter_init(&total);
  struct queue_member qa = {.total = &total}, qb = {.total = &total};
  pthread_mutex_init(&qa.mu, NULL);
  pthread_mutex_init(&qb.mu, NULL);
  assert_int_equal(bus_subscribe(a, "llm.test.q", "workers", queue_handler, &qa, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe(c, "llm.test.q", "workers", queue_handler, &qb, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(a, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_flush(c, WAIT_MS), LLB_STATUS_OK);
  char num[16];
  for (int i = 0; i < QUEUE_N; i++) {
    int n = snprintf(num, sizeof num, "%d", i);
    assert_int_equal(bus_publish(p, "llm.test.q", num, (size_t)n + 1, NULL), LLB_STATUS_OK);
  }
  assert_int_equal(bus_flush(p, WAIT_MS), LLB_STATUS_OK);
  assert_true(waiter_wait(&total, QUEUE_N, WAIT_MS));
  /* No late duplicates: a round trip through both subscribers' connections, then recount. */
  assert_int_equal(bus_flush(a, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_flush(c, WAIT_MS), LLB_STATUS_OK);
  pthread_mutex_lock(&qa.mu);
  pthread_mutex_lock(&qb.mu);
  assert_int_equal(qa.count + qb.count, QUEUE_N);
  assert_true(qa.count > 0);
  assert_true(qb.count > 0);
  for (int i = 0; i < QUEUE_N; i++) assert_int_equal(qa.seen[i] + qb.seen[i], 1);
  pthread_mutex_unlock(&qb.mu);
  pthread_mutex_unlock(&qa.mu);
  fprintf(stderr, "queue group split: %d / %d\n", qa.count, qb.count);
  bus_destroy(p);
  bus_destroy(c);
  bus_destroy(a);
}

/* ---- trace headers ---- */

struct trace_seen {
  struct waiter w;
  struct bus_trace_ctx got;
  bool received;
  char custom[64];
};

/* Records the incoming context and answers under a child span. */
static void trace_handler(struct bus *b, const struct bus_msg *m, void *user) {
  struct trace_seen *t = user;
  pthread_mutex_lock(&t->w.mu);
  t->got = m->trace;
  t->received = m->trace_received;
  const char *h = bus_msg_header(m, "x-tenant");
  snprintf(t->custom, sizeof t->custom, "%s", h ? h : "");
  pthread_mutex_unlock(&t->w.mu);
  if (m->reply) assert_int_equal(bus_respond(b, m, "ok", 2, NULL), LLB_STATUS_OK);
  waiter_add(&t->w);
}

static void test_traceparent_propagates_parent_to_child(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("trace");
  struct trace_seen t;
  memset(&t, 0, sizeof t);
  waiter_init(&t.w);
  assert_int_equal(bus_subscribe(b, "llm.test.trace", NULL, trace_handler, &t, NULL), LLB_STATUS_OK);

  struct bus_trace_ctx parent;
  bus_trace_new(&parent);
  struct bus_header hdr = {"x-tenant", "acme"};
  struct bus_out_msg m = {.subject = "llm.test.trace", .data = "q", .len = 1, .trace = &parent,
                          .headers = &hdr, .num_headers = 1};
  struct bus_msg *r = NULL;
  assert_int_equal(bus_request_msg(b, &m, WAIT_MS, &r), LLB_STATUS_OK);
  /* The handler saw the parent's span exactly. */
  pthread_mutex_lock(&t.w.mu);
  assert_true(t.received);
  assert_string_equal(t.got.trace_id, parent.trace_id);
  assert_string_equal(t.got.span_id, parent.span_id);
  assert_string_equal(t.custom, "acme");
  pthread_mutex_unlock(&t.w.mu);
  /* The reply came from a child span: same trace, new span. */
  assert_true(r->trace_received);
  assert_string_equal(r->trace.trace_id, parent.trace_id);
  assert_string_not_equal(r->trace.span_id, parent.span_id);
  const char *raw = bus_msg_header(r, BUS_TRACEPARENT_HEADER);
  assert_non_null(raw);
  assert_int_equal(strlen(raw), BUS_TRACEPARENT_LEN);
  assert_memory_equal(raw, "00-", 3);
  assert_memory_equal(raw + 53, "01", 2);
  bus_msg_destroy(r);

  /* No trace given: the bus starts a new one, and it still arrives. */
  assert_int_equal(bus_request(b, "llm.test.trace", "q", 1, NULL, WAIT_MS, &r), LLB_STATUS_OK);
  pthread_mutex_lock(&t.w.mu);
  assert_true(t.received);
  assert_string_not_equal(t.got.trace_id, parent.trace_id);
  assert_int_equal(t.got.flags, 1);
  pthread_mutex_unlock(&t.w.mu);
  bus_msg_destroy(r);

  bus_destroy(b);
}

/* ---- streamed replies on an inbox ---- */

static void stream_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)user;
  char part[32];
  for (int i = 0; i < 3; i++) {
    int n = snprintf(part, sizeof part, "part%d", i);
    assert_int_equal(bus_respond(b, m, part, (size_t)n, NULL), LLB_STATUS_OK);
  }
}

static void test_streamed_replies_arrive_in_order(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("stream");
  assert_int_equal(bus_subscribe(b, "llm.test.stream", "g", stream_handler, NULL, NULL), LLB_STATUS_OK);
  char inbox[128];
  assert_int_equal(bus_new_inbox(b, inbox, sizeof inbox), LLB_STATUS_OK);
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe_sync(b, inbox, &sub), LLB_STATUS_OK);
  struct bus_trace_ctx t;
  bus_trace_new(&t);
  struct bus_out_msg m = {.subject = "llm.test.stream", .reply = inbox, .data = "go", .len = 2, .trace = &t};
  assert_int_equal(bus_publish_msg(b, &m), LLB_STATUS_OK);
  for (int i = 0; i < 3; i++) {
    struct bus_msg *r = NULL;
    assert_int_equal(bus_sub_next_msg(sub, WAIT_MS, &r), LLB_STATUS_OK);
    char want[16];
    int n = snprintf(want, sizeof want, "part%d", i);
    assert_int_equal(r->len, (size_t)n);
    assert_memory_equal(r->data, want, (size_t)n);
    assert_string_equal(r->trace.trace_id, t.trace_id);
    bus_msg_destroy(r);
  }
  struct bus_msg *r = NULL;
  assert_int_equal(bus_sub_next_msg(sub, 100, &r), LLB_STATUS_TIMEOUT);
  assert_int_equal(bus_unsubscribe(sub), LLB_STATUS_OK);
  bus_destroy(b);
}

/* ---- many messages, small and large (sent and received messages are freed in batches) ---- */

#define MANY_MSGS 200

static size_t many_len(int i) { return i % 3 == 0 ? 10 : i % 3 == 1 ? 3000 : 6000; } /* around 4 KiB */

static void fill_many(char *buf, int i) {
  size_t n = many_len(i);
  for (size_t k = 0; k < n; k++) buf[k] = (char)('a' + (i + (int)k) % 26);
}

struct many_state {
  struct waiter w;
  atomic_int bad;
};

static void many_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  struct many_state *st = user;
  static char want[6000];
  int i = st->w.count; /* one delivery thread: in order */
  fill_many(want, i);
  if (m->len != many_len(i) || memcmp(m->data, want, m->len) != 0) atomic_fetch_add(&st->bad, 1);
  waiter_add(&st->w);
}

static void test_many_messages_of_every_size_arrive_intact(void **state) {
  (void)state;
  struct bus *rx = connect_or_fail("many-rx"), *tx = connect_or_fail("many-tx");
  struct many_state st;
  waiter_init(&st.w);
  atomic_init(&st.bad, 0);
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe(rx, "llm.test.many", NULL, many_handler, &st, &sub), LLB_STATUS_OK);
  assert_int_equal(bus_flush(rx, WAIT_MS), LLB_STATUS_OK);
  static char buf[6000];
  for (int i = 0; i < MANY_MSGS; i++) {
    fill_many(buf, i);
    assert_int_equal(bus_publish(tx, "llm.test.many", buf, many_len(i), NULL), LLB_STATUS_OK);
  }
  assert_true(waiter_wait(&st.w, MANY_MSGS, WAIT_MS));
  assert_int_equal(atomic_load(&st.bad), 0);
  bus_destroy(tx); /* every message kept for a batched free is freed here (ASan: no leak) */
  bus_destroy(rx);
}

/* ---- a foreign sender's bad traceparent → a new trace ---- */

/* Publishes `payload` with header "traceparent: <tp>" through a raw protocol connection,
 * as a non-llmbus client would. Returns 0 when the server acknowledged it (PING/PONG). */
static int raw_hpub(int port, const char *subject, const char *tp, const char *payload) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
  char hdr[256], msg[1024], buf[4096];
  int hl = snprintf(hdr, sizeof hdr, "NATS/1.0\r\ntraceparent: %s\r\n\r\n", tp);
  int pl = (int)strlen(payload);
  int n = snprintf(msg, sizeof msg,
                   "CONNECT {\"verbose\":false,\"headers\":true,\"protocol\":1}\r\n"
                   "HPUB %s %d %d\r\n%s%s\r\nPING\r\n",
                   subject, hl, hl + pl, hdr, payload);
  int rc = -1;
  if (write(fd, msg, (size_t)n) == n) {
    size_t got = 0;
    int64_t deadline = llb_now_ns() + (int64_t)WAIT_MS * 1000000;
    while (got < sizeof buf - 1 && llb_now_ns() < deadline) {
      ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
      if (r <= 0) break;
      got += (size_t)r;
      buf[got] = '\0';
      if (strstr(buf, "PONG")) {
        rc = 0;
        break;
      }
    }
  }
  close(fd);
  return rc;
}

static void test_invalid_incoming_traceparent_starts_new_trace(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("badtrace");
  struct trace_seen t;
  memset(&t, 0, sizeof t);
  waiter_init(&t.w);
  assert_int_equal(bus_subscribe(b, "llm.test.badtrace", NULL, trace_handler, &t, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(b, WAIT_MS), LLB_STATUS_OK);
  const char *bad = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
  assert_int_equal(raw_hpub(srv.port, "llm.test.badtrace", bad, "p1"), 0);
  assert_true(waiter_wait(&t.w, 1, WAIT_MS));
  pthread_mutex_lock(&t.w.mu);
  assert_false(t.received);
  assert_int_equal(strlen(t.got.trace_id), 32);
  assert_string_not_equal(t.got.trace_id, "00000000000000000000000000000000");
  assert_int_equal(strlen(t.got.span_id), 16);
  assert_int_equal(t.got.flags, 1);
  pthread_mutex_unlock(&t.w.mu);
  /* A valid foreign traceparent is taken as is. */
  const char *good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  assert_int_equal(raw_hpub(srv.port, "llm.test.badtrace", good, "p2"), 0);
  assert_true(waiter_wait(&t.w, 2, WAIT_MS));
  pthread_mutex_lock(&t.w.mu);
  assert_true(t.received);
  assert_string_equal(t.got.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert_string_equal(t.got.span_id, "00f067aa0ba902b7");
  pthread_mutex_unlock(&t.w.mu);
  bus_destroy(b);
}

/* ---- heartbeat ---- */

static llb_status fill_beat(void *user, uint8_t *buf, size_t cap, size_t *len) {
  int *n = user;
  int w = snprintf((char *)buf, cap, "beat%d", (*n)++);
  *len = (size_t)w;
  return LLB_STATUS_OK;
}

static void test_heartbeat_publishes_periodically(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("hb");
  struct bus *watcher = connect_or_fail("hb-watch");
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe_sync(watcher, "llm.health.scheduler.7", &sub), LLB_STATUS_OK);
  assert_int_equal(bus_flush(watcher, WAIT_MS), LLB_STATUS_OK);
  int counter = 0;
  assert_int_equal(bus_heartbeat_start(b, "scheduler", "7", 20, 64, fill_beat, &counter), LLB_STATUS_OK);
  for (int i = 0; i < 3; i++) {
    struct bus_msg *r = NULL;
    assert_int_equal(bus_sub_next_msg(sub, WAIT_MS, &r), LLB_STATUS_OK);
    assert_true(r->len >= 5);
    assert_memory_equal(r->data, "beat", 4);
    assert_true(r->trace_received);
    bus_msg_destroy(r);
  }
  assert_int_equal(bus_heartbeat_start(b, "sched.x", "7", 20, 64, fill_beat, &counter),
                   LLB_STATUS_INVALID_ARGUMENT);
  bus_destroy(b);
  bus_destroy(watcher);
}

/* An engine's actor beats on its engine's health subject too (bus_heartbeat_also), where its
 * peers listen: the same bytes on both subjects, the periodic beats and bus_heartbeat_now. */
static void test_heartbeat_also_goes_to_the_engine_subject(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("hb-engine");
  struct bus *watcher = connect_or_fail("hb-engine-watch");
  struct bus_sub *global = NULL, *engine = NULL;
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_engine_health("llm", "3", "gpu_worker", subject, sizeof subject), LLB_STATUS_OK);
  assert_string_equal(subject, "llm.engine.3.health.gpu_worker");
  assert_int_equal(bus_subscribe_sync(watcher, "llm.health.gpu_worker.w", &global), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(watcher, subject, &engine), LLB_STATUS_OK);
  assert_int_equal(bus_flush(watcher, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_heartbeat_also(b, subject), LLB_STATUS_INVALID_ARGUMENT); /* not beating yet */
  int counter = 0;
  assert_int_equal(bus_heartbeat_start(b, "gpu_worker", "w", 60000, 64, fill_beat, &counter), LLB_STATUS_OK);
  struct bus_msg *r = NULL;
  assert_int_equal(bus_sub_next_msg(global, WAIT_MS, &r), LLB_STATUS_OK); /* the first beat, before "also" */
  bus_msg_destroy(r);
  assert_int_equal(bus_heartbeat_also(b, subject), LLB_STATUS_OK);
  assert_int_equal(bus_heartbeat_now(b), LLB_STATUS_OK);
  struct bus_msg *g = NULL, *e = NULL;
  assert_int_equal(bus_sub_next_msg(global, WAIT_MS, &g), LLB_STATUS_OK);
  assert_int_equal(bus_sub_next_msg(engine, WAIT_MS, &e), LLB_STATUS_OK);
  assert_int_equal(g->len, e->len);
  assert_memory_equal(g->data, e->data, g->len);
  bus_msg_destroy(g);
  bus_msg_destroy(e);
  assert_int_equal(bus_subject_engine_health("llm", "3", "a.b", subject, sizeof subject),
                   LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bus_subject_engine_health("llm", "3", "*", subject, sizeof subject), LLB_STATUS_OK);
  assert_string_equal(subject, "llm.engine.3.health.*");
  bus_destroy(b);
  bus_destroy(watcher);
}

/* ---- limits and failures ---- */

static void test_payload_too_large_names_sizes(void **state) {
  (void)state;
  struct bus *b = connect_or_fail("big");
  int64_t maxp = bus_max_payload(b);
  assert_true(maxp > 0);
  size_t n = (size_t)maxp + 1;
  char *big = calloc(1, n);
  assert_non_null(big);
  memset(big, 'x', n);
  llb_status st = bus_publish(b, "llm.test.big", big, n, NULL);
  assert_int_equal(st, LLB_STATUS_TOO_LARGE);
  char want[64];
  snprintf(want, sizeof want, "max_payload of %lld bytes", (long long)maxp);
  assert_non_null(strstr(llb_err_last(), want));
  snprintf(want, sizeof want, "payload %zu", n);
  assert_non_null(strstr(llb_err_last(), want));
  struct bus_msg *r = NULL;
  assert_int_equal(bus_request(b, "llm.test.big", big, n, NULL, 1000, &r), LLB_STATUS_TOO_LARGE);
  /* Just under the limit (with room for the headers) passes. */
  assert_int_equal(bus_publish(b, "llm.test.big", big, (size_t)maxp - 200, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(b, WAIT_MS), LLB_STATUS_OK);
  free(big);
  bus_destroy(b);
}

static void test_no_server_error_names_url(void **state) {
  (void)state;
  struct bus_options o;
  bus_options_init(&o);
  /* The test server's port, but the server is stopped for this test below: use a port
   * nothing listens on by taking a fresh server's port and stopping it. */
  struct nats_test_server tmp;
  assert_int_equal(nats_test_server_start(&tmp, 0, false), 0);
  char url[64];
  snprintf(url, sizeof url, "%s", tmp.url);
  nats_test_server_stop(&tmp);
  o.urls = url;
  o.connect_timeout_ms = 500;
  struct bus *b = NULL;
  llb_status st = bus_connect(&o, &b);
  assert_int_equal(st, LLB_STATUS_NO_SERVER);
  assert_null(b);
  assert_non_null(strstr(llb_err_last(), url));
  fprintf(stderr, "no-server error: %s\n", llb_err_last());
}

/* A cluster URL list ("nats://a,nats://b", the form every actor's --nats takes): the bus
 * connects to the first server that answers, in the order given, however the list is spaced. */
static void test_url_list_skips_a_dead_server(void **state) {
  (void)state;
  struct nats_test_server dead;
  assert_int_equal(nats_test_server_start(&dead, 0, false), 0);
  char dead_url[64];
  snprintf(dead_url, sizeof dead_url, "%s", dead.url);
  nats_test_server_stop(&dead);
  char list[256];
  snprintf(list, sizeof list, "%s, %s", dead_url, srv.url);
  struct bus_options o;
  bus_options_init(&o);
  o.urls = list;
  o.connect_timeout_ms = 500;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  llb_status st = bus_connect(&o, &b);
  if (st != LLB_STATUS_OK) fail_msg("bus_connect(%s): %s", list, llb_err_last());
  assert_int_equal(bus_publish(b, "llm.test.list", "x", 1, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(b, WAIT_MS), LLB_STATUS_OK);
  bus_destroy(b);
  o.urls = " , ";
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(b);
}

static void test_bad_options_are_rejected(void **state) {
  (void)state;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.prefix = "bad prefix";
  struct bus *b = NULL;
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_INVALID_ARGUMENT);
  o.prefix = "llm";
  o.creds_file = "/nonexistent/user.creds";
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "/nonexistent/user.creds"));
  o.creds_file = NULL;
  o.tls_ca_file = "/nonexistent/ca.pem";
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "/nonexistent/ca.pem"));
  assert_null(b);
}

static int setup(void **state) {
  (void)state;
  return nats_test_server_start(&srv, 0, false);
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
      cmocka_unit_test(test_request_reply_round_trip),
      cmocka_unit_test(test_request_timeout_names_subject),
      cmocka_unit_test(test_on_loop_handlers_run_on_the_loop_thread_in_order),
      cmocka_unit_test(test_destroy_waits_for_a_delivery_on_the_loop),
      cmocka_unit_test(test_cork_holds_publishes_until_uncork),
      cmocka_unit_test(test_sub_pending_counts_what_waits_behind_the_handler),
      cmocka_unit_test(test_queue_group_shares_messages_without_duplicates),
      cmocka_unit_test(test_traceparent_propagates_parent_to_child),
      cmocka_unit_test(test_invalid_incoming_traceparent_starts_new_trace),
      cmocka_unit_test(test_streamed_replies_arrive_in_order),
      cmocka_unit_test(test_many_messages_of_every_size_arrive_intact),
      cmocka_unit_test(test_heartbeat_publishes_periodically),
      cmocka_unit_test(test_heartbeat_also_goes_to_the_engine_subject),
      cmocka_unit_test(test_payload_too_large_names_sizes),
      cmocka_unit_test(test_no_server_error_names_url),
      cmocka_unit_test(test_url_list_skips_a_dead_server),
      cmocka_unit_test(test_bad_options_are_rejected),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
