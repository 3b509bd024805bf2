/* The KV cache's element types on the CPU (enum backend_kv_dtype): a row of K or V stored in
 * the cache's dtype (cpu_kv_write) and read back as fp16 (attention over a quantized cache).
 * Leaf of the CPU backend: uses vec_dot.h's conversions and kv_widen.h's reading (the one attention.c's
 * direct paths apply too), called by ops.c and attention.c. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kv_widen.h"
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

/* kv_widen_e4m3_fp16 of each FP8 E4M3 byte, filled once (the scalar path's lookup). */
static uint16_t e4m3_fp16[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_table_init(void) {
  for (int b = 0; b < 256; b++) e4m3_fp16[b] = kv_widen_e4m3_fp16((uint8_t)b);
}

#if defined(__x86_64__)
/* Q8_0 row to fp16 with F16C, 8 values a step (kv_widen_q8_0_fp16x8_avx2). */
KV_WIDEN_AVX2_TARGET static void kv_q8_0_to_fp16_avx2(const uint8_t *row, int32_t hd, uint16_t *dst) {
  for (int32_t b = 0; b < hd / KV_WIDEN_Q8_0_BLOCK_ELEMS; b++) {
    const uint8_t *blk = row + KV_WIDEN_Q8_0_BLOCK_BYTES * b;
    const __m256 d = kv_widen_q8_0_d8_avx2(blk);
    for (int k = 0; k < 4; k++)
      _mm_storeu_si128((__m128i *)(void *)(dst + KV_WIDEN_Q8_0_BLOCK_ELEMS * b + 8 * k),
                       kv_widen_q8_0_fp16x8_avx2(d, blk + 2 + 8 * k));
  }
}

/* FP8 E4M3 row to fp16, 16 codes a step: kv_widen_e4m3_half16_avx2 widened, times 2^8, back to
 * fp16 (exact); the last hd % 16 codes from the table. */
KV_WIDEN_AVX2_TARGET static void kv_e4m3_to_fp16_avx2(const uint8_t *row, int32_t hd, uint16_t *dst) {
  int32_t i = 0;
  const __m256 scale = _mm256_set1_ps(KV_WIDEN_E4M3_SCALE);
  for (; i + 16 <= hd; i += 16) {
    const __m256i h = kv_widen_e4m3_half16_avx2(row + i);
    const __m128i lo = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), scale),
                                       _MM_FROUND_TO_NEAREST_INT);
    const __m128i hi = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), scale),
                                       _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
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
  for (int32_t b = 0; b < hd / KV_WIDEN_Q8_0_BLOCK_ELEMS; b++) { /* Q8_0 */
    const uint8_t *blk = row + KV_WIDEN_Q8_0_BLOCK_BYTES * b;
    const float d = kv_widen_q8_0_d(blk);
    for (int i = 0; i < KV_WIDEN_Q8_0_BLOCK_ELEMS; i++)
      dst[KV_WIDEN_Q8_0_BLOCK_ELEMS * b + i] = kv_widen_q8_0_fp16(d, (int8_t)blk[2 + i]);
  }
}

void cpu_kv_dtype_prepare(enum backend_kv_dtype t) {
  if (t == BACKEND_KV_DTYPE_FP8_E4M3) pthread_once(&e4m3_once, e4m3_table_init);
}
