/* The CUDA backend's op table (kernels/backend.h) over the ops of cuda_backend.h: the execution
 * context, device buffers, weight upload (fp16 at load), and one adapter per op. The step
 * hooks are in step.cu. */
#include "kernels/cuda/backend_cuda.cuh"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ context */

static void cuda_backend_ctx_destroy(struct backend_ctx *c) {
  if (!c) return;
  if (c->cc) (void)cudaStreamSynchronize(c->cc->stream);
  for (int b = 0; b < CUDA_GRAPH_BUCKETS; b++)
    if (c->graphs[b]) (void)cudaGraphExecDestroy(c->graphs[b]);
  if (c->meta_h) (void)cudaFreeHost(c->meta_h);
  cuda_mem_free(c->meta_d);
  cuda_mem_free(c->x16);
  cuda_ctx_destroy(c->cc);
  free(c);
}

static llb_status cuda_backend_ctx_create(const struct backend_ctx_params *p, struct backend_ctx **out) {
  *out = NULL;
  if (!p || p->max_num_tokens < 1 || p->max_row_elems < 1 || p->max_context_len < 1 || p->n_heads < 1 ||
      p->max_num_seqs < 0 || p->max_num_seqs > p->max_num_tokens || p->max_num_logits < 0 ||
      p->max_num_logits > p->max_num_tokens || p->max_blocks_per_seq < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda backend ctx: %d tokens, %d heads, %d seqs, %d logits",
                    p ? p->max_num_tokens : 0, p ? p->n_heads : 0, p ? p->max_num_seqs : 0, p ? p->max_num_logits : 0);
  if (p->head_dim < 8 || p->head_dim % 8 != 0 || p->head_dim > CUDA_ATTN_MAX_HEAD_DIM)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda: head_dim %d (a multiple of 8, <= %d)", p->head_dim,
                    CUDA_ATTN_MAX_HEAD_DIM);
  struct backend_ctx *c = (struct backend_ctx *)calloc(1, sizeof(*c));
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cuda backend ctx");
  c->p = *p;
  if (c->p.max_num_seqs == 0) c->p.max_num_seqs = p->max_num_tokens;
  if (c->p.max_num_logits == 0) c->p.max_num_logits = p->max_num_tokens;
  if (c->p.max_blocks_per_seq == 0) c->p.max_blocks_per_seq = p->max_context_len;
  c->capturing = -1;
  c->ml = cuda_step_layout_for(&c->p);
  llb_status st;
  const struct cuda_ctx_params cp = {p->max_num_tokens, p->n_heads, p->head_dim, p->max_context_len, 0, 0, 0};
  if ((st = cuda_ctx_create(&cp, &c->cc)) != LLB_STATUS_OK) goto fail;
  {
    const cudaError_t e = cudaMallocHost((void **)&c->meta_h, c->ml.total);
    if (e != cudaSuccess) {
      c->meta_h = NULL;
      st = cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaMallocHost(step metadata)");
      goto fail;
    }
  }
  if ((st = cuda_mem_alloc(c->ml.total, (void **)&c->meta_d)) != LLB_STATUS_OK ||
      (st = cuda_mem_alloc((size_t)p->max_num_tokens * (size_t)p->max_row_elems * 2, (void **)&c->x16)) !=
          LLB_STATUS_OK)
    goto fail;
  memset(c->meta_h, 0, c->ml.total);
  *out = c;
  return LLB_STATUS_OK;
fail:
  cuda_backend_ctx_destroy(c);
  return st;
}

/* ------------------------------------------------------------------ memory */

static llb_status cuda_buffer_alloc(size_t bytes, void **out) { return cuda_mem_alloc(bytes, out); }

static void cuda_buffer_free(void *p) { cuda_mem_free(p); }

static llb_status cuda_buffer_upload(struct backend_ctx *c, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return LLB_STATUS_OK;
  /* pageable src: the call returns once src is staged, so it may be reused at once */
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->cc->stream));
  return LLB_STATUS_OK;
}

static llb_status cuda_buffer_download(struct backend_ctx *c, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return cuda_ctx_sync(c->cc);
  return cuda_copy_to_host(c->cc, dst, src, bytes);
}

static llb_status cuda_buffer_clear(struct backend_ctx *c, void *dst, size_t bytes) {
  if (bytes == 0) return LLB_STATUS_OK;
  CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, c->cc->stream));
  return LLB_STATUS_OK;
}

static llb_status cuda_memory_info(size_t *free_bytes, size_t *total_bytes) {
  return cuda_mem_info(free_bytes, total_bytes);
}

