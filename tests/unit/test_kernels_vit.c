/* The vision encoder's CPU ops (kernels/cpu/vit_ops.c) against naive double references over
 * shapes and seeds, never on zeros. Tolerances: LayerNorm 1e-5 relative to the row's scale;
 * GELU (tanh, quick) within fp16 rounding of input and output (|x| 2^-10 + 1e-6, ggml's
 * table); bias add exact; attention 1e-5 relative. Attention with 1 thread on the portable
 * path vs 2 threads on the AVX2 path: bit-identical. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; } /* [-1, 1) */

static float *random_vec(int64_t n, float scale, float offset) {
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = offset + scale * rndf();
  return v;
}

static struct backend_ctx *make_ctx(int n_threads, int32_t max_tokens) {
  struct backend_ctx_params p = {.n_threads = n_threads, .max_num_tokens = max_tokens, .max_row_elems = 4096,
                                 .max_context_len = max_tokens};
  struct backend_ctx *c = NULL;
  assert_int_equal(backend_cpu_ops()->ctx_create(&p, &c), LLB_STATUS_OK);
  return c;
}

static void test_layer_norm_with_bias_matches_reference(void **state) {
  (void)state;
  const struct backend_ops *ops = backend_cpu_ops();
  const int32_t dims[] = {1, 7, 64, 768, 1000};
  for (int seed = 1; seed <= 3; seed++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
      rng_state = (uint64_t)seed * 977 + di;
      const int32_t d = dims[di], n = 5;
      float *x = random_vec((int64_t)n * d, 3.0f, 0.5f * (float)seed), *w = random_vec(d, 0.5f, 1.0f),
            *b = random_vec(d, 0.2f, 0.0f);
      float *out = malloc((size_t)n * (size_t)d * sizeof(float));
      struct backend_ctx *c = make_ctx(2, 16);
      assert_int_equal(ops->layer_norm(c, x, w, b, n, d, 1e-6f, out), LLB_STATUS_OK);
      for (int32_t r = 0; r < n; r++) {
        double mu = 0, var = 0;
        for (int32_t i = 0; i < d; i++) mu += x[r * d + i];
        mu /= d;
        for (int32_t i = 0; i < d; i++) var += (x[r * d + i] - mu) * (x[r * d + i] - mu);
        var /= d;
        for (int32_t i = 0; i < d; i++) {
          const double want = (x[r * d + i] - mu) / sqrt(var + 1e-6) * w[i] + b[i];
          assert_true(fabs(out[r * d + i] - want) <= 1e-5 * (1.0 + fabs(want)));
        }
      }
      /* NULL bias: weight only; aliasing out == x */
      assert_int_equal(ops->layer_norm(c, x, w, NULL, n, d, 1e-6f, x), LLB_STATUS_OK);
      for (int64_t i = 0; i < (int64_t)n * d; i++) assert_true(fabsf(x[i] - (out[i] - b[i % d])) <= 1e-5f * (1.0f + fabsf(x[i])));
      ops->ctx_destroy(c);
      free(x), free(w), free(b), free(out);
    }
}

static void test_gelu_tanh_and_quick_match_formula_within_fp16(void **state) {
  (void)state;
  const struct backend_ops *ops = backend_cpu_ops();
  const int64_t n = 20000;
  rng_state = 42;
  float *x = random_vec(n, 12.0f, 0.0f); /* covers |x| >= 10, the table's cut-off */
  float *y = malloc((size_t)n * sizeof *y);
  struct backend_ctx *c = make_ctx(2, 16);
  for (int kind = 0; kind <= 1; kind++) {
    memcpy(y, x, (size_t)n * sizeof *y);
    assert_int_equal(ops->gelu(c, y, n, (enum backend_gelu_kind)kind), LLB_STATUS_OK);
    for (int64_t i = 0; i < n; i++) {
      const double v = x[i];
      const double want = kind == BACKEND_GELU_TANH
                              ? 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)))
                              : v / (1.0 + exp(-1.702 * v));
      /* fp16 rounding of x (slope <= 1.13) and of the result */
      assert_true(fabs(y[i] - want) <= fabs(v) * 2.0 / 1024.0 + fabs(want) / 1024.0 + 1e-6);
    }
  }
  assert_int_equal(ops->gelu(c, y, n, (enum backend_gelu_kind)7), LLB_STATUS_INVALID_ARGUMENT);
  ops->ctx_destroy(c);
  free(x), free(y);
}

