/* Model runner: persistent batch, flattened step batch, forward and sampling.
 * Follows vLLM v1 gpu_model_runner.py (_update_states, _prepare_inputs, execute_model) and
 * gpu_input_batch.py / block_table.py (rows, condense, slot mapping). See model_runner.h. */
#include "actors/gpu_worker/model_runner.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/gpu_worker/model_runner_internal.h"
#include "model/forward/lora.h"
#include "actors/gpu_worker/mm_encoder.h"
#include "actors/gpu_worker/pooler.h"
#include "actors/gpu_worker/prompt_logprobs.h"
#include "actors/gpu_worker/runner_backend.h"
#include "actors/gpu_worker/runner_sim.h"
#include "actors/gpu_worker/runner_so.h"
#include "base/log.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

static void free_mm(struct mr_request *q) {
  for (int64_t i = 0; i < q->num_mm; i++) {
    free(q->mm[i].hash);
    free(q->mm[i].row_of);
  }
  q->num_mm = 0;
}

static void free_request(struct mr_request *q) {
  if (!q) return;
  free_mm(q);
  free(q->mm);
  pooler_req_free(&q->pool);
  free(q->req_id);
  free(q->token_ids);
  free(q->block_ids);
  free(q);
}

/* ---- create / destroy ---- */

/* SIM: the cost model and the tokens a step may emit (the model's tokenizer, read once). */
static llb_status sim_setup(struct model_runner *r, const struct model_runner_config *cfg) {
  if (cfg->sim_cost) r->sim_cost = *cfg->sim_cost;
  else sim_cost_model_default(&r->sim_cost);
  struct tokenizer *tok = NULL;
  llb_status st = tokenizer_load(cfg->gguf, &tok);
  if (!st) st = sim_vocab_from_tokenizer(tok, &r->sim_vocab);
  tokenizer_destroy(tok);
  return st ? LLB_ERRF(st, "device sim: the model's tokenizer: %s", llb_err_last()) : st;
}

llb_status model_runner_create(const struct llama_model *m, const struct model_runner_config *cfg,
                               struct model_runner **out) {
  *out = NULL;
  if (!cfg || (cfg->device != MODEL_RUNNER_DEVICE_CPU && cfg->device != MODEL_RUNNER_DEVICE_CUDA &&
               cfg->device != MODEL_RUNNER_DEVICE_SIM))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model runner: no config, or an unknown device");
  const bool cuda = cfg->device == MODEL_RUNNER_DEVICE_CUDA, sim = cfg->device == MODEL_RUNNER_DEVICE_SIM;
  if (cuda || sim ? !cfg->gguf : !m)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "model runner: device %s needs %s",
                    model_runner_device_name(cfg->device), cuda || sim ? "the GGUF file (cfg.gguf)" : "a loaded model");
  const bool sized = cuda || (!sim && cfg->kv_cache_memory_bytes > 0); /* num_blocks 0 allowed */
  if (cfg->num_blocks < (sized ? 0 : 1) || cfg->kv_cache_memory_bytes < 0 || cfg->block_size < 1 || cfg->max_num_batched_tokens < 1 ||
      cfg->num_threads < 1 || !(cfg->gpu_memory_utilization >= 0.0f && cfg->gpu_memory_utilization <= 1.0f))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "model runner config: num_blocks %d, block_size %d, max_num_batched_tokens %d, "
                    "num_threads %d (all must be >= 1; num_blocks 0 only on cuda or with kv_cache_memory_bytes), "
                    "gpu_memory_utilization %g "
                    "(0 = default, else (0, 1])",
                    cfg->num_blocks, cfg->block_size, cfg->max_num_batched_tokens, cfg->num_threads,
                    (double)cfg->gpu_memory_utilization);
  llb_status cst = ngram_proposer_config_check(&cfg->spec);
  if (cst) return cst;
  if ((cuda || sim) && cfg->spec.num_speculative_tokens > 0) /* device logits hold one row per sequence */
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "speculative decoding (--speculative-config) runs on --device cpu only");
  struct model_runner *r = calloc(1, sizeof(*r));
  if (!r) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "model runner allocation");
  r->cfg = *cfg;
  r->cfg.gguf = NULL; /* borrowed for this call only */
  r->cfg.sim_cost = NULL;
  llb_status st = runner_backend_create(&r->be, m, cfg);
  if (st) goto fail;
  if (sim && (st = sim_setup(r, cfg))) goto fail;
  r->cfg.num_blocks = r->be.num_blocks; /* sized from device memory when 0 */
  const struct llama_config *c = r->be.config;
  r->vocab_size = c->vocab_size;
  if ((st = sampler_create(c->vocab_size, &r->sampler))) goto fail;
  r->hidden_size = c->embedding_length;
  pooler_step_init(&r->pool, cfg->max_num_batched_tokens, c->embedding_length);
  if ((st = mm_encoder_cache_create(c->embedding_length, &r->mm))) goto fail;
  const size_t nt = (size_t)cfg->max_num_batched_tokens;
  r->token_ids = malloc(nt * sizeof(int32_t));
  r->positions = malloc(nt * sizeof(int32_t));
  r->slot_mapping = malloc(nt * sizeof(int64_t));
  if (!r->token_ids || !r->positions || !r->slot_mapping) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "model runner allocation");
    goto fail;
  }
  *out = r;
  return LLB_STATUS_OK;
