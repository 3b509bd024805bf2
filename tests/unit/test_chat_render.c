/* The request → Jinja context mapping (model/template/chat_render.h): tool_calls'
 * JSON-string arguments become dicts, content null stays None, kwargs reach the template
 * but do not replace messages, continue_final_message cuts after the last message as
 * transformers does (also when the template strips the content), and malformed JSON fields
 * are refused rather than ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/template/chat_render.h"

static struct jinja_template *tmpl(const char *src) {
  struct jinja_template *t = NULL;
  if (jinja_template_create(src, strlen(src), &t) != LLB_STATUS_OK) fail_msg("%s", llb_err_last());
  return t;
}

static void expect_render(const char *src, const struct chat_render_input *in, const char *want) {
  struct jinja_template *t = tmpl(src);
  char *text = NULL;
  llb_status st = chat_render_jinja(t, in, &text);
  if (st != LLB_STATUS_OK) fail_msg("render: %s", llb_err_last());
  if (strcmp(text, want) != 0) fail_msg("got [%s]\nwant [%s]", text, want);
  free(text);
  jinja_template_destroy(t);
}

/* Tool-call arguments become a dict (HF); a null content (the assistant turn of tool calls)
 * renders as "" as vLLM's string content format does, so templates that concatenate the
 * content (SmolLM2's) still render. */
static void test_tool_calls_arguments_become_a_dict_and_null_content_empty(void **s) {
  (void)s;
  struct chat_message msgs[] = {{"user", "hi"}, {"assistant", ""}, {"tool", "21 C"}};
  struct chat_message_extra x[] = {
      {0},
      {.tool_calls_json = "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]"},
      {.tool_call_id = "c1", .name = "w"}};
  struct chat_render_input in = {.messages = msgs, .extras = x, .num_messages = 3, .add_generation_prompt = true,
                                 .bos_token = "<s>"};
  expect_render("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}"
                "{% for c in m.tool_calls or [] %}[{{ c.function.arguments.city }}]{% endfor %}"
                "{% if m.tool_call_id %}({{ m.tool_call_id }},{{ m.name }}){% endif %};{% endfor %}"
                "{% if add_generation_prompt %}A:{% endif %}",
                &in, "<s>user:hi;assistant:[Paris];tool:21 C(c1,w);A:");
}

static void test_kwargs_reach_the_template_but_not_over_messages(void **s) {
  (void)s;
  struct chat_message msgs[] = {{"user", "hi"}};
  struct chat_render_input in = {.messages = msgs, .num_messages = 1,
                                 .chat_template_kwargs_json = "{\"enable_thinking\": false, \"messages\": []}",
                                 .tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"};
  expect_render("{{ messages | length }} {{ enable_thinking }} {{ tools[0].function.name }}", &in, "1 False f");
}

static void test_continue_final_message_cuts_after_the_last_content(void **s) {
  (void)s;
  struct chat_message msgs[] = {{"user", "q"}, {"assistant", "  Red and "}};
  struct chat_render_input in = {.messages = msgs, .num_messages = 2, .continue_final_message = true};
  /* the template strips the content: the cut keeps content.strip() */
  expect_render("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}", &in,
                "<user>q</user><assistant>Red and");
  struct chat_message keep[] = {{"user", "q"}, {"assistant", "Red and "}};
  in.messages = keep;
  /* the template keeps it as is: the trailing space stays */
  expect_render("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}", &in,
                "<user>q</user><assistant>Red and ");
}

/* The cut finds the last occurrence of the content in one pass (Knuth-Morris-Pratt): a 512 KiB
 * repetitive content rendered twice (so every position matches) used to take minutes, restarting
 * a search after each of its matches; the ctest timeout catches that. The last occurrence, as
 * transformers' rindex, also when occurrences overlap. */
static void test_continue_final_message_is_linear_on_repetitive_content(void **s) {
  (void)s;
  const size_t n = 512 * 1024;
  char *content = malloc(n + 1);
  assert_non_null(content);
  memset(content, 'a', n);
  content[n] = '\0';
  struct chat_message msgs[] = {{"user", content}, {"assistant", content}};
  struct chat_render_input in = {.messages = msgs, .num_messages = 2, .continue_final_message = true};
  struct jinja_template *t = tmpl("{% for m in messages %}{{ m.content }}|{% endfor %}");
  char *text = NULL;
  if (chat_render_jinja(t, &in, &text) != LLB_STATUS_OK) fail_msg("render: %s", llb_err_last());
  assert_int_equal(strlen(text), 2 * n + 1); /* cut after the second content, before its '|' */
  free(text);
  jinja_template_destroy(t);
  free(content);
  struct chat_message over[] = {{"user", "q"}, {"assistant", "aba"}};
  in.messages = over;
  expect_render("{% for m in messages %}{{ m.content }}ababa#{% endfor %}", &in, "qababa#abaababa");
}

static void test_bad_fields_are_refused(void **s) {
  (void)s;
  struct jinja_template *t = tmpl("{{ messages }}");
  struct chat_message msgs[] = {{"assistant", "x"}};
  struct chat_message_extra x[] = {{.tool_calls_json = "{not json"}};
  char *text = NULL;
  struct chat_render_input in = {.messages = msgs, .extras = x, .num_messages = 1};
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_INVALID_ARGUMENT);
  in.extras = NULL;
  in.chat_template_kwargs_json = "[1]";
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_INVALID_ARGUMENT);
  in.chat_template_kwargs_json = NULL;
  in.tools_json = "{}";
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_INVALID_ARGUMENT);
  in.tools_json = NULL;
  in.continue_final_message = true;
  in.add_generation_prompt = true;
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_INVALID_ARGUMENT);
  in.add_generation_prompt = false;
  jinja_template_destroy(t);
  t = tmpl("nothing of the message");
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "final message does not appear"));
  assert_null(text);
  jinja_template_destroy(t);
}

