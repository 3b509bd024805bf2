/* Activation quantization and dot products: one float order per type, scalar and AVX2.
 * Compiled with -ffp-contract=off so that only the explicit fmaf/_mm256_fmadd_ps fuse. */
#include "kernels/cpu/vec_dot.h"
#include "kernels/cpu/vec_dot_lowbit.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_HAVE_X86 1
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#else
#define CPU_HAVE_X86 0
#endif

enum ggml_type cpu_vec_dot_type(enum ggml_type w) {
  switch (w) {
  case GGML_TYPE_Q4_0:
  case GGML_TYPE_Q5_0:
  case GGML_TYPE_IQ4_NL:
  case GGML_TYPE_Q8_0: return GGML_TYPE_Q8_0;
  case GGML_TYPE_Q4_1:
  case GGML_TYPE_Q5_1: return GGML_TYPE_Q8_1;
  case GGML_TYPE_Q2_K:
  case GGML_TYPE_Q3_K:
  case GGML_TYPE_Q4_K:
  case GGML_TYPE_Q5_K:
  case GGML_TYPE_Q6_K:
  case GGML_TYPE_IQ4_XS: return GGML_TYPE_Q8_K;
  case GGML_TYPE_F16: return GGML_TYPE_F16;
  case GGML_TYPE_BF16: return GGML_TYPE_BF16;
  case GGML_TYPE_F32: return GGML_TYPE_F32;
  default: return GGML_TYPE_COUNT;
  }
}

size_t cpu_act_row_bytes(enum ggml_type w, int64_t k) {
  switch (cpu_vec_dot_type(w)) {
  case GGML_TYPE_Q8_0: return (size_t)(k / QK8_0) * sizeof(block_q8_0);
  case GGML_TYPE_Q8_1: return (size_t)(k / 32) * sizeof(block_q8_1);
  case GGML_TYPE_Q8_K: return (size_t)(k / QK_K) * sizeof(block_q8_K);
  case GGML_TYPE_F16:
  case GGML_TYPE_BF16: return (size_t)k * sizeof(uint16_t);
  case GGML_TYPE_F32: return (size_t)k * sizeof(float);
  default: return 0;
  }
}

/* ---------------------------------------------------------------- activation quantization */

float cpu_quantize_block_q8(const float *x, int8_t *qs, int *sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f;
  float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  if (!(id <= FLT_MAX)) id = 0.0f; /* amax < 127 / FLT_MAX: zeros, as packed.c's quantizer */
  int s = 0;
  for (int j = 0; j < 32; j++) {
    qs[j] = (int8_t)lrintf(x[j] * id);
    s += qs[j];
  }
  *sum = s;
  return d;
}

/* Q8_K as ggml's quantize_row_q8_K_ref: scale from the signed max, clamp at 127. */
static void quantize_block_q8_K(const float *x, block_q8_K *y) {
  float max = 0.0f, amax = 0.0f;
  for (int j = 0; j < QK_K; j++) {
    const float ax = fabsf(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    memset(y, 0, sizeof(*y));
    return;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < QK_K; j++) {
    const long v = lrintf(iscale * x[j]);
    y->qs[j] = (int8_t)(v < 127 ? v : 127);
  }
  for (int g = 0; g < QK_K / 16; g++) {
    int s = 0;
    for (int j = 0; j < 16; j++) s += y->qs[g * 16 + j];
    y->bsums[g] = (int16_t)s;
  }
  y->d = 1.0f / iscale;
}

void cpu_quantize_act_row(enum ggml_type w, const float *x, void *out, int64_t k) {
  switch (cpu_vec_dot_type(w)) {
  case GGML_TYPE_Q8_0: {
    block_q8_0 *y = out;
    for (int64_t b = 0; b < k / QK8_0; b++) {
      int sum;
      y[b].d = llb_fp32_to_fp16(cpu_quantize_block_q8(x + b * QK8_0, y[b].qs, &sum));
    }
    break;
  }
  case GGML_TYPE_Q8_1: {
    block_q8_1 *y = out;
    for (int64_t b = 0; b < k / 32; b++) {
      int sum;
      const float d = cpu_quantize_block_q8(x + b * 32, y[b].qs, &sum);
      y[b].d = llb_fp32_to_fp16(d);
      y[b].s = llb_fp32_to_fp16(d * (float)sum);
    }
    break;
  }
  case GGML_TYPE_Q8_K: {
    block_q8_K *y = out;
    for (int64_t b = 0; b < k / QK_K; b++) quantize_block_q8_K(x + b * QK_K, &y[b]);
    break;
  }
  case GGML_TYPE_F16: {
    uint16_t *y = out;
    for (int64_t i = 0; i < k; i++) y[i] = llb_fp32_to_fp16(x[i]);
    break;
  }
  case GGML_TYPE_BF16: {
    uint16_t *y = out;
    for (int64_t i = 0; i < k; i++) y[i] = llb_fp32_to_bf16(x[i]);
    break;
  }
  case GGML_TYPE_F32: memcpy(out, x, (size_t)k * sizeof(float)); break;
  default: break;
  }
}

/* ---------------------------------------------------------------- scalar dots */

/* The one lane-sum order of every 8-lane dot (ggml's hsum_float_8). */
static float hsum8(const float a[8]) {
  const float r0 = a[4] + a[0], r1 = a[5] + a[1], r2 = a[6] + a[2], r3 = a[7] + a[3];
  return (r0 + r2) + (r1 + r3);
}

/* Unpacks block weights to int8 in element order. */
static void unpack_q4_0(const block_q4_0 *x, int8_t q[32]) {
  for (int j = 0; j < 16; j++) {
    q[j] = (int8_t)((x->qs[j] & 0x0F) - 8);
    q[j + 16] = (int8_t)((x->qs[j] >> 4) - 8);
  }
}

static void unpack_q4_1(const block_q4_1 *x, int8_t q[32]) {
  for (int j = 0; j < 16; j++) {
    q[j] = (int8_t)(x->qs[j] & 0x0F);
    q[j + 16] = (int8_t)(x->qs[j] >> 4);
  }
}

/* Lane update of one 32-block: lane l += d * sum_{e in 4l..4l+3} q[e] * a[e]. */
static void lanes_block(float acc[8], float d, const int8_t *q, const int8_t *a) {
  for (int l = 0; l < 8; l++) {
    int s = 0;
    for (int e = 4 * l; e < 4 * l + 4; e++) s += q[e] * a[e];
    acc[l] = fmaf(d, (float)s, acc[l]);
  }
}

static void dot_q4_0_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q4_0 *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_0 *y = act[r];
    float acc[8] = {0};
    int8_t q[32];
    for (int64_t b = 0; b < k / 32; b++) {
      unpack_q4_0(&x[b], q);
      lanes_block(acc, llb_fp16_to_fp32(x[b].d) * llb_fp16_to_fp32(y[b].d), q, y[b].qs);
    }
    out[r] = hsum8(acc);
  }
}

