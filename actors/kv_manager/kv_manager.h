/* kv_manager: the authoritative owner of the KV cache blocks of one engine (docs/design.md §4).
 *
 * It applies the scheduler's batched kv_step (schemas/kv_ops.h) in one call: FREE, ALLOCATE (with
 * an optional prefix-cache lookup) and CACHE ops, in order, each all-or-nothing, and
 * answers per op plus the free block count after the step. It keeps, per request, the
 * ordered list of blocks it holds. Semantics follow vLLM v1 KVCacheManager
 * (vllm/v1/core/kv_cache_manager.py: get_computed_blocks, allocate_slots, free) over a
 * BlockPool (kv_block_pool.h). The scheduler is its only client and mirrors its free
 * count; this module just never trusts that mirror.
 *
 * Request ids are at most KV_MANAGER_REQ_ID_MAX bytes. Memory: one table per engine; it
 * grows with the number of live requests and blocks per request, and is reused after that
 * (no allocation per op at steady state). Not thread-safe: one owner.
 */
#ifndef LLB_KV_MANAGER_H
#define LLB_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/kv_manager/kv_block_pool.h"
#include "schemas/kv_ops.h"
#include "base/status.h"

#define KV_MANAGER_REQ_ID_MAX 255

struct kv_manager;

struct kv_manager_config {
  int32_t num_blocks;           /* >= 1; every block is usable (no reserved null block) */
  int32_t block_size;           /* tokens per block, >= 1 */
  bool enable_prefix_caching;   /* false: lookups always miss, CACHE ops are accepted and ignored */
};

struct kv_manager_stats {
  int32_t num_blocks;
  int32_t num_free_blocks;
  double usage;                 /* referenced fraction, [0, 1] */
  int32_t num_cached_blocks;    /* blocks carrying a hash (referenced or evictable) */
  int32_t num_requests;         /* requests holding blocks */
  uint64_t prefix_cache_queries; /* tokens eligible for a hit (hashes sent * block_size), cumulative */
  uint64_t prefix_cache_hits;    /* tokens hit, cumulative */
};

/* Creates a manager with all blocks free and an empty prefix cache. Caller frees with
 * kv_manager_destroy. Errors: INVALID_ARGUMENT (bad config), OUT_OF_MEMORY. */
llb_status kv_manager_create(const struct kv_manager_config *cfg, struct kv_manager **out);
void kv_manager_destroy(struct kv_manager *m); /* accepts NULL */

/* Applies step->ops in order into `res` (cleared first; res->step = step->step), one
 * result per op:
 *   FREE      NOT_FOUND if the request holds nothing; else its blocks are released in
 *             reverse order (tail of the sequence evicted first).
 *   ALLOCATE  the request ends up holding ceil(num_tokens / block_size) blocks (never
 *             fewer than it holds). With lookup (request must hold no block, else
 *             INVALID_ARGUMENT), the longest run of block_hashes found in the prefix cache
 *             is given first, capped so that at least one of the num_tokens is left to
 *             compute (vLLM never serves the whole prompt from cache); num_cached_tokens
 *             says how many. QUEUE_FULL when the free blocks do not suffice: nothing changes.
 *             block ids = the hit blocks then the fresh ones, in order.
 *   CACHE     registers the request's newly full blocks (see schemas/kv_ops.h); INVALID_ARGUMENT
 *             if they are not blocks it holds; NOT_FOUND for an unknown request.
 * An op's failure is reported in its result and the next op still runs. The call itself
 * fails only on OUT_OF_MEMORY (growing `res` or the tables) or bad pointers; the ops done
 * before stay done, and res holds their results. */
llb_status kv_manager_apply_step(struct kv_manager *m, const struct kv_step *step,
                                 struct kv_step_result *res);

/* Releases every request's blocks (reverse order each). The prefix cache is kept when the
 * scheduler restarts and replays its requests from their prompts (the KV contents are still
 * valid), and dropped (drop_prefix_cache) when the worker lost the KV contents. */
void kv_manager_reset(struct kv_manager *m, bool drop_prefix_cache);

void kv_manager_get_stats(const struct kv_manager *m, struct kv_manager_stats *out);

/* Blocks held by req_id, in order (NULL and *n = 0 if none). Valid until the next call
 * that changes the manager. */
const int32_t *kv_manager_req_blocks(const struct kv_manager *m, const char *req_id, int32_t *n);

/* The pool, for tests and stats (read-only use). */
const struct kv_block_pool *kv_manager_pool(const struct kv_manager *m);

/* kv_block_pool_check plus: every referenced block's ref_cnt equals the number of requests
 * holding it. OK or INTERNAL (llb_err_last says why). O(num_blocks + held blocks). */
llb_status kv_manager_check(const struct kv_manager *m);

#endif
