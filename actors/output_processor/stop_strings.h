/* Stop strings over streamed text: where a stop string matches, and how much of the text
 * must be held back because it could still become the start of one.
 *
 * Byte-wise matching on UTF-8 (the input processor accepts only valid UTF-8 stop strings,
 * so a match always starts on a character boundary). Follows vLLM v1
 * vllm/v1/engine/detokenizer.py check_stop_strings, with two deliberate differences: among
 * several stop strings the one that matches EARLIEST in the text wins (vLLM takes the first
 * in list order), and the hold-back is the longest text suffix that is a proper prefix of a
 * stop string (vLLM always holds back max(len(stop)) - 1 characters) — both give the same
 * concatenated stream, ours releases text sooner.
 */
#ifndef LLB_OUTPUT_PROCESSOR_STOP_STRINGS_H
#define LLB_OUTPUT_PROCESSOR_STOP_STRINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schemas/sampling_params.h"

/* A stop string found in the text. */
struct stop_match {
  int32_t stop_index; /* which of the stop strings */
  size_t start;       /* byte offset of the match in the text */
  size_t len;         /* byte length of the stop string */
};

/* Finds the earliest match of any of `stops[0, num_stop)` that ends at or after byte
 * `new_from` of `text[0, len)` (text before `new_from` was searched already). Ties on the
 * start go to the lower stop index. Empty stop strings never match. Returns false if none. */
bool stop_strings_find(const char *text, size_t len, size_t new_from,
                       const char (*stops)[LLB_MAX_STOP_STRING_BYTES + 1], int32_t num_stop,
                       struct stop_match *out);

/* Bytes at the end of `text[0, len)` that must not be streamed yet: the length of the
 * longest suffix that is a proper prefix of one of the stop strings (0 if none). */
size_t stop_strings_holdback(const char *text, size_t len,
                             const char (*stops)[LLB_MAX_STOP_STRING_BYTES + 1], int32_t num_stop);

#endif
