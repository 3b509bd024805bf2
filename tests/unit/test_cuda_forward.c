/* The CUDA forward (kernels/cuda/cuda_forward.h) against the CPU forward (model/forward.c) on
 * random weights of SmolLM2-135M's shape and of a 1B-class LLaMA (kernels/cuda/tools/
 * random_llama.h): a 16-token prefill, then 64 greedy decode steps, teacher-forced with the
 * CPU's token so that one near-tie cannot derail the rest (the GPU decodes through its CUDA
 * graph for batch 1 and samples greedily on the device).
 * Tolerances: logits max|gpu - cpu| <= 0.08 * max|cpu| + 0.03 per step (the CPU quantizes
 * activations to 8 bits per block, model/forward.c's test measures it against a dense
 * reference with this bound; the GPU's fp16 path is closer to that reference). Greedy tokens:
 * equal at every step, except where the CPU's top-2 gap is below twice the step's measured
 * logit error (a flip that error explains; reported). The device-sampled greedy token must
 * equal the argmax of the GPU's own logits, always. */
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/cuda_forward.h"
#include "kernels/cuda/tools/random_llama.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "tests/unit/test_cuda_harness.h"

#define PROMPT 16
#define STEPS 64
#define BS 16

static int32_t argmax(const float *x, int32_t n) {
  int32_t a = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[a]) a = i;
  return a;
}

static void compare_shape(const struct random_llama_shape *sh, uint64_t seed) {
  void *buf = NULL;
  size_t size;
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  struct llama_forward_ctx *fc = NULL;
  struct llama_kv_cache *kv = NULL;
  struct cuda_model *cm = NULL;
  struct cuda_forward_ctx *cc = NULL;
  struct cuda_kv_cache *ckv = NULL;
  const int32_t V = sh->vocab, NB = 12, MB = 8;
  float *lc = malloc((size_t)V * 4), *lg = malloc((size_t)V * 4);
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  const int32_t threads = nproc < 1 ? 1 : (nproc > 16 ? 16 : (int32_t)nproc);
  CHECK_OK(random_llama_gguf(sh, seed, &buf, &size));
  CHECK_OK(gguf_open_memory(buf, size, &f));
  CHECK_OK(llama_model_load(f, &m));
  CHECK_OK(llama_forward_ctx_create(m, PROMPT, threads, &fc));
  CHECK_OK(llama_kv_cache_create(m, NB, BS, &kv));
  CHECK_OK(cuda_model_load(f, &cm));
  const struct cuda_forward_params fp = {PROMPT, 4, 4, MB, MB * BS, true, true};
  CHECK_OK(cuda_forward_ctx_create(cm, &fp, &cc));
  CHECK_OK(cuda_kv_cache_create(cm, NB, BS, &ckv));
  int32_t table[MB];
  for (int i = 0; i < MB; i++) table[i] = NB - 1 - i; /* blocks in reverse: the table is followed */
  int32_t ids[PROMPT], pos[PROMPT], qsl[2] = {0, PROMPT}, lidx[1] = {PROMPT - 1}, len[1] = {PROMPT};
  int64_t slots[PROMPT];
  uint64_t s = seed;
  for (int i = 0; i < PROMPT; i++) {
    ids[i] = (int32_t)(tc_next(&s) % (uint64_t)V);
    pos[i] = i;
    slots[i] = (int64_t)table[i / BS] * BS + i % BS;
  }
  struct llama_batch b = {PROMPT, ids, pos, slots, 1, qsl, len, table, MB, NULL, NULL, 1, lidx};
  const struct cuda_sample_params greedy = {0.0f, 0, 1.0f, 0.0f, 0, 0, 0};
  int explained = 0, matched = 0, unexplained = 0;
  float worst_rel = 0;
  for (int step = 0; step <= STEPS; step++) {
    int32_t dev_token = -1;
    CHECK_OK(llama_forward(fc, kv, &b, lc));
    CHECK_OK(cuda_forward(cc, ckv, &b, &greedy, lg, &dev_token));
    float maxd = 0, maxc = 0;
    for (int32_t i = 0; i < V; i++) maxd = fmaxf(maxd, fabsf(lc[i] - lg[i])), maxc = fmaxf(maxc, fabsf(lc[i]));
    worst_rel = fmaxf(worst_rel, maxd / maxc);
    CHECK(maxd <= 0.08f * maxc + 0.03f, "%s step %d: max logit diff %g (max |logit| %g)", sh->name, step, maxd, maxc);
    const int32_t tc = argmax(lc, V), tg = argmax(lg, V);
    CHECK(dev_token == tg, "%s step %d: device greedy %d, argmax of device logits %d", sh->name, step, dev_token, tg);
    if (tc == tg) matched++;
    else if (lc[tc] - lc[tg] <= 2.0f * maxd) explained++;
    else unexplained++, fprintf(stderr, "%s step %d: cpu %d gpu %d, gap %g > 2 x %g\n", sh->name, step, tc, tg,
                                lc[tc] - lc[tg], maxd);
    /* next step: decode the CPU's token at the next position */
    const int32_t p = PROMPT + step;
    ids[0] = tc, pos[0] = p, slots[0] = (int64_t)table[p / BS] * BS + p % BS;
    qsl[1] = 1, lidx[0] = 0, len[0] = p + 1;
    b.num_tokens = 1;
  }
  printf("%s: %d of %d greedy tokens equal, %d near-ties explained by the logit error, worst max|d|/max|logit| %.4f, "
         "%d graph(s)\n", sh->name, matched, STEPS + 1, explained, worst_rel, cuda_forward_num_graphs(cc));
  CHECK(unexplained == 0, "%s: %d unexplained greedy mismatches", sh->name, unexplained);
  CHECK(cuda_forward_num_graphs(cc) == 1, "decode did not run as one CUDA graph");
  cuda_kv_cache_destroy(ckv);
  cuda_forward_ctx_destroy(cc);
  cuda_model_destroy(cm);
  llama_kv_cache_destroy(kv);
  llama_forward_ctx_destroy(fc);
  llama_model_destroy(m);
  gguf_close(f);
  free(buf), free(lc), free(lg);
}

static void test_smollm2_shape_matches_cpu_for_64_greedy_steps(void) {
  compare_shape(&random_llama_smollm2_135m, 2024);
}

static void test_llama_1b_shape_matches_cpu_for_64_greedy_steps(void) {
  if (getenv("LLMBUS_CUDA_SKIP_1B")) {
    printf("LLMBUS_CUDA_SKIP_1B set: 1B shape not run\n");
    return;
  }
  compare_shape(&random_llama_1b, 7);
}

int main(void) {
  tc_require_device();
  RUN_CASE(test_smollm2_shape_matches_cpu_for_64_greedy_steps);
  RUN_CASE(test_llama_1b_shape_matches_cpu_for_64_greedy_steps);
  return tc_finish();
}
