/* A prompt longer than the context (max_model_len 4096 under `llmbus serve`) gets a final
 * RequestOutput whose error names both lengths, whether it comes as token ids, as text, or
 * as an EngineCoreRequest straight to the scheduler (past the input processor's check); and
 * the engine then serves the next request with the same tokens as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/subject.h"
#include "schemas/engine_core_request.h"
#include "tests/e2e/stack.h"

#define MAX_MODEL_LEN 4096
#define LONG_PROMPT_TOKENS 5000

static const char *model;
static struct e2e_stack s;
static int32_t long_ids[LONG_PROMPT_TOKENS];

/* True when `text` holds `n` as a whole decimal number. */
static bool names_number(const char *text, long n) {
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9' || (p > text && p[-1] >= '0' && p[-1] <= '9')) continue;
    if (strtol(p, NULL, 10) == n) return true;
  }
  return false;
}

static void expect_length_error(const char *what, const struct e2e_result *r, long prompt_len) {
  e2e_print_result(what, r);
  assert_true(r->finished);
  assert_int_not_equal(r->error_code, 0);
  assert_int_equal(r->num_tokens, 0);
  if (!names_number(r->error_message, MAX_MODEL_LEN) || (prompt_len > 0 && !names_number(r->error_message, prompt_len)))
    fail_msg("%s: error '%s' does not name the prompt length %ld and the context length %d", what,
             r->error_message, prompt_len, MAX_MODEL_LEN);
}

static struct e2e_request short_request(void) {
  struct e2e_request r = {.request_id = "short", .prompt = "What is a bus?"};
  llb_sampling_params_init(&r.sp);
  r.sp.temperature = 0.0f;
  r.sp.max_tokens = 8;
  return r;
}

/* An EngineCoreRequest with the long prompt, published on llm.engine.0.requests with
 * reply_to = a fresh inbox; the error comes back as a RequestOutput there. */
static void send_engine_request(struct e2e_pending *p) {
  memset(p, 0, sizeof *p);
  llb_arena_init(&p->arena, NULL, 0);
  assert_int_equal(bus_new_inbox(s.bus, p->inbox, sizeof p->inbox), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(s.bus, p->inbox, &p->sub), LLB_STATUS_OK);
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.temperature = 0.0f;
  sp.max_tokens = 8;
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  sp.has_seed = true;
  struct llb_engine_core_request m = {
      .request_id = llb_str_c("direct-long-0123456789abcdef"),
      .external_id = llb_str_c("direct-long"),
      .prompt_token_ids = long_ids,
      .num_prompt_token_ids = LONG_PROMPT_TOKENS,
      .sampling_params = &sp,
      .eos_token_id = 2,
      .arrival_time = 1.0,
      .cache_salt = llb_str_c("default"),
      .reply_to = llb_str_c(p->inbox),
  };
  struct llb_buf b = {0};
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(llb_engine_core_request_encode_buf(&m, &b), LLB_STATUS_OK);
  assert_int_equal(bus_subject_engine(BUS_DEFAULT_PREFIX, "0", "requests", subject, sizeof subject), 0);
  assert_int_equal(bus_publish(s.bus, subject, b.data, b.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&b);
}

static void test_prompt_longer_than_context_gets_an_error_naming_the_lengths(void **state) {
  (void)state;
  /* "Hello world" over and over: ordinary tokens, 5000 of them. */
  for (int i = 0; i < LONG_PROMPT_TOKENS; i++) long_ids[i] = i % 2 ? 905 : 19556;
  assert_int_equal(e2e_stack_start(&s, model, NULL), 0);
  double t0 = e2e_now_s();

  struct e2e_result before, after, r;
  struct e2e_request sr = short_request();
  assert_int_equal(e2e_generate(&s, &sr, &before), 0);
  assert_int_equal(before.error_code, 0);
  assert_true(before.num_tokens >= 1);

  struct e2e_request ids = {.request_id = "long-ids", .prompt_token_ids = long_ids,
                            .num_prompt_token_ids = LONG_PROMPT_TOKENS};
  llb_sampling_params_init(&ids.sp);
  ids.sp.max_tokens = 8;
  assert_int_equal(e2e_generate(&s, &ids, &r), 0);
  expect_length_error("token ids", &r, LONG_PROMPT_TOKENS);

  /* As text: its token count is the tokenizer's, so only the context length is known here. */
  static char text[LONG_PROMPT_TOKENS * 8];
  size_t n = 0;
  for (int i = 0; i < LONG_PROMPT_TOKENS; i++) n += (size_t)snprintf(text + n, sizeof text - n, " word%d", i % 10);
  struct e2e_request txt = {.request_id = "long-text", .prompt = text, .raw = true};
  llb_sampling_params_init(&txt.sp);
  txt.sp.max_tokens = 8;
  assert_int_equal(e2e_generate(&s, &txt, &r), 0);
  expect_length_error("text", &r, 0);

  /* Straight to the scheduler: the engine itself refuses it. */
  static struct e2e_pending p;
  send_engine_request(&p);
  assert_int_equal(e2e_collect(&p, 30000), 0);
  expect_length_error("EngineCoreRequest", &p.result, LONG_PROMPT_TOKENS);

  assert_int_equal(e2e_generate(&s, &sr, &after), 0);
  assert_int_equal(after.error_code, 0);
  assert_true(e2e_same_tokens("short request before vs after the long ones", &before, &after));
  fprintf(stderr, "e2e: prompt-too-long scenario in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_prompt_longer_than_context_gets_an_error_naming_the_lengths, NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
