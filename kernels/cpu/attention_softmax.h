/* Attention's softmax over one row of scores (attention.c): ggml's soft_max_f32 as llama.cpp's
 * non-flash attention runs it on the CPU, then each probability rounded to fp16 (kq is converted to
 * F16 for its product with the F16 V), so that attention's outputs are bit-exact with llama.cpp's.
 * Also the one 16-lane sum order (cpu_reduce16's) on AVX2, which the softmax's group sums and
 * attention's q.k dots share. */
#ifndef LLB_KERNELS_CPU_ATTENTION_SOFTMAX_H
#define LLB_KERNELS_CPU_ATTENTION_SOFTMAX_H

#include <stdint.h>

#include "kernels/cpu/vec_dot.h"

/* Softmax of s [first, n) (already scaled; keys before `first` are outside the sliding window)
 * in place as ggml's soft_max: e = expf_ggml(s - max), the sum in double of cpu_reduce16 over
 * groups of 16 from key 0 (masked keys and the last group's tail are zeros, as ggml's -INF mask
 * and masked tail), times (float)(1 / sum), then rounded to fp16 (nearest even) and back. Every
 * level gives the same bits (AVX2 and up: vector max, exponentials of whole groups, one pass of
 * scaling and rounding; test_kernels_cpu). s [0, first) is left as it is; 0 <= first < n. */
void cpu_attn_softmax_f16(enum cpu_simd_level level, float *s, int32_t first, int32_t n);

#if defined(__x86_64__)
#include <immintrin.h>

#define CPU_ATTN_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

/* ggml's hsum_float_8 of x: halves, then quarters, then the last pair. */
CPU_ATTN_AVX2_TARGET static inline float cpu_attn_hsum8_avx2(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

/* cpu_reduce16 of lanes lo (0..7) and hi (8..15): the same additions. */
CPU_ATTN_AVX2_TARGET static inline float cpu_attn_reduce16_avx2(__m256 lo, __m256 hi) {
  return cpu_attn_hsum8_avx2(_mm256_add_ps(hi, lo));
}
#endif

#endif
