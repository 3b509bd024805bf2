/* CPU kernels (kernels/cpu) against naive references over shapes, types and seeds.
 *
 * Tolerances: quantized matmul vs a dequantized-weight double reference: per output,
 * sum_i |w_i| * step_i (step = the activation quantization step, amax_block/127 for q8
 * types, |x| 2^-11 for f16, |x| 2^-8 for bf16) + 2e-3 * (sum |w_i x_i| + sum_b |m_b sum x_b|)
 * + 1e-4 (fp16 rounding of block scales). Q4_0/Q4_1/Q8_0 vs an integer-block reference
 * written here in the documented float order: exact. RoPE, attention, norms: 1e-4 relative.
 * Scalar vs AVX2 paths, batch vs single rows, 1 vs 2 threads: bit-identical. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/quant.h"

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; } /* [-1, 1) */

/* Random weight rows: random bytes, then block scales set to sane fp16 values. */
static void *random_weight(enum ggml_type t, int64_t rows, int64_t cols, size_t *row_bytes) {
  assert_int_equal(ggml_row_bytes(t, cols, row_bytes), LLB_STATUS_OK);
  uint8_t *p = malloc(*row_bytes * (size_t)rows);
  const size_t bb = ggml_type_block_bytes(t);
  const size_t nb = *row_bytes * (size_t)rows / bb;
  for (size_t i = 0; i < *row_bytes * (size_t)rows; i++) p[i] = (uint8_t)rnd();
  for (size_t b = 0; b < nb; b++) {
    uint8_t *blk = p + b * bb;
    uint16_t h1 = llb_fp32_to_fp16(0.01f + 0.02f * fabsf(rndf())), h2 = llb_fp32_to_fp16(0.02f * rndf());
    switch (t) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q8_0: case GGML_TYPE_Q5_0: case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ4_XS: memcpy(blk, &h1, 2); break;
    case GGML_TYPE_Q2_K: memcpy(blk + 80, &h1, 2); memcpy(blk + 82, &h2, 2); break;
    case GGML_TYPE_Q3_K: memcpy(blk + 108, &h1, 2); break;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
      memcpy(blk, &h1, 2);
      memcpy(blk + 2, &h2, 2);
      break;
    case GGML_TYPE_Q6_K: memcpy(blk + 208, &h1, 2); break;
    case GGML_TYPE_F16: h1 = llb_fp32_to_fp16(rndf()); memcpy(blk, &h1, 2); break;
    case GGML_TYPE_BF16: h1 = llb_fp32_to_bf16(rndf()); memcpy(blk, &h1, 2); break;
    case GGML_TYPE_F32: { float f = rndf(); memcpy(blk, &f, 4); break; }
    default: fail();
    }
  }
  return p;
}

static struct backend_ctx *make_ctx(int n_threads) {
  struct backend_ctx_params p = {.n_threads = n_threads, .max_num_tokens = 16, .max_row_elems = 1024,
                                 .max_context_len = 640};
  struct backend_ctx *c = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&p, &c), LLB_STATUS_OK);
  return c;
}

static void run_matmul(struct backend_ctx *c, const float *x, int32_t n_rows, const struct backend_weight *w,
                       float *out) {
  const struct backend_weight *ws[1] = {w};
  float *outs[1] = {out};
  assert_int_equal(backend_cpu_ops()->matmul(c, x, n_rows, ws, outs, 1), LLB_STATUS_OK);
}

static double act_step(enum ggml_type t, const float *x, int64_t i) {
  const int64_t bs = ggml_type_block_elems(t) == 256 ? 256 : 32;
  switch (t) {
  case GGML_TYPE_F32: return 0.0;
  case GGML_TYPE_F16: return fabs(x[i]) / 2048.0;
  case GGML_TYPE_BF16: return fabs(x[i]) / 256.0;
  default: {
    double amax = 0;
    for (int64_t j = i - i % bs; j < i - i % bs + bs; j++) amax = fmax(amax, fabs(x[j]));
    return amax / 127.0;
  }
  }
}

/* Integer-block reference of Q4_0/Q4_1/Q8_0 in the documented order (vec_dot.h). */
static float ref_dot_q32(enum ggml_type t, const uint8_t *w, const void *act, int64_t k) {
  float lanes[8] = {0}, summs = 0.0f;
  for (int64_t b = 0; b < k / 32; b++) {
    int q[32];
    float dw, m = 0.0f;
    const uint8_t *blk = w + (size_t)b * ggml_type_block_bytes(t);
    uint16_t h;
    memcpy(&h, blk, 2);
    dw = llb_fp16_to_fp32(h);
    for (int e = 0; e < 32; e++) {
      if (t == GGML_TYPE_Q8_0) q[e] = (int8_t)blk[2 + e];
      else {
        const uint8_t byte = blk[(t == GGML_TYPE_Q4_1 ? 4 : 2) + e % 16];
        q[e] = (e < 16 ? byte & 15 : byte >> 4) - (t == GGML_TYPE_Q4_0 ? 8 : 0);
      }
    }
    float da;
    const int8_t *qa;
    if (t == GGML_TYPE_Q4_1) {
      const block_q8_1 *y = (const block_q8_1 *)act + b;
      uint16_t mh;
      memcpy(&mh, blk + 2, 2);
      m = llb_fp16_to_fp32(mh);
      da = llb_fp16_to_fp32(y->d);
      summs += m * llb_fp16_to_fp32(y->s);
      qa = y->qs;
    } else {
      const block_q8_0 *y = (const block_q8_0 *)act + b;
      da = llb_fp16_to_fp32(y->d);
      qa = y->qs;
    }
    for (int l = 0; l < 8; l++) {
      int s = 0;
      for (int e = 4 * l; e < 4 * l + 4; e++) s += q[e] * qa[e];
      lanes[l] = fmaf(dw * da, (float)s, lanes[l]);
    }
  }
  const float r0 = lanes[0] + lanes[4], r1 = lanes[1] + lanes[5], r2 = lanes[2] + lanes[6], r3 = lanes[3] + lanes[7];
  return (r0 + r2) + (r1 + r3) + summs;
}

static const enum ggml_type k_types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K,
                                         GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_F16, GGML_TYPE_BF16,
                                         GGML_TYPE_F32, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K,
                                         GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};

static void test_matmul_matches_references_for_all_types(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  const int32_t rows_grid[] = {1, 3, 7};
  const int64_t n_grid[] = {5, 33}, k_grid[] = {256, 512};
  for (size_t ti = 0; ti < sizeof(k_types) / sizeof(k_types[0]); ti++)
    for (int seed = 1; seed <= 2; seed++)
      for (int ri = 0; ri < 3; ri++)
        for (int ni = 0; ni < 2; ni++)
          for (int ki = 0; ki < 2; ki++) {
            const enum ggml_type t = k_types[ti];
            const int32_t T = rows_grid[ri];
            const int64_t N = n_grid[ni], K = k_grid[ki];
            rng_state = (uint64_t)seed * 7919 + ti * 131 + (uint64_t)(ri * 17 + ni * 5 + ki);
            size_t rb;
            uint8_t *w = random_weight(t, N, K, &rb);
            float *x = malloc(sizeof(float) * (size_t)(T * K)), *out = malloc(sizeof(float) * (size_t)(T * N));
            float *wf = malloc(sizeof(float) * (size_t)K);
            for (int64_t i = 0; i < T * K; i++) x[i] = rndf() * (1.0f + (float)(i % 7));
            struct backend_weight bw = {.type = t, .rows = N, .cols = K, .row_bytes = rb, .data = w};
            run_matmul(c, x, T, &bw, out);
            uint8_t *act = malloc(cpu_act_row_bytes(t, K));
            for (int64_t n = 0; n < N; n++) {
              assert_int_equal(ggml_dequantize_row(t, w + (size_t)n * rb, wf, K), LLB_STATUS_OK);
              for (int32_t r = 0; r < T; r++) {
                const float *xr = x + r * K;
                double ref = 0, tol = 1e-4, mag = 0;
                for (int64_t i = 0; i < K; i++) {
                  ref += (double)wf[i] * xr[i];
                  tol += fabs(wf[i]) * act_step(t, xr, i);
                  mag += fabs((double)wf[i] * xr[i]);
                }
                if (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1)
                  for (int64_t b = 0; b < K / 32; b++) {
                    uint16_t mh;
                    double sx = 0;
                    memcpy(&mh, w + (size_t)n * rb + (size_t)b * ggml_type_block_bytes(t) + 2, 2);
                    for (int e = 0; e < 32; e++) sx += xr[b * 32 + e];
                    mag += fabs(llb_fp16_to_fp32(mh) * sx);
                  }
                tol += 2e-3 * mag;
                const float got = out[r * N + n];
                if (fabs(got - ref) > tol)
                  fail_msg("%s T=%d N=%lld K=%lld row %d col %lld: %g vs %g (tol %g)", ggml_type_name(t), T,
                           (long long)N, (long long)K, r, (long long)n, got, ref, tol);
                if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q8_0) {
                  cpu_quantize_act_row(t, xr, act, K);
                  const float exact = ref_dot_q32(t, w + (size_t)n * rb, act, K);
                  if (memcmp(&exact, &got, sizeof(float)) != 0)
                    fail_msg("%s integer reference %.9g vs %.9g", ggml_type_name(t), exact, got);
                }
              }
            }
            free(act);
            free(w);
            free(x);
            free(out);
            free(wf);
          }
  backend_cpu_ops()->ctx_destroy(c);
}