/* ------------------------------------------------------------------ weights */

static bool dequantizable(enum ggml_type t) {
  switch (t) {
  case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
  case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: return true;
  default: return false;
  }
}

/* fp16 [rows, cols]: every type cuda_dequantize reads. */
static size_t cuda_weight_bytes(const struct backend_weight *w) {
  return dequantizable(w->type) ? (size_t)w->rows * (size_t)w->cols * 2 : 0;
}

/* The GGUF bytes go to a device staging buffer, cuda_dequantize writes fp16 into dst. */
static llb_status cuda_weight_upload(struct backend_ctx *c, const struct backend_weight *w, void *dst) {
  if (!dequantizable(w->type))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda: no fp16 layout for weights of type %s", ggml_type_name(w->type));
  const size_t bytes = w->row_bytes * (size_t)w->rows;
  void *staging = NULL;
  llb_status st = cuda_mem_alloc(bytes, &staging);
  if (st != LLB_STATUS_OK) return st;
  const cudaError_t e = cudaMemcpyAsync(staging, w->data, bytes, cudaMemcpyHostToDevice, c->cc->stream);
  if (e != cudaSuccess) st = cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaMemcpyAsync(weight)");
  if (st == LLB_STATUS_OK) st = cuda_dequantize(c->cc, w->type, staging, w->rows * w->cols, CUDA_DTYPE_F16, dst);
  if (st == LLB_STATUS_OK) st = cuda_ctx_sync(c->cc); /* before the staging buffer goes */
  cuda_mem_free(staging);
  return st;
}

/* The device fp16 matrix of an uploaded weight. */
static llb_status device_weight(const struct backend_weight *w, struct cuda_weight *out) {
  if (!w->packed)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda: weight [%lld, %lld] was not uploaded (weight_upload)",
                    (long long)w->rows, (long long)w->cols);
  *out = (struct cuda_weight){CUDA_DTYPE_F16, w->rows, w->cols, (void *)w->packed};
  return LLB_STATUS_OK;
}

/* ------------------------------------------------------------------ ops */

static llb_status cuda_op_embed(struct backend_ctx *c, const struct backend_weight *table, const int32_t *ids,
                                int32_t n, float *out) {
  struct cuda_weight t;
  llb_status st = device_weight(table, &t);
  return st != LLB_STATUS_OK ? st : cuda_embed(c->cc, &t, ids, n, out);
}

static llb_status cuda_op_rms_norm(struct backend_ctx *c, const float *x, const float *w, int32_t n_rows, int32_t dim,
                                   float eps, float *out) {
  /* no add: x is only read (out may alias it: each thread reads x[i] before writing out[i]) */
  return cuda_rms_norm(c->cc, (float *)x, NULL, w, n_rows, dim, eps, out, NULL);
}

/* x rounded to fp16 once, then one cuBLAS product per weight. */
static llb_status cuda_op_matmul(struct backend_ctx *c, const float *x, int32_t n_rows,
                                 const struct backend_weight *const *w, float *const *out, int32_t n_w) {
  if (n_w < 1 || n_rows < 0 || n_rows > c->p.max_num_tokens || w[0]->cols > c->p.max_row_elems)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda matmul: %d rows of %lld, %d weights", n_rows,
                    (long long)w[0]->cols, n_w);
  for (int32_t j = 1; j < n_w; j++)
    if (w[j]->cols != w[0]->cols)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda matmul: weights of %lld and %lld columns",
                      (long long)w[0]->cols, (long long)w[j]->cols);
  llb_status st = cuda_gather_f16(c->cc, x, NULL, n_rows, (int32_t)w[0]->cols, c->x16);
  for (int32_t j = 0; j < n_w && st == LLB_STATUS_OK; j++) {
    struct cuda_weight cw;
    if ((st = device_weight(w[j], &cw)) == LLB_STATUS_OK) st = cuda_matmul(c->cc, c->x16, n_rows, &cw, out[j]);
  }
  return st;
}

static llb_status cuda_op_rope(struct backend_ctx *c, float *x, const int32_t *positions, int32_t n_rows,
                               int32_t n_heads, int32_t head_dim, const struct backend_rope_params *p) {
  return cuda_rope(c->cc, x, (int64_t)n_heads * head_dim, positions, n_rows, n_heads, head_dim, p);
}

static struct cuda_kv_layer device_kv(const struct backend_kv_layer *kv) {
  return (struct cuda_kv_layer){(uint16_t *)kv->k, (uint16_t *)kv->v, kv->num_blocks, kv->block_size,
                                kv->n_kv_heads, kv->head_dim};
}

