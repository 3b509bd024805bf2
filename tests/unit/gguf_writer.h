/* Test-side GGUF writer: builds small GGUF v2/v3 files in memory (spec: ggml docs/gguf.md).
 *
 * Tests of any module use it to make tiny models: add metadata of every value type (arrays
 * and nested arrays included), add tensors of any ggml type from raw bytes, then serialize to
 * a malloc'd buffer or a file. The data section is aligned to `general.alignment` when a
 * UINT32 pair of that name was added (else 32), and so is every tensor's offset.
 * Library: llmbus_test_gguf_writer (tests/unit/model_gguf.cmake). Not thread-safe per writer.
 *
 *   struct gguf_writer *w;
 *   gguf_writer_create(3, &w);
 *   gguf_writer_add_str(w, "general.architecture", "llama");
 *   gguf_writer_add_u32(w, "llama.block_count", 1);
 *   gguf_writer_add_tensor(w, "output_norm.weight", GGML_TYPE_F32, 1, (int64_t[]){8}, data, 32);
 *   gguf_writer_write_file(w, path);
 *   gguf_writer_destroy(w);
 */
#ifndef LLB_TESTS_GGUF_WRITER_H
#define LLB_TESTS_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/quant.h"
#include "model/gguf/gguf.h"

struct gguf_writer;

/* New empty writer for GGUF `version` (2 or 3; other values are written as given, to make
 * bad files). Caller frees with gguf_writer_destroy. OUT_OF_MEMORY on failure. */
llb_status gguf_writer_create(uint32_t version, struct gguf_writer **out);

/* Frees the writer and everything it copied; NULL ok. */
void gguf_writer_destroy(struct gguf_writer *w);

/* Scalar pairs. Keys and values are copied; pairs are written in the order added (no
 * duplicate check: tests make duplicate keys on purpose). OUT_OF_MEMORY only. */
llb_status gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v);
llb_status gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v);
llb_status gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v);
llb_status gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v);
llb_status gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
llb_status gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
llb_status gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
llb_status gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v);
llb_status gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v);
llb_status gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v);
llb_status gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v);
/* NUL-terminated string value. */
llb_status gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v);
/* String value of `len` bytes (may contain NUL). */
llb_status gguf_writer_add_str_n(struct gguf_writer *w, const char *key, const char *v,
                                 uint64_t len);

/* Array of `n` fixed-size elements of `elem_type` (not STRING/ARRAY) read from data [n] in
 * host (little-endian) layout, e.g. int32_t[] for INT32, uint8_t 0/1 for BOOL.
 * INVALID_ARGUMENT for STRING/ARRAY/unknown element types. */
llb_status gguf_writer_add_array(struct gguf_writer *w, const char *key,
                                 enum gguf_value_type elem_type, const void *data, uint64_t n);

/* Array of n NUL-terminated strings. */
llb_status gguf_writer_add_str_array(struct gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n);

/* Nested array: an ARRAY of n_rows arrays; row r holds lens[r] elements of `elem_type`
 * (fixed-size) read from rows[r]. */
llb_status gguf_writer_add_nested_array(struct gguf_writer *w, const char *key,
                                        enum gguf_value_type elem_type,
                                        const void *const *rows, const uint64_t *lens,
                                        uint64_t n_rows);

/* A pair whose value bytes (after the type tag) are given raw: lets tests write any value
 * of type `type`, including malformed ones. */
llb_status gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t type,
                               const void *value, size_t value_bytes);

/* The hyperparameters of a LLaMA model as GGUF metadata (`general.architecture` "llama" and the
 * `llama.*` keys llama.cpp reads: block_count, context_length, embedding_length,
 * feed_forward_length, attention.head_count(_kv), rope.dimension_count = head_dim, vocab_size,
 * rope.freq_base, attention.layer_norm_rms_epsilon = 1e-5). */
struct gguf_llama_hparams {
  uint32_t n_layers, context, embd, ffn, n_heads, n_kv_heads, head_dim, vocab;
  float rope_base;
};
llb_status gguf_writer_add_llama_hparams(struct gguf_writer *w, const struct gguf_llama_hparams *h);

/* Adds h's hparams and every tensor of an untied LLaMA model with F32 weights drawn from a
 * 64-bit LCG (*rng advanced, in llama.cpp's tensor order: token_embd, per layer the norms
 * then q, k, v, o, gate, up, down, then output_norm and output). Uniform in [-1, 1) scaled
 * per tensor kind; norms around 1; token embeddings by embd_amp. Errors: the writer's. */
llb_status gguf_writer_add_random_llama(struct gguf_writer *w, const struct gguf_llama_hparams *h, float embd_amp,
                                        uint64_t *rng);

/* Adds a tiny SPM ("llama") vocabulary of n tokens: 0 "<unk>" (UNKNOWN), 1 "<s>" (CONTROL, BOS),
 * 2 "</s>" (CONTROL, EOS), then "t<i % 100>" (NORMAL) with score -i. n in [3, 4096].
 * Errors: INVALID_ARGUMENT (n), the writer's. */
llb_status gguf_writer_add_tiny_vocab(struct gguf_writer *w, int32_t n);

/* Adds a tensor: name (copied), ggml type (written as given), n_dims (0..4, written as
 * given), ne [n_dims] (fastest first), data [size_bytes] copied. Its offset is the next
 * aligned position of the data section. INVALID_ARGUMENT if n_dims > 4. */
llb_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type,
                                  uint32_t n_dims, const int64_t *ne, const void *data,
                                  size_t size_bytes);

/* Adds an F32 tensor of shape ne [n_dims] whose data is `data` [product of ne]. */
llb_status gguf_writer_add_tensor_f32(struct gguf_writer *w, const char *name, uint32_t n_dims,
                                      const int64_t *ne, const float *data);

/* Serializes into a malloc'd buffer (*buf, *size); caller free()s it. */
llb_status gguf_writer_write_memory(const struct gguf_writer *w, void **buf, size_t *size);

/* Serializes into the file at `path` (created or truncated). IO with errno text on failure. */
llb_status gguf_writer_write_file(const struct gguf_writer *w, const char *path);

#endif
