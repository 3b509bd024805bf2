/* The block state: its one owner (docs/design.md §4, "Who owns the block state"). Each
 * request's block table (sched_request.block_ids) and each block's reference count
 * (block_refs: the requests, running, preempted-and-not-yet-released or exported, that hold it;
 * vLLM's KVCacheBlock.ref_cnt) live here; the kv_manager is the prefix index (free queue in LRU
 * order, block hash -> block) that this file drives by block id: RELEASE of the ids whose count
 * dropped to zero, CACHE of newly full blocks by id and hash, and after any doubt (a failed or
 * mismatched KV round trip, a restarted kv_manager, a failed worker) a resync with every held
 * block. vLLM v1 core/kv_cache_manager.py and block_pool.py semantics split across the bus; our
 * own code. A leaf of scheduler.c: it calls nothing there. */
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"
#include "base/array.h"
#include "base/log.h"

llb_status sched_blocks_init(struct scheduler *s) {
  s->block_refs = calloc((size_t)s->cfg.num_blocks, sizeof(*s->block_refs));
  s->seen = calloc((size_t)s->cfg.num_blocks, sizeof(*s->seen));
  if (!s->block_refs || !s->seen) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler: %d blocks", s->cfg.num_blocks);
  s->num_free = s->cfg.num_blocks;
  s->kv_resync_pending = true; /* a kv_manager cannot know that a new scheduler holds nothing */
  return LLB_STATUS_OK;
}

void sched_blocks_free(struct scheduler *s) {
  free(s->block_refs);
  free(s->seen);
  free(s->rel_ids);
  free(s->cache_ids);
  free(s->cache_hashes);
}

void sched_kv_resync(struct scheduler *s) {
  if (!s->kv_resync_pending) s->stats.num_kv_resyncs++;
  s->kv_resync_pending = true;
}

void sched_kv_reset(struct scheduler *s) {
  sched_kv_resync(s);
  s->kv_reset_pending = true;
}

/* Number of r's blocks that can be registered in the prefix cache now. */
static int32_t cacheable_blocks(const struct scheduler *s, const struct sched_request *r) {
  int32_t n = r->num_computed_tokens / s->cfg.block_size;
  if (n > r->num_block_ids) n = r->num_block_ids;
  if (n > r->num_block_hashes) n = r->num_block_hashes;
  return n;
}

/* Out of memory for a deferred op: the kv_manager will learn the state from a resync instead. */
static void lost_op(struct scheduler *s, const char *what) {
  LLB_LOG_WARN("kv_op_deferred_lost", "op=%s reason=out_of_memory action=resync", what);
  sched_kv_resync(s);
}

/* Full computed blocks of r not registered yet, as (id, hash) pairs for the next CACHE. */
static void defer_cache(struct scheduler *s, const struct sched_request *r) {
  const int32_t from = r->num_cached_blocks, upto = cacheable_blocks(s, r);
  if (!s->cfg.enable_prefix_caching || upto <= from) return;
  const int32_t need = s->num_cache + (upto - from);
  if (llb_array_reserve32((void **)&s->cache_ids, &s->cap_cache_ids, need, sizeof(*s->cache_ids)) ||
      llb_array_reserve32((void **)&s->cache_hashes, &s->cap_cache_hashes, need, sizeof(*s->cache_hashes))) {
    lost_op(s, "cache"); /* blocks left unregistered: only prefix hits are lost */
    return;
  }
  memcpy(s->cache_ids + s->num_cache, r->block_ids + from, (size_t)(upto - from) * sizeof(*s->cache_ids));
  memcpy(s->cache_hashes + s->num_cache, r->block_hashes + from, (size_t)(upto - from) * sizeof(*s->cache_hashes));
  s->num_cache = need;
}

void sched_release_blocks(struct scheduler *s, struct sched_request *r) {
  if (r->num_block_ids == 0) return;
  defer_cache(s, r);
  bool lost = llb_array_reserve32((void **)&s->rel_ids, &s->cap_rel_ids, s->num_rel_ids + r->num_block_ids,
                                  sizeof(*s->rel_ids)) != LLB_STATUS_OK;
  for (int32_t i = r->num_block_ids - 1; i >= 0; i--) { /* tail first: evicted first (vLLM free) */
    const int32_t id = r->block_ids[i];
    if (--s->block_refs[id] > 0) continue; /* shared: still held */
    s->num_free++;
    if (!lost) s->rel_ids[s->num_rel_ids++] = id;
  }
  if (lost) lost_op(s, "release");
  r->num_block_ids = 0;
  r->num_cached_blocks = 0;
  s->num_released++;
}

