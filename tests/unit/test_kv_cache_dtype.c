/* Quantized KV caches (kernels/backend.h BACKEND_KV_DTYPE_Q8_0 and _FP8_E4M3) on the CPU backend.
 *
 * 1. kv_write stores what the documented conversions give: Q8_0 blocks as ggml's
 *    quantize_row_q8_0 (fp16 d = amax / 127, q = round-half-even(x * 127 / amax)); FP8 E4M3 the
 *    nearest of its 253 finite values (ties to the even code), saturated at 448, NaN kept.
 *    References written here independently (the FP8 one by search over every code).
 * 2. Attention over a quantized cache equals, bit for bit, the fp16 attention over the values
 *    the cache holds read as fp16 (FP8 exactly, Q8_0's d * q rounded to nearest even), on every
 *    SIMD level, in a prefill chunk and as a decode row, with and without a sliding window:
 *    a quantized cache changes the values, never the order, so every batch invariance of the
 *    fp16 cache holds.
 * 3. Its error against the fp16 cache of the same K/V stays within what the quantization step
 *    allows, and rows that cannot be held (Q8_0 with head_dim 80) are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/quant.h"

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; } /* [-1, 1) */

enum { T_MAX = 600, HKV = 2, DM = 128, HM = 8, BS_MAX = 16, NB_MAX = 64, Q = 16 };

static struct backend_ctx *make_ctx(int32_t head_dim) {
  const struct backend_ctx_params p = {.n_threads = 2, .max_num_tokens = Q, .max_row_elems = 1024,
                                       .max_context_len = T_MAX, .n_heads = HM, .head_dim = head_dim};
  struct backend_ctx *c = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&p, &c), LLB_STATUS_OK);
  return c;
}

/* The value of E4M3 code b (bias 7, subnormals m * 2^-9, 0x7F / 0xFF NaN). */
static float e4m3_value(int b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  return b & 0x80 ? -v : v;
}

/* Reference encoder: the nearest finite code by search, ties to the even code, saturating. */
static uint8_t e4m3_ref(float x) {
  if (isnan(x)) return signbit(x) ? 0xFF : 0x7F;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fabsf(x);
  int best = 0;
  for (int b = 1; b <= 0x7E; b++) {
    const float db = fabsf(e4m3_value(b) - a), dbest = fabsf(e4m3_value(best) - a);
    if (db < dbest || (db == dbest && (b & 1) == 0)) best = b;
  }
  return sign | (uint8_t)best;
}

/* x [hd] as the cache row of dtype t (reference), and the fp16 values that row reads as. */
static void ref_row(enum backend_kv_dtype t, const float *x, int32_t hd, uint8_t *row, uint16_t *f16) {
  if (t == BACKEND_KV_DTYPE_FP8_E4M3) {
    for (int32_t i = 0; i < hd; i++) {
      row[i] = e4m3_ref(x[i]);
      f16[i] = llb_fp32_to_fp16(e4m3_value(row[i]));
    }
    return;
  }
  for (int32_t b = 0; b < hd / 32; b++) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
    const uint16_t d = llb_fp32_to_fp16(amax / 127.0f);
    memcpy(row + 34 * b, &d, 2);
    for (int i = 0; i < 32; i++) {
      const int8_t q = (int8_t)lrintf(amax != 0.0f ? x[32 * b + i] * (127.0f / amax) : 0.0f);
      row[34 * b + 2 + i] = (uint8_t)q;
      f16[32 * b + i] = llb_fp32_to_fp16(llb_fp16_to_fp32(d) * (float)q);
    }
  }
}

