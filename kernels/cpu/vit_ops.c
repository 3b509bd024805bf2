/* CPU ops of a vision encoder (ViT): LayerNorm with bias, GELU (tanh and quick), a broadcast
 * bias add, bidirectional attention without a KV cache. Arithmetic follows ggml's CPU ops
 * (ggml-cpu/ops.cpp: norm, gelu, gelu_quick, soft_max) as closely as a plain C loop can; work
 * is split over rows (or query rows and heads), never inside a reduction, so a row's result
 * does not depend on the thread count. */
#include "kernels/cpu/cpu_backend.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* Elements of work below which a chunk is not worth another thread (as ops.c). */
#define VIT_CHUNK_ELEMS 8192

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t rows_per_chunk(int64_t elems_per_row) {
  const int64_t n = VIT_CHUNK_ELEMS / (elems_per_row > 0 ? elems_per_row : 1);
  return n > 0 ? n : 1;
}

/* ---------------------------------------------------------------- LayerNorm */

struct ln_task {
  const float *x, *w, *b;
  int32_t n_rows, dim;
  float eps;
  int64_t per;
  float *out;
};

static void layer_norm_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct ln_task *t = arg;
  const int64_t lo = chunk * t->per, hi = lo + t->per < t->n_rows ? lo + t->per : t->n_rows;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = t->x + r * t->dim;
    float *y = t->out + r * t->dim;
    double sum = 0.0; /* ggml_vec_sum_f32 sums in ggml_float */
    for (int32_t i = 0; i < t->dim; i++) sum += (double)x[i];
    const float mean = (float)(sum / t->dim);
    double var = 0.0; /* ggml_vec_cvar_f32: y = x - mean, sum of squares */
    for (int32_t i = 0; i < t->dim; i++) {
      const float d = x[i] - mean;
      y[i] = d;
      var += (double)(d * d);
    }
    const float scale = 1.0f / sqrtf((float)(var / t->dim) + t->eps);
    for (int32_t i = 0; i < t->dim; i++) {
      const float v = (y[i] * scale) * t->w[i]; /* ggml_norm, then ggml_mul */
      y[i] = t->b ? v + t->b[i] : v;           /* then ggml_add */
    }
  }
}

llb_status cpu_layer_norm(struct backend_ctx *c, const float *x, const float *w, const float *b,
                          int32_t n_rows, int32_t dim, float eps, float *out) {
  if (n_rows < 0 || dim < 1 || !w) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "layer_norm %d x %d", n_rows, dim);
  struct ln_task t = {x, w, b, n_rows, dim, eps, rows_per_chunk(dim), out};
  cpu_threadpool_parallel(c->pool, layer_norm_chunk, &t, ceil_div(n_rows, t.per));
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- GELU */

struct gelu_task {
  enum cpu_simd_level level;
  float *x;
  int64_t n;
  enum cpu_gelu_kind kind;
};

static void gelu_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct gelu_task *t = arg;
  const int64_t lo = chunk * VIT_CHUNK_ELEMS, hi = lo + VIT_CHUNK_ELEMS < t->n ? lo + VIT_CHUNK_ELEMS : t->n;
  /* ggml_vec_gelu_f32 / ggml_vec_gelu_quick_f32 with GGML_GELU_FP16 / GGML_GELU_QUICK_FP16 */
  cpu_gelu_row(t->level, t->kind, t->x + lo, NULL, t->x + lo, hi - lo);
}

llb_status cpu_gelu(struct backend_ctx *c, float *x, int64_t n, enum backend_gelu_kind kind) {
  if (n < 0 || (kind != BACKEND_GELU_TANH && kind != BACKEND_GELU_QUICK))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gelu of %lld (kind %d)", (long long)n, (int)kind);
  struct gelu_task t = {c->level, x, n, kind == BACKEND_GELU_QUICK ? CPU_GELU_QUICK : CPU_GELU_TANH};
  cpu_threadpool_parallel(c->pool, gelu_chunk, &t, ceil_div(n, VIT_CHUNK_ELEMS));
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- bias */

struct bias_task {
  float *x;
  const float *b;
  int32_t n_rows, dim;
  int64_t per;
};

static void add_bias_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct bias_task *t = arg;
  const int64_t lo = chunk * t->per, hi = lo + t->per < t->n_rows ? lo + t->per : t->n_rows;
  for (int64_t r = lo; r < hi; r++) {
    float *x = t->x + r * t->dim;
    for (int32_t i = 0; i < t->dim; i++) x[i] = x[i] + t->b[i];
  }
}

