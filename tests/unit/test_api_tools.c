/* actors/api_server/api_server_tools: tools / tool_choice / tool messages → GenerateRequest, and the
 * responses (objects and SSE chunks) that carry parsed tool calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_response.h"
#include "actors/api_server/api_server_tools.h"
#include "model/structured/structured_output.h"

#define WEATHER                                                                                              \
  "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city\","    \
  "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define NOW "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}"
#define USER "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]"

static llb_status parse(const char *body, enum tool_format parser, struct api_server_request *r, struct api_server_error *e) {
  struct api_server_parse_options o = {.served_model = "smol", .tool_parser = (int32_t)parser};
  return api_server_request_parse(API_SERVER_ENDPOINT_CHAT, body, strlen(body), &o, r, e);
}

static void parse_ok(const char *body, struct api_server_request *r) {
  struct api_server_error e;
  llb_status st = parse(body, TOOL_FORMAT_HERMES, r, &e);
  if (st != LLB_STATUS_OK) fail_msg("parse: %s (param %s)", e.message, e.param);
}

static void test_tools_and_choices_reach_the_generate_request(void **state) {
  (void)state;
  struct api_server_request r;
  struct llb_generate_request gr;
  /* auto (the default with tools): tools for the template, no constraint */
  parse_ok("{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "," NOW "]}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  json_t *tools = json_loadb(gr.tools.data, gr.tools.len, 0, NULL);
  assert_int_equal(json_array_size(tools), 2);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(tools, 1), "function"), "name")),
                      "now");
  json_decref(tools);
  assert_int_equal(gr.structured_outputs.kind, LLB_SO_NONE);
  assert_false(gr.sampling_params->skip_special_tokens); /* hermes markers may be special tokens (vLLM) */
  api_server_request_free(&r);
  /* none: tools still passed, output not constrained, special tokens skipped as usual */
  parse_ok("{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  assert_true(gr.tools.len > 0);
  assert_int_equal(gr.structured_outputs.kind, LLB_SO_NONE);
  assert_true(gr.sampling_params->skip_special_tokens);
  api_server_request_free(&r);
  /* named: the tool's parameters schema */
  parse_ok("{\"model\":\"smol\"," USER ",\"tools\":[" NOW "," WEATHER "],\"tool_choice\":{\"type\":\"function\","
           "\"function\":{\"name\":\"get_weather\"}}}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  assert_int_equal(gr.structured_outputs.kind, LLB_SO_JSON);
  json_t *schema = json_loadb(gr.structured_outputs.spec.data, gr.structured_outputs.spec.len, 0, NULL);
  json_t *want = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}", 0, NULL);
  assert_true(json_equal(schema, want));
  json_decref(schema);
  json_decref(want);
  api_server_request_free(&r);
  /* required: an array of {name: const, parameters} alternatives, $defs hoisted */
  parse_ok("{\"model\":\"smol\"," USER ",\"tool_choice\":\"required\",\"tools\":[" WEATHER ","
           "{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"parameters\":{\"type\":\"object\",\"properties\":"
           "{\"c\":{\"$ref\":\"#/$defs/color\"}},\"$defs\":{\"color\":{\"enum\":[\"red\",\"blue\"]}}}}}]}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  assert_int_equal(gr.structured_outputs.kind, LLB_SO_JSON);
  schema = json_loadb(gr.structured_outputs.spec.data, gr.structured_outputs.spec.len, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(schema, "type")), "array");
  assert_int_equal(json_integer_value(json_object_get(schema, "minItems")), 1);
  assert_null(json_object_get(schema, "maxItems"));
  assert_non_null(json_object_get(json_object_get(schema, "$defs"), "color"));
  json_t *alts = json_object_get(json_object_get(schema, "items"), "anyOf");
  assert_int_equal(json_array_size(alts), 2);
  json_t *alt = json_array_get(alts, 1), *props = json_object_get(alt, "properties");
  assert_string_equal(json_string_value(json_object_get(json_object_get(props, "name"), "const")), "pick");
  assert_null(json_object_get(json_object_get(props, "parameters"), "$defs"));
  assert_true(json_is_false(json_object_get(alt, "additionalProperties")));
  json_decref(schema);
  api_server_request_free(&r);
  /* parallel_tool_calls false: one call at most */
  parse_ok("{\"model\":\"smol\"," USER ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"tools\":[" NOW "]}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  schema = json_loadb(gr.structured_outputs.spec.data, gr.structured_outputs.spec.len, 0, NULL);
  assert_int_equal(json_integer_value(json_object_get(schema, "maxItems")), 1);
  json_decref(schema);
  api_server_request_free(&r);
}

static void test_tool_messages_map_to_chat_message_fields(void **state) {
  (void)state;
  struct api_server_request r;
  parse_ok("{\"model\":\"smol\",\"tools\":[" WEATHER "],\"messages\":["
           "{\"role\":\"user\",\"content\":\"Weather in Paris?\",\"name\":\"ann\"},"
           "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
           "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
           "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"22 C, sunny\"},"
           "{\"role\":\"assistant\",\"content\":\"It is sunny.\"}]}", &r);
  assert_int_equal(r.num_messages, 4);
  assert_memory_equal(r.messages[0].name.data, "ann", 3);
  assert_true(r.messages[1].content_is_null);
  json_t *calls = json_loadb(r.messages[1].tool_calls.data, r.messages[1].tool_calls.len, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 0), "id")), "call_1");
  json_decref(calls);
  assert_int_equal(r.messages[2].tool_call_id.len, 6);
  assert_memory_equal(r.messages[2].tool_call_id.data, "call_1", 6);
  assert_memory_equal(r.messages[2].content.data, "22 C, sunny", 11);
  assert_false(r.messages[3].content_is_null);
  assert_int_equal(r.messages[3].tool_calls.len, 0);
  api_server_request_free(&r);
}

