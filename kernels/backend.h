/* The op table of a transformer forward pass (docs/design.md §10).
 *
 * model/forward/forward.c is written once against `struct backend_ops`; kernels/cpu implements it with
 * host memory, kernels/cuda (backend_cuda_ops(), kernels/cuda/cuda_backend.h) with device
 * memory. Activations are row-major float buffers in the backend's memory (buffer_alloc).
 * Weights are views of GGUF tensors; a backend may keep its own layout of them (pack on the
 * host, weight_upload into device memory), made once when a forward context is created.
 * Every op returns a status and allocates nothing; host backends validate what they index
 * (token ids, slots, block ids), device backends trust the forward to have checked the batch
 * on the host before step_begin. Per-row reductions never depend on how many rows are in the
 * call (docs/design.md §5): a row's result is bit-identical alone or in a batch.
 *
 * Memory and steps, as ggml's buffer types and its CUDA backend's graphs: a backend whose
 * buffers are host memory (host_memory) runs every op on the arrays as given; any other gets
 * the model's weights and vectors uploaded at context creation, each step's batch arrays
 * through step_begin (one copy), and gives the logits back through step_end. Between the
 * two, the forward queues the step's ops; step_begin may answer that it replayed a step
 * recorded earlier (CUDA graphs of decode steps), and then no op is queued.
 */
#ifndef LLB_KERNELS_BACKEND_H
#define LLB_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/quant.h"

/* A 2-D weight in GGUF layout: `rows` rows of `cols` weights each (ne[0] = cols). */
struct backend_weight {
  enum ggml_type type;
  int64_t rows;     /* ne[1]: output features */
  int64_t cols;     /* ne[0]: input features, a multiple of the type's block size */
  size_t row_bytes; /* bytes of one row */
  const void *data; /* [rows, row_bytes], e.g. into a GGUF mapping; not owned */
  /* The backend's own matmul layout of data (backend_ops.pack wrote it), or NULL: matmul then
   * reads data. Not owned. */
  const void *packed;
};

/* Sizes an execution context is prepared for; ops reject calls beyond them. */
/* Float order of attention's reductions (docs/design.md §5). BATCH_INVARIANT: one order for every
 * query row, so a decode step equals a recompute of the same token (preemption, prefix cache)
 * and no row depends on the batch. LLAMACPP: llama.cpp's own choice, one order for
 * multi-token steps and another for single-token ones: bit-exact with its CPU backend on
 * prefill and decode, but a decode step no longer equals its recompute (for checking only).
 * LLAMACPP also applies to the ggml-order matmuls of types llama.cpp's x86 build repacks
 * (Q4_K): the rows of a step's full groups of four take its gemm order, the rest its gemv
 * order, as its repacked mul_mat splits them. */
enum backend_attention_order {
  BACKEND_ATTENTION_ORDER_BATCH_INVARIANT = 0,
  BACKEND_ATTENTION_ORDER_LLAMACPP = 1,
};

struct backend_ctx_params {
  int32_t n_threads;       /* CPU threads, >= 1 (the calling thread counts) */
  int32_t max_num_tokens;  /* rows of one call */
  int64_t max_row_elems;   /* largest `cols` of a matmul input row */
  int32_t max_context_len; /* longest sequence attention reads */
  enum backend_attention_order attention_order; /* default BATCH_INVARIANT (0) */
  /* Device backends (host ones ignore these): the step metadata they stage and the attention
   * scratch they size. 0 = the default named. */
  int32_t max_num_seqs;       /* sequences of one step (default max_num_tokens) */
  int32_t max_num_logits;     /* logits rows of one step (default max_num_tokens) */
  int32_t max_blocks_per_seq; /* widest block table of a step (default max_context_len) */
  int32_t n_heads, head_dim;  /* query heads and head size of attention (required there) */
};

/* One step's batch metadata (vLLM v1's flattened batch; model/forward/forward.h struct llama_batch),
 * as the forward hands it to step_begin in host memory and as the step's ops then take it. */
