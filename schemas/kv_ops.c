/* kv_step / kv_step_result builders. See kv_ops.h. */
#include "schemas/kv_ops.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

static llb_status grow32(void **arr, int32_t *cap, int64_t need, size_t elem) {
  int64_t c = *cap;
  if (need > INT32_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "kv_step: %lld entries", (long long)need);
  llb_status st = llb_array_reserve(arr, &c, need, elem);
  *cap = (int32_t)c;
  return st;
}

void kv_step_init(struct kv_step *s) { memset(s, 0, sizeof(*s)); }

void kv_step_free(struct kv_step *s) {
  if (!s) return;
  free(s->ops);
  free(s->block_hashes);
  free(s->block_ids);
  free(s->held_block_ids);
  memset(s, 0, sizeof(*s));
}

void kv_step_clear(struct kv_step *s, uint64_t step) {
  s->step = step;
  s->reset = s->resync = false;
  s->num_held_block_ids = 0;
  s->num_ops = 0;
  s->num_block_hashes = 0;
  s->num_block_ids = 0;
}

/* Appends an op with its hashes and ids copied into the pools. */
static llb_status add_op(struct kv_step *s, const struct kv_op *tmpl, const uint64_t *hashes,
                         int32_t num_hashes, const int32_t *ids, int32_t num_ids) {
  if (num_hashes < 0 || num_ids < 0 || (num_hashes > 0 && !hashes) || (num_ids > 0 && !ids))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_step: %d hashes, %d ids", num_hashes, num_ids);
  llb_status st = grow32((void **)&s->ops, &s->cap_ops, (int64_t)s->num_ops + 1, sizeof(*s->ops));
  if (!st)
    st = llb_array_reserve((void **)&s->block_hashes, &s->cap_block_hashes, s->num_block_hashes + num_hashes,
                           sizeof(*s->block_hashes));
  if (!st)
    st = llb_array_reserve((void **)&s->block_ids, &s->cap_block_ids, s->num_block_ids + num_ids,
                           sizeof(*s->block_ids));
  if (st) return st;
  struct kv_op *op = &s->ops[s->num_ops++];
  *op = *tmpl;
  op->hash_offset = s->num_block_hashes;
  op->num_block_hashes = num_hashes;
  op->id_offset = s->num_block_ids;
  op->num_block_ids = num_ids;
  if (num_hashes > 0) memcpy(s->block_hashes + s->num_block_hashes, hashes, (size_t)num_hashes * sizeof(*hashes));
  if (num_ids > 0) memcpy(s->block_ids + s->num_block_ids, ids, (size_t)num_ids * sizeof(*ids));
  s->num_block_hashes += num_hashes;
  s->num_block_ids += num_ids;
  return LLB_STATUS_OK;
}

llb_status kv_step_add_allocate(struct kv_step *s, const char *req_id, int32_t num_tokens,
                                int32_t num_held_blocks, int32_t num_computed_tokens, bool lookup,
                                const uint64_t *hashes, int32_t num_hashes) {
  if (!req_id || num_tokens < 0 || num_held_blocks < 0 || num_computed_tokens < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_step_add_allocate: bad arguments");
  const struct kv_op op = {.kind = KV_OP_KIND_ALLOCATE, .req_id = req_id, .num_tokens = num_tokens,
                           .num_held_blocks = num_held_blocks, .num_computed_tokens = num_computed_tokens,
                           .lookup = lookup};
  return add_op(s, &op, hashes, num_hashes, NULL, 0);
}

llb_status kv_step_add_cache(struct kv_step *s, const char *req_id, const int32_t *ids,
                             const uint64_t *hashes, int32_t n) {
  const struct kv_op op = {.kind = KV_OP_KIND_CACHE, .req_id = req_id};
  return add_op(s, &op, hashes, n, ids, n);
}

llb_status kv_step_add_release(struct kv_step *s, const char *req_id, const int32_t *ids, int32_t n) {
  const struct kv_op op = {.kind = KV_OP_KIND_RELEASE, .req_id = req_id};
  return add_op(s, &op, NULL, 0, ids, n);
}

llb_status kv_step_set_held(struct kv_step *s, const int32_t *ids, int32_t n) {
  if (n < 0 || (n > 0 && !ids)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_step_set_held: %d ids", n);
  llb_status st = grow32((void **)&s->held_block_ids, &s->cap_held_block_ids, n, sizeof(*s->held_block_ids));
  if (st) return st;
  if (n > 0) memcpy(s->held_block_ids, ids, (size_t)n * sizeof(*ids));
  s->num_held_block_ids = n;
  s->resync = true;
  return LLB_STATUS_OK;
}

const uint64_t *kv_step_op_hashes(const struct kv_step *s, const struct kv_op *op) {
  if (op->num_block_hashes <= 0 || op->hash_offset < 0 ||
      op->hash_offset + op->num_block_hashes > s->num_block_hashes)
    return NULL;
  return s->block_hashes + op->hash_offset;
}

const int32_t *kv_step_op_block_ids(const struct kv_step *s, const struct kv_op *op) {
  if (op->num_block_ids <= 0 || op->id_offset < 0 || op->id_offset + op->num_block_ids > s->num_block_ids)
    return NULL;
  return s->block_ids + op->id_offset;
}

void kv_step_result_init(struct kv_step_result *r) { memset(r, 0, sizeof(*r)); }

void kv_step_result_free(struct kv_step_result *r) {
  if (!r) return;
  free(r->results);
  free(r->block_ids);
  memset(r, 0, sizeof(*r));
}

void kv_step_result_clear(struct kv_step_result *r, uint64_t step) {
  r->step = step;
  r->num_results = 0;
  r->num_block_ids = 0;
}

llb_status kv_step_result_add(struct kv_step_result *r, llb_status status,
                              int32_t num_cached_tokens, int32_t num_block_ids,
                              int32_t **ids_out) {
  if (num_block_ids < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "negative block count");
  llb_status st = grow32((void **)&r->results, &r->cap_results, (int64_t)r->num_results + 1,
                         sizeof(*r->results));
  if (st) return st;
  st = llb_array_reserve((void **)&r->block_ids, &r->cap_block_ids, r->num_block_ids + num_block_ids,
            sizeof(*r->block_ids));
  if (st) return st;
  r->results[r->num_results++] = (struct kv_op_result){
      .status = status, .num_cached_tokens = num_cached_tokens,
      .block_offset = r->num_block_ids, .num_block_ids = num_block_ids};
  if (ids_out) *ids_out = r->block_ids + r->num_block_ids;
  r->num_block_ids += num_block_ids;
  return LLB_STATUS_OK;
}

const int32_t *kv_step_result_block_ids(const struct kv_step_result *r,
                                        const struct kv_op_result *res) {
  if (res->num_block_ids <= 0 || res->block_offset < 0 ||
      res->block_offset + res->num_block_ids > r->num_block_ids)
    return NULL;
  return r->block_ids + res->block_offset;
}
