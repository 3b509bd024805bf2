/* GGML tensor types: type table, block layouts, fp16/bf16 conversion, row dequantization.
 *
 * The block structs reproduce ggml's ggml-common.h byte for byte (they are read straight out
 * of a GGUF mapping); d, m and dmin are IEEE binary16 bit patterns. Dequantization follows
 * the reference definitions of ggml-quants.c (dequantize_row_*) and is bit-exact with them:
 * every product and sum is done in the same order, in float, as the reference.
 * Supported for dequantization: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS. Every other type ggml defines has its name and block size
 * here (so a file can be validated and a refusal can name it) but is not dequantized.
 */
#ifndef LLB_KERNELS_QUANT_H
#define LLB_KERNELS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Tensor element types, numbered as in ggml.h (these numbers are stored in GGUF files). */
enum ggml_type {
  GGML_TYPE_F32 = 0,
  GGML_TYPE_F16 = 1,
  GGML_TYPE_Q4_0 = 2,
  GGML_TYPE_Q4_1 = 3,
  GGML_TYPE_Q5_0 = 6,
  GGML_TYPE_Q5_1 = 7,
  GGML_TYPE_Q8_0 = 8,
  GGML_TYPE_Q8_1 = 9,
  GGML_TYPE_Q2_K = 10,
  GGML_TYPE_Q3_K = 11,
  GGML_TYPE_Q4_K = 12,
  GGML_TYPE_Q5_K = 13,
  GGML_TYPE_Q6_K = 14,
  GGML_TYPE_Q8_K = 15,
  GGML_TYPE_IQ2_XXS = 16,
  GGML_TYPE_IQ2_XS = 17,
  GGML_TYPE_IQ3_XXS = 18,
  GGML_TYPE_IQ1_S = 19,
  GGML_TYPE_IQ4_NL = 20,
  GGML_TYPE_IQ3_S = 21,
  GGML_TYPE_IQ2_S = 22,
  GGML_TYPE_IQ4_XS = 23,
  GGML_TYPE_I8 = 24,
  GGML_TYPE_I16 = 25,
  GGML_TYPE_I32 = 26,
  GGML_TYPE_I64 = 27,
  GGML_TYPE_F64 = 28,
  GGML_TYPE_IQ1_M = 29,
  GGML_TYPE_BF16 = 30,
  GGML_TYPE_TQ1_0 = 34,
  GGML_TYPE_TQ2_0 = 35,
  GGML_TYPE_MXFP4 = 39,
  GGML_TYPE_COUNT = 40
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK4_NL 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* 32 weights: w = d * (q - 8), q the 4-bit nibble (low nibbles = weights 0..15). 18 bytes. */
typedef struct {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];
} block_q4_0;

/* 32 weights: w = d * q + m. 20 bytes. */
typedef struct {
  uint16_t d;
  uint16_t m;
  uint8_t qs[QK4_1 / 2];
} block_q4_1;

/* 32 weights: w = d * (q - 16), q 5-bit: low 4 bits in qs as Q4_0 (low nibbles = weights
 * 0..15), the 5th bit of weight j in bit j of qh (a little-endian uint32). 22 bytes. */
typedef struct {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
} block_q5_0;

/* 32 weights: w = d * q + m, q 5-bit packed as in block_q5_0. 24 bytes. */
typedef struct {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
} block_q5_1;

/* 32 weights: w = d * q, q signed 8-bit. 34 bytes. */
typedef struct {
  uint16_t d;
  int8_t qs[QK8_0];
} block_q8_0;

/* 256 weights in 16 sub-blocks of 16: w = d * (sc & 15) * q - dmin * (sc >> 4), q 2-bit,
 * sc = scales[sub-block]. qs byte l of each 32-byte half holds weights l, l+32, l+64, l+96 of
 * that 128-weight half in bits 0-1, 2-3, 4-5, 6-7. 84 bytes. */
typedef struct {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d;
  uint16_t dmin;
} block_q2_K;

