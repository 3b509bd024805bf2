/* A reader of fuzz bytes for targets that build structured input (fuzz_chat_render,
 * fuzz_inproc_process): bytes, small numbers and NUL-ended strings taken in turn; past the end
 * every read gives 0 or "". Header-only (static functions). */
#ifndef LLB_TESTS_FUZZ_READER_H
#define LLB_TESTS_FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct fuzz_reader {
  const uint8_t *p;
  size_t n;
  char *strings; /* the strings read, NUL-ended, one after another in a buffer of n + 1 per read */
  size_t used, cap;
};

static inline uint8_t fuzz_byte(struct fuzz_reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

static inline uint32_t fuzz_u16(struct fuzz_reader *r) {
  uint32_t lo = fuzz_byte(r);
  return lo | (uint32_t)fuzz_byte(r) << 8;
}

/* The bytes up to the next NUL (or the end), as a NUL-ended string kept in r->strings; NULL
 * when the buffer is full. */
static inline const char *fuzz_str(struct fuzz_reader *r) {
  const uint8_t *z = r->n ? memchr(r->p, 0, r->n) : NULL;
  size_t len = z ? (size_t)(z - r->p) : r->n;
  if (r->used + len + 1 > r->cap) return NULL;
  char *s = r->strings + r->used;
  memcpy(s, r->p, len);
  s[len] = '\0';
  r->used += len + 1;
  r->p += z ? len + 1 : len;
  r->n -= z ? len + 1 : len;
  return s;
}

#endif
