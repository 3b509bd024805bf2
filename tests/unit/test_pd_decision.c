/* Conditional disaggregation (actors/input_processor/pd_decision.h): what an operator running
 * prefill and decode engines depends on — a short or mostly cached prompt is prefilled where it
 * decodes, a saturated prefill pool is not queued behind, a transfer slower than recomputing is
 * not made, and otherwise the prompt goes to a prefill engine. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "actors/input_processor/pd_decision.h"

/* SmolLM2-135M's fp16 KV (30 layers, 3 kv heads of 64): 23,040 bytes a token. */
static const struct pd_decision_config base = {.min_uncached_tokens = 256,
                                               .max_prefill_queue_size = 4,
                                               .kv_bytes_per_token = 23040,
                                               .transfer_bytes_per_s = 250e6,
                                               .prefill_tokens_per_s = 400.0};

static void a_long_uncached_prompt_on_an_idle_prefill_pool_is_disaggregated(void **state) {
  (void)state;
  const struct pd_decision_input in = {.prompt_tokens = 1024, .cached_tokens = 0, .prefill_queue = 0};
  struct pd_decision_costs k;
  assert_int_equal(pd_decide(&base, &in, &k), PD_DECISION_DISAGGREGATE);
  assert_int_equal(k.uncached_tokens, 1024);
  assert_true(fabs(k.transfer_s - 1024.0 * 23040 / 250e6) < 1e-9); /* 94 ms */
  assert_true(fabs(k.recompute_s - 1024.0 / 400.0) < 1e-9);        /* 2.56 s */
  assert_string_equal(pd_decision_name(PD_DECISION_DISAGGREGATE), "disaggregate");
}

static void a_short_prompt_is_prefilled_where_it_decodes(void **state) {
  (void)state;
  const struct pd_decision_input in = {.prompt_tokens = 255, .prefill_queue = 0};
  assert_int_equal(pd_decide(&base, &in, NULL), PD_DECISION_SHORT);
  const struct pd_decision_input at = {.prompt_tokens = 256, .prefill_queue = 0}; /* "at least" */
  assert_int_equal(pd_decide(&base, &at, NULL), PD_DECISION_DISAGGREGATE);
}

/* Dynamo's prefill_length - prefix_hit_length: the prefix the decode engine holds is neither
 * moved nor computed, so a long prompt mostly cached there counts as short. */
static void the_decode_engines_cached_prefix_does_not_count(void **state) {
  (void)state;
  const struct pd_decision_input in = {.prompt_tokens = 2048, .cached_tokens = 1900, .prefill_queue = 0};
  struct pd_decision_costs k;
  assert_int_equal(pd_decide(&base, &in, &k), PD_DECISION_SHORT);
  assert_int_equal(k.uncached_tokens, 148);
  const struct pd_decision_input over = {.prompt_tokens = 100, .cached_tokens = 5000}; /* clamped */
  assert_int_equal(pd_decide(&base, &over, &k), PD_DECISION_SHORT);
  assert_int_equal(k.uncached_tokens, 0);
}

static void a_saturated_prefill_pool_serves_it_aggregated(void **state) {
  (void)state;
  const struct pd_decision_input busy = {.prompt_tokens = 4096, .prefill_queue = 4};
  assert_int_equal(pd_decide(&base, &busy, NULL), PD_DECISION_PREFILL_SATURATED);
  const struct pd_decision_input below = {.prompt_tokens = 4096, .prefill_queue = 3};
  assert_int_equal(pd_decide(&base, &below, NULL), PD_DECISION_DISAGGREGATE);
  struct pd_decision_config unlimited = base;
  unlimited.max_prefill_queue_size = 0;
  assert_int_equal(pd_decide(&unlimited, &busy, NULL), PD_DECISION_DISAGGREGATE);
  assert_string_equal(pd_decision_name(PD_DECISION_PREFILL_SATURATED), "prefill_saturated");
}

/* A GPU's prefill (40,000 tokens/s) outruns 250 MB/s of bus for 23 KB a token: moving the KV
 * takes 4x as long as computing it on the decode engine. */
static void a_transfer_slower_than_recomputing_is_not_made(void **state) {
  (void)state;
  struct pd_decision_config gpu = base;
  gpu.prefill_tokens_per_s = 40000.0;
  const struct pd_decision_input in = {.prompt_tokens = 2048, .prefill_queue = 0};
  struct pd_decision_costs k;
  assert_int_equal(pd_decide(&gpu, &in, &k), PD_DECISION_TRANSFER_COSTLIER);
  assert_true(k.transfer_s > k.recompute_s);
  assert_string_equal(pd_decision_name(PD_DECISION_TRANSFER_COSTLIER), "transfer_costlier");
  /* unknown rates (0, negative, NaN) are not weighed */
  gpu.transfer_bytes_per_s = 0.0;
  assert_int_equal(pd_decide(&gpu, &in, &k), PD_DECISION_DISAGGREGATE);
  assert_true(k.transfer_s == 0.0 && k.recompute_s == 0.0);
  gpu.transfer_bytes_per_s = NAN;
  assert_int_equal(pd_decide(&gpu, &in, NULL), PD_DECISION_DISAGGREGATE);
  gpu.transfer_bytes_per_s = 250e6;
  gpu.kv_bytes_per_token = 0;
  assert_int_equal(pd_decide(&gpu, &in, NULL), PD_DECISION_DISAGGREGATE);
}

/* The rule's order: a short prompt is short whatever the queue; a saturated pool is reported
 * before the transfer's cost. */
static void the_first_matching_rule_names_the_reason(void **state) {
  (void)state;
  struct pd_decision_config gpu = base;
  gpu.prefill_tokens_per_s = 40000.0;
  const struct pd_decision_input short_busy = {.prompt_tokens = 10, .prefill_queue = 100};
  assert_int_equal(pd_decide(&gpu, &short_busy, NULL), PD_DECISION_SHORT);
  const struct pd_decision_input long_busy = {.prompt_tokens = 2048, .prefill_queue = 100};
  assert_int_equal(pd_decide(&gpu, &long_busy, NULL), PD_DECISION_PREFILL_SATURATED);
}

static void kv_bytes_per_token_follow_the_models_geometry(void **state) {
  (void)state;
  assert_int_equal(pd_kv_bytes_per_token_fp16(30, 3, 64), 23040);   /* SmolLM2-135M */
  assert_int_equal(pd_kv_bytes_per_token_fp16(32, 8, 128), 131072); /* Llama 3 8B: 128 KiB */
  assert_int_equal(pd_kv_bytes_per_token_fp16(0, 8, 128), 0);
  assert_int_equal(pd_kv_bytes_per_token_fp16(32, -1, 128), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_long_uncached_prompt_on_an_idle_prefill_pool_is_disaggregated),
      cmocka_unit_test(a_short_prompt_is_prefilled_where_it_decodes),
      cmocka_unit_test(the_decode_engines_cached_prefix_does_not_count),
      cmocka_unit_test(a_saturated_prefill_pool_serves_it_aggregated),
      cmocka_unit_test(a_transfer_slower_than_recomputing_is_not_made),
      cmocka_unit_test(the_first_matching_rule_names_the_reason),
      cmocka_unit_test(kv_bytes_per_token_follow_the_models_geometry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
