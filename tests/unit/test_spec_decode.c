/* Speculative decoding's pure parts: the n-gram proposer (actors/gpu_worker/ngram_proposer.c,
 * vLLM v1 ngram_proposer.py semantics) and the rejection sampler (rejection_sampler.c +
 * sampler_verify_draft, vLLM v1 rejection_sampler.py with a one-hot draft distribution):
 * greedy verification gives exactly the tokens of sampling the rows one by one; random
 * verification gives tokens distributed as the target (chi-square over a small vocabulary). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "actors/gpu_worker/ngram_proposer.h"
#include "model/sampling/rejection_sampler.h"
#include "model/sampling/sampler.h"

/* ---- proposer ---- */

static void test_proposer_copies_what_followed_the_last_ngram(void **state) {
  (void)state;
  const struct ngram_proposer_config c = {.num_speculative_tokens = 2, .prompt_lookup_min = 2, .prompt_lookup_max = 2};
  const int32_t t[] = {1, 2, 3, 4, 1, 2, 3};
  int32_t out[8] = {0};
  assert_int_equal(ngram_propose(&c, t, 7, 8, out), 2);
  assert_int_equal(out[0], 4);
  assert_int_equal(out[1], 1);
  /* max_drafts below K caps it; the end of the sequence caps it too */
  assert_int_equal(ngram_propose(&c, t, 7, 1, out), 1);
  const int32_t u[] = {5, 6, 7, 5, 6};
  const struct ngram_proposer_config c5 = {.num_speculative_tokens = 5, .prompt_lookup_min = 2, .prompt_lookup_max = 2};
  assert_int_equal(ngram_propose(&c5, u, 5, 8, out), 3); /* 7, 5, 6: up to the end */
  assert_int_equal(out[0], 7);
  assert_int_equal(out[2], 6);
}

static void test_proposer_prefers_the_longest_ngram_then_the_first_match(void **state) {
  (void)state;
  const struct ngram_proposer_config c = {.num_speculative_tokens = 1, .prompt_lookup_min = 1, .prompt_lookup_max = 3};
  /* last 3 tokens 8 9 4 occur once at 4..6 (followed by 11); "4" alone occurs first at 0 (followed by 10) */
  const int32_t t[] = {4, 10, 7, 7, 8, 9, 4, 11, 8, 9, 4};
  int32_t out[4] = {0};
  assert_int_equal(ngram_propose(&c, t, 11, 4, out), 1);
  assert_int_equal(out[0], 11);
  /* two matches of the same 1-gram: the first one wins */
  const int32_t v[] = {3, 20, 3, 21, 3};
  const struct ngram_proposer_config c1 = {.num_speculative_tokens = 1, .prompt_lookup_min = 1, .prompt_lookup_max = 1};
  assert_int_equal(ngram_propose(&c1, v, 5, 4, out), 1);
  assert_int_equal(out[0], 20);
}

static void test_proposer_finds_nothing_without_a_repeat_or_when_off(void **state) {
  (void)state;
  const struct ngram_proposer_config c = {.num_speculative_tokens = 3, .prompt_lookup_min = 2, .prompt_lookup_max = 4};
  const int32_t t[] = {1, 2, 3, 4, 5, 6, 7};
  int32_t out[4];
  assert_int_equal(ngram_propose(&c, t, 7, 4, out), 0);
  assert_int_equal(ngram_propose(&c, t, 1, 4, out), 0); /* shorter than every n */
  const struct ngram_proposer_config off = {0};
  const int32_t r[] = {1, 1, 1, 1};
  assert_int_equal(ngram_propose(&off, r, 4, 4, out), 0);
  assert_int_equal(ngram_proposer_config_check(&off), LLB_STATUS_OK);
  const struct ngram_proposer_config bad = {.num_speculative_tokens = 2, .prompt_lookup_min = 3, .prompt_lookup_max = 2};
  assert_int_equal(ngram_proposer_config_check(&bad), LLB_STATUS_INVALID_ARGUMENT);
}

/* ---- rejection sampler ---- */

#define V 64
#define D 5

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void test_greedy_verification_equals_sampling_row_by_row(void **state) {
  (void)state;
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(V, &s), LLB_STATUS_OK);
  uint64_t seed = 42;
  for (int trial = 0; trial < 200; trial++) {
    struct sampler_params p;
    sampler_params_init(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = trial % 2 ? 1.3f : 1.0f; /* drafts change the later rows' penalties */
    p.frequency_penalty = trial % 3 ? 0.0f : 0.5f;
    float logits[(D + 1) * V], copy[(D + 1) * V];
    for (int i = 0; i < (D + 1) * V; i++) logits[i] = (float)(rng_next(&seed) % 1000) / 100.0f - 5.0f;
    memcpy(copy, logits, sizeof logits);
    int32_t tokens[64] = {3, 9, 27, 5, 7}; /* prompt 3, outputs 2 */
    int32_t ref_tokens[64];
    memcpy(ref_tokens, tokens, sizeof tokens);
    /* the reference: row by row with the previous rows' tokens as outputs */
    int32_t ref[D + 1];
    for (int j = 0; j <= D; j++) {
      struct sampler_result r;
      assert_int_equal(sampler_sample(s, &p, copy + j * V, ref_tokens, 3, ref_tokens + 3, 2 + j, 0, 2 + j, &r),
                       LLB_STATUS_OK);
      ref[j] = ref_tokens[5 + j] = r.token_id;
    }
    /* drafts: right for a random prefix, then one wrong */
    int32_t drafts[D], good = (int32_t)(rng_next(&seed) % (D + 1));
    for (int j = 0; j < D; j++) drafts[j] = j < good ? ref[j] : (ref[j] + 1) % V;
    struct sampler_result res[D + 1];
    int32_t num_out = 0;
    const struct rejection_sample_input in = {.params = &p, .logits = logits, .token_ids = tokens,
                                              .num_prompt_tokens = 3, .num_tokens = 5, .drafts = drafts,
                                              .num_drafts = D};
    assert_int_equal(rejection_sample(s, &in, res, &num_out), LLB_STATUS_OK);
    assert_int_equal(num_out, good < D ? good + 1 : D + 1); /* accepted + the correction or the bonus */
    for (int j = 0; j < num_out; j++) {
      assert_int_equal(res[j].token_id, ref[j]);
      assert_int_equal(tokens[5 + j], ref[j]);
    }
  }
  sampler_destroy(s);
}

