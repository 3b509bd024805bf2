/* N-gram (prompt lookup) proposer; see ngram_proposer.h. Our code after vLLM v1's semantics. */
#include "actors/gpu_worker/ngram_proposer.h"

#include <string.h>

#include "schemas/codec.h"

llb_status ngram_proposer_config_check(const struct ngram_proposer_config *c) {
  if (c->num_speculative_tokens == 0) return LLB_STATUS_OK;
  if (c->num_speculative_tokens < 0 || c->num_speculative_tokens > LLB_MAX_SPEC_TOKENS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_speculative_tokens %d not in [1, %d]",
                    c->num_speculative_tokens, LLB_MAX_SPEC_TOKENS);
  if (c->prompt_lookup_min < 1 || c->prompt_lookup_max < c->prompt_lookup_min)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "prompt_lookup_min %d / prompt_lookup_max %d (need 1 <= min <= max)",
                    c->prompt_lookup_min, c->prompt_lookup_max);
  return LLB_STATUS_OK;
}

int32_t ngram_propose(const struct ngram_proposer_config *c, const int32_t *tokens, int64_t num_tokens,
                      int32_t max_drafts, int32_t *out) {
  int32_t k = c->num_speculative_tokens < max_drafts ? c->num_speculative_tokens : max_drafts;
  if (k <= 0 || !tokens) return 0;
  for (int64_t n = c->prompt_lookup_max; n >= c->prompt_lookup_min; n--) {
    if (n >= num_tokens) continue;
    const int32_t *suffix = tokens + num_tokens - n;
    /* starts i < num_tokens - n: the match is earlier than the suffix and has a follower */
    for (int64_t i = 0; i + n < num_tokens; i++) {
      if (tokens[i] != suffix[0] || memcmp(tokens + i, suffix, (size_t)n * sizeof(*tokens)) != 0) continue;
      int64_t avail = num_tokens - (i + n);
      int32_t m = avail < k ? (int32_t)avail : k;
      memcpy(out, tokens + i + n, (size_t)m * sizeof(*out));
      return m;
    }
  }
  return 0;
}
