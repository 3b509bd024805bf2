/* The scheduler actor's durable intake (DESIGN.md §6): EngineCoreRequests come from the
 * engine's JetStream pull consumer instead of a plain subscription, and each stays in the
 * stream until the request left the scheduler (finished, aborted or refused), so a scheduler
 * that dies loses nothing: its successor gets the unfinished ones again and recomputes them
 * from their prompts (deterministic sampling gives the same tokens; the output processor
 * drops the positions it already sent).
 *
 * One thread fetches, hands each new message to the actor's intake (sched_actor_intake) and
 * keeps every held message alive with an in-progress ack every ack_wait/4, so a generation
 * longer than ack_wait is not delivered twice. The step thread acknowledges through
 * sched_actor_durable_done. A message delivered more than max_deliver times kept killing the
 * scheduler: it is copied to <prefix>.engine.<eid>.dead_letter and refused with an error that
 * reaches its client. Whatever a stopped or killed scheduler held, the server delivers again
 * ack_wait after its last in-progress ack (the connection is gone by the time the actor's
 * stop hook runs, so nothing can be given back earlier). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/scheduler/actor_internal.h"
#include "base/log.h"
#include "bus/jetstream.h"

#define FETCH_BATCH 64
#define FETCH_TIMEOUT_MAX_MS 250
#define RETRY_SLEEP_MS 200

struct sched_durable {
  struct bus_js_pull *pull;
  pthread_t thread;
  bool thread_started;
  atomic_bool stop;
  char subj_dead_letter[BUS_SUBJECT_MAX];
  pthread_mutex_t mu;          /* guards held */
  struct bus_js_msg **held;    /* [num_held] delivered, not yet acknowledged */
  int64_t num_held, cap_held;
  int64_t last_progress_ns;
};

static int64_t find_held(const struct sched_durable *d, uint64_t seq) {
  for (int64_t i = 0; i < d->num_held; i++)
    if (d->held[i]->stream_seq == seq) return i;
  return -1;
}

/* Under d->mu: keeps m (the newest delivery: its ack subject is the one that counts).
 * Returns true if the message was already held (a redelivery of a request in hand). */
