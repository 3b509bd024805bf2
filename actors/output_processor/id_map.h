/* String-keyed hash map (request id → pointer) with separate chaining, and an optional
 * FIFO bound: a bounded map forgets its oldest keys past `max_entries` (the output
 * processor's set of recently finished request ids). */
#ifndef LLB_OUTPUT_PROCESSOR_ID_MAP_H
#define LLB_OUTPUT_PROCESSOR_ID_MAP_H

#include <stdint.h>

#include "base/status.h"

struct id_map;

/* Creates an empty map; max_entries > 0 bounds it FIFO (oldest key forgotten first), 0 =
 * unbounded. Errors: OUT_OF_MEMORY. */
llb_status id_map_create(int64_t max_entries, struct id_map **out);

/* Frees the map and its copies of the keys (not the values). Accepts NULL. */
void id_map_destroy(struct id_map *m);

/* The value stored under `key`, or NULL. */
void *id_map_get(const struct id_map *m, const char *key);

/* Stores `value` (non-NULL) under a copy of `key`, replacing an existing value.
 * Errors: OUT_OF_MEMORY (the map is unchanged). */
llb_status id_map_put(struct id_map *m, const char *key, void *value);

/* Removes `key`; returns its value, or NULL if absent. */
void *id_map_remove(struct id_map *m, const char *key);

/* Number of keys. */
int64_t id_map_size(const struct id_map *m);

/* Calls fn(ctx, key, value) for every entry, in no particular order; fn must not change m. */
void id_map_foreach(const struct id_map *m, void (*fn)(void *ctx, const char *key, void *value),
                    void *ctx);

#endif
