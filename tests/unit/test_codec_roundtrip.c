/* schemas codec: every message survives encode -> decode with all fields, views are
 * self-contained in the arena, encoders report short buffers and bad views clearly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "schemas/control.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/scheduler_output.h"
#include "tests/unit/test_codec_samples.h"

static void test_every_message_round_trips_with_all_fields(void **state) {
  (void)state;
  assert_int_equal(codec_num_cases(), LLB_MESSAGE_KIND_COUNT - 1);
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    struct llb_buf enc = {0}, again = {0};
    struct llb_arena arena;
    _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
    llb_arena_init(&arena, NULL, 0);
    assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
    assert_int_equal(llb_message_identify(enc.data, enc.len), c->kind);
    llb_status st = c->decode(enc.data, enc.len, &arena, view);
    if (st != LLB_STATUS_OK)
      fail_msg("%s: %s", c->name, llb_err_last());
    if (!c->equals_sample(view))
      fail_msg("%s: decoded view differs from the sample", c->name);
    /* Lossless both ways: the decoded view encodes to the same bytes. */
    assert_int_equal(c->encode_view(view, &again), LLB_STATUS_OK);
    assert_int_equal(again.len, enc.len);
    assert_memory_equal(again.data, enc.data, enc.len);
    llb_buf_free(&enc);
    llb_buf_free(&again);
    llb_arena_destroy(&arena);
  }
}

static void test_decoded_view_outlives_the_wire_buffer(void **state) {
  (void)state;
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    struct llb_buf enc = {0};
    uint8_t arena_mem[256]; /* small: forces malloc'd chunks too */
    struct llb_arena arena;
    _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
    llb_arena_init(&arena, arena_mem, sizeof arena_mem);
    assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
    assert_int_equal(c->decode(enc.data, enc.len, &arena, view), LLB_STATUS_OK);
    memset(enc.data, 0xA5, enc.len);
    llb_buf_free(&enc);
    assert_true(c->equals_sample(view));
    llb_arena_destroy(&arena);
  }
}

static void test_misaligned_buffer_decodes(void **state) {
  (void)state;
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    struct llb_buf enc = {0};
    struct llb_arena arena;
    _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
    llb_arena_init(&arena, NULL, 0);
    assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
    uint8_t *shifted = malloc(enc.len + 3);
    assert_non_null(shifted);
    memcpy(shifted + 3, enc.data, enc.len);
    assert_int_equal(c->decode(shifted + 3, enc.len, &arena, view), LLB_STATUS_OK);
    assert_true(c->equals_sample(view));
    free(shifted);
    llb_buf_free(&enc);
    llb_arena_destroy(&arena);
  }
}

static void test_encode_into_short_buffer_is_too_large_with_needed_size(void **state) {
  (void)state;
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    struct llb_buf enc = {0};
    assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
    uint8_t *buf = malloc(enc.len);
    size_t len = 0;
    assert_int_equal(c->encode_sample_into(buf, enc.len - 1, &len), LLB_STATUS_TOO_LARGE);
    assert_int_equal(len, enc.len);
    assert_non_null(strstr(llb_err_last(), "needs"));
    assert_int_equal(c->encode_sample_into(buf, enc.len, &len), LLB_STATUS_OK);
    assert_int_equal(len, enc.len);
    assert_memory_equal(buf, enc.data, enc.len);
    free(buf);
    llb_buf_free(&enc);
  }
}

static void test_absent_sampling_params_decode_to_vllm_defaults(void **state) {
  (void)state;
  struct llb_generate_request m, out;
  llb_generate_request_init(&m);
  m.prompt = llb_str_c("Hallo");
  struct llb_buf enc = {0};
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  assert_int_equal(llb_generate_request_encode_buf(&m, &enc), LLB_STATUS_OK);
  assert_int_equal(llb_generate_request_decode(enc.data, enc.len, &arena, &out), LLB_STATUS_OK);
  assert_non_null(out.sampling_params);
  assert_int_equal(out.sampling_params->n, 1);
  assert_true(out.sampling_params->temperature == 1.0f);
  assert_int_equal(out.sampling_params->max_tokens, 16);
  assert_true(out.sampling_params->skip_special_tokens);
  assert_false(out.sampling_params->has_seed);
  assert_int_equal(out.sampling_params->logprobs, -1);
  assert_true(out.add_generation_prompt);
  assert_string_equal(out.request_id.data, "");
  assert_string_equal(out.prompt.data, "Hallo");
  llb_buf_free(&enc);
  llb_arena_destroy(&arena);
}

