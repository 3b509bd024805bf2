/* CPU ops: context, embedding, RMSNorm, quantized matmul, RoPE, KV write, SwiGLU, add.
 * Work is split over rows or output columns, never inside a reduction, so a row's result
 * does not depend on the batch or the thread count. */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define OPS_HAVE_X86 1
#define OPS_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define OPS_HAVE_X86 0
#endif

/* Output columns per matmul chunk: about CPU_MATMUL_CHUNK_DOTS row-dots, clamped. */
#define CPU_MATMUL_CHUNK_DOTS 256
#define CPU_MATMUL_MIN_TILE 16
#define CPU_MATMUL_MAX_TILE 64
/* Rows up to which a matmul call is a decode step's (a few rows reading every weight once): its
 * chunks are cut by the bytes of weights they read, not by row-dots. */
#define CPU_MATMUL_DECODE_ROWS 3
/* Weight bytes a decode chunk reads, about: long runs for the hardware prefetchers and few claims.
 * A weight is cut into round(bytes / it) chunks, at least one (a call of one chunk runs on the
 * caller with no hand-off at all), and at least one a thread past CPU_MATMUL_DECODE_MIN_CHUNK_BYTES
 * a thread (SmolLM2's K and V, 62 KiB in Q4_0, stay whole; its Q and attention output, 187 KiB,
 * are cut in two on 2 threads). */
#define CPU_MATMUL_DECODE_CHUNK_BYTES (128 * 1024)
/* The least bytes a chunk of a weight cut one chunk a thread reads. Before, a weight under 1.5
 * chunks (SmolLM2's 576 x 576 attention output, 187 KiB in Q4_0) ran on the caller alone, and on
 * a CPU where one core reads half of what two do (the Intel Xeon guest of 2026-12-01: 18 against
 * 35 GB/s) that op took ~1.6x as long as split (docs/performance.md). */
#define CPU_MATMUL_DECODE_MIN_CHUNK_BYTES (64 * 1024)
/* Largest rotated dims per head RoPE takes. */
#define CPU_ROPE_MAX_DIMS 1024

/* Elements of work below which an op is not worth handing to another thread (a wake-up and
 * a claim cost about a microsecond; an element costs a nanosecond or less). */
#define CPU_CHUNK_ELEMS 8192

/* Items per chunk so that a chunk holds at least CPU_CHUNK_ELEMS elements. */
static int64_t items_per_chunk(int64_t elems_per_item) {
  const int64_t n = CPU_CHUNK_ELEMS / (elems_per_item > 0 ? elems_per_item : 1);
  return n > 0 ? n : 1;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Range [lo, hi) of chunk `chunk` of size `per` over n items. */
static void chunk_range(int64_t chunk, int64_t per, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = chunk * per;
  *hi = *lo + per < n ? *lo + per : n;
}

enum cpu_simd_level cpu_backend_set_simd_level(struct backend_ctx *c, enum cpu_simd_level level) {
  const enum cpu_simd_level best = cpu_simd_level_detect();
  c->level = level > best ? best : level;
  return c->level;
}

void cpu_backend_set_attn_order(struct backend_ctx *c, enum cpu_attn_order order) { c->attn_order = order; }

llb_status cpu_ctx_create(const struct backend_ctx_params *p, struct backend_ctx **out) {
  if (!p || !out || p->n_threads < 1 || p->max_num_tokens < 1 || p->max_row_elems < 1 ||
      p->max_context_len < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bad cpu backend sizes");
  *out = NULL;
  llb_status st;
  struct backend_ctx *c = calloc(1, sizeof(*c));
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cpu backend ctx");
  c->params = *p;
  c->level = cpu_simd_level_detect();
  c->attn_order = p->attention_order == BACKEND_ATTENTION_ORDER_LLAMACPP ? CPU_ATTN_ORDER_BY_QUERY_LEN
                                                                         : CPU_ATTN_ORDER_BATCH;
  st = cpu_threadpool_create(p->n_threads, &c->pool);
  if (st != LLB_STATUS_OK) goto fail;
  c->act_bytes = (size_t)p->max_num_tokens * (size_t)p->max_row_elems * sizeof(float);
  c->act = malloc(c->act_bytes * CPU_MATMUL_MAX_WEIGHTS);
  c->scores = malloc((size_t)p->n_threads * (size_t)p->max_context_len * CPU_ATTN_MAX_ROW_HEADS * sizeof(float));
  c->row_seq = malloc((size_t)p->max_num_tokens * sizeof(int32_t));
  c->kv_ident = malloc((size_t)p->max_context_len * sizeof(int32_t));
  if (c->kv_ident)
    for (int32_t i = 0; i < p->max_context_len; i++) c->kv_ident[i] = i;
  c->lora_scratch = malloc((size_t)p->n_threads * CPU_LORA_SCRATCH(p->max_row_elems)); /* touched only by LoRA */
  if (p->head_dim > 0) { /* malloc'd, not calloc'd: untouched pages cost no memory (fp16 caches) */
    c->kv_f16 = malloc((size_t)p->n_threads * 2 * (size_t)p->max_context_len * (size_t)p->head_dim * sizeof(uint16_t));
    c->rope_cs = malloc((size_t)p->max_num_tokens * (size_t)p->head_dim * sizeof(float));
    c->rope_pos = malloc((size_t)p->max_num_tokens * sizeof(int32_t));
    c->rope_ff = malloc((size_t)(p->head_dim / 2 + 1) * sizeof(float));
  }
  if (!c->act || !c->scores || !c->row_seq || !c->kv_ident || !c->lora_scratch ||
      (p->head_dim > 0 && (!c->kv_f16 || !c->rope_cs || !c->rope_pos || !c->rope_ff))) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cpu backend scratch (%d tokens x %lld elems)",
                  p->max_num_tokens, (long long)p->max_row_elems);
    goto fail;
  }
  *out = c;
  return LLB_STATUS_OK;
fail:
  cpu_ctx_destroy(c);
  return st;
}

