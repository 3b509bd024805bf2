/* The scheduler actor: intake handlers + the step loop thread (see actor.h). */
#include "actors/scheduler/actor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/scheduler/actor_internal.h"
#include "actors/scheduler/actor_wire.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define STALL_WAIT_MS 50

struct abort_item {
  struct abort_item *next;
  char id[];
};

void scheduler_actor_config_init(struct scheduler_actor_config *c) {
  memset(c, 0, sizeof(*c));
  sched_config_init(&c->sched);
  c->engine_id = "0";
  c->kv_timeout_ms = 5000;
  c->encoder_timeout_ms = 5000;
  c->execute_timeout_ms = 60000;
  c->stats_interval_ms = 1000;
  c->stats_idle_interval_ms = 1000;
  c->peer_heartbeat_ms = 0;
  c->peer_missed_beats = 3;
  c->log_stats_interval_ms = 10000;
  c->durable = false;
  c->ack_wait_ms = 1000;
  c->max_deliver = 3;
  c->max_ack_pending = 4096;
}

static void meta_free_user(void *user) { req_meta_free(user); }

/* ---- intake (handler threads) ---- */

static void log_bad_message(const char *what, const struct bus_msg *msg, llb_status st) {
  char q[600];
  LLB_LOG_WARN("bad_message", "kind=%s subject=%s bytes=%zu status=%s error=%s", what,
               msg->subject, msg->len, llb_strerror(st), llb_log_quote(q, sizeof q, llb_err_last()));
}

bool sched_actor_intake(struct scheduler_actor *a, const struct bus_msg *msg, uint64_t stream_seq,
                        bool replayed, const char *refuse) {
  llb_arena_reset(&a->req_arena);
  struct llb_engine_core_request r;
  llb_status st = llb_engine_core_request_decode(msg->data, msg->len, &a->req_arena, &r);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->c_rejected, 1);
    log_bad_message("EngineCoreRequest", msg, st);
    if (msg->reply && !stream_seq && llb_error_reply_encode_status(st, "", "", &a->req_err_buf) == LLB_STATUS_OK)
      (void)bus_respond(a->bus, msg, a->req_err_buf.data, a->req_err_buf.len, NULL);
    return false;
  }
  struct req_meta *m;
  if (req_meta_from_request(&r, stream_seq, replayed, refuse, &m) != LLB_STATUS_OK) {
    atomic_fetch_add(&a->c_rejected, 1);
    LLB_LOG_ERROR("request_dropped", "reason=out_of_memory bytes=%zu", msg->len);
    return false;
  }
  pthread_mutex_lock(&a->mu);
  if (a->intake_tail) a->intake_tail->next = m;
  else a->intake_head = m;
  a->intake_tail = m;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  return true;
}

/* durable_intake: a message fetched from the requests stream. */
static bool deliver_request(void *user, const struct bus_msg *msg, uint64_t stream_seq, bool replayed,
                            const char *refuse) {
  return sched_actor_intake(user, msg, stream_seq, replayed, refuse);
}

static void on_request(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  (void)sched_actor_intake(user, msg, 0, false, NULL);
}

