/* Packed matmul kernels of the three block families (packed.h: NIBBLE, SIGNED, UNSIGNED), each
 * fp16- or float-scaled: scalar, AVX2, AVX-512 VNNI; one float order (packed.h). The layouts
 * and the repacking are packed_layout.c's. Compiled with -ffp-contract=off so that only the
 * explicit fmaf / fmadd fuse. */
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

/* Byte offsets in a packed block: scales d at 0, mins at PK_M_OFF, quants at PK_QS_OFF. fs: the
 * float-scaled form. Constant-folded inside the always-inline kernels below. */
#define PK_SB(fs) ((fs) ? 4 : 2)
#define PK_M_OFF(fs) (16 * PK_SB(fs))
#define PK_QS_OFF(fam, fs) ((fam) == CPU_PACK_FAMILY_SIGNED ? 16 * PK_SB(fs) : 32 * PK_SB(fs))
#define PK_BLOCK(fam, fs) (PK_QS_OFF(fam, fs) + ((fam) == CPU_PACK_FAMILY_NIBBLE ? 4 : 8) * 64)

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

/* Scale j of the 16 of a block: fp16 bits or a float. */
static float scale_at(const uint8_t *p, int j, int fs) {
  if (fs) {
    float f;
    memcpy(&f, p + 4 * j, 4);
    return f;
  }
  return fp16_at(p + 2 * j);
}

/* ---------------------------------------------------------------- scalar */

static void packed_scalar(int fam, int fs, int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                          int n, float *out, int64_t os) {
  const size_t bb = PK_BLOCK(fam, fs);
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *pb = panel + (size_t)b * bb, *qs = pb + PK_QS_OFF(fam, fs);
      const block_q8_x *a = act[r] + b;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        int32_t s = 0;
        if (fam == CPU_PACK_FAMILY_NIBBLE) {
          for (int h = 0; h < 4; h++)
            for (int e = 0; e < 4; e++) {
              const uint8_t q = qs[64 * h + 4 * j + e];
              s += (q & 0x0F) * a->qs[4 * h + e] + (q >> 4) * a->qs[16 + 4 * h + e];
            }
        } else {
          const int bias = fam == CPU_PACK_FAMILY_SIGNED ? 128 : 0;
          for (int g = 0; g < 8; g++)
            for (int e = 0; e < 4; e++) s += ((int32_t)qs[64 * g + 4 * j + e] - bias) * a->qs[4 * g + e];
        }
        acc[j] = fmaf(scale_at(pb, j, fs) * a->d, (float)s, acc[j]);
        if (fam != CPU_PACK_FAMILY_SIGNED) acc[j] = fmaf(scale_at(pb + PK_M_OFF(fs), j, fs), a->s, acc[j]);
      }
    }
    memcpy(out + (int64_t)r * os, acc, sizeof(acc));
  }
}

#define PK_SCALAR(name, fam, fs)                                                                  \
  static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                   int64_t os) {                                                                  \
    packed_scalar(fam, fs, nb, panel, act, n, out, os);                                           \
  }
PK_SCALAR(nibble_scalar, CPU_PACK_FAMILY_NIBBLE, 0)
PK_SCALAR(nibble_f_scalar, CPU_PACK_FAMILY_NIBBLE, 1)
PK_SCALAR(signed_scalar, CPU_PACK_FAMILY_SIGNED, 0)
PK_SCALAR(signed_f_scalar, CPU_PACK_FAMILY_SIGNED, 1)
PK_SCALAR(unsigned_scalar, CPU_PACK_FAMILY_UNSIGNED, 0)
PK_SCALAR(unsigned_f_scalar, CPU_PACK_FAMILY_UNSIGNED, 1)

#if PK_HAVE_X86
/* ---------------------------------------------------------------- AVX2 (8 columns a pass) */

PK_AVX2 static PK_INLINE __m256i bcast4(const int8_t *q) {
  int32_t v;
  memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

/* Scales of columns 8*half .. 8*half+7. */
PK_AVX2 static PK_INLINE __m256 scales8(const uint8_t *p, int half, int fs) {
  if (fs) return _mm256_loadu_ps((const float *)(const void *)p + 8 * half);
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * half)));
}

