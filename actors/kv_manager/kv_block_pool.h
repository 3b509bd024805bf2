/* KV block pool: the blocks of the paged KV cache, the free-block queue in LRU eviction order
 * and the prefix-cache map block_hash -> block. The kv_manager's whole state: the scheduler
 * owns the reference counts (docs/design.md §4), so a block here is either in use (some
 * request of the scheduler holds it) or free (in the queue), nothing more.
 *
 * Follows vLLM v1 vllm/v1/core/block_pool.py (BlockPool) and kv_cache_utils.py
 * (KVCacheBlock, FreeKVCacheBlockQueue). The free queue is a doubly linked list threaded
 * through the block array (no allocation after create): popleft, remove and append are O(1)
 * per block. A free block may still carry its hash: it stays a prefix-cache hit until
 * get_new_blocks hands it out again, and only then is the hash dropped (lazy eviction, as vLLM).
 *
 * All num_blocks blocks are usable: unlike vLLM there is no reserved null block (our
 * worker marks skipped slots with slot_mapping -1, so no padding block is needed).
 * Not thread-safe: one owner.
 */
#ifndef LLB_KV_BLOCK_POOL_H
#define LLB_KV_BLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

struct kv_block_pool;

/* Creates a pool of num_blocks (>= 1) free blocks, queued in id order 0..n-1, no hashes.
 * Caller frees with kv_block_pool_destroy. Errors: INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status kv_block_pool_create(int32_t num_blocks, struct kv_block_pool **out);
void kv_block_pool_destroy(struct kv_block_pool *p); /* accepts NULL */

int32_t kv_block_pool_num_blocks(const struct kv_block_pool *p);
int32_t kv_block_pool_num_free(const struct kv_block_pool *p);
/* Fraction of blocks in use, in [0, 1] (vLLM get_usage). */
double kv_block_pool_usage(const struct kv_block_pool *p);
/* Blocks that currently carry a hash (referenced or free). */
int32_t kv_block_pool_num_cached(const struct kv_block_pool *p);

/* Pops `n` blocks from the head of the free queue (least recently freed first) into
 * ids[n]; a popped block that carried a hash is evicted from the prefix cache. Each comes
 * back in use. Errors: QUEUE_FULL when fewer than n are free (nothing changes). */
llb_status kv_block_pool_get_new_blocks(struct kv_block_pool *p, int32_t n, int32_t *ids);

/* Marks each of ids[n] in use (prefix-cache hits): a free block leaves the queue, one in use
 * stays so (shared). Errors: INVALID_ARGUMENT for an id out of range (nothing changes). */
llb_status kv_block_pool_touch(struct kv_block_pool *p, const int32_t *ids, int32_t n);

/* Appends ids[n] to the queue tail in the order given (the first is evicted first): the
 * scheduler dropped their last reference (vLLM BlockPool.free_blocks, a request's tail first).
 * Errors: INVALID_ARGUMENT for an id out of range, listed twice or already free; nothing
 * changes then. */
llb_status kv_block_pool_free_blocks(struct kv_block_pool *p, const int32_t *ids, int32_t n);

/* Rebuilds the in-use set from the scheduler's list of every block it references: each of
 * held[n] leaves the queue, each other block not queued is appended (in id order); the queue
 * order of the blocks that stay free and every hash are kept. Errors: INVALID_ARGUMENT for an
 * id out of range or listed twice (nothing changes). O(num_blocks). */
llb_status kv_block_pool_resync(struct kv_block_pool *p, const int32_t *held, int32_t n);

/* Whether block id is free (in the queue); false for an id out of range. */
bool kv_block_pool_is_free(const struct kv_block_pool *p, int32_t id);

/* The block registered under block_hash, or -1 (vLLM get_cached_block). */
int32_t kv_block_pool_get_cached_block(const struct kv_block_pool *p, uint64_t block_hash);

/* Registers block `id` (a full block, in use or free) under block_hash. Returns false and changes
 * nothing when the block already has a hash or the hash already names another block (the
 * first block keeps it, so a lookup stays deterministic). */
bool kv_block_pool_cache_block(struct kv_block_pool *p, int32_t id, uint64_t block_hash);

/* Whether block id carries a hash; its value through *hash_out when not NULL. */
bool kv_block_pool_block_hash(const struct kv_block_pool *p, int32_t id, uint64_t *hash_out);

/* Forgets every block's hash (vLLM's reset_prefix_cache): no later lookup hits until blocks
 * are cached again. Used when the KV contents are lost (a worker restart). O(num_blocks). */
void kv_block_pool_reset_prefix_cache(struct kv_block_pool *p);

/* Copies up to cap ids of the free queue, head (next evicted) first, into ids; returns the
 * queue length. For tests and debugging: O(num_free). */
int32_t kv_block_pool_free_queue_ids(const struct kv_block_pool *p, int32_t *ids, int32_t cap);

/* Checks every invariant: each block is either in use or in the queue exactly once,
 * list links agree both ways, num_free matches, every map entry names a block carrying
 * that hash and every hashed block is in the map. Returns OK or INTERNAL with the first
 * violation recorded (llb_err_last). O(num_blocks). */
llb_status kv_block_pool_check(const struct kv_block_pool *p);

#endif
