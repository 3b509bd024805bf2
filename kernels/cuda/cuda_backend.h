/* The CUDA op set of the LLaMA forward pass (docs/design.md §10), as a C API.
 *
 * Plain C: no CUDA type appears here, so C code (tests, the worker) uses it without the CUDA
 * headers; only the .cu files of kernels/cuda include them. Every op runs asynchronously on the context's
 * stream and takes DEVICE pointers (allocate them with cuda_mem_alloc); a status reports
 * launch and argument errors at once, and an asynchronous fault at the next cuda_ctx_sync.
 * Every CUDA and cuBLAS call is checked and mapped to a status (CUDA_TRY in cuda_common.cuh):
 * out of memory -> LLB_STATUS_OUT_OF_MEMORY, no device / driver -> LLB_STATUS_DEVICE, a shape
 * a kernel does not take -> LLB_STATUS_UNSUPPORTED; nothing here aborts.
 *
 * Numerics: activations are fp32 between ops; matmul operands are fp16 (weights dequantized
 * once at load, activations rounded to fp16 by the op that produces them) with fp32
 * accumulation in cuBLAS; the KV cache is fp16 in the CPU backend's layout. Row reductions
 * (norm, attention, sampling) have one fixed order per row whatever the batch; cuBLAS picks
 * its kernel by shape, so matmul results may differ in the last bits between batch sizes.
 */
#ifndef LLB_KERNELS_CUDA_CUDA_BACKEND_H
#define LLB_KERNELS_CUDA_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/status.h"
#include "kernels/backend.h"
#include "kernels/quant.h"

/* Partition of the context one attention block reads (split-K over long contexts). */
#define CUDA_ATTN_PARTITION 512
/* Smaller partitions when the context's split-K scratch fits CUDA_ATTN_SCRATCH_BYTES with them. */
#define CUDA_ATTN_SMALL_PARTITION 128
#define CUDA_ATTN_SCRATCH_BYTES (1024.0 * 1024.0 * 1024.0)
/* Largest head_dim the attention kernel takes (a multiple of 8). */
#define CUDA_ATTN_MAX_HEAD_DIM 256

/* ------------------------------------------------------------------ device and memory */

/* OK when at least one CUDA device is usable; otherwise LLB_STATUS_DEVICE and a reason
 * ("cudaGetDeviceCount: CUDA driver version is insufficient..." or "0 devices") written to
 * reason [cap] (NUL-terminated). Any error of cudaGetDeviceCount means "no device". */
llb_status cuda_device_probe(char *reason, size_t cap);

/* Name, memory and compute capability of device 0 into buf [cap]: "NVIDIA H100 80GB HBM3,
 * 79.1 GiB, sm_90". DEVICE if none. */
llb_status cuda_device_describe(char *buf, size_t cap);

/* Free and total device memory in bytes (cudaMemGetInfo). */
llb_status cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* cudaMalloc of size_bytes into *out (device pointer); OUT_OF_MEMORY naming the size. */
llb_status cuda_mem_alloc(size_t size_bytes, void **out);
void cuda_mem_free(void *p); /* NULL ok */

/* ------------------------------------------------------------------ execution context */

struct cuda_ctx_params {
  int32_t max_num_tokens;  /* rows of one op call (attention split scratch is sized by it) */
  int32_t max_num_heads;   /* query heads (attention scratch) */
  int32_t max_head_dim;    /* <= CUDA_ATTN_MAX_HEAD_DIM */
  int32_t max_context_len; /* longest sequence attention reads */
  int32_t max_sample_rows; /* rows of one cuda_sample call; 0 = no device sampling */
  int32_t max_vocab;       /* logits per row cuda_sample takes */
  double attn_scratch_bytes; /* attention split-K scratch budget choosing the partition size
                                (CUDA_ATTN_SMALL_PARTITION keys if it fits, else
                                CUDA_ATTN_PARTITION); 0 = CUDA_ATTN_SCRATCH_BYTES */
};

