/* LLaMA forward on the device (see cuda_forward.h): model upload, KV cache, the step, decode
 * graphs. The layer is model/forward.c's: rms_norm, q|k|v matmul, rope, kv write,
 * attention, o matmul + residual, rms_norm, gate|up matmul, silu*up, down matmul + residual. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static const int32_t graph_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
#define NUM_BUCKETS ((int)(sizeof(graph_buckets) / sizeof(graph_buckets[0])))

struct cuda_layer {
  float *attn_norm, *ffn_norm; /* device [E] */
  struct cuda_weight wqkv;     /* [H*D + 2*Hkv*D, E] */
  struct cuda_weight wo;       /* [E, H*D] */
  struct cuda_weight wgu;      /* [2F, E]: gate rows then up rows */
  struct cuda_weight wdown;    /* [E, F] */
};

struct cuda_model {
  struct llama_config cfg;
  struct cuda_weight tok_embd; /* [V, E] fp16 */
  struct cuda_weight output;   /* [V, E] fp16; tok_embd's data when tied */
  float *output_norm;          /* device [E] */
  struct cuda_layer *layers;   /* [block_count] host array of device weights */
  size_t weight_bytes;
};

struct cuda_kv_cache {
  const struct cuda_model *model;
  uint16_t *data;              /* device [block_count, 2, num_blocks, block_size, Hkv, D] */
  size_t bytes;
  struct cuda_kv_layer *layers; /* [block_count] */
};

/* Byte offsets of the per-step metadata inside the staging (pinned) and device buffers. */
struct meta_layout {
  size_t ids, pos, slots, qsl, seq_lens, row_seq, tables, logits_idx, sparams, total;
};

struct cuda_forward_ctx {
  const struct cuda_model *m;
  struct cuda_forward_params p;
  struct cuda_ctx *cc;
  struct meta_layout ml;
  uint8_t *meta_h;         /* pinned [ml.total] */
  uint8_t *meta_d;         /* device [ml.total] */
  int32_t *tokens_d;       /* device [max_num_logits] */
  int32_t *tokens_h;       /* pinned [max_num_logits] */
  float *x, *tmp;          /* device [T, E] residual, matmul output */
  float *qkv;              /* device [T, H*D + 2*Hkv*D] */
  float *gu;               /* device [T, 2F] */
  uint16_t *x16;           /* device [T, max(E, H*D, F)] fp16 matmul inputs */
  float *logits;           /* device [max_num_logits, V] */
  cudaGraphExec_t graphs[NUM_BUCKETS][2]; /* [bucket][with sampling] */
  int32_t num_graphs;
};

#define FWD_TRY(call)                     \
  do {                                    \
    llb_status st_ = (call);              \
    if (st_ != LLB_STATUS_OK) return st_; \
  } while (0)

/* ------------------------------------------------------------------ model */

static llb_status upload_matrix(struct cuda_ctx *cc, const struct gguf_file *f, const char *name,
                                int64_t cols, int64_t rows, void *staging, size_t staging_bytes,
                                __half *dst) {
  const struct gguf_tensor *t = gguf_find_tensor(f, name);
  if (!t) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "tensor %s missing", name);
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s is [%lld, %lld], expected [%lld, %lld]", name,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)cols, (long long)rows);
  size_t row_bytes;
  if (ggml_row_bytes(t->type, cols, &row_bytes) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s: rows of %lld", name, (long long)cols);
  const size_t bytes = row_bytes * (size_t)rows;
  if (t->size_bytes < bytes || bytes > staging_bytes)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "tensor %s: %zu bytes for %lld rows", name, t->size_bytes,
                    (long long)rows);
  CUDA_TRY(cudaMemcpyAsync(staging, t->data, bytes, cudaMemcpyHostToDevice, cc->stream));
  llb_status st = cuda_dequantize(cc, t->type, staging, cols * rows, CUDA_DTYPE_F16, dst);
  if (st != LLB_STATUS_OK) return LLB_ERRF(st, "tensor %s: %s", name, llb_err_last());
  return cuda_ctx_sync(cc); /* the staging buffer is reused by the next tensor */
}

static llb_status upload_norm(struct cuda_ctx *cc, const struct gguf_file *f, const char *name, int64_t n,
                              float **out, size_t *bytes) {
  const struct gguf_tensor *t = gguf_find_tensor(f, name);
  if (!t) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "tensor %s missing", name);
  if (t->type != GGML_TYPE_F32 || t->ne[0] != n || t->ne[1] != 1 || t->size_bytes < (size_t)n * 4)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "norm %s: expected f32 [%lld]", name, (long long)n);
  FWD_TRY(cuda_mem_alloc((size_t)n * 4, (void **)out));
  *bytes += (size_t)n * 4;
  return cuda_copy_to_device(cc, *out, t->data, (size_t)n * 4);
}

