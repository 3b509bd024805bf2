/* kv_manager: per-request block tables over a block pool, applying batched kv_steps.
 * See kv_manager.h. vLLM v1 kv_cache_manager.py semantics; our own code. */
#include "actors/kv_manager/kv_manager.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/strmap.h"

#define NO_SLOT (-1)

struct kv_req {
  bool used;
  char req_id[KV_MANAGER_REQ_ID_MAX + 1];
  int32_t num_blocks, cap_blocks;
  int32_t *blocks;             /* [num_blocks] in sequence order */
};

struct kv_manager {
  struct kv_manager_config cfg;
  struct kv_block_pool *pool;
  int32_t num_slots, cap_slots, num_used;
  struct kv_req *slots;        /* [num_slots]; unused ones keep their block arrays for reuse */
  int32_t free_slot_hint;
  struct llb_strmap *reqs;     /* req_id -> slot index + 1 (base/strmap) */
  uint64_t prefix_cache_queries, prefix_cache_hits;
};

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

llb_status kv_manager_create(const struct kv_manager_config *cfg, struct kv_manager **out) {
  if (!cfg || !out || cfg->num_blocks < 1 || cfg->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_manager: num_blocks %d block_size %d",
                    cfg ? cfg->num_blocks : 0, cfg ? cfg->block_size : 0);
  *out = NULL;
  struct kv_manager *m = calloc(1, sizeof(*m));
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_manager: create");
  llb_status st;
  m->cfg = *cfg;
  st = kv_block_pool_create(cfg->num_blocks, &m->pool);
  if (st) goto fail;
  st = llb_strmap_create(0, &m->reqs);
  if (st) goto fail;
  *out = m;
  return LLB_STATUS_OK;
fail:
  kv_manager_destroy(m);
  return st;
}

void kv_manager_destroy(struct kv_manager *m) {
  if (!m) return;
  for (int32_t i = 0; i < m->num_slots; i++) free(m->slots[i].blocks);
  free(m->slots);
  llb_strmap_destroy(m->reqs);
  kv_block_pool_destroy(m->pool);
  free(m);
}

/* ---- request table ---- */

/* The map's values are slot indices + 1 (a value is never NULL). */
static int32_t find_req(const struct kv_manager *m, const char *req_id) {
  const intptr_t v = (intptr_t)llb_strmap_get(m->reqs, req_id);
  return v ? (int32_t)(v - 1) : NO_SLOT;
}

static void erase_req(struct kv_manager *m, int32_t slot) {
  struct kv_req *r = &m->slots[slot];
  llb_strmap_remove(m->reqs, r->req_id);
  r->used = false;
  r->num_blocks = 0;
  m->num_used--;
  if (slot < m->free_slot_hint) m->free_slot_hint = slot;
}

static llb_status add_req(struct kv_manager *m, const char *req_id, int32_t *slot_out) {
  size_t len = strlen(req_id);
  if (len == 0 || len > KV_MANAGER_REQ_ID_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "req_id of %zu bytes (1..%d)", len, KV_MANAGER_REQ_ID_MAX);
  int32_t slot = NO_SLOT;
  for (int32_t s = m->free_slot_hint; s < m->num_slots; s++) {
    if (!m->slots[s].used) {
      slot = s;
      break;
    }
  }
  if (slot == NO_SLOT) {
    llb_status st = llb_array_reserve32((void **)&m->slots, &m->cap_slots, m->num_slots + 1, sizeof(*m->slots));
    if (st) return st;
    slot = m->num_slots++;
    m->slots[slot] = (struct kv_req){0};
  }
  llb_status st = llb_strmap_put(m->reqs, req_id, (void *)(intptr_t)(slot + 1));
  if (st) return st;
  struct kv_req *r = &m->slots[slot];
  r->used = true;
  memcpy(r->req_id, req_id, len + 1);
  r->num_blocks = 0;
  m->num_used++;
  m->free_slot_hint = slot + 1;
  *slot_out = slot;
  return LLB_STATUS_OK;
}

static llb_status reserve_blocks(struct kv_req *r, int64_t need) {
  if (need > INT32_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "kv_manager: %lld blocks for a request", (long long)need);
  return llb_array_reserve32((void **)&r->blocks, &r->cap_blocks, (int32_t)need, sizeof(*r->blocks));
}

/* Releases a request's blocks, tail first, and forgets it. */
static void release_req(struct kv_manager *m, int32_t slot) {
  struct kv_req *r = &m->slots[slot];
  for (int32_t i = 0, j = r->num_blocks - 1; i < j; i++, j--) {
    int32_t t = r->blocks[i];
    r->blocks[i] = r->blocks[j];
    r->blocks[j] = t;
  }
  /* Cannot fail: each block is referenced at least by this request. */
  (void)kv_block_pool_free_blocks(m->pool, r->blocks, r->num_blocks);
  erase_req(m, slot);
}