static void test_bad_tool_requests_name_the_field(void **state) {
  (void)state;
  static const struct {
    const char *body;
    const char *param;
  } cases[] = {
      {"{\"model\":\"smol\"," USER ",\"tools\":{}}", "tools"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[]}", "tools"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[7]}", "tools[0]"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]}", "tools[0].type"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"function\"}]}", "tools[0].function"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", "tools[0].function.name"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
       "tools[0].function.name"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
       "\"x1234567890123456789012345678901234567890123456789012345678901234\"}}]}", "tools[0].function.name"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[" NOW "," NOW "]}", "tools[1].function.name"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}",
       "tools[0].function.parameters"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"x\":1}}]}",
       "tools[0].function.x"},
      {"{\"model\":\"smol\"," USER ",\"tool_choice\":\"auto\"}", "tool_choice"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[" NOW "],\"tool_choice\":\"any\"}", "tool_choice"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[" NOW "],\"tool_choice\":{\"type\":\"function\",\"function\":"
       "{\"name\":\"get_weather\"}}}", "tool_choice"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[" NOW "],\"tool_choice\":{\"type\":\"function\"}}", "tool_choice.function"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[" NOW "],\"parallel_tool_calls\":1}", "parallel_tool_calls"},
      {"{\"model\":\"smol\"," USER ",\"tools\":[" NOW "],\"tool_choice\":\"required\",\"response_format\":"
       "{\"type\":\"json_object\"}}", "tool_choice"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}",
       "messages[0].tool_calls"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\","
       "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
       "messages[0].tool_calls[0].function.arguments"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":"
       "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}", "messages[0].tool_calls[0].id"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"tool\",\"content\":\"22 C\"}]}", "messages[0].tool_call_id"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_call_id\":\"c\"}]}",
       "messages[0].tool_call_id"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct api_server_request r;
    struct api_server_error e;
    llb_status st = parse(cases[i].body, TOOL_FORMAT_HERMES, &r, &e);
    if (st != LLB_STATUS_INVALID_ARGUMENT || e.http_status != 400 || strcmp(e.param, cases[i].param) != 0)
      fail_msg("case %zu: status %d http %d param \"%s\" (want \"%s\"): %s", i, st, e.http_status, e.param,
               cases[i].param, e.message);
  }
  /* completions has no tools */
  struct api_server_request r;
  struct api_server_error e;
  struct api_server_parse_options o = {.served_model = "smol"};
  const char *body = "{\"model\":\"smol\",\"prompt\":\"x\",\"tools\":[" NOW "]}";
  assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_COMPLETIONS, body, strlen(body), &o, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(e.param, "tools");
}

