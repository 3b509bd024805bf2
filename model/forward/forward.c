/* LLaMA forward pass against kernels/backend.h (llama.cpp llm_build_llama, vLLM v1 batch). */
#include "model/forward/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/forward/forward_device.h"
#include "model/forward/forward_internal.h"
#include "model/forward/packed_cache.h"

/* ---------------------------------------------------------------- model */

static llb_status weight_view(const struct gguf_file *f, const char *name, int64_t cols, int64_t rows,
                              struct backend_weight *out) {
  const struct gguf_tensor *t = gguf_find_tensor(f, name);
  if (!t) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "tensor %s missing", name);
  switch (t->type) {
  case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0:
  case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
  case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
  case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS: break;
  default:
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "tensor %s has type %s, no matmul for it", name,
                    ggml_type_name(t->type));
  }
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s is [%lld, %lld], expected [%lld, %lld]", name,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)cols, (long long)rows);
  size_t row_bytes;
  llb_status st = ggml_row_bytes(t->type, cols, &row_bytes);
  if (st != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s: rows of %lld", name, (long long)cols);
  if (t->size_bytes < row_bytes * (size_t)rows)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s: %zu bytes for %lld rows", name, t->size_bytes,
                    (long long)rows);
  *out = (struct backend_weight){.type = t->type, .rows = rows, .cols = cols, .row_bytes = row_bytes,
                                 .data = t->data};
  return LLB_STATUS_OK;
}

/* Rows [first, first + n) of w: a weight of its own (quantized rows are contiguous). */
static struct backend_weight row_slice(const struct backend_weight *w, int64_t first, int64_t n) {
  struct backend_weight s = *w;
  s.data = (const uint8_t *)w->data + (size_t)first * w->row_bytes;
  s.rows = n;
  return s;
}

static llb_status norm_view(const struct gguf_file *f, const char *name, int64_t n, const float **out) {
  const struct gguf_tensor *t = gguf_find_tensor(f, name);
  if (!t) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "tensor %s missing", name);
  if (t->type != GGML_TYPE_F32)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "norm %s has type %s, expected f32", name, ggml_type_name(t->type));
  if (t->ne[0] != n || t->ne[1] != 1 || t->size_bytes < (size_t)n * sizeof(float))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "norm %s: expected [%lld]", name, (long long)n);
  if ((uintptr_t)t->data % sizeof(float) != 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "norm %s: data not 4-byte aligned", name);
  *out = t->data;
  return LLB_STATUS_OK;
}

llb_status llama_model_load(const struct gguf_file *f, struct llama_model **out) {
  if (!f || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NULL argument");
  *out = NULL;
  llb_status st;
  struct llama_model *m = calloc(1, sizeof(*m));
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "llama_model");
  m->gguf = f;
  st = llama_config_from_gguf(f, &m->cfg);
  if (st != LLB_STATUS_OK) goto fail;
  st = llama_config_check_tensors(f, &m->cfg);
  if (st != LLB_STATUS_OK) goto fail;
  const struct llama_config *c = &m->cfg;
  const int64_t E = c->embedding_length, F = c->feed_forward_length, V = c->vocab_size;
  const int64_t HD = (int64_t)c->head_count * c->head_dim, KD = (int64_t)c->head_count_kv * c->head_dim;
  if (c->block_count < 1 || E < 1 || F < 1 || V < 1 || c->head_count < 1 || c->head_count_kv < 1 ||
      c->head_dim < 2 || c->head_count % c->head_count_kv != 0 || c->rope_dimension_count < 2 ||
      c->rope_dimension_count > c->head_dim || c->rope_dimension_count % 2 != 0 || c->context_length < 1) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "unusable llama config (heads %d/%d, head_dim %d, rope dims %d)",
                  c->head_count, c->head_count_kv, c->head_dim, c->rope_dimension_count);
    goto fail;
  }
  if ((st = weight_view(f, "token_embd.weight", E, V, &m->tok_embd)) != LLB_STATUS_OK) goto fail;
  if (c->tied_embeddings) m->output = m->tok_embd;
  else if ((st = weight_view(f, "output.weight", E, V, &m->output)) != LLB_STATUS_OK) goto fail;
  if ((st = norm_view(f, "output_norm.weight", E, &m->output_norm)) != LLB_STATUS_OK) goto fail;
  if (gguf_find_tensor(f, "rope_freqs.weight") &&
      (st = norm_view(f, "rope_freqs.weight", c->rope_dimension_count / 2, &m->rope_freqs)) != LLB_STATUS_OK)
    goto fail;
  if (c->rope_longrope &&
      ((st = norm_view(f, "rope_factors_long.weight", c->rope_dimension_count / 2, &m->rope_long)) != LLB_STATUS_OK ||
       (st = norm_view(f, "rope_factors_short.weight", c->rope_dimension_count / 2, &m->rope_short)) != LLB_STATUS_OK))
    goto fail;
  m->layers = calloc((size_t)c->block_count, sizeof(*m->layers));
  if (!m->layers) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "llama layers");
    goto fail;
  }
  for (int32_t i = 0; i < c->block_count; i++) {
    struct llama_layer *l = &m->layers[i];
    char n[96];
#define LAYER_TENSOR(suffix) (snprintf(n, sizeof(n), "blk.%d." suffix, i), n)
    if ((st = norm_view(f, LAYER_TENSOR("attn_norm.weight"), E, &l->attn_norm)) != LLB_STATUS_OK ||
        (st = norm_view(f, LAYER_TENSOR("ffn_norm.weight"), E, &l->ffn_norm)) != LLB_STATUS_OK ||
        (st = weight_view(f, LAYER_TENSOR("attn_output.weight"), HD, E, &l->wo)) != LLB_STATUS_OK ||
        (st = weight_view(f, LAYER_TENSOR("ffn_down.weight"), F, E, &l->w_down)) != LLB_STATUS_OK)
      goto fail;
    if (c->fused_qkv) { /* phi3: q, k, v rows of one tensor */
      struct backend_weight qkv;
      if ((st = weight_view(f, LAYER_TENSOR("attn_qkv.weight"), E, HD + 2 * KD, &qkv)) != LLB_STATUS_OK) goto fail;
      l->wq = row_slice(&qkv, 0, HD);
      l->wk = row_slice(&qkv, HD, KD);
      l->wv = row_slice(&qkv, HD + KD, KD);
    } else if ((st = weight_view(f, LAYER_TENSOR("attn_q.weight"), E, HD, &l->wq)) != LLB_STATUS_OK ||
               (st = weight_view(f, LAYER_TENSOR("attn_k.weight"), E, KD, &l->wk)) != LLB_STATUS_OK ||
               (st = weight_view(f, LAYER_TENSOR("attn_v.weight"), E, KD, &l->wv)) != LLB_STATUS_OK) {
      goto fail;
    }
    if (c->fused_gate_up) { /* phi3: gate rows then up rows (ggml_swiglu of the halves) */
      struct backend_weight gu;
      if ((st = weight_view(f, LAYER_TENSOR("ffn_up.weight"), E, 2 * F, &gu)) != LLB_STATUS_OK) goto fail;
      l->w_gate = row_slice(&gu, 0, F);
      l->w_up = row_slice(&gu, F, F);
    } else if ((st = weight_view(f, LAYER_TENSOR("ffn_gate.weight"), E, F, &l->w_gate)) != LLB_STATUS_OK ||
               (st = weight_view(f, LAYER_TENSOR("ffn_up.weight"), E, F, &l->w_up)) != LLB_STATUS_OK) {
      goto fail;
    }
    if (c->attn_qkv_bias &&
        ((st = norm_view(f, LAYER_TENSOR("attn_q.bias"), HD, &l->bq)) != LLB_STATUS_OK ||
         (st = norm_view(f, LAYER_TENSOR("attn_k.bias"), KD, &l->bk)) != LLB_STATUS_OK ||
         (st = norm_view(f, LAYER_TENSOR("attn_v.bias"), KD, &l->bv)) != LLB_STATUS_OK))
      goto fail;
    if (c->attn_qk_norm &&
        ((st = norm_view(f, LAYER_TENSOR("attn_q_norm.weight"), c->head_dim, &l->q_norm)) != LLB_STATUS_OK ||
         (st = norm_view(f, LAYER_TENSOR("attn_k_norm.weight"), c->head_dim, &l->k_norm)) != LLB_STATUS_OK))
      goto fail;
    if (c->post_norms &&
        ((st = norm_view(f, LAYER_TENSOR("post_attention_norm.weight"), E, &l->post_attn_norm)) != LLB_STATUS_OK ||
         (st = norm_view(f, LAYER_TENSOR("post_ffw_norm.weight"), E, &l->post_ffw_norm)) != LLB_STATUS_OK))
      goto fail;
#undef LAYER_TENSOR
  }
  *out = m;
  return LLB_STATUS_OK;