void sched_take_blocks(struct scheduler *s, struct sched_request *r, const int32_t *ids, int32_t n) {
  for (int32_t k = 0; k < n; k++) {
    if (s->block_refs[ids[k]]++ == 0) s->num_free--;
    r->block_ids[r->num_block_ids++] = ids[k];
  }
}

bool sched_blocks_reply_ok(struct scheduler *s, const int32_t *ids, int32_t n, int32_t num_hit) {
  if (n > 0 && !ids) return false;
  if (++s->seen_stamp == 0) {
    memset(s->seen, 0, (size_t)s->cfg.num_blocks * sizeof(*s->seen));
    s->seen_stamp = 1;
  }
  for (int32_t k = 0; k < n; k++) {
    const int32_t id = ids[k];
    if (id < 0 || id >= s->cfg.num_blocks || s->seen[id] == s->seen_stamp) return false;
    s->seen[id] = s->seen_stamp;
    if (k >= num_hit && s->block_refs[id] > 0) return false; /* a fresh block someone holds */
  }
  return true;
}

int32_t sched_blocks_num_deferred(const struct scheduler *s) {
  int32_t n = s->num_released;
  for (int32_t i = 0; i < s->num_running && s->cfg.enable_prefix_caching; i++)
    if (cacheable_blocks(s, s->running[i]) > s->running[i]->num_cached_blocks) n++;
  return n;
}

/* The held list: every block with a reference, in id order. */
static llb_status emit_held(struct scheduler *s, struct kv_step *kv) {
  int32_t n = 0;
  for (int32_t id = 0; id < s->cfg.num_blocks; id++) n += s->block_refs[id] > 0;
  int32_t *held = malloc((size_t)(n ? n : 1) * sizeof(*held));
  if (!held) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv resync of %d blocks", n);
  for (int32_t id = 0, k = 0; id < s->cfg.num_blocks; id++)
    if (s->block_refs[id] > 0) held[k++] = id;
  llb_status st = kv_step_set_held(kv, held, n);
  free(held);
  if (st) return st;
  kv->reset = s->kv_reset_pending;
  LLB_LOG_INFO("kv_resync_sent", "step=%llu held=%d reset=%d", (unsigned long long)kv->step, n, kv->reset);
  return LLB_STATUS_OK;
}

/* The KV contents are gone: blocks computed before must never be registered in the prefix
 * cache (a hit would read garbage), neither the pairs deferred so far nor an export's blocks
 * when it ends. */
static void forget_contents(struct scheduler *s) {
  s->num_cache = 0;
  for (int32_t i = 0; i < s->num_kv_senders; i++) s->kv_senders[i]->num_cached_blocks = s->kv_senders[i]->num_block_ids;
  for (int32_t i = 0; i < s->num_running; i++) s->running[i]->num_cached_blocks = s->running[i]->num_block_ids;
}

llb_status sched_blocks_emit(struct scheduler *s, struct kv_step *kv, int32_t *num_ops) {
  const int32_t before = kv->num_ops;
  llb_status st = LLB_STATUS_OK;
  s->kv_sent_resync = s->kv_resync_pending;
  s->kv_sent_reset = s->kv_reset_pending;
  if (s->kv_resync_pending) {
    st = emit_held(s, kv);
    s->num_rel_ids = 0; /* the resync frees every block not held */
    if (s->kv_reset_pending) forget_contents(s);
  }
  if (!st && s->num_cache > 0) st = kv_step_add_cache(kv, NULL, s->cache_ids, s->cache_hashes, s->num_cache);
  if (!st && s->num_rel_ids > 0) st = kv_step_add_release(kv, NULL, s->rel_ids, s->num_rel_ids);
  if (!st) s->num_cache = s->num_rel_ids = s->num_released = 0;
  for (int32_t i = 0; i < s->num_running && !st && s->cfg.enable_prefix_caching; i++) {
    struct sched_request *r = s->running[i];
    const int32_t from = r->num_cached_blocks, upto = cacheable_blocks(s, r);
    if (upto <= from) continue;
    st = kv_step_add_cache(kv, r->request_id, r->block_ids + from, r->block_hashes + from, upto - from);
    if (!st) r->num_cached_blocks = upto;
  }
  *num_ops = kv->num_ops - before;
  return st;
}

void sched_blocks_synced(struct scheduler *s) {
  if (s->kv_sent_resync) s->kv_resync_pending = false;
  if (s->kv_sent_reset) s->kv_reset_pending = false;
  s->kv_sent_resync = s->kv_sent_reset = false;
}

int32_t sched_block_ref_cnt(const struct scheduler *s, int32_t block_id) {
  return block_id < 0 || block_id >= s->cfg.num_blocks ? -1 : s->block_refs[block_id];
}