/* Same inputs through the scalar and AVX2 paths, 1 and 2 threads, alone and in a batch of 7. */
static void test_matmul_bit_identical_across_paths_threads_and_batches(void **state) {
  (void)state;
  struct backend_ctx *c1 = make_ctx(1), *c2 = make_ctx(2);
  for (size_t ti = 0; ti < sizeof(k_types) / sizeof(k_types[0]); ti++) {
    const enum ggml_type t = k_types[ti];
    const int64_t N = 37, K = 512;
    rng_state = 99 + ti;
    size_t rb;
    uint8_t *w = random_weight(t, N, K, &rb);
    struct backend_weight bw = {.type = t, .rows = N, .cols = K, .row_bytes = rb, .data = w};
    float x[7 * 512], batch[7 * 37], single[37], other[7 * 37];
    for (int i = 0; i < 7 * 512; i++) x[i] = rndf() * 3.0f;
    run_matmul(c2, x, 7, &bw, batch);
    for (int r = 0; r < 7; r++) {
      run_matmul(c1, x + r * K, 1, &bw, single);
      assert_memory_equal(single, batch + r * N, sizeof(single));
    }
    for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
      cpu_backend_set_simd_level(c1, (enum cpu_simd_level)lvl);
      run_matmul(c1, x, 7, &bw, other);
      assert_memory_equal(other, batch, sizeof(other));
    }
    free(w);
  }
  backend_cpu_ops()->ctx_destroy(c1);
  backend_cpu_ops()->ctx_destroy(c2);
}

/* RoPE gives the same bits on every SIMD level: the AVX2 rotation (8 lanes, NORM pairs
 * shuffled in registers) does each element's product, negation and fma as the scalar one;
 * rotated dims of 64 and 40 (whole vectors and a scalar tail), both styles. */
static void test_rope_same_bits_on_every_level(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  enum { T = 3, H = 2, D = 64 };
  const int32_t pos[T] = {0, 5, 300};
  for (int style = 0; style <= 2; style += 2)
    for (int32_t n_dims = 40; n_dims <= 64; n_dims += 24) {
      static float x[T * H * D], ref[T * H * D], y[T * H * D];
      rng_state = 17 + (uint64_t)style + (uint64_t)n_dims;
      for (int i = 0; i < T * H * D; i++) x[i] = rndf() * 4.0f;
      const struct backend_rope_params p = {.n_dims = n_dims, .freq_base = 10000.0f, .freq_scale = 1.0f,
                                            .style = (enum backend_rope_style)style};
      memcpy(ref, x, sizeof x);
      cpu_backend_set_simd_level(c, CPU_SIMD_LEVEL_SCALAR);
      assert_int_equal(backend_cpu_ops()->rope(c, ref, pos, T, H, D, &p), LLB_STATUS_OK);
      for (int lvl = CPU_SIMD_LEVEL_SCALAR + 1; lvl <= (int)cpu_simd_level_detect(); lvl++) {
        memcpy(y, x, sizeof x);
        cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
        assert_int_equal(backend_cpu_ops()->rope(c, y, pos, T, H, D, &p), LLB_STATUS_OK);
        if (memcmp(y, ref, sizeof y) != 0) fail_msg("rope style %d dims %d: level %d differs from scalar", style, n_dims, lvl);
      }
    }
  backend_cpu_ops()->ctx_destroy(c);
}

/* RoPE of random rows of 3 heads x 64 at positions pos on tab (a context with head_dim: the
 * cos / sin table) and on plain (none): the same bits, or fails naming call k. */
static void rope_table_call(struct backend_ctx *tab, struct backend_ctx *plain, const int32_t *pos, int32_t rows,
                            const struct backend_rope_params *p, int k) {
  enum { T = 9, H = 3, D = 64 };
  static float x[T * H * D], y[T * H * D], ref[T * H * D];
  rng_state = 41 + (uint64_t)k;
  for (int i = 0; i < T * H * D; i++) x[i] = rndf() * 4.0f;
  memcpy(y, x, sizeof x);
  memcpy(ref, x, sizeof x);
  assert_int_equal(backend_cpu_ops()->rope(tab, y, pos, rows, H, D, p), LLB_STATUS_OK);
  assert_int_equal(backend_cpu_ops()->rope(plain, ref, pos, rows, H, D, p), LLB_STATUS_OK);
  if (memcmp(y, ref, sizeof y) != 0) fail_msg("rope call %d: the table's result differs", k);
}

/* A context with head_dim keeps the last call's cos and sin (the forward rotates q and k of every
 * layer at the same positions): each call of a sequence that reuses, refreshes or bypasses the
 * table (same rows again, other positions, fewer rows, other attn_factor, freq_factors, n_dims or
 * style, a position changed in place in the same buffer) rotates exactly as a context without
 * the table. */
static void test_rope_table_reused_only_for_same_rows_and_params(void **state) {
  (void)state;
  enum { T = 9, H = 3, D = 64 };
  struct backend_ctx_params cp = {.n_threads = 2, .max_num_tokens = 16, .max_row_elems = 1024,
                                  .max_context_len = 640, .n_heads = H, .head_dim = D};
  struct backend_ctx *tab = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&cp, &tab), LLB_STATUS_OK);
  struct backend_ctx *plain = make_ctx(2);
  const int32_t pos_a[T] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, pos_b[T] = {8, 9, 10, 11, 12, 13, 14, 15, 400};
  static float ff[D / 2];
  for (int i = 0; i < D / 2; i++) ff[i] = 1.0f + 0.25f * (float)i;
  const struct backend_rope_params base = {.n_dims = D, .freq_base = 10000.0f, .freq_scale = 1.0f,
                                           .style = BACKEND_ROPE_STYLE_NEOX};
  /* each changed call between two calls of the base params at the same rows: a table kept
   * across one of them would rotate by the other's angles */
  enum { N_CALLS = 16 };
  struct backend_rope_params ps[N_CALLS];
  for (int i = 0; i < N_CALLS; i++) ps[i] = base;
  ps[3].attn_factor = 1.25f;
  ps[5].freq_factors = ff;
  ps[7].n_dims = 32;
  ps[9].style = BACKEND_ROPE_STYLE_NORM; /* the angles do not depend on it: a reuse, rotated the NORM way */
  ps[10].attn_factor = ps[11].attn_factor = 1.25f; /* 7 rows refilled, then all 9 (the last 2 not held) */
  ps[13].freq_base = 500000.0f;
  ps[15].freq_scale = 0.5f;
  const int32_t *pos[N_CALLS] = {pos_a, pos_a, pos_b, pos_b, pos_b, pos_b, pos_b, pos_b,
                                 pos_b, pos_b, pos_b, pos_b, pos_b, pos_b, pos_b, pos_b};
  const int32_t rows[N_CALLS] = {T, T, T, T, T, T, T, T, T, T, T - 2, T, T, T, T, T};
  for (int k = 0; k < N_CALLS; k++) rope_table_call(tab, plain, pos[k], rows[k], &ps[k], k);
  int32_t pos_c[T]; /* one buffer whose positions change in place between steps */
  memcpy(pos_c, pos_b, sizeof pos_c);
  rope_table_call(tab, plain, pos_c, T, &base, N_CALLS);
  pos_c[4] = 77;
  rope_table_call(tab, plain, pos_c, T, &base, N_CALLS + 1);
  struct backend_rope_params pf = base; /* factors rewritten in place, at the same address */
  pf.freq_factors = ff;
  rope_table_call(tab, plain, pos_b, T, &pf, N_CALLS + 2);
  ff[3] = 4.0f;
  rope_table_call(tab, plain, pos_b, T, &pf, N_CALLS + 3);
  backend_cpu_ops()->ctx_destroy(tab);
  backend_cpu_ops()->ctx_destroy(plain);
}

static void test_rope_norm_and_neox_match_reference(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  const int32_t T = 5, H = 3, D = 16;
  for (int style = 0; style <= 2; style += 2)
    for (int32_t n_dims = 8; n_dims <= 16; n_dims += 8)
    for (int af = 0; af < 2; af++) { /* attn_factor 0 (read as 1) and 1.25: cos and sin scaled */
      const float attn_factor = af ? 1.25f : 0.0f;
      float x[5 * 3 * 16], y[5 * 3 * 16];
      const int32_t pos[5] = {0, 1, 7, 30, 63};
      rng_state = 5 + (uint64_t)style + (uint64_t)n_dims;
      for (int i = 0; i < T * H * D; i++) x[i] = y[i] = rndf();
      const struct backend_rope_params p = {.n_dims = n_dims, .freq_base = 10000.0f, .freq_scale = 0.5f,
                                            .style = (enum backend_rope_style)style, .attn_factor = attn_factor};
      assert_int_equal(backend_cpu_ops()->rope(c, y, pos, T, H, D, &p), LLB_STATUS_OK);
      for (int32_t t = 0; t < T; t++)
        for (int32_t h = 0; h < H; h++) {
          const float *a = x + (t * H + h) * D;
          const float *b = y + (t * H + h) * D;
          for (int32_t i = 0; i < D; i++) {
            double ref = a[i];
            if (i < n_dims) {
              const int32_t pair = style == 2 ? i % (n_dims / 2) : i / 2;
              const bool first = style == 2 ? i < n_dims / 2 : i % 2 == 0;
              const int32_t other = style == 2 ? (first ? i + n_dims / 2 : i - n_dims / 2) : (first ? i + 1 : i - 1);
              const double th = 0.5 * pos[t] * pow(10000.0, -2.0 * pair / n_dims);
              ref = first ? a[i] * cos(th) - a[other] * sin(th) : a[other] * sin(th) + a[i] * cos(th);
              if (af) ref *= 1.25;
            }
            if (fabs(ref - b[i]) > 1e-4) fail_msg("style %d dims %d t %d h %d i %d: %g vs %g", style, n_dims, t, h, i, b[i], ref);
          }
        }
    }
  backend_cpu_ops()->ctx_destroy(c);
}