static llb_status alloc_weight(struct cuda_weight *w, int64_t rows, int64_t cols, size_t *bytes) {
  *w = (struct cuda_weight){CUDA_DTYPE_F16, rows, cols, NULL};
  *bytes += (size_t)rows * (size_t)cols * 2;
  return cuda_mem_alloc((size_t)rows * (size_t)cols * 2, &w->data);
}

llb_status cuda_model_load(const struct gguf_file *f, struct cuda_model **out) {
  if (!f || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NULL argument");
  *out = NULL;
  struct cuda_ctx *cc = NULL;
  void *staging = NULL;
  size_t staging_bytes = 0;
  llb_status st;
  struct cuda_model *m = (struct cuda_model *)calloc(1, sizeof(*m));
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cuda model");
  const struct llama_config *c = &m->cfg;
  if ((st = llama_config_from_gguf(f, &m->cfg)) != LLB_STATUS_OK) goto fail;
  if ((st = llama_config_check_tensors(f, &m->cfg)) != LLB_STATUS_OK) goto fail;
  {
    const int64_t E = c->embedding_length, F = c->feed_forward_length, V = c->vocab_size;
    const int64_t HD = (int64_t)c->head_count * c->head_dim, KD = (int64_t)c->head_count_kv * c->head_dim;
    if (c->block_count < 1 || E < 1 || F < 1 || V < 1 || c->head_count < 1 || c->head_count_kv < 1 ||
        c->head_count % c->head_count_kv != 0 || c->rope_dimension_count < 2 ||
        c->rope_dimension_count > c->head_dim || c->rope_dimension_count % 2 != 0) {
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "unusable llama config (heads %d/%d, head_dim %d)", c->head_count,
                    c->head_count_kv, c->head_dim);
      goto fail;
    }
    if (c->head_dim % 8 != 0 || c->head_dim > CUDA_ATTN_MAX_HEAD_DIM) {
      st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda: head_dim %d (a multiple of 8, <= %d)", c->head_dim,
                    CUDA_ATTN_MAX_HEAD_DIM);
      goto fail;
    }
    if (c->sliding_window > 0 || c->rope_attn_factor != 1.0f || c->rope_longrope || c->post_norms ||
        c->attn_logit_softcapping > 0.0f || c->final_logit_softcapping > 0.0f) {
      st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda: %s (sliding-window attention, LongRoPE, RoPE attention "
                    "factor, post norms and soft-capping run on the CPU forward only)", c->architecture);
      goto fail;
    }
    const struct cuda_ctx_params cp = {1, 1, c->head_dim, 1, 0, 0, 0};
    if ((st = cuda_ctx_create(&cp, &cc)) != LLB_STATUS_OK) goto fail;
    for (int64_t i = 0; i < gguf_tensor_count(f); i++)
      if (gguf_tensor_at(f, i)->size_bytes > staging_bytes) staging_bytes = gguf_tensor_at(f, i)->size_bytes;
    if ((st = cuda_mem_alloc(staging_bytes, &staging)) != LLB_STATUS_OK) goto fail;
    if ((st = alloc_weight(&m->tok_embd, V, E, &m->weight_bytes)) != LLB_STATUS_OK ||
        (st = upload_matrix(cc, f, "token_embd.weight", E, V, staging, staging_bytes,
                            (__half *)m->tok_embd.data)) != LLB_STATUS_OK)
      goto fail;
    if (c->tied_embeddings) {
      m->output = m->tok_embd;
    } else if ((st = alloc_weight(&m->output, V, E, &m->weight_bytes)) != LLB_STATUS_OK ||
               (st = upload_matrix(cc, f, "output.weight", E, V, staging, staging_bytes,
                                   (__half *)m->output.data)) != LLB_STATUS_OK) {
      goto fail;
    }
    if ((st = upload_norm(cc, f, "output_norm.weight", E, &m->output_norm, &m->weight_bytes)) != LLB_STATUS_OK)
      goto fail;
    m->layers = (struct cuda_layer *)calloc((size_t)c->block_count, sizeof(*m->layers));
    if (!m->layers) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cuda layers");
      goto fail;
    }
    for (int32_t i = 0; i < c->block_count; i++) {
      struct cuda_layer *l = &m->layers[i];
      char n[96];
#define LAYER_TENSOR(suffix) (snprintf(n, sizeof(n), "blk.%d." suffix, i), n)
      if ((st = upload_norm(cc, f, LAYER_TENSOR("attn_norm.weight"), E, &l->attn_norm, &m->weight_bytes)) ||
          (st = upload_norm(cc, f, LAYER_TENSOR("ffn_norm.weight"), E, &l->ffn_norm, &m->weight_bytes)) ||
          (st = alloc_weight(&l->wqkv, HD + 2 * KD, E, &m->weight_bytes)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("attn_q.weight"), E, HD, staging, staging_bytes,
                              (__half *)l->wqkv.data)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("attn_k.weight"), E, KD, staging, staging_bytes,
                              (__half *)l->wqkv.data + HD * E)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("attn_v.weight"), E, KD, staging, staging_bytes,
                              (__half *)l->wqkv.data + (HD + KD) * E)) ||
          (st = alloc_weight(&l->wo, E, HD, &m->weight_bytes)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("attn_output.weight"), HD, E, staging, staging_bytes,
                              (__half *)l->wo.data)) ||
          (st = alloc_weight(&l->wgu, 2 * F, E, &m->weight_bytes)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("ffn_gate.weight"), E, F, staging, staging_bytes,
                              (__half *)l->wgu.data)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("ffn_up.weight"), E, F, staging, staging_bytes,
                              (__half *)l->wgu.data + F * E)) ||
          (st = alloc_weight(&l->wdown, E, F, &m->weight_bytes)) ||
          (st = upload_matrix(cc, f, LAYER_TENSOR("ffn_down.weight"), F, E, staging, staging_bytes,
                              (__half *)l->wdown.data)))
        goto fail;
