/* LLaMA-family forward pass over a paged KV cache (vLLM v1 flattened batch, gpu_model_runner).
 *
 * Written once against the op table of kernels/backend.h, which the caller picks
 * (llama_forward_options.ops: the CPU's by default, the CUDA one in the worker's CUDA module).
 * On the CPU, weights are views into the GGUF mapping (or the backend's packed copy): nothing
 * is dequantized as a whole. On a device backend (not host_memory) the context uploads the
 * weights (weight_upload: CUDA's fp16), norms and biases once at creation, each step's batch
 * arrays in one step_begin copy, and downloads the logits in step_end; decode steps may be
 * replayed by the backend (CUDA graphs). The cache and all scratch are allocated up front;
 * llama_forward allocates nothing. Numerics (CPU) follow llama.cpp's
 * CPU path (ggml mul_mat with quantized activations, rms_norm, rope_ext, soft_max); per-row
 * reductions do not depend on the batch, so a token's logits are bit-identical alone or in
 * any batch (docs/design.md §5).
 */
#ifndef LLB_MODEL_FORWARD_H
#define LLB_MODEL_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/backend.h" /* enum backend_kv_dtype */
#include "model/gguf/config.h"
#include "model/gguf/gguf.h"

struct backend_ops;     /* kernels/backend.h */
struct backend_ctx;
struct llama_model;     /* config + tensor views into the gguf mapping (no copy of weights) */
struct llama_kv_cache;  /* per layer K and V [num_blocks, block_size, head_count_kv, head_dim], fp16 (or a
                           quantized dtype: llama_kv_cache_create_dtype_for) */
struct llama_forward_ctx; /* preallocated scratch + thread pool; no allocation per step */
struct llama_lora;        /* model/forward/lora.h: a LoRA adapter of a model */

/* Loads the config and tensor views of a LLaMA-shaped model from f, which must outlive the
 * model. Checks every tensor's presence, shape (llama_config_check_tensors) and type: matmul
 * weights F32/F16/BF16/Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K, norms F32. Caller frees with
 * llama_model_destroy. Errors: NOT_FOUND/MALFORMED/UNSUPPORTED naming the tensor or key,
 * OUT_OF_MEMORY. */
llb_status llama_model_load(const struct gguf_file *f, struct llama_model **out);

/* NULL ok. */
void llama_model_destroy(struct llama_model *m);

/* The model's hyperparameters; valid while m lives. */
const struct llama_config *llama_model_config(const struct llama_model *m);

/* Allocates the paged KV cache of m in one zeroed allocation: per layer K and V
 * [num_blocks, block_size, head_count_kv, head_dim] as fp16 (llama.cpp's default cache type).
 * Slot s = block_id * block_size + offset. Caller frees with llama_kv_cache_destroy.
 * INVALID_ARGUMENT on non-positive sizes, TOO_LARGE if the size overflows, OUT_OF_MEMORY. */
llb_status llama_kv_cache_create(const struct llama_model *m, int32_t num_blocks, int32_t block_size,
                                 struct llama_kv_cache **out);

/* The KV cache of c's model in the memory of c's backend: llama_kv_cache_create on a host
 * backend; on a device backend one zeroed buffer_alloc of the same layout, which the context's
 * forward alone can use (llama_forward refuses another pairing). The cache may outlive c.
 * Errors: those of llama_kv_cache_create, the backend's OUT_OF_MEMORY. */
llb_status llama_kv_cache_create_for(const struct llama_forward_ctx *c, int32_t num_blocks, int32_t block_size,
                                     struct llama_kv_cache **out);

/* llama_kv_cache_create_for with the cache's element type (kernels/backend.h enum
 * backend_kv_dtype: fp16, q8_0, fp8 e4m3). UNSUPPORTED when c's backend does not hold that dtype
 * (backend_ops.kv_dtype_ok; CUDA: fp16 only) or the model's head_dim does not fit it (q8_0: a
 * multiple of 32). */
llb_status llama_kv_cache_create_dtype_for(const struct llama_forward_ctx *c, int32_t num_blocks,
                                           int32_t block_size, enum backend_kv_dtype dtype,
                                           struct llama_kv_cache **out);

