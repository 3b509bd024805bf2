/* Paged causal attention with GQA over an fp16 KV cache (vLLM's paged layout).
 *
 * A work item is one query row and the query heads of one KV head (or a single head when
 * there are too few items for the threads); threads claim items, so causal rows of
 * different lengths balance. Each item is computed the same way
 * whatever else is in the batch: scores q.k (8-lane fixed order, kernels/cpu/vec_dot.h)
 * times scale, softmax in f32 with max subtraction and the sum in double (as ggml's
 * soft_max), then out = sum_j p_j v_j by elementwise fma in key order. */
#include "kernels/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define ATTN_HAVE_X86 1
#define ATTN_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#define ATTN_HAVE_X86 0
#endif

/* Query heads one AVX2 work item takes at most (they share each key's loads). */
#define ATTN_MAX_GROUP CPU_ATTN_MAX_GROUP
/* Largest head_dim of the AVX2 path (the output row of a head stays in registers). */
#define ATTN_AVX2_MAX_DIM 256

struct attn_task {
  const struct backend_ctx *c;
  const struct backend_attn_params *p;
  int32_t group; /* query heads per work item: n_heads / n_kv_heads, or 1 */
};

/* Context of one work item: query row tok, heads h0 .. h0 + n_h - 1 (one KV head). */
struct attn_item {
  int32_t tok, h0, n_h, kvh, n_ctx;
  const int32_t *table; /* [max_blocks_per_seq] */
};

static struct attn_item attn_item_at(const struct attn_task *t, int64_t item) {
  const struct backend_attn_params *p = t->p;
  const int32_t groups = p->n_heads / t->group;
  struct attn_item it;
  it.tok = (int32_t)(item / groups);
  it.h0 = (int32_t)(item % groups) * t->group;
  it.n_h = t->group;
  it.kvh = it.h0 / (p->n_heads / p->kv->n_kv_heads);
  const int32_t s = t->c->row_seq[it.tok];
  const int32_t q_len = p->query_start_loc[s + 1] - p->query_start_loc[s];
  it.n_ctx = p->seq_lens[s] - q_len + (it.tok - p->query_start_loc[s]) + 1;
  it.table = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
  return it;
}

/* Softmax of scores [n] in place, ggml's soft_max order: exp(x - max), sum in double;
 * returns 1 / sum. */
static float softmax_exp(float *scores, int32_t n, float max) {
  double sum = 0.0;
  for (int32_t j = 0; j < n; j++) {
    scores[j] = expf(scores[j] - max);
    sum += (double)scores[j];
  }
  return (float)(1.0 / sum);
}

/* Portable path: per head, per key, through the vec_dot helpers (the reference order). */
static void attention_item_generic(const struct attn_task *t, const struct attn_item *it, float *scores) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim;
  const int64_t kv_row = (int64_t)kv->n_kv_heads * hd;
  for (int32_t h = it->h0; h < it->h0 + it->n_h; h++) {
    const float *q = p->q + ((int64_t)it->tok * p->n_heads + h) * hd;
    float *out = p->out + ((int64_t)it->tok * p->n_heads + h) * hd;
    float max = -INFINITY;
    for (int32_t j = 0; j < it->n_ctx; j++) {
      const int64_t slot = (int64_t)it->table[j / kv->block_size] * kv->block_size + j % kv->block_size;
      const float sc = cpu_dot_f32_f16(t->c->level, hd, q, kv->k + slot * kv_row + (int64_t)it->kvh * hd) * p->scale;
      scores[j] = sc;
      if (sc > max) max = sc;
    }
    const float inv = softmax_exp(scores, it->n_ctx, max);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int32_t j = 0; j < it->n_ctx; j++) {
      const int64_t slot = (int64_t)it->table[j / kv->block_size] * kv->block_size + j % kv->block_size;
      cpu_axpy_f16(t->c->level, hd, scores[j] * inv, kv->v + slot * kv_row + (int64_t)it->kvh * hd, out);
    }
  }
}