/* Stream, cuBLAS handle (with a fixed workspace, so that matmuls can be captured in a CUDA
 * graph), attention split-K scratch, sampling scratch [max_sample_rows, max_vocab] floats. Caller frees with cuda_ctx_destroy. Errors:
 * INVALID_ARGUMENT (sizes), DEVICE (no device, cuBLAS init), OUT_OF_MEMORY. */
struct cuda_ctx;
llb_status cuda_ctx_create(const struct cuda_ctx_params *p, struct cuda_ctx **out);
void cuda_ctx_destroy(struct cuda_ctx *c); /* NULL ok */

/* Waits for all work queued on c; returns the first asynchronous error (DEVICE naming it). */
llb_status cuda_ctx_sync(struct cuda_ctx *c);

/* Copies between host and device on c's stream, then waits (host memory may be pageable). */
llb_status cuda_copy_to_device(struct cuda_ctx *c, void *dst_d, const void *src_h, size_t bytes);
llb_status cuda_copy_to_host(struct cuda_ctx *c, void *dst_h, const void *src_d, size_t bytes);

/* ------------------------------------------------------------------ weights */

enum cuda_dtype { CUDA_DTYPE_F32 = 0, CUDA_DTYPE_F16 = 1, CUDA_DTYPE_BF16 = 2 };

/* A dense device weight, row-major [rows, cols] (GGUF ne[1] x ne[0]). */
struct cuda_weight {
  enum cuda_dtype dtype; /* F16 or BF16 for matmul and embed */
  int64_t rows, cols;
  void *data;            /* device [rows, cols] */
};

/* dst_d [n] (dtype) = dequantized src_d [n / block_elems blocks] (device copy of GGUF bytes).
 * Types F32 F16 BF16 Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K; with dtype F32 the result is bit-exact
 * with ggml_dequantize_row (same float operation order, no contraction). UNSUPPORTED for
 * another type, INVALID_ARGUMENT if n is not a multiple of the block. */
llb_status cuda_dequantize(struct cuda_ctx *c, enum ggml_type type, const void *src_d, int64_t n,
                           enum cuda_dtype dtype, void *dst_d);

/* ------------------------------------------------------------------ ops */

/* out_d [n, table->cols] fp32 = rows ids_d [n] of table (F16/BF16). The caller validates ids
 * (the forward does, on the host); a row whose id is outside [0, rows) is written as NaN. */
llb_status cuda_embed(struct cuda_ctx *c, const struct cuda_weight *table, const int32_t *ids_d,
                      int32_t n, float *out_d);

/* RMSNorm fused with the residual add: for each row, x += add (when add_d != NULL), then
 * y = x * 1/sqrt(mean(x^2) + eps) * w, the sum of squares in double (as ggml). x_d [n_rows,
 * dim] (in/out), add_d [n_rows, dim] or NULL, w_d [dim]; y goes to out_f32_d [n_rows, dim]
 * and/or out_f16_d [n_rows, dim] (fp16, round to nearest even); either may be NULL. */
llb_status cuda_rms_norm(struct cuda_ctx *c, float *x_d, const float *add_d, const float *w_d,
                         int32_t n_rows, int32_t dim, float eps, float *out_f32_d,
                         uint16_t *out_f16_d);

/* out_d [n_rows, w->rows] fp32 = x_d [n_rows, w->cols] (fp16, or bf16 for a BF16 weight)
 * times w transposed, through cublasGemmEx with fp32 accumulation. */
llb_status cuda_matmul(struct cuda_ctx *c, const void *x_d, int32_t n_rows,
                       const struct cuda_weight *w, float *out_d);

/* Rotates x_d [n_rows, n_heads, head_dim] (rows `row_stride` floats apart, >= n_heads *
 * head_dim: q and k inside the fused qkv output) in place at positions_d [n_rows];
 * ggml_rope_ext (NORM or NEOX) with ext_factor 0, attn_factor 1, theta by ggml's repeated
 * products. */
llb_status cuda_rope(struct cuda_ctx *c, float *x_d, int64_t row_stride, const int32_t *positions_d,
                     int32_t n_rows, int32_t n_heads, int32_t head_dim,
                     const struct backend_rope_params *p);

