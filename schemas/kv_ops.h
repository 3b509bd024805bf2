/* The scheduler ↔ kv_manager contract as plain C structs: one batched KV step per engine
 * step (docs/design.md §4), its result, and the block hash that names a full block of tokens in
 * the prefix cache.
 *
 * The scheduler owns the block state (each request's block table, each block's reference
 * count); the kv_manager is the prefix index: the free queue in LRU order and the map block
 * hash -> block, driven by block ids (docs/design.md §4, "Who owns the block state"). A kv_step
 * is an optional resync (the held list) and an ordered list of ops; the kv_manager applies them
 * in order and answers one kv_op_result per op. The wire form is schemas/kv_step.fbs version 2
 * (KVStep / KVStepResult); the field names match it. Semantics follow vLLM v1
 * (vllm/v1/core/kv_cache_manager.py, block_pool.py, kv_cache_utils.py).
 *
 * Ownership: every struct here is owned by its caller; the arrays grow through the helpers
 * below (amortized, so a reused kv_step stops allocating after warm-up). Strings referenced
 * by an op (req_id) are NOT copied: they must outlive the apply call; id and hash arrays are
 * copied into the step's pools.
 */
#ifndef LLB_SCHEMAS_KV_OPS_H
#define LLB_SCHEMAS_KV_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* What one op does (KVOpKind in schemas/kv_step.fbs; version 1's Free, 0, is gone). */
enum kv_op_kind {
  /* Give the request ceil(num_tokens / block_size) - num_held_blocks more blocks (none when
   * that is not positive). With `lookup` (num_held_blocks must be 0), the longest prefix of
   * block_hashes found in the prefix cache comes first (num_cached_tokens): a hit that was
   * free leaves the queue, one in use is shared; then fresh blocks from the queue head (a
   * hash they carried is evicted). All or nothing. */
  KV_OP_KIND_ALLOCATE = 1,
  /* Register block_ids[i] under block_hashes[i] in the prefix cache. A block that already
   * carries a hash, or a hash another block carries, is left as it is. */
  KV_OP_KIND_CACHE = 2,
  /* block_ids, whose reference count the scheduler dropped to zero, go to the free queue tail
   * in the order given (the first listed is evicted first); their hashes stay (lazy eviction).
   * An id out of range, listed twice or already free refuses the op: nothing changes. */
  KV_OP_KIND_RELEASE = 3,
};

struct kv_op {
  enum kv_op_kind kind;
  const char *req_id;           /* ALLOCATE: NUL-terminated, not copied; else may be NULL */
  int32_t num_tokens;           /* ALLOCATE: tokens that need slots, lookahead included */
  int32_t num_computed_tokens;  /* ALLOCATE: tokens already computed (informative) */
  int32_t num_held_blocks;      /* ALLOCATE: blocks the request holds already */
  bool lookup;                  /* ALLOCATE: look up the prefix cache first */
  int64_t hash_offset;          /* first hash in kv_step.block_hashes */
  int32_t num_block_hashes;     /* ALLOCATE+lookup: candidate prefix; CACHE: one per id */
  int64_t id_offset;            /* first id in kv_step.block_ids */
  int32_t num_block_ids;        /* RELEASE, CACHE */
};

/* One step: the resync (when set), then the ops in order. */
struct kv_step {
  uint64_t step;                /* the scheduler step this belongs to */
  bool reset;                   /* the KV contents are gone: drop every hash, then resync */
  bool resync;                  /* the free queue = every block not in held_block_ids */
  int32_t num_held_block_ids, cap_held_block_ids;
  int32_t *held_block_ids;      /* [num_held_block_ids]: every block the scheduler references */
  int32_t num_ops, cap_ops;
  struct kv_op *ops;            /* [num_ops] */
  int64_t num_block_hashes, cap_block_hashes;
  uint64_t *block_hashes;       /* [num_block_hashes] pool referenced by the ops */
  int64_t num_block_ids, cap_block_ids;
  int32_t *block_ids;           /* [num_block_ids] pool referenced by the ops */
};