static void test_add_bias_adds_to_every_row(void **state) {
  (void)state;
  const struct backend_ops *ops = backend_cpu_ops();
  rng_state = 7;
  const int32_t n = 33, d = 300;
  float *x = random_vec((int64_t)n * d, 1.0f, 0.0f), *b = random_vec(d, 1.0f, 0.0f);
  float *want = malloc((size_t)n * (size_t)d * sizeof(float));
  for (int64_t i = 0; i < (int64_t)n * d; i++) want[i] = x[i] + b[i % d];
  struct backend_ctx *c = make_ctx(2, 64);
  assert_int_equal(ops->add_bias(c, x, b, n, d), LLB_STATUS_OK);
  assert_memory_equal(x, want, (size_t)n * (size_t)d * sizeof(float));
  ops->ctx_destroy(c);
  free(x), free(b), free(want);
}

static void attention_reference(const struct backend_full_attn_params *p, double *out) {
  const int32_t n = p->n_tokens, hd = p->head_dim, row = p->n_heads * hd;
  double *s = malloc((size_t)n * sizeof *s);
  for (int32_t h = 0; h < p->n_heads; h++)
    for (int32_t i = 0; i < n; i++) {
      double max = -INFINITY, sum = 0;
      for (int32_t j = 0; j < n; j++) {
        double dot = 0;
        for (int32_t d = 0; d < hd; d++) dot += (double)p->q[i * row + h * hd + d] * p->k[j * row + h * hd + d];
        s[j] = dot * p->scale;
        max = s[j] > max ? s[j] : max;
      }
      for (int32_t j = 0; j < n; j++) sum += s[j] = exp(s[j] - max);
      for (int32_t d = 0; d < hd; d++) {
        double a = 0;
        for (int32_t j = 0; j < n; j++) a += s[j] / sum * p->v[j * row + h * hd + d];
        out[i * row + h * hd + d] = a;
      }
    }
  free(s);
}

static void test_full_attention_matches_reference_and_is_thread_invariant(void **state) {
  (void)state;
  const struct backend_ops *ops = backend_cpu_ops();
  const int32_t shapes[][3] = {{1, 1, 8}, {17, 4, 16}, {65, 3, 64}, {200, 2, 12}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    rng_state = 1000 + si;
    const int32_t n = shapes[si][0], nh = shapes[si][1], hd = shapes[si][2];
    const int64_t len = (int64_t)n * nh * hd;
    float *q = random_vec(len, 2.0f, 0.0f), *k = random_vec(len, 2.0f, 0.0f), *v = random_vec(len, 1.0f, 0.1f);
    float *o1 = malloc((size_t)len * sizeof(float)), *o2 = malloc((size_t)len * sizeof(float));
    double *want = malloc((size_t)len * sizeof(double));
    struct backend_full_attn_params p = {q, k, v, o1, n, nh, hd, 1.0f / sqrtf((float)hd)};
    attention_reference(&p, want);
    struct backend_ctx *c1 = make_ctx(1, 256), *c2 = make_ctx(2, 256);
    cpu_backend_set_simd_level(c1, CPU_SIMD_LEVEL_SCALAR); /* the portable copy vs the AVX2 one */
    assert_int_equal(ops->attention_full(c1, &p), LLB_STATUS_OK);
    p.out = o2;
    assert_int_equal(ops->attention_full(c2, &p), LLB_STATUS_OK);
    assert_memory_equal(o1, o2, (size_t)len * sizeof(float));
    for (int64_t i = 0; i < len; i++) assert_true(fabs(o1[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i])));
    p.n_tokens = 257; /* over the context's sizes */
    assert_int_equal(ops->attention_full(c1, &p), LLB_STATUS_INVALID_ARGUMENT);
    ops->ctx_destroy(c1);
    ops->ctx_destroy(c2);
    free(q), free(k), free(v), free(o1), free(o2), free(want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layer_norm_with_bias_matches_reference),
      cmocka_unit_test(test_gelu_tanh_and_quick_match_formula_within_fp16),
      cmocka_unit_test(test_add_bias_adds_to_every_row),
      cmocka_unit_test(test_full_attention_matches_reference_and_is_thread_invariant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