fail:
  llama_model_destroy(m);
  return st;
}

void llama_model_destroy(struct llama_model *m) {
  if (!m) return;
  free(m->layers);
  free(m);
}

const struct llama_config *llama_model_config(const struct llama_model *m) { return &m->cfg; }

/* ---------------------------------------------------------------- KV cache */

/* The cache of m: host memory (calloc) when ops is NULL, else a zeroed buffer of ops on bc. */
static llb_status kv_cache_make(const struct llama_model *m, const struct backend_ops *ops, struct backend_ctx *bc,
                                int32_t num_blocks, int32_t block_size, enum backend_kv_dtype dtype,
                                struct llama_kv_cache **out) {
  if (!m || !out || num_blocks < 1 || block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache of %d blocks of %d", num_blocks, block_size);
  *out = NULL;
  const struct llama_config *c = &m->cfg;
  const size_t rb = backend_kv_row_bytes(dtype, c->head_dim);
  if (rb == 0)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "kv cache dtype %s cannot hold rows of head_dim %d",
                    llama_kv_dtype_name(dtype), c->head_dim);
  const size_t rows = (size_t)num_blocks * (size_t)block_size * (size_t)c->head_count_kv;
  const size_t per_tensor = rows * rb; /* bytes */
  if (rows / (size_t)num_blocks / (size_t)block_size != (size_t)c->head_count_kv || per_tensor / rb != rows ||
      per_tensor > SIZE_MAX / 4 / (size_t)c->block_count)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "kv cache of %d blocks of %d overflows", num_blocks, block_size);
  const size_t bytes = per_tensor * 2 * (size_t)c->block_count;
  llb_status st;
  struct llama_kv_cache *kv = calloc(1, sizeof(*kv));
  if (!kv) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv cache");
  kv->model = m;
  kv->dtype = dtype;
  kv->layers = calloc((size_t)c->block_count, sizeof(*kv->layers));
  if (!kv->layers) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv cache layers");
    goto fail;
  }
  if (ops) {
    if ((st = ops->buffer_alloc(bytes, (void **)&kv->data)) != LLB_STATUS_OK) goto fail;
    kv->ops = ops;
    if ((st = ops->buffer_clear(bc, kv->data, bytes)) != LLB_STATUS_OK) goto fail;
  } else if (!(kv->data = calloc(bytes, 1))) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv cache: %zu bytes", bytes);
    goto fail;
  }
  for (int32_t i = 0; i < c->block_count; i++)
    kv->layers[i] = (struct backend_kv_layer){.k = kv->data + (size_t)(2 * i) * per_tensor,
                                              .v = kv->data + (size_t)(2 * i + 1) * per_tensor,
                                              .num_blocks = num_blocks, .block_size = block_size,
                                              .n_kv_heads = c->head_count_kv, .head_dim = c->head_dim,
                                              .dtype = dtype};
  *out = kv;
  return LLB_STATUS_OK;
fail:
  llama_kv_cache_destroy(kv);
  return st;
}

const char *llama_kv_dtype_name(enum backend_kv_dtype t) {
  switch (t) {
  case BACKEND_KV_DTYPE_F16: return "fp16";
  case BACKEND_KV_DTYPE_Q8_0: return "q8_0";
  case BACKEND_KV_DTYPE_FP8_E4M3: return "fp8";
  default: return "unknown";
  }
}

