/* The u64 map: 64-bit integer keys (every value a key, 0 included) -> non-NULL pointers. Open
 * addressing with linear probing from llb_mix64(key) (base/hash.h), doubling before the load
 * passes 1/2; removal by backward shift (Knuth 6.4 Algorithm R), so no tombstones pile up and a
 * lookup's probe never grows with past removals. No allocation per key: one array of
 * (key, value) slots. Iteration in slot order: unspecified, and changed by a growth. Not
 * thread-safe: callers lock. The values are never freed by the map.
 * The string-keyed sibling is base/strmap.h. */
#ifndef LLB_BASE_U64MAP_H
#define LLB_BASE_U64MAP_H

#include <stdint.h>

#include "base/status.h"

struct llb_u64map;

/* Creates an empty map (16 slots; it grows as keys arrive). Errors: OUT_OF_MEMORY. */
llb_status llb_u64map_create(struct llb_u64map **out);

/* Frees the map (not the values). Accepts NULL. */
void llb_u64map_destroy(struct llb_u64map *m);

/* The value stored under `key`, or NULL. */
void *llb_u64map_get(const struct llb_u64map *m, uint64_t key);

/* Stores `value` (non-NULL) under `key`, replacing an existing value. Errors: INVALID_ARGUMENT
 * (value NULL), OUT_OF_MEMORY (the slot array could not double; the map is unchanged). */
llb_status llb_u64map_put(struct llb_u64map *m, uint64_t key, void *value);

/* Removes `key`; returns its value, or NULL if absent. Never allocates, never fails. */
void *llb_u64map_remove(struct llb_u64map *m, uint64_t key);

/* Number of keys. */
int64_t llb_u64map_size(const struct llb_u64map *m);

/* Calls fn(ctx, key, value) for every entry, in slot order; fn must not change m. */
void llb_u64map_foreach(const struct llb_u64map *m, void (*fn)(void *ctx, uint64_t key, void *value), void *ctx);

#endif
