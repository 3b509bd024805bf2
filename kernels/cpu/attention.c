/* Paged causal attention with GQA over an fp16 KV cache (vLLM's paged layout).
 *
 * Quantized caches (Q8_0, FP8 E4M3: kernels/backend.h) are read as the fp16 values they hold (FP8
 * exactly, Q8_0's d * q rounded to nearest even): a one-row item in the BATCH order on AVX2 or
 * AVX-512 (every decode step under the default batch-invariant order, head_dim a multiple of 16 up
 * to 256, blocks a multiple of 16 slots) reads the cache where it lies and widens 8 or 16 values at a time
 * in registers (kv_load8_avx2, kv_load16_avx512: kv_widen.h, as the scratch's conversion); the other paths (row tiles of a prefill, the
 * SINGLE order, the portable path) first convert the keys a run of rows of one sequence and KV
 * head attends into a per-thread fp16 scratch, once, and run the fp16 paths on that. The same
 * numbers on every path and in every batch, about half of fp16's bytes read (fp8 1/2, q8_0 17/32).
 *
 * A work item is one query row and the query heads of one KV head (or a single head when
 * there are too few items for the threads and the contexts are short); threads claim
 * items, so causal rows of different lengths balance. Each item is computed the same way
 * whatever else is in the batch, with the arithmetic of llama.cpp's non-flash attention on
 * ggml's CPU backend: q rounded to fp16, s_j = (q.k_j) * scale with the dot in the context's
 * order (enum cpu_attn_order), softmax as ggml_vec_soft_max_f32 (ggml's expf, the sum in double of
 * 16-lane partial sums), probabilities rounded to fp16, then out[d] = sum_j p_j v_j[d] as
 * one F16 dot per output element in the same order (lane j % 16 or j % 64 by fma in key
 * order, lanes summed at the end).
 *
 * Sliding windows (backend_attn_params.sliding_window) and soft-capping: llama.cpp masks the
 * keys outside the window with -INF, so they add exact zeros to the softmax sum and to every
 * p.v lane. Here they are skipped, keeping each key's lane and softmax group where ggml has
 * them (by its index from key 0): the same numbers, at a cost of the window rather than of the
 * context. A soft-capped score is c * tanh(s * (1/c)) of the raw dot, then scaled (ggml_scale,
 * ggml_tanh, ggml_scale before soft_max_ext). */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/attention_softmax.h"
#include "kernels/cpu/kv_widen.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define ATTN_HAVE_X86 1
#define ATTN_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define ATTN_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#else
#define ATTN_HAVE_X86 0
#endif

/* Query heads one AVX2 work item takes at most (they share each key's loads). */
#define ATTN_MAX_GROUP CPU_ATTN_MAX_GROUP
/* Largest head_dim of the AVX2 path and slice of output dims the generic path combines. */
#define ATTN_MAX_DIM 256
#define ATTN_COMB_DIM ATTN_MAX_DIM
/* Largest head_dim at all. */
#define ATTN_MAX_HEAD_DIM 1024
/* (row, head) pairs of one work item at most. */
#define ATTN_MAX_ROW_HEADS CPU_ATTN_MAX_ROW_HEADS
/* Query rows of one work item at most. */
#define ATTN_MAX_TILE_ROWS 4
/* pv_lane_rows_avx2 / _avx512 add at most one key per lane past the tile's first row's */
_Static_assert(ATTN_MAX_TILE_ROWS <= 16, "a tile's later rows attend at most one more key per 16-key lane");
/* Keys from which the heads of a KV head stay one work item however few the items. */
#define ATTN_GROUP_MIN_CONTEXT 512

struct attn_task {
  const struct backend_ctx *c;
  const struct backend_attn_params *p;
  int32_t group; /* query heads per work item: n_heads / n_kv_heads, or 1 */
  int32_t rows;  /* query rows per work item (consecutive tokens; a run of one sequence shares
                    each key's conversion on the AVX2 and AVX-512 paths), rows * group <= ATTN_MAX_ROW_HEADS */
};

/* Context of one work item: query row tok, heads h0 .. h0 + n_h - 1 (one KV head). */
struct attn_item {
  int32_t tok, h0, n_h, kvh, n_ctx;
  int32_t first; /* first key attended: n_ctx - sliding_window when the window is shorter, else 0 */
  enum cpu_attn_order order; /* float order of this item's dots */
  const int32_t *table; /* [max_blocks_per_seq] */
};

/* The item of query row tok and heads h0 .. h0 + group - 1. */
static struct attn_item attn_item_at(const struct attn_task *t, int32_t tok, int32_t h0) {
  const struct backend_attn_params *p = t->p;
  struct attn_item it;
  it.tok = tok;
  it.h0 = h0;
  it.n_h = t->group;
  it.kvh = it.h0 / (p->n_heads / p->kv->n_kv_heads);
  const int32_t s = t->c->row_seq[it.tok];
  const int32_t q_len = p->query_start_loc[s + 1] - p->query_start_loc[s];
  it.n_ctx = p->seq_lens[s] - q_len + (it.tok - p->query_start_loc[s]) + 1;
  it.table = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
  it.first = p->sliding_window > 0 && it.n_ctx > p->sliding_window ? it.n_ctx - p->sliding_window : 0;
  it.order = t->c->attn_order;
  if (it.order == CPU_ATTN_ORDER_BY_QUERY_LEN)
    it.order = q_len >= 2 ? CPU_ATTN_ORDER_BATCH : CPU_ATTN_ORDER_SINGLE;
  return it;
}

/* Lanes of the p.v accumulation and of the q.k dot in each order. */
static int32_t order_lanes(enum cpu_attn_order order) { return order == CPU_ATTN_ORDER_BATCH ? 16 : 64; }

/* Order of the q.k dot: tinyBLAS declines rows that are not a multiple of 16 long, and
 * ggml then runs ggml_vec_dot_f16. */
static enum cpu_attn_order qk_order(enum cpu_attn_order order, int32_t hd) {
  return order == CPU_ATTN_ORDER_BATCH && hd % 16 == 0 ? CPU_ATTN_ORDER_BATCH : CPU_ATTN_ORDER_SINGLE;
}

/* Sum of the 64 accumulators lane-wise as ggml_vec_dot_f16 (a0 + a2) + (a1 + a3), then
 * cpu_reduce16. */
static float reduce64(const float a[64]) {
  float x[16];
  for (int l = 0; l < 16; l++) x[l] = (a[l] + a[32 + l]) + (a[16 + l] + a[48 + l]);
  return cpu_reduce16(x);
}

/* q.k of one key in `order` (see enum cpu_attn_order); q holds fp16-rounded values. */
static float dot_qk_scalar(enum cpu_attn_order order, int32_t hd, const float *q, const uint16_t *k) {
  if (order == CPU_ATTN_ORDER_BATCH) {
    float lane[16] = {0};
    for (int32_t i = 0; i < hd; i++) lane[i % 16] = fmaf(q[i], llb_fp16_to_fp32(k[i]), lane[i % 16]);
    return cpu_reduce16(lane);
  }
  float a[64] = {0};
  const int32_t np = hd - hd % 64;
  for (int32_t i = 0; i < np; i++) a[i % 64] = fmaf(q[i], llb_fp16_to_fp32(k[i]), a[i % 64]);
  double s = (double)reduce64(a);
  for (int32_t i = np; i < hd; i++) s += (double)(q[i] * llb_fp16_to_fp32(k[i]));
  return (float)s;
}

/* A raw q.k dot as a softmax input: soft-capped if asked, then scaled. */
static inline float attn_score(const struct backend_attn_params *p, float dot) {
  if (p->logit_softcap > 0.0f) dot = tanhf(dot * (1.0f / p->logit_softcap)) * p->logit_softcap;
  return dot * p->scale;
}

/* Combines lane accumulators acc [lanes][dn] (rows >= used are zero) into out [dn]. */
static void combine_lanes(enum cpu_attn_order order, const float *acc, int32_t used, int32_t dn, float *out) {
  const int32_t lanes = order_lanes(order);
  float x[16][ATTN_COMB_DIM];
  for (int32_t l = 0; l < 16; l++) {
    if (order == CPU_ATTN_ORDER_BATCH) {
      if (l < used) memcpy(x[l], acc + (int64_t)l * dn, (size_t)dn * sizeof(float));
      else memset(x[l], 0, (size_t)dn * sizeof(float));
      continue;
    }
    for (int32_t d = 0; d < dn; d++) {
      float a[4];
      for (int g = 0; g < 4; g++) a[g] = 16 * g + l < used ? acc[(int64_t)(16 * g + l) * dn + d] : 0.0f;
      x[l][d] = (a[0] + a[2]) + (a[1] + a[3]);
    }
  }
  (void)lanes;
  for (int32_t i = 0; i < 8; i++)
    for (int32_t d = 0; d < dn; d++) x[i][d] = x[i + 8][d] + x[i][d];
  for (int32_t i = 0; i < 4; i++)
    for (int32_t d = 0; d < dn; d++) x[i][d] = x[i + 4][d] + x[i][d];
  for (int32_t d = 0; d < dn; d++) out[d] = (x[0][d] + x[2][d]) + (x[1][d] + x[3][d]);
}

/* fp16 row of key j of the item's KV head in an F16 cache `base` (k or v). */
static const uint16_t *kv_row_at(const struct backend_kv_layer *kv, const void *base, const int32_t *table,
                                 int32_t j, int32_t kvh) {
  const int64_t slot = (int64_t)table[j / kv->block_size] * kv->block_size + j % kv->block_size;
  return (const uint16_t *)base + slot * (int64_t)kv->n_kv_heads * kv->head_dim + (int64_t)kvh * kv->head_dim;
}

/* Where an item reads its KV head's rows: V (or K) row of slot s at base + s * rs + off bytes. */
struct attn_kv_rows {
  const uint8_t *base;
  int64_t rs, off; /* bytes: a slot's rows (n_kv_heads of them), the KV head's row in it */
};

/* The V rows of the item's KV head in kv (any dtype). */
static struct attn_kv_rows attn_v_rows(const struct backend_kv_layer *kv, int32_t kvh) {
  const int64_t rb = (int64_t)backend_kv_row_bytes(kv->dtype, kv->head_dim);
  return (struct attn_kv_rows){(const uint8_t *)kv->v, rb * kv->n_kv_heads, rb * kvh};
}

#if ATTN_HAVE_X86
/* Blocks ahead of the one a decode item's score walk is at whose K and V rows it asks for, and
 * the walks of up to ATTN_PREFETCH_MIN_BLOCKS blocks that ask for none (a few blocks' first
 * loads cost little; their rows are often still in cache). */
#define ATTN_PREFETCH_BLOCKS 2
#define ATTN_PREFETCH_MIN_BLOCKS 4

/* Asks for the K and V rows of the item's KV head in block b (rows of rb bytes) into L2, every
 * line each row touches (by whole lines: a line's bytes before the row too). A one-row item in
 * the BATCH order (every decode step by default; a prefill row too where row tiles are off)
 * walks its KV head's rows block by block: short rows a slot's stride apart (384 bytes for
 * SmolLM2), then a jump to the next block; the hardware prefetchers follow little of that, and
 * at 1024 keys and more a step waited on the cache's loads. Every line a row touches, because
 * rows need not start on one (the forward's host cache is calloc'd, 16 bytes past a page: a
 * 128-byte row spans three). Asked for ATTN_PREFETCH_BLOCKS blocks ahead during the q.k walk,
 * the V rows are in L2 when the p.v walk that follows reads them, or past ~2048 keys of
 * SmolLM2's (an item's K and V then outgrow the 1 MiB L2) in L3, where L2's victims go. Hints
 * only: no value changes. */
static inline void kv_block_prefetch(const struct backend_kv_layer *kv, const struct attn_item *it, int32_t b,
                                     int64_t rb) {
  const int64_t rs = rb * kv->n_kv_heads, at = (int64_t)it->table[b] * kv->block_size * rs + rb * it->kvh;
  const uintptr_t k = (uintptr_t)kv->k + (uintptr_t)at, v = (uintptr_t)kv->v + (uintptr_t)at;
  for (int32_t j = 0; j < kv->block_size; j++) {
    const uintptr_t r = (uintptr_t)(j * rs), end = r + (uintptr_t)rb;
    for (uintptr_t a = (k + r) & ~(uintptr_t)63; a < k + end; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T1);
    for (uintptr_t a = (v + r) & ~(uintptr_t)63; a < v + end; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T1);
  }
}

/* At block b of a walk from block b0 over n_blocks (longer than ATTN_PREFETCH_MIN_BLOCKS): the
 * block ATTN_PREFETCH_BLOCKS ahead (and, at the walk's start, the ones before it). */
