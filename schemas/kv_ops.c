/* kv_step / kv_step_result builders and the block hash. See kv_ops.h. */
#include "schemas/kv_ops.h"

#include <stdlib.h>
#include <string.h>

/* Grows *arr (elements of `elem` bytes) to hold at least `need` elements, doubling. */
static llb_status grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return LLB_STATUS_OK;
  int64_t n = *cap > 0 ? *cap : 16;
  while (n < need) n *= 2;
  void *p = realloc(*arr, (size_t)n * elem);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_step: %lld elements", (long long)n);
  *arr = p;
  *cap = n;
  return LLB_STATUS_OK;
}

static llb_status grow32(void **arr, int32_t *cap, int64_t need, size_t elem) {
  int64_t c = *cap;
  if (need > INT32_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "kv_step: %lld entries", (long long)need);
  llb_status st = grow(arr, &c, need, elem);
  *cap = (int32_t)c;
  return st;
}

void kv_step_init(struct kv_step *s) { memset(s, 0, sizeof(*s)); }

void kv_step_free(struct kv_step *s) {
  if (!s) return;
  free(s->ops);
  free(s->block_hashes);
  memset(s, 0, sizeof(*s));
}

void kv_step_clear(struct kv_step *s, uint64_t step) {
  s->step = step;
  s->num_ops = 0;
  s->num_block_hashes = 0;
}

llb_status kv_step_add_op(struct kv_step *s, enum kv_op_kind kind, const char *req_id,
                          int32_t num_tokens, int32_t num_computed_tokens, bool lookup,
                          const uint64_t *hashes, int32_t num_hashes) {
  if (!req_id || num_hashes < 0 || (num_hashes > 0 && !hashes))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_step_add_op: bad arguments");
  llb_status st = grow32((void **)&s->ops, &s->cap_ops, (int64_t)s->num_ops + 1, sizeof(*s->ops));
  if (st) return st;
  st = grow((void **)&s->block_hashes, &s->cap_block_hashes, s->num_block_hashes + num_hashes,
            sizeof(*s->block_hashes));
  if (st) return st;
  struct kv_op *op = &s->ops[s->num_ops++];
  *op = (struct kv_op){.kind = kind, .req_id = req_id, .num_tokens = num_tokens,
                       .num_computed_tokens = num_computed_tokens, .lookup = lookup,
                       .hash_offset = s->num_block_hashes, .num_block_hashes = num_hashes};
  if (num_hashes > 0)
    memcpy(s->block_hashes + s->num_block_hashes, hashes, (size_t)num_hashes * sizeof(*hashes));
  s->num_block_hashes += num_hashes;
  return LLB_STATUS_OK;
}

const uint64_t *kv_step_op_hashes(const struct kv_step *s, const struct kv_op *op) {
  if (op->num_block_hashes <= 0 || op->hash_offset < 0 ||
      op->hash_offset + op->num_block_hashes > s->num_block_hashes)
    return NULL;
  return s->block_hashes + op->hash_offset;
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
  st = grow((void **)&r->block_ids, &r->cap_block_ids, r->num_block_ids + num_block_ids,
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

/* splitmix64 finalizer (Steele, Lea, Flood 2014): a bijection on 64-bit words with full
 * avalanche, so absorbing distinct words from the same state gives distinct states. */
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  x ^= x >> 31;
  return x;
}

static inline uint64_t absorb(uint64_t h, uint64_t w) {
  return mix64(h ^ w) + UINT64_C(0x9e3779b97f4a7c15);
}

/* Domain tags keep a salt from reading as a token or an mm hash. */
enum { TAG_TOKENS = 0x546f6b, TAG_SALT = 0x53616c74, TAG_MM = 0x4d4d };

uint64_t kv_block_hash(uint64_t parent_hash, const int32_t *tokens, int32_t num_tokens,
                       const struct kv_block_extra_keys *extra) {
  uint64_t h = absorb(UINT64_C(0x243f6a8885a308d3), parent_hash);
  h = absorb(h, TAG_TOKENS);
  int32_t i = 0;
  for (; i + 1 < num_tokens; i += 2)  /* two 32-bit tokens per word */
    h = absorb(h, (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32));
  if (i < num_tokens) h = absorb(h, (uint64_t)(uint32_t)tokens[i] | (UINT64_C(1) << 63));
  int32_t num_mm = 0;
  if (extra) {
    if (extra->has_cache_salt) {
      h = absorb(h, TAG_SALT);
      h = absorb(h, extra->cache_salt_hash);
    }
    for (int32_t k = 0; k < extra->num_mm_hashes && extra->mm_hashes; k++) {
      h = absorb(h, TAG_MM);
      h = absorb(h, extra->mm_hashes[k]);
    }
    num_mm = extra->num_mm_hashes;
  }
  h = absorb(h, ((uint64_t)(uint32_t)num_tokens << 32) | (uint32_t)num_mm);
  return mix64(h);
}

uint64_t kv_hash_bytes(const void *data, size_t len) {
  const unsigned char *p = data;
  uint64_t h = absorb(UINT64_C(0x13198a2e03707344), (uint64_t)len);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = absorb(h, w);
  }
  uint64_t tail = 0;
  for (size_t k = 0; i + k < len; k++) tail |= (uint64_t)p[i + k] << (8 * k);
  return mix64(absorb(h, tail));
}
