/* The growable array (array.h). */
#include "base/array.h"

#include <stddef.h>
#include <stdlib.h>

static llb_status reserve(void **items, int64_t cap, int64_t need, size_t elem_size, int64_t max,
                          int64_t *new_cap) {
  if (need < 0 || elem_size == 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "array reserve of %lld elements of %zu bytes", (long long)need,
                    elem_size);
  if (need > max || (uint64_t)need > (uint64_t)PTRDIFF_MAX / elem_size)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "array of %lld elements of %zu bytes", (long long)need, elem_size);
  int64_t n = cap > max / 2 ? max : cap * 2;
  if (n < 16) n = 16;
  if (n < need) n = need;
  if (n > max || (uint64_t)n > (uint64_t)PTRDIFF_MAX / elem_size) n = need; /* doubling would overflow: exact */
  void *p = realloc(*items, (size_t)n * elem_size);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "array of %lld elements of %zu bytes", (long long)n, elem_size);
  *items = p;
  *new_cap = n;
  return LLB_STATUS_OK;
}

llb_status llb_array_reserve(void **items, int64_t *cap, int64_t need, size_t elem_size) {
  if (need <= *cap && need >= 0) return LLB_STATUS_OK;
  return reserve(items, *cap, need, elem_size, INT64_MAX, cap);
}

llb_status llb_array_reserve32(void **items, int32_t *cap, int32_t need, size_t elem_size) {
  if (need <= *cap && need >= 0) return LLB_STATUS_OK;
  int64_t c = *cap;
  llb_status st = reserve(items, c, need, elem_size, INT32_MAX, &c);
  if (!st) *cap = (int32_t)c;
  return st;
}
