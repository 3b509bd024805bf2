/* The text buffer of base/'s Prometheus writers; see metrics_text.h. */
#include "base/metrics_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `more` bytes and a NUL after len. */
static bool text_reserve(struct llb_text *t, size_t more) {
  if (t->oom) return false;
  if (t->data && t->len + more < t->cap) return true;
  size_t cap = t->cap ? t->cap * 2 : 4096;
  while (cap < t->len + more + 1) cap *= 2;
  char *d = realloc(t->data, cap);
  if (!d) return !(t->oom = true);
  t->data = d, t->cap = cap;
  return true;
}

void llb_text_printf(struct llb_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !text_reserve(t, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

void llb_text_append(struct llb_text *t, const char *s, size_t n) {
  if (!text_reserve(t, n)) return;
  memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = '\0';
}

void llb_text_escaped(struct llb_text *t, const char *s, bool help) {
  for (; *s; s++) {
    if (*s == '\\') llb_text_append(t, "\\\\", 2);
    else if (*s == '\n') llb_text_append(t, "\\n", 2);
    else if (*s == '"' && !help) llb_text_append(t, "\\\"", 2);
    else llb_text_append(t, s, 1);
  }
}

void llb_text_free(struct llb_text *t) {
  free(t->data);
  *t = (struct llb_text){0};
}
