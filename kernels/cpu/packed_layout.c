/* Packed weight layouts (packed.h): which GGUF types have one, and the repacking of GGUF rows
 * into 16-column panels. Block layouts read: kernels/quant.h (ggml-common.h); Q4_K/Q5_K scales
 * as ggml-quants.c get_scale_min_k4, IQ4_XS as dequantize_row_iq4_xs, Q6_K as
 * dequantize_row_q6_K. */
#include "kernels/cpu/packed.h"

#include <stdbool.h>
#include <string.h>

int cpu_pack_kind(enum ggml_type t, int *scales) {
  int sc = CPU_PACK_SCALES_FP16, fam;
  switch (t) {
  case GGML_TYPE_Q4_0: fam = CPU_PACK_FAMILY_NIBBLE, sc = CPU_PACK_SCALES_ZERO_POINT; break;
  case GGML_TYPE_Q4_1: fam = CPU_PACK_FAMILY_NIBBLE; break;
  case GGML_TYPE_Q4_K: fam = CPU_PACK_FAMILY_NIBBLE, sc = CPU_PACK_SCALES_FLOAT; break;
  case GGML_TYPE_Q8_0: fam = CPU_PACK_FAMILY_SIGNED; break;
  case GGML_TYPE_IQ4_NL: fam = CPU_PACK_FAMILY_NL4; break;
  case GGML_TYPE_IQ4_XS: fam = CPU_PACK_FAMILY_NL4, sc = CPU_PACK_SCALES_FLOAT; break;
  case GGML_TYPE_Q5_0: fam = CPU_PACK_FAMILY_UNSIGNED, sc = CPU_PACK_SCALES_ZERO_POINT; break;
  case GGML_TYPE_Q5_1: fam = CPU_PACK_FAMILY_UNSIGNED; break;
  case GGML_TYPE_Q6_K: fam = CPU_PACK_FAMILY_K6; break;
  case GGML_TYPE_F16: case GGML_TYPE_BF16: fam = CPU_PACK_FAMILY_FLOAT; break;
  case GGML_TYPE_Q5_K: fam = CPU_PACK_FAMILY_UNSIGNED, sc = CPU_PACK_SCALES_FLOAT; break;
  default: return -1;
  }
  if (scales) *scales = sc;
  return fam;
}

size_t cpu_pack_block_bytes(int family, int scales) {
  const size_t sb = scales == CPU_PACK_SCALES_FLOAT ? 4 : 2; /* bytes of one column's scale */
  const size_t dm = scales == CPU_PACK_SCALES_ZERO_POINT ? 16 * sb : 32 * sb; /* d[16] (and m[16]) */
  switch (family) {
  case CPU_PACK_FAMILY_NIBBLE: return dm + 4 * 64;
  case CPU_PACK_FAMILY_SIGNED: return 16 * sb + 8 * 64;
  case CPU_PACK_FAMILY_UNSIGNED: return dm + 4 * 64 + 64;
  case CPU_PACK_FAMILY_K6: return 16 * 2 + 2 * 16 + 4 * 64 + 2 * 64;
  case CPU_PACK_FAMILY_FLOAT: return 32 * 16 * 2;
  case CPU_PACK_FAMILY_NL4: return 16 * sb + 4 * 64;
  default: return 0;
  }
}

bool cpu_pack_shape_ok(const struct backend_weight *w) {
  const int64_t be = ggml_type_block_elems(w->type);
  return cpu_pack_kind(w->type, NULL) >= 0 && w->rows > 0 && w->rows % CPU_PACK_COLS == 0 && w->cols > 0 &&
         w->cols % be == 0 && w->cols % 32 == 0;
}

size_t cpu_pack_bytes(const struct backend_weight *w) {
  int sc = 0;
  const int fam = cpu_pack_kind(w->type, &sc);
  if (!cpu_pack_shape_ok(w)) return 0;
  return (size_t)(w->rows / CPU_PACK_COLS) * (size_t)(w->cols / 32) * cpu_pack_block_bytes(fam, sc);
}

