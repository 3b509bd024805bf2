/* Scheduler-side request state. See sched_request.h (vLLM v1 request.py). */
#include "actors/scheduler/sched_request.h"

#include "actors/scheduler/sched_fair.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "schemas/embeds.h"
#include "schemas/kv_ops.h"

/* Deep-copies the features' strings and data into one block (data 16-byte aligned). */
static bool copy_mm_blob(struct sched_request *r) {
  size_t total = 0;
  for (int32_t k = 0; k < r->num_mm_features; k++) {
    const struct sched_mm_feature *f = &r->mm_features[k];
    total += (f->data_bytes > 0 ? ((size_t)f->data_bytes + 15) / 16 * 16 : 0);
    total += f->is_embed ? (size_t)f->length : 0;
    total += (f->hash ? strlen(f->hash) : 0) + (f->modality ? strlen(f->modality) : 0) +
             (f->dtype ? strlen(f->dtype) : 0) + 3;
  }
  uint8_t *blob = aligned_alloc(16, (total + 15) / 16 * 16 + 16);
  if (!blob) return true;
  r->mm_blob = blob;
  size_t off = 0;
  for (int32_t k = 0; k < r->num_mm_features; k++) {
    struct sched_mm_feature *f = &r->mm_features[k];
    if (f->data_bytes > 0 && f->data) {
      memcpy(blob + off, f->data, (size_t)f->data_bytes);
      f->data = blob + off;
      off += ((size_t)f->data_bytes + 15) / 16 * 16;
    } else {
      f->data = NULL;
      f->data_bytes = 0;
    }
    if (f->is_embed) {
      memcpy(blob + off, f->is_embed, (size_t)f->length);
      f->is_embed = blob + off;
      off += (size_t)f->length;
    }
    const char **strs[3] = {&f->hash, &f->modality, &f->dtype};
    for (int i = 0; i < 3; i++) {
      const char *src = *strs[i] ? *strs[i] : "";
      size_t n = strlen(src) + 1;
      memcpy(blob + off, src, n);
      *strs[i] = (const char *)(blob + off);
      off += n;
    }
  }
  return false;
}

static bool id_ok(int32_t id, int32_t vocab_size) { return id >= 0 && (vocab_size <= 0 || id < vocab_size); }

static bool in_range(float x, float lo, float hi) { return isfinite(x) && x >= lo && x <= hi; }

#define BAD(...) LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

static llb_status validate_params(const char *id, const struct llb_sampling_params *sp, int32_t vocab_size) {
  if (!isfinite(sp->temperature) || sp->temperature < 0)
    return BAD("request %s: sampling_params.temperature %g must be finite and >= 0", id, (double)sp->temperature);
  if (!(isfinite(sp->top_p) && sp->top_p > 0 && sp->top_p <= 1))
    return BAD("request %s: sampling_params.top_p %g outside (0, 1]", id, (double)sp->top_p);
  if (!in_range(sp->min_p, 0, 1)) return BAD("request %s: sampling_params.min_p %g outside [0, 1]", id, (double)sp->min_p);
  if (sp->top_k < -1) return BAD("request %s: sampling_params.top_k %d < -1", id, sp->top_k);
  if (!in_range(sp->presence_penalty, -2, 2) || !in_range(sp->frequency_penalty, -2, 2))
    return BAD("request %s: sampling_params presence/frequency penalty %g / %g outside [-2, 2]", id,
               (double)sp->presence_penalty, (double)sp->frequency_penalty);
  if (!(isfinite(sp->repetition_penalty) && sp->repetition_penalty > 0 && sp->repetition_penalty <= 2))
    return BAD("request %s: sampling_params.repetition_penalty %g outside (0, 2]", id, (double)sp->repetition_penalty);
  if (sp->n < 1) return BAD("request %s: sampling_params.n %d < 1", id, sp->n);
  if (sp->max_tokens != -1 && sp->max_tokens < 1)
    return BAD("request %s: sampling_params.max_tokens %d (>= 1, or -1)", id, sp->max_tokens);
  if (sp->min_tokens < 0) return BAD("request %s: sampling_params.min_tokens %d < 0", id, sp->min_tokens);
  if (sp->logprobs < -1 || sp->logprobs > LLB_MAX_LOGPROBS)
    return BAD("request %s: sampling_params.logprobs %d outside [-1, %d]", id, sp->logprobs, LLB_MAX_LOGPROBS);
  if (sp->prompt_logprobs < -1 || sp->prompt_logprobs > LLB_MAX_LOGPROBS)
    return BAD("request %s: sampling_params.prompt_logprobs %d outside [-1, %d]", id, sp->prompt_logprobs,
               LLB_MAX_LOGPROBS);
  if (sp->num_stop < 0 || sp->num_stop > LLB_MAX_STOP_STRINGS)
    return BAD("request %s: sampling_params: %d stop strings (at most %d)", id, sp->num_stop, LLB_MAX_STOP_STRINGS);
  if (sp->num_stop_token_ids < 0 || sp->num_stop_token_ids > LLB_MAX_STOP_TOKEN_IDS)
    return BAD("request %s: sampling_params: %d stop_token_ids (at most %d)", id, sp->num_stop_token_ids,
               LLB_MAX_STOP_TOKEN_IDS);
  for (int32_t i = 0; i < sp->num_stop_token_ids; i++)
    if (!id_ok(sp->stop_token_ids[i], vocab_size))
      return BAD("request %s: sampling_params.stop_token_ids[%d] = %d outside the vocabulary [0, %d)", id, i,
                 sp->stop_token_ids[i], vocab_size);
  return LLB_STATUS_OK;
}

