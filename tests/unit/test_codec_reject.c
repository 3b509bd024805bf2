/* schemas codec: decoders refuse every truncation, wrong identifiers, oversized and
 * version-less buffers with a clear message, and survive random corruption. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "schemas/control.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/kv_step.h"
#include "schemas/model_runner_output.h"
#include "schemas/request_output.h"
#include "schemas/scheduler_output.h"
#include "tests/unit/test_codec_samples.h"

/* splitmix64: a fixed-seed generator so that failures replay. */
static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static void test_every_truncation_is_rejected(void **state) {
  (void)state;
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    struct llb_buf enc = {0};
    struct llb_arena arena;
    _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
    llb_arena_init(&arena, NULL, 0);
    assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
    for (size_t len = 0; len < enc.len; len++) {
      /* A fresh heap copy of exactly `len` bytes, so ASan sees any read past the end. */
      uint8_t *cut = malloc(len ? len : 1);
      memcpy(cut, enc.data, len);
      llb_status st = c->decode(cut, len, &arena, view);
      if (st == LLB_STATUS_OK)
        fail_msg("%s: truncation to %zu of %zu bytes was accepted", c->name, len, enc.len);
      assert_int_equal(st, LLB_STATUS_MALFORMED);
      /* Same cut with the size prefix rewritten to match: must not crash either way. */
      if (len >= 4) {
        uint32_t n = (uint32_t)(len - 4);
        memcpy(cut, &n, 4);
        (void)c->decode(cut, len, &arena, view);
      }
      free(cut);
      llb_arena_reset(&arena);
    }
    llb_buf_free(&enc);
    llb_arena_destroy(&arena);
  }
}

static void test_random_bit_flips_never_crash(void **state) {
  (void)state;
  int accepted = 0, rejected = 0;
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    struct llb_buf enc = {0}, again = {0};
    struct llb_arena arena;
    _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
    llb_arena_init(&arena, NULL, 0);
    assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
    uint8_t *buf = malloc(enc.len);
    for (uint64_t seed = 0; seed < 600; seed++) {
      uint64_t s = seed * 1000003 + (uint64_t)i;
      memcpy(buf, enc.data, enc.len);
      int flips = 1 + (int)(next_rand(&s) % 4);
      for (int f = 0; f < flips; f++) {
        uint64_t bit = next_rand(&s) % (enc.len * 8);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      }
      llb_status st = c->decode(buf, enc.len, &arena, view);
      if (st == LLB_STATUS_OK) {
        accepted++;
        /* Whatever passes the checks is a well-formed view: it encodes again. */
        if (c->encode_view(view, &again) != LLB_STATUS_OK)
          fail_msg("%s seed %llu: accepted view does not re-encode: %s", c->name,
                   (unsigned long long)seed, llb_err_last());
      } else {
        rejected++;
        assert_true(st == LLB_STATUS_MALFORMED || st == LLB_STATUS_TOO_LARGE);
        assert_true(strlen(llb_err_last()) > 0);
      }
      llb_arena_reset(&arena);
    }
    free(buf);
    llb_buf_free(&enc);
    llb_buf_free(&again);
    llb_arena_destroy(&arena);
  }
  /* Both outcomes occur: flips in data bytes pass, flips in offsets are caught. */
  assert_true(accepted > 0);
  assert_true(rejected > 0);
}

static void test_oversized_buffer_is_rejected_naming_the_limit(void **state) {
  (void)state;
  const struct codec_case *c = codec_case_of(LLB_MESSAGE_KIND_SCHEDULER_OUTPUT);
  struct llb_buf enc = {0};
  struct llb_arena arena;
  _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
  llb_arena_init(&arena, NULL, 0);
  assert_int_equal(c->encode_sample(&enc), LLB_STATUS_OK);
  size_t big = LLB_MAX_MESSAGE_BYTES + 1;
  uint8_t *buf = calloc(1, big);
  memcpy(buf, enc.data, enc.len);
  assert_int_equal(c->decode(buf, big, &arena, view), LLB_STATUS_TOO_LARGE);
  assert_non_null(strstr(llb_err_last(), "8388608"));
  assert_non_null(strstr(llb_err_last(), "LLB_MAX_MESSAGE_BYTES"));
  assert_non_null(strstr(llb_err_last(), "SchedulerOutput"));
  free(buf);
  llb_buf_free(&enc);
  llb_arena_destroy(&arena);
}

