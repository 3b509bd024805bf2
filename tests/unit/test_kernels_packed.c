/* Packed Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q5_1 / IQ4_NL / Q4_K / Q5_K / Q6_K / IQ4_XS matmuls
 * (kernels/cpu/packed.h)
 * through the CPU backend's matmul.
 *
 * 1. Every output equals, bit for bit, a reference written here from the GGUF layout in the
 *    documented order (exact int32 block sums, Q4_0 / Q5_0 of the signed quants q - 8 / q - 16,
 *    acc = fma(d_w * d_a, isum, acc), Q4_1, Q5_1, Q4_K, Q5_K then acc = fma(m_w, s_a, acc); K
 *    and IQ4_XS blocks of 32 take d_w, m_w = the
 *    float products of super-block and sub-block scales; Q6_K the int8 sub-block scales inside
 *    the exact sum), on every SIMD level this CPU runs (scalar, AVX2, AVX-512
 *    VNNI), with 1 and 2 threads, for row counts that do and do not fill a kernel tile: so
 *    the layout is right, the levels agree, and no row depends on the batch.
 * 2. The reference itself is close to the real product: dequantized weights times float x,
 *    within the activation quantization error (sum |w_i| * amax_block / 127) — a shared
 *    misreading of the block format would fail here.
 * 3. The activation quantizer gives the same bytes at every level, ties included.
 * 4. Weights without a packed layout are refused by pack and keep working unpacked.
 * 5. F16 / BF16 panels: one fma chain per output in index order on every level; BF16 on
 *    AVX512_BF16: the activations rounded to bf16 and vdpbf16ps's order (pair by pair, odd
 *    element first), written out here in scalar C, and the rounding's cost bounded.
 * 6. The activations' bf16 rounding gives llb_fp32_to_bf16's bits on every level.
 * 7. Each kernel called directly with 1 to 8 rows gives every row its 1-row call's bits on
 *    every level, including call sizes the matmul never makes; the many-row kernels
 *    (cpu_packed_select_many: the staged ones of AVX2 and AVX-512 VNNI) likewise with up to
 *    64 rows, and a matmul of 70 rows (a 64-row tile and a remainder) equals the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed.h"
#include "kernels/quant.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; } /* [-1, 1) */

/* Whether blocks of t store a min m after d (w = d * q + m). */
static bool stores_min(enum ggml_type t) {
  return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K;
}

/* The zero point of t's quants in the packed order's int32 sum: Q4_0 w = d * (q - 8), Q5_0
 * w = d * (q - 16) (GGUF's signed quants), 0 for the other types. */
static int zero_point(enum ggml_type t) { return t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 0; }

static bool is_super(enum ggml_type t) { return ggml_type_block_elems(t) == 256; }

/* GGUF rows of a packed type: random quants, sane fp16 scales (and signed mins). */
static uint8_t *random_weight(enum ggml_type t, int64_t rows, int64_t cols, size_t *row_bytes) {
  assert_int_equal(ggml_row_bytes(t, cols, row_bytes), LLB_STATUS_OK);
  const size_t n = *row_bytes * (size_t)rows, bb = ggml_type_block_bytes(t);
  uint8_t *p = malloc(n);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
  for (size_t b = 0; b < n / bb; b++) {
    const uint16_t d = llb_fp32_to_fp16(0.005f + 0.02f * fabsf(rndf())), m = llb_fp32_to_fp16(0.1f * rndf());
    if (t == GGML_TYPE_Q6_K) { /* d last; the int8 scales stay random */
      memcpy(p + b * bb + bb - 2, &d, 2);
      continue;
    }
    memcpy(p + b * bb, &d, 2);
    if (stores_min(t)) memcpy(p + b * bb + 2, is_super(t) ? &d : &m, 2); /* K: dmin > 0 as ggml */
  }
  return p;
}

/* A random weight of type t (rows x k, GGUF layout in *data, the caller frees both) packed:
 * returns the packed bytes (*pb of them). */
static uint8_t *packed_random_weight(enum ggml_type t, int64_t rows, int64_t k, uint8_t **data, size_t *pb) {
  size_t row_bytes;
  *data = random_weight(t, rows, k, &row_bytes);
  const struct backend_weight w = {t, rows, k, row_bytes, *data, NULL};
  *pb = cpu_pack_bytes(&w);
  assert_true(*pb > 0);
  uint8_t *packed = malloc(*pb);
  assert_int_equal(cpu_pack_weight(&w, packed), LLB_STATUS_OK);
  return packed;
}

/* n activation rows of k random values in [-1, 1), quantized (the caller frees each). */
static void random_act_rows(block_q8_x **act, int n, int64_t k) {
  float *x = malloc((size_t)k * sizeof *x);
  for (int r = 0; r < n; r++) {
    act[r] = malloc((size_t)(k / 32) * sizeof(block_q8_x));
    for (int64_t i = 0; i < k; i++) x[i] = rndf();
    cpu_quantize_act_row_x(CPU_SIMD_LEVEL_SCALAR, x, act[r], k);
  }
  free(x);
}

static float h2f(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return llb_fp16_to_fp32(h);
}

/* Weight j of block b of a GGUF row, as the integer the dot multiplies, read from the
 * ggml-common.h layout: Q5_0/Q5_1 keep the 5th bit of weight j in bit j of qh (4 bytes after
 * d, or d and m), IQ4_NL indexes ggml's kvalues_iq4nl with the nibble. */
