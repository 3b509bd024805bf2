/* Packed matmul kernels of the block families (packed.h: NIBBLE, SIGNED, NL4, UNSIGNED, K6), each
 * fp16-scaled, float-scaled or in the zero-point form (Q4_0, Q5_0): scalar, AVX2, AVX-512 VNNI;
 * one float order (packed.h). The layouts and the repacking are packed_layout.c's. Compiled with
 * -ffp-contract=off so that only the explicit fmaf / fmadd fuse. */
#include "kernels/cpu/packed.h"

#include <float.h>
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

/* Byte offsets in a packed block: scales d at 0, mins at PK_M_OFF, quants at PK_QS_OFF. sf: the
 * scales' form (enum cpu_pack_scales). Constant-folded inside the always-inline kernels below. */
#define PK_SB(sf) ((sf) == CPU_PACK_SCALES_FLOAT ? 4 : 2)
#define PK_M_OFF(sf) (16 * PK_SB(sf))
#define PK_NO_MIN(fam, sf) \
  ((fam) == CPU_PACK_FAMILY_SIGNED || (fam) == CPU_PACK_FAMILY_NL4 || (sf) == CPU_PACK_SCALES_ZERO_POINT)
#define PK_QS_OFF(fam, sf) (PK_NO_MIN(fam, sf) ? 16 * PK_SB(sf) : 32 * PK_SB(sf))
/* The zero point of the zero-point form (Q4_0: 8, Q5_0: 16), 0 otherwise: -PK_ZP * sum(q) of the
 * activation block is added to a block's widened int32 sum (the scalar kernel starts from it),
 * exact: |32 * 31 * 128| + |16 * 32 * 128| = 192512 < 2^31. */
#define PK_ZP(fam, sf) ((sf) == CPU_PACK_SCALES_ZERO_POINT ? ((fam) == CPU_PACK_FAMILY_UNSIGNED ? 16 : 8) : 0)
#define PK_BLOCK(fam, sf) \
  (PK_QS_OFF(fam, sf) + ((fam) == CPU_PACK_FAMILY_SIGNED ? 8 : (fam) == CPU_PACK_FAMILY_UNSIGNED ? 5 : 4) * 64)

/* bsum of a quantized block: the sums of its two halves. */
static void block_bsums(block_q8_x *y) {
  int s0 = 0, s1 = 0;
  for (int i = 0; i < 16; i++) s0 += y->qs[i], s1 += y->qs[16 + i];
  y->bsum[0] = (int16_t)s0, y->bsum[1] = (int16_t)s1;
}

static void quantize_x_scalar(const float *x, block_q8_x *y, int64_t k) {
  for (int64_t b = 0; b < k / 32; b++) {
    int sum;
    y[b].d = cpu_quantize_block_q8(x + b * 32, y[b].qs, &sum);
    y[b].sum = sum;
    y[b].s = y[b].d * (float)sum;
    block_bsums(&y[b]);
  }
}

static _Thread_local bool pk_prefetch_l2; /* cpu_packed_prefetch_to_l2; read by the x86 kernels */

void cpu_packed_prefetch_to_l2(bool on) { pk_prefetch_l2 = on; }

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
    /* a block whose |x| max is under 127 / FLT_MAX (127 / amax overflows) quantizes to zeros,
     * as cpu_quantize_block_q8 (x * inf would give -128 here, 0 there) */
    const float idf = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 id = _mm256_set1_ps(idf <= FLT_MAX ? idf : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    /* int32 -> int8 in element order: packs interleave 128-bit lanes, the permute undoes it */
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)y[b].qs, p);
    /* halves' sums from the bytes (|q| <= 127: the packs did not saturate): q + 128 as unsigned
     * bytes, vpsadbw sums each 8 of them, the two 8s of a half added; minus 16 * 128 */
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    const __m256i hs = _mm256_add_epi64(sad, _mm256_shuffle_epi32(sad, 0x4E));
    const int32_t s0 = _mm256_cvtsi256_si32(hs) - 16 * 128, s1 = _mm256_extract_epi32(hs, 4) - 16 * 128;
    y[b].d = d;
    y[b].sum = s0 + s1;
    y[b].s = d * (float)(s0 + s1);
    y[b].bsum[0] = (int16_t)s0, y[b].bsum[1] = (int16_t)s1;
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
static float scale_at(const uint8_t *p, int j, int sf) {
  if (sf == CPU_PACK_SCALES_FLOAT) {
    float f;
    memcpy(&f, p + 4 * j, 4);
    return f;
  }
  return fp16_at(p + 2 * j);
}

/* ---------------------------------------------------------------- scalar */

static void packed_scalar(int fam, int sf, int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                          int n, float *out, int64_t os) {
  const size_t bb = PK_BLOCK(fam, sf);
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *pb = panel + (size_t)b * bb, *qs = pb + PK_QS_OFF(fam, sf);
      const block_q8_x *a = act[r] + b;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        int32_t s = -PK_ZP(fam, sf) * a->sum;
        if (fam != CPU_PACK_FAMILY_SIGNED) { /* nibbles (+ UNSIGNED's bit 4 of qh) */
          const bool nl = fam == CPU_PACK_FAMILY_NL4, q5 = fam == CPU_PACK_FAMILY_UNSIGNED;
          for (int h = 0; h < 4; h++)
            for (int e = 0; e < 4; e++) {
              const uint8_t q = qs[64 * h + 4 * j + e], qh = q5 ? qs[4 * 64 + 4 * j + e] : 0;
              int lo = nl ? llb_kvalues_iq4nl[q & 0x0F] : q & 0x0F, hi = nl ? llb_kvalues_iq4nl[q >> 4] : q >> 4;
              lo |= ((qh >> h) & 1) << 4, hi |= ((qh >> (h + 4)) & 1) << 4;
              s += lo * a->qs[4 * h + e] + hi * a->qs[16 + 4 * h + e];
            }
        } else {
          for (int g = 0; g < 8; g++)
            for (int e = 0; e < 4; e++) s += ((int32_t)qs[64 * g + 4 * j + e] - 128) * a->qs[4 * g + e];
        }
        acc[j] = fmaf(scale_at(pb, j, sf) * a->d, (float)s, acc[j]);
        if (!PK_NO_MIN(fam, sf)) acc[j] = fmaf(scale_at(pb + PK_M_OFF(sf), j, sf), a->s, acc[j]);
      }
    }
    memcpy(out + (int64_t)r * os, acc, sizeof(acc));
  }
}

/* K6 (Q6_K) blocks: d[16] fp16, sc[2][16] int8, q[2][3][64] (packed.h). */
#define PK_K6_SC 32
#define PK_K6_Q 64
#define PK_K6_BLOCK 448

/* Quant (0..63) of element i of column j in a K6 block. */
static int k6_quant(const uint8_t *pb, int j, int i) {
  const int t = (i / 4) % 4;
  const uint8_t *q = pb + PK_K6_Q + 192 * (i / 16) + 4 * j + i % 4;
  if (t < 3) return q[64 * t] & 0x3F;
  return q[0] >> 6 | (q[64] >> 6) << 2 | (q[128] >> 6) << 4;
}

static void k6_scalar(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out,
                      int64_t os) {
  for (int r = 0; r < n; r++) {
    float acc[CPU_PACK_COLS] = {0};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *pb = panel + (size_t)b * PK_K6_BLOCK;
      const block_q8_x *a = act[r] + b;
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        int32_t s[2] = {0, 0};
        for (int i = 0; i < 32; i++) s[i / 16] += k6_quant(pb, j, i) * a->qs[i];
        const int32_t isum = (int8_t)pb[PK_K6_SC + j] * (s[0] - 32 * a->bsum[0]) +
                             (int8_t)pb[PK_K6_SC + 16 + j] * (s[1] - 32 * a->bsum[1]);
        acc[j] = fmaf(fp16_at(pb + 2 * j) * a->d, (float)isum, acc[j]);
      }
    }
    memcpy(out + (int64_t)r * os, acc, sizeof(acc));
  }
}

#define PK_SCALAR(name, fam, sf)                                                                  \
  static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                   int64_t os) {                                                                  \
    packed_scalar(fam, sf, nb, panel, act, n, out, os);                                           \
  }
