/* UTF-8 well-formedness (utf8.h). */
#include "base/utf8.h"

#include <string.h>

int llb_utf8_scan(const unsigned char *s, size_t n, size_t *prefix) {
  unsigned c = s[0];
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;
  *prefix = 1;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return -1;
  for (size_t i = 1; i <= need; i++) {
    if (i >= n) {
      *prefix = i;
      return 0;
    }
    unsigned lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (s[i] < lo_i || s[i] > hi_i) {
      *prefix = i;
      return -1;
    }
  }
  return (int)need + 1;
}

const char *llb_utf8_sanitize(const char *src, char repl, char *dst, size_t cap) {
  const unsigned char *p = (const unsigned char *)src;
  size_t n = strlen(src), i = 0, o = 0;
  while (i < n) {
    size_t prefix;
    const int r = llb_utf8_scan(p + i, n - i, &prefix);
    const size_t take = r > 0 ? (size_t)r : 1;
    if (o + take >= cap) break;
    if (r > 0) memcpy(dst + o, p + i, take);
    else dst[o] = repl;
    o += take;
    i += r > 0 ? (size_t)r : prefix;
  }
  dst[o] = '\0';
  return dst;
}
