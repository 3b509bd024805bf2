/* libFuzzer target for the output processor's stop strings (actors/output_processor/
 * stop_strings.h): a client's stop strings over model text. Input: up to 16 stop strings, each
 * ended by a NUL byte, then a line feed, then the text. Oracles: stop_strings_find and
 * stop_strings_holdback equal a naive scan (earliest match, lower index on ties; longest text
 * suffix that is a proper prefix of a stop); text arriving in pieces finds a stop exactly when
 * the whole text has one, ending no later than the whole text's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/output_processor/stop_strings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char stops[LLB_MAX_STOP_STRINGS][LLB_MAX_STOP_STRING_BYTES + 1];

static bool naive_find(const char *t, size_t len, int32_t n, struct stop_match *out) {
  for (size_t s = 0; s < len; s++)
    for (int32_t k = 0; k < n; k++) {
      size_t l = strlen(stops[k]);
      if (l && s + l <= len && memcmp(t + s, stops[k], l) == 0) {
        *out = (struct stop_match){k, s, l};
        return true;
      }
    }
  return false;
}

static size_t naive_holdback(const char *t, size_t len, int32_t n) {
  size_t best = 0;
  for (int32_t k = 0; k < n; k++) {
    size_t l = strlen(stops[k]);
    for (size_t p = l ? l - 1 : 0; p > best; p--)
      if (p <= len && memcmp(t + len - p, stops[k], p) == 0) best = p;
  }
  return best;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int32_t n = 0;
  size_t at = 0;
  while (n < LLB_MAX_STOP_STRINGS && at < size && data[at] != '\n') {
    const uint8_t *z = memchr(data + at, 0, size - at);
    if (!z) return 0;
    size_t l = (size_t)(z - (data + at));
    if (l > LLB_MAX_STOP_STRING_BYTES) l = LLB_MAX_STOP_STRING_BYTES;
    memcpy(stops[n], data + at, l);
    stops[n][l] = '\0';
    n++;
    at = (size_t)(z - data) + 1;
  }
  if (at < size && data[at] == '\n') at++;
  const char *text = (const char *)data + at;
  const size_t len = size - at;
  struct stop_match got, want;
  bool g = stop_strings_find(text, len, 0, (const char(*)[LLB_MAX_STOP_STRING_BYTES + 1])stops, n, &got);
  bool w = naive_find(text, len, n, &want);
  if (g != w || (g && (got.start != want.start || got.stop_index != want.stop_index || got.len != want.len))) {
    fprintf(stderr, "find: got %d@%zu, want %d@%zu\n", g ? got.stop_index : -1, got.start, w ? want.stop_index : -1,
            want.start);
    abort();
  }
  /* streamed: each piece searched from where the last one ended */
  size_t from = 0;
  bool found = false;
  for (size_t end = len < 7 ? len : 7; !found && from < len; end = end + 7 < len ? end + 7 : len) {
    found = stop_strings_find(text, end, from, (const char(*)[LLB_MAX_STOP_STRING_BYTES + 1])stops, n, &got);
    const size_t hold = stop_strings_holdback(text, end, (const char(*)[LLB_MAX_STOP_STRING_BYTES + 1])stops, n);
    if (!found && (end == len || end < 64) && hold != naive_holdback(text, end, n)) abort(); /* the naive one is slow */
    from = end;
  }
  /* streamed, a stop is found as soon as it is complete: one that ends sooner than the whole
   * text's earliest-starting match may win (as in vLLM), never one that ends later */
  if (found != w || (found && got.start + got.len > want.start + want.len)) {
    fprintf(stderr, "streamed find differs from the whole text's\n");
    abort();
  }
  return 0;
}