/* Bytes of one KV block (every layer's K and V) of m in dtype t: what a block of the cache costs,
 * for sizing the cache from a memory budget. 0 if t cannot hold m's rows. */
size_t llama_kv_cache_block_bytes(const struct llama_model *m, int32_t block_size, enum backend_kv_dtype t);

/* vLLM's --kv-cache-dtype names: auto and fp16 (f16) -> F16, fp8 and fp8_e4m3 -> FP8_E4M3, q8_0
 * (llama.cpp's cache type) -> Q8_0. INVALID_ARGUMENT naming the choices otherwise. */
llb_status llama_kv_dtype_parse(const char *name, enum backend_kv_dtype *out);

/* "fp16", "q8_0", "fp8". */
const char *llama_kv_dtype_name(enum backend_kv_dtype t);

/* Copies block `block_id` of a host cache into dst[len], len = llama_kv_cache_block_bytes: for each
 * layer in order, its K rows then its V rows of the block ([block_size, head_count_kv] rows of the
 * dtype's row bytes): the wire layout of a KV transfer (schemas/kv_transfer.h). INVALID_ARGUMENT
 * for a block id outside the cache or another len; UNSUPPORTED for a device cache. */
llb_status llama_kv_cache_block_read(const struct llama_kv_cache *kv, int32_t block_id, void *dst, size_t len);

/* Writes src[len] (the layout above) into block `block_id` of a host cache; errors as the read. */
llb_status llama_kv_cache_block_write(struct llama_kv_cache *kv, int32_t block_id, const void *src, size_t len);

/* NULL ok. */
void llama_kv_cache_destroy(struct llama_kv_cache *kv);

struct llama_batch {                     /* vLLM-style flattened batch (gpu_model_runner) */
  int32_t num_tokens;
  const int32_t *token_ids;              /* [num_tokens] */
  const int32_t *positions;              /* [num_tokens] */
  const int64_t *slot_mapping;           /* [num_tokens] block_id * block_size + offset; -1 = skip write */
  int32_t num_seqs;
  const int32_t *query_start_loc;        /* [num_seqs + 1] token rows of each seq, cumulative */
  const int32_t *seq_lens;               /* [num_seqs] context length after this step's tokens */
  const int32_t *block_tables;           /* [num_seqs, max_blocks_per_seq] */
  int32_t max_blocks_per_seq;
  const float *input_embeds;             /* optional [num_tokens, embedding_length]; NULL = none */
  const uint8_t *embeds_mask;            /* optional [num_tokens]: 1 = take the row from input_embeds */
  int32_t num_logits;
  const int32_t *logits_indices;         /* [num_logits] token rows that produce logits */
  /* Pooling (vLLM's embed task): the final-norm hidden states of these rows are copied out
   * before the logits (optional; 0 = none). */
  int32_t num_hidden;
  const int32_t *hidden_indices;         /* [num_hidden] token rows, in [0, num_tokens) */
  float *hidden_states;                  /* out: [num_hidden, embedding_length], fp32 */
  /* LoRA (model/forward/lora.h): every row of sequence s runs with adapter seq_loras[s] added to
   * its projections; pooled rows and speculative rows follow their sequence. */
  const struct llama_lora *const *seq_loras; /* optional [num_seqs]: each sequence's adapter, NULL = the base model; NULL array = no adapters */
};

/* Attention's float order; see enum backend_attention_order in kernels/backend.h. The engine
 * uses BATCH_INVARIANT; LLAMACPP reproduces llama.cpp's CPU backend bit for bit on prefill and
 * decode (tests/e2e/test_golden_llamacpp.c) at the cost of decode == recompute. */
enum llama_attention_order {
  LLAMA_ATTENTION_ORDER_BATCH_INVARIANT = 0,
  LLAMA_ATTENTION_ORDER_LLAMACPP = 1,
};

