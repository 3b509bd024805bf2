/* actors/api_server/api_server_request: OpenAI request bodies → validated requests, errors → 4xx. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "actors/api_server/api_server_embeds.h"
#include "actors/api_server/api_server_request.h"
#include "actors/api_server/api_server_structured.h"
#include "actors/api_server/api_server_tokenize.h"

static const struct api_server_parse_options opts = {.served_model = "smol"};

static llb_status parse(enum api_server_endpoint ep, const char *body, struct api_server_request *r, struct api_server_error *e) {
  return api_server_request_parse(ep, body, strlen(body), &opts, r, e);
}

static void test_completion_fields_map_to_sampling_params(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  const char *body =
      "{\"model\":\"smol\",\"prompt\":\"Once\",\"max_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
      "\"top_k\":40,\"min_p\":0.05,\"n\":3,\"stop\":[\"\\n\",\"END\"],\"seed\":-5,\"presence_penalty\":0.5,"
      "\"frequency_penalty\":-1.5,\"logprobs\":2,\"user\":\"u1\",\"stream\":true,"
      "\"stream_options\":{\"include_usage\":true},\"echo\":false,\"logit_bias\":{}}";
  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, body, &r, &e), LLB_STATUS_OK);
  const struct llb_sampling_params *sp = &r.sampling_params;
  assert_int_equal(sp->max_tokens, 7);
  assert_float_equal(sp->temperature, 0.5f, 1e-6);
  assert_float_equal(sp->top_p, 0.9f, 1e-6);
  assert_int_equal(sp->top_k, 40);
  assert_float_equal(sp->min_p, 0.05f, 1e-6);
  assert_int_equal(sp->n, 3);
  assert_int_equal(sp->num_stop, 2);
  assert_string_equal(sp->stop[0], "\n");
  assert_string_equal(sp->stop[1], "END");
  assert_true(sp->has_seed);
  assert_int_equal(sp->seed, (uint64_t)(int64_t)-5);
  assert_float_equal(sp->presence_penalty, 0.5f, 1e-6);
  assert_float_equal(sp->frequency_penalty, -1.5f, 1e-6);
  assert_int_equal(sp->logprobs, 2);
  assert_int_equal(r.top_logprobs, 2);
  assert_string_equal(r.user, "u1");
  assert_true(r.stream);
  assert_true(r.include_usage);
  assert_int_equal(r.num_prompts, 1);
  assert_string_equal(r.prompts[0].text, "Once");

  struct llb_generate_request g;
  api_server_request_to_generate(&r, 0, "cmpl-1", &g);
  assert_int_equal(g.sampling_params->output_kind, LLB_OUTPUT_KIND_DELTA);
  assert_true(g.raw); /* completions prompts are never templated */
  assert_memory_equal(g.prompt.data, "Once", 4);
  assert_memory_equal(g.request_id.data, "cmpl-1", 6);
  assert_ptr_equal(g.sampling_params, &r.sampling_params); /* by pointer, not copied */
  api_server_request_free(&r);
}

static void test_completion_defaults_are_openai_defaults(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\"}", &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.sampling_params.max_tokens, 16);
  assert_int_equal(r.sampling_params.n, 1);
  assert_float_equal(r.sampling_params.temperature, 1.0f, 0);
  assert_int_equal(r.sampling_params.logprobs, -1);
  assert_false(r.sampling_params.has_seed);
  assert_false(r.stream);
  api_server_request_free(&r);
}

static void test_prompt_forms_give_one_generate_request_each(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[\"a\",\"bc\"]}", &r, &e),
                   LLB_STATUS_OK);
  assert_int_equal(r.num_prompts, 2);
  assert_string_equal(r.prompts[1].text, "bc");
  api_server_request_free(&r);

  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2,3]}", &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.num_prompts, 1);
  assert_null(r.prompts[0].text);
  assert_int_equal(r.prompts[0].num_token_ids, 3);
  assert_int_equal(r.prompts[0].token_ids[2], 3);
  struct llb_generate_request g;
  api_server_request_to_generate(&r, 0, "id", &g);
  assert_int_equal(g.num_prompt_token_ids, 3);
  assert_int_equal(g.prompt.len, 0);
  api_server_request_free(&r);

  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[[5],[6,7]]}", &r, &e),
                   LLB_STATUS_OK);
  assert_int_equal(r.num_prompts, 2);
  assert_int_equal(r.prompts[1].num_token_ids, 2);
  assert_int_equal(r.prompts[1].token_ids[1], 7);
  api_server_request_free(&r);
}