static void on_abort(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct scheduler_actor *a = user;
  llb_arena_reset(&a->abort_arena);
  struct llb_abort_requests ab;
  llb_status st = llb_abort_requests_decode(msg->data, msg->len, &a->abort_arena, &ab);
  if (st != LLB_STATUS_OK) {
    log_bad_message("AbortRequests", msg, st);
    return;
  }
  for (int32_t i = 0; i < ab.num_request_ids; i++) {
    struct abort_item *it = malloc(sizeof(*it) + ab.request_ids[i].len + 1);
    if (!it) break;
    memcpy(it->id, ab.request_ids[i].data, ab.request_ids[i].len + 1);
    pthread_mutex_lock(&a->mu);
    it->next = a->abort_head;
    a->abort_head = it;
    pthread_mutex_unlock(&a->mu);
    atomic_fetch_add(&a->c_aborted, 1);
  }
  pthread_mutex_lock(&a->mu);
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* ---- step thread: admission, aborts ---- */

static void admit(struct scheduler_actor *a, struct req_meta *list) {
  sched_actor_fetch_history(a, list);
  while (list) {
    struct req_meta *m = list;
    list = m->next;
    m->next = NULL;
    llb_status st;
    if (m->reject_status != LLB_STATUS_OK) { /* refused at intake (dead-lettered) */
      st = LLB_ERRF(m->reject_status, "%s", m->reject_message);
    } else if (sched_find_request(a->sched, m->id)) {
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request_id '%s' is already running", m->id);
    } else {
      struct sched_new_request nr = {
          .request_id = m->id, .prompt_token_ids = m->prompt, .num_prompt_tokens = m->num_prompt,
          .sampling_params = &m->params, .eos_token_id = m->eos_token_id,
          .arrival_time = m->arrival_time, .priority = m->priority, .cache_salt = m->cache_salt,
          .mm_features = m->mm, .num_mm_features = m->num_mm,
          .structured_outputs = m->structured_outputs, .pooling_params = m->pooling_params,
          .resume_output_ids = m->resume_ids, .num_resume_output_ids = m->num_resume, .user = m};
      st = sched_add_request(a->sched, &nr); /* on error m stays ours: refused below */
    }
    if (st == LLB_STATUS_OK) {
      atomic_fetch_add(&a->c_requests, 1);
      free(m->mm);
      m->mm = NULL;
      free(m->mm_blob);
      m->mm_blob = NULL;
      free(m->resume_ids);
      m->resume_ids = NULL;
      continue;
    }
    m->reject_status = st;
    snprintf(m->reject_message, sizeof m->reject_message, "%s", llb_err_last());
    char q[300];
    LLB_LOG_WARN("request_rejected", "req=%s status=%s error=%s", m->id, llb_strerror(st),
                 llb_log_quote(q, sizeof q, m->reject_message));
    atomic_fetch_add(&a->c_rejected, 1);
    if (sched_wire_grow((void **)&a->rejected, &a->cap_rejected, a->num_rejected + 1,
                        sizeof(*a->rejected)) != LLB_STATUS_OK) {
      req_meta_free(m);
      continue;
    }
    a->rejected[a->num_rejected++] = m;
  }
}

static void apply_aborts(struct scheduler_actor *a, struct abort_item *list) {
  while (list) {
    struct abort_item *it = list;
    list = it->next;
    const char *id = it->id;
    if (sched_abort_requests(a->sched, &id, 1, SCHED_FINISH_REASON_ABORT, &a->eo_side) != LLB_STATUS_OK)
      LLB_LOG_ERROR("abort_failed", "req=%s", it->id);
    free(it);
  }
}

/* ---- step thread: one step ---- */

/* Encodes a->out (with the carried ids) into a->buf and stamps first scheduling times. */
static llb_status encode_step(struct scheduler_actor *a) {
  struct llb_scheduler_output m;
  llb_status st = sched_wire_scheduler_output(&a->wire, &a->out, &a->carry_finished,
                                              &a->carry_preempted, &a->carry_free_mm, &m);
  if (st) return st;
  sched_trace_fill_wire(a, a->out.step, a->wire.scheduled, m.num_scheduled_reqs);
  int64_t now = llb_wall_ns();
  for (int32_t i = 0; i < a->out.num_new_reqs; i++) {
    struct req_meta *m = req_meta_find(a->sched, a->out.new_reqs[i].req_id);
    if (m && m->scheduled_time_ns == 0) m->scheduled_time_ns = now;
  }
  return llb_scheduler_output_encode_buf(&m, &a->buf);
}

/* The carried ids went out with a step the bus accepted: forget them. Until then they stay,
 * so that a step that is never sent loses none (sending an id twice is harmless: the worker
 * ignores ids it has no row for). */
static void carries_sent(struct scheduler_actor *a) {
  sched_str_list_clear(&a->carry_finished);
  sched_str_list_clear(&a->carry_preempted);
  sched_str_list_clear(&a->carry_free_mm);
}

/* Decodes the worker's reply and applies it to the scheduler (into a->eo). */
static llb_status apply_reply(struct scheduler_actor *a, const uint8_t *data, size_t len) {
  llb_arena_reset(&a->arena);
  struct llb_model_runner_output r;
  llb_status st = llb_model_runner_output_decode(data, len, &a->arena, &r);
  if (st) return st;
  if (r.error.code != 0) {
    /* NOT_FOUND: the worker does not know a request (it restarted): its state, not the
     * batch's input, so no request becomes a suspect for it */
    a->worker_error = r.error.code != LLB_STATUS_NOT_FOUND;
    snprintf(a->worker_blamed, sizeof a->worker_blamed, "%s", r.failed_req_id.data ? r.failed_req_id.data : "");
    return LLB_ERRF(LLB_STATUS_INTERNAL, "worker error %d%s%s: %s", r.error.code,
                    a->worker_blamed[0] ? " blaming request " : "", a->worker_blamed, r.error.message.data);
  }
  a->mro = r;
  a->have_mro = true;
  sched_actor_collect_prompt_logprobs(a, &r);
  struct sched_model_output mo;
  st = sched_wire_model_output(&a->wire, &r, &mo);
  if (st) return st;
  a->last_applied_step = r.step;
  return sched_update_from_output(a->sched, &mo, &a->eo);
}

/* Sends a->out to the worker (exec_channel.c) and records it as in flight; returns at once.
 * Errors: encoding, exec_channel_send's. */
static llb_status execute_send(struct scheduler_actor *a) {
  if (exec_channel_num_pending(a->exec) >= 2)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "step %llu: two steps already in flight", (unsigned long long)a->out.step);
  llb_status st = encode_step(a);
  if (st) return st;
  sched_trace_exec_sent(a, a->out.step);
  if ((st = exec_channel_send(a->exec, a->out.step, a->buf.data, a->buf.len))) return st;
  carries_sent(a);
  return LLB_STATUS_OK;
}

