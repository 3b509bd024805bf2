/* Phase 1 of a step (see model_runner_internal.h): the whole SchedulerOutput checked against the
 * persistent batch before anything changes, so a bad message fails the step and leaves the
 * batch as it was (vLLM gpu_model_runner _update_states assumes a well-formed output; here the
 * output is input from the bus). */
#include "actors/gpu_worker/model_runner_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- phase 1: check the whole SchedulerOutput against the batch, change nothing ---- */

static llb_status check_blocks(struct model_runner *r, const int32_t *ids, int32_t n, const char *what,
                               int32_t index) {
  for (int32_t b = 0; b < n; b++)
    if (ids[b] < 0 || ids[b] >= r->cfg.num_blocks) {
      char field[128];
      snprintf(field, sizeof(field), "%s[%d]", what, index);
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "block id %d (entry %d) outside [0, %d)", ids[b], b,
                  r->cfg.num_blocks);
    }
  return LLB_STATUS_OK;
}

/* What a sim worker cannot give a request (it has no logits and no hidden states), or NULL:
 * refused rather than faked, so that no one mistakes made-up values for the model's. */
static const char *sim_refusal(const struct llb_new_request_data *nr) {
  if (nr->sampling_params->logprobs >= 0) return "logprobs";
  if (nr->sampling_params->prompt_logprobs >= 0) return "prompt_logprobs";
  if (nr->structured_outputs.kind != LLB_SO_NONE) return "structured output";
  if (nr->pooling_params.pooling_type != LLB_POOLING_NONE) return "pooling (embeddings)";
  if (nr->num_mm_features > 0) return "multimodal input";
  return NULL;
}

