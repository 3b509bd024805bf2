/* GGML type table, fp16/bf16 conversion and row dequantization.
 * Definitions followed: ggml-common.h (block layouts), ggml-quants.c dequantize_row_*,
 * ggml-impl.h (fp16/bf16 conversion). Written from those definitions; every float expression
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
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
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
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22, false},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24, false},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36, false},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84, false},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110, false},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144, true},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176, true},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210, true},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292, false},
    [GGML_TYPE_BF16] = {"bf16", 1, 2, true},
};

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

static void dequant_q8_0(const uint8_t *b, float *y) {
  const float d = load_half(b);
  for (int j = 0; j < QK8_0; j++) {
    y[j] = (float)(int8_t)b[2 + j] * d;
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
    case GGML_TYPE_Q8_0: fn = dequant_q8_0; break;
    case GGML_TYPE_Q4_K: fn = dequant_q4_k; break;
    case GGML_TYPE_Q5_K: fn = dequant_q5_k; break;
    case GGML_TYPE_Q6_K: fn = dequant_q6_k; break;
    default:
      return LLB_ERRF(LLB_STATUS_INTERNAL, "type %s marked supported has no dequantizer", ti->name);
  }
  for (int64_t i = 0; i < n_blocks; i++) {
    fn(p + (size_t)i * ti->block_bytes, dst + i * ti->block_elems);
  }
  return LLB_STATUS_OK;
}
