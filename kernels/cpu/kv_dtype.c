/* The KV cache's element types on the CPU (enum backend_kv_dtype): a row of K or V stored in
 * the cache's dtype (cpu_kv_write) and read back as fp16 (attention over a quantized cache).
 * Leaf of the CPU backend: uses vec_dot.h's conversions, called by ops.c and attention.c. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/vec_dot.h"
#include "kernels/quant.h"

bool cpu_kv_dtype_ok(enum backend_kv_dtype t) {
  return t == BACKEND_KV_DTYPE_F16 || t == BACKEND_KV_DTYPE_Q8_0 || t == BACKEND_KV_DTYPE_FP8_E4M3;
}

/* OCP FP8 E4M3 (bias 7, max 448 = 0x7E, NaN 0x7F, no infinities) of x, rounded to nearest even,
 * saturated at +-448. */
static uint8_t fp32_to_e4m3(float x) {
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fabsf(x);
  if (isnan(x)) return sign | 0x7F;
  if (a >= 448.0f) return sign | 0x7E;
  int e;
  (void)frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): the leading bit is 2^(e - 1) */
  if (a == 0.0f || e - 1 < -6) { /* subnormal: m * 2^-9, m = 0..8 (8 carries into 2^-6, code 0x08) */
    return sign | (uint8_t)rintf(ldexpf(a, 9));
  }
  int m = (int)rintf(ldexpf(a, 3 - (e - 1))); /* 8..16 */
  int ex = e - 1 + 7;
  if (m == 16) m = 8, ex++;
  if (ex > 15 || (ex == 15 && m - 8 > 6)) return sign | 0x7E;
  return sign | (uint8_t)(ex << 3 | (m - 8));
}

void cpu_kv_row_store(enum cpu_simd_level level, enum backend_kv_dtype t, const float *x, uint8_t *dst, int32_t n) {
  switch (t) {
  case BACKEND_KV_DTYPE_F16: cpu_fp32_to_fp16_row(level, x, (uint16_t *)(void *)dst, n); return;
  case BACKEND_KV_DTYPE_Q8_0:
    for (int32_t b = 0; b < n / 32; b++) {
      int sum;
      int8_t q[32];
      const uint16_t d = llb_fp32_to_fp16(cpu_quantize_block_q8(x + 32 * b, q, &sum));
      memcpy(dst + 34 * b, &d, 2);
      memcpy(dst + 34 * b + 2, q, 32);
    }
    return;
  case BACKEND_KV_DTYPE_FP8_E4M3:
    for (int32_t i = 0; i < n; i++) dst[i] = fp32_to_e4m3(x[i]);
    return;
  }
}

/* fp16 bits of each FP8 E4M3 byte (exact: E4M3's exponents and mantissas fit fp16's), filled once. */
static uint16_t e4m3_fp16[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_table_init(void) {
  for (int b = 0; b < 256; b++) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
    if (e == 15 && m == 7) v = NAN; /* 0x7F / 0xFF: NaN, as written for NaN inputs */
    e4m3_fp16[b] = llb_fp32_to_fp16(b & 0x80 ? -v : v);
  }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define KV_DTYPE_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

/* Q8_0 row to fp16 with F16C: per 8 values fp16(d * q) rounded to nearest even, the scalar
 * path's float product and rounding (F16C rounds as llb_fp32_to_fp16). */
KV_DTYPE_AVX2_TARGET static void kv_q8_0_to_fp16_avx2(const uint8_t *row, int32_t hd, uint16_t *dst) {
  for (int32_t b = 0; b < hd / 32; b++) {
    uint16_t h;
    memcpy(&h, row + 34 * b, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    for (int k = 0; k < 4; k++) {
      const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + 34 * b + 2 + 8 * k)));
      _mm_storeu_si128((__m128i *)(dst + 32 * b + 8 * k),
                       _mm256_cvtps_ph(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), _MM_FROUND_TO_NEAREST_INT));
    }
  }
}

/* FP8 E4M3 row to fp16, 16 bytes at a time: sign | magnitude << 7 is the fp16 of the value
 * times 2^-8 (normals and subnormals alike), widened to float, times 2^8 (exact), back to fp16
 * (exact: E4M3 fits fp16); the magnitude 0x7F (NaN) gives 0x7E00 | sign, as e4m3_fp16. */
KV_DTYPE_AVX2_TARGET static void kv_e4m3_to_fp16_avx2(const uint8_t *row, int32_t hd, uint16_t *dst) {
  int32_t i = 0;
  const __m256i mag_sign = _mm256_set1_epi16((short)0xBF80), mag = _mm256_set1_epi16(0x3F80);
  const __m256i nan = _mm256_set1_epi16(0x7E00), sign = _mm256_set1_epi16((short)0x8000);
  const __m256 two8 = _mm256_set1_ps(256.0f);
  for (; i + 16 <= hd; i += 16) {
    /* sign-extended byte << 7: sign at bit 15, magnitude at bits 7-13, bit 14 cleared by the mask */
    const __m256i w = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + i))), 7),
                                       mag_sign);
    const __m256i is_nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, mag), mag);
    const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
    const __m128i flo = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(lo), two8), _MM_FROUND_TO_NEAREST_INT);
    const __m128i fhi = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(hi), two8), _MM_FROUND_TO_NEAREST_INT);
    const __m256i f = _mm256_inserti128_si256(_mm256_castsi128_si256(flo), fhi, 1);
    const __m256i n = _mm256_or_si256(_mm256_and_si256(w, sign), nan);
    _mm256_storeu_si256((__m256i *)(dst + i), _mm256_blendv_epi8(f, n, is_nan));
  }
  for (; i < hd; i++) dst[i] = e4m3_fp16[row[i]];
}
#endif

void cpu_kv_row_to_fp16(enum cpu_simd_level level, enum backend_kv_dtype t, const uint8_t *row, int32_t hd,
                           uint16_t *dst) {
#if defined(__x86_64__)
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    if (t == BACKEND_KV_DTYPE_FP8_E4M3) kv_e4m3_to_fp16_avx2(row, hd, dst);
    else kv_q8_0_to_fp16_avx2(row, hd, dst);
    return;
  }
#endif
  if (t == BACKEND_KV_DTYPE_FP8_E4M3) {
    for (int32_t i = 0; i < hd; i++) dst[i] = e4m3_fp16[row[i]];
    return;
  }
  float x[32];
  for (int32_t b = 0; b < hd / 32; b++) { /* Q8_0 */
    uint16_t h;
    memcpy(&h, row + 34 * b, 2);
    const float d = llb_fp16_to_fp32(h);
    for (int i = 0; i < 32; i++) x[i] = d * (float)(int8_t)row[34 * b + 2 + i];
    cpu_fp32_to_fp16_row(level, x, dst + 32 * b, 32);
  }
}

void cpu_kv_dtype_prepare(enum backend_kv_dtype t) {
  if (t == BACKEND_KV_DTYPE_FP8_E4M3) pthread_once(&e4m3_once, e4m3_table_init);
}