static int weight_q(enum ggml_type t, const uint8_t *row, int64_t b, int j) {
  static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const uint8_t *blk = row + b * (int64_t)ggml_type_block_bytes(t);
  switch (t) {
  case GGML_TYPE_Q4_0:
  case GGML_TYPE_Q4_1: {
    const uint8_t q = blk[(t == GGML_TYPE_Q4_0 ? 2 : 4) + j % 16];
    return j < 16 ? q & 0x0F : q >> 4;
  }
  case GGML_TYPE_Q5_0:
  case GGML_TYPE_Q5_1: {
    const uint8_t *qh = blk + (t == GGML_TYPE_Q5_0 ? 2 : 4), *qs = qh + 4;
    const int lo = j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
    return lo | (((qh[j / 8] >> (j % 8)) & 1) << 4); /* Q5_0: w = d * (q - 16) */
  }
  case GGML_TYPE_IQ4_NL: {
    const uint8_t q = blk[2 + j % 16];
    return kv[j < 16 ? q & 0x0F : q >> 4];
  }
  default: return (int8_t)blk[2 + j];
  }
}

/* Weight j of 32-block b of a Q4_K / Q5_K / IQ4_XS row (b indexes blocks of 32), and that
 * block's float scale and min (w = d * q + m), from the layouts of ggml-common.h: Q4_K d, dmin,
 * scales[12], qs[128]; Q5_K the same with qh[32] before qs; IQ4_XS d, scales_h, scales_l[4],
 * qs[128]. */
static int super_q(enum ggml_type t, const uint8_t *row, int64_t b, int l, float *d, float *m) {
  static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const uint8_t *blk = row + (b / 8) * (int64_t)ggml_type_block_bytes(t);
  const int j = (int)(b % 8);
  if (t == GGML_TYPE_IQ4_XS) {
    const int sh = blk[2] | blk[3] << 8;
    const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
    *d = h2f(blk) * (float)(ls - 32);
    *m = 0.0f;
    const uint8_t q = blk[8 + 16 * j + l % 16];
    return kv[l < 16 ? q & 15 : q >> 4];
  }
  const uint8_t *sc = blk + 4;
  int s6, m6;
  if (j < 4) {
    s6 = sc[j] & 63, m6 = sc[j + 4] & 63;
  } else {
    s6 = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    m6 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
  *d = h2f(blk) * (float)s6;
  *m = -(h2f(blk + 2) * (float)m6);
  const uint8_t *qs = blk + 16 + (t == GGML_TYPE_Q5_K ? 32 : 0);
  int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
  if (t == GGML_TYPE_Q5_K) q |= ((blk[16 + l] >> j) & 1) << 4;
  return q;
}

/* Weight l of 32-block b as the integer the kernel multiplies, with the block's d and m (Q4_0 /
 * Q5_0: m = -8 * d / -16 * d, their dequantized weight d * q + m; the packed order subtracts
 * zero_point(t) in the integer sum instead). */
static int block_weight(enum ggml_type t, const uint8_t *row, int64_t b, int l, float *d, float *m) {
  if (is_super(t)) return super_q(t, row, b, l, d, m);
  const uint8_t *blk = row + b * (int64_t)ggml_type_block_bytes(t);
  *d = h2f(blk);
  *m = t == GGML_TYPE_Q4_0 ? -8.0f * *d : t == GGML_TYPE_Q5_0 ? -16.0f * *d : stores_min(t) ? h2f(blk + 2) : 0.0f;
  return weight_q(t, row, b, l);
}

/* Element l (0..255) of a Q6_K super-block as ggml-common.h lays it out (ql[128], qh[64],
 * scales[16], d): the 6-bit quant q (w = d * scales[l / 16] * (q - 32)), and its scale. */
static int q6k_quant(const uint8_t *blk, int l, int *scale) {
  const int half = l / 128, k = (l % 128) / 32, i = l % 32;
  const uint8_t *ql = blk + 64 * half, *qh = blk + 128 + 32 * half;
  *scale = (int8_t)blk[192 + 8 * half + 2 * k + i / 16];
  const int lo = (ql[i + 32 * (k & 1)] >> (4 * (k >> 1))) & 0x0F;
  return lo | ((qh[i] >> (2 * k)) & 3) << 4;
}

/* The documented activation quantization of one block of 32. */
static float quantize_ref(const float *x, int8_t q[32], int *sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  *sum = 0;
  for (int j = 0; j < 32; j++) {
    q[j] = (int8_t)lrintf(x[j] * id);
    *sum += q[j];
  }
  return amax / 127.0f;
}

/* Reference output (row of x, weight row) in the documented float order. */
static float output_ref(enum ggml_type t, const uint8_t *wrow, const float *x, int64_t k) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; b++) {
    int8_t q[32];
    int sum;
    const float d = quantize_ref(x + b * 32, q, &sum);
    if (t == GGML_TYPE_Q6_K) { /* sc0 * (sum q*a - 32 bsum0) + sc1 * (...), then fma(d * d_a) */
      const uint8_t *blk = wrow + (b / 8) * 210;
      int32_t isum = 0;
      for (int h = 0; h < 2; h++) {
        int32_t s = 0, bsum = 0;
        int sc = 0;
        for (int j = 16 * h; j < 16 * h + 16; j++) {
          s += q6k_quant(blk, (int)(b % 8) * 32 + j, &sc) * q[j];
          bsum += q[j];
        }
        isum += sc * (s - 32 * bsum);
      }
      acc = fmaf(h2f(blk + 208) * d, (float)isum, acc);
      continue;
    }
    int32_t isum = 0;
    float dw = 0.0f, mw = 0.0f;
    for (int j = 0; j < 32; j++) isum += (block_weight(t, wrow, b, j, &dw, &mw) - zero_point(t)) * q[j];
    acc = fmaf(dw * d, (float)isum, acc);
    if (stores_min(t)) acc = fmaf(mw, d * (float)sum, acc);
  }
  return acc;
}