static void dot_q4_1_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q4_1 *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_1 *y = act[r];
    float acc[8] = {0};
    float summs = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < k / 32; b++) {
      unpack_q4_1(&x[b], q);
      summs += llb_fp16_to_fp32(x[b].m) * llb_fp16_to_fp32(y[b].s);
      lanes_block(acc, llb_fp16_to_fp32(x[b].d) * llb_fp16_to_fp32(y[b].d), q, y[b].qs);
    }
    out[r] = hsum8(acc) + summs;
  }
}

static void dot_q8_0_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q8_0 *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_0 *y = act[r];
    float acc[8] = {0};
    for (int64_t b = 0; b < k / 32; b++)
      lanes_block(acc, llb_fp16_to_fp32(x[b].d) * llb_fp16_to_fp32(y[b].d), x[b].qs, y[b].qs);
    out[r] = hsum8(acc);
  }
}

/* 8-lane float dot of converted elements; `load` picks the element conversion. */
#define DEFINE_FLOAT_DOT_SCALAR(name, wtype, atype, wconv, aconv)                                \
  static void name(int64_t k, const void *w, const void *const *act, int n, float *out) {        \
    const wtype *x = w;                                                                           \
    for (int r = 0; r < n; r++) {                                                                 \
      const atype *y = act[r];                                                                    \
      float acc[8] = {0};                                                                         \
      const int64_t k8 = k - k % 8;                                                               \
      for (int64_t i = 0; i < k8; i++) acc[i % 8] = fmaf(wconv(x[i]), aconv(y[i]), acc[i % 8]);  \
      float s = hsum8(acc);                                                                       \
      for (int64_t i = k8; i < k; i++) s += wconv(x[i]) * aconv(y[i]);                            \
      out[r] = s;                                                                                 \
    }                                                                                             \
  }
#define CONV_ID(v) (v)
DEFINE_FLOAT_DOT_SCALAR(dot_f32_scalar, float, float, CONV_ID, CONV_ID)
DEFINE_FLOAT_DOT_SCALAR(dot_f16_scalar, uint16_t, uint16_t, llb_fp16_to_fp32, llb_fp16_to_fp32)
DEFINE_FLOAT_DOT_SCALAR(dot_bf16_scalar, uint16_t, uint16_t, llb_bf16_to_fp32, llb_bf16_to_fp32)

/* K-quants: 6-bit scale/min j of a q4_K/q5_K block (ggml get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *s, int *sc, int *mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* Sub-block j (32 weights) of a q4_K / q5_K super-block (qh: q5_K's fifth bits, NULL for q4_K)
 * against its q8_K activations: adds sc_j times the exact sum to *isum and m_j times the
 * activations' sums to *imin (integers: any grouping of the sub-blocks gives the same sums). */
static inline void k45_sub_block(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, const block_q8_K *y,
                                 int j, int32_t *isum, int32_t *imin) {
  int sc, mn;
  scale_min_k4(j, scales, &sc, &mn);
  *imin += mn * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
  const uint8_t *q = qs + 32 * (j / 2);
  const int shift = (j % 2) * 4;
  int32_t s = 0;
  for (int l = 0; l < 32; l++) {
    int v = (q[l] >> shift) & 0x0F;
    if (qh) v += ((qh[l] >> j) & 1) << 4;
    s += v * y->qs[32 * j + l];
  }
  *isum += sc * s;
}

/* q4_K/q5_K: w = d*sc_j*q - dmin*m_j per sub-block j of 32; sumf += d*d8*isum - dmin*d8*imin. */
static float dot_q45_K_block(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, float d,
                             float dmin, const block_q8_K *y) {
  int32_t isum = 0, imin = 0;
  for (int j = 0; j < 8; j++) k45_sub_block(scales, qs, qh, y, j, &isum, &imin);
  return (y->d * d) * (float)isum - (y->d * dmin) * (float)imin;
}

/* q4_K in the order of ggml's x86 repacked kernels (arch/x86/repack.cpp ggml_gemv/gemm_q4_K_8x8_q8_K,
 * which llama.cpp runs for every Q4_K matrix of a multiple of 8 rows on AVX2 and AVX-512): per
 * super-block the exact int32 isum = sum_j sc_j * (q . a)_j and imin = sum_j m_j * (bsums of j's
 * halves), then acc = fma(isum, d * d8, acc), acc_min = fma(imin, dmin * d8, acc_min); the
 * output is acc - acc_min. */
static void dot_q4_K_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q4_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++) {
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < 8; j++) k45_sub_block(x[b].scales, x[b].qs, NULL, &y[b], j, &isum, &imin);
      acc = fmaf((float)isum, llb_fp16_to_fp32(x[b].d) * y[b].d, acc);
      acc_min = fmaf((float)imin, llb_fp16_to_fp32(x[b].dmin) * y[b].d, acc_min);
    }
    out[r] = acc - acc_min;
  }
}

/* q4_K in the order of ggml's x86 repacked gemm (ggml_gemm_q4_K_8x8_q8_K, rows in groups of
 * four): as dot_q4_K_scalar, but the fmas take a pair of 32-weight sub-blocks at a time, four
 * per super-block: acc = fma(sc_2p * S_2p + sc_2p+1 * S_2p+1, d * d8, acc), the mins likewise. */
