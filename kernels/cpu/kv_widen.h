/* The quantized KV cache read as fp16 (enum backend_kv_dtype Q8_0 and FP8_E4M3): the one source
 * of the widening that kv_dtype.c's scratch conversion (cpu_kv_row_to_fp16) and attention.c's
 * AVX2 and AVX-512 paths (a quantized row read where it lies) each apply, so that every path
 * reads a cache element as the same fp16 value:
 *   Q8_0     block of KV_WIDEN_Q8_0_BLOCK_BYTES: fp16 scale d, then 32 int8 q; an element is
 *            fp16(d * q), the float product rounded to nearest even (llb_fp32_to_fp16, F16C).
 *   FP8 E4M3 (OCP, bias 7, subnormals m * 2^-9, magnitude 0x7F NaN, no infinities): the code b
 *            sign-extended and shifted left by 7, bit 14 cleared (KV_WIDEN_E4M3_KEEP), is the fp16
 *            of its value times 2^-8, normals and subnormals alike; times 2^8 it is the value,
 *            exact in fp16. The NaN codes read as the quiet NaN 0x7E00 | sign.
 * Per element (scalar), per 8 values (AVX2 + F16C) and per 16 (AVX-512, with the AVX2 16-lane
 * FP8 step): static inline, each with the target attribute it needs, for callers compiled for
 * the baseline ISA that pick a level at run time (cpu_simd_level_detect). Leaf header: reads
 * kernels/quant.h's fp16 conversions only. */
#ifndef LLB_KERNELS_CPU_KV_WIDEN_H
#define LLB_KERNELS_CPU_KV_WIDEN_H

#include <stdint.h>
#include <string.h>

#include "kernels/quant.h"

/* Bytes of one Q8_0 block (fp16 d, 32 int8 q) and the elements it holds. */
#define KV_WIDEN_Q8_0_BLOCK_BYTES 34
#define KV_WIDEN_Q8_0_BLOCK_ELEMS 32
/* FP8 E4M3 code b as int16 b << 7 (sign-extended) masked with KEEP: the sign at bit 15, the
 * magnitude (exponent and mantissa) at bits 7-13, the fp16 of the value times 2^-8. */
#define KV_WIDEN_E4M3_KEEP 0xBF80
/* The magnitude bits of that fp16: all set (0x7F) is the NaN code. */
#define KV_WIDEN_E4M3_MAG 0x3F80
/* The fp16 a NaN code reads as, with its sign: the quiet NaN llb_fp32_to_fp16(NAN) gives. */
#define KV_WIDEN_FP16_QNAN 0x7E00
/* From the value times 2^-8 to the value (exact). */
#define KV_WIDEN_E4M3_SCALE 256.0f

/* The scale d of the Q8_0 block at blk (unaligned) as float (exact). */
static inline float kv_widen_q8_0_d(const uint8_t *blk) {
  uint16_t h;
  memcpy(&h, blk, 2);
  return llb_fp16_to_fp32(h);
}

/* fp16 bits of one Q8_0 element: fp16(d * q), d the block's scale as float. */
static inline uint16_t kv_widen_q8_0_fp16(float d, int8_t q) { return llb_fp32_to_fp16(d * (float)q); }

/* fp16 bits of the FP8 E4M3 code b: its value exactly, NaN codes 0x7E00 | sign. */
static inline uint16_t kv_widen_e4m3_fp16(uint8_t b) {
  const uint16_t w = (uint16_t)(((uint32_t)(uint16_t)(int16_t)(int8_t)b << 7) & KV_WIDEN_E4M3_KEEP);
  if ((w & KV_WIDEN_E4M3_MAG) == KV_WIDEN_E4M3_MAG) return (uint16_t)((w & 0x8000) | KV_WIDEN_FP16_QNAN);
  return llb_fp32_to_fp16(llb_fp16_to_fp32(w) * KV_WIDEN_E4M3_SCALE);
}

#if defined(__x86_64__)
#include <immintrin.h>

