/* Differential tests of the elementwise CUDA ops and matmul against the CPU backend
 * (kernels/cpu) or a float64 reference, over grids of shapes and seeds, never on zeros.
 * Tolerances: dequantize to f32, embed, kv_write, gather: bit-exact; dequantize to f16: the
 * f32 reference rounded (RNE) bit-exact; rms_norm: |d| <= 4e-6 * max|ref| (double sums in
 * another order, IEEE sqrt/div); rope: |d| <= 2e-5 (device sinf/cosf vs glibc, a few ulps
 * at arguments up to 1e4 rad); silu_and_mul: <= 1 fp16 ulp; matmul: ||d|| / ||ref|| <= 2e-5
 * against float64 over the same fp16 operands (fp32 accumulation). */
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/test_cuda_harness.h"

static struct cuda_ctx *g_cuda;
static struct backend_ctx *g_cpu;
static const struct backend_ops *cpu;

static size_t type_d_offset(enum ggml_type t) { return t == GGML_TYPE_Q6_K ? 208 : 0; }

/* Random blocks of type t with finite, sized scales (d, dmin / m). */
static uint8_t *random_blocks(enum ggml_type t, int64_t n, uint64_t *s, size_t *bytes) {
  size_t rb;
  if (ggml_row_bytes(t, n, &rb) != LLB_STATUS_OK) return NULL;
  uint8_t *p = malloc(rb);
  for (size_t i = 0; i < rb; i++) p[i] = (uint8_t)tc_next(s);
  const size_t bb = ggml_type_block_bytes(t);
  if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
    for (int64_t i = 0; i < n; i++) {
      const uint16_t h = t == GGML_TYPE_F16 ? llb_fp32_to_fp16(4.0f * tc_uniform(s)) : llb_fp32_to_bf16(4.0f * tc_uniform(s));
      memcpy(p + 2 * i, &h, 2);
    }
  } else if (t == GGML_TYPE_F32) {
    for (int64_t i = 0; i < n; i++) {
      const float f = 4.0f * tc_uniform(s);
      memcpy(p + 4 * i, &f, 4);
    }
  } else {
    for (size_t b = 0; b < rb / bb; b++) {
      const uint16_t d = llb_fp32_to_fp16(0.01f + 0.05f * (1.0f + tc_uniform(s)));
      const uint16_t m = llb_fp32_to_fp16(0.05f * tc_uniform(s));
      memcpy(p + b * bb + type_d_offset(t), &d, 2);
      if (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) memcpy(p + b * bb + 2, &m, 2);
    }
  }
  *bytes = rb;
  return p;
}

static void test_dequantize_matches_ggml_bit_for_bit(void) {
  const enum ggml_type types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                                  GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
    for (uint64_t seed = 1; seed <= 3; seed++) {
      uint64_t s = seed * 7919 + ti;
      const int64_t n = 256 * (int64_t)(1 + seed * 37);
      size_t bytes = 0;
      uint8_t *src = random_blocks(types[ti], n, &s, &bytes);
      float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
      uint16_t *got16 = malloc((size_t)n * 2);
      void *src_d = NULL, *dst_d = NULL, *dst16_d = NULL;
      CHECK_OK(ggml_dequantize_row(types[ti], src, ref, n));
      CHECK_OK(tc_upload(g_cuda, src, bytes, &src_d));
      CHECK_OK(cuda_mem_alloc((size_t)n * 4, &dst_d));
      CHECK_OK(cuda_mem_alloc((size_t)n * 2, &dst16_d));
      CHECK_OK(cuda_dequantize(g_cuda, types[ti], src_d, n, CUDA_DTYPE_F32, dst_d));
      CHECK_OK(cuda_dequantize(g_cuda, types[ti], src_d, n, CUDA_DTYPE_F16, dst16_d));
      CHECK_OK(cuda_copy_to_host(g_cuda, got, dst_d, (size_t)n * 4));
      CHECK_OK(cuda_copy_to_host(g_cuda, got16, dst16_d, (size_t)n * 2));
      int64_t bad = 0, bad16 = 0, nonzero = 0;
      for (int64_t i = 0; i < n; i++) {
        bad += memcmp(&ref[i], &got[i], 4) != 0;
        bad16 += got16[i] != llb_fp32_to_fp16(ref[i]);
        nonzero += ref[i] != 0.0f;
      }
      CHECK(bad == 0 && bad16 == 0, "%s seed %llu: %lld f32 / %lld f16 of %lld differ", ggml_type_name(types[ti]),
            (unsigned long long)seed, (long long)bad, (long long)bad16, (long long)n);
      CHECK(nonzero > n / 2, "%s: data mostly zero", ggml_type_name(types[ti]));
      cuda_mem_free(src_d), cuda_mem_free(dst_d), cuda_mem_free(dst16_d);
      free(src), free(ref), free(got), free(got16);
    }
}

