/* The sim device's step-time model and tokens (actors/gpu_worker/runner_sim.c):
 * - the shape of a batch (attended pairs of prompts, chunks after a context, decodes);
 * - the fit recovers the coefficients of steps made from a known model, keeps every
 *   coefficient >= 0 when the best unconstrained one is negative, and refuses bad points;
 * - the JSON file round-trips, and a coefficient missing, negative or absurd is refused naming it;
 * - tokens: a greedy request's key is its prompt's alone, a seeded one's takes its seed; draws
 *   are pure, cover the vocabulary and never leave it;
 * - the wait returns at its deadline, not before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/gpu_worker/runner_sim.h"
#include "base/log.h"

static void test_shape_counts_the_keys_each_query_attends(void **state) {
  (void)state;
  /* seq 0: a 4-token prompt (1+2+3+4 = 10 pairs); seq 1: a 3-token chunk after 5 tokens of
   * context (6+7+8 = 21); seq 2: one decode token at position 9 (10). */
  const int32_t qsl[] = {0, 4, 7, 8}, lens[] = {4, 8, 10}, li[] = {3, 7};
  const struct llama_batch b = {.num_tokens = 8, .num_seqs = 3, .query_start_loc = qsl, .seq_lens = lens,
                                .num_logits = 2, .logits_indices = li};
  const struct sim_step_shape s = sim_step_shape_of(&b);
  assert_int_equal(s.num_tokens, 8);
  assert_int_equal(s.num_seqs, 3);
  assert_int_equal(s.num_sampled, 2);
  assert_true(fabs(s.attention_pairs - 41.0) < 1e-9);
  assert_true(fabs(s.context_tokens - 22.0) < 1e-9);
  const struct sim_cost_model m = {.fixed_s = 1e-3, .token_s = 1e-4, .sampled_row_s = 1e-5, .attention_s = 1e-6,
                                   .random_row_s = 1e-2, .context_s = 1e-7};
  struct sim_step_shape r = s;
  r.num_random = 1;
  assert_true(fabs(sim_cost_seconds(&m, &s) - (1e-3 + 8e-4 + 2e-5 + 41e-6 + 22e-7)) < 1e-12);
  assert_true(fabs(sim_cost_seconds(&m, &r) - sim_cost_seconds(&m, &s) - 1e-2) < 1e-12);
  /* the first step after idle pays first_step_s on top; the batch alone never says it is one */
  assert_int_equal(s.first, 0);
  const struct sim_cost_model fm = {.fixed_s = 1e-3, .first_step_s = 2e-3};
  struct sim_step_shape f = s;
  f.first = 1;
  assert_true(fabs(sim_cost_seconds(&fm, &f) - 3e-3) < 1e-12 && fabs(sim_cost_seconds(&fm, &s) - 1e-3) < 1e-12);
  /* the weights floor: a one-token step costs at least reading the weights */
  const struct sim_cost_model g = {.token_s = 1e-6, .weights_s = 5e-3};
  const struct sim_step_shape one = {.num_tokens = 1}, many = {.num_tokens = 10000};
  assert_true(fabs(sim_cost_seconds(&g, &one) - 5e-3) < 1e-12);
  assert_true(fabs(sim_cost_seconds(&g, &many) - 1e-2) < 1e-12);
}

/* Points from a known model (sampled rows partly at a temperature, every third the first step
 * after idle); n of them. */
static int32_t make_points(const struct sim_cost_model *m, struct sim_fit_point *pts) {
  int32_t n = 0;
  for (int32_t t = 1; t <= 512; t *= 2)
    for (int32_t rows = 1; rows <= 32 && rows <= t; rows *= 4) {
      struct sim_step_shape s = {.num_tokens = t, .num_seqs = rows, .num_sampled = rows, .num_random = rows / 2,
                                 .attention_pairs = (double)t * (t + 1) / 2.0 + 300.0 * rows,
                                 .context_tokens = 50.0 * rows * rows + t, .first = n % 3 == 0};
      pts[n++] = (struct sim_fit_point){.shape = s, .seconds = sim_cost_seconds(m, &s)};
    }
  return n;
}