/* ---- ops ---- */

static llb_status op_free(struct kv_manager *m, const struct kv_op *op, struct kv_step_result *res) {
  int32_t slot = find_req(m, op->req_id);
  if (slot == NO_SLOT) return kv_step_result_add(res, LLB_STATUS_NOT_FOUND, 0, 0, NULL);
  release_req(m, slot);
  return kv_step_result_add(res, LLB_STATUS_OK, 0, 0, NULL);
}

static llb_status op_allocate(struct kv_manager *m, const struct kv_step *step,
                              const struct kv_op *op, struct kv_step_result *res) {
  const int32_t bs = m->cfg.block_size;
  int32_t slot = find_req(m, op->req_id);
  int32_t held = slot == NO_SLOT ? 0 : m->slots[slot].num_blocks;
  const uint64_t *hashes = kv_step_op_hashes(step, op);
  if (op->num_tokens < 1 || (op->lookup && held > 0) ||
      (op->num_block_hashes > 0 && !hashes))
    return kv_step_result_add(res, LLB_STATUS_INVALID_ARGUMENT, 0, 0, NULL);
  int64_t need = div_up(op->num_tokens, bs);

  /* Longest cached prefix (vLLM get_computed_blocks), leaving >= 1 token to compute. */
  int32_t num_hit = 0, num_hit_free = 0;
  if (op->lookup && m->cfg.enable_prefix_caching && hashes) {
    int64_t max_hit = (op->num_tokens - 1) / bs;
    for (int32_t i = 0; i < op->num_block_hashes && i < max_hit; i++) {
      int32_t id = kv_block_pool_get_cached_block(m->pool, hashes[i]);
      if (id < 0) break;
      num_hit++;
      if (kv_block_pool_ref_cnt(m->pool, id) == 0) num_hit_free++;
    }
  }
  int64_t num_new = need - held - num_hit;
  if (num_new < 0) num_new = 0;
  if (num_new + num_hit_free > kv_block_pool_num_free(m->pool))
    return kv_step_result_add(res, LLB_STATUS_QUEUE_FULL, 0, 0, NULL);

  if (slot == NO_SLOT) {
    llb_status st = add_req(m, op->req_id, &slot);
    if (st == LLB_STATUS_INVALID_ARGUMENT) return kv_step_result_add(res, st, 0, 0, NULL);
    if (st) return st;
  }
  struct kv_req *r = &m->slots[slot];
  int32_t *ids = NULL;
  llb_status st = reserve_blocks(r, (int64_t)held + num_hit + num_new);
  if (!st) st = kv_step_result_add(res, LLB_STATUS_OK, num_hit * bs, num_hit + (int32_t)num_new, &ids);
  if (st) {
    if (r->num_blocks == 0) erase_req(m, slot);
    return st;
  }
  for (int32_t i = 0; i < num_hit; i++) ids[i] = kv_block_pool_get_cached_block(m->pool, hashes[i]);
  /* touch before popping so a fresh block can never be one of our own hits */
  (void)kv_block_pool_touch(m->pool, ids, num_hit);
  (void)kv_block_pool_get_new_blocks(m->pool, (int32_t)num_new, ids + num_hit);
  memcpy(r->blocks + r->num_blocks, ids, (size_t)(num_hit + num_new) * sizeof(*ids));
  r->num_blocks += num_hit + (int32_t)num_new;
  if (op->lookup && m->cfg.enable_prefix_caching) {
    int64_t eligible = (int64_t)op->num_block_hashes;
    if (eligible > (op->num_tokens - 1) / bs) eligible = (op->num_tokens - 1) / bs;
    m->prefix_cache_queries += (uint64_t)(eligible * bs);
    m->prefix_cache_hits += (uint64_t)num_hit * (uint64_t)bs;
  }
  if (r->num_blocks == 0) erase_req(m, slot); /* a no-op allocation holds nothing */
  return LLB_STATUS_OK;
}

