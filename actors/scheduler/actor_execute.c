/* The scheduler actor's step thread: the round trip to the worker (`.execute`), synchronous
 * (one step in flight) or asynchronous (step N+1 sent before step N's reply is back;
 * see scheduler.h and README.md "Asynchronous scheduling"). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/actor_internal.h"
#include "base/log.h"

/* A reply copied off the delivery thread. */
struct exec_reply {
  struct exec_reply *next;
  uint64_t step;          /* from the subject <exec_inbox>.<step>; 0 when it names none */
  char status[16];        /* the NATS Status header ("503": no responders), "" none */
  int64_t received_ns;    /* llb_now_ns() on arrival: the round trip ends here */
  size_t len;
  uint8_t data[];
};

/* The step a reply answers, from its subject <exec_inbox>.<step>; 0 when it names none. */
static uint64_t reply_step(const struct scheduler_actor *a, const char *subject) {
  size_t n = strlen(a->exec_inbox);
  if (!subject || strncmp(subject, a->exec_inbox, n) != 0 || subject[n] != '.') return 0;
  char *end = NULL;
  unsigned long long v = strtoull(subject + n + 1, &end, 10);
  return end && *end == '\0' ? (uint64_t)v : 0;
}

static void on_exec_reply(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct scheduler_actor *a = user;
  struct exec_reply *r = malloc(sizeof(*r) + msg->len);
  if (r) r->received_ns = llb_now_ns();
  if (!r) {
    LLB_LOG_ERROR("exec_reply_dropped", "reason=out_of_memory bytes=%zu", msg->len);
    return;
  }
  r->next = NULL;
  r->step = reply_step(a, msg->subject);
  const char *status = msg->len == 0 ? bus_msg_header(msg, "Status") : NULL;
  snprintf(r->status, sizeof r->status, "%s", status ? status : "");
  r->len = msg->len;
  if (msg->len) memcpy(r->data, msg->data, msg->len);
  pthread_mutex_lock(&a->exec_mu);
  if (a->exec_tail) a->exec_tail->next = r;
  else a->exec_head = r;
  a->exec_tail = r;
  pthread_cond_signal(&a->exec_cv);
  pthread_mutex_unlock(&a->exec_mu);
}

void sched_actor_execute_lock_init(struct scheduler_actor *a) {
  pthread_mutex_init(&a->exec_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->exec_cv, &ca);
  pthread_condattr_destroy(&ca);
  a->exec_sync_init = true;
}

llb_status sched_actor_execute_init(struct scheduler_actor *a) {
  llb_status st = bus_new_inbox(a->bus, a->exec_inbox, sizeof a->exec_inbox - 24);
  if (st) return st;
  char subject[BUS_SUBJECT_MAX + 32];
  snprintf(subject, sizeof subject, "%s.*", a->exec_inbox);
  return bus_subscribe(a->bus, subject, NULL, on_exec_reply, a, NULL);
}

void sched_actor_execute_wake_for_stop(struct scheduler_actor *a) {
  if (!a->exec_sync_init) return;
  pthread_mutex_lock(&a->exec_mu);
  a->exec_stop = true;
  pthread_cond_broadcast(&a->exec_cv);
  pthread_mutex_unlock(&a->exec_mu);
}

void sched_actor_execute_free(struct scheduler_actor *a) {
  if (!a->exec_sync_init) return;
  while (a->exec_head) {
    struct exec_reply *r = a->exec_head;
    a->exec_head = r->next;
    free(r);
  }
  pthread_cond_destroy(&a->exec_cv);
  pthread_mutex_destroy(&a->exec_mu);
  a->exec_sync_init = false;
}

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

/* Decodes the worker's reply and applies it to the scheduler. */
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

llb_status sched_actor_execute_send(struct scheduler_actor *a) {
  if (a->num_exec_pending >= 2)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "step %" PRIu64 ": two steps already in flight", a->out.step);
  llb_status st = encode_step(a);
  if (st) return st;
  char reply_to[BUS_SUBJECT_MAX + 32]; /* the inbox leaves 24 bytes for ".<step>" */
  snprintf(reply_to, sizeof reply_to, "%s.%" PRIu64, a->exec_inbox, a->out.step);
  struct bus_out_msg m = {.subject = a->subj_execute, .reply = reply_to, .data = a->buf.data,
                          .len = a->buf.len};
  sched_trace_exec_sent(a, a->out.step);
  st = bus_publish_msg(a->bus, &m);
  if (st) return st;
  carries_sent(a);
  a->exec_sent_ns[a->num_exec_pending] = llb_now_ns();
  a->exec_pending[a->num_exec_pending++] = a->out.step;
  return LLB_STATUS_OK;
}