/* Paged attention with a shuffled block table vs contiguous naive attention (GQA 4:2); with
 * window > 0 a row at context index i attends keys i - window + 1 .. i only; with softcap > 0
 * each raw score d becomes softcap * tanh(d / softcap). */
static void check_paged_attention(int32_t window, float softcap) {
  enum { NB = 16, BS = 4, HKV = 2, H = 4, D = 8, MB = 8 };
  struct backend_ctx *c = make_ctx(2);
  static uint16_t kc[NB * BS * HKV * D], vc[NB * BS * HKV * D];
  struct backend_kv_layer kv = {kc, vc, NB, BS, HKV, D, BACKEND_KV_DTYPE_F16};
  for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
    rng_state = 42;
    /* seq 0: 13 keys, last 5 are queries (chunk); seq 1: 22 keys, 1 query (decode) */
    const int32_t seq_lens[2] = {13, 22}, qsl[3] = {0, 5, 6};
    int32_t perm[NB], tables[2 * MB];
    for (int i = 0; i < NB; i++) perm[i] = i;
    for (int i = NB - 1; i > 0; i--) {
      const int j = (int)(rnd() % (uint32_t)(i + 1)), tmp = perm[i];
      perm[i] = perm[j];
      perm[j] = tmp;
    }
    for (int i = 0; i < 2 * MB; i++) tables[i] = perm[i];
    static float keys[2][22][HKV * D], vals[2][22][HKV * D];
    for (int s = 0; s < 2; s++)
      for (int j = 0; j < seq_lens[s]; j++) {
        float kr[HKV * D], vr[HKV * D];
        for (int i = 0; i < HKV * D; i++) {
          kr[i] = rndf() * 2;
          vr[i] = rndf();
          keys[s][j][i] = llb_fp16_to_fp32(llb_fp32_to_fp16(kr[i]));
          vals[s][j][i] = llb_fp16_to_fp32(llb_fp32_to_fp16(vr[i]));
        }
        const int64_t slot = (int64_t)tables[s * MB + j / BS] * BS + j % BS;
        assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, kr, vr, &slot, 1), LLB_STATUS_OK);
      }
    float q[6 * H * D], out[6 * H * D];
    for (int i = 0; i < 6 * H * D; i++) q[i] = rndf();
    const float scale = 1.0f / sqrtf((float)D);
    struct backend_attn_params p = {.q = q, .out = out, .kv = &kv, .num_tokens = 6, .n_heads = H, .scale = scale,
                                    .num_seqs = 2, .query_start_loc = qsl, .seq_lens = seq_lens,
                                    .block_tables = tables, .max_blocks_per_seq = MB, .sliding_window = window,
                                    .logit_softcap = softcap};
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
    for (int tok = 0; tok < 6; tok++) {
      const int s = tok < 5 ? 0 : 1;
      const int q_len = qsl[s + 1] - qsl[s];
      const int n_ctx = seq_lens[s] - q_len + (tok - qsl[s]) + 1;
      const int j0 = window > 0 && n_ctx > window ? n_ctx - window : 0;
      for (int h = 0; h < H; h++) {
        const int kvh = h / (H / HKV);
        double sc[22], mx = -1e30, sum = 0;
        for (int j = j0; j < n_ctx; j++) {
          double d = 0;
          /* q is rounded to fp16 as ggml converts it for the F16 K */
          for (int i = 0; i < D; i++)
            d += (double)llb_fp16_to_fp32(llb_fp32_to_fp16(q[(tok * H + h) * D + i])) * keys[s][j][kvh * D + i];
          if (softcap > 0.0f) d = softcap * tanh(d / softcap);
          sc[j] = d * scale;
          mx = fmax(mx, sc[j]);
        }
        for (int j = j0; j < n_ctx; j++) sum += (sc[j] = exp(sc[j] - mx));
        for (int i = 0; i < D; i++) {
          double o = 0;
          /* probabilities are rounded to fp16 as ggml converts them for the F16 V */
          for (int j = j0; j < n_ctx; j++)
            o += (double)llb_fp16_to_fp32(llb_fp32_to_fp16((float)(sc[j] / sum))) * vals[s][j][kvh * D + i];
          if (fabs(o - out[(tok * H + h) * D + i]) > 1e-5)
            fail_msg("window %d softcap %g level %d tok %d head %d dim %d: %g vs %g", window, softcap, lvl, tok, h,
                     i, out[(tok * H + h) * D + i], o);
        }
      }
    }
    /* a block id out of range is refused, and so are a negative window and a NaN cap */
    tables[1] = NB;
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_INVALID_ARGUMENT);
    tables[1] = perm[1];
    p.sliding_window = -1;
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_INVALID_ARGUMENT);
    p.sliding_window = window;
    p.logit_softcap = NAN;
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_INVALID_ARGUMENT);
  }
  backend_cpu_ops()->ctx_destroy(c);
}

static void test_paged_attention_matches_contiguous_reference(void **state) {
  (void)state;
  check_paged_attention(0, 0.0f);
}

/* Windows shorter than the sequences (5 and 3 keys of up to 22; the block size is 4, so the
 * first key attended falls inside a block), with and without soft-capping at 1.5 (binding:
 * raw scores reach about 4). */
static void test_sliding_window_and_softcap_attention_match_reference(void **state) {
  (void)state;
  check_paged_attention(5, 0.0f);
  check_paged_attention(3, 1.5f);
  check_paged_attention(0, 1.5f);
}

static void test_kv_write_skips_negative_slots_and_refuses_out_of_range(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  uint16_t kc[2 * 2 * 4] = {0}, vc[2 * 2 * 4] = {0};
  struct backend_kv_layer kv = {kc, vc, 2, 2, 1, 4, BACKEND_KV_DTYPE_F16};
  const float k[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
  const int64_t slots[2] = {-1, 3};
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, slots, 2), LLB_STATUS_OK);
  for (int i = 0; i < 12; i++) assert_int_equal(kc[i], 0);
  for (int i = 0; i < 4; i++) {
    assert_true(llb_fp16_to_fp32(kc[12 + i]) == k[4 + i]);
    assert_true(llb_fp16_to_fp32(vc[12 + i]) == v[4 + i]);
  }
  const int64_t bad = 4;
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, &bad, 1), LLB_STATUS_INVALID_ARGUMENT);
  backend_cpu_ops()->ctx_destroy(c);
}

/* RMSNorm is ggml_compute_forward_rms_norm_f32 bit for bit on every level: each row's sum of
 * (double)(x * x) in index order, (float)(sum / dim), 1 / sqrtf(mean + eps), (x * scale) * w;
 * batches of 1 .. 21 rows (the passes of 8 rows and their remainders) of 576 and 67 elements
 * (whole groups of 4 and a tail), rows of every size of value. */
static void test_rms_norm_bit_exact_on_every_level(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  enum { TM = 21, EM = 576 };
  static float x[TM * EM], w[EM], y[TM * EM], ref[TM * EM];
  rng_state = 23;
  for (int i = 0; i < TM * EM; i++) x[i] = rndf() * ldexpf(1.0f, (int)(rnd() % 24) - 12);
  for (int i = 0; i < EM; i++) w[i] = rndf();
  for (int32_t dim = 67; dim <= EM; dim += EM - 67)
    for (int32_t T = 1; T <= TM; T++) {
      for (int32_t r = 0; r < T; r++) {
        double sum = 0.0;
        for (int32_t i = 0; i < dim; i++) sum += (double)(x[r * dim + i] * x[r * dim + i]);
        const float scale = 1.0f / sqrtf((float)(sum / dim) + 1e-5f);
        for (int32_t i = 0; i < dim; i++) ref[r * dim + i] = (x[r * dim + i] * scale) * w[i];
      }
      for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
        cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
        assert_int_equal(backend_cpu_ops()->rms_norm(c, x, w, T, dim, 1e-5f, y), LLB_STATUS_OK);
        if (memcmp(y, ref, sizeof(float) * (size_t)(T * dim)) != 0)
          fail_msg("rms_norm %d rows of %d: level %d differs from ggml's order", T, dim, lvl);
      }
    }
  backend_cpu_ops()->ctx_destroy(c);
}