/* Waits for the oldest step's reply and applies it. Errors: exec_channel_receive's (ABORTED:
 * a peer failure was detected from heartbeats), decoding, an error reply,
 * sched_update_from_output's. */
static llb_status execute_receive(struct scheduler_actor *a) {
  struct exec_reply *reply;
  llb_status st = exec_channel_receive(a->exec, a->health, &reply);
  if (st) return st;
  sched_trace_exec_received(a, reply->step);
  st = apply_reply(a, reply->data, reply->len);
  free(reply);
  return st;
}


/* Tells cfg.on_ready when the engine starts or stops recovering (edges only). */
static void set_recovering(struct scheduler_actor *a, bool recovering) {
  if (a->recovering == recovering) return;
  a->recovering = recovering;
  LLB_LOG_INFO(recovering ? "engine_recovering" : "engine_recovered", "engine_id=%s", a->engine_id);
  if (a->cfg.on_ready) a->cfg.on_ready(a->cfg.on_ready_user, !recovering);
}

static void step_failed(struct scheduler_actor *a, const char *what, llb_status st) {
  char q[600];
  if (st == LLB_STATUS_CLOSED) /* shutting down: the connection is closed or the actor stops */
    LLB_LOG_INFO("step_abandoned", "peer=%s step=%llu reason=%s", what, (unsigned long long)a->out.step,
                 llb_log_quote(q, sizeof q, llb_err_last()));
  else
    LLB_LOG_ERROR("step_failed", "peer=%s step=%llu status=%s error=%s action=preempt_all",
                  what, (unsigned long long)a->out.step, llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
  /* A worker that answered with an error failed on this batch's input: isolate the request
   * it blames (or, naming none, the one that keeps failing) instead of retrying it forever. */
  if (st != LLB_STATUS_CLOSED) set_recovering(a, true);
  const bool worker_error = a->worker_error;
  if (a->worker_blamed[0]) {
    struct req_meta *m = req_meta_find(a->sched, a->worker_blamed);
    if (m) {
      m->reject_status = LLB_STATUS_INVALID_ARGUMENT;
      snprintf(m->reject_message, sizeof m->reject_message, "%s", llb_err_last());
    }
  }
  if (sched_step_failed(a->sched, a->worker_blamed, worker_error, &a->eo_side) != LLB_STATUS_OK)
    LLB_LOG_ERROR("step_failed_recovery", "reason=out_of_memory");
  const bool blamed = a->worker_blamed[0] != '\0';
  a->worker_error = false;
  a->worker_blamed[0] = '\0';
  if (blamed) return; /* the cause is gone: no back-off */
  a->backoff_ms = a->backoff_ms ? a->backoff_ms * 2 : BACKOFF_MIN_MS;
  if (a->backoff_ms > BACKOFF_MAX_MS) a->backoff_ms = BACKOFF_MAX_MS;
}

/* The KV round trip of this step; OK or the failure (already recorded with LLB_ERRF). */
static llb_status kv_round_trip(struct scheduler_actor *a) {
  struct llb_kv_step m;
  llb_status st = sched_wire_kv_step(&a->wire, &a->kv, &m);
  m.reset = a->kv_reset_pending;
  if (!st) st = llb_kv_step_encode_buf(&m, &a->buf);
  if (st) return st;
  struct bus_msg *reply = NULL;
  st = bus_request(a->bus, a->subj_kv, a->buf.data, a->buf.len, NULL, a->cfg.kv_timeout_ms, &reply);
  if (st) return st;
  llb_arena_reset(&a->arena);
  struct llb_kv_step_result r;
  st = llb_kv_step_result_decode(reply->data, reply->len, &a->arena, &r);
  bus_msg_destroy(reply);
  if (st) return st;
  if (r.error.code != 0)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "kv_manager error %d: %s", r.error.code, r.error.message.data);
  a->kv_reset_pending = false;
  st = sched_wire_kv_result(&r, &a->kv_res);
  if (st) return st;
  return sched_apply_kv_result(a->sched, &a->kv_res, &a->out);
}

