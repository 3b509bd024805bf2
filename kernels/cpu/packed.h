/* Packed matmul weights: Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS, F16 and BF16
 * repacked at load
 * into panels of 16 output columns, so
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
 *     i   = the exact int32 sum of the 32 products w * q (w the packed integer weight of the
 *           family below: a nibble, a signed byte, a 5-bit quant), minus z * sum(q) for the
 *           zero-point forms (Q4_0: z = 8, Q5_0: z = 16; w - z is GGUF's signed quant)
 *     acc = fma(d_w * d_a, (float)i, acc)
 *     acc = fma(m_w, s_a, acc)                      (NIBBLE and UNSIGNED families with a min:
 *                                                    Q4_1, Q5_1, Q4_K, Q5_K)
 *   (K6, Q6_K: i = sc_0 * (sum of q * a over elements 0-15 - 32 * bsum_0) + sc_1 * (the same
 *   over elements 16-31 - 32 * bsum_1), exact in int32, sc the int8 scales of the two 16-weight
 *   sub-blocks and bsum the activation sums of the halves; then the fma with d_w = the
 *   super-block's d)
 *   starting from acc = 0; d_w, m_w are the block's scale and min (fp16 values of the GGUF
 *   block, or for K / IQ4_XS blocks the exact float products of super- and sub-block scales).
 * (FLOAT, F16 and BF16: no quantization at all; see cpu_packed_float_fn.)
 * This is not ggml's vec_dot order (8 float lanes per output, model/forward/forward.h's
 * LLAMA_MATMUL_GGML keeps that one for bit-exactness with llama.cpp); it does one multiply and
 * one or two fma per block and output instead of eight lanes of them, which is what makes the
 * integer instructions the bottleneck.
 */
#ifndef LLB_KERNELS_CPU_PACKED_H
#define LLB_KERNELS_CPU_PACKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/vec_dot.h"

/* Output columns of one panel. */
#define CPU_PACK_COLS 16
/* Most activation rows one kernel call takes. */
#define CPU_PACKED_MAX_ROWS 8

/* Kernel families of packed blocks (32 weights of each of 16 columns). Each family has an
 * fp16-scaled form (scales as the GGUF block's fp16 bits) and a float-scaled form for the K
 * and IQ4_XS types, whose per-32 scale is the super-block scale times a sub-block scale (exact
 * in float, not in fp16); NIBBLE and UNSIGNED also a zero-point form (enum cpu_pack_scales).
 * With S the bytes of a scale (2 or 4), and the min array m[16] absent in the zero-point form:
 *   NIBBLE   (Q4_1; Q4_0 zero-point, z = 8; Q4_K float-scaled): d[16], m[16], then qs[4][64]:
 *            qs[h][4j + e] = byte 4h + e of column j's Q4_1-style qs (low nibble: element
 *            4h + e, high nibble: element 16 + 4h + e). Q4_K: d = d * sc, m = -(dmin * min) of
 *            the sub-block.
 *   SIGNED   (Q8_0): d[16], then qs[8][64]: qs[g][4j + e] = the signed integer weight of
 *            element 4g + e of column j, plus 128 (unsigned, for vpdpbusd).
 *   NL4      (IQ4_NL; IQ4_XS float-scaled): d[16], then qs[4][64]: the 4-bit indices q of the
 *            file in the NIBBLE arrangement; the weight is the signed integer kvalues_iq4nl[q]
 *            (-127..113), looked up in the kernel (vpshufb), then summed as SIGNED's. IQ4_XS:
 *            d = d * (ls - 32). Half the bytes of a byte per weight: decode reads the file's bits.
 *   UNSIGNED (Q5_1; Q5_0 zero-point, z = 16; Q5_K float-scaled): d[16], m[16], then
 *            qs[4][64], the low 4 bits of the 5-bit quants (0..31) in the NIBBLE arrangement,
 *            then qh[64]: bit g of qh[4j + e] = bit 4 of the quant of element 4g + e of column
 *            j (5 bits a weight, as the file; a byte per weight before 2026-11-30 made a decode
 *            step read 1.64x the file's Q5_0 bytes). Q5_K: d, m as Q4_K.
 *   (Q4_0 and Q5_0 were packed with a min m = -z * d before 2026-11-30: 32 more bytes a block,
 *   1.11x / 1.09x the file's bytes read by a decode step, and one more fma per block and row.)
 *   K6       (Q6_K): d[16] (fp16, the super-block's d), sc[2][16] (int8: sc[s][j] = the scale of
 *            elements 16s..16s+15 of column j), q[2][3][64]: sub-block s at 6 bits a byte,
 *            bits 0-5 of q[s][t][4j + e] = the quant of element 16s + 4t + e of column j (t =
 *            0, 1, 2) and bits 6-7 = bits 2t, 2t+1 of the quant of element 16s + 12 + e (the
 *            sub-block's fourth group in three pieces; a 4-bit and a 2-bit plane before
 *            2026-11-30: this one unpacks three groups of four by one and). Quants q are 0..63,
 *            w = d * sc * (q - 32).
 *   FLOAT    (F16, BF16): no scales; F16 w[32][16]: w[i][j] = element i of column j as the
 *            file stores it (fp16 bits); BF16 w[16][16][2]: w[k][j][e] = element 2k + e of
 *            column j (bf16 bits; a 32-bit lane holds one column's pair, as vdpbf16ps takes
 *            it). Multiplied in float against float activations (packed_float.c), not through
 *            block_q8_x; BF16 on AVX512_BF16 against bf16 activations (cpu_packed_bf16_fn).
 * Q2_K and Q3_K have scales per 16 weights and no packed form. */