static void test_fp8_encoding_rounds_to_nearest_even_and_saturates(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(32);
  static const float special[] = {0.0f, -0.0f, 1.0f, -1.5f, 448.0f, 464.0f, 1000.0f, -1e9f, 0x1p-9f, 0x1p-10f,
                                  0x3p-10f, 0x1p-6f, 0x1.1p0f, 0x1.3p0f, 240.0f, 0.0333f, NAN, -NAN, INFINITY,
                                  -INFINITY, 0x1p-12f, 0x1.ffp-7f};
  enum { N = 32 };
  float k[N], v[N];
  for (int i = 0; i < N; i++) k[i] = v[i] = i < (int)(sizeof special / sizeof special[0]) ? special[i] : rndf() * 300;
  uint8_t kc[N], vc[N];
  struct backend_kv_layer kv = {.k = kc, .v = vc, .num_blocks = 1, .block_size = 1, .n_kv_heads = 1, .head_dim = N,
                                .dtype = BACKEND_KV_DTYPE_FP8_E4M3};
  const int64_t slot = 0;
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, &slot, 1), LLB_STATUS_OK);
  for (int i = 0; i < N; i++) {
    const uint8_t want = isinf(k[i]) ? (k[i] > 0 ? 0x7E : 0xFE) : e4m3_ref(k[i]);
    if (kc[i] != want) fail_msg("fp8(%a) = 0x%02x, want 0x%02x", (double)k[i], kc[i], want);
  }
  assert_int_equal(kc[2], 0x38);  /* 1.0 */
  assert_int_equal(kc[4], 0x7E);  /* 448, the largest */
  assert_int_equal(kc[6], 0x7E);  /* saturated */
  assert_int_equal(kc[9], 0x00);  /* 2^-10: a tie between 0 and 2^-9, to the even code */
  assert_int_equal(kc[10], 0x02); /* 3 * 2^-10: a tie between codes 1 and 2 */
  backend_cpu_ops()->ctx_destroy(c);
}

/* Writes T keys of HKV heads (random, or the caller's) through kv_write into cache kq of dtype t,
 * checks the stored bytes against ref_row, and fills the fp16 cache k16 with the values the rows
 * read as. */
static void fill_caches(struct backend_ctx *c, enum backend_kv_dtype t, int32_t BS, int32_t NB, int32_t D, int32_t T,
                        const int32_t *table, uint8_t *kq, uint8_t *vq, uint16_t *k16, uint16_t *v16, float *k,
                        float *v) {
  const size_t rb = backend_kv_row_bytes(t, D);
  struct backend_kv_layer kv = {.k = kq, .v = vq, .num_blocks = NB, .block_size = BS, .n_kv_heads = HKV,
                                .head_dim = D, .dtype = t};
  static int64_t slots[T_MAX];
  for (int32_t j = 0; j < T; j++) slots[j] = (int64_t)table[j / BS] * BS + j % BS;
  for (int i = 0; i < T * HKV * D; i++) k[i] = rndf() * (i % 13 == 0 ? 6.0f : 2.0f), v[i] = rndf();
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, slots, T), LLB_STATUS_OK);
  uint8_t row[DM * 2];
  for (int32_t j = 0; j < T; j++)
    for (int h = 0; h < HKV; h++) {
      const size_t at = (size_t)(slots[j] * HKV + h);
      ref_row(t, k + ((int64_t)j * HKV + h) * D, D, row, k16 + at * D);
      if (memcmp(row, kq + at * rb, rb) != 0) fail_msg("%s key %d head %d: stored bytes differ", t == 1 ? "q8_0" : "fp8", j, h);
      ref_row(t, v + ((int64_t)j * HKV + h) * D, D, row, v16 + at * D);
      assert_memory_equal(row, vq + at * rb, rb);
    }
}