llb_status sched_new_request_validate(const struct sched_new_request *nr, int32_t vocab_size) {
  const char *id = nr->request_id ? nr->request_id : "";
  if (nr->num_prompt_tokens < 1 || !nr->prompt_token_ids) return BAD("request %s: empty prompt", id);
  if (!nr->sampling_params) return BAD("request %s: no sampling_params", id);
  for (int32_t t = 0; t < nr->num_prompt_tokens; t++)
    if (!id_ok(nr->prompt_token_ids[t], vocab_size))
      return BAD("request %s: prompt_token_ids[%d] = %d outside the vocabulary [0, %d)", id, t,
                 nr->prompt_token_ids[t], vocab_size);
  if (nr->eos_token_id != -1 && !id_ok(nr->eos_token_id, vocab_size))
    return BAD("request %s: eos_token_id %d outside the vocabulary [0, %d) (or -1)", id, nr->eos_token_id, vocab_size);
  llb_status st = validate_params(id, nr->sampling_params, vocab_size);
  if (st) return st;
  const struct llb_pooling_params *pp = &nr->pooling_params;
  if ((unsigned)pp->pooling_type > LLB_POOLING_CLS || pp->dimensions < 0 || pp->dimensions > LLB_MAX_POOLED_DIMS)
    return BAD("request %s: pooling_params (type %d, dimensions %d)", id, (int)pp->pooling_type, pp->dimensions);
  if (pp->pooling_type != LLB_POOLING_NONE && nr->num_mm_features > 0)
    return BAD("request %s: a pooling request takes no mm_features", id);
  if (nr->num_resume_output_ids < 0 || (nr->num_resume_output_ids > 0 && !nr->resume_output_ids) ||
      (nr->num_resume_output_ids > 0 && pp->pooling_type != LLB_POOLING_NONE))
    return BAD("request %s: resumed outputs (%d)", id, nr->num_resume_output_ids);
  for (int32_t t = 0; t < nr->num_resume_output_ids; t++)
    if (!id_ok(nr->resume_output_ids[t], vocab_size))
      return BAD("request %s: resumed output %d = %d outside the vocabulary [0, %d)", id, t,
                 nr->resume_output_ids[t], vocab_size);
  if (nr->kv_remote_num_tokens < 0 ||
      (nr->kv_remote_num_tokens > 0 && (!nr->kv_remote_engine_id || !nr->kv_remote_engine_id[0] ||
                                        !nr->kv_remote_request_id || !nr->kv_remote_request_id[0] ||
                                        strlen(nr->kv_remote_engine_id) > 64 || strlen(nr->kv_remote_request_id) > 255 ||
                                        nr->kv_remote_num_tokens >= nr->num_prompt_tokens + nr->num_resume_output_ids ||
                                        nr->num_mm_features > 0 || pp->pooling_type != LLB_POOLING_NONE)))
    return BAD("request %s: kv_transfer_params (%d remote tokens of %d; engine and request ids; text only)", id,
               nr->kv_remote_num_tokens, nr->num_prompt_tokens + nr->num_resume_output_ids);
  if ((nr->lora_name && nr->lora_name[0]) != (nr->lora_int_id != 0) || nr->lora_int_id < 0)
    return BAD("request %s: lora_request (an adapter name with an id >= 1, or neither)", id);
  if (nr->num_mm_features < 0 || (nr->num_mm_features > 0 && !nr->mm_features))
    return BAD("request %s: mm_features", id);
  for (int32_t k = 0; k < nr->num_mm_features; k++) {
    const struct sched_mm_feature *f = &nr->mm_features[k];
    if (f->is_embed) {
      if (f->length < 1 || f->offset < 0 || (int64_t)f->offset + f->length > nr->num_prompt_tokens)
        return BAD("request %s: mm_features[%d]: placeholders [%d, +%d) outside the %d-token prompt", id, k,
                   f->offset, f->length, nr->num_prompt_tokens);
      int32_t ones = 0;
      for (int32_t i = 0; i < f->length; i++) ones += f->is_embed[i] != 0;
      if (ones < 1) return BAD("request %s: mm_features[%d]: is_embed marks no position", id, k);
    }
    if (!f->data || f->data_bytes <= 0) continue; /* metadata only: the encoder cache holds the rows */
    if (f->dtype && (!strcmp(f->dtype, "jpeg") || !strcmp(f->dtype, "png"))) continue; /* a file */
    const int64_t esize = f->dtype && !strcmp(f->dtype, "f32") ? 4 : f->dtype && !strcmp(f->dtype, "f16") ? 2 : 0;
    int32_t rows = f->length; /* with a mask, the data holds the marked positions' rows */
    if (f->is_embed) {
      rows = 0;
      for (int32_t i = 0; i < f->length; i++) rows += f->is_embed[i] != 0;
    }
    if (esize == 0 || f->num_cols < 1 || f->data_bytes != (int64_t)rows * f->num_cols * esize)
      return BAD("request %s: mm_features[%d]: %lld bytes of '%s' do not hold [%d, %d]", id, k,
                 (long long)f->data_bytes, f->dtype ? f->dtype : "", rows, f->num_cols);
    int64_t bad = llb_embeds_first_nonfinite(f->data, f->data_bytes, f->dtype);
    if (bad >= 0)
      return BAD("request %s: mm_features[%d] holds a non-finite value (NaN or Inf) at row %lld", id, k,
                 (long long)(bad / f->num_cols));
  }
  return LLB_STATUS_OK;
}

