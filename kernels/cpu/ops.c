/* CPU ops: context, embedding, RMSNorm, quantized matmul, RoPE, KV write, SwiGLU, add.
 * Work is split over rows or output columns, never inside a reduction, so a row's result
 * does not depend on the batch or the thread count. */
#include "kernels/cpu/cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Output columns a thread walks per weight tile (their rows stay in L1 across the tokens). */
#define CPU_MATMUL_COL_TILE 16
/* Largest rotated dims per head RoPE takes. */
#define CPU_ROPE_MAX_DIMS 1024

static void split_range(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
  *lo = n * ith / nth;
  *hi = n * (ith + 1) / nth;
}

enum cpu_simd_level cpu_backend_set_simd_level(struct backend_ctx *c, enum cpu_simd_level level) {
  const enum cpu_simd_level best = cpu_simd_level_detect();
  c->level = level > best ? best : level;
  return c->level;
}

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
  st = cpu_threadpool_create(p->n_threads, &c->pool);
  if (st != LLB_STATUS_OK) goto fail;
  c->act_bytes = (size_t)p->max_num_tokens * (size_t)p->max_row_elems * sizeof(float);
  c->act = malloc(c->act_bytes * CPU_MATMUL_MAX_WEIGHTS);
  c->scores = malloc((size_t)p->n_threads * (size_t)p->max_context_len * sizeof(float));
  c->row_seq = malloc((size_t)p->max_num_tokens * sizeof(int32_t));
  if (!c->act || !c->scores || !c->row_seq) {
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
  free(c);
}

/* ---------------------------------------------------------------- embedding */

struct embed_task {
  const struct backend_weight *table;
  const int32_t *ids;
  int32_t n;
  float *out;
};

