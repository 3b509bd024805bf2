/* Random LoRA adapters in llama.cpp's GGUF format (model/forward/lora.h) for the tiny models of
 * tests/unit/arch_models.h, the same bytes every time: what tests/unit/test_lora.c runs and
 * tests/tools/gen_lora_golden.c runs through llama.cpp for its reference logits. A's entries are
 * uniform in [-0.25, 0.25) (the base weights' spread), B's in [-b_amp, b_amp). */
#ifndef LLB_TESTS_UNIT_LORA_MODELS_H
#define LLB_TESTS_UNIT_LORA_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct gguf_writer;

/* Targets (bits of lora_model_spec.targets). On phi3 (fused projections) any of q, k, v adapts
 * attn_qkv and gate or up the fused ffn_up, as one pair each. */
enum {
  LORA_MODEL_Q = 1 << 0, LORA_MODEL_K = 1 << 1, LORA_MODEL_V = 1 << 2, LORA_MODEL_O = 1 << 3,
  LORA_MODEL_GATE = 1 << 4, LORA_MODEL_UP = 1 << 5, LORA_MODEL_DOWN = 1 << 6, LORA_MODEL_ALL = 0x7f
};

struct lora_model_spec {
  const char *name;    /* for the golden table */
  uint64_t seed;
  int32_t rank;        /* Q8_0 needs a multiple of 32 (B's rows are rank long) */
  float alpha;         /* 0 = no adapter.lora.alpha key */
  int32_t type;        /* enum ggml_type (kernels/quant.h; an int so that llama.cpp's ggml.h can be
                          included too): F32, F16 or Q8_0, both A and B */
  uint32_t targets;    /* LORA_MODEL_* bits, every layer */
  float b_amp;         /* 0: B all zero (the adapter changes nothing) */
};

/* The adapters the golden covers, in its order. */
enum { LORA_MODEL_GOLDEN = 3 };
extern const struct lora_model_spec LORA_MODEL_SPECS[LORA_MODEL_GOLDEN];

/* Writes adapter s for arch_models' model `base` ("llama", "qwen2", "gemma", "phi3", ...) into
 * *buf [*size] (malloc'd; the caller frees). INVALID_ARGUMENT for an unknown base or type; the
 * writer's errors. */
llb_status lora_model_write(const char *base, const struct lora_model_spec *s, void **buf, size_t *size);

/* The keys of an adapter of architecture arch (general.type "adapter", adapter.type "lora",
 * adapter.lora.alpha when alpha > 0). */
llb_status lora_model_add_keys(struct gguf_writer *w, const char *arch, float alpha);

/* The pair "<weight>.lora_a" [cols, rank] and "<weight>.lora_b" [rank, rows] of type t, seeded
 * by *state (advanced). */
llb_status lora_model_add_pair(struct gguf_writer *w, uint64_t *state, const char *weight, int64_t cols, int64_t rank,
                               int64_t rows, int32_t t, float b_amp);

#endif