void cpu_ctx_destroy(struct backend_ctx *c) {
  if (!c) return;
  cpu_threadpool_destroy(c->pool);
  free(c->act);
  free(c->scores);
  free(c->row_seq);
  free(c->kv_ident);
  free(c->kv_f16);
  free(c->lora_scratch);
  free(c->rope_cs);
  free(c->rope_pos);
  free(c->rope_ff);
  free(c);
}

/* ---------------------------------------------------------------- embedding */

struct embed_task {
  const struct backend_weight *table;
  const int32_t *ids;
  int32_t n;
  int64_t per; /* rows per chunk */
  float *out;
};

static void embed_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct embed_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, t->per, t->n, &lo, &hi);
  for (int64_t i = lo; i < hi; i++) {
    const uint8_t *row = (const uint8_t *)t->table->data + (size_t)t->ids[i] * t->table->row_bytes;
    /* type and length were checked by the caller: this cannot fail */
    (void)ggml_dequantize_row(t->table->type, row, t->out + i * t->table->cols, t->table->cols);
  }
}

llb_status cpu_embed(struct backend_ctx *c, const struct backend_weight *table, const int32_t *ids,
                     int32_t n, float *out) {
  if (!ggml_type_is_supported(table->type))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "embedding type %s", ggml_type_name(table->type));
  if (table->cols % ggml_type_block_elems(table->type) != 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "embedding row of %lld", (long long)table->cols);
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= table->rows)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "token id %d not in [0, %lld)", ids[i],
                      (long long)table->rows);
  struct embed_task t = {table, ids, n, items_per_chunk(table->cols), out};
  cpu_threadpool_parallel(c->pool, embed_chunk, &t, ceil_div(n, t.per));
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- RMSNorm */

struct norm_task {
  const float *x, *w;
  int32_t n_rows, dim;
  float eps;
  int64_t per;
  float *out;
  enum cpu_simd_level level;
};

/* Rows in one pass of RMSNorm's sums of squares. */
#define CPU_NORM_ROWS 8

/* sum[k] += (double)(x[k][i] * x[k][i]) for i in [from, dim), index order, CPU_NORM_ROWS rows. */
static void rms_sums_scalar(const float *const *x, int32_t from, int32_t dim, double *sum) {
  for (int32_t i = from; i < dim; i++)
    for (int k = 0; k < CPU_NORM_ROWS; k++) sum[k] += (double)(x[k][i] * x[k][i]);
}

#if OPS_HAVE_X86
/* rms_sums_scalar from 0: 4 elements of 8 rows squared in float, transposed so that a register
 * holds one element of 4 rows, widened to double and added in index order: the same adds,
 * two chains of 4 rows (4 scalar chains before: each add waits for the last). */
OPS_AVX2_TARGET static void rms_sums_avx2(const float *const *x, int32_t dim, double *sum) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int32_t i = 0;
  for (; i + 4 <= dim; i += 4) {
    __m128 a[CPU_NORM_ROWS];
    for (int k = 0; k < CPU_NORM_ROWS; k++) {
      a[k] = _mm_loadu_ps(x[k] + i);
      a[k] = _mm_mul_ps(a[k], a[k]);
    }
    _MM_TRANSPOSE4_PS(a[0], a[1], a[2], a[3]);
    _MM_TRANSPOSE4_PS(a[4], a[5], a[6], a[7]);
    for (int e = 0; e < 4; e++) {
      s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(a[e]));
      s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(a[4 + e]));
    }
  }
  _mm256_storeu_pd(sum, s0);
  _mm256_storeu_pd(sum + 4, s1);
  rms_sums_scalar(x, i, dim, sum);
}
#endif

