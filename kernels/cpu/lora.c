/* backend_ops.lora on the CPU: the LoRA products of every adapter of a step in one parallel op
 * (Punica's SGMV shape). A work item is one segment's target over up to CPU_DOT_MAX_ROWS of its
 * rows: those rows of x quantized to A's vec_dot type, t = A x (the dots or gemm tiles matmul
 * runs), t quantized to B's, u = B t column by column, y += scale * u. Each output takes one
 * float order whatever the rows around it, so a row's result is the same in any batch.
 *
 * B's rows are rank long (a few dozen): one dot call per output of so short a row made B's
 * product cost as much as the whole base model's step (llmbus-kernel-bench --lora-adapters 4:
 * a batch-16 decode step 2.1x the base's). F16 and F32 B take the skinny path here instead,
 * 8 outputs a call: t rounded to B's vec_dot
 * type as ggml does (fp16 for F16), the products (exact for fp16 operands) summed in fp32 by 8
 * lanes (lane l: elements i = l mod 8 below rank - rank % 8, by fma in index order), the lanes
 * as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then the rest by fma in order; the
 * scalar and AVX2 paths give the same bits. Other B types (Q8_0: rank a multiple of 32) take
 * matmul's dots. Compiled with -ffp-contract=off: scale * u is rounded before the add, as
 * ggml_scale then ggml_add. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_backend.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LORA_X86 1
#define LORA_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define LORA_X86 0
#endif

/* Whether B of type t takes the skinny path. */
static bool skinny_type(enum ggml_type t) { return t == GGML_TYPE_F16 || t == GGML_TYPE_F32; }

static float skinny_v(const void *v, enum ggml_type t, int64_t i) {
  return t == GGML_TYPE_F16 ? llb_fp16_to_fp32(((const uint16_t *)v)[i]) : ((const float *)v)[i];
}

/* y[col] += scale * (weight row col . t) for col in [c0, c1) of b (F16 or F32, rows of n) and
 * t [n] of b's type, in the skinny order (the head comment). */
static void skinny_scalar(const struct backend_weight *b, int64_t c0, int64_t c1, const void *t, float scale,
                          float *y) {
  const int64_t n = b->cols, n8 = n - n % 8;
  for (int64_t col = c0; col < c1; col++) {
    const void *w = (const uint8_t *)b->data + (size_t)col * b->row_bytes;
    float l[8] = {0};
    for (int64_t i = 0; i < n8; i += 8)
      for (int k = 0; k < 8; k++) l[k] = fmaf(skinny_v(w, b->type, i + k), skinny_v(t, b->type, i + k), l[k]);
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (int64_t i = n8; i < n; i++) s = fmaf(skinny_v(w, b->type, i), skinny_v(t, b->type, i), s);
    const float u = scale * s;
    y[col] = y[col] + u;
  }
}

#if LORA_X86
LORA_AVX2 static inline __m256 skinny_load8(const void *v, enum ggml_type ty, int64_t i) {
  return ty == GGML_TYPE_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)v + i)))
                             : _mm256_loadu_ps((const float *)v + i);
}

/* Columns [0, n_out - n_out % 8) of weight rows of n (row c at data + c * row_bytes; fp16 when
 * f16, else fp32): inlined with constants for the common rank 16, so that its two fma steps
 * per column and its loads are unrolled at fixed offsets (the generic loop kept eight row
 * pointers and the type's branch in registers and on the stack: -5% of the LoRA products'
 * time on a batch-16 decode step). One row at a time: a segment's rows sharing each group of
 * columns, loaded once, measured +3%. */
