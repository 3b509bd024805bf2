/* Paged attention on the device against the CPU backend (kernels/cpu/attention.c) over a grid
 * of batches: decode (one query row per sequence, contexts over several partitions so split-K
 * runs), prefill, chunked prefill and mixed batches, with the small (128-key) partitions that
 * default contexts use and the 512-key ones of a context with a small scratch budget, one query
 * head a block (few rows) and 2-4 heads sharing a KV head a block; GQA ratios 1, 3, 4; head_dim 64, 128,
 * 256; block sizes 16 and 32 with shuffled block tables; random fp16 K/V, never zeros.
 * Referee: a float64 attention written here from the definition (causal, GQA, paged).
 * Tolerances: the device's fp32 output |d| <= 2e-5 + 2e-4 * |ref64| (fp32 arithmetic, only
 * the summation order and exp differ); the fp16 output is the fp32 one rounded, within 1 fp16
 * ulp; the CPU backend, which rounds q and the probabilities to fp16 as ggml does, within
 * 2e-3 + 4e-3 * |ref64| of the referee, and the device within the same bound of the CPU.
 * Outputs are poisoned (NaN) first: every element must be written. */
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/test_cuda_harness.h"

struct attn_case {
  int32_t n_heads, n_kv_heads, head_dim, block_size, num_seqs;
  int32_t seq_lens[4], q_lens[4];
};

/* Float64 paged attention from the definition: row r of sequence sq sits at position
 * seq_len - q_len + (r - qsl[sq]) and attends to keys 0..position; query head h reads kv
 * head h / (H / HKV). k, v: [NB, BS, HKV, D] fp16; q: [T, q_stride] (the first H * D of each
 * row); out: [T, H, D]. */
static void attention_f64(const uint16_t *k, const uint16_t *v, const float *q, int64_t q_stride, int32_t T,
                          int32_t H, int32_t HKV, int32_t D, int32_t BS, int32_t S, const int32_t *qsl,
                          const int32_t *seq_lens, const int32_t *tables, int32_t MB, double *out) {
  (void)T; /* rows come from qsl */
  double *w = malloc(sizeof(double) * 8192);
  const double scale = 1.0 / sqrt((double)D);
  for (int32_t sq = 0; sq < S; sq++)
    for (int32_t r = qsl[sq]; r < qsl[sq + 1]; r++) {
      const int32_t pos = seq_lens[sq] - (qsl[sq + 1] - qsl[sq]) + (r - qsl[sq]);
      for (int32_t h = 0; h < H; h++) {
        const int32_t kvh = h / (H / HKV);
        const float *qr = q + (int64_t)r * q_stride + (int64_t)h * D;
        double mx = -INFINITY, sum = 0;
        for (int32_t j = 0; j <= pos; j++) {
          const int64_t base = (((int64_t)tables[sq * MB + j / BS] * BS + j % BS) * HKV + kvh) * D;
          double dot = 0;
          for (int32_t d = 0; d < D; d++) dot += (double)qr[d] * (double)llb_fp16_to_fp32(k[base + d]);
          w[j] = dot * scale;
          mx = w[j] > mx ? w[j] : mx;
        }
        for (int32_t j = 0; j <= pos; j++) sum += (w[j] = exp(w[j] - mx));
        double *o = out + ((int64_t)r * H + h) * D;
        for (int32_t d = 0; d < D; d++) o[d] = 0;
        for (int32_t j = 0; j <= pos; j++) {
          const int64_t base = (((int64_t)tables[sq * MB + j / BS] * BS + j % BS) * HKV + kvh) * D;
          for (int32_t d = 0; d < D; d++) o[d] += w[j] / sum * (double)llb_fp16_to_fp32(v[base + d]);
        }
      }
    }
  free(w);
}