static llb_status cuda_op_kv_write(struct backend_ctx *c, const struct backend_kv_layer *kv, const float *k,
                                   const float *v, const int64_t *slot_mapping, int32_t n_rows) {
  if (kv->dtype != BACKEND_KV_DTYPE_F16) /* kv_dtype_ok is NULL: fp16 caches only */
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda: fp16 kv caches only (dtype %d)", (int)kv->dtype);
  const struct cuda_kv_layer ckv = device_kv(kv);
  return cuda_kv_write(c->cc, &ckv, k, v, (int64_t)kv->n_kv_heads * kv->head_dim, slot_mapping, n_rows);
}

/* Paged attention of the open step: its row -> sequence map and grid extent come from
 * step_begin, so the call must carry that step's query_start_loc. */
static llb_status cuda_op_attention(struct backend_ctx *c, const struct backend_attn_params *p) {
  if (p->kv->dtype != BACKEND_KV_DTYPE_F16)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda attention: fp16 kv caches only (dtype %d)", (int)p->kv->dtype);
  if (p->sliding_window > 0 || p->logit_softcap > 0.0f)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "cuda attention: sliding window %d, soft-cap %g: the CUDA backend refuses them (gemma2/3, Mistral windows run on the CPU)",
                    p->sliding_window, (double)p->logit_softcap);
  const uint8_t *d = c->meta_d;
  if (!c->in_step || p->query_start_loc != (const int32_t *)(d + c->ml.qsl))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda attention outside a step (step_begin's arrays)");
  const struct cuda_kv_layer ckv = device_kv(p->kv);
  const struct cuda_attn_params ap = {p->q, (int64_t)p->n_heads * p->kv->head_dim, p->out, NULL, &ckv,
                                      p->num_tokens, p->n_heads, p->scale, (const int32_t *)(d + c->ml.row_seq),
                                      p->query_start_loc, p->seq_lens, p->block_tables, p->max_blocks_per_seq,
                                      c->step_max_seq_len};
  return cuda_attention(c->cc, &ap);
}

static llb_status cuda_op_swiglu(struct backend_ctx *c, const float *gate, const float *up, int64_t n, float *out) {
  return cuda_swiglu(c->cc, gate, up, n, out);
}

static llb_status cuda_op_add(struct backend_ctx *c, float *x, const float *y, int64_t n) {
  return cuda_add(c->cc, x, y, n);
}

static llb_status cuda_op_get_rows(struct backend_ctx *c, const float *x, int32_t dim, const int32_t *rows, int32_t n,
                                   float *out) {
  return cuda_get_rows(c->cc, x, dim, rows, n, out);
}

static const struct backend_ops cuda_ops = {
    .name = "cuda",
    .ctx_create = cuda_backend_ctx_create,
    .ctx_destroy = cuda_backend_ctx_destroy,
    .embed = cuda_op_embed,
    .rms_norm = cuda_op_rms_norm,
    .matmul = cuda_op_matmul,
    .lora = NULL, /* LoRA adapters run on host backends only (forward.c refuses them here) */
    .rope = cuda_op_rope,
    .kv_write = cuda_op_kv_write,
    .attention = cuda_op_attention,
    .swiglu = cuda_op_swiglu,
    .add = cuda_op_add,
    /* not in this table: GeGLU, soft-capping and the vision encoder ops; the worker refuses such
     models on cuda before loading (runner_backend.c), so a NULL op is never reached */
    .geglu = NULL,
    .softcap = NULL,
    .pack_bytes = NULL, /* weights go up through weight_upload */
    .pack = NULL,
    .layer_norm = NULL,
    .gelu = NULL,
    .add_bias = NULL,
    .attention_full = NULL,
    .host_memory = false,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .buffer_upload = cuda_buffer_upload,
    .buffer_download = cuda_buffer_download,
    .buffer_clear = cuda_buffer_clear,
    .kv_dtype_ok = NULL, /* fp16 caches only */
    .memory_info = cuda_memory_info,
    .weight_bytes = cuda_weight_bytes,
    .weight_upload = cuda_weight_upload,
    .get_rows = cuda_op_get_rows,
    .step_begin = cuda_backend_step_begin,
    .step_end = cuda_backend_step_end,
    .idle = NULL,            /* the device holds no host core between steps */
    .set_num_threads = NULL, /* no host threads */
};

const struct backend_ops *backend_cuda_ops(void) { return &cuda_ops; }