struct kv_op_result {
  llb_status status;            /* OK; QUEUE_FULL = not enough free blocks (nothing changed);
                                   INVALID_ARGUMENT = bad op (nothing changed) */
  int32_t num_cached_tokens;    /* ALLOCATE+lookup: prefix-cache hit in tokens */
  int64_t block_offset;         /* first id in kv_step_result.block_ids */
  int32_t num_block_ids;        /* ALLOCATE: blocks given to the request, the hits first */
};

struct kv_step_result {
  uint64_t step;                /* the kv_step this answers */
  int32_t num_results, cap_results;
  struct kv_op_result *results; /* [num_results], one per op, in op order */
  int64_t num_block_ids, cap_block_ids;
  int32_t *block_ids;           /* [num_block_ids] pool referenced by the results */
  int32_t num_free_blocks;      /* after the whole step: a check of the scheduler's count */
  int32_t num_total_blocks;
  uint64_t prefix_cache_queries; /* tokens queried, cumulative (vLLM PrefixCacheStats) */
  uint64_t prefix_cache_hits;    /* tokens hit, cumulative */
};

/* Zeroes a kv_step (no allocation). */
void kv_step_init(struct kv_step *s);
/* Frees a kv_step's arrays; accepts NULL; the struct can be reused after kv_step_init. */
void kv_step_free(struct kv_step *s);
/* Empties a kv_step (no ops, no resync, no reset), keeping its arrays for reuse. */
void kv_step_clear(struct kv_step *s, uint64_t step);
/* Appends an ALLOCATE; `hashes[num_hashes]` are copied. req_id is referenced, not copied.
 * Errors: OUT_OF_MEMORY, INVALID_ARGUMENT (NULL req_id, negative counts). */
llb_status kv_step_add_allocate(struct kv_step *s, const char *req_id, int32_t num_tokens,
                                int32_t num_held_blocks, int32_t num_computed_tokens, bool lookup,
                                const uint64_t *hashes, int32_t num_hashes);
/* Appends a CACHE of ids[i] under hashes[i], i < n (both copied); req_id may be NULL.
 * Errors: OUT_OF_MEMORY, INVALID_ARGUMENT. */
llb_status kv_step_add_cache(struct kv_step *s, const char *req_id, const int32_t *ids,
                             const uint64_t *hashes, int32_t n);
/* Appends a RELEASE of ids[n] (copied), evicted in that order; req_id may be NULL.
 * Errors: OUT_OF_MEMORY, INVALID_ARGUMENT. */
llb_status kv_step_add_release(struct kv_step *s, const char *req_id, const int32_t *ids, int32_t n);
/* Sets resync with the held list ids[n] (copied, replacing any earlier list).
 * Errors: OUT_OF_MEMORY, INVALID_ARGUMENT. */
llb_status kv_step_set_held(struct kv_step *s, const int32_t *ids, int32_t n);
/* True when the step has nothing to send: no op, no resync, no reset. */
static inline bool kv_step_empty(const struct kv_step *s) { return s->num_ops == 0 && !s->resync && !s->reset; }
/* Hashes / block ids of op `op` (NULL when it has none). */
const uint64_t *kv_step_op_hashes(const struct kv_step *s, const struct kv_op *op);
const int32_t *kv_step_op_block_ids(const struct kv_step *s, const struct kv_op *op);

void kv_step_result_init(struct kv_step_result *r);
void kv_step_result_free(struct kv_step_result *r); /* accepts NULL */
void kv_step_result_clear(struct kv_step_result *r, uint64_t step);
/* Appends a result, reserving room for `num_block_ids` ids (returned through `*ids_out`,
 * to be filled by the caller). Errors: OUT_OF_MEMORY. */
llb_status kv_step_result_add(struct kv_step_result *r, llb_status status,
                              int32_t num_cached_tokens, int32_t num_block_ids,
                              int32_t **ids_out);
/* Block ids of result `res` (NULL when it has none). */
const int32_t *kv_step_result_block_ids(const struct kv_step_result *r,
                                        const struct kv_op_result *res);

/* Block hashes (vLLM kv_cache_utils.hash_block_tokens) are base/hash.h's llb_block_hash. */

#endif
