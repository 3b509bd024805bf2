/* CPU backend internals shared by the kernels/cpu sources, and its test hooks.
 * The public surface is `backend_cpu_ops()` in kernels/backend.h. */
#ifndef LLB_KERNELS_CPU_CPU_BACKEND_H
#define LLB_KERNELS_CPU_CPU_BACKEND_H

#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/cpu/vec_dot.h"

/* Most weights one matmul call takes (q, k, v share one input). */
#define CPU_MATMUL_MAX_WEIGHTS 3
/* Most query heads one attention work item takes (heads sharing a KV head). */
#define CPU_ATTN_MAX_GROUP 8
/* Most (query row, head) pairs one attention work item takes: a tile of rows of one sequence
 * times the heads of a KV head, sharing each key's load and conversion. */
#define CPU_ATTN_MAX_ROW_HEADS 16

/* Float order of attention's two dot products (q.k per key; p.v per output element), one of
 * the two ggml's CPU mul_mat runs on F16 operands (AVX-512 build, no flash attention):
 *   BATCH:  llamafile tinyBLAS<16> (ubatches of >= 2 tokens): element i of the dot goes to
 *           lane i % 16 of ONE accumulator by fma in index order, lanes summed by
 *           cpu_reduce16.
 *   SINGLE: ggml_vec_dot_f16 (1-token ubatches): element i goes to lane i % 16 of
 *           accumulator (i % 64) / 16, accumulators summed as (a0 + a2) + (a1 + a3), then
 *           cpu_reduce16; a tail of n % 64 elements added in double.
 * BY_QUERY_LEN: BATCH for rows of a sequence with >= 2 query rows in the call, SINGLE for a
 *           1-row decode step: llama.cpp's own choice (its ubatch is one sequence), bit-exact
 *           with it on prefill and decode, still independent of the other sequences in the
 *           batch; but a decode step no longer equals a recompute of the same token inside a
 *           prefill (preemption, recompute), so it is opt-in.
 * backend_ctx_params.attention_order picks BATCH (BATCH_INVARIANT, the default: prefill
 * bit-exact with llama.cpp, every row the same order) or BY_QUERY_LEN (LLAMACPP); tests set
 * SINGLE with cpu_backend_set_attn_order. */
enum cpu_attn_order { CPU_ATTN_ORDER_BATCH = 0, CPU_ATTN_ORDER_SINGLE = 1, CPU_ATTN_ORDER_BY_QUERY_LEN = 2 };

struct backend_ctx {
  struct backend_ctx_params params;
  enum cpu_simd_level level;  /* SIMD path of every op; detected, lowered by tests */
  enum cpu_attn_order attn_order; /* see enum cpu_attn_order */
  struct cpu_threadpool *pool;
  uint8_t *act;               /* [CPU_MATMUL_MAX_WEIGHTS, max_num_tokens, 4 * max_row_elems] bytes */
  size_t act_bytes;
  float *scores;              /* [n_threads, CPU_ATTN_MAX_ROW_HEADS, max_context_len] attention probabilities */
  int32_t *row_seq;           /* [max_num_tokens] sequence of each query row */
  uint16_t *kv_f16;           /* [n_threads, 2, max_context_len, head_dim]: a quantized cache's K and V
                                 of one run of rows, read as fp16 (attention.c); NULL without head_dim.
                                 Pages are touched only by quantized caches */
  int32_t *kv_ident;          /* [max_context_len]: 0, 1, 2, ... (the scratch's block table) */
  uint8_t *lora_scratch;      /* [n_threads, CPU_LORA_SCRATCH(max_row_elems)] bytes (lora.c) */
  /* RoPE's cos and sin of the rows of the last cpu_rope call that computed them (ops.c): the
   * forward rotates q and k of every layer at the same positions with the same params, so the
   * other 2 * n_layer - 1 calls of a step read them. NULL without head_dim. */
  float *rope_cs;             /* [max_num_tokens, head_dim]: a row's n_dims / 2 cos, then its sin */
  int32_t *rope_pos;          /* [max_num_tokens] the positions the table holds */
  int32_t rope_rows;          /* rows the table holds; 0: none */
  struct backend_rope_params rope_p; /* and their params */
  float *rope_ff;             /* [head_dim / 2 + 1] a copy of rope_p's freq_factors (compared by value) */
};

/* Per-thread bytes of the LoRA op for rows of up to n elements: CPU_DOT_MAX_ROWS activation
 * rows of x and of t (at most 4 bytes an element each) and CPU_DOT_MAX_ROWS fp32 rows of t. */