static inline void kv_walk_prefetch(const struct backend_kv_layer *kv, const struct attn_item *it, int32_t b,
                                    int32_t b0, int32_t n_blocks, int64_t rb) {
  if (n_blocks - b0 <= ATTN_PREFETCH_MIN_BLOCKS) return;
  for (int32_t d = b == b0 ? 1 : ATTN_PREFETCH_BLOCKS; d <= ATTN_PREFETCH_BLOCKS && b + d < n_blocks; d++)
    kv_block_prefetch(kv, it, b + d, rb);
}
#endif

/* Portable path, the reference order: per head, per key. acc [64 * ATTN_COMB_DIM] scratch. */
static void attention_item_generic(const struct attn_task *t, const struct attn_item *it, float *scores,
                                   float *acc) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const enum cpu_simd_level level = t->c->level;
  const enum cpu_attn_order order = it->order;
  const int32_t hd = kv->head_dim, lanes = order_lanes(order);
  const int32_t used = it->n_ctx < lanes ? it->n_ctx : lanes;
  float qh[ATTN_MAX_HEAD_DIM];
  for (int32_t h = it->h0; h < it->h0 + it->n_h; h++) {
    const float *q = p->q + ((int64_t)it->tok * p->n_heads + h) * hd;
    float *out = p->out + ((int64_t)it->tok * p->n_heads + h) * hd;
    for (int32_t i = 0; i < hd; i++) qh[i] = llb_fp16_to_fp32(llb_fp32_to_fp16(q[i]));
    for (int32_t j = it->first; j < it->n_ctx; j++)
      scores[j] = attn_score(p, dot_qk_scalar(qk_order(order, hd), hd, qh, kv_row_at(kv, kv->k, it->table, j, it->kvh)));
    cpu_attn_softmax_f16(level, scores, it->first, it->n_ctx);
    for (int32_t d0 = 0; d0 < hd; d0 += ATTN_COMB_DIM) {
      const int32_t dn = hd - d0 < ATTN_COMB_DIM ? hd - d0 : ATTN_COMB_DIM;
      memset(acc, 0, (size_t)used * (size_t)dn * sizeof(float));
      for (int32_t j = it->first; j < it->n_ctx; j++) {
        const uint16_t *v = kv_row_at(kv, kv->v, it->table, j, it->kvh) + d0;
        float *a = acc + (int64_t)(j % lanes) * dn;
        for (int32_t d = 0; d < dn; d++) a[d] = fmaf(scores[j], llb_fp16_to_fp32(v[d]), a[d]);
      }
      combine_lanes(order, acc, used, dn, out + d0);
    }
  }
}

#if ATTN_HAVE_X86
/* Same numbers as the generic path; the heads of one KV head share each key's load and
 * conversion. head_dim % 16 == 0 and <= ATTN_MAX_DIM. */
ATTN_AVX2_TARGET static void attention_item_avx2(const struct attn_task *t, const struct attn_item *it,
                                                 float *scores /* [n_h, n_ctx] */, float *acc) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const enum cpu_attn_order order = it->order;
  const int32_t hd = kv->head_dim, n_h = it->n_h, n_ctx = it->n_ctx;
  const int32_t lanes = order_lanes(order), used = n_ctx < lanes ? n_ctx : lanes;
  const bool batch = qk_order(order, hd) == CPU_ATTN_ORDER_BATCH;
  const int32_t np = hd - hd % 64;
  float qh[ATTN_MAX_GROUP][ATTN_MAX_DIM];
  for (int32_t g = 0; g < n_h; g++) {
    const float *q = p->q + ((int64_t)it->tok * p->n_heads + it->h0 + g) * hd;
    for (int32_t i = 0; i < hd; i += 8)
      _mm256_storeu_ps(qh[g] + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(q + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  float kf[ATTN_MAX_DIM];
  for (int32_t j = it->first; j < n_ctx; j++) {
    const uint16_t *k = kv_row_at(kv, kv->k, it->table, j, it->kvh);
    for (int32_t i = 0; i < hd; i += 8)
      _mm256_storeu_ps(kf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))));
    for (int32_t g = 0; g < n_h; g++) {
      float sc;
      if (batch) {
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int32_t i = 0; i < hd; i += 16) {
          lo = _mm256_fmadd_ps(_mm256_loadu_ps(qh[g] + i), _mm256_loadu_ps(kf + i), lo);
          hi = _mm256_fmadd_ps(_mm256_loadu_ps(qh[g] + i + 8), _mm256_loadu_ps(kf + i + 8), hi);
        }
        sc = cpu_attn_reduce16_avx2(lo, hi);
      } else {
        __m256 a[8];
        for (int c = 0; c < 8; c++) a[c] = _mm256_setzero_ps();
        for (int32_t i = 0; i < np; i += 64)
          for (int c = 0; c < 8; c++)
            a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(qh[g] + i + 8 * c), _mm256_loadu_ps(kf + i + 8 * c), a[c]);
        /* accumulator m = lanes a[2m] (lo), a[2m+1] (hi): (a0 + a2) + (a1 + a3) */
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
        double s = (double)cpu_attn_reduce16_avx2(lo, hi);
        for (int32_t i = np; i < hd; i++) s += (double)(qh[g][i] * kf[i]);
        sc = (float)s;
      }
      scores[(int64_t)g * n_ctx + j] = attn_score(p, sc);
    }
  }
  for (int32_t g = 0; g < n_h; g++) {
    float *sg = scores + (int64_t)g * n_ctx;
    cpu_attn_softmax_f16(CPU_SIMD_LEVEL_AVX2, sg, it->first, n_ctx);
    float *out = p->out + ((int64_t)it->tok * p->n_heads + it->h0 + g) * hd;
    memset(acc, 0, (size_t)used * (size_t)hd * sizeof(float));
    for (int32_t j = it->first; j < n_ctx; j++) {
      const uint16_t *v = kv_row_at(kv, kv->v, it->table, j, it->kvh);
      float *a = acc + (int64_t)(j % lanes) * hd;
      const __m256 pj = _mm256_set1_ps(sg[j]);
      for (int32_t i = 0; i < hd; i += 8)
        _mm256_storeu_ps(a + i, _mm256_fmadd_ps(pj, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i))),
                                                _mm256_loadu_ps(a + i)));
    }
    combine_lanes(order, acc, used, hd, out);
  }
}
#endif

#if ATTN_HAVE_X86
/* The BATCH order on AVX2: a key's dot is 16 lanes held as two registers (lo: lanes 0-7, hi:
 * 8-15), p.v lane l a set of registers over the keys j = l (mod 16). The same operations in the
 * same order as the generic path, arranged as attention_item_avx512 arranges them: the dots of
 * 4 keys run side by side (one chain per key and half would wait on the fma latency), are
 * reduced together, and p.v runs lane by lane with its accumulators in registers. */

/* Dots of 4 keys (lo[k], hi[k]) to lanes 0-3, each reduced as cpu_attn_reduce16_avx2 does one:
 * h = hi + lo, r[i] = h[i] + h[i + 4], (r0 + r2) + (r1 + r3), done for the 4 keys at once. */
ATTN_AVX2_TARGET static inline __m128 reduce4x16_avx2(const __m256 lo[4], const __m256 hi[4]) {
  __m256 h[4];
  for (int k = 0; k < 4; k++) h[k] = _mm256_add_ps(hi[k], lo[k]);
  /* r01 = [r of key 0 | r of key 1], r23 likewise */
  const __m256 r01 = _mm256_add_ps(_mm256_permute2f128_ps(h[0], h[1], 0x20), _mm256_permute2f128_ps(h[0], h[1], 0x31));
  const __m256 r23 = _mm256_add_ps(_mm256_permute2f128_ps(h[2], h[3], 0x20), _mm256_permute2f128_ps(h[2], h[3], 0x31));
  /* [k0: r0 + r2, r1 + r3, k2: ..., ... | k1: ..., k3: ...] */
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(r01, r23, 0x44), _mm256_shuffle_ps(r01, r23, 0xEE));
  const __m256 t = _mm256_add_ps(s, _mm256_shuffle_ps(s, s, 0xB1)); /* k0 k0 k2 k2 | k1 k1 k3 k3 */
  return _mm256_castps256_ps128(_mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 4, 2, 6, 0, 0, 0, 0)));
}

/* Values e .. e + 7 of the K or V row at `row` (dtype t: backend_kv_row_bytes bytes; e % 8 == 0)
 * as float: fp16 exactly; Q8_0 and FP8 E4M3 as kv_widen.h reads them (the fp16 values
 * cpu_kv_row_to_fp16's scratch holds), widened. Inlined with a constant t. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) __m256 kv_load8_avx2(enum backend_kv_dtype t,
                                                                                 const uint8_t *row, int32_t e) {
  if (t == BACKEND_KV_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * e)));
  if (t == BACKEND_KV_DTYPE_Q8_0) {
    const uint8_t *blk = row + KV_WIDEN_Q8_0_BLOCK_BYTES * (e >> 5);
    return _mm256_cvtph_ps(kv_widen_q8_0_fp16x8_avx2(kv_widen_q8_0_d8_avx2(blk), blk + 2 + (e & 31)));
  }
  return kv_widen_e4m3_ps8_avx2(row + e);
}

/* kf [k][0 .. hd) = key k (row k0 + k * rs bytes, dtype t) as float, k < 4. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
kv_convert4_avx2(enum backend_kv_dtype t, const uint8_t *k0, int64_t rs, int32_t hd, float (*kf)[ATTN_MAX_DIM]) {
  for (int k = 0; k < 4; k++)
    for (int32_t i = 0; i < hd; i += 8) _mm256_storeu_ps(kf[k] + i, kv_load8_avx2(t, k0 + k * rs, i));
}

/* kf [k][0 .. hd) = key k (fp16 at k0 + k * stride) as float, k < 4. */
ATTN_AVX2_TARGET static inline void convert4_avx2(const uint16_t *k0, int64_t stride, int32_t hd,
                                                  float (*kf)[ATTN_MAX_DIM]) {
  kv_convert4_avx2(BACKEND_KV_DTYPE_F16, (const uint8_t *)k0, 2 * stride, hd, kf);
}

/* The raw BATCH dots of q [hd] (fp16-rounded) with 4 keys: from floats kf (kf != NULL) or
 * converting the fp16 keys k0 + k * stride on the fly. Lane k of the result is key k's dot. */
ATTN_AVX2_TARGET static inline __m128 qk4_avx2(const float *q, const float (*kf)[ATTN_MAX_DIM], const uint16_t *k0,
                                               int64_t stride, int32_t hd) {
  __m256 lo[4], hi[4];
  for (int k = 0; k < 4; k++) lo[k] = hi[k] = _mm256_setzero_ps();
  for (int32_t i = 0; i < hd; i += 16) {
    const __m256 ql = _mm256_loadu_ps(q + i), qh = _mm256_loadu_ps(q + i + 8);
    for (int k = 0; k < 4; k++) {
      __m256 kl, kh;
      if (kf) {
        kl = _mm256_loadu_ps(kf[k] + i), kh = _mm256_loadu_ps(kf[k] + i + 8);
      } else {
        kl = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k0 + k * stride + i)));
        kh = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k0 + k * stride + i + 8)));
      }
      lo[k] = _mm256_fmadd_ps(ql, kl, lo[k]);
      hi[k] = _mm256_fmadd_ps(qh, kh, hi[k]);
    }
  }
  return reduce4x16_avx2(lo, hi);
}

/* The BATCH dot of q with one key (row k, dtype t): two accumulators, cpu_attn_reduce16_avx2. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) float kv_qk1_avx2(enum backend_kv_dtype t, const float *q,
                                                                              const uint8_t *k, int32_t hd) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int32_t i = 0; i < hd; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv_load8_avx2(t, k, i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), kv_load8_avx2(t, k, i + 8), hi);
  }
  return cpu_attn_reduce16_avx2(lo, hi);
}

/* kv_qk1_avx2 of an fp16 key. */
ATTN_AVX2_TARGET static inline float qk1_avx2(const float *q, const uint16_t *k, int32_t hd) {
  return kv_qk1_avx2(BACKEND_KV_DTYPE_F16, q, (const uint8_t *)k, hd);
}

/* sc [0 .. 4) = attn_score of the raw dots d (lane k: key k). */
ATTN_AVX2_TARGET static inline void scores4_store_avx2(const struct backend_attn_params *p, __m128 d, float *sc) {
  if (p->logit_softcap > 0.0f) {
    _mm_storeu_ps(sc, d);
    for (int k = 0; k < 4; k++) sc[k] = attn_score(p, sc[k]);
  } else {
    _mm_storeu_ps(sc, _mm_mul_ps(d, _mm_set1_ps(p->scale))); /* attn_score of 4 dots */
  }
}

