/* Activation quantization and dot products of the CPU matmul, scalar and AVX2.
 *
 * Numerics follow ggml's CPU backend (ggml-cpu quants.c, type_traits_cpu): a weight row of
 * type T is dotted with an activation row quantized to T's vec_dot type (Q4_0/Q5_0/IQ4_NL/Q8_0
 * -> Q8_0, Q4_1/Q5_1 -> Q8_1, Q2_K..Q6_K/IQ4_XS -> Q8_K, F16 -> F16, BF16 -> BF16, F32 -> F32;
 * the dots of Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS live in vec_dot_lowbit.{h,c}), and the
 * integer products of a block are summed exactly before any float is touched.
 *
 * Same results on every path: each dot has ONE defined float order, which the scalar and the
 * AVX2 code both follow, so they agree bit for bit (tests check it):
 *   - Q4_0, Q4_1, Q8_0: ggml's AVX2 order. Eight float lanes; lane l of block b gets
 *     fma(d_w*d_a, (float)(sum of the integer products of elements 4l..4l+3), lane),
 *     then the lanes are summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); Q4_1 then adds
 *     sum_b m_w*s_a accumulated block by block.
 *   - F32, F16, BF16: element i goes to lane i % 8 by fma, lanes summed as above, a tail of
 *     k % 8 elements added in order.
 *   - Q4_K, Q5_K, Q6_K: exact int32 sums per super-block, then float in block order (one
 *     shared implementation; the int work is cheap next to memory traffic for these types).
 * Activation quantization is one scalar implementation shared by all paths (cheap: O(k) per
 * row against O(k * n) for the dots), rounding to nearest even as ggml's AVX2 quantizer does.
 */
#ifndef LLB_KERNELS_CPU_VEC_DOT_H
#define LLB_KERNELS_CPU_VEC_DOT_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/quant.h"

enum cpu_simd_level {
  CPU_SIMD_LEVEL_SCALAR = 0, /* portable C */
  CPU_SIMD_LEVEL_AVX2 = 1,   /* AVX2 + FMA + F16C */
  CPU_SIMD_LEVEL_AVX512_VNNI = 2, /* AVX2 paths, plus AVX-512 F/BW/VL + VNNI for packed matmuls */
  CPU_SIMD_LEVEL_AVX512_BF16 = 3  /* AVX-512 VNNI paths, plus AVX512_BF16 (vdpbf16ps) for BF16 weights:
                                     their activations rounded to bf16 (packed.h, FLOAT family) */
};

/* Best level this CPU runs (__builtin_cpu_supports, CPUID), probed once per process, capped
 * by the environment variable LLMBUS_SIMD (scalar | avx2 | avx512vnni | avx512) when it is set: every
 * kernel clamps to this, so the variable forces a path for benches and tests. */
enum cpu_simd_level cpu_simd_level_detect(void);

/* Default of cpu_decode_prefetch_bytes on an Intel CPU (bytes ahead). */
#define CPU_DECODE_PREFETCH_INTEL 4096
/* Most that LLMBUS_PREFETCH_BYTES may ask for. */
#define CPU_DECODE_PREFETCH_MAX 65536

/* How far ahead (bytes, a multiple of 64, 0 = none) the packed kernels' calls of 1-3 rows (the
 * decode matmuls, which stream their weights from DRAM) prefetch each block's lines into L1
 * (prefetcht0, in address order; into L2 for the largest weights, cpu_packed_prefetch_to_l2):
 * cpu_decode_prefetch_parse of the environment variable LLMBUS_PREFETCH_BYTES and the CPU's
 * vendor (CPUID leaf 0), probed once per process. Measured (kernels/cpu/README.md "Prefetching
 * ahead in the decode kernels"): on an Intel Xeon guest
 * (AMX, AVX512-FP16: Sapphire Rapids or later) 2048 bytes took every one-row kernel alone from
 * 0.73-0.95 of a read of the same bytes to 0.93-1.05, and in the forward (batch-1 decode, where
 * the step's other weights and ops share the caches) 4096 beat 2048 in 75 of 88 interleaved
 * pairs over Q4_0 / Q4_1 / Q4_K_M / Q8_0 / Gemma 3 on AVX2 and AVX-512 (AVX2 medians +8 to
 * +25%); on an AMD EPYC Zen 4 guest the same prefetches cost 20-30%: there the hardware
 * prefetchers already keep ahead. Changes no result, only the loads' timing. */
int cpu_decode_prefetch_bytes(void);

/* The distance cpu_decode_prefetch_bytes uses: `env` (LLMBUS_PREFETCH_BYTES' value, NULL or
 * empty when unset) when it is a decimal in [0, CPU_DECODE_PREFETCH_MAX], rounded down to a
 * multiple of 64; otherwise CPU_DECODE_PREFETCH_INTEL where `intel`, else 0. Pure. */
int cpu_decode_prefetch_parse(const char *env, bool intel);

/* Activation block of Q4_1 dots (ggml block_q8_1): d = amax/127, s = d * sum(qs). 36 bytes. */
typedef struct {
  uint16_t d; /* fp16 */
  uint16_t s; /* fp16 */
  int8_t qs[32];
} block_q8_1;

/* Activation block of K-quant dots (ggml block_q8_K). 292 bytes. */
typedef struct {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16]; /* sums of qs in groups of 16 */
} block_q8_K;

/* Most activation rows one dot call takes (they share the unpacked weight row). */
#define CPU_DOT_MAX_ROWS 4

/* vec_dot type of weight type w; GGML_TYPE_COUNT if w has no dot here. */
enum ggml_type cpu_vec_dot_type(enum ggml_type w);

/* Bytes of one activation row of k elements quantized for weight type w (k a multiple of
 * w's block size); 0 if unsupported. */