/* Chi-square of the observed counts of the first output token against the target's
 * distribution p (after temperature and top-k), over N verifications with a fixed seed (each
 * at its own output position, so each draws from its own Philox block). */
static double chi_square_first_token(struct sampler *s, const struct sampler_params *p, const float *row8,
                                     const double *target, int32_t draft, int N, int *zero_prob_hits) {
  int64_t counts[8] = {0};
  for (int n = 0; n < N; n++) {
    float logits[2 * 8];
    memcpy(logits, row8, 8 * sizeof(float));
    memcpy(logits + 8, row8, 8 * sizeof(float));
    int32_t tokens[16] = {1};
    int32_t drafts[1] = {draft};
    struct sampler_result res[2];
    int32_t num_out = 0;
    /* position n: one prompt token, n outputs "before" (never read: no penalties) */
    const struct rejection_sample_input in = {.params = p, .logits = logits, .token_ids = tokens,
                                              .num_prompt_tokens = 1, .num_tokens = 1, .drafts = drafts,
                                              .num_drafts = 1};
    struct sampler_params q = *p;
    q.seed = p->seed + (uint64_t)n; /* a fixed family of seeds */
    struct rejection_sample_input in2 = in;
    in2.params = &q;
    assert_int_equal(rejection_sample(s, &in2, res, &num_out), LLB_STATUS_OK);
    counts[res[0].token_id]++;
  }
  double chi = 0.0;
  *zero_prob_hits = 0;
  for (int t = 0; t < 8; t++) {
    if (target[t] == 0.0) {
      *zero_prob_hits += (int)counts[t];
      continue;
    }
    double e = target[t] * N;
    chi += ((double)counts[t] - e) * ((double)counts[t] - e) / e;
  }
  return chi;
}

static void test_random_verification_keeps_the_target_distribution(void **state) {
  (void)state;
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(8, &s), LLB_STATUS_OK);
  const float row[8] = {1.0f, 0.2f, 2.0f, -1.0f, 0.7f, 1.5f, -0.3f, 0.0f};
  struct sampler_params p;
  sampler_params_init(&p);
  p.temperature = 0.8f;
  p.top_k = 6; /* tokens 3 and 6 (the two smallest) have probability 0 */
  p.seed = 1234;
  double target[8], z = 0.0;
  for (int t = 0; t < 8; t++) z += (target[t] = (t == 3 || t == 6) ? 0.0 : exp(row[t] / 0.8));
  for (int t = 0; t < 8; t++) target[t] /= z;
  const int N = 40000;
  /* 5 free categories (6 kept - 1): chi-square 0.999 quantile is 20.5 */
  int zero = 0;
  for (int32_t draft = 0; draft < 8; draft++) { /* a likely, an unlikely and a filtered-out draft */
    double chi = chi_square_first_token(s, &p, row, target, draft, N, &zero);
    assert_int_equal(zero, 0);
    if (chi >= 20.5) fail_msg("draft %d: chi-square %.2f >= 20.5", draft, chi);
  }
  /* the test has power: a sampler that always accepted the draft would fail it */
  double biased[8];
  memcpy(biased, target, sizeof biased);
  biased[2] = target[2] * 0.9;
  biased[0] = target[0] + target[2] * 0.1;
  double chi = chi_square_first_token(s, &p, row, biased, 2, N, &zero);
  assert_true(chi >= 20.5);
  sampler_destroy(s);
}

static void test_draft_outside_the_vocabulary_is_refused(void **state) {
  (void)state;
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(8, &s), LLB_STATUS_OK);
  struct sampler_params p;
  sampler_params_init(&p);
  float row[8] = {0};
  bool acc;
  struct sampler_result r;
  assert_int_equal(sampler_verify_draft(s, &p, row, NULL, 0, NULL, 0, 0, 0, 8, &acc, &r), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(sampler_verify_draft(s, &p, row, NULL, 0, NULL, 0, 0, 0, -1, &acc, &r), LLB_STATUS_INVALID_ARGUMENT);
  sampler_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proposer_copies_what_followed_the_last_ngram),
      cmocka_unit_test(test_proposer_prefers_the_longest_ngram_then_the_first_match),
      cmocka_unit_test(test_proposer_finds_nothing_without_a_repeat_or_when_off),
      cmocka_unit_test(test_greedy_verification_equals_sampling_row_by_row),
      cmocka_unit_test(test_random_verification_keeps_the_target_distribution),
      cmocka_unit_test(test_draft_outside_the_vocabulary_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