/* Scores [g * n_ctx + j] of the item's heads for keys [first, n_ctx), block by block; 4 keys
 * at a time (converted once for all heads when there are several or the cache is quantized).
 * K rows of dtype t at kr. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
scores_batch_avx2(enum backend_kv_dtype t, const struct backend_attn_params *p, const struct attn_item *it,
                  const float (*qh)[ATTN_MAX_DIM], struct attn_kv_rows kr, float *scores) {
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim, n_h = it->n_h, n_ctx = it->n_ctx, bs = kv->block_size;
  const int32_t n_blocks = (n_ctx + bs - 1) / bs, b0 = it->first / bs;
  const bool widen = n_h > 1 || t != BACKEND_KV_DTYPE_F16;
  float kf[4][ATTN_MAX_DIM];
  const int64_t rb = kr.rs / kv->n_kv_heads; /* a row's bytes (kr.rs: a slot's) */
  for (int32_t b = b0; b < n_blocks; b++) {
    const uint8_t *kb = kr.base + (int64_t)it->table[b] * bs * kr.rs + kr.off;
    const int32_t n = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
    kv_walk_prefetch(kv, it, b, b0, n_blocks, rb);
    int32_t o = b == b0 ? it->first - b * bs : 0;
    for (; o + 4 <= n; o += 4) {
      if (widen) kv_convert4_avx2(t, kb + o * kr.rs, kr.rs, hd, kf);
      for (int32_t g = 0; g < n_h; g++) {
        const __m128 d = qk4_avx2(qh[g], widen ? (const float(*)[ATTN_MAX_DIM])kf : NULL,
                                  (const uint16_t *)(const void *)(kb + o * kr.rs), kr.rs / 2, hd);
        scores4_store_avx2(p, d, scores + (int64_t)g * n_ctx + b * bs + o);
      }
    }
    for (; o < n; o++)
      for (int32_t g = 0; g < n_h; g++)
        scores[(int64_t)g * n_ctx + b * bs + o] = attn_score(p, kv_qk1_avx2(t, qh[g], kb + o * kr.rs, hd));
  }
}

/* Lane l of head g's p.v over dims [d0, d0 + 8 * nv) (nv <= 8 registers): the keys j = l
 * (mod 16) from `first` in key order, fma(p_j, v_j[d], a[d]); stored to lane [8 * nv]. V rows
 * of dtype t at vr. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
pv_lane_avx2(enum backend_kv_dtype t, const struct backend_kv_layer *kv, const struct attn_item *it, const float *sg,
             struct attn_kv_rows vr, int32_t d0, int32_t l, const int32_t nv, float *lane) {
  const int32_t n_ctx = it->n_ctx, bs = kv->block_size, first = it->first;
  const int32_t n_blocks = (n_ctx + bs - 1) / bs, b0 = first / bs;
  __m256 a[8];
  for (int32_t i = 0; i < nv; i++) a[i] = _mm256_setzero_ps();
  for (int32_t b = b0; b < n_blocks; b++) {
    const uint8_t *vb = vr.base + (int64_t)it->table[b] * bs * vr.rs + vr.off;
    const int32_t n = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
    int32_t o = l; /* bs % 16 == 0: key b * bs + o is in lane o % 16 */
    while (b * bs + o < first) o += 16;
    const float *pb = sg + b * bs;
    for (; o < n; o += 16) {
      const uint8_t *row = vb + (int64_t)o * vr.rs;
      const __m256 pj = _mm256_set1_ps(pb[o]);
      for (int32_t i = 0; i < nv; i++) a[i] = _mm256_fmadd_ps(pj, kv_load8_avx2(t, row, d0 + 8 * i), a[i]);
    }
  }
  for (int32_t i = 0; i < nv; i++) _mm256_storeu_ps(lane + 8 * i, a[i]);
}

/* out [hd] of head g = p.v in the BATCH order: per slice of up to 64 dims, the 16 lanes
 * (pv_lane_avx2) summed in combine_lanes' tree. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
pv_batch_avx2(enum backend_kv_dtype t, const struct backend_attn_params *p, const struct attn_item *it, const float *sg,
              struct attn_kv_rows vr, float *out) {
  const int32_t hd = p->kv->head_dim;
  for (int32_t d0 = 0; d0 < hd; d0 += 64) {
    const int32_t nv = (hd - d0 < 64 ? hd - d0 : 64) / 8;
    float lane[16][64];
    for (int32_t l = 0; l < 16; l++) {
      if (nv == 8) pv_lane_avx2(t, p->kv, it, sg, vr, d0, l, 8, lane[l]);
      else pv_lane_avx2(t, p->kv, it, sg, vr, d0, l, nv, lane[l]);
    }
    for (int32_t i = 0; i < nv; i++) {
      __m256 s[16];
      for (int l = 0; l < 16; l++) s[l] = _mm256_loadu_ps(lane[l] + 8 * i);
      for (int l = 0; l < 8; l++) s[l] = _mm256_add_ps(s[l + 8], s[l]);
      for (int l = 0; l < 4; l++) s[l] = _mm256_add_ps(s[l + 4], s[l]);
      _mm256_storeu_ps(out + d0 + 8 * i, _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3])));
    }
  }
}

/* Lane l of the p.v of two heads (probabilities s0, s1) over dims [d0, d0 + 32) of their KV
 * head: pv_lane_avx2's fmas for each head, in the same key order, with each key's 32 V values
 * converted once for both (4 + 8 registers). Stored to lane0 [32], lane1 [32]. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
pv_lane2_avx2(enum backend_kv_dtype t, const struct backend_kv_layer *kv, const struct attn_item *it, const float *s0,
              const float *s1, struct attn_kv_rows vr, int32_t d0, int32_t l, float *lane0, float *lane1) {
  const int32_t n_ctx = it->n_ctx, bs = kv->block_size, first = it->first;
  const int32_t n_blocks = (n_ctx + bs - 1) / bs, b0 = first / bs;
  __m256 a0[4], a1[4];
  for (int i = 0; i < 4; i++) a0[i] = a1[i] = _mm256_setzero_ps();
  for (int32_t b = b0; b < n_blocks; b++) {
    const uint8_t *vb = vr.base + (int64_t)it->table[b] * bs * vr.rs + vr.off;
    const int32_t n = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
    int32_t o = l; /* bs % 16 == 0: key b * bs + o is in lane o % 16 */
    while (b * bs + o < first) o += 16;
    for (; o < n; o += 16) {
      const uint8_t *row = vb + (int64_t)o * vr.rs;
      const __m256 p0 = _mm256_set1_ps(s0[b * bs + o]), p1 = _mm256_set1_ps(s1[b * bs + o]);
      for (int i = 0; i < 4; i++) {
        const __m256 vf = kv_load8_avx2(t, row, d0 + 8 * i);
        a0[i] = _mm256_fmadd_ps(p0, vf, a0[i]);
        a1[i] = _mm256_fmadd_ps(p1, vf, a1[i]);
      }
    }
  }
  for (int i = 0; i < 4; i++) _mm256_storeu_ps(lane0 + 8 * i, a0[i]), _mm256_storeu_ps(lane1 + 8 * i, a1[i]);
}

/* out0, out1 [hd] = p.v of two heads of the item (probabilities s0, s1), as pv_batch_avx2 gives
 * each: per 32 dims, the 16 lanes (pv_lane2_avx2) summed in the same tree. head_dim % 32 == 0. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
pv_batch2_avx2(enum backend_kv_dtype t, const struct backend_attn_params *p, const struct attn_item *it,
               const float *s0, const float *s1, struct attn_kv_rows vr, float *out0, float *out1) {
  const int32_t hd = p->kv->head_dim;
  for (int32_t d0 = 0; d0 < hd; d0 += 32) {
    float lane[2][16][32];
    for (int32_t l = 0; l < 16; l++) pv_lane2_avx2(t, p->kv, it, s0, s1, vr, d0, l, lane[0][l], lane[1][l]);
    for (int h = 0; h < 2; h++)
      for (int32_t i = 0; i < 4; i++) {
        __m256 s[16];
        for (int l = 0; l < 16; l++) s[l] = _mm256_loadu_ps(lane[h][l] + 8 * i);
        for (int l = 0; l < 8; l++) s[l] = _mm256_add_ps(s[l + 8], s[l]);
        for (int l = 0; l < 4; l++) s[l] = _mm256_add_ps(s[l + 4], s[l]);
        _mm256_storeu_ps((h ? out1 : out0) + d0 + 8 * i,
                         _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3])));
      }
  }
}

/* out of the item's heads = p.v (probabilities scores [n_h, n_ctx]) in the BATCH order: heads in
 * pairs where head_dim % 32 == 0 (pv_batch2_avx2), the rest one by one (pv_batch_avx2). V rows
 * of dtype t. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
pv_item_batch_t_avx2(enum backend_kv_dtype t, const struct backend_attn_params *p, const struct attn_item *it,
                     const float *scores) {
  const int32_t hd = p->kv->head_dim, n_h = it->n_h, n_ctx = it->n_ctx;
  const struct attn_kv_rows vr = attn_v_rows(p->kv, it->kvh);
  float *out = p->out + ((int64_t)it->tok * p->n_heads + it->h0) * hd;
  int32_t g = 0;
  if (hd % 32 == 0) /* heads in pairs: each key's V row converted once for both */
    for (; g + 2 <= n_h; g += 2)
      pv_batch2_avx2(t, p, it, scores + (int64_t)g * n_ctx, scores + (int64_t)(g + 1) * n_ctx, vr,
                     out + (int64_t)g * hd, out + (int64_t)(g + 1) * hd);
  for (; g < n_h; g++) pv_batch_avx2(t, p, it, scores + (int64_t)g * n_ctx, vr, out + (int64_t)g * hd);
}

/* pv_item_batch_t_avx2 over an fp16 cache (the row tiles' p.v). */
ATTN_AVX2_TARGET static void pv_item_batch_avx2(const struct backend_attn_params *p, const struct attn_item *it,
                                                const float *scores) {
  pv_item_batch_t_avx2(BACKEND_KV_DTYPE_F16, p, it, scores);
}

