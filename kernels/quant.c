/* GGML type table, fp16/bf16 conversion and row dequantization.
 * Definitions followed: ggml-common.h (block layouts), ggml-quants.c dequantize_row_*,
 * ggml-impl.h (fp16/bf16 conversion), and for the sizes of the types not dequantized here,
 * ggml.c's type_traits. Written from those definitions; every float expression
 * keeps the reference's operation order so results are bit-exact. The build compiles this
 * file with -ffp-contract=off: a fused multiply-add would round differently. */
#include "kernels/quant.h"

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K layout");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

struct type_info {
  const char *name;
  int64_t block_elems;
  size_t block_bytes;
  bool supported;
};

/* Sizes as ggml's type_traits (blck_size, type_size). */
static const struct type_info type_table[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4, true},
    [GGML_TYPE_F16] = {"f16", 1, 2, true},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18, true},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22, true},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24, true},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36, false},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84, true},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110, true},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144, true},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176, true},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210, true},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292, false},
    [GGML_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, false},
    [GGML_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, false},
    [GGML_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, false},
    [GGML_TYPE_IQ1_S] = {"iq1_s", 256, 50, false},
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [GGML_TYPE_IQ3_S] = {"iq3_s", 256, 110, false},
    [GGML_TYPE_IQ2_S] = {"iq2_s", 256, 82, false},
    [GGML_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [GGML_TYPE_I8] = {"i8", 1, 1, false},
    [GGML_TYPE_I16] = {"i16", 1, 2, false},
    [GGML_TYPE_I32] = {"i32", 1, 4, false},
    [GGML_TYPE_I64] = {"i64", 1, 8, false},
    [GGML_TYPE_F64] = {"f64", 1, 8, false},
    [GGML_TYPE_IQ1_M] = {"iq1_m", 256, 56, false},
    [GGML_TYPE_BF16] = {"bf16", 1, 2, true},
    [GGML_TYPE_TQ1_0] = {"tq1_0", 256, 54, false},
    [GGML_TYPE_TQ2_0] = {"tq2_0", 256, 66, false},
    [GGML_TYPE_MXFP4] = {"mxfp4", 32, 17, false},
};

const int8_t llb_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

static const struct type_info *type_lookup(enum ggml_type t) {
  if ((int)t < 0 || (int)t >= GGML_TYPE_COUNT || type_table[t].name == NULL) {
    return NULL;
  }
  return &type_table[t];
}

bool ggml_type_is_supported(enum ggml_type t) {
  const struct type_info *ti = type_lookup(t);
  return ti != NULL && ti->supported;
}

const char *ggml_type_name(enum ggml_type t) {
  const struct type_info *ti = type_lookup(t);
  return ti ? ti->name : "unknown";
}

int64_t ggml_type_block_elems(enum ggml_type t) {
  const struct type_info *ti = type_lookup(t);
  return ti ? ti->block_elems : 0;
}

size_t ggml_type_block_bytes(enum ggml_type t) {
  const struct type_info *ti = type_lookup(t);
  return ti ? ti->block_bytes : 0;
}

llb_status ggml_row_bytes(enum ggml_type t, int64_t n_elems, size_t *out) {
  const struct type_info *ti = type_lookup(t);
  if (ti == NULL) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "unknown ggml type %d", (int)t);
  }
  if (n_elems < 0 || n_elems % ti->block_elems != 0) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "row of %lld elements is not a whole number of %s blocks (%lld each)",
                    (long long)n_elems, ti->name, (long long)ti->block_elems);
  }
  uint64_t n_blocks = (uint64_t)(n_elems / ti->block_elems);
  if (n_blocks > SIZE_MAX / ti->block_bytes) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "row of %lld %s elements overflows size_t",
                    (long long)n_elems, ti->name);
  }
  *out = (size_t)n_blocks * ti->block_bytes;
  return LLB_STATUS_OK;
}

static float bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

float llb_fp16_to_fp32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    return bits_to_f32(sign | 0x7f800000u | (mant << 13));
  }
  if (exp != 0) {
    return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  }
  if (mant == 0) {
    return bits_to_f32(sign);
  }
  /* subnormal: mant * 2^-24; normalize so the leading 1 becomes the implicit bit */
  uint32_t e = 113; /* biased exponent of 2^-14 */
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    e--;
  }
  return bits_to_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

/* Shifts m right by `shift` (1..31) rounding to nearest, ties to even. */
static uint32_t shift_round_even(uint32_t m, unsigned shift) {
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) {
    q++;
  }
  return q;
}

uint16_t llb_fp32_to_fp16(float f) {
  uint32_t x = f32_to_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) { /* NaN: quiet, keep the payload's high bits */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x47800000u) { /* >= 65536 (and inf) */
    return (uint16_t)(sign | 0x7c00u);
  }
  if (ax >= 0x38800000u) { /* normal half (>= 2^-14); a carry may round up into inf */
    uint32_t h = shift_round_even(ax, 13) - (112u << 10);
    return (uint16_t)(sign | h);
  }
  uint32_t e = ax >> 23;
  if (e < 102) { /* below 2^-25: rounds to zero */
    return sign;
  }
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | shift_round_even(m, 126u - e)); /* units of 2^-24 */
}