struct backend_step {
  int32_t num_tokens, num_seqs, num_logits;
  int32_t max_blocks_per_seq;     /* row width of block_tables */
  const int32_t *token_ids;       /* [num_tokens]; rows taken from embeddings hold 0 */
  const int32_t *positions;       /* [num_tokens] */
  const int64_t *slot_mapping;    /* [num_tokens]; -1 = no KV write */
  const int32_t *query_start_loc; /* [num_seqs + 1] */
  const int32_t *seq_lens;        /* [num_seqs] */
  const int32_t *block_tables;    /* [num_seqs, max_blocks_per_seq] */
  const int32_t *logits_indices;  /* [num_logits] */
  /* In step_begin's input: the step's ops read only these arrays and the context's buffers
   * (nothing is uploaded during the step), so the backend may record the step and replay the
   * record for later steps of the same shape. */
  bool replayable;
};

enum backend_rope_style {
  BACKEND_ROPE_STYLE_NORM = 0, /* rotate pairs (x[2i], x[2i+1]) (ggml GGML_ROPE_TYPE_NORM) */
  BACKEND_ROPE_STYLE_NEOX = 2  /* rotate pairs (x[i], x[i + n_dims/2]) (GGML_ROPE_TYPE_NEOX) */
};

struct backend_rope_params {
  int32_t n_dims; /* rotated dims per head (<= head_dim, even) */
  float freq_base, freq_scale;
  enum backend_rope_style style;
  /* [n_dims / 2] per-pair divisors of the angle (ggml_rope_ext's freq_factors: Llama 3.x's
   * rope_freqs.weight), or NULL for none. Pair i turns by freq_scale * (theta_i / f[i]). */
  const float *freq_factors;
  /* ggml_rope_ext's attn_factor (phi3 LongRoPE's rope.scaling.attn_factor): cos and sin are
   * multiplied by it, so q.k scales by its square. 0 reads as 1 (zero-initialized params). */
  float attn_factor;
};

/* Element type of the KV cache (vLLM's --kv-cache-dtype; llama.cpp's q8_0 cache type). A row is
 * the head_dim values of one token and KV head. */
enum backend_kv_dtype {
  BACKEND_KV_DTYPE_F16 = 0,      /* IEEE fp16 bit patterns, 2 bytes a value */
  BACKEND_KV_DTYPE_Q8_0 = 1,     /* head_dim / 32 ggml block_q8_0 (fp16 d, 32 int8: x = d * q), 34 bytes
                                    per 32 values; head_dim a multiple of 32 */
  BACKEND_KV_DTYPE_FP8_E4M3 = 2, /* OCP FP8 E4M3 (sign, 4 exponent bits of bias 7, 3 mantissa bits; max
                                    448, no infinities), one byte a value, scale 1 (vLLM's default
                                    k_scale / v_scale) */
};

/* Bytes of one row (head_dim values) of dtype t; 0 if t cannot hold head_dim values (Q8_0 needs a
 * multiple of 32) or t is not a dtype. */
static inline size_t backend_kv_row_bytes(enum backend_kv_dtype t, int32_t head_dim) {
  if (head_dim < 1) return 0;
  switch (t) {
  case BACKEND_KV_DTYPE_F16: return (size_t)head_dim * 2;
  case BACKEND_KV_DTYPE_Q8_0: return head_dim % 32 == 0 ? (size_t)head_dim / 32 * 34 : 0;
  case BACKEND_KV_DTYPE_FP8_E4M3: return (size_t)head_dim;
  default: return 0;
  }
}

/* One layer's paged KV cache. dtype 0 is F16, so zero-initialized layers are fp16 ones. */
struct backend_kv_layer {
  void *k; /* [num_blocks, block_size, n_kv_heads] rows of backend_kv_row_bytes(dtype, head_dim) */
  void *v; /* [num_blocks, block_size, n_kv_heads] rows, as k */
  int32_t num_blocks, block_size, n_kv_heads, head_dim;
  enum backend_kv_dtype dtype;
};