/* attention_item_batch_avx2 on a cache of dtype t (inlined with a constant t). */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
attention_item_batch_t_avx2(enum backend_kv_dtype t, const struct attn_task *tk, const struct attn_item *it,
                            float *scores /* [n_h, n_ctx] */) {
  const struct backend_attn_params *p = tk->p;
  const int32_t hd = p->kv->head_dim, n_h = it->n_h, n_ctx = it->n_ctx;
  const int64_t rb = (int64_t)backend_kv_row_bytes(t, hd);
  const struct attn_kv_rows kr = {(const uint8_t *)p->kv->k, rb * p->kv->n_kv_heads, rb * it->kvh};
  float qh[ATTN_MAX_GROUP][ATTN_MAX_DIM];
  for (int32_t g = 0; g < n_h; g++) {
    const float *q = p->q + ((int64_t)it->tok * p->n_heads + it->h0 + g) * hd;
    for (int32_t i = 0; i < hd; i += 8)
      _mm256_storeu_ps(qh[g] + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(q + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  scores_batch_avx2(t, p, it, (const float(*)[ATTN_MAX_DIM])qh, kr, scores);
  for (int32_t g = 0; g < n_h; g++) cpu_attn_softmax_f16(CPU_SIMD_LEVEL_AVX2, scores + (int64_t)g * n_ctx, it->first, n_ctx);
  pv_item_batch_t_avx2(t, p, it, scores);
}

/* The BATCH order on AVX2 (see above). block_size % 16 == 0, head_dim % 16 == 0 and <=
 * ATTN_MAX_DIM. Same numbers as the generic path. A quantized cache (Q8_0, FP8) is read where it
 * lies, 8 values at a time widened in registers to the fp16 values attention_run_quantized's
 * scratch would hold (kv_load8_avx2). */
#define ATTN_ITEM_FN(NAME, T)                                                                                        \
  ATTN_AVX2_TARGET __attribute__((noinline)) static void NAME(const struct attn_task *t, const struct attn_item *it,   \
                                                              float *scores) {                                       \
    attention_item_batch_t_avx2(T, t, it, scores);                                                                   \
  }
ATTN_ITEM_FN(attention_item_batch_f16_avx2, BACKEND_KV_DTYPE_F16)
ATTN_ITEM_FN(attention_item_batch_q8_0_avx2, BACKEND_KV_DTYPE_Q8_0)
ATTN_ITEM_FN(attention_item_batch_fp8_avx2, BACKEND_KV_DTYPE_FP8_E4M3)
#undef ATTN_ITEM_FN

ATTN_AVX2_TARGET static void attention_item_batch_avx2(const struct attn_task *t, const struct attn_item *it,
                                                       float *scores /* [n_h, n_ctx] */) {
  switch (t->p->kv->dtype) { /* one function per dtype (see pv_lanes_avx512's) */
  case BACKEND_KV_DTYPE_Q8_0: attention_item_batch_q8_0_avx2(t, it, scores); return;
  case BACKEND_KV_DTYPE_FP8_E4M3: attention_item_batch_fp8_avx2(t, it, scores); return;
  default: attention_item_batch_f16_avx2(t, it, scores); return;
  }
}
#endif

/* Blocks of V rows a rows-path p.v walk looks up at a time (their first rows on the stack: 2 KiB;
 * 4096 keys at block_size 16, so one window for most prompts). */
#define ATTN_PV_WINDOW 256

/* A window of a sequence's keys [j0, j1) for the rows paths' p.v: rows [b] = the first fp16 V
 * row of its block j0 / block_size + b in the cache (the table looked up once per window, not
 * once per key and lane: at block_size 16 a lane meets each block once). j0 is a multiple of
 * ATTN_PV_WINDOW * block_size. */
struct pv_window {
  const uint16_t *rows[ATTN_PV_WINDOW];
  int32_t j0, j1;
};

/* The window of keys from j0 (its start) to at most n0 of the sequence with block table `table`. */
static void pv_window_at(const struct backend_kv_layer *kv, const int32_t *table, int64_t stride, int32_t j0, int32_t n0,
                         struct pv_window *w) {
  const int32_t bs = kv->block_size, b0 = j0 / bs;
  w->j0 = j0;
  w->j1 = n0 - j0 < ATTN_PV_WINDOW * bs ? n0 : j0 + ATTN_PV_WINDOW * bs;
  for (int32_t b = b0; b * bs < w->j1; b++)
    w->rows[b - b0] = (const uint16_t *)kv->v + (int64_t)table[b] * bs * stride;
}

#if ATTN_HAVE_X86
/* ymm accumulators of one AVX2 p.v lane pass over rows: (row, head) pairs x 16 dims (2
 * registers each); the other 4 registers hold a V row's 16 dims and a broadcast probability. */
#define ATTN_PV2_ROWS_ACC 12

/* Lane l of p.v over dims [off, off + 16) for (row, head) pairs x < nx of a run (pair x is row
 * x / ng; row r attends keys [0, n0 + r): no window), over the keys of window w (from the
 * accumulators in lane after the first window, else from zero), each key's 16 V values converted once for
 * all of them: accumulators 2x, 2x + 1 take the keys j = l (mod 16) of the row in key order,
 * fma(p_j, v_j, a), as pv_lane_avx2's, so the same bits (a float stored and loaded back between
 * windows is exact). pr [x]: pair x's probabilities from key 0. The window that ends at n0 adds
 * the later rows' keys [n0, n0 + nr - 1) last. Stored to lane [16 * x]. Inlined with constant nx
 * and ng: the accumulators stay in registers. 2 * nx <= ATTN_PV2_ROWS_ACC, the rows of a run
 * <= 16. */
ATTN_AVX2_TARGET static inline __attribute__((always_inline)) void
pv_lane_rows_avx2(const struct backend_kv_layer *kv, const int32_t *table, const struct pv_window *w,
                  const float *const *pr, int32_t n0, int64_t stride, int64_t off, int32_t l, const int32_t nx,
                  const int32_t ng, float *lane) {
  const int32_t bs = kv->block_size, nr = nx / ng;
  __m256 a[ATTN_PV2_ROWS_ACC];
  _Pragma("GCC unroll 12") for (int32_t x = 0; x < 2 * nx; x++) a[x] = w->j0 > 0 ? _mm256_loadu_ps(lane + 8 * x)
                                                                                : _mm256_setzero_ps();
  const uint16_t *const *vb = w->rows;
  int32_t o = l; /* key j: row o of block vb (w->j0 % bs == 0) */
  for (int32_t j = w->j0 + l; j < w->j1; j += 16) { /* bs % 16 == 0: key j is in lane j % 16 */
    const uint16_t *vr = *vb + (int64_t)o * stride + off;
    const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)vr));
    const __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 8)));
    _Pragma("GCC unroll 6") for (int32_t x = 0; x < nx; x++) {
      const __m256 pj = _mm256_set1_ps(pr[x][j]);
      a[2 * x] = _mm256_fmadd_ps(pj, v0, a[2 * x]);
      a[2 * x + 1] = _mm256_fmadd_ps(pj, v1, a[2 * x + 1]);
    }
    if ((o += 16) >= bs) o -= bs, vb++;
  }
  /* keys [n0, n0 + nr - 1), the later rows' only (at most one in this lane), last */
  const int32_t j = n0 + ((l - n0 % 16) + 16) % 16;
  if (w->j1 == n0 && j < n0 + nr - 1) {
    const uint16_t *vr = kv_row_at(kv, kv->v, table, j, 0) + off;
    const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)vr));
    const __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + 8)));
    _Pragma("GCC unroll 6") for (int32_t x = 0; x < nx; x++) { /* rows r > j - n0 */
      if (x / ng <= j - n0) continue;
      const __m256 pj = _mm256_set1_ps(pr[x][j]);
      a[2 * x] = _mm256_fmadd_ps(pj, v0, a[2 * x]);
      a[2 * x + 1] = _mm256_fmadd_ps(pj, v1, a[2 * x + 1]);
    }
  }
  _Pragma("GCC unroll 12") for (int32_t x = 0; x < 2 * nx; x++) _mm256_storeu_ps(lane + 8 * x, a[x]);
}

/* p.v of rows it0->tok + r0 .. + m - 1 of a run (scores [r][n_h][n_ctx of row r] in slices of
 * n_h * n_last, row r's n_ctx it0->n_ctx + r), every head of the item, 16 dims at a time in one
 * lane pass (pv_lane_rows_avx2), then the 16 lanes summed in combine_lanes' tree as
 * pv_batch_avx2 does. m * n_h * 2 <= ATTN_PV2_ROWS_ACC. */
ATTN_AVX2_TARGET static void pv_rows_pass_avx2(const struct backend_attn_params *p, const struct attn_item *it0,
                                               int32_t r0, int32_t m, const float *scores, int32_t n_last,
                                               int64_t stride, int64_t head_off) {
  const int32_t hd = p->kv->head_dim, n_h = it0->n_h, n0 = it0->n_ctx + r0, nx = m * n_h;
  const float *pr[ATTN_PV2_ROWS_ACC / 2];
  for (int32_t r = 0; r < m; r++)
    for (int32_t g = 0; g < n_h; g++) pr[r * n_h + g] = scores + (int64_t)(r0 + r) * n_h * n_last + (int64_t)g * (n0 + r);
  struct pv_window w;
  for (int32_t d0 = 0; d0 < hd; d0 += 16) {
    float lane[16][ATTN_PV2_ROWS_ACC * 8];
    for (int32_t j0 = 0, more = 1; more; j0 = w.j1) { /* one window unless n0 > ATTN_PV_WINDOW blocks */
      pv_window_at(p->kv, it0->table, stride, j0, n0, &w);
      more = w.j1 < n0;
      for (int32_t l = 0; l < 16; l++) {
#define PV_ROWS(NX, NG) \
  pv_lane_rows_avx2(p->kv, it0->table, &w, pr, n0, stride, head_off + d0, l, NX, NG, lane[l])
        if (n_h == 3 && m == 2) PV_ROWS(6, 3); /* 3 heads per KV head (SmolLM2) */
        else if (n_h == 3 && m == 1) PV_ROWS(3, 3);
        else if (n_h == 2 && m == 3) PV_ROWS(6, 2);
        else if (n_h == 2 && m == 2) PV_ROWS(4, 2);
        else if (n_h == 2 && m == 1) PV_ROWS(2, 2);
        else if (n_h == 1 && m == 4) PV_ROWS(4, 1); /* one head per KV head */
        else if (n_h == 1 && m == 3) PV_ROWS(3, 1);
        else if (n_h == 1 && m == 2) PV_ROWS(2, 1);
        else if (n_h == 4 && m == 1) PV_ROWS(4, 4); /* one row of 4-6 heads (Gemma 3: 4) */
        else if (n_h == 5 && m == 1) PV_ROWS(5, 5);
        else if (n_h == 6 && m == 1) PV_ROWS(6, 6);
        else PV_ROWS(nx, n_h);
#undef PV_ROWS
      }
    }
    for (int32_t y = 0; y < 2 * nx; y++) { /* y = 2 x + i: pair x, dims d0 + 8 i .. */
      __m256 t[16];
      for (int l = 0; l < 16; l++) t[l] = _mm256_loadu_ps(lane[l] + 8 * y);
      for (int l = 0; l < 8; l++) t[l] = _mm256_add_ps(t[l + 8], t[l]);
      for (int l = 0; l < 4; l++) t[l] = _mm256_add_ps(t[l + 4], t[l]);
      const int32_t r = y / 2 / n_h, g = y / 2 % n_h, i = y % 2;
      float *out = p->out + ((int64_t)(it0->tok + r0 + r) * p->n_heads + it0->h0 + g) * hd + d0 + 8 * i;
      _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3])));
    }
  }
}

/* Scores of the nr rows of attention_rows_avx2 (its layout): each group of 4 keys converted
 * once for all the rows whose keys cover it (qk4_avx2 over floats: the same dots as over fp16),
 * the last n_r % 4 keys of row r one by one (qk1_avx2), as scores_batch_avx2 gives each row. */
ATTN_AVX2_TARGET static void scores_rows_avx2(const struct backend_attn_params *p, const struct attn_item *it0,
                                              int32_t nr, const float (*qh)[ATTN_MAX_DIM], int64_t stride,
                                              int64_t head_off, int32_t n_last, float *scores) {
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim, n_h = it0->n_h, bs = kv->block_size, n_blocks = (n_last + bs - 1) / bs;
  float kf[4][ATTN_MAX_DIM];
  for (int32_t b = 0; b < n_blocks; b++) {
    const uint16_t *kb = (const uint16_t *)kv->k + (int64_t)it0->table[b] * bs * stride + head_off;
    const int32_t n = n_last - b * bs < bs ? n_last - b * bs : bs;
    for (int32_t o = 0; o + 4 <= n; o += 4) {
      const int32_t key0 = b * bs + o;
      convert4_avx2(kb + o * stride, stride, hd, kf);
      for (int32_t r = 0; r < nr; r++) {
        const int32_t n_r = it0->n_ctx + r;
        if (key0 + 4 > n_r) continue;
        float *sr = scores + (int64_t)r * n_h * n_last + key0;
        for (int32_t g = 0; g < n_h; g++)
          scores4_store_avx2(p, qk4_avx2(qh[r * n_h + g], (const float(*)[ATTN_MAX_DIM])kf, NULL, 0, hd),
                             sr + (int64_t)g * n_r);
      }
    }
  }
  for (int32_t r = 0; r < nr; r++) {
    const int32_t n_r = it0->n_ctx + r;
    float *sr = scores + (int64_t)r * n_h * n_last;
    for (int32_t j = n_r - n_r % 4; j < n_r; j++) /* the last keys, one by one */
      for (int32_t g = 0; g < n_h; g++)
        sr[(int64_t)g * n_r + j] =
            attn_score(p, qk1_avx2(qh[r * n_h + g], kv_row_at(kv, kv->k, it0->table, j, it0->kvh), hd));
  }
}

/* Rows it0->tok .. + nr - 1 of one sequence (n_ctx, n_ctx + 1, ... keys from key 0: no
 * window), the heads of one KV head: attention_item_batch_avx2 for each row, with each group
 * of 4 keys converted once for all of them (scores_rows_avx2) and each V row once per pass of
 * rows (pv_rows_pass_avx2; rows one by one when a row's heads alone fill the registers). Same
 * numbers row by row. scores [nr][n_h][n_ctx of the row] in slices of n_h * (n_ctx + nr - 1).
 * block_size % 16 == 0, head_dim % 16 == 0 and <= ATTN_MAX_DIM, nr * n_h <= ATTN_MAX_ROW_HEADS. */
