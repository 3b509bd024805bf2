/* Scheduler stop conditions (vLLM check_stop): EOS, stop_token_ids, max_tokens,
 * max_model_len, min_tokens suppressing EOS and stop ids, ignore_eos. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_scheduler_harness.h"

#define EOS 2

struct run_result {
  int32_t num_tokens;
  int32_t last_token;
  enum sched_finish_reason reason;
  int32_t stop_token_id;
};

/* One request alone; the fake sampler emits `special` at output position `special_at`. */
static struct run_result run_one(struct llb_sampling_params sp, int32_t max_model_len, int32_t special,
                                 int32_t special_at) {
  struct sched_config c;
  sched_config_init(&c);
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_model_len = max_model_len;
  struct harness h;
  h_init(&h, &c);
  h.eos = special;
  h.eos_at = special_at;
  int32_t prompt[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  struct sched_new_request nr = {.request_id = "req", .prompt_token_ids = prompt, .num_prompt_tokens = 10,
                                 .sampling_params = &sp, .eos_token_id = EOS};
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  struct run_result rr = {0};
  for (int s = 0; s < 300 && sched_num_unfinished(h.s) > 0; s++) {
    h_step(&h);
    for (int32_t i = 0; i < h.eo.num_outputs; i++) {
      const struct sched_engine_output *o = &h.eo.outputs[i];
      assert_int_equal(o->first_output_pos, rr.num_tokens);
      rr.num_tokens += o->num_new_tokens;
      if (o->num_new_tokens) rr.last_token = sched_engine_outputs_tokens(&h.eo, i)[o->num_new_tokens - 1];
      rr.reason = o->finish_reason;
      rr.stop_token_id = o->stop_token_id;
    }
  }
  assert_int_equal(sched_num_unfinished(h.s), 0);
  h_fini(&h);
  return rr;
}

static struct llb_sampling_params params(int32_t max_tokens) {
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.max_tokens = max_tokens;
  return sp;
}

static void test_eos_stops_with_reason_stop(void **state) {
  (void)state;
  struct run_result r = run_one(params(50), 256, EOS, 6);
  assert_int_equal(r.num_tokens, 7);
  assert_int_equal(r.last_token, EOS);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_STOP);
  assert_int_equal(r.stop_token_id, -1);
}

static void test_ignore_eos_runs_to_max_tokens(void **state) {
  (void)state;
  struct llb_sampling_params sp = params(12);
  sp.ignore_eos = true;
  struct run_result r = run_one(sp, 256, EOS, 3);
  assert_int_equal(r.num_tokens, 12);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_LENGTH);
}

static void test_stop_token_id_stops_and_is_reported(void **state) {
  (void)state;
  struct llb_sampling_params sp = params(50);
  sp.num_stop_token_ids = 2;
  sp.stop_token_ids[0] = 77;
  sp.stop_token_ids[1] = 55;
  struct run_result r = run_one(sp, 256, 55, 4);
  assert_int_equal(r.num_tokens, 5);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_STOP);
  assert_int_equal(r.stop_token_id, 55);
}

static void test_max_tokens_caps_with_reason_length(void **state) {
  (void)state;
  struct run_result r = run_one(params(9), 256, -1, 0);
  assert_int_equal(r.num_tokens, 9);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_LENGTH);
}

static void test_max_model_len_caps_with_reason_length(void **state) {
  (void)state;
  struct run_result r = run_one(params(-1), 24, -1, 0); /* 10 prompt + 14 = 24 */
  assert_int_equal(r.num_tokens, 14);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_LENGTH);
  r = run_one(params(100), 30, -1, 0);
  assert_int_equal(r.num_tokens, 20);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_LENGTH);
}

static void test_min_tokens_suppresses_eos_and_stop_ids(void **state) {
  (void)state;
  struct llb_sampling_params sp = params(20);
  sp.min_tokens = 5;
  struct run_result r = run_one(sp, 256, EOS, 2); /* EOS at position 2 < min_tokens: ignored */
  assert_int_equal(r.num_tokens, 20);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_LENGTH);
  r = run_one(sp, 256, EOS, 5);                   /* the 6th token: honored */
  assert_int_equal(r.num_tokens, 6);
  assert_int_equal(r.reason, SCHED_FINISH_REASON_STOP);
  sp.num_stop_token_ids = 1;
  sp.stop_token_ids[0] = 66;
  r = run_one(sp, 256, 66, 3);
  assert_int_equal(r.num_tokens, 20);
}

static void test_add_request_rejects_bad_requests(void **state) {
  (void)state;
  struct sched_config c;
  sched_config_init(&c);
  c.max_model_len = 16;
  c.block_size = 4;
  c.num_blocks = 3;
  struct scheduler *s;
  assert_int_equal(sched_create(&c, &s), LLB_STATUS_OK);
  int32_t p[16] = {1};
  struct sched_new_request nr = {.request_id = "a", .prompt_token_ids = p, .num_prompt_tokens = 16};
  struct llb_sampling_params nr_sp;  llb_sampling_params_init(&nr_sp);  nr.sampling_params = &nr_sp;
  assert_int_equal(sched_add_request(s, &nr), LLB_STATUS_TOO_LARGE);   /* max_model_len */
  nr.num_prompt_tokens = 12;
  assert_int_equal(sched_add_request(s, &nr), LLB_STATUS_TOO_LARGE);   /* 4 blocks > 3 */
  nr.num_prompt_tokens = 0;
  assert_int_equal(sched_add_request(s, &nr), LLB_STATUS_INVALID_ARGUMENT);
  nr.num_prompt_tokens = 3;
  assert_int_equal(sched_add_request(s, &nr), LLB_STATUS_OK);
  assert_int_equal(sched_add_request(s, &nr), LLB_STATUS_INVALID_ARGUMENT); /* duplicate id */
  c.max_num_seqs = 0;
  struct scheduler *bad = NULL;
  assert_int_equal(sched_create(&c, &bad), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(bad);
  sched_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eos_stops_with_reason_stop),
      cmocka_unit_test(test_ignore_eos_runs_to_max_tokens),
      cmocka_unit_test(test_stop_token_id_stops_and_is_reported),
      cmocka_unit_test(test_max_tokens_caps_with_reason_length),
      cmocka_unit_test(test_max_model_len_caps_with_reason_length),
      cmocka_unit_test(test_min_tokens_suppresses_eos_and_stop_ids),
      cmocka_unit_test(test_add_request_rejects_bad_requests),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
