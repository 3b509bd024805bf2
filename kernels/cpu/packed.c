/* Packed Q4_1 / Q8_0 (also Q5_0, IQ4_NL) / Q5_1 matmul kernels: scalar, AVX2, AVX-512 VNNI; one
 * float order (packed.h).
 * Compiled with -ffp-contract=off so that only the explicit fmaf / fmadd fuse. */
#include "kernels/cpu/packed.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define PK_HAVE_X86 1
#define PK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PK_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define PK_INLINE inline __attribute__((always_inline))
#else
#define PK_HAVE_X86 0
#endif

static int pack_block_bytes(enum ggml_type t) {
  switch (t) {
  case GGML_TYPE_Q4_1: return CPU_PACK_Q4_1_BLOCK;
  case GGML_TYPE_Q8_0: case GGML_TYPE_Q5_0: case GGML_TYPE_IQ4_NL: return CPU_PACK_Q8_0_BLOCK;
  case GGML_TYPE_Q5_1: return CPU_PACK_Q5_1_BLOCK;
  default: return 0;
  }
}

/* The 5-bit quants (0..31) of a Q5_0/Q5_1 block in element order (ggml-common.h layout). */
static void unpack_q5(const uint8_t qh_bytes[4], const uint8_t qs[16], uint8_t q[32]) {
  const uint32_t qh = (uint32_t)qh_bytes[0] | (uint32_t)qh_bytes[1] << 8 | (uint32_t)qh_bytes[2] << 16 |
                      (uint32_t)qh_bytes[3] << 24;
  for (int j = 0; j < 16; j++) {
    q[j] = (uint8_t)((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    q[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}

/* Block b of a Q8_0 / Q5_0 / IQ4_NL row as its fp16 scale and 32 signed integer weights. */
static void signed_block(enum ggml_type t, const uint8_t *row, int64_t b, uint16_t *d, int8_t w[32]) {
  if (t == GGML_TYPE_Q8_0) {
    const block_q8_0 *x = (const block_q8_0 *)row + b;
    *d = x->d;
    memcpy(w, x->qs, 32);
  } else if (t == GGML_TYPE_Q5_0) {
    const block_q5_0 *x = (const block_q5_0 *)row + b;
    uint8_t q[32];
    unpack_q5(x->qh, x->qs, q);
    *d = x->d;
    for (int j = 0; j < 32; j++) w[j] = (int8_t)(q[j] - 16);
  } else {
    const block_iq4_nl *x = (const block_iq4_nl *)row + b;
    *d = x->d;
    for (int j = 0; j < 16; j++) {
      w[j] = llb_kvalues_iq4nl[x->qs[j] & 0x0F];
      w[j + 16] = llb_kvalues_iq4nl[x->qs[j] >> 4];
    }
  }
}

size_t cpu_pack_bytes(const struct backend_weight *w) {
  const int bb = pack_block_bytes(w->type);
  if (bb == 0 || w->rows <= 0 || w->rows % CPU_PACK_COLS != 0 || w->cols <= 0 || w->cols % 32 != 0)
    return 0;
  return (size_t)(w->rows / CPU_PACK_COLS) * (size_t)(w->cols / 32) * (size_t)bb;
}

llb_status cpu_pack_weight(const struct backend_weight *w, void *dst) {
  if (!w || !dst || cpu_pack_bytes(w) == 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no packed layout for this weight");
  const int64_t nb = w->cols / 32, panels = w->rows / CPU_PACK_COLS;
  const size_t bb = (size_t)pack_block_bytes(w->type);
  const uint8_t *src = w->data;
  uint8_t *out = dst;
  for (int64_t p = 0; p < panels; p++)
    for (int64_t b = 0; b < nb; b++) {
      uint8_t *o = out + ((size_t)p * (size_t)nb + (size_t)b) * bb;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        const uint8_t *row = src + (size_t)(p * CPU_PACK_COLS + j) * w->row_bytes;
        if (w->type == GGML_TYPE_Q4_1) {
          const block_q4_1 *x = (const block_q4_1 *)row + b;
          memcpy(o + 2 * j, &x->d, 2);
          memcpy(o + 32 + 2 * j, &x->m, 2);
          for (int h = 0; h < 4; h++) memcpy(o + 64 + 64 * h + 4 * j, x->qs + 4 * h, 4);
        } else if (w->type == GGML_TYPE_Q5_1) {
          const block_q5_1 *x = (const block_q5_1 *)row + b;
          uint8_t q[32];
          unpack_q5(x->qh, x->qs, q);
          memcpy(o + 2 * j, &x->d, 2);
          memcpy(o + 32 + 2 * j, &x->m, 2);
          for (int g = 0; g < 8; g++) memcpy(o + 64 + 64 * g + 4 * j, q + 4 * g, 4);
        } else {
          uint16_t d;
          int8_t q[32];
          signed_block(w->type, row, b, &d, q);
          memcpy(o + 2 * j, &d, 2);
          for (int g = 0; g < 8; g++)
            for (int e = 0; e < 4; e++) o[32 + 64 * g + 4 * j + e] = (uint8_t)((uint8_t)q[4 * g + e] ^ 0x80);
        }
      }
    }
  return LLB_STATUS_OK;
}

static void quantize_x_scalar(const float *x, block_q8_x *y, int64_t k) {
  for (int64_t b = 0; b < k / 32; b++) {
    int sum;
    y[b].d = cpu_quantize_block_q8(x + b * 32, y[b].qs, &sum);
    y[b].sum = sum;
    y[b].s = y[b].d * (float)sum;
  }
}

#if PK_HAVE_X86
/* Same values: |x| max is exact, x * id rounds once, cvtps rounds half to even as lrintf. */
PK_AVX2 static void quantize_x_avx2(const float *x, block_q8_x *y, int64_t k) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / 32; b++) {
    const float *xb = x + b * 32;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    /* int32 -> int8 in element order: packs interleave 128-bit lanes, the permute undoes it */
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)y[b].qs, p);
    __m256i t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i t4 = _mm_add_epi32(_mm256_extracti128_si256(t, 1), _mm256_castsi256_si128(t));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4E));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xB1));
    const int32_t sum = _mm_cvtsi128_si32(t4);
    y[b].d = d;
    y[b].sum = sum;
    y[b].s = d * (float)sum;
  }
}
#endif