enum cpu_pack_family {
  CPU_PACK_FAMILY_NIBBLE = 0,
  CPU_PACK_FAMILY_SIGNED = 1,
  CPU_PACK_FAMILY_UNSIGNED = 2,
  CPU_PACK_FAMILY_K6 = 3,
  CPU_PACK_FAMILY_FLOAT = 4,
  CPU_PACK_FAMILY_NL4 = 5,
};

/* How a packed block holds its scales. */
enum cpu_pack_scales {
  CPU_PACK_SCALES_FP16 = 0,       /* d[16] (and m[16]) as the GGUF block's fp16 bits */
  CPU_PACK_SCALES_FLOAT = 1,      /* d[16] (and m[16]) as floats: K and IQ4_XS types */
  CPU_PACK_SCALES_ZERO_POINT = 2, /* d[16] fp16, no min: w = d * (q - z), z = 8 (NIBBLE: Q4_0)
                                     or 16 (UNSIGNED: Q5_0), subtracted in the int32 sum */
};

/* The family of type t's packed blocks (enum cpu_pack_family), *scales (may be NULL) its
 * scales' form (enum cpu_pack_scales); -1 if t has no packed layout. */
int cpu_pack_kind(enum ggml_type t, int *scales);

/* Bytes of one packed block of `family` with scales of form `scales` (enum cpu_pack_scales). */
size_t cpu_pack_block_bytes(int family, int scales);

/* Activation block of packed matmuls: 48 bytes. */
typedef struct {
  float d;          /* amax / 127 */
  float s;          /* d * sum(qs) */
  int32_t sum;      /* sum(qs), exact */
  int16_t bsum[2];  /* sums of qs[0..15] and qs[16..31], exact (the K6 family's offsets) */
  int8_t qs[32];
} block_q8_x;

/* Whether w's type and shape have a packed layout (type, rows whole panels, cols whole blocks);
 * the values are not read. Callers holding a weight that was packed (w->packed set after
 * cpu_pack_bytes > 0) check this instead, in O(1). */
bool cpu_pack_shape_ok(const struct backend_weight *w);

/* Bytes of w packed; 0 if w has no packed layout (a type without cpu_pack_kind, rows not a
 * multiple of CPU_PACK_COLS, cols not whole blocks of the type). The values are not read. */
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

/* FLOAT family (F16, BF16 panels): out[r * out_stride + j] = sum over i < 32 * nb, in index
 * order, of fma(w_i,j, x[r][i], acc) from acc = 0 (one float order on every level, batch
 * invariant), for j < 16 and r < n_rows (1..CPU_PACKED_MAX_ROWS); x rows are the float
 * activations themselves. */