/* The real product in double, and the bound of the activation quantization error. */
static void output_exact(enum ggml_type t, const uint8_t *wrow, const float *x, int64_t k, double *val,
                         double *bound) {
  *val = 0.0;
  *bound = 1e-4;
  for (int64_t b = 0; b < k / 32; b++) {
    double amax = 0.0;
    for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[b * 32 + j]));
    for (int j = 0; j < 32; j++) {
      float dw, mw;
      double w;
      if (t == GGML_TYPE_Q6_K) {
        int sc;
        const int q = q6k_quant(wrow + (b / 8) * 210, (int)(b % 8) * 32 + j, &sc);
        w = (double)h2f(wrow + (b / 8) * 210 + 208) * sc * (q - 32);
      } else {
        const int q = block_weight(t, wrow, b, j, &dw, &mw);
        w = (double)dw * q + (double)mw;
      }
      *val += w * x[b * 32 + j];
      *bound += fabs(w) * amax / 127.0 + 1e-6 * fabs(w * x[b * 32 + j]);
    }
  }
}

static struct backend_ctx *make_ctx(int n_threads) {
  const struct backend_ctx_params p = {.n_threads = n_threads, .max_num_tokens = 80, .max_row_elems = 1024,
                                       .max_context_len = 16};
  struct backend_ctx *c = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&p, &c), LLB_STATUS_OK);
  return c;
}

/* The matmul of weight `data` (t, rows x k, GGUF rows rb bytes apart; freed here) packed, on
 * n_rows random activation rows: every output equals output_ref bit for bit on every level with
 * 1 and 2 threads, and the real product within output_exact's bound. */
static void check_weight(enum ggml_type t, uint8_t *data, size_t rb, int64_t rows, int64_t k, int32_t n_rows) {
  const struct backend_ops *ops = backend_cpu_ops();
  struct backend_weight w = {.type = t, .rows = rows, .cols = k, .row_bytes = rb, .data = data};
  const size_t pb = ops->pack_bytes(&w);
  assert_true(pb > 0);
  void *packed = aligned_alloc(64, (pb + 63) / 64 * 64);
  assert_int_equal(ops->pack(&w, packed), LLB_STATUS_OK);
  w.packed = packed;
  float *x = malloc((size_t)n_rows * (size_t)k * sizeof(float));
  for (int64_t i = 0; i < (int64_t)n_rows * k; i++) x[i] = rndf() * (i % 7 == 0 ? 4.0f : 1.0f);
  for (int64_t i = 0; i < 32; i++) x[i] = 0.0f; /* an all-zero block: d = 0 */
  float *out = malloc((size_t)n_rows * (size_t)rows * sizeof(float));
  const struct backend_weight *ws[1] = {&w};
  float *outs[1] = {out};
  for (int threads = 1; threads <= 2; threads++) {
    struct backend_ctx *c = make_ctx(threads);
    for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
      cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
      memset(out, 0xFF, (size_t)n_rows * (size_t)rows * sizeof(float));
      assert_int_equal(ops->matmul(c, x, n_rows, ws, outs, 1), LLB_STATUS_OK);
      for (int32_t r = 0; r < n_rows; r++)
        for (int64_t col = 0; col < rows; col++) {
          const float ref = output_ref(t, data + (size_t)col * rb, x + (int64_t)r * k, k);
          const float got = out[(int64_t)r * rows + col];
          if (memcmp(&ref, &got, sizeof ref) != 0)
            fail_msg("%s %lldx%lld, %d rows, level %d, %d threads: out[%d][%lld] = %.9g, reference %.9g",
                     ggml_type_name(t), (long long)rows, (long long)k, n_rows, lvl, threads, r,
                     (long long)col, got, ref);
        }
    }
    ops->ctx_destroy(c);
  }
  for (int32_t r = 0; r < n_rows; r++)
    for (int64_t col = 0; col < rows; col++) {
      double val, bound;
      output_exact(t, data + (size_t)col * rb, x + (int64_t)r * k, k, &val, &bound);
      const double got = out[(int64_t)r * rows + col];
      if (fabs(got - val) > bound)
        fail_msg("%s: out[%d][%lld] = %.6g, exact %.6g (bound %.3g)", ggml_type_name(t), r, (long long)col,
                 got, val, bound);
    }
  free(out);
  free(x);
  free(packed);
  free(data);
}

static void check_shape(enum ggml_type t, int64_t rows, int64_t k, int32_t n_rows) {
  size_t rb;
  uint8_t *data = random_weight(t, rows, k, &rb);
  check_weight(t, data, rb, rows, k, n_rows);
}

/* Q4_0 and Q5_0 pack without a min (their zero point is subtracted in the int32 sum), so blocks
 * whose -8 * d / -16 * d fp16 could not hold (|d| past 65504 / 8, / 16: packed with a min
 * before, such a file ran unpacked) pack too, and equal the reference on every level. */
static void test_zero_point_types_pack_whatever_their_scale(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q5_0};
  for (size_t ti = 0; ti < 2; ti++) {
    size_t rb;
    uint8_t *data = random_weight(types[ti], 32, 128, &rb);
    const uint16_t big = llb_fp32_to_fp16(ti ? -60000.0f : 9000.0f);
    memcpy(data + 5 * rb + ggml_type_block_bytes(types[ti]), &big, 2); /* row 5, block 1 */
    memcpy(data + 20 * rb, &big, 2);                                  /* row 20, block 0 */
    const struct backend_weight w = {.type = types[ti], .rows = 32, .cols = 128, .row_bytes = rb, .data = data};
    assert_int_equal(cpu_pack_bytes(&w), 2 * 4 * (16 * 2 + (ti ? 5 : 4) * 64)); /* no min: d[16] then quants */
    check_weight(types[ti], data, rb, 32, 128, 3);
  }
}