/* Paged causal attention of a flattened batch (vLLM layout). Query row i of sequence s
 * (rows query_start_loc[s] .. query_start_loc[s+1]-1, q_len of them) sits at context
 * index seq_lens[s] - q_len + i and attends keys 0..that index, read through the block
 * table. GQA: query head h reads KV head h / (n_heads / n_kv_heads). */
struct backend_attn_params {
  const float *q;                 /* [num_tokens, n_heads, head_dim] */
  float *out;                     /* [num_tokens, n_heads, head_dim] */
  const struct backend_kv_layer *kv;
  int32_t num_tokens, n_heads;
  float scale;                    /* softmax scale, usually 1/sqrt(head_dim) */
  int32_t num_seqs;
  const int32_t *query_start_loc; /* [num_seqs + 1] */
  const int32_t *seq_lens;        /* [num_seqs] */
  const int32_t *block_tables;    /* [num_seqs, max_blocks_per_seq] */
  int32_t max_blocks_per_seq;
  /* Optional (0 = off, so zero-initialized params attend causally over everything): */
  int32_t sliding_window;         /* > 0: the row at context index i attends keys
                                     max(0, i - sliding_window + 1) .. i only (llama.cpp's
                                     LLAMA_SWA_TYPE_STANDARD mask; vLLM window (W - 1, 0)) */
  float logit_softcap;            /* > 0: each raw q.k score s becomes c * tanh(s * (1/c)) before
                                     the scale (gemma2's attn_logit_softcapping, llama.cpp
                                     build_attn_mha) */
};

/* The GELU of a vision encoder's MLP (clip.use_gelu: TANH; otherwise CLIP's QUICK). */
enum backend_gelu_kind { BACKEND_GELU_TANH = 0, BACKEND_GELU_QUICK = 1 };

/* One sequence of n_tokens rows, all heads: out = softmax(q k^T * scale) v per head, in f32
 * (ggml's mul_mat + soft_max_ext + mul_mat without flash attention: scores in f32, the
 * softmax sum in double). */
struct backend_full_attn_params {
  const float *q; /* [n_tokens, n_heads, head_dim] */
  const float *k; /* [n_tokens, n_heads, head_dim] */
  const float *v; /* [n_tokens, n_heads, head_dim] */
  float *out;     /* [n_tokens, n_heads, head_dim]; must not alias q, k, v */
  int32_t n_tokens, n_heads, head_dim;
  float scale;    /* usually 1/sqrt(head_dim) */
};

struct backend_ctx; /* per-backend execution state: threads, scratch */

/* Most projections one LoRA op call adapts (q, k, v share one input). */
#define BACKEND_LORA_MAX_TARGETS 3

/* One adapter's rows in a LoRA op call (model/forward/lora.h): for each target j with a[j]
 * non-NULL, rows rows[i] of y[j] get scale[j] * b[j] (a[j] x[rows[i]]). a[j]: [rank rows,
 * cols]; b[j]: [out_j rows, rank cols]. Views, not owned. */
struct backend_lora_seg {
  const int32_t *rows; /* [n_rows] rows of x and of every y[j]; distinct across the segments */
  int32_t n_rows;
  const struct backend_weight *a[BACKEND_LORA_MAX_TARGETS], *b[BACKEND_LORA_MAX_TARGETS];
  float scale[BACKEND_LORA_MAX_TARGETS];
};

