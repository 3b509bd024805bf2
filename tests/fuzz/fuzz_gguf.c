/* Fuzz target for model/gguf (and config on what it accepts): any byte string must give a
 * status, never a crash or an out-of-bounds read (ASan/UBSan check that).
 *
 * Built two ways (tests/fuzz/gguf.cmake):
 *  - fuzz_gguf (clang, -DLLB_FUZZ=ON): libFuzzer drives LLVMFuzzerTestOneInput.
 *  - fuzz_gguf_driver (any compiler, under ctest): a deterministic driver builds valid files
 *    with the test GGUF writer, feeds every truncation of them, then random byte flips and
 *    lying 64-bit fields from a fixed seed, for at most a few seconds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf/config.h"
#include "model/gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every value and tensor the file exposes, as consumers would. */
static void exercise(const struct gguf_file *f) {
  int64_t n_kv = gguf_kv_count(f);
  for (int64_t i = 0; i < n_kv; i++) {
    struct gguf_str k = gguf_kv_key(f, i);
    char key[256];
    snprintf(key, sizeof key, "%.*s", k.len > 255 ? 255 : (int)k.len, k.data);
    int64_t iv;
    double dv;
    bool bv;
    struct gguf_str sv;
    struct gguf_array av;
    volatile uint64_t sink = 0;
    if (gguf_get_int(f, key, &iv) == LLB_STATUS_OK) sink += (uint64_t)iv;
    if (gguf_get_float(f, key, &dv) == LLB_STATUS_OK) sink += (uint64_t)(dv != 0.0);
    if (gguf_get_bool(f, key, &bv) == LLB_STATUS_OK) sink += bv;
    if (gguf_get_str(f, key, &sv) == LLB_STATUS_OK && sv.len > 0) {
      sink += (uint8_t)sv.data[0] + (uint8_t)sv.data[sv.len - 1];
    }
    if (gguf_get_array(f, key, &av) == LLB_STATUS_OK && av.len > 0) {
      uint64_t last = av.len - 1;
      sink += (uint64_t)gguf_array_int(&av, 0) + (uint64_t)gguf_array_int(&av, last);
      sink += (uint64_t)(gguf_array_f32(&av, last) == 0.0f);
      if (av.strs != NULL && av.strs[last].len > 0) {
        sink += (uint8_t)av.strs[last].data[av.strs[last].len - 1];
      }
    }
    (void)sink;
  }
  int64_t n_t = gguf_tensor_count(f);
  static float row[4096];
  for (int64_t i = 0; i < n_t; i++) {
    const struct gguf_tensor *t = gguf_tensor_at(f, i);
    if (gguf_find_tensor(f, t->name) != t) {
      abort(); /* internal invariant: names are unique and indexed */
    }
    if (t->size_bytes > 0) {
      volatile uint8_t last = ((const uint8_t *)t->data)[t->size_bytes - 1];
      (void)last;
    }
    if (ggml_type_is_supported(t->type) && t->ne[0] <= 4096) {
      ggml_dequantize_row(t->type, t->data, row, t->ne[0]);
    }
  }
  struct llama_config cfg;
  if (llama_config_from_gguf(f, &cfg) == LLB_STATUS_OK) {
    llama_config_check_tensors(f, &cfg);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct gguf_file *f = NULL;
  if (gguf_open_memory(data, size, &f) == LLB_STATUS_OK) {
    exercise(f);
  }
  gguf_close(f);
  return 0;
}

#ifdef LLB_FUZZ_STANDALONE_DRIVER
#include <time.h>

#include "tests/unit/gguf_writer.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

/* Runs the target on an exact-size heap copy so ASan catches any read past the end. */
static void run_copy(const uint8_t *p, size_t n) {
  uint8_t *copy = malloc(n ? n : 1);
  if (copy == NULL) {
    abort();
  }
  memcpy(copy, p, n);
  LLVMFuzzerTestOneInput(copy, n);
  free(copy);
}

static int make_seed(int which, void **buf, size_t *size) {
  struct gguf_writer *w;
  if (gguf_writer_create(3, &w) != LLB_STATUS_OK) return -1;
  static float vals[32 * 32];
  for (int i = 0; i < 32 * 32; i++) vals[i] = (float)(i % 11) - 5.0f;
  if (which == 0) { /* a tiny llama-shaped model */
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "general.alignment", 64);
    gguf_writer_add_u32(w, "llama.block_count", 1);
    gguf_writer_add_u32(w, "llama.embedding_length", 32);
    gguf_writer_add_u32(w, "llama.feed_forward_length", 32);
    gguf_writer_add_u32(w, "llama.attention.head_count", 2);
    gguf_writer_add_u32(w, "llama.context_length", 64);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_u32(w, "llama.vocab_size", 4);
    const char *names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                           "blk.0.attn_v.weight", "blk.0.attn_output.weight",
                           "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
                           "blk.0.ffn_down.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      gguf_writer_add_tensor_f32(w, names[i], 2, (int64_t[]){32, i == 0 ? 4 : 32}, vals);
    }
    gguf_writer_add_tensor_f32(w, "blk.0.attn_norm.weight", 1, (int64_t[]){32}, vals);
    gguf_writer_add_tensor_f32(w, "blk.0.ffn_norm.weight", 1, (int64_t[]){32}, vals);
    gguf_writer_add_tensor_f32(w, "output_norm.weight", 1, (int64_t[]){32}, vals);
  } else { /* every value kind and quantized tensors */
    const char *strs[] = {"<s>", "</s>", "hello"};
    gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", strs, 3);
    int32_t ints[4] = {1, -2, 3, -4};
    gguf_writer_add_array(w, "a.i32", GGUF_VALUE_TYPE_INT32, ints, 4);
    int16_t r0[2] = {1, 2};
    gguf_writer_add_nested_array(w, "a.nested", GGUF_VALUE_TYPE_INT16,
                                 (const void *const[]){r0, r0}, (uint64_t[]){2, 1}, 2);
    gguf_writer_add_f64(w, "a.f64", 0.5);
    gguf_writer_add_bool(w, "a.bool", true);
    gguf_writer_add_u64(w, "a.u64", 7);
    uint8_t q[210 * 1];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 37 + 11);
    gguf_writer_add_tensor(w, "q6", GGML_TYPE_Q6_K, 1, (int64_t[]){256}, q, 210);
    gguf_writer_add_tensor(w, "q41", GGML_TYPE_Q4_1, 2, (int64_t[]){32, 2}, q, 40);
    gguf_writer_add_tensor(w, "q2", GGML_TYPE_Q2_K, 1, (int64_t[]){256}, q, 84);
  }
  llb_status st = gguf_writer_write_memory(w, buf, size);
  gguf_writer_destroy(w);
  return st == LLB_STATUS_OK ? 0 : -1;
}

