/* kv_manager: the prefix index, applying batched kv_steps by block id. See kv_manager.h.
 * vLLM v1 kv_cache_manager.py / block_pool.py semantics; our own code. */
#include "actors/kv_manager/kv_manager.h"

#include <stdlib.h>
#include <string.h>

struct kv_manager {
  struct kv_manager_config cfg;
  struct kv_block_pool *pool;
  bool synced;                 /* a resync or reset was applied since create */
  uint64_t last_step;
  uint64_t prefix_cache_queries, prefix_cache_hits, num_resyncs;
  uint32_t *seen;              /* [num_blocks]: == seen_stamp when in the current hit run */
  uint32_t seen_stamp;
};

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

llb_status kv_manager_create(const struct kv_manager_config *cfg, struct kv_manager **out) {
  if (!cfg || !out || cfg->num_blocks < 1 || cfg->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_manager: num_blocks %d block_size %d",
                    cfg ? cfg->num_blocks : 0, cfg ? cfg->block_size : 0);
  *out = NULL;
  struct kv_manager *m = calloc(1, sizeof(*m));
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_manager: create");
  m->cfg = *cfg;
  llb_status st = kv_block_pool_create(cfg->num_blocks, &m->pool);
  if (!st && !(m->seen = calloc((size_t)cfg->num_blocks, sizeof(*m->seen))))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_manager: create");
  if (st) {
    kv_manager_destroy(m);
    return st;
  }
  *out = m;
  return LLB_STATUS_OK;
}

void kv_manager_destroy(struct kv_manager *m) {
  if (!m) return;
  kv_block_pool_destroy(m->pool);
  free(m->seen);
  free(m);
}

/* ---- ops ---- */

static llb_status refuse(struct kv_step_result *res) {
  return kv_step_result_add(res, LLB_STATUS_INVALID_ARGUMENT, 0, 0, NULL);
}

static llb_status op_release(struct kv_manager *m, const struct kv_step *step, const struct kv_op *op,
                             struct kv_step_result *res) {
  const int32_t *ids = kv_step_op_block_ids(step, op);
  if (op->num_block_ids > 0 && !ids) return refuse(res);
  llb_status st = kv_block_pool_free_blocks(m->pool, ids, op->num_block_ids);
  return kv_step_result_add(res, st ? LLB_STATUS_INVALID_ARGUMENT : LLB_STATUS_OK, 0, 0, NULL);
}

/* The longest run of hashes[0..max_hit) in the prefix cache (vLLM get_computed_blocks), cut
 * at a block already in the run (hashes repeated by a broken or hostile sender): fills
 * ids[0..n), returns n; *num_free_hits: how many of them are free (they leave the queue). */
static int32_t find_hits(struct kv_manager *m, const uint64_t *hashes, int64_t max_hit, int32_t *ids,
                         int32_t *num_free_hits) {
  int32_t n = 0;
  *num_free_hits = 0;
  if (++m->seen_stamp == 0) { /* wrapped: start the stamps over */
    memset(m->seen, 0, (size_t)m->cfg.num_blocks * sizeof(*m->seen));
    m->seen_stamp = 1;
  }
  for (; n < max_hit; n++) {
    const int32_t id = kv_block_pool_get_cached_block(m->pool, hashes[n]);
    if (id < 0 || id >= m->cfg.num_blocks || m->seen[id] == m->seen_stamp) break; /* a chain never repeats */
    m->seen[id] = m->seen_stamp;
    ids[n] = id;
    if (kv_block_pool_is_free(m->pool, id)) (*num_free_hits)++;
  }
  return n;
}

static llb_status op_allocate(struct kv_manager *m, const struct kv_step *step,
                              const struct kv_op *op, struct kv_step_result *res) {
  const int32_t bs = m->cfg.block_size;
  const uint64_t *hashes = kv_step_op_hashes(step, op);
  if (op->num_tokens < 1 || op->num_held_blocks < 0 || (op->lookup && op->num_held_blocks > 0) ||
      (op->num_block_hashes > 0 && !hashes))
    return refuse(res);
  int64_t need = div_up(op->num_tokens, bs) - op->num_held_blocks;
  if (need < 0) need = 0;
  if (need > kv_block_pool_num_blocks(m->pool))
    return kv_step_result_add(res, LLB_STATUS_QUEUE_FULL, 0, 0, NULL);
  int64_t max_hit = 0; /* leave >= 1 token to compute */
  if (op->lookup && m->cfg.enable_prefix_caching && hashes) {
    max_hit = (op->num_tokens - 1) / bs;
    if (max_hit > op->num_block_hashes) max_hit = op->num_block_hashes;
    if (max_hit > need) max_hit = need;
  }
  int32_t *ids = NULL;
  llb_status st = kv_step_result_add(res, LLB_STATUS_OK, 0, (int32_t)need, &ids);
  if (st) return st;
  int32_t num_hit_free = 0;
  const int32_t num_hit = find_hits(m, hashes, max_hit, ids, &num_hit_free);
  const int64_t num_new = need - num_hit;
  struct kv_op_result *r = &res->results[res->num_results - 1];
  if (num_new + num_hit_free > kv_block_pool_num_free(m->pool)) {
    res->num_block_ids -= r->num_block_ids; /* nothing given */
    *r = (struct kv_op_result){.status = LLB_STATUS_QUEUE_FULL, .block_offset = res->num_block_ids};
    return LLB_STATUS_OK;
  }
  /* touch before popping so a fresh block can never be one of our own hits */
  (void)kv_block_pool_touch(m->pool, ids, num_hit);
  (void)kv_block_pool_get_new_blocks(m->pool, (int32_t)num_new, ids + num_hit);
  r->num_cached_tokens = num_hit * bs;
  if (op->lookup && m->cfg.enable_prefix_caching) {
    int64_t eligible = op->num_block_hashes;
    if (eligible > (op->num_tokens - 1) / bs) eligible = (op->num_tokens - 1) / bs;
    m->prefix_cache_queries += (uint64_t)(eligible * bs);
    m->prefix_cache_hits += (uint64_t)num_hit * (uint64_t)bs;
  }
  return LLB_STATUS_OK;
}

