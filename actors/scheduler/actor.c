/* The scheduler actor: the step loop thread and the lifecycle (see actor.h). The pieces it
 * drives are modules with their own state, given what they need as arguments: intake.c,
 * durable_intake.c, exec_channel.c, peer_health.c, output_publisher.c, step_trace.c,
 * history_fetch.c, prompt_logprobs.c (README.md). */
#include "actors/scheduler/actor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/scheduler/actor_wire.h"
#include "actors/scheduler/durable_intake.h"
#include "actors/scheduler/engine_metrics.h"
#include "actors/scheduler/exec_channel.h"
#include "actors/scheduler/handoff.h"
#include "actors/scheduler/history_fetch.h"
#include "actors/scheduler/intake.h"
#include "actors/scheduler/output_publisher.h"
#include "actors/scheduler/peer_health.h"
#include "actors/scheduler/prompt_logprobs.h"
#include "actors/scheduler/req_meta.h"
#include "actors/scheduler/step_trace.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define STALL_WAIT_MS 50
/* KV transfers under way and nothing else to run: ask the worker this often while a request
 * waits for its KV, and this often while only exports are held (a decode engine that had part
 * of a prompt cached fetches only the rest, and such an export ends at its expiry) */
#define KV_POLL_MS 2
#define KV_EXPORT_POLL_MS 50

/* The poll interval now (ms), 0 when no transfer is under way. */
static int64_t kv_poll_ms(const struct scheduler *s) {
  if (!sched_kv_pending(s)) return 0;
  struct sched_stats st;
  sched_get_stats(s, &st);
  return st.num_waiting_for_remote_kvs > 0 ? KV_POLL_MS : KV_EXPORT_POLL_MS;
}

/* The actor's own state: the step loop's (the scheduler, this step's plain structs and their
 * wire buffers, failure handling) and the modules it drives, each with its own state. */
struct scheduler_actor {
  struct bus *bus;                 /* from start */
  struct scheduler_actor_options cfg; /* model_name, instance: NULL (below) */
  char engine_id[BUS_TOKEN_MAX + 1];
  char *model_name, *instance;     /* the options' copies, for start; may be NULL */
  char subj_kv[BUS_SUBJECT_MAX], subj_encoder[BUS_SUBJECT_MAX];
  pthread_t thread;
  bool thread_started;

  /* modules, each with its own state */
  struct intake *intake;           /* handler threads -> step thread: requests, aborts, resyncs */
  struct durable_intake *durable;  /* requests from the JetStream stream; NULL unless cfg.durable */
  struct exec_channel *exec;       /* the worker round trip: steps in flight, replies queued */
  struct peer_health *health;      /* failures seen in heartbeats and own reconnects */
  struct output_publisher *pub;    /* EngineCoreOutputs and SchedulerStats */
  struct step_trace *trace;        /* the traced requests' step spans */
  struct sched_engine_metrics *metrics; /* series and the engine_stats line */
  struct handoff *handoff;         /* disaggregated prefill/decode: hand-offs out and in */

  /* step-thread state */
  struct scheduler *sched;
  /* The worker's reply of this step (arrays in `arena`, valid until the next step): its
   * logprobs rows go out with the step's EngineCoreOutputs. */
  struct llb_model_runner_output mro;
  bool have_mro;
  uint64_t last_applied_step;
  struct req_meta **rejected;      /* [cap_rejected] this iteration's refused requests */
  int64_t num_rejected, cap_rejected;
  struct sched_output out;
  struct kv_step kv;
  struct kv_step_result kv_res;
  struct sched_engine_outputs eo, eo_side;
  struct sched_str_list carry_finished, carry_preempted, carry_free_mm;
  struct encoder_step enc;         /* this step's encoder ops */
  struct sched_wire wire;
  struct llb_arena arena;          /* decoded replies, reset per round trip */
  struct llb_buf buf;              /* encoded messages */
  int64_t backoff_ms;
  bool recovering; /* a failure was seen and no step applied since (cfg.on_ready reported it) */
  int64_t last_stats_ns;
  int32_t last_stats_load; /* running + waiting in the last stats published */
  /* the last failed execute: the worker answered with an error (not a timeout or a bus
   * failure), and the request it blamed ("" none); sched_step_failed isolates it */
  bool worker_error;
  char worker_blamed[256];
  int64_t last_kv_poll_ns;         /* the last step sent (it polls the worker's KV transfers) */

