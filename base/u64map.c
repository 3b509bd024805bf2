/* 64-bit-integer-keyed hash map (u64map.h). */
#include "base/u64map.h"

#include <stdlib.h>

#include "base/hash.h"

#define U64MAP_MIN_SLOTS 16

struct llb_u64map_slot {
  uint64_t key;
  void *value; /* NULL = empty */
};

struct llb_u64map {
  struct llb_u64map_slot *slots; /* [mask + 1], a power of two */
  uint64_t mask;
  int64_t size;
};

llb_status llb_u64map_create(struct llb_u64map **out) {
  struct llb_u64map *m = calloc(1, sizeof *m);
  if (!m) goto fail;
  m->slots = calloc(U64MAP_MIN_SLOTS, sizeof *m->slots);
  if (!m->slots) goto fail;
  m->mask = U64MAP_MIN_SLOTS - 1;
  *out = m;
  return LLB_STATUS_OK;
fail:
  llb_u64map_destroy(m);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "u64 map");
}

void llb_u64map_destroy(struct llb_u64map *m) {
  if (!m) return;
  free(m->slots);
  free(m);
}

static uint64_t home_of(uint64_t key, uint64_t mask) { return llb_mix64(key) & mask; }

/* The slot holding key, or the empty slot where it would go. The load stays at most 1/2, so
 * an empty slot always ends the probe. */
static uint64_t find_slot(const struct llb_u64map *m, uint64_t key) {
  uint64_t i = home_of(key, m->mask);
  while (m->slots[i].value && m->slots[i].key != key) i = (i + 1) & m->mask;
  return i;
}

void *llb_u64map_get(const struct llb_u64map *m, uint64_t key) { return m->slots[find_slot(m, key)].value; }

static llb_status grow(struct llb_u64map *m) {
  const uint64_t n = 2 * (m->mask + 1), mask = n - 1;
  struct llb_u64map_slot *s = calloc((size_t)n, sizeof *s);
  if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "u64 map of %llu slots", (unsigned long long)n);
  for (uint64_t j = 0; j <= m->mask; j++) {
    if (!m->slots[j].value) continue;
    uint64_t i = home_of(m->slots[j].key, mask);
    while (s[i].value) i = (i + 1) & mask;
    s[i] = m->slots[j];
  }
  free(m->slots);
  m->slots = s;
  m->mask = mask;
  return LLB_STATUS_OK;
}

llb_status llb_u64map_put(struct llb_u64map *m, uint64_t key, void *value) {
  if (!value) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "u64 map: a NULL value (NULL means absent)");
  uint64_t i = find_slot(m, key);
  if (m->slots[i].value) {
    m->slots[i].value = value;
    return LLB_STATUS_OK;
  }
  if ((uint64_t)(m->size + 1) * 2 > m->mask + 1) { /* grow first: a failure leaves m unchanged */
    llb_status st = grow(m);
    if (st != LLB_STATUS_OK) return st;
    i = find_slot(m, key);
  }
  m->slots[i] = (struct llb_u64map_slot){key, value};
  m->size++;
  return LLB_STATUS_OK;
}

void *llb_u64map_remove(struct llb_u64map *m, uint64_t key) {
  uint64_t hole = find_slot(m, key);
  void *v = m->slots[hole].value;
  if (!v) return NULL;
  /* Backward shift: an entry later in the cluster moves into the hole unless its home lies in
   * (hole, j], cyclically; then the hole moves to where it was. */
  for (uint64_t j = (hole + 1) & m->mask; m->slots[j].value; j = (j + 1) & m->mask) {
    const uint64_t home = home_of(m->slots[j].key, m->mask);
    if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole].value = NULL;
  m->size--;
  return v;
}

int64_t llb_u64map_size(const struct llb_u64map *m) { return m->size; }

void llb_u64map_foreach(const struct llb_u64map *m, void (*fn)(void *ctx, uint64_t key, void *value), void *ctx) {
  for (uint64_t i = 0; i <= m->mask; i++)
    if (m->slots[i].value) fn(ctx, m->slots[i].key, m->slots[i].value);
}