/* One block of 32 weights of a packable type: w_i = d * q_i + m (m = 0 without a min; Q4_0 and
 * Q5_0: w_i = d * (q_i - z), their zero point z subtracted by the kernels), with
 * q unsigned (uq, NIBBLE and UNSIGNED families) or signed (sq, SIGNED family). d and m are the
 * fp16 bits (dh, mh) for fp16-scaled types, floats (df, mf) for the K and IQ4_XS types, whose
 * per-32 scale d * sub-scale is exact in float (11 + 8 significant bits). */
struct block32 {
  uint16_t dh, mh;
  float df, mf;
  uint8_t uq[32];
  int8_t sq[32];
  int8_t sc16[2]; /* Q6_K: the scales of elements 0-15 and 16-31 */
};

/* The 5-bit quants (0..31) of a Q5_0/Q5_1 block in element order. */
static void unpack_q5(const uint8_t qh_bytes[4], const uint8_t qs[16], uint8_t q[32]) {
  const uint32_t qh = (uint32_t)qh_bytes[0] | (uint32_t)qh_bytes[1] << 8 | (uint32_t)qh_bytes[2] << 16 |
                      (uint32_t)qh_bytes[3] << 24;
  for (int j = 0; j < 16; j++) {
    q[j] = (uint8_t)((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    q[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block (get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *s, int *sc, int *mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* Block b (of 32 weights) of a GGUF row of type t. */
static void decode_block32(enum ggml_type t, const uint8_t *row, int64_t b, struct block32 *o) {
  const int64_t sb = b / 8;
  const int j = (int)(b % 8); /* sub-block of a 256-weight super-block */
  switch (t) {
  case GGML_TYPE_Q4_0: { /* w = d * (q - 8): zero point 8, no min */
    const block_q4_0 *x = (const block_q4_0 *)row + b;
    o->dh = x->d, o->mh = 0;
    for (int i = 0; i < 16; i++) o->uq[i] = x->qs[i] & 0x0F, o->uq[i + 16] = x->qs[i] >> 4;
    return;
  }
  case GGML_TYPE_Q4_1: {
    const block_q4_1 *x = (const block_q4_1 *)row + b;
    o->dh = x->d, o->mh = x->m;
    for (int i = 0; i < 16; i++) o->uq[i] = x->qs[i] & 0x0F, o->uq[i + 16] = x->qs[i] >> 4;
    return;
  }
  case GGML_TYPE_Q5_1: {
    const block_q5_1 *x = (const block_q5_1 *)row + b;
    o->dh = x->d, o->mh = x->m;
    unpack_q5(x->qh, x->qs, o->uq);
    return;
  }
  case GGML_TYPE_Q8_0: {
    const block_q8_0 *x = (const block_q8_0 *)row + b;
    o->dh = x->d;
    memcpy(o->sq, x->qs, 32);
    return;
  }
  case GGML_TYPE_Q5_0: { /* w = d * (q - 16): zero point 16, no min */
    const block_q5_0 *x = (const block_q5_0 *)row + b;
    unpack_q5(x->qh, x->qs, o->uq);
    o->dh = x->d, o->mh = 0;
    return;
  }
  case GGML_TYPE_Q6_K: {
    /* 32-block j of a super-block is quarter k = j % 4 of its half n2 = j / 4 (ggml's
     * dequantize_row_q6_K): element l's low 4 bits in ql[64 n2 + l + 32 (k & 1)] (low nibble
     * for k < 2), its high 2 bits at bit 2k of qh[32 n2 + l], its scale scales[8 n2 + 2k + l / 16] */
    const block_q6_K *x = (const block_q6_K *)row + sb;
    const int n2 = j / 4, k = j % 4;
    const uint8_t *ql = x->ql + 64 * n2 + 32 * (k & 1), *qh = x->qh + 32 * n2;
    o->dh = x->d;
    o->sc16[0] = x->scales[8 * n2 + 2 * k], o->sc16[1] = x->scales[8 * n2 + 2 * k + 1];
    for (int l = 0; l < 32; l++)
      o->uq[l] = (uint8_t)(((ql[l] >> (4 * (k >> 1))) & 0x0F) | (((qh[l] >> (2 * k)) & 3) << 4));
    return;
  }
  case GGML_TYPE_IQ4_NL: {
    const block_iq4_nl *x = (const block_iq4_nl *)row + b;
    o->dh = x->d;
    for (int i = 0; i < 16; i++) {
      o->uq[i] = x->qs[i] & 0x0F, o->uq[i + 16] = x->qs[i] >> 4;
      o->sq[i] = llb_kvalues_iq4nl[o->uq[i]];
      o->sq[i + 16] = llb_kvalues_iq4nl[o->uq[i + 16]];
    }
    return;
  }
  case GGML_TYPE_Q4_K:
  case GGML_TYPE_Q5_K: {
    /* sub-block j: low (j even) or high (j odd) nibbles of qs[32 * (j / 2) ..]; Q5_K's 5th
     * bit of element l in bit j of qh[l]. w = d * sc * q - dmin * m. */
    const uint8_t *scales, *qs, *qh = NULL;
    uint16_t d, dmin;
    if (t == GGML_TYPE_Q4_K) {
      const block_q4_K *x = (const block_q4_K *)row + sb;
      d = x->d, dmin = x->dmin, scales = x->scales, qs = x->qs;
    } else {
      const block_q5_K *x = (const block_q5_K *)row + sb;
      d = x->d, dmin = x->dmin, scales = x->scales, qs = x->qs, qh = x->qh;
    }
    int sc, mn;
    scale_min_k4(j, scales, &sc, &mn);
    o->df = llb_fp16_to_fp32(d) * (float)sc;
    o->mf = -(llb_fp16_to_fp32(dmin) * (float)mn);
    for (int l = 0; l < 32; l++) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
      if (qh) q |= ((qh[l] >> j) & 1) << 4;
      o->uq[l] = (uint8_t)q;
    }
    return;
  }
  case GGML_TYPE_IQ4_XS: {
    const block_iq4_xs *x = (const block_iq4_xs *)row + sb;
    const int ls = ((x->scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | (((x->scales_h >> (2 * j)) & 3) << 4);
    o->df = llb_fp16_to_fp32(x->d) * (float)(ls - 32);
    for (int i = 0; i < 16; i++) {
      o->uq[i] = x->qs[16 * j + i] & 0x0F, o->uq[i + 16] = x->qs[16 * j + i] >> 4;
      o->sq[i] = llb_kvalues_iq4nl[o->uq[i]];
      o->sq[i + 16] = llb_kvalues_iq4nl[o->uq[i + 16]];
    }
    return;
  }
  default: return; /* not reached: cpu_pack_bytes checked the type */
  }
}

/* One K6 block (packed.h) of the 16 Q6_K rows from `rows` (row_bytes apart): 32-block b. */
static void pack_k6_block(const uint8_t *rows, size_t row_bytes, int64_t b, uint8_t *o) {
  for (int j = 0; j < CPU_PACK_COLS; j++) {
    struct block32 k;
    decode_block32(GGML_TYPE_Q6_K, rows + (size_t)j * row_bytes, b, &k);
    memcpy(o + 2 * j, &k.dh, 2);
    o[32 + j] = (uint8_t)k.sc16[0], o[48 + j] = (uint8_t)k.sc16[1];
    for (int s = 0; s < 2; s++) {
      const uint8_t *u = k.uq + 16 * s; /* sub-block s: groups t = 0..2 whole, group 3 in 2-bit pieces */
      for (int t = 0; t < 3; t++)
        for (int e = 0; e < 4; e++)
          o[64 + 64 * (3 * s + t) + 4 * j + e] = (uint8_t)(u[4 * t + e] | ((u[12 + e] >> (2 * t)) & 3) << 6);
    }
  }
}

llb_status cpu_pack_weight(const struct backend_weight *w, void *dst) {
  if (!w || !dst || cpu_pack_bytes(w) == 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no packed layout for this weight");
  int sc = 0;
  const int fam = cpu_pack_kind(w->type, &sc);
  const bool fs = sc == CPU_PACK_SCALES_FLOAT;
  const size_t sb = fs ? 4 : 2, bb = cpu_pack_block_bytes(fam, sc);
  const bool no_min = fam == CPU_PACK_FAMILY_SIGNED || fam == CPU_PACK_FAMILY_NL4 || sc == CPU_PACK_SCALES_ZERO_POINT;
  const size_t m_off = 16 * sb, qs_off = no_min ? 16 * sb : 32 * sb;
  const int64_t nb = w->cols / 32, panels = w->rows / CPU_PACK_COLS;
  const uint8_t *src = w->data;
  uint8_t *out = dst;
  for (int64_t p = 0; p < panels; p++)
    for (int64_t b = 0; b < nb; b++) {
      uint8_t *o = out + ((size_t)p * (size_t)nb + (size_t)b) * bb;
      if (fam == CPU_PACK_FAMILY_FLOAT) { /* element 32b + i of column j: F16 w[i][j], BF16 w[i/2][j][i%2] */
        const bool pairs = w->type == GGML_TYPE_BF16;
        for (int j = 0; j < CPU_PACK_COLS; j++) {
          const uint8_t *row = src + (size_t)(p * CPU_PACK_COLS + j) * w->row_bytes + (size_t)b * 64;
          for (int i = 0; i < 32; i++)
            memcpy(o + (pairs ? 4 * (16 * (i / 2) + j) + 2 * (i % 2) : 2 * (16 * i + j)), row + 2 * i, 2);
        }
        continue;
      }
      if (fam == CPU_PACK_FAMILY_K6) {
        pack_k6_block(src + (size_t)p * CPU_PACK_COLS * w->row_bytes, w->row_bytes, b, o);
        continue;
      }
      if (fam == CPU_PACK_FAMILY_UNSIGNED) memset(o + qs_off + 4 * 64, 0, 64); /* qh: bits or'ed in */
      for (int j = 0; j < CPU_PACK_COLS; j++) {
        struct block32 k;
        decode_block32(w->type, src + (size_t)(p * CPU_PACK_COLS + j) * w->row_bytes, b, &k);
        if (fs) {
          memcpy(o + 4 * j, &k.df, 4);
          if (!no_min) memcpy(o + m_off + 4 * j, &k.mf, 4);
        } else {
          memcpy(o + 2 * j, &k.dh, 2);
          if (!no_min) memcpy(o + m_off + 2 * j, &k.mh, 2);
        }
        uint8_t *q = o + qs_off + 4 * j;
        for (int g = 0; g < 8; g++)
          for (int e = 0; e < 4; e++) {
            const int i = 4 * g + e;
            if (fam == CPU_PACK_FAMILY_SIGNED) q[64 * g + e] = (uint8_t)((uint8_t)k.sq[i] ^ 0x80);
            else if (g < 4) /* Q4_1's nibbles (NIBBLE, NL4; UNSIGNED's low 4 bits) */
              q[64 * g + e] = (uint8_t)((k.uq[i] & 0x0F) | (k.uq[i + 16] & 0x0F) << 4);
            if (fam == CPU_PACK_FAMILY_UNSIGNED) q[4 * 64 + e] |= (uint8_t)((k.uq[i] >> 4) << g); /* bit 4 */
          }
      }
    }
  return LLB_STATUS_OK;
}