static void check_dtype(enum backend_kv_dtype t, int32_t BS, int32_t D, int32_t H, int32_t T, int32_t window) {
  int32_t NB = (T + BS - 1) / BS + 1;
  if (NB % 7 == 0) NB++;
  int32_t table[NB_MAX];
  for (int i = 0; i < NB; i++) table[i] = (i * 7 + 3) % NB;
  struct backend_ctx *c = make_ctx(D);
  static uint8_t kq[NB_MAX * BS_MAX * HKV * DM * 2], vq[NB_MAX * BS_MAX * HKV * DM * 2];
  static uint16_t k16[NB_MAX * BS_MAX * HKV * DM], v16[NB_MAX * BS_MAX * HKV * DM];
  static float k[T_MAX * HKV * DM], v[T_MAX * HKV * DM], q[Q * HM * DM], oq[Q * HM * DM], of[Q * HM * DM],
      o_exact[Q * HM * DM];
  fill_caches(c, t, BS, NB, D, T, table, kq, vq, k16, v16, k, v);
  for (int i = 0; i < Q * H * D; i++) q[i] = rndf();
  struct backend_kv_layer kvq = {.k = kq, .v = vq, .num_blocks = NB, .block_size = BS, .n_kv_heads = HKV,
                                 .head_dim = D, .dtype = t};
  struct backend_kv_layer kvf = {.k = k16, .v = v16, .num_blocks = NB, .block_size = BS, .n_kv_heads = HKV,
                                 .head_dim = D, .dtype = BACKEND_KV_DTYPE_F16};
  const int32_t qsl[2] = {0, Q}, lens[1] = {T}, qsl1[2] = {0, 1};
  const size_t n_out = (size_t)Q * H * D * sizeof(float), n_row = (size_t)H * D * sizeof(float);
  for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
    struct backend_attn_params p = {.q = q, .out = oq, .kv = &kvq, .num_tokens = Q, .n_heads = H, .scale = 0.125f,
                                    .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                    .max_blocks_per_seq = NB, .sliding_window = window};
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
    struct backend_attn_params pf = p;
    pf.kv = &kvf, pf.out = of;
    assert_int_equal(backend_cpu_ops()->attention(c, &pf), LLB_STATUS_OK);
    if (memcmp(oq, of, n_out) != 0)
      fail_msg("%s BS %d D %d H %d T %d window %d level %d: a chunk over the quantized cache differs from its fp16 "
               "values", t == 1 ? "q8_0" : "fp8", BS, D, H, T, window, lvl);
    /* the last row alone, a decode step: the same bits as inside the chunk */
    p.q = q + (Q - 1) * H * D, p.num_tokens = 1, p.query_start_loc = qsl1;
    float od[HM * DM];
    p.out = od;
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
    assert_memory_equal(od, oq + (Q - 1) * H * D, n_row);
  }
  /* against the fp16 cache of the unquantized K/V: the quantization error only */
  struct backend_kv_layer kve = kvf;
  static uint16_t ke[NB_MAX * BS_MAX * HKV * DM], ve[NB_MAX * BS_MAX * HKV * DM];
  kve.k = ke, kve.v = ve;
  static int64_t slots[T_MAX];
  for (int32_t j = 0; j < T; j++) slots[j] = (int64_t)table[j / BS] * BS + j % BS;
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kve, k, v, slots, T), LLB_STATUS_OK);
  struct backend_attn_params pe = {.q = q, .out = o_exact, .kv = &kve, .num_tokens = Q, .n_heads = H, .scale = 0.125f,
                                   .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                   .max_blocks_per_seq = NB, .sliding_window = window};
  assert_int_equal(backend_cpu_ops()->attention(c, &pe), LLB_STATUS_OK);
  const double tol = t == BACKEND_KV_DTYPE_Q8_0 ? 0.02 : 0.08; /* |v| < 1: q8_0 steps 1/127 of a block's max, fp8 2^-4 relative */
  double worst = 0.0;
  for (int i = 0; i < Q * H * D; i++) worst = fmax(worst, fabs((double)oq[i] - o_exact[i]));
  if (!(worst < tol)) fail_msg("%s: max |out - fp16 cache out| = %g (tolerance %g)", t == 1 ? "q8_0" : "fp8", worst, tol);
  assert_true(worst > 0.0); /* and it is a quantization, not a copy */
  backend_cpu_ops()->ctx_destroy(c);
}

static void test_quantized_cache_reads_as_its_fp16_values_on_every_path(void **state) {
  (void)state;
  for (int t = BACKEND_KV_DTYPE_Q8_0; t <= BACKEND_KV_DTYPE_FP8_E4M3; t++) {
    check_dtype((enum backend_kv_dtype)t, 16, 64, 6, 40, 0);
    check_dtype((enum backend_kv_dtype)t, 16, 64, 6, 600, 0);
    check_dtype((enum backend_kv_dtype)t, 8, 128, 4, 100, 0);
    check_dtype((enum backend_kv_dtype)t, 16, 64, 8, 300, 37);
    check_dtype((enum backend_kv_dtype)t, 16, 32, 2, 64, 0);
  }
}

/* The fp16 value the cache row `row` (dtype t, hd values) holds, by the references above: FP8 by
 * the code's value (NaN 0x7E00 with the code's sign), Q8_0 as fp16(d * q). */
static void ref_fp16_of_row(enum backend_kv_dtype t, const uint8_t *row, int32_t hd, uint16_t *f16) {
  for (int32_t i = 0; i < hd; i++) {
    if (t == BACKEND_KV_DTYPE_FP8_E4M3) { /* NaN codes: the quiet NaN of their sign */
      f16[i] = (row[i] & 0x7F) == 0x7F ? (uint16_t)(0x7E00 | (row[i] & 0x80) << 8) : llb_fp32_to_fp16(e4m3_value(row[i]));
      continue;
    }
    uint16_t d;
    memcpy(&d, row + 34 * (i / 32), 2);
    f16[i] = llb_fp32_to_fp16(llb_fp16_to_fp32(d) * (float)(int8_t)row[34 * (i / 32) + 2 + i % 32]);
  }
}

