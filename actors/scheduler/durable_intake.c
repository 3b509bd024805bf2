/* The scheduler's durable intake; see durable_intake.h. Whatever a stopped or killed
 * scheduler held, the server delivers again ack_wait after its last in-progress ack (the
 * connection is gone by the time the actor's stop hook runs, so nothing can be given back
 * earlier). */
#include "actors/scheduler/durable_intake.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "bus/jetstream.h"
#include "bus/subject.h"

#define FETCH_BATCH 64
#define FETCH_TIMEOUT_MAX_MS 250
#define RETRY_SLEEP_MS 200
#define STALL_MS_MIN 10000

struct durable_intake {
  struct durable_intake_config cfg;
  char engine_id[BUS_TOKEN_MAX + 1];
  struct bus_js_pull *pull;
  pthread_t thread;
  bool thread_started;
  atomic_bool stop;
  char subj_dead_letter[BUS_SUBJECT_MAX];
  pthread_mutex_t mu;          /* guards held */
  struct bus_js_msg **held;    /* [num_held] delivered, not yet acknowledged */
  int64_t num_held, cap_held;
  int64_t last_progress_ns;
  int64_t last_taken_ns, last_stall_check_ns; /* fetch thread: stall watch */
  bool stall_seen;                            /* the last check saw one (a stall is two in a row) */
  atomic_uint_fast64_t c_replayed, c_dead_lettered, c_redelivered_held, c_acked, c_stalls;
};

static int64_t find_held(const struct durable_intake *d, uint64_t seq) {
  for (int64_t i = 0; i < d->num_held; i++)
    if (d->held[i]->stream_seq == seq) return i;
  return -1;
}

/* Under d->mu: keeps m (the newest delivery: its ack subject is the one that counts).
 * Returns true if the message was already held (a redelivery of a request in hand). */
static bool hold(struct durable_intake *d, struct bus_js_msg *m, bool *oom) {
  *oom = false;
  int64_t at = find_held(d, m->stream_seq);
  if (at >= 0) {
    bus_js_msg_destroy(d->held[at]);
    d->held[at] = m;
    return true;
  }
  if (d->num_held == d->cap_held) {
    int64_t cap = d->cap_held ? d->cap_held * 2 : 64;
    struct bus_js_msg **h = realloc(d->held, (size_t)cap * sizeof *h);
    if (!h) {
      *oom = true;
      return false;
    }
    d->held = h;
    d->cap_held = cap;
  }
  d->held[d->num_held++] = m;
  return false;
}

/* A message that kept killing the scheduler: a copy on the dead-letter subject (with the
 * reason in a header), then refused through the intake so that its client hears why. */
static void dead_letter(struct durable_intake *d, const struct bus_js_msg *m) {
  char reason[256];
  snprintf(reason, sizeof reason,
           "dead-lettered: delivered %llu times (max_deliver %d); the engine's scheduler stopped "
           "every time it ran this request",
           (unsigned long long)m->num_delivered, d->cfg.max_deliver);
  const struct bus_header h[] = {{"Llmbus-Dead-Letter-Reason", reason}};
  struct bus_out_msg out = {.subject = d->subj_dead_letter, .data = m->msg.data, .len = m->msg.len,
                            .trace = &m->msg.trace, .headers = h, .num_headers = 1};
  llb_status st = bus_publish_msg(d->cfg.bus, &out);
  atomic_fetch_add(&d->c_dead_lettered, 1);
  LLB_LOG_ERROR("request_dead_lettered", "stream_seq=%llu deliveries=%llu max_deliver=%d subject=%s "
                "published=%s", (unsigned long long)m->stream_seq, (unsigned long long)m->num_delivered,
                d->cfg.max_deliver, d->subj_dead_letter, st ? "no" : "yes");
  if (!d->cfg.deliver(d->cfg.user, &m->msg, m->stream_seq, false, reason)) (void)bus_js_term(d->cfg.bus, m);
}