/* The encoder-cache round trip of this step (its ops are already applied to the mirror);
 * OK or the failure. A disagreeing answer only resets the accounting (see scheduler.h). */
static llb_status encoder_round_trip(struct scheduler_actor *a) {
  struct llb_encoder_step m;
  llb_status st = sched_wire_encoder_step(&a->wire, &a->enc, &m);
  if (!st) st = llb_encoder_step_encode_buf(&m, &a->buf);
  if (st) return st;
  struct bus_msg *reply = NULL;
  st = bus_request(a->bus, a->subj_encoder, a->buf.data, a->buf.len, NULL,
                   a->cfg.encoder_timeout_ms > 0 ? a->cfg.encoder_timeout_ms : 5000, &reply);
  if (st) return st;
  llb_arena_reset(&a->arena);
  struct llb_encoder_step_result r;
  st = llb_encoder_step_result_decode(reply->data, reply->len, &a->arena, &r);
  bus_msg_destroy(reply);
  if (st) return st;
  if (r.error.code != 0)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "encoder_cache error %d: %s", r.error.code, r.error.message.data);
  if (r.step != a->enc.step)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "encoder_cache answered step %llu, sent %llu",
                    (unsigned long long)r.step, (unsigned long long)a->enc.step);
  sched_apply_encoder_result(a->sched, &a->enc, r.results, r.num_results, r.num_free_slots);
  return LLB_STATUS_OK;
}

static llb_status carry_ids(struct sched_str_list *dst, const struct sched_str_list *src) {
  for (int32_t i = 0; i < src->num; i++) {
    llb_status st = sched_str_list_add(dst, sched_str_list_get(src, i));
    if (st) return st;
  }
  return LLB_STATUS_OK;
}

/* This step's ids the worker must drop (finished, preempted, freed encoder items) go with the
 * next SchedulerOutput instead: the step is not sent (empty, or its planning failed). */
static void carry_all(struct scheduler_actor *a) {
  if (carry_ids(&a->carry_finished, &a->out.finished_req_ids) ||
      carry_ids(&a->carry_preempted, &a->out.preempted_req_ids) ||
      carry_ids(&a->carry_free_mm, &a->out.free_encoder_mm_hashes))
    LLB_LOG_ERROR("carry_ids_failed", "reason=out_of_memory");
}

enum plan_result {
  PLAN_SCHEDULE_FAILED, /* schedule() failed: nothing was done */
  PLAN_FAILED,          /* a KV or encoder round trip (or the encoder plan) failed */
  PLAN_EMPTY,           /* no tokens for the worker this time */
  PLAN_READY            /* a.out is a step to send */
};

/* Plans one step: schedule(), then its one KV and one encoder round trip. An empty step keeps
 * the ids the worker must drop for the next SchedulerOutput; a failure forgets every step in
 * flight (their replies are dropped by step number). *did: a round trip was made. */
