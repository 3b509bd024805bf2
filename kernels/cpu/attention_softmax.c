/* Attention's softmax over one row of scores, in ggml's soft_max order then rounded to fp16 (see
 * attention_softmax.h). Called by attention.c's paths, every level; calls vec_dot.c's expf and
 * cpu_reduce16. */
#include "kernels/cpu/attention_softmax.h"

#include <math.h>
#include <string.h>

#include "kernels/quant.h"

#if defined(__x86_64__)
/* sum + the cpu_attn_reduce16_avx2 of each of the w groups s [16 g .. 16 g + 16), added in order in
 * double (cpu_attn_softmax_f16's whole groups, in one call). */
CPU_ATTN_AVX2_TARGET static double softmax_groups_avx2(const float *s, int32_t w, double sum) {
  for (int32_t g = 0; g < w; g++) sum += (double)cpu_attn_reduce16_avx2(_mm256_loadu_ps(s + 16 * g), _mm256_loadu_ps(s + 16 * g + 8));
  return sum;
}

/* Largest of s [first, n) (max is exact in any order). */
CPU_ATTN_AVX2_TARGET static float softmax_max_avx2(const float *s, int32_t first, int32_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int32_t j = first;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(s + j), m); /* a NaN score is skipped, as below */
  float lanes[8], max = -INFINITY;
  _mm256_storeu_ps(lanes, m);
  for (int l = 0; l < 8; l++) max = lanes[l] > max ? lanes[l] : max;
  for (; j < n; j++) max = s[j] > max ? s[j] : max;
  return max;
}

/* s [first, n) = fp16(s * inv) as float, rounding to nearest even (F16C: exact both ways),
 * in one pass (the last n % 8 values as one padded vector). */
CPU_ATTN_AVX2_TARGET static void softmax_scale_round_avx2(float *s, int32_t first, int32_t n, float inv) {
  int32_t j = first;
  const __m256 v = _mm256_set1_ps(inv);
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(s + j, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(s + j), v),
                                                            _MM_FROUND_TO_NEAREST_INT)));
  if (j == n) return;
  float t[8] = {0}; /* the last n - j values: one padded vector */
  memcpy(t, s + j, (size_t)(n - j) * sizeof(float));
  _mm256_storeu_ps(t, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(t), v), _MM_FROUND_TO_NEAREST_INT)));
  memcpy(s + j, t, (size_t)(n - j) * sizeof(float));
}

/* sum + the group sum of the 16-key group s [0, 16) cut to keys [lo, hi) (by the window or the
 * row's end): their exponentials e = expf_ggml(s - max) stored in place, computed in a padded
 * copy with whole vectors (the same bits as one by one: test_kernels_cpu), the group's other
 * keys zeros as ggml's masked keys, summed as cpu_attn_reduce16_avx2. */
CPU_ATTN_AVX2_TARGET static double softmax_part_group_avx2(enum cpu_simd_level level, float *s, int32_t lo, int32_t hi,
                                                       float max, double sum) {
  float g[16];
  for (int32_t k = 0; k < 16; k++) g[k] = k >= lo && k < hi ? s[k] : max;
  cpu_exp_sub_row(level, g, max, g, 16);
  for (int32_t k = 0; k < 16; k++) {
    if (k >= lo && k < hi) s[k] = g[k];
    else g[k] = 0.0f;
  }
  return sum + (double)cpu_attn_reduce16_avx2(_mm256_loadu_ps(g), _mm256_loadu_ps(g + 8));
}

/* cpu_attn_softmax_f16's exponentials and sum on AVX2 and up: whole 16-key groups in one call each
 * way, a cut group through softmax_part_group_avx2 (no scalar expf). */
CPU_ATTN_AVX2_TARGET static double softmax_exp_sum_avx2(enum cpu_simd_level level, float *s, int32_t first, int32_t n,
                                                    float max) {
  double sum = 0.0;
  for (int32_t j0 = first - first % 16; j0 < n;) {
    const int32_t lo = j0 < first ? first - j0 : 0, hi = n - j0 < 16 ? n - j0 : 16;
    if (lo == 0 && hi == 16) { /* whole groups from here on, but the last part */
      const int32_t w = (n - j0) / 16;
      cpu_exp_sub_row(level, s + j0, max, s + j0, 16 * w);
      sum = softmax_groups_avx2(s + j0, w, sum);
      j0 += 16 * w;
      continue;
    }
    sum = softmax_part_group_avx2(level, s + j0, lo, hi, max, sum);
    j0 += 16;
  }
  return sum;
}
#endif

void cpu_attn_softmax_f16(enum cpu_simd_level level, float *s, int32_t first, int32_t n) {
#if defined(__x86_64__)
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    const float max = softmax_max_avx2(s, first, n);
    const double sum = softmax_exp_sum_avx2(level, s, first, n, max);
    softmax_scale_round_avx2(s, first, n, (float)(1.0 / sum));
    return;
  }
#endif
  float max = -INFINITY;
  for (int32_t j = first; j < n; j++) max = s[j] > max ? s[j] : max;
  cpu_exp_sub_row(level, s + first, max, s + first, n - first);
  double sum = 0.0;
  for (int32_t j0 = first - first % 16; j0 < n; j0 += 16) {
    const int32_t a = j0 < first ? first : j0, e = n - j0 < 16 ? n : j0 + 16;
    float g[16] = {0};
    memcpy(g + (a - j0), s + a, (size_t)(e - a) * sizeof(float));
    sum += (double)cpu_reduce16(g);
  }
  const float inv = (float)(1.0 / sum);
  for (int32_t j = first; j < n; j++) s[j] = llb_fp16_to_fp32(llb_fp32_to_fp16(s[j] * inv));
}

