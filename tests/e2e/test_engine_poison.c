/* Poison requests cannot stall the engine. While a normal request runs, hostile ones arrive:
 * a GenerateRequest whose embedding rows hold NaN / +Inf (through the input processor), and
 * EngineCoreRequests forged straight onto llm.engine.0.requests (skipping every check of the
 * input processor) with a token id outside the vocabulary, a negative one, a NaN temperature
 * and NaN embedding rows. Each bad one gets a finished RequestOutput with an error on its own
 * reply subject; the normal request completes with exactly the tokens it gets alone, and no
 * actor was restarted. Before, each of them failed the worker's step and the scheduler looped
 * preempt_all → retry forever, so the normal request never finished. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schemas/engine_core_request.h"
#include "tests/e2e/stack.h"

#define HIDDEN 576 /* SmolLM2-135M's embedding_length */
#define ERROR_WAIT_MS 120000

static const char *model;
static struct e2e_stack s;

/* Two rows of f32 embeddings; element `bad` (if >= 0) set to `value`. */
static float rows[2 * HIDDEN];
static void fill_rows(int bad, float value) {
  for (int i = 0; i < 2 * HIDDEN; i++) rows[i] = 0.01f * (float)(i % 7);
  if (bad >= 0) rows[bad] = value;
}

/* A forged EngineCoreRequest published on llm.engine.0.requests with reply_to = a fresh
 * inbox that `p` reads (as e2e_submit does for a GenerateRequest). */
