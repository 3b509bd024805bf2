/* Structured output for `llmbus generate --inproc`: see generate_structured.h. */
#include "cmd/client/generate_structured.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/structured/structured_output.h"
#include "model/tokenizer/tokenizer.h"

static llb_status compile_schema_file(const char *path, struct so_grammar **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return LLB_ERRF(LLB_STATUS_IO, "cannot open json schema %s", path);
  char *text = malloc(SO_MAX_SPEC_BYTES + 1);
  size_t len = text ? fread(text, 1, SO_MAX_SPEC_BYTES + 1, f) : 0;
  fclose(f);
  if (!text) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "json schema");
  llb_status st = so_grammar_compile_json_schema(text, len, out);
  free(text);
  return st;
}

llb_status gen_structured_init(struct gen_structured *s, const struct tokenizer *tok, bool json_object,
                               const char *json_schema_path, const char *choice) {
  memset(s, 0, sizeof(*s));
  llb_status st = LLB_STATUS_OK;
  if (json_object) st = so_grammar_compile_json_object(&s->grammar);
  else if (json_schema_path) st = compile_schema_file(json_schema_path, &s->grammar);
  else if (choice) st = so_grammar_compile_choice(choice, strlen(choice), &s->grammar);
  if (st != LLB_STATUS_OK || !s->grammar) return st;
  if ((st = so_vocab_from_tokenizer(tok, &s->vocab)) != LLB_STATUS_OK) return st;
  if ((st = so_matcher_create(s->grammar, &s->matcher)) != LLB_STATUS_OK) return st;
  s->mask = malloc(sizeof(uint32_t) * (((size_t)so_vocab_size(s->vocab) + 31) / 32));
  if (!s->mask) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output mask");
  return LLB_STATUS_OK;
}

void gen_structured_mask_logits(struct gen_structured *s, float *logits, int32_t vocab_size) {
  if (!s->grammar) return;
  so_vocab_fill_mask(s->vocab, s->matcher, s->mask);
  int32_t n = so_vocab_size(s->vocab);
  for (int32_t i = 0; i < vocab_size; i++)
    if (i >= n || !(s->mask[i / 32] >> (i % 32) & 1u)) logits[i] = -INFINITY;
}

llb_status gen_structured_accept(struct gen_structured *s, int32_t token_id) {
  if (!s->grammar) return LLB_STATUS_OK;
  if (!so_matcher_accept_token(s->matcher, s->vocab, token_id))
    return LLB_ERRF(LLB_STATUS_INTERNAL, "sampled token %d is outside the structured output grammar", token_id);
  return LLB_STATUS_OK;
}

void gen_structured_free(struct gen_structured *s) {
  so_matcher_destroy(s->matcher);
  so_vocab_destroy(s->vocab);
  so_grammar_destroy(s->grammar);
  free(s->mask);
  memset(s, 0, sizeof(*s));
}