PK_SCALAR(nibble_scalar, CPU_PACK_FAMILY_NIBBLE, CPU_PACK_SCALES_FP16)
PK_SCALAR(nibble_f_scalar, CPU_PACK_FAMILY_NIBBLE, CPU_PACK_SCALES_FLOAT)
PK_SCALAR(signed_scalar, CPU_PACK_FAMILY_SIGNED, CPU_PACK_SCALES_FP16)
PK_SCALAR(signed_f_scalar, CPU_PACK_FAMILY_SIGNED, CPU_PACK_SCALES_FLOAT)
PK_SCALAR(nl4_scalar, CPU_PACK_FAMILY_NL4, CPU_PACK_SCALES_FP16)
PK_SCALAR(nl4_f_scalar, CPU_PACK_FAMILY_NL4, CPU_PACK_SCALES_FLOAT)
PK_SCALAR(unsigned_scalar, CPU_PACK_FAMILY_UNSIGNED, CPU_PACK_SCALES_FP16)
PK_SCALAR(unsigned_f_scalar, CPU_PACK_FAMILY_UNSIGNED, CPU_PACK_SCALES_FLOAT)
PK_SCALAR(nibble_z_scalar, CPU_PACK_FAMILY_NIBBLE, CPU_PACK_SCALES_ZERO_POINT)
PK_SCALAR(unsigned_z_scalar, CPU_PACK_FAMILY_UNSIGNED, CPU_PACK_SCALES_ZERO_POINT)

#if PK_HAVE_X86
/* ---------------------------------------------------------------- AVX2 (8 columns a pass) */

PK_AVX2 static PK_INLINE __m256i bcast4(const int8_t *q) {
  int32_t v;
  memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

/* Scales of columns 8*half .. 8*half+7. */
PK_AVX2 static PK_INLINE __m256 scales8(const uint8_t *p, int half, int sf) {
  if (sf == CPU_PACK_SCALES_FLOAT) return _mm256_loadu_ps((const float *)(const void *)p + 8 * half);
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * half)));
}

/* The lines of the `bytes` of the block `ahead` bytes past p, in address order, into L1
 * (prefetcht0), or into L2 (prefetcht1) when the calling thread's cpu_packed_prefetch_to_l2 is
 * on; nothing when ahead is 0. The one-row kernels' weights come from DRAM, and on some
 * CPUs the hardware prefetchers fall behind their loads (cpu_decode_prefetch_bytes, vec_dot.h).
 * Past the end of a panel it touches lines no load reads: a prefetch never faults. */
static PK_INLINE void prefetch_ahead(const uint8_t *p, int ahead, int bytes) {
  if (!ahead) return;
  const char *first = (const char *)(((uintptr_t)p + (uintptr_t)ahead) & ~(uintptr_t)63); /* may pass the end */
  if (pk_prefetch_l2)
    for (int l = 0; l < (bytes + 63) / 64; l++) _mm_prefetch(first + 64 * l, _MM_HINT_T1);
  else
    for (int l = 0; l < (bytes + 63) / 64; l++) _mm_prefetch(first + 64 * l, _MM_HINT_T0);
}

/* NIBBLE, all 16 columns of a block in one pass over it (one stream; each activation
 * broadcast serves both halves): per group pair h (elements 4h.. and 16 + 4h..) the low and
 * high nibbles of both halves' bytes, then every row. The 8 products of a lane pair are summed
 * in int16: each vpmaddubsw lane is u * a + u' * a' with u, u' <= 15 and |a|, |a'| <= 128
 * (block_q8_x: round(x * 127 / amax), -128 in a hand-made block), so |lane| <= 2 * 15 * 128 =
 * 3840 and the 8 groups of a block sum to at most 8 * 3840 = 30720 < 32768 in magnitude: exact
 * whatever the order of the adds; widened once per block (vpmaddwd by 1). n <= 4 rows: 8 int16
 * sums, 4 unpacked weight registers and the mask fill the 16 ymm registers. */
PK_AVX2 static PK_INLINE void nibble_avx2_16(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                             const int n, float *out, int64_t os, const int sf) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m256 acc[4][2];
  for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_NIBBLE, sf);
    prefetch_ahead(pb, pf, PK_BLOCK(CPU_PACK_FAMILY_NIBBLE, sf));
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_NIBBLE, sf);
    __m256i t[4][2];
    for (int h = 0; h < 4; h++) {
      const __m256i v0 = _mm256_loadu_si256((const __m256i *)(qs + 64 * h));
      const __m256i v1 = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32));
      const __m256i l0 = _mm256_and_si256(v0, m4), l1 = _mm256_and_si256(v1, m4);
      const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
      const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
      for (int r = 0; r < n; r++) {
        const __m256i al = bcast4(act[r][b].qs + 4 * h), ah = bcast4(act[r][b].qs + 16 + 4 * h);
        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, al), _mm256_maddubs_epi16(h0, ah));
        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(l1, al), _mm256_maddubs_epi16(h1, ah));
        t[r][0] = h == 0 ? p0 : _mm256_add_epi16(t[r][0], p0);
        t[r][1] = h == 0 ? p1 : _mm256_add_epi16(t[r][1], p1);
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      for (int half = 0; half < 2; half++) {
        __m256i si = _mm256_madd_epi16(t[r][half], ones);
        if (PK_ZP(CPU_PACK_FAMILY_NIBBLE, sf))
          si = _mm256_add_epi32(si, _mm256_set1_epi32(-PK_ZP(CPU_PACK_FAMILY_NIBBLE, sf) * a->sum));
        const __m256 dx = scales8(pb, half, sf), s = _mm256_cvtepi32_ps(si);
        acc[r][half] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(a->d)), s, acc[r][half]);
        if (!PK_NO_MIN(CPU_PACK_FAMILY_NIBBLE, sf))
          acc[r][half] = _mm256_fmadd_ps(scales8(pb + PK_M_OFF(sf), half, sf), _mm256_set1_ps(a->s), acc[r][half]);
      }
    }
  }
  for (int r = 0; r < n; r++)
    for (int half = 0; half < 2; half++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r][half]);
}

/* SIGNED and NL4: signed weights by the sign trick (|w| unsigned, q with w's sign), widened
 * per group. NL4's weights are kvalues_iq4nl[q], looked up by vpshufb from the 4-bit indices. */
PK_AVX2 static PK_INLINE void signed_avx2_half(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                               const int n, float *out, int64_t os, int half, const int sf,
                                               const int fam) {
  __m256 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)llb_kvalues_iq4nl));
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(fam, sf);
    const uint8_t *qs = pb + PK_QS_OFF(fam, sf);
    const __m256 dx = scales8(pb, half, sf);
    __m256i ws[8], wa[8];
    if (fam == CPU_PACK_FAMILY_NL4) {
      for (int h = 0; h < 4; h++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32 * half));
        ws[h] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
        ws[h + 4] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      }
    } else {
      for (int g = 0; g < 8; g++)
        ws[g] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qs + 64 * g + 32 * half)), bias);
    }
    for (int g = 0; g < 8; g++) wa[g] = _mm256_sign_epi8(ws[g], ws[g]);
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

/* SIGNED and NL4, all 16 columns of a block in one pass (as nibble_avx2_16): per group the
 * weights of both halves, then every row, each broadcast serving both halves. The same
 * operations per lane as signed_avx2_half, widened per group: exact int32 sums. n <= 3. */
PK_AVX2 static PK_INLINE void signed_avx2_16(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                             const int n, float *out, int64_t os, const int sf, const int fam) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m256 acc[3][2];
  for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)llb_kvalues_iq4nl));
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(fam, sf);
    prefetch_ahead(pb, pf, PK_BLOCK(fam, sf));
    const uint8_t *qs = pb + PK_QS_OFF(fam, sf);
    __m256i s[3][2];
    for (int r = 0; r < n; r++) s[r][0] = s[r][1] = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
      __m256i ws[2];
      for (int half = 0; half < 2; half++) {
        if (fam == CPU_PACK_FAMILY_NL4) { /* group g: the low nibbles of bytes 64 * (g % 4), or the high */
          const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * (g & 3) + 32 * half));
          ws[half] = _mm256_shuffle_epi8(lut, _mm256_and_si256(g < 4 ? v : _mm256_srli_epi16(v, 4), m4));
        } else {
          ws[half] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qs + 64 * g + 32 * half)), bias);
        }
      }
      const __m256i wa0 = _mm256_sign_epi8(ws[0], ws[0]), wa1 = _mm256_sign_epi8(ws[1], ws[1]);
      for (int r = 0; r < n; r++) {
        const __m256i a = bcast4(act[r][b].qs + 4 * g);
        s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(wa0, _mm256_sign_epi8(a, ws[0])), ones));
        s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(wa1, _mm256_sign_epi8(a, ws[1])), ones));
      }
    }
    for (int r = 0; r < n; r++)
      for (int half = 0; half < 2; half++) {
        const __m256 dx = scales8(pb, half, sf);
        acc[r][half] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(act[r][b].d)), _mm256_cvtepi32_ps(s[r][half]),
                                       acc[r][half]);
      }
  }
  for (int r = 0; r < n; r++)
    for (int half = 0; half < 2; half++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r][half]);
}

