/* The scheduler actor's intake queues; see intake.h. */
#include "actors/scheduler/intake.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "schemas/control.h"
#include "schemas/engine_core_request.h"

struct intake {
  struct bus *bus;
  pthread_mutex_t mu;
  pthread_cond_t cv;           /* the step thread sleeps here */
  bool stop;                   /* under mu */
  struct req_meta *req_head, *req_tail; /* under mu */
  int32_t num_requests;                 /* under mu: queued in req_head */
  struct intake_id *aborts, *resyncs;   /* under mu, newest first */
  /* handler-thread state (one subscription each) */
  struct llb_arena req_arena, abort_arena, resync_arena;
  struct llb_buf req_err_buf;
  atomic_uint_fast64_t c_rejected, c_aborted;
};

static void log_bad_message(const char *what, const struct bus_msg *msg, llb_status st) {
  char q[600];
  LLB_LOG_WARN("bad_message", "kind=%s subject=%s bytes=%zu status=%s error=%s", what,
               msg->subject, msg->len, llb_strerror(st), llb_log_quote(q, sizeof q, llb_err_last()));
}

bool intake_deliver(struct intake *in, const struct bus_msg *msg, uint64_t stream_seq, bool replayed,
                    const char *refuse) {
  llb_arena_reset(&in->req_arena);
  struct llb_engine_core_request r;
  llb_status st = llb_engine_core_request_decode(msg->data, msg->len, &in->req_arena, &r);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&in->c_rejected, 1);
    log_bad_message("EngineCoreRequest", msg, st);
    if (msg->reply && !stream_seq && llb_error_reply_encode_status(st, "", "", &in->req_err_buf) == LLB_STATUS_OK)
      (void)bus_respond(in->bus, msg, in->req_err_buf.data, in->req_err_buf.len, NULL);
    return false;
  }
  struct req_meta *m;
  if (req_meta_from_request(&r, stream_seq, replayed, refuse, &m) != LLB_STATUS_OK) {
    atomic_fetch_add(&in->c_rejected, 1);
    LLB_LOG_ERROR("request_dropped", "reason=out_of_memory bytes=%zu", msg->len);
    return false;
  }
  pthread_mutex_lock(&in->mu);
  if (in->req_tail) in->req_tail->next = m;
  else in->req_head = m;
  in->req_tail = m;
  in->num_requests++;
  pthread_cond_signal(&in->cv);
  pthread_mutex_unlock(&in->mu);
  return true;
}

static void on_request(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  (void)intake_deliver(user, msg, 0, false, NULL);
}

/* Decodes an AbortRequests into arena and pushes its ids onto *list (under mu); returns how
 * many were queued, -1 when it does not decode (logged as `kind`). */
static int32_t queue_ids(struct intake *in, const struct bus_msg *msg, struct llb_arena *arena, const char *kind,
                         struct intake_id **list) {
  llb_arena_reset(arena);
  struct llb_abort_requests ids;
  llb_status st = llb_abort_requests_decode(msg->data, msg->len, arena, &ids);
  if (st != LLB_STATUS_OK) {
    log_bad_message(kind, msg, st);
    return -1;
  }
  int32_t n = 0;
  for (int32_t i = 0; i < ids.num_request_ids; i++, n++) {
    struct intake_id *it = malloc(sizeof(*it) + ids.request_ids[i].len + 1);
    if (!it) break;
    memcpy(it->id, ids.request_ids[i].data, ids.request_ids[i].len + 1);
    pthread_mutex_lock(&in->mu);
    it->next = *list;
    *list = it;
    pthread_mutex_unlock(&in->mu);
  }
  return n;
}

static void on_abort(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct intake *in = user;
  const int32_t n = queue_ids(in, msg, &in->abort_arena, "AbortRequests", &in->aborts);
  if (n < 0) return;
  atomic_fetch_add(&in->c_aborted, (uint64_t)n);
  pthread_mutex_lock(&in->mu);
  pthread_cond_signal(&in->cv);
  pthread_mutex_unlock(&in->mu);
}