static void test_wrong_message_type_is_rejected_naming_both(void **state) {
  (void)state;
  struct llb_arena arena;
  _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
  llb_arena_init(&arena, NULL, 0);
  for (int i = 0; i < codec_num_cases(); i++) {
    struct llb_buf enc = {0};
    assert_int_equal(codec_case_at(i)->encode_sample(&enc), LLB_STATUS_OK);
    for (int j = 0; j < codec_num_cases(); j++) {
      if (i == j)
        continue;
      const struct codec_case *d = codec_case_at(j);
      assert_int_equal(d->decode(enc.data, enc.len, &arena, view), LLB_STATUS_MALFORMED);
      assert_non_null(strstr(llb_err_last(), llb_message_kind_identifier(d->kind)));
      assert_non_null(strstr(llb_err_last(), llb_message_kind_name(codec_case_at(i)->kind)));
    }
    /* An identifier nobody uses. */
    memcpy(enc.data + 8, "X\x01YZ", 4);
    assert_int_equal(codec_case_at(i)->decode(enc.data, enc.len, &arena, view),
                     LLB_STATUS_MALFORMED);
    assert_non_null(strstr(llb_err_last(), "not an llmbus message"));
    assert_non_null(strstr(llb_err_last(), "X\\x01YZ"));
    llb_buf_free(&enc);
  }
  llb_arena_destroy(&arena);
}

static void test_table_without_version_is_rejected(void **state) {
  (void)state;
  /* A hand-built size-prefixed buffer whose root table has no fields at all:
   * [size 16][root 12][ident][vtable: 4, 4][table: soffset 4]. */
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    _Alignas(8) uint8_t buf[20] = {16, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0,
                                   4,  0, 4, 0, 4,  0, 0, 0};
    memcpy(buf + 8, llb_message_kind_identifier(c->kind), 4);
    struct llb_arena arena;
    _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
    llb_arena_init(&arena, NULL, 0);
    assert_int_equal(c->decode(buf, sizeof buf, &arena, view), LLB_STATUS_MALFORMED);
    assert_non_null(strstr(llb_err_last(), "version"));
    llb_arena_destroy(&arena);
  }
}

static void test_inconsistent_scheduled_token_total_is_rejected(void **state) {
  (void)state;
  struct llb_scheduled_tokens t[2] = {{.req_id = llb_str_c("a"), .num_tokens = 5}, {.req_id = llb_str_c("b"), .num_tokens = 1}};
  struct llb_scheduler_output m = {.num_scheduled_tokens = t, .num_scheduled_reqs = 2,
                                   .total_num_scheduled_tokens = 7, .block_size = 16};
  struct llb_buf enc = {0};
  struct llb_arena arena;
  struct llb_scheduler_output out;
  llb_arena_init(&arena, NULL, 0);
  assert_int_equal(llb_scheduler_output_encode_buf(&m, &enc), LLB_STATUS_OK);
  assert_int_equal(llb_scheduler_output_decode(enc.data, enc.len, &arena, &out),
                   LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "SchedulerOutput.total_num_scheduled_tokens"));
  assert_int_equal(out.num_scheduled_reqs, 0); /* a failed decode leaves an empty view */
  m.total_num_scheduled_tokens = 6;
  assert_int_equal(llb_scheduler_output_encode_buf(&m, &enc), LLB_STATUS_OK);
  assert_int_equal(llb_scheduler_output_decode(enc.data, enc.len, &arena, &out), LLB_STATUS_OK);
  assert_int_equal(out.num_scheduled_reqs, 2);
  llb_buf_free(&enc);
  llb_arena_destroy(&arena);
}

