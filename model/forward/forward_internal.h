/* Private to model/forward/forward*.c: the model, KV cache and forward context of model/forward/forward.h,
 * shared by forward.c (load, context, the step) and forward_pack.c (packed weights). */
#ifndef LLB_MODEL_FORWARD_INTERNAL_H
#define LLB_MODEL_FORWARD_INTERNAL_H

#include <stdint.h>

#include "kernels/backend.h"
#include "model/gguf/config.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/forward/packed_cache.h"

struct llama_layer {
  const float *attn_norm, *ffn_norm; /* [E] */
  struct backend_weight wq;          /* [H*D rows, E cols] */
  struct backend_weight wk, wv;      /* [Hkv*D rows, E cols] */
  struct backend_weight wo;          /* [E rows, H*D cols] */
  struct backend_weight w_gate, w_up; /* [F rows, E cols] */
  struct backend_weight w_down;      /* [E rows, F cols] */
  const float *bq, *bk, *bv;         /* qwen2: [H*D], [Hkv*D], [Hkv*D] projection biases; else NULL */
  const float *q_norm, *k_norm;      /* qwen3: [D] per-head RMS norm weights; else NULL */
  const float *post_attn_norm, *post_ffw_norm; /* gemma2/3: [E] norms of the attention / FFN outputs; else NULL */
};

struct llama_model {
  const struct gguf_file *gguf;   /* the views' file */
  struct llama_config cfg;
  struct backend_weight tok_embd; /* [V rows, E cols] */
  struct backend_weight output;   /* [V rows, E cols]; token_embd when tied */
  const float *output_norm;       /* [E] */
  const float *rope_freqs;        /* [rope dims / 2] Llama 3.x rope_freqs.weight, or NULL */
  const float *rope_long, *rope_short; /* [rope dims / 2] phi3 LongRoPE factors, or NULL */
  struct llama_layer *layers;     /* [block_count] */
};

/* The projections an adapter may target, in a layer's order (lora.c). */
enum llama_lora_target {
  LLAMA_LORA_Q, LLAMA_LORA_K, LLAMA_LORA_V, LLAMA_LORA_O, LLAMA_LORA_GATE, LLAMA_LORA_UP, LLAMA_LORA_DOWN,
  LLAMA_LORA_NUM_TARGETS
};

/* One adapted projection: y += scale * B (A x). a [rank rows, in cols], b [out rows, rank cols]
 * (views into the adapter's mapping; phi3's fused qkv / gate-up pairs are split into row slices
 * of b sharing a). a.data NULL = not adapted. */
struct llama_lora_pair {
  struct backend_weight a, b;
  float scale; /* alpha / rank, or 1 when alpha is 0 (llama.cpp get_scale) */
};

struct llama_lora {
  const struct llama_model *base;
  float alpha;
  int32_t max_rank, num_pairs;
  struct llama_lora_pair *pairs; /* [block_count * LLAMA_LORA_NUM_TARGETS] */
  uint8_t *store;                /* every pair's A and B (lora.c copy_to_huge_pages); pairs point here */
};

struct llama_kv_cache {
  const struct llama_model *model;
  const struct backend_ops *ops;    /* the device backend whose buffer data is, or NULL (host) */
  uint8_t *data;                    /* [block_count, 2, num_blocks, block_size, Hkv] rows of dtype */
  enum backend_kv_dtype dtype;
  struct backend_kv_layer *layers;  /* [block_count] views into data */
};