static void test_norm_swiglu_add_embed_match_reference(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  rng_state = 7;
  enum { T = 3, E = 64 };
  float x[T * E], w[E], y[T * E], g[T * E], u[T * E], o[T * E];
  for (int i = 0; i < T * E; i++) x[i] = rndf() * 4, g[i] = rndf() * 6, u[i] = rndf();
  for (int i = 0; i < E; i++) w[i] = rndf();
  assert_int_equal(backend_cpu_ops()->rms_norm(c, x, w, T, E, 1e-5f, y), LLB_STATUS_OK);
  for (int r = 0; r < T; r++) {
    double ss = 0;
    for (int i = 0; i < E; i++) ss += (double)x[r * E + i] * x[r * E + i];
    for (int i = 0; i < E; i++) {
      const double ref = x[r * E + i] / sqrt(ss / E + 1e-5) * w[i];
      assert_true(fabs(ref - y[r * E + i]) <= 1e-5 * (1 + fabs(ref)));
    }
  }
  assert_int_equal(backend_cpu_ops()->swiglu(c, g, u, T * E, o), LLB_STATUS_OK);
  for (int i = 0; i < T * E; i++) {
    const double ref = g[i] / (1 + exp(-(double)g[i])) * u[i];
    assert_true(fabs(ref - o[i]) <= 1e-5 * (1 + fabs(ref)));
  }
  memcpy(y, x, sizeof(x));
  assert_int_equal(backend_cpu_ops()->add(c, y, g, T * E), LLB_STATUS_OK);
  for (int i = 0; i < T * E; i++) assert_true(y[i] == x[i] + g[i]);
  size_t rb;
  uint8_t *tab = random_weight(GGML_TYPE_Q4_1, 11, E, &rb);
  struct backend_weight bw = {.type = GGML_TYPE_Q4_1, .rows = 11, .cols = E, .row_bytes = rb, .data = tab};
  const int32_t ids[3] = {10, 0, 4};
  float ref[E];
  assert_int_equal(backend_cpu_ops()->embed(c, &bw, ids, 3, y), LLB_STATUS_OK);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(ggml_dequantize_row(GGML_TYPE_Q4_1, tab + (size_t)ids[r] * rb, ref, E), LLB_STATUS_OK);
    assert_memory_equal(ref, y + r * E, sizeof(ref));
  }
  const int32_t bad = 11;
  assert_int_equal(backend_cpu_ops()->embed(c, &bw, &bad, 1, y), LLB_STATUS_INVALID_ARGUMENT);
  free(tab);
  backend_cpu_ops()->ctx_destroy(c);
}

static void count_task(void *arg, int ith, int nth) {
  _Atomic int *counts = arg;
  atomic_fetch_add(&counts[ith], 1);
  (void)nth;
}

static void test_threadpool_runs_every_thread_once_per_run(void **state) {
  (void)state;
  struct cpu_threadpool *p = NULL;
  assert_int_equal(cpu_threadpool_create(3, &p), LLB_STATUS_OK);
  _Atomic int counts[3] = {0};
  for (int i = 0; i < 1000; i++) cpu_threadpool_run(p, count_task, counts);
  for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&counts[i]), 1000);
  cpu_threadpool_destroy(p);
  assert_int_equal(cpu_threadpool_create(0, &p), LLB_STATUS_INVALID_ARGUMENT);
}

/* The tile kernels (several weight rows x several activation rows per call) give every
 * output bit-identical to the one-column dot, for every tile shape and remainder, on the
 * SIMD path (the scalar path has no tiles: it is the per-column reference). */
static void test_gemm_tiles_bit_identical_to_single_dots(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_F16};
  const enum cpu_simd_level lvl = cpu_simd_level_detect();
  for (size_t ti = 0; ti < 4; ti++) {
    const enum ggml_type t = types[ti];
    const int64_t N = 11, K = t == GGML_TYPE_F16 ? 315 : 320; /* f16: a tail after the 8-wide steps */
    rng_state = 500 + ti;
    size_t rb;
    uint8_t *w = random_weight(t, N, K, &rb);
    const size_t ar = cpu_act_row_bytes(t, K);
    uint8_t *act = malloc(ar * 4);
    float x[4 * 320];
    for (int i = 0; i < 4 * 320; i++) x[i] = rndf() * 2.0f;
    for (int r = 0; r < 4; r++) cpu_quantize_act_row(t, x + r * K, act + (size_t)r * ar, K);
    const void *rows[4] = {act, act + ar, act + 2 * ar, act + 3 * ar};
    const cpu_vec_dot_fn dot = cpu_vec_dot_select(t, lvl);
    const cpu_gemm_fn gemm = cpu_gemm_select(t, lvl);
    if (!gemm) {
      free(act);
      free(w);
      continue;
    }
    for (int nc = 1; nc <= CPU_GEMM_MAX_COLS; nc++)
      for (int nr = 1; nr <= CPU_DOT_MAX_ROWS; nr++) {
        float tile[4 * 11];
        gemm(K, w + rb, rb, nc, rows, nr, tile, 11);
        for (int c = 0; c < nc; c++) {
          float one[4];
          dot(K, w + (size_t)(1 + c) * rb, rows, nr, one);
          for (int r = 0; r < nr; r++)
            if (memcmp(&one[r], &tile[r * 11 + c], sizeof(float)) != 0)
              fail_msg("%s tile %dx%d col %d row %d: %.9g vs %.9g", ggml_type_name(t), nc, nr, c, r,
                       tile[r * 11 + c], one[r]);
        }
      }
    free(act);
    free(w);
  }
}

/* Matmul over many row and column counts (every tile remainder): SIMD vs scalar, 2 threads
 * vs 1, each row alone vs in the batch: bit-identical. */
static void test_matmul_shapes_bit_identical_across_paths_and_batches(void **state) {
  (void)state;
  struct backend_ctx *c1 = make_ctx(1), *c2 = make_ctx(2);
  const enum ggml_type types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q8_0};
  for (size_t ti = 0; ti < 2; ti++)
    for (int64_t N = 1; N <= 70; N += 23)
      for (int32_t T = 1; T <= 9; T += 2) {
        const enum ggml_type t = types[ti];
        const int64_t K = 256;
        rng_state = 900 + ti * 97 + (uint64_t)(N * 13 + T);
        size_t rb;
        uint8_t *w = random_weight(t, N, K, &rb);
        struct backend_weight bw = {.type = t, .rows = N, .cols = K, .row_bytes = rb, .data = w};
        float *x = malloc(sizeof(float) * (size_t)(T * K));
        float *a = malloc(sizeof(float) * (size_t)(T * N)), *b = malloc(sizeof(float) * (size_t)(T * N));
        for (int64_t i = 0; i < T * K; i++) x[i] = rndf() * 3.0f;
        cpu_backend_set_simd_level(c2, cpu_simd_level_detect());
        run_matmul(c2, x, T, &bw, a);
        cpu_backend_set_simd_level(c1, CPU_SIMD_LEVEL_SCALAR);
        run_matmul(c1, x, T, &bw, b);
        assert_memory_equal(a, b, sizeof(float) * (size_t)(T * N));
        for (int32_t r = 0; r < T; r++) {
          run_matmul(c2, x + r * K, 1, &bw, b);
          assert_memory_equal(a + r * N, b, sizeof(float) * (size_t)N);
        }
        free(w);
        free(x);
        free(a);
        free(b);
      }
  backend_cpu_ops()->ctx_destroy(c1);
  backend_cpu_ops()->ctx_destroy(c2);
}

static void test_fp16_row_conversion_matches_scalar_rounding(void **state) {
  (void)state;
  enum { N = 4099 };
  static float x[N];
  static uint16_t a[N], b[N];
  rng_state = 77;
  for (int i = 0; i < N; i++) {
    const float mag = ldexpf(1.0f, (int)(rnd() % 50) - 30); /* 2^-30 .. 2^19: subnormal to overflow */
    x[i] = rndf() * mag;
  }
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 65504.0f;
  x[3] = 65520.0f; /* rounds to inf */
  x[4] = 5.96e-8f; /* smallest subnormal */
  cpu_fp32_to_fp16_row(CPU_SIMD_LEVEL_SCALAR, x, a, N);
  cpu_fp32_to_fp16_row(cpu_simd_level_detect(), x, b, N);
  for (int i = 0; i < N; i++) {
    assert_int_equal(a[i], llb_fp32_to_fp16(x[i]));
    if (a[i] != b[i]) fail_msg("x = %.9g: scalar 0x%04x simd 0x%04x", x[i], a[i], b[i]);
  }
}

/* GQA attention (H query heads on 2 KV heads), in each float order (head_dim 80: the
 * SINGLE order's 64-element steps and its double tail; 64 (SmolLM2's) and 128, whose AVX-512
 * p.v passes are specialized): the SIMD path (heads of a KV head
 * grouped in one item when there are enough items) equals the scalar per-head path bit for
 * bit; with BATCH and SINGLE a decode row (one item per head) equals the same row computed
 * inside a long prefill; BY_QUERY_LEN gives the BATCH rows for the chunk and the SINGLE row
 * for the decode step. */