static void dot_q4_K_gemm_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q4_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++) {
      const float dd = llb_fp16_to_fp32(x[b].d) * y[b].d, dm = llb_fp16_to_fp32(x[b].dmin) * y[b].d;
      for (int p = 0; p < 4; p++) {
        int32_t isum = 0, imin = 0;
        for (int j = 2 * p; j < 2 * p + 2; j++) k45_sub_block(x[b].scales, x[b].qs, NULL, &y[b], j, &isum, &imin);
        acc = fmaf((float)isum, dd, acc);
        acc_min = fmaf((float)imin, dm, acc_min);
      }
    }
    out[r] = acc - acc_min;
  }
}

/* q6_K in the order of ggml's tiled K-quant matmul (ggml-cpu/tiled, which llama.cpp runs for
 * steps of 8 or more rows of a matrix it does not repack): per super-block the exact
 * isum = sum_s sc_s * (q . a - 32 * bsums_s), then out = fma(isum * d, d8, out) (its epilogue's
 * _mm512_mul_ps, then _mm512_mul_ps and _mm512_add_ps, which GCC contracts to an fma in
 * ggml's -O3 -march=native build). */
static void dot_q6_K_tiled_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q6_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float acc = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++) {
      const uint8_t *ql = x[b].ql, *qh = x[b].qh;
      int32_t isum = 0;
      for (int half = 0; half < 2; half++, ql += 64, qh += 32)
        for (int quarter = 0; quarter < 4; quarter++)
          for (int h = 0; h < 2; h++) { /* the 16-weight sub-block s = 8 half + 2 quarter + h */
            const int s = 8 * half + 2 * quarter + h;
            int32_t dot = 0;
            for (int l = 16 * h; l < 16 * h + 16; l++) {
              const int q = ((ql[l + 32 * (quarter & 1)] >> (4 * (quarter >> 1))) & 0x0F) |
                            (((qh[l] >> (2 * quarter)) & 3) << 4);
              dot += q * y[b].qs[128 * half + 32 * quarter + l];
            }
            isum += x[b].scales[s] * (dot - 32 * y[b].bsums[s]);
          }
      acc = fmaf((float)isum * llb_fp16_to_fp32(x[b].d), y[b].d, acc);
    }
    out[r] = acc;
  }
}

static void dot_q5_K_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q5_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float sumf = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++)
      sumf += dot_q45_K_block(x[b].scales, x[b].qs, x[b].qh, llb_fp16_to_fp32(x[b].d),
                              llb_fp16_to_fp32(x[b].dmin), &y[b]);
    out[r] = sumf;
  }
}

/* q6_K: w = d * sc * (q - 32), q 6-bit, a scale per 16 (layout of dequantize_row_q6_K), in
 * ggml's AVX2 order (ggml_vec_dot_q6_K_q8_K): per super-block, 8 exact int32 lanes, lane l
 * holding sc * q * a of elements 4l..4l+3 of each 32-weight group (the group's half picks the
 * scale) minus 32 * (sc[2l] * bsums[2l] + sc[2l+1] * bsums[2l+1]); then
 * lane = fma(y.d * d, lane_int, lane); hsum8 at the end. */
