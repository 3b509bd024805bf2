/* Encoder-input scheduling: the multimodal encoder budget of a step and the encoder_cache
 * mirror's reconciliation (sched_schedule_encoder / sched_apply_encoder_result, scheduler.h).
 * Split out of scheduler.c; semantics of vLLM v1 core/sched/scheduler.py, our own code. */
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* ---- encoder inputs (vLLM _try_schedule_encoder_inputs) ---- */

/* Plans r's encoder inputs for this step against the mirror; may cut r's tokens. Appends
 * the ops to enc; *budget and *bytes are the step's remaining rows and sent bytes. */
static llb_status schedule_encoder_inputs(struct scheduler *s, struct sched_request *r,
                                          struct encoder_step *enc, int32_t *budget,
                                          int32_t *to_schedule, int64_t *bytes) {
  int32_t computed = r->num_computed_tokens, n = r->num_scheduled_tokens;
  r->num_enc_inputs = 0;
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < r->num_mm_features && !st; i++) {
    const struct sched_mm_feature *f = &r->mm_features[i];
    if (!f->hash || !f->hash[0]) continue;
    if (f->offset >= computed + n) break;             /* not needed this step */
    if (f->offset + f->length <= computed) continue;  /* already in the KV cache */
    bool dup = false;                                 /* same item earlier in this request */
    for (int32_t k = 0; k < r->num_enc_inputs && !dup; k++)
      dup = strcmp(r->mm_features[r->enc_input_ids[k]].hash, f->hash) == 0;
    if (dup) continue;
    bool hit = false;
    st = encoder_cache_check_and_update(s->ec, r->request_id, f->hash, &hit);
    if (st) break;
    s->stats.encoder_cache_queries++;
    s->stats.encoder_cache_hits += hit;
    struct encoder_op op = {.kind = ENCODER_OP_KIND_CHECK_AND_UPDATE, .input_id = i,
                            .num_embeds = f->num_embeds, .expected = hit};
    st = encoder_step_add(enc, &op, r->request_id, f->hash);
    if (st || hit) continue;
    bool fits = *bytes == 0 || s->cfg.max_encoder_bytes_per_step == 0 ||
                *bytes + f->data_bytes <= s->cfg.max_encoder_bytes_per_step;
    if (fits) {
      fits = encoder_cache_can_allocate(s->ec, f->num_embeds, *budget, *to_schedule);
      op = (struct encoder_op){.kind = ENCODER_OP_KIND_CAN_ALLOCATE, .input_id = i,
                               .num_embeds = f->num_embeds, .encoder_compute_budget = *budget,
                               .num_embeds_to_schedule = *to_schedule, .expected = fits};
      st = encoder_step_add(enc, &op, r->request_id, f->hash);
      if (st) break;
    }
    if (!fits) { /* schedule the tokens before the item only (none if we are inside it) */
      n = computed < f->offset ? f->offset - computed : 0;
      break;
    }
    /* vLLM allocates after the loop; at once is the same (the item is scheduled now) and
     * lets a later request of this step hit it. */
    st = encoder_cache_allocate(s->ec, r->request_id, f->hash, f->num_embeds);
    if (st) break;
    op = (struct encoder_op){.kind = ENCODER_OP_KIND_ALLOCATE, .input_id = i,
                             .num_embeds = f->num_embeds, .expected = true};
    st = encoder_step_add(enc, &op, r->request_id, f->hash);
    *to_schedule += f->num_embeds;
    *budget -= f->num_embeds;
    *bytes += f->data_bytes;
    s->stats.encoder_inputs_computed++;
    s->stats.encoder_embeds_computed += (uint64_t)f->num_embeds;
    r->enc_input_ids[r->num_enc_inputs++] = i;
  }
  r->num_scheduled_tokens = n;
  return st;
}