static void test_embed_gathers_rows_exactly(void) {
  uint64_t s = 11;
  const int64_t V = 300, E = 192;
  const int32_t n = 17;
  uint16_t *table = malloc((size_t)(V * E) * 2);
  for (int64_t i = 0; i < V * E; i++) table[i] = llb_fp32_to_fp16(tc_uniform(&s));
  int32_t ids[17];
  for (int i = 0; i < n; i++) ids[i] = (int32_t)(tc_next(&s) % V);
  ids[3] = ids[5]; /* a repeated id */
  void *t_d = NULL, *ids_d = NULL, *out_d = NULL;
  float *out = malloc((size_t)n * E * 4);
  CHECK_OK(tc_upload(g_cuda, table, (size_t)(V * E) * 2, &t_d));
  CHECK_OK(tc_upload(g_cuda, ids, sizeof(ids), &ids_d));
  CHECK_OK(cuda_mem_alloc((size_t)n * E * 4, &out_d));
  const struct cuda_weight w = {CUDA_DTYPE_F16, V, E, t_d};
  CHECK_OK(cuda_embed(g_cuda, &w, ids_d, n, out_d));
  CHECK_OK(cuda_copy_to_host(g_cuda, out, out_d, (size_t)n * E * 4));
  int64_t bad = 0;
  for (int i = 0; i < n; i++)
    for (int64_t j = 0; j < E; j++) bad += out[i * E + j] != llb_fp16_to_fp32(table[ids[i] * E + j]);
  CHECK(bad == 0, "%lld elements differ", (long long)bad);
  cuda_mem_free(t_d), cuda_mem_free(ids_d), cuda_mem_free(out_d);
  free(table), free(out);
}

static void test_rms_norm_with_residual_add_matches_cpu(void) {
  const int32_t dims[] = {64, 576, 2048, 3000};
  for (size_t di = 0; di < 4; di++)
    for (uint64_t seed = 1; seed <= 2; seed++) {
      uint64_t s = seed * 31 + di;
      const int32_t rows = 5 + (int32_t)seed * 3, dim = dims[di];
      const size_t n = (size_t)rows * dim;
      float *x = malloc(n * 4), *add = malloc(n * 4), *w = malloc((size_t)dim * 4), *ref = malloc(n * 4);
      float *got = malloc(n * 4), *gotx = malloc(n * 4);
      uint16_t *got16 = malloc(n * 2);
      for (size_t i = 0; i < n; i++) x[i] = 3.0f * tc_uniform(&s), add[i] = tc_uniform(&s);
      for (int32_t i = 0; i < dim; i++) w[i] = 1.0f + 0.5f * tc_uniform(&s);
      void *x_d, *add_d, *w_d, *out_d, *out16_d;
      CHECK_OK(tc_upload(g_cuda, x, n * 4, &x_d));
      CHECK_OK(tc_upload(g_cuda, add, n * 4, &add_d));
      CHECK_OK(tc_upload(g_cuda, w, (size_t)dim * 4, &w_d));
      CHECK_OK(cuda_mem_alloc(n * 4, &out_d));
      CHECK_OK(cuda_mem_alloc(n * 2, &out16_d));
      CHECK_OK(cuda_rms_norm(g_cuda, x_d, add_d, w_d, rows, dim, 1e-5f, out_d, out16_d));
      CHECK_OK(cuda_copy_to_host(g_cuda, got, out_d, n * 4));
      CHECK_OK(cuda_copy_to_host(g_cuda, got16, out16_d, n * 2));
      CHECK_OK(cuda_copy_to_host(g_cuda, gotx, x_d, n * 4));
      for (size_t i = 0; i < n; i++) x[i] += add[i];
      CHECK_OK(cpu->rms_norm(g_cpu, x, w, rows, dim, 1e-5f, ref));
      float maxref = 0, maxd = 0;
      int64_t badx = 0, bad16 = 0;
      for (size_t i = 0; i < n; i++) {
        maxref = fmaxf(maxref, fabsf(ref[i]));
        maxd = fmaxf(maxd, fabsf(ref[i] - got[i]));
        badx += gotx[i] != x[i];
        const float h = llb_fp16_to_fp32(got16[i]), hr = llb_fp16_to_fp32(llb_fp32_to_fp16(got[i]));
        bad16 += h != hr;
      }
      CHECK(maxd <= 4e-6f * maxref, "dim %d: max diff %g (max %g)", dim, maxd, maxref);
      CHECK(badx == 0 && bad16 == 0, "dim %d: residual %lld, f16 %lld differ", dim, (long long)badx, (long long)bad16);
      cuda_mem_free(x_d), cuda_mem_free(add_d), cuda_mem_free(w_d), cuda_mem_free(out_d), cuda_mem_free(out16_d);
      free(x), free(add), free(w), free(ref), free(got), free(gotx), free(got16);
    }
}

