/* Scheduler plain structs <-> wire views. See actor_wire.h. */
#include "actors/scheduler/actor_wire.h"

#include <stdlib.h>
#include <string.h>

llb_status sched_wire_grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return LLB_STATUS_OK;
  int64_t n = *cap > 0 ? *cap : 16;
  while (n < need) n *= 2;
  void *p = realloc(*arr, (size_t)n * elem);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler wire: %lld entries", (long long)n);
  *arr = p;
  *cap = n;
  return LLB_STATUS_OK;
}

#define GROW(w, field, capf, need) \
  sched_wire_grow((void **)&(w)->field, &(w)->capf, (need), sizeof(*(w)->field))

void sched_wire_free(struct sched_wire *w) {
  if (!w) return;
  free(w->kv_ops);
  free(w->new_reqs);
  free(w->cached_ids);
  free(w->cached_resumed);
  free(w->cached_new_block_counts);
  free(w->cached_num_computed);
  free(w->cached_num_output);
  free(w->cached_new_block_ids);
  free(w->scheduled);
  free(w->finished);
  free(w->preempted);
  free(w->mo_req_ids);
  free(w->mm);
  free(w->enc_inputs);
  free(w->free_mm);
  free(w->enc_ops);
  free(w->kv_recvs);
  free(w->kv_sends);
  free(w->mo_kv_ids);
  memset(w, 0, sizeof(*w));
}

llb_status sched_wire_kv_step(struct sched_wire *w, const struct kv_step *kv, struct llb_kv_step *out) {
  llb_status st = GROW(w, kv_ops, cap_kv_ops, kv->num_ops);
  if (st) return st;
  for (int32_t i = 0; i < kv->num_ops; i++) {
    const struct kv_op *op = &kv->ops[i];
    const uint64_t *h = kv_step_op_hashes(kv, op);
    const int32_t *ids = kv_step_op_block_ids(kv, op);
    enum llb_kv_op_kind kind = op->kind == KV_OP_KIND_ALLOCATE ? LLB_KV_OP_KIND_ALLOCATE
                               : op->kind == KV_OP_KIND_CACHE  ? LLB_KV_OP_KIND_CACHE
                                                               : LLB_KV_OP_KIND_RELEASE;
    w->kv_ops[i] = (struct llb_kv_op){.kind = kind,
                                      .req_id = llb_str_c(op->req_id),
                                      .num_tokens = op->num_tokens,
                                      .block_hashes = h,
                                      .num_block_hashes = h ? op->num_block_hashes : 0,
                                      .num_computed_tokens = op->num_computed_tokens,
                                      .lookup = op->lookup,
                                      .block_ids = ids,
                                      .num_block_ids = ids ? op->num_block_ids : 0,
                                      .num_held_blocks = op->num_held_blocks};
  }
  *out = (struct llb_kv_step){.step = kv->step, .ops = w->kv_ops, .num_ops = kv->num_ops, .reset = kv->reset,
                              .held_block_ids = kv->held_block_ids, .num_held_block_ids = kv->num_held_block_ids,
                              .resync = kv->resync};
  return LLB_STATUS_OK;
}

llb_status sched_wire_kv_result(const struct llb_kv_step_result *in, struct kv_step_result *out) {
  kv_step_result_clear(out, in->step);
  for (int32_t i = 0; i < in->num_results; i++) {
    const struct llb_kv_op_result *r = &in->results[i];
    int32_t *ids = NULL;
    llb_status st = kv_step_result_add(out, (llb_status)r->status, r->num_cached_tokens,
                                       r->num_block_ids, &ids);
    if (st) return st;
    if (r->num_block_ids > 0) memcpy(ids, r->block_ids, (size_t)r->num_block_ids * sizeof(*ids));
  }
  out->num_free_blocks = in->num_free_blocks;
  out->num_total_blocks = in->num_total_blocks;
  out->prefix_cache_queries = in->prefix_cache_queries;
  out->prefix_cache_hits = in->prefix_cache_hits;
  return LLB_STATUS_OK;
}

static llb_status strs(struct llb_str **dst, int64_t *cap, const struct sched_str_list *a,
                       const struct sched_str_list *b, int32_t *n_out) {
  int32_t na = a ? a->num : 0, nb = b ? b->num : 0;
  llb_status st = sched_wire_grow((void **)dst, cap, (int64_t)na + nb, sizeof(**dst));
  if (st) return st;
  for (int32_t i = 0; i < na; i++) (*dst)[i] = llb_str_c(sched_str_list_get(a, i));
  for (int32_t i = 0; i < nb; i++) (*dst)[na + i] = llb_str_c(sched_str_list_get(b, i));
  *n_out = na + nb;
  return LLB_STATUS_OK;
}

