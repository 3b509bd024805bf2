/* The string map: NUL-terminated string keys (copied) -> non-NULL pointers, separate chaining
 * under FNV-1a 64 (base/hash.h), doubling at load 1; iteration in insertion order. Optionally
 * bounded: a map created with max_entries > 0 forgets its oldest key when a put goes past it
 * (FIFO), e.g. a set of recently finished request ids. One malloc per key. Not thread-safe:
 * callers lock. The values are never freed by the map. */
#ifndef LLB_BASE_STRMAP_H
#define LLB_BASE_STRMAP_H

#include <stdint.h>

#include "base/status.h"

struct llb_strmap;

/* Creates an empty map; max_entries > 0 bounds it FIFO (oldest key forgotten first), 0 =
 * unbounded. Errors: OUT_OF_MEMORY. */
llb_status llb_strmap_create(int64_t max_entries, struct llb_strmap **out);

/* Frees the map and its copies of the keys (not the values). Accepts NULL. */
void llb_strmap_destroy(struct llb_strmap *m);

/* The value stored under `key`, or NULL. */
void *llb_strmap_get(const struct llb_strmap *m, const char *key);

/* Stores `value` (non-NULL) under a copy of `key`, replacing an existing value.
 * Errors: OUT_OF_MEMORY (the map is unchanged). */
llb_status llb_strmap_put(struct llb_strmap *m, const char *key, void *value);

/* Removes `key`; returns its value, or NULL if absent. */
void *llb_strmap_remove(struct llb_strmap *m, const char *key);

/* Number of keys. */
int64_t llb_strmap_size(const struct llb_strmap *m);

/* Calls fn(ctx, key, value) for every entry, oldest first; fn must not change m. */
void llb_strmap_foreach(const struct llb_strmap *m, void (*fn)(void *ctx, const char *key, void *value),
                        void *ctx);

#endif