#if ATTN_HAVE_X86
ATTN_AVX2_TARGET static inline float attn_hsum8(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

/* Same numbers as the generic path (8-lane q.k as cpu_dot_f32_f16, fma per element in key
 * order as cpu_axpy_f16), without a call per key: the heads of one KV head share each key's
 * load and conversion; keys are walked block by block. head_dim % 8 == 0, <= 256. */
ATTN_AVX2_TARGET static void attention_item_avx2(const struct attn_task *t, const struct attn_item *it,
                                                 float *scores /* [n_h, n_ctx] */) {
  const struct backend_attn_params *p = t->p;
  const struct backend_kv_layer *kv = p->kv;
  const int32_t hd = kv->head_dim, n_h = it->n_h, n_ctx = it->n_ctx, bs = kv->block_size;
  const int64_t kv_row = (int64_t)kv->n_kv_heads * hd;
  const float *q0 = p->q + ((int64_t)it->tok * p->n_heads + it->h0) * hd;
  float max[ATTN_MAX_GROUP];
  for (int32_t g = 0; g < n_h; g++) max[g] = -INFINITY;
  for (int32_t j0 = 0, blk = 0; j0 < n_ctx; j0 += bs, blk++) {
    const int32_t n = n_ctx - j0 < bs ? n_ctx - j0 : bs;
    const uint16_t *kb = kv->k + (int64_t)it->table[blk] * bs * kv_row + (int64_t)it->kvh * hd;
    for (int32_t o = 0; o < n; o++) {
      const uint16_t *k = kb + (int64_t)o * kv_row;
      __m256 acc[ATTN_MAX_GROUP];
      for (int32_t g = 0; g < n_h; g++) acc[g] = _mm256_setzero_ps();
      for (int32_t i = 0; i < hd; i += 8) {
        const __m256 kf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
        for (int32_t g = 0; g < n_h; g++)
          acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + (int64_t)g * hd + i), kf, acc[g]);
      }
      for (int32_t g = 0; g < n_h; g++) {
        const float sc = attn_hsum8(acc[g]) * p->scale;
        scores[(int64_t)g * n_ctx + j0 + o] = sc;
        if (sc > max[g]) max[g] = sc;
      }
    }
  }
  for (int32_t g = 0; g < n_h; g++) {
    float *sg = scores + (int64_t)g * n_ctx;
    const float inv = softmax_exp(sg, n_ctx, max[g]);
    __m256 o[ATTN_AVX2_MAX_DIM / 8];
    for (int32_t i = 0; i < hd / 8; i++) o[i] = _mm256_setzero_ps();
    for (int32_t j0 = 0, blk = 0; j0 < n_ctx; j0 += bs, blk++) {
      const int32_t n = n_ctx - j0 < bs ? n_ctx - j0 : bs;
      const uint16_t *vb = kv->v + (int64_t)it->table[blk] * bs * kv_row + (int64_t)it->kvh * hd;
      for (int32_t r = 0; r < n; r++) {
        const __m256 a = _mm256_set1_ps(sg[j0 + r] * inv);
        const uint16_t *v = vb + (int64_t)r * kv_row;
        for (int32_t i = 0; i < hd / 8; i++)
          o[i] = _mm256_fmadd_ps(a, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 8 * i))), o[i]);
      }
    }
    float *out = p->out + ((int64_t)it->tok * p->n_heads + it->h0 + g) * hd;
    for (int32_t i = 0; i < hd / 8; i++) _mm256_storeu_ps(out + 8 * i, o[i]);
  }
}
#endif

static void attention_chunk(void *arg, int64_t chunk, int ith) {
  const struct attn_task *t = arg;
  float *scores = t->c->scores + (size_t)ith * (size_t)t->c->params.max_context_len * ATTN_MAX_GROUP;
  const struct attn_item it = attn_item_at(t, chunk);
#if ATTN_HAVE_X86
  if (t->c->level == CPU_SIMD_LEVEL_AVX2 && t->p->kv->head_dim % 8 == 0 &&
      t->p->kv->head_dim <= ATTN_AVX2_MAX_DIM) {
    attention_item_avx2(t, &it, scores);
    return;
  }
#endif
  attention_item_generic(t, &it, scores);
}

llb_status cpu_attention(struct backend_ctx *c, const struct backend_attn_params *p) {
  const struct backend_kv_layer *kv = p->kv;
  if (p->num_tokens < 0 || p->num_tokens > c->params.max_num_tokens || p->num_seqs < 0 ||
      p->n_heads < 1 || kv->n_kv_heads < 1 || p->n_heads % kv->n_kv_heads != 0 || kv->head_dim < 1 ||
      kv->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "attention: %d tokens, %d heads, %d kv heads",
                    p->num_tokens, p->n_heads, kv->n_kv_heads);
  if (p->query_start_loc[0] != 0 || p->query_start_loc[p->num_seqs] != p->num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "query_start_loc does not cover %d tokens",
                    p->num_tokens);
  for (int32_t s = 0; s < p->num_seqs; s++) {
    const int32_t q0 = p->query_start_loc[s], q1 = p->query_start_loc[s + 1];
    const int32_t len = p->seq_lens[s];
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
   * items to share among the threads; either way each head is computed the same way */
  const int32_t per_kv = p->n_heads / kv->n_kv_heads;
  const int32_t nth = cpu_threadpool_size(c->pool);
  struct attn_task t = {c, p, 1};
  if (per_kv <= ATTN_MAX_GROUP && (int64_t)p->num_tokens * kv->n_kv_heads >= 4 * (int64_t)nth) t.group = per_kv;
  cpu_threadpool_parallel(c->pool, attention_chunk, &t, (int64_t)p->num_tokens * (p->n_heads / t.group));
  return LLB_STATUS_OK;
}
