/* The scheduler's channel to its worker; see exec_channel.h and README.md "Asynchronous
 * scheduling". */
#include "actors/scheduler/exec_channel.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "bus/subject.h"

struct exec_channel {
  struct bus *bus;
  char subj_execute[BUS_SUBJECT_MAX];
  int64_t timeout_ms;
  char inbox[BUS_SUBJECT_MAX];   /* replies arrive on <inbox>.* */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct exec_reply *head, *tail; /* under mu */
  bool stop;                      /* under mu: the actor stops, stop waiting */
  uint64_t pending[2];            /* steps in flight, oldest first (step thread) */
  int64_t sent_ns[2];             /* llb_now_ns() when each pending step was sent */
  int32_t num_pending;
  void (*tick)(void *user);       /* exec_channel_set_tick (step thread); NULL = none */
  void *tick_user;
  int64_t tick_ns;
};

/* The step a reply answers, from its subject <inbox>.<step>; 0 when it names none. */
static uint64_t reply_step(const struct exec_channel *ch, const char *subject) {
  size_t n = strlen(ch->inbox);
  if (!subject || strncmp(subject, ch->inbox, n) != 0 || subject[n] != '.') return 0;
  char *end = NULL;
  unsigned long long v = strtoull(subject + n + 1, &end, 10);
  return end && *end == '\0' ? (uint64_t)v : 0;
}

static void on_exec_reply(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct exec_channel *ch = user;
  struct exec_reply *r = malloc(sizeof(*r) + msg->len);
  if (r) r->received_ns = llb_now_ns();
  if (!r) {
    LLB_LOG_ERROR("exec_reply_dropped", "reason=out_of_memory bytes=%zu", msg->len);
    return;
  }
  r->next = NULL;
  r->step = reply_step(ch, msg->subject);
  const char *status = msg->len == 0 ? bus_msg_header(msg, "Status") : NULL;
  snprintf(r->status, sizeof r->status, "%s", status ? status : "");
  r->len = msg->len;
  if (msg->len) memcpy(r->data, msg->data, msg->len);
  pthread_mutex_lock(&ch->mu);
  if (ch->tail) ch->tail->next = r;
  else ch->head = r;
  ch->tail = r;
  pthread_cond_signal(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
}

llb_status exec_channel_create(struct bus *bus, const char *subj_execute, int64_t timeout_ms,
                               struct exec_channel **out) {
  *out = NULL;
  if (!bus || !subj_execute || timeout_ms <= 0 || strlen(subj_execute) >= BUS_SUBJECT_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "exec channel: need bus, subject, timeout > 0");
  struct exec_channel *ch = calloc(1, sizeof *ch);
  if (!ch) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "exec channel");
  ch->bus = bus;
  snprintf(ch->subj_execute, sizeof ch->subj_execute, "%s", subj_execute);
  ch->timeout_ms = timeout_ms;
  pthread_mutex_init(&ch->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ch->cv, &ca);
  pthread_condattr_destroy(&ca);
  llb_status st = bus_new_inbox(bus, ch->inbox, sizeof ch->inbox - 24); /* 24 bytes for ".<step>" */
  if (st) {
    exec_channel_destroy(ch);
    return st;
  }
  char subject[BUS_SUBJECT_MAX];
  *out = ch;
  st = bus_pattern_replies(ch->inbox, subject, sizeof subject);
  return st ? st : bus_subscribe_on_loop(bus, subject, NULL, on_exec_reply, ch, NULL);
}

void exec_channel_stop(struct exec_channel *ch) {
  if (!ch) return;
  pthread_mutex_lock(&ch->mu);
  ch->stop = true;
  pthread_cond_broadcast(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
}

void exec_channel_wake(struct exec_channel *ch) {
  pthread_mutex_lock(&ch->mu);
  pthread_cond_broadcast(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
}

void exec_channel_destroy(struct exec_channel *ch) {
  if (!ch) return;
  while (ch->head) {
    struct exec_reply *r = ch->head;
    ch->head = r->next;
    free(r);
  }
  pthread_cond_destroy(&ch->cv);
  pthread_mutex_destroy(&ch->mu);
  free(ch);
}

int32_t exec_channel_num_pending(const struct exec_channel *ch) { return ch->num_pending; }

void exec_channel_set_tick(struct exec_channel *ch, int64_t every_ms, void (*fn)(void *user), void *user) {
  ch->tick = every_ms > 0 ? fn : NULL;
  ch->tick_user = user;
  ch->tick_ns = every_ms * 1000000;
}

void exec_channel_forget(struct exec_channel *ch) { ch->num_pending = 0; }

llb_status exec_channel_send(struct exec_channel *ch, uint64_t step, const void *data, size_t len) {
  if (ch->num_pending >= 2)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "step %" PRIu64 ": two steps already in flight", step);
  char reply_to[BUS_SUBJECT_MAX]; /* the inbox leaves 24 bytes for ".<step>" */
  llb_status st = bus_subject_reply(ch->inbox, step, reply_to, sizeof reply_to);
  if (st) return st;
  struct bus_out_msg m = {.subject = ch->subj_execute, .reply = reply_to, .data = data, .len = len};
  st = bus_publish_msg(ch->bus, &m);
  if (st) return st;
  ch->sent_ns[ch->num_pending] = llb_now_ns();
  ch->pending[ch->num_pending++] = step;
  return LLB_STATUS_OK;
}

/* CLOCK_MONOTONIC now + in_ns, for pthread_cond_timedwait. */
static struct timespec abs_in(int64_t in_ns) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  const int64_t ns = t.tv_nsec + in_ns % 1000000000;
  t.tv_sec += in_ns / 1000000000 + ns / 1000000000;
  t.tv_nsec = ns % 1000000000;
  return t;
}