fail:
  model_runner_destroy(r);
  return st;
}

void model_runner_idle(struct model_runner *r) {
  if (r && r->be.fwd) llama_forward_ctx_idle(r->be.fwd);
}

void model_runner_destroy(struct model_runner *r) {
  if (!r) return;
  for (int32_t i = 0; i < r->rows_cap; i++)
    if (r->rows[i]) runner_so_req_free(r->so, &r->rows[i]->so);
  for (int32_t i = 0; i < r->rows_cap; i++) free_request(r->rows[i]);
  free(r->rows); free(r->row_removed); free(r->row_cached); free(r->row_sched);
  free(r->cached_row); free(r->sched); free(r->token_ids); free(r->positions);
  free(r->slot_mapping); free(r->query_start_loc); free(r->seq_lens); free(r->logits_indices);
  free(r->logits_rows); free(r->block_tables); free(r->logits); free(r->out_req_ids);
  free(r->out_num_sampled); free(r->out_sampled); free(r->results); free(r->lp_token_ids);
  free(r->lp_logprobs); free(r->lp_ranks); prompt_logprobs_free(&r->plp);
  free(r->so_rows); free(r->so_masks); free(r->so_row_of_logits);
  runner_so_destroy(r->so);
  sampler_destroy(r->sampler);
  mm_encoder_cache_destroy(r->mm);
  free(r->embeds);
  free(r->embeds_mask);
  pooler_step_free(&r->pool);
  free(r->out_num_pooled);
  free(r->logits_used);
  free(r->out_num_spec);
  free(r->out_spec_ids);
  free(r->lora_ids);
  free(r->loras);
  free(r->seq_loras);
  runner_backend_destroy(&r->be);
  sim_vocab_free(&r->sim_vocab);
  free(r);
}

int64_t model_runner_kv_cache_bytes(const struct model_runner *r) { return r->be.kv_bytes; }

int32_t model_runner_num_blocks(const struct model_runner *r) { return r->cfg.num_blocks; }

void model_runner_kv_geometry(const struct model_runner *r, struct model_runner_kv_geometry *out) {
  const struct llama_config *c = r->be.config;
  *out = (struct model_runner_kv_geometry){
      .num_blocks = r->cfg.num_blocks, .block_size = r->cfg.block_size, .num_layers = c->block_count,
      .num_kv_heads = c->head_count_kv, .head_dim = c->head_dim, .dtype = r->cfg.kv_cache_dtype,
      .block_bytes = backend_kv_row_bytes(r->cfg.kv_cache_dtype, c->head_dim) * (size_t)c->head_count_kv *
                     (size_t)r->cfg.block_size * 2 * (size_t)c->block_count};
}

/* SIM and CUDA: the checks llama_kv_cache_block_read/_write make for a host cache. */
static llb_status kv_block_io_check(const struct model_runner *r, int32_t block_id, size_t len) {
  if (r->cfg.device == MODEL_RUNNER_DEVICE_CUDA)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "KV block transfer needs the CPU cache; the CUDA runner has none yet");
  struct model_runner_kv_geometry g;
  model_runner_kv_geometry(r, &g);
  if (block_id < 0 || block_id >= g.num_blocks)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache block %d outside [0, %d)", block_id, g.num_blocks);
  if (len != g.block_bytes)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache block of %zu bytes, not %zu", len, g.block_bytes);
  return LLB_STATUS_OK;
}

llb_status model_runner_kv_block_read(const struct model_runner *r, int32_t block_id, void *dst, size_t len) {
  if (r->cfg.device == MODEL_RUNNER_DEVICE_CPU) return llama_kv_cache_block_read(r->be.kv, block_id, dst, len);
  llb_status st = kv_block_io_check(r, block_id, len);
  if (!st) memset(dst, 0, len); /* SIM: no KV memory; the bytes of the real size still travel */
  return st;
}

llb_status model_runner_kv_block_write(struct model_runner *r, int32_t block_id, const void *src, size_t len) {
  if (r->cfg.device == MODEL_RUNNER_DEVICE_CPU) return llama_kv_cache_block_write(r->be.kv, block_id, src, len);
  (void)src;
  return kv_block_io_check(r, block_id, len);
}

const struct llama_config *model_runner_model_config(const struct model_runner *r) { return r->be.config; }

int32_t model_runner_num_reqs(const struct model_runner *r) { return r->num_rows; }

const struct llama_batch *model_runner_last_batch(const struct model_runner *r) { return &r->batch; }

struct sim_step_shape model_runner_last_step_shape(const struct model_runner *r) { return r->last_shape; }

llb_status model_runner_set_structured_vocab(struct model_runner *r, struct so_vocab *vocab) {
  runner_so_destroy(r->so);
  r->so = NULL;
  return runner_so_create(vocab, &r->so);
}

