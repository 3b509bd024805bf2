/* A growable byte buffer; see api_server_buf.h. */
#include "actors/api_server/api_server_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool buf_reserve(struct api_server_buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *d = realloc(b->data, cap);
  if (!d) return false;
  b->data = d;
  b->cap = cap;
  return true;
}

bool api_server_buf_append(struct api_server_buf *b, const void *data, size_t len) {
  if (!buf_reserve(b, len)) return false;
  if (len) memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
  return true;
}

bool api_server_buf_printf(struct api_server_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_reserve(b, (size_t)n)) return false;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return true;
}

void api_server_buf_free(struct api_server_buf *b) {
  if (!b) return;
  free(b->data);
  *b = (struct api_server_buf){0};
}
