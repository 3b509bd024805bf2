/* Reference logits and greedy ids of the tiny per-architecture models (tests/unit/arch_models.h)
 * computed by llama.cpp itself, written as tests/unit/data/arch_golden.inc for
 * tests/unit/test_forward_arch.c.
 *
 * A development tool, not built by CMake: it links llama.cpp's libllama, which ops/bench/
 * compare-llamacpp.sh (or any llama.cpp build) leaves under .cache/. Build and run:
 *   L=.cache/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
 *   cc -O1 -I. -I$L/include -I$L/ggml/include tests/tools/gen_arch_golden.c tests/unit/arch_models.c \
 *      tests/unit/gguf_writer.c build-release/base/libllmbus_base.a -L$L/build/bin -lllama -lggml -lggml-base \
 *      -lm -Wl,-rpath,$L/build/bin -o /tmp/gen_arch_golden
 *   /tmp/gen_arch_golden > tests/unit/data/arch_golden.inc
 * For each model: written to a temporary file, loaded on the CPU (one thread, flash attention
 * off, n_ctx 128, which llama.cpp pads to 256), the prompt decoded as one batch with logits for
 * every token (golden_<name>), then ARCH_MODEL_GREEDY greedy steps, one token each: the id
 * chosen (argmax of the previous logits, golden_<name>_greedy) fed back and its logits
 * recorded (golden_<name>_decode).
 *
 * "mistral" is a llama file with llama.attention.sliding_window, which llama.cpp's llama
 * architecture ignores. Its reference is still llama.cpp's own arithmetic: every token, prompt
 * included, is decoded alone after removing from llama.cpp's KV cache the positions that fell
 * out of the window (llama_memory_seq_rm), so each layer of each position attends exactly the
 * last ARCH_MODEL_WINDOW keys, each computed under its own window: sliding-window attention. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llama.h"
#include "tests/unit/arch_models.h"

enum { P = ARCH_MODEL_PROMPT, G = ARCH_MODEL_GREEDY, V = ARCH_MODEL_VOCAB };

static void quiet(enum ggml_log_level level, const char *text, void *user) {
  (void)user;
  if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* Decodes tokens [n] at positions pos0.. in one batch; logits for every row. */
static int decode(struct llama_context *ctx, const int *tokens, int n, int pos0) {
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; i++) {
    b.token[i] = tokens[i];
    b.pos[i] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  return rc;
}

/* Decodes one token at pos; with window > 0, first drops the cached positions < pos - window + 1. */
static int decode_one(struct llama_context *ctx, int token, int pos, int window) {
  if (window > 0 && pos - window + 1 > 0 && !llama_memory_seq_rm(llama_get_memory(ctx), 0, 0, pos - window + 1))
    return 1;
  return decode(ctx, &token, 1, pos);
}

static int argmax(const float *row, float *gap) {
  int best = 0;
  for (int j = 1; j < V; j++)
    if (row[j] > row[best]) best = j;
  float second = -INFINITY;
  for (int j = 0; j < V; j++)
    if (j != best && row[j] > second) second = row[j];
  *gap = row[best] - second;
  return best;
}

static void print_rows(const char *name, const char *suffix, const float *rows, int n) {
  printf("static const float golden_%s%s[%d * %d] = {\n", name, suffix, n, V);
  for (int i = 0; i < n; i++) {
    printf("   ");
    for (int j = 0; j < V; j++) printf(" %.9g%s", rows[i * V + j], j + 1 < V ? "f," : "f,\n");
  }
  printf("};\n");
}

static int run(const char *name) {
  const int window = strcmp(name, "mistral") == 0 ? ARCH_MODEL_WINDOW : 0; /* see the head comment */
  void *buf = NULL;
  size_t size = 0;
  if (arch_model_write(name, &buf, &size) != LLB_STATUS_OK) return 1;
  char path[96];
  snprintf(path, sizeof path, "/tmp/arch-golden-%s-%d.gguf", name, (int)getpid());
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, size, f) != size) return 1;
  fclose(f);
  free(buf);
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model *m = llama_model_load_from_file(path, mp);
  if (!m) return 1;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 128;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  struct llama_context *ctx = llama_init_from_model(m, cp);
  if (!ctx) return 1;
  static float prompt[P * V], steps[G * V];
  if (window > 0) {
    for (int i = 0; i < P; i++) {
      if (decode_one(ctx, ARCH_MODEL_PROMPT_IDS[i], i, window) != 0) return 1;
      memcpy(prompt + i * V, llama_get_logits_ith(ctx, -1), V * sizeof(float));
    }
  } else {
    if (decode(ctx, ARCH_MODEL_PROMPT_IDS, P, 0) != 0) return 1;
    for (int i = 0; i < P; i++) memcpy(prompt + i * V, llama_get_logits_ith(ctx, i), V * sizeof(float));
  }
  int ids[G];
  float min_gap = INFINITY, gap;
  const float *last = prompt + (P - 1) * V;
  for (int k = 0; k < G; k++) {
    ids[k] = argmax(last, &gap);
    min_gap = gap < min_gap ? gap : min_gap;
    if (decode_one(ctx, ids[k], P + k, window) != 0) return 1;
    memcpy(steps + k * V, llama_get_logits_ith(ctx, -1), V * sizeof(float));
    last = steps + k * V;
  }
  print_rows(name, "", prompt, P);
  print_rows(name, "_decode", steps, G);
  printf("/* smallest gap between the top two logits of a greedy choice: %.3g */\n", min_gap);
  printf("static const int golden_%s_greedy[%d] = {", name, G);
  for (int k = 0; k < G; k++) printf("%d%s", ids[k], k + 1 < G ? ", " : "};\n");
  llama_free(ctx);
  llama_model_free(m);
  unlink(path);
  return 0;
}

int main(void) {
  llama_log_set(quiet, NULL);
  llama_backend_init();
  printf("/* Generated by tests/tools/gen_arch_golden.c (llama.cpp's libllama): logits of the prompt of\n"
         " * tests/unit/arch_models.h at every position, then greedy ids and the logits of each greedy\n"
         " * step, per model. Do not edit. */\n");
  static const char *const names[] = {"llama",   "llama3", "qwen2",  "qwen3",         "phi3",
                                      "gemma",   "mistral", "gemma2", "gemma3",        "phi3_longrope",
                                      "phi3_longrope_short"};
  int rc = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && rc == 0; i++) {
    rc = run(names[i]);
    if (rc) fprintf(stderr, "gen_arch_golden: %s failed\n", names[i]);
  }
  llama_backend_free();
  return rc;
}
