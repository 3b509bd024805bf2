/* Sampler (model/sampling/sampler.c): greedy, filters, penalties, seeded draws, logprobs.
 *
 * Filters are checked through the public API: a filter's kept set is the set of tokens drawn
 * over many output positions, with logits chosen so that every kept token has probability
 * >= 0.05 (missing one in 2,000 draws has probability < 1e-40) — any token outside the set
 * fails at once. Draws are deterministic (fixed seeds), so none of this is flaky. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "model/sampling/sampler.h"

#define BIG_VOCAB 49152

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform float in [lo, hi) from a fixed stream: never all-zero data. */
static void fill_random(float *v, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = 0; i < n; i++)
    v[i] = lo + (hi - lo) * (float)((double)(splitmix64(&seed) >> 11) * 0x1.0p-53);
}

static struct sampler_params params_default(void) {
  struct sampler_params p;
  sampler_params_init(&p);
  p.seed = 42;
  return p;
}

static int32_t sample_once(struct sampler *s, const struct sampler_params *p,
                           const float *logits, int32_t vocab, uint32_t stream, int64_t pos) {
  float *row = malloc((size_t)vocab * sizeof *row);
  assert_non_null(row);
  memcpy(row, logits, (size_t)vocab * sizeof *row);
  struct sampler_result r;
  assert_int_equal(sampler_sample(s, p, row, NULL, 0, NULL, 0, stream, pos, &r), LLB_STATUS_OK);
  free(row);
  return r.token_id;
}

/* Marks in seen[vocab] every token drawn over `draws` output positions. */
static void drawn_set(const struct sampler_params *p, const float *logits, int32_t vocab,
                      int draws, bool *seen) {
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(vocab, &s), LLB_STATUS_OK);
  memset(seen, 0, (size_t)vocab * sizeof *seen);
  for (int i = 0; i < draws; i++) seen[sample_once(s, p, logits, vocab, 0, i)] = true;
  sampler_destroy(s);
}

static void assert_drawn_set(const struct sampler_params *p, const float *logits,
                             int32_t vocab, const bool *expect) {
  bool seen[64];
  assert_true(vocab <= 64);
  drawn_set(p, logits, vocab, 2000, seen);
  for (int32_t i = 0; i < vocab; i++) {
    if (seen[i] != expect[i]) fail_msg("token %d: drawn=%d expected kept=%d", i, seen[i], expect[i]);
  }
}

/* ---- generator ------------------------------------------------------------------------- */

static void test_philox_matches_random123_known_answers(void **state) {
  (void)state;
  /* Random123 tests/kat_vectors, the three "philox4x32 10" lines: ctr[4] key[2] -> out[4]. */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int v = 0; v < 3; v++) {
    uint32_t out[4];
    sampler_philox4x32_10(&kat[v][0], &kat[v][4], out);
    for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[v][6 + j]);
  }
}

static void test_uniform_is_in_unit_interval_and_depends_on_every_key_part(void **state) {
  (void)state;
  double sum = 0.0;
  for (int64_t pos = 0; pos < 10000; pos++) {
    double u = sampler_uniform(7, 0, pos);
    assert_true(u >= 0.0 && u < 1.0);
    sum += u;
  }
  assert_true(fabs(sum / 10000 - 0.5) < 0.02);
  double base = sampler_uniform(7, 3, 11);
  assert_true(base == sampler_uniform(7, 3, 11));
  assert_true(base != sampler_uniform(8, 3, 11));
  assert_true(base != sampler_uniform(7, 4, 11));
  assert_true(base != sampler_uniform(7, 3, 12));
  assert_true(base != sampler_uniform(7ull | (1ull << 40), 3, 11)); /* high seed bits count */
  assert_true(sampler_uniform(7, 3, 11) != sampler_uniform(7, 3, 11 + (1ll << 33)));
}

static void test_fast_exp_matches_expf(void **state) {
  (void)state;
  double worst = 0.0;
  for (int i = 0; i <= 870000; i++) {
    float x = -87.0f * (float)i / 870000.0f;
    double rel = fabs((double)sampler_exp_nonpos(x) - exp((double)x)) / exp((double)x);
    if (rel > worst) worst = rel;
  }
  if (worst > 3e-7) fail_msg("relative error %.3g", worst);
  assert_float_equal(sampler_exp_nonpos(0.0f), 1.0f, 0.0f);
  assert_float_equal(sampler_exp_nonpos(-INFINITY), 0.0f, 0.0f);
  assert_float_equal(sampler_exp_nonpos(-100.0f), 0.0f, 0.0f);
}

/* ---- greedy ---------------------------------------------------------------------------- */