static void test_packed_matmul_equals_reference_on_every_level(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                  GGML_TYPE_IQ4_XS};
  const int64_t shapes[][2] = {{16, 32}, {48, 64}, {192, 576}, {64, 1024}};
  /* 576 and 768 columns: 18 and 24 blocks, a whole run of the AVX2 staged kernels
   * (PK_STAGE_BLOCKS = 16) and a part of one */
  const int64_t super_shapes[][2] = {{16, 256}, {48, 512}, {48, 768}, {64, 1024}};
  /* calls of 1 to 8 rows, odd and even, tiles of 8 and remainders */
  const int32_t row_counts[] = {1, 2, 3, 6, 8, 9, 17, 32};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    const bool sup = is_super(types[ti]);
    const size_t n_shapes = sup ? sizeof super_shapes / sizeof super_shapes[0] : sizeof shapes / sizeof shapes[0];
    for (size_t s = 0; s < n_shapes; s++)
      for (size_t n = 0; n < sizeof row_counts / sizeof row_counts[0]; n++)
        check_shape(types[ti], sup ? super_shapes[s][0] : shapes[s][0], sup ? super_shapes[s][1] : shapes[s][1],
                    row_counts[n]);
  }
}

/* A decode-sized call (1-3 rows) cuts each weight into chunks by its bytes (~128 KiB, ops.c
 * matmul_tile), so the weights of one call have chunks of different widths, the last of each
 * narrower: three weights of 329, 61 and 239 KiB (3, 1 and 2 chunks) in one call, on 1 and 2
 * threads and every level, give every output the reference's bits; 4 rows (row-dot chunks)
 * too. */
static void test_matmul_of_weights_cut_into_unequal_chunks_equals_reference(void **state) {
  (void)state;
  const struct backend_ops *ops = backend_cpu_ops();
  const int64_t k = 576;
  const enum ggml_type types[3] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0};
  const int64_t rows[3] = {1040, 192, 400};
  uint8_t *data[3];
  size_t rb[3];
  void *packed[3];
  struct backend_weight w[3];
  const struct backend_weight *ws[3];
  float *outs[3];
  for (int j = 0; j < 3; j++) {
    data[j] = random_weight(types[j], rows[j], k, &rb[j]);
    w[j] = (struct backend_weight){.type = types[j], .rows = rows[j], .cols = k, .row_bytes = rb[j], .data = data[j]};
    const size_t pb = ops->pack_bytes(&w[j]);
    assert_true(pb > 0);
    packed[j] = aligned_alloc(64, (pb + 63) / 64 * 64);
    assert_int_equal(ops->pack(&w[j], packed[j]), LLB_STATUS_OK);
    w[j].packed = packed[j];
    ws[j] = &w[j];
    outs[j] = malloc(4 * (size_t)rows[j] * sizeof(float));
  }
  float *x = malloc(4 * (size_t)k * sizeof(float));
  for (int64_t i = 0; i < 4 * k; i++) x[i] = rndf();
  for (int threads = 1; threads <= 2; threads++) {
    struct backend_ctx *c = make_ctx(threads);
    for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++)
      for (int32_t n_rows = 1; n_rows <= 4; n_rows++) {
        cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
        for (int j = 0; j < 3; j++) memset(outs[j], 0xFF, 4 * (size_t)rows[j] * sizeof(float));
        assert_int_equal(ops->matmul(c, x, n_rows, ws, outs, 3), LLB_STATUS_OK);
        for (int j = 0; j < 3; j++)
          for (int32_t r = 0; r < n_rows; r++)
            for (int64_t col = 0; col < rows[j]; col++) {
              const float ref = output_ref(types[j], data[j] + (size_t)col * rb[j], x + (int64_t)r * k, k);
              const float got = outs[j][(int64_t)r * rows[j] + col];
              if (memcmp(&ref, &got, sizeof ref) != 0)
                fail_msg("weight %d (%s %lldx%lld), %d rows, level %d, %d threads: out[%d][%lld] = %.9g, reference %.9g",
                         j, ggml_type_name(types[j]), (long long)rows[j], (long long)k, n_rows, lvl, threads, r,
                         (long long)col, got, ref);
            }
      }
    ops->ctx_destroy(c);
  }
  for (int j = 0; j < 3; j++) {
    free(outs[j]);
    free(packed[j]);
    free(data[j]);
  }
  free(x);
}

/* A matmul of 70 rows: on AVX2 the staged kernels take CPU_PACKED_MANY_ROWS (64) rows a call,
 * then the 6 left; 18 and 24 blocks, a whole run of staged blocks and part of one. */
static void test_packed_matmul_of_many_rows_equals_reference(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_0};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
    check_shape(types[ti], 32, is_super(types[ti]) ? 768 : 576, 70);
}

/* cpu_packed_select_many's kernels (on AVX2: NIBBLE, UNSIGNED and K6, staged; on AVX-512 VNNI:
 * UNSIGNED, staged past 8 rows) called with 3, 15, 33 and CPU_PACKED_MANY_ROWS rows
 * give each row the bits of cpu_packed_select's 1-row call; the other families and levels have
 * none. 18 and 24 blocks: a run of 16 staged blocks and part of another. */