static bool hold(struct sched_durable *d, struct bus_js_msg *m, bool *oom) {
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
static void dead_letter(struct scheduler_actor *a, struct sched_durable *d, const struct bus_js_msg *m) {
  char reason[256];
  snprintf(reason, sizeof reason,
           "dead-lettered: delivered %llu times (max_deliver %d); the engine's scheduler stopped "
           "every time it ran this request",
           (unsigned long long)m->num_delivered, a->cfg.max_deliver);
  const struct bus_header h[] = {{"Llmbus-Dead-Letter-Reason", reason}};
  struct bus_out_msg out = {.subject = d->subj_dead_letter, .data = m->msg.data, .len = m->msg.len,
                            .trace = &m->msg.trace, .headers = h, .num_headers = 1};
  llb_status st = bus_publish_msg(a->bus, &out);
  atomic_fetch_add(&a->c_dead_lettered, 1);
  LLB_LOG_ERROR("request_dead_lettered", "stream_seq=%llu deliveries=%llu max_deliver=%d subject=%s "
                "published=%s", (unsigned long long)m->stream_seq, (unsigned long long)m->num_delivered,
                a->cfg.max_deliver, d->subj_dead_letter, st ? "no" : "yes");
  if (!sched_actor_intake(a, &m->msg, m->stream_seq, false, reason)) (void)bus_js_term(a->bus, m);
}

static void take(struct scheduler_actor *a, struct sched_durable *d, struct bus_js_msg *m) {
  pthread_mutex_lock(&d->mu);
  bool oom, again = hold(d, m, &oom);
  pthread_mutex_unlock(&d->mu);
  if (oom) { /* give it back: another try later */
    (void)bus_js_nak(a->bus, m);
    bus_js_msg_destroy(m);
    return;
  }
  if (again) { /* ack_wait passed while we still run it: keep running, nothing new */
    atomic_fetch_add(&a->c_redelivered_held, 1);
    return;
  }
  if (m->num_delivered > 1) {
    atomic_fetch_add(&a->c_replayed, 1);
    LLB_LOG_INFO("request_replayed", "stream_seq=%llu deliveries=%llu", (unsigned long long)m->stream_seq,
                 (unsigned long long)m->num_delivered);
  }
  if (a->cfg.max_deliver > 0 && m->num_delivered > (uint64_t)a->cfg.max_deliver) {
    dead_letter(a, d, m);
    return;
  }
  if (!sched_actor_intake(a, &m->msg, m->stream_seq, m->num_delivered > 1, NULL)) {
    /* undecodable: it never will be; drop it from the stream */
    sched_actor_durable_done(a, m->stream_seq);
  }
}

/* Every held message: still in progress (restarts its ack_wait). */
static void keep_alive(struct scheduler_actor *a, struct sched_durable *d) {
  pthread_mutex_lock(&d->mu);
  for (int64_t i = 0; i < d->num_held; i++) (void)bus_js_in_progress(a->bus, d->held[i]);
  pthread_mutex_unlock(&d->mu);
  d->last_progress_ns = llb_now_ns();
}

static void *durable_thread(void *arg) {
  struct scheduler_actor *a = arg;
  struct sched_durable *d = a->durable;
  const int64_t progress_ms = a->cfg.ack_wait_ms / 4 > 0 ? a->cfg.ack_wait_ms / 4 : 1;
  const int64_t fetch_ms = progress_ms < FETCH_TIMEOUT_MAX_MS ? progress_ms : FETCH_TIMEOUT_MAX_MS;
  struct bus_js_msg *got[FETCH_BATCH];
  int64_t last_error_log_ns = 0;
  d->last_progress_ns = llb_now_ns();
  while (!atomic_load(&d->stop)) {
    int32_t n = 0;
    llb_status st = bus_js_pull_fetch(d->pull, FETCH_BATCH, fetch_ms, got, &n);
    for (int32_t i = 0; i < n; i++) take(a, d, got[i]);
    if ((llb_now_ns() - d->last_progress_ns) / 1000000 >= progress_ms) keep_alive(a, d);
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

llb_status sched_actor_durable_start(struct scheduler_actor *a, const char *prefix) {
  struct sched_durable *d = calloc(1, sizeof *d);
  if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "durable intake");
  pthread_mutex_init(&d->mu, NULL);
  a->durable = d;
  llb_status st = bus_subject_engine(prefix, a->engine_id, "dead_letter", d->subj_dead_letter,
                                     sizeof d->subj_dead_letter);
  if (st) return st;
  const struct bus_js_pull_config pc = {.engine_id = a->engine_id, .ack_wait_ms = a->cfg.ack_wait_ms,
                                        .max_ack_pending = a->cfg.max_ack_pending,
                                        .replicas = a->cfg.stream_replicas};
  if ((st = bus_js_pull_create(a->bus, &pc, &d->pull))) return st;
  if (pthread_create(&d->thread, NULL, durable_thread, a) != 0)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "durable intake: pthread_create failed");
  d->thread_started = true;
  LLB_LOG_INFO("durable_intake_started", "engine_id=%s ack_wait_ms=%lld max_deliver=%d "
               "max_ack_pending=%d dead_letter=%s", a->engine_id, (long long)a->cfg.ack_wait_ms,
               a->cfg.max_deliver, a->cfg.max_ack_pending, d->subj_dead_letter);
  return LLB_STATUS_OK;
}

void sched_actor_durable_stop(struct scheduler_actor *a) {
  struct sched_durable *d = a->durable;
  if (!d || !d->thread_started) return;
  atomic_store(&d->stop, true);
  pthread_join(d->thread, NULL);
  d->thread_started = false;
}

void sched_actor_durable_done(struct scheduler_actor *a, uint64_t stream_seq) {
  struct sched_durable *d = a->durable;
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
  llb_status st = bus_js_ack(a->bus, m);
  if (st) LLB_LOG_WARN("durable_ack_failed", "stream_seq=%llu status=%s", (unsigned long long)stream_seq,
                       llb_strerror(st));
  else atomic_fetch_add(&a->c_acked, 1);
  bus_js_msg_destroy(m);
}

void sched_actor_durable_free(struct scheduler_actor *a) {
  struct sched_durable *d = a->durable;
  if (!d) return;
  sched_actor_durable_stop(a);
  for (int64_t i = 0; i < d->num_held; i++) bus_js_msg_destroy(d->held[i]);
  free(d->held);
  bus_js_pull_destroy(d->pull);
  pthread_mutex_destroy(&d->mu);
  free(d);
  a->durable = NULL;
}