llb_status model_runner_set_loras(struct model_runner *r, const int32_t *ids, const struct llama_lora *const *adapters,
                                  int32_t n) {
  if (n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapters: a count of %d", n);
  if (n > 0 && r->cfg.device != MODEL_RUNNER_DEVICE_CPU)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "LoRA adapters run on the cpu device only, not %s",
                    model_runner_device_name(r->cfg.device));
  for (int32_t i = 0; i < n; i++) {
    if (ids[i] < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapter %d: lora_int_id %d < 1", i, ids[i]);
    for (int32_t j = 0; j < i; j++)
      if (ids[j] == ids[i]) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapters: lora_int_id %d twice", ids[i]);
    if (llama_lora_rank(adapters[i]) > r->cfg.max_lora_rank)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapter %d: rank %d over max_lora_rank %d", ids[i],
                      llama_lora_rank(adapters[i]), r->cfg.max_lora_rank);
  }
  int32_t *ni = n ? malloc((size_t)n * sizeof *ni) : NULL;
  const struct llama_lora **na = n ? malloc((size_t)n * sizeof *na) : NULL;
  if (n && (!ni || !na)) {
    free(ni);
    free(na);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA adapters: %d", n);
  }
  for (int32_t i = 0; i < n; i++) {
    ni[i] = ids[i];
    na[i] = adapters[i];
  }
  free(r->lora_ids);
  free(r->loras);
  r->lora_ids = ni;
  r->loras = na;
  r->num_loras = n;
  return LLB_STATUS_OK;
}

void model_runner_set_reasoning_markers(struct model_runner *r, enum reasoning_parser p,
                                        const struct reasoning_marker_ids *m) {
  if (r->so) runner_so_set_reasoning_markers(r->so, p, m);
}

void model_runner_last_mask_seconds(const struct model_runner *r, double *mask_seconds, double *wait_seconds) {
  *mask_seconds = r->so_mask_seconds;
  *wait_seconds = r->so_wait_seconds;
}

void model_runner_set_image_encoder(struct model_runner *r, struct clip_model *clip) {
  mm_encoder_cache_set_image_encoder(r->mm, clip);
}

int32_t model_runner_num_encoder_outputs(const struct model_runner *r) { return mm_encoder_cache_num_entries(r->mm); }

uint64_t model_runner_num_encoded(const struct model_runner *r) { return mm_encoder_cache_num_encoded(r->mm); }

/* Grows every per-row / per-entry scratch array to hold n entries. */
/* ---- phase 2: apply (only OUT_OF_MEMORY can fail) ---- */

static bool set_tokens(struct mr_request *q, const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
  if (!mr_grow((void **)&q->token_ids, &q->token_cap, na + nb + 1, sizeof(int32_t))) return false;
  if (na) memcpy(q->token_ids, a, (size_t)na * sizeof(int32_t));
  if (nb) memcpy(q->token_ids + na, b, (size_t)nb * sizeof(int32_t));
  q->num_tokens = na + nb;
  return true;
}

static bool append_blocks(struct mr_request *q, const int32_t *ids, int32_t n) {
  int64_t cap = q->block_cap;
  if (!mr_grow((void **)&q->block_ids, &cap, (int64_t)q->num_block_ids + n, sizeof(int32_t))) return false;
  q->block_cap = (int32_t)cap;
  if (n) memcpy(q->block_ids + q->num_block_ids, ids, (size_t)n * sizeof(int32_t));
  q->num_block_ids += n;
  return true;
}

static llb_status add_new(struct model_runner *r, const struct llb_new_request_data *nr) {
  if (r->num_rows == r->rows_cap) {
    const int32_t cap = r->rows_cap > 0 ? 2 * r->rows_cap : 16;
    struct mr_request **rows = realloc(r->rows, (size_t)cap * sizeof(*rows));
    if (!rows) return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "batch rows");
    for (int32_t i = r->rows_cap; i < cap; i++) rows[i] = NULL;
    r->rows = rows;
    r->rows_cap = cap;
  }
  if (!r->rows[r->num_rows] && !(r->rows[r->num_rows] = calloc(1, sizeof(struct mr_request))))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "request row");
  struct mr_request *q = r->rows[r->num_rows];
  int64_t idcap = (int64_t)q->req_id_cap;
  if (!mr_grow((void **)&q->req_id, &idcap, (int64_t)nr->req_id.len + 1, 1))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "request id");
  q->req_id_cap = (size_t)idcap;
  memcpy(q->req_id, nr->req_id.data, nr->req_id.len);
  q->req_id[nr->req_id.len] = '\0';
  q->req_id_len = nr->req_id.len;
  q->num_prompt_tokens = nr->num_prompt_token_ids;
  if (!set_tokens(q, nr->prompt_token_ids, nr->num_prompt_token_ids, nr->output_token_ids,
                  nr->num_output_token_ids))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "request tokens");
  q->num_block_ids = 0;
  if (!append_blocks(q, nr->block_ids, nr->num_block_ids)) return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "blocks");
  q->num_computed_tokens = nr->num_computed_tokens;
  q->stepped = false;
  mr_sampler_params(nr->sampling_params, &q->sampler_params);
  q->prompt_logprobs = nr->sampling_params->prompt_logprobs;
  q->lora = nr->lora_request.lora_int_id ? mr_find_lora(r, nr->lora_request.lora_int_id) : NULL; /* checked */
  if (r->cfg.device == MODEL_RUNNER_DEVICE_SIM)
    q->sim_key = sim_request_key(nr->sampling_params, nr->prompt_token_ids, nr->num_prompt_token_ids);
  runner_so_req_free(r->so, &q->so);
  llb_status sst = runner_so_req_init(r->so, &q->so, &nr->structured_outputs, q->token_ids, q->num_prompt_tokens);
  if (sst) return mr_fail(r, sst, "structured_outputs", "%s", llb_err_last());
  if (pooler_req_reset(&q->pool, &nr->pooling_params, r->hidden_size))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "pooling state: %s", llb_err_last());
  free_mm(q);
  if (!mr_grow((void **)&q->mm, &q->mm_cap, nr->num_mm_features, sizeof(*q->mm)))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "mm features");
  for (int32_t k = 0; k < nr->num_mm_features; k++) {
    const struct llb_mm_feature *f = &nr->mm_features[k];
    char *h = malloc(f->mm_hash.len + 1);
    if (!h) return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "mm hash");
    memcpy(h, f->mm_hash.data, f->mm_hash.len + 1);
    struct mr_mm *m = &q->mm[q->num_mm++];
    *m = (struct mr_mm){.offset = f->offset, .length = f->length, .hash = h, .num_embeds = f->length};
    if (f->num_is_embed > 0) { /* the codec checked num_is_embed == length */
      if (!(m->row_of = malloc((size_t)f->length * sizeof *m->row_of)))
        return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "mm is_embed");
      m->num_embeds = 0;
      for (int32_t i = 0; i < f->length; i++) m->row_of[i] = f->is_embed[i] ? m->num_embeds++ : -1;
    }
  }
  r->num_rows++;
  return LLB_STATUS_OK;
}

