/* actors/api_server/tool_parser: the tool-call formats of the common model families, final and
 * streamed, malformed outputs included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/tool_parser.h"

/* The final parse of `text`. */
static void parse_final(enum tool_format f, const char *named, const char *text, struct tool_snapshot *s) {
  memset(s, 0, sizeof *s);
  assert_int_equal(tool_parse(f, named, text, strlen(text), true, s), LLB_STATUS_OK);
}

static void assert_call(const struct tool_snapshot *s, int i, const char *name, const char *args_json) {
  assert_true(i < s->num_calls);
  assert_true(s->calls[i].complete);
  assert_string_equal(s->calls[i].name.data, name);
  json_t *got = json_loads(s->calls[i].arguments.data, JSON_DECODE_ANY, NULL);
  json_t *want = json_loads(args_json, JSON_DECODE_ANY, NULL);
  assert_non_null(got);
  assert_non_null(want);
  if (!json_equal(got, want)) fail_msg("arguments %s, want %s", s->calls[i].arguments.data, args_json);
  json_decref(got);
  json_decref(want);
}

static void assert_content(const struct tool_snapshot *s, const char *want) {
  assert_int_equal(s->content.len, strlen(want));
  if (s->content.len) assert_memory_equal(s->content.data, want, s->content.len);
}

/* What a client assembles from the streamed deltas of `text` fed in pieces of `step` bytes. */
struct assembled {
  struct api_server_buf content;
  struct api_server_buf names[8], args[8];
  char ids[8][TOOL_ID_BYTES];
  int num_calls;
};

static void stream_text(enum tool_format f, const char *named, const char *text, size_t step, struct assembled *a) {
  memset(a, 0, sizeof *a);
  struct tool_stream s;
  tool_stream_init(&s, f, named, false);
  size_t n = strlen(text);
  for (size_t i = 0; i < n || i == 0; i += step) {
    size_t k = i + step < n ? step : n - i;
    bool final = i + step >= n;
    json_t *deltas = NULL;
    assert_int_equal(tool_stream_feed(&s, text + i, k, final, &deltas), LLB_STATUS_OK);
    size_t j;
    json_t *d;
    json_array_foreach(deltas, j, d) {
      json_t *content = json_object_get(d, "content"), *calls = json_object_get(d, "tool_calls");
      assert_true((content != NULL) != (calls != NULL)); /* one kind per delta */
      if (content) api_server_buf_append(&a->content, json_string_value(content), json_string_length(content));
      if (!calls) continue;
      assert_int_equal(json_array_size(calls), 1);
      json_t *c = json_array_get(calls, 0), *fn = json_object_get(c, "function");
      int idx = (int)json_integer_value(json_object_get(c, "index"));
      assert_true(idx >= 0 && idx < 8);
      json_t *id = json_object_get(c, "id"), *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
      if (id) { /* the call's first delta: id, type and name, once */
        assert_int_equal(idx, a->num_calls);
        assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
        snprintf(a->ids[idx], TOOL_ID_BYTES, "%s", json_string_value(id));
        api_server_buf_append(&a->names[idx], json_string_value(name), json_string_length(name));
        a->num_calls++;
      } else {
        assert_null(name);
        assert_true(idx < a->num_calls); /* arguments only after the name */
        api_server_buf_append(&a->args[idx], json_string_value(args), json_string_length(args));
      }
    }
    json_decref(deltas);
    if (final) break;
  }
  tool_stream_free(&s);
}

static void assembled_free(struct assembled *a) {
  api_server_buf_free(&a->content);
  for (int i = 0; i < 8; i++) {
    api_server_buf_free(&a->names[i]);
    api_server_buf_free(&a->args[i]);
  }
}

/* Streaming `text` in pieces of 1, 2, 3, 7 and all bytes gives the final parse's content and
 * calls, and no delta carries any of `markers`. */
