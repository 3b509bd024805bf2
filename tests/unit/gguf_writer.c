/* Test-side GGUF writer (layout: ggml docs/gguf.md). Each pair is kept serialized (key,
 * type, value bytes) so writing is concatenation. */
#include "tests/unit/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct buf {
  uint8_t *p;
  size_t len, cap;
};

struct wtensor {
  char *name;
  uint32_t type, n_dims;
  int64_t ne[4];
  uint8_t *data;
  size_t size_bytes;
};

struct gguf_writer {
  uint32_t version;
  uint64_t n_kv;
  struct buf kv;          /* serialized pairs */
  uint32_t alignment;     /* from a general.alignment UINT32 pair, else 32 */
  struct wtensor *tensors;
  size_t n_tensors, cap_tensors;
};

static llb_status buf_put(struct buf *b, const void *p, size_t n) {
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
      cap *= 2;
    }
    uint8_t *q = realloc(b->p, cap);
    if (q == NULL) {
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf_writer: %zu bytes", cap);
    }
    b->p = q;
    b->cap = cap;
  }
  if (n) {
    memcpy(b->p + b->len, p, n);
  }
  b->len += n;
  return LLB_STATUS_OK;
}

static llb_status put_u32(struct buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  return buf_put(b, x, 4);
}

static llb_status put_u64(struct buf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++) {
    x[i] = (uint8_t)(v >> (8 * i));
  }
  return buf_put(b, x, 8);
}

static llb_status put_str(struct buf *b, const char *s, uint64_t len) {
  llb_status st = put_u64(b, len);
  return st ? st : buf_put(b, s, (size_t)len);
}

static size_t elem_size(uint32_t t) {
  switch (t) {
    case GGUF_VALUE_TYPE_UINT8: case GGUF_VALUE_TYPE_INT8: case GGUF_VALUE_TYPE_BOOL: return 1;
    case GGUF_VALUE_TYPE_UINT16: case GGUF_VALUE_TYPE_INT16: return 2;
    case GGUF_VALUE_TYPE_UINT32: case GGUF_VALUE_TYPE_INT32: case GGUF_VALUE_TYPE_FLOAT32: return 4;
    case GGUF_VALUE_TYPE_UINT64: case GGUF_VALUE_TYPE_INT64: case GGUF_VALUE_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

llb_status gguf_writer_create(uint32_t version, struct gguf_writer **out) {
  struct gguf_writer *w = calloc(1, sizeof *w);
  if (w == NULL) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf_writer");
  }
  w->version = version;
  w->alignment = 32;
  *out = w;
  return LLB_STATUS_OK;
}

void gguf_writer_destroy(struct gguf_writer *w) {
  if (w == NULL) {
    return;
  }
  for (size_t i = 0; i < w->n_tensors; i++) {
    free(w->tensors[i].name);
    free(w->tensors[i].data);
  }
  free(w->tensors);
  free(w->kv.p);
  free(w);
}

llb_status gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t type,
                               const void *value, size_t value_bytes) {
  llb_status st = put_str(&w->kv, key, strlen(key));
  if (st == LLB_STATUS_OK) {
    st = put_u32(&w->kv, type);
  }
  if (st == LLB_STATUS_OK) {
    st = buf_put(&w->kv, value, value_bytes);
  }
  if (st == LLB_STATUS_OK) {
    w->n_kv++;
  }
  return st;
}

#define SCALAR_ADDER(fn, ctype, vtype)                                              \
  llb_status fn(struct gguf_writer *w, const char *key, ctype v) {                  \
    return gguf_writer_add_raw(w, key, vtype, &v, sizeof v);                        \
  }
SCALAR_ADDER(gguf_writer_add_u8, uint8_t, GGUF_VALUE_TYPE_UINT8)
SCALAR_ADDER(gguf_writer_add_i8, int8_t, GGUF_VALUE_TYPE_INT8)
SCALAR_ADDER(gguf_writer_add_u16, uint16_t, GGUF_VALUE_TYPE_UINT16)
SCALAR_ADDER(gguf_writer_add_i16, int16_t, GGUF_VALUE_TYPE_INT16)
SCALAR_ADDER(gguf_writer_add_i32, int32_t, GGUF_VALUE_TYPE_INT32)
SCALAR_ADDER(gguf_writer_add_f32, float, GGUF_VALUE_TYPE_FLOAT32)
SCALAR_ADDER(gguf_writer_add_u64, uint64_t, GGUF_VALUE_TYPE_UINT64)
SCALAR_ADDER(gguf_writer_add_i64, int64_t, GGUF_VALUE_TYPE_INT64)
SCALAR_ADDER(gguf_writer_add_f64, double, GGUF_VALUE_TYPE_FLOAT64)
#undef SCALAR_ADDER