struct backend_ops {
  const char *name;
  /* Creates an execution context (threads, scratch sized by p). Caller frees with
   * ctx_destroy. INVALID_ARGUMENT on bad sizes, OUT_OF_MEMORY. */
  llb_status (*ctx_create)(const struct backend_ctx_params *p, struct backend_ctx **out);
  void (*ctx_destroy)(struct backend_ctx *c); /* NULL ok */
  /* out [n, table->cols] = rows ids[n] of table, dequantized (bit-exact with ggml). */
  llb_status (*embed)(struct backend_ctx *c, const struct backend_weight *table, const int32_t *ids,
                      int32_t n, float *out);
  /* out [n_rows, dim] = x * 1/sqrt(mean(x^2) + eps) * w (ggml rms_norm then mul; the sum of
   * squares in double as ggml). x [n_rows, dim], w [dim]; out may alias x. */
  llb_status (*rms_norm)(struct backend_ctx *c, const float *x, const float *w, int32_t n_rows,
                         int32_t dim, float eps, float *out);
  /* For each j < n_w: out[j] [n_rows, w[j]->rows] = x [n_rows, cols] times w[j] transposed, all
   * w[j] with the same cols. Numerics of ggml's CPU mul_mat: x is quantized per row to the
   * weight type's vec_dot type and the dot runs on integer blocks. */
  llb_status (*matmul)(struct backend_ctx *c, const float *x, int32_t n_rows,
                       const struct backend_weight *const *w, float *const *out, int32_t n_w);
  /* Optional (NULL: the forward runs LoRA products through matmul). Every segment's LoRA
   * products over x [*, cols] at once (Punica's SGMV: one op for all adapters of a step): for
   * target j < n_targets, y[j] [*, out_j] rows += scale * B (A x_row): x quantized per row to A's
   * vec_dot type and t = A x by matmul's dots, t in fp32 quantized to B's (one float order per
   * row, so a row's result is the same in any batch), then
   * ggml_scale and ggml_add (scale * u rounded, then added); the CPU's sums B's short rows in an
   * order of its own (kernels/cpu/lora.c). INVALID_ARGUMENT on sizes past the context's (a row
   * index or a segment's rows past max_num_tokens, cols or rank over max_row_elems,
   * n_targets), mismatched shapes; UNSUPPORTED for a type without a dot. */
  llb_status (*lora)(struct backend_ctx *c, const float *x, int64_t cols, float *const *y, int32_t n_targets,
                     const struct backend_lora_seg *segs, int32_t n_segs);
  /* Rotates x [n_rows, n_heads, head_dim] in place; positions [n_rows]. ggml_rope_ext with
   * ext_factor 0, attn_factor 1. */
  llb_status (*rope)(struct backend_ctx *c, float *x, const int32_t *positions, int32_t n_rows,
                     int32_t n_heads, int32_t head_dim, const struct backend_rope_params *p);
  /* Stores k, v [n_rows, n_kv_heads, head_dim] in kv->dtype at slot_mapping [n_rows]
   * (block * block_size + offset; -1 skips the row): F16 rounded to nearest even; Q8_0 per 32
   * values as ggml's quantize_row_q8_0 (d = amax / 127 stored as fp16, q = round-half-even(x *
   * 127 / amax)); FP8_E4M3 rounded to nearest even, saturated at +-448. INVALID_ARGUMENT on a slot
   * out of range, UNSUPPORTED for a dtype the backend does not hold (kv layers of that dtype are
   * refused at cache creation by the same test: backend_ops.kv_dtype_ok). */
  llb_status (*kv_write)(struct backend_ctx *c, const struct backend_kv_layer *kv, const float *k,
                         const float *v, const int64_t *slot_mapping, int32_t n_rows);
  /* See struct backend_attn_params. INVALID_ARGUMENT on inconsistent lengths or block ids. */
  llb_status (*attention)(struct backend_ctx *c, const struct backend_attn_params *p);
  /* out [n] = silu(gate) * up, silu(x) = x / (1 + exp(-x)). out may alias gate or up. */
  llb_status (*swiglu)(struct backend_ctx *c, const float *gate, const float *up, int64_t n,
                       float *out);
  /* x [n] += y [n]. */
  llb_status (*add)(struct backend_ctx *c, float *x, const float *y, int64_t n);
  /* Optional (NULL: GeGLU models are refused). out [n] = gelu(gate) * up, gelu the tanh
   * approximation as ggml_geglu_split computes it on the CPU (GGML_GELU_FP16: an fp16 table
   * for |x| < 10, x above, 0 below). out may alias gate or up. */
  llb_status (*geglu)(struct backend_ctx *c, const float *gate, const float *up, int64_t n, float *out);
  /* Optional (NULL: soft-capped models are refused). x [n] = cap * tanh(x * (1/cap)) in place,
   * cap > 0 (gemma2's final_logit_softcapping: ggml_scale, ggml_tanh, ggml_scale). */
  llb_status (*softcap)(struct backend_ctx *c, float *x, int64_t n, float cap);
  /* Optional (NULL: weights are only read as stored). Bytes of w in the backend's own matmul
   * layout, 0 when it has none for w. Such a layout changes the float order of matmul (the
   * CPU backend's: kernels/cpu/packed.h), never its batch invariance. */
  size_t (*pack_bytes)(const struct backend_weight *w);
  /* Writes that layout into dst [pack_bytes(w)]; the caller then sets w->packed = dst and keeps
   * dst alive as long as w is used. INVALID_ARGUMENT if w has no such layout. */
  llb_status (*pack)(const struct backend_weight *w, void *dst);