/* Cache bytes no kv_write gives in this test's other cases: every FP8 code (NaN read alone),
 * Q8_0 blocks with subnormal, tiny and large fp16 scales and every q from -128 to 127 (the
 * largest scale, 255.875, keeps d * q finite: an infinite K value would make its heads' outputs
 * NaN on every path alike, and the comparison would check nothing). */
static void odd_rows(enum backend_kv_dtype t, uint8_t *rows, int32_t n_rows, int32_t D, uint32_t mul, bool with_nan) {
  static const uint16_t scales[] = {0x0001, 0x0155, 0x03FF, 0x0400, 0x1234, 0x2E66, 0x3C00, 0x4A00, 0x5BFF};
  const size_t rb = backend_kv_row_bytes(t, D);
  for (int32_t r = 0; r < n_rows; r++)
    for (size_t i = 0; i < rb; i++) {
      const uint32_t x = (uint32_t)r * (uint32_t)rb + (uint32_t)i;
      uint8_t b = (uint8_t)(x * mul + 11);
      if (t == BACKEND_KV_DTYPE_FP8_E4M3 && !with_nan && (b & 0x7F) == 0x7F) b ^= 1; /* NaN: its own check */
      rows[(size_t)r * rb + i] = b;
    }
  if (t != BACKEND_KV_DTYPE_Q8_0) return;
  for (int32_t r = 0; r < n_rows; r++)
    for (int32_t b = 0; b < D / 32; b++) {
      const uint16_t d = scales[((uint32_t)r * 7 + (uint32_t)b * mul) % (sizeof scales / sizeof scales[0])];
      memcpy(rows + (size_t)r * rb + 34 * b, &d, 2);
    }
}

/* Q8_0 scales at the edges of fp16: the largest (65504: d * q past fp16's range reads as +-inf),
 * 2^15 (d * q overflows from |q| = 2), infinities (inf * 0: NaN), quiet and signaling NaNs, zeros
 * of both signs, negative subnormals. */
static const uint16_t q8_0_extreme_scales[] = {0x7BFF, 0xFBFF, 0x7800, 0x7C00, 0xFC00, 0x7E00,
                                                0xFE00, 0x7D00, 0x0000, 0x8000, 0x8001, 0x83FF};

/* Attention of Q rows (a chunk, then the last row alone: a decode item) over T keys of odd cache
 * bytes (head_dim D, window 0 = none) equals, bit for bit, attention over the fp16 cache of the
 * same values, at every level; without NaN codes in V, at least 90% of the outputs are finite
 * (so that the comparison compares numbers). extreme >= 0 (Q8_0): key 7's V row of KV head 0
 * has every block scaled by q8_0_extreme_scales[extreme], and at least half the outputs (the
 * other KV head's) stay finite. */
