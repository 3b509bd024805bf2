/* Tiny random models per architecture; see arch_models.h. */
#include "tests/unit/arch_models.h"

#include <stdbool.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/gguf_writer.h"

enum { L = 2, L_GEMMA3 = 6, E = 64, H = 4, HKV = 2, D = 16, F = 128, V = ARCH_MODEL_VOCAB, CTX = 128 };

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

static llb_status add_hparams(struct gguf_writer *w, const char *arch, uint32_t layers, uint32_t ctx,
                              float rope_freq_base) {
  char key[96];
  llb_status st = gguf_writer_add_str(w, "general.architecture", arch);
  const struct { const char *k; uint32_t v; } u[] = {
      {"block_count", layers}, {"context_length", ctx}, {"embedding_length", E}, {"feed_forward_length", F},
      {"attention.head_count", H}, {"attention.head_count_kv", HKV}, {"rope.dimension_count", D}};
  for (size_t i = 0; !st && i < sizeof u / sizeof u[0]; i++) {
    snprintf(key, sizeof key, "%s.%s", arch, u[i].k);
    st = gguf_writer_add_u32(w, key, u[i].v);
  }
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  if (!st) st = gguf_writer_add_f32(w, key, rope_freq_base);
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  if (!st) st = gguf_writer_add_f32(w, key, 1e-6f);
  return st;
}

/* What each named model adds to its architecture's layer (see arch_models.h). */
struct arch_spec {
  const char *name, *arch;
  uint64_t seed;
  int layers;
  uint32_t ctx;
  bool bias, qk_norm, fused, gemma, post_norms;
  uint32_t sliding_window;    /* attention.sliding_window, 0 = key absent */
  float attn_softcap, final_softcap; /* their keys, 0 = absent */
  bool rope_linear2;          /* rope.scaling.type linear, factor 2 */
  float rope_freq_base;       /* rope.freq_base */
  uint32_t longrope_orig_ctx; /* LongRoPE factors and rope.scaling.original_context_length; 0 = none */
  bool llama3;                /* rope_freqs.weight */
};

static const struct arch_spec specs[] = {
    {.name = "llama", .arch = "llama", .seed = 1, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f},
    {.name = "llama3", .arch = "llama", .seed = 1, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f, .llama3 = true},
    {.name = "qwen2", .arch = "qwen2", .seed = 2, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f, .bias = true},
    {.name = "qwen3", .arch = "qwen3", .seed = 3, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f, .qk_norm = true},
    {.name = "phi3", .arch = "phi3", .seed = 4, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f, .fused = true},
    {.name = "gemma", .arch = "gemma", .seed = 5, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f, .gemma = true},
    {.name = "mistral", .arch = "llama", .seed = 1, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f,
     .sliding_window = ARCH_MODEL_WINDOW},
    {.name = "gemma2", .arch = "gemma2", .seed = 6, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f, .gemma = true,
     .post_norms = true, .sliding_window = ARCH_MODEL_WINDOW, .attn_softcap = 2.0f, .final_softcap = 3.0f},
    {.name = "gemma3", .arch = "gemma3", .seed = 7, .layers = L_GEMMA3, .ctx = CTX, .rope_freq_base = 1000000.0f,
     .gemma = true, .post_norms = true, .qk_norm = true, .sliding_window = ARCH_MODEL_WINDOW, .rope_linear2 = true},
    {.name = "phi3_longrope", .arch = "phi3", .seed = 4, .layers = L, .ctx = CTX, .rope_freq_base = 10000.0f,
     .fused = true, .longrope_orig_ctx = 32, .sliding_window = ARCH_MODEL_WINDOW},
    {.name = "phi3_longrope_short", .arch = "phi3", .seed = 4, .layers = L, .ctx = 4096, .rope_freq_base = 10000.0f,
     .fused = true, .longrope_orig_ctx = 256},
};

/* The keys of s beyond add_hparams'. */
static llb_status add_arch_keys(struct gguf_writer *w, const struct arch_spec *s) {
  char key[96];
  llb_status st = LLB_STATUS_OK;
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, s->arch), key)
  if (!st && s->sliding_window) st = gguf_writer_add_u32(w, KEY("attention.sliding_window"), s->sliding_window);
  if (!st && s->attn_softcap > 0.0f) st = gguf_writer_add_f32(w, KEY("attn_logit_softcapping"), s->attn_softcap);
  if (!st && s->final_softcap > 0.0f) st = gguf_writer_add_f32(w, KEY("final_logit_softcapping"), s->final_softcap);
  if (!st && s->rope_linear2) st = gguf_writer_add_str(w, KEY("rope.scaling.type"), "linear");
  if (!st && s->rope_linear2) st = gguf_writer_add_f32(w, KEY("rope.scaling.factor"), 2.0f);
  if (!st && s->longrope_orig_ctx) {
    /* llama.cpp's converter: attn_factor = sqrt(1 + ln(scale) / ln(original)), scale = context / original */
    const double scale = (double)s->ctx / s->longrope_orig_ctx;
    st = gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"), s->longrope_orig_ctx);
    if (!st) st = gguf_writer_add_f32(w, KEY("rope.scaling.attn_factor"),
                                      (float)sqrt(1.0 + log(scale) / log((double)s->longrope_orig_ctx)));
  }