static void check_attention_paths_n(const int32_t BS, int32_t window, float softcap, const int32_t D, const int32_t H,
                                    const int32_t T) {
  enum { NB_MAX = 96, BS_MAX = 16, HKV = 2, HM = 8, DM = 128, T_MAX = 640, Q = 16 };
  assert_true(T <= T_MAX && (T + BS - 1) / BS < NB_MAX);
  int32_t NB = (T + BS - 1) / BS;
  if (NB % 7 == 0) NB++; /* (i * 7 + 3) % NB: a permutation */
  assert_true(NB * BS <= NB_MAX * BS_MAX); /* the cache's rows fit (blocks of 32: fewer blocks) */
  const int32_t MB = NB;
  const size_t n_out = (size_t)Q * H * D * sizeof(float), n_row = (size_t)H * D * sizeof(float);
  struct backend_ctx *c = make_ctx(2);
  static uint16_t kc[NB_MAX * BS_MAX * HKV * DM], vc[NB_MAX * BS_MAX * HKV * DM];
  struct backend_kv_layer kv = {kc, vc, NB, BS, HKV, D, BACKEND_KV_DTYPE_F16};
  rng_state = 4242;
  int32_t table[NB_MAX];
  for (int i = 0; i < MB; i++) table[i] = (i * 7 + 3) % NB;
  static float k[T_MAX * HKV * DM], v[T_MAX * HKV * DM], q[Q * HM * DM], o1[Q * HM * DM], o2[Q * HM * DM],
      od[HM * DM];
  static float chunk_out[2][Q * HM * DM], dec_out[2][HM * DM]; /* BATCH, SINGLE */
  static int64_t slots[T_MAX];
  for (int i = 0; i < T * HKV * D; i++) k[i] = rndf() * 2, v[i] = rndf();
  for (int i = 0; i < Q * H * D; i++) q[i] = rndf();
  for (int j = 0; j < T; j++) slots[j] = (int64_t)table[j / BS] * BS + j % BS;
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, slots, T), LLB_STATUS_OK);
  const int32_t qsl[2] = {0, Q}, lens[1] = {T}; /* a chunk: the last Q of T keys */
  const int32_t qsl1[2] = {0, 1};
  for (int order = CPU_ATTN_ORDER_BATCH; order <= CPU_ATTN_ORDER_BY_QUERY_LEN; order++) {
    cpu_backend_set_attn_order(c, (enum cpu_attn_order)order);
    struct backend_attn_params p = {.q = q, .out = o1, .kv = &kv, .num_tokens = Q, .n_heads = H,
                                    .scale = 0.17f, .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens,
                                    .block_tables = table, .max_blocks_per_seq = MB, .sliding_window = window,
                                    .logit_softcap = softcap};
    cpu_backend_set_simd_level(c, cpu_simd_level_detect());
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
    cpu_backend_set_simd_level(c, CPU_SIMD_LEVEL_SCALAR);
    p.out = o2;
    assert_int_equal(backend_cpu_ops()->attention(c, &p), LLB_STATUS_OK);
    assert_memory_equal(o1, o2, n_out);
    /* the last row alone, as a decode step, on both paths */
    struct backend_attn_params pd = p;
    pd.q = q + (Q - 1) * H * D;
    pd.out = od;
    pd.num_tokens = 1;
    pd.query_start_loc = qsl1;
    assert_int_equal(backend_cpu_ops()->attention(c, &pd), LLB_STATUS_OK);
    float od_scalar[HM * DM];
    memcpy(od_scalar, od, n_row);
    cpu_backend_set_simd_level(c, cpu_simd_level_detect());
    assert_int_equal(backend_cpu_ops()->attention(c, &pd), LLB_STATUS_OK);
    assert_memory_equal(od, od_scalar, n_row);
    if (order != CPU_ATTN_ORDER_BY_QUERY_LEN) {
      assert_memory_equal(od, o1 + (Q - 1) * H * D, n_row);
      memcpy(chunk_out[order], o1, n_out);
      memcpy(dec_out[order], od, n_row);
    } else {
      assert_memory_equal(o1, chunk_out[CPU_ATTN_ORDER_BATCH], n_out);
      assert_memory_equal(od, dec_out[CPU_ATTN_ORDER_SINGLE], n_row);
    }
  }
  /* the two orders are different sums: not one and the same code path (over a short window
   * they may agree: fp16 products are exact in float, and fp16 probabilities absorb the q.k
   * differences) */
  if (window == 0) assert_true(memcmp(chunk_out[0], chunk_out[1], n_out) != 0);
  backend_cpu_ops()->ctx_destroy(c);
}

static void check_attention_paths(const int32_t BS, int32_t window, float softcap, const int32_t D, const int32_t H) {
  check_attention_paths_n(BS, window, softcap, D, H, 40);
}

/* Block size 8 takes the AVX2 path, 16 and 32 the AVX-512 one where the CPU has it; also with a
 * window of 19 keys (its first key inside a block and inside a 16-key softmax group) and
 * soft-capping; head_dim 80 with 3 heads per KV head, 64 with 3, 4 and 1, 128 with 2; 600
 * keys (grouped decode rows). */
static void test_attention_bit_identical_across_paths_and_grouping(void **state) {
  (void)state;
  check_attention_paths(8, 0, 0.0f, 80, 6);
  check_attention_paths(16, 0, 0.0f, 80, 6);
  check_attention_paths(8, 19, 2.0f, 80, 6);
  check_attention_paths(16, 19, 0.0f, 80, 6);
  check_attention_paths(16, 0, 0.0f, 64, 6);
  check_attention_paths(16, 19, 2.0f, 64, 8);
  check_attention_paths(16, 0, 0.0f, 64, 2);
  check_attention_paths(16, 0, 0.0f, 128, 4);
  /* blocks of 32 keys: two 16-key groups a block, the window's first key in the second
   * (a one-head decode item walks the groups of each block) */
  check_attention_paths(32, 19, 0.0f, 64, 6);
  check_attention_paths(32, 19, 2.0f, 80, 2);
  /* past 512 keys a decode row alone keeps the heads of a KV head in one item (fewer items
   * than threads): the same bits as per head, as the scalar path and as inside the chunk */
  check_attention_paths_n(16, 0, 0.0f, 64, 6, 600);
  check_attention_paths_n(8, 0, 0.0f, 80, 6, 600);
  check_attention_paths_n(16, 300, 0.0f, 64, 6, 600);
}

/* Each row of the batch p (its output in p->out) equals the same row computed alone (one row,
 * no tile) at c's level; o3 [H * D] scratch. */
static void check_attention_rows_alone(struct backend_ctx *c, const struct backend_attn_params *p, int32_t D,
                                       int32_t H, float *o3) {
  for (int s = 0; s < p->num_seqs; s++) {
    const int32_t q0 = p->query_start_loc[s], q_len = p->query_start_loc[s + 1] - q0;
    for (int r = 0; r < q_len; r++) {
      const int32_t tok = q0 + r, one[2] = {0, 1}, len1 = p->seq_lens[s] - q_len + r + 1;
      struct backend_attn_params p1 = *p;
      p1.q = p->q + (int64_t)tok * H * D;
      p1.out = o3;
      p1.num_tokens = 1;
      p1.num_seqs = 1;
      p1.query_start_loc = one;
      p1.seq_lens = &len1;
      p1.block_tables = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
      assert_int_equal(backend_cpu_ops()->attention(c, &p1), LLB_STATUS_OK);
      if (memcmp(o3, p->out + (int64_t)tok * H * D, (size_t)H * D * sizeof(float)) != 0)
        fail_msg("D %d H %d: row %d of seq %d differs alone", D, H, r, s);
    }
  }
}

/* The attention batch p on the scalar path (into scalar [num_tokens * H * D]), then on every
 * level from AVX2 up (into p->out): the same bits, and each row equals the same row computed
 * alone (check_attention_rows_alone; o3 [H * D] scratch). */
static void check_attention_tiles_every_level(struct backend_ctx *c, struct backend_attn_params *p, float *scalar,
                                              int32_t D, int32_t H, float *o3) {
  float *out = p->out;
  p->out = scalar;
  cpu_backend_set_simd_level(c, CPU_SIMD_LEVEL_SCALAR);
  assert_int_equal(backend_cpu_ops()->attention(c, p), LLB_STATUS_OK);
  p->out = out;
  const enum cpu_simd_level best = cpu_simd_level_detect();
  for (enum cpu_simd_level level = best >= CPU_SIMD_LEVEL_AVX2 ? CPU_SIMD_LEVEL_AVX2 : best; level <= best; level++) {
    cpu_backend_set_simd_level(c, level);
    assert_int_equal(backend_cpu_ops()->attention(c, p), LLB_STATUS_OK);
    check_attention_rows_alone(c, p, D, H, o3);
    if (memcmp(out, scalar, (size_t)p->num_tokens * H * D * sizeof(float)) != 0)
      fail_msg("D %d H %d level %d: the tiles differ from the scalar path", D, H, (int)level);
  }
}

/* Prefill rows in tiles (the AVX2 and AVX-512 rows paths, each level from AVX2 up to the
 * CPU's: several rows of a sequence share each key's conversion, p.v in passes of rows), with
 * soft-capping when softcap > 0: a batch of three sequences whose runs of rows cut the tiles
 * raggedly (7 rows at 300 keys, 5 at 45, a fresh 4), GQA with 1-8 heads per KV head,
 * head_dim 64 / 80 / 128 / 256, fp16, q8_0 or fp8 caches and blocks of BS (16 or 32) keys,
 * gives the scalar path's bits, and each row equals the same row computed alone (one row, no
 * tile), in the BATCH order. A sliding
 * window (window > 0) no sequence is longer than cuts no key (the tiles still run); one that
 * cuts sends the rows one by one: the same bits either way. */