static void check_odd_values(enum backend_kv_dtype t, int32_t T, int32_t H, int32_t D, int32_t window, float scale,
                             bool v_nan, int32_t extreme) {
  enum { BS = 16 };
  const int32_t NB = (T + BS - 1) / BS, n_rows = NB * BS * HKV;
  int32_t table[NB_MAX];
  for (int32_t i = 0; i < NB; i++) table[i] = (i * 5 + 2) % NB;
  static uint8_t kq[NB_MAX * BS_MAX * HKV * DM * 2], vq[NB_MAX * BS_MAX * HKV * DM * 2];
  static uint16_t k16[NB_MAX * BS_MAX * HKV * DM], v16[NB_MAX * BS_MAX * HKV * DM], got[DM];
  static float q[Q * HM * DM], oq[Q * HM * DM], of[Q * HM * DM];
  const size_t rb = backend_kv_row_bytes(t, D);
  odd_rows(t, kq, n_rows, D, 37, false);
  odd_rows(t, vq, n_rows, D, 101, v_nan);
  if (t == BACKEND_KV_DTYPE_Q8_0 && extreme >= 0) /* one V row (key 7, KV head 0) at an edge of fp16 */
    for (int32_t b = 0; b < D / 32; b++)
      memcpy(vq + ((size_t)table[0] * BS + 7) * HKV * rb + 34 * b, &q8_0_extreme_scales[extreme], 2);
  for (int32_t r = 0; r < n_rows; r++) {
    ref_fp16_of_row(t, kq + (size_t)r * rb, D, k16 + (size_t)r * D);
    ref_fp16_of_row(t, vq + (size_t)r * rb, D, v16 + (size_t)r * D);
  }
  for (int i = 0; i < Q * H * D; i++) q[i] = rndf();
  struct backend_ctx *c = make_ctx(D);
  cpu_kv_dtype_prepare(t);
  struct backend_kv_layer kvq = {.k = kq, .v = vq, .num_blocks = NB, .block_size = BS, .n_kv_heads = HKV,
                                 .head_dim = D, .dtype = t};
  struct backend_kv_layer kvf = kvq;
  kvf.k = k16, kvf.v = v16, kvf.dtype = BACKEND_KV_DTYPE_F16;
  const int32_t qsl[2] = {0, Q}, qsl1[2] = {0, 1}, lens[1] = {T};
  for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
    for (int32_t r = 0; r < 2 * n_rows; r++) { /* the row conversion of the scratch paths: K rows, then V */
      const uint8_t *row = (r < n_rows ? kq : vq) + (size_t)(r % n_rows) * rb;
      cpu_kv_row_to_fp16((enum cpu_simd_level)lvl, t, row, D, got);
      if (memcmp(got, (r < n_rows ? k16 : v16) + (size_t)(r % n_rows) * D, D * sizeof(uint16_t)) != 0)
        fail_msg("%s level %d %s row %d: read as other fp16 values than the reference", t == 1 ? "q8_0" : "fp8", lvl,
                 r < n_rows ? "K" : "V", r % n_rows);
    }
    for (int decode = 0; decode <= 1; decode++) { /* a prefill chunk, then the last row alone */
      struct backend_attn_params p = {.q = decode ? q + (Q - 1) * H * D : q, .out = oq, .kv = &kvq,
                                      .num_tokens = decode ? 1 : Q, .n_heads = H, .scale = scale, .num_seqs = 1,
                                      .query_start_loc = decode ? qsl1 : qsl, .seq_lens = lens, .block_tables = table,
                                      .max_blocks_per_seq = NB, .sliding_window = window};
      assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
      struct backend_attn_params pf = p;
      pf.kv = &kvf, pf.out = of;
      assert_int_equal(backend_cpu_ops()->attention(c, &pf), LLB_STATUS_OK);
      if (memcmp(oq, of, (size_t)p.num_tokens * H * D * sizeof(float)) != 0)
        fail_msg("%s T %d H %d D %d level %d %s (extreme %d): differs from the fp16 cache of its values",
                 t == 1 ? "q8_0" : "fp8", T, H, D, lvl, decode ? "decode" : "chunk", extreme);
      int64_t finite = 0;
      for (int64_t i = 0; i < (int64_t)p.num_tokens * H * D; i++) finite += isfinite(oq[i]);
      if (!v_nan && extreme < 0 && finite * 10 < (int64_t)p.num_tokens * H * D * 9)
        fail_msg("%s T %d D %d: only %lld outputs finite", t == 1 ? "q8_0" : "fp8", T, D, (long long)finite);
      if (extreme >= 0 && finite * 2 < (int64_t)p.num_tokens * H * D)
        fail_msg("q8_0 scale 0x%04x: only %lld outputs finite", q8_0_extreme_scales[extreme], (long long)finite);
    }
  }
  backend_cpu_ops()->ctx_destroy(c);
}

static void test_every_fp8_code_and_q8_0_scale_reads_as_its_fp16_value(void **state) {
  (void)state;
  uint8_t codes[256];
  uint16_t got[256];
  for (int b = 0; b < 256; b++) codes[b] = (uint8_t)b;
  cpu_kv_dtype_prepare(BACKEND_KV_DTYPE_FP8_E4M3);
  for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    for (int32_t n = 1; n <= 256; n += n < 40 ? 1 : 27) { /* rows of any length: vectors and a tail */
      memset(got, 0, sizeof got);
      cpu_kv_row_to_fp16((enum cpu_simd_level)lvl, BACKEND_KV_DTYPE_FP8_E4M3, codes + (256 - n), n, got);
      for (int32_t i = 0; i < n; i++) {
        const int b = 256 - n + i;
        const uint16_t want = (b & 0x7F) == 0x7F ? (uint16_t)(0x7E00 | (b & 0x80) << 8) : llb_fp32_to_fp16(e4m3_value(b));
        if (got[i] != want) fail_msg("level %d: fp8 0x%02x read as 0x%04x, want 0x%04x", lvl, b, got[i], want);
      }
    }
  }
  for (int t = BACKEND_KV_DTYPE_Q8_0; t <= BACKEND_KV_DTYPE_FP8_E4M3; t++) {
    check_odd_values((enum backend_kv_dtype)t, 40, 6, 64, 0, 0.01f, false, -1);   /* a decode item per head */
    check_odd_values((enum backend_kv_dtype)t, 600, 6, 64, 0, 0.01f, false, -1);  /* the heads of a KV head per item */
    check_odd_values((enum backend_kv_dtype)t, 600, 2, 64, 0, 1e-4f, false, -1);
    check_odd_values((enum backend_kv_dtype)t, 40, 2, 64, 0, 1e-4f, true, -1);    /* FP8 NaN values read from V */
    check_odd_values((enum backend_kv_dtype)t, 43, 4, 128, 0, 0.01f, false, -1);  /* 4 q8_0 blocks a row, a key tail */
    check_odd_values((enum backend_kv_dtype)t, 599, 8, 128, 0, 0.01f, false, -1);
    check_odd_values((enum backend_kv_dtype)t, 301, 6, 96, 0, 0.01f, false, -1);  /* 3 blocks a row */
    check_odd_values((enum backend_kv_dtype)t, 299, 6, 64, 37, 0.01f, false, -1); /* a window from mid-block */
    check_odd_values((enum backend_kv_dtype)t, 45, 2, 32, 0, 0.01f, false, -1);
  }
}