/* A pooled vector must be finite and match its counts; pooling params must be in range. */
static void test_bad_pooling_fields_are_refused(void **state) {
  (void)state;
  struct llb_buf enc = {0};
  const float bad[3] = {0.5f, NAN, 1.0f};
  struct llb_request_output ro = {.request_id = llb_str_c("r"), .finished = true, .pooling_output = bad,
                                  .num_pooling_output = 3};
  assert_int_equal(llb_request_output_encode_buf(&ro, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "pooling_output"));
  const struct llb_str ids[2] = {llb_str_c("a"), llb_str_c("b")};
  const int32_t sampled[2] = {0, 0}, pooled[2] = {0, 2};
  const float vec[3] = {1, 2, 3};
  struct llb_model_runner_output mo = {.req_ids = ids, .num_reqs = 2, .num_sampled = sampled,
                                       .pooler_output = vec, .num_pooler_output = 3, .num_pooled = pooled};
  assert_int_equal(llb_model_runner_output_encode_buf(&mo, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "num_pooler_output"));
  mo.num_pooler_output = 2;
  assert_int_equal(llb_model_runner_output_encode_buf(&mo, &enc), LLB_STATUS_OK);
  const int32_t prompt[1] = {1};
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  struct llb_engine_core_request ecr = {.request_id = llb_str_c("e"), .prompt_token_ids = prompt,
                                        .num_prompt_token_ids = 1, .sampling_params = &sp,
                                        .pooling_params = {LLB_POOLING_MEAN, true, -1}};
  assert_int_equal(llb_engine_core_request_encode_buf(&ecr, &enc), LLB_STATUS_INVALID_ARGUMENT);
  ecr.pooling_params.pooling_type = (enum llb_pooling_type)4;
  ecr.pooling_params.dimensions = 0;
  assert_int_equal(llb_engine_core_request_encode_buf(&ecr, &enc), LLB_STATUS_INVALID_ARGUMENT);
  llb_buf_free(&enc);
}

/* A LoRA request names an adapter as a model name (no path, no "..", no control bytes) and, once
 * the input processor resolved it, carries a positive id; a heartbeat's adapters likewise, with a
 * rank. The client's GenerateRequest may leave the id 0 (it is ignored). */
static void test_bad_lora_requests_are_refused(void **state) {
  (void)state;
  struct llb_buf enc = {0};
  const int32_t prompt[1] = {1};
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  const char *bad_names[] = {"../etc/passwd", "/abs/path.gguf", ".hidden", "-flag", "a b", "a\nb", "x..y",
                             "name\x01"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    struct llb_engine_core_request ecr = {.request_id = llb_str_c("e"), .prompt_token_ids = prompt,
                                          .num_prompt_token_ids = 1, .sampling_params = &sp,
                                          .lora_request = {llb_str_c(bad_names[i]), 1}};
    assert_int_equal(llb_engine_core_request_encode_buf(&ecr, &enc), LLB_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(llb_err_last(), "lora_request"));
  }
  char long_name[LLB_LORA_NAME_MAX + 2];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  assert_false(llb_lora_name_valid(long_name, LLB_LORA_NAME_MAX + 1));
  assert_true(llb_lora_name_valid(long_name, LLB_LORA_NAME_MAX));
  struct llb_engine_core_request ecr = {.request_id = llb_str_c("e"), .prompt_token_ids = prompt,
                                        .num_prompt_token_ids = 1, .sampling_params = &sp,
                                        .lora_request = {llb_str_c("sql-lora"), 0}};
  assert_int_equal(llb_engine_core_request_encode_buf(&ecr, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "lora_int_id 0"));
  ecr.lora_request = (struct llb_lora_request){llb_str_c("sqlXlora"), 1};
  assert_int_equal(llb_engine_core_request_encode_buf(&ecr, &enc), LLB_STATUS_OK);
  /* the decoder applies the same rule to a buffer some other writer produced */
  uint8_t *x = memmem(enc.data, enc.len, "sqlXlora", 8);
  assert_non_null(x);
  x[3] = '/';
  x[4] = '.';
  x[5] = '.';
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_engine_core_request out;
  assert_int_equal(llb_engine_core_request_decode(enc.data, enc.len, &arena, &out), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "lora_request"));
  llb_arena_destroy(&arena);
  struct llb_generate_request gr;
  llb_generate_request_init(&gr);
  gr.prompt = llb_str_c("hi");
  gr.lora_request = (struct llb_lora_request){llb_str_c("sql-lora"), -1};
  assert_int_equal(llb_generate_request_encode_buf(&gr, &enc), LLB_STATUS_INVALID_ARGUMENT);
  gr.lora_request.lora_int_id = 0;
  assert_int_equal(llb_generate_request_encode_buf(&gr, &enc), LLB_STATUS_OK);
  struct llb_lora_adapter ad = {.lora_name = llb_str_c("sql-lora"), .lora_int_id = 3, .rank = 0};
  struct llb_heartbeat hb = {.actor = llb_str_c("gpu_worker"), .lora_adapters = &ad, .num_lora_adapters = 1};
  assert_int_equal(llb_heartbeat_encode_buf(&hb, &enc), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "rank"));
  ad.rank = 16;
  assert_int_equal(llb_heartbeat_encode_buf(&hb, &enc), LLB_STATUS_OK);
  llb_buf_free(&enc);
}

