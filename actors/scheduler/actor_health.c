/* The scheduler actor's failure detection: the heartbeats of its engine's gpu_worker and
 * kv_manager (<prefix>.health.<actor>.<instance>) fed to one bus/peer_watch each. A restart
 * (new instance id or pid) is seen at the new process' first beat, ~0.2 s plus its start-up
 * after the kill under `llmbus serve`; a silent peer after peer_missed_beats intervals. The
 * step thread acts on a detection between steps and while it waits for a worker reply
 * (actor_execute.c), so the execute/kv timeouts are only the last resort (DESIGN.md §6). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "actors/scheduler/actor_internal.h"
#include "base/log.h"
#include "schemas/control.h"

static const char *const peer_actor[SCHED_PEER_COUNT] = {"gpu_worker", "kv_manager"};

/* Under exec_mu: one more failure for the step thread to act on; logs it (one line). */
static void record_failure(struct scheduler_actor *a, enum sched_peer p, const char *how,
                           const struct peer_watch_view *v, int64_t silent_ms) {
  a->peer_fail_gen++;
  atomic_fetch_add(&a->c_peer_fail, 1);
  if (strcmp(how, "replaced") == 0) {
    snprintf(a->peer_fail_what, sizeof a->peer_fail_what, "%s %s (pid %d) replaced by %s (pid %d)",
             peer_actor[p], v->prev_instance, v->prev_pid, v->instance, v->pid);
    LLB_LOG_WARN("peer_failure_detected", "actor=%s engine_id=%s how=replaced instance=%s pid=%d "
                 "new_instance=%s new_pid=%d action=abandon_steps_preempt_all",
                 peer_actor[p], a->engine_id, v->prev_instance, v->prev_pid, v->instance, v->pid);
  } else {
    snprintf(a->peer_fail_what, sizeof a->peer_fail_what, "%s %s (pid %d) silent for %lld ms", peer_actor[p],
             v->instance, v->pid, (long long)silent_ms);
    LLB_LOG_WARN("peer_failure_detected", "actor=%s engine_id=%s how=missed_beats instance=%s pid=%d "
                 "silent_ms=%lld limit_ms=%lld action=abandon_steps_preempt_all",
                 peer_actor[p], a->engine_id, v->instance, v->pid, (long long)silent_ms,
                 (long long)peer_watch_missing_after_ms(a->peer_watch[p]));
  }
  pthread_cond_broadcast(&a->exec_cv);
}

/* Wakes the step thread out of its idle or back-off wait: a peer (re)appeared, so the
 * engine can go on now rather than at the end of the back-off. */
static void wake_step_thread(struct scheduler_actor *a) {
  pthread_mutex_lock(&a->mu);
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* Delivery thread. Heartbeats are untrusted: anyone allowed to publish on .health can send
 * one, so only a decodable beat whose actor matches its subject and whose engine_id is ours
 * reaches the watch, which checks the rest (instance, pid, seq). */
static void on_health(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct scheduler_actor *a = user;
  uint8_t mem[2048];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_heartbeat hb;
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) != LLB_STATUS_OK) {
    LLB_LOG_DEBUG("heartbeat_ignored", "subject=%s reason=undecodable", msg->subject);
    llb_arena_destroy(&arena);
    return;
  }
  int p = -1;
  for (int i = 0; i < SCHED_PEER_COUNT; i++)
    if (strcmp(hb.actor.data, peer_actor[i]) == 0) p = i;
  char expect[BUS_SUBJECT_MAX];
  const size_t eid_len = strlen(a->engine_id);
  const bool ours = p >= 0 && hb.engine_id.len == eid_len && memcmp(hb.engine_id.data, a->engine_id, eid_len) == 0 &&
                    strlen(hb.instance.data) == hb.instance.len && strstr(msg->subject, ".health.") &&
                    snprintf(expect, sizeof expect, ".health.%s.%s", peer_actor[p], hb.instance.data) <
                        (int)sizeof expect &&
                    strlen(msg->subject) >= strlen(expect) &&
                    strcmp(msg->subject + strlen(msg->subject) - strlen(expect), expect) == 0;
  if (!ours) {
    llb_arena_destroy(&arena);
    return;
  }
  const struct peer_beat beat = {.instance = hb.instance.data, .pid = hb.pid, .seq = hb.seq, .ready = hb.ready};
  const int64_t now = llb_now_ns();
  pthread_mutex_lock(&a->exec_mu);
  struct peer_watch_view view;
  peer_watch_get(a->peer_watch[p], &view);
  const bool was_ready = view.seen && view.ready;
  const enum peer_watch_verdict v = peer_watch_observe(a->peer_watch[p], &beat, now);
  peer_watch_get(a->peer_watch[p], &view);
  /* a peer that said hello while starting (not ready) and now serves: go on at once */
  const bool became_ready = (v == PEER_WATCH_VERDICT_FINE || v == PEER_WATCH_VERDICT_FIRST) && view.ready && !was_ready;
  if (v == PEER_WATCH_VERDICT_REPLACED) record_failure(a, (enum sched_peer)p, "replaced", &view, 0);
  sched_actor_health_poll_locked(a, now);
  pthread_mutex_unlock(&a->exec_mu);
  if (v == PEER_WATCH_VERDICT_BACK)
    LLB_LOG_INFO("peer_back", "actor=%s engine_id=%s instance=%s pid=%d", peer_actor[p], a->engine_id,
                 view.instance, view.pid);
  if (v == PEER_WATCH_VERDICT_REPLACED || v == PEER_WATCH_VERDICT_BACK || became_ready) wake_step_thread(a);
  llb_arena_destroy(&arena);
}

