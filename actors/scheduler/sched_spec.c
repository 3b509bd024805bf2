/* Speculative decoding in the scheduler (vLLM v1 core/sched/scheduler.py: spec_token_ids,
 * scheduled_spec_decode_tokens, the num_rejected roll-back in update_from_output), our code.
 * The worker proposes drafts with each output (n-gram proposer); the next step schedules them
 * as extra tokens of the request (its KV slots planned with the rest, the token budget
 * counting them); the worker verifies them in one forward and returns the accepted drafts and
 * one more token; the rejected drafts' computed tokens are rolled back here, and their KV
 * slots are simply overwritten by the tokens that take their positions next. */
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

int32_t sched_spec_num_drafts(const struct scheduler *s, const struct sched_request *r, int32_t n,
                              int32_t budget) {
  if (s->cfg.num_speculative_tokens <= 0 || r->num_spec_tokens <= 0) return 0;
  /* a plain decode of a request the worker holds, with nothing in flight */
  if (n != 1 || !r->on_worker || r->num_output_placeholders > 0 || r->num_computed_tokens + 1 != r->num_tokens)
    return 0;
  /* outputs the worker cannot verify a draft for get none (it proposes none either); logprobs
   * are fine: each accepted token's row is scored at its position */
  if (sched_request_is_pooling(r) || r->structured_outputs.kind != LLB_SO_NONE ||
      r->sampling_params->prompt_logprobs >= 0)
    return 0;
  int32_t d = min32(r->num_spec_tokens, s->cfg.num_speculative_tokens);
  /* every accepted draft is an output: no more than max_tokens and max_model_len allow */
  d = min32(d, r->max_tokens - sched_request_num_output_tokens(r) - 1);
  d = min32(d, s->cfg.max_model_len - r->num_tokens - 1);
  d = min32(d, budget - n);
  return d > 0 ? d : 0;
}

llb_status sched_spec_apply(struct scheduler *s, const struct sched_step_entry *e, int32_t n_sampled) {
  struct sched_request *r = e->req;
  const int32_t d = e->num_spec_tokens;
  if (n_sampled > d + 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model output: %d tokens for %s, which verified %d drafts",
                    n_sampled, r->request_id, d);
  if (d == 0) return LLB_STATUS_OK;
  /* vLLM: num_computed_tokens -= num_rejected; the bonus token's KV is computed next step */
  r->num_computed_tokens -= d + 1 - n_sampled;
  s->stats.spec_num_drafts++;
  s->stats.spec_num_draft_tokens += (uint64_t)d;
  s->stats.spec_num_accepted_tokens += (uint64_t)(n_sampled - 1);
  return LLB_STATUS_OK;
}

void sched_spec_set_drafts(const struct scheduler *s, struct sched_request *r, const int32_t *ids, int32_t n) {
  r->num_spec_tokens = 0;
  if (s->cfg.num_speculative_tokens <= 0 || !ids || n <= 0) return;
  n = min32(n, min32(s->cfg.num_speculative_tokens, LLB_MAX_SPEC_TOKENS));
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || (s->cfg.vocab_size > 0 && ids[i] >= s->cfg.vocab_size)) return; /* forged: none */
  for (int32_t i = 0; i < n; i++) r->spec_token_ids[i] = ids[i];
  r->num_spec_tokens = n;
}
