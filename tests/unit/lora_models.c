/* Random LoRA adapters for the tiny models of arch_models.h; see lora_models.h. */
#include "tests/unit/lora_models.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "tests/unit/gguf_writer.h"

/* arch_models.c's shape */
enum { E = 64, H = 4, HKV = 2, D = 16, F = 128 };

const struct lora_model_spec LORA_MODEL_SPECS[LORA_MODEL_GOLDEN] = {
    {.name = "r4_all_f32", .seed = 11, .rank = 4, .alpha = 8.0f, .type = GGML_TYPE_F32, .targets = LORA_MODEL_ALL,
     .b_amp = 0.1f},
    {.name = "r8_qv_f16", .seed = 12, .rank = 8, .alpha = 0.0f, .type = GGML_TYPE_F16,
     .targets = LORA_MODEL_Q | LORA_MODEL_V, .b_amp = 0.1f},
    {.name = "r32_ffn_q8_0", .seed = 13, .rank = 32, .alpha = 32.0f, .type = GGML_TYPE_Q8_0,
     .targets = LORA_MODEL_GATE | LORA_MODEL_UP | LORA_MODEL_DOWN, .b_amp = 0.1f},
};

static float uniform(uint64_t *state) { /* [-1, 1) */
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(*state >> 40) / 8388608.0f - 1.0f;
}

/* ggml's quantize_row_q8_0_ref: d = amax / 127, q = round(x / d). */
static void quantize_q8_0(const float *x, block_q8_0 *out, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; b++) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[b * QK8_0 + j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = llb_fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; j++) out[b].qs[j] = (int8_t)roundf(x[b * QK8_0 + j] * id);
  }
}

/* A [cols, rows] tensor of values amp * uniform in type t. */
static llb_status add_tensor(struct gguf_writer *w, uint64_t *state, const char *name, int64_t cols, int64_t rows,
                             enum ggml_type t, float amp) { /* t: F32, F16 or Q8_0 */
  const size_t n = (size_t)(cols * rows);
  size_t row_bytes;
  llb_status st = ggml_row_bytes(t, cols, &row_bytes);
  if (st != LLB_STATUS_OK) return st;
  float *v = malloc(n * sizeof(float));
  void *data = malloc(row_bytes * (size_t)rows);
  if (!v || !data) {
    free(v);
    free(data);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tensor %s", name);
  }
  for (size_t i = 0; i < n; i++) v[i] = amp * uniform(state);
  if (t == GGML_TYPE_F32) {
    memcpy(data, v, n * sizeof(float));
  } else if (t == GGML_TYPE_F16) {
    for (size_t i = 0; i < n; i++) ((uint16_t *)data)[i] = llb_fp32_to_fp16(v[i]);
  } else if (t == GGML_TYPE_Q8_0) {
    for (int64_t r = 0; r < rows; r++)
      quantize_q8_0(v + r * cols, (block_q8_0 *)((uint8_t *)data + (size_t)r * row_bytes), cols);
  } else {
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA test tensors of type %s", ggml_type_name(t));
  }
  if (st == LLB_STATUS_OK)
    st = gguf_writer_add_tensor(w, name, t, 2, (int64_t[]){cols, rows}, data, row_bytes * (size_t)rows);
  free(v);
  free(data);
  return st;
}

llb_status lora_model_add_keys(struct gguf_writer *w, const char *arch, float alpha) {
  llb_status st = gguf_writer_add_str(w, "general.type", "adapter");
  if (!st) st = gguf_writer_add_str(w, "general.architecture", arch);
  if (!st) st = gguf_writer_add_str(w, "adapter.type", "lora");
  if (!st && alpha > 0.0f) st = gguf_writer_add_f32(w, "adapter.lora.alpha", alpha);
  return st;
}

llb_status lora_model_add_pair(struct gguf_writer *w, uint64_t *state, const char *weight, int64_t cols, int64_t rank,
                               int64_t rows, int32_t t, float b_amp) {
  char n[128];
  snprintf(n, sizeof n, "%s.lora_a", weight);
  llb_status st = add_tensor(w, state, n, cols, rank, (enum ggml_type)t, 0.25f);
  snprintf(n, sizeof n, "%s.lora_b", weight);
  if (!st) st = add_tensor(w, state, n, rank, rows, (enum ggml_type)t, b_amp);
  return st;
}

/* The base models lora_model_write knows: name, architecture, fused projections. */
static bool base_arch(const char *base, const char **arch, bool *fused) {
  static const struct { const char *name, *arch; bool fused; } known[] = {
      {"llama", "llama", false}, {"llama3", "llama", false}, {"mistral", "llama", false},
      {"qwen2", "qwen2", false}, {"qwen3", "qwen3", false},  {"gemma", "gemma", false},
      {"gemma2", "gemma2", false}, {"phi3", "phi3", true}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(base, known[i].name) == 0) {
      *arch = known[i].arch;
      *fused = known[i].fused;
      return true;
    }
  return false;
}

llb_status lora_model_write(const char *base, const struct lora_model_spec *s, void **buf, size_t *size) {
  const char *arch;
  bool fused;
  if (!base || !s || !base_arch(base, &arch, &fused))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no LoRA test adapter for base model %s", base ? base : "(null)");
  struct gguf_writer *w;
  llb_status st = gguf_writer_create(3, &w);
  if (st) return st;
  uint64_t state = s->seed;
  st = lora_model_add_keys(w, arch, s->alpha);
  const uint32_t tg = s->targets;
  const int64_t r = s->rank;
  char n[96];
  for (int l = 0; !st && l < 2; l++) {
#define T(x) (snprintf(n, sizeof n, "blk.%d." x, l), n)
    if (fused && (tg & (LORA_MODEL_Q | LORA_MODEL_K | LORA_MODEL_V)))
      st = lora_model_add_pair(w, &state, T("attn_qkv.weight"), E, r, (H + 2 * HKV) * D, s->type, s->b_amp);
    if (!st && !fused && (tg & LORA_MODEL_Q))
      st = lora_model_add_pair(w, &state, T("attn_q.weight"), E, r, H * D, s->type, s->b_amp);
    if (!st && !fused && (tg & LORA_MODEL_K))
      st = lora_model_add_pair(w, &state, T("attn_k.weight"), E, r, HKV * D, s->type, s->b_amp);
    if (!st && !fused && (tg & LORA_MODEL_V))
      st = lora_model_add_pair(w, &state, T("attn_v.weight"), E, r, HKV * D, s->type, s->b_amp);
    if (!st && (tg & LORA_MODEL_O))
      st = lora_model_add_pair(w, &state, T("attn_output.weight"), H * D, r, E, s->type, s->b_amp);
    if (!st && !fused && (tg & LORA_MODEL_GATE))
      st = lora_model_add_pair(w, &state, T("ffn_gate.weight"), E, r, F, s->type, s->b_amp);
    if (!st && (tg & (fused ? LORA_MODEL_GATE | LORA_MODEL_UP : LORA_MODEL_UP)))
      st = lora_model_add_pair(w, &state, T("ffn_up.weight"), E, r, fused ? 2 * F : F, s->type, s->b_amp);
    if (!st && (tg & LORA_MODEL_DOWN))
      st = lora_model_add_pair(w, &state, T("ffn_down.weight"), F, r, E, s->type, s->b_amp);
#undef T
  }
  if (!st) st = gguf_writer_write_memory(w, buf, size);
  gguf_writer_destroy(w);
  return st;
}