static llb_status apply_updates(struct model_runner *r, const struct llb_scheduler_output *so) {
  const struct llb_cached_request_data *cd = &so->scheduled_cached_reqs;
  int64_t tok_off = 0, blk_off = 0;
  for (int32_t j = 0; j < cd->num_reqs; j++) {
    struct mr_request *q = r->rows[r->cached_row[j]];
    const int32_t ntok = cd->new_token_counts ? cd->new_token_counts[j] : 0;
    const int32_t nblk = cd->new_block_counts ? cd->new_block_counts[j] : 0;
    const int64_t outputs = q->num_tokens - q->num_prompt_tokens;
    const int64_t want = cd->num_output_tokens ? cd->num_output_tokens[j] : outputs;
    /* Pipeline-parallel tokens the worker did not sample itself, then drop outputs the
     * scheduler did not accept. */
    if (want > outputs) {
      if (!mr_grow((void **)&q->token_ids, &q->token_cap, q->num_prompt_tokens + want + 1, sizeof(int32_t)))
        return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "request tokens");
      memcpy(q->token_ids + q->num_tokens, cd->new_token_ids + tok_off + (ntok - (want - outputs)),
             (size_t)(want - outputs) * sizeof(int32_t));
    }
    if (want < outputs || ntok > 0) q->so.num_accepted = -1; /* its matcher replays them */
    q->num_tokens = q->num_prompt_tokens + want;
    if (cd->resumed_from_preemption && cd->resumed_from_preemption[j]) q->num_block_ids = 0;
    if (!append_blocks(q, cd->new_block_ids + blk_off, nblk)) return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "blocks");
    q->num_computed_tokens = cd->num_computed_tokens[j];
    tok_off += ntok;
    blk_off += nblk;
  }
  /* Condense: fill each removed row with the last live one (vLLM InputBatch.condense). */
  for (int32_t i = r->num_rows - 1; i >= 0; i--) {
    if (!r->row_removed[i]) continue;
    runner_so_req_free(r->so, &r->rows[i]->so);
    const int32_t last = r->num_rows - 1;
    struct mr_request *tmp = r->rows[i];
    r->rows[i] = r->rows[last];
    r->rows[last] = tmp;
    r->row_removed[i] = r->row_removed[last];
    r->num_rows--;
  }
  for (int32_t i = 0; i < so->num_scheduled_new_reqs; i++) {
    llb_status st = add_new(r, &so->scheduled_new_reqs[i]);
    if (st) return st;
  }
  return LLB_STATUS_OK;
}

/* ---- phase 3: flattened batch, forward, sampling ---- */

/* vLLM _gather_mm_embeddings for one request: the slices of its items' cached outputs that
 * overlap its scheduled tokens [start, start + len) go to rows [at, at + len) of r->embeds. */
static llb_status gather_mm(struct model_runner *r, const struct mr_request *q, int32_t start, int32_t len,
                            int32_t at, bool *any) {
  const size_t nt = (size_t)r->cfg.max_num_batched_tokens, hs = (size_t)r->hidden_size;
  if (!r->embeds) {
    r->embeds = malloc(nt * hs * sizeof(float));
    r->embeds_mask = malloc(nt);
    if (!r->embeds || !r->embeds_mask) return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "input embeddings");
  }
  if (!*any) memset(r->embeds_mask, 0, nt);
  for (int64_t k = 0; k < q->num_mm; k++) {
    const struct mr_mm *m = &q->mm[k];
    const int32_t lo = m->offset > start ? m->offset : start;
    const int32_t hi = m->offset + m->length < start + len ? m->offset + m->length : start + len;
    if (lo >= hi) continue;
    int32_t rows = 0;
    const float *out = mm_encoder_cache_get(r->mm, llb_str_c(m->hash), &rows);
    if (!out || rows != m->num_embeds)
      return mr_fail(r, LLB_STATUS_NOT_FOUND, "scheduled_encoder_inputs",
                  "request \"%s\": encoder output of item %s is not cached (never scheduled, or freed)",
                  q->req_id, m->hash);
    *any = true;
    if (!m->row_of) {
      memcpy(r->embeds + (size_t)(at + lo - start) * hs, out + (size_t)(lo - m->offset) * hs,
             (size_t)(hi - lo) * hs * sizeof(float));
      memset(r->embeds_mask + at + lo - start, 1, (size_t)(hi - lo));
      continue;
    }
    /* vLLM v1 PlaceholderRange.is_embed: only the marked positions take rows, in order */
    for (int32_t p = lo; p < hi; p++) {
      const int32_t row = m->row_of[p - m->offset];
      if (row < 0) continue;
      memcpy(r->embeds + (size_t)(at + p - start) * hs, out + (size_t)row * hs, hs * sizeof(float));
      r->embeds_mask[at + p - start] = 1;
    }
  }
  return LLB_STATUS_OK;
}

