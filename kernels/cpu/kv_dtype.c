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

void cpu_kv_row_to_fp16(enum cpu_simd_level level, enum backend_kv_dtype t, const uint8_t *row, int32_t hd,
                           uint16_t *dst) {
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
