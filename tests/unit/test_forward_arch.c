/* Each architecture the CPU forward runs against llama.cpp itself: the tiny random models of
 * tests/unit/arch_models.h, the same prompt, logits of every prompt position, then
 * ARCH_MODEL_GREEDY greedy steps (the ids chosen and each step's logits), compared with what
 * llama.cpp computed on the same file (tests/unit/data/arch_golden.inc, made by
 * tests/tools/gen_arch_golden.c). With llama.cpp's numerics (matmul GGML, attention order
 * LLAMACPP) within 1e-4 of max|logit| (F32 weights: only float summation order may differ);
 * with the engine's packed numerics within 5% (F32 weights have no packed layout, so both runs
 * take the same matmul path here); the greedy ids equal in both. Where a feature is the only
 * difference between two models (Llama 3.x rope_freqs, a sliding window, LongRoPE factors, the
 * short or long set), llama.cpp's logits of the two differ far beyond the tolerance, so a
 * forward that ignored the feature would fail. The sliding windows (ARCH_MODEL_WINDOW keys)
 * are far shorter than the 20 positions run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "tests/unit/arch_models.h"

#include "tests/unit/data/arch_golden.inc"

enum { P = ARCH_MODEL_PROMPT, G = ARCH_MODEL_GREEDY, V = ARCH_MODEL_VOCAB, W = ARCH_MODEL_WINDOW, BS = 16, NB = 8 };

struct arch_run {
  float prompt[P * V]; /* logits of every prompt position */
  float steps[G * V];  /* logits of each greedy step */
  int ids[G];          /* the greedy ids fed back */
};

static int argmax(const float *row) {
  int best = 0;
  for (int j = 1; j < V; j++)
    if (row[j] > row[best]) best = j;
  return best;
}

/* One step of `n` tokens at positions pos0.. of the only sequence (context pos0 + n), logits of
 * every row into out [n * V]. */
static void step(struct llama_forward_ctx *fc, struct llama_kv_cache *kv, const int32_t *table, const int32_t *ids,
                 int32_t n, int32_t pos0, float *out) {
  int32_t pos[P], li[P], qsl[2] = {0, n}, lens[1] = {pos0 + n};
  int64_t slots[P];
  for (int32_t i = 0; i < n; i++) {
    pos[i] = pos0 + i;
    li[i] = i;
    slots[i] = (int64_t)table[(pos0 + i) / BS] * BS + (pos0 + i) % BS;
  }
  const struct llama_batch b = {.num_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                .max_blocks_per_seq = NB, .num_logits = n, .logits_indices = li};
  assert_int_equal(llama_forward(fc, kv, &b, out), LLB_STATUS_OK);
}

/* The prompt as one step, then G greedy steps of one token, with the given numerics;
 * max_model_len as llama_forward_options (0 = the model's context). */
static void run_arch(const char *name, enum llama_matmul_mode mm, enum llama_attention_order ao, int32_t max_model_len,
                     struct arch_run *r) {
  void *buf = NULL;
  size_t size = 0;
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  struct llama_kv_cache *kv = NULL;
  struct llama_forward_ctx *fc = NULL;
  assert_int_equal(arch_model_write(name, &buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(buf, size, &f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(f, &m), LLB_STATUS_OK);
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  const struct llama_forward_options o = {.max_num_tokens = P, .n_threads = 1, .attention_order = ao, .matmul = mm,
                                          .max_model_len = max_model_len};
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &fc), LLB_STATUS_OK);
  const int32_t table[NB] = {3, 0, 1, 2, 4, 5, 6, 7};
  int32_t ids[P];
  for (int i = 0; i < P; i++) ids[i] = ARCH_MODEL_PROMPT_IDS[i];
  step(fc, kv, table, ids, P, 0, r->prompt);
  const float *last = r->prompt + (P - 1) * V;
  for (int k = 0; k < G; k++) {
    r->ids[k] = argmax(last);
    step(fc, kv, table, &(int32_t){r->ids[k]}, 1, P + k, r->steps + k * V);
    last = r->steps + k * V;
  }
  llama_forward_ctx_destroy(fc);
  llama_kv_cache_destroy(kv);
  llama_model_destroy(m);
  gguf_close(f);
  free(buf);
}

/* max |a - b| / max |b| over n logits. */
static double rel_err(const float *a, const float *b, int n) {
  double max_ref = 0, max_err = 0;
  for (int i = 0; i < n; i++) {
    max_ref = fmax(max_ref, fabs(b[i]));
    max_err = fmax(max_err, fabs((double)a[i] - b[i]));
  }
  return max_err / max_ref;
}

