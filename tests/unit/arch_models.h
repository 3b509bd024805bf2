/* Tiny random models of each LLaMA-family architecture the forward runs (llama, qwen2, qwen3),
 * written with the GGUF writer, the same bytes every time: what tests/unit/test_forward_arch.c
 * runs and tests/tools/gen_arch_golden.c runs through llama.cpp to make its reference logits.
 * Shape: 2 layers, E 64, 4 heads, 2 KV heads, head_dim 16, FFN 128, vocab 64 (an SPM vocab
 * "<unk>" "<s>" "</s>" "t3".."t63", so llama.cpp loads it), context 128; F32 weights (exact in
 * both engines), norms near 1, biases and q/k norm weights random. */
#ifndef LLB_TESTS_UNIT_ARCH_MODELS_H
#define LLB_TESTS_UNIT_ARCH_MODELS_H

#include <stddef.h>

#include "base/status.h"

enum { ARCH_MODEL_VOCAB = 64, ARCH_MODEL_PROMPT = 12 };

/* The prompt both engines run: ARCH_MODEL_PROMPT token ids (BOS first). */
extern const int ARCH_MODEL_PROMPT_IDS[ARCH_MODEL_PROMPT];

/* Writes the model of `arch` ("llama", "llama3" = llama with a rope_freqs.weight tensor as
 * Llama 3.1+ files carry, "qwen2", "qwen3", "phi3", "gemma") into *buf [*size] (malloc'd; the
 * caller frees). INVALID_ARGUMENT for another arch; the writer's errors. */
llb_status arch_model_write(const char *arch, void **buf, size_t *size);

#endif
