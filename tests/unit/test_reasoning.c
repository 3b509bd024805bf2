/* Reasoning markup (model/reasoning/reasoning.h): each parser's split of whole outputs, the streamed
 * split that only grows and ends where the whole one does whatever the chunking, and the
 * token-level scan that says where a grammar may start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "model/reasoning/reasoning.h"

static void expect_split(enum reasoning_parser p, const char *text, const char *reasoning, const char *content) {
  struct reasoning_split s;
  reasoning_split_text(p, text, strlen(text), true, &s);
  char r[256] = "", c[256] = "";
  snprintf(r, sizeof r, "%.*s", (int)(s.reasoning_end - s.reasoning_begin), text + s.reasoning_begin);
  snprintf(c, sizeof c, "%.*s", (int)(s.content_end - s.content_begin), text + s.content_begin);
  if ((reasoning ? !s.has_reasoning || strcmp(r, reasoning) : s.has_reasoning) || strcmp(c, content))
    fail_msg("%s %s: reasoning %d \"%s\" content \"%s\"", reasoning_parser_name(p), text, s.has_reasoning, r, c);
}

static void test_each_parser_splits_its_markup(void **state) {
  (void)state;
  expect_split(REASONING_DEEPSEEK_R1, "<think>a b</think>\n\nanswer", "a b", "\n\nanswer");
  expect_split(REASONING_DEEPSEEK_R1, "a b</think>answer", "a b", "answer"); /* the template opened it */
  expect_split(REASONING_DEEPSEEK_R1, "still thinking", "still thinking", "");
  expect_split(REASONING_DEEPSEEK_R1, "x</think>y</think>z", "x", "y</think>z");
  expect_split(REASONING_QWEN3, "\n<think>plan</think>done", "plan", "done");
  expect_split(REASONING_QWEN3, "no thinking</think>here", NULL, "no thinking</think>here");
  expect_split(REASONING_QWEN3, "<think>cut short", "cut short", "");
  expect_split(REASONING_GRANITE, "Here's my thought process: t Here is my response: r", " t ", " r");
  expect_split(REASONING_GRANITE, "Plain answer", NULL, "Plain answer");
  expect_split(REASONING_GPT_OSS,
               "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>out",
               "think", "out");
  expect_split(REASONING_GPT_OSS, "<|channel|>analysis<|message|>think<|channel|>final<|message|>out", "think", "out");
  expect_split(REASONING_NONE, "<think>x</think>y", NULL, "<think>x</think>y");
  assert_int_equal(reasoning_parser_from_name("qwen3"), REASONING_QWEN3);
  assert_int_equal(reasoning_parser_from_name("nope"), REASONING_NONE);
  assert_true(reasoning_needs_special_tokens(REASONING_GPT_OSS));
  assert_false(reasoning_needs_special_tokens(REASONING_DEEPSEEK_R1));
}

/* Streamed: at every chunking, each part of every prefix's split is a prefix of the whole's. */
static void test_streamed_split_only_grows_and_ends_as_the_whole(void **state) {
  (void)state;
  static const struct {
    enum reasoning_parser p;
    const char *text;
  } cases[] = {
      {REASONING_DEEPSEEK_R1, "<think>a</th b</think>c</think>d"},
      {REASONING_DEEPSEEK_R1, "<th"},
      {REASONING_QWEN3, "  <think>x</thin</think>y"},
      {REASONING_QWEN3, "<thinq>x"},
      {REASONING_GRANITE, "Here's my thought process: a Here's my resp Here is my response: b"},
      {REASONING_GPT_OSS, "<|channel|>analysis<|message|>t<|end|><|start|>assistant<|channel|>final<|message|>c"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *t = cases[i].text;
    const size_t n = strlen(t);
    struct reasoning_split whole, part;
    reasoning_split_text(cases[i].p, t, n, true, &whole);
    size_t sent_r = 0, sent_c = 0;
    for (size_t k = 0; k <= n; k++) {
      reasoning_split_text(cases[i].p, t, k, k == n, &part);
      const size_t rl = part.reasoning_end - part.reasoning_begin, cl = part.content_end - part.content_begin;
      if (rl < sent_r || cl < sent_c) fail_msg("%s at %zu: a part shrank", t, k);
      if (rl && memcmp(t + part.reasoning_begin, t + whole.reasoning_begin, rl)) fail_msg("%s at %zu: reasoning differs", t, k);
      if (cl && memcmp(t + part.content_begin, t + whole.content_begin, cl)) fail_msg("%s at %zu: content differs", t, k);
      sent_r = rl;
      sent_c = cl;
    }
    assert_int_equal(sent_r, whole.reasoning_end - whole.reasoning_begin);
    assert_int_equal(sent_c, whole.content_end - whole.content_begin);
  }
}

static void test_scan_finds_where_the_reasoning_ends(void **state) {
  (void)state;
  struct reasoning_marker_ids m = {.num_start = 1, .num_end = 1, .start_len = {1}, .end_len = {2}};
  m.start[0][0] = 7;
  m.end[0][0] = 8, m.end[0][1] = 9;
  int64_t at;
  const int32_t prompt_open[] = {1, 8, 9, 7, 2};
  assert_true(reasoning_scan_ids(&m, prompt_open, 5, true, &at)); /* the last marker opens it */
  const int32_t prompt_closed[] = {7, 3, 8, 9};
  assert_false(reasoning_scan_ids(&m, prompt_closed, 4, true, &at));
  assert_int_equal(at, 4);
  const int32_t out[] = {5, 8, 5, 8, 9, 4};
  assert_false(reasoning_scan_ids(&m, out, 6, true, &at));
  assert_int_equal(at, 5); /* just past the first whole end marker */
  assert_true(reasoning_scan_ids(&m, out, 4, true, &at));
  assert_int_equal(at, -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_parser_splits_its_markup),
      cmocka_unit_test(test_streamed_split_only_grows_and_ends_as_the_whole),
      cmocka_unit_test(test_scan_finds_where_the_reasoning_ends),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
