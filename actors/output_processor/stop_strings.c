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

/* The longest suffix of text[0, len) that is a proper prefix of s[0, m): the stop's
 * Knuth-Morris-Pratt automaton run over the text's last m - 1 bytes, O(m) (trying every suffix
 * length with a compare was O(m^2) per stop and per streamed piece: 16 stops of 255 bytes cost
 * a millisecond a token of the output processor every tenant shares). */
static size_t suffix_prefix(const char *text, size_t len, const char *s, size_t m) {
  if (m < 2 || len == 0) return 0;
  uint8_t fail[LLB_MAX_STOP_STRING_BYTES]; /* fail[i]: longest proper border of s[0..i] */
  fail[0] = 0;
  for (size_t i = 1, k = 0; i < m - 1; i++) {
    while (k > 0 && s[i] != s[k]) k = fail[k - 1];
    if (s[i] == s[k]) k++;
    fail[i] = (uint8_t)k;
  }
  size_t k = 0;
  for (size_t i = len > m - 1 ? len - (m - 1) : 0; i < len; i++) {
    while (k > 0 && (k == m - 1 || text[i] != s[k])) k = fail[k - 1];
    if (k < m - 1 && text[i] == s[k]) k++;
  }
  return k;
}

size_t stop_strings_holdback(const char *text, size_t len,
                             const char (*stops)[LLB_MAX_STOP_STRING_BYTES + 1], int32_t num_stop) {
  size_t best = 0;
  for (int32_t i = 0; i < num_stop; i++) {
    size_t k = suffix_prefix(text, len, stops[i], strnlen(stops[i], LLB_MAX_STOP_STRING_BYTES));
    if (k > best) best = k;
  }
  return best;
}