static void test_auto_tool_choice_needs_the_server_flag_as_vllm(void **state) {
  (void)state;
  struct api_server_parse_options o = {.served_model = "smol", .no_auto_tool_choice = true};
  struct api_server_request r;
  struct api_server_error e;
  const char *implied = "{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "]}";
  const char *given = "{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"auto\"}";
  const char *bodies[] = {implied, given};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_CHAT, bodies[i], strlen(bodies[i]), &o, &r, &e),
                     LLB_STATUS_INVALID_ARGUMENT);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.param, "tool_choice");
    assert_non_null(strstr(e.message, "--enable-auto-tool-choice"));
  }
  /* required and none need no parser of the output */
  const char *required = "{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"required\"}";
  assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_CHAT, required, strlen(required), &o, &r, &e), LLB_STATUS_OK);
  api_server_request_free(&r);
}

/* A DELTA RequestOutput of one choice. */
static struct llb_request_output out1(const char *text, enum llb_finish_reason fin, struct llb_completion_output *c) {
  memset(c, 0, sizeof *c);
  c->text = llb_str_c(text);
  c->finish_reason = fin;
  return (struct llb_request_output){.request_id = llb_str_c("x"), .outputs = c, .num_outputs = 1,
                                     .finished = fin != LLB_FINISH_REASON_NONE};
}

/* The non-streamed response to `body` whose output arrives as `pieces`. */
static json_t *respond(const char *body, enum tool_format parser, const char *const *pieces) {
  struct api_server_request req;
  struct api_server_error e;
  assert_int_equal(parse(body, parser, &req, &e), LLB_STATUS_OK);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "chatcmpl-1", 1700000000), LLB_STATUS_OK);
  for (int i = 0; pieces[i]; i++) {
    struct llb_completion_output c;
    struct llb_request_output ro = out1(pieces[i], pieces[i + 1] ? LLB_FINISH_REASON_NONE : LLB_FINISH_REASON_STOP, &c);
    assert_int_equal(api_server_response_add_output(&r, 0, &ro), LLB_STATUS_OK);
  }
  struct api_server_buf b = {0};
  assert_int_equal(api_server_response_render(&r, &b), LLB_STATUS_OK);
  json_t *j = json_loads(b.data, 0, NULL);
  api_server_buf_free(&b);
  api_server_response_free(&r);
  api_server_request_free(&req);
  assert_non_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"));
  return j;
}

static void test_response_carries_parsed_tool_calls(void **state) {
  (void)state;
  static const char *const hermes[] = {"<tool_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}\n",
                                       "</tool_call>", NULL};
  json_t *j = respond("{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "]}", TOOL_FORMAT_HERMES, hermes);
  json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(ch, "message");
  assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
  assert_true(json_is_null(json_object_get(msg, "content")));
  json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
  assert_memory_equal(json_string_value(json_object_get(call, "id")), "chatcmpl-tool-", 14);
  assert_int_equal(strlen(json_string_value(json_object_get(call, "id"))), 14 + 32);
  assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
  json_t *fn = json_object_get(call, "function");
  assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
  json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
  assert_string_equal(json_string_value(json_object_get(args, "city")), "Paris");
  json_decref(args);
  json_decref(j);
  /* tool_choice none: the same text is content */
  j = respond("{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", TOOL_FORMAT_HERMES, hermes);
  ch = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
  assert_non_null(strstr(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "<tool_call>"));
  assert_null(json_object_get(json_object_get(ch, "message"), "tool_calls"));
  json_decref(j);
  /* no call in the text: plain content, finish_reason kept */
  static const char *const plain[] = {"It is ", "sunny.", NULL};
  j = respond("{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "]}", TOOL_FORMAT_HERMES, plain);
  ch = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "It is sunny.");
  assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
  json_decref(j);
  /* required with parallel_tool_calls false: the first call only */
  static const char *const two[] = {"[{\"name\": \"now\", \"parameters\": {}}, {\"name\": \"now\", \"parameters\": {}}]", NULL};
  j = respond("{\"model\":\"smol\"," USER ",\"tools\":[" NOW "],\"tool_choice\":\"required\",\"parallel_tool_calls\":false}",
              TOOL_FORMAT_HERMES, two);
  msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
  assert_int_equal(json_array_size(json_object_get(msg, "tool_calls")), 1);
  json_decref(j);
  /* named with the llama3_json parser configured: the text is the named tool's arguments */
  static const char *const named[] = {"{\"city\": ", "\"Oslo\"}", NULL};
  j = respond("{\"model\":\"smol\"," USER ",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\","
              "\"function\":{\"name\":\"get_weather\"}}}", TOOL_FORMAT_LLAMA3_JSON, named);
  ch = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
  fn = json_object_get(json_array_get(json_object_get(json_object_get(ch, "message"), "tool_calls"), 0), "function");
  assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
  assert_string_equal(json_string_value(json_object_get(fn, "arguments")), "{\"city\": \"Oslo\"}");
  json_decref(j);
}