llb_status cpu_add_bias(struct backend_ctx *c, float *x, const float *b, int32_t n_rows, int32_t dim) {
  if (n_rows < 0 || dim < 1 || !b) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "add_bias %d x %d", n_rows, dim);
  struct bias_task t = {x, b, n_rows, dim, rows_per_chunk(dim)};
  cpu_threadpool_parallel(c->pool, add_bias_chunk, &t, ceil_div(n_rows, t.per));
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- attention */

struct full_attn_task {
  const struct backend_full_attn_params *p;
  float *scratch; /* [n_threads, stride]: k of one head transposed, then scores */
  int64_t stride; /* floats of one thread's scratch: (head_dim + 1) * n_tokens */
  bool avx2;      /* run the AVX2-compiled copy (same float order: no contraction) */
};

/* Every query row of head h. k of the head is transposed first ([head_dim][n_tokens]) so that
 * a query's scores are axpy's over the keys (each score a dot in index order, lanes are keys);
 * then softmax (ggml_soft_max_ext: scale, max, expf, sum in double, one multiply by 1/sum) and
 * the weighted sum of v rows, in key order. */
static inline __attribute__((always_inline)) void full_attn_head(const struct backend_full_attn_params *p, int32_t h,
                                                                float *kt) {
  const int32_t n = p->n_tokens, hd = p->head_dim;
  const int64_t row = (int64_t)p->n_heads * hd;
  float *s = kt + (int64_t)hd * n;
  for (int32_t j0 = 0; j0 < n; j0 += 16) /* blocks of 16 keys: the stores stay in few lines */
    for (int32_t d = 0; d < hd; d++)
      for (int32_t j = j0; j < n && j < j0 + 16; j++) kt[(int64_t)d * n + j] = p->k[j * row + (int64_t)h * hd + d];
  for (int32_t r = 0; r < n; r++) {
    const float *q = p->q + r * row + (int64_t)h * hd;
    memset(s, 0, (size_t)n * sizeof(float));
    for (int32_t d = 0; d < hd; d++) {
      const float qd = q[d], *kd = kt + (int64_t)d * n;
      for (int32_t j = 0; j < n; j++) s[j] += qd * kd[j];
    }
    float max = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
      s[j] *= p->scale;
      max = s[j] > max ? s[j] : max;
    }
    double sum = 0.0;
    for (int32_t j = 0; j < n; j++) {
      s[j] = expf(s[j] - max);
      sum += (double)s[j];
    }
    const float inv = (float)(1.0 / sum);
    float *o = p->out + r * row + (int64_t)h * hd;
    memset(o, 0, (size_t)hd * sizeof(float));
    for (int32_t j = 0; j < n; j++) {
      const float pj = s[j] * inv;
      const float *v = p->v + j * row + (int64_t)h * hd;
      for (int32_t d = 0; d < hd; d++) o[d] += pj * v[d];
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) static void full_attn_head_avx2(const struct backend_full_attn_params *p, int32_t h,
                                                                 float *kt) {
  full_attn_head(p, h, kt);
}
#endif

static void full_attn_item(void *arg, int64_t item, int ith) {
  const struct full_attn_task *t = arg;
  float *kt = t->scratch + (int64_t)ith * t->stride;
#if defined(__x86_64__) || defined(__i386__)
  if (t->avx2) {
    full_attn_head_avx2(t->p, (int32_t)item, kt);
    return;
  }
#endif
  full_attn_head(t->p, (int32_t)item, kt);
}

llb_status cpu_attention_full(struct backend_ctx *c, const struct backend_full_attn_params *p) {
  if (!p || p->n_tokens < 1 || p->n_heads < 1 || p->head_dim < 1 || p->n_tokens > c->params.max_num_tokens ||
      p->n_tokens > c->params.max_context_len)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "attention_full of %d tokens (max %d), %d heads of %d",
                    p ? p->n_tokens : 0, c->params.max_num_tokens, p ? p->n_heads : 0, p ? p->head_dim : 0);
  /* the scratch is the matmul activation buffer (unused during attention) */
  const int64_t stride = ((int64_t)p->head_dim + 1) * p->n_tokens;
  if ((size_t)(stride * c->params.n_threads) * sizeof(float) > c->act_bytes * CPU_MATMUL_MAX_WEIGHTS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "attention_full: %d threads x %lld floats over the context's scratch",
                    c->params.n_threads, (long long)stride);
  /* a work item is one head: its k is transposed once */
  struct full_attn_task t = {p, (float *)(void *)c->act, stride, c->level >= CPU_SIMD_LEVEL_AVX2};
  cpu_threadpool_parallel(c->pool, full_attn_item, &t, p->n_heads);
  return LLB_STATUS_OK;
}