static void forge(const char *id, const int32_t *prompt, int32_t n, const struct llb_sampling_params *sp,
                  const struct llb_mm_feature *mm, struct e2e_pending *p) {
  memset(p, 0, sizeof *p);
  llb_arena_init(&p->arena, NULL, 0);
  p->result.finish_reason = LLB_FINISH_REASON_NONE;
  assert_int_equal(bus_new_inbox(s.bus, p->inbox, sizeof p->inbox), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(s.bus, p->inbox, &p->sub), LLB_STATUS_OK);
  struct llb_engine_core_request m = {.request_id = llb_str_c(id), .external_id = llb_str_c(id),
                                      .prompt_token_ids = prompt, .num_prompt_token_ids = n,
                                      .sampling_params = sp, .eos_token_id = 2, .arrival_time = 1.0,
                                      .cache_salt = llb_str_c("7:default"), .mm_features = mm,
                                      .num_mm_features = mm ? 1 : 0, .reply_to = llb_str_c(p->inbox)};
  struct llb_buf b = {0};
  assert_int_equal(llb_engine_core_request_encode_buf(&m, &b), LLB_STATUS_OK);
  assert_int_equal(bus_publish(s.bus, "llm.engine.0.requests", b.data, b.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&b);
}

/* Waits for p's last output: finished with an error whose message holds `want`. */
static void expect_error(const char *what, struct e2e_pending *p, const char *want) {
  assert_int_equal(e2e_collect(p, ERROR_WAIT_MS), 0);
  e2e_print_result(what, &p->result);
  assert_true(p->result.finished);
  assert_int_not_equal(p->result.error_code, 0);
  assert_int_equal(p->result.num_tokens, 0);
  if (!strstr(p->result.error_message, want) && !strstr(p->result.error_field, want))
    fail_msg("%s: error '%s' (field '%s') does not mention '%s'", what, p->result.error_message,
             p->result.error_field, want);
}

static void test_poison_requests_get_errors_while_a_normal_request_completes_unchanged(void **state) {
  (void)state;
  assert_int_equal(e2e_stack_start(&s, model, NULL), 0);
  struct e2e_request nr = {.request_id = "normal", .prompt = "Name three rivers."};
  llb_sampling_params_init(&nr.sp);
  nr.sp.temperature = 0.0f;
  nr.sp.max_tokens = 64;
  struct e2e_result alone;
  assert_int_equal(e2e_generate(&s, &nr, &alone), 0);
  assert_int_equal(alone.error_code, 0);
  assert_true(alone.num_tokens >= 8);

  struct e2e_pending *normal = calloc(1, sizeof *normal);
  assert_non_null(normal);
  assert_int_equal(e2e_submit(&s, &nr, normal), 0);
  assert_int_equal(e2e_next(normal, E2E_WAIT_OUTPUT_MS), 0); /* running: its first token is out */

  /* Over the client subject: NaN, then +Inf embedding rows. */
  static const int32_t ids[] = {504, 0, 0, 30};
  struct llb_mm_item item = {.modality = llb_str_c("embeds"), .data = (const uint8_t *)rows,
                             .data_bytes = sizeof rows, .dtype = llb_str_c("f32"), .num_rows = 2,
                             .num_cols = HIDDEN, .placeholder_offset = 1};
  struct e2e_request er = {.request_id = "nan-embeds", .prompt_token_ids = ids, .num_prompt_token_ids = 4,
                           .mm_items = &item, .num_mm_items = 1};
  llb_sampling_params_init(&er.sp);
  er.sp.max_tokens = 4;
  for (int k = 0; k < 2; k++) {
    fill_rows(HIDDEN + 17, k == 0 ? NAN : INFINITY);
    struct e2e_result r;
    assert_int_equal(e2e_generate(&s, &er, &r), 0);
    e2e_print_result(k == 0 ? "NaN embeds" : "+Inf embeds", &r);
    assert_int_not_equal(r.error_code, 0);
    assert_string_equal(r.error_field, "mm_items[0].data");
    assert_non_null(strstr(r.error_message, "non-finite"));
  }

  /* Straight onto the engine: no input processor in between. */
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.max_tokens = 4;
  sp.has_seed = true;
  struct llb_sampling_params nan_sp = sp;
  nan_sp.temperature = NAN;
  static const int32_t out_of_vocab[] = {19556, 1 << 28, 30};
  static const int32_t negative[] = {19556, -7, 30};
  static const int32_t fine[] = {504, 0, 0, 30};
  fill_rows(3, NAN);
  struct llb_mm_feature nan_feature = {.modality = llb_str_c("embeds"), .mm_hash = llb_str_c("forged-nan-rows"),
                                       .offset = 1, .length = 2, .data = (const uint8_t *)rows,
                                       .data_bytes = sizeof rows, .dtype = llb_str_c("f32"), .num_cols = HIDDEN};
  struct e2e_pending forged[4];
  forge("forged-out-of-vocab", out_of_vocab, 3, &sp, NULL, &forged[0]);
  forge("forged-negative-id", negative, 3, &sp, NULL, &forged[1]);
  forge("forged-nan-temperature", fine, 4, &nan_sp, NULL, &forged[2]);
  forge("forged-nan-embeds", fine, 4, &sp, &nan_feature, &forged[3]);
  expect_error("forged out-of-vocab id", &forged[0], "vocabulary");
  expect_error("forged negative id", &forged[1], "vocabulary");
  expect_error("forged NaN temperature", &forged[2], "temperature");
  expect_error("forged NaN embeds", &forged[3], "non-finite");

  assert_int_equal(e2e_collect(normal, E2E_WAIT_OUTPUT_MS), 0);
  e2e_print_result("normal beside the poison", &normal->result);
  assert_int_equal(normal->result.error_code, 0);
  assert_true(e2e_same_tokens("normal alone vs beside the poison requests", &alone, &normal->result));
  free(normal);

  struct e2e_result again;
  assert_int_equal(e2e_generate(&s, &nr, &again), 0);
  assert_true(e2e_same_tokens("normal alone vs after the poison requests", &alone, &again));
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

/* The same with a scheduler told a larger vocabulary than the model's, so that a forged id
 * between the two passes admission and reaches the worker: the worker refuses the step and
 * names the request (ModelRunnerOutput.failed_req_id), the scheduler finishes it with the
 * worker's error and recomputes the normal request, which completes unchanged. */
static void test_request_the_worker_refuses_is_finished_and_the_others_go_on(void **state) {
  (void)state;
  static const char *const sched_args[] = {"--vocab-size", "60000", NULL};
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_SCHEDULER] = sched_args;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
  struct e2e_request nr = {.request_id = "normal", .prompt = "Name three rivers."};
  llb_sampling_params_init(&nr.sp);
  nr.sp.temperature = 0.0f;
  nr.sp.max_tokens = 64;
  struct e2e_result alone;
  assert_int_equal(e2e_generate(&s, &nr, &alone), 0);
  assert_int_equal(alone.error_code, 0);
  struct e2e_pending *normal = calloc(1, sizeof *normal);
  assert_non_null(normal);
  assert_int_equal(e2e_submit(&s, &nr, normal), 0);
  assert_int_equal(e2e_next(normal, E2E_WAIT_OUTPUT_MS), 0);

  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.max_tokens = 4;
  sp.has_seed = true;
  static const int32_t beyond_model[] = {19556, 50000, 30}; /* < 60000, >= the model's 49152 */
  struct e2e_pending forged;
  forge("forged-beyond-the-model", beyond_model, 3, &sp, NULL, &forged);
  expect_error("forged id the worker refuses", &forged, "50000");

  assert_int_equal(e2e_collect(normal, E2E_WAIT_OUTPUT_MS), 0);
  e2e_print_result("normal beside the refused request", &normal->result);
  assert_int_equal(normal->result.error_code, 0);
  assert_true(e2e_same_tokens("normal alone vs beside the refused request", &alone, &normal->result));
  free(normal);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(
          test_poison_requests_get_errors_while_a_normal_request_completes_unchanged, NULL, e2e_stack_teardown, &s),
      cmocka_unit_test_prestate_setup_teardown(test_request_the_worker_refuses_is_finished_and_the_others_go_on,
                                               NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
