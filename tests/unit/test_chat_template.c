/* Built-in chat templates: each family's official Jinja source rendered by the chat renderer
 * (the Jinja interpreter) compared with what Python's jinja2 renders from the same source
 * (test_chat_template_expected.inc), and detection of each family from its source. Arg [1]:
 * default model (its real template is detected; skipped when absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/chat_template.h"

static const char *g_model;

static const struct chat_message k_sys[] = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},     {"assistant", "Hi there"},
    {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"},
};
static const struct chat_message k_short[] = {{"user", " Hi\n\xE3\x80\x80"}, {"assistant", "\tOK \xC2\xA0"}};

static const struct {
  const char *name, *conv;
  bool gen;
  const char *expected;
} k_cases[] = {
#include "test_chat_template_expected.inc"
};

static void test_rendering_matches_jinja2_for_every_template(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
    enum chat_template_kind k;
    assert_int_equal(chat_template_from_name(k_cases[i].name, &k), LLB_STATUS_OK);
    const struct chat_message *msgs = k_sys;
    size_t n = 6;
    if (strcmp(k_cases[i].conv, "nosys") == 0) msgs = k_sys + 1, n = 5;
    if (strcmp(k_cases[i].conv, "short") == 0) msgs = k_short, n = 2;
    char *text = NULL;
    llb_status st = chat_template_apply(k, msgs, n, k_cases[i].gen, &text);
    if (!k_cases[i].expected) {
      if (st != LLB_STATUS_INVALID_ARGUMENT) fail_msg("%s/%s: expected the template to reject it", k_cases[i].name, k_cases[i].conv);
      assert_null(text);
      continue;
    }
    if (st != LLB_STATUS_OK) fail_msg("%s/%s: %s", k_cases[i].name, k_cases[i].conv, llb_err_last());
    if (strcmp(text, k_cases[i].expected) != 0)
      fail_msg("%s/%s gen=%d:\n got: '%s'\nwant: '%s'", k_cases[i].name, k_cases[i].conv, k_cases[i].gen, text,
               k_cases[i].expected);
    free(text);
  }
}

static void test_detects_each_template_family_from_its_source(void **state) {
  (void)state;
  for (int want = 0; want < CHAT_TEMPLATE_COUNT; want++) {
    enum chat_template_kind k;
    const char *name = chat_template_name((enum chat_template_kind)want);
    llb_status st = chat_template_detect(chat_template_builtin((enum chat_template_kind)want)->source, &k);
    if (st != LLB_STATUS_OK) fail_msg("%s: %s", name, llb_err_last());
    assert_string_equal(chat_template_name(k), name);
  }
  assert_null(chat_template_builtin(CHAT_TEMPLATE_COUNT));
}

static void test_unknown_template_is_unsupported_with_names_listed(void **state) {
  (void)state;
  enum chat_template_kind k;
  assert_int_equal(chat_template_detect("{% for m in messages %}### {{ m.content }}{% endfor %}", &k),
                   LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "chatml"));
  assert_int_equal(chat_template_from_name("vicuna", &k), LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "vicuna"));
  assert_int_equal(chat_template_from_name("mistral-v1", &k), LLB_STATUS_OK);
  assert_int_equal(k, CHAT_TEMPLATE_MISTRAL);
  assert_int_equal(chat_template_detect("llama3", &k), LLB_STATUS_OK);
  assert_int_equal(k, CHAT_TEMPLATE_LLAMA3);
  assert_int_equal(chat_template_detect("{{ '<|start_header_id|>' }}<|end_header_id|>Cutting Knowledge Date", &k),
                   LLB_STATUS_UNSUPPORTED);
}

static void test_empty_conversation_renders_only_the_generation_prompt(void **state) {
  (void)state;
  char *text;
  assert_int_equal(chat_template_apply(CHAT_TEMPLATE_SMOLLM2, NULL, 0, true, &text), LLB_STATUS_OK);
  assert_string_equal(text, "<|im_start|>assistant\n");
  free(text);
}

static void test_default_model_template_is_smollm2(void **state) {
  (void)state;
  struct gguf_file *f;
  if (gguf_open(g_model, &f) != LLB_STATUS_OK) {
    printf("SKIP: default model %s absent (ops/fetch-model.sh)\n", g_model);
    skip();
  }
  enum chat_template_kind k;
  assert_int_equal(chat_template_from_gguf(f, &k), LLB_STATUS_OK);
  assert_int_equal(k, CHAT_TEMPLATE_SMOLLM2);
  gguf_close(f);
}

int main(int argc, char **argv) {
  g_model = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rendering_matches_jinja2_for_every_template),
      cmocka_unit_test(test_detects_each_template_family_from_its_source),
      cmocka_unit_test(test_unknown_template_is_unsupported_with_names_listed),
      cmocka_unit_test(test_empty_conversation_renders_only_the_generation_prompt),
      cmocka_unit_test(test_default_model_template_is_smollm2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