float llb_bf16_to_fp32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

uint16_t llb_fp32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return (uint16_t)((u >> 16) | 64u);
  }
  return (uint16_t)(((uint64_t)u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Little-endian fp16 at p (maybe unaligned). */
static float load_half(const uint8_t *p) {
  return llb_fp16_to_fp32((uint16_t)(p[0] | (p[1] << 8)));
}

/* ggml-quants.c get_scale_min_k4: 6-bit scale and min of sub-block j (0..7). */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

static void dequant_q4_0(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const uint8_t *qs = b + 2;
  for (int j = 0; j < QK4_0 / 2; j++) {
    const int x0 = (qs[j] & 0x0F) - 8;
    const int x1 = (qs[j] >> 4) - 8;
    y[j] = (float)x0 * d;
    y[j + QK4_0 / 2] = (float)x1 * d;
  }
}

static void dequant_q4_1(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const float m = load_half(b + 2);
  const uint8_t *qs = b + 4;
  for (int j = 0; j < QK4_1 / 2; j++) {
    const int x0 = qs[j] & 0x0F;
    const int x1 = qs[j] >> 4;
    y[j] = (float)x0 * d + m;
    y[j + QK4_1 / 2] = (float)x1 * d + m;
  }
}

/* The 5th bit of weight j (0..31) of a Q5_0/Q5_1 block: bit j of the little-endian qh. */
static uint32_t load_qh(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dequant_q5_0(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const uint32_t qh = load_qh(b + 2);
  const uint8_t *qs = b + 6;
  for (int j = 0; j < QK5_0 / 2; j++) {
    const int x0 = (int)((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16;
    const int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
    y[j] = (float)x0 * d;
    y[j + QK5_0 / 2] = (float)x1 * d;
  }
}

static void dequant_q5_1(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const float m = load_half(b + 2);
  const uint32_t qh = load_qh(b + 4);
  const uint8_t *qs = b + 8;
  for (int j = 0; j < QK5_1 / 2; j++) {
    const int x0 = (int)((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    const int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    y[j] = (float)x0 * d + m;
    y[j + QK5_1 / 2] = (float)x1 * d + m;
  }
}

static void dequant_q8_0(const uint8_t *b, float *y) {
  const float d = load_half(b);
  for (int j = 0; j < QK8_0; j++) {
    y[j] = (float)(int8_t)b[2 + j] * d;
  }
}

/* Q2_K: per 128-weight half, four 2-bit planes (shift 0, 2, 4, 6) of its 32 qs bytes; each
 * plane is two sub-blocks of 16 with their own 4-bit scale and min. */
static void dequant_q2_k(const uint8_t *b, float *y) {
  const uint8_t *scales = b;
  const uint8_t *q = b + QK_K / 16;
  const float d = load_half(b + QK_K / 16 + QK_K / 4);
  const float min = load_half(b + QK_K / 16 + QK_K / 4 + 2);
  int is = 0;
  for (int n = 0; n < QK_K; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; half++) {
        const uint8_t sc = scales[is++];
        const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
        for (int l = 0; l < 16; l++) {
          *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
    }
    q += 32;
  }
}

/* The 6-bit scale of Q3_K sub-block j (0..15), already minus 32. */
static int q3_k_scale(const uint8_t *s, int j) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

static void dequant_q3_k(const uint8_t *b, float *y) {
  const uint8_t *hm = b;
  const uint8_t *q = b + QK_K / 8;
  const uint8_t *scales = q + QK_K / 4;
  const float d_all = load_half(scales + K_SCALE_SIZE);
  int is = 0;
  unsigned m = 1;
  for (int n = 0; n < QK_K; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; half++) {
        const float dl = d_all * (float)q3_k_scale(scales, is++);
        for (int l = 16 * half; l < 16 * half + 16; l++) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * (float)v;
        }
      }
      m <<= 1;
    }
    q += 32;
  }
}

static void dequant_q4_k(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const float min = load_half(b + 2);
  const uint8_t *scales = b + 4;
  const uint8_t *q = b + 4 + K_SCALE_SIZE;
  for (int j = 0, is = 0; j < QK_K; j += 64, is += 2) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * (float)sc, m1 = min * (float)m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * (float)sc, m2 = min * (float)m;
    for (int l = 0; l < 32; l++) {
      *y++ = d1 * (float)(q[l] & 0xF) - m1;
    }
    for (int l = 0; l < 32; l++) {
      *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
    q += 32;
  }
}

static void dequant_q5_k(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const float min = load_half(b + 2);
  const uint8_t *scales = b + 4;
  const uint8_t *qh = b + 4 + K_SCALE_SIZE;
  const uint8_t *ql = qh + QK_K / 8;
  unsigned u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < QK_K; j += 64, is += 2) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * (float)sc, m1 = min * (float)m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * (float)sc, m2 = min * (float)m;
    for (int l = 0; l < 32; l++) {
      *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; l++) {
      *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
    ql += 32;
    u1 <<= 2;
    u2 <<= 2;
  }
}

static void dequant_q6_k(const uint8_t *b, float *y) {
  const uint8_t *ql = b;
  const uint8_t *qh = b + QK_K / 2;
  const int8_t *sc = (const int8_t *)(b + QK_K / 2 + QK_K / 4);
  const float d = load_half(b + QK_K / 2 + QK_K / 4 + QK_K / 16);
  for (int n = 0; n < QK_K; n += 128) {
    for (int l = 0; l < 32; l++) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * (float)sc[is] * (float)q1;
      y[l + 32] = d * (float)sc[is + 2] * (float)q2;
      y[l + 64] = d * (float)sc[is + 4] * (float)q3;
      y[l + 96] = d * (float)sc[is + 6] * (float)q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

static void dequant_iq4_nl(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const uint8_t *qs = b + 2;
  for (int j = 0; j < QK4_NL / 2; j++) {
    y[j] = d * (float)llb_kvalues_iq4nl[qs[j] & 0xF];
    y[j + QK4_NL / 2] = d * (float)llb_kvalues_iq4nl[qs[j] >> 4];
  }
}

static void dequant_iq4_xs(const uint8_t *b, float *y) {
  const float d = load_half(b);
  const unsigned scales_h = (unsigned)b[2] | (unsigned)b[3] << 8;
  const uint8_t *scales_l = b + 4;
  const uint8_t *qs = b + 4 + QK_K / 64;
  for (int ib = 0; ib < QK_K / 32; ib++) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (int)(((scales_h >> (2 * ib)) & 3u) << 4);
    const float dl = d * (float)(ls - 32);
    for (int j = 0; j < 16; j++) {
      y[j] = dl * (float)llb_kvalues_iq4nl[qs[j] & 0xF];
      y[j + 16] = dl * (float)llb_kvalues_iq4nl[qs[j] >> 4];
    }
    y += 32;
    qs += 16;
  }
}

llb_status ggml_dequantize_row(enum ggml_type t, const void *src, float *dst, int64_t n) {
  const struct type_info *ti = type_lookup(t);
  if (ti == NULL || !ti->supported) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "dequantization of ggml type %s (%d) is not supported",
                    ggml_type_name(t), (int)t);
  }
  if (n < 0 || n % ti->block_elems != 0) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "row of %lld elements is not a whole number of %s blocks (%lld each)",
                    (long long)n, ti->name, (long long)ti->block_elems);
  }
  if (n == 0) {
    return LLB_STATUS_OK;
  }
  const uint8_t *p = src;
  const int64_t n_blocks = n / ti->block_elems;
  switch (t) {
    case GGML_TYPE_F32:
      memcpy(dst, src, (size_t)n * sizeof(float));
      return LLB_STATUS_OK;
    case GGML_TYPE_F16:
      for (int64_t i = 0; i < n; i++) {
        dst[i] = load_half(p + 2 * i);
      }
      return LLB_STATUS_OK;
    case GGML_TYPE_BF16:
      for (int64_t i = 0; i < n; i++) {
        dst[i] = llb_bf16_to_fp32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
      }
      return LLB_STATUS_OK;
    default:
      break;
  }
  void (*fn)(const uint8_t *, float *) = NULL;
  switch (t) {
    case GGML_TYPE_Q4_0: fn = dequant_q4_0; break;
    case GGML_TYPE_Q4_1: fn = dequant_q4_1; break;
    case GGML_TYPE_Q5_0: fn = dequant_q5_0; break;
    case GGML_TYPE_Q5_1: fn = dequant_q5_1; break;
    case GGML_TYPE_Q8_0: fn = dequant_q8_0; break;
    case GGML_TYPE_Q2_K: fn = dequant_q2_k; break;
    case GGML_TYPE_Q3_K: fn = dequant_q3_k; break;
    case GGML_TYPE_Q4_K: fn = dequant_q4_k; break;
    case GGML_TYPE_Q5_K: fn = dequant_q5_k; break;
    case GGML_TYPE_Q6_K: fn = dequant_q6_k; break;
    case GGML_TYPE_IQ4_NL: fn = dequant_iq4_nl; break;
    case GGML_TYPE_IQ4_XS: fn = dequant_iq4_xs; break;
    default:
      return LLB_ERRF(LLB_STATUS_INTERNAL, "type %s marked supported has no dequantizer", ti->name);
  }
  for (int64_t i = 0; i < n_blocks; i++) {
    fn(p + (size_t)i * ti->block_bytes, dst + i * ti->block_elems);
  }
  return LLB_STATUS_OK;
}