static void run_case(struct cuda_ctx *g, struct backend_ctx *cpu_ctx, const struct attn_case *tc, uint64_t seed) {
  const struct backend_ops *cpu = backend_cpu_ops();
  uint64_t s = seed;
  const int32_t H = tc->n_heads, HKV = tc->n_kv_heads, D = tc->head_dim, BS = tc->block_size, S = tc->num_seqs;
  int32_t T = 0, MB = 0, qsl[5] = {0};
  for (int i = 0; i < S; i++) {
    T += tc->q_lens[i];
    qsl[i + 1] = T;
    MB = MB > (tc->seq_lens[i] + BS - 1) / BS ? MB : (tc->seq_lens[i] + BS - 1) / BS;
  }
  const int32_t NB = MB * S + 3;
  const size_t cache = (size_t)NB * BS * HKV * D;
  uint16_t *k = malloc(cache * 2), *v = malloc(cache * 2);
  for (size_t i = 0; i < cache; i++) k[i] = llb_fp32_to_fp16(tc_uniform(&s)), v[i] = llb_fp32_to_fp16(tc_uniform(&s));
  int32_t *perm = malloc((size_t)NB * 4), *tables = malloc((size_t)S * MB * 4), row_seq[4096];
  for (int i = 0; i < NB; i++) perm[i] = i;
  for (int i = NB - 1; i > 0; i--) {
    const int j = (int)(tc_next(&s) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int i = 0; i < S * MB; i++) tables[i] = perm[i];
  for (int sq = 0; sq < S; sq++)
    for (int r = qsl[sq]; r < qsl[sq + 1]; r++) row_seq[r] = sq;
  const int64_t q_stride = (int64_t)H * D + 2 * (int64_t)HKV * D;
  float *q = malloc((size_t)T * q_stride * 4), *qc = malloc((size_t)T * H * D * 4);
  for (int64_t i = 0; i < (int64_t)T * q_stride; i++) q[i] = 2.0f * tc_uniform(&s);
  for (int r = 0; r < T; r++) memcpy(qc + (size_t)r * H * D, q + r * q_stride, (size_t)H * D * 4);
  float *ref = malloc((size_t)T * H * D * 4), *got = malloc((size_t)T * H * D * 4);
  uint16_t *got16 = malloc((size_t)T * H * D * 2);
  int32_t max_len = 1;
  for (int i = 0; i < S; i++) max_len = max_len > tc->seq_lens[i] ? max_len : tc->seq_lens[i];
  const struct backend_kv_layer cl = {k, v, NB, BS, HKV, D, BACKEND_KV_DTYPE_F16};
  const struct backend_attn_params cp = {qc, ref, &cl, T, H, 1.0f / sqrtf((float)D), S, qsl, tc->seq_lens, tables, MB,
                                         0, 0.0f};
  CHECK_OK(cpu->attention(cpu_ctx, &cp));
  void *k_d, *v_d, *q_d, *o_d, *o16_d, *rs_d, *qsl_d, *len_d, *tab_d;
  CHECK_OK(tc_upload(g, k, cache * 2, &k_d));
  CHECK_OK(tc_upload(g, v, cache * 2, &v_d));
  CHECK_OK(tc_upload(g, q, (size_t)T * q_stride * 4, &q_d));
  CHECK_OK(tc_upload(g, row_seq, (size_t)T * 4, &rs_d));
  CHECK_OK(tc_upload(g, qsl, (size_t)(S + 1) * 4, &qsl_d));
  CHECK_OK(tc_upload(g, tc->seq_lens, (size_t)S * 4, &len_d));
  CHECK_OK(tc_upload(g, tables, (size_t)S * MB * 4, &tab_d));
  for (int64_t i = 0; i < (int64_t)T * H * D; i++) got[i] = NAN, got16[i] = 0x7E00;
  CHECK_OK(tc_upload(g, got, (size_t)T * H * D * 4, &o_d));
  CHECK_OK(tc_upload(g, got16, (size_t)T * H * D * 2, &o16_d));
  const struct cuda_kv_layer kl = {k_d, v_d, NB, BS, HKV, D};
  const struct cuda_attn_params ap = {q_d, q_stride, o_d, o16_d, &kl, T, H, 1.0f / sqrtf((float)D), rs_d, qsl_d,
                                      len_d, tab_d, MB, max_len + 700 /* a grid wider than needed */};
  CHECK_OK(cuda_attention(g, &ap));
  CHECK_OK(cuda_copy_to_host(g, got, o_d, (size_t)T * H * D * 4));
  CHECK_OK(cuda_copy_to_host(g, got16, o16_d, (size_t)T * H * D * 2));
  double *ref64 = malloc((size_t)T * H * D * sizeof(double));
  attention_f64(k, v, q, q_stride, T, H, HKV, D, BS, S, qsl, tc->seq_lens, tables, MB, ref64);
  int64_t bad = 0, bad16 = 0, bad_cpu = 0, bad_vs_cpu = 0;
  float maxd = 0, maxd_cpu = 0;
  for (int64_t i = 0; i < (int64_t)T * H * D; i++) {
    const float r64 = (float)ref64[i], d = fabsf(got[i] - r64), dc = fabsf(ref[i] - r64);
    maxd = fmaxf(maxd, isnan(d) ? INFINITY : d);
    maxd_cpu = fmaxf(maxd_cpu, isnan(dc) ? INFINITY : dc);
    bad += !(d <= 2e-5f + 2e-4f * fabsf(r64));
    bad_cpu += !(dc <= 2e-3f + 4e-3f * fabsf(r64));
    bad_vs_cpu += !(fabsf(got[i] - ref[i]) <= 2e-3f + 4e-3f * fabsf(r64));
    const int u = (int)got16[i] - (int)llb_fp32_to_fp16(got[i]);
    bad16 += u > 1 || u < -1;
  }
  CHECK(bad == 0 && bad16 == 0 && bad_cpu == 0 && bad_vs_cpu == 0,
        "H %d HKV %d D %d BS %d seqs %d (len0 %d q0 %d): %lld f32 off float64 (max diff %g), %lld f16 off, "
        "cpu: %lld off float64 (max diff %g), device %lld off cpu",
        H, HKV, D, BS, S, tc->seq_lens[0], tc->q_lens[0], (long long)bad, maxd, (long long)bad16,
        (long long)bad_cpu, maxd_cpu, (long long)bad_vs_cpu);
  free(ref64);
  cuda_mem_free(k_d), cuda_mem_free(v_d), cuda_mem_free(q_d), cuda_mem_free(o_d), cuda_mem_free(o16_d);
  cuda_mem_free(rs_d), cuda_mem_free(qsl_d), cuda_mem_free(len_d), cuda_mem_free(tab_d);
  free(k), free(v), free(perm), free(tables), free(q), free(qc), free(ref), free(got), free(got16);
}

static struct cuda_ctx *g_cuda, *g_cuda512; /* 128-key partitions; 512-key ones (small scratch budget) */
static struct backend_ctx *g_cpu;

/* Device attention of rows [0, T) (q [T, H * D]) for sequences with query_start_loc qsl [S + 1],
 * seq_lens [S] and block tables [S, MB] over the device cache kl into out [T, H, D]. */
static void device_attention(struct cuda_ctx *g, const struct cuda_kv_layer *kl, const float *q, int32_t T,
                             int32_t H, int32_t S, const int32_t *qsl, const int32_t *lens, const int32_t *tables,
                             int32_t MB, int32_t max_seq_len, float *out) {
  const int32_t D = kl->head_dim;
  int32_t *row_seq = malloc((size_t)T * 4);
  for (int32_t sq = 0; sq < S; sq++)
    for (int32_t r = qsl[sq]; r < qsl[sq + 1]; r++) row_seq[r] = sq;
  void *q_d, *o_d, *rs_d, *qsl_d, *len_d, *tab_d;
  CHECK_OK(tc_upload(g, q, (size_t)T * H * D * 4, &q_d));
  CHECK_OK(tc_upload(g, row_seq, (size_t)T * 4, &rs_d));
  CHECK_OK(tc_upload(g, qsl, (size_t)(S + 1) * 4, &qsl_d));
  CHECK_OK(tc_upload(g, lens, (size_t)S * 4, &len_d));
  CHECK_OK(tc_upload(g, tables, (size_t)S * MB * 4, &tab_d));
  CHECK_OK(tc_upload(g, out, (size_t)T * H * D * 4, &o_d));
  const struct cuda_attn_params ap = {q_d, (int64_t)H * D, o_d, NULL, kl, T, H, 1.0f / sqrtf((float)D), rs_d, qsl_d,
                                      len_d, tab_d, MB, max_seq_len};
  CHECK_OK(cuda_attention(g, &ap));
  CHECK_OK(cuda_copy_to_host(g, out, o_d, (size_t)T * H * D * 4));
  cuda_mem_free(q_d), cuda_mem_free(o_d), cuda_mem_free(rs_d), cuda_mem_free(qsl_d), cuda_mem_free(len_d);
  cuda_mem_free(tab_d);
  free(row_seq);
}

/* docs/design.md §5: a decode row gets the same bits alone (one head a block, a graph-wide grid) as
 * next to a 600-row prefill (4 query heads a block, a grid of the batch's longest row). */
static void test_a_row_gets_the_same_bits_alone_and_in_a_large_batch(void) {
  const int32_t H = 8, HKV = 2, D = 64, BS = 16, MB = 48, NB = 2 * MB, P = 600, L0 = 700;
  struct cuda_ctx *ctxs[2] = {g_cuda, g_cuda512};
  uint64_t s = 77;
  const size_t cache = (size_t)NB * BS * HKV * D;
  uint16_t *kv = malloc(cache * 2 * 2);
  for (size_t i = 0; i < 2 * cache; i++) kv[i] = llb_fp32_to_fp16(tc_uniform(&s));
  int32_t tables[2 * MB];
  for (int i = 0; i < 2 * MB; i++) tables[i] = (i * 37) % NB; /* seq 0: row 0 of tables, seq 1: row 1 */
  float *q = malloc((size_t)(P + 1) * H * D * 4), *alone = malloc((size_t)H * D * 4);
  float *batch = malloc((size_t)(P + 1) * H * D * 4);
  for (int64_t i = 0; i < (int64_t)(P + 1) * H * D; i++) q[i] = 2.0f * tc_uniform(&s);
  for (int c = 0; c < 2; c++) {
    void *k_d, *v_d;
    CHECK_OK(tc_upload(ctxs[c], kv, cache * 2, &k_d));
    CHECK_OK(tc_upload(ctxs[c], kv + cache, cache * 2, &v_d));
    const struct cuda_kv_layer kl = {k_d, v_d, NB, BS, HKV, D};
    /* alone: the decode row of sequence 0 (its q is the batch's last row) */
    const int32_t qsl1[2] = {0, 1}, len1[1] = {L0};
    for (int64_t i = 0; i < (int64_t)H * D; i++) alone[i] = NAN;
    device_attention(ctxs[c], &kl, q + (size_t)P * H * D, 1, H, 1, qsl1, len1, tables, MB, 4096, alone);
    /* in a batch: sequence 1's 600-row prefill first, then the same decode row */
    const int32_t qsl2[3] = {0, P, P + 1}, len2[2] = {P, L0};
    int32_t tables2[2 * MB];
    memcpy(tables2, tables + MB, (size_t)MB * 4), memcpy(tables2 + MB, tables, (size_t)MB * 4);
    for (int64_t i = 0; i < (int64_t)(P + 1) * H * D; i++) batch[i] = NAN;
    device_attention(ctxs[c], &kl, q, P + 1, H, 2, qsl2, len2, tables2, MB, L0, batch);
    CHECK(memcmp(alone, batch + (size_t)P * H * D, (size_t)H * D * 4) == 0,
          "%s partitions: the decode row differs alone and in a batch of %d rows", c ? "512-key" : "128-key", P + 1);
    cuda_mem_free(k_d), cuda_mem_free(v_d);
  }
  free(kv), free(q), free(alone), free(batch);
}

static void test_decode_with_split_k_matches_cpu(void) {
  const struct attn_case cases[] = {
      {9, 3, 64, 16, 4, {1, 37, 513, 1500}, {1, 1, 1, 1}},
      {32, 8, 64, 16, 3, {2100, 512, 7}, {1, 1, 1}},
      {8, 8, 128, 32, 2, {1025, 300}, {1, 1}},
      {4, 1, 256, 16, 2, {700, 33}, {1, 1}},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (uint64_t seed = 1; seed <= 2; seed++) run_case(seed == 1 ? g_cuda : g_cuda512, g_cpu, &cases[i], seed * 101 + i);
}

static void test_prefill_and_chunked_prefill_match_cpu(void) {
  const struct attn_case cases[] = {
      {9, 3, 64, 16, 1, {600}, {600}},                      /* prefill over 2 partitions */
      {32, 8, 64, 32, 2, {200, 1100}, {200, 64}},           /* prefill + chunk at the end of 1100 */
      {8, 2, 128, 16, 3, {50, 900, 17}, {1, 300, 17}},      /* mixed decode / chunk / prefill */
      {6, 3, 64, 16, 4, {5, 6, 7, 8}, {5, 1, 2, 8}},
      {8, 2, 256, 16, 2, {40, 9}, {20, 1}},                 /* 4 query heads a block at head_dim 256 */
      {8, 2, 64, 16, 1, {1000}, {1000}},
      {10, 2, 80, 16, 1, {300}, {40}},                      /* GQA 5 (one head a block), head_dim 80 */
      {6, 2, 96, 16, 2, {700, 20}, {30, 1}},                /* 3 heads a block, head_dim 96 */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (uint64_t seed = 1; seed <= 2; seed++) run_case(seed == 1 ? g_cuda : g_cuda512, g_cpu, &cases[i], seed * 211 + i);
}

int main(void) {
  tc_require_device();
  const struct cuda_ctx_params cp = {1024, 32, 256, 4096, 0, 0, 0}, cp512 = {1024, 32, 256, 4096, 0, 0, 1.0};
  const struct backend_ctx_params bp = {.n_threads = 4, .max_num_tokens = 1024, .max_row_elems = 8192, .max_context_len = 4096};
  if (cuda_ctx_create(&cp, &g_cuda) != LLB_STATUS_OK || cuda_ctx_create(&cp512, &g_cuda512) != LLB_STATUS_OK ||
      backend_cpu_ops()->ctx_create(&bp, &g_cpu) != LLB_STATUS_OK) {
    fprintf(stderr, "context: %s\n", llb_err_last_where());
    return 1;
  }
  RUN_CASE(test_decode_with_split_k_matches_cpu);
  RUN_CASE(test_prefill_and_chunked_prefill_match_cpu);
  RUN_CASE(test_a_row_gets_the_same_bits_alone_and_in_a_large_batch);
  cuda_ctx_destroy(g_cuda);
  cuda_ctx_destroy(g_cuda512);
  backend_cpu_ops()->ctx_destroy(g_cpu);
  return tc_finish();
}