static llb_status check_new(struct model_runner *r, const struct llb_scheduler_output *so, int32_t i) {
  const struct llb_new_request_data *nr = &so->scheduled_new_reqs[i];
  char field[96];
  snprintf(field, sizeof(field), "scheduled_new_reqs[%d]", i);
  if (nr->req_id.len == 0) return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "empty req_id");
  if (mr_find_new(so, nr->req_id, i) >= 0)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "request \"%.*s\" added twice", (int)nr->req_id.len,
                nr->req_id.data);
  mr_blame(r, nr->req_id.data, nr->req_id.len); /* from here on: this request's own input */
  if (!nr->sampling_params) return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "sampling_params missing");
  struct sampler_params sp;
  mr_sampler_params(nr->sampling_params, &sp);
  llb_status pst = sampler_check_params(&sp);
  if (pst) return mr_fail(r, pst, field, "%s", llb_err_last());
  if (nr->sampling_params->logprobs > LLB_MAX_LOGPROBS || nr->sampling_params->prompt_logprobs > LLB_MAX_LOGPROBS)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "logprobs %d / prompt_logprobs %d > %d",
                nr->sampling_params->logprobs, nr->sampling_params->prompt_logprobs, LLB_MAX_LOGPROBS);
  if (nr->sampling_params->prompt_logprobs >= 0 && r->cfg.device != MODEL_RUNNER_DEVICE_CPU)
    return mr_fail(r, LLB_STATUS_UNSUPPORTED, field, "prompt_logprobs on the %s worker (CPU only)",
                model_runner_device_name(r->cfg.device)); /* its device logits hold max_num_seqs rows */
  if (r->cfg.device == MODEL_RUNNER_DEVICE_SIM) {
    const char *what = sim_refusal(nr);
    if (what)
      return mr_fail(r, LLB_STATUS_UNSUPPORTED, field, "%s on the sim worker: --device sim computes no logits or "
                     "hidden states, only a step's time and deterministic tokens", what);
  }
  for (int32_t k = 0; k < nr->num_mm_features; k++) {
    const struct llb_mm_feature *f = &nr->mm_features[k];
    if (f->mm_hash.len == 0 || f->length < 1 || (int64_t)f->offset + f->length > nr->num_prompt_token_ids ||
        (k > 0 && f->offset < nr->mm_features[k - 1].offset + nr->mm_features[k - 1].length))
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field,
                  "mm_features[%d]: placeholders [%d, %lld) unhashed, empty, outside the %d-token prompt or "
                  "overlapping", k, f->offset, (long long)f->offset + f->length, nr->num_prompt_token_ids);
    if (!mm_encoder_supports(f->modality))
      return mr_fail(r, LLB_STATUS_UNSUPPORTED, field, "mm_features[%d]: modality '%s' has no encoder here", k,
                  f->modality.data);
  }
  if (nr->lora_request.lora_int_id != 0 && !mr_find_lora(r, nr->lora_request.lora_int_id))
    return mr_fail(r, LLB_STATUS_NOT_FOUND, field, "LoRA adapter \"%s\" (lora_int_id %d) is not served by this worker",
                   nr->lora_request.lora_name.data, nr->lora_request.lora_int_id);
  llb_status sost = runner_so_prepare(r->so, &nr->structured_outputs);
  if (sost) return mr_fail(r, sost, field, "structured_outputs: %s", llb_err_last());
  if (nr->pooling_params.pooling_type != LLB_POOLING_NONE) {
    if (r->cfg.device != MODEL_RUNNER_DEVICE_CPU)
      return mr_fail(r, LLB_STATUS_UNSUPPORTED, field, "pooling (embeddings) runs on the cpu device only, not %s",
                  model_runner_device_name(r->cfg.device));
    if (nr->num_output_token_ids > 0 || nr->num_mm_features > 0 || nr->num_computed_tokens > 0)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "a pooling request has no outputs, no mm_features "
                  "and no computed tokens (it pools hidden states of its own rows: no prefix cache)");
  }
  if (nr->num_prompt_token_ids < 1 || (nr->num_prompt_token_ids > 0 && !nr->prompt_token_ids))
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "no prompt tokens");
  for (int32_t t = 0; t < nr->num_prompt_token_ids; t++)
    if (nr->prompt_token_ids[t] < 0 || nr->prompt_token_ids[t] >= r->vocab_size)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "prompt token %d = %d outside [0, %d)", t,
                  nr->prompt_token_ids[t], r->vocab_size);
  if (nr->num_block_ids > 0 && !nr->block_ids)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "num_block_ids %d without block_ids", nr->num_block_ids);
  if (nr->num_block_ids < 0 || nr->num_block_ids > r->cfg.num_blocks)
    return mr_fail(r, LLB_STATUS_TOO_LARGE, field, "%d blocks for one request (num_blocks %d)", nr->num_block_ids,
                r->cfg.num_blocks);
  llb_status st = check_blocks(r, nr->block_ids, nr->num_block_ids, "scheduled_new_reqs.block_ids", i);
  if (st) return st;
  if (nr->num_output_token_ids < 0 || (nr->num_output_token_ids > 0 && !nr->output_token_ids))
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "num_output_token_ids %d without output_token_ids",
                nr->num_output_token_ids);
  for (int32_t t = 0; t < nr->num_output_token_ids; t++)
    if (nr->output_token_ids[t] < 0 || nr->output_token_ids[t] >= r->vocab_size)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "output token %d = %d outside [0, %d)", t,
                  nr->output_token_ids[t], r->vocab_size);
  const int64_t known = (int64_t)nr->num_prompt_token_ids + nr->num_output_token_ids;
  if (nr->num_computed_tokens < 0 || nr->num_computed_tokens > known)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "num_computed_tokens %d outside [0, %lld]",
                nr->num_computed_tokens, (long long)known);
  r->err_req_id[0] = '\0';
  return LLB_STATUS_OK;
}

