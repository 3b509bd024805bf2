/* The worker's pooler (actors/gpu_worker/pooler.c): which rows each pooling type takes from a
 * chunk, MEAN over chunks, L2 normalization (torch's eps for a zero vector), Matryoshka
 * truncation before normalization, and errors (no row, non-finite result). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "actors/gpu_worker/pooler.h"

static struct pooler_req make(enum llb_pooling_type type, bool normalize, int32_t dims, int32_t hidden) {
  struct pooler_req p = {0};
  const struct llb_pooling_params params = {type, normalize, dims};
  assert_int_equal(pooler_req_reset(&p, &params, hidden), LLB_STATUS_OK);
  return p;
}

static void test_rows_of_a_chunk_per_pooling_type(void **state) {
  (void)state;
  int32_t off[8];
  struct pooler_req last = make(LLB_POOLING_LAST, true, 0, 2), mean = make(LLB_POOLING_MEAN, true, 0, 2),
                    cls = make(LLB_POOLING_CLS, true, 0, 2);
  assert_int_equal(pooler_req_rows(&last, 0, 4, 10, off), 0); /* the last token is in a later chunk */
  assert_int_equal(pooler_req_rows(&last, 8, 2, 10, off), 1);
  assert_int_equal(off[0], 1);
  assert_int_equal(pooler_req_rows(&cls, 0, 4, 10, off), 1);
  assert_int_equal(off[0], 0);
  assert_int_equal(pooler_req_rows(&cls, 4, 4, 10, off), 0);
  assert_int_equal(pooler_req_rows(&mean, 4, 4, 10, off), 4);
  assert_int_equal(off[3], 3);
  assert_int_equal(pooler_req_rows(&mean, 8, 4, 10, off), 2); /* never beyond the prompt */
  pooler_req_free(&last), pooler_req_free(&mean), pooler_req_free(&cls);
}

static void test_mean_then_normalize(void **state) {
  (void)state;
  struct pooler_req p = make(LLB_POOLING_MEAN, true, 0, 2);
  const float a[2] = {1.0f, 2.0f}, b[2] = {5.0f, 2.0f};
  pooler_req_add(&p, a);
  pooler_req_add(&p, b); /* mean (3, 2), norm sqrt(13) */
  float out[2];
  assert_int_equal(pooler_req_dims(&p), 2);
  assert_int_equal(pooler_req_finish(&p, out), LLB_STATUS_OK);
  assert_float_equal(out[0], 3.0f / sqrtf(13.0f), 1e-7);
  assert_float_equal(out[1], 2.0f / sqrtf(13.0f), 1e-7);
  p.params.normalize = false;
  assert_int_equal(pooler_req_finish(&p, out), LLB_STATUS_OK);
  assert_float_equal(out[0], 3.0f, 0);
  assert_float_equal(out[1], 2.0f, 0);
  pooler_req_free(&p);
}

static void test_zero_vector_normalizes_to_zero_not_nan(void **state) {
  (void)state;
  struct pooler_req p = make(LLB_POOLING_LAST, true, 0, 3);
  const float z[3] = {0, 0, 0};
  pooler_req_add(&p, z);
  float out[3] = {1, 1, 1};
  assert_int_equal(pooler_req_finish(&p, out), LLB_STATUS_OK);
  for (int i = 0; i < 3; i++) assert_true(out[i] == 0.0f);
  pooler_req_free(&p);
}

static void test_dimensions_truncate_before_normalizing(void **state) {
  (void)state;
  struct pooler_req p = make(LLB_POOLING_CLS, true, 2, 4);
  const float v[4] = {3.0f, 4.0f, 100.0f, 100.0f};
  pooler_req_add(&p, v);
  float out[2];
  assert_int_equal(pooler_req_dims(&p), 2);
  assert_int_equal(pooler_req_finish(&p, out), LLB_STATUS_OK);
  assert_float_equal(out[0], 0.6f, 1e-7);
  assert_float_equal(out[1], 0.8f, 1e-7);
  pooler_req_free(&p);
}

static void test_errors(void **state) {
  (void)state;
  struct pooler_req p = make(LLB_POOLING_MEAN, false, 0, 2);
  float out[2];
  assert_int_equal(pooler_req_finish(&p, out), LLB_STATUS_INVALID_ARGUMENT); /* no row */
  const float inf[2] = {INFINITY, 1.0f};
  pooler_req_add(&p, inf);
  assert_int_equal(pooler_req_finish(&p, out), LLB_STATUS_INVALID_ARGUMENT);
  const struct llb_pooling_params bad = {(enum llb_pooling_type)7, true, 0};
  assert_int_equal(pooler_req_reset(&p, &bad, 2), LLB_STATUS_INVALID_ARGUMENT);
  assert_false(pooler_req_active(&p));
  const struct llb_pooling_params none = {LLB_POOLING_NONE, true, 0};
  assert_int_equal(pooler_req_reset(&p, &none, 2), LLB_STATUS_OK);
  assert_int_equal(pooler_req_rows(&p, 0, 4, 4, (int32_t[4]){0}), 0);
  pooler_req_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_of_a_chunk_per_pooling_type),
      cmocka_unit_test(test_mean_then_normalize),
      cmocka_unit_test(test_zero_vector_normalizes_to_zero_not_nan),
      cmocka_unit_test(test_dimensions_truncate_before_normalizing),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