ATTN_AVX2_TARGET static void attention_rows_avx2(const struct attn_task *t, const struct attn_item *it0, int32_t nr,
                                                 float *scores) {
  const struct backend_attn_params *p = t->p;
  const int32_t hd = p->kv->head_dim, n_h = it0->n_h, n_last = it0->n_ctx + nr - 1;
  const int64_t stride = (int64_t)p->kv->n_kv_heads * hd, head_off = (int64_t)it0->kvh * hd;
  float qh[ATTN_MAX_ROW_HEADS][ATTN_MAX_DIM]; /* [r * n_h + g] */
  for (int32_t x = 0; x < nr * n_h; x++) {
    const float *q = p->q + ((int64_t)(it0->tok + x / n_h) * p->n_heads + it0->h0 + x % n_h) * hd;
    for (int32_t i = 0; i < hd; i += 8)
      _mm256_storeu_ps(qh[x] + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(q + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  scores_rows_avx2(p, it0, nr, (const float(*)[ATTN_MAX_DIM])qh, stride, head_off, n_last, scores);
  for (int32_t r = 0; r < nr; r++)
    for (int32_t g = 0; g < n_h; g++)
      cpu_attn_softmax_f16(CPU_SIMD_LEVEL_AVX2, scores + (int64_t)r * n_h * n_last + (int64_t)g * (it0->n_ctx + r), 0,
                  it0->n_ctx + r);
  /* rows a pass: 2 or more at 1-3 heads per KV head, 1 at 4-6 (each V slice converted once for
   * the row's heads, where attention_item_batch_avx2's p.v converts it once per pair of heads),
   * none past 6 */
  const int32_t rp = ATTN_PV2_ROWS_ACC / 2 / n_h;
  for (int32_t r0 = 0; r0 < nr; r0 += rp > 1 ? rp : 1) {
    if (rp < 1) { /* attention_item_batch_avx2's p.v */
      struct attn_item ir = *it0;
      ir.tok += r0;
      ir.n_ctx += r0;
      pv_item_batch_avx2(p, &ir, scores + (int64_t)r0 * n_h * n_last);
      continue;
    }
    pv_rows_pass_avx2(p, it0, r0, nr - r0 < rp ? nr - r0 : rp, scores, n_last, stride, head_off);
  }
}
#endif

#if ATTN_HAVE_X86
/* Reduces 16 dot accumulators a[l] (key l) to one register, lane l = key l's dot, as
 * _mm512_reduce_add_ps reduces each (cpu_reduce16's tree: halves, quarters, (t0 + t2) +
 * (t1 + t3)), each step of that tree done for 2 or 4 keys per instruction: the same additions
 * of the same operands, so the same bits as 16 single reductions, at about a fifth of the
 * shuffles. */
ATTN_AVX512_TARGET static inline __m512 reduce16x16_avx512(const __m512 a[16]) {
  /* halves: b[m] = [h(2m) | h(2m+1)], h(x)[i] = x[i + 8] + x[i] */
  __m512 b[8];
  for (int m = 0; m < 8; m++)
    b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE),
                         _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44));
  /* quarters: c[n], 128-bit lane e = key 4n + e, t[i] = h[i + 4] + h[i] */
  __m512 c[4];
  for (int n = 0; n < 4; n++)
    c[n] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * n], b[2 * n + 1], 0xDD),
                         _mm512_shuffle_f32x4(b[2 * n], b[2 * n + 1], 0x88));
  /* t0 + t2, t1 + t3: d[p] lane e = keys 8p + e, 8p + 4 + e */
  __m512 d[2];
  for (int pp = 0; pp < 2; pp++)
    d[pp] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * pp], c[2 * pp + 1], 0x44),
                          _mm512_shuffle_ps(c[2 * pp], c[2 * pp + 1], 0xEE));
  /* u0 + u1: element 4e + j = key 4j + e; then back to key order */
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* The dots of q [16 * nv] with 16 keys k + l * stride (l < 16; fp16, 16 * nv each), in the
 * BATCH order: each key's dot is one 16-lane accumulator, fma in index order, then reduced
 * (reduce16x16_avx512). Lane l of the result is key l's dot. */
ATTN_AVX512_TARGET static inline __m512 qk16_avx512(const float *q, const uint16_t *k, int64_t stride,
                                                    int32_t nv) {
  __m512 a[16];
  for (int l = 0; l < 16; l++) a[l] = _mm512_setzero_ps();
  for (int32_t i = 0; i < nv; i++) {
    const __m512 qi = _mm512_loadu_ps(q + 16 * i);
    _Pragma("GCC unroll 16") for (int l = 0; l < 16; l++) a[l] = _mm512_fmadd_ps(
        qi, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + l * stride + 16 * i))), a[l]);
  }
  return reduce16x16_avx512(a);
}

/* qk16_avx512 over keys already converted to float: kf [16][ATTN_MAX_DIM] (the heads of one
 * KV head convert each key once and share it). The same fmas, so the same bits. */
ATTN_AVX512_TARGET static inline __m512 qk16f_avx512(const float *q, const float (*kf)[ATTN_MAX_DIM], int32_t nv) {
  __m512 a[16];
  for (int l = 0; l < 16; l++) a[l] = _mm512_setzero_ps();
  for (int32_t i = 0; i < nv; i++) {
    const __m512 qi = _mm512_loadu_ps(q + 16 * i);
    _Pragma("GCC unroll 16") for (int l = 0; l < 16; l++) a[l] =
        _mm512_fmadd_ps(qi, _mm512_loadu_ps(kf[l] + 16 * i), a[l]);
  }
  return reduce16x16_avx512(a);
}

/* sc [16] = attn_score of 16 dots. */
ATTN_AVX512_TARGET static inline void scores16_store_avx512(const struct backend_attn_params *p, __m512 dots, float *sc) {
  if (p->logit_softcap > 0.0f) {
    _mm512_storeu_ps(sc, dots);
    for (int l = 0; l < 16; l++) sc[l] = attn_score(p, sc[l]);
  } else {
    _mm512_storeu_ps(sc, _mm512_mul_ps(dots, _mm512_set1_ps(p->scale))); /* attn_score */
  }
}

/* qh [g] = q of row tok, head h0 + g (g < n_h), rounded to fp16 (as ggml's F16 kq operand). */
ATTN_AVX512_TARGET static void round_q_avx512(const struct backend_attn_params *p, int32_t tok, int32_t h0,
                                              int32_t n_h, float (*qh)[ATTN_MAX_DIM]) {
  const int32_t hd = p->kv->head_dim;
  for (int32_t g = 0; g < n_h; g++) {
    const float *q = p->q + ((int64_t)tok * p->n_heads + h0 + g) * hd;
    for (int32_t i = 0; i < hd; i += 16)
      _mm512_storeu_ps(qh[g] + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(q + i), _MM_FROUND_TO_NEAREST_INT)));
  }
}

/* Values i * 16 .. i * 16 + 15 of the K or V row at `row` (dtype t: backend_kv_row_bytes bytes)
 * as float: fp16 exactly; Q8_0 and FP8 E4M3 as kv_widen.h reads them (the fp16 values the
 * scratch of cpu_kv_row_to_fp16 holds), widened. Inlined with a constant t: one load and
 * conversion (fp16), a few more operations (Q8_0, FP8). */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) __m512 kv_load16_avx512(enum backend_kv_dtype t,
                                                                                      const uint8_t *row, int32_t i) {
  if (t == BACKEND_KV_DTYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 32 * i)));
  if (t == BACKEND_KV_DTYPE_Q8_0) {
    const uint8_t *blk = row + KV_WIDEN_Q8_0_BLOCK_BYTES * (i >> 1);
    return _mm512_cvtph_ps(kv_widen_q8_0_fp16x16_avx512(kv_widen_q8_0_d16_avx512(blk), blk + 2 + 16 * (i & 1)));
  }
  return kv_widen_e4m3_ps16_avx512(row + 16 * i);
}

/* kf [l] = the key row k + l * rs (bytes; l < 16, dtype t, 16 * nv values) as float
 * (kv_load16_avx512). */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
kv_convert16_avx512(enum backend_kv_dtype t, const uint8_t *k, int64_t rs, int32_t nv, float (*kf)[ATTN_MAX_DIM]) {
  for (int l = 0; l < 16; l++)
    for (int32_t i = 0; i < nv; i++) _mm512_storeu_ps(kf[l] + 16 * i, kv_load16_avx512(t, k + l * rs, i));
}

/* kf [l] = the fp16 key k + l * stride (l < 16, 16 * nv values) as float. */
ATTN_AVX512_TARGET static inline void convert16_avx512(const uint16_t *k, int64_t stride, int32_t nv,
                                                       float (*kf)[ATTN_MAX_DIM]) {
  kv_convert16_avx512(BACKEND_KV_DTYPE_F16, (const uint8_t *)k, 2 * stride, nv, kf);
}

/* sc [g * head_stride] = the score of one key (kf: nv registers of its values as float) for heads
 * qh [g < n_h]: one 16-lane accumulator, _mm512_reduce_add_ps (the bits of a lane of
 * reduce16x16_avx512). */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
score1f_avx512(const struct backend_attn_params *p, int32_t n_h, const float (*qh)[ATTN_MAX_DIM], const __m512 *kf,
               int32_t nv, float *sc, int64_t head_stride) {
  for (int32_t g = 0; g < n_h; g++) {
    __m512 acc = _mm512_setzero_ps();
    for (int32_t i = 0; i < nv; i++) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh[g] + 16 * i), kf[i], acc);
    sc[(int64_t)g * head_stride] = attn_score(p, _mm512_reduce_add_ps(acc));
  }
}

/* score1f_avx512 of the key row k (dtype t). */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
kv_score1_avx512(const struct backend_attn_params *p, enum backend_kv_dtype t, int32_t n_h,
                 const float (*qh)[ATTN_MAX_DIM], const uint8_t *k, int32_t nv, float *sc, int64_t head_stride) {
  __m512 kf[ATTN_MAX_DIM / 16];
  for (int32_t i = 0; i < nv; i++) kf[i] = kv_load16_avx512(t, k, i);
  score1f_avx512(p, n_h, qh, kf, nv, sc, head_stride);
}

/* kv_score1_avx512 of an fp16 key k. */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
score1_avx512(const struct backend_attn_params *p, int32_t n_h, const float (*qh)[ATTN_MAX_DIM], const uint16_t *k,
              int32_t nv, float *sc, int64_t head_stride) {
  kv_score1_avx512(p, BACKEND_KV_DTYPE_F16, n_h, qh, (const uint8_t *)k, nv, sc, head_stride);
}

/* The scores of 16 keys (rows k + l * rs, bytes, dtype t) for every head of the item, scaled
 * (attn_score). One fp16 head reads its keys in the dot (qk16_avx512); otherwise they are
 * widened once into floats for all heads (the same fmas of the same values). */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
kv_scores16_avx512(const struct backend_attn_params *p, enum backend_kv_dtype t, int32_t n_h, int32_t n_ctx,
                   const float (*qh)[ATTN_MAX_DIM], const uint8_t *k, int64_t rs, int32_t nv,
                   float *scores /* [n_h, n_ctx] at this key */) {
  float kf[16][ATTN_MAX_DIM];
  const bool widen = n_h > 1 || t != BACKEND_KV_DTYPE_F16;
  if (widen) kv_convert16_avx512(t, k, rs, nv, kf);
  for (int32_t g = 0; g < n_h; g++) {
    const __m512 dots = widen ? qk16f_avx512(qh[g], (const float(*)[ATTN_MAX_DIM])kf, nv)
                              : qk16_avx512(qh[g], (const uint16_t *)(const void *)k, rs / 2, nv);
    scores16_store_avx512(p, dots, scores + (int64_t)g * n_ctx);
  }
}

/* Heads whose p.v accumulators one lane pass keeps in registers: 16 / (head_dim / 16). */
static int32_t pv_heads_per_pass(int32_t nv, int32_t n_h) {
  const int32_t gh = 16 / nv;
  return gh < 1 ? 1 : gh > n_h ? n_h : gh;
}

/* Lane l of pv_avx512's pass over heads g0 .. g0 + ng - 1: their accumulators (nv registers
 * of 16 output dims per head) over the keys j = l (mod 16) from `first`, in key order, stored
 * to lane [ng * nv * 16]. V rows of dtype t at vr. Inlined with constant t, nv and ng where it
 * matters, so the accumulators stay in registers. */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
pv_lane_avx512(enum backend_kv_dtype t, const struct backend_kv_layer *kv, const struct attn_item *it,
               const float *scores, struct attn_kv_rows vr, int32_t g0, int32_t l, const int32_t nv, const int32_t ng,
               float *lane) {
  const int32_t n_ctx = it->n_ctx, bs = kv->block_size, first = it->first;
  const int32_t n_blocks = (n_ctx + bs - 1) / bs, b0 = first / bs;
  __m512 a[16];
  for (int32_t x = 0; x < ng * nv; x++) a[x] = _mm512_setzero_ps();
  for (int32_t b = b0; b < n_blocks; b++) {
    const uint8_t *vb = vr.base + (int64_t)it->table[b] * bs * vr.rs + vr.off;
    const int32_t n = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
    int32_t o = l; /* bs % 16 == 0: key b * bs + o is in lane o % 16 */
    while (b * bs + o < first) o += 16;
    const float *pb = scores + (int64_t)g0 * n_ctx + b * bs;
    for (; o < n; o += 16) {
      const uint8_t *row = vb + (int64_t)o * vr.rs;
      __m512 vf[16];
      for (int32_t i = 0; i < nv; i++) vf[i] = kv_load16_avx512(t, row, i);
      for (int32_t g = 0; g < ng; g++) {
        const __m512 pj = _mm512_set1_ps(pb[(int64_t)g * n_ctx + o]);
        for (int32_t i = 0; i < nv; i++) a[g * nv + i] = _mm512_fmadd_ps(pj, vf[i], a[g * nv + i]);
      }
    }
  }
  for (int32_t x = 0; x < ng * nv; x++) _mm512_storeu_ps(lane + 16 * x, a[x]);
}

