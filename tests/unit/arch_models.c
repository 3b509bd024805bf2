/* Tiny random models per architecture; see arch_models.h. */
#include "tests/unit/arch_models.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 64, H = 4, HKV = 2, D = 16, F = 128, V = ARCH_MODEL_VOCAB, CTX = 128 };

const int ARCH_MODEL_PROMPT_IDS[ARCH_MODEL_PROMPT] = {1, 17, 42, 5, 63, 8, 8, 30, 11, 59, 3, 26};

struct gen {
  uint64_t state;
};

static float uniform(struct gen *g) { /* [-1, 1) */
  g->state = g->state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(g->state >> 40) / 8388608.0f - 1.0f;
}

static llb_status add_f32(struct gguf_writer *w, struct gen *g, const char *name, int64_t cols, int64_t rows,
                          float base, float spread) {
  const size_t n = (size_t)(cols * rows);
  float *v = malloc(n * sizeof *v);
  if (!v) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tensor %s", name);
  for (size_t i = 0; i < n; i++) v[i] = base + spread * uniform(g);
  const int64_t ne[2] = {cols, rows};
  llb_status st = gguf_writer_add_tensor_f32(w, name, rows > 1 ? 2 : 1, ne, v);
  free(v);
  return st;
}

static llb_status add_hparams(struct gguf_writer *w, const char *arch) {
  char key[96];
  llb_status st = gguf_writer_add_str(w, "general.architecture", arch);
  const struct { const char *k; uint32_t v; } u[] = {
      {"block_count", L}, {"context_length", CTX}, {"embedding_length", E}, {"feed_forward_length", F},
      {"attention.head_count", H}, {"attention.head_count_kv", HKV}, {"rope.dimension_count", D}};
  for (size_t i = 0; !st && i < sizeof u / sizeof u[0]; i++) {
    snprintf(key, sizeof key, "%s.%s", arch, u[i].k);
    st = gguf_writer_add_u32(w, key, u[i].v);
  }
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  if (!st) st = gguf_writer_add_f32(w, key, 10000.0f);
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  if (!st) st = gguf_writer_add_f32(w, key, 1e-6f);
  return st;
}

static llb_status add_vocab(struct gguf_writer *w) {
  static char storage[V][8];
  const char *tokens[V];
  float scores[V];
  int32_t types[V];
  for (int i = 0; i < V; i++) {
    if (i == 0) snprintf(storage[i], sizeof storage[i], "<unk>");
    else if (i == 1) snprintf(storage[i], sizeof storage[i], "<s>");
    else if (i == 2) snprintf(storage[i], sizeof storage[i], "</s>");
    else snprintf(storage[i], sizeof storage[i], "t%d", i % 100);
    tokens[i] = storage[i];
    scores[i] = -(float)i;
    types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
  }
  llb_status st = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
  if (!st) st = gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, V);
  if (!st) st = gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, scores, V);
  if (!st) st = gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, V);
  if (!st) st = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
  if (!st) st = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
  return st;
}

llb_status arch_model_write(const char *arch, void **buf, size_t *size) {
  const bool qwen2 = strcmp(arch, "qwen2") == 0, qwen3 = strcmp(arch, "qwen3") == 0;
  const bool llama3 = strcmp(arch, "llama3") == 0; /* llama with Llama 3.x RoPE frequency factors */
  const bool phi3 = strcmp(arch, "phi3") == 0;     /* fused qkv and gate/up */
  const bool gemma = strcmp(arch, "gemma") == 0;   /* GeGLU, scaled embeddings, tied output */
  if (!qwen2 && !qwen3 && !llama3 && !phi3 && !gemma && strcmp(arch, "llama") != 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "arch_model_write: no tiny model of '%s'", arch);
  if (llama3) arch = "llama";
  struct gguf_writer *w = NULL;
  llb_status st = gguf_writer_create(3, &w);
  if (st) return st;
  struct gen g = {qwen2 ? 2 : qwen3 ? 3 : phi3 ? 4 : gemma ? 5 : 1};
  /* what llama.cpp's converter writes for Llama 3.1 (scaling factor 8, low/high frequency
   * factors 1/4): 1 for the fast pairs, 8 for the slow ones, smooth in between */
  static const float rope_freqs[D / 2] = {1.0f, 1.0f, 1.0f, 1.4f, 2.6f, 5.0f, 8.0f, 8.0f};
  const float ws = 0.25f; /* weight spread: ~1/sqrt(E) * 2 */
  st = add_hparams(w, arch);
  if (!st) st = add_vocab(w);
  if (!st) st = add_f32(w, &g, "token_embd.weight", E, V, 0.0f, gemma ? 0.15f : 1.0f); /* gemma scales by 8 */
  if (!st && llama3) st = gguf_writer_add_tensor_f32(w, "rope_freqs.weight", 1, (int64_t[]){D / 2}, rope_freqs);
  char n[96];
  for (int l = 0; !st && l < L; l++) {
#define T(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
    if (!st) st = add_f32(w, &g, T("attn_norm.weight"), E, 1, 1.0f, 0.2f);
    if (!st && phi3) st = add_f32(w, &g, T("attn_qkv.weight"), E, (H + 2 * HKV) * D, 0.0f, ws);
    if (!st && !phi3) st = add_f32(w, &g, T("attn_q.weight"), E, H * D, 0.0f, ws);
    if (!st && !phi3) st = add_f32(w, &g, T("attn_k.weight"), E, HKV * D, 0.0f, ws);
    if (!st && !phi3) st = add_f32(w, &g, T("attn_v.weight"), E, HKV * D, 0.0f, ws);
    if (!st && qwen2) st = add_f32(w, &g, T("attn_q.bias"), H * D, 1, 0.0f, 0.5f);
    if (!st && qwen2) st = add_f32(w, &g, T("attn_k.bias"), HKV * D, 1, 0.0f, 0.5f);
    if (!st && qwen2) st = add_f32(w, &g, T("attn_v.bias"), HKV * D, 1, 0.0f, 0.5f);
    if (!st && qwen3) st = add_f32(w, &g, T("attn_q_norm.weight"), D, 1, 1.0f, 0.3f);
    if (!st && qwen3) st = add_f32(w, &g, T("attn_k_norm.weight"), D, 1, 1.0f, 0.3f);
    if (!st) st = add_f32(w, &g, T("attn_output.weight"), H * D, E, 0.0f, ws);
    if (!st) st = add_f32(w, &g, T("ffn_norm.weight"), E, 1, 1.0f, 0.2f);
    if (!st && !phi3) st = add_f32(w, &g, T("ffn_gate.weight"), E, F, 0.0f, ws);
    if (!st) st = add_f32(w, &g, T("ffn_up.weight"), E, phi3 ? 2 * F : F, 0.0f, ws);
    if (!st) st = add_f32(w, &g, T("ffn_down.weight"), F, E, 0.0f, ws * 0.7f);
#undef T
  }
  if (!st) st = add_f32(w, &g, "output_norm.weight", E, 1, 1.0f, 0.2f);
  if (!st && !gemma) st = add_f32(w, &g, "output.weight", E, V, 0.0f, ws); /* gemma: tied */
  if (!st) st = gguf_writer_write_memory(w, buf, size);
  gguf_writer_destroy(w);
  return st;
}