static enum plan_result plan_step(struct scheduler_actor *a, bool *did) {
  const int64_t plan_ns = llb_wall_ns();
  int64_t kv_ns[2] = {0, 0};
  llb_status st = sched_schedule(a->sched, &a->out, &a->kv);
  if (st) {
    exec_channel_forget(a->exec);
    step_failed(a, "schedule", st);
    return PLAN_SCHEDULE_FAILED;
  }
  if (a->kv.num_ops > 0) {
    *did = true;
    kv_ns[0] = llb_wall_ns();
    st = kv_round_trip(a);
    kv_ns[1] = llb_wall_ns();
    if (st) {
      atomic_fetch_add(&a->c_kv_fail, 1);
      exec_channel_forget(a->exec);
      carry_all(a);
      step_failed(a, "kv_manager", st);
      return PLAN_FAILED;
    }
  }
  if ((st = sched_schedule_encoder(a->sched, &a->out, &a->enc))) {
    exec_channel_forget(a->exec);
    carry_all(a);
    step_failed(a, "schedule_encoder", st);
    return PLAN_FAILED;
  }
  if (a->enc.num_ops > 0 || a->enc.reset) {
    *did = true;
    if ((st = encoder_round_trip(a))) {
      atomic_fetch_add(&a->c_enc_fail, 1);
      exec_channel_forget(a->exec);
      carry_all(a);
      step_failed(a, "encoder_cache", st);
      return PLAN_FAILED;
    }
  }
  if (a->out.total_num_scheduled_tokens == 0) {
    carry_all(a);
    return PLAN_EMPTY;
  }
  sched_trace_step_planned(a, plan_ns, kv_ns[0], kv_ns[1]);
  return PLAN_READY;
}

/* The engine's worker or kv_manager died or was replaced (heartbeats, peer_health.c): the
 * steps in flight are forgotten (a reply from a dead worker never comes; one that still comes
 * is dropped by step number), every running request is preempted (recompute) and the next
 * KV step resets the kv_manager, as after a timeout, but now rather than at the timeout. */
static void peer_failed(struct scheduler_actor *a, llb_status st) {
  exec_channel_forget(a->exec);
  a->kv_reset_pending = true;
  step_failed(a, "peer_health", st);
}

/* One synchronous step; returns true if it did anything (tokens executed or kv ops sent). */
static bool run_step(struct scheduler_actor *a) {
  a->have_mro = false;
  bool did = false;
  switch (plan_step(a, &did)) {
  case PLAN_SCHEDULE_FAILED: return false;
  case PLAN_FAILED: return true;
  case PLAN_EMPTY: a->backoff_ms = 0; return did;
  case PLAN_READY: break;
  }
  /* the same send and wait as the asynchronous pipeline at depth 1: a wait that a peer
   * failure seen in the heartbeats ends at once, which bus_request could not offer */
  llb_status st = execute_send(a);
  if (!st) st = execute_receive(a);
  if (st == LLB_STATUS_ABORTED) { /* a peer failure, already counted and logged */
    carry_all(a);
    peer_failed(a, st);
    return true;
  }
  if (st) {
    carry_all(a); /* the worker may not have seen this step's ids */
    atomic_fetch_add(&a->c_exec_fail, 1);
    a->kv_reset_pending = true;
    step_failed(a, "gpu_worker", st);
    return true;
  }
  atomic_fetch_add(&a->c_steps, 1);
  a->backoff_ms = 0;
  set_recovering(a, false);
  return true;
}

/* A failed worker round trip: its KV contents are unknown, every step in flight is forgotten
 * (their replies, should they come, are dropped by step number). */
static void exec_failed(struct scheduler_actor *a, llb_status st) {
  atomic_fetch_add(&a->c_exec_fail, 1);
  a->kv_reset_pending = true;
  exec_channel_forget(a->exec);
  step_failed(a, "gpu_worker", st);
}

/* One turn of the asynchronous pipeline (depth 2): plans and sends a step when fewer than
 * two are in flight, then waits for the oldest reply when two are, or when nothing was sent;
 * the step's EngineCoreOutputs are published by the caller right after. So while the worker
 * computes step N+1, the scheduler applies N, publishes its outputs and sends N+2. Returns
 * true if it did anything. */