static void test_rope_norm_and_neox_match_cpu(void) {
  const int32_t head_dims[] = {64, 128, 64};
  const int32_t n_dims[] = {64, 128, 32};
  for (int style = 0; style < 2; style++)
    for (size_t hi = 0; hi < 3; hi++) {
      uint64_t s = 100 + hi * 3 + (uint64_t)style;
      const int32_t rows = 9, heads = 6, D = head_dims[hi];
      const int64_t stride = (int64_t)heads * D + 40; /* rows inside a wider fused buffer */
      const size_t n = (size_t)rows * stride;
      float *x = malloc(n * 4), *ref = malloc((size_t)rows * heads * D * 4), *got = malloc(n * 4);
      int32_t pos[9];
      for (size_t i = 0; i < n; i++) x[i] = tc_uniform(&s);
      for (int i = 0; i < rows; i++) pos[i] = (int32_t)(tc_next(&s) % 9000);
      for (int r = 0; r < rows; r++) memcpy(ref + (size_t)r * heads * D, x + r * stride, (size_t)heads * D * 4);
      const struct backend_rope_params p = {n_dims[hi], hi == 1 ? 500000.0f : 10000.0f, 1.0f,
                                            style ? BACKEND_ROPE_STYLE_NEOX : BACKEND_ROPE_STYLE_NORM, NULL, 1.0f};
      void *x_d, *pos_d;
      CHECK_OK(tc_upload(g_cuda, x, n * 4, &x_d));
      CHECK_OK(tc_upload(g_cuda, pos, sizeof(pos), &pos_d));
      CHECK_OK(cuda_rope(g_cuda, x_d, stride, pos_d, rows, heads, D, &p));
      CHECK_OK(cuda_copy_to_host(g_cuda, got, x_d, n * 4));
      CHECK_OK(cpu->rope(g_cpu, ref, pos, rows, heads, D, &p));
      float maxd = 0;
      int64_t pad_bad = 0;
      for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < (int64_t)heads * D; i++)
          maxd = fmaxf(maxd, fabsf(got[r * stride + i] - ref[(size_t)r * heads * D + i]));
        for (int64_t i = (int64_t)heads * D; i < stride; i++) pad_bad += got[r * stride + i] != x[r * stride + i];
      }
      CHECK(maxd <= 2e-5f && pad_bad == 0, "style %d D %d n_dims %d: max diff %g, %lld stride floats touched",
            style, D, n_dims[hi], maxd, (long long)pad_bad);
      cuda_mem_free(x_d), cuda_mem_free(pos_d);
      free(x), free(ref), free(got);
    }
}

