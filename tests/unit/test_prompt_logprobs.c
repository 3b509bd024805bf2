/* Prompt logprobs of a worker step (actors/gpu_worker/prompt_logprobs.c): which batch rows
 * score which prompt token across chunks, the log-softmax value and rank of the prompt token,
 * the top-k in order, the padding of a request with a smaller k, and the step's logits rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "actors/gpu_worker/prompt_logprobs.h"

#define VOCAB 6

static double log_softmax(const float *row, int32_t t) {
  double s = 0;
  for (int32_t i = 0; i < VOCAB; i++) s += exp((double)row[i]);
  return (double)row[t] - log(s);
}

static void chunks_score_each_next_prompt_token_once(void **state) {
  (void)state;
  struct prompt_logprobs pl = {0};
  const int32_t prompt[5] = {3, 1, 4, 2, 5};
  prompt_logprobs_reset(&pl);
  /* request A: k = 2, chunk [0, 3) at batch rows 0..2; request B: none; request C: k = 0,
   * the last chunk [3, 5) of the same prompt at rows 5..6 (position 4 samples, scores nothing) */
  assert_int_equal(prompt_logprobs_add(&pl, 2, prompt, 5, 0, 3, 0), LLB_STATUS_OK);
  assert_int_equal(prompt_logprobs_add(&pl, -1, prompt, 5, 0, 2, 3), LLB_STATUS_OK);
  assert_int_equal(prompt_logprobs_add(&pl, 0, prompt, 5, 3, 2, 5), LLB_STATUS_OK);
  assert_int_equal(pl.num_reqs, 3);
  assert_int_equal(pl.num_rows, 4);
  const int32_t want_rows[4] = {0, 1, 2, 5}, want_targets[4] = {1, 4, 2, 5};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pl.rows[i], want_rows[i]);
    assert_int_equal(pl.targets[i], want_targets[i]);
  }
  assert_int_equal(pl.num_per_req[0], 3);
  assert_int_equal(pl.num_per_req[1], 0);
  assert_int_equal(pl.num_per_req[2], 1);
  assert_int_equal(pl.start_per_req[0], 1);
  assert_int_equal(pl.start_per_req[2], 4);

  const int32_t sample[2] = {4, 6};
  const int32_t *all = NULL;
  int32_t num_all = 0;
  assert_int_equal(prompt_logprobs_indices(&pl, sample, 2, &all, &num_all), LLB_STATUS_OK);
  assert_int_equal(num_all, 6);
  const int32_t want_all[6] = {4, 6, 0, 1, 2, 5};
  for (int i = 0; i < 6; i++) assert_int_equal(all[i], want_all[i]);

  const float logits[4][VOCAB] = {{0.5f, 2.0f, -1.0f, 3.0f, 0.0f, 1.0f},
                                  {1.0f, 1.0f, 1.0f, 1.0f, 4.0f, -2.0f},
                                  {2.5f, -3.0f, 0.1f, 2.5f, 0.0f, 0.0f},
                                  {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.0f}};
  assert_int_equal(prompt_logprobs_compute(&pl, &logits[0][0], VOCAB), LLB_STATUS_OK);
  assert_int_equal(pl.max_k, 2);
  const int32_t cols = 3;
  const int32_t want_rank[4] = {2, 1, 3, 6}; /* tokens at least as likely, itself included */
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pl.lp_ids[i * cols], want_targets[i]);
    assert_true(fabs(pl.lp_values[i * cols] - log_softmax(logits[i], want_targets[i])) < 1e-5);
    assert_int_equal(pl.ranks[i], want_rank[i]);
  }
  /* row 0: top-2 are 3 (3.0) then 1 (2.0) */
  assert_int_equal(pl.lp_ids[1], 3);
  assert_int_equal(pl.lp_ids[2], 1);
  assert_true(fabs(pl.lp_values[1] - log_softmax(logits[0], 3)) < 1e-5);
  /* row 2: a tie at 2.5 goes to the lower id first */
  assert_int_equal(pl.lp_ids[2 * cols + 1], 0);
  assert_int_equal(pl.lp_ids[2 * cols + 2], 3);
  /* row 3 belongs to the k = 0 request: padded */
  assert_int_equal(pl.lp_ids[3 * cols + 1], -1);
  assert_true(isinf(pl.lp_values[3 * cols + 2]) && pl.lp_values[3 * cols + 2] < 0);

  struct llb_model_runner_output out = {0};
  prompt_logprobs_output(&pl, &out);
  assert_int_equal(out.prompt_logprobs.num_tokens, 4);
  assert_int_equal(out.prompt_logprobs.num_logprobs_per_token, 3);
  assert_ptr_equal(out.num_prompt_logprobs, pl.num_per_req);

  prompt_logprobs_reset(&pl); /* a step without prompt rows: the sampled rows alone, nothing out */
  assert_int_equal(prompt_logprobs_add(&pl, 1, prompt, 5, 4, 1, 0), LLB_STATUS_OK);
  assert_int_equal(pl.num_rows, 0);
  assert_int_equal(prompt_logprobs_indices(&pl, sample, 2, &all, &num_all), LLB_STATUS_OK);
  assert_ptr_equal(all, sample);
  struct llb_model_runner_output none = {0};
  prompt_logprobs_output(&pl, &none);
  assert_int_equal(none.prompt_logprobs.num_tokens, 0);
  assert_null(none.num_prompt_logprobs);
  prompt_logprobs_free(&pl);
}

static void target_outside_the_vocabulary_is_an_error(void **state) {
  (void)state;
  struct prompt_logprobs pl = {0};
  const int32_t prompt[2] = {0, VOCAB + 3};
  prompt_logprobs_reset(&pl);
  assert_int_equal(prompt_logprobs_add(&pl, 1, prompt, 2, 0, 2, 0), LLB_STATUS_OK);
  const float logits[VOCAB] = {0};
  assert_int_equal(prompt_logprobs_compute(&pl, logits, VOCAB), LLB_STATUS_INVALID_ARGUMENT);
  prompt_logprobs_free(&pl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chunks_score_each_next_prompt_token_once),
      cmocka_unit_test(target_outside_the_vocabulary_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