static void test_chat_messages_parts_and_logprobs(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  const char *body =
      "{\"model\":\"smol\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
      "{\"role\":\"user\",\"name\":\"bob\",\"content\":[{\"type\":\"text\",\"text\":\"Hel\"},"
      "{\"type\":\"text\",\"text\":\"lo\"}]},{\"role\":\"assistant\",\"content\":null}],"
      "\"max_tokens\":9,\"max_completion_tokens\":5,\"logprobs\":true,\"top_logprobs\":3}";
  assert_int_equal(parse(API_SERVER_ENDPOINT_CHAT, body, &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.num_messages, 3);
  assert_memory_equal(r.messages[0].role.data, "system", 6);
  assert_int_equal(r.messages[1].content.len, 5);
  assert_memory_equal(r.messages[1].content.data, "Hello", 5);
  assert_int_equal(r.messages[2].content.len, 0);
  assert_int_equal(r.sampling_params.max_tokens, 5); /* max_completion_tokens wins */
  assert_true(r.chat_logprobs);
  assert_int_equal(r.sampling_params.logprobs, 3);
  struct llb_generate_request g;
  api_server_request_to_generate(&r, 0, "chat-1", &g);
  assert_int_equal(g.num_messages, 3);
  assert_false(g.raw);
  api_server_request_free(&r);

  assert_int_equal(parse(API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                         &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.sampling_params.max_tokens, -1); /* chat: up to the context length */
  assert_int_equal(r.sampling_params.logprobs, -1);
  api_server_request_free(&r);
}

/* Malformed or hostile bodies: status and the field named. */
static void test_vllm_request_fields_reach_the_generate_request(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  const char *body =
      "{\"model\":\"smol\",\"prompt\":\"Once\",\"logit_bias\":{\"50256\":-100,\"13\":2.5},\"priority\":-4,"
      "\"cache_salt\":\"team-a\",\"truncate_prompt_tokens\":32,\"echo\":true}";
  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, body, &r, &e), LLB_STATUS_OK);
  assert_true(r.echo);
  struct llb_generate_request g;
  api_server_request_to_generate(&r, 0, "cmpl-1", &g);
  assert_int_equal(g.sampling_params->num_logit_bias, 2);
  bool seen_eos = false, seen_dot = false;
  for (int i = 0; i < 2; i++) {
    if (g.sampling_params->logit_bias[i].token_id == 50256) seen_eos = g.sampling_params->logit_bias[i].bias == -100.0f;
    if (g.sampling_params->logit_bias[i].token_id == 13) seen_dot = g.sampling_params->logit_bias[i].bias == 2.5f;
  }
  assert_true(seen_eos && seen_dot);
  assert_int_equal(g.sampling_params->truncate_prompt_tokens, 32);
  assert_int_equal(g.priority, -4);
  assert_int_equal(g.cache_salt.len, 6);
  assert_memory_equal(g.cache_salt.data, "team-a", 6);
  api_server_request_free(&r);
  /* absent: no salt, priority 0, no bias, no truncation */
  assert_int_equal(parse(API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                           "\"truncate_prompt_tokens\":-1}", &r, &e), LLB_STATUS_OK);
  api_server_request_to_generate(&r, 0, "c", &g);
  assert_int_equal(g.priority, 0);
  assert_int_equal(g.cache_salt.len, 0);
  assert_int_equal(g.sampling_params->num_logit_bias, 0);
  assert_int_equal(g.sampling_params->truncate_prompt_tokens, -1);
  api_server_request_free(&r);
}