static void dot_q6_K_scalar(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q6_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float acc[8] = {0};
    for (int64_t b = 0; b < k / QK_K; b++) {
      uint8_t q[QK_K]; /* unsigned 6-bit quants in element order */
      const uint8_t *ql = x[b].ql, *qh = x[b].qh;
      for (int half = 0; half < 2; half++) {
        uint8_t *o = q + 128 * half;
        for (int l = 0; l < 32; l++) {
          o[l] = (uint8_t)((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
          o[l + 32] = (uint8_t)((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
          o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
        ql += 64;
        qh += 32;
      }
      const float d = y[b].d * llb_fp16_to_fp32(x[b].d);
      for (int l = 0; l < 8; l++) {
        int32_t lane = 0;
        for (int g = 0; g < 8; g++) {
          int32_t s = 0;
          for (int e = 4 * l; e < 4 * l + 4; e++) s += q[32 * g + e] * y[b].qs[32 * g + e];
          lane += x[b].scales[2 * g + (l >= 4)] * s;
        }
        lane -= 32 * (x[b].scales[2 * l] * y[b].bsums[2 * l] + x[b].scales[2 * l + 1] * y[b].bsums[2 * l + 1]);
        acc[l] = fmaf(d, (float)lane, acc[l]);
      }
    }
    out[r] = hsum8(acc);
  }
}

/* ---------------------------------------------------------------- AVX2 dots */
#if CPU_HAVE_X86

AVX2_TARGET static inline float hsum8_avx(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31). */
AVX2_TARGET static inline __m256i nibbles32(const uint8_t *qs) {
  const __m128i t = _mm_loadu_si128((const __m128i *)qs);
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

AVX2_TARGET static inline float fp16_avx(uint16_t h) { return _cvtsh_ss(h); }

/* 8 int32 lanes of sums of 4 products, x unsigned bytes, y signed bytes, as float. */
AVX2_TARGET static inline __m256 lanes_us(__m256i xu, __m256i ys) {
  const __m256i p16 = _mm256_maddubs_epi16(xu, ys);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* Same for signed x (ggml mul_sum_i8_pairs_float). */
AVX2_TARGET static inline __m256 lanes_ss(__m256i xs, __m256i ys) {
  return lanes_us(_mm256_sign_epi8(xs, xs), _mm256_sign_epi8(ys, xs));
}

#define DOT_ROWS_SWITCH(fn)                                                                       \
  switch (n) {                                                                                    \
  case 1: fn(k, w, act, 1, out); break;                                                           \
  case 2: fn(k, w, act, 2, out); break;                                                           \
  case 3: fn(k, w, act, 3, out); break;                                                           \
  default: fn(k, w, act, 4, out); break;                                                          \
  }

AVX2_TARGET static inline __attribute__((always_inline)) void
dot_q4_1_avx2_n(int64_t k, const void *w, const void *const *act, const int n, float *out) {
  const block_q4_1 *x = w;
  __m256 acc[CPU_DOT_MAX_ROWS];
  float summs[CPU_DOT_MAX_ROWS];
  for (int r = 0; r < n; r++) {
    acc[r] = _mm256_setzero_ps();
    summs[r] = 0.0f;
  }
  for (int64_t b = 0; b < k / 32; b++) {
    const float dx = fp16_avx(x[b].d), mx = fp16_avx(x[b].m);
    const __m256i qx = nibbles32(x[b].qs);
    for (int r = 0; r < n; r++) {
      const block_q8_1 *y = (const block_q8_1 *)act[r] + b;
      summs[r] += mx * fp16_avx(y->s);
      const __m256 d = _mm256_set1_ps(dx * fp16_avx(y->d));
      const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
      acc[r] = _mm256_fmadd_ps(d, lanes_us(qx, qy), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) out[r] = hsum8_avx(acc[r]) + summs[r];
}

AVX2_TARGET static void dot_q4_1_avx2(int64_t k, const void *w, const void *const *act, int n,
                                      float *out) {
  DOT_ROWS_SWITCH(dot_q4_1_avx2_n)
}

/* Q4_0 and Q8_0: signed weights, Q8_0 activations. */
AVX2_TARGET static inline __attribute__((always_inline)) void
dot_q_0_avx2_n(int64_t k, const void *w, const void *const *act, const int n, float *out,
               const int is_q4) {
  __m256 acc[CPU_DOT_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; b++) {
    float dx;
    __m256i qx;
    if (is_q4) {
      const block_q4_0 *x = (const block_q4_0 *)w + b;
      dx = fp16_avx(x->d);
      qx = _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8));
    } else {
      const block_q8_0 *x = (const block_q8_0 *)w + b;
      dx = fp16_avx(x->d);
      qx = _mm256_loadu_si256((const __m256i *)x->qs);
    }
    for (int r = 0; r < n; r++) {
      const block_q8_0 *y = (const block_q8_0 *)act[r] + b;
      const __m256 d = _mm256_set1_ps(dx * fp16_avx(y->d));
      const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
      acc[r] = _mm256_fmadd_ps(d, lanes_ss(qx, qy), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) out[r] = hsum8_avx(acc[r]);
}

AVX2_TARGET static inline __attribute__((always_inline)) void
dot_q4_0_avx2_n(int64_t k, const void *w, const void *const *act, const int n, float *out) {
  dot_q_0_avx2_n(k, w, act, n, out, 1);
}
AVX2_TARGET static inline __attribute__((always_inline)) void
dot_q8_0_avx2_n(int64_t k, const void *w, const void *const *act, const int n, float *out) {
  dot_q_0_avx2_n(k, w, act, n, out, 0);
}
AVX2_TARGET static void dot_q4_0_avx2(int64_t k, const void *w, const void *const *act, int n,
                                      float *out) {
  DOT_ROWS_SWITCH(dot_q4_0_avx2_n)
}
AVX2_TARGET static void dot_q8_0_avx2(int64_t k, const void *w, const void *const *act, int n,
                                      float *out) {
  DOT_ROWS_SWITCH(dot_q8_0_avx2_n)
}

AVX2_TARGET static inline __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }
AVX2_TARGET static inline __m256 load8_f16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
AVX2_TARGET static inline __m256 load8_bf16(const uint16_t *p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

#define DEFINE_FLOAT_DOT_AVX2(name, wtype, atype, wload, aload, wconv, aconv)                    \
  AVX2_TARGET static void name(int64_t k, const void *w, const void *const *act, int n,           \
                               float *out) {                                                      \
    const wtype *x = w;                                                                           \
    const int64_t k8 = k - k % 8;                                                                 \
    for (int r = 0; r < n; r++) {                                                                 \
      const atype *y = act[r];                                                                    \
      __m256 acc = _mm256_setzero_ps();                                                           \
      for (int64_t i = 0; i < k8; i += 8) acc = _mm256_fmadd_ps(wload(x + i), aload(y + i), acc); \
      float s = hsum8_avx(acc);                                                                   \
      for (int64_t i = k8; i < k; i++) s += wconv(x[i]) * aconv(y[i]);                            \
      out[r] = s;                                                                                 \
    }                                                                                             \
  }
DEFINE_FLOAT_DOT_AVX2(dot_f32_avx2, float, float, load8_f32, load8_f32, CONV_ID, CONV_ID)
DEFINE_FLOAT_DOT_AVX2(dot_f16_avx2, uint16_t, uint16_t, load8_f16, load8_f16, llb_fp16_to_fp32,
                      llb_fp16_to_fp32)
DEFINE_FLOAT_DOT_AVX2(dot_bf16_avx2, uint16_t, uint16_t, load8_bf16, load8_bf16, llb_bf16_to_fp32,
                      llb_bf16_to_fp32)

/* Tile kernel for F16 (the vision encoder's weights): two weight rows x n activation rows
 * share each load; per output exactly dot_f16_avx2's float order (one fma chain in index
 * order, hsum8_avx, then the tail in scalar), so bit-identical to it. */
AVX2_TARGET static inline __attribute__((always_inline)) void
gemm_f16_avx2_n(int64_t k, const uint16_t *x0, const uint16_t *x1, const void *const *act, const int n, float *s0,
                float *s1) {
  const int64_t k8 = k - k % 8;
  __m256 a0[CPU_DOT_MAX_ROWS], a1[CPU_DOT_MAX_ROWS];
  for (int r = 0; r < n; r++) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k8; i += 8) {
    const __m256 w0 = load8_f16(x0 + i), w1 = load8_f16(x1 + i);
    for (int r = 0; r < n; r++) {
      const __m256 y = load8_f16((const uint16_t *)act[r] + i);
      a0[r] = _mm256_fmadd_ps(w0, y, a0[r]);
      a1[r] = _mm256_fmadd_ps(w1, y, a1[r]);
    }
  }
  for (int r = 0; r < n; r++) {
    const uint16_t *y = act[r];
    float t0 = hsum8_avx(a0[r]), t1 = hsum8_avx(a1[r]);
    for (int64_t i = k8; i < k; i++) {
      t0 += llb_fp16_to_fp32(x0[i]) * llb_fp16_to_fp32(y[i]);
      t1 += llb_fp16_to_fp32(x1[i]) * llb_fp16_to_fp32(y[i]);
    }
    s0[r] = t0, s1[r] = t1;
  }
}

AVX2_TARGET static void gemm_f16_avx2(int64_t k, const void *w, size_t w_stride, int n_cols, const void *const *act,
                                      int n_rows, float *out, int64_t out_stride) {
  for (int c = 0; c < n_cols; c += 2) {
    const uint16_t *x0 = (const uint16_t *)((const uint8_t *)w + (size_t)c * w_stride);
    const uint16_t *x1 = c + 1 < n_cols ? (const uint16_t *)((const uint8_t *)w + (size_t)(c + 1) * w_stride) : x0;
    float s0[CPU_DOT_MAX_ROWS], s1[CPU_DOT_MAX_ROWS];
    switch (n_rows) {
    case 1: gemm_f16_avx2_n(k, x0, x1, act, 1, s0, s1); break;
    case 2: gemm_f16_avx2_n(k, x0, x1, act, 2, s0, s1); break;
    case 3: gemm_f16_avx2_n(k, x0, x1, act, 3, s0, s1); break;
    default: gemm_f16_avx2_n(k, x0, x1, act, 4, s0, s1); break;
    }
    for (int r = 0; r < n_rows; r++) {
      out[(int64_t)r * out_stride + c] = s0[r];
      if (c + 1 < n_cols) out[(int64_t)r * out_stride + c + 1] = s1[r];
    }
  }
}

/* Tile kernels (cpu_gemm_fn) for Q4_0, Q4_1, Q8_0: per output exactly the float order of
 * dot_q4_1_avx2_n / dot_q_0_avx2_n; NC weight rows x NR activation rows share loads. */
enum gemm_kind { GEMM_KIND_Q4_0, GEMM_KIND_Q4_1, GEMM_KIND_Q8_0 };

/* Body of a tile of NC weight rows x NR activation rows; arrays sized exactly so that the
 * compiler keeps the accumulators in registers. */
#define GEMM_TILE_BODY(NC, NR)                                                                  \
  do {                                                                                          \
    __m256 acc[NC][NR];                                              \
    float summs[NC][NR];                                             \
    _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                                          \
      _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                      \
        acc[c][r] = _mm256_setzero_ps();                                                          \
        summs[c][r] = 0.0f;                                                                       \
      }                                                                                           \
    const size_t wb = kind == GEMM_KIND_Q4_0 ? sizeof(block_q4_0)                                 \
                      : kind == GEMM_KIND_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q8_0);         \
    const size_t ab = kind == GEMM_KIND_Q4_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);           \
    for (int64_t b = 0; b < k / 32; b++) {                                                        \
      float dy[NR], sy[NR];                                           \
      const int8_t *qy[NR];                                                         \
      _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                      \
        const uint8_t *y = (const uint8_t *)act[r] + (size_t)b * ab;                              \
        uint16_t h;                                                                               \
        memcpy(&h, y, 2);                                                                         \
        dy[r] = fp16_avx(h);                                                                      \
        if (kind == GEMM_KIND_Q4_1) {                                                             \
          memcpy(&h, y + 2, 2);                                                                   \
          sy[r] = fp16_avx(h);                                                                    \
          qy[r] = (const int8_t *)(y + 4);                                                        \
        } else {                                                                                  \
          qy[r] = (const int8_t *)(y + 2);                                                        \
        }                                                                                         \
      }                                                                                           \
      _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) {                                      \
        const uint8_t *x = w + (size_t)c * ws + (size_t)b * wb;                                   \
        uint16_t h;                                                                               \
        memcpy(&h, x, 2);                                                                         \
        const float dx = fp16_avx(h);                                                             \
        __m256i qx;                                                                               \
        if (kind == GEMM_KIND_Q4_1) {                                                             \
          memcpy(&h, x + 2, 2);                                                                   \
          const float mx = fp16_avx(h);                                                           \
          _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) summs[c][r] += mx * sy[r];         \
          qx = nibbles32(x + 4);                                                                  \
        } else if (kind == GEMM_KIND_Q4_0) {                                                      \
          qx = _mm256_sub_epi8(nibbles32(x + 2), _mm256_set1_epi8(8));                            \
        } else {                                                                                  \
          qx = _mm256_loadu_si256((const __m256i *)(x + 2));                                      \
        }                                                                                         \
        const __m256i ax = kind == GEMM_KIND_Q4_1 ? qx : _mm256_sign_epi8(qx, qx);                \
        _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                    \
          const __m256 d = _mm256_set1_ps(dx * dy[r]);                                            \
          __m256i y = _mm256_loadu_si256((const __m256i *)qy[r]);                                 \
          if (kind != GEMM_KIND_Q4_1) y = _mm256_sign_epi8(y, qx);                                \
          acc[c][r] = _mm256_fmadd_ps(d, lanes_us(ax, y), acc[c][r]);                             \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
    _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                                          \
      _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                      \
        const float s = hsum8_avx(acc[c][r]);                                                     \
        out[(int64_t)r * os + c] = kind == GEMM_KIND_Q4_1 ? s + summs[c][r] : s;                  \
      } \
  } while (0)

AVX2_TARGET static inline __attribute__((always_inline)) void
gemm_tile_avx2(int64_t k, const uint8_t *w, size_t ws, const void *const *act, float *out,
               int64_t os, const int NC, const int NR, const enum gemm_kind kind) {
  if (NC == 4 && NR == 1) GEMM_TILE_BODY(4, 1);
  else if (NC == 4 && NR == 2) GEMM_TILE_BODY(4, 2);
  else if (NC == 2 && NR == 3) GEMM_TILE_BODY(2, 3);
  else if (NC == 2 && NR == 4) GEMM_TILE_BODY(2, 4);
  else if (NC == 1 && NR == 1) GEMM_TILE_BODY(1, 1);
  else if (NC == 1 && NR == 2) GEMM_TILE_BODY(1, 2);
  else if (NC == 1 && NR == 3) GEMM_TILE_BODY(1, 3);
  else GEMM_TILE_BODY(1, 4);
}

/* Dispatch of one call: columns in groups of 4 (1-2 rows) or 2 (3-4 rows: 8 accumulators
 * stay in registers), the rest one by one. */
#define GEMM_TILE_CASE(NC, NR, kind) gemm_tile_avx2(k, wp, w_stride, act, o, out_stride, NC, NR, kind)
#define DEFINE_GEMM_AVX2(name, kind)                                                              \
  AVX2_TARGET static void name(int64_t k, const void *w, size_t w_stride, int n_cols,              \
                               const void *const *act, int n_rows, float *out, int64_t out_stride) { \
    const int group = n_rows <= 1 ? 1 : n_rows <= 2 ? 4 : 2;                                                      \
    for (int c = 0; c < n_cols;) {                                                                \
      const uint8_t *wp = (const uint8_t *)w + (size_t)c * w_stride;                              \
      float *o = out + c;                                                                         \
      const int nc = n_cols - c >= group ? group : 1;                                             \
      if (nc == 4) {                                                                              \
        if (n_rows == 1) GEMM_TILE_CASE(4, 1, kind);                                              \
        else GEMM_TILE_CASE(4, 2, kind);                                                          \
      } else if (nc == 2) {                                                                       \
        if (n_rows == 3) GEMM_TILE_CASE(2, 3, kind);                                              \
        else GEMM_TILE_CASE(2, 4, kind);                                                          \
      } else {                                                                                    \
        switch (n_rows) {                                                                         \
        case 1: GEMM_TILE_CASE(1, 1, kind); break;                                                \
        case 2: GEMM_TILE_CASE(1, 2, kind); break;                                                \
        case 3: GEMM_TILE_CASE(1, 3, kind); break;                                                \
        default: GEMM_TILE_CASE(1, 4, kind); break;                                               \
        }                                                                                         \
      }                                                                                           \
      c += nc;                                                                                    \
    }                                                                                             \
  }
DEFINE_GEMM_AVX2(gemm_q4_0_avx2, GEMM_KIND_Q4_0)
DEFINE_GEMM_AVX2(gemm_q4_1_avx2, GEMM_KIND_Q4_1)
DEFINE_GEMM_AVX2(gemm_q8_0_avx2, GEMM_KIND_Q8_0)

AVX2_TARGET static void fp32_to_fp16_avx2(const float *x, uint16_t *y, int64_t n) {
  const int64_t n8 = n - n % 8;
  for (int64_t i = 0; i < n8; i += 8)
    _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (int64_t i = n8; i < n; i++) y[i] = llb_fp32_to_fp16(x[i]);
}
#endif /* CPU_HAVE_X86 */

/* ---------------------------------------------------------------- selection */

cpu_vec_dot_fn cpu_vec_dot_select(enum ggml_type w, enum cpu_simd_level level) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
#if CPU_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    switch (w) {
    case GGML_TYPE_Q4_0: return dot_q4_0_avx2;
    case GGML_TYPE_Q4_1: return dot_q4_1_avx2;
    case GGML_TYPE_Q8_0: return dot_q8_0_avx2;
    case GGML_TYPE_F32: return dot_f32_avx2;
    case GGML_TYPE_F16: return dot_f16_avx2;
    case GGML_TYPE_BF16: return dot_bf16_avx2;
    default: break; /* K-quants: the shared exact-integer implementation below */
    }
  }
