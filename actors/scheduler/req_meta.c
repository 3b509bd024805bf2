/* The scheduler actor's per-request metadata; see req_meta.h. */
#include "actors/scheduler/req_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"

static char *dup_str(struct llb_str s) {
  char *p = malloc(s.len + 1);
  if (p) {
    if (s.len) memcpy(p, s.data, s.len);
    p[s.len] = '\0';
  }
  return p;
}

/* Copies r's multimodal features into m->mm, their data and strings into one 16-byte aligned
 * blob (m->mm_blob). False: out of memory. */
static bool copy_mm(struct req_meta *m, const struct llb_engine_core_request *r) {
  m->num_mm = r->num_mm_features;
  if (m->num_mm <= 0) return true;
  m->mm = malloc((size_t)m->num_mm * sizeof(*m->mm));
  if (!m->mm) return false;
  size_t blob = 0;
  for (int32_t i = 0; i < m->num_mm; i++) {
    const struct llb_mm_feature *f = &r->mm_features[i];
    blob += ((size_t)f->data_bytes + 15) / 16 * 16 + f->mm_hash.len + f->modality.len + f->dtype.len + 3 +
            (size_t)f->num_is_embed;
  }
  if (!(m->mm_blob = aligned_alloc(16, (blob + 15) / 16 * 16 + 16))) return false;
  size_t off = 0;
  for (int32_t i = 0; i < m->num_mm; i++) {
    const struct llb_mm_feature *f = &r->mm_features[i];
    uint8_t *b = m->mm_blob;
    const uint8_t *data = NULL;
    if (f->data_bytes > 0) {
      memcpy(b + off, f->data, (size_t)f->data_bytes);
      data = b + off;
      off += ((size_t)f->data_bytes + 15) / 16 * 16;
    }
    const uint8_t *is_embed = NULL;
    if (f->num_is_embed > 0) {
      memcpy(b + off, f->is_embed, (size_t)f->num_is_embed);
      is_embed = b + off;
      off += (size_t)f->num_is_embed;
    }
    const char *strs[3];
    const struct llb_str *src[3] = {&f->mm_hash, &f->modality, &f->dtype};
    for (int k = 0; k < 3; k++) {
      memcpy(b + off, src[k]->data, src[k]->len + 1);
      strs[k] = (const char *)(b + off);
      off += src[k]->len + 1;
    }
    m->mm[i] = (struct sched_mm_feature){.offset = f->offset, .length = f->length,
                                         .hash = strs[0], .modality = strs[1], .dtype = strs[2],
                                         .num_cols = f->num_cols, .data = data,
                                         .data_bytes = f->data_bytes, .is_embed = is_embed};
  }
  return true;
}

/* kv_transfer_params (handoff.h): the engine to hand over to, or the hand-off's origin and
 * outputs (as resume ids: recomputed as context, and as the ids its first output names). The
 * values are checked at admission (handoff_admit_check). False: out of memory. */
static bool copy_kv_transfer(struct req_meta *m, const struct llb_engine_core_request *r) {
  if (!r->has_kv_transfer_params) return true;
  const struct llb_kv_transfer_params *k = &r->kv_transfer_params;
  if (k->do_remote_decode && k->remote_engine_id.len && !(m->decode_engine_id = dup_str(k->remote_engine_id)))
    return false;
  if (!k->do_remote_prefill) return true;
  m->remote_num_blocks = k->remote_num_blocks;
  m->remote_num_tokens = k->num_tokens;
  if (!(m->prefill_engine_id = dup_str(k->remote_engine_id)) || !(m->remote_request_id = dup_str(k->remote_request_id)))
    return false;
  const int32_t n = r->num_output_token_ids;
  if (n <= 0) return true;
  m->handed_ids = malloc((size_t)n * sizeof(int32_t));
  m->resume_ids = malloc((size_t)n * sizeof(int32_t));
  if (!m->handed_ids || !m->resume_ids) return false;
  memcpy(m->handed_ids, r->output_token_ids, (size_t)n * sizeof(int32_t));
  memcpy(m->resume_ids, r->output_token_ids, (size_t)n * sizeof(int32_t));
  m->num_handed = m->num_resume = n;
  return true;
}

llb_status req_meta_from_request(const struct llb_engine_core_request *r, uint64_t stream_seq, bool replayed,
                                 const char *refuse, struct req_meta **out) {
  *out = NULL;
  struct req_meta *m = calloc(1, sizeof(*m));
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "request metadata");
  m->stream_seq = stream_seq;
  m->resync = replayed;
  if (refuse) {
    m->reject_status = LLB_STATUS_ABORTED;
    snprintf(m->reject_message, sizeof m->reject_message, "%s", refuse);
  }
  m->id = dup_str(r->request_id);
  m->reply_to = dup_str(r->reply_to);
  m->external_id = dup_str(r->external_id);
  m->parent_request_id = dup_str(r->parent_request_id);
  m->cache_salt = dup_str(r->cache_salt);
  m->resume_of = r->resume_request_id.len ? dup_str(r->resume_request_id) : NULL;
  m->so_spec = dup_str(r->structured_outputs.spec);
  m->structured_outputs = (struct llb_structured_outputs){r->structured_outputs.kind,
                                                          {m->so_spec, r->structured_outputs.spec.len},
                                                          r->structured_outputs.reasoning};
  m->lora_name = dup_str(r->lora_request.lora_name);
  m->lora_int_id = r->lora_request.lora_int_id;
  m->prompt = malloc((size_t)r->num_prompt_token_ids * sizeof(int32_t));
  if (!copy_kv_transfer(m, r)) {
    req_meta_free(m);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "request metadata");
  }
  if (!m->lora_name || !m->id || !m->reply_to || !m->external_id || !m->parent_request_id || !m->cache_salt ||
      !m->so_spec || !m->prompt || (r->resume_request_id.len && !m->resume_of) || !copy_mm(m, r)) {
    req_meta_free(m);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "request metadata");
  }
  memcpy(m->prompt, r->prompt_token_ids, (size_t)r->num_prompt_token_ids * sizeof(int32_t));
  m->num_prompt = r->num_prompt_token_ids;
  m->params = *r->sampling_params;
  m->pooling_params = r->pooling_params;
  m->client_index = r->client_index;
  m->eos_token_id = r->eos_token_id;
  m->priority = r->priority;
  m->arrival_time = r->arrival_time;
  m->queued_time_ns = llb_wall_ns();
  step_trace_request_init(&m->trace, r);
  *out = m;
  return LLB_STATUS_OK;
}

void req_meta_free(struct req_meta *m) {
  if (!m) return;
  free(m->id);
  free(m->reply_to);
  free(m->external_id);
  free(m->parent_request_id);
  free(m->cache_salt);
  free(m->prompt);
  free(m->mm);
  free(m->mm_blob);
  free(m->so_spec);
  free(m->lora_name);
  free(m->resume_ids);
  free(m->resume_of);
  free(m->decode_engine_id);
  free(m->prefill_engine_id);
  free(m->remote_request_id);
  free(m->handed_ids);
  sched_prompt_logprobs_free(&m->plp);
  free(m);
}
