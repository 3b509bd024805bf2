/* The scheduler's failure detection; see peer_health.h. A restart is seen at the new
 * process' first beat, ~0.2 s plus its start-up after the kill under `llmbus serve`; a silent
 * peer after missed_beats intervals. The step thread acts on a detection between steps and
 * while it waits for a worker reply (exec_channel.c), so the execute/kv timeouts are only the
 * last resort (docs/design.md §6). */
#include "actors/scheduler/peer_health.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bus/peer_watch.h"
#include "bus/subject.h"
#include "schemas/control.h"

/* The peers whose heartbeats the scheduler watches (index into watch). */
enum sched_peer { SCHED_PEER_GPU_WORKER = 0, SCHED_PEER_KV_MANAGER, SCHED_PEER_COUNT };

static const char *const peer_actor[SCHED_PEER_COUNT] = {"gpu_worker", "kv_manager"};

struct peer_health {
  struct peer_health_config cfg;
  char engine_id[BUS_TOKEN_MAX + 1];
  char subject[SCHED_PEER_COUNT][BUS_SUBJECT_MAX]; /* <prefix>.engine.<eid>.health.<peer> */
  pthread_mutex_t mu;
  struct peer_watch *watch[SCHED_PEER_COUNT]; /* under mu; NULL when heartbeat_ms is 0 */
  uint64_t fail_gen;        /* under mu: failures detected so far */
  uint64_t fail_seen;       /* under mu: failures the step thread took */
  char fail_what[384];      /* under mu: the last detection, for the step's log */
  uint64_t reconnects_seen; /* under mu: bus_num_reconnects acted on */
  bool pending_kv, pending_other; /* under mu: what failed since the last take (kv_manager; the
                                     worker or the bus) */
  bool taken_kv_only;             /* under mu: the last take's failures were the kv_manager's only */
  atomic_uint_fast64_t c_peer_fail, c_bus_recoveries;
};

/* Under mu: one more failure for the step thread to take; logs it (one line). */
static void record_failure(struct peer_health *h, enum sched_peer p, const char *how,
                           const struct peer_watch_view *v, int64_t silent_ms) {
  h->fail_gen++;
  atomic_fetch_add(&h->c_peer_fail, 1);
  if (p == SCHED_PEER_KV_MANAGER) h->pending_kv = true;
  else h->pending_other = true;
  if (strcmp(how, "replaced") == 0) {
    snprintf(h->fail_what, sizeof h->fail_what, "%s %s (pid %d) replaced by %s (pid %d)",
             peer_actor[p], v->prev_instance, v->prev_pid, v->instance, v->pid);
    LLB_LOG_WARN("peer_failure_detected", "actor=%s engine_id=%s how=replaced instance=%s pid=%d "
                 "new_instance=%s new_pid=%d action=abandon_steps_preempt_all",
                 peer_actor[p], h->engine_id, v->prev_instance, v->prev_pid, v->instance, v->pid);
  } else {
    snprintf(h->fail_what, sizeof h->fail_what, "%s %s (pid %d) silent for %lld ms", peer_actor[p],
             v->instance, v->pid, (long long)silent_ms);
    LLB_LOG_WARN("peer_failure_detected", "actor=%s engine_id=%s how=missed_beats instance=%s pid=%d "
                 "silent_ms=%lld limit_ms=%lld action=abandon_steps_preempt_all",
                 peer_actor[p], h->engine_id, v->instance, v->pid, (long long)silent_ms,
                 (long long)peer_watch_missing_after_ms(h->watch[p]));
  }
}

/* Under mu: the scheduler's own connection came back: an execute request or reply in flight
 * then may be lost (a nats-server restart), and the worker, which kept its instance, would
 * never be seen failing: the steps in flight are abandoned and recomputed as after a peer
 * failure. */
static void check_own_reconnect(struct peer_health *h) {
  const uint64_t n = bus_num_reconnects(h->cfg.bus);
  if (n == h->reconnects_seen) return;
  h->reconnects_seen = n;
  h->fail_gen++;
  h->pending_other = true;
  atomic_fetch_add(&h->c_bus_recoveries, 1);
  snprintf(h->fail_what, sizeof h->fail_what,
           "the scheduler's NATS connection was re-established (reconnect %llu): messages of the "
           "steps in flight may be lost", (unsigned long long)n);
  LLB_LOG_WARN("bus_reconnect_recovery", "engine_id=%s reconnects=%llu action=abandon_steps_preempt_all",
               h->engine_id, (unsigned long long)n);
}

