/* The kv_manager actor: KVStep in, KVStepResult out (see actor.h). */
#include "actors/kv_manager/actor.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/kv_ops.h"
#include "schemas/kv_step.h"

struct kv_manager_actor {
  struct bus *bus;                   /* from start */
  struct bus_sub *sub;               /* .kv; NULL before start and after stop */
  char engine_id[BUS_TOKEN_MAX + 1];
  struct kv_manager *kv;
  struct kv_manager_config cfg;
  struct llb_arena arena;            /* decoded KVStep; reset per message */
  struct kv_step step;               /* the logic's view of the KVStep (reused) */
  struct kv_step_result res;         /* the logic's answer (reused) */
  struct llb_kv_op_result *wire_results; /* [cap_wire_results] (reused) */
  int32_t cap_wire_results;
  struct llb_buf out;                /* encoded reply (reused) */
  atomic_uint_fast64_t num_steps, num_malformed, num_failed, num_resyncs;
};

/* Fills the pool statistics of a reply. */
static void fill_stats(const struct kv_manager_actor *a, struct llb_kv_step_result *w) {
  struct kv_manager_stats s;
  kv_manager_get_stats(a->kv, &s);
  w->num_free_blocks = s.num_free_blocks;
  w->num_total_blocks = s.num_blocks;
  w->prefix_cache_queries = s.prefix_cache_queries;
  w->prefix_cache_hits = s.prefix_cache_hits;
}

static void respond(struct kv_manager_actor *a, const struct bus_msg *msg,
                    const struct llb_kv_step_result *w) {
  if (!msg->reply) return;
  llb_status st = llb_kv_step_result_encode_buf(w, &a->out);
  if (st == LLB_STATUS_OK) st = bus_respond(a->bus, msg, a->out.data, a->out.len, NULL);
  if (st != LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_ERROR("kv_reply_failed", "step=%llu status=%s error=%s",
                  (unsigned long long)w->step, llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
  }
}

/* Answers a step that could not be applied with the error field set (the caller recorded
 * the error with LLB_ERRF). */
static void respond_error(struct kv_manager_actor *a, const struct bus_msg *msg, uint64_t step,
                          llb_status status) {
  char message[512];
  snprintf(message, sizeof message, "%s", llb_err_last());
  char q[600];
  LLB_LOG_WARN("kv_step_rejected", "step=%llu bytes=%zu status=%s reply=%d error=%s",
               (unsigned long long)step, msg->len, llb_strerror(status), msg->reply != NULL,
               llb_log_quote(q, sizeof q, message));
  struct llb_kv_step_result w = {.step = step};
  fill_stats(a, &w);
  w.error.code = (int32_t)status;
  w.error.message = llb_str_c(message);
  respond(a, msg, &w);
}

static enum kv_op_kind op_kind(enum llb_kv_op_kind k) {
  switch (k) {
  case LLB_KV_OP_KIND_ALLOCATE: return KV_OP_KIND_ALLOCATE;
  case LLB_KV_OP_KIND_CACHE: return KV_OP_KIND_CACHE;
  case LLB_KV_OP_KIND_RELEASE: return KV_OP_KIND_RELEASE;
  case LLB_KV_OP_KIND_FREE: break; /* refused by the decoder */
  }
  return (enum kv_op_kind)0; /* unreachable; the logic refuses an unknown kind */
}

/* Converts the wire step into a->step (the ids and hashes are copied into its pools). */
static llb_status build_step(struct kv_manager_actor *a, const struct llb_kv_step *in) {
  kv_step_clear(&a->step, in->step);
  llb_status st = LLB_STATUS_OK;
  if (in->resync || in->reset) st = kv_step_set_held(&a->step, in->held_block_ids, in->num_held_block_ids);
  a->step.reset = in->reset;
  for (int32_t i = 0; i < in->num_ops && st == LLB_STATUS_OK; i++) {
    const struct llb_kv_op *op = &in->ops[i];
    const char *id = op->req_id.len ? op->req_id.data : NULL;
    switch (op_kind(op->kind)) {
    case KV_OP_KIND_ALLOCATE:
      st = kv_step_add_allocate(&a->step, op->req_id.data, op->num_tokens, op->num_held_blocks,
                                op->num_computed_tokens, op->lookup, op->block_hashes, op->num_block_hashes);
      break;
    case KV_OP_KIND_CACHE: /* the decoder checked that ids and hashes pair up */
      st = kv_step_add_cache(&a->step, id, op->block_ids, op->block_hashes, op->num_block_ids);
      break;
    case KV_OP_KIND_RELEASE: st = kv_step_add_release(&a->step, id, op->block_ids, op->num_block_ids); break;
    }
  }
  return st;
}

static void on_kv_step(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct kv_manager_actor *a = user;
  llb_arena_reset(&a->arena);
  struct llb_kv_step in;
  llb_status st = llb_kv_step_decode(msg->data, msg->len, &a->arena, &in);
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->num_malformed, 1);
    respond_error(a, msg, 0, st);
    return;
  }
  if (in.reset) {
    /* A starting scheduler always asks for a reset (a previous one may have left hashes of
     * blocks whose contents are gone): worth a warning only when there was something to lose. */
    struct kv_manager_stats ks;
    kv_manager_get_stats(a->kv, &ks);
    if (ks.num_cached_blocks > 0 || ks.num_free_blocks < ks.num_blocks)
      LLB_LOG_WARN("kv_reset", "step=%llu reason=kv_contents_lost in_use=%d cached_blocks=%d held=%d",
                   (unsigned long long)in.step, ks.num_blocks - ks.num_free_blocks, ks.num_cached_blocks,
                   in.num_held_block_ids);
    else
      LLB_LOG_DEBUG("kv_reset", "step=%llu reason=kv_contents_lost in_use=0 cached_blocks=0 held=%d",
                    (unsigned long long)in.step, in.num_held_block_ids);
  } else if (in.resync) {
    LLB_LOG_INFO("kv_resync", "step=%llu held=%d", (unsigned long long)in.step, in.num_held_block_ids);
  }

  st = build_step(a, &in);
  if (st == LLB_STATUS_OK) st = kv_manager_apply_step(a->kv, &a->step, &a->res);
  if (st == LLB_STATUS_OK && (in.resync || in.reset)) atomic_fetch_add(&a->num_resyncs, 1);
  if (st == LLB_STATUS_OK)
    st = llb_array_reserve32((void **)&a->wire_results, &a->cap_wire_results, in.num_ops,
                    sizeof(*a->wire_results));
  if (st != LLB_STATUS_OK) {
    atomic_fetch_add(&a->num_failed, 1);
    respond_error(a, msg, in.step, st);
    return;
  }
  for (int32_t i = 0; i < in.num_ops; i++) {
    const struct kv_op_result *r = &a->res.results[i];
    const int32_t *ids = kv_step_result_block_ids(&a->res, r);
    a->wire_results[i] = (struct llb_kv_op_result){
        .req_id = in.ops[i].req_id,
        .status = (int32_t)r->status,
        .num_cached_tokens = r->num_cached_tokens,
        .block_ids = ids,
        .num_block_ids = ids ? r->num_block_ids : 0,
    };
  }
  struct llb_kv_step_result w = {
      .step = in.step,
      .results = a->wire_results,
      .num_results = in.num_ops,
  };
  fill_stats(a, &w);
  atomic_fetch_add(&a->num_steps, 1);
  LLB_LOG_DEBUG("kv_step", "step=%llu ops=%d free=%d", (unsigned long long)in.step, in.num_ops,
                w.num_free_blocks);
  respond(a, msg, &w);
}