/* The 8 groups of 5-bit quants of columns 8*half .. 8*half+7 of an UNSIGNED block: the nibbles
 * as NIBBLE's, bit g of qh moved to bit 4 (16-bit shifts: what crosses a byte is masked off). */
PK_AVX2 static PK_INLINE void unsigned_unpack_avx2(const uint8_t *qs, int half, __m256i w[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i qh = _mm256_loadu_si256((const __m256i *)(qs + 4 * 64 + 32 * half));
  const __m256i qh4 = _mm256_slli_epi16(qh, 4); /* bit g at 4 + g */
  for (int h = 0; h < 4; h++) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32 * half));
    const __m256i lo = _mm256_and_si256(h == 0 ? qh4 : _mm256_srli_epi16(qh4, h), m10);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, h), m10);
    w[h] = _mm256_or_si256(_mm256_and_si256(v, m4), lo);
    w[h + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), hi);
  }
}

/* UNSIGNED, all 16 columns of a block in one pass (as nibble_avx2_16): per group pair h the
 * 5-bit quants of both halves (nibbles as NIBBLE's; bit h of qh to bit 4 by a 16-bit left shift
 * of 4 - h, bit h + 4 by a right shift of h: what crosses a byte is masked off), then every
 * row. Any four groups' products stay within int16 (4 * 2 * 31 * 127 = 31496 < 32768), so
 * groups {h, h + 4} of h = 0, 1 are summed there, widened, then those of h = 2, 3: exact
 * int32 sums as the staged kernels'. n <= 2. */
PK_AVX2 static PK_INLINE void unsigned_avx2_16(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                               const int n, float *out, int64_t os, const int sf) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m256 acc[2][2];
  for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(CPU_PACK_FAMILY_UNSIGNED, sf);
    prefetch_ahead(pb, pf, PK_BLOCK(CPU_PACK_FAMILY_UNSIGNED, sf));
    const uint8_t *qs = pb + PK_QS_OFF(CPU_PACK_FAMILY_UNSIGNED, sf);
    const __m256i qh0 = _mm256_loadu_si256((const __m256i *)(qs + 4 * 64));
    const __m256i qh1 = _mm256_loadu_si256((const __m256i *)(qs + 4 * 64 + 32));
    __m256i s[2][2], t[2][2];
    for (int h = 0; h < 4; h++) {
      __m256i lo[2], hi[2];
      for (int half = 0; half < 2; half++) {
        const __m256i qh = half ? qh1 : qh0;
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32 * half));
        const __m256i bl = _mm256_and_si256(_mm256_slli_epi16(qh, 4 - h), m10);
        const __m256i bh = _mm256_and_si256(h == 0 ? qh : _mm256_srli_epi16(qh, h), m10);
        lo[half] = _mm256_or_si256(_mm256_and_si256(v, m4), bl);
        hi[half] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), bh);
      }
      for (int r = 0; r < n; r++) {
        const __m256i al = bcast4(act[r][b].qs + 4 * h), ah = bcast4(act[r][b].qs + 16 + 4 * h);
        for (int half = 0; half < 2; half++) {
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[half], al), _mm256_maddubs_epi16(hi[half], ah));
          t[r][half] = (h & 1) == 0 ? p : _mm256_add_epi16(t[r][half], p);
          if (h == 1) s[r][half] = _mm256_madd_epi16(t[r][half], ones);
          if (h == 3) s[r][half] = _mm256_add_epi32(s[r][half], _mm256_madd_epi16(t[r][half], ones));
        }
      }
    }
    for (int r = 0; r < n; r++) {
      const block_q8_x *a = act[r] + b;
      for (int half = 0; half < 2; half++) {
        if (PK_ZP(CPU_PACK_FAMILY_UNSIGNED, sf))
          s[r][half] = _mm256_add_epi32(s[r][half], _mm256_set1_epi32(-PK_ZP(CPU_PACK_FAMILY_UNSIGNED, sf) * a->sum));
        const __m256 dx = scales8(pb, half, sf);
        acc[r][half] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(s[r][half]),
                                       acc[r][half]);
        if (!PK_NO_MIN(CPU_PACK_FAMILY_UNSIGNED, sf))
          acc[r][half] = _mm256_fmadd_ps(scales8(pb + PK_M_OFF(sf), half, sf), _mm256_set1_ps(a->s), acc[r][half]);
      }
    }
  }
  for (int r = 0; r < n; r++)
    for (int half = 0; half < 2; half++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r][half]);
}

/* Staged AVX2 kernels for calls of many rows (prefill). The kernels above keep a block's 8
 * unpacked weight groups in registers and walk the rows inside the block: with 16 ymm
 * registers, past ~4 rows the row accumulators spill, and every weight group of a half is
 * multiplied against an activation broadcast of its own (two broadcasts per group and row).
 * Here a run of up to PK_STAGE_BLOCKS blocks is unpacked once into an L1-resident stage (the
 * weights as bytes, both halves, and the scales as floats), then the rows walk the run two at
 * a time with their four accumulators in registers: each staged weight register is loaded once
 * for both rows, each activation broadcast serves both halves, and nothing spills; a call of
 * many rows (cpu_packed_select_many) unpacks once for all of them. The integer sums are the
 * same exact sums (any order) and the float epilogue is the same per output, so the bits are
 * those of the other kernels. */
#define PK_STAGE_BLOCKS 16
/* Keeps v in a register at this point of the program: GCC otherwise reassociates a chain of
 * integer adds into a tree over all the products first, which spills them. */
#define PK_PIN(v) __asm__("" : "+x"(v))

/* One staged block: w[g][half] = the 32 weights (bytes) of group g (elements 4g..4g+3) of
 * columns 8*half..8*half+7; d, m = the 16 columns' scale and min as floats (m not written in
 * the zero-point form). */
struct pk_stage {
  __m256i w[8][2];
  __m256 d[2], m[2];
};

/* Stages block pb of family fam (NIBBLE or UNSIGNED) into st. */
PK_AVX2 static PK_INLINE void stage_block_avx2(const uint8_t *pb, int fam, int sf, struct pk_stage *st) {
  const uint8_t *qs = pb + PK_QS_OFF(fam, sf);
  for (int half = 0; half < 2; half++) {
    __m256i w[8];
    if (fam == CPU_PACK_FAMILY_UNSIGNED) {
      unsigned_unpack_avx2(qs, half, w);
    } else {
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      for (int h = 0; h < 4; h++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32 * half));
        w[h] = _mm256_and_si256(v, m4);
        w[h + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      }
    }
    for (int g = 0; g < 8; g++) _mm256_store_si256(&st->w[g][half], w[g]);
    st->d[half] = scales8(pb, half, sf);
    if (!PK_NO_MIN(fam, sf)) st->m[half] = scales8(pb + PK_M_OFF(sf), half, sf);
  }
}

/* R (1 or 2) rows over nc staged blocks: o_r[0..15] = acc (from o_r when `cont`, else from 0)
 * after the blocks. Two rows at a time share each staged weight load and give the out-of-order
 * core four accumulator chains (one row's two chains of 2 dependent fma a block left it
 * waiting on them). NIBBLE sums a block's 8 groups in int16 (|sum| <= 8 * 2 * 15 * 127 <
 * 32768, see nibble_avx2_16); UNSIGNED sums 4 groups at a time (4 * 2 * 31 * 127 < 32768) and
 * widens twice. */
