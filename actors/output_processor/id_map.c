/* String-keyed hash map; see id_map.h. */
#include "actors/output_processor/id_map.h"

#include <stdlib.h>
#include <string.h>

struct id_map_entry {
  struct id_map_entry *next;        /* bucket chain */
  struct id_map_entry *fifo_next;   /* insertion order, oldest first */
  struct id_map_entry *fifo_prev;
  void *value;
  char key[];                       /* NUL-terminated */
};

struct id_map {
  struct id_map_entry **buckets;    /* [num_buckets], power of two */
  int64_t num_buckets;
  int64_t size;
  int64_t max_entries;              /* 0 = unbounded */
  struct id_map_entry *oldest, *newest;
};

static uint64_t hash_str(const char *s) { /* FNV-1a 64 */
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

llb_status id_map_create(int64_t max_entries, struct id_map **out) {
  struct id_map *m = calloc(1, sizeof *m);
  if (!m) goto fail;
  m->num_buckets = 64;
  m->max_entries = max_entries;
  m->buckets = calloc((size_t)m->num_buckets, sizeof *m->buckets);
  if (!m->buckets) goto fail;
  *out = m;
  return LLB_STATUS_OK;
fail:
  id_map_destroy(m);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "id map");
}

void id_map_destroy(struct id_map *m) {
  if (!m) return;
  for (struct id_map_entry *e = m->oldest; e;) {
    struct id_map_entry *next = e->fifo_next;
    free(e);
    e = next;
  }
  free(m->buckets);
  free(m);
}

static struct id_map_entry **find_slot(const struct id_map *m, const char *key) {
  struct id_map_entry **slot = &m->buckets[hash_str(key) & (uint64_t)(m->num_buckets - 1)];
  while (*slot && strcmp((*slot)->key, key) != 0) slot = &(*slot)->next;
  return slot;
}

void *id_map_get(const struct id_map *m, const char *key) {
  struct id_map_entry *e = *find_slot(m, key);
  return e ? e->value : NULL;
}

static void grow(struct id_map *m) {
  int64_t nb = m->num_buckets * 2;
  struct id_map_entry **b = calloc((size_t)nb, sizeof *b);
  if (!b) return; /* keep the longer chains; still correct */
  for (struct id_map_entry *e = m->oldest; e; e = e->fifo_next) {
    uint64_t i = hash_str(e->key) & (uint64_t)(nb - 1);
    e->next = b[i];
    b[i] = e;
  }
  free(m->buckets);
  m->buckets = b;
  m->num_buckets = nb;
}

static void unlink_entry(struct id_map *m, struct id_map_entry **slot) {
  struct id_map_entry *e = *slot;
  *slot = e->next;
  if (e->fifo_prev) e->fifo_prev->fifo_next = e->fifo_next; else m->oldest = e->fifo_next;
  if (e->fifo_next) e->fifo_next->fifo_prev = e->fifo_prev; else m->newest = e->fifo_prev;
  m->size--;
  free(e);
}

llb_status id_map_put(struct id_map *m, const char *key, void *value) {
  struct id_map_entry **slot = find_slot(m, key);
  if (*slot) {
    (*slot)->value = value;
    return LLB_STATUS_OK;
  }
  size_t len = strlen(key);
  struct id_map_entry *e = malloc(sizeof *e + len + 1);
  if (!e) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "id map entry");
  memcpy(e->key, key, len + 1);
  e->value = value;
  e->next = *slot;
  *slot = e;
  e->fifo_next = NULL;
  e->fifo_prev = m->newest;
  if (m->newest) m->newest->fifo_next = e; else m->oldest = e;
  m->newest = e;
  m->size++;
  if (m->max_entries > 0 && m->size > m->max_entries) {
    unlink_entry(m, find_slot(m, m->oldest->key));
  }
  if (m->size > m->num_buckets) grow(m);
  return LLB_STATUS_OK;
}

void *id_map_remove(struct id_map *m, const char *key) {
  struct id_map_entry **slot = find_slot(m, key);
  if (!*slot) return NULL;
  void *v = (*slot)->value;
  unlink_entry(m, slot);
  return v;
}

int64_t id_map_size(const struct id_map *m) { return m->size; }

void id_map_foreach(const struct id_map *m, void (*fn)(void *ctx, const char *key, void *value),
                    void *ctx) {
  for (struct id_map_entry *e = m->oldest; e; e = e->fifo_next) fn(ctx, e->key, e->value);
}