llb_status sched_schedule_encoder(struct scheduler *s, struct sched_output *out,
                                  struct encoder_step *enc) {
  if (s->kv_in_flight || !s->planned || out->step != s->step)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sched_schedule_encoder: kv step unanswered or no step planned");
  encoder_step_clear(enc, s->step);
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < s->enc_pending.num_ops && !st; i++) {
    const struct encoder_op *op = &s->enc_pending.ops[i];
    st = encoder_step_add(enc, op, encoder_step_req_id(&s->enc_pending, op), "");
  }
  encoder_step_clear(&s->enc_pending, s->step);
  int32_t budget = s->enc_budget, to_schedule = 0;
  int64_t bytes = 0;
  bool changed = false;
  for (int32_t i = 0; i < s->num_scheduled && !st;) {
    struct sched_request *r = s->scheduled[i];
    r->num_enc_inputs = 0;
    if (r->num_scheduled_tokens <= 0 || !sched_has_encoder_inputs(r)) {
      i++;
      continue;
    }
    int32_t before = r->num_scheduled_tokens;
    st = schedule_encoder_inputs(s, r, enc, &budget, &to_schedule, &bytes);
    if (r->num_scheduled_tokens == before) {
      i++;
      continue;
    }
    changed = true;
    if (r->num_scheduled_tokens > 0) {
      i++;
      continue;
    }
    /* Nothing computable this step: r stays running (blocks kept) and waits for room. */
    r->num_scheduled_tokens = before; /* remove_scheduled subtracts what was counted */
    if (r->scheduled_as_new) r->on_worker = false;
    sched_remove_scheduled(s, r);
  }
  int32_t nf = encoder_cache_num_freed(s->ec);
  for (int32_t i = 0; i < nf && !st; i++)
    st = sched_str_list_add(&out->free_encoder_mm_hashes, encoder_cache_freed(s->ec, i));
  encoder_cache_clear_freed(s->ec);
  if (st) return st;
  /* A pending reset rides with the next real ops: a step without multimodal work sends
   * nothing (and an engine without an encoder_cache actor never needs one). */
  enc->reset = enc->num_ops > 0 && s->enc_reset_pending;
  if (enc->num_ops > 0) s->enc_reset_pending = false;
  int32_t ne = 0;
  for (int32_t i = 0; i < s->num_scheduled; i++) ne += s->scheduled[i]->num_enc_inputs > 0;
  if (ne > out->cap_encoder_inputs) {
    void *a = realloc(out->encoder_inputs, (size_t)s->cfg.max_num_seqs * sizeof(*out->encoder_inputs));
    if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder inputs of %d requests", ne);
    out->encoder_inputs = a;
    out->cap_encoder_inputs = s->cfg.max_num_seqs;
  }
  out->num_encoder_inputs = 0;
  for (int32_t i = 0; i < s->num_scheduled; i++) {
    const struct sched_request *r = s->scheduled[i];
    if (r->num_enc_inputs == 0) continue;
    out->encoder_inputs[out->num_encoder_inputs++] = (struct sched_encoder_input){
        .req_id = r->request_id, .input_ids = r->enc_input_ids, .num_input_ids = r->num_enc_inputs,
        .mm_features = r->mm_features};
  }
  if (!changed) return LLB_STATUS_OK;
  s->total_scheduled = 0;
  for (int32_t i = 0; i < s->num_scheduled; i++) s->total_scheduled += s->scheduled[i]->num_scheduled_tokens;
  return sched_assemble_output(s, out, true);
}

void sched_apply_encoder_result(struct scheduler *s, const struct encoder_step *enc,
                                const bool *results, int32_t num_results, int32_t num_free_slots) {
  s->stats.num_encoder_round_trips++;
  bool same = num_results == enc->num_ops && num_free_slots == encoder_cache_num_free_slots(s->ec);
  for (int32_t i = 0; same && i < enc->num_ops; i++) same = results[i] == enc->ops[i].expected;
  if (same) return;
  s->stats.num_encoder_mismatches++;
  LLB_LOG_WARN("encoder_mirror_mismatch", "step=%llu ops=%d results=%d mirror_free=%d actor_free=%d action=reset",
               (unsigned long long)enc->step, enc->num_ops, num_results,
               encoder_cache_num_free_slots(s->ec), num_free_slots);
  (void)encoder_cache_evict_all(s->ec); /* hashes reach the worker with the next step */
  encoder_step_clear(&s->enc_pending, s->step);
  s->enc_reset_pending = true;
}
