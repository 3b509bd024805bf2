/* Each architecture the CPU forward runs (llama, qwen2, qwen3) against llama.cpp itself: the
 * tiny random models of tests/unit/arch_models.h, the same prompt, logits of every position
 * compared with the ones llama.cpp computed on the same file (tests/unit/data/arch_golden.inc,
 * made by tests/tools/gen_arch_golden.c). With llama.cpp's numerics (matmul GGML, attention
 * order LLAMACPP) within 1e-4 of max|logit| (F32 weights: only float summation order may
 * differ); with the engine's packed numerics within 5% (F32 weights have no packed layout,
 * so both runs take the same path here). "llama3" is "llama" with Llama 3.x's
 * rope_freqs.weight: their reference logits differ by 2.6%, far beyond the tolerance, so the
 * frequency factors are what is checked there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/gguf.h"
#include "tests/unit/arch_models.h"

#include "tests/unit/data/arch_golden.inc"

enum { P = ARCH_MODEL_PROMPT, V = ARCH_MODEL_VOCAB, BS = 16, NB = 8 };

/* Prefill logits [P * V] of `arch` with the given numerics. */
static void run_arch(const char *arch, enum llama_matmul_mode mm, enum llama_attention_order ao, float *logits) {
  void *buf = NULL;
  size_t size = 0;
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  struct llama_kv_cache *kv = NULL;
  struct llama_forward_ctx *fc = NULL;
  assert_int_equal(arch_model_write(arch, &buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(buf, size, &f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(f, &m), LLB_STATUS_OK);
  assert_int_equal(llama_kv_cache_create(m, NB, BS, &kv), LLB_STATUS_OK);
  const struct llama_forward_options o = {.max_num_tokens = P, .n_threads = 1, .attention_order = ao, .matmul = mm};
  assert_int_equal(llama_forward_ctx_create_opts(m, &o, &fc), LLB_STATUS_OK);
  int32_t ids[P], pos[P], li[P], qsl[2] = {0, P}, lens[1] = {P}, table[NB] = {3, 0, 1, 2, 4, 5, 6, 7};
  int64_t slots[P];
  for (int i = 0; i < P; i++) {
    ids[i] = ARCH_MODEL_PROMPT_IDS[i];
    pos[i] = i;
    li[i] = i;
    slots[i] = (int64_t)table[i / BS] * BS + i % BS;
  }
  const struct llama_batch b = {.num_tokens = P, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                .max_blocks_per_seq = NB, .num_logits = P, .logits_indices = li};
  assert_int_equal(llama_forward(fc, kv, &b, logits), LLB_STATUS_OK);
  llama_forward_ctx_destroy(fc);
  llama_kv_cache_destroy(kv);
  llama_model_destroy(m);
  gguf_close(f);
  free(buf);
}

/* max |a - b| / max |b| over P * V logits. */
static double rel_err(const float *a, const float *b) {
  double max_ref = 0, max_err = 0;
  for (int i = 0; i < P * V; i++) {
    max_ref = fmax(max_ref, fabs(b[i]));
    max_err = fmax(max_err, fabs((double)a[i] - b[i]));
  }
  return max_err / max_ref;
}

static void check_arch(const char *arch, const float *golden) {
  static float got[P * V];
  run_arch(arch, LLAMA_MATMUL_GGML, LLAMA_ATTENTION_ORDER_LLAMACPP, got);
  const double exact = rel_err(got, golden);
  run_arch(arch, LLAMA_MATMUL_PACKED, LLAMA_ATTENTION_ORDER_BATCH_INVARIANT, got);
  const double packed = rel_err(got, golden);
  fprintf(stderr, "%s vs llama.cpp: max error / max|logit| %.3g (llama.cpp numerics), %.3g (packed)\n", arch,
          exact, packed);
  assert_true(exact < 1e-4);
  assert_true(packed < 0.05);
}

static void test_llama_matches_llama_cpp(void **state) {
  (void)state;
  check_arch("llama", golden_llama);
}

static void test_llama3_rope_frequency_factors_match_llama_cpp(void **state) {
  (void)state;
  check_arch("llama3", golden_llama3);
  /* the factors matter: "llama3" is "llama" (same weights) plus rope_freqs.weight, and
   * llama.cpp's logits of the two differ by far more than the 1e-4 allowed above, so a
   * forward that ignored the factors would fail */
  const double without = rel_err(golden_llama3, golden_llama);
  fprintf(stderr, "llama3 vs the same weights without frequency factors: %.3g\n", without);
  assert_true(without > 1e-2);
}

static void test_qwen2_matches_llama_cpp(void **state) {
  (void)state;
  check_arch("qwen2", golden_qwen2);
}

static void test_qwen3_matches_llama_cpp(void **state) {
  (void)state;
  check_arch("qwen3", golden_qwen3);
}

static void test_phi3_matches_llama_cpp(void **state) {
  (void)state;
  check_arch("phi3", golden_phi3);
}

static void test_gemma_matches_llama_cpp(void **state) {
  (void)state;
  check_arch("gemma", golden_gemma);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama_matches_llama_cpp),
      cmocka_unit_test(test_llama3_rope_frequency_factors_match_llama_cpp),
      cmocka_unit_test(test_qwen2_matches_llama_cpp),
      cmocka_unit_test(test_qwen3_matches_llama_cpp),
      cmocka_unit_test(test_phi3_matches_llama_cpp),
      cmocka_unit_test(test_gemma_matches_llama_cpp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