llb_status llama_kv_dtype_parse(const char *name, enum backend_kv_dtype *out) {
  if (!name || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache dtype: no name");
  if (strcmp(name, "auto") == 0 || strcmp(name, "fp16") == 0 || strcmp(name, "f16") == 0) *out = BACKEND_KV_DTYPE_F16;
  else if (strcmp(name, "q8_0") == 0) *out = BACKEND_KV_DTYPE_Q8_0;
  else if (strcmp(name, "fp8") == 0 || strcmp(name, "fp8_e4m3") == 0) *out = BACKEND_KV_DTYPE_FP8_E4M3;
  else
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache dtype '%s' is not one of auto, fp16, fp8, fp8_e4m3, q8_0",
                    name);
  return LLB_STATUS_OK;
}

size_t llama_kv_cache_block_bytes(const struct llama_model *m, int32_t block_size, enum backend_kv_dtype dtype) {
  const struct llama_config *c = &m->cfg;
  return backend_kv_row_bytes(dtype, c->head_dim) * (size_t)c->head_count_kv * (size_t)block_size * 2 *
         (size_t)c->block_count;
}

llb_status llama_kv_cache_create(const struct llama_model *m, int32_t num_blocks, int32_t block_size,
                                 struct llama_kv_cache **out) {
  return kv_cache_make(m, NULL, NULL, num_blocks, block_size, BACKEND_KV_DTYPE_F16, out);
}

llb_status llama_kv_cache_create_dtype_for(const struct llama_forward_ctx *c, int32_t num_blocks,
                                           int32_t block_size, enum backend_kv_dtype dtype,
                                           struct llama_kv_cache **out) {
  if (!c) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache: no forward context");
  if (dtype != BACKEND_KV_DTYPE_F16 && !(c->ops->kv_dtype_ok && c->ops->kv_dtype_ok(dtype)))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "the %s backend has no %s kv cache", c->ops->name,
                    llama_kv_dtype_name(dtype));
  if (c->ops->host_memory) return kv_cache_make(c->m, NULL, NULL, num_blocks, block_size, dtype, out);
  return kv_cache_make(c->m, c->ops, c->bc, num_blocks, block_size, dtype, out);
}

llb_status llama_kv_cache_create_for(const struct llama_forward_ctx *c, int32_t num_blocks, int32_t block_size,
                                     struct llama_kv_cache **out) {
  return llama_kv_cache_create_dtype_for(c, num_blocks, block_size, BACKEND_KV_DTYPE_F16, out);
}

/* One block's K (or V) slice of a layer: [block_size, n_kv_heads] rows, contiguous. */
static size_t kv_block_slice_bytes(const struct backend_kv_layer *l) {
  return backend_kv_row_bytes(l->dtype, l->head_dim) * (size_t)l->block_size * (size_t)l->n_kv_heads;
}

static llb_status kv_block_check(const struct llama_kv_cache *kv, int32_t block_id, size_t len) {
  if (!kv) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache block copy: no cache");
  if (kv->ops) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "kv cache block copy: the cache is in device memory");
  const struct backend_kv_layer *l = &kv->layers[0];
  if (block_id < 0 || block_id >= l->num_blocks)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache block %d outside [0, %d)", block_id, l->num_blocks);
  const size_t want = kv_block_slice_bytes(l) * 2 * (size_t)kv->model->cfg.block_count;
  if (len != want) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache block of %zu bytes, not %zu", len, want);
  return LLB_STATUS_OK;
}

llb_status llama_kv_cache_block_read(const struct llama_kv_cache *kv, int32_t block_id, void *dst, size_t len) {
  llb_status st = kv_block_check(kv, block_id, len);
  if (st) return st;
  uint8_t *out = dst;
  for (int32_t i = 0; i < kv->model->cfg.block_count; i++) {
    const struct backend_kv_layer *l = &kv->layers[i];
    const size_t n = kv_block_slice_bytes(l), off = (size_t)block_id * n;
    memcpy(out, (const uint8_t *)l->k + off, n);
    memcpy(out + n, (const uint8_t *)l->v + off, n);
    out += 2 * n;
  }
  return LLB_STATUS_OK;
}

llb_status llama_kv_cache_block_write(struct llama_kv_cache *kv, int32_t block_id, const void *src, size_t len) {
  llb_status st = kv_block_check(kv, block_id, len);
  if (st) return st;
  const uint8_t *in = src;
  for (int32_t i = 0; i < kv->model->cfg.block_count; i++) {
    const struct backend_kv_layer *l = &kv->layers[i];
    const size_t n = kv_block_slice_bytes(l), off = (size_t)block_id * n;
    memcpy((uint8_t *)l->k + off, in, n);
    memcpy((uint8_t *)l->v + off, in + n, n);
    in += 2 * n;
  }
  return LLB_STATUS_OK;
}

void llama_kv_cache_destroy(struct llama_kv_cache *kv) {
  if (!kv) return;
  if (kv->ops) kv->ops->buffer_free(kv->data);
  else free(kv->data);
  free(kv->layers);
  free(kv);
}

/* ---------------------------------------------------------------- forward context */

llb_status llama_forward_ctx_create(const struct llama_model *m, int32_t max_num_tokens, int32_t n_threads,
                                    struct llama_forward_ctx **out) {
  const struct llama_forward_options o = {.max_num_tokens = max_num_tokens, .n_threads = n_threads,
                                          .attention_order = LLAMA_ATTENTION_ORDER_BATCH_INVARIANT,
                                          .matmul = LLAMA_MATMUL_PACKED};
  return llama_forward_ctx_create_opts(m, &o, out);
}

/* What a device backend (host_memory false) needs of the table, and what of the model the forward
 * would compute on the host: refused with the backend's name. */
static llb_status device_refusals(const struct llama_forward_ctx *fc) {
  const struct backend_ops *ops = fc->ops;
  const struct llama_config *c = &fc->m->cfg;
  if (!ops->step_begin || !ops->step_end || !ops->weight_bytes || !ops->weight_upload || !ops->get_rows)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "backend %s: device memory without step, weight and row hooks",
                    ops->name);
  if (c->gemma || c->attention_scale > 0.0f)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "backend %s: %s scales activations on the host (%s); it runs on the "
                    "CPU backend", ops->name, c->architecture,
                    c->gemma ? "gemma's embedding scale" : "the attention scale of q");
  return LLB_STATUS_OK;
}

/* Device backend: norms, biases and RoPE factors into one buffer, every weight (and the
 * embedding table) into another, in the backend's layout; the context's pointers repointed. */