/* One layer's paged KV cache on the device (fp16 bit patterns), the CPU backend's layout. */
struct cuda_kv_layer {
  uint16_t *k; /* device [num_blocks, block_size, n_kv_heads, head_dim] */
  uint16_t *v; /* device [num_blocks, block_size, n_kv_heads, head_dim] */
  int32_t num_blocks, block_size, n_kv_heads, head_dim;
};

/* reshape_and_cache: stores k_d, v_d [n_rows, n_kv_heads, head_dim] (fp32, rows `row_stride`
 * floats apart) as fp16 at slot_mapping_d [n_rows] (block * block_size + offset). Slot -1 is
 * skipped, and so is any slot outside the cache (the caller validates slots on the host). */
llb_status cuda_kv_write(struct cuda_ctx *c, const struct cuda_kv_layer *kv, const float *k_d,
                         const float *v_d, int64_t row_stride, const int64_t *slot_mapping_d,
                         int32_t n_rows);

/* Paged causal GQA attention (vLLM layout), decode and (chunked) prefill alike: query row i
 * of sequence s sits at context index seq_lens[s] - q_len + i and attends keys 0..that index
 * through the block table; query head h reads KV head h / (n_heads / n_kv_heads). One block
 * per (row, head, CUDA_ATTN_PARTITION keys), then a combine pass over the partitions (split-K),
 * so the work of a row does not depend on the batch. All pointers are device pointers. */
struct cuda_attn_params {
  const float *q;                 /* [num_tokens, n_heads, head_dim], rows q_stride apart */
  int64_t q_stride;               /* floats between query rows (>= n_heads * head_dim) */
  float *out_f32;                 /* [num_tokens, n_heads, head_dim] or NULL */
  uint16_t *out_f16;              /* [num_tokens, n_heads, head_dim] fp16, or NULL */
  const struct cuda_kv_layer *kv; /* host struct, device arrays */
  int32_t num_tokens, n_heads;
  float scale;                    /* softmax scale, usually 1/sqrt(head_dim) */
  const int32_t *row_seq;         /* [num_tokens] sequence of each query row */
  const int32_t *query_start_loc; /* [num_seqs + 1] */
  const int32_t *seq_lens;        /* [num_seqs] */
  const int32_t *block_tables;    /* [num_seqs, max_blocks_per_seq] */
  int32_t max_blocks_per_seq;
  int32_t max_seq_len;            /* bound on seq_lens (sizes the grid; <= ctx max_context_len) */
};
llb_status cuda_attention(struct cuda_ctx *c, const struct cuda_attn_params *p);

/* SiLU-and-mul: out_f16_d [n_rows, n] = fp16(silu(gate) * up) with gate_d, up_d [n_rows, n]
 * fp32 rows of stride `stride` floats (n <= stride; the fused gate|up matmul output has
 * gate in columns [0, n) and up in [n, 2n) of rows of 2n). */
llb_status cuda_silu_and_mul(struct cuda_ctx *c, const float *gate_d, const float *up_d,
                             int64_t stride, int32_t n_rows, int64_t n, uint16_t *out_f16_d);

/* out_f16_d [n_rows, dim] = fp16(x_d [src_rows[i], dim]) for i < n_rows (row gather and
 * rounding for matmul inputs); rows_d NULL = identity. */
llb_status cuda_gather_f16(struct cuda_ctx *c, const float *x_d, const int32_t *rows_d,
                           int32_t n_rows, int32_t dim, uint16_t *out_f16_d);

/* x_d [n] += y_d [n] (fp32, __fadd_rn: rms_norm's fused add, unfused). */
llb_status cuda_add(struct cuda_ctx *c, float *x_d, const float *y_d, int64_t n);

/* out_d [n] = silu(gate_d) * up_d, fp32 (silu_and_mul's arithmetic without the fp16 rounding);
 * out_d may alias gate_d or up_d. */