#define CPU_LORA_SCRATCH(n) ((size_t)3 * CPU_DOT_MAX_ROWS * 4 * (size_t)(n))

/* Selects the SIMD path of every op of c (clamped to what the CPU runs), for tests that
 * compare paths. Returns the level in effect. */
enum cpu_simd_level cpu_backend_set_simd_level(struct backend_ctx *c, enum cpu_simd_level level);

/* Selects the attention float order of c (tests; contexts start with the order of their params). */
void cpu_backend_set_attn_order(struct backend_ctx *c, enum cpu_attn_order order);

/* The ops, also reachable through backend_cpu_ops(); see kernels/backend.h. */
llb_status cpu_ctx_create(const struct backend_ctx_params *p, struct backend_ctx **out);
void cpu_ctx_destroy(struct backend_ctx *c);
llb_status cpu_embed(struct backend_ctx *c, const struct backend_weight *table, const int32_t *ids,
                     int32_t n, float *out);
llb_status cpu_rms_norm(struct backend_ctx *c, const float *x, const float *w, int32_t n_rows,
                        int32_t dim, float eps, float *out);
llb_status cpu_matmul(struct backend_ctx *c, const float *x, int32_t n_rows,
                      const struct backend_weight *const *w, float *const *out, int32_t n_w);
/* backend_ops.lora (lora.c). */
llb_status cpu_lora(struct backend_ctx *c, const float *x, int64_t cols, float *const *y, int32_t n_targets,
                    const struct backend_lora_seg *segs, int32_t n_segs);
llb_status cpu_rope(struct backend_ctx *c, float *x, const int32_t *positions, int32_t n_rows,
                    int32_t n_heads, int32_t head_dim, const struct backend_rope_params *p);
/* backend_ops.kv_dtype_ok: F16, Q8_0 and FP8_E4M3 (kv_dtype.c, as the three below). */
bool cpu_kv_dtype_ok(enum backend_kv_dtype t);
/* One row of n values of x into dst in dtype t: fp16 (F16C rounding, as llb_fp32_to_fp16), Q8_0
 * as ggml quantizes it (blocks of 32: fp16 d, 32 int8), FP8 E4M3 rounded to nearest even and
 * saturated at +-448 (NaN 0x7F). n a multiple of 32 for Q8_0. */
void cpu_kv_row_store(enum cpu_simd_level level, enum backend_kv_dtype t, const float *x, uint8_t *dst, int32_t n);
/* dst[hd] = the KV row at `row` (dtype t, backend_kv_row_bytes bytes) read as fp16: FP8 exactly,
 * Q8_0's d * q rounded to nearest even (what fp16 holds of it). t must be Q8_0 or FP8_E4M3 (any
 * other value is read as Q8_0). Call cpu_kv_dtype_prepare(t) once before (its FP8 table). */
void cpu_kv_row_to_fp16(enum cpu_simd_level level, enum backend_kv_dtype t, const uint8_t *row, int32_t hd,
                        uint16_t *dst);
/* Fills the tables cpu_kv_row_to_fp16 reads for t (once per process; thread-safe). */
void cpu_kv_dtype_prepare(enum backend_kv_dtype t);
llb_status cpu_kv_write(struct backend_ctx *c, const struct backend_kv_layer *kv, const float *k,
                        const float *v, const int64_t *slot_mapping, int32_t n_rows);
llb_status cpu_attention(struct backend_ctx *c, const struct backend_attn_params *p);
llb_status cpu_geglu(struct backend_ctx *c, const float *gate, const float *up, int64_t n, float *out);
llb_status cpu_swiglu(struct backend_ctx *c, const float *gate, const float *up, int64_t n,
                      float *out);
llb_status cpu_add(struct backend_ctx *c, float *x, const float *y, int64_t n);
llb_status cpu_softcap(struct backend_ctx *c, float *x, int64_t n, float cap);
/* The vision encoder's ops (vit_ops.c). */
llb_status cpu_layer_norm(struct backend_ctx *c, const float *x, const float *w, const float *b,
                          int32_t n_rows, int32_t dim, float eps, float *out);
llb_status cpu_gelu(struct backend_ctx *c, float *x, int64_t n, enum backend_gelu_kind kind);
llb_status cpu_add_bias(struct backend_ctx *c, float *x, const float *b, int32_t n_rows, int32_t dim);
llb_status cpu_attention_full(struct backend_ctx *c, const struct backend_full_attn_params *p);

#endif