#define KV_WIDEN_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define KV_WIDEN_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* The scale of the Q8_0 block at blk in every lane (F16C: the value kv_widen_q8_0_d gives). */
KV_WIDEN_AVX2_TARGET static inline __m256 kv_widen_q8_0_d8_avx2(const uint8_t *blk) {
  uint16_t h;
  memcpy(&h, blk, 2);
  return _mm256_set1_ps(_cvtsh_ss(h));
}

/* fp16 bits of the 8 Q8_0 quants at q (int8, unaligned) with scale d (kv_widen_q8_0_d8_avx2):
 * kv_widen_q8_0_fp16 of each, the float product rounded by F16C as llb_fp32_to_fp16. */
KV_WIDEN_AVX2_TARGET static inline __m128i kv_widen_q8_0_fp16x8_avx2(__m256 d, const uint8_t *q) {
  const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q)));
  return _mm256_cvtps_ph(_mm256_mul_ps(d, qf), _MM_FROUND_TO_NEAREST_INT);
}

/* The 8 FP8 codes at src (unaligned) as fp16 bits of their values times 2^-8, NaN codes as
 * 0x7E00 | sign (a NaN times 2^8 stays that NaN): kv_widen_e4m3_fp16's bit step, 8 lanes. */
KV_WIDEN_AVX2_TARGET static inline __m128i kv_widen_e4m3_half8_avx2(const uint8_t *src) {
  const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)src));
  const __m128i w = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)KV_WIDEN_E4M3_KEEP));
  const __m128i mag = _mm_set1_epi16(KV_WIDEN_E4M3_MAG);
  const __m128i nan = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16((short)0x8000)), _mm_set1_epi16(KV_WIDEN_FP16_QNAN));
  return _mm_blendv_epi8(w, nan, _mm_cmpeq_epi16(_mm_and_si128(w, mag), mag));
}

/* kv_widen_e4m3_half8_avx2 of 16 codes at src (lane i: code i), in one 256-bit register. */
KV_WIDEN_AVX2_TARGET static inline __m256i kv_widen_e4m3_half16_avx2(const uint8_t *src) {
  const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)src));
  const __m256i w = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16((short)KV_WIDEN_E4M3_KEEP));
  const __m256i mag = _mm256_set1_epi16(KV_WIDEN_E4M3_MAG);
  const __m256i nan = _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi16((short)0x8000)),
                                      _mm256_set1_epi16(KV_WIDEN_FP16_QNAN));
  return _mm256_blendv_epi8(w, nan, _mm256_cmpeq_epi16(_mm256_and_si256(w, mag), mag));
}

/* The 8 FP8 codes at src as float: kv_widen_e4m3_fp16's values, widened (exact). */
KV_WIDEN_AVX2_TARGET static inline __m256 kv_widen_e4m3_ps8_avx2(const uint8_t *src) {
  return _mm256_mul_ps(_mm256_cvtph_ps(kv_widen_e4m3_half8_avx2(src)), _mm256_set1_ps(KV_WIDEN_E4M3_SCALE));
}

/* The scale of the Q8_0 block at blk in every lane (F16C). */
KV_WIDEN_AVX512_TARGET static inline __m512 kv_widen_q8_0_d16_avx512(const uint8_t *blk) {
  uint16_t h;
  memcpy(&h, blk, 2);
  return _mm512_set1_ps(_cvtsh_ss(h));
}

/* fp16 bits of the 16 Q8_0 quants at q with scale d: kv_widen_q8_0_fp16x8_avx2 at 16 lanes. */
KV_WIDEN_AVX512_TARGET static inline __m256i kv_widen_q8_0_fp16x16_avx512(__m512 d, const uint8_t *q) {
  const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q)));
  return _mm512_cvtps_ph(_mm512_mul_ps(d, qf), _MM_FROUND_TO_NEAREST_INT);
}

/* The 16 FP8 codes at src as float: kv_widen_e4m3_half16_avx2 widened, times 2^8 (exact). */
KV_WIDEN_AVX512_TARGET static inline __m512 kv_widen_e4m3_ps16_avx512(const uint8_t *src) {
  return _mm512_mul_ps(_mm512_cvtph_ps(kv_widen_e4m3_half16_avx2(src)), _mm512_set1_ps(KV_WIDEN_E4M3_SCALE));
}
#endif

#endif
