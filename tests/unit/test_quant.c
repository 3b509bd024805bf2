/* kernels/quant: type table, fp16/bf16 conversion, dequantization bit-exact against vectors
 * made by gguf-py's reference dequantizers (tests/tools/gen_quant_vectors.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

static const char *vectors_path;

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_type_table_matches_ggml_sizes(void **state) {
  (void)state;
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q4_0), sizeof(block_q4_0));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q4_1), sizeof(block_q4_1));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q8_0), sizeof(block_q8_0));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q4_K), sizeof(block_q4_K));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q5_K), sizeof(block_q5_K));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q6_K), sizeof(block_q6_K));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q5_0), sizeof(block_q5_0));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q5_1), sizeof(block_q5_1));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q2_K), sizeof(block_q2_K));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q3_K), sizeof(block_q3_K));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_IQ4_NL), sizeof(block_iq4_nl));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_IQ4_XS), sizeof(block_iq4_xs));
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_Q2_K), 84);
  assert_int_equal(ggml_type_block_elems(GGML_TYPE_IQ4_NL), 32);
  assert_int_equal(ggml_type_block_elems(GGML_TYPE_IQ4_XS), 256);
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_IQ2_XXS), 66); /* known, not dequantized */
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_MXFP4), 17);
  assert_int_equal(ggml_type_block_bytes(GGML_TYPE_BF16), 2);
  assert_int_equal(ggml_type_block_elems(GGML_TYPE_F32), 1);
  assert_int_equal(ggml_type_block_elems(GGML_TYPE_Q4_1), 32);
  assert_int_equal(ggml_type_block_elems(GGML_TYPE_Q6_K), 256);
  assert_int_equal(ggml_type_block_elems((enum ggml_type)4), 0); /* removed Q4_2 */
  assert_int_equal(ggml_type_block_bytes((enum ggml_type)37), 0); /* removed IQ4_NL_4_8 */
  assert_int_equal(ggml_type_block_elems((enum ggml_type)-1), 0);
  assert_string_equal(ggml_type_name(GGML_TYPE_Q4_1), "q4_1");
  assert_string_equal(ggml_type_name(GGML_TYPE_Q6_K), "q6_K");
  assert_string_equal(ggml_type_name(GGML_TYPE_IQ4_NL), "iq4_nl");
  assert_string_equal(ggml_type_name(GGML_TYPE_IQ2_XS), "iq2_xs");
  assert_string_equal(ggml_type_name((enum ggml_type)77), "unknown");
  assert_true(ggml_type_is_supported(GGML_TYPE_Q5_K));
  assert_true(ggml_type_is_supported(GGML_TYPE_Q5_0));
  assert_true(ggml_type_is_supported(GGML_TYPE_IQ4_XS));
  assert_false(ggml_type_is_supported(GGML_TYPE_IQ2_XXS));
  assert_false(ggml_type_is_supported(GGML_TYPE_Q8_K));
  assert_false(ggml_type_is_supported((enum ggml_type)5));
}