static llb_status prepare_inputs(struct model_runner *r, const struct llb_scheduler_output *so, int32_t *num_seqs) {
  for (int32_t i = 0; i < r->num_rows; i++) r->row_sched[i] = r->rows[i]->num_spec = 0;
  int32_t num_drafts = 0;
  for (int32_t k = 0; k < so->num_scheduled_reqs; k++) {
    const struct llb_scheduled_tokens *t = &so->num_scheduled_tokens[k];
    if (t->num_tokens <= 0) continue;
    const int32_t row = mr_find_row(r, t->req_id);
    r->row_sched[row] = t->num_tokens;
    struct mr_request *q = r->rows[row]; /* drafts (checked in phase 1): room after the outputs */
    if (t->num_spec_token_ids > 0) {
      if (!mr_grow((void **)&q->token_ids, &q->token_cap, q->num_tokens + t->num_spec_token_ids + 1, sizeof(int32_t)))
        return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "request tokens");
      memcpy(q->spec_ids, t->spec_token_ids, (size_t)t->num_spec_token_ids * sizeof(int32_t));
      q->num_spec = t->num_spec_token_ids;
      num_drafts += q->num_spec;
    }
  }
  int32_t ns = 0, max_blocks = 1;
  for (int32_t i = 0; i < r->num_rows; i++)
    if (r->row_sched[i] > 0) {
      ns++;
      if (r->rows[i]->num_block_ids > max_blocks) max_blocks = r->rows[i]->num_block_ids;
    }
  const bool sim = r->cfg.device == MODEL_RUNNER_DEVICE_SIM; /* computes no logits */
  if (!mr_grow((void **)&r->block_tables, &r->block_tables_cap, (int64_t)ns * max_blocks, sizeof(int32_t)) ||
      (!sim && !mr_grow((void **)&r->logits, &r->logits_cap, (int64_t)(ns + num_drafts) * r->vocab_size, sizeof(float))))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "batch of %d requests", ns);
  const int32_t bs = r->cfg.block_size;
  int32_t s = 0, n = 0, nl = 0;
  bool any_mm = false, any_lora = false;
  pooler_step_begin(&r->pool);
  prompt_logprobs_reset(&r->plp);
  r->query_start_loc[0] = 0;
  for (int32_t i = 0; i < r->num_rows; i++) {
    const int32_t len = r->row_sched[i];
    if (len <= 0) continue;
    const struct mr_request *q = r->rows[i];
    const int32_t start = q->num_computed_tokens;
    for (int32_t t = 0; t < len; t++) {
      const int32_t pos = start + t;
      r->token_ids[n + t] = pos < q->num_tokens ? q->token_ids[pos] : q->spec_ids[pos - q->num_tokens];
      r->positions[n + t] = pos;
      r->slot_mapping[n + t] = (int64_t)q->block_ids[pos / bs] * bs + pos % bs;
    }
    if (q->num_mm > 0) {
      llb_status st = gather_mm(r, q, start, len, n, &any_mm);
      if (st) return st;
    }
    if (prompt_logprobs_add(&r->plp, q->prompt_logprobs, q->token_ids, q->num_prompt_tokens,
                            start, len, n))
      return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "prompt logprobs");
    r->seq_loras[s] = q->lora;
    any_lora |= q->lora != NULL;
    int32_t *bt = r->block_tables + (int64_t)s * max_blocks;
    memcpy(bt, q->block_ids, (size_t)q->num_block_ids * sizeof(int32_t));
    for (int32_t b = q->num_block_ids; b < max_blocks; b++) bt[b] = 0;
    n += len;
    r->seq_lens[s] = start + len;
    r->query_start_loc[s + 1] = n;
    if (pooler_req_active(&r->rows[i]->pool)) { /* pools its prompt, samples nothing */
      if (pooler_step_add_chunk(&r->pool, &r->rows[i]->pool, start, len, (int32_t)q->num_prompt_tokens, n - len))
        return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "%s", llb_err_last());
    } else if (start + len == q->num_tokens + q->num_spec) { /* reaches the end: sample; else a partial prefill */
      for (int32_t j = q->num_spec; j >= 0; j--) { /* a draft's row is verified, then the bonus */
        r->logits_indices[nl] = n - 1 - j;
        r->logits_rows[nl++] = i;
      }
    }
    s++;
  }
  r->num_sample_logits = nl; /* the prompt rows' logits follow the sampled ones */
  const int32_t *indices = NULL;
  if (prompt_logprobs_indices(&r->plp, r->logits_indices, r->num_sample_logits, &indices, &nl) ||
      (!sim && !mr_grow((void **)&r->logits, &r->logits_cap, (int64_t)nl * r->vocab_size, sizeof(float))))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "logits of %d rows", nl);
  r->batch = (struct llama_batch){
      .num_tokens = n, .token_ids = r->token_ids, .positions = r->positions, .slot_mapping = r->slot_mapping,
      .num_seqs = ns, .query_start_loc = r->query_start_loc, .seq_lens = r->seq_lens,
      .block_tables = r->block_tables, .max_blocks_per_seq = max_blocks, .num_logits = nl,
      .logits_indices = indices, .input_embeds = any_mm ? r->embeds : NULL,
      .embeds_mask = any_mm ? r->embeds_mask : NULL, .num_hidden = r->pool.num_rows,
      .hidden_indices = r->pool.indices, .hidden_states = r->pool.hidden,
      .seq_loras = any_lora ? r->seq_loras : NULL};
  *num_seqs = ns;
  return LLB_STATUS_OK;
}