llb_status cuda_swiglu(struct cuda_ctx *c, const float *gate_d, const float *up_d, int64_t n, float *out_d);

/* out_d [n, dim] = rows rows_d[i] of x_d [*, dim] (fp32; the caller validates rows). */
llb_status cuda_get_rows(struct cuda_ctx *c, const float *x_d, int32_t dim, const int32_t *rows_d, int32_t n,
                         float *out_d);

/* Fills n_f16 fp16 values at dst_d with uniform values in [-amp, amp] from `seed` (bench and
 * tests: KV caches that are never zero). */
llb_status cuda_fill_random_f16(struct cuda_ctx *c, uint16_t *dst_d, int64_t n_f16, float amp,
                                uint64_t seed);

/* ------------------------------------------------------------------ sampling */

/* Per-row sampling parameters, as model/sampling/sampler.h (penalties are not applied on
 * the device: rows with penalties go through the CPU sampler). */
struct cuda_sample_params {
  float temperature; /* < 1e-5: greedy (argmax, ties to the lowest id) */
  int32_t top_k;     /* <= 0: off */
  float top_p;       /* (0, 1]; 1: off */
  float min_p;       /* [0, 1]; 0: off */
  uint64_t seed;
  uint32_t stream;
  int64_t output_pos;
};

/* tokens_d [n_rows] = one token per row of logits_d [n_rows, vocab] (not modified) with
 * params_d [n_rows] (device). Same steps and the same Philox4x32-10 draw as the CPU sampler
 * (sampler_uniform(seed, stream, output_pos)): greedy is exact; with temperature the kept
 * set (min_p, top_k with ties kept, top_p over the descending order, ties by id) and the draw
 * follow sampler.c; the inverse CDF walks the descending order when top_p < 1 and id order
 * otherwise. Sums are in double in a tree order, so a draw within ~1e-15 of a boundary can
 * differ from the CPU. Rows with a NaN/+inf logit or only -inf give token -1. */
llb_status cuda_sample(struct cuda_ctx *c, const float *logits_d, int32_t n_rows, int32_t vocab,
                       const struct cuda_sample_params *params_d, int32_t *tokens_d);

/* ------------------------------------------------------------------ the op table */

/* The CUDA backend's struct backend_ops (kernels/backend.h) over the ops above, for
 * model/forward/forward.c's llama_forward: device memory (cudaMalloc buffers); weights uploaded and
 * dequantized to fp16 once (weight_upload: F32 F16 BF16 Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K; matmul
 * rounds its fp32 input to fp16 and runs one cublasGemmEx per weight); step metadata staged in
 * pinned memory and copied up once per step (step_begin); decode steps padded to a
 * batch-size bucket (1, 2, 4, ... 256, up to max_num_seqs and max_num_logits) and replayed
 * as CUDA graphs captured on first use; logits copied down in step_end. Not provided:
 * geglu, softcap, the vision ops, pack; rope refuses freq_factors and attn_factor != 1,
 * attention sliding windows and soft-capping (UNSUPPORTED). ctx_create refuses head_dim
 * not a multiple of 8 or over CUDA_ATTN_MAX_HEAD_DIM (UNSUPPORTED) and fails with DEVICE
 * without a usable device. Attention runs only inside a step (it reads the step's row map). */
const struct backend_ops *backend_cuda_ops(void);

/* Decode graphs captured so far by the context (a backend_cuda_ops() context; 0 for NULL). */
int32_t backend_cuda_num_graphs(const struct backend_ctx *c);

/* ------------------------------------------------------------------ ceilings (bench) */

/* Device-to-device copy bandwidth in bytes/s (bytes read + written) over a `bytes` buffer. */
llb_status cuda_measure_copy_bandwidth(struct cuda_ctx *c, size_t bytes, double *bytes_per_s);

/* fp16 GEMM rate (fp32 accumulation) in FLOP/s for an n x n x n product through cuBLAS. */
llb_status cuda_measure_gemm_rate(struct cuda_ctx *c, int32_t n, double *flops_per_s);

#ifdef __cplusplus
}
#endif

#endif