/* Under mu: the missed-beat rule and the reconnect check at now_ns. */
static void poll_locked(struct peer_health *h, int64_t now_ns) {
  check_own_reconnect(h);
  for (int p = 0; p < SCHED_PEER_COUNT; p++) {
    if (!h->watch[p] || peer_watch_check(h->watch[p], now_ns) != PEER_WATCH_VERDICT_MISSING) continue;
    struct peer_watch_view view;
    peer_watch_get(h->watch[p], &view);
    record_failure(h, (enum sched_peer)p, "missed_beats", &view, (now_ns - view.last_beat_ns) / 1000000);
  }
}

static bool take_locked(struct peer_health *h, char *what, size_t cap) {
  if (h->fail_seen == h->fail_gen) return false;
  h->fail_seen = h->fail_gen;
  h->taken_kv_only = h->pending_kv && !h->pending_other;
  h->pending_kv = h->pending_other = false;
  snprintf(what, cap, "%s", h->fail_what);
  return true;
}

/* Whether a decodable beat is one of our engine's watched peers (index in *p): it came on our
 * engine's health subject of its own actor (which only that actor may publish on) and its
 * engine_id is ours. */
static bool beat_is_ours(const struct peer_health *h, const struct bus_msg *msg, const struct llb_heartbeat *hb,
                         int *p) {
  *p = -1;
  for (int i = 0; i < SCHED_PEER_COUNT; i++)
    if (strcmp(hb->actor.data, peer_actor[i]) == 0) *p = i;
  const size_t eid_len = strlen(h->engine_id);
  return *p >= 0 && hb->engine_id.len == eid_len && memcmp(hb->engine_id.data, h->engine_id, eid_len) == 0 &&
         strlen(hb->instance.data) == hb->instance.len && strcmp(msg->subject, h->subject[*p]) == 0;
}

/* Delivery thread. Heartbeats are untrusted: anyone allowed to publish on .health can send
 * one, so only a decodable beat whose actor matches its subject and whose engine_id is ours
 * reaches the watch, which checks the rest (instance, pid, seq). */
static void on_health(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct peer_health *h = user;
  uint8_t mem[2048];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_heartbeat hb;
  int p;
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) != LLB_STATUS_OK) {
    LLB_LOG_DEBUG("heartbeat_ignored", "subject=%s reason=undecodable", msg->subject);
    llb_arena_destroy(&arena);
    return;
  }
  if (!beat_is_ours(h, msg, &hb, &p)) {
    llb_arena_destroy(&arena);
    return;
  }
  const struct peer_beat beat = {.instance = hb.instance.data, .pid = hb.pid, .seq = hb.seq, .ready = hb.ready};
  const int64_t now = llb_now_ns();
  pthread_mutex_lock(&h->mu);
  const uint64_t gen = h->fail_gen;
  struct peer_watch_view view;
  peer_watch_get(h->watch[p], &view);
  const bool was_ready = view.seen && view.ready;
  const enum peer_watch_verdict v = peer_watch_observe(h->watch[p], &beat, now);
  peer_watch_get(h->watch[p], &view);
  /* a peer that said hello while starting (not ready) and now serves: go on at once */
  const bool became_ready = (v == PEER_WATCH_VERDICT_FINE || v == PEER_WATCH_VERDICT_FIRST) && view.ready && !was_ready;
  if (v == PEER_WATCH_VERDICT_REPLACED) record_failure(h, (enum sched_peer)p, "replaced", &view, 0);
  poll_locked(h, now);
  const bool failed = h->fail_gen != gen;
  pthread_mutex_unlock(&h->mu);
  if (v == PEER_WATCH_VERDICT_BACK)
    LLB_LOG_INFO("peer_back", "actor=%s engine_id=%s instance=%s pid=%d", peer_actor[p], h->engine_id,
                 view.instance, view.pid);
  if (failed && h->cfg.on_failure) h->cfg.on_failure(h->cfg.user);
  if ((v == PEER_WATCH_VERDICT_REPLACED || v == PEER_WATCH_VERDICT_BACK || became_ready) && h->cfg.on_peer_up)
    h->cfg.on_peer_up(h->cfg.user);
  llb_arena_destroy(&arena);
}