static void test_many_row_kernels_give_each_row_its_own_bits(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                  GGML_TYPE_IQ4_XS};
  const int counts[] = {3, 15, 33, CPU_PACKED_MANY_ROWS};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    const int64_t rows = 32, k = is_super(types[ti]) ? 768 : 576, nb = k / 32;
    uint8_t *data;
    size_t pb;
    uint8_t *packed = packed_random_weight(types[ti], rows, k, &data, &pb);
    block_q8_x *act[CPU_PACKED_MANY_ROWS];
    random_act_rows(act, CPU_PACKED_MANY_ROWS, k);
    const int fam = cpu_pack_kind(types[ti], NULL);
    const bool nu = fam == CPU_PACK_FAMILY_NIBBLE || fam == CPU_PACK_FAMILY_UNSIGNED;
    for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
      const cpu_packed_fn many = cpu_packed_select_many(types[ti], (enum cpu_simd_level)lvl);
      const cpu_packed_fn fn = cpu_packed_select(types[ti], (enum cpu_simd_level)lvl);
      const bool staged = lvl == CPU_SIMD_LEVEL_AVX2 ? nu || fam == CPU_PACK_FAMILY_K6
                                                     : lvl >= CPU_SIMD_LEVEL_AVX512_VNNI &&
                                                           fam == CPU_PACK_FAMILY_UNSIGNED;
      if (!staged) {
        assert_null(many);
        continue;
      }
      assert_non_null(many);
      static float one[CPU_PACKED_MANY_ROWS][CPU_PACK_COLS], got[CPU_PACKED_MANY_ROWS][CPU_PACK_COLS];
      for (int64_t p = 0; p < rows / CPU_PACK_COLS; p++) {
        const uint8_t *panel = packed + (size_t)p * (pb / (size_t)(rows / CPU_PACK_COLS));
        for (int r = 0; r < CPU_PACKED_MANY_ROWS; r++)
          fn(nb, panel, (const block_q8_x *const *)&act[r], 1, one[r], CPU_PACK_COLS);
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
          memset(got, 0xFF, sizeof got);
          many(nb, panel, (const block_q8_x *const *)act, counts[c], &got[0][0], CPU_PACK_COLS);
          for (int r = 0; r < counts[c]; r++)
            if (memcmp(one[r], got[r], sizeof one[r]) != 0)
              fail_msg("%s level %d panel %lld: row %d of a %d-row call differs from its 1-row call",
                       ggml_type_name(types[ti]), lvl, (long long)p, r, counts[c]);
        }
      }
    }
    for (int r = 0; r < CPU_PACKED_MANY_ROWS; r++) free(act[r]);
    free(packed);
    free(data);
  }
}

/* GGUF rows of type t whose quants are all at their largest (every byte but the fp16 d and
 * dmin 0xFF: nibbles 15, 5th bits set, K sub-block scales and mins 63), Q6_K's int8 scales all
 * `k6_scale` (127 or -128) and its ql / qh bytes all `k6_quants` (0xFF: quants 63; 0x00:
 * quants 0, where the one-row AVX2 kernel's centred sums of (32 - q) * a are largest): the
 * worst case of the kernels' int16 sums. */
static uint8_t *saturated_weight(enum ggml_type t, int64_t rows, int64_t cols, uint8_t k6_scale, uint8_t k6_quants,
                                 size_t *row_bytes) {
  uint8_t *p = random_weight(t, rows, cols, row_bytes);
  const size_t bb = ggml_type_block_bytes(t), n = *row_bytes * (size_t)rows;
  for (size_t b = 0; b < n / bb; b++) {
    uint8_t *blk = p + b * bb;
    if (t == GGML_TYPE_Q6_K) { /* ql[128] qh[64] scales[16] d */
      memset(blk, k6_quants, 192);
      memset(blk + 192, k6_scale, 16);
    } else {
      const size_t head = stores_min(t) ? 4 : 2;
      memset(blk + head, 0xFF, bb - head);
    }
  }
  return p;
}

/* Activation rows of nb blocks, every quant `q` (127, -127 or -128; 0: alternating 127 and -128),
 * with their sums as the quantizer keeps them. */
static void saturated_act(block_q8_x *a, int64_t nb, int q) {
  for (int64_t b = 0; b < nb; b++) {
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 32; i++) {
      const int v = q ? q : (i & 1) ? -128 : 127;
      a[b].qs[i] = (int8_t)v;
      *(i < 16 ? &s0 : &s1) += v;
    }
    a[b].d = 0.01f + 0.001f * (float)(b % 7);
    a[b].sum = s0 + s1;
    a[b].s = a[b].d * (float)(s0 + s1);
    a[b].bsum[0] = (int16_t)s0;
    a[b].bsum[1] = (int16_t)s1;
  }
}

/* At the largest quants and activations (where an int16 partial sum would overflow first, if
 * a kernel's stated bound were wrong) every level's kernels, 1 to CPU_PACKED_MANY_ROWS rows a
 * call, give the scalar kernel's bits; rows cover runs of 16 blocks and a ragged end. */
static void test_packed_kernels_at_saturated_quants_equal_scalar(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
  const int acts[] = {127, -127, -128, 0};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    const int64_t rows = CPU_PACK_COLS, k = is_super(types[ti]) ? 4352 : 1088, nb = k / 32;
    for (int v = 0; v < (types[ti] == GGML_TYPE_Q6_K ? 4 : 1); v++) { /* Q6_K: scales 127 / -128 x quants 63 / 0 */
      const int sc = v & 1, q0 = v >> 1;
      size_t row_bytes;
      uint8_t *data = saturated_weight(types[ti], rows, k, sc ? 0x80 : 0x7F, q0 ? 0x00 : 0xFF, &row_bytes);
      const struct backend_weight w = {types[ti], rows, k, row_bytes, data, NULL};
      uint8_t *panel = malloc(cpu_pack_bytes(&w));
      assert_int_equal(cpu_pack_weight(&w, panel), LLB_STATUS_OK);
      block_q8_x *act[CPU_PACKED_MANY_ROWS];
      for (int r = 0; r < CPU_PACKED_MANY_ROWS; r++) act[r] = malloc((size_t)nb * sizeof(block_q8_x));
      for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
        for (int r = 0; r < CPU_PACKED_MANY_ROWS; r++) saturated_act(act[r], nb, acts[ai]);
        static float ref[CPU_PACKED_MANY_ROWS][CPU_PACK_COLS], got[CPU_PACKED_MANY_ROWS][CPU_PACK_COLS];
        const cpu_packed_fn scalar = cpu_packed_select(types[ti], CPU_SIMD_LEVEL_SCALAR);
        for (int r0 = 0; r0 < CPU_PACKED_MANY_ROWS; r0 += CPU_PACKED_MAX_ROWS)
          scalar(nb, panel, (const block_q8_x *const *)act + r0, CPU_PACKED_MAX_ROWS, ref[r0], CPU_PACK_COLS);
        for (int lvl = CPU_SIMD_LEVEL_SCALAR + 1; lvl <= (int)cpu_simd_level_detect(); lvl++) {
          const cpu_packed_fn many = cpu_packed_select_many(types[ti], (enum cpu_simd_level)lvl);
          const cpu_packed_fn fn = many ? many : cpu_packed_select(types[ti], (enum cpu_simd_level)lvl);
          const int most = many ? CPU_PACKED_MANY_ROWS : CPU_PACKED_MAX_ROWS;
          for (int n = 1; n <= most; n++) {
            memset(got, 0xFF, sizeof got);
            fn(nb, panel, (const block_q8_x *const *)act, n, &got[0][0], CPU_PACK_COLS);
            if (memcmp(got, ref, (size_t)n * sizeof ref[0]) != 0)
              fail_msg("%s%s%s, activations %d (0: 127/-128), level %d, %d rows a call: differs from scalar",
                       ggml_type_name(types[ti]), types[ti] != GGML_TYPE_Q6_K ? "" : sc ? " scales -128" : " scales 127",
                       types[ti] != GGML_TYPE_Q6_K ? "" : q0 ? " quants 0" : " quants 63", acts[ai], lvl, n);
          }
        }
      }
      for (int r = 0; r < CPU_PACKED_MANY_ROWS; r++) free(act[r]);
      free(panel);
      free(data);
    }
  }
}