static void test_fit_recovers_the_model_its_steps_came_from(void **state) {
  (void)state;
  const struct sim_cost_model truth = {.fixed_s = 2.1e-3, .token_s = 3.3e-4, .sampled_row_s = 2.4e-4,
                                       .random_row_s = 3e-4, .attention_s = 4.5e-7, .context_s = 2e-6,
                                       .first_step_s = 1.7e-3};
  struct sim_fit_point pts[64];
  const int32_t n = make_points(&truth, pts);
  struct sim_cost_model m = {.random_row_s = truth.random_row_s};
  struct sim_fit_quality q;
  assert_int_equal(sim_cost_fit(pts, n, &m, &q), LLB_STATUS_OK);
  assert_true(fabs(m.fixed_s / truth.fixed_s - 1) < 1e-6);
  assert_true(fabs(m.token_s / truth.token_s - 1) < 1e-6);
  assert_true(fabs(m.sampled_row_s / truth.sampled_row_s - 1) < 1e-6);
  assert_true(fabs(m.attention_s / truth.attention_s - 1) < 1e-6);
  assert_true(fabs(m.context_s / truth.context_s - 1) < 1e-6);
  assert_true(fabs(m.first_step_s / truth.first_step_s - 1) < 1e-6); /* what the steps after idle add */
  assert_true(m.random_row_s == truth.random_row_s);
  assert_int_equal(q.num_points, n);
  assert_true(q.max_rel_error < 1e-6);
  /* the same with weights of their own (absolute error, as --fit-steps weighs by class time) */
  for (int32_t i = 0; i < n; i++) pts[i].weight = 1.0;
  struct sim_cost_model w = {.random_row_s = truth.random_row_s};
  assert_int_equal(sim_cost_fit(pts, n, &w, &q), LLB_STATUS_OK);
  assert_true(fabs(w.token_s / truth.token_s - 1) < 1e-6 && fabs(w.context_s / truth.context_s - 1) < 1e-6);
  assert_true(fabs(w.first_step_s / truth.first_step_s - 1) < 1e-6);
  pts[0].weight = -1.0;
  assert_int_equal(sim_cost_fit(pts, n, &w, &q), LLB_STATUS_INVALID_ARGUMENT);
}

/* Steps whose time falls as the rows grow would want a negative coefficient: the fit keeps
 * every coefficient >= 0 and says how far it is off. */