static void test_tokenize_bodies_parse_like_vllm_and_name_bad_fields(void **state) {
  (void)state;
  struct api_server_tokenize t;
  struct api_server_error e;
  const char *b1 = "{\"model\":\"smol\",\"prompt\":\"<|im_start|>user\",\"add_special_tokens\":true}";
  assert_int_equal(api_server_tokenize_parse(API_SERVER_ENDPOINT_TOKENIZE, b1, strlen(b1), NULL, &opts, &t, &e), LLB_STATUS_OK);
  struct llb_generate_request g;
  api_server_tokenize_to_generate(&t, "tok-1", &g);
  assert_true(g.raw); /* a prompt is tokenized as a completion prompt is */
  assert_int_equal(g.prompt.len, 16);
  assert_int_equal(g.num_messages, 0);
  api_server_tokenize_free(&t);
  const char *b2 = "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                   "\"add_generation_prompt\":false}";
  assert_int_equal(api_server_tokenize_parse(API_SERVER_ENDPOINT_TOKENIZE, b2, strlen(b2), NULL, &opts, &t, &e), LLB_STATUS_OK);
  api_server_tokenize_to_generate(&t, "tok-2", &g);
  assert_int_equal(g.num_messages, 1);
  assert_false(g.add_generation_prompt);
  assert_false(g.raw);
  api_server_tokenize_free(&t);
  const char *b3 = "{\"model\":\"smol\",\"tokens\":[1,2,3]}";
  assert_int_equal(api_server_tokenize_parse(API_SERVER_ENDPOINT_DETOKENIZE, b3, strlen(b3), NULL, &opts, &t, &e), LLB_STATUS_OK);
  api_server_tokenize_to_generate(&t, "tok-3", &g);
  assert_int_equal(g.num_prompt_token_ids, 3);
  assert_int_equal(g.prompt_token_ids[2], 3);
  api_server_tokenize_free(&t);
  assert_int_equal(api_server_tokenize_parse(API_SERVER_ENDPOINT_MODEL_INFO, NULL, 0, "smol", &opts, &t, &e), LLB_STATUS_OK);
  api_server_tokenize_to_generate(&t, "tok-4", &g);
  assert_true(g.prompt.len == 0 && g.num_messages == 0 && g.num_prompt_token_ids == 0);
  api_server_tokenize_free(&t);
  static const struct {
    enum api_server_endpoint ep;
    const char *body;
    int status;
    const char *param;
  } cases[] = {
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"gpt-4\",\"prompt\":\"x\"}", 404, "model"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\"}", 400, "prompt"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\",\"prompt\":[1,2]}", 400, "prompt"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\",\"prompt\":\"x\",\"messages\":[]}", 400, "prompt"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\",\"messages\":[{\"role\":\"x\",\"content\":\"y\"}]}", 400,
       "messages[0].role"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\",\"prompt\":\"x\",\"add_special_tokens\":false}", 400,
       "add_special_tokens"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\",\"prompt\":\"x\",\"return_token_strs\":true}", 400,
       "return_token_strs"},
      {API_SERVER_ENDPOINT_TOKENIZE, "{\"model\":\"smol\",\"prompt\":\"x\",\"max_tokens\":3}", 400, "max_tokens"},
      {API_SERVER_ENDPOINT_DETOKENIZE, "{\"model\":\"smol\",\"tokens\":[1,-2]}", 400, "tokens[1]"},
      {API_SERVER_ENDPOINT_DETOKENIZE, "{\"model\":\"smol\",\"tokens\":[1,\"a\"]}", 400, "tokens[1]"},
      {API_SERVER_ENDPOINT_DETOKENIZE, "{\"model\":\"smol\",\"tokens\":\"1 2\"}", 400, "tokens"},
      {API_SERVER_ENDPOINT_DETOKENIZE, "{\"model\":\"smol\"}", 400, "tokens"},
      {API_SERVER_ENDPOINT_DETOKENIZE, "[1]", 400, ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    llb_status st = api_server_tokenize_parse(cases[i].ep, cases[i].body, strlen(cases[i].body), NULL, &opts, &t, &e);
    if (st == LLB_STATUS_OK || e.http_status != cases[i].status || strcmp(e.param, cases[i].param) != 0) {
      fprintf(stderr, "case %zu (%s): status %d param \"%s\" message \"%s\"\n", i, cases[i].body, e.http_status,
              e.param, e.message);
      fail();
    }
  }
  assert_int_equal(api_server_tokenize_parse(API_SERVER_ENDPOINT_MODEL_INFO, NULL, 0, "other", &opts, &t, &e),
                   LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(e.http_status, 404);
}

static void test_every_served_model_name_is_accepted_and_no_other(void **state) {
  (void)state;
  const char *aliases[] = {"b", "c"};
  const struct api_server_parse_options o = {.served_model = "a", .model_aliases = aliases, .num_model_aliases = 2};
  const char *ok[] = {"a", "b", "c"};
  for (size_t i = 0; i < 3; i++) {
    char body[64];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"x\"}", ok[i]);
    struct api_server_request r;
    struct api_server_error e;
    assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_COMPLETIONS, body, strlen(body), &o, &r, &e), LLB_STATUS_OK);
    assert_string_equal(r.model, ok[i]); /* the response names the model it was asked for */
    api_server_request_free(&r);
  }
  struct api_server_request r;
  struct api_server_error e;
  const char *bad = "{\"model\":\"d\",\"prompt\":\"x\"}";
  assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_COMPLETIONS, bad, strlen(bad), &o, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(e.http_status, 404);
  struct api_server_tokenize t;
  assert_int_equal(api_server_tokenize_parse(API_SERVER_ENDPOINT_MODEL_INFO, NULL, 0, "c", &o, &t, &e), LLB_STATUS_OK);
  api_server_tokenize_free(&t);
}