/* Resyncs are taken with the next step; they do not wake the step thread. */
static void on_resync(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct intake *in = user;
  (void)queue_ids(in, msg, &in->resync_arena, "resync", &in->resyncs);
}

llb_status intake_create(struct bus *bus, struct intake **out) {
  *out = NULL;
  struct intake *in = calloc(1, sizeof *in);
  if (!in) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "intake");
  in->bus = bus;
  pthread_mutex_init(&in->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&in->cv, &ca);
  pthread_condattr_destroy(&ca);
  llb_arena_init(&in->req_arena, NULL, 0);
  llb_arena_init(&in->abort_arena, NULL, 0);
  llb_arena_init(&in->resync_arena, NULL, 0);
  *out = in;
  return LLB_STATUS_OK;
}

llb_status intake_subscribe(struct intake *in, const char *subj_requests, const char *subj_abort,
                            const char *subj_resync) {
  llb_status st = bus_subscribe(in->bus, subj_abort, NULL, on_abort, in, NULL);
  if (!st) st = bus_subscribe(in->bus, subj_resync, NULL, on_resync, in, NULL);
  if (!st && subj_requests) st = bus_subscribe(in->bus, subj_requests, NULL, on_request, in, NULL);
  return st;
}

bool intake_wait(struct intake *in, int64_t wait_ms, struct intake_batch *out) {
  *out = (struct intake_batch){0};
  pthread_mutex_lock(&in->mu);
  if (wait_ms > 0 && !in->stop && !in->req_head && !in->aborts) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const int64_t ns = ts.tv_nsec + (wait_ms % 1000) * 1000000;
    ts.tv_sec += wait_ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&in->cv, &in->mu, &ts);
  }
  if (in->stop) {
    pthread_mutex_unlock(&in->mu);
    return false;
  }
  *out = (struct intake_batch){.requests = in->req_head, .aborts = in->aborts, .resyncs = in->resyncs};
  in->req_head = in->req_tail = NULL;
  in->num_requests = 0;
  in->aborts = in->resyncs = NULL;
  pthread_mutex_unlock(&in->mu);
  return true;
}

int32_t intake_num_requests(struct intake *in) {
  pthread_mutex_lock(&in->mu);
  const int32_t n = in->num_requests;
  pthread_mutex_unlock(&in->mu);
  return n;
}

void intake_wake(struct intake *in) {
  pthread_mutex_lock(&in->mu);
  pthread_cond_signal(&in->cv);
  pthread_mutex_unlock(&in->mu);
}

void intake_stop(struct intake *in) {
  if (!in) return;
  pthread_mutex_lock(&in->mu);
  in->stop = true;
  pthread_cond_signal(&in->cv);
  pthread_mutex_unlock(&in->mu);
}

void intake_get_counters(struct intake *in, struct intake_counters *out) {
  *out = (struct intake_counters){.rejected = atomic_load(&in->c_rejected), .aborted = atomic_load(&in->c_aborted)};
}

static void free_ids(struct intake_id *list) {
  while (list) {
    struct intake_id *it = list;
    list = it->next;
    free(it);
  }
}

void intake_batch_free(struct intake_batch *b) {
  while (b->requests) {
    struct req_meta *m = b->requests;
    b->requests = m->next;
    req_meta_free(m);
  }
  free_ids(b->aborts);
  free_ids(b->resyncs);
  *b = (struct intake_batch){0};
}

void intake_destroy(struct intake *in) {
  if (!in) return;
  struct intake_batch b = {.requests = in->req_head, .aborts = in->aborts, .resyncs = in->resyncs};
  intake_batch_free(&b);
  llb_arena_destroy(&in->req_arena);
  llb_arena_destroy(&in->abort_arena);
  llb_arena_destroy(&in->resync_arena);
  llb_buf_free(&in->req_err_buf);
  pthread_cond_destroy(&in->cv);
  pthread_mutex_destroy(&in->mu);
  free(in);
}
