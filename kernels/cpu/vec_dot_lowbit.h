/* Dot products of the weight types GGUF files mix in beside the engine's fast ones: Q5_0,
 * Q5_1, IQ4_NL (32-weight blocks) and Q2_K, Q3_K, IQ4_XS (256-weight super-blocks).
 *
 * llama-quantize falls back to Q5_0/Q5_1 for rows that are not whole super-blocks (SmolLM2's
 * 576-wide rows in Q4_K_M / Q5_K_M files) and uses Q2_K/Q3_K/IQ4_* in the small K and IQ
 * mixes; these tensors are a minority of a model's bytes, so one portable implementation
 * serves every SIMD level (the same bits on all of them, like the Q4_K/Q5_K/Q6_K dots).
 *
 * Activations are quantized to the type's ggml vec_dot type (ggml-cpu type_traits_cpu):
 * Q5_0 and IQ4_NL -> Q8_0, Q5_1 -> Q8_1, Q2_K, Q3_K and IQ4_XS -> Q8_K. Float order, one per
 * type: the integer products of a block (32) or sub-block (16 or 32) are summed exactly in
 * int32, then
 *   - Q5_0, IQ4_NL: sum += (d_w * d_a) * (float)isum, block by block;
 *   - Q5_1:         sum += (d_w * d_a) * (float)isum + m_w * s_a, block by block;
 *   - Q2_K:         per super-block isum = sum_j sc_j * dot_j and imin = sum_j m_j * bsum_j
 *                   exact, then sum += (d_a * d) * isum - (d_a * dmin) * imin;
 *   - Q3_K, IQ4_XS: per super-block isum = sum_j s_j * dot_j exact, sum += (d_w * d_a) * isum.
 * The weights' dequantized values are exactly d * s * q (ggml's definitions), so the dots
 * differ from a float dot of ggml_dequantize_row's output only by the Q8 rounding of the
 * activations and float summation.
 */
#ifndef LLB_KERNELS_CPU_VEC_DOT_LOWBIT_H
#define LLB_KERNELS_CPU_VEC_DOT_LOWBIT_H

#include "kernels/cpu/vec_dot.h"

/* The dot of weight type w (Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS), the same on every SIMD
 * level; NULL for any other type. Signature and row contract as cpu_vec_dot_fn. */
cpu_vec_dot_fn cpu_vec_dot_lowbit_select(enum ggml_type w);

#endif