static void rms_norm_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct norm_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, t->per, t->n_rows, &lo, &hi);
  for (int64_t r0 = lo; r0 < hi; r0 += CPU_NORM_ROWS) {
    /* ggml_compute_forward_rms_norm_f32 sums each row in ggml_float (double), in index order:
     * one chain of dependent adds per row, so up to CPU_NORM_ROWS rows' chains run side by side */
    const int64_t nr = hi - r0 < CPU_NORM_ROWS ? hi - r0 : CPU_NORM_ROWS;
    double sum[CPU_NORM_ROWS] = {0.0};
    const float *x[CPU_NORM_ROWS];
    for (int64_t k = 0; k < CPU_NORM_ROWS; k++) x[k] = t->x + (r0 + (k < nr ? k : 0)) * t->dim;
#if OPS_HAVE_X86
    if (t->level >= CPU_SIMD_LEVEL_AVX2) rms_sums_avx2(x, t->dim, sum);
    else rms_sums_scalar(x, 0, t->dim, sum);
#else
    rms_sums_scalar(x, 0, t->dim, sum);
#endif
    for (int64_t k = 0; k < nr; k++) {
      float *y = t->out + (r0 + k) * t->dim;
      const float mean = (float)(sum[k] / t->dim);
      const float scale = 1.0f / sqrtf(mean + t->eps);
      for (int32_t i = 0; i < t->dim; i++) y[i] = (x[k][i] * scale) * t->w[i];
    }
  }
}

llb_status cpu_rms_norm(struct backend_ctx *c, const float *x, const float *w, int32_t n_rows,
                        int32_t dim, float eps, float *out) {
  if (n_rows < 0 || dim < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "rms_norm %d x %d", n_rows, dim);
  struct norm_task t = {x, w, n_rows, dim, eps, items_per_chunk(dim), out, c->level};
  cpu_threadpool_parallel(c->pool, rms_norm_chunk, &t, ceil_div(n_rows, t.per));
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- matmul */

struct matmul_task {
  struct backend_ctx *c;
  const float *x; /* [n_rows, k] */
  int32_t n_rows;
  int64_t k;
  int32_t n_w;
  const struct backend_weight *const *w;
  float *const *out;
  uint8_t *act[CPU_MATMUL_MAX_WEIGHTS]; /* quantized x per weight ([n_rows, act_row]) */
  size_t act_row[CPU_MATMUL_MAX_WEIGHTS];
  bool owns_act[CPU_MATMUL_MAX_WEIGHTS]; /* first weight of its vec_dot type quantizes */
  cpu_vec_dot_fn dot[CPU_MATMUL_MAX_WEIGHTS];
  bool llamacpp_order; /* unpacked weights take llama.cpp's step-dependent kernels (cpu_vec_dot_select_llamacpp) */
  cpu_gemm_fn gemm[CPU_MATMUL_MAX_WEIGHTS]; /* tile kernel, NULL: dot per column */
  cpu_packed_fn packed[CPU_MATMUL_MAX_WEIGHTS]; /* w->packed's kernel, NULL: GGUF layout */
  bool packed_many[CPU_MATMUL_MAX_WEIGHTS];     /* packed[j] takes CPU_PACKED_MANY_ROWS rows a call */
  bool prefetch_l2[CPU_MATMUL_MAX_WEIGHTS];     /* packed[j]'s decode calls prefetch into L2 (a large weight) */
  cpu_packed_float_fn packed_f[CPU_MATMUL_MAX_WEIGHTS]; /* FLOAT panels' kernel (x as it is) */
  cpu_packed_bf16_fn packed_bf[CPU_MATMUL_MAX_WEIGHTS]; /* BF16 panels on AVX512_BF16 (x as bf16) */
  int64_t rows_per_chunk;                   /* quantization phase */
  int64_t tile[CPU_MATMUL_MAX_WEIGHTS];     /* output columns per chunk of each weight */
  int64_t chunk_end[CPU_MATMUL_MAX_WEIGHTS]; /* cumulative chunks of weights 0..j */
};

static void matmul_quantize_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct matmul_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, t->rows_per_chunk, t->n_rows, &lo, &hi);
  for (int j = 0; j < t->n_w; j++) {
    if (!t->owns_act[j] || (t->packed_f[j] && !t->packed_bf[j])) continue;
    for (int64_t r = lo; r < hi; r++) {
      uint8_t *row = t->act[j] + (size_t)r * t->act_row[j];
      if (t->packed_bf[j]) cpu_packed_bf16_act_row(t->c->level, t->x + r * t->k, (uint16_t *)(void *)row, t->k);
      else if (t->packed[j]) cpu_quantize_act_row_x(t->c->level, t->x + r * t->k, (block_q8_x *)row, t->k);
      else cpu_quantize_act_row(t->w[j]->type, t->x + r * t->k, row, t->k);
    }
  }
}

/* Columns [c0, c1) (whole panels) of packed weight j for all token rows, `tile` rows at a time
 * (a constant: CPU_PACKED_MAX_ROWS, or CPU_PACKED_MANY_ROWS for a cpu_packed_select_many kernel,
 * which unpacks a panel's blocks once per call): the chunk's panels stay in L1/L2 while the
 * activation rows stream past. */