llb_status gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v) {
  if (strcmp(key, "general.alignment") == 0 && v != 0 && (v & (v - 1)) == 0) {
    w->alignment = v;
  }
  return gguf_writer_add_raw(w, key, GGUF_VALUE_TYPE_UINT32, &v, sizeof v);
}

llb_status gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v) {
  uint8_t b = v ? 1 : 0;
  return gguf_writer_add_raw(w, key, GGUF_VALUE_TYPE_BOOL, &b, 1);
}

llb_status gguf_writer_add_str_n(struct gguf_writer *w, const char *key, const char *v,
                                 uint64_t len) {
  struct buf b = {0};
  llb_status st = put_str(&b, v, len);
  if (st == LLB_STATUS_OK) {
    st = gguf_writer_add_raw(w, key, GGUF_VALUE_TYPE_STRING, b.p, b.len);
  }
  free(b.p);
  return st;
}

llb_status gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v) {
  return gguf_writer_add_str_n(w, key, v, strlen(v));
}

/* Appends an array body (element type, count, elements) of fixed-size elements to b. */
static llb_status put_fixed_array(struct buf *b, uint32_t elem_type, const void *data,
                                  uint64_t n) {
  size_t esz = elem_size(elem_type);
  if (esz == 0) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gguf_writer: element type %u is not fixed-size",
                    elem_type);
  }
  llb_status st = put_u32(b, elem_type);
  if (st == LLB_STATUS_OK) {
    st = put_u64(b, n);
  }
  if (st == LLB_STATUS_OK) {
    st = buf_put(b, data, (size_t)n * esz);
  }
  return st;
}

llb_status gguf_writer_add_array(struct gguf_writer *w, const char *key,
                                 enum gguf_value_type elem_type, const void *data, uint64_t n) {
  struct buf b = {0};
  llb_status st = put_fixed_array(&b, elem_type, data, n);
  if (st == LLB_STATUS_OK) {
    st = gguf_writer_add_raw(w, key, GGUF_VALUE_TYPE_ARRAY, b.p, b.len);
  }
  free(b.p);
  return st;
}

llb_status gguf_writer_add_str_array(struct gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n) {
  struct buf b = {0};
  llb_status st = put_u32(&b, GGUF_VALUE_TYPE_STRING);
  if (st == LLB_STATUS_OK) {
    st = put_u64(&b, n);
  }
  for (uint64_t i = 0; i < n && st == LLB_STATUS_OK; i++) {
    st = put_str(&b, strs[i], strlen(strs[i]));
  }
  if (st == LLB_STATUS_OK) {
    st = gguf_writer_add_raw(w, key, GGUF_VALUE_TYPE_ARRAY, b.p, b.len);
  }
  free(b.p);
  return st;
}

llb_status gguf_writer_add_nested_array(struct gguf_writer *w, const char *key,
                                        enum gguf_value_type elem_type,
                                        const void *const *rows, const uint64_t *lens,
                                        uint64_t n_rows) {
  struct buf b = {0};
  llb_status st = put_u32(&b, GGUF_VALUE_TYPE_ARRAY);
  if (st == LLB_STATUS_OK) {
    st = put_u64(&b, n_rows);
  }
  for (uint64_t r = 0; r < n_rows && st == LLB_STATUS_OK; r++) {
    st = put_fixed_array(&b, elem_type, rows[r], lens[r]);
  }
  if (st == LLB_STATUS_OK) {
    st = gguf_writer_add_raw(w, key, GGUF_VALUE_TYPE_ARRAY, b.p, b.len);
  }
  free(b.p);
  return st;
}