LORA_AVX2 static inline __attribute__((always_inline)) void
skinny_body(const uint8_t *data, size_t row_bytes, int64_t n, bool f16, int64_t n_out, const void *t, float scale,
            float *y) {
  const int64_t n8 = n - n % 8, c8 = n_out - n_out % 8;
  const enum ggml_type ty = f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  const __m256 sv = _mm256_set1_ps(scale);
  for (int64_t col = 0; col < c8; col += 8) {
    const uint8_t *w = data + (size_t)col * row_bytes;
    __m256 acc[8];
    for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
      const __m256 tv = skinny_load8(t, ty, i);
      for (int c = 0; c < 8; c++) acc[c] = _mm256_fmadd_ps(skinny_load8(w + (size_t)c * row_bytes, ty, i), tv, acc[c]);
    }
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    if (n8 < n) { /* the rest of each row by fma in order */
      float s[8];
      _mm256_storeu_ps(s, sum);
      for (int c = 0; c < 8; c++)
        for (int64_t i = n8; i < n; i++) s[c] = fmaf(skinny_v(w + (size_t)c * row_bytes, ty, i), skinny_v(t, ty, i), s[c]);
      sum = _mm256_loadu_ps(s);
    }
    _mm256_storeu_ps(y + col, _mm256_add_ps(_mm256_loadu_ps(y + col), _mm256_mul_ps(sv, sum)));
  }
}

/* skinny_scalar's results, 8 columns at a time: one accumulator per column, the 8 lane trees
 * by hadd (lanes (0+1)+(2+3), then + (4+5)+(6+7)), the scale and add on 8 columns at once. */
LORA_AVX2 static void skinny_avx2(const struct backend_weight *b, const void *t, float scale, float *y) {
  const int64_t n_out = b->rows;
  if (b->type == GGML_TYPE_F16 && b->cols == 16 && b->row_bytes == 32)
    skinny_body(b->data, 32, 16, true, n_out, t, scale, y);
  else
    skinny_body(b->data, b->row_bytes, b->cols, b->type == GGML_TYPE_F16, n_out, t, scale, y);
  skinny_scalar(b, n_out - n_out % 8, n_out, t, scale, y);
}
#endif

/* y [b->rows] += scale * (b t) in the skinny order (F16 / F32 b). */
static void skinny_add(enum cpu_simd_level level, const struct backend_weight *b, const void *t, float scale,
                       float *y) {
#if LORA_X86
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    skinny_avx2(b, t, scale, y);
    return;
  }
#endif
  (void)level;
  skinny_scalar(b, 0, b->rows, t, scale, y);
}

struct lora_task {
  struct backend_ctx *c;
  const float *x;
  int64_t cols;
  float *const *y;
  int32_t n_targets;
  const struct backend_lora_seg *segs;
  int32_t n_segs;
};

/* Work items of target j of segment s: its rows in groups of CPU_DOT_MAX_ROWS (each reads A
 * and B once for its rows; one row an item measured slower on a decode step, 4 rows an adapter). */
static int64_t seg_items(const struct backend_lora_seg *s, int j) {
  return s->a[j] ? (s->n_rows + CPU_DOT_MAX_ROWS - 1) / CPU_DOT_MAX_ROWS : 0;
}

/* out[r * stride + col] = dot(w row col, act[r]) for col < n_out, r < nr: gemm tiles where the
 * type has them, else one dot per column (the same outputs, kernels/cpu/vec_dot.h). */
static void dots(const struct backend_ctx *c, const struct backend_weight *w, const void *const *act, int nr,
                 float *out, int64_t stride) {
  const cpu_gemm_fn gemm = cpu_gemm_select(w->type, c->level);
  const uint8_t *wd = w->data;
  if (gemm) {
    for (int64_t col = 0; col < w->rows; col += CPU_GEMM_MAX_COLS) {
      const int nc = w->rows - col < CPU_GEMM_MAX_COLS ? (int)(w->rows - col) : CPU_GEMM_MAX_COLS;
      gemm(w->cols, wd + (size_t)col * w->row_bytes, w->row_bytes, nc, act, nr, out + col, stride);
    }
    return;
  }
  const cpu_vec_dot_fn dot = cpu_vec_dot_select(w->type, c->level);
  for (int64_t col = 0; col < w->rows; col++) {
    float res[CPU_DOT_MAX_ROWS];
    dot(w->cols, wd + (size_t)col * w->row_bytes, act, nr, res);
    for (int r = 0; r < nr; r++) out[(int64_t)r * stride + col] = res[r];
  }
}