static inline __attribute__((always_inline)) void packed_columns_tile(const struct matmul_task *t, int j, int64_t c0,
                                                                      int64_t c1, const int tile) {
  const struct backend_weight *w = t->w[j];
  const int64_t nb = t->k / 32, n_out = w->rows;
  int fs = 0;
  const int fam = cpu_pack_kind(w->type, &fs);
  const size_t panel_bytes = (size_t)nb * cpu_pack_block_bytes(fam, fs);
  const uint8_t *wp = w->packed;
  cpu_packed_prefetch_to_l2(t->prefetch_l2[j]); /* on this chunk's thread */
  for (int32_t r0 = 0; r0 < t->n_rows; r0 += tile) {
    const int nr = t->n_rows - r0 < tile ? t->n_rows - r0 : tile;
    const block_q8_x *rows[CPU_PACKED_MANY_ROWS];
    for (int r = 0; r < nr; r++) rows[r] = (const block_q8_x *)(t->act[j] + (size_t)(r0 + r) * t->act_row[j]);
    float *o = t->out[j] + (int64_t)r0 * n_out;
    for (int64_t col = c0; col < c1; col += CPU_PACK_COLS)
      t->packed[j](nb, wp + (size_t)(col / CPU_PACK_COLS) * panel_bytes, rows, nr, o + col, n_out);
  }
}

static void packed_columns(const struct matmul_task *t, int j, int64_t c0, int64_t c1) {
  if (t->packed_many[j]) packed_columns_tile(t, j, c0, c1, CPU_PACKED_MANY_ROWS);
  else packed_columns_tile(t, j, c0, c1, CPU_PACKED_MAX_ROWS);
}

/* packed_columns for FLOAT panels: the activation rows are x's own, or their bf16 copy. */
static void packed_float_columns(const struct matmul_task *t, int j, int64_t c0, int64_t c1) {
  const struct backend_weight *w = t->w[j];
  const int64_t nb = t->k / 32, n_out = w->rows;
  const size_t panel_bytes = (size_t)nb * cpu_pack_block_bytes(CPU_PACK_FAMILY_FLOAT, 0);
  for (int32_t r0 = 0; r0 < t->n_rows; r0 += CPU_PACKED_MAX_ROWS) {
    const int nr = t->n_rows - r0 < CPU_PACKED_MAX_ROWS ? t->n_rows - r0 : CPU_PACKED_MAX_ROWS;
    const float *rows[CPU_PACKED_MAX_ROWS];
    const uint16_t *rows_bf[CPU_PACKED_MAX_ROWS];
    for (int r = 0; r < nr; r++) {
      rows[r] = t->x + (int64_t)(r0 + r) * t->k;
      rows_bf[r] = (const uint16_t *)(const void *)(t->act[j] + (size_t)(r0 + r) * t->act_row[j]);
    }
    float *o = t->out[j] + (int64_t)r0 * n_out;
    for (int64_t col = c0; col < c1; col += CPU_PACK_COLS) {
      const uint8_t *panel = w->packed + (size_t)(col / CPU_PACK_COLS) * panel_bytes;
      if (t->packed_bf[j]) t->packed_bf[j](nb, panel, rows_bf, nr, o + col, n_out);
      else t->packed_f[j](nb, panel, rows, nr, o + col, n_out);
    }
  }
}

/* Columns [c0, c1) of weight j for all token rows: rows in groups of CPU_DOT_MAX_ROWS, the
 * weight tile stays in L1 while the activation rows stream past it. */
static void matmul_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct matmul_task *t = arg;
  int j = 0;
  while (chunk >= t->chunk_end[j]) j++;
  const int64_t first = j == 0 ? 0 : t->chunk_end[j - 1];
  const struct backend_weight *w = t->w[j];
  const int64_t n_out = w->rows;
  int64_t c0, c1;
  chunk_range(chunk - first, t->tile[j], n_out, &c0, &c1);
  float *out = t->out[j];
  if (t->packed[j]) {
    packed_columns(t, j, c0, c1);
    return;
  }
  if (t->packed_f[j]) {
    packed_float_columns(t, j, c0, c1);
    return;
  }
  const uint8_t *wd = (const uint8_t *)w->data;
  _Static_assert(CPU_DOT_MAX_ROWS == 4, "llama.cpp's gemm groups of 4 rows are dot calls");
  for (int32_t r0 = 0; r0 < t->n_rows; r0 += CPU_DOT_MAX_ROWS) {
    const int nr = t->n_rows - r0 < CPU_DOT_MAX_ROWS ? t->n_rows - r0 : CPU_DOT_MAX_ROWS;
    const cpu_vec_dot_fn dot =
        t->llamacpp_order ? cpu_vec_dot_select_llamacpp(w->type, t->c->level, t->n_rows, r0) : t->dot[j];
    const void *rows[CPU_DOT_MAX_ROWS];
    for (int r = 0; r < nr; r++) rows[r] = t->act[j] + (size_t)(r0 + r) * t->act_row[j];
    float *o = out + (int64_t)r0 * n_out;
    if (t->gemm[j]) {
      for (int64_t col = c0; col < c1; col += CPU_GEMM_MAX_COLS) {
        const int nc = c1 - col < CPU_GEMM_MAX_COLS ? (int)(c1 - col) : CPU_GEMM_MAX_COLS;
        t->gemm[j](t->k, wd + (size_t)col * w->row_bytes, w->row_bytes, nc, rows, nr, o + col, n_out);
      }
    } else {
      for (int64_t col = c0; col < c1; col++) {
        float res[CPU_DOT_MAX_ROWS];
        dot(t->k, wd + (size_t)col * w->row_bytes, rows, nr, res);
        for (int r = 0; r < nr; r++) o[(int64_t)r * n_out + col] = res[r];
      }
    }
  }
}