PK_AVX2 static PK_INLINE void staged_rows_avx2(const struct pk_stage *st, int64_t nc, const block_q8_x *const *act,
                                               int64_t b0, float *o, int64_t os, int cont, const int fam, const int sf,
                                               const int R) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2][2];
  for (int r = 0; r < R; r++)
    for (int half = 0; half < 2; half++)
      acc[r][half] = cont ? _mm256_loadu_ps(o + r * os + 8 * half) : _mm256_setzero_ps();
  for (int64_t i = 0; i < nc; i++, st++) {
    __m256i s[2][2], t[2][2];
    const int gq = fam == CPU_PACK_FAMILY_UNSIGNED ? 4 : 8; /* groups summed in int16 before widening */
    for (int g = 0; g < 8; g++) {
      const __m256i w0 = _mm256_load_si256(&st->w[g][0]), w1 = _mm256_load_si256(&st->w[g][1]);
      for (int r = 0; r < R; r++) {
        const __m256i bc = bcast4(act[r][b0 + i].qs + 4 * g);
        const __m256i p0 = _mm256_maddubs_epi16(w0, bc), p1 = _mm256_maddubs_epi16(w1, bc);
        t[r][0] = g % gq == 0 ? p0 : _mm256_add_epi16(t[r][0], p0);
        t[r][1] = g % gq == 0 ? p1 : _mm256_add_epi16(t[r][1], p1);
        PK_PIN(t[r][0]);
        PK_PIN(t[r][1]);
        if (g % gq == gq - 1)
          for (int half = 0; half < 2; half++) {
            const __m256i wd = _mm256_madd_epi16(t[r][half], ones);
            s[r][half] = g == gq - 1 ? wd : _mm256_add_epi32(s[r][half], wd);
          }
      }
    }
    for (int r = 0; r < R; r++) {
      const block_q8_x *a = act[r] + b0 + i;
      const __m256 da = _mm256_set1_ps(a->d), sa = _mm256_set1_ps(a->s);
      for (int half = 0; half < 2; half++) {
        if (PK_ZP(fam, sf)) s[r][half] = _mm256_add_epi32(s[r][half], _mm256_set1_epi32(-PK_ZP(fam, sf) * a->sum));
        acc[r][half] = _mm256_fmadd_ps(_mm256_mul_ps(st->d[half], da), _mm256_cvtepi32_ps(s[r][half]), acc[r][half]);
        if (!PK_NO_MIN(fam, sf)) acc[r][half] = _mm256_fmadd_ps(st->m[half], sa, acc[r][half]);
      }
    }
  }
  for (int r = 0; r < R; r++)
    for (int half = 0; half < 2; half++) _mm256_storeu_ps(o + r * os + 8 * half, acc[r][half]);
}

/* NIBBLE or UNSIGNED, any n rows (up to CPU_PACKED_MANY_ROWS: cpu_packed_select_many), staged:
 * runs of PK_STAGE_BLOCKS blocks, each unpacked once, then every row over the run. */
PK_AVX2 static PK_INLINE void staged_avx2(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, const int n,
                                          float *out, int64_t os, const int sf, const int fam) {
  struct pk_stage st[PK_STAGE_BLOCKS];
  const size_t bb = PK_BLOCK(fam, sf);
  for (int64_t b0 = 0; b0 < nb; b0 += PK_STAGE_BLOCKS) {
    const int64_t nc = nb - b0 < PK_STAGE_BLOCKS ? nb - b0 : PK_STAGE_BLOCKS;
    for (int64_t i = 0; i < nc; i++) stage_block_avx2(panel + (size_t)(b0 + i) * bb, fam, sf, &st[i]);
    int r = 0;
    for (; r + 2 <= n; r += 2) staged_rows_avx2(st, nc, act + r, b0, out + (int64_t)r * os, os, b0 > 0, fam, sf, 2);
    if (r < n) staged_rows_avx2(st, nc, act + r, b0, out + (int64_t)r * os, os, b0 > 0, fam, sf, 1);
  }
}

/* K6 scales of columns 8*half .. 8*half+7 as int16 pairs per 32-bit lane: (sc0, sc0), (sc1,
 * sc1) and (sc0, sc1), for vpmaddwd. */
PK_AVX2 static PK_INLINE void k6_scale_pairs(const uint8_t *pb, int half, __m256i *p0, __m256i *p1, __m256i *p01) {
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  const __m256i s0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(pb + PK_K6_SC + 8 * half)));
  const __m256i s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(pb + PK_K6_SC + 16 + 8 * half)));
  *p0 = _mm256_or_si256(_mm256_and_si256(s0, lo16), _mm256_slli_epi32(s0, 16));
  *p1 = _mm256_or_si256(_mm256_and_si256(s1, lo16), _mm256_slli_epi32(s1, 16));
  *p01 = _mm256_or_si256(_mm256_and_si256(s0, lo16), _mm256_slli_epi32(s1, 16));
}

/* The 4 groups of quants (0..63) of sub-block s (elements 16s + 4t + e, group t) of columns
 * 8*half .. 8*half+7 of a K6 block: groups 0-2 the low 6 bits of their bytes, group 3 their top
 * 2 bits put together (masked first, so the 16-bit shifts move nothing across a byte). */
PK_AVX2 static PK_INLINE void k6_unpack4_avx2(const uint8_t *pb, int s, int half, __m256i w[4]) {
  const __m256i m3f = _mm256_set1_epi8(0x3F);
  const uint8_t *q = pb + PK_K6_Q + 192 * s + 32 * half;
  const __m256i x = _mm256_loadu_si256((const __m256i *)q), y = _mm256_loadu_si256((const __m256i *)(q + 64));
  const __m256i z = _mm256_loadu_si256((const __m256i *)(q + 128));
  w[0] = _mm256_and_si256(x, m3f);
  w[1] = _mm256_and_si256(y, m3f);
  w[2] = _mm256_and_si256(z, m3f);
  w[3] = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m3f, x), 6),
                                         _mm256_srli_epi16(_mm256_andnot_si256(m3f, y), 4)),
                         _mm256_srli_epi16(_mm256_andnot_si256(m3f, z), 2));
}

/* The 8 groups of quants (0..63) of columns 8*half .. 8*half+7 of a K6 block. */
PK_AVX2 static PK_INLINE void k6_unpack_avx2(const uint8_t *pb, int half, __m256i q[8]) {
  k6_unpack4_avx2(pb, 0, half, q);
  k6_unpack4_avx2(pb, 1, half, q + 4);
}

/* K6 offsets of activation block a for the one-pass kernel: c[s] has, in every 32-bit lane
 * (a column), the int16 pair 32 * (sum over the 4 groups g of sub-block s of a[4g] + a[4g + 1],
 * the same of a[4g + 2] + a[4g + 3]): what the weights' -32 adds to the two int16 lanes of a
 * column's vpmaddubsw sums over the sub-block. Wrapping int16 adds: exact mod 2^16. */
PK_AVX2 static PK_INLINE void k6_offsets_avx2(const block_q8_x *a, __m256i c[2]) {
  const __m256i x = _mm256_maddubs_epi16(_mm256_set1_epi8(32), _mm256_loadu_si256((const __m256i *)(const void *)a->qs));
  __m256i y = _mm256_add_epi16(x, _mm256_shuffle_epi32(x, 0x4E));
  y = _mm256_add_epi16(y, _mm256_shuffle_epi32(y, 0xB1)); /* every dword of a 128-bit lane: its sub-block's pair */
  c[0] = _mm256_permute4x64_epi64(y, 0x00);
  c[1] = _mm256_permute4x64_epi64(y, 0xAA);
}

/* K6 scales of sub-block s of columns 8*half .. 8*half+7 as the int16 pair (sc, sc) per 32-bit
 * lane, for vpmaddwd. */
PK_AVX2 static PK_INLINE __m256i k6_scale_pair(const uint8_t *pb, int s, int half) {
  const __m256i lo2 = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9,
                                       8, 9, 12, 13, 12, 13);
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(pb + PK_K6_SC + 16 * s + 8 * half)));
  return _mm256_shuffle_epi8(v, lo2);
}

/* K6, all 16 columns of a block in one pass (as nibble_avx2_16): per sub-block s the quants of
 * both halves (k6_unpack4_avx2), then every row. A sub-block's 4 groups are summed in int16
 * whole, centred: t = offset - the 4 vpmaddubsw sums (k6_offsets_avx2), each int16 lane the sum
 * of 8 products (32 - q) * a with 32 - q in -31..32 and a in -128..127, so -32768 <= t <= 32512
 * (8 * -4096, 8 * 4064): t fits int16, and as the adds wrap (exact mod 2^16) it is exact
 * whatever the order. vpmaddwd by the scale pairs then gives x = -isum, and the float step
 * subtracts: fnmadd(d * d_a, (float)x, acc) is fma(d * d_a, (float)isum, acc) bit for bit
 * (int -> float rounds to nearest even, symmetric; negation is exact). n <= 2 (called for 1
 * row). */