static void check_attention_row_tiles_bs(const int32_t D, const int32_t H, float softcap, enum backend_kv_dtype dtype,
                                         int32_t window, const int32_t BS) {
  enum { BS_MAX = 32, HKV = 2, DM = 256, NS = 3, T = 16, NB_SEQ = 20, HM = 16 };
  assert_true(BS % 16 == 0 && BS <= BS_MAX);
  const int32_t lens[NS] = {300, 45, 4}, qsl[NS + 1] = {0, 7, 12, 16};
  /* n_heads / head_dim: the per-thread fp16 scratch a quantized cache's keys are converted into */
  const struct backend_ctx_params cp = {.n_threads = 2, .max_num_tokens = 16, .max_row_elems = 1024,
                                        .max_context_len = 640, .n_heads = H, .head_dim = D};
  struct backend_ctx *c = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&cp, &c), LLB_STATUS_OK);
  static uint16_t kc[NS * NB_SEQ * BS_MAX * HKV * DM], vc[NS * NB_SEQ * BS_MAX * HKV * DM];
  struct backend_kv_layer kv = {kc, vc, NS * NB_SEQ, BS, HKV, D, dtype};
  int32_t table[NS * NB_SEQ];
  for (int i = 0; i < NS * NB_SEQ; i++) table[i] = (i * 7 + 3) % (NS * NB_SEQ); /* 7 and 60 coprime */
  rng_state = 555;
  static float k[300 * HKV * DM], v[300 * HKV * DM], q[T * HM * DM], o1[T * HM * DM], o2[T * HM * DM], o3[HM * DM];
  static int64_t slots[300];
  for (int s = 0; s < NS; s++) {
    for (int i = 0; i < lens[s] * HKV * D; i++) k[i] = rndf() * 2, v[i] = rndf();
    for (int j = 0; j < lens[s]; j++) slots[j] = (int64_t)table[s * NB_SEQ + j / BS] * BS + j % BS;
    assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, slots, lens[s]), LLB_STATUS_OK);
  }
  for (int i = 0; i < T * H * D; i++) q[i] = rndf();
  cpu_backend_set_attn_order(c, CPU_ATTN_ORDER_BATCH);
  struct backend_attn_params p = {.q = q, .out = o1, .kv = &kv, .num_tokens = T, .n_heads = H, .scale = 0.125f,
                                  .num_seqs = NS, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                  .max_blocks_per_seq = NB_SEQ, .logit_softcap = softcap, .sliding_window = window};
  check_attention_tiles_every_level(c, &p, o2, D, H, o3);
  backend_cpu_ops()->ctx_destroy(c);
}

static void check_attention_row_tiles_w(const int32_t D, const int32_t H, float softcap, enum backend_kv_dtype dtype,
                                        int32_t window) {
  check_attention_row_tiles_bs(D, H, softcap, dtype, window, 16);
}

static void check_attention_row_tiles(const int32_t D, const int32_t H, float softcap, enum backend_kv_dtype dtype) {
  check_attention_row_tiles_w(D, H, softcap, dtype, 0);
}

static void test_attention_row_tiles_bit_identical_ragged(void **state) {
  (void)state;
  const enum backend_kv_dtype f16 = BACKEND_KV_DTYPE_F16;
  /* Gemma's sliding layers over a prompt within the window (300 keys, the longest sequence),
   * soft-capped as gemma2's, and a window of 299 that cuts the longest sequence's last row */
  check_attention_row_tiles_w(64, 6, 0.0f, f16, 300);
  check_attention_row_tiles_w(64, 8, 2.0f, f16, 300);
  check_attention_row_tiles_w(256, 8, 0.0f, f16, 512);
  check_attention_row_tiles_w(64, 6, 0.0f, f16, 299);
  check_attention_row_tiles_w(64, 6, 0.0f, BACKEND_KV_DTYPE_Q8_0, 300);
  /* blocks of 32 keys: a lane meets each block twice in the rows paths' p.v walk */
  check_attention_row_tiles_bs(64, 6, 0.0f, f16, 0, 32);
  check_attention_row_tiles_bs(256, 8, 0.0f, f16, 300, 32);
  check_attention_row_tiles_bs(64, 12, 0.0f, f16, 0, 32);
  check_attention_row_tiles(64, 6, 0.0f, f16); /* SmolLM2: 3 heads per KV head, passes of 2 rows */
  check_attention_row_tiles(64, 6, 2.0f, f16); /* soft-capped scores */
  check_attention_row_tiles(64, 4, 0.0f, f16); /* passes of 3 rows and 1 */
  check_attention_row_tiles(64, 2, 0.0f, f16); /* passes of 4 rows */
  check_attention_row_tiles(64, 8, 0.0f, f16); /* 4 heads: passes of 1 row (AVX2: row by row) */
  check_attention_row_tiles(64, 10, 0.0f, f16); /* 5, 6 and 8 heads per KV head: passes of one row (AVX2) */
  check_attention_row_tiles(64, 12, 0.0f, f16);
  check_attention_row_tiles(96, 8, 0.0f, f16); /* AVX-512 p.v in 16-dim slices: 4 rows x 4 heads */
  check_attention_row_tiles(64, 16, 0.0f, f16);
  check_attention_row_tiles(80, 6, 0.0f, f16); /* head_dim not a multiple of 32 */
  check_attention_row_tiles(128, 2, 0.0f, f16);
  check_attention_row_tiles(128, 4, 0.0f, f16); /* a row's heads fill the registers: row by row */
  check_attention_row_tiles(256, 2, 0.0f, f16);
  check_attention_row_tiles(64, 6, 0.0f, BACKEND_KV_DTYPE_Q8_0); /* keys converted to fp16 scratch */
  check_attention_row_tiles(64, 6, 0.0f, BACKEND_KV_DTYPE_FP8_E4M3);
}

/* Prefill rows past 4096 keys (the rows paths' p.v looks up 256 blocks of V rows at a time and
 * carries its lane accumulators from one window to the next): a chunk of 16 rows (tiles of 4)
 * at the end of a 4200-key sequence, blocks of 16 in a scrambled order, SmolLM2's heads, gives
 * the scalar path's bits on every level from AVX2 up, and each row equals the same row
 * computed alone. */
static void test_attention_row_tiles_past_one_window(void **state) {
  (void)state;
  enum { BS = 16, HKV = 3, H = 9, D = 64, LEN = 4200, Q = 16, NB = (LEN + BS - 1) / BS };
  const struct backend_ctx_params cp = {.n_threads = 2, .max_num_tokens = 16, .max_row_elems = 1024,
                                        .max_context_len = LEN};
  struct backend_ctx *c = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&cp, &c), LLB_STATUS_OK);
  static uint16_t kc[NB * BS * HKV * D], vc[NB * BS * HKV * D];
  static float k[LEN * HKV * D], v[LEN * HKV * D], q[Q * H * D], o1[Q * H * D], o2[Q * H * D], o3[H * D];
  static int64_t slots[LEN];
  static int32_t table[NB];
  struct backend_kv_layer kv = {kc, vc, NB, BS, HKV, D, BACKEND_KV_DTYPE_F16};
  for (int i = 0; i < NB; i++) table[i] = (i * 37 + 5) % NB; /* 37 and 263 coprime */
  rng_state = 4096;
  for (int i = 0; i < LEN * HKV * D; i++) k[i] = rndf() * 2, v[i] = rndf();
  for (int i = 0; i < Q * H * D; i++) q[i] = rndf();
  for (int j = 0; j < LEN; j++) slots[j] = (int64_t)table[j / BS] * BS + j % BS;
  assert_int_equal(backend_cpu_ops()->kv_write(c, &kv, k, v, slots, LEN), LLB_STATUS_OK);
  const int32_t qsl[2] = {0, Q}, lens[1] = {LEN};
  cpu_backend_set_attn_order(c, CPU_ATTN_ORDER_BATCH);
  struct backend_attn_params p = {.q = q, .out = o1, .kv = &kv, .num_tokens = Q, .n_heads = H, .scale = 0.125f,
                                  .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                  .max_blocks_per_seq = NB};
  check_attention_tiles_every_level(c, &p, o2, D, H, o3);
  backend_cpu_ops()->ctx_destroy(c);
}

/* The final-logit soft-cap op: cap * tanh(x / cap), in place, bounded by the cap. */
static void test_softcap_matches_reference(void **state) {
  (void)state;
  struct backend_ctx *c = make_ctx(2);
  enum { N = 3000 };
  static float x[N], y[N];
  rng_state = 77;
  for (int i = 0; i < N; i++) x[i] = y[i] = rndf() * 20.0f;
  assert_int_equal(backend_cpu_ops()->softcap(c, y, N, 3.0f), LLB_STATUS_OK);
  for (int i = 0; i < N; i++) {
    const double ref = 3.0 * tanh(x[i] / 3.0);
    if (fabs(ref - y[i]) > 1e-6 || fabsf(y[i]) > 3.0f) fail_msg("x %g: %g vs %g", x[i], y[i], ref);
  }
  assert_int_equal(backend_cpu_ops()->softcap(c, y, N, 0.0f), LLB_STATUS_INVALID_ARGUMENT);
  backend_cpu_ops()->ctx_destroy(c);
}

/* ggml's expf and SwiGLU: known values, and the AVX2 and AVX-512 rows equal the scalar rows
 * bit for bit over normal, subnormal-result, overflow and special inputs (4099 values: a
 * tail after the 16- and 8-lane steps). */
