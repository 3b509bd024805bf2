/* Device sampling against the CPU sampler (model/sampling/sampler.c), same keys: greedy
 * (with ties), temperature alone, min_p, top_p, top_k with top_p, on random logits (coarse
 * grids too, so that ties occur), vocab 1000 and 49152, 32 draws per setting. Tokens must be
 * equal: both walk the same order with the same Philox uniform, only the double sums differ
 * in order (a draw within ~1e-15 of a boundary, never seen at these sizes). top_k alone: the
 * check is that the token lies in the top-k set (written when sampler.c walked the kept ones in
 * its quickselect's order; both walk them in id order now). NaN rows give -1. */
#include <string.h>

#include "model/sampling/sampler.h"
#include "tests/unit/test_cuda_harness.h"

#define ROWS 32

static struct cuda_ctx *g_cuda;

static void sample_both(int32_t V, const struct cuda_sample_params *sp, bool coarse, uint64_t seed,
                        bool exact) {
  uint64_t s = seed;
  float *logits = malloc((size_t)ROWS * V * 4), *row = malloc((size_t)V * 4);
  struct cuda_sample_params params[ROWS];
  int32_t got[ROWS];
  for (int64_t i = 0; i < (int64_t)ROWS * V; i++) {
    const float x = 4.0f * tc_uniform(&s);
    logits[i] = coarse ? roundf(x * 2.0f) / 2.0f : x;
  }
  for (int r = 0; r < ROWS; r++) {
    params[r] = *sp;
    params[r].output_pos = r * 7 + 3;
    params[r].stream = (uint32_t)(r % 3);
  }
  void *l_d, *p_d, *t_d;
  CHECK_OK(tc_upload(g_cuda, logits, (size_t)ROWS * V * 4, &l_d));
  CHECK_OK(tc_upload(g_cuda, params, sizeof(params), &p_d));
  CHECK_OK(cuda_mem_alloc(sizeof(got), &t_d));
  CHECK_OK(cuda_sample(g_cuda, l_d, ROWS, V, p_d, t_d));
  CHECK_OK(cuda_copy_to_host(g_cuda, got, t_d, sizeof(got)));
  struct sampler *smp;
  CHECK_OK(sampler_create(V, &smp));
  int mismatches = 0;
  for (int r = 0; r < ROWS; r++) {
    struct sampler_params p;
    sampler_params_init(&p);
    p.temperature = sp->temperature, p.top_k = sp->top_k, p.top_p = sp->top_p, p.min_p = sp->min_p;
    p.seed = sp->seed;
    memcpy(row, logits + (size_t)r * V, (size_t)V * 4);
    struct sampler_result res;
    CHECK_OK(sampler_sample(smp, &p, row, NULL, 0, NULL, 0, params[r].stream, params[r].output_pos, &res));
    if (exact) {
      mismatches += got[r] != res.token_id;
    } else { /* top_k alone: in the top-k set */
      int64_t above = 0;
      const float x = got[r] >= 0 && got[r] < V ? logits[(size_t)r * V + got[r]] : -INFINITY;
      for (int32_t i = 0; i < V; i++) above += logits[(size_t)r * V + i] > x;
      mismatches += !(got[r] >= 0 && above < sp->top_k);
    }
  }
  CHECK(mismatches == 0, "V %d T %g k %d p %g min_p %g coarse %d: %d of %d rows differ", V, sp->temperature,
        sp->top_k, sp->top_p, sp->min_p, coarse, mismatches, ROWS);
  sampler_destroy(smp);
  cuda_mem_free(l_d), cuda_mem_free(p_d), cuda_mem_free(t_d);
  free(logits), free(row);
}

static void test_greedy_matches_cpu_with_ties_to_lowest_id(void) {
  const struct cuda_sample_params g = {0.0f, 0, 1.0f, 0.0f, 1, 0, 0};
  for (int coarse = 0; coarse < 2; coarse++) {
    sample_both(1000, &g, coarse, 1 + coarse, true);
    sample_both(49152, &g, coarse, 3 + coarse, true);
  }
}

static void test_temperature_min_p_top_p_match_cpu(void) {
  const struct cuda_sample_params grid[] = {
      {1.0f, 0, 1.0f, 0.0f, 42, 0, 0}, {0.7f, 0, 1.0f, 0.0f, 7, 0, 0},   {1.3f, 0, 1.0f, 0.05f, 9, 0, 0},
      {1.0f, 0, 0.9f, 0.0f, 11, 0, 0}, {0.8f, 0, 0.5f, 0.0f, 12, 0, 0},  {1.0f, 0, 0.99f, 0.1f, 13, 0, 0},
      {1.0f, 40, 0.9f, 0.0f, 14, 0, 0}, {0.6f, 5, 0.95f, 0.02f, 15, 0, 0}, {1.0f, 1, 0.9f, 0.0f, 16, 0, 0},
  };
  for (size_t i = 0; i < sizeof(grid) / sizeof(grid[0]); i++)
    for (int coarse = 0; coarse < 2; coarse++) {
      sample_both(1000, &grid[i], coarse, 100 + i * 2 + (uint64_t)coarse, true);
      sample_both(49152, &grid[i], coarse, 200 + i * 2 + (uint64_t)coarse, true);
    }
}

static void test_top_k_alone_stays_in_the_top_k(void) {
  const struct cuda_sample_params grid[] = {{1.0f, 1, 1.0f, 0.0f, 5, 0, 0}, {1.0f, 20, 1.0f, 0.0f, 6, 0, 0},
                                            {2.0f, 50, 1.0f, 0.0f, 8, 0, 0}};
  for (size_t i = 0; i < 3; i++) sample_both(49152, &grid[i], false, 300 + i, false);
}

static void test_nan_row_gives_minus_one(void) {
  float logits[2 * 64];
  uint64_t s = 3;
  for (int i = 0; i < 128; i++) logits[i] = tc_uniform(&s);
  logits[70] = NAN;
  const struct cuda_sample_params p[2] = {{0.0f, 0, 1.0f, 0.0f, 1, 0, 0}, {1.0f, 0, 1.0f, 0.0f, 1, 0, 0}};
  int32_t got[2];
  void *l_d, *p_d, *t_d;
  CHECK_OK(tc_upload(g_cuda, logits, sizeof(logits), &l_d));
  CHECK_OK(tc_upload(g_cuda, p, sizeof(p), &p_d));
  CHECK_OK(cuda_mem_alloc(sizeof(got), &t_d));
  CHECK_OK(cuda_sample(g_cuda, l_d, 2, 64, p_d, t_d));
  CHECK_OK(cuda_copy_to_host(g_cuda, got, t_d, sizeof(got)));
  CHECK(got[0] >= 0 && got[1] == -1, "tokens %d %d", got[0], got[1]);
  cuda_mem_free(l_d), cuda_mem_free(p_d), cuda_mem_free(t_d);
}

int main(void) {
  tc_require_device();
  const struct cuda_ctx_params cp = {1, 1, 64, 1, ROWS, 49152, 0};
  if (cuda_ctx_create(&cp, &g_cuda) != LLB_STATUS_OK) {
    fprintf(stderr, "context: %s\n", llb_err_last_where());
    return 1;
  }
  RUN_CASE(test_greedy_matches_cpu_with_ties_to_lowest_id);
  RUN_CASE(test_temperature_min_p_top_p_match_cpu);
  RUN_CASE(test_top_k_alone_stays_in_the_top_k);
  RUN_CASE(test_nan_row_gives_minus_one);
  cuda_ctx_destroy(g_cuda);
  return tc_finish();
}