/* Weights whose activations are quantized alike share one quantized copy of x. */
static int act_kind(const struct matmul_task *t, int j) {
  return t->packed_bf[j] ? -3 : t->packed_f[j] ? -2 : t->packed[j] ? -1 : (int)cpu_vec_dot_type(t->w[j]->type);
}

/* Output columns per chunk of w in a call of n_rows rows, whole panels (a multiple of the gemm
 * tile too). Up to CPU_MATMUL_DECODE_ROWS rows: w cut into chunks of ~CPU_MATMUL_DECODE_CHUNK_BYTES
 * of its rows (64 columns before, ~20 KiB of a 576-wide Q4_0 weight: a SmolLM2 decode step made
 * 3200 claims, each thread's stream broken every chunk), and into at least one chunk for each of
 * the `threads` that take chunks where every one still reads CPU_MATMUL_DECODE_MIN_CHUNK_BYTES.
 * More rows: ~CPU_MATMUL_CHUNK_DOTS row-dots, clamped to [CPU_MATMUL_MIN_TILE, CPU_MATMUL_MAX_TILE].
 * The chunks are column ranges: how a weight is cut changes no output bit. */
static int64_t matmul_tile(const struct backend_weight *w, int32_t n_rows, int threads) {
  if (n_rows <= CPU_MATMUL_DECODE_ROWS) {
    const int64_t bytes = w->rows * (int64_t)w->row_bytes;
    int64_t n = (bytes + CPU_MATMUL_DECODE_CHUNK_BYTES / 2) / CPU_MATMUL_DECODE_CHUNK_BYTES;
    const int64_t most = bytes / CPU_MATMUL_DECODE_MIN_CHUNK_BYTES, split = most < threads ? most : threads;
    if (split > n) n = split;
    n = n < 1 ? 1 : n;
    return ceil_div(ceil_div(w->rows, n), CPU_PACK_COLS) * CPU_PACK_COLS;
  }
  int64_t tile = CPU_MATMUL_CHUNK_DOTS / n_rows;
  tile = tile < CPU_MATMUL_MIN_TILE ? CPU_MATMUL_MIN_TILE : tile > CPU_MATMUL_MAX_TILE ? CPU_MATMUL_MAX_TILE : tile;
  return tile - tile % CPU_PACK_COLS;
}

llb_status cpu_matmul(struct backend_ctx *c, const float *x, int32_t n_rows,
                      const struct backend_weight *const *w, float *const *out, int32_t n_w) {
  if (n_w < 1 || n_w > CPU_MATMUL_MAX_WEIGHTS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul of %d weights", n_w);
  if (n_rows < 0 || n_rows > c->params.max_num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul of %d rows (max %d)", n_rows,
                    c->params.max_num_tokens);
  struct matmul_task t = {.c = c, .x = x, .n_rows = n_rows, .k = w[0]->cols, .n_w = n_w, .w = w,
                          .out = out, .llamacpp_order = c->attn_order == CPU_ATTN_ORDER_BY_QUERY_LEN};
  if (t.k > c->params.max_row_elems)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul row of %lld (max %lld)", (long long)t.k,
                    (long long)c->params.max_row_elems);
  int64_t n_chunks = 0;
  for (int j = 0; j < n_w; j++) {
    const enum ggml_type ty = w[j]->type;
    if (w[j]->cols != t.k)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul weights of %lld and %lld cols",
                      (long long)t.k, (long long)w[j]->cols);
    t.dot[j] = cpu_vec_dot_select(ty, c->level);
    if (!t.dot[j]) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "matmul weight type %s", ggml_type_name(ty));
    t.gemm[j] = cpu_gemm_select(ty, c->level);
    if (t.k % ggml_type_block_elems(ty) != 0)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "row of %lld not a multiple of %s blocks",
                      (long long)t.k, ggml_type_name(ty));
    const bool packed = w[j]->packed && cpu_pack_shape_ok(w[j]);
    const cpu_packed_fn many = packed ? cpu_packed_select_many(ty, c->level) : NULL;
    t.packed[j] = many ? many : packed ? cpu_packed_select(ty, c->level) : NULL;
    t.packed_many[j] = many != NULL;
    t.prefetch_l2[j] = t.packed[j] && cpu_pack_bytes(w[j]) >= CPU_PACK_L2_PREFETCH_BYTES;
    t.packed_f[j] = packed ? cpu_packed_float_select(ty, c->level) : NULL;
    t.packed_bf[j] = packed ? cpu_packed_bf16_select(ty, c->level) : NULL;
    t.act_row[j] = t.packed[j]      ? (size_t)(t.k / 32) * sizeof(block_q8_x)
                   : t.packed_bf[j] ? (size_t)t.k * sizeof(uint16_t)
                                    : cpu_act_row_bytes(ty, t.k);
    t.owns_act[j] = true;
    t.act[j] = c->act + (size_t)j * c->act_bytes;
    for (int i = 0; i < j; i++)
      if (act_kind(&t, i) == act_kind(&t, j)) {
        t.owns_act[j] = false;
        t.act[j] = t.act[i];
        break;
      }
    t.tile[j] = matmul_tile(w[j], n_rows, cpu_threadpool_active(c->pool));
    n_chunks += ceil_div(w[j]->rows, t.tile[j]);
    t.chunk_end[j] = n_chunks;
  }
  if (n_rows == 0) return LLB_STATUS_OK;
  t.rows_per_chunk = items_per_chunk(t.k);
  cpu_threadpool_parallel(c->pool, matmul_quantize_chunk, &t, ceil_div(n_rows, t.rows_per_chunk));
  cpu_threadpool_parallel(c->pool, matmul_chunk, &t, n_chunks);
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- RoPE */