/* Prompt and greedy-step logits and the greedy ids of `name` against llama.cpp's, in both
 * numerics; `exact_tol` bounds the error with llama.cpp's. */
static void check_arch_tol(const char *name, int32_t max_model_len, double exact_tol, const float *golden,
                           const float *golden_steps, const int *golden_ids) {
  static struct arch_run r;
  const enum llama_matmul_mode mm[2] = {LLAMA_MATMUL_GGML, LLAMA_MATMUL_PACKED};
  const enum llama_attention_order ao[2] = {LLAMA_ATTENTION_ORDER_LLAMACPP, LLAMA_ATTENTION_ORDER_BATCH_INVARIANT};
  const double tol[2] = {exact_tol, 0.05};
  for (int mode = 0; mode < 2; mode++) {
    run_arch(name, mm[mode], ao[mode], max_model_len, &r);
    const double prompt = rel_err(r.prompt, golden, P * V), steps = rel_err(r.steps, golden_steps, G * V);
    fprintf(stderr, "%s vs llama.cpp (%s numerics): max error / max|logit| %.3g on the prompt, %.3g on %d greedy "
            "steps\n", name, mode == 0 ? "llama.cpp" : "packed", prompt, steps, G);
    assert_true(prompt < tol[mode]);
    assert_true(steps < tol[mode]);
    for (int k = 0; k < G; k++) assert_int_equal(r.ids[k], golden_ids[k]);
  }
}

#define CHECK_ARCH(name) check_arch_tol(#name, 0, 1e-4, golden_##name, golden_##name##_decode, golden_##name##_greedy)

static void test_llama_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(llama);
}

static void test_llama3_rope_frequency_factors_match_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(llama3);
  /* the factors matter: "llama3" is "llama" (same weights) plus rope_freqs.weight */
  const double without = rel_err(golden_llama3, golden_llama, P * V);
  fprintf(stderr, "llama3 vs the same weights without frequency factors: %.3g\n", without);
  assert_true(without > 1e-2);
}

static void test_qwen2_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(qwen2);
}

static void test_qwen3_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(qwen3);
}

static void test_phi3_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(phi3);
}

static void test_gemma_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(gemma);
}

/* Mistral: llama's weights with a window of W keys, run 5x past it (no context cap at the
 * window); llama.cpp's reference attends only the last W keys (see gen_arch_golden.c). */
static void test_mistral_sliding_window_beyond_the_window_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(mistral);
  /* positions inside the window equal llama's, those past it do not */
  const double inside = rel_err(golden_mistral, golden_llama, W * V);
  const double past = rel_err(golden_mistral + W * V, golden_llama + W * V, (P - W) * V);
  fprintf(stderr, "mistral vs the same weights without a window: %.3g inside it, %.3g past it\n", inside, past);
  assert_true(inside < 1e-4);
  assert_true(past > 1e-2);
}

/* gemma2: post norms, attention and final soft-capping, a sliding layer 0 and a global layer 1. */
static void test_gemma2_matches_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(gemma2);
  /* the final cap binds: every logit within (-3, 3) */
  for (int i = 0; i < P * V; i++) assert_true(fabsf(golden_gemma2[i]) < 3.0f);
}

/* gemma3: q/k norms, layers 0-4 sliding with the local RoPE base, layer 5 global with the
 * file's base and linear scaling. Within 1e-3: over 6 layers ggml's fp16 GELU table turns the
 * last-bit differences of F32 matmul sums (2e-7 of max|logit| on 2-layer models) into fp16
 * steps of single gate values; measured 2.1e-4 (a 6-layer gemma2 measured 1.2e-4, its 2-layer
 * model 1.1e-6), greedy ids equal. */
static void test_gemma3_matches_llama_cpp(void **state) {
  (void)state;
  check_arch_tol("gemma3", 0, 1e-3, golden_gemma3, golden_gemma3_decode, golden_gemma3_greedy);
}

/* phi3 LongRoPE with the long factors (original context 32 < 128) and its attention factor;
 * the file's sliding window is ignored, as llama.cpp does. */
static void test_phi3_longrope_long_factors_match_llama_cpp(void **state) {
  (void)state;
  CHECK_ARCH(phi3_longrope);
  const double plain = rel_err(golden_phi3_longrope, golden_phi3, P * V);
  fprintf(stderr, "phi3 LongRoPE vs the same weights without it: %.3g\n", plain);
  assert_true(plain > 1e-2);
}