/* Checks cached entry j; its row's post-update sizes go to *tokens, *computed, *blocks. */
static llb_status check_cached(struct model_runner *r, const struct llb_cached_request_data *cd, int32_t j,
                               int64_t *new_tok_off, int64_t *new_blk_off) {
  char field[96];
  snprintf(field, sizeof(field), "scheduled_cached_reqs.req_ids[%d]", j);
  const int32_t row = mr_find_row(r, cd->req_ids[j]);
  if (row < 0 || r->row_removed[row])
    return mr_fail(r, LLB_STATUS_NOT_FOUND, field, "unknown request \"%.*s\"", (int)cd->req_ids[j].len,
                cd->req_ids[j].data);
  if (r->row_cached[row] >= 0)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "request \"%.*s\" updated twice", (int)cd->req_ids[j].len,
                cd->req_ids[j].data);
  r->row_cached[row] = j;
  r->cached_row[j] = row;
  const struct mr_request *q = r->rows[row];
  const int32_t ntok = cd->new_token_counts ? cd->new_token_counts[j] : 0;
  const int32_t nblk = cd->new_block_counts ? cd->new_block_counts[j] : 0;
  const bool resumed = cd->resumed_from_preemption && cd->resumed_from_preemption[j];
  if (ntok < 0 || nblk < 0 || *new_tok_off + ntok > cd->num_new_token_ids ||
      *new_blk_off + nblk > cd->num_new_block_ids)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "new token/block counts do not match their arrays");
  llb_status st = check_blocks(r, cd->new_block_ids + *new_blk_off, nblk, "scheduled_cached_reqs.new_block_ids", j);
  if (st) return st;
  for (int32_t t = 0; t < ntok; t++)
    if (cd->new_token_ids[*new_tok_off + t] < 0 || cd->new_token_ids[*new_tok_off + t] >= r->vocab_size) {
      mr_blame(r, cd->req_ids[j].data, cd->req_ids[j].len);
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "new token %d outside [0, %d)",
                  cd->new_token_ids[*new_tok_off + t], r->vocab_size);
    }
  *new_tok_off += ntok;
  *new_blk_off += nblk;
  const int64_t blocks = (resumed ? 0 : q->num_block_ids) + (int64_t)nblk;
  if (blocks > r->cfg.num_blocks)
    return mr_fail(r, LLB_STATUS_TOO_LARGE, field, "%lld blocks for one request (num_blocks %d)", (long long)blocks,
                r->cfg.num_blocks);
  const int64_t outputs = q->num_tokens - q->num_prompt_tokens;
  const int32_t want = cd->num_output_tokens ? cd->num_output_tokens[j] : (int32_t)outputs;
  if (want < 0 || want > outputs + ntok)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "num_output_tokens %d but the worker knows %lld", want,
                (long long)(outputs + ntok));
  const int32_t computed = cd->num_computed_tokens[j];
  if (computed < 0 || computed > q->num_prompt_tokens + want)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "num_computed_tokens %d outside [0, %lld]", computed,
                (long long)(q->num_prompt_tokens + want));
  return LLB_STATUS_OK;
}

/* Post-update sizes of the request of scheduled entry k (known tokens, computed, blocks). */
static void resolved_sizes(const struct model_runner *r, const struct llb_scheduler_output *so,
                           const struct mr_sched *e, int64_t *tokens, int64_t *computed, int64_t *blocks) {
  if (e->new_index >= 0) {
    const struct llb_new_request_data *nr = &so->scheduled_new_reqs[e->new_index];
    *tokens = (int64_t)nr->num_prompt_token_ids + nr->num_output_token_ids;
    *computed = nr->num_computed_tokens;
    *blocks = nr->num_block_ids;
    return;
  }
  const struct mr_request *q = r->rows[e->row];
  const int32_t j = r->row_cached[e->row];
  if (j < 0) {
    *tokens = q->num_tokens;
    *computed = q->num_computed_tokens;
    *blocks = q->num_block_ids;
    return;
  }
  const struct llb_cached_request_data *cd = &so->scheduled_cached_reqs;
  const int32_t nblk = cd->new_block_counts ? cd->new_block_counts[j] : 0;
  const bool resumed = cd->resumed_from_preemption && cd->resumed_from_preemption[j];
  *tokens = q->num_prompt_tokens +
            (cd->num_output_tokens ? cd->num_output_tokens[j] : q->num_tokens - q->num_prompt_tokens);
  *computed = cd->num_computed_tokens[j];
  *blocks = (resumed ? 0 : q->num_block_ids) + nblk;
}

/* Grows the per-step arrays to hold n rows, so that phase 2 needs no allocation for them;
 * false on OOM. */