#undef LAYER_TENSOR
    }
  }
  cuda_mem_free(staging);
  cuda_ctx_destroy(cc);
  *out = m;
  return LLB_STATUS_OK;
fail:
  cuda_mem_free(staging);
  cuda_ctx_destroy(cc);
  cuda_model_destroy(m);
  return st;
}

void cuda_model_destroy(struct cuda_model *m) {
  if (!m) return;
  if (m->output.data != m->tok_embd.data) cuda_mem_free(m->output.data);
  cuda_mem_free(m->tok_embd.data);
  cuda_mem_free(m->output_norm);
  if (m->layers)
    for (int32_t i = 0; i < m->cfg.block_count; i++) {
      struct cuda_layer *l = &m->layers[i];
      cuda_mem_free(l->attn_norm);
      cuda_mem_free(l->ffn_norm);
      cuda_mem_free(l->wqkv.data);
      cuda_mem_free(l->wo.data);
      cuda_mem_free(l->wgu.data);
      cuda_mem_free(l->wdown.data);
    }
  free(m->layers);
  free(m);
}

const struct llama_config *cuda_model_config(const struct cuda_model *m) { return &m->cfg; }
size_t cuda_model_weight_bytes(const struct cuda_model *m) { return m->weight_bytes; }

/* ------------------------------------------------------------------ KV cache */

size_t cuda_kv_bytes_per_block(const struct cuda_model *m, int32_t block_size) {
  return (size_t)m->cfg.block_count * 2 * (size_t)block_size * (size_t)m->cfg.head_count_kv *
         (size_t)m->cfg.head_dim * 2;
}

llb_status cuda_kv_blocks_for_memory(const struct cuda_model *m, int32_t block_size,
                                     float gpu_memory_utilization, int32_t *num_blocks) {
  if (!(gpu_memory_utilization > 0.0f && gpu_memory_utilization <= 1.0f) || block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gpu_memory_utilization %g, block_size %d",
                    gpu_memory_utilization, block_size);
  size_t free_b, total_b;
  FWD_TRY(cuda_mem_info(&free_b, &total_b));
  const double budget = (double)total_b * gpu_memory_utilization - (double)(total_b - free_b);
  const size_t per_block = cuda_kv_bytes_per_block(m, block_size);
  const double n = budget > 0 ? floor(budget / (double)per_block) : 0.0;
  if (n < 1.0)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY,
                    "no KV block fits: %.2f GiB total x %.2f utilization, %.2f GiB in use, %zu bytes a block",
                    (double)total_b / 1073741824.0, gpu_memory_utilization,
                    (double)(total_b - free_b) / 1073741824.0, per_block);
  *num_blocks = n > (double)INT32_MAX ? INT32_MAX : (int32_t)n;
  return LLB_STATUS_OK;
}