/* The scheduler's own connection came back: an execute request or reply in flight then may
 * be lost (a nats-server restart), and the worker, which kept its instance, would never be
 * seen failing: the steps in flight are abandoned and recomputed as after a peer failure. */
static void check_own_reconnect(struct scheduler_actor *a) {
  const uint64_t n = bus_num_reconnects(a->bus);
  if (n == a->bus_reconnects_seen) return;
  a->bus_reconnects_seen = n;
  a->peer_fail_gen++;
  atomic_fetch_add(&a->c_bus_recoveries, 1);
  snprintf(a->peer_fail_what, sizeof a->peer_fail_what,
           "the scheduler's NATS connection was re-established (reconnect %llu): messages of the "
           "steps in flight may be lost", (unsigned long long)n);
  LLB_LOG_WARN("bus_reconnect_recovery", "engine_id=%s reconnects=%llu action=abandon_steps_preempt_all",
               a->engine_id, (unsigned long long)n);
  pthread_cond_broadcast(&a->exec_cv);
}

void sched_actor_health_poll_locked(struct scheduler_actor *a, int64_t now_ns) {
  check_own_reconnect(a);
  for (int p = 0; p < SCHED_PEER_COUNT; p++) {
    if (!a->peer_watch[p] || peer_watch_check(a->peer_watch[p], now_ns) != PEER_WATCH_VERDICT_MISSING) continue;
    struct peer_watch_view view;
    peer_watch_get(a->peer_watch[p], &view);
    record_failure(a, (enum sched_peer)p, "missed_beats", &view, (now_ns - view.last_beat_ns) / 1000000);
  }
}

int64_t sched_actor_health_next_check_ns_locked(const struct scheduler_actor *a) {
  int64_t t = INT64_MAX;
  for (int p = 0; p < SCHED_PEER_COUNT; p++) {
    const int64_t n = peer_watch_next_check_ns(a->peer_watch[p]);
    if (n < t) t = n;
  }
  return t;
}

bool sched_actor_health_take_locked(struct scheduler_actor *a, char *what, size_t cap) {
  if (a->peer_fail_seen == a->peer_fail_gen) return false;
  a->peer_fail_seen = a->peer_fail_gen;
  snprintf(what, cap, "%s", a->peer_fail_what);
  return true;
}

bool sched_actor_health_take(struct scheduler_actor *a, char *what, size_t cap) {
  if (!a->peer_watch[0]) return false;
  pthread_mutex_lock(&a->exec_mu);
  sched_actor_health_poll_locked(a, llb_now_ns());
  const bool failed = sched_actor_health_take_locked(a, what, cap);
  pthread_mutex_unlock(&a->exec_mu);
  return failed;
}

llb_status sched_actor_health_init(struct scheduler_actor *a, const char *prefix) {
  if (a->cfg.peer_heartbeat_ms <= 0) return LLB_STATUS_OK;
  const struct peer_watch_config wc = {.interval_ms = a->cfg.peer_heartbeat_ms,
                                       .max_missed_beats = a->cfg.peer_missed_beats};
  for (int p = 0; p < SCHED_PEER_COUNT; p++) {
    llb_status st = peer_watch_create(&wc, &a->peer_watch[p]);
    if (st) return st;
    char subject[BUS_SUBJECT_MAX];
    if (snprintf(subject, sizeof subject, "%s.health.%s.*", prefix, peer_actor[p]) >= (int)sizeof subject)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "prefix '%s' too long", prefix);
    if ((st = bus_subscribe(a->bus, subject, NULL, on_health, a, NULL))) return st;
  }
  LLB_LOG_INFO("peer_watch", "engine_id=%s actors=gpu_worker,kv_manager heartbeat_ms=%lld missed_beats=%d",
               a->engine_id, (long long)a->cfg.peer_heartbeat_ms, a->cfg.peer_missed_beats);
  return LLB_STATUS_OK;
}

void sched_actor_health_free(struct scheduler_actor *a) {
  for (int p = 0; p < SCHED_PEER_COUNT; p++) {
    peer_watch_destroy(a->peer_watch[p]);
    a->peer_watch[p] = NULL;
  }
}