/* Under ch->mu: waits until a reply is queued, the channel stops, health has a failure to
 * take (true, peer_what set) or deadline_ns passes. The missed-beat rule is run whenever its
 * next deadline passes, so a dead worker costs about missed_beats intervals, not the
 * timeout. */
static bool wait_locked(struct exec_channel *ch, struct peer_health *health, int64_t deadline_ns,
                        char *peer_what, size_t cap) {
  bool peer_failed = false;
  while (!ch->head && !ch->stop && !(peer_failed = health && peer_health_take_detected(health, peer_what, cap))) {
    const int64_t now = llb_now_ns();
    if (now >= deadline_ns) break;
    const int64_t check = health ? peer_health_next_check_ns(health) : INT64_MAX;
    const struct timespec until = abs_in((check < deadline_ns ? check : deadline_ns) - now);
    if (pthread_cond_timedwait(&ch->cv, &ch->mu, &until) == ETIMEDOUT) {
      if (health) peer_health_poll(health, llb_now_ns());
      if (check >= deadline_ns) break;
    }
  }
  return peer_failed;
}

llb_status exec_channel_receive(struct exec_channel *ch, struct peer_health *health, struct exec_reply **out) {
  *out = NULL;
  if (ch->num_pending == 0) return LLB_ERRF(LLB_STATUS_INTERNAL, "no step in flight");
  const uint64_t want = ch->pending[0];
  const int64_t sent_ns = ch->sent_ns[0];
  ch->pending[0] = ch->pending[1];
  ch->sent_ns[0] = ch->sent_ns[1];
  ch->num_pending--;
  const int64_t deadline_ns = llb_now_ns() + ch->timeout_ms * 1000000;
  int64_t tick_ns = ch->tick ? llb_now_ns() + ch->tick_ns : INT64_MAX;
  for (;;) {
    char peer_what[384];
    pthread_mutex_lock(&ch->mu);
    const bool peer_failed =
        wait_locked(ch, health, tick_ns < deadline_ns ? tick_ns : deadline_ns, peer_what, sizeof peer_what);
    struct exec_reply *reply = ch->head;
    if (reply) {
      ch->head = reply->next;
      if (!ch->head) ch->tail = NULL;
    }
    const bool stopping = ch->stop;
    pthread_mutex_unlock(&ch->mu);
    if (!reply && stopping)
      return LLB_ERRF(LLB_STATUS_CLOSED, "stopping: step %" PRIu64 " abandoned", want);
    if (!reply && peer_failed)
      return LLB_ERRF(LLB_STATUS_ABORTED, "step %" PRIu64 " abandoned: %s", want, peer_what);
    if (!reply && llb_now_ns() < deadline_ns) { /* the tick's turn: no lock held */
      ch->tick(ch->tick_user);
      tick_ns = llb_now_ns() + ch->tick_ns;
      continue;
    }
    if (!reply)
      return LLB_ERRF(LLB_STATUS_TIMEOUT, "no reply on %s for step %" PRIu64 " within %lld ms",
                      ch->subj_execute, want, (long long)ch->timeout_ms);
    if (reply->step != 0 && reply->step < want) { /* a step forgotten after a failure */
      LLB_LOG_INFO("stale_reply_dropped", "step=%" PRIu64 " waiting_for=%" PRIu64, reply->step, want);
      free(reply);
      continue;
    }
    if (reply->step == want) /* published with a reply subject: the bus cannot time it itself */
      bus_record_request_latency(ch->bus, ch->subj_execute, (double)(reply->received_ns - sent_ns) / 1e9);
    llb_status st = LLB_STATUS_OK;
    if (reply->step != want)
      st = LLB_ERRF(LLB_STATUS_INTERNAL, "reply for step %" PRIu64 " while waiting for %" PRIu64, reply->step, want);
    else if (reply->len == 0) /* a NATS status (503: no worker listens), not a ModelRunnerOutput */
      st = LLB_ERRF(LLB_STATUS_NOT_FOUND, "no responders on %s (status %s)", ch->subj_execute,
                    reply->status[0] ? reply->status : "none");
    if (st) {
      free(reply);
      return st;
    }
    *out = reply;
    return LLB_STATUS_OK;
  }
}