void peer_health_poll(struct peer_health *h, int64_t now_ns) {
  pthread_mutex_lock(&h->mu);
  poll_locked(h, now_ns);
  pthread_mutex_unlock(&h->mu);
}

int64_t peer_health_next_check_ns(struct peer_health *h) {
  int64_t t = INT64_MAX;
  pthread_mutex_lock(&h->mu);
  for (int p = 0; p < SCHED_PEER_COUNT; p++) {
    const int64_t n = peer_watch_next_check_ns(h->watch[p]);
    if (n < t) t = n;
  }
  pthread_mutex_unlock(&h->mu);
  return t;
}

bool peer_health_take_detected(struct peer_health *h, char *what, size_t cap) {
  pthread_mutex_lock(&h->mu);
  const bool failed = take_locked(h, what, cap);
  pthread_mutex_unlock(&h->mu);
  return failed;
}

bool peer_health_take(struct peer_health *h, char *what, size_t cap) {
  if (!h->watch[0]) return false;
  pthread_mutex_lock(&h->mu);
  poll_locked(h, llb_now_ns());
  const bool failed = take_locked(h, what, cap);
  pthread_mutex_unlock(&h->mu);
  return failed;
}

bool peer_health_taken_kv_only(struct peer_health *h) {
  pthread_mutex_lock(&h->mu);
  const bool kv_only = h->taken_kv_only;
  pthread_mutex_unlock(&h->mu);
  return kv_only;
}

void peer_health_counters(struct peer_health *h, uint64_t *num_peer_failures, uint64_t *num_bus_recoveries) {
  *num_peer_failures = atomic_load(&h->c_peer_fail);
  *num_bus_recoveries = atomic_load(&h->c_bus_recoveries);
}

llb_status peer_health_create(const struct peer_health_config *c, struct peer_health **out) {
  *out = NULL;
  if (!c->bus || !c->prefix || !c->engine_id || c->heartbeat_ms < 0 || (c->heartbeat_ms > 0 && c->missed_beats < 1))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "peer health: need bus, prefix, engine id, missed_beats >= 1");
  struct peer_health *h = calloc(1, sizeof *h);
  if (!h) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "peer health");
  h->cfg = *c;
  snprintf(h->engine_id, sizeof h->engine_id, "%s", c->engine_id);
  h->cfg.engine_id = h->engine_id;
  h->cfg.prefix = NULL; /* not kept */
  pthread_mutex_init(&h->mu, NULL);
  if (c->heartbeat_ms <= 0) {
    *out = h;
    return LLB_STATUS_OK;
  }
  const struct peer_watch_config wc = {.interval_ms = c->heartbeat_ms, .max_missed_beats = c->missed_beats};
  llb_status st = LLB_STATUS_OK;
  for (int p = 0; p < SCHED_PEER_COUNT && !st; p++) st = peer_watch_create(&wc, &h->watch[p]);
  if (!st && c->worker_seen && c->worker_seen->instance && c->worker_seen->instance[0])
    (void)peer_watch_observe(h->watch[SCHED_PEER_GPU_WORKER], c->worker_seen, llb_now_ns()); /* FIRST */
  h->cfg.worker_seen = NULL; /* not kept */
  /* all watches exist before the first beat can arrive */
  for (int p = 0; p < SCHED_PEER_COUNT && !st; p++) { /* this engine's beats, not every engine's */
    st = bus_subject_engine_health(c->prefix, h->engine_id, peer_actor[p], h->subject[p], sizeof h->subject[p]);
    if (!st) st = bus_subscribe(c->bus, h->subject[p], NULL, on_health, h, NULL);
  }
  if (st) {
    *out = h; /* subscribed callbacks may hold h until the bus is destroyed: the caller frees it */
    return st;
  }
  LLB_LOG_INFO("peer_watch", "engine_id=%s actors=gpu_worker,kv_manager heartbeat_ms=%lld missed_beats=%d",
               h->engine_id, (long long)c->heartbeat_ms, c->missed_beats);
  *out = h;
  return LLB_STATUS_OK;
}

void peer_health_destroy(struct peer_health *h) {
  if (!h) return;
  for (int p = 0; p < SCHED_PEER_COUNT; p++) peer_watch_destroy(h->watch[p]);
  pthread_mutex_destroy(&h->mu);
  free(h);
}