/* response_format, structured_outputs and guided_* become one GenerateRequest.structured_outputs. */
static void test_structured_output_fields_become_one_spec(void **state) {
  (void)state;
  static const struct {
    enum api_server_endpoint ep;
    const char *extra; /* fields after the prompt / messages */
    enum llb_structured_outputs_kind kind;
    const char *spec;
    const char *param;
  } cases[] = {
      {API_SERVER_ENDPOINT_CHAT, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,"
                          "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}",
       LLB_SO_JSON, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "response_format"},
      {API_SERVER_ENDPOINT_CHAT, "\"response_format\":{\"type\":\"json_object\"}", LLB_SO_JSON_OBJECT, "", "response_format"},
      {API_SERVER_ENDPOINT_CHAT, "\"response_format\":{\"type\":\"text\"}", LLB_SO_NONE, "", ""},
      {API_SERVER_ENDPOINT_COMPLETIONS, "\"structured_outputs\":{\"choice\":[\"a\",\"b c\"]}", LLB_SO_CHOICE, "[\"a\",\"b c\"]",
       "structured_outputs.choice"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"string\\\"}\"}", LLB_SO_JSON,
       "{\"type\":\"string\"}", "structured_outputs.json"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "\"structured_outputs\":{\"json_object\":true,\"regex\":null}", LLB_SO_JSON_OBJECT, "",
       "structured_outputs.json_object"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "\"structured_outputs\":{\"regex\":\"[a-z]+\"}", LLB_SO_REGEX, "[a-z]+",
       "structured_outputs.regex"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "\"guided_json\":{\"type\":\"boolean\"}", LLB_SO_JSON, "{\"type\":\"boolean\"}", "guided_json"},
      {API_SERVER_ENDPOINT_CHAT, "\"guided_choice\":[\"x\"]", LLB_SO_CHOICE, "[\"x\"]", "guided_choice"},
      {API_SERVER_ENDPOINT_CHAT, "\"guided_regex\":\"\\\\d+\"", LLB_SO_REGEX, "\\d+", "guided_regex"},
      {API_SERVER_ENDPOINT_CHAT, "\"guided_grammar\":\"root ::= \\\"a\\\"\"", LLB_SO_GRAMMAR, "root ::= \"a\"", "guided_grammar"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"smol\",%s,%s}",
             cases[i].ep == API_SERVER_ENDPOINT_CHAT ? "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]" : "\"prompt\":\"x\"",
             cases[i].extra);
    struct api_server_request r;
    struct api_server_error e;
    const llb_status st = parse(cases[i].ep, body, &r, &e);
    if (st != LLB_STATUS_OK) print_error("case %zu: %s\n", i, e.message);
    assert_int_equal(st, LLB_STATUS_OK);
    struct llb_generate_request g;
    api_server_request_to_generate(&r, 0, "id", &g);
    assert_int_equal(g.structured_outputs.kind, cases[i].kind);
    assert_int_equal(g.structured_outputs.spec.len, strlen(cases[i].spec));
    assert_memory_equal(g.structured_outputs.spec.data, cases[i].spec, strlen(cases[i].spec));
    assert_string_equal(r.structured_param, cases[i].param);
    /* an engine error about the spec names the field the client used */
    struct api_server_error ee;
    api_server_error_from_status(LLB_STATUS_UNSUPPORTED, "keyword 'pattern' is not supported", "structured_outputs", &ee);
    api_server_structured_map_error(&r, &ee);
    assert_string_equal(ee.param, cases[i].kind == LLB_SO_NONE ? "structured_outputs" : cases[i].param);
    api_server_request_free(&r);
  }
}