void cpu_quantize_act_row_x(enum cpu_simd_level level, const float *x, block_q8_x *y, int64_t k) {
#if PK_HAVE_X86
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
  if (level >= CPU_SIMD_LEVEL_AVX2) {
    quantize_x_avx2(x, y, k);
    return;
  }
#endif
  (void)level;
  quantize_x_scalar(x, y, k);
}

static float fp16_at(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return llb_fp16_to_fp32(h);
}

/* ---------------------------------------------------------------- scalar */

static void q4_1_scalar(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                        float *out, int64_t os) {
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q4_1_BLOCK;
      const block_q8_x *a = act[r] + b;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        int32_t s = 0;
        for (int h = 0; h < 4; h++)
          for (int e = 0; e < 4; e++) {
            const uint8_t q = pb[64 + 64 * h + 4 * j + e];
            s += (q & 0x0F) * a->qs[4 * h + e] + (q >> 4) * a->qs[16 + 4 * h + e];
          }
        acc[j] = fmaf(fp16_at(pb + 2 * j) * a->d, (float)s, acc[j]);
        acc[j] = fmaf(fp16_at(pb + 32 + 2 * j), a->s, acc[j]);
      }
    }
    memcpy(out + (int64_t)r * os, acc, sizeof(acc));
  }
}

static void q8_0_scalar(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                        float *out, int64_t os) {
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q8_0_BLOCK;
      const block_q8_x *a = act[r] + b;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        int32_t s = 0;
        for (int g = 0; g < 8; g++)
          for (int e = 0; e < 4; e++) s += ((int32_t)pb[32 + 64 * g + 4 * j + e] - 128) * a->qs[4 * g + e];
        acc[j] = fmaf(fp16_at(pb + 2 * j) * a->d, (float)s, acc[j]);
      }
    }
    memcpy(out + (int64_t)r * os, acc, sizeof(acc));
  }
}

static void q5_1_scalar(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                        float *out, int64_t os) {
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q5_1_BLOCK;
      const block_q8_x *a = act[r] + b;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        int32_t s = 0;
        for (int g = 0; g < 8; g++)
          for (int e = 0; e < 4; e++) s += (int32_t)pb[64 + 64 * g + 4 * j + e] * a->qs[4 * g + e];
        acc[j] = fmaf(fp16_at(pb + 2 * j) * a->d, (float)s, acc[j]);
        acc[j] = fmaf(fp16_at(pb + 32 + 2 * j), a->s, acc[j]);
      }
    }
    memcpy(out + (int64_t)r * os, acc, sizeof(acc));
  }
}

#if PK_HAVE_X86
/* ---------------------------------------------------------------- AVX2 (8 columns a pass) */