/* The constrained rows among this step's logits rows: r->so_rows (request, outputs, mask
 * slot) and r->so_row_of_logits. Returns how many, or -1 when out of memory. */
static int32_t so_collect(struct model_runner *r) {
  int32_t n = 0;
  const int64_t words = r->so ? runner_so_mask_words(r->so) : 0;
  for (int32_t l = 0; l < r->num_sample_logits; l++) {
    struct mr_request *q = r->rows[r->logits_rows[l]];
    r->so_row_of_logits[l] = -1;
    if (!q->so.grammar) continue;
    if (!mr_grow((void **)&r->so_rows, &r->so_rows_cap, n + 1, sizeof(*r->so_rows)) ||
        !mr_grow((void **)&r->so_masks, &r->so_masks_cap, (n + 1) * words, sizeof(uint32_t)))
      return -1;
    r->so_rows[n] = (struct runner_so_step_row){.req = &q->so, .outputs = q->token_ids + q->num_prompt_tokens,
                                                .num_outputs = q->num_tokens - q->num_prompt_tokens};
    r->so_row_of_logits[l] = n++;
  }
  for (int32_t k = 0; k < n; k++) r->so_rows[k].mask = r->so_masks + k * words; /* after the last grow */
  return n;
}

/* The forward pass with the step's masks computed beside it on a helper thread (none when no
 * sampled row is constrained), joined before sampling: vLLM overlaps grammar bitmasks with
 * the forward the same way. An output that breaks its grammar fails the step naming it. */
static llb_status forward_with_masks(struct model_runner *r) {
  const int32_t n = so_collect(r);
  if (n < 0) return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "structured output masks");
  struct runner_so_step step;
  runner_so_step_start(&step, r->so, r->so_rows, n);
  llb_status st = runner_backend_forward(&r->be, &r->batch, r->logits);
  const double t0 = n > 0 ? (double)llb_now_ns() : 0;
  runner_so_step_join(&step);
  r->so_mask_seconds = n > 0 ? step.mask_seconds : -1;
  r->so_wait_seconds = n > 0 ? ((double)llb_now_ns() - t0) * 1e-9 : -1;
  if (st) return mr_fail(r, st, "", "forward pass (%s): %s", model_runner_device_name(r->cfg.device), llb_err_last());
  for (int32_t l = 0; l < r->num_sample_logits; l++) {
    const int32_t k = r->so_row_of_logits[l];
    if (k < 0 || r->so_rows[k].status == LLB_STATUS_OK) continue;
    const struct mr_request *q = r->rows[r->logits_rows[l]];
    mr_blame(r, q->req_id, q->req_id_len);
    return mr_fail(r, r->so_rows[k].status, "structured_outputs", "request \"%s\": %s", q->req_id, r->so_rows[k].message);
  }
  return LLB_STATUS_OK;
}

/* Samples every logits row into r->results; every row's logprobs get the batch's largest
 * top-n so that all rows have the same width (vLLM max_num_logprobs). */