#undef BAD

llb_status sched_request_create(const struct sched_new_request *nr, int32_t max_model_len,
                                int32_t block_size, const struct llb_hash_key *hash_key, uint64_t arrival_seq,
                                struct sched_request **out) {
  *out = NULL;
  if (!nr->request_id || !nr->request_id[0] || strlen(nr->request_id) > 255)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request_id must be 1..255 bytes");
  if (nr->num_prompt_tokens < 1 || !nr->prompt_token_ids)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s: empty prompt", nr->request_id);
  if (nr->num_prompt_tokens >= max_model_len)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "request %s: prompt of %d tokens, max_model_len %d",
                    nr->request_id, nr->num_prompt_tokens, max_model_len);
  if (nr->num_mm_features < 0 || (nr->num_mm_features > 0 && !nr->mm_features))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s: mm_features", nr->request_id);
  llb_status st = LLB_STATUS_OUT_OF_MEMORY;
  struct sched_request *r = calloc(1, sizeof(*r));
  if (!r) goto fail;
  r->request_id = strdup(nr->request_id);
  r->sampling_params = nr->sampling_params;
  r->user = nr->user;
  r->pooling_params = nr->pooling_params;
  r->eos_token_id = nr->eos_token_id;
  r->arrival_time = nr->arrival_time;
  r->priority = nr->priority;
  r->arrival_seq = arrival_seq;
  r->num_prompt_tokens = r->num_tokens = nr->num_prompt_tokens;
  int32_t room = max_model_len - nr->num_prompt_tokens;
  int32_t mt = nr->sampling_params->max_tokens;
  r->max_tokens = mt < 0 || mt > room ? room : mt;
  if (r->max_tokens < 1) r->max_tokens = 1;
  r->cap_tokens = nr->num_prompt_tokens + r->max_tokens;
  r->cap_blocks = (max_model_len + block_size - 1) / block_size;
  r->token_ids = malloc((size_t)r->cap_tokens * sizeof(*r->token_ids));
  r->block_ids = malloc((size_t)r->cap_blocks * sizeof(*r->block_ids));
  r->block_hashes = malloc((size_t)r->cap_blocks * sizeof(*r->block_hashes));
  if (!r->request_id || !r->token_ids || !r->block_ids || !r->block_hashes) goto fail;
  memcpy(r->token_ids, nr->prompt_token_ids, (size_t)nr->num_prompt_tokens * sizeof(int32_t));
  if (nr->num_resume_output_ids > 0) { /* known outputs: context, never more than max_tokens - 1 */
    const int32_t k = nr->num_resume_output_ids < r->max_tokens - 1 ? nr->num_resume_output_ids : r->max_tokens - 1;
    if (k > 0) memcpy(r->token_ids + r->num_tokens, nr->resume_output_ids, (size_t)k * sizeof(int32_t));
    if (k > 0) r->num_tokens += k;
  }
  if (nr->num_mm_features > 0) {
    size_t n = (size_t)nr->num_mm_features;
    r->mm_features = malloc(n * sizeof(*r->mm_features));
    r->enc_input_ids = malloc(n * sizeof(*r->enc_input_ids));
    if (!r->mm_features || !r->enc_input_ids) goto fail;
    memcpy(r->mm_features, nr->mm_features, n * sizeof(*r->mm_features));
    r->num_mm_features = nr->num_mm_features;
    if (copy_mm_blob(r)) goto fail;
    for (int32_t k = 0; k < r->num_mm_features; k++) {
      struct sched_mm_feature *f = &r->mm_features[k];
      if (f->hash && f->hash[0]) f->mm_hash = llb_hash_bytes(hash_key, f->hash, strlen(f->hash));
      f->num_embeds = f->length;
      if (f->is_embed) {
        f->num_embeds = 0;
        for (int32_t i = 0; i < f->length; i++) f->num_embeds += f->is_embed[i] != 0;
      }
    }
  }
  if (nr->structured_outputs.kind != LLB_SO_NONE) {
    size_t n = nr->structured_outputs.spec.len;
    if (!(r->so_spec = malloc(n + 1))) goto fail;
    if (n) memcpy(r->so_spec, nr->structured_outputs.spec.data, n);
    r->so_spec[n] = '\0';
    r->structured_outputs =
        (struct llb_structured_outputs){nr->structured_outputs.kind, {r->so_spec, n}, nr->structured_outputs.reasoning};
  }
  if (nr->lora_name && nr->lora_name[0]) {
    if (!(r->lora_name = strdup(nr->lora_name))) goto fail;
    r->lora_int_id = nr->lora_int_id;
    r->lora_name_hash = llb_hash_bytes(hash_key, nr->lora_name, strlen(nr->lora_name));
  }
  if (nr->kv_remote_num_tokens > 0 && nr->kv_remote_engine_id && nr->kv_remote_request_id) {
    /* at least the last known token is computed here: it samples the next one */
    r->kv_remote_num_tokens = nr->kv_remote_num_tokens < r->num_tokens - 1 ? nr->kv_remote_num_tokens : r->num_tokens - 1;
    if (r->kv_remote_num_tokens > 0) {
      r->kv_remote_engine_id = strdup(nr->kv_remote_engine_id);
      r->kv_remote_request_id = strdup(nr->kv_remote_request_id);
      if (!r->kv_remote_engine_id || !r->kv_remote_request_id) goto fail;
      r->kv_recv = SCHED_KV_RECV_WANTED;
    }
  }
  if (nr->cache_salt && nr->cache_salt[0]) {
    r->has_cache_salt = true;
    r->cache_salt_hash = llb_hash_bytes(hash_key, nr->cache_salt, strlen(nr->cache_salt));
    r->tenant_key = sched_fair_tenant_key(hash_key, nr->cache_salt);
  }
  r->status = SCHED_REQUEST_STATUS_WAITING;
  r->stop_token_id = -1;
  r->num_cached_tokens = -1;
  r->queue_index = -1;
  sched_request_update_block_hashes(r, block_size, hash_key);
  *out = r;
  return LLB_STATUS_OK;
