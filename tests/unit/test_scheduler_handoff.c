/* Disaggregated prefill/decode in the scheduler core (sched_hand_off; actors/scheduler/handoff.h
 * drives it): what the prefill engine relies on when a request leaves for a decode engine after
 * its first token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/test_scheduler_harness.h"

static void config(struct sched_config *c) {
  sched_config_init(c);
  c->num_blocks = 64;
  c->block_size = 4;
  c->max_num_batched_tokens = 64;
  c->num_lookahead_tokens = 0;
}

static int32_t find_output(const struct sched_engine_outputs *eo, const char *id) {
  for (int32_t i = 0; i < eo->num_outputs; i++)
    if (strcmp(sched_engine_outputs_req_id(eo, i), id) == 0) return i;
  return -1;
}

/* The first token's output becomes the request's last here: it carries the token, takes the
 * user over, and the request leaves (its id reaches the worker, its blocks go back, to the
 * prefix cache); the other request is untouched. */
static void a_request_handed_off_after_its_first_token_leaves_with_its_blocks_freed(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  static int user_p, user_q;
  int32_t toks[10];
  for (int32_t i = 0; i < 10; i++) toks[i] = 7 + i;
  struct llb_sampling_params *sp = h_new_params(&h);
  sp->max_tokens = 8;
  struct sched_new_request nr = {.request_id = "p", .prompt_token_ids = toks, .num_prompt_tokens = 10,
                                 .eos_token_id = 2, .sampling_params = sp, .user = &user_p};
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  nr.request_id = "q";
  nr.user = &user_q;
  assert_int_equal(sched_add_request(h.s, &nr), LLB_STATUS_OK);
  h_step(&h); /* prefill both: one token each */
  const int32_t i = find_output(&h.eo, "p");
  assert_true(i >= 0);
  assert_int_equal(h.eo.outputs[i].num_new_tokens, 1);
  assert_int_equal(h.eo.outputs[i].first_output_pos, 0);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h.s, "p", &side), LLB_STATUS_OK);
  assert_int_equal(side.num_outputs, 1);
  assert_string_equal(sched_engine_outputs_req_id(&side, 0), "p");
  assert_int_equal(side.outputs[0].finish_reason, SCHED_FINISH_REASON_HANDED_OFF);
  assert_int_equal(side.outputs[0].num_new_tokens, 0);
  assert_int_equal(side.outputs[0].first_output_pos, 1);
  assert_ptr_equal(side.outputs[0].user, &user_p); /* the final output owns it now */
  assert_null(sched_find_request(h.s, "p"));
  assert_non_null(sched_find_request(h.s, "q"));
  assert_int_equal(sched_hand_off(h.s, "p", &side), LLB_STATUS_INVALID_ARGUMENT); /* gone */
  sched_engine_outputs_free(&side);
  h_schedule(&h);
  bool told = false;
  for (int32_t k = 0; k < h.out.finished_req_ids.num; k++)
    told |= strcmp(sched_str_list_get(&h.out.finished_req_ids, k), "p") == 0;
  assert_true(told);
  h_execute(&h);
  while (sched_num_unfinished(h.s) > 0) h_step(&h);
  h_step(&h); /* an idle step flushes the deferred FREE ops */
  struct sched_stats st;
  sched_get_stats(h.s, &st);
  assert_int_equal(st.num_free_blocks, c.num_blocks);
  h_fini(&h);
}

/* Only a running request with an output can be handed off: not before its first token, not
 * an aborted one, not an unknown id. */
static void only_a_running_request_with_an_output_is_handed_off(void **state) {
  (void)state;
  struct sched_config c;
  config(&c);
  struct harness h;
  h_init(&h, &c);
  h_add(&h, "a", 6, 8, 0, 0);
  struct sched_engine_outputs side;
  sched_engine_outputs_init(&side);
  assert_int_equal(sched_hand_off(h.s, "a", &side), LLB_STATUS_INVALID_ARGUMENT); /* no token yet */
  h_step(&h);
  assert_int_equal(sched_hand_off(h.s, "nobody", &side), LLB_STATUS_INVALID_ARGUMENT);
  const char *ids[1] = {"a"};
  assert_int_equal(sched_abort_requests(h.s, ids, 1, SCHED_FINISH_REASON_ABORT, &side), LLB_STATUS_OK);
  assert_int_equal(sched_hand_off(h.s, "a", &side), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(side.num_outputs, 1); /* only the abort's */
  sched_engine_outputs_free(&side);
  h_fini(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_request_handed_off_after_its_first_token_leaves_with_its_blocks_freed),
      cmocka_unit_test(only_a_running_request_with_an_output_is_handed_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