static void test_row_bytes_rejects_partial_blocks(void **state) {
  (void)state;
  size_t n = 0;
  assert_int_equal(ggml_row_bytes(GGML_TYPE_Q4_1, 576, &n), LLB_STATUS_OK);
  assert_int_equal(n, 576 / 32 * 20);
  assert_int_equal(ggml_row_bytes(GGML_TYPE_Q6_K, 512, &n), LLB_STATUS_OK);
  assert_int_equal(n, 420);
  assert_int_equal(ggml_row_bytes(GGML_TYPE_F16, 3, &n), LLB_STATUS_OK);
  assert_int_equal(n, 6);
  assert_int_equal(ggml_row_bytes(GGML_TYPE_Q4_K, 300, &n), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(ggml_row_bytes(GGML_TYPE_Q8_0, -32, &n), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(ggml_row_bytes((enum ggml_type)4, 32, &n), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(ggml_row_bytes(GGML_TYPE_F32, INT64_MAX, &n), LLB_STATUS_INVALID_ARGUMENT);
}

static void test_fp16_special_values_convert_exactly(void **state) {
  (void)state;
  assert_int_equal(f2u(llb_fp16_to_fp32(0x0000)), 0x00000000u);
  assert_int_equal(f2u(llb_fp16_to_fp32(0x8000)), 0x80000000u);
  assert_true(llb_fp16_to_fp32(0x3c00) == 1.0f);
  assert_true(llb_fp16_to_fp32(0xc000) == -2.0f);
  assert_true(llb_fp16_to_fp32(0x7bff) == 65504.0f);
  assert_true(llb_fp16_to_fp32(0x0001) == ldexpf(1.0f, -24));  /* smallest subnormal */
  assert_true(llb_fp16_to_fp32(0x03ff) == ldexpf(1023.0f, -24)); /* largest subnormal */
  assert_true(llb_fp16_to_fp32(0x0400) == ldexpf(1.0f, -14));
  assert_true(isinf(llb_fp16_to_fp32(0x7c00)) && llb_fp16_to_fp32(0x7c00) > 0);
  assert_true(isinf(llb_fp16_to_fp32(0xfc00)) && llb_fp16_to_fp32(0xfc00) < 0);
  assert_true(isnan(llb_fp16_to_fp32(0x7e00)));
  assert_true(isnan(llb_fp16_to_fp32(0x7c01)));

  assert_int_equal(llb_fp32_to_fp16(65504.0f), 0x7bff);
  assert_int_equal(llb_fp32_to_fp16(65519.0f), 0x7bff);  /* below the rounding midpoint */
  assert_int_equal(llb_fp32_to_fp16(65520.0f), 0x7c00);  /* midpoint ties to even: inf */
  assert_int_equal(llb_fp32_to_fp16(1e10f), 0x7c00);
  assert_int_equal(llb_fp32_to_fp16(-INFINITY), 0xfc00);
  assert_int_equal(llb_fp32_to_fp16(ldexpf(1.0f, -24)), 0x0001);
  assert_int_equal(llb_fp32_to_fp16(ldexpf(1.0f, -25)), 0x0000);           /* tie to even 0 */
  assert_int_equal(llb_fp32_to_fp16(ldexpf(1.5f, -25)), 0x0001);           /* above the tie */
  assert_int_equal(llb_fp32_to_fp16(ldexpf(3.0f, -25)), 0x0002);           /* 1.5 ulp: to even */
  assert_int_equal(llb_fp32_to_fp16(-ldexpf(1.0f, -30)), 0x8000);
  assert_int_equal(llb_fp32_to_fp16(1.0f + ldexpf(1.0f, -11)), 0x3c00);    /* tie to even */
  assert_int_equal(llb_fp32_to_fp16(1.0f + ldexpf(3.0f, -11)), 0x3c02);    /* tie to even up */
  assert_int_equal(llb_fp32_to_fp16(ldexpf(2047.0f, -25)), 0x0400); /* rounds into normal */
  uint16_t nan = llb_fp32_to_fp16(NAN);
  assert_int_equal(nan & 0x7c00, 0x7c00);
  assert_int_not_equal(nan & 0x03ff, 0);
}

static void test_fp16_round_trips_every_finite_half(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
      uint16_t back = llb_fp32_to_fp16(llb_fp16_to_fp32((uint16_t)h));
      assert_int_equal(back & 0x7c00, 0x7c00); /* NaN stays NaN */
      assert_int_not_equal(back & 0x3ff, 0);
      continue;
    }
    assert_int_equal(llb_fp32_to_fp16(llb_fp16_to_fp32((uint16_t)h)), h);
  }
}

static void test_bf16_round_trips_and_rounds_to_even(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = llb_bf16_to_fp32((uint16_t)h);
    assert_int_equal(f2u(f), h << 16);
    if (!isnan(f)) {
      assert_int_equal(llb_fp32_to_bf16(f), h);
    }
  }
  assert_int_equal(llb_fp32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* tie, even stays */
  assert_int_equal(llb_fp32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* tie, odd rounds up */
  assert_int_equal(llb_fp32_to_bf16(u2f(0x3f808001u)), 0x3f81);
  assert_int_equal(llb_fp32_to_bf16(u2f(0x7f800001u)), 0x7fc0); /* signaling NaN quieted */
  assert_int_equal(llb_fp32_to_bf16(u2f(0x00000001u)), 0x0000); /* subnormal below half */
}

static void test_dequantize_unsupported_type_is_named(void **state) {
  (void)state;
  uint8_t src[84] = {1};
  float dst[256];
  assert_int_equal(ggml_dequantize_row(GGML_TYPE_IQ2_XXS, src, dst, 256), LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "iq2_xxs"));
  assert_int_equal(ggml_dequantize_row((enum ggml_type)33, src, dst, 1), LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "33"));
  assert_int_equal(ggml_dequantize_row(GGML_TYPE_Q8_0, src, dst, 16),
                   LLB_STATUS_INVALID_ARGUMENT);
}

static void test_q4_0_hand_block_matches_definition(void **state) {
  (void)state;
  block_q4_0 b;
  b.d = llb_fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; j++) {
    b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
  }
  float y[32];
  assert_int_equal(ggml_dequantize_row(GGML_TYPE_Q4_0, &b, y, 32), LLB_STATUS_OK);
  for (int j = 0; j < 16; j++) {
    assert_true(y[j] == 0.5f * (float)(j - 8));
    assert_true(y[j + 16] == 0.5f * (float)(7 - j));
  }
}