static void assert_stream_matches_final(enum tool_format f, const char *named, const char *text,
                                        const char *const *markers) {
  struct tool_snapshot fin;
  parse_final(f, named, text, &fin);
  size_t steps[] = {1, 2, 3, 7, strlen(text) ? strlen(text) : 1};
  for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
    struct assembled a;
    stream_text(f, named, text, steps[k], &a);
    assert_int_equal(a.num_calls, fin.num_calls);
    for (int i = 0; i < a.num_calls; i++) {
      assert_string_equal(a.names[i].data, fin.calls[i].name.data);
      if (strcmp(a.args[i].data ? a.args[i].data : "", fin.calls[i].arguments.data) != 0)
        fail_msg("step %zu call %d: streamed arguments %s, final %s", steps[k], i, a.args[i].data,
                 fin.calls[i].arguments.data);
      if (f == TOOL_FORMAT_MISTRAL) assert_int_equal(strlen(a.ids[i]), 9);
      else assert_memory_equal(a.ids[i], "chatcmpl-tool-", 14);
    }
    assert_int_equal(a.content.len, fin.content.len);
    if (a.content.len) assert_memory_equal(a.content.data, fin.content.data, a.content.len);
    for (int m = 0; markers && markers[m] && fin.num_calls > 0; m++) {
      assert_null(strstr(a.content.data ? a.content.data : "", markers[m]));
      for (int i = 0; i < a.num_calls; i++) assert_null(strstr(a.args[i].data ? a.args[i].data : "", markers[m]));
    }
    assembled_free(&a);
  }
  tool_snapshot_free(&fin);
}

static void test_hermes_calls_and_surrounding_text(void **state) {
  (void)state;
  struct tool_snapshot s;
  const char *text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                     "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>{\"arguments\": {\"q\": \"a}b\\\"\"}, \"name\": "
                     "\"search\"}</tool_call>";
  parse_final(TOOL_FORMAT_HERMES, NULL, text, &s);
  assert_false(s.malformed);
  assert_int_equal(s.num_calls, 2);
  assert_call(&s, 0, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
  assert_call(&s, 1, "search", "{\"q\": \"a}b\\\"\"}");
  assert_content(&s, "Let me check.\n\n");
  tool_snapshot_free(&s);
  static const char *const markers[] = {"<tool_call>", "</tool_call>", "<tool_", NULL};
  assert_stream_matches_final(TOOL_FORMAT_HERMES, NULL, text, markers);
  /* Qwen without the closing tag at the very end (vLLM's regex accepts it); no arguments = {} */
  parse_final(TOOL_FORMAT_HERMES, NULL, "<tool_call>\n{\"name\": \"now\"}\n", &s);
  assert_int_equal(s.num_calls, 1);
  assert_call(&s, 0, "now", "{}");
  tool_snapshot_free(&s);
  /* stringified arguments are decoded */
  parse_final(TOOL_FORMAT_HERMES, NULL, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", &s);
  assert_call(&s, 0, "f", "{\"x\": 1}");
  tool_snapshot_free(&s);
  /* plain text, and text mentioning a tag without one, stay content */
  parse_final(TOOL_FORMAT_HERMES, NULL, "Paris is sunny. a < b", &s);
  assert_int_equal(s.num_calls, 0);
  assert_content(&s, "Paris is sunny. a < b");
  tool_snapshot_free(&s);
  assert_stream_matches_final(TOOL_FORMAT_HERMES, NULL, "Paris is sunny. a <tool b <", NULL);
}

static void test_hermes_malformed_output_falls_back_to_content(void **state) {
  (void)state;
  static const char *const bad[] = {
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}</tool_call>",     /* unbalanced */
      "<tool_call>not json</tool_call>",
      "<tool_call>{\"arguments\": {}}</tool_call>",                             /* no name */
      "<tool_call>{\"name\": 3}</tool_call>",
      "<tool_call>{\"name\": \"f\"} trailing</tool_call>",
      "ok <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": [1, 2",            /* cut by max_tokens */
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": nul}}</tool_call>",
      "<tool_call>{\"name\": \"f\"}</tool_call><tool_call>{\"name\":",            /* second one cut */
      "<tool_call>",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct tool_snapshot s;
    parse_final(TOOL_FORMAT_HERMES, NULL, bad[i], &s);
    if (!s.malformed || s.num_calls != 0) fail_msg("case %zu: not malformed", i);
    assert_content(&s, bad[i]);
    tool_snapshot_free(&s);
    /* streamed: never crashes; the client never sees a call it cannot complete as JSON */
    struct assembled a;
    stream_text(TOOL_FORMAT_HERMES, NULL, bad[i], 1, &a);
    assembled_free(&a);
  }
}

static void test_llama3_json_calls(void **state) {
  (void)state;
  struct tool_snapshot s;
  const char *text = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; "
                     "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}";
  parse_final(TOOL_FORMAT_LLAMA3_JSON, NULL, text, &s);
  assert_false(s.malformed);
  assert_int_equal(s.num_calls, 2);
  assert_call(&s, 0, "get_weather", "{\"city\": \"Oslo\"}");
  assert_call(&s, 1, "get_time", "{\"tz\": \"CET\"}");
  assert_content(&s, "");
  tool_snapshot_free(&s);
  static const char *const markers[] = {"<|python_tag|>", NULL};
  assert_stream_matches_final(TOOL_FORMAT_LLAMA3_JSON, NULL, text, markers);
  assert_stream_matches_final(TOOL_FORMAT_LLAMA3_JSON, NULL, "  {\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": 2}]}}",
                              markers);
  /* text that does not start with a call is content */
  parse_final(TOOL_FORMAT_LLAMA3_JSON, NULL, "The weather is {fine}.", &s);
  assert_int_equal(s.num_calls, 0);
  assert_content(&s, "The weather is {fine}.");
  tool_snapshot_free(&s);
  assert_stream_matches_final(TOOL_FORMAT_LLAMA3_JSON, NULL, "The weather is {fine}.", NULL);
  /* malformed: content */
  static const char *const bad[] = {"{\"name\": \"f\", \"parameters\": {}", "{\"name\": \"f\"}; garbage",
                                    "{\"name\": \"f\"};", "<|python_tag|>"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    parse_final(TOOL_FORMAT_LLAMA3_JSON, NULL, bad[i], &s);
    if (!s.malformed || s.num_calls) fail_msg("case %zu: not malformed", i);
    assert_content(&s, bad[i]);
    tool_snapshot_free(&s);
  }
}

