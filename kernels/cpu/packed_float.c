/* FLOAT-family packed matmuls (packed.h: F16 and BF16 weights in panels of 16 columns x 32
 * elements): float activations, one fma chain per output in index order from 0, on every level
 * (scalar fmaf, AVX2 8 columns a register, AVX-512 16), so the levels agree bit for bit and a
 * row's result never depends on the batch. BF16 weights on AVX512_BF16 instead take
 * llama.cpp's arithmetic for them: activations rounded to bf16, vdpbf16ps (cpu_packed_bf16_fn),
 * one order per output too, on that level only. This is llamafile tinyBLAS's shape (weights
 * converted once per k step, broadcast activations, a register tile of columns x rows); the
 * code is ours. Compiled with -ffp-contract=off so that only the explicit fmas fuse. */
#include "kernels/cpu/packed.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define PF_HAVE_X86 1
#define PF_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define PF_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define PF_INLINE inline __attribute__((always_inline))
#else
#define PF_HAVE_X86 0
#endif

/* Bytes of one 32 x 16 block. */
#define PF_BLOCK (32 * CPU_PACK_COLS * 2)

/* Byte offset in a block of element i of column j: F16 w[i][j], BF16 w[i / 2][j][i % 2]
 * (packed.h). */
static size_t pf_offset(int i, int j, int bf16) {
  return bf16 ? (size_t)(4 * (CPU_PACK_COLS * (i / 2) + j) + 2 * (i % 2)) : (size_t)(2 * (CPU_PACK_COLS * i + j));
}

static float pf_value(const uint8_t *p, int bf16) {
  uint16_t h;
  memcpy(&h, p, 2);
  return bf16 ? llb_bf16_to_fp32(h) : llb_fp16_to_fp32(h);
}

static void float_scalar(int bf16, int64_t nb, const uint8_t *panel, const float *const *x, int n, float *out,
                         int64_t os) {
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++)
      for (int i = 0; i < 32; i++) {
        const float xi = x[r][32 * b + i];
        const uint8_t *blk = panel + (size_t)b * PF_BLOCK;
        for (int j = 0; j < CPU_PACK_COLS; j++) acc[j] = fmaf(pf_value(blk + pf_offset(i, j, bf16), bf16), xi, acc[j]);
      }
    memcpy(out + (int64_t)r * os, acc, sizeof acc);
  }
}

static void f16_scalar(int64_t nb, const uint8_t *panel, const float *const *x, int n, float *out, int64_t os) {
  float_scalar(0, nb, panel, x, n, out, os);
}
static void bf16_scalar(int64_t nb, const uint8_t *panel, const float *const *x, int n, float *out, int64_t os) {
  float_scalar(1, nb, panel, x, n, out, os);
}

#if PF_HAVE_X86
/* Columns 8h..8h+7 of elements 2k (e[0]) and 2k+1 (e[1]) as floats (blk: the block). */
PF_AVX2 static PF_INLINE void pf_load8x2(const uint8_t *blk, int k, int h, const int bf16, __m256 e[2]) {
  if (bf16) { /* a 32-bit lane holds one column's pair: low half element 2k, high half 2k + 1 */
    const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 4 * (CPU_PACK_COLS * k + 8 * h)));
    e[0] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    e[1] = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
    return;
  }
  for (int t = 0; t < 2; t++)
    e[t] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 2 * (CPU_PACK_COLS * (2 * k + t) + 8 * h))));
}

/* n <= 4 rows: 8 accumulators (2 registers of 8 columns per row). */
PF_AVX2 static PF_INLINE void float_avx2_n(int64_t nb, const uint8_t *panel, const float *const *x, const int n,
                                           float *out, int64_t os, const int bf16) {
  __m256 acc[4][2];
  for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = panel + (size_t)b * PF_BLOCK;
    for (int k = 0; k < 16; k++) {
      __m256 w0[2], w1[2];
      pf_load8x2(blk, k, 0, bf16, w0);
      pf_load8x2(blk, k, 1, bf16, w1);
      for (int t = 0; t < 2; t++)
        for (int r = 0; r < n; r++) {
          const __m256 xi = _mm256_broadcast_ss(x[r] + 32 * b + 2 * k + t);
          acc[r][0] = _mm256_fmadd_ps(w0[t], xi, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(w1[t], xi, acc[r][1]);
        }
    }
  }
  for (int r = 0; r < n; r++) {
    _mm256_storeu_ps(out + (int64_t)r * os, acc[r][0]);
    _mm256_storeu_ps(out + (int64_t)r * os + 8, acc[r][1]);
  }
}

/* The 16 columns of elements 2k (e[0]) and 2k+1 (e[1]) as floats. */
PF_AVX512 static PF_INLINE void pf_load16x2(const uint8_t *blk, int k, const int bf16, __m512 e[2]) {
  if (bf16) {
    const __m512i v = _mm512_loadu_si512((const void *)(blk + 4 * CPU_PACK_COLS * k));
    e[0] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    e[1] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
    return;
  }
  for (int t = 0; t < 2; t++)
    e[t] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 2 * CPU_PACK_COLS * (2 * k + t))));
}