static llb_status place_on_device(struct llama_forward_ctx *fc) {
  const struct llama_config *c = &fc->m->cfg;
  const int32_t L = c->block_count;
  const int64_t E = c->embedding_length, D = c->head_dim;
  const int64_t HD = (int64_t)c->head_count * D, KD = (int64_t)c->head_count_kv * D;
  struct forward_vector *v = calloc((size_t)L * 9 + 2, sizeof(*v));
  struct backend_weight **ws = malloc(((size_t)L * 7 + 2) * sizeof(*ws));
  llb_status st = LLB_STATUS_OK;
  if (!v || !ws) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "device upload lists");
    goto done;
  }
  int32_t nv = 0;
  for (int32_t i = 0; i < L; i++) {
    struct llama_layer *l = &fc->layers[i];
    const struct forward_vector lv[9] = {{&l->attn_norm, E}, {&l->ffn_norm, E}, {&l->bq, HD}, {&l->bk, KD},
                                         {&l->bv, KD}, {&l->q_norm, D}, {&l->k_norm, D},
                                         {&l->post_attn_norm, E}, {&l->post_ffw_norm, E}};
    for (int j = 0; j < 9; j++) v[nv++] = lv[j];
  }
  v[nv++] = (struct forward_vector){&fc->output_norm, E};
  v[nv++] = (struct forward_vector){&fc->rope_factors, c->rope_dimension_count / 2};
  if ((st = forward_device_upload_vectors(fc->ops, fc->bc, v, nv, &fc->dev_vectors)) != LLB_STATUS_OK) goto done;
  int32_t nw = llama_forward_matmul_weights(fc, ws);
  ws[nw++] = &fc->tok_embd;
  st = forward_device_upload_weights(fc->ops, fc->bc, ws, nw, &fc->dev_weights, &fc->dev_weight_bytes);
done:
  free(v);
  free(ws);
  return st;
}

llb_status llama_forward_ctx_create_opts(const struct llama_model *m, const struct llama_forward_options *o,
                                         struct llama_forward_ctx **out) {
  if (!o) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "forward ctx: no options");
  const int32_t max_num_tokens = o->max_num_tokens, n_threads = o->n_threads;
  if (!m || !out || max_num_tokens < 1 || n_threads < 1 || o->max_num_seqs < 0 || o->max_num_seqs > max_num_tokens ||
      o->max_num_logits < 0 || o->max_num_logits > max_num_tokens || o->max_blocks_per_seq < 0 ||
      o->n_threads_decode < 0 || o->decode_max_tokens < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "forward ctx: %d tokens, %d threads, %d seqs, %d logits rows",
                    max_num_tokens, n_threads, o->max_num_seqs, o->max_num_logits);
  *out = NULL;
  const struct llama_config *c = &m->cfg;
  const int64_t E = c->embedding_length, F = c->feed_forward_length;
  const int64_t HD = (int64_t)c->head_count * c->head_dim, KD = (int64_t)c->head_count_kv * c->head_dim;
  const int64_t wide = E > HD ? E : HD;
  llb_status st;
  struct llama_forward_ctx *fc = calloc(1, sizeof(*fc));
  if (!fc) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "forward ctx");
  fc->m = m;
  fc->ops = o->ops ? o->ops : backend_cpu_ops();
  fc->n_threads = fc->cur_threads = n_threads;
  fc->n_threads_decode = o->n_threads_decode > 0 && o->n_threads_decode < n_threads ? o->n_threads_decode : n_threads;
  fc->decode_max_tokens = o->decode_max_tokens > 0 ? o->decode_max_tokens : LLAMA_DECODE_MAX_TOKENS;
  fc->max_num_tokens = max_num_tokens;
  if (fc->ops->host_memory) fc->eval_cb = o->eval_cb, fc->eval_user = o->eval_user;
  fc->max_context_len = c->context_length;
  const int32_t max_num_logits = o->max_num_logits > 0 ? o->max_num_logits : max_num_tokens;
  const struct backend_ctx_params bp = {.n_threads = n_threads, .max_num_tokens = max_num_tokens,
                                        .max_row_elems = wide > F ? wide : F,
                                        .max_context_len = c->context_length,
                                        .attention_order = o->attention_order == LLAMA_ATTENTION_ORDER_LLAMACPP
                                                               ? BACKEND_ATTENTION_ORDER_LLAMACPP
                                                               : BACKEND_ATTENTION_ORDER_BATCH_INVARIANT,
                                        .max_num_seqs = o->max_num_seqs > 0 ? o->max_num_seqs : max_num_tokens,
                                        .max_num_logits = max_num_logits,
                                        .max_blocks_per_seq = o->max_blocks_per_seq > 0 ? o->max_blocks_per_seq
                                                                                         : c->context_length,
                                        .n_heads = c->head_count, .head_dim = c->head_dim};
  if (!fc->ops->host_memory && (st = device_refusals(fc)) != LLB_STATUS_OK) goto fail;
  st = fc->ops->ctx_create(&bp, &fc->bc);
  if (st != LLB_STATUS_OK) goto fail;
  fc->layers = malloc((size_t)c->block_count * sizeof(*fc->layers));
  if (!fc->layers) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "forward ctx layers");
    goto fail;
  }
  memcpy(fc->layers, m->layers, (size_t)c->block_count * sizeof(*fc->layers));
  fc->output = m->output;
  fc->tok_embd = m->tok_embd;
  fc->output_norm = m->output_norm;
  /* LongRoPE (llama.cpp get_rope_factors): the long factors when the context the engine runs
   * with exceeds the original one */
  const int32_t max_model_len = o->max_model_len > 0 ? o->max_model_len : c->context_length;
  fc->rope_factors = m->rope_freqs;
  if (c->rope_longrope) fc->rope_factors = max_model_len > c->rope_original_context_length ? m->rope_long : m->rope_short;
  if (fc->ops->host_memory) {
    if (o->matmul == LLAMA_MATMUL_PACKED && (st = llama_forward_pack_weights(fc, o)) != LLB_STATUS_OK) goto fail;
  } else if ((st = place_on_device(fc)) != LLB_STATUS_OK ||
             (st = fc->ops->buffer_alloc((size_t)max_num_logits * (size_t)c->vocab_size * sizeof(float),
                                         (void **)&fc->dev_logits)) != LLB_STATUS_OK) {
    goto fail;
  }
  if ((st = llama_forward_lora_alloc(fc, o)) != LLB_STATUS_OK) goto fail;
  const size_t T = (size_t)max_num_tokens;
  fc->ids = malloc(T * sizeof(int32_t));
  if (!fc->ids) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "forward ids for %d tokens", max_num_tokens);
    goto fail;
  }
  /* scratch in the backend's memory (the CPU's buffer_alloc is malloc) */
  float **scratch[8] = {&fc->x, &fc->xn, &fc->q, &fc->k, &fc->v, &fc->attn, &fc->gate, &fc->up};
  const int64_t widths[8] = {E, wide, HD, KD, KD, HD, F, F};
  for (int i = 0; i < 8; i++)
    if ((st = fc->ops->buffer_alloc(T * (size_t)widths[i] * sizeof(float), (void **)scratch[i])) != LLB_STATUS_OK)
      goto fail;
  *out = fc;
  return LLB_STATUS_OK;