static struct llb_mm_feature wire_mm(const struct sched_mm_feature *f, bool with_data) {
  return (struct llb_mm_feature){
      .modality = llb_str_c(f->modality ? f->modality : "embeds"), .mm_hash = llb_str_c(f->hash),
      .offset = f->offset, .length = f->length, .data = with_data ? f->data : NULL,
      .data_bytes = with_data ? f->data_bytes : 0, .dtype = llb_str_c(f->dtype), .num_cols = f->num_cols,
      .is_embed = f->is_embed, .num_is_embed = f->is_embed ? f->length : 0};
}

/* Encoder inputs and new requests' metadata into w->mm (one array, two uses). */
static llb_status wire_mm_parts(struct sched_wire *w, const struct sched_output *o,
                                struct llb_scheduler_output *out) {
  int64_t nmm = 0;
  for (int32_t i = 0; i < o->num_new_reqs; i++) nmm += o->new_reqs[i].num_mm_features;
  for (int32_t i = 0; i < o->num_encoder_inputs; i++) nmm += o->encoder_inputs[i].num_input_ids;
  llb_status st = GROW(w, mm, cap_mm, nmm);
  if (!st) st = GROW(w, enc_inputs, cap_enc_inputs, o->num_encoder_inputs);
  if (st) return st;
  int64_t at = 0;
  for (int32_t i = 0; i < o->num_new_reqs; i++) {
    const struct sched_new_req_data *r = &o->new_reqs[i];
    w->new_reqs[i].mm_features = r->num_mm_features > 0 ? w->mm + at : NULL;
    w->new_reqs[i].num_mm_features = r->num_mm_features;
    for (int32_t k = 0; k < r->num_mm_features; k++) w->mm[at++] = wire_mm(&r->mm_features[k], false);
  }
  for (int32_t i = 0; i < o->num_encoder_inputs; i++) {
    const struct sched_encoder_input *e = &o->encoder_inputs[i];
    w->enc_inputs[i] = (struct llb_scheduled_encoder_input){
        .req_id = llb_str_c(e->req_id), .input_ids = e->input_ids, .num_input_ids = e->num_input_ids,
        .mm_features = w->mm + at, .num_mm_features = e->num_input_ids};
    for (int32_t k = 0; k < e->num_input_ids; k++)
      w->mm[at++] = wire_mm(&e->mm_features[e->input_ids[k]], true);
  }
  out->scheduled_encoder_inputs = w->enc_inputs;
  out->num_scheduled_encoder_inputs = o->num_encoder_inputs;
  return LLB_STATUS_OK;
}

llb_status sched_wire_encoder_step(struct sched_wire *w, const struct encoder_step *enc,
                                   struct llb_encoder_step *out) {
  llb_status st = GROW(w, enc_ops, cap_enc_ops, enc->num_ops);
  if (st) return st;
  for (int32_t i = 0; i < enc->num_ops; i++) {
    const struct encoder_op *op = &enc->ops[i];
    w->enc_ops[i] = (struct llb_encoder_op){
        .kind = (enum llb_encoder_op_kind)op->kind, .req_id = llb_str_c(encoder_step_req_id(enc, op)),
        .mm_hash = llb_str_c(encoder_step_mm_hash(enc, op)), .input_id = op->input_id,
        .num_embeds = op->num_embeds, .encoder_compute_budget = op->encoder_compute_budget,
        .num_embeds_to_schedule = op->num_embeds_to_schedule};
  }
  *out = (struct llb_encoder_step){.version = LLB_SCHEMA_VERSION, .step = enc->step, .ops = w->enc_ops,
                                   .num_ops = enc->num_ops, .reset = enc->reset};
  return LLB_STATUS_OK;
}