static void test_ggml_expf_and_swiglu_rows_bit_identical_across_paths(void **state) {
  (void)state;
  assert_true(cpu_expf_ggml(0.0f) == 1.0f);
  assert_true(fabsf(cpu_expf_ggml(1.0f) - 2.7182817f) <= 2e-7f * 2.7182817f);
  assert_true(fabsf(cpu_expf_ggml(-20.0f) - expf(-20.0f)) <= 4e-7f * expf(-20.0f));
  assert_true(cpu_expf_ggml(-INFINITY) == 0.0f);
  assert_true(cpu_expf_ggml(-150.0f) == 0.0f); /* |n| = 216 > 192: ggml's flush to 0 */
  assert_true(cpu_expf_ggml(-100.0f) > 0.0f);  /* n = -144: a subnormal, not flushed */
  assert_true(isinf(cpu_expf_ggml(200.0f)));
  assert_true(isnan(cpu_expf_ggml(NAN)));
  enum { N = 4099 };
  static float x[N], u[N], y1[N], y2[N];
  rng_state = 99;
  for (int i = 0; i < N; i++) {
    x[i] = rndf() * (i % 7 == 0 ? 250.0f : i % 3 == 0 ? 110.0f : 12.0f);
    u[i] = rndf();
  }
  x[5] = -INFINITY;
  x[6] = INFINITY;
  x[7] = -100.0f; /* subnormal result (after the shift by 1.5) */
  x[8] = NAN;
  for (int lvl = CPU_SIMD_LEVEL_AVX2; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    cpu_exp_sub_row(CPU_SIMD_LEVEL_SCALAR, x, 1.5f, y1, N);
    cpu_exp_sub_row((enum cpu_simd_level)lvl, x, 1.5f, y2, N);
    assert_memory_equal(y1, y2, sizeof(y1));
    assert_true(y1[7] > 0.0f && y1[7] < 1e-38f);
    assert_true(isnan(y1[8]));
    cpu_swiglu_row(CPU_SIMD_LEVEL_SCALAR, x, u, y1, N);
    cpu_swiglu_row((enum cpu_simd_level)lvl, x, u, y2, N);
    assert_memory_equal(y1, y2, sizeof(y1));
  }
  /* every n = round(x * log2 e) from -200 to 200 (the flush to 0, subnormal results, the
   * normal range, overflow to inf, the flush to inf), 64 inputs each, in rows of every length
   * 1 .. 40 (the masked tails after the 8- and 16-lane steps) */
  for (int i = 0; i < N; i++) x[i] = -139.0f + 278.0f * (float)i / (float)(N - 1);
  for (int lvl = CPU_SIMD_LEVEL_AVX2; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    cpu_exp_sub_row(CPU_SIMD_LEVEL_SCALAR, x, 0.0f, y1, N);
    cpu_exp_sub_row((enum cpu_simd_level)lvl, x, 0.0f, y2, N);
    assert_memory_equal(y1, y2, sizeof(y1));
    for (int len = 1; len <= 40; len++)
      for (int at = 0; at + len <= N; at += 997) {
        float a[40], b[40];
        memcpy(a, x + at, sizeof(float) * (size_t)len);
        cpu_exp_sub_row(CPU_SIMD_LEVEL_SCALAR, a, 0.25f, a, len); /* in place, as attention calls it */
        cpu_exp_sub_row((enum cpu_simd_level)lvl, x + at, 0.25f, b, len);
        assert_memory_equal(a, b, sizeof(float) * (size_t)len);
        cpu_swiglu_row(CPU_SIMD_LEVEL_SCALAR, x + at, u + at, a, len);
        cpu_swiglu_row((enum cpu_simd_level)lvl, x + at, u + at, b, len);
        assert_memory_equal(a, b, sizeof(float) * (size_t)len);
      }
  }
}

/* ggml's fp16-table GELU (GeGLU of Gemma's FFN, the vision encoder's tanh and quick GELU):
 * known values, the clamps at -10 / 10 (+0 below whatever up is, x above), and the AVX2 row
 * (F16C and a gather) equal to the scalar row bit for bit over every fp16 value, floats
 * between them (rounding to nearest even, ties), specials, rows of every length 1 .. 20,
 * with and without up, and in place. */
static void test_gelu_rows_bit_identical_across_paths(void **state) {
  (void)state;
  enum { N = 65536 + 4096 + 8 };
  static float x[N], u[N], y1[N], y2[N];
  rng_state = 7;
  for (int i = 0; i < 65536; i++) x[i] = llb_fp16_to_fp32((uint16_t)i);
  for (int i = 65536; i < N; i++) x[i] = rndf() * (i % 5 == 0 ? 14.0f : 4.0f);
  for (int i = 65536; i < 65536 + 512; i++) { /* halfway between two fp16 values: ties to even */
    const uint16_t h = (uint16_t)(rnd() & 0x7bff);
    x[i] = 0.5f * (llb_fp16_to_fp32(h) + llb_fp16_to_fp32((uint16_t)(h + 1)));
  }
  const float specials[] = {-10.0f, 10.0f, nextafterf(-10.0f, 0.0f), nextafterf(10.0f, 0.0f), NAN, INFINITY,
                            -INFINITY, -0.0f, 65520.0f, 1e-8f};
  for (int i = 0; i < (int)(sizeof(specials) / sizeof(specials[0])); i++) x[N - 1 - i] = specials[i];
  for (int i = 0; i < N; i++) u[i] = rndf() * 3.0f;
  u[N - 7] = INFINITY; /* x = -inf: +0, not 0 * inf */
  for (int kind = CPU_GELU_TANH; kind <= CPU_GELU_QUICK; kind++) {
    cpu_gelu_row(CPU_SIMD_LEVEL_SCALAR, (enum cpu_gelu_kind)kind, x, NULL, y1, N);
    if (kind == CPU_GELU_TANH) {
      assert_true(fabsf(y1[0x3c00] - 0.841192f) < 1e-3f); /* x = 1 */
      assert_true(y1[N - 1] == 0.0f && !signbit(y1[N - 1])); /* -10 */
      assert_true(y1[N - 2] == 10.0f);
      assert_true(fabsf(y1[N - 4] - 10.0f) < 1e-2f); /* just below 10: the table (10 in fp16) */
      assert_true(isnan(y1[N - 5]) && y1[N - 6] == INFINITY && y1[N - 7] == 0.0f);
    } else {
      assert_true(fabsf(y1[0x3c00] - 0.845796f) < 1e-3f); /* 1 * sigmoid(1.702) */
      assert_true(y1[N - 1] < 0.0f && y1[N - 1] > -1e-6f); /* -10 sigmoid(-17.02): ~-4e-7 */
    }
    for (int lvl = CPU_SIMD_LEVEL_AVX2; lvl <= (int)cpu_simd_level_detect(); lvl++) {
      cpu_gelu_row((enum cpu_simd_level)lvl, (enum cpu_gelu_kind)kind, x, NULL, y2, N);
      assert_memory_equal(y1, y2, sizeof(y1));
      cpu_gelu_row(CPU_SIMD_LEVEL_SCALAR, (enum cpu_gelu_kind)kind, x, u, y1, N);
      memcpy(y2, x, sizeof(y2));
      cpu_gelu_row((enum cpu_simd_level)lvl, (enum cpu_gelu_kind)kind, y2, u, y2, N); /* in place */
      assert_memory_equal(y1, y2, sizeof(y1));
      for (int len = 1; len <= 20; len++)
        for (int at = N - 20; at + len <= N; at += 3) {
          float a[20], b[20];
          cpu_gelu_row(CPU_SIMD_LEVEL_SCALAR, (enum cpu_gelu_kind)kind, x + at, u + at, a, len);
          cpu_gelu_row((enum cpu_simd_level)lvl, (enum cpu_gelu_kind)kind, x + at, u + at, b, len);
          assert_memory_equal(a, b, sizeof(float) * (size_t)len);
        }
      cpu_gelu_row(CPU_SIMD_LEVEL_SCALAR, (enum cpu_gelu_kind)kind, x, NULL, y1, N);
    }
    if (kind == CPU_GELU_TANH) { /* geglu: +0 below -10 whatever up (here -inf x, +inf up) */
      cpu_gelu_row(cpu_simd_level_detect(), CPU_GELU_TANH, x, u, y2, N);
      assert_true(y2[N - 7] == 0.0f && !signbit(y2[N - 7]));
      assert_true(y2[N - 2] == 10.0f * u[N - 2]);
    }
  }
}

struct chunk_count {
  _Atomic int *hits; /* [n] */
  int64_t n;
  _Atomic int bad_ith;
  _Atomic int max_ith; /* highest thread index that ran a chunk */
};

static void count_chunk(void *arg, int64_t chunk, int ith) {
  struct chunk_count *cc = arg;
  if (ith < 0 || ith >= 3) atomic_store(&cc->bad_ith, 1);
  for (int m = atomic_load(&cc->max_ith); ith > m && !atomic_compare_exchange_weak(&cc->max_ith, &m, ith);) {
  }
  atomic_fetch_add(&cc->hits[chunk], 1);
}

/* A decode step's thread count (cpu_threadpool_set_active) changing between ops, with parked
 * pools and all-thread runs in between: every chunk runs exactly once, only on the threads
 * counted (1: the caller alone), and a run still reaches every thread. */
static void test_threadpool_active_threads_take_the_chunks(void **state) {
  (void)state;
  struct cpu_threadpool *p = NULL;
  assert_int_equal(cpu_threadpool_create(3, &p), LLB_STATUS_OK);
  assert_int_equal(cpu_threadpool_active(p), 3);
  static _Atomic int hits[48];
  _Atomic int counts[3] = {0};
  int runs = 0, max_seen[4] = {-1, -1, -1, -1};
  for (int i = 0; i < 2000; i++) {
    const int active = 1 + (i / 5) % 3;
    cpu_threadpool_set_active(p, active);
    assert_int_equal(cpu_threadpool_active(p), active);
    const int64_t n = 1 + i % 48;
    for (int64_t j = 0; j < n; j++) atomic_store(&hits[j], 0);
    struct chunk_count cc = {hits, n, 0, 0};
    cpu_threadpool_parallel(p, count_chunk, &cc, n);
    for (int64_t j = 0; j < n; j++)
      if (atomic_load(&hits[j]) != 1) fail_msg("op %d chunk %lld ran %d times", i, (long long)j, atomic_load(&hits[j]));
    const int m = atomic_load(&cc.max_ith);
    if (m >= active) fail_msg("op %d: thread %d ran a chunk with %d active", i, m, active);
    if (m > max_seen[active]) max_seen[active] = m;
    if (i % 11 == 0) {
      cpu_threadpool_run(p, count_task, counts);
      runs++;
      assert_int_equal(cpu_threadpool_active(p), active); /* a run gives the count back */
    }
    if (i % 13 == 0) cpu_threadpool_park(p);
  }
  for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&counts[i]), runs);
  assert_int_equal(max_seen[1], 0);
  cpu_threadpool_set_active(p, 99); /* clamped */
  assert_int_equal(cpu_threadpool_active(p), 3);
  cpu_threadpool_set_active(p, 0);
  assert_int_equal(cpu_threadpool_active(p), 1);
  cpu_threadpool_destroy(p); /* wakes the workers left out */
}