/* The 16 lanes of pv_avx512's pass over heads g0 .. g0 + ng - 1 (lane [l][ng * hd]), specialized
 * for SmolLM2's and head_dim 128's shapes. */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
pv_lanes_avx512(enum backend_kv_dtype t, const struct backend_kv_layer *kv, const struct attn_item *it,
                const float *scores, struct attn_kv_rows vr, int32_t g0, int32_t nv, int32_t ng, float (*lane)[16 * 16]) {
  for (int32_t l = 0; l < 16; l++) {
#define PV_LANE(NV, NG) pv_lane_avx512(t, kv, it, scores, vr, g0, l, NV, NG, lane[l])
    if (nv == 4 && ng == 3) PV_LANE(4, 3); /* head_dim 64, 3 heads per KV head (SmolLM2) */
    else if (nv == 4 && ng == 4) PV_LANE(4, 4);
    else if (nv == 4 && ng == 2) PV_LANE(4, 2);
    else if (nv == 4 && ng == 1) PV_LANE(4, 1);
    else if (nv == 8 && ng == 2) PV_LANE(8, 2); /* head_dim 128 */
    else if (nv == 8 && ng == 1) PV_LANE(8, 1);
    else PV_LANE(nv, ng);
#undef PV_LANE
  }
}

/* pv_lanes_avx512 for each dtype, each its own function (one dtype's specializations per
 * function; with all three inlined into pv_avx512 and attention_item_avx512, fp16 decode at 4096
 * tokens measured 0.86x, 0.96x, 0.93x of main in three pairs, split 1.00-1.14x). */
#define ATTN_PV_LANES_FN(NAME, T)                                                                                    \
  ATTN_AVX512_TARGET __attribute__((noinline)) static void NAME(                                                     \
      const struct backend_kv_layer *kv, const struct attn_item *it, const float *scores, struct attn_kv_rows vr,    \
      int32_t g0, int32_t nv, int32_t ng, float (*lane)[16 * 16]) {                                                  \
    pv_lanes_avx512(T, kv, it, scores, vr, g0, nv, ng, lane);                                                        \
  }
ATTN_PV_LANES_FN(pv_lanes_f16_avx512, BACKEND_KV_DTYPE_F16)
ATTN_PV_LANES_FN(pv_lanes_q8_0_avx512, BACKEND_KV_DTYPE_Q8_0)
ATTN_PV_LANES_FN(pv_lanes_fp8_avx512, BACKEND_KV_DTYPE_FP8_E4M3)
#undef ATTN_PV_LANES_FN

/* out [hd] of one head = p.v in the BATCH order (probabilities sg [n_ctx] from key `first`),
 * key by key: for each 16-dim slice the 16 lane accumulators (lane l: keys j = l (mod 16), in
 * key order, fma(p_j, v_j, a)) stay in registers, a group of 16 keys is one step per lane,
 * then the lanes are summed in combine_lanes' tree: pv_avx512's fmas and sums for one head,
 * so the same bits, without its per-key walk of the block table (one key a block and lane at
 * block_size 16). block_size % 16 == 0. V rows of dtype t. */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
pv_keys_avx512(enum backend_kv_dtype t, const struct backend_kv_layer *kv, const struct attn_item *it, const float *sg,
               float *out) {
  const int32_t hd = kv->head_dim, n_ctx = it->n_ctx, first = it->first, bs = kv->block_size;
  const int32_t b0 = first / bs, n_blocks = (n_ctx + bs - 1) / bs;
  const struct attn_kv_rows vr = attn_v_rows(kv, it->kvh);
  for (int32_t i = 0; i < hd / 16; i++) {
    __m512 a[16];
    _Pragma("GCC unroll 16") for (int l = 0; l < 16; l++) a[l] = _mm512_setzero_ps();
    for (int32_t b = b0; b < n_blocks; b++) {
      const uint8_t *vb = vr.base + (int64_t)it->table[b] * bs * vr.rs + vr.off;
      const int32_t n = n_ctx - b * bs < bs ? n_ctx - b * bs : bs, o0 = b == b0 ? (first - b * bs) / 16 * 16 : 0;
      for (int32_t o = o0; o < n; o += 16) { /* keys b * bs + o .. + 15: lanes 0 .. 15 */
        const uint8_t *vg = vb + (int64_t)o * vr.rs;
        const float *pg = sg + b * bs + o;
        const int32_t lo = b * bs + o < first ? first - b * bs - o : 0, hi = n - o < 16 ? n - o : 16;
        if (lo == 0 && hi == 16) {
          _Pragma("GCC unroll 16") for (int l = 0; l < 16; l++) a[l] =
              _mm512_fmadd_ps(_mm512_set1_ps(pg[l]), kv_load16_avx512(t, vg + l * vr.rs, i), a[l]);
          continue;
        }
        _Pragma("GCC unroll 16") for (int l = 0; l < 16; l++) { /* a group cut by the window or n_ctx */
          if (l < lo || l >= hi) continue;
          a[l] = _mm512_fmadd_ps(_mm512_set1_ps(pg[l]), kv_load16_avx512(t, vg + l * vr.rs, i), a[l]);
        }
      }
    }
    _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) a[l] = _mm512_add_ps(a[l + 8], a[l]);
    _Pragma("GCC unroll 4") for (int l = 0; l < 4; l++) a[l] = _mm512_add_ps(a[l + 4], a[l]);
    _mm512_storeu_ps(out + 16 * i, _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])));
  }
}

/* pv_keys_avx512 for each head of the item (probabilities scores [n_h, n_ctx]), the cache's dtype
 * chosen once: pv_avx512's bits head by head. For the head_dims pv_lanes_avx512 does not
 * specialize (80, 96, Gemma's 256): its lane pass with a run-time count of accumulators keeps
 * them in memory, and at 256 they would not fit the registers anyway; head by head, each V row
 * is converted once per head, not once for all, and still 1.3-1.9x faster (a 512-token prefill
 * layer, 2 threads, when the row tiles still took this path: head_dim 80 3.83 -> 2.86 ms, 96
 * 6.49 -> 4.51, 256 11.2 -> 5.9; they now run slices, pv_rows_avx512). Decode items of several
 * heads take it (one decode row at 2048 keys, head_dim 80 / 256: 64.8 -> 56.8 / 329 -> 222 us). */
ATTN_AVX512_TARGET __attribute__((noinline)) static void pv_heads_keys_avx512(const struct backend_attn_params *p,
                                                                            const struct attn_item *it,
                                                                            const float *scores) {
  const struct backend_kv_layer *kv = p->kv;
  for (int32_t g = 0; g < it->n_h; g++) {
    const float *sg = scores + (int64_t)g * it->n_ctx;
    float *out = p->out + ((int64_t)it->tok * p->n_heads + it->h0 + g) * kv->head_dim;
    switch (kv->dtype) {
    case BACKEND_KV_DTYPE_Q8_0: pv_keys_avx512(BACKEND_KV_DTYPE_Q8_0, kv, it, sg, out); break;
    case BACKEND_KV_DTYPE_FP8_E4M3: pv_keys_avx512(BACKEND_KV_DTYPE_FP8_E4M3, kv, it, sg, out); break;
    default: pv_keys_avx512(BACKEND_KV_DTYPE_F16, kv, it, sg, out); break;
    }
  }
}

/* out [n_h][hd] = p.v of the item's heads in the BATCH order: the accumulator of lane l (one
 * per head and 16 output dims) takes the keys j = l (mod 16) in key order, then the 16 lanes
 * are summed in combine_lanes' tree. Lane by lane, so each key's V row is converted once for
 * all the heads of a pass (the same fmas as per head, so the same bits). V rows of the
 * cache's dtype, read where they lie (kv_load16_avx512). */
ATTN_AVX512_TARGET static void pv_avx512(const struct backend_attn_params *p, const struct attn_item *it,
                                         const float *scores /* [n_h, n_ctx] */) {
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim, nv = hd / 16;
  const int32_t gh = pv_heads_per_pass(nv, it->n_h);
  if (nv != 4 && nv != 8) { /* head_dim not 64 / 128, the shapes pv_lanes_avx512 specializes */
    pv_heads_keys_avx512(p, it, scores);
    return;
  }
  const struct attn_kv_rows vr = attn_v_rows(kv, it->kvh);
  for (int32_t g0 = 0; g0 < it->n_h; g0 += gh) {
    const int32_t ng = it->n_h - g0 < gh ? it->n_h - g0 : gh, na = ng * nv;
    float lane[16][16 * 16]; /* [l][g * hd + d]: ng * hd <= 256 */
    if (kv->dtype == BACKEND_KV_DTYPE_Q8_0) pv_lanes_q8_0_avx512(kv, it, scores, vr, g0, nv, ng, lane);
    else if (kv->dtype == BACKEND_KV_DTYPE_FP8_E4M3) pv_lanes_fp8_avx512(kv, it, scores, vr, g0, nv, ng, lane);
    else pv_lanes_f16_avx512(kv, it, scores, vr, g0, nv, ng, lane);
    for (int32_t x = 0; x < na; x++) { /* x = g * nv + i: head g0 + g, dims 16 i .. */
      __m512 s[16];
      for (int l = 0; l < 16; l++) s[l] = _mm512_loadu_ps(lane[l] + 16 * x);
      for (int l = 0; l < 8; l++) s[l] = _mm512_add_ps(s[l + 8], s[l]);
      for (int l = 0; l < 4; l++) s[l] = _mm512_add_ps(s[l + 4], s[l]);
      const int32_t g = x / nv, i = x % nv;
      float *out = p->out + ((int64_t)it->tok * p->n_heads + it->h0 + g0 + g) * hd + 16 * i;
      _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3])));
    }
  }
}

/* attention_item_avx512 on a cache of dtype t (inlined with a constant t): K and V rows read
 * where they lie and widened in registers. */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
attention_item_kv_avx512(enum backend_kv_dtype t, const struct attn_task *tk, const struct attn_item *it,
                         float *scores /* [n_h, n_ctx] */) {
  const struct backend_attn_params *p = tk->p;
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim, n_h = it->n_h, n_ctx = it->n_ctx, bs = kv->block_size;
  const int64_t rb = (int64_t)backend_kv_row_bytes(t, hd), rs = rb * kv->n_kv_heads;
  const int32_t n_blocks = (n_ctx + bs - 1) / bs, first = it->first, b0 = first / bs;
  float qh[ATTN_MAX_GROUP][ATTN_MAX_DIM];
  round_q_avx512(p, it->tok, it->h0, n_h, qh);
  for (int32_t b = b0; b < n_blocks; b++) {
    const uint8_t *kb = (const uint8_t *)kv->k + (int64_t)it->table[b] * bs * rs + rb * it->kvh;
    const int32_t n = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
    kv_walk_prefetch(kv, it, b, b0, n_blocks, rb);
    int32_t o = b == b0 ? first - b * bs : 0;
    /* whole groups of 16 keys: 16 dots at once, reduced together */
    for (; o % 16 == 0 && o + 16 <= n; o += 16)
      kv_scores16_avx512(p, t, n_h, n_ctx, (const float(*)[ATTN_MAX_DIM])qh, kb + o * rs, rs, hd / 16,
                         scores + b * bs + o);
    for (; o < n; o++)
      kv_score1_avx512(p, t, n_h, (const float(*)[ATTN_MAX_DIM])qh, kb + o * rs, hd / 16, scores + b * bs + o, n_ctx);
  }
  for (int32_t g = 0; g < n_h; g++) cpu_attn_softmax_f16(tk->c->level, scores + (int64_t)g * n_ctx, first, n_ctx); /* AVX-512 expf: same bits */
  if (n_h == 1) /* one head (decode items): key by key, nothing shared to convert once */
    pv_keys_avx512(t, kv, it, scores, p->out + ((int64_t)it->tok * p->n_heads + it->h0) * hd);
  else
    pv_avx512(p, it, scores);
}

/* The BATCH order with 16-lane registers: a q.k dot is one accumulator (lane i % 16), the
 * p.v lanes j % 16 are combined in combine_lanes' tree (pv_avx512). Same numbers as the
 * generic path. Keys are walked block by block (no division per key); block_size % 16 == 0,
 * head_dim % 16 == 0 and <= ATTN_MAX_DIM. A quantized cache (Q8_0, FP8) is read where it lies,
 * each 16 values widened in registers to the fp16 values the scratch of attention_run_quantized
 * would hold (kv_load16_avx512): the same fmas of the same values, half the bytes read. */