static void test_bad_requests_name_the_field(void **state) {
  (void)state;
  static const struct {
    enum api_server_endpoint ep;
    const char *body;
    int status;
    const char *param; /* "" = null */
  } cases[] = {
      {API_SERVER_ENDPOINT_COMPLETIONS, "", 400, ""},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}", 400, "response_format.type"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}", 400, "response_format.json_schema"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\"}}}", 400, "response_format.json_schema.schema"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[1]}}}", 400, "response_format.json_schema.schema"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\",\"x\":1}}", 400, "response_format.x"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"structured_outputs\":{\"choice\":[]}}", 400, "structured_outputs.choice"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"structured_outputs\":{\"choice\":[\"a\",1]}}", 400, "structured_outputs.choice"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"\"}}", 400, "structured_outputs.regex"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"structured_outputs\":{\"whitespace_pattern\":\" \"}}", 400, "structured_outputs.whitespace_pattern"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"structured_outputs\":{\"nope\":1}}", 400, "structured_outputs.nope"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"structured_outputs\":{\"json\":{},\"choice\":[\"a\"]}}", 400, "structured_outputs.choice"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"guided_json\":{},\"guided_regex\":\"a\"}", 400, "guided_regex"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"guided_json\":7}", 400, "guided_json"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\"", 400, ""},
      {API_SERVER_ENDPOINT_COMPLETIONS, "[1,2]", 400, ""},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"prompt\":\"x\"}", 400, "model"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":7,\"prompt\":\"x\"}", 400, "model"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"gpt-4\",\"prompt\":\"x\"}", 404, "model"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\"}", 400, "prompt"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":{}}", 400, "prompt"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[]}", 400, "prompt"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,-2]}", 400, "prompt[1]"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[\"a\",3]}", 400, "prompt[1]"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"max_tokens\":-1}", 400, "max_tokens"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "max_tokens"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"temperature\":-0.1}", 400, "temperature"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"top_p\":0}", 400, "top_p"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"n\":0}", 400, "n"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"n\":1000}", 400, "n"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"stop\":[\"\"]}", 400, "stop[0]"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"stop\":5}", 400, "stop"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"seed\":\"1\"}", 400, "seed"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"presence_penalty\":3}", 400, "presence_penalty"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"wat\":1}", 400, "wat"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", 400,
       "stream_options"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"echo\":true}", 400, "echo"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"prompt_logprobs\":21}", 400, "prompt_logprobs"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"prompt_logprobs\":-1}", 400, "prompt_logprobs"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"echo\":1}", 400, "echo"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", 400, "logit_bias"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logit_bias\":{\"-3\":1}}", 400, "logit_bias"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logit_bias\":{\"12\":101}}", 400,
       "logit_bias[12]"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logit_bias\":{\"12\":\"5\"}}", 400,
       "logit_bias[12]"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"logit_bias\":[1]}", 400, "logit_bias"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"priority\":1.5}", 400, "priority"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"priority\":9999999999}", 400, "priority"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"cache_salt\":\"\"}", 400, "cache_salt"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"cache_salt\":3}", 400, "cache_salt"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"truncate_prompt_tokens\":0}", 400,
       "truncate_prompt_tokens"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"truncate_prompt_tokens\":-2}", 400,
       "truncate_prompt_tokens"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}",
       400, "echo"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"x\",\"model\":\"smol\"}", 400, ""},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"a\\u0000b\"}", 400, ""}, /* jansson refuses NUL */
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\"}", 400, "messages"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[]}", 400, "messages"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400,
       "messages[0].role"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400,
       "messages[0].content"},
      {API_SERVER_ENDPOINT_CHAT,
       "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
       "messages[0].content[0].image_url"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"extra\":1}]}", 400,
       "messages[0].extra"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
       400, "top_logprobs"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[]}", 400,
       "tools"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":\"hi\"}", 400, "messages"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct api_server_request r;
    struct api_server_error e;
    llb_status st = parse(cases[i].ep, cases[i].body, &r, &e);
    if (st == LLB_STATUS_OK || e.http_status != cases[i].status || strcmp(e.param, cases[i].param) != 0) {
      fprintf(stderr, "case %zu (%s): status %d param \"%s\" message \"%s\"\n", i, cases[i].body, e.http_status,
              e.param, e.message);
      fail();
    }
    assert_true(e.message[0] != '\0');
  }
}

/* image_url parts: a data URL becomes an "image" item at its byte offset in the joined text;
 * remote URLs, other media types, bad base64, a type mismatch and file URLs without
 * --allowed-local-media-path are 400s naming the part. */
static void test_image_url_parts_become_image_items(void **state) {
  (void)state;
  /* base64 of the 8-byte PNG signature + "IHDR..." is enough for the sniff (decoding is the
   * input processor's) */
  const char *png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB";
  char body[1024];
  snprintf(body, sizeof body,
           "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ab\"},"
           "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,%s\",\"detail\":\"auto\"}},"
           "{\"type\":\"text\",\"text\":\"cd\"},{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,%s\"}]}]}",
           png, png);
  struct api_server_request r;
  struct api_server_error e;
  if (parse(API_SERVER_ENDPOINT_CHAT, body, &r, &e) != LLB_STATUS_OK) fail_msg("%s: %s", e.param, e.message);
  assert_int_equal(r.num_mm_items, 2);
  assert_string_equal(r.mm_items[0].modality.data, "image");
  assert_string_equal(r.mm_items[1].dtype.data, "png");
  assert_int_equal(r.mm_items[0].data_bytes, 24);
  assert_int_equal(r.messages[0].content.len, 4);
  assert_int_equal(r.messages[0].num_image_offsets, 2);
  assert_int_equal(r.messages[0].image_offsets[0], 2);
  assert_int_equal(r.messages[0].image_offsets[1], 4);
  struct llb_generate_request g;
  api_server_request_to_generate(&r, 0, "id", &g);
  assert_int_equal(g.num_mm_items, 2);
  api_server_request_free(&r);

  static const struct {
    const char *url, *needle;
  } bad[] = {
      {"https://example.com/cat.png", "not fetched"},
      {"http://example.com/cat.png", "not fetched"},
      {"data:image/gif;base64,R0lGODlh", "not supported"},
      {"data:image/png;base64,@@@@", "base64"},
      {"data:image/jpeg;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB", "not the declared image/jpeg"},
      {"data:image/png,abc", "not supported"},
      {"file:///etc/passwd", "--allowed-local-media-path"},
      {"ftp://x/y.png", "unsupported URL scheme"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(body, sizeof body,
             "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
             "\"image_url\":{\"url\":\"%s\"}}]}]}", bad[i].url);
    assert_int_equal(parse(API_SERVER_ENDPOINT_CHAT, body, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.param, "messages[0].content[0].image_url");
    if (!strstr(e.message, bad[i].needle)) fail_msg("%s: '%s' lacks '%s'", bad[i].url, e.message, bad[i].needle);
  }
  /* more than API_SERVER_MAX_IMAGES images */
  char big[4096] = "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[";
  for (int i = 0; i < 9; i++)
    snprintf(big + strlen(big), sizeof big - strlen(big), "%s{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,%s\"}",
             i ? "," : "", png);
  snprintf(big + strlen(big), sizeof big - strlen(big), "]}]}");
  assert_int_equal(parse(API_SERVER_ENDPOINT_CHAT, big, &r, &e), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(e.param, "messages[0].content[8]");
}

/* Bodies that leave out a field the parser reads (a message without "role", "messages": [{}],
 * a content part without "type" or "text") used to dereference the absent value and crash
 * the whole server; each is a 400 whose param names the missing field. */
static void test_missing_fields_are_400_naming_the_field(void **state) {
  (void)state;
  static const struct {
    const char *body;
    const char *param;
    const char *message_part;
  } cases[] = {
      {"{\"model\":\"smol\",\"messages\":[{}]}", "messages[0].role", "is required"},
      {"{\"model\":\"smol\",\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "is required"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"content\":\"y\"}]}",
       "messages[1].role", "is required"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}",
       "messages[0].content[0].type", "is required"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{}]}]}", "messages[0].content[0].type",
       "is required"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
       "messages[0].content[0].text", "is required"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":[7]}]}", "messages[0].content[0]",
       "got integer"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":null,\"content\":\"x\"}]}", "messages[0].role", "got null"},
      {"{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":null}]}",
       "messages[0].name", "got null"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct api_server_request r;
    struct api_server_error e;
    llb_status st = parse(API_SERVER_ENDPOINT_CHAT, cases[i].body, &r, &e);
    if (st != LLB_STATUS_INVALID_ARGUMENT || e.http_status != 400 || strcmp(e.param, cases[i].param) != 0 ||
        !strstr(e.message, cases[i].message_part)) {
      fprintf(stderr, "case %zu (%s): status %d param \"%s\" message \"%s\"\n", i, cases[i].body, e.http_status,
              e.param, e.message);
      fail();
    }
    struct api_server_buf out = {0};
    assert_true(api_server_error_render(&e, &out));
    assert_non_null(strstr(out.data, cases[i].param));
    api_server_buf_free(&out);
  }
  assert_string_equal(api_server_json_type_name(NULL), "nothing");
}