static void embed_run(void *arg, int ith, int nth) {
  const struct embed_task *t = arg;
  int64_t lo, hi;
  split_range(t->n, ith, nth, &lo, &hi);
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
  struct embed_task t = {table, ids, n, out};
  cpu_threadpool_run(c->pool, embed_run, &t);
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- RMSNorm */

struct norm_task {
  const float *x, *w;
  int32_t n_rows, dim;
  float eps;
  float *out;
};

static void rms_norm_run(void *arg, int ith, int nth) {
  const struct norm_task *t = arg;
  int64_t lo, hi;
  split_range(t->n_rows, ith, nth, &lo, &hi);
  for (int64_t r = lo; r < hi; r++) {
    const float *x = t->x + r * t->dim;
    float *y = t->out + r * t->dim;
    double sum = 0.0; /* ggml_compute_forward_rms_norm_f32 sums in ggml_float */
    for (int32_t i = 0; i < t->dim; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / t->dim);
    const float scale = 1.0f / sqrtf(mean + t->eps);
    for (int32_t i = 0; i < t->dim; i++) y[i] = (x[i] * scale) * t->w[i];
  }
}

llb_status cpu_rms_norm(struct backend_ctx *c, const float *x, const float *w, int32_t n_rows,
                        int32_t dim, float eps, float *out) {
  if (n_rows < 0 || dim < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "rms_norm %d x %d", n_rows, dim);
  struct norm_task t = {x, w, n_rows, dim, eps, out};
  cpu_threadpool_run(c->pool, rms_norm_run, &t);
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
  int64_t total_cols;
};

/* Columns [c0, c1) of weight j for all token rows. */
static void matmul_cols(const struct matmul_task *t, int j, int64_t c0, int64_t c1) {
  const struct backend_weight *w = t->w[j];
  const int64_t n_out = w->rows;
  float *out = t->out[j];
  for (int64_t cb = c0; cb < c1; cb += CPU_MATMUL_COL_TILE) {
    const int64_t ce = cb + CPU_MATMUL_COL_TILE < c1 ? cb + CPU_MATMUL_COL_TILE : c1;
    for (int32_t r0 = 0; r0 < t->n_rows; r0 += CPU_DOT_MAX_ROWS) {
      const int nr = t->n_rows - r0 < CPU_DOT_MAX_ROWS ? t->n_rows - r0 : CPU_DOT_MAX_ROWS;
      const void *rows[CPU_DOT_MAX_ROWS];
      for (int r = 0; r < nr; r++) rows[r] = t->act[j] + (size_t)(r0 + r) * t->act_row[j];
      for (int64_t col = cb; col < ce; col++) {
        float res[CPU_DOT_MAX_ROWS];
        t->dot[j](t->k, (const uint8_t *)w->data + (size_t)col * w->row_bytes, rows, nr, res);
        for (int r = 0; r < nr; r++) out[(int64_t)(r0 + r) * n_out + col] = res[r];
      }
    }
  }
}

static void matmul_run(void *arg, int ith, int nth) {
  const struct matmul_task *t = arg;
  int64_t lo, hi;
  split_range(t->n_rows, ith, nth, &lo, &hi);
  for (int j = 0; j < t->n_w; j++) {
    if (!t->owns_act[j]) continue;
    for (int64_t r = lo; r < hi; r++)
      cpu_quantize_act_row(t->w[j]->type, t->x + r * t->k, t->act[j] + (size_t)r * t->act_row[j], t->k);
  }
  cpu_threadpool_barrier(t->c->pool);
  /* split the concatenated output columns of all weights evenly */
  split_range(t->total_cols, ith, nth, &lo, &hi);
  int64_t base = 0;
  for (int j = 0; j < t->n_w; j++) {
    const int64_t n = t->w[j]->rows;
    const int64_t a = lo > base ? lo : base, b = hi < base + n ? hi : base + n;
    if (a < b) matmul_cols(t, j, a - base, b - base);
    base += n;
  }
}

llb_status cpu_matmul(struct backend_ctx *c, const float *x, int32_t n_rows,
                      const struct backend_weight *const *w, float *const *out, int32_t n_w) {
  if (n_w < 1 || n_w > CPU_MATMUL_MAX_WEIGHTS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul of %d weights", n_w);
  if (n_rows < 0 || n_rows > c->params.max_num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul of %d rows (max %d)", n_rows,
                    c->params.max_num_tokens);
  struct matmul_task t = {.c = c, .x = x, .n_rows = n_rows, .k = w[0]->cols, .n_w = n_w, .w = w,
                          .out = out};
  if (t.k > c->params.max_row_elems)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul row of %lld (max %lld)", (long long)t.k,
                    (long long)c->params.max_row_elems);
  for (int j = 0; j < n_w; j++) {
    const enum ggml_type ty = w[j]->type;
    if (w[j]->cols != t.k)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "matmul weights of %lld and %lld cols",
                      (long long)t.k, (long long)w[j]->cols);
    t.dot[j] = cpu_vec_dot_select(ty, c->level);
    if (!t.dot[j]) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "matmul weight type %s", ggml_type_name(ty));
    if (t.k % ggml_type_block_elems(ty) != 0)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "row of %lld not a multiple of %s blocks",
                      (long long)t.k, ggml_type_name(ty));
    t.act_row[j] = cpu_act_row_bytes(ty, t.k);
    t.owns_act[j] = true;
    t.act[j] = c->act + (size_t)j * c->act_bytes;
    for (int i = 0; i < j; i++)
      if (cpu_vec_dot_type(w[i]->type) == cpu_vec_dot_type(ty)) {
        t.owns_act[j] = false;
        t.act[j] = t.act[i];
        break;
      }
    t.total_cols += w[j]->rows;
  }
  if (n_rows == 0) return LLB_STATUS_OK;
  cpu_threadpool_run(c->pool, matmul_run, &t);
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- RoPE */

struct rope_task {
  float *x;
  const int32_t *positions;
  int32_t n_rows, n_heads, head_dim;
  struct backend_rope_params p;
  float theta_scale;
};

