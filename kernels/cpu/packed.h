/* Packed matmul weights: Q4_1, Q8_0, Q5_0, Q5_1 and IQ4_NL repacked at load into panels of 16
 * output columns, so
 * that one SIMD register holds four weights of each of 16 columns and an int8 dot product
 * instruction (AVX-512 VNNI vpdpbusd, or AVX2 vpmaddubsw) sums them against four activation
 * bytes broadcast to every lane. The idea is ggml's repacked Q4_0 layouts (ggml-cpu repack.cpp,
 * block_q4_0x8) and llamafile's tinyBLAS; the layouts and the arithmetic below are ours.
 *
 * Arithmetic, one order for every output on every SIMD level (scalar, AVX2, AVX-512 VNNI), so
 * that all levels agree bit for bit and a row's result never depends on the batch:
 *   activations: per block of 32, d = amax / 127, q = round-half-even(x * 127 / amax) (ggml's
 *     Q8 quantizer), kept with d and s = d * sum(q) as floats (block_q8_x);
 *   per output (column c, token t), block by block:
 *     i   = the exact int32 sum of the 32 products w * q (Q4_1: w = the nibble, 0..15;
 *           Q8_0: w = the signed byte; Q5_0: w = the 5-bit quant - 16; IQ4_NL: w =
 *           kvalues_iq4nl[nibble]; Q5_1: w = the 5-bit quant, 0..31)
 *     acc = fma(d_w * d_a, (float)i, acc)
 *     acc = fma(m_w, s_a, acc)                                  (Q4_1 and Q5_1 only)
 *   starting from acc = 0; d_w, m_w are the block's fp16 scale and min.
 * This is not ggml's vec_dot order (8 float lanes per output, model/forward.h's
 * LLAMA_MATMUL_GGML keeps that one for bit-exactness with llama.cpp); it does one multiply and
 * one or two fma per block and output instead of eight lanes of them, which is what makes the
 * integer instructions the bottleneck.
 */
#ifndef LLB_KERNELS_CPU_PACKED_H
#define LLB_KERNELS_CPU_PACKED_H

#include <stddef.h>
#include <stdint.h>

#include "bus/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/vec_dot.h"

/* Output columns of one panel. */
#define CPU_PACK_COLS 16
/* Most activation rows one kernel call takes. */
#define CPU_PACKED_MAX_ROWS 8

/* Bytes of one packed block (32 weights of each of 16 columns):
 *   Q4_1: d[16] fp16, m[16] fp16, then qs[4][64]: qs[h][4j + e] = byte 4h + e of column j's
 *         ggml qs (low nibble: element 4h + e, high nibble: element 16 + 4h + e).
 *   Q8_0: d[16] fp16, then qs[8][64]: qs[g][4j + e] = element 4g + e of column j, plus 128
 *         (unsigned, for vpdpbusd). Q5_0 and IQ4_NL weights are signed integers times d
 *         (q - 16 in -16..15; kvalues_iq4nl in -127..113), so they are packed in this layout
 *         exactly and run the Q8_0 kernels.
 *   Q5_1: d[16] fp16, m[16] fp16, then qs[8][64]: qs[g][4j + e] = the 5-bit quant (0..31) of
 *         element 4g + e of column j. */
#define CPU_PACK_Q4_1_BLOCK (32 + 32 + 4 * 64)
#define CPU_PACK_Q8_0_BLOCK (32 + 8 * 64)
#define CPU_PACK_Q5_1_BLOCK (32 + 32 + 8 * 64)

/* Activation block of packed matmuls: 44 bytes. */
typedef struct {
  float d;       /* amax / 127 */
  float s;       /* d * sum(qs) */
  int32_t sum;   /* sum(qs), exact */
  int8_t qs[32];
} block_q8_x;

/* Bytes of w packed; 0 if w has no packed layout (type other than Q4_1/Q8_0/Q5_0/Q5_1/IQ4_NL,
 * rows not a multiple of CPU_PACK_COLS, cols not a multiple of 32). */
size_t cpu_pack_bytes(const struct backend_weight *w);

/* Writes w's packed layout into dst [cpu_pack_bytes(w)]: panel p (columns 16p..16p+15) at
 * p * (cols / 32) * block bytes, its blocks in order. INVALID_ARGUMENT if w has none. */
llb_status cpu_pack_weight(const struct backend_weight *w, void *dst);

/* Quantizes x [k] (k a multiple of 32) into y [k / 32]; the same bytes at every level. */
void cpu_quantize_act_row_x(enum cpu_simd_level level, const float *x, block_q8_x *y, int64_t k);

/* out[r * out_stride + j] = output (column j of the panel, activation row act[r]) for j < 16,
 * r < n_rows (1..CPU_PACKED_MAX_ROWS); nb = cols / 32 blocks; panel as cpu_pack_weight wrote
 * it. */
typedef void (*cpu_packed_fn)(int64_t nb, const uint8_t *panel, const block_q8_x *const *act,
                              int n_rows, float *out, int64_t out_stride);

/* The kernel of packed weight type w (Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL) at `level`, clamped to
 * what the CPU runs; NULL for other types. */
cpu_packed_fn cpu_packed_select(enum ggml_type w, enum cpu_simd_level level);

#endif
