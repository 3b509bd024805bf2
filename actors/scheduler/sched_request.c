/* Scheduler-side request state. See sched_request.h (vLLM v1 request.py). */
#include "actors/scheduler/sched_request.h"

#include <stdlib.h>
#include <string.h>

#include "schemas/kv_ops.h"

/* Deep-copies the features' strings and data into one block (data 16-byte aligned). */
static bool copy_mm_blob(struct sched_request *r) {
  size_t total = 0;
  for (int32_t k = 0; k < r->num_mm_features; k++) {
    const struct sched_mm_feature *f = &r->mm_features[k];
    total += (f->data_bytes > 0 ? ((size_t)f->data_bytes + 15) / 16 * 16 : 0);
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

llb_status sched_request_create(const struct sched_new_request *nr, int32_t max_model_len,
                                int32_t block_size, uint64_t arrival_seq,
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
  r->eos_token_id = nr->eos_token_id;
  r->arrival_time = nr->arrival_time;
  r->priority = nr->priority;
  r->arrival_seq = arrival_seq;
  r->num_prompt_tokens = r->num_tokens = nr->num_prompt_tokens;
  int32_t room = max_model_len - nr->num_prompt_tokens;
  int32_t mt = nr->sampling_params.max_tokens;
  r->max_tokens = mt < 0 || mt > room ? room : mt;
  if (r->max_tokens < 1) r->max_tokens = 1;
  r->cap_tokens = nr->num_prompt_tokens + r->max_tokens;
  r->cap_blocks = (max_model_len + block_size - 1) / block_size;
  r->token_ids = malloc((size_t)r->cap_tokens * sizeof(*r->token_ids));
  r->block_ids = malloc((size_t)r->cap_blocks * sizeof(*r->block_ids));
  r->block_hashes = malloc((size_t)r->cap_blocks * sizeof(*r->block_hashes));
  if (!r->request_id || !r->token_ids || !r->block_ids || !r->block_hashes) goto fail;
  memcpy(r->token_ids, nr->prompt_token_ids, (size_t)nr->num_prompt_tokens * sizeof(int32_t));
  if (nr->num_mm_features > 0) {
    size_t n = (size_t)nr->num_mm_features;
    r->mm_features = malloc(n * sizeof(*r->mm_features));
    r->enc_input_ids = malloc(n * sizeof(*r->enc_input_ids));
    if (!r->mm_features || !r->enc_input_ids) goto fail;
    memcpy(r->mm_features, nr->mm_features, n * sizeof(*r->mm_features));
    r->num_mm_features = nr->num_mm_features;
    if (copy_mm_blob(r)) goto fail;
  }
  if (nr->cache_salt && nr->cache_salt[0]) {
    r->has_cache_salt = true;
    r->cache_salt_hash = kv_hash_bytes(nr->cache_salt, strlen(nr->cache_salt));
  }
  r->status = SCHED_REQUEST_STATUS_WAITING;
  r->stop_token_id = -1;
  r->num_cached_tokens = -1;
  r->queue_index = -1;
  sched_request_update_block_hashes(r, block_size);
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
  free(r);
}

void sched_request_update_block_hashes(struct sched_request *r, int32_t block_size) {
  int32_t full = r->num_tokens / block_size;
  if (full > r->cap_blocks) full = r->cap_blocks;
  uint64_t mm[64];
  for (int32_t b = r->num_block_hashes; b < full; b++) {
    int32_t start = b * block_size, end = start + block_size;
    struct kv_block_extra_keys extra = {.has_cache_salt = b == 0 && r->has_cache_salt,
                                        .cache_salt_hash = r->cache_salt_hash, .mm_hashes = mm};
    /* A block overlapped by more than 64 inputs is folded: the 64th key chains the rest. */
    for (int32_t k = 0; k < r->num_mm_features; k++) {
      const struct sched_mm_feature *f = &r->mm_features[k];
      if (f->offset < end && f->offset + f->length > start) {
        if (extra.num_mm_hashes < 64) mm[extra.num_mm_hashes++] = f->mm_hash;
        else mm[63] = kv_hash_bytes(&(uint64_t[2]){mm[63], f->mm_hash}, 16);
      }
    }
    uint64_t parent = b == 0 ? KV_BLOCK_HASH_ROOT : r->block_hashes[b - 1];
    r->block_hashes[b] = kv_block_hash(parent, r->token_ids + start, block_size, &extra);
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
  const struct llb_sampling_params *sp = &r->sampling_params;
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