PK_AVX2 static PK_INLINE void k6_avx2_16(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, const int n,
                                         float *out, int64_t os) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m256 acc[2][2];
  for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_K6_BLOCK;
    prefetch_ahead(pb, pf, PK_K6_BLOCK);
    __m256i c[2][2], x[2][2];
    for (int r = 0; r < n; r++) k6_offsets_avx2(act[r] + b, c[r]);
    for (int s = 0; s < 2; s++) {
      __m256i w[2][4];
      for (int half = 0; half < 2; half++) k6_unpack4_avx2(pb, s, half, w[half]);
      for (int r = 0; r < n; r++) {
        __m256i t[2] = {c[r][s], c[r][s]};
        for (int g = 0; g < 4; g++) {
          const __m256i a = bcast4(act[r][b].qs + 16 * s + 4 * g);
          for (int half = 0; half < 2; half++) t[half] = _mm256_sub_epi16(t[half], _mm256_maddubs_epi16(w[half][g], a));
        }
        for (int half = 0; half < 2; half++) {
          const __m256i y = _mm256_madd_epi16(t[half], k6_scale_pair(pb, s, half));
          x[r][half] = s == 0 ? y : _mm256_add_epi32(x[r][half], y);
        }
      }
    }
    for (int half = 0; half < 2; half++) {
      const __m256 dx = scales8(pb, half, 0);
      for (int r = 0; r < n; r++)
        acc[r][half] = _mm256_fnmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(act[r][b].d)), _mm256_cvtepi32_ps(x[r][half]),
                                        acc[r][half]);
    }
  }
  for (int r = 0; r < n; r++)
    for (int half = 0; half < 2; half++) _mm256_storeu_ps(out + (int64_t)r * os + 8 * half, acc[r][half]);
}

/* K6 staged as staged_avx2: a staged block holds the quants (0..63) as bytes, the int16 scale
 * pairs of k6_scale_pairs and the scale as floats. */
struct pk_stage_k6 {
  __m256i w[8][2];
  __m256i p0[2], p1[2], p01[2];
  __m256 d[2];
};

/* R (1 or 2) K6 rows over nc staged blocks, as staged_rows_avx2: the group pairs (g, g + 1)
 * summed in int16 (2 * 2 * 63 * 128 = 32256 < 32768) and widened by their sub-block's scale pair, the
 * offset 32 * (sc0 * bsum0 + sc1 * bsum1) taken off: the exact int32 sums of k6_avx2_16 and
 * the scalar path. */
PK_AVX2 static PK_INLINE void k6_staged_rows_avx2(const struct pk_stage_k6 *st, int64_t nc,
                                                  const block_q8_x *const *act, int64_t b0, float *o, int64_t os,
                                                  int cont, const int R) {
  __m256 acc[2][2];
  for (int r = 0; r < R; r++)
    for (int half = 0; half < 2; half++)
      acc[r][half] = cont ? _mm256_loadu_ps(o + r * os + 8 * half) : _mm256_setzero_ps();
  for (int64_t i = 0; i < nc; i++, st++) {
    __m256i s[2][2];
    for (int g = 0; g < 8; g += 2) {
      const __m256i w0 = _mm256_load_si256(&st->w[g][0]), w1 = _mm256_load_si256(&st->w[g][1]);
      const __m256i v0 = _mm256_load_si256(&st->w[g + 1][0]), v1 = _mm256_load_si256(&st->w[g + 1][1]);
      for (int r = 0; r < R; r++) {
        const __m256i bc = bcast4(act[r][b0 + i].qs + 4 * g), bd = bcast4(act[r][b0 + i].qs + 4 * g + 4);
        __m256i t0 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bc), _mm256_maddubs_epi16(v0, bd));
        __m256i t1 = _mm256_add_epi16(_mm256_maddubs_epi16(w1, bc), _mm256_maddubs_epi16(v1, bd));
        PK_PIN(t0);
        PK_PIN(t1);
        t0 = _mm256_madd_epi16(t0, g < 4 ? st->p0[0] : st->p1[0]);
        t1 = _mm256_madd_epi16(t1, g < 4 ? st->p0[1] : st->p1[1]);
        s[r][0] = g == 0 ? t0 : _mm256_add_epi32(s[r][0], t0);
        s[r][1] = g == 0 ? t1 : _mm256_add_epi32(s[r][1], t1);
      }
    }
    for (int r = 0; r < R; r++) {
      const block_q8_x *a = act[r] + b0 + i;
      int32_t bs;
      memcpy(&bs, a->bsum, 4);
      const __m256i bsv = _mm256_set1_epi32(bs);
      const __m256 da = _mm256_set1_ps(a->d);
      for (int half = 0; half < 2; half++) {
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(st->p01[half], bsv), 5);
        acc[r][half] = _mm256_fmadd_ps(_mm256_mul_ps(st->d[half], da),
                                       _mm256_cvtepi32_ps(_mm256_sub_epi32(s[r][half], off)), acc[r][half]);
      }
    }
  }
  for (int r = 0; r < R; r++)
    for (int half = 0; half < 2; half++) _mm256_storeu_ps(o + r * os + 8 * half, acc[r][half]);
}

/* K6, any n rows (up to CPU_PACKED_MANY_ROWS), staged as staged_avx2. */
PK_AVX2 static PK_INLINE void k6_staged_avx2(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                             const int n, float *out, int64_t os) {
  struct pk_stage_k6 st[PK_STAGE_BLOCKS];
  for (int64_t b0 = 0; b0 < nb; b0 += PK_STAGE_BLOCKS) {
    const int64_t nc = nb - b0 < PK_STAGE_BLOCKS ? nb - b0 : PK_STAGE_BLOCKS;
    for (int64_t i = 0; i < nc; i++) {
      const uint8_t *pb = panel + (size_t)(b0 + i) * PK_K6_BLOCK;
      for (int half = 0; half < 2; half++) {
        __m256i q[8];
        k6_unpack_avx2(pb, half, q);
        for (int g = 0; g < 8; g++) _mm256_store_si256(&st[i].w[g][half], q[g]);
        k6_scale_pairs(pb, half, &st[i].p0[half], &st[i].p1[half], &st[i].p01[half]);
        st[i].d[half] = scales8(pb, half, 0);
      }
    }
    int r = 0;
    for (; r + 2 <= n; r += 2) k6_staged_rows_avx2(st, nc, act + r, b0, out + (int64_t)r * os, os, b0 > 0, 2);
    if (r < n) k6_staged_rows_avx2(st, nc, act + r, b0, out + (int64_t)r * os, os, b0 > 0, 1);
  }
}

/* ---------------------------------------------------------------- AVX-512 VNNI (16 columns) */

PK_VNNI static PK_INLINE __m512i bcast4_512(const int8_t *q) {
  int32_t v;
  memcpy(&v, q, 4);
  return _mm512_set1_epi32(v);
}

PK_VNNI static PK_INLINE __m512 scales16(const uint8_t *p, int sf) {
  if (sf == CPU_PACK_SCALES_FLOAT) return _mm512_loadu_ps((const void *)p);
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* The 8 weight groups of a NIBBLE or UNSIGNED block's 16 columns (qs: its quants), as bytes:
 * the nibbles; UNSIGNED's bit g of qh moved to bit 4 as unsigned_unpack_avx2 does, and the two
 * merged by one vpternlogd ((nibbles & 0x0F) | bit). */
PK_VNNI static PK_INLINE void unpack_vnni(const uint8_t *qs, const int fam, __m512i w[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m16 = _mm512_set1_epi8(0x10);
  const __m512i qh = fam == CPU_PACK_FAMILY_UNSIGNED ? _mm512_loadu_si512((const void *)(qs + 4 * 64)) : m4;
  const __m512i qh4 = _mm512_slli_epi16(qh, 4);
  for (int h = 0; h < 4; h++) {
    const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * h));
    if (fam == CPU_PACK_FAMILY_UNSIGNED) {
      const __m512i lo = _mm512_and_si512(h == 0 ? qh4 : _mm512_srli_epi16(qh4, h), m16);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qh, h), m16);
      w[h] = _mm512_ternarylogic_epi32(v, lo, m4, 0xEC);
      w[h + 4] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), hi, m4, 0xEC);
    } else {
      w[h] = _mm512_and_si512(v, m4);
      w[h + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
  }
}