#define ATTN_ITEM_FN(NAME, T)                                                                                        \
  ATTN_AVX512_TARGET __attribute__((noinline)) static void NAME(const struct attn_task *t, const struct attn_item *it, \
                                                                float *scores) {                                     \
    attention_item_kv_avx512(T, t, it, scores);                                                                      \
  }
ATTN_ITEM_FN(attention_item_f16_avx512, BACKEND_KV_DTYPE_F16)
ATTN_ITEM_FN(attention_item_q8_0_avx512, BACKEND_KV_DTYPE_Q8_0)
ATTN_ITEM_FN(attention_item_fp8_avx512, BACKEND_KV_DTYPE_FP8_E4M3)
#undef ATTN_ITEM_FN

ATTN_AVX512_TARGET static void attention_item_avx512(const struct attn_task *t, const struct attn_item *it,
                                                     float *scores /* [n_h, n_ctx] */) {
  switch (t->p->kv->dtype) { /* one function per dtype, as pv_lanes_avx512's */
  case BACKEND_KV_DTYPE_Q8_0: attention_item_q8_0_avx512(t, it, scores); return;
  case BACKEND_KV_DTYPE_FP8_E4M3: attention_item_fp8_avx512(t, it, scores); return;
  default: attention_item_f16_avx512(t, it, scores); return;
  }
}
#endif

#if ATTN_HAVE_X86
/* Accumulators of one p.v lane pass over several rows (zmm registers, the rest hold a V row). */
#define ATTN_PV_ROWS_ACC 24

/* Lane l of p.v for rows r < nr of a run (row r attends keys [0, n0 + r): no window) and heads
 * g < ng of each, over the keys of window w (from the accumulators in lane after the first
 * window, else from zero), the V row of each key converted once for all of them: accumulator
 * (r * ng + g) * nv + i takes the keys j = l (mod 16) of row r in key order, fma(p_j, v_j, a),
 * as pv_lane_avx512's, so the same bits. pr [r * ng + g]: row r's head g probabilities from
 * key 0. The window that ends at n0 adds the later rows' keys last. Stored to lane [16 * x] for
 * accumulator x. nr * ng * nv <= ATTN_PV_ROWS_ACC. */
ATTN_AVX512_TARGET static inline __attribute__((always_inline)) void
pv_lane_rows_avx512(const struct backend_kv_layer *kv, const int32_t *table, const struct pv_window *w,
                    const float *const *pr, int32_t n0, int64_t stride, int64_t head_off, int32_t l, const int32_t nv,
                    const int32_t ng, const int32_t nr, float *lane) {
  const int32_t bs = kv->block_size;
  __m512 a[ATTN_PV_ROWS_ACC], vf[ATTN_MAX_DIM / 16];
  _Pragma("GCC unroll 24") for (int32_t x = 0; x < nr * ng * nv; x++) a[x] = w->j0 > 0 ? _mm512_loadu_ps(lane + 16 * x)
                                                                                      : _mm512_setzero_ps();
  const uint16_t *const *vb = w->rows;
  int32_t o = l; /* key j: row o of block vb (w->j0 % bs == 0) */
  for (int32_t j = w->j0 + l; j < w->j1; j += 16) { /* bs % 16 == 0: key j is in lane j % 16 */
    const uint16_t *vr = *vb + (int64_t)o * stride + head_off;
    for (int32_t i = 0; i < nv; i++) vf[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * i)));
    _Pragma("GCC unroll 24") for (int32_t x = 0; x < nr * ng; x++) {
      const __m512 pj = _mm512_set1_ps(pr[x][j]);
      for (int32_t i = 0; i < nv; i++) a[x * nv + i] = _mm512_fmadd_ps(pj, vf[i], a[x * nv + i]);
    }
    if ((o += 16) >= bs) o -= bs, vb++;
  }
  /* keys [n0, n0 + nr - 1), the later rows' only (nr <= 16: at most one in this lane), last */
  const int32_t j = n0 + ((l - n0 % 16) + 16) % 16;
  if (w->j1 == n0 && j < n0 + nr - 1) {
    const uint16_t *vr = kv_row_at(kv, kv->v, table, j, 0) + head_off;
    for (int32_t i = 0; i < nv; i++) vf[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * i)));
    _Pragma("GCC unroll 24") for (int32_t x = 0; x < nr * ng; x++) { /* rows r > j - n0 (constant indices: a stays in registers) */
      if (x / ng <= j - n0) continue;
      const __m512 pj = _mm512_set1_ps(pr[x][j]);
      for (int32_t i = 0; i < nv; i++) a[x * nv + i] = _mm512_fmadd_ps(pj, vf[i], a[x * nv + i]);
    }
  }
  _Pragma("GCC unroll 24") for (int32_t x = 0; x < nr * ng * nv; x++) _mm512_storeu_ps(lane + 16 * x, a[x]);
}

/* Rows of one pass of pv_rows_avx512: as many as keep their accumulators in registers (<= 4;
 * 0 or 1: none shared). */
static int32_t pv_rows_per_pass(int32_t nv, int32_t n_h) {
  const int32_t rp = ATTN_PV_ROWS_ACC / (nv * n_h);
  return rp > ATTN_MAX_TILE_ROWS ? ATTN_MAX_TILE_ROWS : rp;
}

/* p.v of rows it0->tok + r0 .. + m - 1 of a run (scores [r][n_h][n_ctx of row r] in slices
 * of n_h * n_last, row r's n_ctx it0->n_ctx + r) and every head of the item over dims
 * [d0, d0 + 16 nvp) (the whole head, or one 16-dim slice), in one lane pass
 * (pv_lane_rows_avx512), then the 16 lanes summed in combine_lanes' tree as pv_avx512 does:
 * each (head, 16-dim slice) accumulator takes the same fmas whatever the pass holds beside it,
 * so the same bits. m * n_h * nvp <= ATTN_PV_ROWS_ACC. */
ATTN_AVX512_TARGET static void pv_rows_pass_avx512(const struct backend_attn_params *p, const struct attn_item *it0,
                                                   int32_t r0, int32_t m, const float *scores, int32_t n_last,
                                                   int64_t stride, int64_t head_off, int32_t d0, int32_t nvp) {
  const int32_t hd = p->kv->head_dim, n_h = it0->n_h, n0 = it0->n_ctx + r0, na = m * n_h * nvp;
  const float *pr[ATTN_PV_ROWS_ACC];
  for (int32_t r = 0; r < m; r++)
    for (int32_t g = 0; g < n_h; g++) pr[r * n_h + g] = scores + (int64_t)(r0 + r) * n_h * n_last + (int64_t)g * (n0 + r);
  float lane[16][ATTN_PV_ROWS_ACC * 16];
  struct pv_window w;
  for (int32_t j0 = 0, more = 1; more; j0 = w.j1) { /* one window unless n0 > ATTN_PV_WINDOW blocks */
    pv_window_at(p->kv, it0->table, stride, j0, n0, &w);
    more = w.j1 < n0;
    for (int32_t l = 0; l < 16; l++) {
#define PV_ROWS(NV, NG, NR) \
  pv_lane_rows_avx512(p->kv, it0->table, &w, pr, n0, stride, head_off + d0, l, NV, NG, NR, lane[l])
      if (nvp == 4 && n_h == 3 && m == 2) PV_ROWS(4, 3, 2); /* head_dim 64, 3 heads per KV head (SmolLM2) */
      else if (nvp == 4 && n_h == 3 && m == 1) PV_ROWS(4, 3, 1);
      else if (nvp == 4 && n_h == 2 && m == 3) PV_ROWS(4, 2, 3);
      else if (nvp == 4 && n_h == 1 && m == 4) PV_ROWS(4, 1, 4);
      else if (nvp == 8 && n_h == 1 && m == 3) PV_ROWS(8, 1, 3); /* head_dim 128, one head per KV head */
      else if (nvp == 8 && n_h == 1 && m == 2) PV_ROWS(8, 1, 2);
      else if (nvp == 1 && n_h == 4 && m == 4) PV_ROWS(1, 4, 4); /* slices: 4 heads per KV head (Gemma 3) */
      else if (nvp == 1 && n_h == 4 && m == 3) PV_ROWS(1, 4, 3);
      else if (nvp == 1 && n_h == 4 && m == 2) PV_ROWS(1, 4, 2);
      else if (nvp == 1 && n_h == 4 && m == 1) PV_ROWS(1, 4, 1);
      else if (nvp == 1 && n_h == 3 && m == 4) PV_ROWS(1, 3, 4);
      else if (nvp == 1 && n_h == 2 && m == 4) PV_ROWS(1, 2, 4);
      else if (nvp == 1 && n_h == 1 && m == 4) PV_ROWS(1, 1, 4);
      else PV_ROWS(nvp, n_h, m);
#undef PV_ROWS
    }
  }
  for (int32_t x = 0; x < na; x++) { /* x = (r * n_h + g) * nvp + i */
    __m512 t[16];
    for (int l = 0; l < 16; l++) t[l] = _mm512_loadu_ps(lane[l] + 16 * x);
    for (int l = 0; l < 8; l++) t[l] = _mm512_add_ps(t[l + 8], t[l]);
    for (int l = 0; l < 4; l++) t[l] = _mm512_add_ps(t[l + 4], t[l]);
    const int32_t r = x / (n_h * nvp), g = x / nvp % n_h, i = x % nvp;
    float *out = p->out + ((int64_t)(it0->tok + r0 + r) * p->n_heads + it0->h0 + g) * hd + d0 + 16 * i;
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3])));
  }
}

/* p.v of the nr rows of attention_rows_avx512 (probabilities in scores, its layout): rows
 * that fit in one pass share each key's V conversion, whole heads at head_dim 64 and 128, one
 * 16-dim slice at a time otherwise (80, 96, Gemma's 256: each V slice converted once for up
 * to 4 rows x the KV head's heads, where head by head converted every V row once per head and
 * row); heads too many for a pass go row by row (pv_avx512). */
ATTN_AVX512_TARGET static void pv_rows_avx512(const struct backend_attn_params *p, const struct attn_item *it0,
                                              int32_t nr, const float *scores, int32_t n_last, int64_t stride,
                                              int64_t head_off) {
  const int32_t nv = p->kv->head_dim / 16, n_h = it0->n_h, nvp = nv == 4 || nv == 8 ? nv : 1;
  const int32_t rp = pv_rows_per_pass(nvp, n_h);
  for (int32_t r0 = 0; r0 < nr; r0 += rp > 1 ? rp : 1) {
    if (rp < 2) { /* one row's heads (nearly) fill the registers: pv_avx512's passes */
      struct attn_item ir = *it0;
      ir.tok += r0;
      ir.n_ctx += r0;
      pv_avx512(p, &ir, scores + (int64_t)r0 * n_h * n_last);
      continue;
    }
    for (int32_t d0 = 0; d0 < 16 * nv; d0 += 16 * nvp)
      pv_rows_pass_avx512(p, it0, r0, nr - r0 < rp ? nr - r0 : rp, scores, n_last, stride, head_off, d0, nvp);
  }
}
#endif

#if ATTN_HAVE_X86
/* Rows it0->tok .. + nr - 1 of one sequence (n_ctx, n_ctx + 1, ... keys from key 0: no
 * window), the heads of one KV head: attention_item_avx512 for each row, with each whole group
 * of 16 keys converted once for all of them and each V row once per pass of rows
 * (pv_rows_avx512). Same numbers row by row. scores [nr][n_h][n_ctx of
 * the row] in slices of n_h * (n_ctx + nr - 1). */
ATTN_AVX512_TARGET static void attention_rows_avx512(const struct attn_task *t, const struct attn_item *it0, int32_t nr,
                                                     float *scores) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim, nv = hd / 16, n_h = it0->n_h, bs = kv->block_size;
  const int64_t stride = (int64_t)kv->n_kv_heads * hd, head_off = (int64_t)it0->kvh * hd;
  const int32_t n_last = it0->n_ctx + nr - 1, n_blocks = (n_last + bs - 1) / bs;
  float qh[ATTN_MAX_ROW_HEADS][ATTN_MAX_DIM]; /* [r * n_h + g] */
  for (int32_t r = 0; r < nr; r++) round_q_avx512(p, it0->tok + r, it0->h0, n_h, qh + r * n_h);
  float kf[16][ATTN_MAX_DIM];
  for (int32_t b = 0; b < n_blocks; b++) {
    const uint16_t *kb = (const uint16_t *)kv->k + (int64_t)it0->table[b] * bs * stride + head_off;
    const int32_t n = n_last - b * bs < bs ? n_last - b * bs : bs;
    for (int32_t o = 0; o + 16 <= n; o += 16) { /* whole groups: rows whose keys cover them */
      const int32_t key0 = b * bs + o;
      convert16_avx512(kb + o * stride, stride, nv, kf);
      for (int32_t r = 0; r < nr; r++) {
        const int32_t n_r = it0->n_ctx + r;
        if (key0 + 16 > n_r) continue;
        float *sr = scores + (int64_t)r * n_h * n_last;
        for (int32_t g = 0; g < n_h; g++) {
          const __m512 dots = qk16f_avx512(qh[r * n_h + g], (const float(*)[ATTN_MAX_DIM])kf, nv);
          scores16_store_avx512(p, dots, sr + (int64_t)g * n_r + key0);
        }
      }
    }
  }
  for (int32_t r = 0; r < nr; r++) {
    const int32_t n_r = it0->n_ctx + r;
    float *sr = scores + (int64_t)r * n_h * n_last;
    for (int32_t j = n_r - n_r % 16; j < n_r; j++) /* the last keys, one by one */
      score1_avx512(p, n_h, (const float(*)[ATTN_MAX_DIM])(qh + r * n_h), kv_row_at(kv, kv->k, it0->table, j, it0->kvh),
                    nv, sr + j, n_r);
    for (int32_t g = 0; g < n_h; g++) cpu_attn_softmax_f16(t->c->level, sr + (int64_t)g * n_r, 0, n_r); /* AVX-512 expf */
  }
  pv_rows_avx512(p, it0, nr, scores, n_last, stride, head_off);
}
#endif