/* Decodes m (encoded as given) as a KVStep; returns the status and keeps the error text. */
static llb_status kv_step_roundtrip(const struct llb_kv_step *m) {
  struct llb_buf enc = {0};
  assert_int_equal(llb_kv_step_encode_buf(m, &enc), LLB_STATUS_OK);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_kv_step out;
  llb_status st = llb_kv_step_decode(enc.data, enc.len, &arena, &out);
  llb_arena_destroy(&arena);
  llb_buf_free(&enc);
  return st;
}

/* kv_step.fbs version 2: a version-1 peer (FREE by request id, block tables in the kv_manager)
 * is refused as malformed with a message that says so, both ways; so are a Free op, a Cache
 * whose ids and hashes do not pair, a negative block id, a held list without resync. */
static void test_kv_step_v1_peers_and_bad_v2_fields_are_refused(void **state) {
  (void)state;
  const uint64_t h[2] = {1, 2};
  const int32_t ids[2] = {3, 4}, neg[1] = {-1};
  struct llb_kv_op op = {.kind = LLB_KV_OP_KIND_ALLOCATE, .req_id = llb_str_c("a"), .num_tokens = 8};
  struct llb_kv_step m = {.version = 1, .step = 1, .ops = &op, .num_ops = 1};
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "version-1 scheduler"));
  m.version = 0; /* the current one */
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_OK);
  op = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_FREE, .req_id = llb_str_c("a")};
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "Release"));
  op = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_CACHE, .block_hashes = h, .num_block_hashes = 2,
                          .block_ids = ids, .num_block_ids = 1};
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "block_ids"));
  op = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_RELEASE, .block_ids = neg, .num_block_ids = 1};
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_MALFORMED);
  op = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_ALLOCATE, .num_tokens = 4}; /* no req_id */
  struct llb_buf no_id = {0};
  assert_int_equal(llb_kv_step_encode_buf(&m, &no_id), LLB_STATUS_INVALID_ARGUMENT);
  llb_buf_free(&no_id);
  op = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_RELEASE, .block_ids = ids, .num_block_ids = 2};
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_OK);
  m.held_block_ids = ids;
  m.num_held_block_ids = 2;
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "held_block_ids"));
  m.resync = true;
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_OK);
  m.held_block_ids = neg;
  m.num_held_block_ids = 1;
  assert_int_equal(kv_step_roundtrip(&m), LLB_STATUS_MALFORMED);
  /* a version-1 kv_manager's answer */
  struct llb_kv_step_result r = {.version = 1, .step = 1};
  struct llb_buf enc = {0};
  assert_int_equal(llb_kv_step_result_encode_buf(&r, &enc), LLB_STATUS_OK);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_kv_step_result out;
  assert_int_equal(llb_kv_step_result_decode(enc.data, enc.len, &arena, &out), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "version-1 kv_manager"));
  llb_arena_destroy(&arena);
  llb_buf_free(&enc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_truncation_is_rejected),
      cmocka_unit_test(test_random_bit_flips_never_crash),
      cmocka_unit_test(test_oversized_buffer_is_rejected_naming_the_limit),
      cmocka_unit_test(test_wrong_message_type_is_rejected_naming_both),
      cmocka_unit_test(test_table_without_version_is_rejected),
      cmocka_unit_test(test_inconsistent_scheduled_token_total_is_rejected),
      cmocka_unit_test(test_bad_pooling_fields_are_refused),
      cmocka_unit_test(test_bad_lora_requests_are_refused),
      cmocka_unit_test(test_kv_step_v1_peers_and_bad_v2_fields_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
