/* KV block pool: blocks, LRU free queue, prefix-cache map. See kv_block_pool.h.
 * vLLM v1 block_pool.py / kv_cache_utils.py semantics; our own code. */
#include "actors/kv_manager/kv_block_pool.h"

#include <stdlib.h>

#define NO_BLOCK (-1)

struct kv_block {
  int32_t prev, next;          /* free-queue links (NO_BLOCK at the ends / when not queued) */
  bool in_free_queue;
  bool has_hash;
  uint64_t block_hash;
};

/* Open addressing, linear probing, backward-shift deletion; at most num_blocks entries in
 * a table of >= 2 * num_blocks slots, so it never grows. Keys are already mixed hashes.
 * Private, not base/u64map: the prefix cache's index, sized once so a KV step never allocates. */
struct hash_slot {
  uint64_t key;
  int32_t block_id;            /* NO_BLOCK = empty */
};

struct kv_block_pool {
  int32_t num_blocks;
  struct kv_block *blocks;     /* [num_blocks] */
  int32_t head, tail;          /* free queue: head is evicted first */
  int32_t num_free;
  int32_t num_cached;
  uint32_t *seen;              /* [num_blocks]: stamps of the duplicate check (check_ids) */
  uint32_t stamp;
  uint64_t map_mask;
  struct hash_slot *map;       /* [map_mask + 1] */
};

llb_status kv_block_pool_create(int32_t num_blocks, struct kv_block_pool **out) {
  if (!out || num_blocks < 1 || num_blocks > (INT32_MAX / 4))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv_block_pool: num_blocks %d", num_blocks);
  *out = NULL;
  struct kv_block_pool *p = calloc(1, sizeof(*p));
  if (!p) goto oom;
  p->num_blocks = num_blocks;
  p->blocks = calloc((size_t)num_blocks, sizeof(*p->blocks));
  p->seen = calloc((size_t)num_blocks, sizeof(*p->seen));
  uint64_t map_size = 16;
  while (map_size < 2 * (uint64_t)num_blocks) map_size *= 2;
  p->map_mask = map_size - 1;
  p->map = malloc(map_size * sizeof(*p->map));
  if (!p->blocks || !p->seen || !p->map) goto oom;
  for (uint64_t i = 0; i < map_size; i++) p->map[i].block_id = NO_BLOCK;
  for (int32_t i = 0; i < num_blocks; i++) {
    p->blocks[i] = (struct kv_block){.prev = i - 1, .next = i + 1 < num_blocks ? i + 1 : NO_BLOCK,
                                     .in_free_queue = true};
  }
  p->head = 0;
  p->tail = num_blocks - 1;
  p->num_free = num_blocks;
  *out = p;
  return LLB_STATUS_OK;
oom:
  kv_block_pool_destroy(p);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv_block_pool: %d blocks", num_blocks);
}

void kv_block_pool_destroy(struct kv_block_pool *p) {
  if (!p) return;
  free(p->blocks);
  free(p->seen);
  free(p->map);
  free(p);
}

int32_t kv_block_pool_num_blocks(const struct kv_block_pool *p) { return p->num_blocks; }
int32_t kv_block_pool_num_free(const struct kv_block_pool *p) { return p->num_free; }
int32_t kv_block_pool_num_cached(const struct kv_block_pool *p) { return p->num_cached; }

double kv_block_pool_usage(const struct kv_block_pool *p) {
  return (double)(p->num_blocks - p->num_free) / (double)p->num_blocks;
}

/* ---- free queue (FreeKVCacheBlockQueue) ---- */

static void queue_remove(struct kv_block_pool *p, int32_t id) {
  struct kv_block *b = &p->blocks[id];
  if (b->prev != NO_BLOCK) p->blocks[b->prev].next = b->next; else p->head = b->next;
  if (b->next != NO_BLOCK) p->blocks[b->next].prev = b->prev; else p->tail = b->prev;
  b->prev = b->next = NO_BLOCK;
  b->in_free_queue = false;
  p->num_free--;
}

static void queue_append(struct kv_block_pool *p, int32_t id) {
  struct kv_block *b = &p->blocks[id];
  b->prev = p->tail;
  b->next = NO_BLOCK;
  if (p->tail != NO_BLOCK) p->blocks[p->tail].next = id; else p->head = id;
  p->tail = id;
  b->in_free_queue = true;
  p->num_free++;
}

