/* Random-weight LLaMA models of real shapes as in-memory GGUF files, for the CPU-vs-CUDA
 * comparison test and the benchmark (tests/unit/gguf_writer.h writes them). */
#ifndef LLB_TESTS_UNIT_RANDOM_LLAMA_H
#define LLB_TESTS_UNIT_RANDOM_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct gguf_file;

struct random_llama_shape {
  const char *name;
  int32_t n_layers, embd, n_heads, n_kv_heads, head_dim, ffn, vocab, context;
  float rope_base;
};

/* SmolLM2-135M (30 x 576, 9/3 heads of 64, FFN 1536, vocab 49152, tied) and a 1B-class
 * LLaMA (Llama-3.2-1B: 16 x 2048, 32/8 heads of 64, FFN 8192, vocab 128256, tied). */
extern const struct random_llama_shape random_llama_smollm2_135m;
extern const struct random_llama_shape random_llama_1b;

/* Serializes a model of shape s with random weights from seed into a malloc'd GGUF (*buf,
 * *size; caller frees). Weights mix Q8_0, Q4_1, Q4_K and Q6_K (K-quants where the row length
 * is a multiple of 256), scaled by 1/sqrt(row length); norms 1 + U(-0.1, 0.1). */
llb_status random_llama_gguf(const struct random_llama_shape *s, uint64_t seed, void **buf, size_t *size);

/* Which weights random_llama_gguf_weights writes: the quantized mix above, or the same
 * model (same seed, same blocks) with every quantized weight dequantized and stored as F16,
 * the exact fp16 weights a backend that dequantizes to fp16 at load computes with. */
enum random_llama_weights { RANDOM_LLAMA_QUANT_MIX = 0, RANDOM_LLAMA_MIX_AS_F16 = 1 };
llb_status random_llama_gguf_weights(const struct random_llama_shape *s, uint64_t seed, enum random_llama_weights w,
                                     void **buf, size_t *size);

/* Rewrites an opened LLaMA GGUF as a malloc'd GGUF (*buf, *size; caller frees) that keeps its
 * `general.*` and `<arch>.*` scalar metadata and its tensors, every tensor of 2 or more
 * dimensions dequantized (kernels/quant.h) and stored as F16, 1-D tensors as F32. The
 * tokenizer is not copied. `<arch>.vocab_size` is added from token_embd when absent.
 * Errors: UNSUPPORTED for a tensor type ggml_dequantize_row does not handle. */
llb_status llama_gguf_dequantized_f16(const struct gguf_file *f, void **buf, size_t *size);

#endif