#endif
  switch (w) {
  case GGML_TYPE_Q4_0: return dot_q4_0_scalar;
  case GGML_TYPE_Q4_1: return dot_q4_1_scalar;
  case GGML_TYPE_Q8_0: return dot_q8_0_scalar;
  case GGML_TYPE_Q4_K: return dot_q4_K_scalar;
  case GGML_TYPE_Q5_K: return dot_q5_K_scalar;
  case GGML_TYPE_Q6_K: return dot_q6_K_scalar;
  case GGML_TYPE_F32: return dot_f32_scalar;
  case GGML_TYPE_F16: return dot_f16_scalar;
  case GGML_TYPE_BF16: return dot_bf16_scalar;
  default: return cpu_vec_dot_lowbit_select(w); /* one portable path on every level */
  }
}

cpu_vec_dot_fn cpu_vec_dot_select_llamacpp(enum ggml_type w, enum cpu_simd_level level, int32_t n_rows,
                                           int32_t row0) {
  switch (w) {
  case GGML_TYPE_Q4_K: /* repacked: gemm for full groups of four rows, gemv for the rest */
    return row0 + 4 <= n_rows - n_rows % 4 ? dot_q4_K_gemm_scalar : dot_q4_K_scalar;
  case GGML_TYPE_Q6_K: /* tiled from 8 rows a step */
    return n_rows >= 8 ? dot_q6_K_tiled_scalar : dot_q6_K_scalar;
  default: return cpu_vec_dot_select(w, level);
  }
}