static void test_stream_sends_name_then_argument_deltas(void **state) {
  (void)state;
  struct api_server_request req;
  struct api_server_error e;
  const char *body = "{\"model\":\"smol\"," USER ",\"stream\":true,\"tools\":[" WEATHER "]}";
  assert_int_equal(parse(body, TOOL_FORMAT_HERMES, &req, &e), LLB_STATUS_OK);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "chatcmpl-1", 1700000000), LLB_STATUS_OK);
  static const char *const pieces[] = {"Checking", " now.<tool", "_call>{\"name\": \"get_", "weather\", \"arguments\": {\"ci",
                                       "ty\": \"Paris\"}}</tool_call>", NULL};
  struct api_server_buf b = {0};
  for (int i = 0; pieces[i]; i++) {
    struct llb_completion_output c;
    struct llb_request_output ro = out1(pieces[i], pieces[i + 1] ? LLB_FINISH_REASON_NONE : LLB_FINISH_REASON_STOP, &c);
    assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &b), LLB_STATUS_OK);
  }
  assert_int_equal(api_server_response_stream_end(&r, &b), LLB_STATUS_OK);
  assert_null(strstr(b.data, "tool_call>"));
  struct api_server_buf content = {0}, args = {0};
  int name_deltas = 0, finishes = 0;
  for (char *p = b.data; (p = strstr(p, "data: {")) != NULL; p++) {
    char *end = strstr(p, "\n\n");
    json_t *j = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *d = json_object_get(ch, "delta");
    json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0), *fn = json_object_get(tc, "function");
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    if (fin) {
      finishes++;
      assert_string_equal(fin, "tool_calls");
    }
    if (json_string_value(json_object_get(d, "content")))
      api_server_buf_append(&content, json_string_value(json_object_get(d, "content")), json_string_length(json_object_get(d, "content")));
    if (json_object_get(fn, "name")) {
      name_deltas++;
      assert_int_equal(args.len, 0); /* the name comes before any argument text */
      assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
      assert_memory_equal(json_string_value(json_object_get(tc, "id")), "chatcmpl-tool-", 14);
    }
    if (json_object_get(fn, "arguments"))
      api_server_buf_append(&args, json_string_value(json_object_get(fn, "arguments")), json_string_length(json_object_get(fn, "arguments")));
    json_decref(j);
  }
  assert_int_equal(name_deltas, 1);
  assert_int_equal(finishes, 1);
  assert_string_equal(content.data, "Checking now.");
  assert_string_equal(args.data, "{\"city\": \"Paris\"}");
  assert_non_null(strstr(b.data, "data: [DONE]"));
  api_server_buf_free(&content);
  api_server_buf_free(&args);
  api_server_buf_free(&b);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