static llb_status sample_all(struct model_runner *r, int32_t max_n) {
  llb_status st_width = sampler_set_max_num_logprobs(r->sampler, max_n);
  if (st_width) return mr_fail(r, st_width, "sampling_params.logprobs", "%s", llb_err_last());
  for (int32_t l = 0, rows = 1; l < r->num_sample_logits; l += rows) {
    struct mr_request *q = r->rows[r->logits_rows[l]];
    const struct sampler_params *p = &q->sampler_params;
    rows = 1;
    r->logits_used[l] = 1;
    if (q->num_spec > 0) { /* drafts: rejection sampling over its rows (runner_spec.c) */
      llb_status st = mr_spec_sample(r, q, p, l, &rows);
      if (st) return st;
      for (int32_t j = 0; max_n >= 0 && j < rows; j++) {
        const float *row = r->logits + (int64_t)(l + j) * r->vocab_size;
        const float v = row[r->results[l + j].token_id];
        int32_t rank = 0;
        for (int32_t t = 0; t < r->vocab_size; t++) rank += row[t] >= v;
        r->lp_ranks[l + j] = rank;
      }
      continue;
    }
    float *row = r->logits + (int64_t)l * r->vocab_size;
    if (r->so_row_of_logits[l] >= 0 && r->so_rows[r->so_row_of_logits[l]].masked) /* the grammar first, as vLLM */
      runner_so_apply_mask(row, r->vocab_size, r->so_rows[r->so_row_of_logits[l]].mask, runner_so_vocab_size(r->so));
    const int64_t num_out = q->num_tokens - q->num_prompt_tokens;
    llb_status st = sampler_sample(r->sampler, p, row, q->token_ids, q->num_prompt_tokens,
                                   q->token_ids + q->num_prompt_tokens, num_out, 0, num_out, &r->results[l]);
    if (st) {
      char field[160];
      snprintf(field, sizeof(field), "sampling_params of \"%s\"", q->req_id);
      mr_blame(r, q->req_id, q->req_id_len); /* NaN logits or bad params: this request's input */
      return mr_fail(r, st, field, "sampling failed: %s", llb_err_last());
    }
    if (max_n >= 0) { /* rank: vLLM counts logprobs >= the sampled one (1-based) */
      const float v = row[r->results[l].token_id];
      int32_t rank = 0;
      for (int32_t t = 0; t < r->vocab_size; t++) rank += row[t] >= v;
      r->lp_ranks[l] = rank;
    }
  }
  return LLB_STATUS_OK;
}

static llb_status fill_logprobs(struct model_runner *r, int32_t max_n, struct llb_model_runner_output *out) {
  const int32_t cols = 1 + max_n;
  int32_t rows = 0; /* the rows whose token is an output (a rejected draft's later rows are not) */
  for (int32_t l = 0; l < r->num_sample_logits; l++) rows += r->logits_used[l];
  if (!mr_grow((void **)&r->lp_token_ids, &r->lp_ids_cap, (int64_t)rows * cols, sizeof(int32_t)) ||
      !mr_grow((void **)&r->lp_logprobs, &r->lp_cap, (int64_t)rows * cols, sizeof(float)))
    return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "logprobs");
  for (int32_t l = 0, o = 0; l < r->num_sample_logits; l++) {
    if (!r->logits_used[l]) continue;
    const struct sampler_result *res = &r->results[l];
    int32_t *ids = r->lp_token_ids + (int64_t)o * cols;
    float *lps = r->lp_logprobs + (int64_t)o * cols;
    ids[0] = res->token_id;
    lps[0] = res->logprob;
    for (int32_t c = 0; c < max_n; c++) {
      ids[1 + c] = c < res->num_top ? res->top[c].token_id : -1;
      lps[1 + c] = c < res->num_top ? res->top[c].logprob : -INFINITY;
    }
    r->lp_ranks[o++] = r->lp_ranks[l]; /* o <= l: in place */
  }
  out->logprobs = (struct llb_logprobs_lists){.num_tokens = rows, .num_logprobs_per_token = cols,
                                              .logprob_token_ids = r->lp_token_ids, .logprobs = r->lp_logprobs,
                                              .sampled_token_ranks = r->lp_ranks};
  return LLB_STATUS_OK;
}

/* SIM: the step's modelled time, spent asleep from start_ns (what the work so far took is
 * part of it), then a token for every sampled row from its request's key (runner_sim.h). */
static void sim_step(struct model_runner *r, int64_t start_ns) {
  sim_wait_until(start_ns + (int64_t)(sim_cost_seconds(&r->sim_cost, &r->last_shape) * 1e9));
  for (int32_t l = 0; l < r->num_sample_logits; l++) {
    const struct mr_request *q = r->rows[r->logits_rows[l]];
    r->logits_used[l] = 1;
    r->results[l] = (struct sampler_result){
        .token_id = sim_token(&r->sim_vocab, q->sim_key, q->num_tokens - q->num_prompt_tokens)};
  }
}

