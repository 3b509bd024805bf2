/* Stop-string matching and hold-back; see stop_strings.h. */
#include "actors/output_processor/stop_strings.h"

#include <string.h>

bool stop_strings_find(const char *text, size_t len, size_t new_from,
                       const char (*stops)[LLB_MAX_STOP_STRING_BYTES + 1], int32_t num_stop,
                       struct stop_match *out) {
  bool found = false;
  if (new_from > len) new_from = len;
  for (int32_t i = 0; i < num_stop; i++) {
    size_t slen = strnlen(stops[i], LLB_MAX_STOP_STRING_BYTES + 1);
    if (slen == 0 || slen > len) continue;
    /* A match that ends at or after new_from starts at or after new_from - slen + 1. */
    size_t from = new_from + 1 > slen ? new_from + 1 - slen : 0;
    /* Matches starting after an earlier found one cannot win. */
    size_t limit = found ? out->start + slen : len;
    if (limit > len) limit = len;
    if (from >= limit) continue;
    const char *hit = memmem(text + from, limit - from, stops[i], slen);
    if (!hit) continue;
    size_t start = (size_t)(hit - text);
    if (!found || start < out->start) {
      *out = (struct stop_match){.stop_index = i, .start = start, .len = slen};
      found = true;
    }
  }
  return found;
}

size_t stop_strings_holdback(const char *text, size_t len,
                             const char (*stops)[LLB_MAX_STOP_STRING_BYTES + 1], int32_t num_stop) {
  size_t best = 0;
  for (int32_t i = 0; i < num_stop; i++) {
    size_t slen = strnlen(stops[i], LLB_MAX_STOP_STRING_BYTES + 1);
    size_t k = slen > 0 ? slen - 1 : 0;
    if (k > len) k = len;
    for (; k > best; k--) {
      if (memcmp(text + len - k, stops[i], k) == 0) {
        best = k;
        break;
      }
    }
  }
  return best;
}