llb_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type,
                                  uint32_t n_dims, const int64_t *ne, const void *data,
                                  size_t size_bytes) {
  if (n_dims > 4) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gguf_writer: %u dims", n_dims);
  }
  if (w->n_tensors == w->cap_tensors) {
    size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
    struct wtensor *t = realloc(w->tensors, cap * sizeof *t);
    if (t == NULL) {
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf_writer: tensors");
    }
    w->tensors = t;
    w->cap_tensors = cap;
  }
  struct wtensor *t = &w->tensors[w->n_tensors];
  memset(t, 0, sizeof *t);
  t->name = strdup(name);
  t->data = malloc(size_bytes ? size_bytes : 1);
  if (t->name == NULL || t->data == NULL) {
    free(t->name);
    free(t->data);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf_writer: tensor %s", name);
  }
  if (size_bytes) {
    memcpy(t->data, data, size_bytes);
  }
  t->type = (uint32_t)type;
  t->n_dims = n_dims;
  for (uint32_t d = 0; d < n_dims; d++) {
    t->ne[d] = ne[d];
  }
  t->size_bytes = size_bytes;
  w->n_tensors++;
  return LLB_STATUS_OK;
}

llb_status gguf_writer_add_tensor_f32(struct gguf_writer *w, const char *name, uint32_t n_dims,
                                      const int64_t *ne, const float *data) {
  size_t n = 1;
  for (uint32_t d = 0; d < n_dims; d++) {
    n *= (size_t)ne[d];
  }
  return gguf_writer_add_tensor(w, name, GGML_TYPE_F32, n_dims, ne, data, n * sizeof(float));
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

llb_status gguf_writer_write_memory(const struct gguf_writer *w, void **out, size_t *size) {
  struct buf b = {0};
  uint8_t zeros[256] = {0};
  llb_status st = buf_put(&b, "GGUF", 4);
  if (st == LLB_STATUS_OK) st = put_u32(&b, w->version);
  if (st == LLB_STATUS_OK) st = put_u64(&b, w->n_tensors);
  if (st == LLB_STATUS_OK) st = put_u64(&b, w->n_kv);
  if (st == LLB_STATUS_OK) st = buf_put(&b, w->kv.p, w->kv.len);
  size_t offset = 0;
  for (size_t i = 0; i < w->n_tensors && st == LLB_STATUS_OK; i++) {
    const struct wtensor *t = &w->tensors[i];
    st = put_str(&b, t->name, strlen(t->name));
    if (st == LLB_STATUS_OK) st = put_u32(&b, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims && st == LLB_STATUS_OK; d++) {
      st = put_u64(&b, (uint64_t)t->ne[d]);
    }
    if (st == LLB_STATUS_OK) st = put_u32(&b, t->type);
    if (st == LLB_STATUS_OK) st = put_u64(&b, offset);
    offset = align_up(offset + t->size_bytes, w->alignment);
  }
  for (size_t i = 0; i < w->n_tensors && st == LLB_STATUS_OK; i++) {
    size_t pad = align_up(b.len, w->alignment) - b.len;
    while (pad > 0 && st == LLB_STATUS_OK) {
      size_t n = pad < sizeof zeros ? pad : sizeof zeros;
      st = buf_put(&b, zeros, n);
      pad -= n;
    }
    if (st == LLB_STATUS_OK) st = buf_put(&b, w->tensors[i].data, w->tensors[i].size_bytes);
  }
  if (st != LLB_STATUS_OK) {
    free(b.p);
    return st;
  }
  *out = b.p;
  *size = b.len;
  return LLB_STATUS_OK;
}

llb_status gguf_writer_write_file(const struct gguf_writer *w, const char *path) {
  void *p;
  size_t n;
  llb_status st = gguf_writer_write_memory(w, &p, &n);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  FILE *fp = fopen(path, "wb");
  if (fp == NULL) {
    free(p);
    return LLB_ERRF(LLB_STATUS_IO, "gguf_writer: cannot create %s: %s", path, strerror(errno));
  }
  size_t wrote = fwrite(p, 1, n, fp);
  int rc = fclose(fp);
  free(p);
  if (wrote != n || rc != 0) {
    return LLB_ERRF(LLB_STATUS_IO, "gguf_writer: cannot write %s: %s", path, strerror(errno));
  }
  return LLB_STATUS_OK;
}

llb_status gguf_writer_add_llama_hparams(struct gguf_writer *w, const struct gguf_llama_hparams *h) {
  llb_status st = gguf_writer_add_str(w, "general.architecture", "llama");
  if (!st) st = gguf_writer_add_u32(w, "llama.block_count", h->n_layers);
  if (!st) st = gguf_writer_add_u32(w, "llama.context_length", h->context);
  if (!st) st = gguf_writer_add_u32(w, "llama.embedding_length", h->embd);
  if (!st) st = gguf_writer_add_u32(w, "llama.feed_forward_length", h->ffn);
  if (!st) st = gguf_writer_add_u32(w, "llama.attention.head_count", h->n_heads);
  if (!st) st = gguf_writer_add_u32(w, "llama.attention.head_count_kv", h->n_kv_heads);
  if (!st) st = gguf_writer_add_u32(w, "llama.rope.dimension_count", h->head_dim);
  if (!st) st = gguf_writer_add_u32(w, "llama.vocab_size", h->vocab);
  if (!st) st = gguf_writer_add_f32(w, "llama.rope.freq_base", h->rope_base);
  if (!st) st = gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  return st;
}

static float lcg_unit(uint64_t *rng) {
  *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(uint32_t)(*rng >> 32) / 2147483648.0f - 1.0f; /* [-1, 1) */
}

static llb_status add_random_f32(struct gguf_writer *w, const char *name, int64_t cols, int64_t rows, float base,
                                 float amp, uint64_t *rng) {
  float *v = malloc(sizeof(float) * (size_t)(cols * rows));
  if (!v) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%s", name);
  for (int64_t i = 0; i < cols * rows; i++) v[i] = base + amp * lcg_unit(rng);
  llb_status st = rows == 1 ? gguf_writer_add_tensor_f32(w, name, 1, (int64_t[]){cols}, v)
                            : gguf_writer_add_tensor_f32(w, name, 2, (int64_t[]){cols, rows}, v);
  free(v);
  return st;
}

llb_status gguf_writer_add_random_llama(struct gguf_writer *w, const struct gguf_llama_hparams *h, float embd_amp,
                                        uint64_t *rng) {
  const int64_t E = h->embd, F = h->ffn, V = h->vocab, QD = (int64_t)h->n_heads * h->head_dim,
                KD = (int64_t)h->n_kv_heads * h->head_dim;
  llb_status st = gguf_writer_add_llama_hparams(w, h);
  if (!st) st = add_random_f32(w, "token_embd.weight", E, V, 0.0f, embd_amp, rng);
  for (uint32_t l = 0; !st && l < h->n_layers; l++) {
    const struct {
      const char *name;
      int64_t cols, rows;
      float base, amp;
    } t[] = {{"attn_norm", E, 1, 1.0f, 0.3f}, {"ffn_norm", E, 1, 1.0f, 0.3f},  {"attn_q", E, QD, 0.0f, 0.5f},
             {"attn_k", E, KD, 0.0f, 0.5f},   {"attn_v", E, KD, 0.0f, 0.3f},   {"attn_output", QD, E, 0.0f, 0.2f},
             {"ffn_gate", E, F, 0.0f, 0.2f},  {"ffn_up", E, F, 0.0f, 0.2f},   {"ffn_down", F, E, 0.0f, 0.2f}};
    for (size_t i = 0; !st && i < sizeof t / sizeof t[0]; i++) {
      char n[64];
      snprintf(n, sizeof n, "blk.%u.%s.weight", l, t[i].name);
      st = add_random_f32(w, n, t[i].cols, t[i].rows, t[i].base, t[i].amp, rng);
    }
  }
  if (!st) st = add_random_f32(w, "output_norm.weight", E, 1, 1.0f, 0.3f, rng);
  if (!st) st = add_random_f32(w, "output.weight", E, V, 0.0f, 0.6f, rng);
  return st;
}

llb_status gguf_writer_add_tiny_vocab(struct gguf_writer *w, int32_t n) {
  if (n < 3 || n > 4096) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tiny vocab of %d tokens: 3..4096", n);
  char (*storage)[8] = malloc((size_t)n * sizeof *storage);
  const char **tokens = malloc((size_t)n * sizeof *tokens);
  float *scores = malloc((size_t)n * sizeof *scores);
  int32_t *types = malloc((size_t)n * sizeof *types);
  llb_status st = storage && tokens && scores && types ? LLB_STATUS_OK
                                                       : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tiny vocab");
  for (int32_t i = 0; !st && i < n; i++) {
    if (i < 3) snprintf(storage[i], sizeof storage[i], "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
    else snprintf(storage[i], sizeof storage[i], "t%d", i % 100);
    tokens[i] = storage[i];
    scores[i] = -(float)i;
    types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
  }
  if (!st) st = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
  if (!st) st = gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, n);
  if (!st) st = gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, scores, n);
  if (!st) st = gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, n);
  if (!st) st = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
  if (!st) st = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
  free(storage);
  free(tokens);
  free(scores);
  free(types);
  return st;
}