  /* ---- vision encoder ops (model/vision/vit.c; all optional: NULL refuses image encoders) ---- */
  /* out [n_rows, dim] = (x - mean(x)) / sqrt(var(x) + eps) * w + b, per row (ggml_norm then
   * ggml_mul, ggml_add: mean and variance summed in double, scale 1/sqrtf). x [n_rows, dim],
   * w, b [dim]; b may be NULL. out may alias x. */
  llb_status (*layer_norm)(struct backend_ctx *c, const float *x, const float *w, const float *b,
                           int32_t n_rows, int32_t dim, float eps, float *out);
  /* x [n] = gelu(x) in place, as ggml's CPU computes it with GGML_GELU_FP16: TANH the tanh
   * approximation (ggml_gelu), QUICK x * sigmoid(1.702 x) (ggml_gelu_quick), each through an
   * fp16 table of fp16(x). */
  llb_status (*gelu)(struct backend_ctx *c, float *x, int64_t n, enum backend_gelu_kind kind);
  /* x [n_rows, dim] += b [dim] on every row (ggml_add with a broadcast bias). */
  llb_status (*add_bias)(struct backend_ctx *c, float *x, const float *b, int32_t n_rows, int32_t dim);
  /* Bidirectional (non-causal) attention without a KV cache: every query row attends every
   * key row of the call. See struct backend_full_attn_params. INVALID_ARGUMENT on sizes over
   * the context's max_num_tokens. */
  llb_status (*attention_full)(struct backend_ctx *c, const struct backend_full_attn_params *p);