llb_status kv_manager_actor_create(const struct kv_manager_actor_options *o,
                                   struct kv_manager_actor **out) {
  if (!o || !out)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_manager_actor_create: NULL argument");
  *out = NULL;
  const char *eid = o->engine_id ? o->engine_id : "0";
  if (!bus_token_valid(eid))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" is not one subject token", eid);
  struct kv_manager_actor *a = calloc(1, sizeof(*a));
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_manager actor");
  snprintf(a->engine_id, sizeof a->engine_id, "%s", eid);
  a->cfg = o->kv;
  llb_arena_init(&a->arena, NULL, 0);
  kv_step_init(&a->step);
  kv_step_result_init(&a->res);
  llb_status st = kv_manager_create(&o->kv, &a->kv);
  if (st != LLB_STATUS_OK) {
    kv_manager_actor_destroy(a);
    return st;
  }
  *out = a;
  return LLB_STATUS_OK;
}

llb_status kv_manager_actor_start(struct kv_manager_actor *a, struct bus *bus) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine(bus_prefix(bus), a->engine_id, "kv", subject, sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  a->bus = bus;
  st = bus_subscribe(bus, subject, NULL, on_kv_step, a, &a->sub);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("kv_manager_started", "subject=%s num_blocks=%d block_size=%d prefix_caching=%d",
               subject, a->cfg.num_blocks, a->cfg.block_size, a->cfg.enable_prefix_caching);
  return LLB_STATUS_OK;
}

void kv_manager_actor_stop(struct kv_manager_actor *a) {
  if (!a || !a->sub) return;
  (void)bus_unsubscribe(a->sub); /* fails only when the drain already ended the subscription */
  a->sub = NULL;
}

void kv_manager_actor_destroy(struct kv_manager_actor *a) {
  if (!a) return;
  kv_manager_destroy(a->kv);
  kv_step_free(&a->step);
  kv_step_result_free(&a->res);
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->out);
  free(a->wire_results);
  free(a);
}

void kv_manager_actor_stats(const struct kv_manager_actor *a, struct kv_manager_actor_stats *out) {
  struct kv_manager_actor *m = (struct kv_manager_actor *)a;
  out->num_steps = atomic_load(&m->num_steps);
  out->num_malformed = atomic_load(&m->num_malformed);
  out->num_failed = atomic_load(&m->num_failed);
  out->num_resyncs = atomic_load(&m->num_resyncs);
}