static void take(struct durable_intake *d, struct bus_js_msg *m) {
  pthread_mutex_lock(&d->mu);
  bool oom, again = hold(d, m, &oom);
  pthread_mutex_unlock(&d->mu);
  if (oom) { /* give it back: another try later */
    (void)bus_js_nak(d->cfg.bus, m);
    bus_js_msg_destroy(m);
    return;
  }
  if (again) { /* ack_wait passed while we still run it: keep running, nothing new */
    atomic_fetch_add(&d->c_redelivered_held, 1);
    return;
  }
  if (m->num_delivered > 1) {
    atomic_fetch_add(&d->c_replayed, 1);
    LLB_LOG_INFO("request_replayed", "stream_seq=%llu deliveries=%llu", (unsigned long long)m->stream_seq,
                 (unsigned long long)m->num_delivered);
  }
  if (d->cfg.max_deliver > 0 && m->num_delivered > (uint64_t)d->cfg.max_deliver) {
    dead_letter(d, m);
    return;
  }
  if (!d->cfg.deliver(d->cfg.user, &m->msg, m->stream_seq, m->num_delivered > 1, NULL)) {
    /* undecodable: it never will be; drop it from the stream */
    durable_intake_done(d, m->stream_seq);
  }
}

/* Every held message: still in progress (restarts its ack_wait). */
static void keep_alive(struct durable_intake *d) {
  pthread_mutex_lock(&d->mu);
  for (int64_t i = 0; i < d->num_held; i++) (void)bus_js_in_progress(d->cfg.bus, d->held[i]);
  pthread_mutex_unlock(&d->mu);
  d->last_progress_ns = llb_now_ns();
}

/* Fetch thread, after a fetch that brought nothing: the stall watch (durable_intake.h). */
static void check_stall(struct durable_intake *d) {
  const int64_t now = llb_now_ns(), stall_ns = d->cfg.stall_ms * 1000000;
  if (now - d->last_taken_ns < stall_ns || now - d->last_stall_check_ns < stall_ns) return;
  d->last_stall_check_ns = now;
  struct bus_js_pull_state s;
  if (bus_js_pull_state(d->pull, &s) != LLB_STATUS_OK) return; /* the fetches' errors say why */
  pthread_mutex_lock(&d->mu);
  const int64_t held = d->num_held;
  pthread_mutex_unlock(&d->mu);
  const bool undelivered = s.num_pending > 0 && (s.max_ack_pending <= 0 || s.num_ack_pending < s.max_ack_pending);
  const bool seen = undelivered || s.num_ack_pending > held; /* else idle, or at max_ack_pending with our own */
  /* Twice in a row, stall_ms apart: an ack still in flight when the server answered (the request
   * left `held` first) is not a stall. */
  const bool again = seen && d->stall_seen;
  d->stall_seen = seen && !again;
  if (!again) return;
  atomic_fetch_add(&d->c_stalls, 1);
  const llb_status st = bus_js_pull_resubscribe(d->pull);
  char q[300];
  LLB_LOG_WARN("durable_consumer_stalled", "engine_id=%s nothing_fetched_ms=%lld num_pending=%llu "
               "num_ack_pending=%lld held=%lld max_ack_pending=%lld num_waiting=%lld num_redelivered=%lld "
               "delivered_stream_seq=%llu ack_floor_stream_seq=%llu resubscribed=%s error=%s", d->engine_id,
               (long long)((now - d->last_taken_ns) / 1000000), (unsigned long long)s.num_pending,
               (long long)s.num_ack_pending, (long long)held, (long long)s.max_ack_pending, (long long)s.num_waiting,
               (long long)s.num_redelivered, (unsigned long long)s.delivered_stream_seq,
               (unsigned long long)s.ack_floor_stream_seq, st ? "no" : "yes",
               st ? llb_log_quote(q, sizeof q, llb_err_last()) : "\"\"");
  d->last_taken_ns = now; /* the new subscription gets a window of its own */
}