static void test_mistral_calls_in_both_formats(void **state) {
  (void)state;
  struct tool_snapshot s;
  const char *v3 = "Sure. [TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"neg\", "
                   "\"arguments\": {\"x\": -3.5e1}}]";
  parse_final(TOOL_FORMAT_MISTRAL, NULL, v3, &s);
  assert_false(s.malformed);
  assert_int_equal(s.num_calls, 2);
  assert_call(&s, 0, "add", "{\"a\": 1, \"b\": 2}");
  assert_call(&s, 1, "neg", "{\"x\": -35.0}");
  assert_content(&s, "Sure. ");
  tool_snapshot_free(&s);
  static const char *const markers[] = {"[TOOL_CALLS]", "[ARGS]", "[TOOL", NULL};
  assert_stream_matches_final(TOOL_FORMAT_MISTRAL, NULL, v3, markers);
  const char *v11 = "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}[TOOL_CALLS]neg[ARGS]{\"x\": 3}";
  parse_final(TOOL_FORMAT_MISTRAL, NULL, v11, &s);
  assert_false(s.malformed);
  assert_int_equal(s.num_calls, 2);
  assert_call(&s, 0, "add", "{\"a\": 1, \"b\": 2}");
  assert_call(&s, 1, "neg", "{\"x\": 3}");
  tool_snapshot_free(&s);
  assert_stream_matches_final(TOOL_FORMAT_MISTRAL, NULL, v11, markers);
  static const char *const bad[] = {"[TOOL_CALLS]", "[TOOL_CALLS] [{\"name\": \"f\"", "[TOOL_CALLS]a b[ARGS]{}",
                                    "[TOOL_CALLS]f[ARGS]{\"x\":", "[TOOL_CALLS]f[ARGS]7", "[TOOL_CALLS] [] x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    parse_final(TOOL_FORMAT_MISTRAL, NULL, bad[i], &s);
    if (!s.malformed || s.num_calls) fail_msg("case %zu: not malformed", i);
    assert_content(&s, bad[i]);
    tool_snapshot_free(&s);
  }
}

