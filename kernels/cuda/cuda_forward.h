/* The LLaMA forward pass on a CUDA device: the computation of model/forward.c (llama.cpp
 * llm_build_llama over a vLLM v1 flattened batch) with the ops of cuda_backend.h.
 *
 * Weights are copied to the device and dequantized to fp16 once at load (q|k|v and gate|up
 * fused into one matrix each, so a layer runs 4 cuBLAS products); the paged KV cache lives on
 * the device in the CPU layout; batch metadata goes up in one copy per step from pinned
 * memory. Decode steps (every sequence one query row, logits for every row) are replayed as
 * CUDA graphs, one per batch-size bucket (1, 2, 4, 8, 16, 32, 64, 128, 256, up to
 * max_num_seqs), captured on first use; the batch is padded to the bucket with rows that
 * write no KV (slot -1). Other batches (prefill, chunked prefill, mixed) run eagerly.
 * Input: the same struct llama_batch as model/forward.h, in host memory.
 * A context is not thread-safe; one per worker thread.
 */
#ifndef LLB_KERNELS_CUDA_CUDA_FORWARD_H
#define LLB_KERNELS_CUDA_CUDA_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gguf.h"

struct cuda_model;        /* config + dense fp16 device weights */
struct cuda_kv_cache;     /* per layer K and V [num_blocks, block_size, Hkv, D] fp16 on the device */
struct cuda_forward_ctx;  /* stream, cuBLAS, device scratch, graphs; no allocation per step */

/* Reads the config of f (llama_config_from_gguf, llama_config_check_tensors), copies every
 * tensor to the device and dequantizes matmul weights and the embedding table to fp16
 * (Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K F16 BF16 F32); norms stay fp32. f may be closed after.
 * Caller frees with cuda_model_destroy. Errors: those of the config, UNSUPPORTED (a tensor
 * type), MALFORMED (a shape), DEVICE (no device), OUT_OF_MEMORY (device memory, naming the
 * tensor). */
llb_status cuda_model_load(const struct gguf_file *f, struct cuda_model **out);
void cuda_model_destroy(struct cuda_model *m); /* NULL ok */
const struct llama_config *cuda_model_config(const struct cuda_model *m);
/* Device bytes of the model's weights (fp16 matrices + fp32 norms). */
size_t cuda_model_weight_bytes(const struct cuda_model *m);

/* Bytes of one KV block over all layers (K and V, fp16). */
size_t cuda_kv_bytes_per_block(const struct cuda_model *m, int32_t block_size);

/* Number of KV blocks that fit in gpu_memory_utilization (0, 1] of the device's total
 * memory, given what is in use now (weights, contexts, other processes): vLLM's
 * determine_num_available_blocks without the profiling run (the forward context's scratch
 * is preallocated, so create it before calling this). INVALID_ARGUMENT (utilization),
 * OUT_OF_MEMORY when not one block fits (the message gives the numbers). */
llb_status cuda_kv_blocks_for_memory(const struct cuda_model *m, int32_t block_size,
                                     float gpu_memory_utilization, int32_t *num_blocks);

/* Allocates the device KV cache (zeroed) and logs its size ("cuda_kv_cache" event: blocks,
 * GiB, free memory after). Caller frees with cuda_kv_cache_destroy. */
llb_status cuda_kv_cache_create(const struct cuda_model *m, int32_t num_blocks, int32_t block_size,
                                struct cuda_kv_cache **out);
void cuda_kv_cache_destroy(struct cuda_kv_cache *kv); /* NULL ok */

struct cuda_forward_params {
  int32_t max_num_tokens;     /* rows of one step */
  int32_t max_num_seqs;       /* sequences of one step (decode graph buckets go up to it) */
  int32_t max_num_logits;     /* logits rows of one step (usually max_num_seqs) */
  int32_t max_blocks_per_seq; /* block-table width */
  int32_t max_context_len;    /* longest sequence (<= max_blocks_per_seq * block_size) */
  bool use_graphs;            /* replay decode steps as CUDA graphs */
  bool device_sampling;       /* allocate scratch for cuda_forward's sampling */
};

/* Creates the execution state of m (which must outlive it). INVALID_ARGUMENT, DEVICE,
 * OUT_OF_MEMORY. Caller frees with cuda_forward_ctx_destroy. */
llb_status cuda_forward_ctx_create(const struct cuda_model *m, const struct cuda_forward_params *p,
                                   struct cuda_forward_ctx **out);
void cuda_forward_ctx_destroy(struct cuda_forward_ctx *c); /* NULL ok */

/* Fills every K and V of kv with random fp16 in [-1, 1] (benchmarks must not read zeros). */
llb_status cuda_kv_cache_fill_random(struct cuda_forward_ctx *c, struct cuda_kv_cache *kv,
                                     uint64_t seed);

/* Runs one step of b (host arrays, the semantics of llama_forward in model/forward.h) and
 * waits for it. logits (host [num_logits, vocab_size]) may be NULL: then none are copied
 * back. With sample (host [num_logits], needs device_sampling) the rows are sampled on the
 * device and tokens (host [num_logits]) receive the ids. Every index of b is checked on the
 * host first: INVALID_ARGUMENT naming the field (nothing runs then); UNSUPPORTED for sizes
 * beyond the context's; DEVICE / OUT_OF_MEMORY for a CUDA or cuBLAS failure. */
llb_status cuda_forward(struct cuda_forward_ctx *c, struct cuda_kv_cache *kv, const struct llama_batch *b,
                        const struct cuda_sample_params *sample, float *logits, int32_t *tokens);

/* Number of decode graphs captured so far (tests and the startup report). */
int32_t cuda_forward_num_graphs(const struct cuda_forward_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