/* ---- prefix-cache map ---- */

static int64_t map_find(const struct kv_block_pool *p, uint64_t key) {
  for (uint64_t i = key & p->map_mask;; i = (i + 1) & p->map_mask) {
    if (p->map[i].block_id == NO_BLOCK) return -1;
    if (p->map[i].key == key) return (int64_t)i;
  }
}

static void map_insert(struct kv_block_pool *p, uint64_t key, int32_t id) {
  uint64_t i = key & p->map_mask;
  while (p->map[i].block_id != NO_BLOCK) i = (i + 1) & p->map_mask;
  p->map[i] = (struct hash_slot){.key = key, .block_id = id};
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void map_erase_at(struct kv_block_pool *p, uint64_t i) {
  uint64_t hole = i;
  for (uint64_t j = (i + 1) & p->map_mask; p->map[j].block_id != NO_BLOCK;
       j = (j + 1) & p->map_mask) {
    uint64_t home = p->map[j].key & p->map_mask;
    /* Move j into the hole if its home is not cyclically in (hole, j]. */
    bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      p->map[hole] = p->map[j];
      hole = j;
    }
  }
  p->map[hole].block_id = NO_BLOCK;
}

static void evict_hash(struct kv_block_pool *p, int32_t id) {
  struct kv_block *b = &p->blocks[id];
  if (!b->has_hash) return;
  int64_t at = map_find(p, b->block_hash);
  if (at >= 0 && p->map[at].block_id == id) map_erase_at(p, (uint64_t)at);
  b->has_hash = false;
  b->block_hash = 0;
  p->num_cached--;
}

/* ---- public operations ---- */

void kv_block_pool_reset_prefix_cache(struct kv_block_pool *p) {
  for (int32_t id = 0; id < p->num_blocks; id++) evict_hash(p, id);
}

/* ids[n] in range and distinct (with `in_use`, none in the queue either); else INVALID_ARGUMENT
 * naming the first offender. O(n) with per-call stamps. */
static llb_status check_ids(struct kv_block_pool *p, const int32_t *ids, int32_t n, bool in_use,
                            const char *what) {
  if (n < 0 || (n > 0 && !ids)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: %d ids", what, n);
  if (++p->stamp == 0) { /* wrapped: old stamps could collide */
    for (int32_t i = 0; i < p->num_blocks; i++) p->seen[i] = 0;
    p->stamp = 1;
  }
  for (int32_t k = 0; k < n; k++) {
    const int32_t id = ids[k];
    if (id < 0 || id >= p->num_blocks)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: block %d out of range [0, %d)", what, id, p->num_blocks);
    if (p->seen[id] == p->stamp) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: block %d listed twice", what, id);
    p->seen[id] = p->stamp;
    if (in_use && p->blocks[id].in_free_queue)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: block %d is already free", what, id);
  }
  return LLB_STATUS_OK;
}

llb_status kv_block_pool_get_new_blocks(struct kv_block_pool *p, int32_t n, int32_t *ids) {
  if (n < 0 || (n > 0 && !ids)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "get_new_blocks: n %d", n);
  if (n > p->num_free)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "need %d blocks, %d free", n, p->num_free);
  for (int32_t k = 0; k < n; k++) {
    int32_t id = p->head;
    queue_remove(p, id);
    evict_hash(p, id);
    ids[k] = id;
  }
  return LLB_STATUS_OK;
}

llb_status kv_block_pool_touch(struct kv_block_pool *p, const int32_t *ids, int32_t n) {
  for (int32_t k = 0; k < n; k++)
    if (ids[k] < 0 || ids[k] >= p->num_blocks)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "touch: block %d out of range", ids[k]);
  for (int32_t k = 0; k < n; k++)
    if (p->blocks[ids[k]].in_free_queue) queue_remove(p, ids[k]);
  return LLB_STATUS_OK;
}

llb_status kv_block_pool_free_blocks(struct kv_block_pool *p, const int32_t *ids, int32_t n) {
  llb_status st = check_ids(p, ids, n, true, "release");
  if (st) return st;
  for (int32_t k = 0; k < n; k++) queue_append(p, ids[k]);
  return LLB_STATUS_OK;
}