fail:
  llama_forward_ctx_destroy(fc);
  return st;
}

bool llama_forward_ctx_packed_shared(const struct llama_forward_ctx *c) { return c && c->packed_map.base; }

const struct backend_ops *llama_forward_ctx_ops(const struct llama_forward_ctx *c) { return c->ops; }

struct backend_ctx *llama_forward_ctx_backend(const struct llama_forward_ctx *c) { return c->bc; }

size_t llama_forward_ctx_weight_bytes(const struct llama_forward_ctx *c) { return c->dev_weight_bytes; }

void llama_forward_ctx_idle(struct llama_forward_ctx *c) {
  if (c && c->ops && c->ops->idle) c->ops->idle(c->bc);
}

void llama_forward_ctx_destroy(struct llama_forward_ctx *c) {
  if (!c) return;
  if (c->ops) {
    void *bufs[11] = {c->x, c->xn, c->q, c->k, c->v, c->attn, c->gate, c->up, c->dev_logits, c->dev_weights,
                      c->dev_vectors};
    for (int i = 0; i < 11; i++) c->ops->buffer_free(bufs[i]);
    c->ops->ctx_destroy(c->bc);
  }
  llama_forward_lora_free(c);
  free(c->layers);
  free(c->packed);
  packed_cache_unmap(&c->packed_map);
  free(c->ids);
  free(c);
}

/* ---------------------------------------------------------------- forward */

static llb_status check_batch(const struct llama_forward_ctx *c, const struct llama_batch *b) {
  if (b->num_tokens < 1 || b->num_tokens > c->max_num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_tokens %d not in [1, %d]", b->num_tokens, c->max_num_tokens);
  if (b->num_seqs < 1 || b->num_seqs > b->num_tokens || b->max_blocks_per_seq < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_seqs %d, max_blocks_per_seq %d", b->num_seqs,
                    b->max_blocks_per_seq);
  if (!b->positions || !b->slot_mapping || !b->query_start_loc || !b->seq_lens || !b->block_tables ||
      (!b->token_ids && !(b->input_embeds && !b->embeds_mask)))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "batch array missing");
  if (b->num_logits < 0 || b->num_logits > b->num_tokens || (b->num_logits > 0 && !b->logits_indices))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_logits %d of %d tokens", b->num_logits, b->num_tokens);
  for (int32_t i = 0; i < b->num_logits; i++)
    if (b->logits_indices[i] < 0 || b->logits_indices[i] >= b->num_tokens)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "logits_indices[%d] = %d not in [0, %d)", i,
                      b->logits_indices[i], b->num_tokens);
  if (b->num_hidden < 0 || b->num_hidden > b->num_tokens ||
      (b->num_hidden > 0 && (!b->hidden_indices || !b->hidden_states)))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_hidden %d of %d tokens", b->num_hidden, b->num_tokens);
  for (int32_t i = 0; i < b->num_hidden; i++)
    if (b->hidden_indices[i] < 0 || b->hidden_indices[i] >= b->num_tokens)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "hidden_indices[%d] = %d not in [0, %d)", i,
                      b->hidden_indices[i], b->num_tokens);
  return LLB_STATUS_OK;
}