static void test_fit_keeps_every_coefficient_non_negative(void **state) {
  (void)state;
  static const int32_t tokens[8] = {100, 300, 200, 400, 150, 350, 250, 450};
  struct sim_fit_point pts[8];
  for (int i = 0; i < 8; i++) /* t = 20 ms + 0.1 ms a token - 1 ms a row */
    pts[i] = (struct sim_fit_point){.shape = {.num_tokens = tokens[i], .num_seqs = i + 1, .num_sampled = i + 1,
                                              .attention_pairs = 50.0 * (i + 1) * (i + 1)},
                                    .seconds = 0.02 + 1e-4 * tokens[i] - 1e-3 * (i + 1)};
  struct sim_cost_model m = {0};
  struct sim_fit_quality q;
  assert_int_equal(sim_cost_fit(pts, 8, &m, &q), LLB_STATUS_OK);
  assert_true(m.fixed_s >= 0 && m.token_s >= 0 && m.sampled_row_s >= 0 && m.attention_s >= 0);
  /* the best non-negative model (numpy over the subsets: fixed 18.74 ms + 0.0875 ms a token,
   * max error 6.9%) */
  assert_true(fabs(m.fixed_s / 0.0187409591 - 1) < 1e-4 && fabs(m.token_s / 8.74950854e-05 - 1) < 1e-4);
  assert_true(m.sampled_row_s == 0 && m.attention_s == 0 && m.context_s == 0);
  assert_true(m.first_step_s == 0); /* no step after idle among the points: the term is 0, not a guess */
  assert_true(fabs(q.max_rel_error - 0.0688086970) < 1e-4);
  pts[3].seconds = 0.0;
  assert_int_equal(sim_cost_fit(pts, 8, &m, &q), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(sim_cost_fit(pts, 4, &m, &q), LLB_STATUS_INVALID_ARGUMENT);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_cost_model_file_round_trips_and_bad_ones_are_refused(void **state) {
  (void)state;
  char path[] = "/tmp/llb-sim-cost-XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  const struct sim_cost_model m = {.name = "h100 llama-3-8b", .source = "roofline", .fixed_s = 1.5e-3,
                                   .token_s = 2.7e-5, .weights_s = 5.5e-3, .sampled_row_s = 1e-6,
                                   .random_row_s = 2e-6, .attention_s = 4e-9, .context_s = 4.9e-8,
                                   .first_step_s = 1.5e-3};
  const struct sim_fit_quality q = {.num_points = 26, .rms_rel_error = 0.05, .max_rel_error = 0.1};
  assert_int_equal(sim_cost_model_write(path, &m, &q), LLB_STATUS_OK);
  struct sim_cost_model r;
  assert_int_equal(sim_cost_model_load(path, &r), LLB_STATUS_OK);
  assert_string_equal(r.name, m.name);
  assert_string_equal(r.source, m.source);
  assert_true(fabs(r.fixed_s / m.fixed_s - 1) < 1e-5 && fabs(r.token_s / m.token_s - 1) < 1e-5);
  assert_true(fabs(r.weights_s / m.weights_s - 1) < 1e-5 && fabs(r.sampled_row_s / m.sampled_row_s - 1) < 1e-5);
  assert_true(fabs(r.random_row_s / m.random_row_s - 1) < 1e-5 && fabs(r.attention_s / m.attention_s - 1) < 1e-5);
  assert_true(fabs(r.context_s / m.context_s - 1) < 1e-5 && fabs(r.first_step_s / m.first_step_s - 1) < 1e-5);
  /* optional terms absent (a file written before they existed): 0 */
  write_text(path, "{\"fixed_s\": 0.001, \"token_s\": 0, \"sampled_row_s\": 0, \"attention_s\": 0}");
  assert_int_equal(sim_cost_model_load(path, &r), LLB_STATUS_OK);
  assert_true(r.weights_s == 0 && r.random_row_s == 0 && r.context_s == 0 && r.first_step_s == 0 &&
              r.fixed_s == 0.001);
  const char *bad[][2] = {
      {"{\"token_s\": 0, \"sampled_row_s\": 0, \"attention_s\": 0}", "fixed_s"},
      {"{\"fixed_s\": -1, \"token_s\": 0, \"sampled_row_s\": 0, \"attention_s\": 0}", "fixed_s"},
      {"{\"fixed_s\": 0, \"token_s\": \"fast\", \"sampled_row_s\": 0, \"attention_s\": 0}", "token_s"},
      {"{\"fixed_s\": 0, \"token_s\": 0, \"sampled_row_s\": 1e300, \"attention_s\": 0}", "sampled_row_s"},
      {"[1, 2]", "JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_text(path, bad[i][0]);
    assert_int_equal(sim_cost_model_load(path, &r), LLB_STATUS_MALFORMED);
    assert_non_null(strstr(llb_err_last(), bad[i][1]));
  }
  unlink(path);
  assert_int_equal(sim_cost_model_load(path, &r), LLB_STATUS_IO);
}

static void test_tokens_depend_on_key_and_position_only(void **state) {
  (void)state;
  int32_t ids[50];
  for (int i = 0; i < 50; i++) ids[i] = 1000 + 2 * i; /* the allowed ids */
  const struct sim_vocab v = {.ids = ids, .num_ids = 50};
  const int32_t prompt[] = {5, 6, 7}, other[] = {5, 6, 8};
  struct llb_sampling_params greedy, seeded;
  llb_sampling_params_init(&greedy);
  llb_sampling_params_init(&seeded);
  greedy.temperature = 0.0f;
  greedy.seed = 1;
  seeded.seed = 1;
  const uint64_t kg = sim_request_key(&greedy, prompt, 3);
  greedy.seed = 2; /* greedy: the seed does not matter */
  assert_true(sim_request_key(&greedy, prompt, 3) == kg);
  assert_true(sim_request_key(&greedy, other, 3) != kg);
  const uint64_t ks = sim_request_key(&seeded, prompt, 3);
  assert_true(ks != kg);
  seeded.seed = 2;
  assert_true(sim_request_key(&seeded, prompt, 3) != ks);
  bool seen[50] = {false};
  int distinct = 0, same_as_other_key = 0;
  for (int64_t pos = 0; pos < 2000; pos++) {
    const int32_t t = sim_token(&v, ks, pos);
    assert_int_equal(t, sim_token(&v, ks, pos));
    assert_true(t >= 1000 && t <= 1098 && t % 2 == 0);
    if (!seen[(t - 1000) / 2]) seen[(t - 1000) / 2] = true, distinct++;
    same_as_other_key += t == sim_token(&v, kg, pos);
  }
  assert_int_equal(distinct, 50);          /* 2000 draws over 50 ids miss one with p < 1e-20 */
  assert_true(same_as_other_key < 200);    /* ~40 expected: another key, other tokens */
}

static void test_wait_returns_at_its_deadline(void **state) {
  (void)state;
  const int64_t deadline = llb_now_ns() + 20000000;
  sim_wait_until(deadline);
  assert_true(llb_now_ns() >= deadline);
  const int64_t t0 = llb_now_ns();
  sim_wait_until(t0 - 1000000000); /* passed: at once */
  assert_true(llb_now_ns() - t0 < 1000000000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_counts_the_keys_each_query_attends),
      cmocka_unit_test(test_fit_recovers_the_model_its_steps_came_from),
      cmocka_unit_test(test_fit_keeps_every_coefficient_non_negative),
      cmocka_unit_test(test_cost_model_file_round_trips_and_bad_ones_are_refused),
      cmocka_unit_test(test_tokens_depend_on_key_and_position_only),
      cmocka_unit_test(test_wait_returns_at_its_deadline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