struct llama_forward_ctx {
  const struct llama_model *m;
  int32_t n_threads, n_threads_decode, decode_max_tokens; /* llama_forward_options' */
  int32_t cur_threads;            /* what set_num_threads last set */
  const struct backend_ops *ops;
  struct backend_ctx *bc;
  int32_t max_num_tokens;
  struct llama_layer *layers;     /* [block_count] m's layers, packed weights set (LLAMA_MATMUL_PACKED);
                                     on a device backend every pointer is into its memory */
  struct backend_weight output;   /* m's output weight, likewise */
  struct backend_weight tok_embd; /* m's token_embd (packed only on a device backend) */
  const float *output_norm;       /* [E] m's, or its device copy */
  const float *rope_factors;      /* [rope dims / 2] m's rope_freqs, or the LongRoPE set for max_model_len */
  int32_t max_context_len;        /* longest sequence attention reads (the model's context_length) */
  void *dev_vectors;              /* device backend: norms, biases, RoPE factors (one buffer), or NULL */
  void *dev_weights;              /* device backend: every weight in its layout (one buffer), or NULL */
  size_t dev_weight_bytes;
  float *dev_logits;              /* device backend: [max_num_logits, V], or NULL */
  const struct llama_kv_cache *dev_kv; /* device backend: the one cache its steps (and the backend's
                                          recorded steps, which hold its addresses) run with */
  void *packed;                   /* every packed layout of this context, one allocation, or NULL */
  struct packed_cache_map packed_map; /* ... or the host's shared cache file (packed_cache.h) */
  int32_t *ids;   /* [max_num_tokens] token ids with embedding rows masked to 0 (host memory) */
  /* the backend's memory (buffer_alloc): */
  float *x;       /* [max_num_tokens, E] residual stream */
  float *xn;      /* [max_num_tokens, max(E, H*D)] normed input / op output */
  float *q;       /* [max_num_tokens, H*D] */
  float *k, *v;   /* [max_num_tokens, Hkv*D] */
  float *attn;    /* [max_num_tokens, H*D] */
  float *gate, *up; /* [max_num_tokens, F] */
  /* LoRA (lora.c; host backends): scratch for adapters up to lora_max_rank, 0 = none */
  int32_t lora_max_rank;
  int32_t lora_n;                         /* distinct adapters of this step */
  const struct llama_lora **lora_list;    /* [max_num_tokens] this step's adapters */
  int32_t *lora_row;                      /* [max_num_tokens] each row's index into lora_list, -1 = base */
  int32_t *lora_rows;                     /* [max_num_tokens] the adapted rows grouped by adapter */
  int32_t *lora_first, *lora_count;       /* [max_num_tokens] adapter i's rows: lora_rows + first, count */
  struct backend_lora_seg *lora_segs;     /* [max_num_tokens] one op call's segments */
  float *lora_x;                          /* [max_num_tokens, max(E, H*D, F)] gathered input rows */
  float *lora_t;                          /* [3, max_num_tokens, lora_max_rank] A products */
  float *lora_u;                          /* [max_num_tokens, max(E, H*D, F)] a B product */
  void (*eval_cb)(void *user, const char *name, int32_t il, const float *data, int64_t n); /* options' */
  void *eval_user;
};

/* The matmul weights of c (the layers', then output) into out [7 * block_count + 1]; returns
 * the count (forward_pack.c). */
int32_t llama_forward_matmul_weights(struct llama_forward_ctx *c, struct backend_weight **out);

/* Packs every weight c's backend has a layout for (LLAMA_MATMUL_PACKED): from / into the
 * host's shared cache file under o->packed_cache_dir when set, else into one private
 * allocation; then releases the file pages the layouts replace (forward_pack.c). Errors:
 * OUT_OF_MEMORY, the backend's pack errors. */
llb_status llama_forward_pack_weights(struct llama_forward_ctx *c, const struct llama_forward_options *o);

/* LoRA scratch of c for o->max_lora_rank (lora.c); nothing when 0. INVALID_ARGUMENT when the
 * rank exceeds the model's widest row, OUT_OF_MEMORY. Freed by llama_forward_lora_free. */
llb_status llama_forward_lora_alloc(struct llama_forward_ctx *c, const struct llama_forward_options *o);
void llama_forward_lora_free(struct llama_forward_ctx *c);

/* Maps b's rows to their sequence's adapter (b->seq_loras) for this step. INVALID_ARGUMENT: an
 * adapter of another model, of rank over the context's scratch (or none), query_start_loc out
 * of order; UNSUPPORTED on a device backend. */
llb_status llama_forward_lora_begin(struct llama_forward_ctx *c, const struct llama_batch *b);

/* The rows logits_indices[i] (strictly increasing) moved to rows i (the last layer's selection). */
void llama_forward_lora_select(struct llama_forward_ctx *c, const struct llama_batch *b);

/* For n targets ids[j] of layer il with input x [T rows]: y[j] [T, out_j] += scale * B (A x)
 * over the rows of each adapter of the step that has the target; nothing without adapters. */
llb_status llama_forward_lora(struct llama_forward_ctx *c, int32_t il, const float *x, int32_t T,
                              const enum llama_lora_target *ids, float *const *y, int32_t n);

#endif
