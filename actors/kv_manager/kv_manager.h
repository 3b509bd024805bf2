/* kv_manager: the prefix index of one engine's KV cache (docs/design.md §4, "Who owns the
 * block state").
 *
 * The scheduler owns the block state: each request's block table and each block's reference
 * count. This module keeps what is derived from it and what the scheduler does not need to
 * plan: the free queue in LRU order (which free block goes out next, and the lazy eviction of
 * its hash) and the map block hash -> block (kv_block_pool.h). It applies the scheduler's
 * batched kv_step (schemas/kv_ops.h) in one call: the resync (the held list), then RELEASE,
 * ALLOCATE (with an optional prefix-cache lookup) and CACHE ops in order, each all-or-nothing,
 * and answers per op plus the free block count after the step (the scheduler's check). No
 * reference counts, no per-request tables: a block is in use or free. Semantics follow vLLM v1
 * KVCacheManager / BlockPool (vllm/v1/core/kv_cache_manager.py: get_computed_blocks,
 * allocate_slots, free; block_pool.py), split across the bus; our own code.
 *
 * Every field of a step is checked (ids in range, no duplicates, a release of a free block,
 * counts): a bad op is refused in its result, a bad held list refuses the step; nothing the
 * scheduler sends can corrupt the pool. Memory: fixed after create (no allocation per op but
 * the result arrays). Not thread-safe: one owner.
 */
#ifndef LLB_KV_MANAGER_H
#define LLB_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/kv_manager/kv_block_pool.h"
#include "schemas/kv_ops.h"
#include "base/status.h"

struct kv_manager;

struct kv_manager_config {
  int32_t num_blocks;           /* >= 1; every block is usable (no reserved null block) */
  int32_t block_size;           /* tokens per block, >= 1 */
  bool enable_prefix_caching;   /* false: lookups always miss, CACHE ops are accepted and ignored */
};

struct kv_manager_stats {
  int32_t num_blocks;
  int32_t num_free_blocks;
  double usage;                 /* fraction in use, [0, 1] */
  int32_t num_cached_blocks;    /* blocks carrying a hash (in use or evictable) */
  uint64_t prefix_cache_queries; /* tokens eligible for a hit (hashes sent * block_size), cumulative */
  uint64_t prefix_cache_hits;    /* tokens hit, cumulative */
  uint64_t num_resyncs;          /* steps applied with resync or reset */
};

/* Creates a manager with all blocks free and an empty prefix cache. It takes no step until
 * one with resync or reset tells it which blocks are in use (a scheduler may hold blocks from
 * before this manager existed). Caller frees with kv_manager_destroy. Errors:
 * INVALID_ARGUMENT (bad config), OUT_OF_MEMORY. */
llb_status kv_manager_create(const struct kv_manager_config *cfg, struct kv_manager **out);
void kv_manager_destroy(struct kv_manager *m); /* accepts NULL */

/* Applies `step` into `res` (cleared first; res->step = step->step):
 *   reset     every hash is dropped (the KV contents are gone), then as resync;
 *   resync    the held list (kv_block_pool_resync): listed blocks in use, the others free.
 * then one result per op, in order:
 *   RELEASE   the ids go to the queue tail in order; INVALID_ARGUMENT (nothing changes) for
 *             an id out of range, listed twice or already free.
 *   ALLOCATE  ceil(num_tokens / block_size) - num_held_blocks blocks (none when not positive).
 *             With lookup (num_held_blocks must be 0, else INVALID_ARGUMENT), the longest run
 *             of block_hashes found in the prefix cache comes first, capped so that at least
 *             one of the num_tokens is left to compute (vLLM never serves the whole prompt
 *             from cache) and cut at a block it already gave; num_cached_tokens says how many.
 *             Then fresh blocks from the queue head. QUEUE_FULL when the free blocks do not
 *             suffice: nothing changes. block ids = the hits then the fresh ones.
 *   CACHE     registers block_ids[i] under block_hashes[i]; INVALID_ARGUMENT (nothing
 *             changes) for an id out of range or a count mismatch.
 * An op's failure is reported in its result and the next op still runs. The call fails as a
 * whole, changing nothing, with STATE_LOST when neither resync nor reset is set and the
 * manager has not been told the held blocks since it was created, or the step number is not
 * above the last one (a restarted scheduler); INVALID_ARGUMENT for a bad held list or bad
 * pointers; OUT_OF_MEMORY growing `res` (the ops done before stay done). */
llb_status kv_manager_apply_step(struct kv_manager *m, const struct kv_step *step,
                                 struct kv_step_result *res);

void kv_manager_get_stats(const struct kv_manager *m, struct kv_manager_stats *out);

/* The pool, for tests and stats (read-only use). */
const struct kv_block_pool *kv_manager_pool(const struct kv_manager *m);

/* kv_block_pool_check. OK or INTERNAL (llb_err_last says why). O(num_blocks). */
llb_status kv_manager_check(const struct kv_manager *m);

#endif
