/* LLaMA-family hyperparameters read from GGUF metadata (llama.cpp key names).
 *
 * Architectures (general.architecture), their RoPE type as in llama.cpp's llama_rope_type():
 *   llama                         -> LLAMA_ROPE_TYPE_NORM (adjacent pairs rotated), supported
 *            (Llama 3.x rope_freqs.weight factors; Mistral: sliding-window attention on every
 *            layer where the file sets llama.attention.sliding_window, as HF's MistralConfig)
 *   qwen2 -> NEOX, supported: LLaMA's layer with biases on the q, k and v projections
 *            (blk.N.attn_{q,k,v}.bias, f32), as llama.cpp's build_qwen2
 *   qwen3 -> NEOX, supported: LLaMA's layer with an RMS norm over each head of q and of k
 *            before RoPE (blk.N.attn_{q,k}_norm.weight [head_dim]), as llama.cpp's build_qwen3
 *   phi3  -> NEOX, supported: LLaMA's layer with q, k, v in one fused projection and gate, up
 *            in one (llama.cpp's build_phi3: split by rows; swiglu of the halves); LongRoPE
 *            (rope_factors_long/short.weight, rope.scaling.attn_factor) as llama.cpp's: the long
 *            factors when the context the engine runs with exceeds
 *            rope.scaling.original_context_length, else the short ones; its
 *            attention.sliding_window is ignored, as llama.cpp does ("Phi SWA is disabled")
 *   gemma -> NEOX, supported: embeddings times sqrt(E), GeGLU (tanh GELU, as ggml's fp16
 *            table), q scaled before attention, tied output (llama.cpp's build_gemma)
 *   gemma2 -> NEOX, supported: gemma's plus RMS norms after attention and after the FFN
 *            (blk.N.post_attention_norm, blk.N.post_ffw_norm), attention-logit soft-capping
 *            (attn_logit_softcapping, default 50) and final-logit soft-capping
 *            (final_logit_softcapping, default 30), sliding-window attention (window
 *            attention.sliding_window, default 4096) on every other layer starting at layer 0
 *            (attention.sliding_window_pattern: a period n, layer il slides when il % n < n - 1,
 *            or a bool per layer); llama.cpp's build_gemma2
 *   gemma3 -> NEOX, supported: gemma2's without soft-capping (final soft-capping only if the
 *            file sets it), with qwen3's per-head q/k norms, 5 sliding layers to 1 global
 *            (period 6) when attention.sliding_window is set, local layers rotated with
 *            rope.freq_base_swa (default 10000) and no rope scaling, global ones with
 *            rope.freq_base and the file's scaling; token embeddings scaled, input_embeds rows
 *            (images) not; llama.cpp's build_gemma3 (text part)
 *   gemma2/gemma3: q scaled by 1/sqrt(head_dim), or 1/sqrt(E / H) for the 27B models
 *   (46 / 62 layers; their query_pre_attn_scalar), as llama.cpp decides it
 *   (mixture-of-experts files, <arch>.expert_count > 0, are UNSUPPORTED)
 * The forward runs all of them over the CPU table; over the CUDA one only llama without
 * sliding window or RoPE attention factor (runner_backend refuses the others).
 * Recognised but UNSUPPORTED, because their forward differs from LLaMA's (the error says why):
 *   stablelm (LayerNorm) -- NEOX (halves rotated);
 *   mistral3, granite (extra scaling multipliers) -- NORM.
 * Any other architecture is UNSUPPORTED naming it.
 */
#ifndef LLB_MODEL_CONFIG_H
#define LLB_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/gguf/gguf.h"

enum llama_rope_type { LLAMA_ROPE_TYPE_NORM = 0, LLAMA_ROPE_TYPE_NEOX = 2 };

/* Most layers a model with sliding-window layers may have (llama.cpp's LLAMA_MAX_LAYERS). */
#define LLAMA_CONFIG_MAX_LAYERS 512