llb_status cuda_kv_cache_create(const struct cuda_model *m, int32_t num_blocks, int32_t block_size,
                                struct cuda_kv_cache **out) {
  if (!m || !out || num_blocks < 1 || block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache of %d blocks of %d", num_blocks, block_size);
  *out = NULL;
  const struct llama_config *c = &m->cfg;
  const size_t per_tensor = (size_t)num_blocks * (size_t)block_size * (size_t)c->head_count_kv * (size_t)c->head_dim;
  llb_status st;
  struct cuda_kv_cache *kv = (struct cuda_kv_cache *)calloc(1, sizeof(*kv));
  if (!kv) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv cache");
  kv->model = m;
  kv->bytes = per_tensor * 2 * (size_t)c->block_count * sizeof(uint16_t);
  kv->layers = (struct cuda_kv_layer *)calloc((size_t)c->block_count, sizeof(*kv->layers));
  if (!kv->layers) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv layers");
    goto fail;
  }
  if ((st = cuda_mem_alloc(kv->bytes, (void **)&kv->data)) != LLB_STATUS_OK) goto fail;
  {
    cudaError_t e = cudaMemset(kv->data, 0, kv->bytes);
    if (e != cudaSuccess) {
      st = cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaMemset");
      goto fail;
    }
  }
  for (int32_t i = 0; i < c->block_count; i++)
    kv->layers[i] = (struct cuda_kv_layer){kv->data + (size_t)(2 * i) * per_tensor,
                                           kv->data + (size_t)(2 * i + 1) * per_tensor, num_blocks,
                                           block_size, c->head_count_kv, c->head_dim};
  {
    size_t free_b = 0, total_b = 0;
    (void)cuda_mem_info(&free_b, &total_b);
    LLB_LOG_INFO("cuda_kv_cache", "blocks=%d block_size=%d tokens=%lld bytes=%zu gib=%.2f free_gib=%.2f total_gib=%.2f",
                 num_blocks, block_size, (long long)num_blocks * block_size, kv->bytes,
                 (double)kv->bytes / 1073741824.0, (double)free_b / 1073741824.0,
                 (double)total_b / 1073741824.0);
  }
  *out = kv;
  return LLB_STATUS_OK;
fail:
  cuda_kv_cache_destroy(kv);
  return st;
}

void cuda_kv_cache_destroy(struct cuda_kv_cache *kv) {
  if (!kv) return;
  cuda_mem_free(kv->data);
  free(kv->layers);
  free(kv);
}

llb_status cuda_kv_cache_fill_random(struct cuda_forward_ctx *c, struct cuda_kv_cache *kv, uint64_t seed) {
  FWD_TRY(cuda_fill_random_f16(c->cc, kv->data, (int64_t)(kv->bytes / 2), 1.0f, seed));
  return cuda_ctx_sync(c->cc);
}

/* ------------------------------------------------------------------ forward context */

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

static struct meta_layout meta_layout_for(const struct cuda_forward_params *p) {
  struct meta_layout l;
  size_t o = 0;
  const size_t T = (size_t)p->max_num_tokens, S = (size_t)p->max_num_seqs;
  l.ids = o, o = align_up(o + T * 4);
  l.pos = o, o = align_up(o + T * 4);
  l.slots = o, o = align_up(o + T * 8);
  l.qsl = o, o = align_up(o + (S + 1) * 4);
  l.seq_lens = o, o = align_up(o + S * 4);
  l.row_seq = o, o = align_up(o + T * 4);
  l.tables = o, o = align_up(o + S * (size_t)p->max_blocks_per_seq * 4);
  l.logits_idx = o, o = align_up(o + (size_t)p->max_num_logits * 4);
  l.sparams = o, o = align_up(o + (size_t)p->max_num_logits * sizeof(struct cuda_sample_params));
  l.total = o;
  return l;
}

void cuda_forward_ctx_destroy(struct cuda_forward_ctx *c) {
  if (!c) return;
  for (int b = 0; b < NUM_BUCKETS; b++)
    for (int s = 0; s < 2; s++)
      if (c->graphs[b][s]) (void)cudaGraphExecDestroy(c->graphs[b][s]);
  if (c->meta_h) (void)cudaFreeHost(c->meta_h);
  if (c->tokens_h) (void)cudaFreeHost(c->tokens_h);
  cuda_mem_free(c->meta_d);
  cuda_mem_free(c->tokens_d);
  cuda_mem_free(c->x);
  cuda_mem_free(c->tmp);
  cuda_mem_free(c->qkv);
  cuda_mem_free(c->gu);
  cuda_mem_free(c->x16);
  cuda_mem_free(c->logits);
  cuda_ctx_destroy(c->cc);
  free(c);
}