static void rope_run(void *arg, int ith, int nth) {
  const struct rope_task *t = arg;
  const int32_t half = t->p.n_dims / 2;
  float cs[CPU_ROPE_MAX_DIMS / 2], sn[CPU_ROPE_MAX_DIMS / 2];
  int64_t lo, hi;
  split_range(t->n_rows, ith, nth, &lo, &hi);
  for (int64_t r = lo; r < hi; r++) {
    /* ggml_rope_cache_init: theta_i = p * theta_scale^i by repeated products, then scaled */
    float theta = (float)t->positions[r];
    for (int32_t i = 0; i < half; i++) {
      const float th = t->p.freq_scale * theta;
      cs[i] = cosf(th);
      sn[i] = sinf(th);
      theta *= t->theta_scale;
    }
    for (int32_t h = 0; h < t->n_heads; h++) {
      float *v = t->x + (r * t->n_heads + h) * t->head_dim;
      for (int32_t i = 0; i < half; i++) {
        const int32_t a = t->p.style == BACKEND_ROPE_STYLE_NEOX ? i : 2 * i;
        const int32_t b = t->p.style == BACKEND_ROPE_STYLE_NEOX ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

llb_status cpu_rope(struct backend_ctx *c, float *x, const int32_t *positions, int32_t n_rows,
                    int32_t n_heads, int32_t head_dim, const struct backend_rope_params *p) {
  if (p->n_dims < 2 || p->n_dims % 2 != 0 || p->n_dims > head_dim || p->n_dims > CPU_ROPE_MAX_DIMS ||
      (p->style != BACKEND_ROPE_STYLE_NORM && p->style != BACKEND_ROPE_STYLE_NEOX))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "rope n_dims %d head_dim %d style %d", p->n_dims,
                    head_dim, (int)p->style);
  struct rope_task t = {x, positions, n_rows, n_heads, head_dim, *p,
                        powf(p->freq_base, -2.0f / (float)p->n_dims)};
  cpu_threadpool_run(c->pool, rope_run, &t);
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- KV write */

struct kv_task {
  const struct backend_kv_layer *kv;
  const float *k, *v;
  const int64_t *slots;
  int32_t n_rows;
};

static void kv_write_run(void *arg, int ith, int nth) {
  const struct kv_task *t = arg;
  const int64_t row = (int64_t)t->kv->n_kv_heads * t->kv->head_dim;
  int64_t lo, hi;
  split_range(t->n_rows, ith, nth, &lo, &hi);
  for (int64_t r = lo; r < hi; r++) {
    if (t->slots[r] < 0) continue;
    uint16_t *kd = t->kv->k + t->slots[r] * row, *vd = t->kv->v + t->slots[r] * row;
    for (int64_t i = 0; i < row; i++) {
      kd[i] = llb_fp32_to_fp16(t->k[r * row + i]);
      vd[i] = llb_fp32_to_fp16(t->v[r * row + i]);
    }
  }
}

llb_status cpu_kv_write(struct backend_ctx *c, const struct backend_kv_layer *kv, const float *k,
                        const float *v, const int64_t *slot_mapping, int32_t n_rows) {
  const int64_t n_slots = (int64_t)kv->num_blocks * kv->block_size;
  for (int32_t r = 0; r < n_rows; r++)
    if (slot_mapping[r] < -1 || slot_mapping[r] >= n_slots)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "slot %lld of row %d not in [-1, %lld)",
                      (long long)slot_mapping[r], r, (long long)n_slots);
  struct kv_task t = {kv, k, v, slot_mapping, n_rows};
  cpu_threadpool_run(c->pool, kv_write_run, &t);
  return LLB_STATUS_OK;
}

/* ---------------------------------------------------------------- SwiGLU, add */

struct elem_task {
  const float *a, *b;
  float *out;
  int64_t n;
};

static void swiglu_run(void *arg, int ith, int nth) {
  const struct elem_task *t = arg;
  int64_t lo, hi;
  split_range(t->n, ith, nth, &lo, &hi);
  for (int64_t i = lo; i < hi; i++) {
    const float g = t->a[i];
    t->out[i] = (g / (1.0f + expf(-g))) * t->b[i]; /* ggml_silu_f32, then mul */
  }
}

static void add_run(void *arg, int ith, int nth) {
  const struct elem_task *t = arg;
  int64_t lo, hi;
  split_range(t->n, ith, nth, &lo, &hi);
  for (int64_t i = lo; i < hi; i++) t->out[i] = t->a[i] + t->b[i];
}

llb_status cpu_swiglu(struct backend_ctx *c, const float *gate, const float *up, int64_t n,
                      float *out) {
  struct elem_task t = {gate, up, out, n};
  cpu_threadpool_run(c->pool, swiglu_run, &t);
  return LLB_STATUS_OK;
}

llb_status cpu_add(struct backend_ctx *c, float *x, const float *y, int64_t n) {
  struct elem_task t = {x, y, x, n};
  cpu_threadpool_run(c->pool, add_run, &t);
  return LLB_STATUS_OK;
}