/* Q8_0 blocks scaled at fp16's edges (q8_0_extreme_scales: overflow to inf, inf, NaN, zeros,
 * negative subnormals) in one V row read as the same fp16 values (inf and NaN included) on every
 * path: the scratch's row conversion and the AVX2 / AVX-512 paths that widen in registers, a
 * decode item per head and items of a KV head's heads. */
static void test_q8_0_extreme_scales_read_alike_on_every_path(void **state) {
  (void)state;
  for (int32_t e = 0; e < (int32_t)(sizeof q8_0_extreme_scales / sizeof q8_0_extreme_scales[0]); e++) {
    check_odd_values(BACKEND_KV_DTYPE_Q8_0, 40, 2, 64, 0, 0.01f, false, e);
    check_odd_values(BACKEND_KV_DTYPE_Q8_0, 600, 6, 64, 0, 0.01f, false, e);
  }
}

static void test_rows_a_dtype_cannot_hold_are_refused(void **state) {
  (void)state;
  assert_int_equal(backend_kv_row_bytes(BACKEND_KV_DTYPE_F16, 80), 160);
  assert_int_equal(backend_kv_row_bytes(BACKEND_KV_DTYPE_Q8_0, 64), 68);
  assert_int_equal(backend_kv_row_bytes(BACKEND_KV_DTYPE_Q8_0, 80), 0);
  assert_int_equal(backend_kv_row_bytes(BACKEND_KV_DTYPE_FP8_E4M3, 80), 80);
  assert_int_equal(backend_kv_row_bytes((enum backend_kv_dtype)7, 64), 0);
  struct backend_ctx *c = make_ctx(80);
  uint8_t kc[4096], vc[4096];
  float k[160] = {0}, v[160] = {0}, q[80 * 2] = {0}, out[80 * 2];
  struct backend_kv_layer kv = {.k = kc, .v = vc, .num_blocks = 1, .block_size = 16, .n_kv_heads = 1,
                                .head_dim = 80, .dtype = BACKEND_KV_DTYPE_Q8_0};
  const int64_t slot = 0;
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, &slot, 1), LLB_STATUS_UNSUPPORTED);
  const int32_t qsl[2] = {0, 1}, lens[1] = {1}, table[1] = {0};
  struct backend_attn_params p = {.q = q, .out = out, .kv = &kv, .num_tokens = 1, .n_heads = 2, .scale = 0.1f,
                                  .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                  .max_blocks_per_seq = 1};
  assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_UNSUPPORTED);
  kv.dtype = BACKEND_KV_DTYPE_FP8_E4M3; /* fp8 holds any head_dim */
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, &slot, 1), LLB_STATUS_OK);
  assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
  assert_true(backend_cpu_ops()->kv_dtype_ok(BACKEND_KV_DTYPE_Q8_0));
  backend_cpu_ops()->ctx_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp8_encoding_rounds_to_nearest_even_and_saturates),
      cmocka_unit_test(test_quantized_cache_reads_as_its_fp16_values_on_every_path),
      cmocka_unit_test(test_rows_a_dtype_cannot_hold_are_refused),
      cmocka_unit_test(test_every_fp8_code_and_q8_0_scale_reads_as_its_fp16_value),
      cmocka_unit_test(test_q8_0_extreme_scales_read_alike_on_every_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
