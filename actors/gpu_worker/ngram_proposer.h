/* The n-gram (prompt lookup) proposer of speculative decoding (vLLM v1
 * vllm/v1/spec_decode/ngram_proposer.py; Saxena, "Prompt Lookup Decoding", 2023): the drafts
 * for a request's next step are the tokens that followed an earlier occurrence of its last n
 * tokens in its own prompt + outputs. Pure, allocation-free. */
#ifndef LLB_GPU_WORKER_NGRAM_PROPOSER_H
#define LLB_GPU_WORKER_NGRAM_PROPOSER_H

#include <stdint.h>

#include "base/status.h"

/* vLLM SpeculativeConfig for method "ngram". num_speculative_tokens 0 = off. */
struct ngram_proposer_config {
  int32_t num_speculative_tokens; /* K: drafts per request and step, 0 .. LLB_MAX_SPEC_TOKENS */
  int32_t prompt_lookup_min;      /* shortest n-gram matched, >= 1 */
  int32_t prompt_lookup_max;      /* longest n-gram matched, >= prompt_lookup_min */
};

/* Checks a config (INVALID_ARGUMENT naming the field). An all-zero config (off) is valid. */
llb_status ngram_proposer_config_check(const struct ngram_proposer_config *c);

/* Proposes up to min(c->num_speculative_tokens, max_drafts) drafts into out [that many] for the
 * sequence tokens [num_tokens]: for n from prompt_lookup_max down to prompt_lookup_min (n <
 * num_tokens), the earliest earlier occurrence of the last n tokens (as vLLM's proposer: the
 * longest n-gram wins, then the first match) gives the tokens that followed it, up to the end
 * of the sequence. Returns how many (0 = no match). */
int32_t ngram_propose(const struct ngram_proposer_config *c, const int32_t *tokens, int64_t num_tokens,
                      int32_t max_drafts, int32_t *out);

#endif