/* n <= 8 rows, one 16-column register each. */
PF_AVX512 static PF_INLINE void float_avx512_n(int64_t nb, const uint8_t *panel, const float *const *x, const int n,
                                               float *out, int64_t os, const int bf16) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = panel + (size_t)b * PF_BLOCK;
    for (int k = 0; k < 16; k++) {
      __m512 w[2];
      pf_load16x2(blk, k, bf16, w);
      for (int t = 0; t < 2; t++)
        for (int r = 0; r < n; r++) acc[r] = _mm512_fmadd_ps(w[t], _mm512_set1_ps(x[r][32 * b + 2 * k + t]), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

#define PF_AVX2_CALL(N) float_avx2_n(nb, panel, x4, N, out4, os, BF)
#define PF_AVX2_WRAP(name, bf)                                                                    \
  PF_AVX2 static void name(int64_t nb, const uint8_t *panel, const float *const *x, int n, float *out, int64_t os) { \
    enum { BF = bf };                                                                             \
    for (int r0 = 0; r0 < n; r0 += 4) {                                                           \
      const float *const *x4 = x + r0;                                                            \
      float *out4 = out + (int64_t)r0 * os;                                                       \
      switch (n - r0) {                                                                           \
      case 1: PF_AVX2_CALL(1); break;                                                             \
      case 2: PF_AVX2_CALL(2); break;                                                             \
      case 3: PF_AVX2_CALL(3); break;                                                             \
      default: PF_AVX2_CALL(4); break;                                                            \
      }                                                                                           \
    }                                                                                             \
  }
PF_AVX2_WRAP(f16_avx2, 0)
PF_AVX2_WRAP(bf16_avx2, 1)

#define PF_AVX512_CALL(N) float_avx512_n(nb, panel, x, N, out, os, BF)
#define PF_AVX512_WRAP(name, bf)                                                                  \
  PF_AVX512 static void name(int64_t nb, const uint8_t *panel, const float *const *x, int n, float *out, int64_t os) { \
    enum { BF = bf };                                                                             \
    switch (n) {                                                                                  \
    case 1: PF_AVX512_CALL(1); break;                                                             \
    case 2: PF_AVX512_CALL(2); break;                                                             \
    case 3: PF_AVX512_CALL(3); break;                                                             \
    case 4: PF_AVX512_CALL(4); break;                                                             \
    case 5: PF_AVX512_CALL(5); break;                                                             \
    case 6: PF_AVX512_CALL(6); break;                                                             \
    case 7: PF_AVX512_CALL(7); break;                                                             \
    default: PF_AVX512_CALL(8); break;                                                            \
    }                                                                                             \
  }
PF_AVX512_WRAP(f16_avx512, 0)
PF_AVX512_WRAP(bf16_avx512, 1)

/* x as bf16 (llb_fp32_to_bf16's rounding: nearest even, NaN kept quiet), 16 at a time. */
PF_AVX512 static void bf16_act_avx512(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512((const void *)(x + i));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))),
        16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet)));
  }
  for (; i < n; i++) y[i] = llb_fp32_to_bf16(x[i]);
}

/* n <= 8 rows: one vdpbf16ps per row and pair of elements, the pair's 32 bits broadcast. */
PF_BF16 static PF_INLINE void bf16dot_n(int64_t nb, const uint8_t *panel, const uint16_t *const *x, const int n,
                                        float *out, int64_t os) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < 16 * nb; k++) {
    const __m512bh w = (__m512bh)_mm512_loadu_si512((const void *)(panel + 64 * k));
    for (int r = 0; r < n; r++) {
      int32_t pair;
      memcpy(&pair, x[r] + 2 * k, 4);
      acc[r] = _mm512_dpbf16_ps(acc[r], w, (__m512bh)_mm512_set1_epi32(pair));
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

#define PF_BF16_CALL(N) bf16dot_n(nb, panel, x, N, out, os)
PF_BF16 static void bf16dot(int64_t nb, const uint8_t *panel, const uint16_t *const *x, int n, float *out, int64_t os) {
  switch (n) {
  case 1: PF_BF16_CALL(1); break;
  case 2: PF_BF16_CALL(2); break;
  case 3: PF_BF16_CALL(3); break;
  case 4: PF_BF16_CALL(4); break;
  case 5: PF_BF16_CALL(5); break;
  case 6: PF_BF16_CALL(6); break;
  case 7: PF_BF16_CALL(7); break;
  default: PF_BF16_CALL(8); break;
  }
}
#endif

cpu_packed_bf16_fn cpu_packed_bf16_select(enum ggml_type w, enum cpu_simd_level level) {
  if (w != GGML_TYPE_BF16) return NULL;
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
#if PF_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX512_BF16) return bf16dot;
#endif
  return NULL;
}

void cpu_packed_bf16_act_row(enum cpu_simd_level level, const float *x, uint16_t *y, int64_t n) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
#if PF_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) {
    bf16_act_avx512(x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = llb_fp32_to_bf16(x[i]);
}

cpu_packed_float_fn cpu_packed_float_select(enum ggml_type w, enum cpu_simd_level level) {
  if (w != GGML_TYPE_F16 && w != GGML_TYPE_BF16) return NULL;
  const int bf16 = w == GGML_TYPE_BF16;
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
#if PF_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return bf16 ? bf16_avx512 : f16_avx512;
  if (level >= CPU_SIMD_LEVEL_AVX2) return bf16 ? bf16_avx2 : f16_avx2;
#endif
  return bf16 ? bf16_scalar : f16_scalar;
}