size_t cpu_act_row_bytes(enum ggml_type w, int64_t k);

/* One block of 32 as ggml's AVX2 quantize_row_q8_0/q8_1: d = amax / 127,
 * q = round-half-even(x * (127 / amax)). Returns d; *sum gets sum(q). */
float cpu_quantize_block_q8(const float *x, int8_t *qs, int *sum);

/* Quantizes x [k] for dots with weight type w into out [cpu_act_row_bytes(w, k)]. */
void cpu_quantize_act_row(enum ggml_type w, const float *x, void *out, int64_t k);

/* out[r] = dot(weight row w_row [k], activation row act[r]) for r < n_rows (1..4). */
typedef void (*cpu_vec_dot_fn)(int64_t k, const void *w_row, const void *const *act, int n_rows,
                               float *out);

/* The dot of weight type w at `level` (clamped to what the CPU runs); NULL if unsupported. */
cpu_vec_dot_fn cpu_vec_dot_select(enum ggml_type w, enum cpu_simd_level level);

/* The dot llama.cpp's x86 build (native, AVX-512) runs for rows row0 .. row0 + 3 (row0 % 4 == 0)
 * of a step of n_rows rows, where its kernel depends on the step: Q4_K, which it repacks, takes
 * its gemm order (an fma per pair of sub-blocks) for full groups of four rows and its gemv order
 * (cpu_vec_dot_select's) for the rest; Q6_K takes its tiled K-quant order in steps of 8 or more
 * rows (an exact super-block sum, then (isum * d) * d8 added). Other types: cpu_vec_dot_select.
 * For bit-exactness with llama.cpp only (the result of a row then depends on the step). */
cpu_vec_dot_fn cpu_vec_dot_select_llamacpp(enum ggml_type w, enum cpu_simd_level level, int32_t n_rows,
                                           int32_t row0);

/* Most weight rows (output columns) one gemm tile call takes. */
#define CPU_GEMM_MAX_COLS 4

/* A tile of a matmul: out[r * out_stride + c] = dot(weight row c, act[r]) for c < n_cols
 * (1..CPU_GEMM_MAX_COLS; weight row c at w + c * w_stride bytes) and r < n_rows
 * (1..CPU_DOT_MAX_ROWS). Every output is bit-identical to the cpu_vec_dot_fn of the same type
 * and level (same float order per output); the tile only shares loads and unpacking: each
 * weight block is unpacked once for all rows and each activation block read once for all
 * columns. */
typedef void (*cpu_gemm_fn)(int64_t k, const void *w, size_t w_stride, int n_cols,
                            const void *const *act, int n_rows, float *out, int64_t out_stride);

/* The tile kernel of weight type w at `level`; NULL where there is none (then callers loop
 * over cpu_vec_dot_select's dot per column). */
cpu_gemm_fn cpu_gemm_select(enum ggml_type w, enum cpu_simd_level level);

/* y[i] = fp16(x[i]) rounded to nearest even (llb_fp32_to_fp16) for i < n; F16C on AVX2. */
void cpu_fp32_to_fp16_row(enum cpu_simd_level level, const float *x, uint16_t *y, int64_t n);

/* ggml's vectorized expf (ggml_v_expf, the AVX-512 variant the oracle build runs), lane by
 * lane: n = round(x * log2 e) by the 1.5*2^23 shift, b = x - n*ln2 in two fma steps, a
 * degree-5 polynomial j(b) by fma, result j * 2^n (scalef); |n| > 192 gives 0 (n <= 0) or
 * +inf. Not expf: up to ~1.5 ulp off, but the same bits as ggml on every input. */
float cpu_expf_ggml(float x);

/* y[i] = cpu_expf_ggml(x[i] - sub) for i < n (ggml_vec_soft_max_f32's exponentials).
 * Same bits on every level. */
void cpu_exp_sub_row(enum cpu_simd_level level, const float *x, float sub, float *y, int64_t n);

/* y[i] = (g[i] / (1 + cpu_expf_ggml(0 - g[i]))) * u[i] for i < n: ggml_vec_swiglu_f32
 * (ggml_v_silu then one multiply). y may alias g or u. Same bits on every level. */
void cpu_swiglu_row(enum cpu_simd_level level, const float *g, const float *u, float *y, int64_t n);

/* Which of ggml's fp16 GELU tables cpu_gelu_row reads: the tanh approximation (ggml_gelu) or
 * x * sigmoid(1.702 x) (ggml_gelu_quick). */
enum cpu_gelu_kind { CPU_GELU_TANH = 0, CPU_GELU_QUICK = 1 };

/* ggml's GELU with GGML_GELU_FP16 / GGML_GELU_QUICK_FP16, for i < n: x[i] rounded to fp16 (to
 * nearest even), looked up in the kind's table (fp16(gelu(v)) for every fp16 value v, filled
 * once), widened; TANH gives +0 where x[i] <= -10 and x[i] where x[i] >= 10 (ggml_vec_gelu_f32),
 * QUICK the table everywhere (ggml_vec_gelu_quick_f32). u != NULL: that times u[i]
 * (ggml_vec_geglu_f32: its +0 stays +0, not 0 * u). y may alias x or u. Same bits on every
 * level (AVX2: F16C and a gather). */
void cpu_gelu_row(enum cpu_simd_level level, enum cpu_gelu_kind kind, const float *x, const float *u, float *y,
                  int64_t n);

/* Sum of 16 lanes in _mm512_reduce_add_ps's order: t[i] = v[i+8] + v[i] (8), then
 * t[i+4] + t[i] (4), then (t0 + t2) + (t1 + t3). */
float cpu_reduce16(const float v[16]);

#endif