/* How matmuls run; both keep a row's result independent of the batch (docs/design.md §5).
 * PACKED: the backend's own weight layout where it has one (CPU: Q4_1, Q8_0, Q5_0, Q5_1,
 * IQ4_NL, Q4_K, Q5_K and IQ4_XS repacked into 16-column panels at context creation, int8 dot
 * products, one float order per output: kernels/cpu/packed.h), the GGML mode's dots for other
 * types (Q2_K, Q3_K, Q6_K, F16, BF16, F32, Q4_0). The engine's default: several times
 * faster. The packed copy is private memory of the context (about the size of those weights),
 * or, with packed_cache_dir, a file mapping shared by every process of the host; the file
 * pages it replaces are released from the process (gguf_release_pages).
 * GGML: ggml's vec_dot order on the GGUF layout, bit-exact with llama.cpp's CPU backend
 * (tests/e2e/test_golden_llamacpp.c) for Q4_0/Q4_1/Q8_0/F16/BF16/F32; Q5_0, Q5_1, IQ4_NL,
 * Q2_K, Q3_K, IQ4_XS (and Q4_K..Q6_K) take ggml's activation types and exact integer block
 * sums in one order of their own (kernels/cpu/vec_dot_lowbit.h). */
enum llama_matmul_mode {
  LLAMA_MATMUL_PACKED = 0,
  LLAMA_MATMUL_GGML = 1,
};

/* Rows up to which a step counts as a decode step for n_threads_decode, by default: below it
 * a step's time on the CPU is reading the weights (measured on SmolLM2-135M, 2 AVX-512 cores:
 * 1 thread as fast as 2 up to 8 rows, 2 faster from 16 on; ops/bench/README.md). */
#define LLAMA_DECODE_MAX_TOKENS 8

struct llama_forward_options {
  int32_t max_num_tokens; /* rows per step, >= 1 */
  int32_t n_threads;      /* >= 1; the caller of llama_forward counts as one */
  /* Threads for a step of at most decode_max_tokens rows (0 = n_threads; at most n_threads):
   * such a step reads every weight for a few rows, so the memory bandwidth bounds it, not the
   * cores, and more threads only contend for it (llama.cpp's n_threads vs n_threads_batch).
   * The threads left out sleep, leaving their cores to the processes around the forward. A
   * backend without threads (set_num_threads NULL) ignores it. Results do not depend on it. */
  int32_t n_threads_decode;
  int32_t decode_max_tokens; /* 0 = LLAMA_DECODE_MAX_TOKENS */
  enum llama_attention_order attention_order;
  enum llama_matmul_mode matmul;
  /* PACKED on the CPU: a directory for the host's shared packed-weight cache
   * (model/forward/packed_cache.h: "<dir>/packed-<key>.llbpack", key = the model file's identity and
   * the matmul mode). The first process packs and writes it; the others, and a restarted
   * worker, map it read-only and shared instead of packing a private copy. NULL or "" = off. */
  const char *packed_cache_dir;
  /* The longest context the engine runs this model with (vLLM's max_model_len); 0 = the
   * model's context_length. Picks phi3 LongRoPE's factors as llama.cpp's n_ctx does: the long
   * set when it exceeds rope.scaling.original_context_length, else the short one. Nothing else
   * depends on it. */
  int32_t max_model_len;
  /* The backend's op table (kernels/backend.h); NULL = backend_cpu_ops(). A device backend
   * (host_memory false) gets the weights, norms, biases and RoPE factors uploaded at creation
   * (nothing of the GGUF mapping is read after it) and refuses, UNSUPPORTED naming the
   * backend, what the forward computes on the host: gemma's embedding scale and the q scale
   * of phi3/gemma (attention_scale), pooling (num_hidden). matmul is then the backend's own
   * (PACKED / GGML do not apply). */
  const struct backend_ops *ops;
  /* Device backends only, 0 = max_num_tokens / max_num_tokens / context_length: sequences and
   * logits rows of one step (the device logits are [max_num_logits, vocab_size]) and the
   * widest block table a step carries. */
  int32_t max_num_seqs, max_num_logits, max_blocks_per_seq;
  /* Optional, host backends: called with each op's output as the step computes it, named as
   * llama.cpp's graph names that tensor (llm_graph cb names: "inp_scaled", "attn_norm", "Qcur",
   * "kqv_out", "ffn_out", "l_out", "result_norm", "result_output", ...; il the layer, -1
   * outside one). data [n] floats in ggml's memory order ([rows][ne0]), valid during the call.
   * For op-by-op numerics checks against llama-eval-callback (tests/tools/eval_dump.c); NULL in
   * the engine. */
  void (*eval_cb)(void *user, const char *name, int32_t il, const float *data, int64_t n);
  void *eval_user;
  /* LoRA adapters (model/forward/lora.h), host backends: the context allocates scratch for
   * adapters up to this rank at creation (at most the model's widest row: max(E, H*D, F)).
   * A device backend ignores it and refuses, UNSUPPORTED, a batch naming an adapter. */
  int32_t max_lora_rank; /* scratch for adapters up to this rank (0 = none: a batch naming an adapter is INVALID_ARGUMENT); a larger adapter is INVALID_ARGUMENT */
};