  /* ---- memory (ggml's buffer types) and steps (CUDA graph capture) ---- */
  /* The backend's buffers are host memory: the forward reads GGUF weights, norms and batch
   * arrays where they lie and writes logits straight into the caller's array (the CPU's). */
  bool host_memory;
  /* *out = bytes of the backend's memory (host: malloc; CUDA: cudaMalloc). OUT_OF_MEMORY
   * naming the size. Caller frees with buffer_free (NULL ok). No context needed: buffers may
   * outlive the context that sized them (a KV cache). */
  llb_status (*buffer_alloc)(size_t bytes, void **out);
  void (*buffer_free)(void *p);
  /* dst [bytes] of backend memory = src [bytes] of host memory, in order with c's queued ops;
   * src may be reused once it returns. */
  llb_status (*buffer_upload)(struct backend_ctx *c, void *dst, const void *src, size_t bytes);
  /* dst [bytes] of host memory = src [bytes] of backend memory once c's queued ops are done;
   * waits. */
  llb_status (*buffer_download)(struct backend_ctx *c, void *dst, const void *src, size_t bytes);
  /* dst [bytes] of backend memory = 0, in order with c's queued ops. */
  llb_status (*buffer_clear)(struct backend_ctx *c, void *dst, size_t bytes);
  /* Optional (NULL: F16 only): whether kv_write and attention take KV layers of dtype t. */
  bool (*kv_dtype_ok)(enum backend_kv_dtype t);
  /* Optional (NULL: host memory, sized by the caller): free and total bytes of the device's
   * memory (cudaMemGetInfo), for sizing the KV cache (vLLM gpu_memory_utilization). */
  llb_status (*memory_info)(size_t *free_bytes, size_t *total_bytes);
  /* Optional (NULL: matmul and embed read w->data, or w->packed from pack): bytes of w in
   * this backend's memory in the layout its matmul and embed read (CUDA: fp16 [rows, cols]),
   * 0 when the backend has none for w's type. */
  size_t (*weight_bytes)(const struct backend_weight *w);
  /* Writes w (GGUF bytes at w->data, host memory) into dst [weight_bytes(w)] of backend memory
   * and waits; the caller then sets w->packed = dst and keeps dst while w is used.
   * UNSUPPORTED for a type without a layout. */
  llb_status (*weight_upload)(struct backend_ctx *c, const struct backend_weight *w, void *dst);
  /* Optional (NULL: the forward copies rows itself, host memory): out [n, dim] = rows rows[i]
   * of x [*, dim], rows [n] in backend memory (a step's logits_indices). */
  llb_status (*get_rows)(struct backend_ctx *c, const float *x, int32_t dim, const int32_t *rows, int32_t n,
                         float *out);
  /* Optional (NULL: the ops take in's host arrays, each op is done when it returns).
   * Begins a step: copies in's arrays into backend memory (CUDA: one copy from pinned staging)
   * and writes into *run what the step's ops must be called with: its arrays, and counts that
   * may be larger than in's when the backend pads a step to a recorded shape (extra rows are
   * one-token sequences that write no KV; extra logits rows are theirs, row i of sequence i).
   * With in->replayable the backend may record the step's ops (CUDA: a graph per decode
   * batch-size bucket) or replay a record: *replayed = true means the whole step is queued
   * already and the caller queues no op. Every OK return is followed by one step_end.
   * INVALID_ARGUMENT for counts beyond the context's (naming them). */
  llb_status (*step_begin)(struct backend_ctx *c, const struct backend_step *in, struct backend_step *run,
                           bool *replayed);
  /* Ends the step step_begin began. st: the status of queuing its ops (a failure discards a
   * record in progress and is returned). Then copies out_bytes (0: none) from backend memory
   * out_src to host memory out_dst (the logits) and waits for the step: DEVICE naming the
   * first asynchronous fault. Optional with step_begin. */
  llb_status (*step_end)(struct backend_ctx *c, llb_status st, void *out_dst, const void *out_src,
                         size_t out_bytes);
  /* Optional (NULL: nothing to release). The caller has no step to run soon (it waits for
   * the next one): the backend stops holding the machine's resources between steps (CPU: the
   * pool's workers sleep at once instead of spinning, leaving the cores to the processes that
   * bring the next step). The next op takes them back. Between steps only. */
  void (*idle)(struct backend_ctx *c);
  /* Optional (NULL: the backend has no host threads). Threads that run the next ops, in
   * [1, backend_ctx_params.n_threads] (clamped); the others sleep. Between steps only. */
  void (*set_num_threads)(struct backend_ctx *c, int32_t n);
};

/* The CPU backend (kernels/cpu): SIMD (AVX2/FMA/F16C, detected at run time) and threads;
 * host memory. (The CUDA backend's table, backend_cuda_ops(), is declared in
 * kernels/cuda/cuda_backend.h: only builds with CUDA have it, and the worker reaches it
 * through its dlopen'd module.) */
const struct backend_ops *backend_cpu_ops(void);

#endif