PK_AVX2 static PK_INLINE __m256i bcast4(const int8_t *q) {
  int32_t v;
  memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

PK_AVX2 static PK_INLINE __m256 half_scales(const uint8_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Columns 8*half .. 8*half+7 of a Q4_1 panel. The 8 products of a lane pair stay within int16
 * (|2 * 15 * 128| * 8 < 32768), so they are summed there and widened once per block. */
PK_AVX2 static PK_INLINE void q4_1_avx2_half(int64_t nb, const uint8_t *panel,
                                             const block_q8_x *const *act, const int n, float *out,
                                             int64_t os, int half) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q4_1_BLOCK;
    const __m256 dx = half_scales(pb + 16 * half), mx = half_scales(pb + 32 + 16 * half);
    __m256i w[8];
    for (int h = 0; h < 4; h++) {
      const __m256i v = _mm256_loadu_si256((const __m256i *)(pb + 64 + 64 * h + 32 * half));
      w[h] = _mm256_and_si256(v, m4);
      w[h + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      __m256i t = _mm256_maddubs_epi16(w[0], bcast4(a->qs));
      for (int g = 1; g < 8; g++) t = _mm256_add_epi16(t, _mm256_maddubs_epi16(w[g], bcast4(a->qs + 4 * g)));
      const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(t, ones));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(a->d)), s, acc[r]);
      acc[r] = _mm256_fmadd_ps(mx, _mm256_set1_ps(a->s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r]);
}

/* Q8_0: signed weights by the sign trick (|w| unsigned, q with w's sign), widened per group. */
PK_AVX2 static PK_INLINE void q8_0_avx2_half(int64_t nb, const uint8_t *panel,
                                             const block_q8_x *const *act, const int n, float *out,
                                             int64_t os, int half) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q8_0_BLOCK;
    const __m256 dx = half_scales(pb + 16 * half);
    __m256i ws[8], wa[8];
    for (int g = 0; g < 8; g++) {
      ws[g] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(pb + 32 + 64 * g + 32 * half)), bias);
      wa[g] = _mm256_sign_epi8(ws[g], ws[g]);
    }
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      __m256i s = _mm256_setzero_si256();
      for (int g = 0; g < 8; g++) {
        const __m256i p = _mm256_maddubs_epi16(wa[g], _mm256_sign_epi8(bcast4(a->qs + 4 * g), ws[g]));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r]);
}

/* Q5_1: unsigned 5-bit weights; a pair of products stays within int16 (2 * 31 * 128), eight
 * groups would not, so each group is widened. */
PK_AVX2 static PK_INLINE void q5_1_avx2_half(int64_t nb, const uint8_t *panel,
                                             const block_q8_x *const *act, const int n, float *out,
                                             int64_t os, int half) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q5_1_BLOCK;
    const __m256 dx = half_scales(pb + 16 * half), mx = half_scales(pb + 32 + 16 * half);
    __m256i w[8];
    for (int g = 0; g < 8; g++) w[g] = _mm256_loadu_si256((const __m256i *)(pb + 64 + 64 * g + 32 * half));
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      __m256i s = _mm256_setzero_si256();
      for (int g = 0; g < 8; g++)
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w[g], bcast4(a->qs + 4 * g)), ones));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(s), acc[r]);
      acc[r] = _mm256_fmadd_ps(mx, _mm256_set1_ps(a->s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r]);
}

/* ---------------------------------------------------------------- AVX-512 VNNI (16 columns) */

PK_VNNI static PK_INLINE __m512i bcast4_512(const int8_t *q) {
  int32_t v;
  memcpy(&v, q, 4);
  return _mm512_set1_epi32(v);
}

