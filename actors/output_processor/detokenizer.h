/* Incremental detokenizer: output token ids → UTF-8 text that never splits a character.
 *
 * Each token's bytes come from tokenizer_token_to_piece (model/tokenizer/tokenizer.h). Bytes are
 * committed to the text only as complete, valid UTF-8 sequences; an incomplete sequence at
 * the end waits in `pending` for the next token, so every prefix of the text that a caller
 * streams is valid UTF-8 and the concatenation of streamed deltas equals the final text.
 * Invalid bytes become U+FFFD (one per maximal invalid subpart, as WHATWG / Python's
 * errors="replace"), and so does a NUL byte (the text is a C string on the wire; vLLM would
 * send "\u0000"), and detok_flush turns a still-incomplete tail into U+FFFD when the
 * request finishes. Follows vLLM v1 vllm/v1/engine/detokenizer.py (IncrementalDetokenizer),
 * working on bytes instead of re-decoding a window of tokens: our tokenizer exposes each
 * token's exact bytes, so concatenation is exact.
 */
#ifndef LLB_OUTPUT_PROCESSOR_DETOKENIZER_H
#define LLB_OUTPUT_PROCESSOR_DETOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tokenizer;

/* Caller-embedded state; initialize with detok_init, release with detok_free. */
struct detok {
  const struct tokenizer *tok; /* borrowed; outlives the detok */
  bool skip_special_tokens;    /* control tokens add no text */
  char *text;                  /* [len + 1] committed text, valid UTF-8, NUL-terminated */
  size_t len, cap;
  uint8_t pending[4];          /* incomplete UTF-8 sequence awaiting its continuation bytes */
  int32_t num_pending;
  char *piece;                 /* [piece_cap] scratch for one token's bytes */
  size_t piece_cap;
};

/* Sets up an empty detokenizer over `tok` (borrowed). Errors: OUT_OF_MEMORY. */
llb_status detok_init(struct detok *d, const struct tokenizer *tok, bool skip_special_tokens);

/* Releases the buffers; accepts a zeroed or already-freed struct. */
void detok_free(struct detok *d);

/* Appends the bytes of token `id`. Errors: INVALID_ARGUMENT for an id the tokenizer rejects
 * (the text is unchanged), OUT_OF_MEMORY. */
llb_status detok_append_token(struct detok *d, int32_t id);

/* Appends raw bytes (any content) through the same UTF-8 assembly. Errors: OUT_OF_MEMORY. */
llb_status detok_append_bytes(struct detok *d, const char *bytes, size_t n);

/* Ends the stream: a pending incomplete sequence becomes U+FFFD. Errors: OUT_OF_MEMORY. */
llb_status detok_flush(struct detok *d);

/* Cuts the committed text to `len` bytes (no-op if longer) and drops pending bytes; `len`
 * must be a character boundary (stop-string truncation gives one). */
void detok_truncate(struct detok *d, size_t len);

/* Largest b <= n such that text[0, b) ends on a UTF-8 character boundary of `text`. */
size_t detok_utf8_floor(const char *text, size_t n);

/* Copies `n` arbitrary bytes into `dst` as valid UTF-8 (invalid or truncated sequences and NUL
 * bytes → U+FFFD). `dst` needs 3 * n + 1 bytes; returns the length written, NUL-terminated. */
size_t detok_utf8_sanitize(const char *src, size_t n, char *dst);

/* True when `s[0, n)` is valid UTF-8 (no overlongs, surrogates or values > U+10FFFF). */
bool detok_utf8_valid(const char *s, size_t n);

#endif
