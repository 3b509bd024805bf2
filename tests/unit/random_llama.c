/* Random-weight LLaMA GGUF files (see random_llama.h). */
#include "tests/unit/random_llama.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf/gguf.h"
#include "tests/unit/gguf_writer.h"

const struct random_llama_shape random_llama_smollm2_135m = {"SmolLM2-135M", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f};
const struct random_llama_shape random_llama_1b = {"LLaMA-1B", 16, 2048, 32, 8, 64, 8192, 128256, 8192, 500000.0f};

static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static float uniform01(uint64_t *s) { return (float)(next(s) >> 40) * (1.0f / 16777216.0f); }

/* Adds rows x cols of type t as F16 after dequantizing them (the bytes a fp16 backend uses). */
static llb_status add_as_f16(struct gguf_writer *w, const char *name, enum ggml_type t, int64_t cols, int64_t rows,
                             const uint8_t *p, size_t row_bytes) {
  uint16_t *h = malloc((size_t)cols * (size_t)rows * 2);
  float *row = malloc((size_t)cols * 4);
  llb_status st = h && row ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "f16 copy of %s", name);
  for (int64_t r = 0; r < rows && !st; r++) {
    st = ggml_dequantize_row(t, p + (size_t)r * row_bytes, row, cols);
    for (int64_t c = 0; c < cols && !st; c++) h[(size_t)r * (size_t)cols + (size_t)c] = llb_fp32_to_fp16(row[c]);
  }
  if (!st) st = gguf_writer_add_tensor(w, name, GGML_TYPE_F16, 2, (int64_t[]){cols, rows}, h, (size_t)cols * (size_t)rows * 2);
  free(h), free(row);
  return st;
}

static llb_status add_weight(struct gguf_writer *w, const char *name, enum ggml_type t, int64_t cols, int64_t rows,
                             uint64_t *s, bool as_f16) {
  if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K)
    if (cols % QK_K != 0) t = t == GGML_TYPE_Q4_K ? GGML_TYPE_Q4_1 : GGML_TYPE_Q8_0;
  size_t rb;
  llb_status st = ggml_row_bytes(t, cols, &rb);
  if (st != LLB_STATUS_OK) return st;
  const size_t n = rb * (size_t)rows, bb = ggml_type_block_bytes(t);
  uint8_t *p = malloc(n);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%zu bytes for %s", n, name);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = next(s);
    memcpy(p + i, &r, 8);
  }
  for (size_t i = n - n % 8; i < n; i++) p[i] = (uint8_t)next(s);
  const float scale = 1.0f / sqrtf((float)cols);
  for (size_t b = 0; b < n / bb; b++) {
    uint8_t *blk = p + b * bb;
    const float jit = 0.75f + 0.5f * uniform01(s);
    uint16_t d, m;
    switch (t) {
    case GGML_TYPE_Q8_0: d = llb_fp32_to_fp16(jit * scale / 64.0f); memcpy(blk, &d, 2); break;
    case GGML_TYPE_Q4_1:
      d = llb_fp32_to_fp16(jit * scale / 4.0f), m = llb_fp32_to_fp16(-1.875f * jit * scale);
      memcpy(blk, &d, 2), memcpy(blk + 2, &m, 2);
      break;
    case GGML_TYPE_Q4_K:
      d = llb_fp32_to_fp16(jit * scale / 120.0f), m = llb_fp32_to_fp16(7.5f * jit * scale / 120.0f);
      memcpy(blk, &d, 2), memcpy(blk + 2, &m, 2);
      break;
    case GGML_TYPE_Q6_K: d = llb_fp32_to_fp16(jit * scale / 1024.0f); memcpy(blk + 208, &d, 2); break;
    default: break;
    }
  }
  st = as_f16 ? add_as_f16(w, name, t, cols, rows, p, rb) : gguf_writer_add_tensor(w, name, t, 2, (int64_t[]){cols, rows}, p, n);
  free(p);
  return st;
}

static llb_status add_norm(struct gguf_writer *w, const char *name, int64_t n, uint64_t *s) {
  float *v = malloc((size_t)n * 4);
  if (!v) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "norm");
  for (int64_t i = 0; i < n; i++) v[i] = 1.0f + 0.2f * (uniform01(s) - 0.5f);
  const llb_status st = gguf_writer_add_tensor_f32(w, name, 1, (int64_t[]){n}, v);
  free(v);
  return st;
}

llb_status random_llama_gguf(const struct random_llama_shape *sh, uint64_t seed, void **buf, size_t *size) {
  return random_llama_gguf_weights(sh, seed, RANDOM_LLAMA_QUANT_MIX, buf, size);
}