static void test_engine_status_codes_map_to_http(void **state) {
  (void)state;
  struct api_server_error e;
  api_server_error_from_status(LLB_STATUS_QUEUE_FULL, "queue full", "", &e);
  assert_int_equal(e.http_status, 429);
  api_server_error_from_status(LLB_STATUS_INVALID_ARGUMENT, "too long", "max_tokens", &e);
  assert_int_equal(e.http_status, 400);
  assert_string_equal(e.param, "max_tokens");
  api_server_error_from_status(LLB_STATUS_TIMEOUT, "", "", &e);
  assert_int_equal(e.http_status, 503);
  assert_string_equal(e.message, "timed out");
  api_server_error_from_status(LLB_STATUS_ABORTED, "dead-lettered: delivered 4 times", "", &e);
  assert_int_equal(e.http_status, 503); /* the engine failed it: a 503 with the reason */
  api_server_error_from_status(LLB_STATUS_DEVICE, "boom", "", &e);
  assert_int_equal(e.http_status, 500);
  struct api_server_buf b = {0};
  assert_true(api_server_error_render(&e, &b));
  assert_string_equal(b.data,
                      "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":500}}");
  api_server_buf_free(&b);
}

/* An error text quoting the client's bytes still renders as JSON (which holds UTF-8 only):
 * bytes that are not well-formed UTF-8 become '?', well-formed ones stay (found by
 * fuzz_api_request: a prompt_embeds dtype error quoting "\\\xc7\xbe..."). */
static void test_error_with_invalid_utf8_renders_as_json(void **state) {
  (void)state;
  struct api_server_error e;
  api_server_error_set(&e, 400, "prompt_embeds\xff", "bad value '\xc0\xaf' near '\xed\xa0\x80' in '\xc3\xa9t\xe9'");
  struct api_server_buf b = {0};
  assert_true(api_server_error_render(&e, &b));
  json_error_t je;
  json_t *j = json_loads(b.data, 0, &je);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                      "bad value '?" "?' near '?" "?" "?' in '\xc3\xa9t?'");
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "prompt_embeds?");
  json_decref(j);
  api_server_buf_free(&b);
}

/* f32 [2, 3] = {1, 2, 3, 4, 5, 6} little-endian, base64 */
#define EMB_F32_2x3 "AACAPwAAAEAAAEBAAACAQAAAoEAAAMBA"