static llb_status op_cache(struct kv_manager *m, const struct kv_step *step, const struct kv_op *op,
                           struct kv_step_result *res) {
  const uint64_t *hashes = kv_step_op_hashes(step, op);
  const int32_t *ids = kv_step_op_block_ids(step, op);
  if (op->num_block_ids != op->num_block_hashes || (op->num_block_ids > 0 && (!ids || !hashes))) return refuse(res);
  for (int32_t i = 0; i < op->num_block_ids; i++)
    if (ids[i] < 0 || ids[i] >= kv_block_pool_num_blocks(m->pool)) return refuse(res);
  if (m->cfg.enable_prefix_caching)
    for (int32_t i = 0; i < op->num_block_ids; i++) (void)kv_block_pool_cache_block(m->pool, ids[i], hashes[i]);
  return kv_step_result_add(res, LLB_STATUS_OK, 0, 0, NULL);
}

/* ---- step ---- */

/* The resync or reset before the ops, or the reason the step cannot be applied. */
static llb_status begin_step(struct kv_manager *m, const struct kv_step *step) {
  if (!step->resync && !step->reset) {
    if (!m->synced)
      return LLB_ERRF(LLB_STATUS_STATE_LOST, "kv step %llu: this kv_manager does not know which blocks are "
                      "in use (it started after the scheduler): resync first", (unsigned long long)step->step);
    if (step->step <= m->last_step)
      return LLB_ERRF(LLB_STATUS_STATE_LOST, "kv step %llu is not above the last one (%llu): a restarted "
                      "scheduler resyncs first", (unsigned long long)step->step, (unsigned long long)m->last_step);
    return LLB_STATUS_OK;
  }
  if (step->num_held_block_ids > 0 && !step->held_block_ids)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv step %llu: held list missing", (unsigned long long)step->step);
  /* Validated before the reset, so a bad list changes nothing. */
  llb_status st = kv_block_pool_resync(m->pool, step->held_block_ids, step->num_held_block_ids);
  if (st) return st;
  if (step->reset) kv_block_pool_reset_prefix_cache(m->pool);
  m->synced = true;
  m->num_resyncs++;
  return LLB_STATUS_OK;
}

llb_status kv_manager_apply_step(struct kv_manager *m, const struct kv_step *step,
                                 struct kv_step_result *res) {
  if (!m || !step || !res || (step->num_ops > 0 && !step->ops))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_manager_apply_step: NULL argument");
  kv_step_result_clear(res, step->step);
  llb_status st = begin_step(m, step);
  if (st) return st;
  m->last_step = step->step;
  for (int32_t i = 0; i < step->num_ops && !st; i++) {
    const struct kv_op *op = &step->ops[i];
    switch (op->kind) {
    case KV_OP_KIND_RELEASE: st = op_release(m, step, op, res); break;
    case KV_OP_KIND_ALLOCATE: st = op->req_id ? op_allocate(m, step, op, res) : refuse(res); break;
    case KV_OP_KIND_CACHE: st = op_cache(m, step, op, res); break;
    default: st = refuse(res); break;
    }
  }
  res->num_free_blocks = kv_block_pool_num_free(m->pool);
  res->num_total_blocks = kv_block_pool_num_blocks(m->pool);
  res->prefix_cache_queries = m->prefix_cache_queries;
  res->prefix_cache_hits = m->prefix_cache_hits;
  return st;
}

void kv_manager_get_stats(const struct kv_manager *m, struct kv_manager_stats *out) {
  *out = (struct kv_manager_stats){
      .num_blocks = kv_block_pool_num_blocks(m->pool),
      .num_free_blocks = kv_block_pool_num_free(m->pool),
      .usage = kv_block_pool_usage(m->pool),
      .num_cached_blocks = kv_block_pool_num_cached(m->pool),
      .prefix_cache_queries = m->prefix_cache_queries,
      .prefix_cache_hits = m->prefix_cache_hits,
      .num_resyncs = m->num_resyncs,
  };
}

const struct kv_block_pool *kv_manager_pool(const struct kv_manager *m) { return m->pool; }

llb_status kv_manager_check(const struct kv_manager *m) { return kv_block_pool_check(m->pool); }