static bool run_step_async(struct scheduler_actor *a) {
  a->have_mro = false;
  bool did = false, sent = false;
  if (exec_channel_num_pending(a->exec) < 2) {
    switch (plan_step(a, &did)) {
    case PLAN_SCHEDULE_FAILED: return false;
    case PLAN_FAILED: return true;
    case PLAN_EMPTY: break;
    case PLAN_READY: {
      const llb_status st = execute_send(a);
      if (st) {
        carry_all(a); /* not sent: its ids go with the next step */
        exec_failed(a, st);
        return true;
      }
      sent = did = true;
      break;
    }
    }
  }
  if (exec_channel_num_pending(a->exec) == 2 || (!sent && exec_channel_num_pending(a->exec) > 0)) {
    did = true;
    llb_status st = execute_receive(a);
    if (st == LLB_STATUS_ABORTED) { /* a peer failure, already counted and logged */
      peer_failed(a, st);
      return true;
    }
    if (st) {
      exec_failed(a, st);
      return true;
    }
    atomic_fetch_add(&a->c_steps, 1);
    set_recovering(a, false);
  }
  if (did) a->backoff_ms = 0;
  return did;
}

static int64_t deadline_ms_to_abs(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  int64_t ns = ts->tv_nsec + (ms % 1000) * 1000000;
  ts->tv_sec += ms / 1000 + ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
  return ms;
}

static void *step_thread(void *arg) {
  struct scheduler_actor *a = arg;
  bool last_active = false;
  a->last_stats_ns = llb_now_ns();
  for (;;) {
    pthread_mutex_lock(&a->mu);
    bool busy = sched_num_unfinished(a->sched) > 0;
    int64_t wait_ms = -1; /* -1 = no wait */
    if (a->backoff_ms > 0) wait_ms = a->backoff_ms;
    else if (!busy && !last_active) wait_ms = a->cfg.stats_idle_interval_ms;
    else if (busy && !last_active) wait_ms = STALL_WAIT_MS;
    if (exec_channel_num_pending(a->exec) > 0 && a->backoff_ms == 0) wait_ms = -1; /* a reply is due */
    if (wait_ms > 0 && !a->stop && !a->intake_head && !a->abort_head) {
      int64_t since_stats = (llb_now_ns() - a->last_stats_ns) / 1000000;
      int64_t stats_in = (busy ? a->cfg.stats_interval_ms : a->cfg.stats_idle_interval_ms) - since_stats;
      if (stats_in < wait_ms) wait_ms = stats_in > 0 ? stats_in : 0;
      if (wait_ms > 0) {
        struct timespec ts;
        deadline_ms_to_abs(&ts, wait_ms);
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
      }
    }
    if (a->stop) {
      pthread_mutex_unlock(&a->mu);
      break;
    }
    struct req_meta *intake = a->intake_head;
    struct abort_item *aborts = a->abort_head;
    a->intake_head = a->intake_tail = NULL;
    a->abort_head = NULL;
    pthread_mutex_unlock(&a->mu);

    admit(a, intake);
    apply_aborts(a, aborts);
    sched_actor_resync_take(a);
    char peer_what[384];
    if (peer_health_take(a->health, peer_what, sizeof peer_what))
      peer_failed(a, LLB_ERRF(LLB_STATUS_ABORTED, "%s", peer_what));
    bool stepped = false, did = false;
    bool async = a->cfg.sched.async_scheduling;
    if (sched_num_unfinished(a->sched) > 0 || last_active || exec_channel_num_pending(a->exec) > 0) {
      did = async ? run_step_async(a) : run_step(a);
      stepped = true;
    }
    sched_actor_publish_outputs(a, async ? a->last_applied_step : a->out.step, stepped);
    last_active = did;
    busy = sched_num_unfinished(a->sched) > 0;
    if (!busy && exec_channel_num_pending(a->exec) == 0) set_recovering(a, false); /* nothing waits */
    int64_t since_stats = (llb_now_ns() - a->last_stats_ns) / 1000000;
    if (since_stats >= (busy || did ? a->cfg.stats_interval_ms : a->cfg.stats_idle_interval_ms))
      sched_actor_publish_stats(a);
    struct sched_stats snap;
    sched_get_stats(a->sched, &snap);
    sched_engine_metrics_update(a->metrics, &snap, llb_now_ns());
  }
  return NULL;
}

/* ---- lifecycle ---- */

/* peer_health: a failure was detected from a heartbeat: a step thread waiting for a worker
 * reply takes it now. */
static void on_peer_failure(void *user) {
  struct scheduler_actor *a = user;
  exec_channel_wake(a->exec);
}