llb_status cuda_forward_ctx_create(const struct cuda_model *m, const struct cuda_forward_params *p,
                                   struct cuda_forward_ctx **out) {
  if (!m || !p || !out || p->max_num_tokens < 1 || p->max_num_seqs < 1 || p->max_num_seqs > p->max_num_tokens ||
      p->max_num_logits < 1 || p->max_num_logits > p->max_num_tokens || p->max_blocks_per_seq < 1 ||
      p->max_context_len < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda forward ctx: %d tokens, %d seqs, %d logits",
                    p ? p->max_num_tokens : 0, p ? p->max_num_seqs : 0, p ? p->max_num_logits : 0);
  *out = NULL;
  const struct llama_config *c = &m->cfg;
  const size_t T = (size_t)p->max_num_tokens, E = (size_t)c->embedding_length, F = (size_t)c->feed_forward_length;
  const size_t HD = (size_t)c->head_count * c->head_dim, KD = (size_t)c->head_count_kv * c->head_dim;
  size_t wide = E > HD ? E : HD;
  wide = wide > F ? wide : F;
  llb_status st;
  struct cuda_forward_ctx *fc = (struct cuda_forward_ctx *)calloc(1, sizeof(*fc));
  if (!fc) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cuda forward ctx");
  fc->m = m;
  fc->p = *p;
  fc->ml = meta_layout_for(p);
  {
    const struct cuda_ctx_params cp = {p->max_num_tokens, c->head_count, c->head_dim, p->max_context_len,
                                       p->device_sampling ? p->max_num_logits : 0, c->vocab_size, 0};
    if ((st = cuda_ctx_create(&cp, &fc->cc)) != LLB_STATUS_OK) goto fail;
    cudaError_t e = cudaMallocHost((void **)&fc->meta_h, fc->ml.total);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&fc->tokens_h, (size_t)p->max_num_logits * 4);
    if (e != cudaSuccess) {
      fc->meta_h = fc->meta_h ? fc->meta_h : NULL;
      st = cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaMallocHost");
      goto fail;
    }
  }
  if ((st = cuda_mem_alloc(fc->ml.total, (void **)&fc->meta_d)) ||
      (st = cuda_mem_alloc((size_t)p->max_num_logits * 4, (void **)&fc->tokens_d)) ||
      (st = cuda_mem_alloc(T * E * 4, (void **)&fc->x)) ||
      (st = cuda_mem_alloc(T * E * 4, (void **)&fc->tmp)) ||
      (st = cuda_mem_alloc(T * (HD + 2 * KD) * 4, (void **)&fc->qkv)) ||
      (st = cuda_mem_alloc(T * 2 * F * 4, (void **)&fc->gu)) ||
      (st = cuda_mem_alloc(T * wide * 2, (void **)&fc->x16)) ||
      (st = cuda_mem_alloc((size_t)p->max_num_logits * (size_t)c->vocab_size * 4, (void **)&fc->logits)))
    goto fail;
  *out = fc;
  return LLB_STATUS_OK;
fail:
  cuda_forward_ctx_destroy(fc);
  return st;
}

int32_t cuda_forward_num_graphs(const struct cuda_forward_ctx *c) { return c->num_graphs; }

/* ------------------------------------------------------------------ step */

/* Checks b against the context and the cache on the host, as model/forward.c's check_batch
 * plus every index the kernels follow (token ids, slots, block ids, lengths). */