llb_status random_llama_gguf_weights(const struct random_llama_shape *sh, uint64_t seed, enum random_llama_weights wt,
                                     void **buf, size_t *size) {
  const bool f16 = wt == RANDOM_LLAMA_MIX_AS_F16;
  struct gguf_writer *w;
  llb_status st = gguf_writer_create(3, &w);
  if (st != LLB_STATUS_OK) return st;
  uint64_t s = seed;
  const int64_t E = sh->embd, HD = (int64_t)sh->n_heads * sh->head_dim, KD = (int64_t)sh->n_kv_heads * sh->head_dim;
  const struct gguf_llama_hparams hp = {(uint32_t)sh->n_layers, (uint32_t)sh->context, (uint32_t)E, (uint32_t)sh->ffn,
                                        (uint32_t)sh->n_heads, (uint32_t)sh->n_kv_heads, (uint32_t)sh->head_dim,
                                        (uint32_t)sh->vocab, sh->rope_base};
  if ((st = gguf_writer_add_llama_hparams(w, &hp)) != LLB_STATUS_OK) goto done;
  if ((st = add_weight(w, "token_embd.weight", GGML_TYPE_Q8_0, E, sh->vocab, &s, f16)) != LLB_STATUS_OK) goto done;
  for (int l = 0; l < sh->n_layers; l++) {
    char n[64];
#define NAME(x) (snprintf(n, sizeof(n), "blk.%d." x, l), n)
    if ((st = add_norm(w, NAME("attn_norm.weight"), E, &s)) || (st = add_norm(w, NAME("ffn_norm.weight"), E, &s)) ||
        (st = add_weight(w, NAME("attn_q.weight"), GGML_TYPE_Q4_K, E, HD, &s, f16)) ||
        (st = add_weight(w, NAME("attn_k.weight"), GGML_TYPE_Q6_K, E, KD, &s, f16)) ||
        (st = add_weight(w, NAME("attn_v.weight"), GGML_TYPE_Q8_0, E, KD, &s, f16)) ||
        (st = add_weight(w, NAME("attn_output.weight"), GGML_TYPE_Q4_1, HD, E, &s, f16)) ||
        (st = add_weight(w, NAME("ffn_gate.weight"), GGML_TYPE_Q4_K, E, sh->ffn, &s, f16)) ||
        (st = add_weight(w, NAME("ffn_up.weight"), GGML_TYPE_Q4_1, E, sh->ffn, &s, f16)) ||
        (st = add_weight(w, NAME("ffn_down.weight"), GGML_TYPE_Q6_K, sh->ffn, E, &s, f16)))
      goto done;
#undef NAME
  }
  if ((st = add_norm(w, "output_norm.weight", E, &s)) != LLB_STATUS_OK) goto done;
  st = gguf_writer_write_memory(w, buf, size);
done:
  gguf_writer_destroy(w);
  return st;
}

/* Copies the scalar value of key i (numbers, bools, strings; arrays are skipped). */
static llb_status copy_scalar(struct gguf_writer *w, const struct gguf_file *f, int64_t i, const char *key) {
  int64_t iv;
  double fv;
  bool bv;
  struct gguf_str sv;
  llb_status st;
  switch (gguf_kv_type(f, i)) {
  case GGUF_VALUE_TYPE_FLOAT32:
  case GGUF_VALUE_TYPE_FLOAT64:
    return (st = gguf_get_float(f, key, &fv)) ? st : gguf_writer_add_f32(w, key, (float)fv);
  case GGUF_VALUE_TYPE_BOOL: return (st = gguf_get_bool(f, key, &bv)) ? st : gguf_writer_add_bool(w, key, bv);
  case GGUF_VALUE_TYPE_STRING:
    return (st = gguf_get_str(f, key, &sv)) ? st : gguf_writer_add_str_n(w, key, sv.data, (size_t)sv.len);
  case GGUF_VALUE_TYPE_ARRAY: return LLB_STATUS_OK;
  case GGUF_VALUE_TYPE_UINT32: return (st = gguf_get_int(f, key, &iv)) ? st : gguf_writer_add_u32(w, key, (uint32_t)iv);
  default: return (st = gguf_get_int(f, key, &iv)) ? st : gguf_writer_add_i64(w, key, iv);
  }
}

llb_status llama_gguf_dequantized_f16(const struct gguf_file *f, void **buf, size_t *size) {
  struct gguf_str arch;
  llb_status st = gguf_get_str(f, "general.architecture", &arch);
  if (st != LLB_STATUS_OK) return st;
  char prefix[64], vocab_key[96];
  snprintf(prefix, sizeof prefix, "%.*s.", (int)(arch.len < 48 ? arch.len : 48), arch.data);
  snprintf(vocab_key, sizeof vocab_key, "%svocab_size", prefix);
  struct gguf_writer *w;
  if ((st = gguf_writer_create(3, &w)) != LLB_STATUS_OK) return st;
  for (int64_t i = 0; i < gguf_kv_count(f) && !st; i++) {
    const struct gguf_str k = gguf_kv_key(f, i);
    char key[256];
    if (k.len >= sizeof key) continue;
    snprintf(key, sizeof key, "%.*s", (int)k.len, k.data);
    if (strncmp(key, "general.", 8) == 0 || strncmp(key, prefix, strlen(prefix)) == 0) st = copy_scalar(w, f, i, key);
  }
  const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
  if (!st && gguf_find_key(f, vocab_key) < 0 && emb) st = gguf_writer_add_u32(w, vocab_key, (uint32_t)emb->ne[1]);
  for (int64_t i = 0; i < gguf_tensor_count(f) && !st; i++) {
    const struct gguf_tensor *t = gguf_tensor_at(f, i);
    const int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->n_dims >= 2) {
      size_t rb;
      if ((st = ggml_row_bytes(t->type, cols, &rb)) == LLB_STATUS_OK)
        st = add_as_f16(w, t->name, t->type, cols, rows, t->data, rb);
      continue;
    }
    float *v = malloc((size_t)cols * 4);
    st = v ? ggml_dequantize_row(t->type, t->data, v, cols) : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%s", t->name);
    if (!st) st = gguf_writer_add_tensor_f32(w, t->name, 1, (int64_t[]){cols}, v);
    free(v);
  }
  if (!st) st = gguf_writer_write_memory(w, buf, size);
  gguf_writer_destroy(w);
  return st;
}