/* Wakes the step thread out of its idle or back-off wait. */
static void wake_step_thread(void *user) {
  struct scheduler_actor *a = user;
  pthread_mutex_lock(&a->mu);
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

llb_status scheduler_actor_create(struct bus *bus, const char *prefix,
                                  const struct scheduler_actor_config *cfg,
                                  struct scheduler_actor **out) {
  if (!bus || !cfg || !out || !cfg->engine_id || cfg->kv_timeout_ms <= 0 || cfg->peer_heartbeat_ms < 0 ||
      (cfg->peer_heartbeat_ms > 0 && cfg->peer_missed_beats < 1) ||
      cfg->execute_timeout_ms <= 0 || cfg->stats_interval_ms <= 0 || cfg->stats_idle_interval_ms <= 0 || cfg->log_stats_interval_ms < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "scheduler actor: need bus, engine id and positive timeouts/intervals");
  *out = NULL;
  struct scheduler_actor *a = calloc(1, sizeof(*a));
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler actor");
  a->bus = bus;
  a->cfg = *cfg;
  snprintf(a->engine_id, sizeof a->engine_id, "%s", cfg->engine_id);
  a->cfg.engine_id = a->engine_id;
  snprintf(a->model_name, sizeof a->model_name, "%s", cfg->model_name ? cfg->model_name : "");
  snprintf(a->instance, sizeof a->instance, "%s", cfg->instance ? cfg->instance : "");
  a->cfg.model_name = a->model_name;
  a->cfg.instance = a->instance;
  pthread_mutex_init(&a->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  llb_arena_init(&a->req_arena, NULL, 0);
  llb_arena_init(&a->abort_arena, NULL, 0);
  llb_arena_init(&a->resync_arena, NULL, 0);
  llb_arena_init(&a->arena, NULL, 0);
  sched_output_init(&a->out);
  kv_step_init(&a->kv);
  encoder_step_init(&a->enc);
  kv_step_result_init(&a->kv_res);
  sched_engine_outputs_init(&a->eo);
  sched_engine_outputs_init(&a->eo_side);
  struct sched_config sc = cfg->sched;
  sc.free_user = meta_free_user; /* the scheduler's registry holds each live request's meta */
  llb_status st = sched_create(&sc, &a->sched);
  if (!st) st = sched_engine_metrics_create(cfg->metrics, cfg->log_stats_interval_ms * 1000000, &a->metrics);
  const struct { char *buf; const char *kind; } subj[] = {
      {a->subj_requests, "requests"}, {a->subj_abort, "abort"}, {a->subj_kv, "kv"},
      {a->subj_execute, "execute"}, {a->subj_outputs, "outputs"}, {a->subj_stats, "stats"},
      {a->subj_encoder, "encoder"}};
  for (size_t i = 0; i < sizeof subj / sizeof subj[0] && !st; i++)
    st = bus_subject_engine(prefix, a->engine_id, subj[i].kind, subj[i].buf, BUS_SUBJECT_MAX);
  if (!st) st = exec_channel_create(bus, a->subj_execute, cfg->execute_timeout_ms, &a->exec);
  const struct peer_health_config hc = {
      .bus = bus, .prefix = prefix, .engine_id = a->engine_id, .heartbeat_ms = cfg->peer_heartbeat_ms,
      .missed_beats = cfg->peer_missed_beats, .on_failure = on_peer_failure, .on_peer_up = wake_step_thread,
      .user = a};
  if (!st) st = peer_health_create(&hc, &a->health);
  if (st) goto fail;
  /* A previous scheduler of this engine may have left requests and blocks in the kv_manager
   * (it died): this one's mirror starts empty, so the kv_manager starts over too. */
  a->kv_reset_pending = true;
  if (pthread_create(&a->thread, NULL, step_thread, a) != 0) {
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "scheduler actor: pthread_create failed");
    goto fail;
  }
  a->thread_started = true;
  st = bus_subscribe(bus, a->subj_abort, NULL, on_abort, a, NULL);
  if (!st) st = sched_actor_resync_init(a, prefix);
  const struct durable_intake_config dc = {
      .bus = bus, .prefix = prefix, .engine_id = a->engine_id, .ack_wait_ms = cfg->ack_wait_ms,
      .max_deliver = cfg->max_deliver, .max_ack_pending = cfg->max_ack_pending,
      .stream_replicas = cfg->stream_replicas, .deliver = deliver_request, .user = a};
  if (!st) st = cfg->durable ? durable_intake_start(&dc, &a->durable)
                             : bus_subscribe(bus, a->subj_requests, NULL, on_request, a, NULL);
  if (st) goto fail;
  LLB_LOG_INFO("scheduler_started", "requests=%s num_blocks=%d block_size=%d max_num_seqs=%d "
               "max_num_batched_tokens=%d max_model_len=%d policy=%s async_scheduling=%s",
               a->subj_requests, cfg->sched.num_blocks, cfg->sched.block_size,
               cfg->sched.max_num_seqs, cfg->sched.max_num_batched_tokens, cfg->sched.max_model_len,
               cfg->sched.policy == SCHED_POLICY_PRIORITY ? "priority" : "fcfs",
               cfg->sched.async_scheduling ? "on" : "off");
  *out = a;
  return LLB_STATUS_OK;
fail:
  scheduler_actor_stop(a);
  scheduler_actor_destroy(a);
  return st;
}

void scheduler_actor_stop(struct scheduler_actor *a) {
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->stop = true;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  exec_channel_stop(a->exec); /* a step thread waiting for a worker reply */
  if (a->thread_started) pthread_join(a->thread, NULL);
  a->thread_started = false;
  durable_intake_stop(a->durable);
}

void scheduler_actor_destroy(struct scheduler_actor *a) {
  if (!a) return;
  scheduler_actor_stop(a);
  while (a->intake_head) {
    struct req_meta *m = a->intake_head;
    a->intake_head = m->next;
    req_meta_free(m);
  }
  while (a->abort_head) {
    struct abort_item *it = a->abort_head;
    a->abort_head = it->next;
    free(it);
  }
  sched_actor_free_output_users(&a->eo_side); /* final outputs never published */
  sched_actor_free_output_users(&a->eo);
  for (int64_t i = 0; i < a->num_rejected; i++) req_meta_free(a->rejected[i]);
  free(a->rejected);
  durable_intake_destroy(a->durable);
  sched_actor_resync_free(a);
  peer_health_destroy(a->health);
  exec_channel_destroy(a->exec);
  sched_trace_free(a);
  sched_destroy(a->sched);
  sched_engine_metrics_destroy(a->metrics);
  sched_output_free(&a->out);
  kv_step_free(&a->kv);
  kv_step_result_free(&a->kv_res);
  sched_engine_outputs_free(&a->eo);
  sched_engine_outputs_free(&a->eo_side);
  sched_str_list_free(&a->carry_finished);
  sched_str_list_free(&a->carry_preempted);
  sched_str_list_free(&a->carry_free_mm);
  encoder_step_free(&a->enc);
  sched_wire_free(&a->wire);
  free(a->outs);
  llb_arena_destroy(&a->req_arena);
  llb_arena_destroy(&a->abort_arena);
  llb_arena_destroy(&a->resync_arena);
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->buf);
  llb_buf_free(&a->req_err_buf);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

void scheduler_actor_get_counters(struct scheduler_actor *a, struct scheduler_actor_counters *out) {
  uint64_t peer_fail = 0, bus_recoveries = 0;
  struct durable_intake_counters dc;
  durable_intake_get_counters(a->durable, &dc);
  if (a->health) peer_health_counters(a->health, &peer_fail, &bus_recoveries);
  *out = (struct scheduler_actor_counters){
      .num_steps = atomic_load(&a->c_steps), .num_requests = atomic_load(&a->c_requests),
      .num_rejected = atomic_load(&a->c_rejected), .num_aborted = atomic_load(&a->c_aborted),
      .num_kv_failures = atomic_load(&a->c_kv_fail),
      .num_execute_failures = atomic_load(&a->c_exec_fail),
      .num_encoder_failures = atomic_load(&a->c_enc_fail),
      .num_outputs_published = atomic_load(&a->c_pub),
      .num_peer_failures = peer_fail,
      .num_replayed = dc.replayed,
      .num_dead_lettered = dc.dead_lettered,
      .num_redelivered_held = dc.redelivered_held,
      .num_acked = dc.acked,
      .num_resyncs = atomic_load(&a->c_resyncs),
      .num_history_resumed = atomic_load(&a->c_history_resumed),
      .num_bus_recoveries = bus_recoveries};
}