static llb_status check_batch(const struct cuda_forward_ctx *c, const struct cuda_kv_cache *kv,
                              const struct llama_batch *b) {
  const struct cuda_forward_params *p = &c->p;
  if (b->num_tokens < 1 || b->num_tokens > p->max_num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_tokens %d not in [1, %d]", b->num_tokens, p->max_num_tokens);
  if (b->num_seqs < 1 || b->num_seqs > b->num_tokens || b->num_seqs > p->max_num_seqs)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_seqs %d (max %d)", b->num_seqs, p->max_num_seqs);
  if (b->max_blocks_per_seq < 1 || b->max_blocks_per_seq > p->max_blocks_per_seq)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "max_blocks_per_seq %d (ctx %d)", b->max_blocks_per_seq,
                    p->max_blocks_per_seq);
  if (!b->positions || !b->slot_mapping || !b->query_start_loc || !b->seq_lens || !b->block_tables ||
      (!b->token_ids && !(b->input_embeds && !b->embeds_mask)))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "batch array missing");
  if (b->num_logits < 0 || b->num_logits > p->max_num_logits || (b->num_logits > 0 && !b->logits_indices))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_logits %d (max %d)", b->num_logits, p->max_num_logits);
  for (int32_t i = 0; i < b->num_logits; i++)
    if (b->logits_indices[i] < 0 || b->logits_indices[i] >= b->num_tokens)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "logits_indices[%d] = %d", i, b->logits_indices[i]);
  const int32_t V = c->m->cfg.vocab_size, bs = kv->layers[0].block_size, nb = kv->layers[0].num_blocks;
  const int64_t n_slots = (int64_t)nb * bs;
  for (int32_t i = 0; i < b->num_tokens; i++) {
    const bool embedded = b->input_embeds && (!b->embeds_mask || b->embeds_mask[i]);
    if (!embedded && (b->token_ids[i] < 0 || b->token_ids[i] >= V))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "token_ids[%d] = %d not in [0, %d)", i, b->token_ids[i], V);
    if (b->slot_mapping[i] < -1 || b->slot_mapping[i] >= n_slots)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "slot_mapping[%d] = %lld not in [-1, %lld)", i,
                      (long long)b->slot_mapping[i], (long long)n_slots);
  }
  if (b->query_start_loc[0] != 0 || b->query_start_loc[b->num_seqs] != b->num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "query_start_loc does not cover %d tokens", b->num_tokens);
  for (int32_t s = 0; s < b->num_seqs; s++) {
    const int32_t q0 = b->query_start_loc[s], q1 = b->query_start_loc[s + 1], len = b->seq_lens[s];
    if (q1 < q0 || len < q1 - q0 || len > p->max_context_len || (int64_t)len > (int64_t)b->max_blocks_per_seq * bs)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq %d: %d query rows, seq_len %d (max context %d)", s,
                      q1 - q0, len, p->max_context_len);
    for (int32_t k = 0; k < (len + bs - 1) / bs; k++) {
      const int32_t id = b->block_tables[(int64_t)s * b->max_blocks_per_seq + k];
      if (id < 0 || id >= nb)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq %d block %d: id %d not in [0, %d)", s, k, id, nb);
    }
  }
  return LLB_STATUS_OK;
}

/* Writes the step's metadata into the pinned staging buffer, padded to n_rows rows / seqs
 * when n_rows > b->num_tokens (decode buckets: pad rows are 1-token sequences at block 0
 * that write no KV). */
static void stage_meta(struct cuda_forward_ctx *c, const struct llama_batch *b, int32_t n_rows,
                       const struct cuda_sample_params *sample) {
  const struct meta_layout *l = &c->ml;
  int32_t *ids = (int32_t *)(c->meta_h + l->ids), *pos = (int32_t *)(c->meta_h + l->pos);
  int64_t *slots = (int64_t *)(c->meta_h + l->slots);
  int32_t *qsl = (int32_t *)(c->meta_h + l->qsl), *lens = (int32_t *)(c->meta_h + l->seq_lens);
  int32_t *row_seq = (int32_t *)(c->meta_h + l->row_seq), *tables = (int32_t *)(c->meta_h + l->tables);
  int32_t *lidx = (int32_t *)(c->meta_h + l->logits_idx);
  struct cuda_sample_params *sp = (struct cuda_sample_params *)(c->meta_h + l->sparams);
  const int32_t MB = c->p.max_blocks_per_seq;
  for (int32_t i = 0; i < b->num_tokens; i++) {
    ids[i] = (b->token_ids && !(b->input_embeds && (!b->embeds_mask || b->embeds_mask[i]))) ? b->token_ids[i] : 0;
    pos[i] = b->positions[i];
    slots[i] = b->slot_mapping[i];
  }
  for (int32_t s = 0; s < b->num_seqs; s++) {
    qsl[s] = b->query_start_loc[s];
    lens[s] = b->seq_lens[s];
    memcpy(tables + (size_t)s * MB, b->block_tables + (size_t)s * b->max_blocks_per_seq,
           (size_t)b->max_blocks_per_seq * 4);
    for (int32_t r = b->query_start_loc[s]; r < b->query_start_loc[s + 1]; r++) row_seq[r] = s;
  }
  qsl[b->num_seqs] = b->num_tokens;
  for (int32_t i = 0; i < b->num_logits; i++) lidx[i] = b->logits_indices[i];
  for (int32_t i = 0; i < b->num_logits && sample; i++) sp[i] = sample[i];
  for (int32_t i = b->num_tokens; i < n_rows; i++) { /* decode padding: row i is seq i */
    ids[i] = 0, pos[i] = 0, slots[i] = -1, lens[i] = 1, row_seq[i] = i, qsl[i + 1] = i + 1, lidx[i] = i;
    memset(tables + (size_t)i * MB, 0, (size_t)MB * 4);
    sp[i] = (struct cuda_sample_params){0.0f, 0, 1.0f, 0.0f, 0, 0, 0};
  }
}