cpu_gemm_fn cpu_gemm_select(enum ggml_type w, enum cpu_simd_level level) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
#if CPU_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    switch (w) {
    case GGML_TYPE_Q4_0: return gemm_q4_0_avx2;
    case GGML_TYPE_Q4_1: return gemm_q4_1_avx2;
    case GGML_TYPE_Q8_0: return gemm_q8_0_avx2;
    case GGML_TYPE_F16: return gemm_f16_avx2;
    default: break;
    }
  }
#endif
  (void)w;
  return NULL;
}

void cpu_fp32_to_fp16_row(enum cpu_simd_level level, const float *x, uint16_t *y, int64_t n) {
#if CPU_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    fp32_to_fp16_avx2(x, y, n);
    return;
  }
#endif
  (void)level;
  for (int64_t i = 0; i < n; i++) y[i] = llb_fp32_to_fp16(x[i]);
}

/* ---------------------------------------------------------------- ggml's expf, SwiGLU */

/* Constants of ggml_v_expf (vec.h): shift 1.5*2^23, log2 e, ln2 in two parts, polynomial. */
#define EXPG_SHIFT 0x1.8p23f
#define EXPG_LOG2E 0x1.715476p+0f
#define EXPG_LN2_HI 0x1.62e4p-1f
#define EXPG_LN2_LO 0x1.7f7d1cp-20f
#define EXPG_C5 0x1.0e4020p-7f
#define EXPG_C4 0x1.573e2ep-5f
#define EXPG_C3 0x1.555e66p-3f
#define EXPG_C2 0x1.fffdb6p-2f
#define EXPG_C1 0x1.ffffecp-1f