static bool reserve_step(struct model_runner *r, int32_t n) {
  if (n <= r->step_cap) return true;
  int32_t cap = r->step_cap > 0 ? r->step_cap : 16;
  while (cap < n) cap *= 2;
#define GROW(p, count) \
  do { void *q_ = realloc((p), (size_t)(count) * sizeof(*(p))); if (!q_) return false; (p) = q_; } while (0)
  GROW(r->row_removed, cap);
  GROW(r->row_cached, cap);
  GROW(r->row_sched, cap);
  GROW(r->cached_row, cap);
  GROW(r->sched, cap);
  GROW(r->query_start_loc, cap + 1);
  GROW(r->seq_lens, cap);
  GROW(r->logits_indices, cap);
  GROW(r->logits_rows, cap);
  GROW(r->out_req_ids, cap);
  GROW(r->out_num_sampled, cap);
  GROW(r->out_sampled, cap);
  GROW(r->results, cap);
  GROW(r->lp_ranks, cap);
  GROW(r->so_row_of_logits, cap);
  GROW(r->out_num_pooled, cap);
  GROW(r->logits_used, cap);
  GROW(r->out_num_spec, cap);
  GROW(r->seq_loras, cap);
#undef GROW
  r->step_cap = cap;
  return true;
}

llb_status mr_check_output(struct model_runner *r, const struct llb_scheduler_output *so) {
  if (so->block_size != r->cfg.block_size)
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, "block_size", "block_size %d but the worker's KV cache has %d",
                so->block_size, r->cfg.block_size);
  const struct llb_cached_request_data *cd = &so->scheduled_cached_reqs;
  if (so->num_scheduled_new_reqs < 0 || so->num_scheduled_reqs < 0 || cd->num_reqs < 0 ||
      (so->num_scheduled_new_reqs > 0 && !so->scheduled_new_reqs) ||
      (so->num_scheduled_reqs > 0 && !so->num_scheduled_tokens) ||
      (cd->num_reqs > 0 && (!cd->req_ids || !cd->num_computed_tokens)) ||
      (cd->num_new_block_ids > 0 && !cd->new_block_ids) || (cd->num_new_token_ids > 0 && !cd->new_token_ids) ||
      (so->num_finished_req_ids > 0 && !so->finished_req_ids) ||
      (so->num_preempted_req_ids > 0 && !so->preempted_req_ids))
    return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, "", "inconsistent SchedulerOutput view (negative count or NULL array)");
  int64_t drafts = 0; /* each draft adds a sampled logits row */
  for (int32_t k = 0; k < so->num_scheduled_reqs; k++) {
    const int32_t nd = so->num_scheduled_tokens[k].num_spec_token_ids;
    drafts += nd > 0 && nd <= LLB_MAX_SPEC_TOKENS ? nd : 0;
  }
  if (!reserve_step(r, r->num_rows + so->num_scheduled_new_reqs + cd->num_reqs + so->num_scheduled_reqs + 1 +
                              (int32_t)drafts))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "step scratch");
  for (int32_t i = 0; i < r->num_rows; i++) {
    r->row_removed[i] = 0;
    r->row_cached[i] = -1;
  }
  for (int32_t i = 0; i < so->num_finished_req_ids; i++) {
    const int32_t row = mr_find_row(r, so->finished_req_ids[i]);
    if (row >= 0) r->row_removed[row] = 1;
  }
  for (int32_t i = 0; i < so->num_preempted_req_ids; i++) {
    const int32_t row = mr_find_row(r, so->preempted_req_ids[i]);
    if (row >= 0) r->row_removed[row] = 1;
  }
  llb_status st;
  for (int32_t i = 0; i < so->num_scheduled_new_reqs; i++) {
    if ((st = check_new(r, so, i))) return st;
    const int32_t row = mr_find_row(r, so->scheduled_new_reqs[i].req_id);
    if (row >= 0) r->row_removed[row] = 1; /* replaced, as vLLM overwrites requests[req_id] */
  }
  int64_t tok_off = 0, blk_off = 0;
  for (int32_t j = 0; j < cd->num_reqs; j++)
    if ((st = check_cached(r, cd, j, &tok_off, &blk_off))) return st;
  int64_t total = 0;
  for (int32_t k = 0; k < so->num_scheduled_reqs; k++) {
    const struct llb_scheduled_tokens *s = &so->num_scheduled_tokens[k];
    struct mr_sched *e = &r->sched[k];
    char field[96];
    snprintf(field, sizeof(field), "num_scheduled_tokens[%d]", k);
    e->num_tokens = s->num_tokens;
    e->new_index = mr_find_new(so, s->req_id, so->num_scheduled_new_reqs);
    e->row = e->new_index >= 0 ? -1 : mr_find_row(r, s->req_id);
    if (e->new_index < 0 && (e->row < 0 || r->row_removed[e->row]))
      return mr_fail(r, LLB_STATUS_NOT_FOUND, field, "unknown request \"%.*s\"", (int)s->req_id.len, s->req_id.data);
    for (int32_t p = 0; p < k; p++)
      if (mr_str_eq(so->num_scheduled_tokens[p].req_id.data, so->num_scheduled_tokens[p].req_id.len, s->req_id))
        return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "request \"%.*s\" scheduled twice", (int)s->req_id.len,
                    s->req_id.data);
    if (s->num_tokens < 0) return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "negative num_tokens");
    int64_t tokens, computed, blocks;
    resolved_sizes(r, so, e, &tokens, &computed, &blocks);
    const int64_t end = computed + s->num_tokens;
    if ((st = mr_spec_check(r, s, e, field))) return st;
    if (s->num_spec_token_ids > 0 && end != tokens + s->num_spec_token_ids) /* drafts follow the known tokens */
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field,
                  "tokens [%lld, %lld) scheduled with %d drafts but request \"%.*s\" has %lld known tokens",
                  (long long)computed, (long long)end, s->num_spec_token_ids, (int)s->req_id.len, s->req_id.data,
                  (long long)tokens);
    if (end > tokens + s->num_spec_token_ids)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field,
                  "tokens [%lld, %lld) scheduled but request \"%.*s\" has %lld known tokens", (long long)computed,
                  (long long)end, (int)s->req_id.len, s->req_id.data, (long long)tokens);
    if (end > blocks * r->cfg.block_size)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field,
                  "tokens up to %lld scheduled but request \"%.*s\" has %lld blocks of %d", (long long)end,
                  (int)s->req_id.len, s->req_id.data, (long long)blocks, r->cfg.block_size);
    total += s->num_tokens;
  }
  for (int32_t i = 0; i < so->num_scheduled_encoder_inputs; i++) {
    const struct llb_scheduled_encoder_input *e = &so->scheduled_encoder_inputs[i];
    char field[96];
    snprintf(field, sizeof(field), "scheduled_encoder_inputs[%d]", i);
    const int32_t ni = mr_find_new(so, e->req_id, so->num_scheduled_new_reqs);
    const int32_t row = ni >= 0 ? -1 : mr_find_row(r, e->req_id);
    if (ni < 0 && (row < 0 || r->row_removed[row]))
      return mr_fail(r, LLB_STATUS_NOT_FOUND, field, "unknown request \"%.*s\"", (int)e->req_id.len, e->req_id.data);
    const int64_t nf = ni >= 0 ? so->scheduled_new_reqs[ni].num_mm_features : r->rows[row]->num_mm;
    if (e->num_mm_features != e->num_input_ids)
      return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "%d inputs but %d items with data", e->num_input_ids,
                  e->num_mm_features);
    for (int32_t k = 0; k < e->num_input_ids; k++) {
      if (e->input_ids[k] < 0 || e->input_ids[k] >= nf)
        return mr_fail(r, LLB_STATUS_INVALID_ARGUMENT, field, "input id %d outside [0, %lld)", e->input_ids[k],
                    (long long)nf);
      if ((st = mm_encoder_check_item(r->mm, &e->mm_features[k])))
        return mr_blame(r, e->req_id.data, e->req_id.len), mr_fail(r, st, field, "%s", llb_err_last());
    }
  }
  if (total > r->cfg.max_num_batched_tokens)
    return mr_fail(r, LLB_STATUS_TOO_LARGE, "total_num_scheduled_tokens",
                "%lld tokens scheduled; the worker's capacity is %d (--max-num-batched-tokens)", (long long)total,
                r->cfg.max_num_batched_tokens);
  return LLB_STATUS_OK;
}