struct rope_task {
  float *x;
  const int32_t *positions;
  int32_t n_rows, n_heads, head_dim;
  struct backend_rope_params p;
  float theta_scale;
  int64_t per;
  enum cpu_simd_level level;
  float *table; /* [n_rows, n_dims] cos then sin per row (backend_ctx.rope_cs), or NULL: per row on the stack */
  bool fill;    /* compute the table's rows (else read them) */
};

/* Row r's n_dims / 2 cos and sin (ggml_rope_cache_init: theta_i = p * theta_scale^i by repeated
 * products, then scaled by ggml's rope_yarn with ext_factor 0). */
static void rope_angles(const struct rope_task *t, int64_t r, float *cs, float *sn) {
  const int32_t half = t->p.n_dims / 2;
  const float mscale = t->p.attn_factor == 0.0f ? 1.0f : t->p.attn_factor;
  float theta = (float)t->positions[r];
  for (int32_t i = 0; i < half; i++) {
    const float th = t->p.freq_factors ? t->p.freq_scale * (theta / t->p.freq_factors[i]) : t->p.freq_scale * theta;
    cs[i] = cosf(th) * mscale;
    sn[i] = sinf(th) * mscale;
    theta *= t->theta_scale;
  }
}

/* ggml's rotate_pairs on one head's first 2 * half dims, as its -O3 -march=native build
 * computes it (GCC contracts x0*c - x1*s to fma(x0, c, -(x1*s)) and x0*s + x1*c to
 * fma(x0, s, x1*c)). NEOX pairs (i, i + half), NORM pairs (2i, 2i + 1). */
static void rope_rotate(float *v, const float *cs, const float *sn, int32_t from, int32_t half, bool neox) {
  for (int32_t i = from; i < half; i++) {
    const int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
    v[b] = fmaf(x0, sn[i], x1 * cs[i]);
  }
}

#if OPS_HAVE_X86
/* rope_rotate 8 lanes at a time: every element the same product, negation and fma. cs2 and
 * sn2 [2 * half] hold each pair's cos and sin twice (NORM). */
OPS_AVX2_TARGET static void rope_rotate_avx2(float *v, const float *cs, const float *sn, const float *cs2,
                                             const float *sn2, int32_t half, bool neox) {
  int32_t i = 0;
  if (neox) {
    for (; i + 8 <= half; i += 8) {
      const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
      const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
      const __m256 neg = _mm256_xor_ps(_mm256_mul_ps(x1, s), _mm256_set1_ps(-0.0f));
      _mm256_storeu_ps(v + i, _mm256_fmadd_ps(x0, c, neg));
      _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
  } else {
    const __m256 sign_even = _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f);
    for (; i + 4 <= half; i += 4) { /* 4 pairs: lanes (x0, x1) of each */
      const __m256 x = _mm256_loadu_ps(v + 2 * i), xs = _mm256_permute_ps(x, 0xB1); /* (x1, x0) */
      const __m256 c2 = _mm256_loadu_ps(cs2 + 2 * i), s2 = _mm256_loadu_ps(sn2 + 2 * i);
      const __m256 a = _mm256_blend_ps(x, xs, 0xAA);    /* (x0, x0) */
      const __m256 b = _mm256_blend_ps(c2, s2, 0xAA);   /* (c, s) */
      const __m256 p = _mm256_blend_ps(xs, x, 0xAA);    /* (x1, x1) */
      const __m256 q = _mm256_blend_ps(s2, c2, 0xAA);   /* (s, c) */
      const __m256 m = _mm256_xor_ps(_mm256_mul_ps(p, q), sign_even); /* (-(x1 s), x1 c) */
      _mm256_storeu_ps(v + 2 * i, _mm256_fmadd_ps(a, b, m));
    }
  }
  rope_rotate(v, cs, sn, i, half, neox);
}
#endif

