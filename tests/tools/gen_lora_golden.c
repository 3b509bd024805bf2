/* Reference logits and greedy ids of the tiny models of tests/unit/arch_models.h with the random
 * LoRA adapters of tests/unit/lora_models.h applied, computed by llama.cpp itself, written as
 * tests/unit/data/lora_golden.inc for tests/unit/test_lora.c.
 *
 * A development tool, not built by CMake: it links llama.cpp's libllama, which ops/bench/
 * compare-llamacpp.sh (or any llama.cpp build) leaves under .cache/. Build and run:
 *   L=.cache/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
 *   cc -O1 -I. -I$L/include -I$L/ggml/include tests/tools/gen_lora_golden.c tests/unit/arch_models.c \
 *      tests/unit/lora_models.c tests/unit/gguf_writer.c build-release/base/libllmbus_base.a \
 *      build-release/kernels/libllmbus_kernels_quant.a -L$L/build/bin -lllama -lggml -lggml-base \
 *      -lm -Wl,-rpath,$L/build/bin -o /tmp/gen_lora_golden
 *   /tmp/gen_lora_golden > tests/unit/data/lora_golden.inc
 * For each base model and adapter: both written to temporary files, the model loaded on the CPU
 * (one thread, flash attention off, n_ctx 128), the adapter by llama_adapter_lora_init and set
 * with scale 1 (llama_set_adapters_lora), the prompt decoded as one batch with logits for every
 * token, then ARCH_MODEL_GREEDY greedy steps of one token (as gen_arch_golden.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llama.h"
#include "tests/unit/arch_models.h"
#include "tests/unit/lora_models.h"

enum { P = ARCH_MODEL_PROMPT, G = ARCH_MODEL_GREEDY, V = ARCH_MODEL_VOCAB };

static const char *const BASES[] = {"llama", "qwen2", "gemma", "phi3"};

static void quiet(enum ggml_log_level level, const char *text, void *user) {
  (void)user;
  if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

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

static int write_file(const char *path, void *buf, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, size, f) != size) return 1;
  fclose(f);
  free(buf);
  return 0;
}

static int run(const char *base, int spec) {
  void *buf = NULL;
  size_t size = 0;
  char mpath[96], apath[96], name[64];
  snprintf(mpath, sizeof mpath, "/tmp/lora-golden-%s-%d.gguf", base, (int)getpid());
  snprintf(apath, sizeof apath, "/tmp/lora-golden-%s-%d-adapter.gguf", base, (int)getpid());
  snprintf(name, sizeof name, "%s_%s", base, LORA_MODEL_SPECS[spec].name);
  if (arch_model_write(base, &buf, &size) != LLB_STATUS_OK || write_file(mpath, buf, size)) return 1;
  if (lora_model_write(base, &LORA_MODEL_SPECS[spec], &buf, &size) != LLB_STATUS_OK || write_file(apath, buf, size))
    return 1;
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model *m = llama_model_load_from_file(mpath, mp);
  if (!m) return 1;
  struct llama_adapter_lora *a = llama_adapter_lora_init(m, apath);
  if (!a) return 1;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 128;
  cp.n_batch = cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  struct llama_context *ctx = llama_init_from_model(m, cp);
  float scale = 1.0f;
  if (!ctx || llama_set_adapters_lora(ctx, &a, 1, &scale) != 0) return 1;
  static float prompt[P * V], steps[G * V];
  if (decode(ctx, ARCH_MODEL_PROMPT_IDS, P, 0) != 0) return 1;
  for (int i = 0; i < P; i++) memcpy(prompt + i * V, llama_get_logits_ith(ctx, i), V * sizeof(float));
  int ids[G];
  float min_gap = INFINITY, gap;
  const float *last = prompt + (P - 1) * V;
  for (int k = 0; k < G; k++) {
    ids[k] = argmax(last, &gap);
    min_gap = gap < min_gap ? gap : min_gap;
    if (decode(ctx, &ids[k], 1, P + k) != 0) return 1;
    memcpy(steps + k * V, llama_get_logits_ith(ctx, -1), V * sizeof(float));
    last = steps + k * V;
  }
  print_rows(name, "", prompt, P);
  print_rows(name, "_decode", steps, G);
  printf("/* smallest gap between the top two logits of a greedy choice: %.3g */\n", min_gap);
  printf("static const int golden_%s_greedy[%d] = {", name, G);
  for (int k = 0; k < G; k++) printf("%d%s", ids[k], k + 1 < G ? ", " : "};\n");
  llama_free(ctx);
  llama_adapter_lora_free(a);
  llama_model_free(m);
  unlink(mpath);
  unlink(apath);
  return 0;
}

int main(void) {
  llama_log_set(quiet, NULL);
  llama_backend_init();
  printf("/* Generated by tests/tools/gen_lora_golden.c (llama.cpp's libllama): logits of the prompt of\n"
         " * tests/unit/arch_models.h at every position with each adapter of tests/unit/lora_models.h\n"
         " * (LORA_MODEL_SPECS), then greedy ids and the logits of each greedy step. Do not edit. */\n");
  const int nb = (int)(sizeof BASES / sizeof BASES[0]);
  int rc = 0;
  for (int b = 0; b < nb && rc == 0; b++)
    for (int s = 0; s < LORA_MODEL_GOLDEN && rc == 0; s++)
      if ((rc = run(BASES[b], s)) != 0) fprintf(stderr, "gen_lora_golden: %s with %s failed\n", BASES[b],
                                                 LORA_MODEL_SPECS[s].name);
  printf("struct lora_golden {\n  const char *base;\n  int spec;\n  const float *prompt, *decode;\n"
         "  const int *greedy;\n};\nstatic const struct lora_golden lora_goldens[] = {\n");
  for (int b = 0; b < nb; b++)
    for (int s = 0; s < LORA_MODEL_GOLDEN; s++)
      printf("    {\"%s\", %d, golden_%s_%s, golden_%s_%s_decode, golden_%s_%s_greedy},\n", BASES[b], s, BASES[b],
             LORA_MODEL_SPECS[s].name, BASES[b], LORA_MODEL_SPECS[s].name, BASES[b], LORA_MODEL_SPECS[s].name);
  printf("};\n");
  llama_backend_free();
  return rc;
}