static llb_status op_cache(struct kv_manager *m, const struct kv_step *step, const struct kv_op *op,
                           struct kv_step_result *res) {
  const int32_t bs = m->cfg.block_size;
  int32_t slot = find_req(m, op->req_id);
  if (slot == NO_SLOT) return kv_step_result_add(res, LLB_STATUS_NOT_FOUND, 0, 0, NULL);
  const struct kv_req *r = &m->slots[slot];
  const uint64_t *hashes = kv_step_op_hashes(step, op);
  int64_t first = op->num_computed_tokens / bs;
  if (op->num_computed_tokens < 0 || op->num_computed_tokens % bs != 0 ||
      (op->num_block_hashes > 0 && !hashes) || first + op->num_block_hashes > r->num_blocks)
    return kv_step_result_add(res, LLB_STATUS_INVALID_ARGUMENT, 0, 0, NULL);
  if (m->cfg.enable_prefix_caching)
    for (int32_t i = 0; i < op->num_block_hashes; i++)
      (void)kv_block_pool_cache_block(m->pool, r->blocks[first + i], hashes[i]);
  return kv_step_result_add(res, LLB_STATUS_OK, 0, 0, NULL);
}

llb_status kv_manager_apply_step(struct kv_manager *m, const struct kv_step *step,
                                 struct kv_step_result *res) {
  if (!m || !step || !res || (step->num_ops > 0 && !step->ops))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_manager_apply_step: NULL argument");
  kv_step_result_clear(res, step->step);
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < step->num_ops && !st; i++) {
    const struct kv_op *op = &step->ops[i];
    if (!op->req_id) {
      st = kv_step_result_add(res, LLB_STATUS_INVALID_ARGUMENT, 0, 0, NULL);
      continue;
    }
    switch (op->kind) {
    case KV_OP_KIND_FREE: st = op_free(m, op, res); break;
    case KV_OP_KIND_ALLOCATE: st = op_allocate(m, step, op, res); break;
    case KV_OP_KIND_CACHE: st = op_cache(m, step, op, res); break;
    default: st = kv_step_result_add(res, LLB_STATUS_INVALID_ARGUMENT, 0, 0, NULL); break;
    }
  }
  res->num_free_blocks = kv_block_pool_num_free(m->pool);
  res->num_total_blocks = kv_block_pool_num_blocks(m->pool);
  res->prefix_cache_queries = m->prefix_cache_queries;
  res->prefix_cache_hits = m->prefix_cache_hits;
  return st;
}

void kv_manager_reset(struct kv_manager *m, bool drop_prefix_cache) {
  for (int32_t s = 0; s < m->num_slots; s++)
    if (m->slots[s].used) release_req(m, s);
  if (drop_prefix_cache) kv_block_pool_reset_prefix_cache(m->pool);
}

void kv_manager_get_stats(const struct kv_manager *m, struct kv_manager_stats *out) {
  *out = (struct kv_manager_stats){
      .num_blocks = kv_block_pool_num_blocks(m->pool),
      .num_free_blocks = kv_block_pool_num_free(m->pool),
      .usage = kv_block_pool_usage(m->pool),
      .num_cached_blocks = kv_block_pool_num_cached(m->pool),
      .num_requests = m->num_used,
      .prefix_cache_queries = m->prefix_cache_queries,
      .prefix_cache_hits = m->prefix_cache_hits,
  };
}

const int32_t *kv_manager_req_blocks(const struct kv_manager *m, const char *req_id, int32_t *n) {
  int32_t slot = find_req(m, req_id);
  *n = slot == NO_SLOT ? 0 : m->slots[slot].num_blocks;
  return slot == NO_SLOT ? NULL : m->slots[slot].blocks;
}

const struct kv_block_pool *kv_manager_pool(const struct kv_manager *m) { return m->pool; }

llb_status kv_manager_check(const struct kv_manager *m) {
  llb_status st = kv_block_pool_check(m->pool);
  if (st) return st;
  int32_t n = kv_block_pool_num_blocks(m->pool);
  int32_t *refs = calloc((size_t)n, sizeof(*refs));
  if (!refs) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_manager_check");
  int32_t used = 0;
  for (int32_t s = 0; s < m->num_slots; s++) {
    const struct kv_req *r = &m->slots[s];
    if (!r->used) continue;
    used++;
    if (find_req(m, r->req_id) != s) {
      free(refs);
      return LLB_ERRF(LLB_STATUS_INTERNAL, "request %s not found in the map", r->req_id);
    }
    for (int32_t i = 0; i < r->num_blocks; i++) refs[r->blocks[i]]++;
  }
  for (int32_t id = 0; id < n && !st; id++)
    if (refs[id] != kv_block_pool_ref_cnt(m->pool, id))
      st = LLB_ERRF(LLB_STATUS_INTERNAL, "block %d: held %d times, ref_cnt %d", id, refs[id],
                    kv_block_pool_ref_cnt(m->pool, id));
  free(refs);
  if (!st && used != m->num_used)
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "%d requests used, num_used %d", used, m->num_used);
  return st;
}
