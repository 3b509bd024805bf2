/* Boundary structs of the scheduler: builders and accessors. See sched_output.h. */
#include "actors/scheduler/sched_output.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

static llb_status grow32(void **arr, int32_t *cap, int64_t need, size_t elem) {
  int64_t c = *cap;
  llb_status st = llb_array_reserve(arr, &c, need, elem);
  *cap = (int32_t)c;
  return st;
}

void sched_str_list_clear(struct sched_str_list *l) { l->num = 0, l->num_chars = 0; }

void sched_str_list_free(struct sched_str_list *l) {
  free(l->offsets);
  free(l->chars);
  memset(l, 0, sizeof(*l));
}

llb_status sched_str_list_add(struct sched_str_list *l, const char *s) {
  size_t len = strlen(s) + 1;
  llb_status st = grow32((void **)&l->offsets, &l->cap, (int64_t)l->num + 1, sizeof(*l->offsets));
  if (!st) st = llb_array_reserve((void **)&l->chars, &l->cap_chars, l->num_chars + (int64_t)len, 1);
  if (st) return st;
  memcpy(l->chars + l->num_chars, s, len);
  l->offsets[l->num++] = l->num_chars;
  l->num_chars += (int64_t)len;
  return LLB_STATUS_OK;
}

const char *sched_str_list_get(const struct sched_str_list *l, int32_t i) {
  return i < 0 || i >= l->num ? NULL : l->chars + l->offsets[i];
}

void sched_output_init(struct sched_output *o) { memset(o, 0, sizeof(*o)); }

void sched_output_free(struct sched_output *o) {
  if (!o) return;
  free(o->new_reqs);
  free(o->cached_reqs);
  sched_str_list_free(&o->finished_req_ids);
  sched_str_list_free(&o->preempted_req_ids);
  free(o->encoder_inputs);
  sched_str_list_free(&o->free_encoder_mm_hashes);
  free(o->kv_recvs);
  free(o->kv_sends);
  memset(o, 0, sizeof(*o));
}

void sched_engine_outputs_init(struct sched_engine_outputs *o) { memset(o, 0, sizeof(*o)); }

void sched_engine_outputs_free(struct sched_engine_outputs *o) {
  if (!o) return;
  free(o->outputs);
  free(o->token_ids);
  free(o->pooled);
  sched_str_list_free(&o->req_ids);
  memset(o, 0, sizeof(*o));
}

void sched_engine_outputs_clear(struct sched_engine_outputs *o, uint64_t step) {
  o->step = step;
  o->num_outputs = 0;
  o->num_token_ids = 0;
  o->num_pooled = 0;
  sched_str_list_clear(&o->req_ids);
}

llb_status sched_engine_outputs_add(struct sched_engine_outputs *o, struct sched_request *r,
                                    int32_t first_output_pos, int32_t n) {
  llb_status st = grow32((void **)&o->outputs, &o->cap_outputs, (int64_t)o->num_outputs + 1,
                         sizeof(*o->outputs));
  if (!st) st = llb_array_reserve((void **)&o->token_ids, &o->cap_token_ids, o->num_token_ids + n, sizeof(int32_t));
  if (!st) st = sched_str_list_add(&o->req_ids, r->request_id);
  if (st) return st;
  if (n > 0)
    memcpy(o->token_ids + o->num_token_ids, r->token_ids + r->num_prompt_tokens + first_output_pos,
           (size_t)n * sizeof(int32_t));
  o->outputs[o->num_outputs++] = (struct sched_engine_output){
      .req_id_offset = o->req_ids.num - 1, .token_offset = o->num_token_ids, .num_new_tokens = n,
      .first_output_pos = first_output_pos, .finish_reason = r->finish_reason,
      .stop_token_id = r->stop_token_id,
      .num_cached_tokens = r->num_cached_tokens > 0 ? r->num_cached_tokens : 0,
      .num_preemptions = r->num_preemptions, .user = r->user};
  if (r->finish_reason != SCHED_FINISH_REASON_NONE) r->user = NULL; /* the final output owns it */
  o->num_token_ids += n;
  return LLB_STATUS_OK;
}

llb_status sched_engine_outputs_set_pooled(struct sched_engine_outputs *o, int32_t i, const float *vec, int32_t n) {
  if (i < 0 || i >= o->num_outputs || n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pooled output %d", i);
  llb_status st = llb_array_reserve((void **)&o->pooled, &o->cap_pooled, o->num_pooled + n, sizeof(float));
  if (st) return st;
  if (n > 0) memcpy(o->pooled + o->num_pooled, vec, (size_t)n * sizeof(float));
  o->outputs[i].pooled_offset = o->num_pooled;
  o->outputs[i].num_pooled = n;
  o->num_pooled += n;
  return LLB_STATUS_OK;
}

const float *sched_engine_outputs_pooled(const struct sched_engine_outputs *o, int32_t i) {
  if (i < 0 || i >= o->num_outputs || o->outputs[i].num_pooled == 0) return NULL;
  return o->pooled + o->outputs[i].pooled_offset;
}

const char *sched_engine_outputs_req_id(const struct sched_engine_outputs *o, int32_t i) {
  if (i < 0 || i >= o->num_outputs) return NULL;
  return sched_str_list_get(&o->req_ids, (int32_t)o->outputs[i].req_id_offset);
}

const int32_t *sched_engine_outputs_tokens(const struct sched_engine_outputs *o, int32_t i) {
  if (i < 0 || i >= o->num_outputs) return NULL;
  return o->token_ids + o->outputs[i].token_offset;
}