typedef void (*cpu_packed_float_fn)(int64_t nb, const uint8_t *panel, const float *const *x, int n_rows, float *out,
                                    int64_t out_stride);

/* The FLOAT-family kernel of weight type w (F16, BF16) at `level`; NULL for other types. */
cpu_packed_float_fn cpu_packed_float_select(enum ggml_type w, enum cpu_simd_level level);

/* BF16 panels on CPU_SIMD_LEVEL_AVX512_BF16 (llama.cpp's arithmetic for BF16 weights on such a
 * CPU): x rows are the activations rounded to bf16 (cpu_packed_bf16_act_row), 2 bytes each;
 * out[r * out_stride + j] = over the pairs k < 16 * nb in order, from acc = 0,
 *   acc = fma(w_2k+1,j, x[r][2k+1], acc); acc = fma(w_2k,j, x[r][2k], acc)
 * (vdpbf16ps: bf16 products are exact in float, each add rounds to nearest even; a denormal
 * bf16 input counts as zero and a denormal sum flushes to zero), for j < 16, r < n_rows
 * (1..CPU_PACKED_MAX_ROWS). One order for every row: batch invariant. */
typedef void (*cpu_packed_bf16_fn)(int64_t nb, const uint8_t *panel, const uint16_t *const *x, int n_rows,
                                   float *out, int64_t out_stride);

/* The kernel above for weight type w at `level` (clamped to the CPU's); NULL unless w is BF16 and
 * the level is CPU_SIMD_LEVEL_AVX512_BF16 (the caller then takes cpu_packed_float_select). */
cpu_packed_bf16_fn cpu_packed_bf16_select(enum ggml_type w, enum cpu_simd_level level);

/* y[i] = x[i] as bf16 (llb_fp32_to_bf16: nearest even, NaN stays a quiet NaN), i < n; the same
 * bits at every level. */
void cpu_packed_bf16_act_row(enum cpu_simd_level level, const float *x, uint16_t *y, int64_t n);

/* The kernel of packed weight type w (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS) at
 * `level`, clamped to what the CPU runs; NULL for other types. */
cpu_packed_fn cpu_packed_select(enum ggml_type w, enum cpu_simd_level level);

/* Packed bytes from which a weight's decode calls prefetch into L2 (cpu_packed_prefetch_to_l2). */
#define CPU_PACK_L2_PREFETCH_BYTES ((size_t)64 << 20)

/* Whether the calling thread's packed kernels, in their calls of 1-3 rows, prefetch each block's
 * lines cpu_decode_prefetch_bytes ahead into L2 (prefetcht1, `on`) or into L1 (prefetcht0, the
 * default). The matmul sets it per weight: on for weights of CPU_PACK_L2_PREFETCH_BYTES or more.
 * Measured on an Intel Xeon guest (kernels/cpu/README.md "Prefetching ahead in the decode
 * kernels"): Gemma 3 270M's 178 MB Q8_0 output matrix 6.7 -> 5.4 ms a decode step on AVX2 with
 * prefetcht1, while SmolLM2's weights (30 MB and less) ran 4-13% slower with it. Changes no
 * result, only the loads' timing. Thread-local; no effect where the distance is 0. */
void cpu_packed_prefetch_to_l2(bool on);

/* Most activation rows one call of a cpu_packed_select_many kernel takes. */
#define CPU_PACKED_MANY_ROWS 64

/* A kernel of packed weight type w at `level` (clamped to the CPU's) that takes 1 to
 * CPU_PACKED_MANY_ROWS rows a call, as cpu_packed_fn otherwise, each row's bits those of
 * cpu_packed_select's kernel; NULL where there is none (then call cpu_packed_select's, up to
 * CPU_PACKED_MAX_ROWS rows a call). AVX2 NIBBLE, UNSIGNED and K6 (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1,
 * Q5_K, Q6_K) and AVX-512 VNNI UNSIGNED (Q5_0, Q5_1, Q5_K) have one: their staged kernels unpack
 * a panel's blocks once per call for all its rows, so more rows a call unpack less per row. */
cpu_packed_fn cpu_packed_select_many(enum ggml_type w, enum cpu_simd_level level);

#endif