/* One row's float step for a block of NIBBLE / UNSIGNED weights (packed.h's order): s, the exact
 * sum of the products, less the zero point's z * sum(q); then acc = fma(d_w * d_a, s, acc) and,
 * where the form has a min, acc = fma(m_w, s_a, acc). dx, mx: the 16 columns' d and m. */
PK_VNNI static PK_INLINE __m512 block_step_vnni(__m512 acc, __m512i s, __m512 dx, __m512 mx, const block_q8_x *a,
                                                const int fam, const int sf) {
  if (PK_ZP(fam, sf)) s = _mm512_add_epi32(s, _mm512_set1_epi32(-PK_ZP(fam, sf) * a->sum));
  acc = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc);
  if (!PK_NO_MIN(fam, sf)) acc = _mm512_fmadd_ps(mx, _mm512_set1_ps(a->s), acc);
  return acc;
}

/* The n rows' sums of one block's 32 products: groups outer, rows inner, so the rows' dpbusd
 * chains interleave in program order (one chain after another left the out-of-order window to
 * overlap 8 chains of 8). */
PK_VNNI static PK_INLINE void block_sums_vnni(const __m512i w[8], const block_q8_x *const *act, int64_t b, const int n,
                                              __m512i *s) {
  for (int r = 0; r < n; r++) s[r] = _mm512_setzero_si512();
  for (int g = 0; g < 8; g++)
    for (int r = 0; r < n; r++) s[r] = _mm512_dpbusd_epi32(s[r], w[g], bcast4_512(act[r][b].qs + 4 * g));
}

/* SIGNED weights are stored plus 128: sum((w + 128) * q) - 128 * sum(q) = sum(w * q), exact.
 * NL4: w + 128 = (kvalues_iq4nl + 128)[q], looked up by vpshufb from the 4-bit indices. */
PK_VNNI static PK_INLINE void signed_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                                            const int n, float *out, int64_t os, const int sf, const int fam) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i lut = _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)llb_kvalues_iq4nl)),
      _mm512_set1_epi8((char)0x80));
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(fam, sf);
    prefetch_ahead(pb, pf, PK_BLOCK(fam, sf));
    const uint8_t *qs = pb + PK_QS_OFF(fam, sf);
    const __m512 dx = scales16(pb, sf);
    __m512i w[8];
    if (fam == CPU_PACK_FAMILY_NL4) {
      for (int h = 0; h < 4; h++) {
        const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * h));
        w[h] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
        w[h + 4] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
      }
    } else {
      for (int g = 0; g < 8; g++) w[g] = _mm512_loadu_si512((const void *)(qs + 64 * g));
    }
    __m512i s[CPU_PACKED_MAX_ROWS]; /* rows inner, as block_sums_vnni */
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

/* Touches the 64-byte lines that hold the `bytes` of a block at p in address order (prefetcht0:
 * into L1), ahead of its loads; a block that starts or ends inside a line (the zero-point
 * form's 352 bytes) touches that line too. */
PK_VNNI static PK_INLINE void touch_lines_in_order(const uint8_t *p, const int bytes) {
  /* (bytes + 63) / 64 lines from p's: whole lines where bytes is a multiple of 64 (such blocks
   * start on a line in a 64-aligned buffer); the zero-point form's 352-byte blocks start 0 or
   * 32 bytes into a line in a 32-aligned buffer (the forward's and the cache's are 64-aligned),
   * and span 6 lines at either offset */
  const char *first = (const char *)((uintptr_t)p & ~(uintptr_t)63);
  for (int l = 0; l < (bytes + 63) / 64; l++) _mm_prefetch(first + 64 * l, _MM_HINT_T0);
  __asm__ volatile("" ::: "memory"); /* the compiler schedules no load of the block above them */
}

/* NIBBLE and UNSIGNED on VNNI, up to CPU_PACKED_MAX_ROWS rows, each block unpacked once per
 * call. An UNSIGNED call of 1-3 rows (ops.c's decode path: the weights come from DRAM) first
 * touches each block's lines in address order. The compiler issues a block's loads in its own
 * order (the 5th-bit line and nibbles first, the scales line last), and so the L1 misses came
 * out of order: the hardware prefetcher then stayed behind and the stream ran ~0.7 of a plain
 * read of the bytes (65536x2048, 1 row, 1 or 2 threads; 0.96-0.99 touched in order; touched in
 * reverse order, or into L2 only by prefetcht2, no better than not at all; kernels/cpu/README.md).
 * Calls of more rows (prefill, batch 16) are bound by their arithmetic and skip it (cache-
 * resident the touch cost -2% at 1 row and -3% at 3; at 8 and 64 rows ~1%). */
PK_VNNI static PK_INLINE void nu_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, const int n,
                                        float *out, int64_t os, const int sf, const int fam) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_BLOCK(fam, sf);
    prefetch_ahead(pb, pf, PK_BLOCK(fam, sf));
    if (fam == CPU_PACK_FAMILY_UNSIGNED && n <= 3) touch_lines_in_order(pb, PK_BLOCK(fam, sf));
    __m512i w[8], s[CPU_PACKED_MAX_ROWS];
    unpack_vnni(pb + PK_QS_OFF(fam, sf), fam, w);
    block_sums_vnni(w, act, b, n, s);
    const __m512 dx = scales16(pb, sf), mx = PK_NO_MIN(fam, sf) ? dx : scales16(pb + PK_M_OFF(sf), sf);
    for (int r = 0; r < n; r++) acc[r] = block_step_vnni(acc[r], s[r], dx, mx, act[r] + b, fam, sf);
  }
  for (int r = 0; r < n; r++) _mm512_storeu_ps(out + (int64_t)r * os, acc[r]);
}

/* UNSIGNED on VNNI for calls of many rows (prefill; the code takes NIBBLE too, which is not
 * staged: see PK_MANY_VNNI_WRAP), staged as staged_avx2: runs of PK_STAGE_BLOCKS blocks
 * unpacked once into an L1-resident stage (the 8 weight groups as bytes, d and m as floats:
 * 10 KiB), then the rows 8 at a time over the run. nu_vnni_n unpacks each block once per call
 * of 8 rows: on a CPU whose two 512-bit pipes both run vpdpbusd (the Intel Xeon guest's peak
 * loop does two a cycle), UNSIGNED's unpacking (~27 shifts, ands and ternary-logic ops a block)
 * adds a fifth to the ~105 ops those pipes run for 8 rows (64 vpdpbusd and the rows' float
 * steps). The sums and the float steps are nu_vnni_n's, in the same order, with each row's
 * accumulators carried between runs through `out` (exact): the same bits. */
struct pk_stage_vnni {
  __m512i w[8];
  __m512 d, m;
};

/* R rows (1-8) over nc staged blocks: o_r[0..15] = acc (from o_r when `cont`, else from 0) after
 * the blocks, as nu_vnni_n's. */
PK_VNNI static PK_INLINE void staged_rows_vnni(const struct pk_stage_vnni *st, int64_t nc, const block_q8_x *const *act,
                                               int64_t b0, float *o, int64_t os, int cont, const int fam, const int sf,
                                               const int R) {
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < R; r++) acc[r] = cont ? _mm512_loadu_ps(o + r * os) : _mm512_setzero_ps();
  for (int64_t i = 0; i < nc; i++, st++) {
    __m512i s[CPU_PACKED_MAX_ROWS];
    block_sums_vnni(st->w, act, b0 + i, R, s);
    for (int r = 0; r < R; r++) acc[r] = block_step_vnni(acc[r], s[r], st->d, st->m, act[r] + b0 + i, fam, sf);
  }
  for (int r = 0; r < R; r++) _mm512_storeu_ps(o + r * os, acc[r]);
}

