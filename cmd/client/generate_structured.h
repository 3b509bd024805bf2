/* Structured output for `llmbus generate --inproc` (--json-object, --json-schema FILE,
 * --choice JSON): the grammar, the tokenizer's vocabulary and one matcher, applied to the
 * logits of each step before sampling (model/structured/structured_output.h). */
#ifndef LLB_CMD_GENERATE_STRUCTURED_H
#define LLB_CMD_GENERATE_STRUCTURED_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

struct tokenizer;

struct gen_structured {
  struct so_grammar *grammar; /* NULL: no structured output */
  struct so_vocab *vocab;
  struct so_matcher *matcher;
  uint32_t *mask; /* [(vocab + 31) / 32] */
};

/* Sets s up for one of: json_object, a JSON Schema file (json_schema_path), a JSON array of
 * choices (choice); all NULL/false leaves s off. Errors: IO (the schema file), those of the
 * so_grammar_compile_* (MALFORMED, UNSUPPORTED naming the keyword, TOO_LARGE),
 * OUT_OF_MEMORY. Free with gen_structured_free, also after a failure. */
llb_status gen_structured_init(struct gen_structured *s, const struct tokenizer *tok, bool json_object,
                               const char *json_schema_path, const char *choice);

/* Sets logits[i] = -inf for every token the grammar does not allow next ([vocab_size]). */
void gen_structured_mask_logits(struct gen_structured *s, float *logits, int32_t vocab_size);

/* Advances by the sampled token. INTERNAL when the grammar refuses it (a masked token was
 * sampled: a bug). */
llb_status gen_structured_accept(struct gen_structured *s, int32_t token_id);

void gen_structured_free(struct gen_structured *s);

#endif
