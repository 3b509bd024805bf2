/* Tiny random models of each LLaMA-family architecture the forward runs,
 * written with the GGUF writer, the same bytes every time: what tests/unit/test_forward_arch.c
 * runs and tests/tools/gen_arch_golden.c runs through llama.cpp to make its reference logits.
 * Shape: 2 layers, E 64, 4 heads, 2 KV heads, head_dim 16, FFN 128, vocab 64 (an SPM vocab
 * "<unk>" "<s>" "</s>" "t3".."t63", so llama.cpp loads it), context 128; F32 weights (exact in
 * both engines), norms near 1, biases and q/k norm weights random. gemma3 has 6 layers (its
 * period of 5 sliding layers and 1 global one); the sliding windows are ARCH_MODEL_WINDOW keys,
 * far shorter than the prompt plus ARCH_MODEL_GREEDY generated tokens. */
#ifndef LLB_TESTS_UNIT_ARCH_MODELS_H
#define LLB_TESTS_UNIT_ARCH_MODELS_H

#include <stddef.h>

#include "base/status.h"

enum { ARCH_MODEL_VOCAB = 64, ARCH_MODEL_PROMPT = 12, ARCH_MODEL_GREEDY = 8, ARCH_MODEL_WINDOW = 4 };

/* The prompt both engines run: ARCH_MODEL_PROMPT token ids (BOS first). */
extern const int ARCH_MODEL_PROMPT_IDS[ARCH_MODEL_PROMPT];

/* Writes the model `name` into *buf [*size] (malloc'd; the caller frees):
 *   "llama"; "llama3" = llama with a rope_freqs.weight tensor as Llama 3.1+ files carry;
 *   "qwen2"; "qwen3"; "phi3"; "gemma";
 *   "mistral" = llama's weights with llama.attention.sliding_window ARCH_MODEL_WINDOW;
 *   "gemma2" (window ARCH_MODEL_WINDOW on layer 0, attn / final soft-capping 2 / 3, small
 *   enough to bind);
 *   "gemma3" (6 layers, 0-4 sliding, rope.freq_base 1e6 with linear scaling 2 for the global
 *   layer, the local default base 10000);
 *   "phi3_longrope" = phi3's weights plus LongRoPE factors, original context 32 < 128 (the long
 *   factors) and attention.sliding_window ARCH_MODEL_WINDOW (ignored, as llama.cpp does);
 *   "phi3_longrope_short" = the same with context 4096, original context 256 (the short factors
 *   for an engine context of 256, llama.cpp's n_ctx of 128 padded).
 * INVALID_ARGUMENT for another name; the writer's errors. */
llb_status arch_model_write(const char *name, void **buf, size_t *size);

#endif