static void rope_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct rope_task *t = arg;
  const int32_t half = t->p.n_dims / 2;
  float cs_row[CPU_ROPE_MAX_DIMS / 2], sn_row[CPU_ROPE_MAX_DIMS / 2];
  int64_t lo, hi;
  chunk_range(chunk, t->per, t->n_rows, &lo, &hi);
  for (int64_t r = lo; r < hi; r++) {
    float *cs = t->table ? t->table + r * t->p.n_dims : cs_row, *sn = cs + half;
    if (!t->table) sn = sn_row;
    if (!t->table || t->fill) rope_angles(t, r, cs, sn);
    const bool neox = t->p.style == BACKEND_ROPE_STYLE_NEOX;
#if OPS_HAVE_X86
    if (t->level >= CPU_SIMD_LEVEL_AVX2) {
      float cs2[CPU_ROPE_MAX_DIMS], sn2[CPU_ROPE_MAX_DIMS];
      if (!neox)
        for (int32_t i = 0; i < half; i++) cs2[2 * i] = cs2[2 * i + 1] = cs[i], sn2[2 * i] = sn2[2 * i + 1] = sn[i];
      for (int32_t h = 0; h < t->n_heads; h++)
        rope_rotate_avx2(t->x + (r * t->n_heads + h) * t->head_dim, cs, sn, cs2, sn2, half, neox);
      continue;
    }
#endif
    for (int32_t h = 0; h < t->n_heads; h++) rope_rotate(t->x + (r * t->n_heads + h) * t->head_dim, cs, sn, 0, half, neox);
  }
}

/* Whether c's RoPE table holds the angles of these rows (its first n_rows) and params (the
 * style only pairs the dims differently: the same angles; freq_factors compared by value, so
 * factors rewritten at the same address refill it). */
static bool rope_table_holds(const struct backend_ctx *c, const int32_t *positions, int32_t n_rows,
                             const struct backend_rope_params *p) {
  const struct backend_rope_params *q = &c->rope_p;
  return n_rows <= c->rope_rows && n_rows > 0 && q->n_dims == p->n_dims && q->freq_base == p->freq_base &&
         q->freq_scale == p->freq_scale && !q->freq_factors == !p->freq_factors && q->attn_factor == p->attn_factor &&
         (!p->freq_factors || memcmp(c->rope_ff, p->freq_factors, (size_t)(p->n_dims / 2) * sizeof(float)) == 0) &&
         memcmp(c->rope_pos, positions, (size_t)n_rows * sizeof(int32_t)) == 0;
}

llb_status cpu_rope(struct backend_ctx *c, float *x, const int32_t *positions, int32_t n_rows,
                    int32_t n_heads, int32_t head_dim, const struct backend_rope_params *p) {
  if (p->n_dims < 2 || p->n_dims % 2 != 0 || p->n_dims > head_dim || p->n_dims > CPU_ROPE_MAX_DIMS ||
      (p->style != BACKEND_ROPE_STYLE_NORM && p->style != BACKEND_ROPE_STYLE_NEOX) || !(p->attn_factor >= 0.0f))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "rope n_dims %d head_dim %d style %d", p->n_dims,
                    head_dim, (int)p->style);
  struct rope_task t = {x, positions, n_rows, n_heads, head_dim, *p,
                        powf(p->freq_base, -2.0f / (float)p->n_dims),
                        items_per_chunk((int64_t)n_heads * head_dim * 4), c->level, NULL, false};
  /* the table holds rows of up to head_dim (ctx) values: n_dims <= this call's head_dim */
  if (c->rope_cs && n_rows <= c->params.max_num_tokens && p->n_dims <= c->params.head_dim) {
    t.table = c->rope_cs;
    t.fill = !rope_table_holds(c, positions, n_rows, p);
    if (t.fill) {
      c->rope_rows = 0; /* invalid until the op has filled it */
      memcpy(c->rope_pos, positions, (size_t)n_rows * sizeof(int32_t));
      c->rope_p = *p;
      if (p->freq_factors) memcpy(c->rope_ff, p->freq_factors, (size_t)(p->n_dims / 2) * sizeof(float));
    }
  }
  cpu_threadpool_parallel(c->pool, rope_chunk, &t, ceil_div(n_rows, t.per));
  if (t.fill) c->rope_rows = n_rows;
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- KV write */

struct kv_task {
  enum cpu_simd_level level;
  const struct backend_kv_layer *kv;
  const float *k, *v;
  const int64_t *slots;
  int32_t n_rows;
  int64_t per;
};