static void *durable_thread(void *arg) {
  struct durable_intake *d = arg;
  const int64_t progress_ms = d->cfg.ack_wait_ms / 4 > 0 ? d->cfg.ack_wait_ms / 4 : 1;
  const int64_t fetch_ms = progress_ms < FETCH_TIMEOUT_MAX_MS ? progress_ms : FETCH_TIMEOUT_MAX_MS;
  struct bus_js_msg *got[FETCH_BATCH];
  int64_t last_error_log_ns = 0;
  d->last_progress_ns = d->last_taken_ns = d->last_stall_check_ns = llb_now_ns();
  while (!atomic_load(&d->stop)) {
    int32_t n = 0;
    llb_status st = bus_js_pull_fetch(d->pull, FETCH_BATCH, fetch_ms, got, &n);
    for (int32_t i = 0; i < n; i++) take(d, got[i]);
    if (n > 0) d->last_taken_ns = llb_now_ns();
    else if (!atomic_load(&d->stop)) check_stall(d);
    if ((llb_now_ns() - d->last_progress_ns) / 1000000 >= progress_ms) keep_alive(d);
    if (st == LLB_STATUS_OK || atomic_load(&d->stop)) continue;
    /* CLOSED: the actor drains (its stop follows); otherwise reconnecting: once per 2 s */
    if (st != LLB_STATUS_CLOSED && llb_now_ns() - last_error_log_ns > 2000000000) {
      char q[400];
      LLB_LOG_WARN("durable_fetch_failed", "status=%s error=%s", llb_strerror(st),
                   llb_log_quote(q, sizeof q, llb_err_last()));
      last_error_log_ns = llb_now_ns();
    }
    struct timespec ts = {.tv_sec = 0, .tv_nsec = RETRY_SLEEP_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

llb_status durable_intake_start(const struct durable_intake_config *c, struct durable_intake **out) {
  *out = NULL;
  if (!c->bus || !c->prefix || !c->engine_id || !c->deliver || c->ack_wait_ms <= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "durable intake: need bus, prefix, engine id, deliver, ack_wait_ms > 0");
  struct durable_intake *d = calloc(1, sizeof *d);
  if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "durable intake");
  d->cfg = *c;
  snprintf(d->engine_id, sizeof d->engine_id, "%s", c->engine_id);
  d->cfg.engine_id = d->engine_id;
  d->cfg.prefix = NULL; /* not kept */
  if (d->cfg.stall_ms <= 0) d->cfg.stall_ms = 4 * c->ack_wait_ms > STALL_MS_MIN ? 4 * c->ack_wait_ms : STALL_MS_MIN;
  pthread_mutex_init(&d->mu, NULL);
  llb_status st = bus_subject_engine(c->prefix, d->engine_id, "dead_letter", d->subj_dead_letter,
                                     sizeof d->subj_dead_letter);
  const struct bus_js_pull_config pc = {.engine_id = d->engine_id, .ack_wait_ms = c->ack_wait_ms,
                                        .max_ack_pending = c->max_ack_pending, .replicas = c->stream_replicas};
  if (!st) st = bus_js_pull_create(c->bus, &pc, &d->pull);
  if (!st && pthread_create(&d->thread, NULL, durable_thread, d) != 0)
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "durable intake: pthread_create failed");
  if (st) {
    durable_intake_destroy(d);
    return st;
  }
  d->thread_started = true;
  LLB_LOG_INFO("durable_intake_started", "engine_id=%s ack_wait_ms=%lld max_deliver=%d "
               "max_ack_pending=%d dead_letter=%s stall_ms=%lld", d->engine_id, (long long)c->ack_wait_ms,
               c->max_deliver, c->max_ack_pending, d->subj_dead_letter, (long long)d->cfg.stall_ms);
  *out = d;
  return LLB_STATUS_OK;
}

void durable_intake_stop(struct durable_intake *d) {
  if (!d || !d->thread_started) return;
  atomic_store(&d->stop, true);
  pthread_join(d->thread, NULL);
  d->thread_started = false;
}

void durable_intake_done(struct durable_intake *d, uint64_t stream_seq) {
  if (!d || stream_seq == 0) return;
  pthread_mutex_lock(&d->mu);
  int64_t at = find_held(d, stream_seq);
  struct bus_js_msg *m = NULL;
  if (at >= 0) {
    m = d->held[at];
    d->held[at] = d->held[--d->num_held];
  }
  pthread_mutex_unlock(&d->mu);
  if (!m) return;
  llb_status st = bus_js_ack(d->cfg.bus, m);
  if (st) LLB_LOG_WARN("durable_ack_failed", "stream_seq=%llu status=%s", (unsigned long long)stream_seq,
                       llb_strerror(st));
  else atomic_fetch_add(&d->c_acked, 1);
  bus_js_msg_destroy(m);
}

void durable_intake_get_counters(struct durable_intake *d, struct durable_intake_counters *out) {
  *out = (struct durable_intake_counters){0};
  if (!d) return;
  *out = (struct durable_intake_counters){
      .replayed = atomic_load(&d->c_replayed), .dead_lettered = atomic_load(&d->c_dead_lettered),
      .redelivered_held = atomic_load(&d->c_redelivered_held), .acked = atomic_load(&d->c_acked),
      .stalls = atomic_load(&d->c_stalls)};
}

void durable_intake_destroy(struct durable_intake *d) {
  if (!d) return;
  durable_intake_stop(d);
  for (int64_t i = 0; i < d->num_held; i++) bus_js_msg_destroy(d->held[i]);
  free(d->held);
  bus_js_pull_destroy(d->pull);
  pthread_mutex_destroy(&d->mu);
  free(d);
}