static void test_prompt_embeds_become_embeds_mm_items(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  const char *body =
      "{\"model\":\"smol\",\"prompt\":[10,11,0,0,12,0],\"prompt_embeds\":["
      "{\"data\":\"" EMB_F32_2x3 "\",\"dtype\":\"float32\",\"shape\":[2,3],\"placeholder_offset\":2},"
      "{\"data\":\"ADwAwA==\",\"dtype\":\"float16\",\"shape\":[1,2],\"placeholder_offset\":5}]}";
  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, body, &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.num_mm_items, 2);
  struct llb_generate_request g;
  api_server_request_to_generate(&r, 0, "cmpl-e", &g);
  assert_int_equal(g.num_prompt_token_ids, 6);
  assert_int_equal(g.num_mm_items, 2);
  const struct llb_mm_item *a = &g.mm_items[0], *b = &g.mm_items[1];
  assert_memory_equal(a->modality.data, "embeds", 6);
  assert_int_equal(a->modality.len, 6);
  assert_memory_equal(a->dtype.data, "f32", 3);
  assert_int_equal(a->num_rows, 2);
  assert_int_equal(a->num_cols, 3);
  assert_int_equal(a->placeholder_offset, 2);
  assert_int_equal(a->data_bytes, 24);
  const float want[6] = {1, 2, 3, 4, 5, 6};
  assert_memory_equal(a->data, want, sizeof want);
  assert_memory_equal(b->dtype.data, "f16", 3);
  assert_int_equal(b->num_rows, 1);
  assert_int_equal(b->num_cols, 2);
  assert_int_equal(b->placeholder_offset, 5);
  const uint8_t want16[4] = {0x00, 0x3c, 0x00, 0xc0}; /* fp16 1.0, -2.0 */
  assert_int_equal(b->data_bytes, 4);
  assert_memory_equal(b->data, want16, 4);
  api_server_request_free(&r);
  /* one object = one item; placeholder_offset defaults to 0 */
  body = "{\"model\":\"smol\",\"prompt\":[0,0,7],\"prompt_embeds\":"
         "{\"data\":\"" EMB_F32_2x3 "\",\"dtype\":\"f32\",\"shape\":[2,3]}}";
  assert_int_equal(parse(API_SERVER_ENDPOINT_COMPLETIONS, body, &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.num_mm_items, 1);
  assert_int_equal(r.mm_items[0].placeholder_offset, 0);
  api_server_request_free(&r);
}

static void test_bad_prompt_embeds_name_the_field(void **state) {
  (void)state;
  const struct {
    enum api_server_endpoint ep;
    const char *body;
    const char *param;
  } cases[] = {
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"AA!A\","
       "\"dtype\":\"float32\",\"shape\":[1,1]}]}", "prompt_embeds[0].data"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"AAAAA\","
       "\"dtype\":\"float32\",\"shape\":[1,1]}]}", "prompt_embeds[0].data"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"int8\",\"shape\":[2,3]}]}", "prompt_embeds[0].dtype"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[2,4]}]}", "prompt_embeds[0].data"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float16\",\"shape\":[2,3]}]}", "prompt_embeds[0].data"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[6]}]}", "prompt_embeds[0].shape"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[0,3]}]}", "prompt_embeds[0].shape"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2,3],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[2,3],\"placeholder_offset\":2}]}", "prompt_embeds[0].placeholder_offset"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[2,3],\"placeholder_offset\":-1}]}", "prompt_embeds[0].placeholder_offset"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[2,3],\"scale\":2}]}", "prompt_embeds[0].scale"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[{\"dtype\":\"float32\","
       "\"shape\":[2,3]}]}", "prompt_embeds[0].data"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":[]}", "prompt_embeds"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[1,2],\"prompt_embeds\":\"AAAA\"}", "prompt_embeds"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"text\",\"prompt_embeds\":[{\"data\":\"" EMB_F32_2x3
       "\",\"dtype\":\"float32\",\"shape\":[2,3]}]}", "prompt"},
      {API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[[1,2],[3,4]],\"prompt_embeds\":[{\"data\":\""
       EMB_F32_2x3 "\",\"dtype\":\"float32\",\"shape\":[2,3]}]}", "prompt"},
      {API_SERVER_ENDPOINT_CHAT, "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
       "\"prompt_embeds\":[]}", "prompt_embeds"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct api_server_request r;
    struct api_server_error e;
    llb_status st = parse(cases[i].ep, cases[i].body, &r, &e);
    if (st != LLB_STATUS_INVALID_ARGUMENT || e.http_status != 400 || strcmp(e.param, cases[i].param) != 0) {
      fprintf(stderr, "case %zu: status %d http %d param '%s' (want '%s'): %s\n", i, st, e.http_status,
              e.param, cases[i].param, e.message);
      fail();
    }
    assert_int_equal(r.num_mm_items, 0); /* nothing left to free */
  }
  /* the input processor's item errors come back under the HTTP field name */
  struct api_server_error e;
  api_server_error_from_status(LLB_STATUS_INVALID_ARGUMENT, "must be 576", "mm_items[1].num_cols", &e);
  assert_int_equal(e.http_status, 400);
  assert_string_equal(e.param, "prompt_embeds[1].num_cols");
}