static void kv_write_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct kv_task *t = arg;
  const struct backend_kv_layer *kv = t->kv;
  const size_t rb = backend_kv_row_bytes(kv->dtype, kv->head_dim);
  int64_t lo, hi;
  chunk_range(chunk, t->per, t->n_rows, &lo, &hi);
  for (int64_t r = lo; r < hi; r++) {
    if (t->slots[r] < 0) continue;
    for (int32_t h = 0; h < kv->n_kv_heads; h++) {
      const size_t at = ((size_t)t->slots[r] * (size_t)kv->n_kv_heads + (size_t)h) * rb;
      const int64_t x = (r * kv->n_kv_heads + h) * (int64_t)kv->head_dim;
      cpu_kv_row_store(t->level, kv->dtype, t->k + x, (uint8_t *)kv->k + at, kv->head_dim);
      cpu_kv_row_store(t->level, kv->dtype, t->v + x, (uint8_t *)kv->v + at, kv->head_dim);
    }
  }
}

llb_status cpu_kv_write(struct backend_ctx *c, const struct backend_kv_layer *kv, const float *k,
                        const float *v, const int64_t *slot_mapping, int32_t n_rows) {
  const int64_t n_slots = (int64_t)kv->num_blocks * kv->block_size;
  if (!cpu_kv_dtype_ok(kv->dtype) || backend_kv_row_bytes(kv->dtype, kv->head_dim) == 0)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "kv cache dtype %d with head_dim %d", (int)kv->dtype, kv->head_dim);
  for (int32_t r = 0; r < n_rows; r++)
    if (slot_mapping[r] < -1 || slot_mapping[r] >= n_slots)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "slot %lld of row %d not in [-1, %lld)",
                      (long long)slot_mapping[r], r, (long long)n_slots);
  struct kv_task t = {c->level, kv, k, v, slot_mapping, n_rows,
                      items_per_chunk(2 * (int64_t)kv->n_kv_heads * kv->head_dim)};
  cpu_threadpool_parallel(c->pool, kv_write_chunk, &t, ceil_div(n_rows, t.per));
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- SwiGLU, add */

struct elem_task {
  enum cpu_simd_level level;
  const float *a, *b;
  float *out;
  int64_t n;
};

static void swiglu_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct elem_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, CPU_CHUNK_ELEMS, t->n, &lo, &hi);
  /* ggml_vec_swiglu_f32: ggml_v_silu (its own expf), then one multiply */
  cpu_swiglu_row(t->level, t->a + lo, t->b + lo, t->out + lo, hi - lo);
}

static void add_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct elem_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, CPU_CHUNK_ELEMS, t->n, &lo, &hi);
  for (int64_t i = lo; i < hi; i++) t->out[i] = t->a[i] + t->b[i];
}

static void geglu_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct elem_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, CPU_CHUNK_ELEMS, t->n, &lo, &hi);
  /* ggml_vec_geglu_f32 with GGML_GELU_FP16 */
  cpu_gelu_row(t->level, CPU_GELU_TANH, t->a + lo, t->b + lo, t->out + lo, hi - lo);
}

llb_status cpu_geglu(struct backend_ctx *c, const float *gate, const float *up, int64_t n, float *out) {
  struct elem_task t = {c->level, gate, up, out, n};
  cpu_threadpool_parallel(c->pool, geglu_chunk, &t, ceil_div(n, CPU_CHUNK_ELEMS));
  return LLB_STATUS_OK;
}

struct softcap_task {
  float *x;
  int64_t n;
  float cap;
};

static void softcap_chunk(void *arg, int64_t chunk, int ith) {
  (void)ith;
  const struct softcap_task *t = arg;
  int64_t lo, hi;
  chunk_range(chunk, CPU_CHUNK_ELEMS, t->n, &lo, &hi);
  const float inv = 1.0f / t->cap; /* ggml_scale(x, 1/cap), ggml_tanh (tanhf), ggml_scale(x, cap) */
  for (int64_t i = lo; i < hi; i++) t->x[i] = tanhf(t->x[i] * inv) * t->cap;
}

llb_status cpu_softcap(struct backend_ctx *c, float *x, int64_t n, float cap) {
  if (!(cap > 0.0f) || n < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "softcap %g over %lld", cap, (long long)n);
  struct softcap_task t = {x, n, cap};
  cpu_threadpool_parallel(c->pool, softcap_chunk, &t, ceil_div(n, CPU_CHUNK_ELEMS));
  return LLB_STATUS_OK;
}

llb_status cpu_swiglu(struct backend_ctx *c, const float *gate, const float *up, int64_t n,
                      float *out) {
  struct elem_task t = {c->level, gate, up, out, n};
  cpu_threadpool_parallel(c->pool, swiglu_chunk, &t, ceil_div(n, CPU_CHUNK_ELEMS));
  return LLB_STATUS_OK;
}

llb_status cpu_add(struct backend_ctx *c, float *x, const float *y, int64_t n) {
  struct elem_task t = {c->level, x, y, x, n};
  cpu_threadpool_parallel(c->pool, add_chunk, &t, ceil_div(n, CPU_CHUNK_ELEMS));
  return LLB_STATUS_OK;
}
