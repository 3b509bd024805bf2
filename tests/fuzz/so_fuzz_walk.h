/* The walk check of the structured-output fuzz targets (fuzz_gbnf, fuzz_json_schema): a
 * compiled grammar walked for up to 24 tokens over a vocabulary of every byte and a few
 * multi-byte pieces (UTF-8 characters, a cut character, words, JSON punctuation), the tokens
 * drawn by h: every token's mask bit must equal whether the matcher accepts it, and end of
 * generation must be allowed exactly when the matcher says complete; aborts otherwise. */
#ifndef LLB_TESTS_FUZZ_SO_FUZZ_WALK_H
#define LLB_TESTS_FUZZ_SO_FUZZ_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "model/structured/structured_output.h"

void so_fuzz_walk(const struct so_grammar *g, uint64_t h);

/* FNV-1a of data[0..size): the walk's seed. */
uint64_t so_fuzz_seed(const uint8_t *data, size_t size);

#endif