static void test_kv_write_matches_cpu_and_skips_slot_minus_one(void) {
  uint64_t s = 5;
  const int32_t NB = 7, BS = 16, HKV = 3, D = 64, rows = 23;
  const int64_t row = HKV * D, stride = 3 * row;
  const size_t cache = (size_t)NB * BS * row;
  uint16_t *k_ref = malloc(cache * 2), *v_ref = malloc(cache * 2), *k_got = malloc(cache * 2), *v_got = malloc(cache * 2);
  for (size_t i = 0; i < cache; i++) k_ref[i] = v_ref[i] = 0x7E00; /* NaN poison: unwritten slots stay so */
  float *kv = malloc((size_t)rows * stride * 4), *k = malloc((size_t)rows * row * 4), *v = malloc((size_t)rows * row * 4);
  for (int64_t i = 0; i < rows * stride; i++) kv[i] = 2.0f * tc_uniform(&s);
  int64_t slots[23];
  for (int i = 0; i < rows; i++) {
    slots[i] = (i % 5 == 2) ? -1 : (int64_t)((i * 37) % (NB * BS));
    memcpy(k + i * row, kv + i * stride, (size_t)row * 4);
    memcpy(v + i * row, kv + i * stride + row, (size_t)row * 4);
  }
  void *kc_d, *vc_d, *kv_d, *sl_d;
  CHECK_OK(tc_upload(g_cuda, k_ref, cache * 2, &kc_d));
  CHECK_OK(tc_upload(g_cuda, v_ref, cache * 2, &vc_d));
  CHECK_OK(tc_upload(g_cuda, kv, (size_t)rows * stride * 4, &kv_d));
  CHECK_OK(tc_upload(g_cuda, slots, sizeof(slots), &sl_d));
  const struct cuda_kv_layer layer = {kc_d, vc_d, NB, BS, HKV, D};
  CHECK_OK(cuda_kv_write(g_cuda, &layer, kv_d, (float *)kv_d + row, stride, sl_d, rows));
  CHECK_OK(cuda_copy_to_host(g_cuda, k_got, kc_d, cache * 2));
  CHECK_OK(cuda_copy_to_host(g_cuda, v_got, vc_d, cache * 2));
  const struct backend_kv_layer cl = {k_ref, v_ref, NB, BS, HKV, D, BACKEND_KV_DTYPE_F16};
  CHECK_OK(cpu->kv_write(g_cpu, &cl, k, v, slots, rows));
  CHECK(memcmp(k_ref, k_got, cache * 2) == 0 && memcmp(v_ref, v_got, cache * 2) == 0, "caches differ");
  cuda_mem_free(kc_d), cuda_mem_free(vc_d), cuda_mem_free(kv_d), cuda_mem_free(sl_d);
  free(k_ref), free(v_ref), free(k_got), free(v_got), free(kv), free(k), free(v);
}

static void test_silu_and_mul_matches_cpu(void) {
  uint64_t s = 77;
  const int32_t rows = 6;
  const int64_t n = 1536, stride = 2 * n;
  float *gu = malloc((size_t)rows * stride * 4), *ref = malloc((size_t)rows * n * 4);
  uint16_t *got = malloc((size_t)rows * n * 2);
  for (int64_t i = 0; i < rows * stride; i++) gu[i] = 6.0f * tc_uniform(&s);
  for (int r = 0; r < rows; r++)
    CHECK_OK(cpu->swiglu(g_cpu, gu + r * stride, gu + r * stride + n, n, ref + r * n));
  void *gu_d, *out_d;
  CHECK_OK(tc_upload(g_cuda, gu, (size_t)rows * stride * 4, &gu_d));
  CHECK_OK(cuda_mem_alloc((size_t)rows * n * 2, &out_d));
  CHECK_OK(cuda_silu_and_mul(g_cuda, gu_d, (float *)gu_d + n, stride, rows, n, out_d));
  CHECK_OK(cuda_copy_to_host(g_cuda, got, out_d, (size_t)rows * n * 2));
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * n; i++) {
    const int d = (int)got[i] - (int)llb_fp32_to_fp16(ref[i]);
    bad += d > 1 || d < -1;
  }
  CHECK(bad == 0, "%lld values more than 1 fp16 ulp off", (long long)bad);
  cuda_mem_free(gu_d), cuda_mem_free(out_d);
  free(gu), free(ref), free(got);
}

static void test_gather_f16_rounds_selected_rows(void) {
  uint64_t s = 9;
  const int32_t dim = 576, src_rows = 10, n = 4;
  float *x = malloc((size_t)src_rows * dim * 4);
  for (int64_t i = 0; i < (int64_t)src_rows * dim; i++) x[i] = 10.0f * tc_uniform(&s);
  const int32_t rows[4] = {9, 0, 4, 9};
  uint16_t got[4 * 576];
  void *x_d, *r_d, *o_d;
  CHECK_OK(tc_upload(g_cuda, x, (size_t)src_rows * dim * 4, &x_d));
  CHECK_OK(tc_upload(g_cuda, rows, sizeof(rows), &r_d));
  CHECK_OK(cuda_mem_alloc(sizeof(got), &o_d));
  CHECK_OK(cuda_gather_f16(g_cuda, x_d, r_d, n, dim, o_d));
  CHECK_OK(cuda_copy_to_host(g_cuda, got, o_d, sizeof(got)));
  int64_t bad = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < dim; j++) bad += got[i * dim + j] != llb_fp32_to_fp16(x[rows[i] * dim + j]);
  CHECK(bad == 0, "%lld differ", (long long)bad);
  cuda_mem_free(x_d), cuda_mem_free(r_d), cuda_mem_free(o_d);
  free(x);
}