/* The short factors when the engine's context (max_model_len 256, llama.cpp's n_ctx of 128
 * padded to 256) does not exceed the original 256; the long ones for the file's 4096. */
static void test_phi3_longrope_short_factors_up_to_the_original_context(void **state) {
  (void)state;
  check_arch_tol("phi3_longrope_short", 256, 1e-4, golden_phi3_longrope_short, golden_phi3_longrope_short_decode,
                 golden_phi3_longrope_short_greedy);
  static struct arch_run r;
  run_arch("phi3_longrope_short", LLAMA_MATMUL_GGML, LLAMA_ATTENTION_ORDER_LLAMACPP, 0, &r);
  const double long_set = rel_err(r.prompt, golden_phi3_longrope_short, P * V);
  fprintf(stderr, "phi3 LongRoPE at the file's context 4096 (long factors) vs the short golden: %.3g\n", long_set);
  assert_true(long_set > 1e-2);
}

/* Rows of input_embeds (an image's embeddings) enter gemma3 as they are, token rows times
 * sqrt(E) (llama.cpp's build_gemma3); gemma and gemma2 scale every row. So a row holding a
 * token's embedding times 8 (sqrt(64), exact) gives that token's logits in gemma3, and the bare
 * embedding does in gemma2. */
static void check_embeds_row(const char *name, float row_scale) {
  void *buf = NULL;
  size_t size = 0;
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  struct llama_kv_cache *kv = NULL;
  struct llama_forward_ctx *fc = NULL;
  assert_int_equal(arch_model_write(name, &buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(buf, size, &f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(f, &m), LLB_STATUS_OK);
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create(m, P, 1, &fc), LLB_STATUS_OK);
  const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
  assert_non_null(te);
  enum { E = 64, ROW = 5 };
  static float embeds[P * E], with_tokens[P * V], with_row[P * V];
  int32_t ids[P], pos[P], li[P], qsl[2] = {0, P}, lens[1] = {P}, table[NB] = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t slots[P];
  uint8_t mask[P] = {0};
  for (int i = 0; i < P; i++) ids[i] = ARCH_MODEL_PROMPT_IDS[i], pos[i] = li[i] = i, slots[i] = i;
  const float *table_rows = te->data;
  for (int d = 0; d < E; d++) embeds[ROW * E + d] = table_rows[(size_t)ids[ROW] * E + d] * row_scale;
  mask[ROW] = 1;
  struct llama_batch b = {.num_tokens = P, .token_ids = ids, .positions = pos, .slot_mapping = slots, .num_seqs = 1,
                          .query_start_loc = qsl, .seq_lens = lens, .block_tables = table, .max_blocks_per_seq = NB,
                          .num_logits = P, .logits_indices = li};
  assert_int_equal(llama_forward(fc, kv, &b, with_tokens), LLB_STATUS_OK);
  b.input_embeds = embeds;
  b.embeds_mask = mask;
  assert_int_equal(llama_forward(fc, kv, &b, with_row), LLB_STATUS_OK);
  assert_memory_equal(with_tokens, with_row, sizeof with_tokens);
  llama_forward_ctx_destroy(fc);
  llama_kv_cache_destroy(kv);
  llama_model_destroy(m);
  gguf_close(f);
  free(buf);
}

static void test_gemma3_does_not_scale_input_embeds_rows(void **state) {
  (void)state;
  check_embeds_row("gemma3", 8.0f);
  check_embeds_row("gemma2", 1.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama_matches_llama_cpp),
      cmocka_unit_test(test_llama3_rope_frequency_factors_match_llama_cpp),
      cmocka_unit_test(test_qwen2_matches_llama_cpp),
      cmocka_unit_test(test_qwen3_matches_llama_cpp),
      cmocka_unit_test(test_phi3_matches_llama_cpp),
      cmocka_unit_test(test_gemma_matches_llama_cpp),
      cmocka_unit_test(test_mistral_sliding_window_beyond_the_window_matches_llama_cpp),
      cmocka_unit_test(test_gemma2_matches_llama_cpp),
      cmocka_unit_test(test_gemma3_matches_llama_cpp),
      cmocka_unit_test(test_phi3_longrope_long_factors_match_llama_cpp),
      cmocka_unit_test(test_phi3_longrope_short_factors_up_to_the_original_context),
      cmocka_unit_test(test_gemma3_does_not_scale_input_embeds_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