/* qwen2: q, k, v [T rows] += their biases (ggml_add of the broadcast bias after mul_mat). */
static llb_status add_rows(struct llama_forward_ctx *c, int32_t T, const struct llama_layer *l) {
  const struct llama_config *cfg = &c->m->cfg;
  const int64_t HD = (int64_t)cfg->head_count * cfg->head_dim, KD = (int64_t)cfg->head_count_kv * cfg->head_dim;
  for (int32_t t = 0; t < T; t++) {
    llb_status st = c->ops->add(c->bc, c->q + t * HD, l->bq, HD);
    if (st == LLB_STATUS_OK) st = c->ops->add(c->bc, c->k + t * KD, l->bk, KD);
    if (st == LLB_STATUS_OK) st = c->ops->add(c->bc, c->v + t * KD, l->bv, KD);
    if (st != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

/* x [n] *= s (ggml_scale). */
static void scale_rows(float *x, int64_t n, float s) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

#define FWD_TRY(call)                          \
  do {                                         \
    llb_status st_ = (call);                   \
    if (st_ != LLB_STATUS_OK) return st_;      \
  } while (0)

/* The op output data [n] under llama.cpp's graph name, to the options' eval_cb (host backends). */
#define FWD_EVAL(c, name, il, data, n)                                              \
  do {                                                                              \
    if ((c)->eval_cb) (c)->eval_cb((c)->eval_user, (name), (il), (data), (int64_t)(n)); \
  } while (0)

/* c->x [T, E] = the batch's embeddings: token rows of token_embd, rows of input_embeds where the
 * mask says so (all of them without a mask); gemma* scale by sqrt(E) (ggml_scale(inpL,
 * sqrt(n_embd))), gemma3 its token rows only (llama.cpp scales no raw embeddings there). */
static llb_status embed_batch(struct llama_forward_ctx *c, const struct llama_batch *b) {
  const struct llama_config *cfg = &c->m->cfg;
  const int32_t T = b->num_tokens, E = cfg->embedding_length;
  const struct backend_ops *ops = c->ops;
  if (b->input_embeds && !b->embeds_mask) {
    FWD_TRY(ops->buffer_upload(c->bc, c->x, b->input_embeds, (size_t)T * (size_t)E * sizeof(float)));
  } else {
    const int32_t *ids = b->token_ids; /* a device step's: masked by step_begin's caller */
    if (ops->host_memory) {
      for (int32_t i = 0; i < T; i++) c->ids[i] = (b->embeds_mask && b->embeds_mask[i]) ? 0 : b->token_ids[i];
      ids = c->ids;
    }
    FWD_TRY(ops->embed(c->bc, &c->tok_embd, ids, T, c->x));
    if (b->input_embeds)
      for (int32_t i = 0; i < T; i++)
        if (b->embeds_mask[i])
          FWD_TRY(ops->buffer_upload(c->bc, c->x + (size_t)i * E, b->input_embeds + (size_t)i * E,
                                     (size_t)E * sizeof(float)));
  }
  FWD_EVAL(c, "embd", -1, c->x, (int64_t)T * E);
  if (!cfg->gemma) return LLB_STATUS_OK;
  const float scale = sqrtf((float)E);
  for (int32_t i = 0; i < T; i++) {
    const bool raw = b->input_embeds && (!b->embeds_mask || b->embeds_mask[i]);
    if (!raw || !cfg->scale_token_embeds_only) scale_rows(c->x + (size_t)i * E, E, scale);
  }
  FWD_EVAL(c, "inp_scaled", -1, c->x, (int64_t)T * E);
  return LLB_STATUS_OK;
}

/* The attention half of layer il up to its output projection: c->xn = wo . attention(rope(q, k),
 * v) of rms_norm(c->x), K/V written to the cache (attention_residual adds it); sliding layers
 * attend their window and rotate with the sliding RoPE base and scale (llama.cpp
 * get_rope_freq_base/scale). */
static llb_status attention_block(struct llama_forward_ctx *c, struct llama_kv_cache *kv, const struct llama_batch *b,
                                  int32_t il) {
  const struct llama_config *cfg = &c->m->cfg;
  const struct backend_ops *ops = c->ops;
  struct backend_ctx *bc = c->bc;
  const struct llama_layer *l = &c->layers[il];
  const int32_t T = b->num_tokens, E = cfg->embedding_length, D = cfg->head_dim;
  const float eps = cfg->layer_norm_rms_epsilon;
  const bool sliding = cfg->sliding_window > 0 && cfg->layer_sliding[il];
  const struct backend_rope_params rope = {
      .n_dims = cfg->rope_dimension_count,
      .freq_base = sliding ? cfg->rope_freq_base_swa : cfg->rope_freq_base,
      .freq_scale = sliding ? cfg->rope_freq_scale_swa : cfg->rope_freq_scale,
      .style = cfg->rope_type == LLAMA_ROPE_TYPE_NEOX ? BACKEND_ROPE_STYLE_NEOX : BACKEND_ROPE_STYLE_NORM,
      .freq_factors = c->rope_factors, .attn_factor = cfg->rope_attn_factor};
  const int64_t nq = (int64_t)T * cfg->head_count * D, nk = (int64_t)T * cfg->head_count_kv * D;
  FWD_TRY(ops->rms_norm(bc, c->x, l->attn_norm, T, E, eps, c->xn));
  FWD_EVAL(c, "attn_norm", il, c->xn, (int64_t)T * E);
  const struct backend_weight *qkv[3] = {&l->wq, &l->wk, &l->wv};
  float *qkv_out[3] = {c->q, c->k, c->v};
  FWD_TRY(ops->matmul(bc, c->xn, T, qkv, qkv_out, 3));
  static const enum llama_lora_target qkv_ids[3] = {LLAMA_LORA_Q, LLAMA_LORA_K, LLAMA_LORA_V};
  FWD_TRY(llama_forward_lora(c, il, c->xn, T, qkv_ids, qkv_out, 3)); /* before the biases, as llama.cpp */
  if (l->bq) FWD_TRY(add_rows(c, T, l));
  FWD_EVAL(c, "Qcur", il, c->q, nq);
  FWD_EVAL(c, "Kcur", il, c->k, nk);
  FWD_EVAL(c, "Vcur", il, c->v, nk);
  if (l->q_norm) { /* qwen3, gemma3: each head of q and k normed before RoPE */
    FWD_TRY(ops->rms_norm(bc, c->q, l->q_norm, T * cfg->head_count, D, eps, c->q));
    FWD_TRY(ops->rms_norm(bc, c->k, l->k_norm, T * cfg->head_count_kv, D, eps, c->k));
    FWD_EVAL(c, "Qcur_normed", il, c->q, nq);
    FWD_EVAL(c, "Kcur_normed", il, c->k, nk);
  }
  FWD_TRY(ops->rope(bc, c->q, b->positions, T, cfg->head_count, D, &rope));
  FWD_TRY(ops->rope(bc, c->k, b->positions, T, cfg->head_count_kv, D, &rope));
  FWD_EVAL(c, "Qcur_rope", il, c->q, nq);
  FWD_EVAL(c, "Kcur_rope", il, c->k, nk);
  /* phi3 and gemma* scale q after RoPE and attend with scale 1 (llama.cpp) */
  if (cfg->attention_scale > 0.0f) {
    scale_rows(c->q, nq, cfg->attention_scale);
    FWD_EVAL(c, "Qcur_scaled", il, c->q, nq);
  }
  FWD_TRY(ops->kv_write(bc, &kv->layers[il], c->k, c->v, b->slot_mapping, T));
  const struct backend_attn_params ap = {
      .q = c->q, .out = c->attn, .kv = &kv->layers[il], .num_tokens = T, .n_heads = cfg->head_count,
      .scale = cfg->attention_scale > 0.0f ? 1.0f : 1.0f / sqrtf((float)D), .num_seqs = b->num_seqs,
      .query_start_loc = b->query_start_loc, .seq_lens = b->seq_lens, .block_tables = b->block_tables,
      .max_blocks_per_seq = b->max_blocks_per_seq, .sliding_window = sliding ? cfg->sliding_window : 0,
      .logit_softcap = cfg->attn_logit_softcapping};
  FWD_TRY(ops->attention(bc, &ap));
  FWD_EVAL(c, "kqv_out", il, c->attn, nq);
  const struct backend_weight *wo[1] = {&l->wo};
  float *o_out[1] = {c->xn};
  FWD_TRY(ops->matmul(bc, c->attn, T, wo, o_out, 1));
  static const enum llama_lora_target o_id[1] = {LLAMA_LORA_O};
  FWD_TRY(llama_forward_lora(c, il, c->attn, T, o_id, o_out, 1));
  FWD_EVAL(c, "attn_out", il, c->xn, (int64_t)T * E);
  return LLB_STATUS_OK;
}

/* The end of layer il's attention half for its first T rows: c->x += [post_attn_norm](c->xn). */
static llb_status attention_residual(struct llama_forward_ctx *c, int32_t T, int32_t il) {
  const struct llama_config *cfg = &c->m->cfg;
  const struct llama_layer *l = &c->layers[il];
  const int32_t E = cfg->embedding_length;
  if (l->post_attn_norm) {
    FWD_TRY(c->ops->rms_norm(c->bc, c->xn, l->post_attn_norm, T, E, cfg->layer_norm_rms_epsilon, c->xn));
    FWD_EVAL(c, "attn_post_norm", il, c->xn, (int64_t)T * E);
  }
  FWD_TRY(c->ops->add(c->bc, c->x, c->xn, (int64_t)T * E));
  FWD_EVAL(c, "sa_out", il, c->x, (int64_t)T * E);
  return LLB_STATUS_OK;
}

/* Whether the last layer's work after attention can run on the logits rows alone (llama.cpp's
 * inp_out_ids): host memory, no pooled rows, fewer logits rows than tokens, their indices
 * strictly increasing (so that gathering them to the front in place overwrites no row still to
 * be read). Each row's result is the same either way; the FFN of the other rows is skipped. */
static bool last_layer_on_logits_rows(const struct llama_forward_ctx *c, const struct llama_batch *b) {
  if (!c->ops->host_memory || b->num_hidden > 0 || b->num_logits < 1 || b->num_logits >= b->num_tokens) return false;
  for (int32_t i = 1; i < b->num_logits; i++)
    if (b->logits_indices[i] <= b->logits_indices[i - 1]) return false;
  return true;
}

/* Rows logits_indices[i] of c->x and c->xn (the residual and the attention output) to rows i. */
static void gather_logits_rows(struct llama_forward_ctx *c, const struct llama_batch *b) {
  const size_t E = (size_t)c->m->cfg.embedding_length;
  for (int32_t i = 0; i < b->num_logits; i++) {
    const size_t from = (size_t)b->logits_indices[i];
    if (from == (size_t)i) continue;
    memcpy(c->x + (size_t)i * E, c->x + from * E, E * sizeof(float));
    memcpy(c->xn + (size_t)i * E, c->xn + from * E, E * sizeof(float));
  }
}

/* The feed-forward half of layer il: c->x += [post_ffw_norm](down(act(gate) * up)) of
 * rms_norm(c->x); act is SiLU, or GELU for gemma*. */
static llb_status ffn_block(struct llama_forward_ctx *c, int32_t T, int32_t il) {
  const struct llama_config *cfg = &c->m->cfg;
  const struct backend_ops *ops = c->ops;
  struct backend_ctx *bc = c->bc;
  const struct llama_layer *l = &c->layers[il];
  const int32_t E = cfg->embedding_length;
  const int64_t F = cfg->feed_forward_length;
  const float eps = cfg->layer_norm_rms_epsilon;
  FWD_TRY(ops->rms_norm(bc, c->x, l->ffn_norm, T, E, eps, c->xn));
  FWD_EVAL(c, "ffn_norm", il, c->xn, (int64_t)T * E);
  const struct backend_weight *gu[2] = {&l->w_gate, &l->w_up};
  float *gu_out[2] = {c->gate, c->up};
  FWD_TRY(ops->matmul(bc, c->xn, T, gu, gu_out, 2));
  static const enum llama_lora_target gu_ids[2] = {LLAMA_LORA_GATE, LLAMA_LORA_UP};
  FWD_TRY(llama_forward_lora(c, il, c->xn, T, gu_ids, gu_out, 2));
  FWD_EVAL(c, "ffn_gate", il, c->gate, (int64_t)T * F);
  FWD_EVAL(c, "ffn_up", il, c->up, (int64_t)T * F);
  if (cfg->gemma) {
    if (!ops->geglu) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "backend %s has no GeGLU (gemma)", ops->name);
    FWD_TRY(ops->geglu(bc, c->gate, c->up, (int64_t)T * F, c->gate));
  } else {
    FWD_TRY(ops->swiglu(bc, c->gate, c->up, (int64_t)T * F, c->gate));
  }
  FWD_EVAL(c, "ffn_gate_par", il, c->gate, (int64_t)T * F);
  const struct backend_weight *down[1] = {&l->w_down};
  float *d_out[1] = {c->xn};
  FWD_TRY(ops->matmul(bc, c->gate, T, down, d_out, 1));
  static const enum llama_lora_target down_id[1] = {LLAMA_LORA_DOWN};
  FWD_TRY(llama_forward_lora(c, il, c->gate, T, down_id, d_out, 1));
  FWD_EVAL(c, "ffn_out", il, c->xn, (int64_t)T * E);
  if (l->post_ffw_norm) {
    FWD_TRY(ops->rms_norm(bc, c->xn, l->post_ffw_norm, T, E, eps, c->xn));
    FWD_EVAL(c, "ffn_post_norm", il, c->xn, (int64_t)T * E);
  }
  FWD_TRY(ops->add(bc, c->x, c->xn, (int64_t)T * E));
  FWD_EVAL(c, "l_out", il, c->x, (int64_t)T * E);
  return LLB_STATUS_OK;
}

/* One step of b, whose arrays the ops read (host ones, or a device step's), into logits (the
 * caller's, or the device's [num_logits, V]). */
static llb_status forward_step(struct llama_forward_ctx *c, struct llama_kv_cache *kv, const struct llama_batch *b,
                               float *logits) {
  const struct llama_model *m = c->m;
  const struct llama_config *cfg = &m->cfg;
  const struct backend_ops *ops = c->ops;
  struct backend_ctx *bc = c->bc;
  const int32_t T = b->num_tokens, E = cfg->embedding_length;
  const float eps = cfg->layer_norm_rms_epsilon;
  FWD_TRY(embed_batch(c, b));
  const bool select = last_layer_on_logits_rows(c, b);
  for (int32_t il = 0; il < cfg->block_count; il++) {
    FWD_TRY(attention_block(c, kv, b, il));
    int32_t rows = T;
    if (select && il == cfg->block_count - 1) {
      gather_logits_rows(c, b);
      llama_forward_lora_select(c, b);
      rows = b->num_logits;
    }
    FWD_TRY(attention_residual(c, rows, il));
    FWD_TRY(ffn_block(c, rows, il));
  }

  if (b->num_hidden > 0) { /* pooling: final-norm hidden states of the rows asked for */
    for (int32_t i = 0; i < b->num_hidden; i++)
      memcpy(b->hidden_states + (size_t)i * E, c->x + (size_t)b->hidden_indices[i] * E, (size_t)E * sizeof(float));
    FWD_TRY(ops->rms_norm(bc, b->hidden_states, c->output_norm, b->num_hidden, E, eps, b->hidden_states));
  }
  if (b->num_logits == 0) return LLB_STATUS_OK;
  /* final norm and logits only for the rows asked for (already rows 0.. when selected) */
  if (select)
    memcpy(c->xn, c->x, (size_t)b->num_logits * (size_t)E * sizeof(float));
  else if (ops->get_rows)
    FWD_TRY(ops->get_rows(bc, c->x, E, b->logits_indices, b->num_logits, c->xn));
  else
    for (int32_t i = 0; i < b->num_logits; i++)
      memcpy(c->xn + (size_t)i * E, c->x + (size_t)b->logits_indices[i] * E, (size_t)E * sizeof(float));
  FWD_TRY(ops->rms_norm(bc, c->xn, c->output_norm, b->num_logits, E, eps, c->xn));
  FWD_EVAL(c, "result_norm", -1, c->xn, (int64_t)b->num_logits * E);
  const struct backend_weight *outw[1] = {&c->output};
  float *l_out[1] = {logits};
  FWD_TRY(ops->matmul(bc, c->xn, b->num_logits, outw, l_out, 1));
  FWD_EVAL(c, "result_output", -1, logits, (int64_t)b->num_logits * cfg->vocab_size);
  if (cfg->final_logit_softcapping > 0.0f) { /* gemma2: logits -> c * tanh(logits / c) */
    if (!ops->softcap) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "backend %s has no soft-capping", ops->name);
    FWD_TRY(ops->softcap(bc, logits, (int64_t)b->num_logits * cfg->vocab_size, cfg->final_logit_softcapping));
  }
  return LLB_STATUS_OK;
}

/* A device backend's step: every index checked on the host, the batch arrays (ids masked) up
 * in step_begin, the ops queued unless the backend replayed a record of the step, the logits
 * down in step_end. */
static llb_status forward_on_device(struct llama_forward_ctx *c, struct llama_kv_cache *kv, const struct llama_batch *b,
                                    float *logits) {
  const struct backend_ops *ops = c->ops;
  const int32_t V = c->m->cfg.vocab_size;
  if (b->num_hidden > 0)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "hidden states (pooling) from backend %s", ops->name);
  if (c->dev_kv && c->dev_kv != kv)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "backend %s: a forward context runs one KV cache", ops->name);
  c->dev_kv = kv;
  FWD_TRY(forward_device_check_batch(b, V, c->max_context_len, &kv->layers[0]));
  for (int32_t i = 0; i < b->num_tokens; i++)
    c->ids[i] = (!b->token_ids || (b->input_embeds && (!b->embeds_mask || b->embeds_mask[i]))) ? 0 : b->token_ids[i];
  const struct backend_step in = {
      .num_tokens = b->num_tokens, .num_seqs = b->num_seqs, .num_logits = b->num_logits,
      .max_blocks_per_seq = b->max_blocks_per_seq, .token_ids = c->ids, .positions = b->positions,
      .slot_mapping = b->slot_mapping, .query_start_loc = b->query_start_loc, .seq_lens = b->seq_lens,
      .block_tables = b->block_tables, .logits_indices = b->logits_indices, .replayable = !b->input_embeds};
  struct backend_step run;
  bool replayed = false;
  FWD_TRY(ops->step_begin(c->bc, &in, &run, &replayed));
  llb_status st = LLB_STATUS_OK;
  if (!replayed) {
    struct llama_batch sb = *b;
    sb.num_tokens = run.num_tokens, sb.token_ids = run.token_ids, sb.positions = run.positions;
    sb.slot_mapping = run.slot_mapping, sb.num_seqs = run.num_seqs, sb.query_start_loc = run.query_start_loc;
    sb.seq_lens = run.seq_lens, sb.block_tables = run.block_tables, sb.max_blocks_per_seq = run.max_blocks_per_seq;
    sb.num_logits = run.num_logits, sb.logits_indices = run.logits_indices;
    st = forward_step(c, kv, &sb, c->dev_logits);
  }
  return ops->step_end(c->bc, st, logits, c->dev_logits, (size_t)b->num_logits * (size_t)V * sizeof(float));
}

llb_status llama_forward(struct llama_forward_ctx *c, struct llama_kv_cache *kv, const struct llama_batch *b,
                         float *logits) {
  if (!c || !kv || !b || (b->num_logits > 0 && !logits))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NULL argument");
  if (kv->model != c->m) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache of another model");
  if (kv->ops != (c->ops->host_memory ? NULL : c->ops))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache not in the memory of backend %s", c->ops->name);
  FWD_TRY(check_batch(c, b));
  FWD_TRY(llama_forward_lora_begin(c, b));
  if (!c->ops->host_memory) return forward_on_device(c, kv, b, logits);
  const int32_t threads = b->num_tokens <= c->decode_max_tokens ? c->n_threads_decode : c->n_threads;
  if (threads != c->cur_threads && c->ops->set_num_threads) {
    c->ops->set_num_threads(c->bc, threads);
    c->cur_threads = threads;
  }
  return forward_step(c, kv, b, logits);
}
