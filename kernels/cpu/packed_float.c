/* FLOAT-family packed matmuls (packed.h: F16 and BF16 weights in panels of 16 columns x 32
 * elements): float activations, one fma chain per output in index order from 0, on every level
 * (scalar fmaf, AVX2 8 columns a register, AVX-512 16), so the levels agree bit for bit and a
 * row's result never depends on the batch. This is llamafile tinyBLAS's shape (weights
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
#define PF_INLINE inline __attribute__((always_inline))
#else
#define PF_HAVE_X86 0
#endif

/* Bytes of one 32 x 16 block. */
#define PF_BLOCK (32 * CPU_PACK_COLS * 2)

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
        const uint8_t *w = panel + (size_t)b * PF_BLOCK + (size_t)i * CPU_PACK_COLS * 2;
        for (int j = 0; j < CPU_PACK_COLS; j++) acc[j] = fmaf(pf_value(w + 2 * j, bf16), xi, acc[j]);
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
/* 8 values (fp16 or bf16 bits) at p as floats. */
PF_AVX2 static PF_INLINE __m256 pf_load8(const uint8_t *p, const int bf16) {
  const __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

/* n <= 4 rows: 8 accumulators (2 registers of 8 columns per row). */
PF_AVX2 static PF_INLINE void float_avx2_n(int64_t nb, const uint8_t *panel, const float *const *x, const int n,
                                           float *out, int64_t os, const int bf16) {
  __m256 acc[4][2];
  for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < 32 * nb; i++) {
    const uint8_t *w = panel + (size_t)i * CPU_PACK_COLS * 2;
    const __m256 w0 = pf_load8(w, bf16), w1 = pf_load8(w + 16, bf16);
    for (int r = 0; r < n; r++) {
      const __m256 xi = _mm256_broadcast_ss(x[r] + i);
      acc[r][0] = _mm256_fmadd_ps(w0, xi, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, xi, acc[r][1]);
    }
  }
  for (int r = 0; r < n; r++) {
    _mm256_storeu_ps(out + (int64_t)r * os, acc[r][0]);
    _mm256_storeu_ps(out + (int64_t)r * os + 8, acc[r][1]);
  }
}

/* 16 values at p as floats. */
PF_AVX512 static PF_INLINE __m512 pf_load16(const uint8_t *p, const int bf16) {
  const __m256i h = _mm256_loadu_si256((const __m256i *)p);
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

/* n <= 8 rows, one 16-column register each. */
PF_AVX512 static PF_INLINE void float_avx512_n(int64_t nb, const uint8_t *panel, const float *const *x, const int n,
                                               float *out, int64_t os, const int bf16) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < 32 * nb; i++) {
    const __m512 w = pf_load16(panel + (size_t)i * CPU_PACK_COLS * 2, bf16);
    for (int r = 0; r < n; r++) acc[r] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[r][i]), acc[r]);
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
#endif

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
