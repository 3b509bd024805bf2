/* The CPU backend's LoRA op (backend_ops.lora, kernels/cpu/lora.c): y[row] += scale * B (A x[row])
 * for each segment's rows.
 * 1. Close to the product in double of the dequantized weights, for A / B of F32, F16 and Q8_0
 *    (within the rounding of the activations to the weights' vec_dot types), ranks 8, 16 (with
 *    a tail of 4 elements: 20) and 32, outputs that do and do not fill 8 columns; rows outside
 *    every segment untouched.
 * 2. Bit-identical on every SIMD level this CPU runs and with 1 or 2 threads, and each row the
 *    same alone (one segment of one row) as among others: the batch invariance the forward
 *    relies on (docs/design.md §5).
 * 3. Refusals: target counts, rows past the context, mismatched shapes. */
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
#include "kernels/quant.h"

enum { COLS = 96, ROWS = 11, MAX_OUT = 100 };

static uint64_t rng_state = 0x243F6A8885A308D3ULL;
static float rndf(void) { /* [-1, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(rng_state >> 40) / 8388608.0f - 1.0f;
}

/* A random [rows, cols] weight of type t (F32, F16, Q8_0) and its dequantized floats. */
struct weight {
  struct backend_weight w;
  void *data;
  float *deq;
};

static void make_weight(struct weight *m, enum ggml_type t, int64_t rows, int64_t cols, float amp) {
  size_t rb;
  assert_int_equal(ggml_row_bytes(t, cols, &rb), LLB_STATUS_OK);
  m->data = malloc(rb * (size_t)rows);
  m->deq = malloc((size_t)(rows * cols) * sizeof(float));
  for (int64_t r = 0; r < rows; r++) {
    uint8_t *row = (uint8_t *)m->data + (size_t)r * rb;
    for (int64_t k = 0; k < cols; k++) {
      const float v = amp * rndf();
      if (t == GGML_TYPE_F32) memcpy(row + k * 4, &v, 4);
      if (t == GGML_TYPE_F16) ((uint16_t *)(void *)row)[k] = llb_fp32_to_fp16(v);
      if (t == GGML_TYPE_Q8_0) {
        block_q8_0 *b = (block_q8_0 *)(void *)row + k / 32;
        if (k % 32 == 0) b->d = llb_fp32_to_fp16(amp / 127.0f);
        b->qs[k % 32] = (int8_t)lrintf(v / amp * 127.0f);
      }
    }
    assert_int_equal(ggml_dequantize_row(t, row, m->deq + r * cols, cols), LLB_STATUS_OK);
  }
  m->w = (struct backend_weight){.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = m->data};
}

static void free_weight(struct weight *m) {
  free(m->data);
  free(m->deq);
}

static struct backend_ctx *make_ctx(int threads) {
  struct backend_ctx *c = NULL;
  const struct backend_ctx_params p = {.n_threads = threads, .max_num_tokens = 32, .max_row_elems = 128,
                                       .max_context_len = 16};
  assert_int_equal(backend_cpu_ops()->ctx_create(&p, &c), LLB_STATUS_OK);
  return c;
}

/* Two segments over ROWS rows of x: rows 0, 2, 4, .. (adapter 0: targets 0 and 1) and
 * 1, 5, 9 (adapter 1: target 1 only); the rest of the rows take no adapter. */
static const int32_t SEG0[] = {0, 2, 4, 6, 8, 10}, SEG1[] = {1, 5, 9};

struct lora_case {
  struct weight a[2][2], b[2][2]; /* [adapter][target] */
  float x[ROWS * COLS];
  int64_t out[2];
};

static void make_case(struct lora_case *k, enum ggml_type ta, enum ggml_type tb, int64_t rank) {
  k->out[0] = 40, k->out[1] = MAX_OUT; /* 40: five blocks of 8 columns; 100: a tail of 4 */
  for (int ad = 0; ad < 2; ad++)
    for (int j = 0; j < 2; j++) {
      make_weight(&k->a[ad][j], ta, rank, COLS, 0.3f);
      make_weight(&k->b[ad][j], tb, k->out[j], rank, 0.2f);
    }
  for (int i = 0; i < ROWS * COLS; i++) k->x[i] = rndf();
}

static void free_case(struct lora_case *k) {
  for (int ad = 0; ad < 2; ad++)
    for (int j = 0; j < 2; j++) free_weight(&k->a[ad][j]), free_weight(&k->b[ad][j]);
}

/* y[j] [ROWS, out_j] = 1 everywhere, then the op with the two segments. */
static void run_case(struct backend_ctx *c, const struct lora_case *k, float *y0, float *y1) {
  for (int i = 0; i < ROWS * MAX_OUT; i++) y0[i] = y1[i] = 1.0f;
  const struct backend_lora_seg segs[2] = {
      {.rows = SEG0, .n_rows = 6, .a = {&k->a[0][0].w, &k->a[0][1].w}, .b = {&k->b[0][0].w, &k->b[0][1].w},
       .scale = {2.0f, 0.5f}},
      {.rows = SEG1, .n_rows = 3, .a = {NULL, &k->a[1][1].w}, .b = {NULL, &k->b[1][1].w}, .scale = {0, 1.5f}}};
  float *y[2] = {y0, y1};
  assert_int_equal(backend_cpu_ops()->lora(c, k->x, COLS, y, 2, segs, 2), LLB_STATUS_OK);
}

/* The expected y[j][row] in double from the dequantized weights. */
static double expect(const struct lora_case *k, int ad, int j, int row, int64_t col, float scale) {
  const struct weight *a = &k->a[ad][j], *b = &k->b[ad][j];
  const int64_t rank = a->w.rows;
  double u = 0;
  for (int64_t r = 0; r < rank; r++) {
    double t = 0;
    for (int64_t i = 0; i < COLS; i++) t += (double)a->deq[r * COLS + i] * k->x[row * COLS + i];
    u += (double)b->deq[col * rank + r] * t;
  }
  return 1.0 + scale * u;
}

static void check_types(enum ggml_type ta, enum ggml_type tb, int64_t rank) {
  static struct lora_case k;
  static float y0[ROWS * MAX_OUT], y1[ROWS * MAX_OUT], z0[ROWS * MAX_OUT], z1[ROWS * MAX_OUT];
  make_case(&k, ta, tb, rank);
  struct backend_ctx *c1 = make_ctx(1), *c2 = make_ctx(2);
  run_case(c1, &k, y0, y1);
  /* 1. against the double product: both activations rounded to the weights' types (fp16:
   *    2^-11 relative; Q8_0: amax / 254 a block, x's and t's errors adding up) bound the error */
  const bool q8 = ta == GGML_TYPE_Q8_0 || tb == GGML_TYPE_Q8_0;
  const double tol = (ta == GGML_TYPE_F32 && tb == GGML_TYPE_F32) ? 1e-4 : q8 ? 6e-2 : 1e-2;
  for (int row = 0; row < ROWS; row++)
    for (int j = 0; j < 2; j++)
      for (int64_t col = 0; col < k.out[j]; col++) {
        const float got = (j ? y1 : y0)[row * k.out[j] + col];
        const bool in0 = row % 2 == 0, in1 = row % 4 == 1;
        if (!in0 && !(in1 && j == 1)) {
          assert_true(got == 1.0f); /* no adapter for this row and target */
          continue;
        }
        const double want = in0 ? expect(&k, 0, j, row, col, j ? 0.5f : 2.0f) : expect(&k, 1, 1, row, col, 1.5f);
        if (fabs(got - want) > tol * (1.0 + fabs(want)))
          fail_msg("%s x %s rank %lld row %d target %d col %lld: %.7g, expected %.7g", ggml_type_name(ta),
                   ggml_type_name(tb), (long long)rank, row, j, (long long)col, got, want);
      }
  /* 2. every level and thread count: the same bits */
  for (int level = CPU_SIMD_LEVEL_SCALAR; level <= CPU_SIMD_LEVEL_AVX512_VNNI; level++) {
    if (cpu_backend_set_simd_level(c2, (enum cpu_simd_level)level) != (enum cpu_simd_level)level) continue;
    run_case(c2, &k, z0, z1);
    assert_memory_equal(y0, z0, sizeof(y0));
    assert_memory_equal(y1, z1, sizeof(y1));
  }
  /* ... and each row of segment 0 alone gives its row of the batch */
  for (int i = 0; i < 6; i++) {
    for (int q = 0; q < ROWS * MAX_OUT; q++) z0[q] = z1[q] = 1.0f;
    const struct backend_lora_seg one = {.rows = &SEG0[i], .n_rows = 1, .a = {&k.a[0][0].w, &k.a[0][1].w},
                                         .b = {&k.b[0][0].w, &k.b[0][1].w}, .scale = {2.0f, 0.5f}};
    float *y[2] = {z0, z1};
    assert_int_equal(backend_cpu_ops()->lora(c1, k.x, COLS, y, 2, &one, 1), LLB_STATUS_OK);
    assert_memory_equal(z0 + SEG0[i] * k.out[0], y0 + SEG0[i] * k.out[0], (size_t)k.out[0] * sizeof(float));
    assert_memory_equal(z1 + SEG0[i] * k.out[1], y1 + SEG0[i] * k.out[1], (size_t)k.out[1] * sizeof(float));
  }
  backend_cpu_ops()->ctx_destroy(c1);
  backend_cpu_ops()->ctx_destroy(c2);
  free_case(&k);
}

static void test_lora_op_f32(void **state) {
  (void)state;
  check_types(GGML_TYPE_F32, GGML_TYPE_F32, 8);
  check_types(GGML_TYPE_F32, GGML_TYPE_F32, 20);
}

static void test_lora_op_f16(void **state) {
  (void)state;
  check_types(GGML_TYPE_F16, GGML_TYPE_F16, 16);
  check_types(GGML_TYPE_F16, GGML_TYPE_F16, 20);
  check_types(GGML_TYPE_F32, GGML_TYPE_F16, 8);
}

static void test_lora_op_q8_0(void **state) {
  (void)state;
  check_types(GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 32);
  check_types(GGML_TYPE_Q8_0, GGML_TYPE_F16, 16);
}

static void test_lora_op_refuses_bad_calls(void **state) {
  (void)state;
  static struct lora_case k;
  make_case(&k, GGML_TYPE_F32, GGML_TYPE_F32, 8);
  struct backend_ctx *c = make_ctx(1);
  static float y0[ROWS * MAX_OUT], y1[ROWS * MAX_OUT];
  float *y[2] = {y0, y1};
  const struct backend_lora_seg ok = {.rows = SEG0, .n_rows = 6, .a = {&k.a[0][0].w}, .b = {&k.b[0][0].w},
                                      .scale = {1}};
  const struct backend_ops *ops = backend_cpu_ops();
  assert_int_equal(ops->lora(c, k.x, COLS, y, 0, &ok, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(ops->lora(c, k.x, COLS, y, BACKEND_LORA_MAX_TARGETS + 1, &ok, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(ops->lora(c, k.x, 256, y, 1, &ok, 1), LLB_STATUS_INVALID_ARGUMENT); /* over max_row_elems */
  struct backend_lora_seg bad = ok;
  bad.n_rows = 33; /* over max_num_tokens */
  assert_int_equal(ops->lora(c, k.x, COLS, y, 1, &bad, 1), LLB_STATUS_INVALID_ARGUMENT);
  bad = ok;
  const int32_t far[1] = {32}; /* a row past max_num_tokens */
  bad.rows = far, bad.n_rows = 1;
  assert_int_equal(ops->lora(c, k.x, COLS, y, 1, &bad, 1), LLB_STATUS_INVALID_ARGUMENT);
  bad = ok;
  bad.b[0] = &k.a[0][1].w; /* B's columns are not A's rank */
  assert_int_equal(ops->lora(c, k.x, COLS, y, 1, &bad, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(ops->lora(c, k.x, COLS, y, 1, &ok, 1), LLB_STATUS_OK);
  ops->ctx_destroy(c);
  free_case(&k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lora_op_f32),
      cmocka_unit_test(test_lora_op_f16),
      cmocka_unit_test(test_lora_op_q8_0),
      cmocka_unit_test(test_lora_op_refuses_bad_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