  atomic_uint_fast64_t c_steps, c_requests, c_rejected, c_kv_fail, c_exec_fail, c_enc_fail, c_resyncs,
      c_history_resumed;
};

void scheduler_actor_options_init(struct scheduler_actor_options *c) {
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

/* ---- step thread: admission, aborts ---- */

/* Admits the queued requests (a refused one gets an ERROR output with the next publish);
 * replays and resends first get the outputs they had (history_fetch.c). */
static void admit(struct scheduler_actor *a, struct req_meta *list) {
  const int32_t resumed = history_fetch(a->bus, a->engine_id, a->sched, &a->eo_side, list);
  atomic_fetch_add(&a->c_history_resumed, (uint64_t)resumed);
  while (list) {
    struct req_meta *m = list;
    list = m->next;
    m->next = NULL;
    llb_status st;
    const char *handoff_refused = NULL;
    if (m->reject_status != LLB_STATUS_OK) { /* refused at intake (dead-lettered) */
      st = LLB_ERRF(m->reject_status, "%s", m->reject_message);
    } else if ((handoff_refused = handoff_admit_check(a->handoff, m))) {
      st = LLB_ERRF(LLB_STATUS_ABORTED, "%s", handoff_refused);
    } else if (sched_find_request(a->sched, m->id)) {
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request_id '%s' is already running", m->id);
    } else {
      struct sched_new_request nr = {
          .request_id = m->id, .prompt_token_ids = m->prompt, .num_prompt_tokens = m->num_prompt,
          .sampling_params = &m->params, .eos_token_id = m->eos_token_id,
          .arrival_time = m->arrival_time, .priority = m->priority, .cache_salt = m->cache_salt,
          .mm_features = m->mm, .num_mm_features = m->num_mm,
          .structured_outputs = m->structured_outputs, .pooling_params = m->pooling_params,
          .resume_output_ids = m->resume_ids, .num_resume_output_ids = m->num_resume,
          .lora_name = m->lora_name, .lora_int_id = m->lora_int_id, .user = m,
          /* a hand-off: its KV is fetched from the prefill engine (with --kv-transfer) */
          .kv_remote_engine_id = m->prefill_engine_id, .kv_remote_request_id = m->remote_request_id,
          .kv_remote_num_tokens = m->prefill_engine_id ? m->remote_num_tokens : 0};
      st = sched_add_request(a->sched, &nr); /* on error m stays ours: refused below */
    }
    if (st == LLB_STATUS_OK) {
      atomic_fetch_add(&a->c_requests, 1);
      (void)handoff_replayed(a->handoff, a->sched, m, &a->eo_side); /* m may be owned by an output now */
      if (!sched_find_request(a->sched, m->id)) continue;
      free(m->mm);
      m->mm = NULL;
      free(m->mm_blob);
      m->mm_blob = NULL;
      if (!m->resync) { /* else kept for its first output: it may finish in its first step */
        free(m->resume_ids);
        m->resume_ids = NULL;
      }
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

static void apply_aborts(struct scheduler_actor *a, struct intake_id *list) {
  while (list) {
    struct intake_id *it = list;
    list = it->next;
    const char *id = it->id;
    /* a decode engine remembers aborts of requests it does not run (yet): a hand-off racing
     * its abort is refused when it comes (handoff.h) */
    if (a->cfg.role == LLB_ENGINE_ROLE_DECODE && !sched_find_request(a->sched, id)) handoff_note_abort(a->handoff, id);
    if (sched_abort_requests(a->sched, &id, 1, SCHED_FINISH_REASON_ABORT, &a->eo_side) != LLB_STATUS_OK)
      LLB_LOG_ERROR("abort_failed", "req=%s", it->id);
    free(it);
  }
}

/* Marks the requests an output processor asked to resync: each one's next output carries its
 * whole output from position 0 with the first-output fields (output_publisher.c). */
static void take_resyncs(struct scheduler_actor *a, struct intake_id *list) {
  while (list) {
    struct intake_id *it = list;
    list = it->next;
    struct req_meta *m = req_meta_find(a->sched, it->id);
    if (m && !m->resync) {
      m->resync = true;
      atomic_fetch_add(&a->c_resyncs, 1);
      LLB_LOG_INFO("request_resync", "req=%s reason=output_processor_asked", it->id);
    }
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
  step_trace_fill_wire(a->trace, a->out.step, a->wire.scheduled, m.num_scheduled_reqs);
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
  sched_prompt_logprobs_collect(a->sched, &r);
  struct sched_model_output mo;
  st = sched_wire_model_output(&a->wire, &r, &mo);
  if (st) return st;
  a->last_applied_step = r.step;
  st = sched_update_from_output(a->sched, &mo, &a->eo);
  if (!st) handoff_collect(a->handoff, a->sched, &a->eo); /* first tokens of disaggregated requests */
  return st;
}

/* Sends a->out to the worker (exec_channel.c) and records it as in flight; returns at once.
 * Errors: encoding, exec_channel_send's. */
static llb_status execute_send(struct scheduler_actor *a) {
  if (exec_channel_num_pending(a->exec) >= 2)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "step %llu: two steps already in flight", (unsigned long long)a->out.step);
  llb_status st = encode_step(a);
  if (st) return st;
  step_trace_exec_sent(a->trace, a->out.step);
  if ((st = exec_channel_send(a->exec, a->out.step, a->buf.data, a->buf.len))) return st;
  carries_sent(a);
  return LLB_STATUS_OK;
}

/* Waits for the oldest step's reply and applies it. Errors: exec_channel_receive's (ABORTED:
 * a peer failure was detected from heartbeats), decoding, an error reply,
 * sched_update_from_output's. */
static llb_status execute_receive(struct scheduler_actor *a) {
  bus_uncork(a->bus); /* it waits: what the turn published goes out (step_thread) */
  struct exec_reply *reply;
  llb_status st = exec_channel_receive(a->exec, a->health, &reply);
  if (st) return st;
  step_trace_exec_received(a->trace, reply->step);
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

/* The step was never sent (a round trip or the send failed): its ids and its exports go with the
 * next one. */
static void carry_unsent(struct scheduler_actor *a) {
  carry_all(a);
  sched_kv_sends_unsent(a->sched, &a->out);
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
  const int64_t plan_ns = llb_wall_ns(), now_ns = llb_now_ns();
  int64_t kv_ns[2] = {0, 0};
  const int64_t poll_ms = kv_poll_ms(a->sched);
  sched_kv_tick(a->sched, poll_ms > 0 && now_ns - a->last_kv_poll_ns >= poll_ms * 1000000LL, (double)now_ns / 1e9);
  llb_status st = sched_schedule(a->sched, &a->out, &a->kv);
  if (st) {
    exec_channel_forget(a->exec);
    step_failed(a, "schedule", st);
    return PLAN_SCHEDULE_FAILED;
  }
  if (!kv_step_empty(&a->kv)) {
    *did = true;
    kv_ns[0] = llb_wall_ns();
    st = kv_round_trip(a);
    kv_ns[1] = llb_wall_ns();
    if (st) {
      atomic_fetch_add(&a->c_kv_fail, 1);
      exec_channel_forget(a->exec);
      carry_unsent(a);
      sched_kv_resync(a->sched); /* its state is unknown: the next kv step carries every held block */
      step_failed(a, "kv_manager", st);
      return PLAN_FAILED;
    }
  }
  if ((st = sched_schedule_encoder(a->sched, &a->out, &a->enc))) {
    exec_channel_forget(a->exec);
    carry_unsent(a);
    step_failed(a, "schedule_encoder", st);
    return PLAN_FAILED;
  }
  if (a->enc.num_ops > 0 || a->enc.reset) {
    *did = true;
    if ((st = encoder_round_trip(a))) {
      atomic_fetch_add(&a->c_enc_fail, 1);
      exec_channel_forget(a->exec);
      carry_unsent(a);
      step_failed(a, "encoder_cache", st);
      return PLAN_FAILED;
    }
  }
  if (a->out.total_num_scheduled_tokens == 0 && !sched_output_has_kv(&a->out)) {
    carry_all(a);
    return PLAN_EMPTY;
  }
  a->last_kv_poll_ns = llb_now_ns(); /* every step's output reports the transfers that ended */
  step_trace_planned(a->trace, a->sched, &a->out, plan_ns, kv_ns[0], kv_ns[1]);
  return PLAN_READY;
}

/* The engine's worker or kv_manager died or was replaced, or the bus reconnected (heartbeats,
 * peer_health.c): the steps in flight are forgotten (a reply from a dead worker never comes;
 * one that still comes is dropped by step number) and every running request is preempted
 * (recompute), as after a timeout, but now rather than at the timeout. The next KV step
 * resyncs every held block and drops the prefix cache (a new kv_manager has none; the worker's
 * KV contents may be gone too). Exports end under a new epoch unless only the kv_manager
 * failed: then their blocks are in the resync and the worker still holds their contents. */
static void peer_failed(struct scheduler_actor *a, llb_status st) {
  const bool kv_only = peer_health_taken_kv_only(a->health); /* the take that led here */
  exec_channel_forget(a->exec);
  sched_kv_reset(a->sched);
  if (!kv_only) sched_kv_new_epoch(a->sched);
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
  if (st) sched_kv_sends_unsent(a->sched, &a->out); /* not sent: its exports go with the next step */
  if (!st) st = execute_receive(a);
  if (st == LLB_STATUS_ABORTED) { /* a peer failure, already counted and logged */
    carry_all(a);
    peer_failed(a, st);
    return true;
  }
  if (st) {
    carry_all(a); /* the worker may not have seen this step's ids */
    atomic_fetch_add(&a->c_exec_fail, 1);
    sched_kv_reset(a->sched);
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
  sched_kv_reset(a->sched);
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
        carry_unsent(a); /* not sent: its ids and exports go with the next step */
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

/* Publishes this turn's outputs (output_publisher.c), then ends the step spans. */
static void publish_outputs(struct scheduler_actor *a, uint64_t step, bool with_step) {
  const struct output_step s = {.step = step, .with_step = with_step, .rejected = a->rejected,
                                .num_rejected = a->num_rejected, .side = &a->eo_side, .eo = &a->eo,
                                .mro = a->have_mro ? &a->mro : NULL, .sched = a->sched};
  const int64_t end_ns = output_publisher_publish(a->pub, &s);
  a->num_rejected = 0; /* published and freed */
  step_trace_steps_done(a->trace, step, with_step, end_ns);
}

/* Running + waiting as the routers count them: requests received and not yet admitted (queued
 * in the intake while a step runs, up to a whole slow prefill step) wait too. Without them an
 * engine's stats during a long step said 2 while 8 had arrived, and the routers, taking the
 * snapshot to count what they sent before it, sent it more (docs/scaling.md). */
static int32_t stats_load(const struct scheduler_actor *a) {
  return sched_num_unfinished(a->sched) + intake_num_requests(a->intake);
}

static void publish_stats(struct scheduler_actor *a) {
  struct sched_stats s;
  sched_get_stats(a->sched, &s);
  s.num_waiting += intake_num_requests(a->intake);
  output_publisher_publish_stats(a->pub, &s);
  a->last_stats_ns = llb_now_ns();
  a->last_stats_load = s.num_running + s.num_waiting;
}

/* Stats are due early when the load moved a lot since the last ones (a batch of requests
 * finished, or a burst arrived), at most every STATS_CHANGE_MIN_MS: the routers count an
 * engine's load from them, and with a second-old count a batch finishing together made every
 * router send all the next requests elsewhere while this engine sat idle (closed-loop clients:
 * 15 running on one engine, 0 on the other; docs/scaling.md). */
#define STATS_CHANGE_MIN_MS 100
static bool load_moved(const struct scheduler_actor *a) {
  const int32_t load = stats_load(a);
  const int32_t diff = load > a->last_stats_load ? load - a->last_stats_load : a->last_stats_load - load;
  return diff >= 2 && diff * 4 >= (a->last_stats_load > load ? a->last_stats_load : load);
}

static bool stats_changed(const struct scheduler_actor *a) {
  return (llb_now_ns() - a->last_stats_ns) / 1000000 >= STATS_CHANGE_MIN_MS && load_moved(a);
}

/* Step thread, while a worker reply is awaited (exec_channel_set_tick): an engine in a long
 * step (a long prompt on a slow device) still announces itself every interval; before, its
 * stats stopped for the step and the routers took it for gone after 4 s (docs/scaling.md). */
static void stats_tick(void *user) {
  struct scheduler_actor *a = user;
  if ((llb_now_ns() - a->last_stats_ns) / 1000000 >= a->cfg.stats_interval_ms || stats_changed(a)) publish_stats(a);
}

static void *step_thread(void *arg) {
  struct scheduler_actor *a = arg;
  bool last_active = false;
  a->last_stats_ns = llb_now_ns();
  for (;;) {
    bool busy = sched_num_unfinished(a->sched) > 0;
    int64_t wait_ms = -1; /* -1 = no wait */
    if (a->backoff_ms > 0) wait_ms = a->backoff_ms;
    else if (!busy && !last_active) wait_ms = a->cfg.stats_idle_interval_ms;
    else if (busy && !last_active) wait_ms = STALL_WAIT_MS;
    if (exec_channel_num_pending(a->exec) > 0 && a->backoff_ms == 0) wait_ms = -1; /* a reply is due */
    const int64_t poll_ms = kv_poll_ms(a->sched);
    if (poll_ms > 0 && a->backoff_ms == 0 && wait_ms > poll_ms) wait_ms = poll_ms; /* transfers: the next poll */
    if (wait_ms > 0) {
      int64_t since_stats = (llb_now_ns() - a->last_stats_ns) / 1000000;
      int64_t stats_in = (busy ? a->cfg.stats_interval_ms : a->cfg.stats_idle_interval_ms) - since_stats;
      if (stats_in < wait_ms) wait_ms = stats_in > 0 ? stats_in : 0;
      /* a moved load held back by STATS_CHANGE_MIN_MS (a wave that ended just after the last
       * stats) goes out when that passes, not at the next request or interval */
      const int64_t change_in = STATS_CHANGE_MIN_MS - since_stats;
      if (load_moved(a) && change_in < wait_ms) wait_ms = change_in > 0 ? change_in : 0;
    }
    struct intake_batch in;
    if (wait_ms > 0) bus_uncork(a->bus); /* it sleeps: what the turn published goes out */
    if (!intake_wait(a->intake, wait_ms, &in)) break;
    admit(a, in.requests);
    apply_aborts(a, in.aborts);
    take_resyncs(a, in.resyncs);
    char peer_what[384];
    if (peer_health_take(a->health, peer_what, sizeof peer_what))
      peer_failed(a, LLB_ERRF(LLB_STATUS_ABORTED, "%s", peer_what));
    bool stepped = false, did = false;
    bool async = a->cfg.sched.async_scheduling;
    if (sched_num_unfinished(a->sched) > 0 || last_active || exec_channel_num_pending(a->exec) > 0 ||
        sched_kv_pending(a->sched)) {
      did = async ? run_step_async(a) : run_step(a);
      stepped = true;
    }
    /* Corked (bus_cork) until the next wait: the outputs go out in one write with the next turn's
     * SchedulerOutput, planned right after (one wake-up of the loop thread and of nats-server a
     * step instead of two); they wait for that plan, tens of microseconds. */
    bus_cork(a->bus);
    publish_outputs(a, async ? a->last_applied_step : a->out.step, stepped);
    /* disaggregated requests whose first token just went out leave for their decode engine
     * (handoff.h); their last outputs here follow at once */
    if (handoff_run(a->handoff, a->sched, &a->eo_side) > 0) publish_outputs(a, a->last_applied_step, false);
    last_active = did;
    busy = sched_num_unfinished(a->sched) > 0;
    if (!busy && exec_channel_num_pending(a->exec) == 0) set_recovering(a, false); /* nothing waits */
    int64_t since_stats = (llb_now_ns() - a->last_stats_ns) / 1000000;
    if (since_stats >= (busy || did ? a->cfg.stats_interval_ms : a->cfg.stats_idle_interval_ms) || stats_changed(a))
      publish_stats(a);
    struct sched_stats snap;
    sched_get_stats(a->sched, &snap);
    sched_engine_metrics_update(a->metrics, &snap, llb_now_ns());
  }
  bus_uncork(a->bus);
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
  intake_wake(a->intake);
}

/* output_publisher: a request's last output went out: its stream message is acknowledged. */
static void request_done(void *user, uint64_t stream_seq) {
  struct scheduler_actor *a = user;
  durable_intake_done(a->durable, stream_seq);
}

/* durable_intake: a message fetched from the requests stream. */
static bool deliver_request(void *user, const struct bus_msg *msg, uint64_t stream_seq, bool replayed,
                            const char *refuse) {
  struct scheduler_actor *a = user;
  return intake_deliver(a->intake, msg, stream_seq, replayed, refuse);
}

llb_status scheduler_actor_create(const struct scheduler_actor_options *o, struct scheduler_actor **out) {
  if (!o || !out || !o->engine_id || o->kv_timeout_ms <= 0 || o->peer_heartbeat_ms < 0 ||
      (o->peer_heartbeat_ms > 0 && o->peer_missed_beats < 1) ||
      o->execute_timeout_ms <= 0 || o->stats_interval_ms <= 0 || o->stats_idle_interval_ms <= 0 || o->log_stats_interval_ms < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "scheduler actor: need options, engine id and positive timeouts/intervals");
  if (!bus_token_valid(o->engine_id))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" is not one subject token", o->engine_id);
  *out = NULL;
  struct scheduler_actor *a = calloc(1, sizeof(*a));
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler actor");
  a->cfg = *o;
  snprintf(a->engine_id, sizeof a->engine_id, "%s", o->engine_id);
  a->cfg.engine_id = a->engine_id;
  /* kept for start, which hands them to the output publisher (it copies them again) */
  llb_status st = LLB_STATUS_OK;
  if ((o->model_name && !(a->model_name = strdup(o->model_name))) ||
      (o->instance && !(a->instance = strdup(o->instance))))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler actor");
  a->cfg.model_name = a->cfg.instance = NULL;
  llb_arena_init(&a->arena, NULL, 0);
  sched_output_init(&a->out);
  kv_step_init(&a->kv);
  encoder_step_init(&a->enc);
  kv_step_result_init(&a->kv_res);
  sched_engine_outputs_init(&a->eo);
  sched_engine_outputs_init(&a->eo_side);
  struct sched_config sc = o->sched;
  sc.free_user = meta_free_user; /* the scheduler's registry holds each live request's meta */
  if (!st) st = sched_create(&sc, &a->sched);
  if (!st) st = sched_engine_metrics_create(o->metrics, o->log_stats_interval_ms * 1000000, &a->metrics);
  if (st) {
    scheduler_actor_destroy(a);
    return st;
  }
  *out = a;
  return LLB_STATUS_OK;
}

llb_status scheduler_actor_start(struct scheduler_actor *a, struct bus *bus) {
  const struct scheduler_actor_options *cfg = &a->cfg;
  const char *prefix = bus_prefix(bus);
  a->bus = bus;
  /* a resync's held list gets 7/8 of the bus' max_payload; the step's other ops (CACHE and the
   * ALLOCATE lookups of at most one step's tokens) fit in the rest */
  const int64_t max_payload = bus_max_payload(bus);
  if (max_payload > 0) sched_set_max_resync_blocks(a->sched, (int32_t)(max_payload / 8 * 7 / (int64_t)sizeof(int32_t)));
  llb_status st = intake_create(bus, &a->intake);
  if (!st) st = step_trace_create(bus, &a->trace);
  char subj_requests[BUS_SUBJECT_MAX], subj_abort[BUS_SUBJECT_MAX], subj_resync[BUS_SUBJECT_MAX],
      subj_execute[BUS_SUBJECT_MAX], subj_outputs[BUS_SUBJECT_MAX], subj_stats[BUS_SUBJECT_MAX];
  const struct { char *buf; const char *kind; } subj[] = {
      {subj_requests, "requests"}, {subj_abort, "abort"}, {subj_resync, "resync"}, {a->subj_kv, "kv"},
      {subj_execute, "execute"}, {subj_outputs, "outputs"}, {subj_stats, "stats"},
      {a->subj_encoder, "encoder"}};
  for (size_t i = 0; i < sizeof subj / sizeof subj[0] && !st; i++)
    st = bus_subject_engine(prefix, a->engine_id, subj[i].kind, subj[i].buf, BUS_SUBJECT_MAX);
  const struct output_publisher_config pc = {
      .bus = bus, .engine_id = a->engine_id, .model_name = a->model_name, .instance = a->instance,
      .subj_outputs = subj_outputs, .subj_stats = subj_stats, .num_blocks = cfg->sched.num_blocks,
      .block_size = cfg->sched.block_size, .max_num_seqs = cfg->sched.max_num_seqs,
      .max_num_batched_tokens = cfg->sched.max_num_batched_tokens, .max_model_len = cfg->sched.max_model_len,
      .stats_interval_ms = (int32_t)(cfg->stats_idle_interval_ms > cfg->stats_interval_ms
                                         ? cfg->stats_idle_interval_ms : cfg->stats_interval_ms),
      .role = cfg->role, .on_request_done = request_done, .user = a};
  if (!st) st = output_publisher_create(&pc, &a->pub);
  const struct handoff_config hoc = {.bus = bus, .prefix = prefix, .engine_id = a->engine_id, .durable = cfg->durable,
                                     .block_size = cfg->sched.block_size, .max_model_len = cfg->sched.max_model_len,
                                     .metrics = cfg->metrics};
  if (!st) st = handoff_create(&hoc, &a->handoff);
  if (!st) st = exec_channel_create(bus, subj_execute, cfg->execute_timeout_ms, &a->exec);
  if (!st) exec_channel_set_tick(a->exec, cfg->stats_interval_ms, stats_tick, a);
  const struct peer_health_config hc = {
      .bus = bus, .prefix = prefix, .engine_id = a->engine_id, .heartbeat_ms = cfg->peer_heartbeat_ms,
      .missed_beats = cfg->peer_missed_beats, .on_failure = on_peer_failure, .on_peer_up = wake_step_thread,
      .user = a, .worker_seen = cfg->worker_seen};
  if (!st) st = peer_health_create(&hc, &a->health);
  a->cfg.worker_seen = NULL; /* borrowed until here */
  if (st) goto fail;
  /* A previous scheduler of this engine may have left blocks in use and hashes of contents it
   * cannot vouch for in the kv_manager (it died): the first KV step resyncs to this one's block
   * state (nothing held) and drops the prefix cache. */
  sched_kv_reset(a->sched);
  if (pthread_create(&a->thread, NULL, step_thread, a) != 0) {
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "scheduler actor: pthread_create failed");
    goto fail;
  }
  a->thread_started = true;
  st = intake_subscribe(a->intake, cfg->durable ? NULL : subj_requests, subj_abort, subj_resync);
  const struct durable_intake_config dc = {
      .bus = bus, .prefix = prefix, .engine_id = a->engine_id, .ack_wait_ms = cfg->ack_wait_ms,
      .max_deliver = cfg->max_deliver, .max_ack_pending = cfg->max_ack_pending,
      .stream_replicas = cfg->stream_replicas, .deliver = deliver_request, .user = a};
  if (!st && cfg->durable) st = durable_intake_start(&dc, &a->durable);
  if (st) goto fail;
  LLB_LOG_INFO("scheduler_started", "requests=%s num_blocks=%d block_size=%d max_num_seqs=%d "
               "max_num_batched_tokens=%d max_model_len=%d policy=%s async_scheduling=%s",
               subj_requests, cfg->sched.num_blocks, cfg->sched.block_size,
               cfg->sched.max_num_seqs, cfg->sched.max_num_batched_tokens, cfg->sched.max_model_len,
               cfg->sched.policy == SCHED_POLICY_PRIORITY ? "priority" : "fcfs",
               cfg->sched.async_scheduling ? "on" : "off");
  return LLB_STATUS_OK;
fail:
  scheduler_actor_stop(a);
  return st;
}

void scheduler_actor_stop(struct scheduler_actor *a) {
  if (!a) return;
  intake_stop(a->intake);
  exec_channel_stop(a->exec); /* a step thread waiting for a worker reply */
  if (a->thread_started) pthread_join(a->thread, NULL);
  a->thread_started = false;
  durable_intake_stop(a->durable);
}

void scheduler_actor_destroy(struct scheduler_actor *a) {
  if (!a) return;
  scheduler_actor_stop(a);
  intake_destroy(a->intake);
  output_publisher_free_users(&a->eo_side); /* final outputs never published */
  output_publisher_free_users(&a->eo);
  for (int64_t i = 0; i < a->num_rejected; i++) req_meta_free(a->rejected[i]);
  free(a->rejected);
  durable_intake_destroy(a->durable);
  peer_health_destroy(a->health);
  exec_channel_destroy(a->exec);
  step_trace_destroy(a->trace);
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
  output_publisher_destroy(a->pub);
  handoff_destroy(a->handoff);
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->buf);
  free(a->model_name);
  free(a->instance);
  free(a);
}

void scheduler_actor_stats(const struct scheduler_actor *ca, struct scheduler_actor_stats *out) {
  struct scheduler_actor *a = (struct scheduler_actor *)ca; /* atomics and module counters: reads only */
  uint64_t peer_fail = 0, bus_recoveries = 0;
  struct durable_intake_counters dc;
  durable_intake_get_counters(a->durable, &dc);
  struct intake_counters ic = {0};
  if (a->intake) intake_get_counters(a->intake, &ic);
  if (a->health) peer_health_counters(a->health, &peer_fail, &bus_recoveries);
  *out = (struct scheduler_actor_stats){
      .num_steps = atomic_load(&a->c_steps), .num_requests = atomic_load(&a->c_requests),
      .num_rejected = atomic_load(&a->c_rejected) + ic.rejected, .num_aborted = ic.aborted,
      .num_kv_failures = atomic_load(&a->c_kv_fail),
      .num_execute_failures = atomic_load(&a->c_exec_fail),
      .num_encoder_failures = atomic_load(&a->c_enc_fail),
      .num_outputs_published = a->pub ? output_publisher_num_published(a->pub) : 0,
      .num_peer_failures = peer_fail,
      .num_replayed = dc.replayed,
      .num_dead_lettered = dc.dead_lettered,
      .num_redelivered_held = dc.redelivered_held,
      .num_acked = dc.acked,
      .num_intake_stalls = dc.stalls,
      .num_resyncs = atomic_load(&a->c_resyncs),
      .num_history_resumed = atomic_load(&a->c_history_resumed),
      .num_bus_recoveries = bus_recoveries};
  struct handoff_stats hs;
  handoff_get_stats(a->handoff, &hs);
  out->num_handoffs_sent = hs.num_sent;
  out->num_handoffs_send_failed = hs.num_send_failed;
  out->num_handoffs_received = hs.num_received;
  out->num_handoffs_refused = hs.num_refused;
}

void scheduler_actor_announce_draining(struct scheduler_actor *a) {
  if (a && a->pub) output_publisher_announce_draining(a->pub);
}