/* y rows += scale * (B t) for the nr rows rows[], t's activations act_t; B's outputs a tile
 * of CPU_GEMM_MAX_COLS columns at a time. */
static void add_b_product(const struct backend_ctx *c, const struct backend_weight *b, const void *const *act_t,
                          int nr, const int32_t *rows, float scale, float *y) {
  if (skinny_type(b->type)) {
    for (int r = 0; r < nr; r++) skinny_add(c->level, b, act_t[r], scale, y + (int64_t)rows[r] * b->rows);
    return;
  }
  const cpu_gemm_fn gemm = cpu_gemm_select(b->type, c->level);
  const cpu_vec_dot_fn dot = cpu_vec_dot_select(b->type, c->level);
  const uint8_t *wd = b->data;
  const int64_t n_out = b->rows;
  for (int64_t col = 0; col < n_out; col += CPU_GEMM_MAX_COLS) {
    const int nc = n_out - col < CPU_GEMM_MAX_COLS ? (int)(n_out - col) : CPU_GEMM_MAX_COLS;
    float u[CPU_DOT_MAX_ROWS * CPU_GEMM_MAX_COLS];
    if (gemm) {
      gemm(b->cols, wd + (size_t)col * b->row_bytes, b->row_bytes, nc, act_t, nr, u, CPU_GEMM_MAX_COLS);
    } else {
      for (int k = 0; k < nc; k++) {
        float res[CPU_DOT_MAX_ROWS];
        dot(b->cols, wd + (size_t)(col + k) * b->row_bytes, act_t, nr, res);
        for (int r = 0; r < nr; r++) u[r * CPU_GEMM_MAX_COLS + k] = res[r];
      }
    }
    for (int r = 0; r < nr; r++) {
      float *yr = y + (int64_t)rows[r] * n_out + col;
      for (int k = 0; k < nc; k++) {
        const float s = scale * u[r * CPU_GEMM_MAX_COLS + k];
        yr[k] = yr[k] + s;
      }
    }
  }
}

/* x [k] as activations of weight type w (cpu_quantize_act_row), fp16 rows by F16C. */
static void quantize_row(enum cpu_simd_level level, enum ggml_type w, const float *x, void *out, int64_t k) {
  if (w == GGML_TYPE_F16) cpu_fp32_to_fp16_row(level, x, out, k);
  else cpu_quantize_act_row(w, x, out, k);
}

/* Prefetches bytes [from, from + n): an item's A is a short run of lines (a few dozen KiB, read
 * once a step from DRAM) that the gemm tiles read two rows at a time, runs too short for the
 * hardware prefetchers to reach speed (-10% of the LoRA products' time on a batch-16 decode
 * step; prefetching B as well, at the item's start or after A's product, measured +8%). */
static void prefetch_run(const void *from, size_t n) {
  for (size_t off = 0; off < n; off += 64) __builtin_prefetch((const char *)from + off, 0, 2);
}

