/* Rejection sampling of one request's drafts; see rejection_sampler.h. */
#include "model/sampling/rejection_sampler.h"

#include <stdbool.h>
#include <string.h>

llb_status rejection_sample(struct sampler *s, const struct rejection_sample_input *in,
                            struct sampler_result *results, int32_t *num_out) {
  const int32_t vocab = sampler_vocab_size(s);
  const int64_t base = in->num_tokens - in->num_prompt_tokens; /* outputs before this step */
  int32_t *outputs = in->token_ids + in->num_prompt_tokens;
  if (in->num_drafts > 0) memcpy(in->token_ids + in->num_tokens, in->drafts, (size_t)in->num_drafts * sizeof(int32_t));
  *num_out = 0;
  for (int32_t j = 0; j <= in->num_drafts; j++) {
    float *row = in->logits + (int64_t)j * vocab;
    struct sampler_result *res = &results[j];
    bool accepted = false;
    llb_status st =
        j < in->num_drafts
            ? sampler_verify_draft(s, in->params, row, in->token_ids, in->num_prompt_tokens, outputs, base + j, 0,
                                   base + j, in->drafts[j], &accepted, res)
            : sampler_sample(s, in->params, row, in->token_ids, in->num_prompt_tokens, outputs, base + j, 0,
                             base + j, res);
    if (st) return st;
    outputs[base + j] = res->token_id;
    *num_out = j + 1;
    if (!accepted) break; /* the correction token (or the bonus after the last draft) ends it */
  }
  return LLB_STATUS_OK;
}
