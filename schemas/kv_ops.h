/* The scheduler ↔ kv_manager contract as plain C structs: one batched KV step per engine
 * step (docs/design.md §4), its result, and the block hash that names a full block of tokens in
 * the prefix cache.
 *
 * A kv_step is an ordered list of ops; the kv_manager applies them in order and answers one
 * kv_op_result per op. The wire form is schemas/kv_step.fbs (KVStep / KVStepResult); the
 * field names match it. Semantics follow vLLM v1 (vllm/v1/core/kv_cache_manager.py,
 * block_pool.py, kv_cache_utils.py), split in two: the scheduler plans, the kv_manager owns
 * the blocks.
 *
 * Ownership: every struct here is owned by its caller; the arrays grow through the helpers
 * below (amortized, so a reused kv_step stops allocating after warm-up). Strings and hash
 * arrays referenced by an op (req_id) are NOT copied: they must outlive the apply call.
 */
#ifndef LLB_SCHEMAS_KV_OPS_H
#define LLB_SCHEMAS_KV_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* What one op does (KVOpKind in schemas/kv_step.fbs). */
enum kv_op_kind {
  /* Drop the request's blocks: ref counts go down, blocks whose count reaches zero go to
   * the tail of the free queue in REVERSE block order (the tail of the sequence is evicted
   * first); cached blocks keep their hash until they are reused. */
  KV_OP_KIND_FREE = 0,
  /* Make the request hold ceil(num_tokens / block_size) blocks. With `lookup`, the request
   * must hold no block yet: the longest prefix of block_hashes found in the prefix cache is
   * given to it first (num_cached_tokens), then fresh blocks. All or nothing. */
  KV_OP_KIND_ALLOCATE = 1,
  /* Register newly full blocks in the prefix cache: block_hashes[i] names the request's
   * block (num_computed_tokens / block_size + i); num_computed_tokens is a multiple of the
   * block size. A hash already cached by another block leaves this block unregistered. */
  KV_OP_KIND_CACHE = 2,
};

struct kv_op {
  enum kv_op_kind kind;
  const char *req_id;           /* NUL-terminated, not copied */
  int32_t num_tokens;           /* ALLOCATE: tokens that need slots, lookahead included */
  int32_t num_computed_tokens;  /* ALLOCATE: tokens already computed (informative);
                                   CACHE: first token of the first hashed block */
  bool lookup;                  /* ALLOCATE: look up the prefix cache first */
  int64_t hash_offset;          /* first hash in kv_step.block_hashes */
  int32_t num_block_hashes;     /* ALLOCATE+lookup: candidate prefix; CACHE: new hashes */
};

/* One step's ops, applied in order. */
struct kv_step {
  uint64_t step;                /* the scheduler step this belongs to */
  int32_t num_ops, cap_ops;
  struct kv_op *ops;            /* [num_ops] */
  int64_t num_block_hashes, cap_block_hashes;
  uint64_t *block_hashes;       /* [num_block_hashes] pool referenced by the ops */
};

struct kv_op_result {
  llb_status status;            /* OK; QUEUE_FULL = not enough free blocks (nothing changed);
                                   NOT_FOUND = unknown request; INVALID_ARGUMENT = bad op */
  int32_t num_cached_tokens;    /* ALLOCATE+lookup: prefix-cache hit in tokens */
  int64_t block_offset;         /* first id in kv_step_result.block_ids */
  int32_t num_block_ids;        /* blocks newly given to the request, in order */
};

struct kv_step_result {
  uint64_t step;                /* the kv_step this answers */
  int32_t num_results, cap_results;
  struct kv_op_result *results; /* [num_results], one per op, in op order */
  int64_t num_block_ids, cap_block_ids;
  int32_t *block_ids;           /* [num_block_ids] pool referenced by the results */
  int32_t num_free_blocks;      /* after the whole step */
  int32_t num_total_blocks;
  uint64_t prefix_cache_queries; /* tokens queried, cumulative (vLLM PrefixCacheStats) */
  uint64_t prefix_cache_hits;    /* tokens hit, cumulative */
};

/* Zeroes a kv_step (no allocation). */
void kv_step_init(struct kv_step *s);
/* Frees a kv_step's arrays; accepts NULL; the struct can be reused after kv_step_init. */
void kv_step_free(struct kv_step *s);
/* Empties a kv_step, keeping its arrays for reuse. */
void kv_step_clear(struct kv_step *s, uint64_t step);
/* Appends an op. For ALLOCATE+lookup and CACHE, `hashes[num_hashes]` are copied into the
 * step's pool. req_id is referenced, not copied. Errors: OUT_OF_MEMORY, INVALID_ARGUMENT. */
llb_status kv_step_add_op(struct kv_step *s, enum kv_op_kind kind, const char *req_id,
                          int32_t num_tokens, int32_t num_computed_tokens, bool lookup,
                          const uint64_t *hashes, int32_t num_hashes);
/* Hashes of op `op` (NULL when it has none). */
const uint64_t *kv_step_op_hashes(const struct kv_step *s, const struct kv_op *op);

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