int main(int argc, char **argv) {
  double budget_s = argc > 1 ? atof(argv[1]) : 3.0;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long runs = 0;
  for (int which = 0; which < 2; which++) {
    void *buf;
    size_t size;
    if (make_seed(which, &buf, &size) != 0) {
      fprintf(stderr, "fuzz_gguf_driver: cannot build seed %d\n", which);
      return 1;
    }
    struct gguf_file *f = NULL;
    if (gguf_open_memory(buf, size, &f) != LLB_STATUS_OK) {
      fprintf(stderr, "fuzz_gguf_driver: seed %d does not open: %s\n", which, llb_err_last());
      return 1;
    }
    gguf_close(f);
    for (size_t n = 0; n <= size; n++, runs++) {
      run_copy(buf, n);
    }
    uint8_t *m = malloc(size);
    static const uint64_t lies[] = {0, 1, 31, 32, 64, 255, 1ull << 32, 1ull << 62,
                                    UINT64_MAX, UINT64_MAX - 63, (uint64_t)INT64_MAX};
    for (;;) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
      if (el > budget_s * (which + 1) / 2) break;
      for (int batch = 0; batch < 200; batch++, runs++) {
        memcpy(m, buf, size);
        int n_mut = 1 + (int)(rng_next() % 4);
        for (int k = 0; k < n_mut; k++) {
          size_t pos = (size_t)(rng_next() % size);
          if (rng_next() % 3 == 0 && pos + 8 <= size) {
            uint64_t v = lies[rng_next() % (sizeof lies / sizeof lies[0])];
            memcpy(m + pos, &v, 8);
          } else {
            m[pos] ^= (uint8_t)(1u << (rng_next() % 8));
          }
        }
        run_copy(m, size);
      }
    }
    free(m);
    free(buf);
  }
  printf("fuzz_gguf_driver: %ld inputs, no crash\n", runs);
  return 0;
}
#endif