/* The same send and wait as the asynchronous pipeline at depth 1: a wait that a peer
 * failure seen in the heartbeats ends at once, which bus_request could not offer. */
llb_status sched_actor_execute_sync(struct scheduler_actor *a) {
  llb_status st = sched_actor_execute_send(a);
  return st ? st : sched_actor_execute_receive(a);
}

llb_status sched_actor_execute_receive(struct scheduler_actor *a) {
  if (a->num_exec_pending == 0) return LLB_ERRF(LLB_STATUS_INTERNAL, "no step in flight");
  uint64_t want = a->exec_pending[0];
  const int64_t sent_ns = a->exec_sent_ns[0];
  a->exec_pending[0] = a->exec_pending[1];
  a->exec_sent_ns[0] = a->exec_sent_ns[1];
  a->num_exec_pending--;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  int64_t ns = deadline.tv_nsec + (a->cfg.execute_timeout_ms % 1000) * 1000000;
  deadline.tv_sec += a->cfg.execute_timeout_ms / 1000 + ns / 1000000000;
  deadline.tv_nsec = ns % 1000000000;
  const int64_t deadline_ns = llb_now_ns() + a->cfg.execute_timeout_ms * 1000000;
  for (;;) {
    pthread_mutex_lock(&a->exec_mu);
    /* Wait for the reply, the stop, or a peer failure (heartbeats, peer_health.c): the
     * missed-beat rule is run whenever its next deadline passes, so a dead worker costs
     * about peer_missed_beats intervals, not execute_timeout_ms. */
    char peer_what[384];
    bool peer_failed = false;
    while (!a->exec_head && !a->exec_stop &&
           !(peer_failed = peer_health_take_detected(a->health, peer_what, sizeof peer_what))) {
      const int64_t now = llb_now_ns();
      if (now >= deadline_ns) break;
      const int64_t check = peer_health_next_check_ns(a->health);
      struct timespec until = deadline;
      if (check < deadline_ns) {
        const int64_t in_ns = check > now ? check - now : 0;
        clock_gettime(CLOCK_MONOTONIC, &until);
        const int64_t ns = until.tv_nsec + in_ns % 1000000000;
        until.tv_sec += in_ns / 1000000000 + ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
      }
      if (pthread_cond_timedwait(&a->exec_cv, &a->exec_mu, &until) == ETIMEDOUT) {
        peer_health_poll(a->health, llb_now_ns());
        if (check >= deadline_ns) break;
      }
    }
    struct exec_reply *reply = a->exec_head;
    if (reply) {
      a->exec_head = reply->next;
      if (!a->exec_head) a->exec_tail = NULL;
    }
    const bool stopping = a->exec_stop;
    pthread_mutex_unlock(&a->exec_mu);
    if (!reply && stopping)
      return LLB_ERRF(LLB_STATUS_CLOSED, "stopping: step %" PRIu64 " abandoned", want);
    if (!reply && peer_failed)
      return LLB_ERRF(LLB_STATUS_ABORTED, "step %" PRIu64 " abandoned: %s", want, peer_what);
    if (!reply)
      return LLB_ERRF(LLB_STATUS_TIMEOUT, "no reply on %s for step %" PRIu64 " within %lld ms",
                      a->subj_execute, want, (long long)a->cfg.execute_timeout_ms);
    if (reply->step != 0 && reply->step < want) { /* a step forgotten after a failure */
      LLB_LOG_INFO("stale_reply_dropped", "step=%" PRIu64 " waiting_for=%" PRIu64, reply->step, want);
      free(reply);
      continue;
    }
    llb_status st;
    if (reply->step != want)
      st = LLB_ERRF(LLB_STATUS_INTERNAL, "reply for step %" PRIu64 " while waiting for %" PRIu64, reply->step, want);
    else if (reply->len == 0) /* a NATS status (503: no worker listens), not a ModelRunnerOutput */
      st = LLB_ERRF(LLB_STATUS_NOT_FOUND, "no responders on %s (status %s)", a->subj_execute,
                    reply->status[0] ? reply->status : "none");
    else {
      sched_trace_exec_received(a, want);
      st = apply_reply(a, reply->data, reply->len);
    }
    if (reply->step == want) /* published with a reply subject: the bus cannot time it itself */
      bus_record_request_latency(a->bus, a->subj_execute, (double)(reply->received_ns - sent_ns) / 1e9);
    free(reply);
    return st;
  }
}