static llb_status run_step(struct model_runner *r, const struct llb_scheduler_output *so,
                           struct llb_model_runner_output *out) {
  const int64_t start_ns = llb_now_ns();
  llb_status st = mr_check_output(r, so);
  if (!st) st = apply_updates(r, so);
  if (st) return st;
  /* vLLM _update_states + _execute_mm_encoder: drop evicted outputs, then encode. */
  for (int32_t i = 0; i < so->num_free_encoder_mm_hashes; i++)
    mm_encoder_cache_drop(r->mm, so->free_encoder_mm_hashes[i]);
  for (int32_t i = 0; i < so->num_scheduled_encoder_inputs; i++) {
    const struct llb_scheduled_encoder_input *e = &so->scheduled_encoder_inputs[i];
    for (int32_t k = 0; k < e->num_mm_features; k++)
      if ((st = mm_encoder_cache_encode(r->mm, &e->mm_features[k]))) {
        if (st != LLB_STATUS_OUT_OF_MEMORY) mr_blame(r, e->req_id.data, e->req_id.len);
        return mr_fail(r, st, "scheduled_encoder_inputs", "encoding: %s", llb_err_last());
      }
  }
  int32_t ns = 0;
  if ((st = prepare_inputs(r, so, &ns))) return st;
  if (ns == 0) return LLB_STATUS_OK;
  r->last_shape = sim_step_shape_of(&r->batch); /* what a sim step of this batch costs, any device */
  for (int32_t l = 0; l < r->num_sample_logits; l++)
    r->last_shape.num_random += r->rows[r->logits_rows[l]]->sampler_params.temperature >= SAMPLER_GREEDY_EPS;
  r->last_shape.first = 1; /* every scheduled sequence starts now: the first step after idle */
  for (int32_t i = 0; i < r->num_rows; i++)
    if (r->row_sched[i] > 0 && r->rows[i]->stepped) r->last_shape.first = 0;
  if (r->cfg.device == MODEL_RUNNER_DEVICE_SIM) {
    sim_step(r, start_ns);
  } else {
    if ((st = forward_with_masks(r))) return st;
    int32_t max_n = -1;
    for (int32_t l = 0; l < r->num_sample_logits; l++) {
      const int32_t n = r->rows[r->logits_rows[l]]->sampler_params.logprobs;
      if (n > max_n) max_n = n;
    }
    if ((st = sample_all(r, max_n))) return st;
    if (max_n >= 0 && (st = fill_logprobs(r, max_n, out))) return st;
    if ((st = prompt_logprobs_compute(&r->plp, r->logits + (int64_t)r->num_sample_logits * r->vocab_size,
                                      r->vocab_size)))
      return mr_fail(r, st, "", "prompt logprobs: %s", llb_err_last());
  }
  /* Everything sampled: now append (a failure above leaves the requests unchanged). */
  pooler_step_accumulate(&r->pool);
  int32_t l = 0, k = 0, o = 0, spec_off = 0;
  for (int32_t i = 0; i < r->num_rows; i++) {
    if (r->row_sched[i] <= 0) continue;
    struct mr_request *q = r->rows[i];
    q->num_computed_tokens += r->row_sched[i];
    q->stepped = true;
    r->out_req_ids[k] = (struct llb_str){q->req_id, q->req_id_len};
    r->out_num_sampled[k] = 0;
    r->out_num_pooled[k] = 0;
    if (pooler_req_active(&q->pool) && q->num_computed_tokens == q->num_tokens && /* prompt done */
        (st = pooler_step_finish(&r->pool, &q->pool, &r->out_num_pooled[k]))) {
      if (st != LLB_STATUS_OUT_OF_MEMORY) mr_blame(r, q->req_id, q->req_id_len); /* a non-finite vector */
      return mr_fail(r, st, "pooling_params", "request \"%s\": %s", q->req_id, llb_err_last());
    }
    r->out_num_spec[k] = 0;
    if (l < r->num_sample_logits && r->logits_rows[l] == i) {
      if (!mr_grow((void **)&q->token_ids, &q->token_cap, q->num_tokens + q->num_spec + 1, sizeof(int32_t)))
        return mr_fail(r, LLB_STATUS_OUT_OF_MEMORY, "", "request tokens");
      for (; l < r->num_sample_logits && r->logits_rows[l] == i; l++) /* 1, or accepted drafts + 1 */
        if (r->logits_used[l]) {
          q->token_ids[q->num_tokens++] = r->results[l].token_id;
          r->out_sampled[o++] = r->results[l].token_id;
          r->out_num_sampled[k]++;
        }
      if (q->num_spec > 0) /* rejected drafts: their KV slots are overwritten next step (the scheduler rolls back too) */
        q->num_computed_tokens -= q->num_spec + 1 - r->out_num_sampled[k];
      if ((st = mr_spec_propose(r, q, k, &spec_off))) return st; /* drafts for its next step */
    }
    k++;
  }
  out->req_ids = r->out_req_ids;
  out->num_reqs = k;
  out->sampled_token_ids = r->out_sampled;
  out->num_sampled_token_ids = o;
  out->spec_token_ids = spec_off ? r->out_spec_ids : NULL;
  out->num_spec_token_ids = spec_off;
  out->num_spec_tokens = spec_off ? r->out_num_spec : NULL;
  out->num_sampled = r->out_num_sampled;
  out->pooler_output = r->pool.num_out ? r->pool.out : NULL;
  out->num_pooler_output = (int32_t)r->pool.num_out;
  out->num_pooled = r->pool.num_out ? r->out_num_pooled : NULL;
  prompt_logprobs_output(&r->plp, out);
  return LLB_STATUS_OK;
}

llb_status model_runner_execute(struct model_runner *r, const struct llb_scheduler_output *so,
                                struct llb_model_runner_output *out) {
  *out = (struct llb_model_runner_output){.version = LLB_SCHEMA_VERSION, .step = so->step};
  r->batch.num_tokens = 0;
  r->last_shape = (struct sim_step_shape){0};
  r->so_mask_seconds = r->so_wait_seconds = -1;
  r->err_message[0] = r->err_field[0] = r->err_req_id[0] = '\0';
  llb_status st = run_step(r, so, out);
  if (st) {
    *out = (struct llb_model_runner_output){.version = LLB_SCHEMA_VERSION, .step = so->step};
    if (!r->err_message[0]) snprintf(r->err_message, sizeof(r->err_message), "%s", llb_err_last());
    out->error = (struct llb_error_info){.code = (int32_t)st, .message = llb_str_c(r->err_message),
                                         .field = llb_str_c(r->err_field)};
    out->failed_req_id = llb_str_c(r->err_req_id);
  }
  return st;
}