/* The step's KV transfers (sched_output.kv_recvs / kv_sends) as KVConnectorMetadata. */
static llb_status wire_kv(struct sched_wire *w, const struct sched_output *o, struct llb_kv_connector_metadata *m) {
  llb_status st = GROW(w, kv_recvs, cap_kv_recvs, o->num_kv_recvs);
  if (!st) st = GROW(w, kv_sends, cap_kv_sends, o->num_kv_sends);
  if (st) return st;
  for (int32_t i = 0; i < o->num_kv_recvs; i++) {
    const struct sched_kv_recv *r = &o->kv_recvs[i];
    w->kv_recvs[i] = (struct llb_kv_recv_request){
        .req_id = llb_str_c(r->req_id), .local_block_ids = r->local_block_ids,
        .num_local_block_ids = r->num_local_block_ids, .remote_engine_id = llb_str_c(r->remote_engine_id),
        .remote_request_id = llb_str_c(r->remote_request_id), .remote_first_block = r->remote_first_block,
        .num_tokens = r->num_tokens};
  }
  for (int32_t i = 0; i < o->num_kv_sends; i++) {
    const struct sched_kv_send *r = &o->kv_sends[i];
    w->kv_sends[i] = (struct llb_kv_send_request){.req_id = llb_str_c(r->req_id), .block_ids = r->block_ids,
                                                  .num_block_ids = r->num_block_ids, .num_tokens = r->num_tokens,
                                                  .expires_in_s = r->expires_in_s};
  }
  *m = (struct llb_kv_connector_metadata){.reqs_to_recv = w->kv_recvs, .num_reqs_to_recv = o->num_kv_recvs,
                                          .reqs_to_send = w->kv_sends, .num_reqs_to_send = o->num_kv_sends,
                                          .epoch = o->kv_epoch};
  return LLB_STATUS_OK;
}

llb_status sched_wire_scheduler_output(struct sched_wire *w, const struct sched_output *o,
                                       const struct sched_str_list *carry_finished,
                                       const struct sched_str_list *carry_preempted,
                                       const struct sched_str_list *carry_free_mm,
                                       struct llb_scheduler_output *out) {
  int32_t nn = o->num_new_reqs, nc = o->num_cached_reqs;
  int64_t nblocks = 0;
  for (int32_t i = 0; i < nc; i++) nblocks += o->cached_reqs[i].num_new_block_ids;
  llb_status st = GROW(w, new_reqs, cap_new_reqs, nn);
  if (!st) st = GROW(w, scheduled, cap_scheduled, (int64_t)nn + nc);
  if (!st) st = GROW(w, cached_new_block_ids, cap_cached_new_block_ids, nblocks);
  if (!st && nc > w->cap_cached) {
    int64_t cap = w->cap_cached, c2 = cap, c3 = cap, c4 = cap, c5 = cap;
    st = sched_wire_grow((void **)&w->cached_ids, &cap, nc, sizeof(*w->cached_ids));
    if (!st) st = sched_wire_grow((void **)&w->cached_resumed, &c2, nc, sizeof(bool));
    if (!st) st = sched_wire_grow((void **)&w->cached_new_block_counts, &c3, nc, sizeof(int32_t));
    if (!st) st = sched_wire_grow((void **)&w->cached_num_computed, &c4, nc, sizeof(int32_t));
    if (!st) st = sched_wire_grow((void **)&w->cached_num_output, &c5, nc, sizeof(int32_t));
    if (!st) w->cap_cached = cap;
  }
  if (st) return st;
  *out = (struct llb_scheduler_output){.version = LLB_SCHEMA_VERSION, .step = o->step,
                                       .block_size = o->block_size};
  for (int32_t i = 0; i < nn; i++) {
    const struct sched_new_req_data *r = &o->new_reqs[i];
    w->new_reqs[i] = (struct llb_new_request_data){
        .req_id = llb_str_c(r->req_id), .prompt_token_ids = r->prompt_token_ids,
        .num_prompt_token_ids = r->num_prompt_tokens, .sampling_params = r->sampling_params,
        .output_token_ids = r->output_token_ids, .num_output_token_ids = r->num_output_tokens,
        .block_ids = r->block_ids, .num_block_ids = r->num_block_ids,
        .num_computed_tokens = r->num_computed_tokens,
        .structured_outputs = r->structured_outputs ? *r->structured_outputs : (struct llb_structured_outputs){0},
        .pooling_params = r->pooling_params,
        .lora_request = {llb_str_c(r->lora_name), r->lora_int_id}};
    w->scheduled[i] = (struct llb_scheduled_tokens){.req_id = llb_str_c(r->req_id), .num_tokens = r->num_scheduled_tokens};
  }
  int64_t off = 0;
  for (int32_t i = 0; i < nc; i++) {
    const struct sched_cached_req_data *r = &o->cached_reqs[i];
    w->cached_ids[i] = llb_str_c(r->req_id);
    w->cached_resumed[i] = false;
    w->cached_new_block_counts[i] = r->num_new_block_ids;
    w->cached_num_computed[i] = r->num_computed_tokens;
    w->cached_num_output[i] = r->num_output_tokens;
    if (r->num_new_block_ids > 0)
      memcpy(w->cached_new_block_ids + off, r->new_block_ids,
             (size_t)r->num_new_block_ids * sizeof(int32_t));
    off += r->num_new_block_ids;
    w->scheduled[nn + i] = (struct llb_scheduled_tokens){.req_id = llb_str_c(r->req_id), .num_tokens = r->num_scheduled_tokens,
                                                         .spec_token_ids = r->spec_token_ids,
                                                         .num_spec_token_ids = r->num_spec_tokens};
  }
  out->scheduled_new_reqs = w->new_reqs;
  out->num_scheduled_new_reqs = nn;
  out->scheduled_cached_reqs = (struct llb_cached_request_data){
      .num_reqs = nc, .req_ids = w->cached_ids, .resumed_from_preemption = w->cached_resumed,
      .new_block_ids = w->cached_new_block_ids, .num_new_block_ids = (int32_t)off,
      .new_block_counts = w->cached_new_block_counts, .num_computed_tokens = w->cached_num_computed,
      .num_output_tokens = w->cached_num_output};
  out->num_scheduled_tokens = w->scheduled;
  out->num_scheduled_reqs = nn + nc;
  out->total_num_scheduled_tokens = o->total_num_scheduled_tokens;
  st = strs(&w->finished, &w->cap_finished, carry_finished, &o->finished_req_ids,
            &out->num_finished_req_ids);
  if (!st) st = strs(&w->preempted, &w->cap_preempted, carry_preempted, &o->preempted_req_ids,
                     &out->num_preempted_req_ids);
  if (!st) st = strs(&w->free_mm, &w->cap_free_mm, carry_free_mm, &o->free_encoder_mm_hashes,
                     &out->num_free_encoder_mm_hashes);
  if (!st) st = wire_mm_parts(w, o, out);
  if (!st) st = wire_kv(w, o, &out->kv_connector_metadata);
  out->finished_req_ids = w->finished;
  out->preempted_req_ids = w->preempted;
  out->free_encoder_mm_hashes = w->free_mm;
  return st;
}