/* NIBBLE or UNSIGNED, any n rows (up to CPU_PACKED_MANY_ROWS: cpu_packed_select_many), staged. */
PK_VNNI static PK_INLINE void staged_vnni(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, const int n,
                                          float *out, int64_t os, const int sf, const int fam) {
  struct pk_stage_vnni st[PK_STAGE_BLOCKS];
  const size_t bb = PK_BLOCK(fam, sf);
  for (int64_t b0 = 0; b0 < nb; b0 += PK_STAGE_BLOCKS) {
    const int64_t nc = nb - b0 < PK_STAGE_BLOCKS ? nb - b0 : PK_STAGE_BLOCKS;
    for (int64_t i = 0; i < nc; i++) {
      const uint8_t *pb = panel + (size_t)(b0 + i) * bb;
      unpack_vnni(pb + PK_QS_OFF(fam, sf), fam, st[i].w);
      st[i].d = scales16(pb, sf);
      st[i].m = PK_NO_MIN(fam, sf) ? st[i].d : scales16(pb + PK_M_OFF(sf), sf);
    }
    const int cont = b0 > 0;
    int r = 0;
    for (; r + 8 <= n; r += 8) staged_rows_vnni(st, nc, act + r, b0, out + (int64_t)r * os, os, cont, fam, sf, 8);
    const block_q8_x *const *ar = act + r;
    float *orow = out + (int64_t)r * os;
    switch (n - r) { /* the remainder, each count a constant */
      case 7: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 7); break;
      case 6: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 6); break;
      case 5: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 5); break;
      case 4: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 4); break;
      case 3: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 3); break;
      case 2: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 2); break;
      case 1: staged_rows_vnni(st, nc, ar, b0, orow, os, cont, fam, sf, 1); break;
      default: break;
    }
  }
}

/* K6 on VNNI: vpdpbusd per 16-weight sub-block, then the offset and the int8 scales in int32
 * (vpmulld): the same exact isum as the other levels. */
PK_VNNI static PK_INLINE void k6_vnni_n(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, const int n,
                                        float *out, int64_t os) {
  const int pf = n <= 3 ? cpu_decode_prefetch_bytes() : 0; /* the decode calls stream from DRAM */
  __m512 acc[CPU_PACKED_MAX_ROWS];
  for (int r = 0; r < n; r++) acc[r] = _mm512_setzero_ps();
  const __m512i m3f = _mm512_set1_epi8(0x3F);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + (size_t)b * PK_K6_BLOCK;
    prefetch_ahead(pb, pf, PK_K6_BLOCK);
    const __m512 dx = scales16(pb, 0);
    const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(pb + PK_K6_SC)));
    const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(pb + PK_K6_SC + 16)));
    __m512i q[8]; /* k6_unpack4_avx2's, 16 columns wide; group 3's pieces or'ed by one vpternlogd */
    for (int sb = 0; sb < 2; sb++) {
      const uint8_t *qb = pb + PK_K6_Q + 192 * sb;
      const __m512i x = _mm512_loadu_si512((const void *)qb), y = _mm512_loadu_si512((const void *)(qb + 64));
      const __m512i z = _mm512_loadu_si512((const void *)(qb + 128));
      q[4 * sb + 0] = _mm512_and_si512(x, m3f);
      q[4 * sb + 1] = _mm512_and_si512(y, m3f);
      q[4 * sb + 2] = _mm512_and_si512(z, m3f);
      q[4 * sb + 3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(_mm512_andnot_si512(m3f, x), 6),
                                                _mm512_srli_epi16(_mm512_andnot_si512(m3f, y), 4),
                                                _mm512_srli_epi16(_mm512_andnot_si512(m3f, z), 2), 0xFE);
    }
    __m512i s0[CPU_PACKED_MAX_ROWS], s1[CPU_PACKED_MAX_ROWS]; /* rows inner, as block_sums_vnni */
    for (int r = 0; r < n; r++) {
      s0[r] = _mm512_set1_epi32(-32 * act[r][b].bsum[0]);
      s1[r] = _mm512_set1_epi32(-32 * act[r][b].bsum[1]);
    }
    for (int g = 0; g < 4; g++)
      for (int r = 0; r < n; r++) {
        s0[r] = _mm512_dpbusd_epi32(s0[r], q[g], bcast4_512(act[r][b].qs + 4 * g));
        s1[r] = _mm512_dpbusd_epi32(s1[r], q[g + 4], bcast4_512(act[r][b].qs + 16 + 4 * g));
      }
    for (int r = 0; r < n; r++) {
      const __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(s0[r], sc0), _mm512_mullo_epi32(s1[r], sc1));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(act[r][b].d)), _mm512_cvtepi32_ps(isum), acc[r]);
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

/* SF is the enclosing wrapper's constant: the scales' form (enum cpu_pack_scales). */
#define PK_NIBBLE_VNNI(N) nu_vnni_n(nb, panel, act, N, out, os, SF, CPU_PACK_FAMILY_NIBBLE)
#define PK_SIGNED_VNNI(N) signed_vnni_n(nb, panel, act, N, out, os, SF, CPU_PACK_FAMILY_SIGNED)
#define PK_NL4_VNNI(N) signed_vnni_n(nb, panel, act, N, out, os, SF, CPU_PACK_FAMILY_NL4)
#define PK_UNSIGNED_VNNI(N) nu_vnni_n(nb, panel, act, N, out, os, SF, CPU_PACK_FAMILY_UNSIGNED)
#define PK_K6_VNNI(N) k6_vnni_n(nb, panel, act, N, out, os)

#define PK_WRAP(attr, name, call, sf)                                                              \
  attr static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                        int64_t os) {                                                              \
    enum { SF = sf };                                                                              \
    if (n < 1) return; /* the switch's default runs 8 rows */                                      \
    PK_ROWS_SWITCH(call)                                                                           \
  }
/* SIGNED and NL4 on AVX2: 16 ymm registers hold 8 unpacked weight groups and 4 rows'
 * accumulators, so a call takes at most 4 rows at a time (the weights are unpacked once per 4
 * rows); calls of 1-3 rows take signed_avx2_16, which walks each block once for both halves:
 * one stream instead of two passes, and each activation broadcast used twice (1 row,
 * L2-resident, 1 thread: Q8_0 +15%; kernels/cpu/README.md). */
#define PK_ROWS_SWITCH4(call)                                                                     \
  for (int r0 = 0; r0 < n; r0 += 4) {                                                             \
    const block_q8_x *const *act4 = act + r0;                                                     \
    float *out4 = out + (int64_t)r0 * os;                                                         \
    switch (n - r0) {                                                                             \
    case 1: call(act4, out4, 1); break;                                                           \
    case 2: call(act4, out4, 2); break;                                                           \
    case 3: call(act4, out4, 3); break;                                                           \
    default: call(act4, out4, 4); break;                                                          \
    }                                                                                             \
  }
#define PK_WRAP4(attr, name, call, sf)                                                             \
  attr static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                        int64_t os) {                                                              \
    enum { SF = sf };                                                                              \
    PK_ROWS_SWITCH4(call)                                                                          \
  }
#define PK_SIGNED_AVX2_4(A, O, N) \
  ((N) < 4 ? signed_avx2_16(nb, panel, A, N, O, os, SF, CPU_PACK_FAMILY_SIGNED) \
           : (signed_avx2_half(nb, panel, A, N, O, os, 0, SF, CPU_PACK_FAMILY_SIGNED), \
              signed_avx2_half(nb, panel, A, N, O, os, 1, SF, CPU_PACK_FAMILY_SIGNED)))
#define PK_NL4_AVX2_4(A, O, N) \
  ((N) < 4 ? signed_avx2_16(nb, panel, A, N, O, os, SF, CPU_PACK_FAMILY_NL4) \
           : (signed_avx2_half(nb, panel, A, N, O, os, 0, SF, CPU_PACK_FAMILY_NL4), \
              signed_avx2_half(nb, panel, A, N, O, os, 1, SF, CPU_PACK_FAMILY_NL4)))
PK_WRAP4(PK_AVX2, signed_avx2, PK_SIGNED_AVX2_4, CPU_PACK_SCALES_FP16)
PK_WRAP4(PK_AVX2, signed_f_avx2, PK_SIGNED_AVX2_4, CPU_PACK_SCALES_FLOAT)
PK_WRAP4(PK_AVX2, nl4_avx2, PK_NL4_AVX2_4, CPU_PACK_SCALES_FP16)
PK_WRAP4(PK_AVX2, nl4_f_avx2, PK_NL4_AVX2_4, CPU_PACK_SCALES_FLOAT)

/* NIBBLE, UNSIGNED and K6 on AVX2: a call of 1-2 rows (1 for K6; a decode step's) walks each
 * block once (the *_avx2_16 kernels), more rows are staged (staged_avx2, k6_staged_avx2: the
 * register-resident 8-column kernels they replace spilled past 4 rows; L2-resident, 8 rows a
 * call, 1 thread, G multiply-adds/s: Q4_0 103 -> 106-108, Q5_0 78-80 -> 94-96, Q4_K 95 -> 107,
 * Q6_K 77 -> 78; kernels/cpu/README.md). */