/* The 5th bit of weight j sits in bit j of qh read as a little-endian uint32. */
static void test_q5_0_hand_block_takes_high_bit_from_qh(void **state) {
  (void)state;
  block_q5_0 b;
  b.d = llb_fp32_to_fp16(0.25f);
  const uint32_t qh = 0xA5A50F0Fu;
  for (int i = 0; i < 4; i++) b.qh[i] = (uint8_t)(qh >> (8 * i));
  for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
  float y[32];
  assert_int_equal(ggml_dequantize_row(GGML_TYPE_Q5_0, &b, y, 32), LLB_STATUS_OK);
  for (int j = 0; j < 16; j++) {
    const int lo = j + (int)((qh >> j) & 1u) * 16 - 16;
    const int hi = (15 - j) + (int)((qh >> (j + 16)) & 1u) * 16 - 16;
    assert_true(y[j] == 0.25f * (float)lo);
    assert_true(y[j + 16] == 0.25f * (float)hi);
  }
}

struct vec_file {
  uint8_t *p;
  size_t size;
};

static int load_vectors(void **state) {
  FILE *fp = fopen(vectors_path, "rb");
  if (fp == NULL) {
    fprintf(stderr, "cannot open %s\n", vectors_path);
    return -1;
  }
  struct vec_file *v = calloc(1, sizeof *v);
  fseek(fp, 0, SEEK_END);
  v->size = (size_t)ftell(fp);
  fseek(fp, 0, SEEK_SET);
  v->p = malloc(v->size);
  size_t got = fread(v->p, 1, v->size, fp);
  fclose(fp);
  if (got != v->size || v->size < 12 || memcmp(v->p, "LLBQVEC1", 8) != 0) {
    free(v->p);
    free(v);
    return -1;
  }
  *state = v;
  return 0;
}

static int free_vectors(void **state) {
  struct vec_file *v = *state;
  free(v->p);
  free(v);
  return 0;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_dequantize_bit_exact_with_gguf_py_reference(void **state) {
  struct vec_file *v = *state;
  uint32_t n_rec = rd32(v->p + 8);
  size_t pos = 12;
  int seen[GGML_TYPE_COUNT] = {0};
  assert_true(n_rec > 0);
  for (uint32_t r = 0; r < n_rec; r++) {
    assert_true(pos + 16 <= v->size);
    uint32_t type = rd32(v->p + pos), seed = rd32(v->p + pos + 4);
    uint32_t n = rd32(v->p + pos + 8), n_src = rd32(v->p + pos + 12);
    pos += 16;
    assert_true(pos + n_src + (size_t)n * 4 <= v->size);
    const uint8_t *src = v->p + pos;
    const uint8_t *ref = v->p + pos + n_src;
    pos += n_src + (size_t)n * 4;
    size_t row;
    assert_int_equal(ggml_row_bytes((enum ggml_type)type, n, &row), LLB_STATUS_OK);
    assert_int_equal(row, n_src);
    /* unaligned source on purpose: block data in a GGUF mapping need not be aligned */
    uint8_t *copy = malloc(n_src + 1);
    memcpy(copy + 1, src, n_src);
    float *out = malloc((size_t)n * sizeof(float));
    assert_int_equal(ggml_dequantize_row((enum ggml_type)type, copy + 1, out, n), LLB_STATUS_OK);
    int nonzero = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t want = rd32(ref + 4 * (size_t)i);
      uint32_t got = f2u(out[i]);
      nonzero += (want & 0x7fffffffu) != 0;
      if (got != want) {
        fail_msg("%s seed %u element %u: got 0x%08x (%g), reference 0x%08x (%g)",
                 ggml_type_name((enum ggml_type)type), seed, i, got, out[i], want, u2f(want));
      }
    }
    assert_true(nonzero > 0);
    seen[type]++;
    free(copy);
    free(out);
  }
  assert_int_equal(pos, v->size);
  const enum ggml_type all[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    assert_true(seen[all[i]] >= 3); /* every supported type, several seeds */
  }
}

int main(int argc, char **argv) {
  vectors_path = argc > 1 ? argv[1] : "tests/unit/data/quant_vectors.bin";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_type_table_matches_ggml_sizes),
      cmocka_unit_test(test_row_bytes_rejects_partial_blocks),
      cmocka_unit_test(test_fp16_special_values_convert_exactly),
      cmocka_unit_test(test_fp16_round_trips_every_finite_half),
      cmocka_unit_test(test_bf16_round_trips_and_rounds_to_even),
      cmocka_unit_test(test_dequantize_unsupported_type_is_named),
      cmocka_unit_test(test_q4_0_hand_block_matches_definition),
      cmocka_unit_test(test_q5_0_hand_block_takes_high_bit_from_qh),
      cmocka_unit_test_setup_teardown(test_dequantize_bit_exact_with_gguf_py_reference,
                                      load_vectors, free_vectors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