PK_VNNI static PK_INLINE __m512 scales16(const uint8_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

PK_VNNI static PK_INLINE void q4_1_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                          const int n, float *out, int64_t os) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q4_1_BLOCK;
    const __m512 dx = scales16(pb), mx = scales16(pb + 32);
    __m512i w[8];
    for (int h = 0; h < 4; h++) {
      const __m512i v = _mm512_loadu_si512((const void *)(pb + 64 + 64 * h));
      w[h] = _mm512_and_si512(v, m4);
      w[h + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      __m512i s = _mm512_setzero_si512();
      for (int g = 0; g < 8; g++) s = _mm512_dpbusd_epi32(s, w[g], bcast4_512(a->qs + 4 * g));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc[r]);
      acc[r] = _mm512_fmadd_ps(mx, _mm512_set1_ps(a->s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

/* Q8_0 weights are stored plus 128: sum((w + 128) * q) - 128 * sum(q) = sum(w * q), exact. */
PK_VNNI static PK_INLINE void q8_0_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                          const int n, float *out, int64_t os) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q8_0_BLOCK;
    const __m512 dx = scales16(pb);
    __m512i w[8];
    for (int g = 0; g < 8; g++) w[g] = _mm512_loadu_si512((const void *)(pb + 32 + 64 * g));
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      __m512i s = _mm512_set1_epi32(-128 * a->sum);
      for (int g = 0; g < 8; g++) s = _mm512_dpbusd_epi32(s, w[g], bcast4_512(a->qs + 4 * g));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

PK_VNNI static PK_INLINE void q5_1_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                          const int n, float *out, int64_t os) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * CPU_PACK_Q5_1_BLOCK;
    const __m512 dx = scales16(pb), mx = scales16(pb + 32);
    __m512i w[8];
    for (int g = 0; g < 8; g++) w[g] = _mm512_loadu_si512((const void *)(pb + 64 + 64 * g));
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      __m512i s = _mm512_setzero_si512();
      for (int g = 0; g < 8; g++) s = _mm512_dpbusd_epi32(s, w[g], bcast4_512(a->qs + 4 * g));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc[r]);
      acc[r] = _mm512_fmadd_ps(mx, _mm512_set1_ps(a->s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

/* Row counts as compile-time constants, so that the accumulators live in registers. */
#define PK_ROWS_SWITCH(call)                                                                      \
  switch (n) {                                                                                    \
  case 1: call(1); break;                                                                         \
  case 2: call(2); break;                                                                         \
  case 3: call(3); break;                                                                         \
  case 4: call(4); break;                                                                         \
  case 5: call(5); break;                                                                         \
  case 6: call(6); break;                                                                         \
  case 7: call(7); break;                                                                         \
  default: call(8); break;                                                                        \
  }

#define PK_Q41_AVX2(N) (q4_1_avx2_half(nb, panel, act, N, out, os, 0), q4_1_avx2_half(nb, panel, act, N, out, os, 1))
#define PK_Q80_AVX2(N) (q8_0_avx2_half(nb, panel, act, N, out, os, 0), q8_0_avx2_half(nb, panel, act, N, out, os, 1))
#define PK_Q51_AVX2(N) (q5_1_avx2_half(nb, panel, act, N, out, os, 0), q5_1_avx2_half(nb, panel, act, N, out, os, 1))
#define PK_Q41_VNNI(N) q4_1_vnni_n(nb, panel, act, N, out, os)
#define PK_Q51_VNNI(N) q5_1_vnni_n(nb, panel, act, N, out, os)
#define PK_Q80_VNNI(N) q8_0_vnni_n(nb, panel, act, N, out, os)

PK_AVX2 static void q4_1_avx2(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                              float *out, int64_t os) {
  PK_ROWS_SWITCH(PK_Q41_AVX2)
}
PK_AVX2 static void q8_0_avx2(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                              float *out, int64_t os) {
  PK_ROWS_SWITCH(PK_Q80_AVX2)
}
PK_AVX2 static void q5_1_avx2(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                              float *out, int64_t os) {
  PK_ROWS_SWITCH(PK_Q51_AVX2)
}
PK_VNNI static void q5_1_vnni(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                              float *out, int64_t os) {
  PK_ROWS_SWITCH(PK_Q51_VNNI)
}
PK_VNNI static void q4_1_vnni(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                              float *out, int64_t os) {
  PK_ROWS_SWITCH(PK_Q41_VNNI)
}
PK_VNNI static void q8_0_vnni(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                              float *out, int64_t os) {
  PK_ROWS_SWITCH(PK_Q80_VNNI)
}
#endif /* PK_HAVE_X86 */

cpu_packed_fn cpu_packed_select(enum ggml_type w, enum cpu_simd_level level) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
  /* kernel family: 0 Q4_1, 1 signed bytes (Q8_0, Q5_0, IQ4_NL), 2 Q5_1 */
  int fam;
  switch (w) {
  case GGML_TYPE_Q4_1: fam = 0; break;
  case GGML_TYPE_Q8_0: case GGML_TYPE_Q5_0: case GGML_TYPE_IQ4_NL: fam = 1; break;
  case GGML_TYPE_Q5_1: fam = 2; break;
  default: return NULL;
  }
#if PK_HAVE_X86
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return fam == 0 ? q4_1_vnni : fam == 1 ? q8_0_vnni : q5_1_vnni;
  if (level >= CPU_SIMD_LEVEL_AVX2) return fam == 0 ? q4_1_avx2 : fam == 1 ? q8_0_avx2 : q5_1_avx2;
#endif
  return fam == 0 ? q4_1_scalar : fam == 1 ? q8_0_scalar : q5_1_scalar;
}