PK_AVX2 static PK_INLINE void staged_or_16_avx2(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n,
                                                float *out, int64_t os, const int sf, const int fam) {
  if (n < 1) return;
  if (fam == CPU_PACK_FAMILY_K6) {
    if (n == 1) k6_avx2_16(nb, panel, act, 1, out, os);
    else k6_staged_avx2(nb, panel, act, n, out, os);
  } else if (n > 2) {
    staged_avx2(nb, panel, act, n, out, os, sf, fam);
  } else if (fam == CPU_PACK_FAMILY_NIBBLE) {
    if (n == 1) nibble_avx2_16(nb, panel, act, 1, out, os, sf);
    else nibble_avx2_16(nb, panel, act, 2, out, os, sf);
  } else {
    if (n == 1) unsigned_avx2_16(nb, panel, act, 1, out, os, sf);
    else unsigned_avx2_16(nb, panel, act, 2, out, os, sf);
  }
}
#define PK_STAGED_WRAP(name, sf, fam)                                                              \
  PK_AVX2 static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                           int64_t os) {                                                           \
    staged_or_16_avx2(nb, panel, act, n, out, os, sf, fam);                                        \
  }
PK_STAGED_WRAP(nibble_avx2, CPU_PACK_SCALES_FP16, CPU_PACK_FAMILY_NIBBLE)
PK_STAGED_WRAP(nibble_f_avx2, CPU_PACK_SCALES_FLOAT, CPU_PACK_FAMILY_NIBBLE)
PK_STAGED_WRAP(unsigned_avx2, CPU_PACK_SCALES_FP16, CPU_PACK_FAMILY_UNSIGNED)
PK_STAGED_WRAP(unsigned_f_avx2, CPU_PACK_SCALES_FLOAT, CPU_PACK_FAMILY_UNSIGNED)
PK_STAGED_WRAP(nibble_z_avx2, CPU_PACK_SCALES_ZERO_POINT, CPU_PACK_FAMILY_NIBBLE)
PK_STAGED_WRAP(unsigned_z_avx2, CPU_PACK_SCALES_ZERO_POINT, CPU_PACK_FAMILY_UNSIGNED)
PK_STAGED_WRAP(k6_avx2, CPU_PACK_SCALES_FP16, CPU_PACK_FAMILY_K6)
PK_WRAP(PK_VNNI, nibble_vnni, PK_NIBBLE_VNNI, CPU_PACK_SCALES_FP16)
PK_WRAP(PK_VNNI, nibble_f_vnni, PK_NIBBLE_VNNI, CPU_PACK_SCALES_FLOAT)
PK_WRAP(PK_VNNI, signed_vnni, PK_SIGNED_VNNI, CPU_PACK_SCALES_FP16)
PK_WRAP(PK_VNNI, signed_f_vnni, PK_SIGNED_VNNI, CPU_PACK_SCALES_FLOAT)
PK_WRAP(PK_VNNI, nl4_vnni, PK_NL4_VNNI, CPU_PACK_SCALES_FP16)
PK_WRAP(PK_VNNI, nl4_f_vnni, PK_NL4_VNNI, CPU_PACK_SCALES_FLOAT)
PK_WRAP(PK_VNNI, unsigned_vnni, PK_UNSIGNED_VNNI, CPU_PACK_SCALES_FP16)
PK_WRAP(PK_VNNI, unsigned_f_vnni, PK_UNSIGNED_VNNI, CPU_PACK_SCALES_FLOAT)
PK_WRAP(PK_VNNI, nibble_z_vnni, PK_NIBBLE_VNNI, CPU_PACK_SCALES_ZERO_POINT)
PK_WRAP(PK_VNNI, unsigned_z_vnni, PK_UNSIGNED_VNNI, CPU_PACK_SCALES_ZERO_POINT)
PK_WRAP(PK_VNNI, k6_vnni, PK_K6_VNNI, CPU_PACK_SCALES_FP16)
/* cpu_packed_select_many's VNNI kernels, UNSIGNED's: calls of up to CPU_PACKED_MAX_ROWS rows
 * (decode, and a tile's remainder) as cpu_packed_select's, more staged (staged_vnni). NIBBLE's
 * unpacking is 12 ops a block, and staged it measured +1-5% in the forward on the Xeon guest
 * and -4% kernel-only on the Zen 4 one (kernels/cpu/README.md): not staged. */
#define PK_MANY_VNNI_WRAP(name, few, sf, fam)                                                      \
  PK_VNNI static void name(int64_t nb, const uint8_t *panel, const block_q8_x *const *act, int n, float *out, \
                           int64_t os) {                                                           \
    if (n <= CPU_PACKED_MAX_ROWS) few(nb, panel, act, n, out, os);                                 \
    else staged_vnni(nb, panel, act, n, out, os, sf, fam);                                         \
  }
PK_MANY_VNNI_WRAP(unsigned_many_vnni, unsigned_vnni, CPU_PACK_SCALES_FP16, CPU_PACK_FAMILY_UNSIGNED)
PK_MANY_VNNI_WRAP(unsigned_f_many_vnni, unsigned_f_vnni, CPU_PACK_SCALES_FLOAT, CPU_PACK_FAMILY_UNSIGNED)
PK_MANY_VNNI_WRAP(unsigned_z_many_vnni, unsigned_z_vnni, CPU_PACK_SCALES_ZERO_POINT, CPU_PACK_FAMILY_UNSIGNED)
#endif /* PK_HAVE_X86 */

cpu_packed_fn cpu_packed_select(enum ggml_type w, enum cpu_simd_level level) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
  int sf = 0;
  const int fam = cpu_pack_kind(w, &sf);
  if (fam < 0 || fam == CPU_PACK_FAMILY_FLOAT) return NULL; /* FLOAT: cpu_packed_float_select */
  if (fam == CPU_PACK_FAMILY_NL4) {
#if PK_HAVE_X86
    if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return sf == CPU_PACK_SCALES_FLOAT ? nl4_f_vnni : nl4_vnni;
    if (level >= CPU_SIMD_LEVEL_AVX2) return sf == CPU_PACK_SCALES_FLOAT ? nl4_f_avx2 : nl4_avx2;
#endif
    return sf == CPU_PACK_SCALES_FLOAT ? nl4_f_scalar : nl4_scalar;
  }
  if (fam == CPU_PACK_FAMILY_K6) {
#if PK_HAVE_X86
    if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return k6_vnni;
    if (level >= CPU_SIMD_LEVEL_AVX2) return k6_avx2;
#endif
    return k6_scalar;
  }
  /* [family][scales' form] (SIGNED has no zero-point form) */
  static const cpu_packed_fn scalar[3][3] = {{nibble_scalar, nibble_f_scalar, nibble_z_scalar},
                                             {signed_scalar, signed_f_scalar, NULL},
                                             {unsigned_scalar, unsigned_f_scalar, unsigned_z_scalar}};
#if PK_HAVE_X86
  static const cpu_packed_fn avx2[3][3] = {{nibble_avx2, nibble_f_avx2, nibble_z_avx2},
                                           {signed_avx2, signed_f_avx2, NULL},
                                           {unsigned_avx2, unsigned_f_avx2, unsigned_z_avx2}};
  static const cpu_packed_fn vnni[3][3] = {{nibble_vnni, nibble_f_vnni, nibble_z_vnni},
                                           {signed_vnni, signed_f_vnni, NULL},
                                           {unsigned_vnni, unsigned_f_vnni, unsigned_z_vnni}};
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return vnni[fam][sf];
  if (level >= CPU_SIMD_LEVEL_AVX2) return avx2[fam][sf];
#endif
  return scalar[fam][sf];
}

cpu_packed_fn cpu_packed_select_many(enum ggml_type w, enum cpu_simd_level level) {
  if (level > cpu_simd_level_detect()) level = cpu_simd_level_detect();
  int sf = 0;
  const int fam = cpu_pack_kind(w, &sf);
#if PK_HAVE_X86
  static const cpu_packed_fn vnni[3] = {unsigned_many_vnni, unsigned_f_many_vnni, unsigned_z_many_vnni};
  if (level >= CPU_SIMD_LEVEL_AVX512_VNNI) return fam == CPU_PACK_FAMILY_UNSIGNED ? vnni[sf] : NULL;
#endif
  const bool staged = fam == CPU_PACK_FAMILY_NIBBLE || fam == CPU_PACK_FAMILY_UNSIGNED || fam == CPU_PACK_FAMILY_K6;
  return level == CPU_SIMD_LEVEL_AVX2 && staged ? cpu_packed_select(w, level) : NULL;
}