static void test_encoder_rejects_bad_views_naming_the_field(void **state) {
  (void)state;
  struct llb_buf enc = {0};
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  int32_t ids[2] = {1, 2};
  struct llb_engine_core_request r = {.request_id = llb_str_c("r1"), .prompt_token_ids = ids,
                                      .num_prompt_token_ids = 2, .sampling_params = &sp};
  assert_int_equal(llb_engine_core_request_encode_buf(&r, &enc), LLB_STATUS_OK);
  r.request_id = llb_str_c("");
  assert_int_equal(llb_engine_core_request_encode_buf(&r, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "EngineCoreRequest.request_id"));
  r.request_id = llb_str_c("r1");
  r.num_prompt_token_ids = -1;
  assert_int_equal(llb_engine_core_request_encode_buf(&r, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "prompt_token_ids"));
  r.num_prompt_token_ids = 2;
  sp.num_stop = LLB_MAX_STOP_STRINGS + 1;
  assert_int_equal(llb_engine_core_request_encode_buf(&r, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "sampling_params[0].num_stop"));

  struct llb_new_request_data nr = {.req_id = llb_str_c("n1")}; /* no sampling_params */
  struct llb_scheduler_output so = {.scheduled_new_reqs = &nr, .num_scheduled_new_reqs = 1,
                                    .block_size = 16};
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "SchedulerOutput.scheduled_new_reqs[0].sampling_params"));
  llb_buf_free(&enc);
}

static void test_identify_names_every_kind(void **state) {
  (void)state;
  uint8_t tiny[11] = {0};
  assert_int_equal(llb_message_identify(tiny, sizeof tiny), LLB_MESSAGE_KIND_UNKNOWN);
  assert_int_equal(llb_message_identify(NULL, 100), LLB_MESSAGE_KIND_UNKNOWN);
  for (int k = 1; k < LLB_MESSAGE_KIND_COUNT; k++) {
    for (int j = k + 1; j < LLB_MESSAGE_KIND_COUNT; j++)
      assert_string_not_equal(llb_message_kind_identifier(k), llb_message_kind_identifier(j));
    assert_string_not_equal(llb_message_kind_name(k), "unknown");
  }
  assert_string_equal(llb_message_kind_name(LLB_MESSAGE_KIND_SCHEDULER_OUTPUT),
                      "SchedulerOutput");
  assert_string_equal(llb_message_kind_name(LLB_MESSAGE_KIND_COUNT), "unknown");
}

static void test_error_reply_carries_the_last_error(void **state) {
  (void)state;
  struct llb_buf enc = {0};
  struct llb_arena arena;
  struct llb_error_reply out;
  llb_arena_init(&arena, NULL, 0);
  (void)LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "temperature -1 is below 0");
  assert_int_equal(llb_error_reply_encode_status(LLB_STATUS_INVALID_ARGUMENT, "req-9",
                                                 "temperature", &enc),
                   LLB_STATUS_OK);
  assert_int_equal(llb_message_identify(enc.data, enc.len), LLB_MESSAGE_KIND_ERROR_REPLY);
  assert_int_equal(llb_error_reply_decode(enc.data, enc.len, &arena, &out), LLB_STATUS_OK);
  assert_int_equal(out.error.code, LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(out.error.message.data, "temperature -1 is below 0");
  assert_string_equal(out.error.field.data, "temperature");
  assert_string_equal(out.request_id.data, "req-9");
  llb_buf_free(&enc);
  llb_arena_destroy(&arena);
}