static void lora_item(void *arg, int64_t item, int ith) {
  const struct lora_task *t = arg;
  int32_t s = 0;
  int j = 0;
  for (;; j++) { /* the item's segment and target */
    if (j == t->n_targets) j = 0, s++;
    const int64_t n = seg_items(&t->segs[s], j);
    if (item < n) break;
    item -= n;
  }
  const struct backend_lora_seg *seg = &t->segs[s];
  const struct backend_weight *a = seg->a[j], *b = seg->b[j];
  prefetch_run(a->data, (size_t)a->rows * a->row_bytes);
  const int32_t *rows = seg->rows + item * CPU_DOT_MAX_ROWS;
  const int nr = seg->n_rows - item * CPU_DOT_MAX_ROWS < CPU_DOT_MAX_ROWS ? (int)(seg->n_rows - item * CPU_DOT_MAX_ROWS)
                                                                           : CPU_DOT_MAX_ROWS;
  const size_t part = CPU_DOT_MAX_ROWS * 4 * (size_t)t->c->params.max_row_elems;
  uint8_t *scratch = t->c->lora_scratch + (size_t)ith * 3 * part;
  float *tv = (float *)(void *)(scratch + 2 * part); /* [nr, rank] */
  const size_t xrow = cpu_act_row_bytes(a->type, t->cols), trow = cpu_act_row_bytes(b->type, a->rows);
  const void *act_x[CPU_DOT_MAX_ROWS], *act_t[CPU_DOT_MAX_ROWS];
  for (int r = 0; r < nr; r++) {
    quantize_row(t->c->level, a->type, t->x + (int64_t)rows[r] * t->cols, scratch + (size_t)r * xrow, t->cols);
    act_x[r] = scratch + (size_t)r * xrow;
  }
  dots(t->c, a, act_x, nr, tv, a->rows);
  for (int r = 0; r < nr; r++) {
    act_t[r] = scratch + part + (size_t)r * trow;
    quantize_row(t->c->level, b->type, tv + (int64_t)r * a->rows, scratch + part + (size_t)r * trow, a->rows);
  }
  add_b_product(t->c, b, act_t, nr, rows, seg->scale[j], t->y[j]);
}

/* Every shape and type of the call against the context's sizes. */
static llb_status lora_check(const struct backend_ctx *c, int64_t cols, int32_t n_targets,
                             const struct backend_lora_seg *segs, int32_t n_segs, int64_t *items) {
  const struct backend_ctx_params *p = &c->params;
  if (n_targets < 1 || n_targets > BACKEND_LORA_MAX_TARGETS || n_segs < 0 || cols < 1 || cols > p->max_row_elems)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "lora: %d targets, %d segments, rows of %lld", n_targets, n_segs,
                    (long long)cols);
  *items = 0;
  for (int32_t s = 0; s < n_segs; s++) {
    const struct backend_lora_seg *g = &segs[s];
    if (g->n_rows < 0 || g->n_rows > p->max_num_tokens || (g->n_rows > 0 && !g->rows))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "lora: segment %d of %d rows", s, g->n_rows);
    for (int32_t i = 0; i < g->n_rows; i++)
      if (g->rows[i] < 0 || g->rows[i] >= p->max_num_tokens)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "lora: segment %d row %d not in [0, %d)", s, g->rows[i],
                        p->max_num_tokens);
    for (int j = 0; j < n_targets; j++) {
      const struct backend_weight *a = g->a[j], *b = g->b[j];
      if (!a) continue;
      if (!b || a->cols != cols || b->cols != a->rows || a->rows < 1 || a->rows > p->max_row_elems ||
          b->rows < 1)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "lora: segment %d target %d: A [%lld, %lld], B [%lld, %lld] "
                        "over rows of %lld", s, j, (long long)a->cols, (long long)a->rows,
                        b ? (long long)b->cols : 0LL, b ? (long long)b->rows : 0LL, (long long)cols);
      if (!cpu_vec_dot_select(a->type, c->level) || !cpu_vec_dot_select(b->type, c->level) ||
          cpu_act_row_bytes(a->type, cols) == 0 || cpu_act_row_bytes(b->type, a->rows) == 0)
        return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "lora: weights of %s / %s over rows of %lld / %lld",
                        ggml_type_name(a->type), ggml_type_name(b->type), (long long)cols, (long long)a->rows);
      *items += seg_items(g, j);
    }
  }
  return LLB_STATUS_OK;
}

llb_status cpu_lora(struct backend_ctx *c, const float *x, int64_t cols, float *const *y, int32_t n_targets,
                    const struct backend_lora_seg *segs, int32_t n_segs) {
  int64_t items = 0;
  llb_status st = lora_check(c, cols, n_targets, segs, n_segs, &items);
  if (st != LLB_STATUS_OK || items == 0) return st;
  struct lora_task t = {c, x, cols, y, n_targets, segs, n_segs};
  cpu_threadpool_parallel(c->pool, lora_item, &t, items);
  return LLB_STATUS_OK;
}
