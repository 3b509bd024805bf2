/* UTF-8 well-formedness (RFC 3629 / Unicode Table 3-7: no overlong forms, no surrogates, at
 * most U+10FFFF), shared by the detokenizer (model/tokenizer/tokenizer_stream.c) and every place that
 * puts client bytes into JSON (which holds UTF-8 only). */
#ifndef LLB_BASE_UTF8_H
#define LLB_BASE_UTF8_H

#include <stddef.h>

/* Scans the sequence at s[0..n), n >= 1: returns its byte count when it is complete and
 * well-formed; 0 when s[0..*prefix) is a well-formed but truncated start (n too short);
 * -1 when s[0..*prefix) is a maximal invalid subpart (as Rust's from_utf8_lossy counts them). */
int llb_utf8_scan(const unsigned char *s, size_t n, size_t *prefix);

/* The NUL-terminated src with each maximal invalid subpart (a truncated end included) replaced
 * by `repl`, into dst [cap >= 1], NUL-terminated, cut at a sequence boundary when it does not
 * fit. Returns dst. */
const char *llb_utf8_sanitize(const char *src, char repl, char *dst, size_t cap);

#endif
