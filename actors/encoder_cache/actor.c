/* The encoder_cache actor: EncoderStep in, EncoderStepResult out (see actor.h). */
#include "actors/encoder_cache/actor.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bus/subject.h"

struct encoder_cache_actor {
  struct bus *bus;            /* from start */
  struct bus_sub *sub;        /* .encoder; NULL before start and after stop */
  char engine_id[BUS_TOKEN_MAX + 1];
  int32_t cache_size;
  struct encoder_cache *ec;
  struct llb_arena arena;     /* decoded EncoderStep; reset per message */
  struct ecache_result res;   /* reused answer arrays */
  struct llb_buf out;         /* encoded reply */
  bool have_step;
  uint64_t last_step;
  pthread_mutex_t mu;         /* guards the counters */
  struct encoder_cache_actor_stats c;
};

static void respond(struct encoder_cache_actor *a, const struct bus_msg *msg,
                    const struct llb_encoder_step_result *w) {
  if (!msg->reply) return;
  llb_status st = llb_encoder_step_result_encode_buf(w, &a->out);
  if (st == LLB_STATUS_OK) st = bus_respond(a->bus, msg, a->out.data, a->out.len, NULL);
  if (st != LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_ERROR("encoder_reply_failed", "step=%llu status=%s error=%s", (unsigned long long)w->step,
                  llb_strerror(st), llb_log_quote(q, sizeof q, llb_err_last()));
  }
}

static void respond_error(struct encoder_cache_actor *a, const struct bus_msg *msg, uint64_t step,
                          llb_status status) {
  char message[512], q[600];
  snprintf(message, sizeof message, "%s", llb_err_last());
  LLB_LOG_WARN("encoder_step_rejected", "step=%llu bytes=%zu status=%s error=%s", (unsigned long long)step,
               msg->len, llb_strerror(status), llb_log_quote(q, sizeof q, message));
  struct llb_encoder_step_result w = {.version = LLB_SCHEMA_VERSION, .step = step,
                                      .num_free_slots = encoder_cache_num_free_slots(a->ec)};
  w.error.code = (int32_t)status;
  w.error.message = llb_str_c(message);
  respond(a, msg, &w);
}

static void on_encoder_step(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct encoder_cache_actor *a = user;
  llb_arena_reset(&a->arena);
  struct llb_encoder_step in;
  llb_status st = llb_encoder_step_decode(msg->data, msg->len, &a->arena, &in);
  if (st != LLB_STATUS_OK) {
    pthread_mutex_lock(&a->mu);
    a->c.num_malformed++;
    pthread_mutex_unlock(&a->mu);
    respond_error(a, msg, 0, st);
    return;
  }
  pthread_mutex_lock(&a->mu);
  if (a->have_step && in.step <= a->last_step) { /* a restarted scheduler counts from 1 again */
    LLB_LOG_WARN("encoder_scheduler_restart", "step=%llu last_step=%llu", (unsigned long long)in.step,
                 (unsigned long long)a->last_step);
    encoder_cache_reset(a->ec);
    a->c.stats.num_resets++;
  }
  a->have_step = true;
  a->last_step = in.step;
  struct llb_encoder_step_result w;
  st = ecache_apply(a->ec, &in, &a->res, &a->c.stats, &w);
  if (st != LLB_STATUS_OK) a->c.num_failed++;
  pthread_mutex_unlock(&a->mu);
  if (st != LLB_STATUS_OK) {
    respond_error(a, msg, in.step, st);
    return;
  }
  respond(a, msg, &w);
}

llb_status encoder_cache_actor_create(const struct encoder_cache_actor_options *o,
                                      struct encoder_cache_actor **out) {
  if (!o || !out)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "encoder_cache_actor_create: NULL argument");
  *out = NULL;
  const char *eid = o->engine_id ? o->engine_id : "0";
  if (!bus_token_valid(eid))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" is not one subject token", eid);
  struct encoder_cache_actor *a = calloc(1, sizeof(*a));
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder_cache actor");
  snprintf(a->engine_id, sizeof a->engine_id, "%s", eid);
  a->cache_size = o->cache_size;
  pthread_mutex_init(&a->mu, NULL);
  llb_arena_init(&a->arena, NULL, 0);
  llb_status st = encoder_cache_create(o->cache_size, &a->ec);
  if (st != LLB_STATUS_OK) {
    encoder_cache_actor_destroy(a);
    return st;
  }
  *out = a;
  return LLB_STATUS_OK;
}

llb_status encoder_cache_actor_start(struct encoder_cache_actor *a, struct bus *bus) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine(bus_prefix(bus), a->engine_id, "encoder", subject, sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  a->bus = bus;
  st = bus_subscribe(bus, subject, NULL, on_encoder_step, a, &a->sub);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("encoder_cache_started", "subject=%s cache_size=%d", subject, a->cache_size);
  return LLB_STATUS_OK;
}

void encoder_cache_actor_stop(struct encoder_cache_actor *a) {
  if (!a || !a->sub) return;
  (void)bus_unsubscribe(a->sub); /* fails only when the drain already ended the subscription */
  a->sub = NULL;
}

void encoder_cache_actor_destroy(struct encoder_cache_actor *a) {
  if (!a) return;
  encoder_cache_destroy(a->ec);
  ecache_result_free(&a->res);
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->out);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

void encoder_cache_actor_stats(const struct encoder_cache_actor *a,
                               struct encoder_cache_actor_stats *out) {
  struct encoder_cache_actor *m = (struct encoder_cache_actor *)a; /* the mutex only */
  pthread_mutex_lock(&m->mu);
  *out = m->c;
  pthread_mutex_unlock(&m->mu);
}