static void test_required_and_named_outputs(void **state) {
  (void)state;
  struct tool_snapshot s;
  const char *req = "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}, {\"parameters\": {}, \"name\": \"now\"}]";
  parse_final(TOOL_FORMAT_REQUIRED, NULL, req, &s);
  assert_int_equal(s.num_calls, 2);
  assert_call(&s, 0, "get_weather", "{\"city\": \"Rome\"}");
  assert_call(&s, 1, "now", "{}");
  tool_snapshot_free(&s);
  assert_stream_matches_final(TOOL_FORMAT_REQUIRED, NULL, req, NULL);
  parse_final(TOOL_FORMAT_REQUIRED, NULL, "[]", &s); /* minItems 1 */
  assert_true(s.malformed);
  tool_snapshot_free(&s);
  const char *named = " {\"city\": \"Rome\", \"days\": [1, 2]} ";
  parse_final(TOOL_FORMAT_NAMED, "get_weather", named, &s);
  assert_int_equal(s.num_calls, 1);
  assert_call(&s, 0, "get_weather", "{\"city\": \"Rome\", \"days\": [1, 2]}");
  tool_snapshot_free(&s);
  parse_final(TOOL_FORMAT_NAMED, "get_weather", "{\"city\": ", &s);
  assert_true(s.malformed);
  assert_int_equal(s.num_calls, 0);
  tool_snapshot_free(&s);
  /* named streams the name first, then the argument text as it comes */
  struct assembled a;
  stream_text(TOOL_FORMAT_NAMED, "get_weather", "{\"city\": \"Rome\"}", 4, &a);
  assert_int_equal(a.num_calls, 1);
  assert_string_equal(a.names[0].data, "get_weather");
  assert_string_equal(a.args[0].data, "{\"city\": \"Rome\"}");
  assembled_free(&a);
}

/* Every prefix and a corpus of byte mutations of valid outputs: no crash, a final parse is
 * either calls with valid JSON arguments or the whole text as content. */
static void test_truncated_and_mutated_outputs_never_crash(void **state) {
  (void)state;
  static const struct { enum tool_format f; const char *text; } seeds[] = {
      {TOOL_FORMAT_HERMES, "x<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, \"]}\", {\"b\": null}]}}</tool_call>y"},
      {TOOL_FORMAT_LLAMA3_JSON, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": \"\\u00e9\"}}; {\"name\": \"g\"}"},
      {TOOL_FORMAT_MISTRAL, "t[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": true}}]"},
      {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]f[ARGS]{\"a\": false}[TOOL_CALLS]g[ARGS]{}"},
      {TOOL_FORMAT_REQUIRED, "[{\"name\": \"f\", \"parameters\": {\"a\": 1e5}}]"},
      {TOOL_FORMAT_NAMED, "{\"a\": {\"b\": [[[]]]}}"},
  };
  static const char noise[] = "{}[]\",:\\ <>/|_[]TOOL";
  uint32_t rng = 12345;
  for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
    size_t n = strlen(seeds[k].text);
    char buf[256];
    for (size_t cut = 0; cut <= n; cut++) {
      for (int m = 0; m < 4; m++) {
        memcpy(buf, seeds[k].text, cut);
        buf[cut] = '\0';
        if (m > 0 && cut > 0) {
          rng = rng * 1103515245u + 12345u;
          buf[(rng >> 8) % cut] = noise[(rng >> 16) % (sizeof noise - 1)];
        }
        struct tool_snapshot s;
        memset(&s, 0, sizeof s);
        char *exact = malloc(cut ? cut : 1); /* no terminator: ASan sees a read past the text */
        memcpy(exact, buf, cut);
        assert_int_equal(tool_parse(seeds[k].f, "f", exact, cut, true, &s), LLB_STATUS_OK);
        free(exact);
        if (s.malformed) assert_content(&s, buf);
        for (int32_t i = 0; i < s.num_calls; i++) {
          json_t *j = json_loadb(s.calls[i].arguments.data, s.calls[i].arguments.len, JSON_DECODE_ANY, NULL);
          assert_non_null(j);
          json_decref(j);
          assert_true(s.calls[i].name.len > 0);
        }
        tool_snapshot_free(&s);
        struct assembled a;
        stream_text(seeds[k].f, "f", buf, 1 + (size_t)m, &a);
        assembled_free(&a);
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hermes_calls_and_surrounding_text),
      cmocka_unit_test(test_hermes_malformed_output_falls_back_to_content),
      cmocka_unit_test(test_llama3_json_calls),
      cmocka_unit_test(test_mistral_calls_in_both_formats),
      cmocka_unit_test(test_required_and_named_outputs),
      cmocka_unit_test(test_truncated_and_mutated_outputs_never_crash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