static void test_base64_decodes_padded_and_unpadded(void **state) {
  (void)state;
  uint8_t *out;
  size_t n;
  assert_int_equal(api_server_base64_decode("YWI=", 4, &out, &n), LLB_STATUS_OK);
  assert_int_equal(n, 2);
  assert_memory_equal(out, "ab", 2);
  free(out);
  assert_int_equal(api_server_base64_decode("YQ", 2, &out, &n), LLB_STATUS_OK);
  assert_int_equal(n, 1);
  assert_int_equal(out[0], 'a');
  free(out);
  assert_int_equal(api_server_base64_decode("", 0, &out, &n), LLB_STATUS_OK);
  assert_int_equal(n, 0);
  free(out);
  assert_int_equal(api_server_base64_decode("YQ==YQ==", 8, &out, &n), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_base64_decode("Y", 1, &out, &n), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(api_server_base64_decode("YW I", 4, &out, &n), LLB_STATUS_INVALID_ARGUMENT);
}

/* POST /v1/responses: the body read as the chat request it stands for; its 400s name the
 * Responses fields; with --reasoning-parser the structured output waits for the reasoning. */
static void test_responses_bodies_become_chat_requests(void **state) {
  (void)state;
  struct api_server_request r;
  struct api_server_error e;
  const char *body =
      "{\"model\":\"smol\",\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"developer\",\"content\":\"d\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]},"
      "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
      "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"},{\"type\":\"reasoning\",\"id\":\"rs\"}],"
      "\"max_output_tokens\":9,\"temperature\":0.5,\"store\":false,\"seed\":3,"
      "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\",\"schema\":{\"type\":\"integer\"}}},"
      "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]}";
  struct api_server_parse_options o = opts;
  o.reasoning_parser = 1; /* deepseek_r1 */
  assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_RESPONSES, body, strlen(body), &o, &r, &e), LLB_STATUS_OK);
  assert_int_equal(r.endpoint, API_SERVER_ENDPOINT_CHAT);
  assert_non_null(r.responses);
  assert_int_equal(r.num_messages, 5); /* instructions, developer as system, user, the call, its output */
  assert_string_equal(r.messages[0].role.data, "system");
  assert_string_equal(r.messages[1].role.data, "system");
  assert_string_equal(r.messages[3].role.data, "assistant");
  assert_string_equal(r.messages[4].role.data, "tool");
  assert_int_equal(r.sampling_params.max_tokens, 9);
  assert_int_equal(r.structured_outputs.kind, LLB_SO_JSON);
  assert_int_equal(r.structured_outputs.reasoning, 1);
  api_server_request_free(&r);
  static const struct {
    const char *body;
    const char *param;
  } bad[] = {
      {"{\"model\":\"smol\",\"input\":\"x\",\"store\":true}", "store"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"messages\":[]}", "messages"},
      {"{\"model\":\"smol\",\"input\":[]}", "input"},
      {"{\"model\":\"smol\",\"input\":[{\"type\":\"file_search_call\"}]}", "input[0]"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", "text.format"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}", "include"},
      {"{\"model\":\"smol\",\"input\":\"x\",\"instructions\":true}", "instructions"}, /* leaked (fuzz) */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(api_server_request_parse(API_SERVER_ENDPOINT_RESPONSES, bad[i].body, strlen(bad[i].body), &opts, &r, &e),
                     LLB_STATUS_INVALID_ARGUMENT);
    if (strncmp(e.param, bad[i].param, strlen(bad[i].param)) != 0)
      fail_msg("%s: param \"%s\" (%s), want \"%s\"", bad[i].body, e.param, e.message, bad[i].param);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_completion_fields_map_to_sampling_params),
      cmocka_unit_test(test_every_served_model_name_is_accepted_and_no_other),
      cmocka_unit_test(test_error_with_invalid_utf8_renders_as_json),
      cmocka_unit_test(test_completion_defaults_are_openai_defaults),
      cmocka_unit_test(test_prompt_forms_give_one_generate_request_each),
      cmocka_unit_test(test_chat_messages_parts_and_logprobs),
      cmocka_unit_test(test_image_url_parts_become_image_items),
      cmocka_unit_test(test_vllm_request_fields_reach_the_generate_request),
      cmocka_unit_test(test_structured_output_fields_become_one_spec),
      cmocka_unit_test(test_bad_requests_name_the_field),
      cmocka_unit_test(test_missing_fields_are_400_naming_the_field),
      cmocka_unit_test(test_tokenize_bodies_parse_like_vllm_and_name_bad_fields),
      cmocka_unit_test(test_engine_status_codes_map_to_http),
      cmocka_unit_test(test_prompt_embeds_become_embeds_mm_items),
      cmocka_unit_test(test_bad_prompt_embeds_name_the_field),
      cmocka_unit_test(test_base64_decodes_padded_and_unpadded),
      cmocka_unit_test(test_responses_bodies_become_chat_requests),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