fail:
  sched_request_destroy(r);
  return LLB_ERRF(st, "request %s: allocating its state", nr->request_id);
}

void sched_request_destroy(struct sched_request *r) {
  if (!r) return;
  free(r->request_id);
  free(r->token_ids);
  free(r->block_ids);
  free(r->block_hashes);
  free(r->mm_features);
  free(r->mm_blob);
  free(r->enc_input_ids);
  free(r->so_spec);
  free(r->lora_name);
  free(r->kv_remote_engine_id);
  free(r->kv_remote_request_id);
  free(r);
}

void sched_request_update_block_hashes(struct sched_request *r, int32_t block_size,
                                       const struct llb_hash_key *hash_key) {
  int32_t full = r->num_tokens / block_size;
  if (full > r->cap_blocks) full = r->cap_blocks;
  uint64_t mm[64];
  for (int32_t b = r->num_block_hashes; b < full; b++) {
    int32_t start = b * block_size, end = start + block_size;
    struct llb_block_extra_keys extra = {.has_cache_salt = b == 0 && r->has_cache_salt,
                                        .cache_salt_hash = r->cache_salt_hash, .mm_hashes = mm,
                                        .has_lora = r->lora_name != NULL, .lora_name_hash = r->lora_name_hash};
    /* A block overlapped by more than 64 inputs is folded: the 64th key chains the rest. */
    for (int32_t k = 0; k < r->num_mm_features; k++) {
      const struct sched_mm_feature *f = &r->mm_features[k];
      if (f->offset < end && f->offset + f->length > start) {
        if (extra.num_mm_hashes < 64) mm[extra.num_mm_hashes++] = f->mm_hash;
        else mm[63] = llb_hash_bytes(hash_key, &(uint64_t[2]){mm[63], f->mm_hash}, 16);
      }
    }
    uint64_t parent = b == 0 ? LLB_BLOCK_HASH_ROOT : r->block_hashes[b - 1];
    r->block_hashes[b] = llb_block_hash(hash_key, parent, r->token_ids + start, block_size, &extra);
  }
  if (full > r->num_block_hashes) r->num_block_hashes = full;
}