/* --chat-template FILE: a file that is not there is an IO error naming it (it freed an
 * uninitialized pointer once); a file is read and parsed; a template that does not parse says so. */
static void test_chat_template_file_errors_name_the_file(void **s) {
  (void)s;
  struct jinja_template *t = (struct jinja_template *)0x1;
  assert_int_equal(chat_render_load(NULL, "/nonexistent/llmbus-template.jinja", &t), LLB_STATUS_IO);
  assert_null(t);
  assert_non_null(strstr(llb_err_last(), "/nonexistent/llmbus-template.jinja"));
  char path[] = "/tmp/llb-chat-template-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}", f);
  fclose(f);
  assert_int_equal(chat_render_load(NULL, path, &t), LLB_STATUS_OK);
  struct chat_message msgs[] = {{"user", "hi"}};
  struct chat_render_input in = {.messages = msgs, .num_messages = 1};
  char *text = NULL;
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_OK);
  assert_string_equal(text, "[user]hi");
  free(text);
  jinja_template_destroy(t);
  f = fopen(path, "w");
  fputs("{% for m in messages %}", f);
  fclose(f);
  assert_int_equal(chat_render_load(NULL, path, &t), LLB_STATUS_MALFORMED);
  assert_null(t);
  unlink(path);
}

/* --chat-template "{% ... %}": the template itself, as vLLM takes a single-line template. */
static void test_chat_template_may_be_the_jinja_text_itself(void **s) {
  (void)s;
  struct jinja_template *t = NULL;
  assert_int_equal(chat_render_load(NULL, "{% for m in messages %}<{{ m.role }}:{{ m.content }}>{% endfor %}", &t),
                   LLB_STATUS_OK);
  struct chat_message msgs[] = {{"user", "hi"}};
  struct chat_render_input in = {.messages = msgs, .num_messages = 1};
  char *text = NULL;
  assert_int_equal(chat_render_jinja(t, &in, &text), LLB_STATUS_OK);
  assert_string_equal(text, "<user:hi>");
  free(text);
  jinja_template_destroy(t);
  assert_int_equal(chat_render_load(NULL, "{% for m in messages %}", &t), LLB_STATUS_MALFORMED);
  assert_null(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tool_calls_arguments_become_a_dict_and_null_content_empty),
      cmocka_unit_test(test_kwargs_reach_the_template_but_not_over_messages),
      cmocka_unit_test(test_continue_final_message_cuts_after_the_last_content),
      cmocka_unit_test(test_continue_final_message_is_linear_on_repetitive_content),
      cmocka_unit_test(test_bad_fields_are_refused),
      cmocka_unit_test(test_chat_template_file_errors_name_the_file),
      cmocka_unit_test(test_chat_template_may_be_the_jinja_text_itself),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