/* Whether the grammar of `schema` accepts `text` as a complete value. */
static bool grammar_accepts(struct llb_str schema, const char *text) {
  struct so_grammar *g = NULL;
  struct so_matcher *m = NULL;
  assert_int_equal(so_grammar_compile_json_schema(schema.data, schema.len, &g), LLB_STATUS_OK);
  assert_int_equal(so_matcher_create(g, &m), LLB_STATUS_OK);
  bool ok = so_matcher_accept_bytes(m, (const uint8_t *)text, strlen(text)) && so_matcher_is_complete(m);
  so_matcher_destroy(m);
  so_grammar_destroy(g);
  return ok;
}

/* The schemas of required and named tool_choice compile in the structured-output engine the
 * worker masks with, and admit exactly the calls of the given tools. */
static void test_tool_choice_schemas_constrain_to_the_tools(void **state) {
  (void)state;
  struct api_server_request r;
  struct llb_generate_request gr;
  parse_ok("{\"model\":\"smol\"," USER ",\"tool_choice\":\"required\",\"tools\":[" WEATHER "," NOW "]}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  assert_true(grammar_accepts(gr.structured_outputs.spec, "[{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Rome\"}}]"));
  assert_true(grammar_accepts(gr.structured_outputs.spec,
                              "[{\"name\":\"now\",\"parameters\":{}},{\"name\":\"get_weather\",\"parameters\":{\"city\":\"x\"}}]"));
  assert_false(grammar_accepts(gr.structured_outputs.spec, "[]"));
  assert_false(grammar_accepts(gr.structured_outputs.spec, "[{\"name\":\"other\",\"parameters\":{}}]"));
  assert_false(grammar_accepts(gr.structured_outputs.spec, "[{\"name\":\"get_weather\",\"parameters\":{}}]"));
  assert_false(grammar_accepts(gr.structured_outputs.spec, "{\"name\":\"now\",\"parameters\":{}}"));
  api_server_request_free(&r);
  parse_ok("{\"model\":\"smol\"," USER ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
           "\"tools\":[" WEATHER "]}", &r);
  api_server_request_to_generate(&r, 0, "rid", &gr);
  assert_true(grammar_accepts(gr.structured_outputs.spec, "{\"city\":\"Rome\"}"));
  assert_false(grammar_accepts(gr.structured_outputs.spec, "{\"town\":\"Rome\"}"));
  api_server_request_free(&r);
}

/* A streamed call cut by max_tokens: the client sees finish_reason "length", not "tool_calls". */
static void test_stream_cut_by_max_tokens_finishes_with_length(void **state) {
  (void)state;
  struct api_server_request req;
  struct api_server_error e;
  const char *body = "{\"model\":\"smol\"," USER ",\"stream\":true,\"tools\":[" WEATHER "]}";
  assert_int_equal(parse(body, TOOL_FORMAT_HERMES, &req, &e), LLB_STATUS_OK);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "chatcmpl-1", 1700000000), LLB_STATUS_OK);
  struct api_server_buf b = {0};
  struct llb_completion_output c;
  struct llb_request_output ro = out1("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"ci", LLB_FINISH_REASON_NONE, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &b), LLB_STATUS_OK);
  ro = out1("ty\": \"Par", LLB_FINISH_REASON_LENGTH, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &b), LLB_STATUS_OK);
  assert_non_null(strstr(b.data, "\"name\":\"get_weather\""));
  assert_non_null(strstr(b.data, "\"finish_reason\":\"length\""));
  assert_null(strstr(b.data, "\"finish_reason\":\"tool_calls\""));
  api_server_buf_free(&b);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tools_and_choices_reach_the_generate_request),
      cmocka_unit_test(test_tool_messages_map_to_chat_message_fields),
      cmocka_unit_test(test_bad_tool_requests_name_the_field),
      cmocka_unit_test(test_response_carries_parsed_tool_calls),
      cmocka_unit_test(test_stream_sends_name_then_argument_deltas),
      cmocka_unit_test(test_tool_choice_schemas_constrain_to_the_tools),
      cmocka_unit_test(test_stream_cut_by_max_tokens_finishes_with_length),
      cmocka_unit_test(test_auto_tool_choice_needs_the_server_flag_as_vllm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