/* Whether attention_row takes attention_item_avx512 or attention_item_batch_avx2 for an item of
 * this order on level `level`, the paths that read a quantized cache where it lies (the others
 * read fp16: attention_run_quantized's scratch). */
static bool attention_row_direct(const struct attn_task *t, enum cpu_simd_level level, enum cpu_attn_order order) {
  return ATTN_HAVE_X86 && t->c->level >= level && order == CPU_ATTN_ORDER_BATCH && t->p->kv->head_dim % 16 == 0 &&
         t->p->kv->head_dim <= ATTN_MAX_DIM && t->p->kv->block_size % 16 == 0;
}

/* One row's item on the best path for it. */
static void attention_row(const struct attn_task *t, const struct attn_item *it, float *scores) {
  float acc[64 * ATTN_COMB_DIM]; /* lane accumulators of p.v */
#if ATTN_HAVE_X86
  if (attention_row_direct(t, CPU_SIMD_LEVEL_AVX512_VNNI, it->order)) {
    attention_item_avx512(t, it, scores);
    return;
  }
  if (attention_row_direct(t, CPU_SIMD_LEVEL_AVX2, it->order)) {
    attention_item_batch_avx2(t, it, scores);
    return;
  }
  if (t->c->level >= CPU_SIMD_LEVEL_AVX2 && t->p->kv->head_dim % 16 == 0 &&
      t->p->kv->head_dim <= ATTN_MAX_DIM) {
    attention_item_avx2(t, it, scores, acc);
    return;
  }
#endif
  attention_item_generic(t, it, scores, acc);
}

/* Rows tok .. tok + nr - 1 of one sequence, heads from h0 (one KV head, or one head): through
 * attention_rows_avx512 or attention_rows_avx2 when it can (t->rows > 1 only where no window
 * cuts a row's keys, on AVX2 or AVX-512, BATCH order), otherwise row by row. */
static void attention_run(const struct attn_task *t, int32_t tok, int32_t nr, int32_t h0, float *scores) {
#if ATTN_HAVE_X86
  const struct attn_item it = attn_item_at(t, tok, h0);
  if (nr > 1 && it.order == CPU_ATTN_ORDER_BATCH) { /* t->rows > 1: the conditions of the rows paths hold */
    if (t->c->level >= CPU_SIMD_LEVEL_AVX512_VNNI) attention_rows_avx512(t, &it, nr, scores);
    else attention_rows_avx2(t, &it, nr, scores);
    return;
  }
#endif
  for (int32_t r = 0; r < nr; r++) {
    const struct attn_item ir = attn_item_at(t, tok + r, h0);
    attention_row(t, &ir, scores);
  }
}

/* attention_run over a quantized cache (Q8_0, FP8): the keys these rows read, of their KV head,
 * are first read as fp16 into this thread's scratch, a layer of one KV head whose block table is
 * 0, 1, 2, ...; then the fp16 paths run on it, the scratch shared by every head and row of the
 * run. */
static void attention_run_quantized(const struct attn_task *t, int32_t tok, int32_t nr, int32_t h0, float *scores,
                                    int ith) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const struct attn_item a = attn_item_at(t, tok, h0), z = attn_item_at(t, tok + nr - 1, h0);
  const int32_t hd = kv->head_dim, bs = kv->block_size;
  const size_t rb = backend_kv_row_bytes(kv->dtype, hd);
  const int64_t plane = (int64_t)t->c->params.max_context_len * hd;
  uint16_t *kf = t->c->kv_f16 + (size_t)ith * 2 * (size_t)plane, *vf = kf + plane;
  for (int32_t j = a.first; j < z.n_ctx; j++) { /* rows of one sequence: the first has the earliest window */
    const int64_t slot = (int64_t)a.table[j / bs] * bs + j % bs;
    const size_t at = (size_t)(slot * kv->n_kv_heads + a.kvh) * rb;
    cpu_kv_row_to_fp16(t->c->level, kv->dtype, (const uint8_t *)kv->k + at, hd, kf + (int64_t)j * hd);
    cpu_kv_row_to_fp16(t->c->level, kv->dtype, (const uint8_t *)kv->v + at, hd, vf + (int64_t)j * hd);
  }
  struct backend_kv_layer f16 = {.k = kf, .v = vf, .num_blocks = (z.n_ctx + bs - 1) / bs, .block_size = bs,
                                 .n_kv_heads = 1, .head_dim = hd, .dtype = BACKEND_KV_DTYPE_F16};
  struct backend_attn_params fp = *p;
  fp.kv = &f16;
  fp.block_tables = t->c->kv_ident; /* every sequence's table: 0, 1, 2, ... */
  fp.max_blocks_per_seq = 0;
  struct attn_task ft = *t;
  ft.p = &fp; /* its KV head: h0 / (n_heads / 1) = 0 */
  attention_run(&ft, tok, nr, h0, scores);
}

/* Work item `chunk`: query rows [tile * rows, + rows) (cut at the batch's end), heads of one
 * KV head (or one head), run by run of rows of one sequence. Tiles are handed out last row
 * first: a causal row's cost grows with its position, so the pool's last claims (several
 * items each) are the cheapest and the threads finish together; each item's numbers do not
 * depend on when it runs. */
static void attention_chunk(void *arg, int64_t chunk, int ith) {
  const struct attn_task *t = arg;
  float *scores = t->c->scores + (size_t)ith * (size_t)t->c->params.max_context_len * ATTN_MAX_ROW_HEADS;
  const int32_t groups = t->p->n_heads / t->group, h0 = (int32_t)(chunk % groups) * t->group;
  const int64_t tiles = (t->p->num_tokens + t->rows - 1) / t->rows;
  const int32_t tok0 = (int32_t)(tiles - 1 - chunk / groups) * t->rows;
  const int32_t end = tok0 + t->rows < t->p->num_tokens ? tok0 + t->rows : t->p->num_tokens;
  for (int32_t tok = tok0; tok < end;) {
    int32_t nr = 1;
    while (tok + nr < end && t->c->row_seq[tok + nr] == t->c->row_seq[tok]) nr++;
    /* a quantized cache: one row on AVX2 / AVX-512 reads it where it lies, the other paths from fp16 scratch */
    if (t->p->kv->dtype != BACKEND_KV_DTYPE_F16 &&
        !(nr == 1 && attention_row_direct(t, CPU_SIMD_LEVEL_AVX2, attn_item_at(t, tok, h0).order)))
      attention_run_quantized(t, tok, nr, h0, scores, ith);
    else attention_run(t, tok, nr, h0, scores);
    tok += nr;
  }
}

llb_status cpu_attention(struct backend_ctx *c, const struct backend_attn_params *p) {
  const struct backend_kv_layer *kv = p->kv;
  if (p->num_tokens < 0 || p->num_tokens > c->params.max_num_tokens || p->num_seqs < 0 ||
      p->n_heads < 1 || kv->n_kv_heads < 1 || p->n_heads % kv->n_kv_heads != 0 || kv->head_dim < 1 ||
      kv->head_dim > ATTN_MAX_HEAD_DIM ||
      kv->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "attention: %d tokens, %d heads, %d kv heads",
                    p->num_tokens, p->n_heads, kv->n_kv_heads);
  if (kv->dtype != BACKEND_KV_DTYPE_F16 &&
      (!cpu_kv_dtype_ok(kv->dtype) || backend_kv_row_bytes(kv->dtype, kv->head_dim) == 0 || !c->kv_f16 ||
       kv->head_dim > c->params.head_dim))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "attention: %s kv cache with head_dim %d (context head_dim %d)",
                    kv->dtype == BACKEND_KV_DTYPE_Q8_0 ? "q8_0" : "fp8", kv->head_dim, c->params.head_dim);
  cpu_kv_dtype_prepare(kv->dtype);
  if (p->sliding_window < 0 || !(p->logit_softcap >= 0.0f))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "attention: sliding_window %d, logit_softcap %g",
                    p->sliding_window, p->logit_softcap);
  if (p->query_start_loc[0] != 0 || p->query_start_loc[p->num_seqs] != p->num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "query_start_loc does not cover %d tokens",
                    p->num_tokens);
  int32_t longest = 0;
  for (int32_t s = 0; s < p->num_seqs; s++) {
    const int32_t q0 = p->query_start_loc[s], q1 = p->query_start_loc[s + 1];
    const int32_t len = p->seq_lens[s];
    if (len > longest) longest = len;
    if (q1 < q0 || len < q1 - q0 || len > c->params.max_context_len ||
        (int64_t)len > (int64_t)p->max_blocks_per_seq * kv->block_size)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "seq %d: %d query rows, seq_len %d (max context %d, %d blocks of %d)", s,
                      q1 - q0, len, c->params.max_context_len, p->max_blocks_per_seq, kv->block_size);
    const int32_t n_blocks = (len + kv->block_size - 1) / kv->block_size;
    for (int32_t b = 0; b < n_blocks; b++) {
      const int32_t id = p->block_tables[(int64_t)s * p->max_blocks_per_seq + b];
      if (id < 0 || id >= kv->num_blocks)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "seq %d block %d: id %d not in [0, %d)", s, b,
                        id, kv->num_blocks);
    }
    for (int32_t r = q0; r < q1; r++) c->row_seq[r] = s;
  }
  if (p->num_tokens == 0) return LLB_STATUS_OK;
  /* a work item is a query row and the heads of one KV head, unless that leaves too few
   * items to share among the threads and the contexts are short; either way each head is
   * computed the same way. Past ATTN_GROUP_MIN_CONTEXT keys an item per head would read its
   * KV head's keys and values once per head, from memory: fewer items, unevenly shared, cost
   * less than that (SmolLM2 decode, 2 threads, batch 1 / 2: +12% / +17% at 512 keys, +39% / +48%
   * at 2048; at 256 keys grouping lost ~5% at batch 1) */
  const int32_t per_kv = p->n_heads / kv->n_kv_heads;
  const int32_t nth = cpu_threadpool_size(c->pool);
  struct attn_task t = {c, p, 1, 1};
  if (per_kv <= ATTN_MAX_GROUP &&
      ((int64_t)p->num_tokens * kv->n_kv_heads >= 4 * (int64_t)nth || longest >= ATTN_GROUP_MIN_CONTEXT))
    t.group = per_kv;
  /* tiles of rows where sequences have several (prefill) and a rows path (AVX-512, AVX2) takes
   * them: every row attends keys from key 0 (no window, or one no sequence is longer than: a
   * prompt within Gemma's sliding window) */
  if (c->level >= CPU_SIMD_LEVEL_AVX2 && c->attn_order != CPU_ATTN_ORDER_SINGLE &&
      (p->sliding_window == 0 || longest <= p->sliding_window) &&
      kv->head_dim % 16 == 0 && kv->head_dim <= ATTN_MAX_DIM && kv->block_size % 16 == 0 &&
      p->num_tokens >= ATTN_MAX_TILE_ROWS * p->num_seqs) {
    t.rows = ATTN_MAX_ROW_HEADS / t.group < ATTN_MAX_TILE_ROWS ? ATTN_MAX_ROW_HEADS / t.group : ATTN_MAX_TILE_ROWS;
    const int64_t tiles = (p->num_tokens + t.rows - 1) / t.rows;
    if (tiles * (p->n_heads / t.group) < 4 * (int64_t)nth) t.rows = 1; /* too few items to share */
  }
  const int64_t tiles = (p->num_tokens + t.rows - 1) / t.rows;
  cpu_threadpool_parallel(c->pool, attention_chunk, &t, tiles * (p->n_heads / t.group));
  return LLB_STATUS_OK;
}
