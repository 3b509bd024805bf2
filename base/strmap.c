/* String-keyed hash map (strmap.h). */
#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

struct llb_strmap_entry {
  struct llb_strmap_entry *next;        /* bucket chain */
  struct llb_strmap_entry *fifo_next;   /* insertion order, oldest first */
  struct llb_strmap_entry *fifo_prev;
  void *value;
  char key[];                       /* NUL-terminated */
};

struct llb_strmap {
  struct llb_strmap_entry **buckets;    /* [num_buckets], power of two */
  int64_t num_buckets;
  int64_t size;
  int64_t max_entries;              /* 0 = unbounded */
  struct llb_strmap_entry *oldest, *newest;
};

llb_status llb_strmap_create(int64_t max_entries, struct llb_strmap **out) {
  struct llb_strmap *m = calloc(1, sizeof *m);
  if (!m) goto fail;
  m->num_buckets = 64;
  m->max_entries = max_entries;
  m->buckets = calloc((size_t)m->num_buckets, sizeof *m->buckets);
  if (!m->buckets) goto fail;
  *out = m;
  return LLB_STATUS_OK;
fail:
  llb_strmap_destroy(m);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "string map");
}

void llb_strmap_destroy(struct llb_strmap *m) {
  if (!m) return;
  for (struct llb_strmap_entry *e = m->oldest; e;) {
    struct llb_strmap_entry *next = e->fifo_next;
    free(e);
    e = next;
  }
  free(m->buckets);
  free(m);
}

static struct llb_strmap_entry **find_slot(const struct llb_strmap *m, const char *key) {
  struct llb_strmap_entry **slot = &m->buckets[llb_fnv1a64_str(key) & (uint64_t)(m->num_buckets - 1)];
  while (*slot && strcmp((*slot)->key, key) != 0) slot = &(*slot)->next;
  return slot;
}

void *llb_strmap_get(const struct llb_strmap *m, const char *key) {
  struct llb_strmap_entry *e = *find_slot(m, key);
  return e ? e->value : NULL;
}

static void grow(struct llb_strmap *m) {
  int64_t nb = m->num_buckets * 2;
  struct llb_strmap_entry **b = calloc((size_t)nb, sizeof *b);
  if (!b) return; /* keep the longer chains; still correct */
  for (struct llb_strmap_entry *e = m->oldest; e; e = e->fifo_next) {
    uint64_t i = llb_fnv1a64_str(e->key) & (uint64_t)(nb - 1);
    e->next = b[i];
    b[i] = e;
  }
  free(m->buckets);
  m->buckets = b;
  m->num_buckets = nb;
}

static void unlink_entry(struct llb_strmap *m, struct llb_strmap_entry **slot) {
  struct llb_strmap_entry *e = *slot;
  *slot = e->next;
  if (e->fifo_prev) e->fifo_prev->fifo_next = e->fifo_next; else m->oldest = e->fifo_next;
  if (e->fifo_next) e->fifo_next->fifo_prev = e->fifo_prev; else m->newest = e->fifo_prev;
  m->size--;
  free(e);
}

llb_status llb_strmap_put(struct llb_strmap *m, const char *key, void *value) {
  struct llb_strmap_entry **slot = find_slot(m, key);
  if (*slot) {
    (*slot)->value = value;
    return LLB_STATUS_OK;
  }
  size_t len = strlen(key);
  struct llb_strmap_entry *e = malloc(sizeof *e + len + 1);
  if (!e) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "string map entry");
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

void *llb_strmap_remove(struct llb_strmap *m, const char *key) {
  struct llb_strmap_entry **slot = find_slot(m, key);
  if (!*slot) return NULL;
  void *v = (*slot)->value;
  unlink_entry(m, slot);
  return v;
}

int64_t llb_strmap_size(const struct llb_strmap *m) { return m->size; }

void llb_strmap_foreach(const struct llb_strmap *m, void (*fn)(void *ctx, const char *key, void *value),
                    void *ctx) {
  for (struct llb_strmap_entry *e = m->oldest; e; e = e->fifo_next) fn(ctx, e->key, e->value);
}