llb_status kv_block_pool_resync(struct kv_block_pool *p, const int32_t *held, int32_t n) {
  llb_status st = check_ids(p, held, n, false, "resync");
  if (st) return st;
  for (int32_t k = 0; k < n; k++)
    if (p->blocks[held[k]].in_free_queue) queue_remove(p, held[k]);
  for (int32_t id = 0; id < p->num_blocks; id++) /* seen[id] == stamp: held */
    if (p->seen[id] != p->stamp && !p->blocks[id].in_free_queue) queue_append(p, id);
  return LLB_STATUS_OK;
}

bool kv_block_pool_is_free(const struct kv_block_pool *p, int32_t id) {
  return id >= 0 && id < p->num_blocks && p->blocks[id].in_free_queue;
}

int32_t kv_block_pool_get_cached_block(const struct kv_block_pool *p, uint64_t block_hash) {
  int64_t at = map_find(p, block_hash);
  return at < 0 ? NO_BLOCK : p->map[at].block_id;
}

bool kv_block_pool_cache_block(struct kv_block_pool *p, int32_t id, uint64_t block_hash) {
  if (id < 0 || id >= p->num_blocks) return false;
  struct kv_block *b = &p->blocks[id];
  if (b->has_hash || map_find(p, block_hash) >= 0) return false;
  b->has_hash = true;
  b->block_hash = block_hash;
  map_insert(p, block_hash, id);
  p->num_cached++;
  return true;
}

bool kv_block_pool_block_hash(const struct kv_block_pool *p, int32_t id, uint64_t *hash_out) {
  if (id < 0 || id >= p->num_blocks || !p->blocks[id].has_hash) return false;
  if (hash_out) *hash_out = p->blocks[id].block_hash;
  return true;
}

int32_t kv_block_pool_free_queue_ids(const struct kv_block_pool *p, int32_t *ids, int32_t cap) {
  int32_t n = 0;
  for (int32_t id = p->head; id != NO_BLOCK; id = p->blocks[id].next) {
    if (n < cap) ids[n] = id;
    n++;
  }
  return n;
}

llb_status kv_block_pool_check(const struct kv_block_pool *p) {
  int32_t walked = 0, prev = NO_BLOCK;
  for (int32_t id = p->head; id != NO_BLOCK; id = p->blocks[id].next) {
    if (id < 0 || id >= p->num_blocks || ++walked > p->num_blocks)
      return LLB_ERRF(LLB_STATUS_INTERNAL, "free queue corrupt at block %d", id);
    const struct kv_block *b = &p->blocks[id];
    if (b->prev != prev) return LLB_ERRF(LLB_STATUS_INTERNAL, "block %d: prev link %d != %d", id, b->prev, prev);
    if (!b->in_free_queue) return LLB_ERRF(LLB_STATUS_INTERNAL, "block %d linked but not marked queued", id);
    prev = id;
  }
  if (prev != p->tail) return LLB_ERRF(LLB_STATUS_INTERNAL, "free queue tail %d != %d", p->tail, prev);
  if (walked != p->num_free)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "free queue holds %d blocks, num_free %d", walked, p->num_free);
  int32_t referenced = 0, hashed = 0;
  for (int32_t id = 0; id < p->num_blocks; id++) {
    const struct kv_block *b = &p->blocks[id];
    if (!b->in_free_queue) referenced++;
    if (b->has_hash) {
      hashed++;
      if (kv_block_pool_get_cached_block(p, b->block_hash) != id)
        return LLB_ERRF(LLB_STATUS_INTERNAL, "block %d: its hash maps elsewhere", id);
    }
  }
  if (referenced + p->num_free != p->num_blocks)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "free %d + referenced %d != total %d", p->num_free,
                    referenced, p->num_blocks);
  int32_t entries = 0;
  for (uint64_t i = 0; i <= p->map_mask; i++) {
    int32_t id = p->map[i].block_id;
    if (id == NO_BLOCK) continue;
    entries++;
    if (id < 0 || id >= p->num_blocks || !p->blocks[id].has_hash ||
        p->blocks[id].block_hash != p->map[i].key)
      return LLB_ERRF(LLB_STATUS_INTERNAL, "map slot %llu names block %d wrongly", (unsigned long long)i, id);
  }
  if (entries != hashed || hashed != p->num_cached)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "map %d entries, %d hashed blocks, num_cached %d", entries,
                    hashed, p->num_cached);
  return LLB_STATUS_OK;
}