/* llama_forward_ctx_create with every option explicit. */
llb_status llama_forward_ctx_create_opts(const struct llama_model *m, const struct llama_forward_options *o,
                                         struct llama_forward_ctx **out);

/* Creates the execution context of m: scratch for up to max_num_tokens rows per step and a
 * persistent pool of n_threads threads (the caller of llama_forward counts as one). m must
 * outlive it. Caller frees with llama_forward_ctx_destroy. INVALID_ARGUMENT, OUT_OF_MEMORY,
 * INTERNAL (thread start). */
llb_status llama_forward_ctx_create(const struct llama_model *m, int32_t max_num_tokens, int32_t n_threads,
                                    struct llama_forward_ctx **out);

/* NULL ok. */
void llama_forward_ctx_destroy(struct llama_forward_ctx *c);

/* No step follows soon (the caller waits for the next one): the backend releases what it
 * holds between steps (backend_ops.idle; CPU: the pool's threads stop spinning). NULL ok. */
void llama_forward_ctx_idle(struct llama_forward_ctx *c);

/* Whether c's packed weights are the host's shared cache file (mapped), not a private copy. */
bool llama_forward_ctx_packed_shared(const struct llama_forward_ctx *c);

/* c's backend table and execution context (backend-specific queries: CUDA's graph count). */
const struct backend_ops *llama_forward_ctx_ops(const struct llama_forward_ctx *c);
struct backend_ctx *llama_forward_ctx_backend(const struct llama_forward_ctx *c);

/* Bytes of the model's weights in c's backend memory (device backends; 0 on a host one). */
size_t llama_forward_ctx_weight_bytes(const struct llama_forward_ctx *c);

/* Runs one step: embeds the batch's tokens (rows with embeds_mask[i] = 1 come from
 * input_embeds instead; input_embeds without a mask replaces every row, and then token_ids
 * are not read), writes their K/V at slot_mapping, attends each query row causally over its
 * sequence's cache through block_tables (the row at index i of a sequence with q_len rows
 * sits at context index seq_lens - q_len + i), and writes logits [num_logits, vocab_size]
 * for the rows logits_indices; with num_hidden > 0 also the final-norm hidden states of the
 * rows hidden_indices into hidden_states (rms_norm with output_norm.weight, the input of the
 * logits matmul; llama.cpp's LLAMA_POOLING_TYPE_* embeddings). Query rows of a sequence must have their K/V written by this
 * step or earlier ones. INVALID_ARGUMENT naming the field (sizes, ids, slots, block ids out of
 * range; on a device backend every index is checked on the host before anything is queued, and
 * sizes beyond the context's max_num_seqs / max_num_logits / max_blocks_per_seq are refused);
 * kv must belong to c's model and c's backend (llama_kv_cache_create_for); on a device backend
 * every step of c must use the same kv (recorded steps hold its addresses). A device backend's
 * failures: DEVICE, OUT_OF_MEMORY. Not thread-safe per ctx. */
llb_status llama_forward(struct llama_forward_ctx *c, struct llama_kv_cache *kv, const struct llama_batch *b,
                         float *logits /* [num_logits, vocab_size] */);

#endif