static void test_matmul_matches_float64_reference(void) {
  const int32_t shapes[][3] = {{1, 576, 576}, {7, 1536, 576}, {32, 576, 1536}, {64, 2048, 512}, {3, 8192, 2048}};
  for (size_t si = 0; si < 5; si++)
    for (int bf = 0; bf < 2; bf++) {
      uint64_t s = 1000 + si * 2 + (uint64_t)bf;
      const int32_t n = shapes[si][0], rows = shapes[si][1], cols = shapes[si][2];
      uint16_t *w = malloc((size_t)rows * cols * 2), *x = malloc((size_t)n * cols * 2);
      float *got = malloc((size_t)n * rows * 4);
      for (int64_t i = 0; i < (int64_t)rows * cols; i++)
        w[i] = bf ? llb_fp32_to_bf16(tc_uniform(&s)) : llb_fp32_to_fp16(tc_uniform(&s));
      for (int64_t i = 0; i < (int64_t)n * cols; i++)
        x[i] = bf ? llb_fp32_to_bf16(tc_uniform(&s)) : llb_fp32_to_fp16(tc_uniform(&s));
      void *w_d, *x_d, *o_d;
      CHECK_OK(tc_upload(g_cuda, w, (size_t)rows * cols * 2, &w_d));
      CHECK_OK(tc_upload(g_cuda, x, (size_t)n * cols * 2, &x_d));
      CHECK_OK(cuda_mem_alloc((size_t)n * rows * 4, &o_d));
      const struct cuda_weight cw = {bf ? CUDA_DTYPE_BF16 : CUDA_DTYPE_F16, rows, cols, w_d};
      CHECK_OK(cuda_matmul(g_cuda, x_d, n, &cw, o_d));
      CHECK_OK(cuda_copy_to_host(g_cuda, got, o_d, (size_t)n * rows * 4));
      double num = 0, den = 0;
      for (int32_t r = 0; r < n; r++)
        for (int32_t o = 0; o < rows; o++) {
          double acc = 0;
          for (int32_t k = 0; k < cols; k++) {
            const uint16_t a = w[(int64_t)o * cols + k], b = x[(int64_t)r * cols + k];
            acc += (double)(bf ? llb_bf16_to_fp32(a) : llb_fp16_to_fp32(a)) *
                   (double)(bf ? llb_bf16_to_fp32(b) : llb_fp16_to_fp32(b));
          }
          const double d = acc - got[(int64_t)r * rows + o];
          num += d * d, den += acc * acc;
        }
      CHECK(sqrt(num / den) <= 2e-5, "%s %d x [%d, %d]: rel err %g", bf ? "bf16" : "f16", n, rows, cols,
            sqrt(num / den));
      cuda_mem_free(w_d), cuda_mem_free(x_d), cuda_mem_free(o_d);
      free(w), free(x), free(got);
    }
}

int main(void) {
  tc_require_device();
  const struct cuda_ctx_params cp = {64, 32, 128, 4096, 0, 0, 0};
  const struct backend_ctx_params bp = {.n_threads = 2, .max_num_tokens = 64, .max_row_elems = 8192, .max_context_len = 4096};
  cpu = backend_cpu_ops();
  if (cuda_ctx_create(&cp, &g_cuda) != LLB_STATUS_OK || cpu->ctx_create(&bp, &g_cpu) != LLB_STATUS_OK) {
    fprintf(stderr, "context: %s\n", llb_err_last_where());
    return 1;
  }
  RUN_CASE(test_dequantize_matches_ggml_bit_for_bit);
  RUN_CASE(test_embed_gathers_rows_exactly);
  RUN_CASE(test_rms_norm_with_residual_add_matches_cpu);
  RUN_CASE(test_rope_norm_and_neox_match_cpu);
  RUN_CASE(test_kv_write_matches_cpu_and_skips_slot_minus_one);
  RUN_CASE(test_silu_and_mul_matches_cpu);
  RUN_CASE(test_gather_f16_rounds_selected_rows);
  RUN_CASE(test_matmul_matches_float64_reference);
  cuda_ctx_destroy(g_cuda);
  cpu->ctx_destroy(g_cpu);
  return tc_finish();
}