/* A LoRAUpdate load names a file beneath the worker's --lora-dir and an owning tenant: paths that
 * climb out or start at the root, and tenants that are not subject tokens, never leave the
 * encoder (and a decoder refuses them as MALFORMED: the same check). An unload needs neither. */
static void test_lora_update_refuses_escaping_paths_and_bad_tenants(void **state) {
  (void)state;
  static const char *const paths[] = {"../x.gguf", "a/../../x.gguf", "/etc/passwd", "a/..", ""};
  struct llb_buf enc = {0};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    const struct llb_lora_update m = {.op = LLB_LORA_UPDATE_LOAD, .lora_name = llb_str_c("ad"),
                                      .lora_path = llb_str_c(paths[i]), .tenant = llb_str_c("t")};
    assert_int_equal(llb_lora_update_encode_buf(&m, &enc), LLB_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(llb_err_last(), "lora_path"));
  }
  static const char *const tenants[] = {"", "a.b", "a b", "t>"};
  for (size_t i = 0; i < sizeof tenants / sizeof tenants[0]; i++) {
    const struct llb_lora_update m = {.op = LLB_LORA_UPDATE_LOAD, .lora_name = llb_str_c("ad"),
                                      .lora_path = llb_str_c("a/x.gguf"), .tenant = llb_str_c(tenants[i])};
    assert_int_equal(llb_lora_update_encode_buf(&m, &enc), LLB_STATUS_INVALID_ARGUMENT);
  }
  const struct llb_lora_update bad_op = {.op = 2, .lora_name = llb_str_c("ad")};
  assert_int_equal(llb_lora_update_encode_buf(&bad_op, &enc), LLB_STATUS_INVALID_ARGUMENT);
  const struct llb_lora_update unload = {.op = LLB_LORA_UPDATE_UNLOAD, .lora_name = llb_str_c("ad")};
  assert_int_equal(llb_lora_update_encode_buf(&unload, &enc), LLB_STATUS_OK);
  llb_buf_free(&enc);
}

static void test_arena_grows_aligns_and_reuses_after_reset(void **state) {
  (void)state;
  uint8_t mem[64];
  struct llb_arena a;
  llb_arena_init(&a, mem, sizeof mem);
  uint8_t *p = llb_arena_alloc(&a, 10, 1);
  assert_true(p >= mem && p < mem + sizeof mem);
  uint64_t *q = llb_arena_alloc(&a, 3 * sizeof *q, 8);
  assert_int_equal((uintptr_t)q % 8, 0);
  void *big1 = llb_arena_alloc(&a, 100000, 16); /* beyond mem and one chunk */
  void *big2 = llb_arena_alloc(&a, 70000, 16);
  assert_non_null(big1);
  assert_non_null(big2);
  assert_int_equal((uintptr_t)big1 % 16, 0);
  memset(big1, 1, 100000);
  memset(big2, 2, 70000);
  assert_null(llb_arena_alloc(&a, 8, 3)); /* not a power of two */
  llb_arena_reset(&a);
  assert_ptr_equal(llb_arena_alloc(&a, 10, 1), mem);
  /* The merged chunk holds both large allocations again without a new malloc. */
  void *again = llb_arena_alloc(&a, 170000, 16);
  assert_non_null(again);
  memset(again, 3, 170000);
  llb_arena_destroy(&a);
  llb_arena_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_message_round_trips_with_all_fields),
      cmocka_unit_test(test_decoded_view_outlives_the_wire_buffer),
      cmocka_unit_test(test_misaligned_buffer_decodes),
      cmocka_unit_test(test_encode_into_short_buffer_is_too_large_with_needed_size),
      cmocka_unit_test(test_absent_sampling_params_decode_to_vllm_defaults),
      cmocka_unit_test(test_encoder_rejects_bad_views_naming_the_field),
      cmocka_unit_test(test_identify_names_every_kind),
      cmocka_unit_test(test_error_reply_carries_the_last_error),
      cmocka_unit_test(test_lora_update_refuses_escaping_paths_and_bad_tenants),
      cmocka_unit_test(test_arena_grows_aligns_and_reuses_after_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