llb_status sched_wire_model_output(struct sched_wire *w, const struct llb_model_runner_output *in,
                                   struct sched_model_output *out) {
  const struct llb_kv_connector_output *k = &in->kv_connector_output;
  const int64_t nk = (int64_t)k->num_finished_sending + k->num_finished_recving + k->num_failed_recving;
  llb_status st = GROW(w, mo_req_ids, cap_mo_req_ids, in->num_reqs);
  if (!st) st = GROW(w, mo_kv_ids, cap_mo_kv_ids, nk);
  if (st) return st;
  for (int32_t i = 0; i < in->num_reqs; i++) w->mo_req_ids[i] = in->req_ids[i].data;
  const struct llb_str *lists[3] = {k->finished_sending, k->finished_recving, k->failed_recving};
  const int32_t counts[3] = {k->num_finished_sending, k->num_finished_recving, k->num_failed_recving};
  int64_t off = 0;
  for (int l = 0; l < 3; l++)
    for (int32_t i = 0; i < counts[l]; i++) w->mo_kv_ids[off++] = lists[l][i].data;
  *out = (struct sched_model_output){.step = in->step, .num_reqs = in->num_reqs,
                                     .req_ids = w->mo_req_ids, .num_sampled = in->num_sampled,
                                     .sampled_token_ids = in->sampled_token_ids,
                                     .num_pooled = in->num_pooled, .pooler_output = in->pooler_output,
                                     .num_spec_tokens = in->num_spec_tokens,
                                     .spec_token_ids = in->spec_token_ids,
                                     .finished_sending = w->mo_kv_ids, .num_finished_sending = counts[0],
                                     .finished_recving = w->mo_kv_ids + counts[0], .num_finished_recving = counts[1],
                                     .failed_recving = w->mo_kv_ids + counts[0] + counts[1],
                                     .num_failed_recving = counts[2]};
  return LLB_STATUS_OK;
}