/* NIBBLE, columns 8*half .. 8*half+7. The 8 products of a lane pair stay within int16
 * (|2 * 15 * 128| * 8 < 32768), so they are summed there and widened once per block. */
PK_AVX2 static PK_INLINE void nibble_avx2_half(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                               const int n, float *out, int64_t os, int half, const int fs) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_NIBBLE, fs);
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_NIBBLE, fs);
    const __m256 dx = scales8(pb, half, fs), mx = scales8(pb + PK_M_OFF(fs), half, fs);
    __m256i w[8];
    for (int h = 0; h < 4; h++) {
      const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32 * half));
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

/* SIGNED: signed weights by the sign trick (|w| unsigned, q with w's sign), widened per group. */
PK_AVX2 static PK_INLINE void signed_avx2_half(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                               const int n, float *out, int64_t os, int half, const int fs) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_SIGNED, fs);
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_SIGNED, fs);
    const __m256 dx = scales8(pb, half, fs);
    __m256i ws[8], wa[8];
    for (int g = 0; g < 8; g++) {
      ws[g] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qs + 64 * g + 32 * half)), bias);
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

/* UNSIGNED: 5-bit weights; a pair of products stays within int16 (2 * 31 * 128), eight groups
 * would not, so each group is widened. */
PK_AVX2 static PK_INLINE void unsigned_avx2_half(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                                 const int n, float *out, int64_t os, int half, const int fs) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_UNSIGNED, fs);
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_UNSIGNED, fs);
    const __m256 dx = scales8(pb, half, fs), mx = scales8(pb + PK_M_OFF(fs), half, fs);
    __m256i w[8];
    for (int g = 0; g < 8; g++) w[g] = _mm256_loadu_si256((const __m256i *)(qs + 64 * g + 32 * half));
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

PK_VNNI static PK_INLINE __m512 scales16(const uint8_t *p, int fs) {
  if (fs) return _mm512_loadu_ps((const void *)p);
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

PK_VNNI static PK_INLINE void nibble_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                            const int n, float *out, int64_t os, const int fs) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_NIBBLE, fs);
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_NIBBLE, fs);
    const __m512 dx = scales16(pb, fs), mx = scales16(pb + PK_M_OFF(fs), fs);
    __m512i w[8];
    for (int h = 0; h < 4; h++) {
      const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * h));
      w[h] = _mm512_and_si512(v, m4);
      w[h + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    /* groups outer, rows inner: the rows' dpbusd chains interleave in program order (one
     * chain after another left the out-of-order window to overlap 8 chains of 8) */
    __m512i s[CPU_PACKED_MAX_ROWS];
    for (int r = 0; r < n; r++) s[r] = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++)
      for (int r = 0; r < n; r++) s[r] = _mm512_dpbusd_epi32(s[r], w[g], bcast4_512(act[r][b].qs + 4 * g));
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s[r]), acc[r]);
      acc[r] = _mm512_fmadd_ps(mx, _mm512_set1_ps(a->s), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

/* SIGNED weights are stored plus 128: sum((w + 128) * q) - 128 * sum(q) = sum(w * q), exact. */
PK_VNNI static PK_INLINE void signed_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                            const int n, float *out, int64_t os, const int fs) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_SIGNED, fs);
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_SIGNED, fs);
    const __m512 dx = scales16(pb, fs);
    __m512i w[8];
    for (int g = 0; g < 8; g++) w[g] = _mm512_loadu_si512((const void *)(qs + 64 * g));
    __m512i s[CPU_PACKED_MAX_ROWS]; /* rows inner, as nibble_vnni_n */
    for (int r = 0; r < n; r++) s[r] = _mm512_set1_epi32(-128 * act[r][b].sum);
    for (int g = 0; g < 8; g++)
      for (int r = 0; r < n; r++) s[r] = _mm512_dpbusd_epi32(s[r], w[g], bcast4_512(act[r][b].qs + 4 * g));
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s[r]), acc[r]);
    }
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