/* Queues the whole step on the context's stream (captured into a graph for decode). */
static llb_status enqueue_step(struct cuda_forward_ctx *c, struct cuda_kv_cache *kv, int32_t T, int32_t S,
                               int32_t n_logits, int32_t max_seq_len, bool sample, const float *embeds,
                               const uint8_t *embeds_mask) {
  const struct cuda_model *m = c->m;
  const struct llama_config *cfg = &m->cfg;
  struct cuda_ctx *cc = c->cc;
  const struct meta_layout *l = &c->ml;
  uint8_t *md = c->meta_d;
  const int32_t E = cfg->embedding_length, D = cfg->head_dim, H = cfg->head_count, HKV = cfg->head_count_kv;
  const int64_t F = cfg->feed_forward_length, HD = (int64_t)H * D, KD = (int64_t)HKV * D, QKV = HD + 2 * KD;
  const float eps = cfg->layer_norm_rms_epsilon;
  const struct backend_rope_params rope = {
      cfg->rope_dimension_count, cfg->rope_freq_base, cfg->rope_freq_scale,
      cfg->rope_type == LLAMA_ROPE_TYPE_NEOX ? BACKEND_ROPE_STYLE_NEOX : BACKEND_ROPE_STYLE_NORM,
      nullptr /* freq_factors: models with rope_freqs.weight are refused on CUDA (runner_backend.c) */,
      1.0f /* attn_factor: files with another are refused (cuda_model_load) */};
  const int32_t *pos = (const int32_t *)(md + l->pos);
  (void)S;
  CUDA_TRY(cudaMemcpyAsync(c->meta_d, c->meta_h, l->total, cudaMemcpyHostToDevice, cc->stream));
  FWD_TRY(cuda_embed(cc, &m->tok_embd, (const int32_t *)(md + l->ids), T, c->x));
  if (embeds) /* rows given as embeddings replace the gathered ones (eager steps only) */
    for (int32_t i = 0; i < T; i++)
      if (!embeds_mask || embeds_mask[i])
        CUDA_TRY(cudaMemcpyAsync(c->x + (size_t)i * E, embeds + (size_t)i * E, (size_t)E * 4,
                                 cudaMemcpyHostToDevice, cc->stream));
  {
    for (int32_t il = 0; il < cfg->block_count; il++) {
      const struct cuda_layer *ly = &m->layers[il];
      FWD_TRY(cuda_rms_norm(cc, c->x, il == 0 ? NULL : c->tmp, ly->attn_norm, T, E, eps, NULL, c->x16));
      FWD_TRY(cuda_matmul(cc, c->x16, T, &ly->wqkv, c->qkv));
      FWD_TRY(cuda_rope(cc, c->qkv, QKV, pos, T, H, D, &rope));
      FWD_TRY(cuda_rope(cc, c->qkv + HD, QKV, pos, T, HKV, D, &rope));
      FWD_TRY(cuda_kv_write(cc, &kv->layers[il], c->qkv + HD, c->qkv + HD + KD, QKV,
                            (const int64_t *)(md + l->slots), T));
      const struct cuda_attn_params ap = {c->qkv, QKV, NULL, c->x16, &kv->layers[il], T, H,
                                          1.0f / sqrtf((float)D), (const int32_t *)(md + l->row_seq),
                                          (const int32_t *)(md + l->qsl), (const int32_t *)(md + l->seq_lens),
                                          (const int32_t *)(md + l->tables), c->p.max_blocks_per_seq, max_seq_len};
      FWD_TRY(cuda_attention(cc, &ap));
      FWD_TRY(cuda_matmul(cc, c->x16, T, &ly->wo, c->tmp));
      FWD_TRY(cuda_rms_norm(cc, c->x, c->tmp, ly->ffn_norm, T, E, eps, NULL, c->x16));
      FWD_TRY(cuda_matmul(cc, c->x16, T, &ly->wgu, c->gu));
      FWD_TRY(cuda_silu_and_mul(cc, c->gu, c->gu + F, 2 * F, T, F, c->x16));
      FWD_TRY(cuda_matmul(cc, c->x16, T, &ly->wdown, c->tmp));
    }
    if (n_logits == 0) return LLB_STATUS_OK;
    /* final residual add + norm in place into tmp, then the logits rows only */
    FWD_TRY(cuda_rms_norm(cc, c->x, c->tmp, m->output_norm, T, E, eps, c->tmp, NULL));
    FWD_TRY(cuda_gather_f16(cc, c->tmp, (const int32_t *)(md + l->logits_idx), n_logits, E, c->x16));
    FWD_TRY(cuda_matmul(cc, c->x16, n_logits, &m->output, c->logits));
    if (sample) {
      FWD_TRY(cuda_sample(cc, c->logits, n_logits, cfg->vocab_size,
                          (const struct cuda_sample_params *)(md + l->sparams), c->tokens_d));
      CUDA_TRY(cudaMemcpyAsync(c->tokens_h, c->tokens_d, (size_t)n_logits * 4, cudaMemcpyDeviceToHost,
                               cc->stream));
    }
  }
  return LLB_STATUS_OK;
}