#undef KEY
  return st;
}

static const struct arch_spec *find_spec(const char *name) {
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (strcmp(specs[i].name, name) == 0) return &specs[i];
  return NULL;
}

llb_status arch_model_write(const char *name, void **buf, size_t *size) {
  const struct arch_spec *s = find_spec(name);
  if (!s) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "arch_model_write: no tiny model of '%s'", name);
  struct gguf_writer *w = NULL;
  llb_status st = gguf_writer_create(3, &w);
  if (st) return st;
  struct gen g = {s->seed};
  /* what llama.cpp's converter writes for Llama 3.1 (scaling factor 8, low/high frequency
   * factors 1/4): 1 for the fast pairs, 8 for the slow ones, smooth in between */
  static const float rope_freqs[D / 2] = {1.0f, 1.0f, 1.0f, 1.4f, 2.6f, 5.0f, 8.0f, 8.0f};
  /* LongRoPE factors shaped like Phi-3's: near 1 for the fast pairs, growing for the slow ones */
  static const float rope_long[D / 2] = {1.0f, 1.2f, 1.6f, 2.4f, 3.6f, 5.2f, 7.0f, 9.0f};
  static const float rope_short[D / 2] = {1.0f, 1.05f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f};
  const float ws = 0.25f; /* weight spread: ~1/sqrt(E) * 2 */
  st = add_hparams(w, s->arch, (uint32_t)s->layers, s->ctx, s->rope_freq_base);
  if (!st) st = add_arch_keys(w, s);
  if (!st) st = gguf_writer_add_tiny_vocab(w, V);
  if (!st) st = add_f32(w, &g, "token_embd.weight", E, V, 0.0f, s->gemma ? 0.15f : 1.0f); /* gemma scales by 8 */
  if (!st && s->llama3) st = gguf_writer_add_tensor_f32(w, "rope_freqs.weight", 1, (int64_t[]){D / 2}, rope_freqs);
  char n[96];
  for (int l = 0; !st && l < s->layers; l++) {
#define T(x) (snprintf(n, sizeof n, "blk.%d." x, l), n)
    if (!st) st = add_f32(w, &g, T("attn_norm.weight"), E, 1, 1.0f, 0.2f);
    if (!st && s->fused) st = add_f32(w, &g, T("attn_qkv.weight"), E, (H + 2 * HKV) * D, 0.0f, ws);
    if (!st && !s->fused) st = add_f32(w, &g, T("attn_q.weight"), E, H * D, 0.0f, ws);
    if (!st && !s->fused) st = add_f32(w, &g, T("attn_k.weight"), E, HKV * D, 0.0f, ws);
    if (!st && !s->fused) st = add_f32(w, &g, T("attn_v.weight"), E, HKV * D, 0.0f, ws);
    if (!st && s->bias) st = add_f32(w, &g, T("attn_q.bias"), H * D, 1, 0.0f, 0.5f);
    if (!st && s->bias) st = add_f32(w, &g, T("attn_k.bias"), HKV * D, 1, 0.0f, 0.5f);
    if (!st && s->bias) st = add_f32(w, &g, T("attn_v.bias"), HKV * D, 1, 0.0f, 0.5f);
    if (!st && s->qk_norm) st = add_f32(w, &g, T("attn_q_norm.weight"), D, 1, 1.0f, 0.3f);
    if (!st && s->qk_norm) st = add_f32(w, &g, T("attn_k_norm.weight"), D, 1, 1.0f, 0.3f);
    if (!st) st = add_f32(w, &g, T("attn_output.weight"), H * D, E, 0.0f, ws);
    if (!st && s->post_norms) st = add_f32(w, &g, T("post_attention_norm.weight"), E, 1, 1.0f, 0.2f);
    if (!st) st = add_f32(w, &g, T("ffn_norm.weight"), E, 1, 1.0f, 0.2f);
    if (!st && !s->fused) st = add_f32(w, &g, T("ffn_gate.weight"), E, F, 0.0f, ws);
    if (!st) st = add_f32(w, &g, T("ffn_up.weight"), E, s->fused ? 2 * F : F, 0.0f, ws);
    if (!st) st = add_f32(w, &g, T("ffn_down.weight"), F, E, 0.0f, ws * 0.7f);
    if (!st && s->post_norms) st = add_f32(w, &g, T("post_ffw_norm.weight"), E, 1, 1.0f, 0.2f);
#undef T
  }
  if (!st) st = add_f32(w, &g, "output_norm.weight", E, 1, 1.0f, 0.2f);
  if (!st && !s->gemma) st = add_f32(w, &g, "output.weight", E, V, 0.0f, ws); /* gemma*: tied */
  if (!st && s->longrope_orig_ctx)
    st = gguf_writer_add_tensor_f32(w, "rope_factors_long.weight", 1, (int64_t[]){D / 2}, rope_long);
  if (!st && s->longrope_orig_ctx)
    st = gguf_writer_add_tensor_f32(w, "rope_factors_short.weight", 1, (int64_t[]){D / 2}, rope_short);
  if (!st) st = gguf_writer_write_memory(w, buf, size);
  gguf_writer_destroy(w);
  return st;
}