enum sched_finish_reason sched_request_append_token(struct sched_request *r, int32_t token_id,
                                                    int32_t max_model_len) {
  if (r->num_tokens >= r->cap_tokens) { /* cannot happen: LENGTH fires at the cap */
    r->status = SCHED_REQUEST_STATUS_FINISHED_LENGTH_CAPPED;
    return r->finish_reason = SCHED_FINISH_REASON_LENGTH;
  }
  r->token_ids[r->num_tokens++] = token_id;
  int32_t num_out = sched_request_num_output_tokens(r);
  const struct llb_sampling_params *sp = r->sampling_params;
  if (r->num_tokens >= max_model_len || num_out >= r->max_tokens) {
    r->status = SCHED_REQUEST_STATUS_FINISHED_LENGTH_CAPPED;
    return r->finish_reason = SCHED_FINISH_REASON_LENGTH;
  }
  if (num_out < sp->min_tokens) return SCHED_FINISH_REASON_NONE;
  bool stop = !sp->ignore_eos && r->eos_token_id >= 0 && token_id == r->eos_token_id;
  for (int32_t i = 0; !stop && i < sp->num_stop_token_ids && i < LLB_MAX_STOP_TOKEN_IDS; i++) {
    if (sp->stop_token_ids[i] == token_id) {
      stop = true;
      r->stop_token_id = token_id;
    }
  }
  if (!stop) return SCHED_FINISH_REASON_NONE;
  r->status = SCHED_REQUEST_STATUS_FINISHED_STOPPED;
  return r->finish_reason = SCHED_FINISH_REASON_STOP;
}
