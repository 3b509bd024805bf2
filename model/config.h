/* LLaMA-family hyperparameters read from GGUF metadata (llama.cpp key names).
 *
 * Architectures (general.architecture), their RoPE type as in llama.cpp's llama_rope_type():
 *   llama                         -> LLAMA_ROPE_TYPE_NORM (adjacent pairs rotated), supported
 *   qwen2 -> NEOX, supported: LLaMA's layer with biases on the q, k and v projections
 *            (blk.N.attn_{q,k,v}.bias, f32), as llama.cpp's build_qwen2
 *   qwen3 -> NEOX, supported: LLaMA's layer with an RMS norm over each head of q and of k
 *            before RoPE (blk.N.attn_{q,k}_norm.weight [head_dim]), as llama.cpp's build_qwen3
 *   phi3  -> NEOX, supported: LLaMA's layer with q, k, v in one fused projection and gate, up
 *            in one (llama.cpp's build_phi3: split by rows; swiglu of the halves); files with
 *            LongRoPE factors (rope_factors_long/short, the 128k variants) are UNSUPPORTED
 *   gemma -> NEOX, supported: embeddings times sqrt(E), GeGLU (tanh GELU, as ggml's fp16
 *            table), q scaled before attention, tied output (llama.cpp's build_gemma)
 *   (mixture-of-experts files, <arch>.expert_count > 0, are UNSUPPORTED)
 * The CPU forward runs all three; the CUDA forward only llama (runner_backend refuses others).
 * Recognised but UNSUPPORTED, because their forward differs from LLaMA's (the error says why):
 *   gemma2 (scaled
 *   embeddings, GeGLU), stablelm (LayerNorm) -- all NEOX (halves rotated);
 *   mistral3, granite (extra scaling multipliers) -- NORM.
 * Any other architecture is UNSUPPORTED naming it.
 */
#ifndef LLB_MODEL_CONFIG_H
#define LLB_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/gguf.h"

enum llama_rope_type { LLAMA_ROPE_TYPE_NORM = 0, LLAMA_ROPE_TYPE_NEOX = 2 };

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
  int32_t sliding_window;           /* <arch>.attention.sliding_window, 0 = none; context_length is
                                       capped at it, where sliding and full attention agree */
};

/* Fills *out from `<arch>.*` keys of f (arch = general.architecture):
 *   block_count, embedding_length, feed_forward_length, attention.head_count (required);
 *   attention.head_count_kv (default head_count); attention.key_length (default
 *   embedding_length / head_count; attention.value_length must equal it if present);
 *   context_length (required); rope.freq_base (default 10000); rope.scaling.type
 *   ("none" or "linear", linear: freq_scale = 1 / rope.scaling.factor, default 1);
 *   rope.dimension_count (default head_dim); attention.layer_norm_rms_epsilon (required);
 *   vocab size = length of tokenizer.ggml.tokens, else <arch>.vocab_size;
 *   tied_embeddings = no tensor output.weight.
 * Errors: NOT_FOUND naming the missing key, UNSUPPORTED naming the architecture or key
 * (e.g. rope.scaling.type "yarn"), MALFORMED naming a key whose value is out of range or
 * inconsistent (head_count not dividing, head_count_kv not dividing head_count, ...).
 * *out is written only on success. */
llb_status llama_config_from_gguf(const struct gguf_file *f, struct llama_config *out);

/* Checks the shapes (ne, fastest first) of the tensors the LLaMA forward uses against cfg:
 *   token_embd.weight [E, V]; output_norm.weight [E]; output.weight [E, V] (unless tied);
 *   per layer N: blk.N.attn_norm.weight [E], attn_q.weight [E, H*D], attn_k.weight and
 *   attn_v.weight [E, Hkv*D], attn_output.weight [H*D, E], ffn_norm.weight [E],
 *   ffn_gate.weight and ffn_up.weight [E, F], ffn_down.weight [F, E]
 * (E embedding_length, V vocab_size, H head_count, Hkv head_count_kv, D head_dim, F
 * feed_forward_length). Also checks every such tensor's type is one ggml_dequantize_row
 * supports. NOT_FOUND naming a missing tensor; MALFORMED naming the tensor with expected
 * and found shapes; UNSUPPORTED naming tensor and type. */
llb_status llama_config_check_tensors(const struct gguf_file *f, const struct llama_config *cfg);

#endif