/* Every packed kernel called directly with 1 to CPU_PACKED_MAX_ROWS rows gives each row the
 * bits of a 1-row call, on every level (on AVX2 1-2 rows and more take different kernels, the
 * staged ones pairing rows): the batch invariance of every call size; and a 1-row call gives
 * the same bits whether it prefetches into L1 or L2 (cpu_packed_prefetch_to_l2). */
static void test_kernel_calls_of_every_row_count_give_each_row_its_own_bits(void **state) {
  (void)state;
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                  GGML_TYPE_IQ4_XS};
  const int64_t rows = 32, k = 512, nb = k / 32;
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    uint8_t *data;
    size_t pb;
    uint8_t *packed = packed_random_weight(types[ti], rows, k, &data, &pb);
    block_q8_x *act[CPU_PACKED_MAX_ROWS];
    random_act_rows(act, CPU_PACKED_MAX_ROWS, k);
    for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
      const cpu_packed_fn fn = cpu_packed_select(types[ti], (enum cpu_simd_level)lvl);
      assert_non_null(fn);
      float one[CPU_PACKED_MAX_ROWS][CPU_PACK_COLS], many[CPU_PACKED_MAX_ROWS][CPU_PACK_COLS];
      for (int64_t p = 0; p < rows / CPU_PACK_COLS; p++) {
        const uint8_t *panel = packed + (size_t)p * (pb / (size_t)(rows / CPU_PACK_COLS));
        for (int r = 0; r < CPU_PACKED_MAX_ROWS; r++) {
          fn(nb, panel, (const block_q8_x *const *)&act[r], 1, one[r], CPU_PACK_COLS);
          float l2[CPU_PACK_COLS]; /* a large weight's decode call, prefetching into L2 */
          cpu_packed_prefetch_to_l2(true);
          fn(nb, panel, (const block_q8_x *const *)&act[r], 1, l2, CPU_PACK_COLS);
          cpu_packed_prefetch_to_l2(false);
          if (memcmp(one[r], l2, sizeof l2) != 0)
            fail_msg("%s level %d panel %lld: row %d prefetched into L2 differs", ggml_type_name(types[ti]), lvl,
                     (long long)p, r);
        }
        for (int n = 2; n <= CPU_PACKED_MAX_ROWS; n++) {
          memset(many, 0xFF, sizeof many);
          fn(nb, panel, (const block_q8_x *const *)act, n, &many[0][0], CPU_PACK_COLS);
          for (int r = 0; r < n; r++)
            if (memcmp(one[r], many[r], sizeof one[r]) != 0)
              fail_msg("%s level %d panel %lld: row %d of a %d-row call differs from its 1-row call",
                       ggml_type_name(types[ti]), lvl, (long long)p, r, n);
        }
      }
    }
    for (int r = 0; r < CPU_PACKED_MAX_ROWS; r++) free(act[r]);
    free(packed);
    free(data);
  }
}

/* A bf16 value as vdpbf16ps reads it: denormals are zero. */
static float bf16_daz(uint16_t h) { return (h & 0x7F80) == 0 ? 0.0f : llb_bf16_to_fp32(h); }

/* acc + w * x as vdpbf16ps adds one product: exact product, rounded sum, denormal sum -> 0. */
static float bf16_step(float acc, uint16_t w, uint16_t x) {
  const float r = fmaf(bf16_daz(w), bf16_daz(x), acc);
  return fabsf(r) < 1.17549435e-38f ? copysignf(0.0f, r) : r;
}

/* Output (w row, x row) in the order of level lvl: one fma chain in index order, or for BF16 on
 * AVX512_BF16 the activations rounded to bf16 and the pairs (2k + 1 first, then 2k) in order. */
static float float_ref(bool bf, int lvl, const uint16_t *w, const float *x, int64_t k) {
  float ref = 0.0f;
  if (bf && lvl >= CPU_SIMD_LEVEL_AVX512_BF16) {
    for (int64_t i = 0; i < k; i += 2) {
      ref = bf16_step(ref, w[i + 1], llb_fp32_to_bf16(x[i + 1]));
      ref = bf16_step(ref, w[i], llb_fp32_to_bf16(x[i]));
    }
    return ref;
  }
  for (int64_t i = 0; i < k; i++) ref = fmaf(bf ? llb_bf16_to_fp32(w[i]) : llb_fp16_to_fp32(w[i]), x[i], ref);
  return ref;
}