PK_VNNI static PK_INLINE void unsigned_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                              const int n, float *out, int64_t os, const int fs) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_UNSIGNED, fs);
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_UNSIGNED, fs);
    const __m512 dx = scales16(pb, fs), mx = scales16(pb + PK_M_OFF(fs), fs);
    __m512i w[8];
    for (int g = 0; g < 8; g++) w[g] = _mm512_loadu_si512((const void *)(qs + 64 * g));
    __m512i s[CPU_PACKED_MAX_ROWS]; /* rows inner, as nibble_vnni_n */
    for (int r = 0; r < n; r++) s[r] = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++)
      for (int r = 0; r < n; r++) s[r] = _mm512_dpbusd_epi32(s[r], w[g], bcast4_512(act[r][b].qs + 4 * g));
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s[r]), acc[r]);
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

/* FS is the enclosing wrapper's constant (0: fp16 scales, 1: float scales). */
#define PK_NIBBLE_AVX2(N) (nibble_avx2_half(nb, panel, act, N, out, os, 0, FS), nibble_avx2_half(nb, panel, act, N, out, os, 1, FS))
#define PK_SIGNED_AVX2(N) (signed_avx2_half(nb, panel, act, N, out, os, 0, FS), signed_avx2_half(nb, panel, act, N, out, os, 1, FS))
#define PK_UNSIGNED_AVX2(N) (unsigned_avx2_half(nb, panel, act, N, out, os, 0, FS), unsigned_avx2_half(nb, panel, act, N, out, os, 1, FS))
#define PK_NIBBLE_VNNI(N) nibble_vnni_n(nb, panel, act, N, out, os, FS)
#define PK_SIGNED_VNNI(N) signed_vnni_n(nb, panel, act, N, out, os, FS)
#define PK_UNSIGNED_VNNI(N) unsigned_vnni_n(nb, panel, act, N, out, os, FS)

#define PK_WRAP(attr, name, call, fs)                                                              \
  attr static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                        int64_t os) {                                                              \
    enum { FS = fs };                                                                              \
    PK_ROWS_SWITCH(call)                                                                           \
  }
PK_WRAP(PK_AVX2, nibble_avx2, PK_NIBBLE_AVX2, 0)
PK_WRAP(PK_AVX2, nibble_f_avx2, PK_NIBBLE_AVX2, 1)
PK_WRAP(PK_AVX2, signed_avx2, PK_SIGNED_AVX2, 0)
PK_WRAP(PK_AVX2, signed_f_avx2, PK_SIGNED_AVX2, 1)
PK_WRAP(PK_AVX2, unsigned_avx2, PK_UNSIGNED_AVX2, 0)
PK_WRAP(PK_AVX2, unsigned_f_avx2, PK_UNSIGNED_AVX2, 1)
PK_WRAP(PK_VNNI, nibble_vnni, PK_NIBBLE_VNNI, 0)
PK_WRAP(PK_VNNI, nibble_f_vnni, PK_NIBBLE_VNNI, 1)
PK_WRAP(PK_VNNI, signed_vnni, PK_SIGNED_VNNI, 0)
PK_WRAP(PK_VNNI, signed_f_vnni, PK_SIGNED_VNNI, 1)
PK_WRAP(PK_VNNI, unsigned_vnni, PK_UNSIGNED_VNNI, 0)
PK_WRAP(PK_VNNI, unsigned_f_vnni, PK_UNSIGNED_VNNI, 1)
#endif /* PK_HAVE_X86 */

cpu_packed_fn cpu_packed_select(enum ggml_type w, enum cpu_simd_level level) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
  int fs = 0;
  const int fam = cpu_pack_kind(w, &fs);
  if (fam < 0) return NULL;
  /* [family][float scales] */
  static const cpu_packed_fn scalar[3][2] = {{nibble_scalar, nibble_f_scalar},
                                             {signed_scalar, signed_f_scalar},
                                             {unsigned_scalar, unsigned_f_scalar}};
#if PK_HAVE_X86
  static const cpu_packed_fn avx2[3][2] = {{nibble_avx2, nibble_f_avx2},
                                           {signed_avx2, signed_f_avx2},
                                           {unsigned_avx2, unsigned_f_avx2}};
  static const cpu_packed_fn vnni[3][2] = {{nibble_vnni, nibble_f_vnni},
                                           {signed_vnni, signed_f_vnni},
                                           {unsigned_vnni, unsigned_f_vnni}};
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return vnni[fam][fs];
  if (level >= CPU_SIMD_LEVEL_AVX2) return avx2[fam][fs];
#endif
  return scalar[fam][fs];
}