/* Decode batch: every sequence one row, logits for row i = i, token ids only. */
static bool is_plain_decode(const struct llama_batch *b) {
  if (b->num_tokens != b->num_seqs || b->num_logits != b->num_tokens || b->input_embeds) return false;
  for (int32_t i = 0; i < b->num_seqs; i++)
    if (b->query_start_loc[i] != i || b->logits_indices[i] != i) return false;
  return true;
}

static llb_status capture_graph(struct cuda_forward_ctx *c, struct cuda_kv_cache *kv, int32_t B, bool sample,
                                cudaGraphExec_t *out) {
  cudaStream_t s = c->cc->stream;
  CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const llb_status st = enqueue_step(c, kv, B, B, B, c->p.max_context_len, sample, NULL, NULL);
  cudaGraph_t g = NULL;
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  if (st != LLB_STATUS_OK) {
    if (g) (void)cudaGraphDestroy(g);
    return st;
  }
  if (e != cudaSuccess) return cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaStreamEndCapture");
  const cudaError_t ei = cudaGraphInstantiate(out, g, 0);
  (void)cudaGraphDestroy(g);
  if (ei != cudaSuccess) return cuda_status_from(ei, __FILE__, __func__, __LINE__, "cudaGraphInstantiate");
  c->num_graphs++;
  return LLB_STATUS_OK;
}

llb_status cuda_forward(struct cuda_forward_ctx *c, struct cuda_kv_cache *kv, const struct llama_batch *b,
                        const struct cuda_sample_params *sample, float *logits, int32_t *tokens) {
  if (!c || !kv || !b || (sample && !tokens))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NULL argument");
  if (kv->model != c->m) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv cache of another model");
  if (sample && !c->p.device_sampling)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "device sampling was not enabled for this context");
  FWD_TRY(check_batch(c, kv, b));
  const int32_t V = c->m->cfg.vocab_size;
  struct cuda_ctx *cc = c->cc;
  int bucket = -1;
  if (c->p.use_graphs && is_plain_decode(b))
    for (int i = 0; i < NUM_BUCKETS; i++)
      if (graph_buckets[i] >= b->num_seqs && graph_buckets[i] <= c->p.max_num_seqs &&
          graph_buckets[i] <= c->p.max_num_logits) {
        bucket = i;
        break;
      }
  if (bucket >= 0) {
    const int32_t B = graph_buckets[bucket];
    stage_meta(c, b, B, sample);
    cudaGraphExec_t *g = &c->graphs[bucket][sample ? 1 : 0];
    if (!*g) FWD_TRY(capture_graph(c, kv, B, sample != NULL, g));
    CUDA_TRY(cudaGraphLaunch(*g, cc->stream));
  } else {
    stage_meta(c, b, b->num_tokens, sample);
    int32_t max_len = 1;
    for (int32_t s = 0; s < b->num_seqs; s++) max_len = b->seq_lens[s] > max_len ? b->seq_lens[s] : max_len;
    FWD_TRY(enqueue_step(c, kv, b->num_tokens, b->num_seqs, b->num_logits, max_len, sample != NULL,
                         b->input_embeds, b->embeds_mask));
  }
  if (logits && b->num_logits > 0)
    CUDA_TRY(cudaMemcpyAsync(logits, c->logits, (size_t)b->num_logits * V * 4, cudaMemcpyDeviceToHost, cc->stream));
  FWD_TRY(cuda_ctx_sync(cc));
  if (sample) memcpy(tokens, c->tokens_h, (size_t)b->num_logits * 4);
  return LLB_STATUS_OK;
}
