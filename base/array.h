/* The growable array: one reserve function for every `T *items; int64_t cap;` pair in the
 * project (docs/design.md §1). Capacity doubles (from 16 at least) so appends are amortized O(1);
 * the array stays a plain C pointer the caller indexes and frees with free(). */
#ifndef LLB_BASE_ARRAY_H
#define LLB_BASE_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Makes *items hold at least `need` elements of elem_size bytes: when *cap < need, reallocs to
 * max(need, 2 * *cap, 16) elements and updates *cap; contents are kept, new room is not
 * initialized. need <= *cap does nothing. Errors: INVALID_ARGUMENT (need < 0, elem_size 0),
 * TOO_LARGE (the byte size passes PTRDIFF_MAX), OUT_OF_MEMORY; on error *items and *cap are unchanged. */
llb_status llb_array_reserve(void **items, int64_t *cap, int64_t need, size_t elem_size);

/* The same for an int32_t capacity (arrays whose counts are wire int32 fields): TOO_LARGE past
 * INT32_MAX elements. */
llb_status llb_array_reserve32(void **items, int32_t *cap, int32_t need, size_t elem_size);

#endif