/* F16 / BF16 panels (the FLOAT family): each output is one fma chain over the row in index
 * order from 0 (BF16 on AVX512_BF16: float_ref's bf16 order), bit for bit on every level and
 * thread count, and close to the exact product (the bf16 activations within their rounding). */
static void check_float_shape(enum ggml_type t, int64_t rows, int64_t k, int32_t n_rows) {
  const struct backend_ops *ops = backend_cpu_ops();
  const bool bf = t == GGML_TYPE_BF16;
  uint16_t *data = malloc((size_t)rows * (size_t)k * 2);
  for (int64_t i = 0; i < rows * k; i++) {
    const float v = rndf() * 0.5f;
    data[i] = bf ? llb_fp32_to_bf16(v) : llb_fp32_to_fp16(v);
  }
  struct backend_weight w = {.type = t, .rows = rows, .cols = k, .row_bytes = (size_t)k * 2, .data = data};
  const size_t pb = ops->pack_bytes(&w);
  assert_int_equal(pb, (size_t)rows * (size_t)k * 2);
  void *packed = aligned_alloc(64, (pb + 63) / 64 * 64);
  assert_int_equal(ops->pack(&w, packed), LLB_STATUS_OK);
  w.packed = packed;
  float *x = malloc((size_t)n_rows * (size_t)k * sizeof(float));
  for (int64_t i = 0; i < (int64_t)n_rows * k; i++) x[i] = rndf();
  float *out = malloc((size_t)n_rows * (size_t)rows * sizeof(float));
  const struct backend_weight *ws[1] = {&w};
  float *outs[1] = {out};
  for (int threads = 1; threads <= 2; threads++) {
    struct backend_ctx *c = make_ctx(threads);
    for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
      cpu_backend_set_simd_level(c, (enum cpu_simd_level)lvl);
      memset(out, 0xFF, (size_t)n_rows * (size_t)rows * sizeof(float));
      assert_int_equal(ops->matmul(c, x, n_rows, ws, outs, 1), LLB_STATUS_OK);
      const bool bf_act = bf && lvl >= CPU_SIMD_LEVEL_AVX512_BF16; /* activations rounded to bf16 */
      for (int32_t r = 0; r < n_rows; r++)
        for (int64_t col = 0; col < rows; col++) {
          const float ref = float_ref(bf, lvl, data + col * k, x + (int64_t)r * k, k);
          double exact = 0.0, bound = 1e-5;
          for (int64_t i = 0; i < k; i++) {
            const uint16_t h = data[col * k + i];
            const double p = fabs((double)(bf ? llb_bf16_to_fp32(h) : llb_fp16_to_fp32(h)) * x[(int64_t)r * k + i]);
            exact += (double)(bf ? llb_bf16_to_fp32(h) : llb_fp16_to_fp32(h)) * x[(int64_t)r * k + i];
            bound += (double)k * 1.2e-7 * p + (bf_act ? p / 256.0 : 0.0); /* k roundings (+ x's to 8 bits) */
          }
          const float got = out[(int64_t)r * rows + col];
          if (memcmp(&ref, &got, sizeof ref) != 0 || fabs(got - exact) > bound)
            fail_msg("%s %lldx%lld, %d rows, level %d, %d threads: out[%d][%lld] = %.9g, reference %.9g, exact %.9g",
                     ggml_type_name(t), (long long)rows, (long long)k, n_rows, lvl, threads, r, (long long)col, got,
                     ref, exact);
        }
    }
    ops->ctx_destroy(c);
  }
  free(out);
  free(x);
  free(packed);
  free(data);
}

static void test_float_panels_equal_one_fma_chain_on_every_level(void **state) {
  (void)state;
  const int32_t row_counts[] = {1, 3, 5, 8, 9, 17};
  for (int ti = 0; ti < 2; ti++)
    for (size_t n = 0; n < sizeof row_counts / sizeof row_counts[0]; n++) {
      const enum ggml_type t = ti ? GGML_TYPE_BF16 : GGML_TYPE_F16;
      check_float_shape(t, 16, 32, row_counts[n]);
      check_float_shape(t, 48, 576, row_counts[n]);
    }
  /* rows that are not whole 32-element blocks stay unpacked */
  uint16_t d[16 * 40] = {0};
  struct backend_weight w = {.type = GGML_TYPE_F16, .rows = 16, .cols = 40, .row_bytes = 80, .data = d};
  assert_int_equal(backend_cpu_ops()->pack_bytes(&w), 0);
}

/* The bf16 activations of BF16 panels on AVX512_BF16: llb_fp32_to_bf16's bits (ggml's
 * rounding) on every level, ties to even, NaN quiet, denormals rounded rather than flushed. */
static void test_bf16_activations_round_as_ggml_on_every_level(void **state) {
  (void)state;
  enum { N = 67 }; /* not whole registers: the tail too */
  float x[N];
  for (int i = 0; i < N; i++) x[i] = rndf() * 100.0f;
  const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x7FC00001u, 0xFF800001u, 0x7F800000u,
                              0x00000123u, 0x007FFFFFu, 0x80400000u, 0x7F7FFFFFu};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(&x[3 * i], &special[i], 4);
  uint16_t y[N];
  for (int lvl = CPU_SIMD_LEVEL_SCALAR; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    memset(y, 0x55, sizeof y);
    cpu_packed_bf16_act_row((enum cpu_simd_level)lvl, x, y, N);
    for (int i = 0; i < N; i++)
      if (y[i] != llb_fp32_to_bf16(x[i])) fail_msg("level %d: x[%d] -> %04x, want %04x", lvl, i, y[i], llb_fp32_to_bf16(x[i]));
  }
  assert_int_equal(llb_fp32_to_bf16(x[0]), 0x3F80); /* tie to even (down) */
  assert_int_equal(llb_fp32_to_bf16(x[3]), 0x3F82); /* tie to even (up) */
  assert_int_equal(llb_fp32_to_bf16(x[18]), 0x0080); /* the largest denormal rounds up to FLT_MIN */
}