/* Thousands of short parallel ops (the shape of a decode step), mixed with all-thread runs:
 * every chunk runs exactly once, on a valid thread index. */
static void test_threadpool_parallel_runs_each_chunk_exactly_once(void **state) {
  (void)state;
  struct cpu_threadpool *p = NULL;
  assert_int_equal(cpu_threadpool_create(3, &p), LLB_STATUS_OK);
  static _Atomic int hits[64];
  _Atomic int counts[3] = {0};
  for (int i = 0; i < 3000; i++) {
    const int64_t n = 1 + i % 64;
    for (int64_t j = 0; j < n; j++) atomic_store(&hits[j], 0);
    struct chunk_count cc = {hits, n, 0, 0};
    cpu_threadpool_parallel(p, count_chunk, &cc, n);
    assert_int_equal(atomic_load(&cc.bad_ith), 0);
    for (int64_t j = 0; j < n; j++)
      if (atomic_load(&hits[j]) != 1) fail_msg("op %d chunk %lld ran %d times", i, (long long)j, atomic_load(&hits[j]));
    if (i % 7 == 0) cpu_threadpool_run(p, count_task, counts);
  }
  for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&counts[i]), 429);
  cpu_threadpool_destroy(p);
}

struct slow_chunk {
  _Atomic int *hits; /* [n] */
  _Atomic int finished; /* chunks whose work is over */
};

/* Every chunk a worker runs takes 2 ms (a worker the OS descheduled mid-op, as far as the
 * caller can tell); the caller's take no time. */
static void slow_worker_chunk(void *arg, int64_t chunk, int ith) {
  struct slow_chunk *sc = arg;
  if (ith != 0) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  atomic_fetch_add(&sc->hits[chunk], 1);
  atomic_fetch_add(&sc->finished, 1);
}

/* A caller whose worker holds chunks far longer than it spins (it sleeps until the worker
 * wakes it): cpu_threadpool_parallel still returns only once every chunk has run, each exactly
 * once, op after op, whether the worker finishes the op's last chunk or the caller does. */
static void test_threadpool_parallel_waits_for_a_slow_worker(void **state) {
  (void)state;
  struct cpu_threadpool *p = NULL;
  assert_int_equal(cpu_threadpool_create(2, &p), LLB_STATUS_OK);
  static _Atomic int hits[40];
  for (int i = 0; i < 60; i++) {
    const int64_t n = 2 + i % 39;
    for (int64_t j = 0; j < n; j++) atomic_store(&hits[j], 0);
    struct slow_chunk sc = {hits, 0};
    cpu_threadpool_parallel(p, slow_worker_chunk, &sc, n);
    if (atomic_load(&sc.finished) != n) fail_msg("op %d returned with %d of %lld chunks done", i, atomic_load(&sc.finished), (long long)n);
    for (int64_t j = 0; j < n; j++)
      if (atomic_load(&hits[j]) != 1) fail_msg("op %d chunk %lld ran %d times", i, (long long)j, atomic_load(&hits[j]));
    if (i % 9 == 0) cpu_threadpool_park(p);
  }
  cpu_threadpool_destroy(p);
}

static int64_t cpu_clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A caller that stops between ops (it blocks, as a caller preempted by another process or
 * waiting for its next step does) leaves its idle worker nothing to spin for: over 20 stops of
 * 5 ms after an op, the worker burns well under the 20 x 2 ms it would spin waiting for the
 * next op without looking at the caller's clock (the process's CPU time less the caller's own),
 * and the ops around the stops still run every chunk exactly once. */
static void test_threadpool_idle_worker_sleeps_while_the_caller_is_stopped(void **state) {
  (void)state;
  struct cpu_threadpool *p = NULL;
  assert_int_equal(cpu_threadpool_create(2, &p), LLB_STATUS_OK);
  static _Atomic int hits[16];
  int64_t worker_ns = 0;
  for (int i = 0; i < 20; i++) {
    for (int j = 0; j < 16; j++) atomic_store(&hits[j], 0);
    struct chunk_count cc = {hits, 16, 0, 0};
    cpu_threadpool_parallel(p, count_chunk, &cc, 16);
    for (int j = 0; j < 16; j++)
      if (atomic_load(&hits[j]) != 1) fail_msg("op %d chunk %d ran %d times", i, j, atomic_load(&hits[j]));
    const int64_t proc0 = cpu_clock_ns(CLOCK_PROCESS_CPUTIME_ID), own0 = cpu_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    struct timespec stop = {0, 5000000};
    nanosleep(&stop, NULL);
    worker_ns += (cpu_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - proc0) - (cpu_clock_ns(CLOCK_THREAD_CPUTIME_ID) - own0);
  }
  cpu_threadpool_destroy(p);
  if (worker_ns > 8000000) fail_msg("the worker ran %.2f ms while the caller was stopped 20 x 5 ms", worker_ns / 1e6);
}

/* LLMBUS_PREFETCH_BYTES: a decimal in [0, 65536] rounded down to 64-byte lines; unset, empty or
 * anything else: 2048 on an Intel CPU, 0 elsewhere. And whatever the distance, the decode
 * kernels give the same bits (the kernel tests above check them at this process's distance). */
static void test_decode_prefetch_distance_parse(void **state) {
  (void)state;
  assert_int_equal(cpu_decode_prefetch_parse(NULL, true), CPU_DECODE_PREFETCH_INTEL);
  assert_int_equal(cpu_decode_prefetch_parse(NULL, false), 0);
  assert_int_equal(cpu_decode_prefetch_parse("", true), CPU_DECODE_PREFETCH_INTEL);
  assert_int_equal(cpu_decode_prefetch_parse("0", true), 0);
  assert_int_equal(cpu_decode_prefetch_parse("4096", false), 4096);
  assert_int_equal(cpu_decode_prefetch_parse("100", false), 64);
  assert_int_equal(cpu_decode_prefetch_parse("63", true), 0);
  assert_int_equal(cpu_decode_prefetch_parse("65536", false), 65536);
  static const char *const refused[] = {"65537", "-64", "1k", "2048 ", " 2048", "+2048", " ", "0x800", "99999999999999999999"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    assert_int_equal(cpu_decode_prefetch_parse(refused[i], true), CPU_DECODE_PREFETCH_INTEL);
    assert_int_equal(cpu_decode_prefetch_parse(refused[i], false), 0);
  }
  const int d = cpu_decode_prefetch_bytes();
  assert_true(d >= 0 && d <= CPU_DECODE_PREFETCH_MAX && d % 64 == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_matches_references_for_all_types),
      cmocka_unit_test(test_matmul_bit_identical_across_paths_threads_and_batches),
      cmocka_unit_test(test_rope_norm_and_neox_match_reference),
      cmocka_unit_test(test_rope_same_bits_on_every_level),
      cmocka_unit_test(test_rope_table_reused_only_for_same_rows_and_params),
      cmocka_unit_test(test_paged_attention_matches_contiguous_reference),
      cmocka_unit_test(test_sliding_window_and_softcap_attention_match_reference),
      cmocka_unit_test(test_softcap_matches_reference),
      cmocka_unit_test(test_kv_write_skips_negative_slots_and_refuses_out_of_range),
      cmocka_unit_test(test_norm_swiglu_add_embed_match_reference),
      cmocka_unit_test(test_rms_norm_bit_exact_on_every_level),
      cmocka_unit_test(test_threadpool_runs_every_thread_once_per_run),
      cmocka_unit_test(test_gemm_tiles_bit_identical_to_single_dots),
      cmocka_unit_test(test_matmul_shapes_bit_identical_across_paths_and_batches),
      cmocka_unit_test(test_fp16_row_conversion_matches_scalar_rounding),
      cmocka_unit_test(test_attention_bit_identical_across_paths_and_grouping),
      cmocka_unit_test(test_attention_row_tiles_bit_identical_ragged),
      cmocka_unit_test(test_attention_row_tiles_past_one_window),
      cmocka_unit_test(test_ggml_expf_and_swiglu_rows_bit_identical_across_paths),
      cmocka_unit_test(test_gelu_rows_bit_identical_across_paths),
      cmocka_unit_test(test_decode_prefetch_distance_parse),
      cmocka_unit_test(test_threadpool_parallel_runs_each_chunk_exactly_once),
      cmocka_unit_test(test_threadpool_active_threads_take_the_chunks),
      cmocka_unit_test(test_threadpool_parallel_waits_for_a_slow_worker),
      cmocka_unit_test(test_threadpool_idle_worker_sleeps_while_the_caller_is_stopped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