float cpu_expf_ggml(float x) {
  const float z = fmaf(x, EXPG_LOG2E, EXPG_SHIFT);
  const float n = z - EXPG_SHIFT;
  const float b = fmaf(-n, EXPG_LN2_LO, fmaf(-n, EXPG_LN2_HI, x));
  const float u = b * b;
  const float j = fmaf(fmaf(fmaf(EXPG_C5, b, EXPG_C4), u, fmaf(EXPG_C3, b, EXPG_C2)), u,
                       fmaf(EXPG_C1, b, 1.0f));
  if (n != n) return n; /* NaN in, NaN out (scalef of NaN) */
  if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return ldexpf(j, (int)n); /* scalef: one rounding, also into subnormals */
}

float cpu_reduce16(const float v[16]) {
  float t[8];
  for (int i = 0; i < 8; i++) t[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; i++) t[i] = t[i + 4] + t[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

#if CPU_HAVE_X86
/* cpu_expf_ggml's last step on 8 lanes whose 2^n is not a normal float (n < -125, n > 126), or
 * that take the NaN or |n| > 192 rule: ldexpf(j, n) rounds j * 2^n once (glibc's scalbnf, also
 * into subnormals and to inf), and so does (j * 2^n1) * 2^n2 with n1 = n clamped to [-125, 126]:
 * j (0.7 .. 1.42) times 2^n1 is an exact normal float, and the second product, 2^n2 a normal
 * float for |n| <= 192, rounds once. */
AVX2_TARGET static __m256 expf_ggml_scale_avx2(__m256 n, __m256 j) {
  const __m256 n1 = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-125.0f)), _mm256_set1_ps(126.0f));
  const __m256 n2 = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(n, n1), _mm256_set1_ps(-126.0f)),
                                  _mm256_set1_ps(127.0f)); /* clamped only where |n| > 192 or NaN */
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n1), bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n2), bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
  const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 flush = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
  y = _mm256_blendv_ps(y, flush, big);
  return _mm256_blendv_ps(y, n, _mm256_cmp_ps(n, n, _CMP_UNORD_Q)); /* NaN in, NaN out */
}

/* 8 lanes of cpu_expf_ggml: the same operations lane by lane, so the same bits. */
AVX2_TARGET static inline __m256 expf_ggml_avx2(__m256 x) {
  const __m256 r = _mm256_set1_ps(EXPG_SHIFT);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(EXPG_LOG2E), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPG_LN2_LO),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPG_LN2_HI), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(EXPG_C5), b, _mm256_set1_ps(EXPG_C4)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(EXPG_C3), b, _mm256_set1_ps(EXPG_C2))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(EXPG_C1), b, _mm256_set1_ps(1.0f)));
  /* in range (NaN compares false): -125 <= n <= 126 */
  const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-125.0f), _CMP_GE_OQ),
                                  _mm256_cmp_ps(n, _mm256_set1_ps(126.0f), _CMP_LE_OQ));
  if (_mm256_movemask_ps(ok) != 0xFF) return expf_ggml_scale_avx2(n, j);
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(j, _mm256_castsi256_ps(e)); /* exact: the product is a normal float */
}

/* Lanes i < m of 8 set (for maskload / maskstore: a row's last 1-7 elements). */
AVX2_TARGET static inline __m256i lanes_below_avx2(int64_t m) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2_TARGET static void exp_sub_row_avx2(const float *x, float sub, float *y, int64_t n) {
  int64_t i = 0;
  const __m256 s = _mm256_set1_ps(sub);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf_ggml_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  if (i < n) { /* the tail in masked lanes (a causal softmax row's last 1-7 keys) */
    const __m256i m = lanes_below_avx2(n - i);
    _mm256_maskstore_ps(y + i, m, expf_ggml_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s)));
  }
}

AVX2_TARGET static inline __m256 swiglu8_avx2(__m256 x, __m256 u) {
  const __m256 e = expf_ggml_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

AVX2_TARGET static void swiglu_row_avx2(const float *g, const float *u, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, swiglu8_avx2(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    const __m256i m = lanes_below_avx2(n - i);
    _mm256_maskstore_ps(y + i, m, swiglu8_avx2(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
  }
}

/* 16 lanes of cpu_expf_ggml: expf_ggml_avx2's operations lane by lane (its
 * expf_ggml_scale_avx2 on each half where a lane is out of range), so the same bits. */
AVX512_TARGET static inline __m512 expf_ggml_avx512(__m512 x) {
  const __m512 r = _mm512_set1_ps(EXPG_SHIFT);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(EXPG_LOG2E), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPG_LN2_LO),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPG_LN2_HI), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(EXPG_C5), b, _mm512_set1_ps(EXPG_C4)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(EXPG_C3), b, _mm512_set1_ps(EXPG_C2))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(EXPG_C1), b, _mm512_set1_ps(1.0f)));
  /* in range (NaN compares false): -125 <= n <= 126 */
  const __mmask16 ok = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-125.0f), _CMP_GE_OQ) &
                       _mm512_cmp_ps_mask(n, _mm512_set1_ps(126.0f), _CMP_LE_OQ);
  if (ok != 0xFFFF) {
    const __m256 lo = expf_ggml_scale_avx2(_mm512_castps512_ps256(n), _mm512_castps512_ps256(j));
    const __m256 hi = expf_ggml_scale_avx2(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(n), 1)),
                                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(j), 1)));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
  }
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(j, _mm512_castsi512_ps(e)); /* exact: the product is a normal float */
}