/* 256 weights in 16 sub-blocks of 16: w = d * (s - 32) * (q - (high bit ? 0 : 4)), q's low 2
 * bits packed in qs as in block_q2_K, its high bit for weight 32*b + l (b = 0..7) in bit b of
 * hmask[l]; s the 6-bit scale of the sub-block: low 4 bits in scales[0..7] (sub-blocks 0-7
 * low nibbles, 8-15 high nibbles), high 2 bits in scales[8 + s % 4] at bit 2 * (s / 4).
 * 110 bytes. */
typedef struct {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[K_SCALE_SIZE];
  uint16_t d;
} block_q3_K;

/* 256 weights in 8 sub-blocks of 32, 6-bit scales and mins packed in `scales`. 144 bytes. */
typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
} block_q4_K;

/* As block_q4_K plus one high bit per weight in qh. 176 bytes. */
typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
} block_q5_K;

/* 256 weights, 6-bit quants (4 low bits in ql, 2 high in qh), 16 int8 scales. 210 bytes. */
typedef struct {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
} block_q6_K;

/* 32 weights: w = d * kvalues_iq4nl[q], q a 4-bit index packed as Q4_0's nibbles. 18 bytes. */
typedef struct {
  uint16_t d;
  uint8_t qs[QK4_NL / 2];
} block_iq4_nl;

/* 256 weights in 8 sub-blocks of 32: w = d * (s - 32) * kvalues_iq4nl[q], q packed per
 * sub-block as IQ4_NL; s 6-bit: low 4 bits in scales_l[b / 2] at bit 4 * (b % 2), high 2 bits
 * in scales_h at bit 2 * b. 136 bytes. */
typedef struct {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
} block_iq4_xs;

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml-common.h kvalues_iq4nl). */
extern const int8_t llb_kvalues_iq4nl[16];

/* True for the types ggml_dequantize_row handles: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K
 * Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS. */
bool ggml_type_is_supported(enum ggml_type t);

/* ggml's lower-case name of a type ("q4_1", "f32"); "unknown" for a value ggml does not
 * define. Static string, never NULL. */
const char *ggml_type_name(enum ggml_type t);

/* Weights per block: 1 (f32, f16, bf16), 32 or 256; 0 if the type is unknown. Known for every
 * type listed in enum ggml_type, supported or not, so that a file can be validated. */
int64_t ggml_type_block_elems(enum ggml_type t);

/* Bytes per block (as ggml's type_size); 0 if the type is unknown. */
size_t ggml_type_block_bytes(enum ggml_type t);

/* Bytes of a row of `n_elems` weights of type `t` into *out. INVALID_ARGUMENT if the type is
 * unknown, n_elems is negative or not a multiple of the block size, or the size overflows. */
llb_status ggml_row_bytes(enum ggml_type t, int64_t n_elems, size_t *out);

/* IEEE binary16 <-> binary32. fp16_to_fp32 is exact (subnormals, inf, NaN kept, NaN payload
 * kept in the high bits); fp32_to_fp16 rounds to nearest even, overflows to inf, keeps NaN a
 * NaN (quiet). */
float llb_fp16_to_fp32(uint16_t h);
uint16_t llb_fp32_to_fp16(float f);

/* bfloat16 <-> binary32. bf16_to_fp32 is exact; fp32_to_bf16 rounds to nearest even and
 * keeps NaN a NaN (quiet), as ggml's ggml_compute_fp32_to_bf16. */
float llb_bf16_to_fp32(uint16_t h);
uint16_t llb_fp32_to_bf16(float f);

/* Dequantizes `n` weights of type `t` from `src` (n / block_elems blocks, may be unaligned)
 * into dst [n] floats. Bit-exact with ggml-quants.c dequantize_row_* (and the f16/bf16
 * converters). UNSUPPORTED (naming the type) for a type outside ggml_type_is_supported,
 * INVALID_ARGUMENT if n is negative or not a multiple of the block size. */
llb_status ggml_dequantize_row(enum ggml_type t, const void *src, float *dst, int64_t n);

#endif