static void test_greedy_is_argmax_over_big_vocab(void **state) {
  (void)state;
  float *logits = malloc(BIG_VOCAB * sizeof *logits);
  assert_non_null(logits);
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(BIG_VOCAB, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  for (uint64_t trial = 1; trial <= 5; trial++) {
    fill_random(logits, BIG_VOCAB, trial, -20.0f, 20.0f);
    int32_t best = 0;
    for (int32_t i = 1; i < BIG_VOCAB; i++)
      if (logits[i] > logits[best]) best = i;
    for (int64_t pos = 0; pos < 3; pos++) /* seed and position do not matter when greedy */
      assert_int_equal(sample_once(s, &p, logits, BIG_VOCAB, (uint32_t)pos, pos), best);
  }
  sampler_destroy(s);
  free(logits);
}

static void test_greedy_ties_go_to_lowest_id_and_tiny_temperature_is_greedy(void **state) {
  (void)state;
  const float logits[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(6, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  assert_int_equal(sample_once(s, &p, logits, 6, 0, 0), 1);
  p.temperature = 0.5f * SAMPLER_GREEDY_EPS;
  for (int64_t pos = 0; pos < 50; pos++) assert_int_equal(sample_once(s, &p, logits, 6, 0, pos), 1);
  sampler_destroy(s);
}

/* ---- filters --------------------------------------------------------------------------- */

static void test_top_k_keeps_the_k_highest(void **state) {
  (void)state;
  const float logits[8] = {1.0f, 5.0f, 3.0f, 4.0f, 2.0f, 0.0f, 4.5f, -1.0f};
  struct sampler_params p = params_default();
  p.top_k = 3;
  const bool expect[8] = {0, 1, 0, 1, 0, 0, 1, 0};
  assert_drawn_set(&p, logits, 8, expect);
}

static void test_top_k_keeps_ties_at_the_boundary(void **state) {
  (void)state;
  /* vLLM and HF mask logits < the k-th value: both 4.0s survive top_k = 2. */
  const float logits[5] = {5.0f, 4.0f, 4.0f, 1.0f, 0.0f};
  struct sampler_params p = params_default();
  p.top_k = 2;
  const bool expect[5] = {1, 1, 1, 0, 0};
  assert_drawn_set(&p, logits, 5, expect);
}

static void test_top_p_keeps_smallest_prefix_reaching_p(void **state) {
  (void)state;
  const float logits[5] = {logf(0.1f), logf(0.4f), logf(0.2f), logf(0.3f), -INFINITY};
  struct sampler_params p = params_default();
  p.top_p = 0.65f; /* 0.4 (mass above 0) + 0.3 (above 0.4): 0.2 has 0.7 above -> dropped */
  const bool expect_65[5] = {0, 1, 0, 1, 0};
  assert_drawn_set(&p, logits, 5, expect_65);
  p.top_p = 0.75f; /* 0.2 has 0.7 < 0.75 above it -> kept */
  const bool expect_75[5] = {0, 1, 1, 1, 0};
  assert_drawn_set(&p, logits, 5, expect_75);
  p.top_p = 0.3f; /* the top token alone reaches 0.3 */
  const bool expect_30[5] = {0, 1, 0, 0, 0};
  assert_drawn_set(&p, logits, 5, expect_30);
}

static void test_min_p_keeps_tokens_above_fraction_of_max_after_temperature(void **state) {
  (void)state;
  const float logits[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.1f)};
  struct sampler_params p = params_default();
  p.min_p = 0.25f; /* threshold 0.125: 0.1 dropped */
  const bool expect_t1[4] = {1, 1, 1, 0};
  assert_drawn_set(&p, logits, 4, expect_t1);
  p.min_p = 0.5f; /* T = 1: ratios to max 1, .5, .3, .2 -> {0, 1} */
  const bool expect_half[4] = {1, 1, 0, 0};
  assert_drawn_set(&p, logits, 4, expect_half);
  p.temperature = 2.0f; /* ratios become 1, .707, .548, .447: min_p is applied after temperature */
  const bool expect_t2[4] = {1, 1, 1, 0};
  assert_drawn_set(&p, logits, 4, expect_t2);
}

static void test_top_p_renormalizes_after_top_k(void **state) {
  (void)state;
  const float logits[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
  struct sampler_params p = params_default();
  p.top_k = 2;
  p.top_p = 0.5f; /* after top_k: 0.571, 0.429 -> the first alone reaches 0.5 */
  const bool expect[4] = {1, 0, 0, 0};
  assert_drawn_set(&p, logits, 4, expect);
  p.top_k = 0; /* without top_k: 0.4 < 0.5 above the second -> two kept */
  const bool expect_no_k[4] = {1, 1, 0, 0};
  assert_drawn_set(&p, logits, 4, expect_no_k);
}

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

static void test_top_k_and_top_p_select_exact_sets_on_big_vocab(void **state) {
  (void)state;
  float *logits = malloc(BIG_VOCAB * sizeof *logits);
  float *sorted = malloc(BIG_VOCAB * sizeof *sorted);
  bool *seen = malloc(BIG_VOCAB * sizeof *seen);
  assert_true(logits && sorted && seen);
  /* A narrow range keeps every kept token near 1/k likely (1000 draws miss one of 50 with
   * probability < 1e-7; the seed is fixed); distinct values (checked). */
  fill_random(logits, BIG_VOCAB, 99, 0.0f, 0.05f);
  memcpy(sorted, logits, BIG_VOCAB * sizeof *sorted);
  qsort(sorted, BIG_VOCAB, sizeof *sorted, cmp_desc);
  for (int i = 0; i < 61; i++) assert_true(sorted[i] > sorted[i + 1]);

  struct sampler_params p = params_default();
  p.top_k = 40;
  drawn_set(&p, logits, BIG_VOCAB, 1000, seen);
  for (int32_t i = 0; i < BIG_VOCAB; i++)
    if (seen[i] != (logits[i] >= sorted[39])) fail_msg("top_k: token %d wrong", i);

  /* A token is kept while the mass ranked above it is < top_p: half-way between the mass
   * of the top 49 and of the top 50, exactly the top 50 are kept. */
  double z = 0.0, cum49 = 0.0, cum50 = 0.0;
  for (int32_t i = 0; i < BIG_VOCAB; i++) z += exp((double)sorted[i] - sorted[0]);
  for (int i = 0; i < 50; i++) {
    double w = exp((double)sorted[i] - sorted[0]) / z;
    if (i < 49) cum49 += w;
    cum50 += w;
  }
  p.top_k = 0;
  p.top_p = (float)((cum49 + cum50) / 2);
  drawn_set(&p, logits, BIG_VOCAB, 1000, seen);
  for (int32_t i = 0; i < BIG_VOCAB; i++)
    if (seen[i] != (logits[i] >= sorted[49])) fail_msg("top_p: token %d drawn=%d", i, seen[i]);
  free(logits);
  free(sorted);
  free(seen);
}

/* ---- seeded draws ---------------------------------------------------------------------- */

static void test_seeded_draws_do_not_depend_on_call_order_or_other_streams(void **state) {
  (void)state;
  enum { V = 32, N = 200 };
  float logits[V];
  fill_random(logits, V, 5, -1.0f, 1.0f);
  struct sampler *s = NULL, *other = NULL;
  assert_int_equal(sampler_create(V, &s), LLB_STATUS_OK);
  assert_int_equal(sampler_create(V, &other), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.seed = 1234567;
  int32_t forward[N], backward[N];
  for (int i = 0; i < N; i++) forward[i] = sample_once(s, &p, logits, V, 0, i);
  struct sampler_params q = p;
  q.seed = 99;
  for (int i = N - 1; i >= 0; i--) {
    /* Interleave draws of other seeds and streams, as a batch would. */
    (void)sample_once(s, &q, logits, V, 0, i);
    (void)sample_once(s, &p, logits, V, 1, i);
    backward[i] = sample_once(i % 2 ? s : other, &p, logits, V, 0, i);
  }
  assert_memory_equal(forward, backward, sizeof forward);
  /* Different seeds and streams give different sequences. */
  int same_seed = 0, same_stream = 0;
  for (int i = 0; i < N; i++) {
    same_seed += forward[i] == sample_once(s, &q, logits, V, 0, i);
    same_stream += forward[i] == sample_once(s, &p, logits, V, 1, i);
  }
  assert_true(same_seed < N / 4);
  assert_true(same_stream < N / 4);
  sampler_destroy(s);
  sampler_destroy(other);
}

/* Chi-square of 20,000 draws (positions 0..19999) against `expect` [k] probabilities.
 * df <= 7; bound 40 is beyond the 1.3e-6 tail at df 7, so only a wrong
 * distribution fails, and draws are fixed by the seed anyway. */
static double chi_square(const struct sampler_params *p, const float *logits, int32_t v,
                         const double *expect) {
  enum { DRAWS = 20000 };
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(v, &s), LLB_STATUS_OK);
  int counts[16] = {0};
  assert_true(v <= 16);
  for (int i = 0; i < DRAWS; i++) counts[sample_once(s, p, logits, v, 0, i)]++;
  sampler_destroy(s);
  double chi2 = 0.0;
  for (int32_t i = 0; i < v; i++) {
    if (expect[i] == 0.0) {
      assert_int_equal(counts[i], 0);
      continue;
    }
    double e = expect[i] * DRAWS;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

static void test_draws_follow_softmax_of_logits_over_temperature(void **state) {
  (void)state;
  const float logits[8] = {0.3f, -1.2f, 2.0f, 0.0f, 1.1f, -0.4f, 0.9f, -2.5f};
  struct sampler_params p = params_default();
  p.seed = 2024;
  const float temps[3] = {0.7f, 1.0f, 1.8f};
  for (int t = 0; t < 3; t++) {
    p.temperature = temps[t];
    double e[8], z = 0.0;
    for (int i = 0; i < 8; i++) z += e[i] = exp((double)logits[i] / temps[t]);
    for (int i = 0; i < 8; i++) e[i] /= z;
    double chi2 = chi_square(&p, logits, 8, e);
    if (chi2 > 40.0) fail_msg("T=%g: chi2 %.2f > 40", temps[t], chi2);
  }
  /* A wrong temperature must fail the same check (the test can fail). */
  p.temperature = 1.0f;
  double e[8], z = 0.0;
  for (int i = 0; i < 8; i++) z += e[i] = exp((double)logits[i] / 0.7);
  for (int i = 0; i < 8; i++) e[i] /= z;
  assert_true(chi_square(&p, logits, 8, e) > 200.0);
}

static void test_draws_follow_renormalized_distribution_after_filters(void **state) {
  (void)state;
  const float logits[8] = {0.3f, -1.2f, 2.0f, 0.0f, 1.1f, -0.4f, 0.9f, -2.5f};
  struct sampler_params p = params_default();
  p.seed = 77;
  p.top_k = 5; /* keeps 2.0, 1.1, 0.9, 0.3, 0.0 */
  p.top_p = 0.8f;
  double w[8] = {0}, z = 0.0;
  const int kept_k[5] = {2, 4, 6, 0, 3};
  for (int j = 0; j < 5; j++) z += w[kept_k[j]] = exp((double)logits[kept_k[j]]);
  /* top_p over the renormalized five: keep while the mass above is < 0.8. */
  double above = 0.0, e[8] = {0}, ez = 0.0;
  for (int j = 0; j < 5 && above < 0.8; j++) {
    e[kept_k[j]] = w[kept_k[j]];
    ez += w[kept_k[j]];
    above += w[kept_k[j]] / z;
  }
  for (int i = 0; i < 8; i++) e[i] /= ez;
  double chi2 = chi_square(&p, logits, 8, e);
  if (chi2 > 40.0) fail_msg("chi2 %.2f > 40", chi2);
}

/* ---- against a plain reference ---------------------------------------------------------- */

struct ref_cand {
  float w;
  int32_t id;
};

static int ref_cmp(const void *a, const void *b) { /* weight descending, then id ascending */
  const struct ref_cand *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* sampler.h's steps written the plain way (loops, qsort, sums in order): the greedy argmax,
 * candidates in id order (min_p, top_k with ties kept), weights by sampler_exp_nonpos, top_p
 * over the sorted weights, one inverse-CDF walk (id order, or descending after top_p). */
static int32_t reference_token(const float *logits, int32_t V, const struct sampler_params *p, uint32_t stream,
                               int64_t pos, struct ref_cand *c, float *tmp) {
  int32_t best = 0;
  for (int32_t i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
  if (p->temperature < SAMPLER_GREEDY_EPS) return best;
  const float max_scaled = logits[best] / p->temperature;
  const float min_scaled = p->min_p > 0.0f ? max_scaled + logf(p->min_p) : -INFINITY;
  int64_t n = 0;
  for (int32_t i = 0; i < V; i++) {
    const float x = logits[i] / p->temperature;
    if (x != -INFINITY && x >= min_scaled) c[n++] = (struct ref_cand){x, i};
  }
  if (p->top_k > 0 && p->top_k < n) {
    for (int64_t i = 0; i < n; i++) tmp[i] = c[i].w;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_desc);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
      if (c[i].w >= tmp[p->top_k - 1]) c[m++] = c[i];
    n = m;
  }
  double total = 0.0;
  for (int64_t i = 0; i < n; i++) total += c[i].w = sampler_exp_nonpos(c[i].w - max_scaled);
  if (p->top_p < 1.0f) {
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    const double limit = (double)p->top_p * total;
    double cum = 0.0;
    int64_t m = 0;
    while (m < n && cum < limit) cum += c[m++].w;
    n = m, total = cum;
  }
  const double target = sampler_uniform(p->seed, stream, pos) * total;
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++)
    if ((acc += c[i].w) > target) return c[i].id;
  return c[n - 1].id;
}

/* Rows of real-looking logits (a normal bulk, a few far above it; coarse grids for ties; a
 * share at -inf as a grammar leaves them) over vocabularies with and without a short last
 * block, every filter alone and together: the sampler's token equals the reference's in every
 * draw. The two add the weights in different orders, so a draw within ~1e-15 of a boundary
 * could differ; none does at these sizes (fixed seeds). */
static void test_tokens_match_a_plain_reference(void **state) {
  (void)state;
  static const int32_t vocabs[] = {49152, 1001, 37};
  static const struct {
    float temperature, top_p, min_p;
    int32_t top_k;
  } grid[] = {{0.0f, 1.0f, 0.0f, 0},  {1.0f, 1.0f, 0.0f, 0},   {0.7f, 0.9f, 0.0f, 0},  {1.0f, 0.95f, 0.0f, 0},
              {1.5f, 0.99f, 0.0f, 0}, {1.0f, 1.0f, 0.0f, 40},  {0.8f, 0.95f, 0.0f, 50}, {1.0f, 1.0f, 0.0f, 100},
              {1.0f, 1.0f, 0.05f, 0}, {1.2f, 0.9f, 0.02f, 20}, {1.0f, 0.5f, 0.0f, 1}};
  for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
    const int32_t V = vocabs[v];
    float *logits = malloc((size_t)V * sizeof *logits), *row = malloc((size_t)V * sizeof *row);
    float *tmp = malloc((size_t)V * sizeof *tmp);
    struct ref_cand *c = malloc((size_t)V * sizeof *c);
    struct sampler *s = NULL;
    assert_true(logits && row && tmp && c);
    assert_int_equal(sampler_create(V, &s), LLB_STATUS_OK);
    int mismatches = 0, draws = 0;
    for (uint64_t r = 0; r < 12; r++) {
      uint64_t x = 1000 + r * 7 + (uint64_t)v;
      for (int32_t i = 0; i < V; i++) { /* Box-Muller: a normal bulk of sd 2.5 */
        const double u1 = ((double)(splitmix64(&x) >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = (double)(splitmix64(&x) >> 11) * 0x1.0p-53;
        logits[i] = (float)(2.5 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        if (r % 3 == 1) logits[i] = roundf(logits[i] * 2.0f) / 2.0f; /* ties */
        if (r % 4 == 3 && splitmix64(&x) % 3 == 0) logits[i] = -INFINITY;
      }
      for (int j = 0; j < 8; j++) logits[splitmix64(&x) % (uint64_t)V] = 8.0f + (float)j * (float)(r % 5);
      for (size_t g = 0; g < sizeof grid / sizeof grid[0]; g++) {
        struct sampler_params p = params_default();
        p.temperature = grid[g].temperature, p.top_p = grid[g].top_p, p.min_p = grid[g].min_p, p.top_k = grid[g].top_k;
        p.seed = 17 + r;
        for (int64_t pos = 0; pos < 6; pos++, draws++) {
          memcpy(row, logits, (size_t)V * sizeof *row);
          struct sampler_result res;
          assert_int_equal(sampler_sample(s, &p, row, NULL, 0, NULL, 0, (uint32_t)g, pos, &res), LLB_STATUS_OK);
          const int32_t want = reference_token(logits, V, &p, (uint32_t)g, pos, c, tmp);
          if (res.token_id != want && mismatches++ < 5)
            print_message("V %d row %d T %g top_p %g min_p %g top_k %d pos %d: %d, reference %d\n", (int)V, (int)r,
                          p.temperature, p.top_p, p.min_p, (int)p.top_k, (int)pos, (int)res.token_id, (int)want);
        }
      }
    }
    if (mismatches) fail_msg("%d of %d draws differ from the reference (vocab %d)", mismatches, draws, (int)V);
    sampler_destroy(s);
    free(logits), free(row), free(tmp), free(c);
  }
}

/* ---- penalties ------------------------------------------------------------------------- */

static void test_repetition_penalty_divides_positive_and_multiplies_negative(void **state) {
  (void)state;
  float logits[7] = {2.0f, -2.0f, 1.0f, -1.0f, 3.0f, 0.5f, 0.0f};
  const int32_t prompt[3] = {0, 1, 6};
  const int32_t output[3] = {2, 1, 2}; /* repeats are penalized once */
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(7, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  struct sampler_result r;
  assert_int_equal(sampler_sample(s, &p, logits, prompt, 3, output, 3, 0, 0, &r), LLB_STATUS_OK);
  const float want[7] = {1.0f, -4.0f, 0.5f, -1.0f, 3.0f, 0.5f, 0.0f};
  for (int i = 0; i < 7; i++) assert_float_equal(logits[i], want[i], 0.0f);
  assert_int_equal(r.token_id, 4);
  /* Scratch is clean afterwards: no penalty, no change. */
  p.repetition_penalty = 1.0f;
  assert_int_equal(sampler_sample(s, &p, logits, prompt, 3, output, 3, 0, 0, &r), LLB_STATUS_OK);
  for (int i = 0; i < 7; i++) assert_float_equal(logits[i], want[i], 0.0f);
  sampler_destroy(s);
}

static void test_frequency_and_presence_penalties_count_output_tokens_only(void **state) {
  (void)state;
  float logits[6] = {1.0f, 2.0f, 1.0f, -1.0f, 4.0f, 0.25f};
  const int32_t prompt[2] = {4, 5};
  const int32_t output[5] = {2, 3, 2, 2, 0};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(6, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  struct sampler_result r;
  assert_int_equal(sampler_sample(s, &p, logits, prompt, 2, output, 5, 0, 0, &r), LLB_STATUS_OK);
  /* l -= 0.5 * count + 0.25 * (count > 0); prompt-only tokens untouched. */
  const float want[6] = {0.25f, 2.0f, -0.75f, -1.75f, 4.0f, 0.25f};
  for (int i = 0; i < 6; i++) assert_float_equal(logits[i], want[i], 1e-6f);
  assert_int_equal(r.token_id, 4);
  /* Second call on other ids: counts from the first call were cleared. */
  const int32_t output2[1] = {1};
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, output2, 1, 0, 1, &r), LLB_STATUS_OK);
  const float want2[6] = {0.25f, 1.25f, -0.75f, -1.75f, 4.0f, 0.25f};
  for (int i = 0; i < 6; i++) assert_float_equal(logits[i], want2[i], 1e-6f);
  sampler_destroy(s);
}

static void test_repetition_applies_before_frequency(void **state) {
  (void)state;
  float logits[3] = {3.0f, -1.0f, 0.5f};
  const int32_t output[2] = {0, 1};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(3, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 1.0f;
  struct sampler_result r;
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, output, 2, 0, 0, &r), LLB_STATUS_OK);
  assert_float_equal(logits[0], 3.0f / 1.5f - 1.0f, 1e-6f); /* 1.0 */
  assert_float_equal(logits[1], -1.0f * 1.5f - 1.0f, 1e-6f);
  assert_float_equal(logits[2], 0.5f, 0.0f);
  assert_int_equal(r.token_id, 0);
  sampler_destroy(s);
}

static void test_logit_bias_shifts_logits_before_penalties_and_can_force_a_token(void **state) {
  (void)state;
  float logits[4] = {3.0f, 1.0f, 0.5f, -2.0f};
  const int32_t output[1] = {0};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(4, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.num_logit_bias = 2;
  p.logit_bias[0] = (struct sampler_logit_bias){.token_id = 3, .bias = 100.0f};
  p.logit_bias[1] = (struct sampler_logit_bias){.token_id = 0, .bias = -1.0f};
  struct sampler_result r;
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, output, 1, 0, 0, &r), LLB_STATUS_OK);
  assert_int_equal(r.token_id, 3);
  assert_float_equal(logits[3], 98.0f, 1e-5f);                /* biased; not an output token */
  assert_float_equal(logits[0], (3.0f - 1.0f) / 2.0f, 1e-6f); /* bias first, then repetition */
  assert_float_equal(logits[1], 1.0f, 0.0f);
  /* -100 bans the greedy choice */
  float again[4] = {3.0f, 1.0f, 0.5f, -2.0f};
  struct sampler_params q = params_default();
  q.temperature = 0.0f;
  q.num_logit_bias = 1;
  q.logit_bias[0] = (struct sampler_logit_bias){.token_id = 0, .bias = -100.0f};
  assert_int_equal(sampler_sample(s, &q, again, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_OK);
  assert_int_equal(r.token_id, 1);
  sampler_destroy(s);
}

static void test_logit_bias_out_of_vocab_or_range_is_rejected_without_touching_logits(void **state) {
  (void)state;
  float logits[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const float orig[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(4, &s), LLB_STATUS_OK);
  struct sampler_result r;
  struct sampler_params p = params_default();
  p.num_logit_bias = 2;
  p.logit_bias[0] = (struct sampler_logit_bias){.token_id = 1, .bias = 5.0f};
  p.logit_bias[1] = (struct sampler_logit_bias){.token_id = 4, .bias = 5.0f};
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_INVALID_ARGUMENT);
  p.logit_bias[1] = (struct sampler_logit_bias){.token_id = 2, .bias = 100.5f};
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_INVALID_ARGUMENT);
  p.logit_bias[1] = (struct sampler_logit_bias){.token_id = 2, .bias = NAN};
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_INVALID_ARGUMENT);
  assert_memory_equal(logits, orig, sizeof orig);
  sampler_destroy(s);
}

/* ---- logprobs -------------------------------------------------------------------------- */

static void test_logprobs_sorted_and_normalized_over_full_vocab(void **state) {
  (void)state;
  enum { V = SAMPLER_MAX_LOGPROBS };
  float logits[V];
  fill_random(logits, V, 11, -4.0f, 4.0f);
  logits[7] = logits[3]; /* a tie: lower id first */
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(V, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.logprobs = V;
  struct sampler_result r;
  float row[V];
  memcpy(row, logits, sizeof row);
  assert_int_equal(sampler_sample(s, &p, row, NULL, 0, NULL, 0, 0, 3, &r), LLB_STATUS_OK);
  assert_int_equal(r.num_top, V);
  double sum = 0.0;
  bool found_sampled = false;
  for (int j = 0; j < V; j++) {
    sum += exp(r.top[j].logprob);
    if (j > 0) {
      assert_true(r.top[j - 1].logprob >= r.top[j].logprob);
      if (r.top[j - 1].logprob == r.top[j].logprob)
        assert_true(r.top[j - 1].token_id < r.top[j].token_id);
    }
    if (r.top[j].token_id == r.token_id) {
      found_sampled = true;
      assert_float_equal(r.top[j].logprob, r.logprob, 0.0f);
    }
  }
  assert_true(found_sampled);
  assert_true(fabs(sum - 1.0) < 1e-5);
  sampler_destroy(s);
}

/* A batch's logprobs width (vLLM max_num_logprobs) reaches every row, whatever its own
 * params ask; -1 gives each row its own again; a width outside [-1, max] is refused. */
static void test_batch_logprobs_width_applies_to_every_row(void **state) {
  (void)state;
  enum { V = 64 };
  float logits[V], row[V];
  fill_random(logits, V, 5, -3.0f, 3.0f);
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(V, &s), LLB_STATUS_OK);
  struct sampler_params none = params_default(), two = params_default();
  none.logprobs = -1;
  two.logprobs = 2;
  struct sampler_result r, own;
  assert_int_equal(sampler_set_max_num_logprobs(s, 5), LLB_STATUS_OK);
  memcpy(row, logits, sizeof row);
  assert_int_equal(sampler_sample(s, &none, row, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_OK);
  assert_int_equal(r.num_top, 5);
  assert_true(r.logprob < 0.0f && isfinite(r.logprob));
  memcpy(row, logits, sizeof row);
  assert_int_equal(sampler_sample(s, &two, row, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_OK);
  assert_int_equal(r.num_top, 5);
  assert_int_equal(sampler_set_max_num_logprobs(s, -1), LLB_STATUS_OK);
  memcpy(row, logits, sizeof row);
  assert_int_equal(sampler_sample(s, &two, row, NULL, 0, NULL, 0, 0, 0, &own), LLB_STATUS_OK);
  assert_int_equal(own.num_top, 2);
  for (int j = 0; j < 2; j++) { /* the wide row's first entries are the narrow row's */
    assert_int_equal(own.top[j].token_id, r.top[j].token_id);
    assert_float_equal(own.top[j].logprob, r.top[j].logprob, 0.0f);
  }
  memcpy(row, logits, sizeof row);
  assert_int_equal(sampler_sample(s, &none, row, NULL, 0, NULL, 0, 0, 0, &own), LLB_STATUS_OK);
  assert_int_equal(own.num_top, 0);
  assert_int_equal(sampler_set_max_num_logprobs(s, SAMPLER_MAX_LOGPROBS + 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(sampler_set_max_num_logprobs(s, -2), LLB_STATUS_INVALID_ARGUMENT);
  sampler_destroy(s);
}

static void test_logprobs_match_log_softmax_and_ignore_temperature(void **state) {
  (void)state;
  float *logits = malloc(BIG_VOCAB * sizeof *logits);
  float *row = malloc(BIG_VOCAB * sizeof *row);
  assert_true(logits && row);
  fill_random(logits, BIG_VOCAB, 3, -15.0f, 15.0f);
  double m = -INFINITY, z = 0.0;
  for (int32_t i = 0; i < BIG_VOCAB; i++) m = fmax(m, logits[i]);
  for (int32_t i = 0; i < BIG_VOCAB; i++) z += exp((double)logits[i] - m);
  double log_z = m + log(z);
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(BIG_VOCAB, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.logprobs = 5;
  struct sampler_result r[2];
  const float temps[2] = {0.5f, 2.0f};
  for (int t = 0; t < 2; t++) {
    p.temperature = temps[t];
    memcpy(row, logits, BIG_VOCAB * sizeof *row);
    assert_int_equal(sampler_sample(s, &p, row, NULL, 0, NULL, 0, 0, 0, &r[t]), LLB_STATUS_OK);
    assert_int_equal(r[t].num_top, 5);
    for (int j = 0; j < 5; j++) {
      int32_t id = r[t].top[j].token_id;
      assert_true(fabs(r[t].top[j].logprob - ((double)logits[id] - log_z)) < 1e-5);
      if (j > 0) assert_true(logits[r[t].top[j - 1].token_id] > logits[id]);
    }
    assert_true(fabs(r[t].logprob - ((double)logits[r[t].token_id] - log_z)) < 1e-5);
  }
  /* The best of all: nothing outside the top 5 beats the 5th. */
  for (int32_t i = 0; i < BIG_VOCAB; i++) {
    bool in_top = false;
    for (int j = 0; j < 5; j++) in_top |= r[0].top[j].token_id == i;
    if (!in_top) assert_true(logits[i] <= logits[r[0].top[4].token_id]);
  }
  for (int j = 0; j < 5; j++) {
    assert_int_equal(r[0].top[j].token_id, r[1].top[j].token_id);
    assert_float_equal(r[0].top[j].logprob, r[1].top[j].logprob, 0.0f);
  }
  sampler_destroy(s);
  free(logits);
  free(row);
}

static void test_logprobs_reflect_penalties(void **state) {
  (void)state;
  float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  const int32_t output[1] = {0};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(4, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.0f;
  p.logprobs = 1;
  p.presence_penalty = 2.0f; /* token 0 drops to 0.0: token 1 leads */
  struct sampler_result r;
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, output, 1, 0, 1, &r), LLB_STATUS_OK);
  double z = exp(0.0) + exp(1.0) + exp(0.0) + exp(-1.0);
  assert_int_equal(r.token_id, 1);
  assert_int_equal(r.top[0].token_id, 1);
  assert_true(fabs(r.logprob - (1.0 - log(z))) < 1e-6);
  sampler_destroy(s);
}

/* ---- errors ---------------------------------------------------------------------------- */

static void test_bad_input_is_rejected_without_touching_logits(void **state) {
  (void)state;
  float logits[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const float orig[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(4, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.repetition_penalty = 2.0f;
  struct sampler_result r;
  const int32_t bad_ids[2] = {1, 4};
  assert_int_equal(sampler_sample(s, &p, logits, bad_ids, 2, NULL, 0, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  assert_memory_equal(logits, orig, sizeof orig); /* id 1 was not penalized */
  const int32_t neg[1] = {-1};
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, neg, 1, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  struct sampler_params q = params_default();
  q.logprobs = SAMPLER_MAX_LOGPROBS + 1;
  assert_int_equal(sampler_sample(s, &q, logits, NULL, 0, NULL, 0, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  q = params_default();
  q.top_p = 0.0f;
  assert_int_equal(sampler_sample(s, &q, logits, NULL, 0, NULL, 0, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  q = params_default();
  q.temperature = -1.0f;
  assert_int_equal(sampler_sample(s, &q, logits, NULL, 0, NULL, 0, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  q = params_default();
  logits[2] = NAN;
  assert_int_equal(sampler_sample(s, &q, logits, NULL, 0, NULL, 0, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  for (int i = 0; i < 4; i++) logits[i] = -INFINITY;
  assert_int_equal(sampler_sample(s, &q, logits, NULL, 0, NULL, 0, 0, 0, &r),
                   LLB_STATUS_INVALID_ARGUMENT);
  struct sampler *none = NULL;
  assert_int_equal(sampler_create(0, &none), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(none);
  sampler_destroy(NULL);
  sampler_destroy(s);
}

/* A finite logit that overflows once divided by the temperature (3e38 / 0.5) has no softmax to
 * draw from: refused, not a read outside the candidates. */
static void test_logit_overflowing_over_temperature_is_rejected(void **state) {
  (void)state;
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(2, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 0.5f;
  p.top_p = 0.9f;
  struct sampler_result r;
  float near[2] = {1e38f, 0.0f}; /* 2e38 after the division: still a float, all the mass on 0 */
  assert_int_equal(sampler_sample(s, &p, near, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_OK);
  assert_int_equal(r.token_id, 0);
  float big[2] = {3e38f, 0.0f};
  assert_int_equal(sampler_sample(s, &p, big, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_INVALID_ARGUMENT);
  float low[2] = {-3e38f, -3.2e38f};
  p.temperature = 0.01f;
  p.top_p = 1.0f;
  assert_int_equal(sampler_sample(s, &p, low, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_INVALID_ARGUMENT);
  p.temperature = 0.0f; /* greedy never divides: still answers */
  assert_int_equal(sampler_sample(s, &p, big, NULL, 0, NULL, 0, 0, 0, &r), LLB_STATUS_OK);
  assert_int_equal(r.token_id, 0);
  sampler_destroy(s);
}

/* NaN or +inf is found wherever it sits in a real-size row (past the first SIMD block, in the
 * tail), for greedy and random sampling alike. */
static void test_nan_or_inf_anywhere_in_a_big_row_is_rejected(void **state) {
  (void)state;
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(BIG_VOCAB, &s), LLB_STATUS_OK);
  float *row = malloc(BIG_VOCAB * sizeof *row);
  assert_non_null(row);
  const int64_t where[] = {17, 1000, BIG_VOCAB - 17, BIG_VOCAB - 1};
  const float bad[] = {NAN, INFINITY};
  for (int t = 0; t < 2; t++) {
    struct sampler_params p = params_default();
    p.temperature = t == 0 ? 0.0f : 0.8f;
    for (size_t w = 0; w < sizeof where / sizeof where[0]; w++)
      for (int b = 0; b < 2; b++) {
        fill_random(row, BIG_VOCAB, 7 + w, -5.0f, 5.0f);
        row[where[w]] = bad[b];
        struct sampler_result r;
        if (sampler_sample(s, &p, row, NULL, 0, NULL, 0, 0, 0, &r) != LLB_STATUS_INVALID_ARGUMENT)
          fail_msg("%s at %lld (temperature %g) was not rejected", b ? "+inf" : "NaN", (long long)where[w],
                   (double)p.temperature);
      }
  }
  free(row);
  sampler_destroy(s);
}

/* Draft verification after top_p: a draft top_p leaves out is never accepted and never the
 * correction; a kept one is accepted at some positions and every token stays in the kept set. */
static void test_verify_draft_respects_top_p(void **state) {
  (void)state;
  const float logits[6] = {3.0f, 2.9f, 0.0f, -1.0f, -1.0f, -2.0f}; /* top_p 0.8 keeps {0, 1} */
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(6, &s), LLB_STATUS_OK);
  struct sampler_params p = params_default();
  p.temperature = 1.0f;
  p.top_p = 0.8f;
  int accepted_kept = 0;
  for (int draft = 0; draft < 6; draft += 5) {
    for (int pos = 0; pos < 500; pos++) {
      float row[6];
      memcpy(row, logits, sizeof row);
      bool accepted = false;
      struct sampler_result r;
      assert_int_equal(sampler_verify_draft(s, &p, row, NULL, 0, NULL, 0, 0, pos, draft, &accepted, &r),
                       LLB_STATUS_OK);
      if (r.token_id != 0 && r.token_id != 1) fail_msg("draft %d, position %d: token %d outside top_p's set",
                                                        draft, pos, r.token_id);
      if (draft == 5) assert_false(accepted);
      else accepted_kept += accepted;
    }
  }
  assert_true(accepted_kept > 100 && accepted_kept < 400); /* p(0) after top_p ~ 0.52 */
  sampler_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_matches_random123_known_answers),
      cmocka_unit_test(test_uniform_is_in_unit_interval_and_depends_on_every_key_part),
      cmocka_unit_test(test_fast_exp_matches_expf),
      cmocka_unit_test(test_greedy_is_argmax_over_big_vocab),
      cmocka_unit_test(test_greedy_ties_go_to_lowest_id_and_tiny_temperature_is_greedy),
      cmocka_unit_test(test_top_k_keeps_the_k_highest),
      cmocka_unit_test(test_top_k_keeps_ties_at_the_boundary),
      cmocka_unit_test(test_top_p_keeps_smallest_prefix_reaching_p),
      cmocka_unit_test(test_min_p_keeps_tokens_above_fraction_of_max_after_temperature),
      cmocka_unit_test(test_top_p_renormalizes_after_top_k),
      cmocka_unit_test(test_top_k_and_top_p_select_exact_sets_on_big_vocab),
      cmocka_unit_test(test_seeded_draws_do_not_depend_on_call_order_or_other_streams),
      cmocka_unit_test(test_draws_follow_softmax_of_logits_over_temperature),
      cmocka_unit_test(test_draws_follow_renormalized_distribution_after_filters),
      cmocka_unit_test(test_tokens_match_a_plain_reference),
      cmocka_unit_test(test_repetition_penalty_divides_positive_and_multiplies_negative),
      cmocka_unit_test(test_frequency_and_presence_penalties_count_output_tokens_only),
      cmocka_unit_test(test_repetition_applies_before_frequency),
      cmocka_unit_test(test_logit_bias_shifts_logits_before_penalties_and_can_force_a_token),
      cmocka_unit_test(test_logit_bias_out_of_vocab_or_range_is_rejected_without_touching_logits),
      cmocka_unit_test(test_logprobs_sorted_and_normalized_over_full_vocab),
      cmocka_unit_test(test_batch_logprobs_width_applies_to_every_row),
      cmocka_unit_test(test_logprobs_match_log_softmax_and_ignore_temperature),
      cmocka_unit_test(test_logprobs_reflect_penalties),
      cmocka_unit_test(test_bad_input_is_rejected_without_touching_logits),
      cmocka_unit_test(test_logit_overflowing_over_temperature_is_rejected),
      cmocka_unit_test(test_nan_or_inf_anywhere_in_a_big_row_is_rejected),
      cmocka_unit_test(test_verify_draft_respects_top_p),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
