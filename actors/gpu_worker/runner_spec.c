/* Speculative decoding in the model runner (vLLM v1 gpu_model_runner.py: spec_decode_metadata,
 * the rejection sampler's call and propose_draft_token_ids with the NgramProposer), our code.
 * A request with drafts in a step has them as extra query rows after its last known token
 * (causal, in the same forward); the logits of its last 1 + drafts rows are sampled by
 * rejection_sample; then, after the step's tokens are appended, the n-gram proposer suggests
 * the drafts of its next step (ModelRunnerOutput.spec_token_ids). */
#include <stdio.h>
#include <string.h>

#include "actors/gpu_worker/model_runner_internal.h"
#include "actors/gpu_worker/ngram_proposer.h"
#include "base/log.h"
#include "model/sampling/rejection_sampler.h"

/* q samples without a grammar, pooling or prompt logprobs: drafts can be verified for it. */
static bool samples_unconstrained(const struct mr_request *q) {
  return !q->so.grammar && !pooler_req_active(&q->pool) && q->prompt_logprobs < 0;
}

llb_status mr_spec_check(struct model_runner *r, const struct llb_scheduled_tokens *s, const struct mr_sched *e,
                         const char *field) {
  const int32_t nd = s->num_spec_token_ids;
  if (nd == 0) return LLB_STATUS_OK;
  if (nd < 0 || !s->spec_token_ids || nd > r->cfg.spec.num_speculative_tokens)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field,
                   "%d draft tokens; this worker verifies at most %d (--speculative-config)", nd,
                   r->cfg.spec.num_speculative_tokens);
  if (e->new_index >= 0 || !samples_unconstrained(r->rows[e->row]))
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field,
                   "draft tokens for a request that is new here or does not sample unconstrained "
                   "(structured output, pooling, prompt logprobs)");
  if (s->num_tokens <= nd)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "%d drafts in %d scheduled tokens", nd, s->num_tokens);
  for (int32_t j = 0; j < nd; j++)
    if (s->spec_token_ids[j] < 0 || s->spec_token_ids[j] >= r->vocab_size)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "draft token %d outside the vocabulary (%d)",
                     s->spec_token_ids[j], r->vocab_size);
  return LLB_STATUS_OK;
}

llb_status mr_spec_sample(struct model_runner *r, struct mr_request *q, const struct sampler_params *p,
                          int32_t l, int32_t *rows) {
  const struct rejection_sample_input in = {
      .params = p, .logits = r->logits + (int64_t)l * r->vocab_size, .token_ids = q->token_ids,
      .num_prompt_tokens = q->num_prompt_tokens, .num_tokens = q->num_tokens, .drafts = q->spec_ids,
      .num_drafts = q->num_spec};
  int32_t num_out = 0;
  llb_status st = rejection_sample(r->sampler, &in, r->results + l, &num_out);
  if (st) {
    char field[160];
    snprintf(field, sizeof(field), "sampling_params of \"%s\"", q->req_id);
    mr_blame(r, q->req_id, q->req_id_len);
    return mr_fail(r, st, field, "sampling failed: %s", llb_err_last());
  }
  for (int32_t j = 0; j <= q->num_spec; j++) r->logits_used[l + j] = j < num_out;
  *rows = q->num_spec + 1;
  return LLB_STATUS_OK;
}

llb_status mr_spec_propose(struct model_runner *r, const struct mr_request *q, int32_t k, int32_t *off) {
  r->out_num_spec[k] = 0;
  const int32_t K = r->cfg.spec.num_speculative_tokens;
  if (K <= 0 || !samples_unconstrained(q)) return LLB_STATUS_OK;
  if (!mr_grow((void **)&r->out_spec_ids, &r->out_spec_cap, (int64_t)*off + K, sizeof(int32_t)))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "draft tokens");
  r->out_num_spec[k] = ngram_propose(&r->cfg.spec, q->token_ids, q->num_tokens, K, r->out_spec_ids + *off);
  *off += r->out_num_spec[k];
  return LLB_STATUS_OK;
}
