/* Dots of Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS weights against Q8 activations; the block
 * layouts are kernels/quant.h's (ggml-common.h), the float order vec_dot_lowbit.h's. */
#include "kernels/cpu/vec_dot_lowbit.h"

#include <math.h>
#include <string.h>

/* Unpacks a Q5_0/Q5_1 block's 5-bit quants (0..31) in element order. */
static void unpack_q5(const uint8_t qh_bytes[4], const uint8_t qs[16], int8_t q[32]) {
  const uint32_t qh = (uint32_t)qh_bytes[0] | (uint32_t)qh_bytes[1] << 8 | (uint32_t)qh_bytes[2] << 16 |
                      (uint32_t)qh_bytes[3] << 24;
  for (int j = 0; j < 16; j++) {
    q[j] = (int8_t)((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    q[j + 16] = (int8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}

static int32_t isum32(const int8_t *q, const int8_t *a) {
  int32_t s = 0;
  for (int j = 0; j < 32; j++) s += q[j] * a[j];
  return s;
}

/* Q5_0 in ggml's AVX2 order (ggml_vec_dot_q5_0_q8_0 and llamafile's tinyBLAS_Q0_AVX alike):
 * 8 lanes, lane l = fma(d_w * d_a, sum of the products of elements 4l..4l+3, lane) block by
 * block, then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
static void dot_q5_0(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q5_0 *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_0 *y = act[r];
    float acc[8] = {0};
    int8_t q[32];
    for (int64_t b = 0; b < k / QK5_0; b++) {
      unpack_q5(x[b].qh, x[b].qs, q);
      for (int j = 0; j < 32; j++) q[j] = (int8_t)(q[j] - 16);
      const float d = llb_fp16_to_fp32(x[b].d) * llb_fp16_to_fp32(y[b].d);
      for (int l = 0; l < 8; l++) {
        int32_t s = 0;
        for (int e = 4 * l; e < 4 * l + 4; e++) s += q[e] * y[b].qs[e];
        acc[l] = fmaf(d, (float)s, acc[l]);
      }
    }
    const float r0 = acc[4] + acc[0], r1 = acc[5] + acc[1], r2 = acc[6] + acc[2], r3 = acc[7] + acc[3];
    out[r] = (r0 + r2) + (r1 + r3);
  }
}

static void dot_q5_1(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q5_1 *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_1 *y = act[r];
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < k / QK5_1; b++) {
      unpack_q5(x[b].qh, x[b].qs, q);
      sum += (llb_fp16_to_fp32(x[b].d) * llb_fp16_to_fp32(y[b].d)) * (float)isum32(q, y[b].qs) +
             llb_fp16_to_fp32(x[b].m) * llb_fp16_to_fp32(y[b].s);
    }
    out[r] = sum;
  }
}

static void dot_iq4_nl(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_iq4_nl *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_0 *y = act[r];
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < k / QK4_NL; b++) {
      for (int j = 0; j < 16; j++) {
        q[j] = llb_kvalues_iq4nl[x[b].qs[j] & 0x0F];
        q[j + 16] = llb_kvalues_iq4nl[x[b].qs[j] >> 4];
      }
      sum += (llb_fp16_to_fp32(x[b].d) * llb_fp16_to_fp32(y[b].d)) * (float)isum32(q, y[b].qs);
    }
    out[r] = sum;
  }
}

/* Q2_K/Q3_K quant of weight i (0..255) from its 2-bit plane: qs byte 32 * (i / 128) + i % 32,
 * bits 2 * ((i % 128) / 32). */
static int plane2(const uint8_t *qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3; }

static void dot_q2_K(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q2_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float sum = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++) {
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < QK_K / 16; j++) {
        const int sc = x[b].scales[j] & 0x0F, mn = x[b].scales[j] >> 4;
        int32_t s = 0;
        for (int l = 0; l < 16; l++) s += plane2(x[b].qs, 16 * j + l) * y[b].qs[16 * j + l];
        isum += sc * s;
        imin += mn * y[b].bsums[j];
      }
      sum += (y[b].d * llb_fp16_to_fp32(x[b].d)) * (float)isum -
             (y[b].d * llb_fp16_to_fp32(x[b].dmin)) * (float)imin;
    }
    out[r] = sum;
  }
}

static void dot_q3_K(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_q3_K *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float sum = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++) {
      const uint8_t *s6 = x[b].scales;
      int32_t isum = 0;
      for (int j = 0; j < QK_K / 16; j++) {
        const int lo = j < 8 ? s6[j] & 0x0F : s6[j - 8] >> 4;
        const int sc = (lo | (((s6[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        int32_t s = 0;
        for (int l = 0; l < 16; l++) {
          const int i = 16 * j + l;
          const int q = plane2(x[b].qs, i) - ((x[b].hmask[i % 32] >> (i / 32)) & 1 ? 0 : 4);
          s += q * y[b].qs[i];
        }
        isum += sc * s;
      }
      sum += (llb_fp16_to_fp32(x[b].d) * y[b].d) * (float)isum;
    }
    out[r] = sum;
  }
}

static void dot_iq4_xs(int64_t k, const void *w, const void *const *act, int n, float *out) {
  const block_iq4_xs *x = w;
  for (int r = 0; r < n; r++) {
    const block_q8_K *y = act[r];
    float sum = 0.0f;
    for (int64_t b = 0; b < k / QK_K; b++) {
      int32_t isum = 0;
      for (int ib = 0; ib < QK_K / 32; ib++) {
        const int ls = ((x[b].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) |
                       (((x[b].scales_h >> (2 * ib)) & 3) << 4);
        const uint8_t *qs = x[b].qs + 16 * ib;
        const int8_t *a = y[b].qs + 32 * ib;
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
          s += llb_kvalues_iq4nl[qs[j] & 0x0F] * a[j] + llb_kvalues_iq4nl[qs[j] >> 4] * a[j + 16];
        isum += (ls - 32) * s;
      }
      sum += (llb_fp16_to_fp32(x[b].d) * y[b].d) * (float)isum;
    }
    out[r] = sum;
  }
}

cpu_vec_dot_fn cpu_vec_dot_lowbit_select(enum ggml_type w) {
  switch (w) {
  case GGML_TYPE_Q5_0: return dot_q5_0;
  case GGML_TYPE_Q5_1: return dot_q5_1;
  case GGML_TYPE_IQ4_NL: return dot_iq4_nl;
  case GGML_TYPE_Q2_K: return dot_q2_K;
  case GGML_TYPE_Q3_K: return dot_q3_K;
  case GGML_TYPE_IQ4_XS: return dot_iq4_xs;
  default: return NULL;
  }
}