struct llama_config {
  char architecture[32];            /* general.architecture: "llama" */
  int32_t block_count, embedding_length, feed_forward_length, head_count, head_count_kv;
  int32_t head_dim;                 /* attention.key_length, else embedding_length / head_count */
  int32_t context_length, vocab_size, rope_dimension_count;
  float rope_freq_base, rope_freq_scale, layer_norm_rms_epsilon;
  enum llama_rope_type rope_type;
  bool tied_embeddings;             /* output.weight absent: logits use token_embd.weight */
  bool attn_qkv_bias;               /* qwen2: q, k, v projections add blk.N.attn_{q,k,v}.bias */
  bool attn_qk_norm;                /* qwen3: RMS norm of each q / k head (blk.N.attn_{q,k}_norm) */
  bool fused_qkv;                   /* phi3: one blk.N.attn_qkv.weight [E, H*D + 2*Hkv*D] (q, k, v rows) */
  bool fused_gate_up;               /* phi3: blk.N.ffn_up.weight [E, 2F]: gate rows then up rows */
  bool gemma;                       /* gemma: embeddings scaled by sqrt(E), GeGLU feed-forward,
                                       q scaled by 1/sqrt(head_dim) before attention */
  int32_t sliding_window;           /* <arch>.attention.sliding_window, 0 = none: a sliding layer's
                                       query at position p attends keys p - sliding_window + 1 .. p
                                       (llama.cpp LLAMA_SWA_TYPE_STANDARD); 0 also for phi3 */
  /* Appended for gemma2 / gemma3, sliding windows and LongRoPE (see the head comment). */
  bool post_norms;                  /* gemma2/3: blk.N.post_attention_norm, blk.N.post_ffw_norm [E] */
  float attention_scale;            /* gemma*, phi3: q *= this after RoPE, attention scale 1; 0 = none
                                       (scores scaled by 1/sqrt(head_dim)) */
  float attn_logit_softcapping;     /* > 0: raw q.k scores s -> c * tanh(s / c); 0 = none */
  float final_logit_softcapping;    /* > 0: logits l -> c * tanh(l / c); 0 = none */
  bool scale_token_embeds_only;     /* gemma3: sqrt(E) applies to token rows, not input_embeds rows */
  bool layer_sliding[LLAMA_CONFIG_MAX_LAYERS]; /* [block_count] layer il uses sliding_window */
  float rope_freq_base_swa, rope_freq_scale_swa; /* RoPE of the sliding layers */
  bool rope_longrope;               /* phi3: rope_factors_long/short.weight [rope dims / 2] present */
  int32_t rope_original_context_length; /* rope.scaling.original_context_length (default
                                       context_length): LongRoPE's short/long threshold */
  float rope_attn_factor;           /* rope.scaling.attn_factor, default 1: cos and sin scaled by it */
};

/* Fills *out from `<arch>.*` keys of f (arch = general.architecture):
 *   block_count, embedding_length, feed_forward_length, attention.head_count (required);
 *   attention.head_count_kv (default head_count); attention.key_length (default
 *   embedding_length / head_count; attention.value_length must equal it if present);
 *   context_length (required); rope.freq_base (default 10000); rope.scaling.type
 *   ("none" or "linear", linear: freq_scale = 1 / rope.scaling.factor, default 1);
 *   rope.dimension_count (default head_dim); attention.layer_norm_rms_epsilon (required);
 *   attention.sliding_window, attention.sliding_window_pattern, rope.freq_base_swa,
 *   attn_logit_softcapping, final_logit_softcapping, rope.scaling.attn_factor,
 *   rope.scaling.original_context_length (optional, as the head comment says per arch);
 *   vocab size = length of tokenizer.ggml.tokens, else <arch>.vocab_size;
 *   tied_embeddings = no tensor output.weight.
 * Errors: NOT_FOUND naming the missing key, UNSUPPORTED naming the architecture or key
 * (e.g. rope.scaling.type "yarn"; a model of more than LLAMA_CONFIG_MAX_LAYERS layers with
 * sliding layers), MALFORMED naming a key whose value is out of range or
 * inconsistent (head_count not dividing, head_count_kv not dividing head_count, ...).
 * *out is written only on success. */
llb_status llama_config_from_gguf(const struct gguf_file *f, struct llama_config *out);

/* Checks the shapes (ne, fastest first) of the tensors the LLaMA forward uses against cfg:
 *   token_embd.weight [E, V]; output_norm.weight [E]; output.weight [E, V] (unless tied);
 *   per layer N: blk.N.attn_norm.weight [E], attn_q.weight [E, H*D], attn_k.weight and
 *   attn_v.weight [E, Hkv*D], attn_output.weight [H*D, E], ffn_norm.weight [E],
 *   ffn_gate.weight and ffn_up.weight [E, F], ffn_down.weight [F, E]; the architecture's own
 *   (attn_{q,k,v}.bias, attn_{q,k}_norm.weight [D], attn_qkv.weight, post_attention_norm.weight
 *   and post_ffw_norm.weight [E], rope_factors_long/short.weight [rope dims / 2])
 * (E embedding_length, V vocab_size, H head_count, Hkv head_count_kv, D head_dim, F
 * feed_forward_length). Also checks every such tensor's type is one ggml_dequantize_row
 * supports. NOT_FOUND naming a missing tensor; MALFORMED naming the tensor with expected
 * and found shapes; UNSUPPORTED naming tensor and type. */
llb_status llama_config_check_tensors(const struct gguf_file *f, const struct llama_config *cfg);

#endif