static void test_activation_quantizer_same_bytes_on_every_level(void **state) {
  (void)state;
  enum { K = 256 };
  float x[K];
  for (int i = 0; i < K; i++) x[i] = rndf();
  /* ties: amax 127 makes id 1, so x = n + 0.5 must round half to even */
  for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f;
  x[31] = 127.0f;
  for (int i = 32; i < 64; i++) x[i] = 0.0f;
  /* a block of values so small that 127 / amax overflows: zeros at every level */
  for (int i = 96; i < 128; i++) x[i] = (float)(i - 112) * 1e-38f;
  /* the extreme sums of a half: every quant -127, then halves of +127 and -127 */
  for (int i = 128; i < 160; i++) x[i] = -5.0f;
  for (int i = 160; i < 192; i++) x[i] = i < 176 ? 3.0f : -3.0f;
  block_q8_x ref[K / 32], got[K / 32];
  cpu_quantize_act_row_x(CPU_SIMD_LEVEL_SCALAR, x, ref, K);
  for (int j = 0; j < 31; j++) assert_int_equal(ref[0].qs[j], (int)lrintf(x[j]));
  assert_int_equal(ref[0].qs[15], 0);  /* -0.5 -> 0 */
  assert_int_equal(ref[0].qs[18], 2);  /* 2.5 -> 2 */
  assert_true(ref[1].d == 0.0f && ref[1].sum == 0);
  for (int j = 0; j < 32; j++) assert_int_equal(ref[3].qs[j], 0);
  assert_true(ref[3].sum == 0 && ref[3].d > 0.0f);
  int h0 = 0, h1 = 0;
  for (int j = 0; j < 16; j++) h0 += ref[2].qs[j], h1 += ref[2].qs[16 + j];
  assert_int_equal(ref[2].bsum[0], h0);
  assert_int_equal(ref[2].bsum[1], h1);
  assert_true(ref[4].sum == -32 * 127 && ref[4].bsum[0] == -16 * 127 && ref[4].bsum[1] == -16 * 127);
  assert_true(ref[5].sum == 0 && ref[5].bsum[0] == 16 * 127 && ref[5].bsum[1] == -16 * 127);
  for (int lvl = CPU_SIMD_LEVEL_AVX2; lvl <= (int)cpu_simd_level_detect(); lvl++) {
    memset(got, 0x55, sizeof got);
    cpu_quantize_act_row_x((enum cpu_simd_level)lvl, x, got, K);
    for (int b = 0; b < K / 32; b++) {
      assert_memory_equal(got[b].qs, ref[b].qs, 32);
      assert_int_equal(got[b].sum, ref[b].sum);
      assert_int_equal(got[b].bsum[0], ref[b].bsum[0]);
      assert_int_equal(got[b].bsum[1], ref[b].bsum[1]);
      assert_true(memcmp(&got[b].d, &ref[b].d, 4) == 0 && memcmp(&got[b].s, &ref[b].s, 4) == 0);
    }
  }
}

static void test_weights_without_layout_are_refused_and_still_work(void **state) {
  (void)state;
  const struct backend_ops *ops = backend_cpu_ops();
  size_t rb;
  uint8_t *data = random_weight(GGML_TYPE_Q4_1, 24, 64, &rb); /* 24 rows: not whole panels */
  struct backend_weight w = {.type = GGML_TYPE_Q4_1, .rows = 24, .cols = 64, .row_bytes = rb, .data = data};
  assert_int_equal(ops->pack_bytes(&w), 0);
  uint8_t dst[64];
  assert_int_equal(ops->pack(&w, dst), LLB_STATUS_INVALID_ARGUMENT);
  struct backend_weight k3 = {.type = GGML_TYPE_Q3_K, .rows = 16, .cols = 256, .row_bytes = 110, .data = data};
  assert_int_equal(ops->pack_bytes(&k3), 0); /* Q3_K: no packed form */
  struct backend_weight k4 = {.type = GGML_TYPE_Q4_K, .rows = 16, .cols = 32, .row_bytes = 18, .data = data};
  assert_int_equal(ops->pack_bytes(&k4), 0); /* not a whole super-block */
  /* a packed pointer on a weight without a layout is ignored: GGUF layout, ggml order */
  w.packed = dst;
  float x[64], out[24];
  for (int i = 0; i < 64; i++) x[i] = rndf();
  struct backend_ctx *c = make_ctx(1);
  const struct backend_weight *ws[1] = {&w};
  float *outs[1] = {out};
  assert_int_equal(ops->matmul(c, x, 1, ws, outs, 1), LLB_STATUS_OK);
  for (int col = 0; col < 24; col++) {
    double val, bound;
    output_exact(GGML_TYPE_Q4_1, data + (size_t)col * rb, x, 64, &val, &bound);
    assert_true(fabs(out[col] - val) <= bound);
  }
  ops->ctx_destroy(c);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_packed_matmul_equals_reference_on_every_level),
      cmocka_unit_test(test_zero_point_types_pack_whatever_their_scale),
      cmocka_unit_test(test_kernel_calls_of_every_row_count_give_each_row_its_own_bits),
      cmocka_unit_test(test_packed_kernels_at_saturated_quants_equal_scalar),
      cmocka_unit_test(test_matmul_of_weights_cut_into_unequal_chunks_equals_reference),
      cmocka_unit_test(test_packed_matmul_of_many_rows_equals_reference),
      cmocka_unit_test(test_many_row_kernels_give_each_row_its_own_bits),
      cmocka_unit_test(test_float_panels_equal_one_fma_chain_on_every_level),
      cmocka_unit_test(test_activation_quantizer_same_bytes_on_every_level),
      cmocka_unit_test(test_bf16_activations_round_as_ggml_on_every_level),
      cmocka_unit_test(test_weights_without_layout_are_refused_and_still_work),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
