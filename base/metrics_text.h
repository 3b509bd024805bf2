/* The growable text buffer of base/'s Prometheus writers (metrics.c renders a registry,
 * metrics_merge.c merges texts): private to base/metrics*. Appends never fail loudly: running
 * out of memory sets `oom`, later appends do nothing, and the writer checks `oom` once at the end. */
#ifndef LLB_BASE_METRICS_TEXT_H
#define LLB_BASE_METRICS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

struct llb_text {
  char *data; /* [len] bytes, NUL-terminated once anything was written; owned */
  size_t len, cap;
  bool oom;
};

/* Appends the formatted text. */
void llb_text_printf(struct llb_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s[n]. */
void llb_text_append(struct llb_text *t, const char *s, size_t n);

/* Appends s with the text format's escapes: \\ and \n, and \" too when !help (a label value). */
void llb_text_escaped(struct llb_text *t, const char *s, bool help);

/* Frees the data and zeroes *t. */
void llb_text_free(struct llb_text *t);

#endif
