/* Verification of one request's drafts in a step (speculative decoding; vLLM v1
 * vllm/v1/sample/rejection_sampler.py with a one-hot draft distribution, as for the n-gram
 * proposer): the target's logits rows at the drafts' positions are sampled in order with
 * sampler_verify_draft until a draft is rejected (its correction token ends the step) or all
 * are accepted (the last row then gives the bonus token). The output distribution equals the
 * target's (greedy: the same tokens as without drafts). */
#ifndef LLB_MODEL_SAMPLING_REJECTION_SAMPLER_H
#define LLB_MODEL_SAMPLING_REJECTION_SAMPLER_H

#include <stdint.h>

#include "base/status.h"
#include "model/sampling/sampler.h"

/* One request's verification input. */
struct rejection_sample_input {
  const struct sampler_params *params;
  float *logits;                 /* [num_drafts + 1, vocab_size]; penalized in place */
  int32_t *token_ids;            /* [num_tokens + num_drafts + 1]: prompt, outputs, then room; the
                                    drafts are written after the outputs (penalties of row j see
                                    drafts 0..j-1) and the sampled tokens over them */
  int64_t num_prompt_tokens, num_tokens;
  const int32_t *drafts;         /* [num_drafts] */
  int32_t num_drafts;
};

/* Verifies the drafts: results [num_drafts + 1] gets the tokens (row j's result for output
 * position num_tokens - num_prompt_tokens + j); returns through *num_out how many are outputs
 * (accepted drafts + 1, 1 .. num_drafts + 1), written to token_ids[num_tokens ..]. Randomness
 * keyed by (seed, 0, output position) as sampler_sample. Errors: sampler_sample's. */
llb_status rejection_sample(struct sampler *s, const struct rejection_sample_input *in,
                            struct sampler_result *results, int32_t *num_out);

#endif