AVX512_TARGET static void exp_sub_row_avx512(const float *x, float sub, float *y, int64_t n) {
  int64_t i = 0;
  const __m512 s = _mm512_set1_ps(sub);
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, expf_ggml_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s)));
  if (i < n) { /* the tail in masked lanes */
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, expf_ggml_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
  }
}

AVX512_TARGET static inline __m512 swiglu16_avx512(__m512 x, __m512 u) {
  const __m512 e = expf_ggml_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

AVX512_TARGET static void swiglu_row_avx512(const float *g, const float *u, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, swiglu16_avx512(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, swiglu16_avx512(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
  }
}
#endif

void cpu_exp_sub_row(enum cpu_simd_level level, const float *x, float sub, float *y, int64_t n) {
#if CPU_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) {
    exp_sub_row_avx512(x, sub, y, n);
    return;
  }
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    exp_sub_row_avx2(x, sub, y, n);
    return;
  }
#endif
  (void)level;
  for (int64_t i = 0; i < n; i++) y[i] = cpu_expf_ggml(x[i] - sub);
}

void cpu_swiglu_row(enum cpu_simd_level level, const float *g, const float *u, float *y, int64_t n) {
#if CPU_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) {
    swiglu_row_avx512(g, u, y, n);
    return;
  }
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    swiglu_row_avx2(g, u, y, n);
    return;
  }
#endif
  (void)level;
  for (int64_t i = 0; i < n; i++) y[i] = (g[i] / (1.0f + cpu_expf_ggml(0.0f - g[i]))) * u[i];
}

/* ---------------------------------------------------------------- ggml's GELU tables */

/* ggml_table_gelu_f16 and ggml_table_gelu_quick_f16 (ggml-cpu, filled once at ggml_cpu_init):
 * fp16(gelu(v)) for every fp16 value v. The tanh one with the one contraction GCC makes in
 * ggml's -O3 build of ggml_gelu_f32: 1 + GELU_COEF_A * x * x becomes fma(GELU_COEF_A * x, x,
 * 1) (this file is built with -ffp-contract=off, so the fma is written out; without it one
 * entry of the 65536 differs). The quick one has no product to contract. */
static uint16_t gelu_tables[2][1 << 16];
static pthread_once_t gelu_tables_once = PTHREAD_ONCE_INIT;

static void gelu_tables_init(void) {
  const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f, quick = -1.702f;
  for (uint32_t i = 0; i < (1u << 16); i++) {
    const float x = llb_fp16_to_fp32((uint16_t)i);
    gelu_tables[CPU_GELU_TANH][i] =
        llb_fp32_to_fp16(0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * fmaf(coef_a * x, x, 1.0f))));
    gelu_tables[CPU_GELU_QUICK][i] = llb_fp32_to_fp16(x * (1.0f / (1.0f + expf(quick * x))));
  }
}

/* One element of cpu_gelu_row (u: its factor, or NULL). TANH: the table only strictly between
 * -10 and 10 (ggml_vec_gelu_f32 / ggml_vec_geglu_f32), +0 at or below -10 whatever u. */
static inline float gelu_one(enum cpu_gelu_kind kind, const uint16_t *table, float x, const float *u) {
  if (kind == CPU_GELU_TANH && x <= -10.0f) return 0.0f;
  const float g = kind == CPU_GELU_TANH && x >= 10.0f ? x : llb_fp16_to_fp32(table[llb_fp32_to_fp16(x)]);
  return u ? g * *u : g;
}

#if CPU_HAVE_X86
/* gelu_one of 8 lanes (u: 8 factors, or NULL): x rounded to fp16 by F16C (llb_fp32_to_fp16's
 * bits, NaN included), the 16-bit entries gathered as the 32-bit words holding them (index
 * h / 2, then the half h % 2: no read past the table), widened by F16C. */
AVX2_TARGET static inline __m256 gelu8_avx2(enum cpu_gelu_kind kind, const uint16_t *table, __m256 x, const float *u) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  const __m256i w = _mm256_i32gather_epi32((const int *)(const void *)table, _mm256_srli_epi32(h, 1), 4);
  const __m256i shift = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(1)), 4);
  const __m256i e = _mm256_and_si256(_mm256_srlv_epi32(w, shift), _mm256_set1_epi32(0xFFFF));
  __m256 y = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1)));
  if (kind == CPU_GELU_TANH) y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_set1_ps(10.0f), _CMP_GE_OQ));
  if (u) y = _mm256_mul_ps(y, _mm256_loadu_ps(u));
  if (kind == CPU_GELU_TANH) y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LE_OQ), y); /* +0 */
  return y;
}

AVX2_TARGET static void gelu_row_avx2(enum cpu_gelu_kind kind, const uint16_t *table, const float *x, const float *u,
                                      float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu8_avx2(kind, table, _mm256_loadu_ps(x + i), u ? u + i : NULL));
  for (; i < n; i++) y[i] = gelu_one(kind, table, x[i], u ? u + i : NULL);
}
#endif

void cpu_gelu_row(enum cpu_simd_level level, enum cpu_gelu_kind kind, const float *x, const float *u, float *y,
                  int64_t n) {
  pthread_once(&gelu_tables_once, gelu_tables_init);
  const uint16_t *table = gelu_tables[kind == CPU_GELU_QUICK ? CPU_GELU_QUICK : CPU_GELU_TANH];
  if (kind != CPU_GELU_QUICK) kind = CPU_GELU_TANH;
#if CPU_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    gelu_row_avx2(kind, table, x, u, y, n);
    return;
  }
#endif
  (void)level;
  for (int64_t i = 0; i < n; i++) y[i] = gelu_one(kind, table, x[i], u ? u + i : NULL);
}
