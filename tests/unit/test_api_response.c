/* actors/api_server/api_server_response: RequestOutputs → OpenAI objects and SSE chunks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_response.h"
#include "actors/api_server/api_server_tokenize.h"

static const struct api_server_parse_options opts = {.served_model = "smol"};

static void parse_ok(enum api_server_endpoint ep, const char *body, struct api_server_request *r) {
  struct api_server_error e;
  llb_status st = api_server_request_parse(ep, body, strlen(body), &opts, r, &e);
  if (st != LLB_STATUS_OK) fprintf(stderr, "parse: %s\n", e.message);
  assert_int_equal(st, LLB_STATUS_OK);
}

/* A DELTA RequestOutput with one completion. */
static struct llb_request_output one(int32_t index, const char *text, const int32_t *ids, int32_t num_ids,
                                     enum llb_finish_reason fin, bool finished, struct llb_completion_output *c) {
  memset(c, 0, sizeof *c);
  c->index = index;
  c->text = llb_str_c(text);
  c->token_ids = ids;
  c->num_token_ids = num_ids;
  c->finish_reason = fin;
  struct llb_request_output ro = {.request_id = llb_str_c("cmpl-x-00"), .outputs = c, .num_outputs = 1,
                                  .finished = finished};
  return ro;
}

/* Splits SSE text into its `data: ` payloads; checks the framing. Returns the count. */
static int sse_events(const char *text, char events[][2048], int max) {
  int n = 0;
  const char *p = text;
  while (*p) {
    assert_memory_equal(p, "data: ", 6);
    const char *end = strstr(p, "\n\n");
    assert_non_null(end);
    assert_true(n < max);
    snprintf(events[n], 2048, "%.*s", (int)(end - p - 6), p + 6);
    n++;
    p = end + 2;
  }
  return n;
}

static void test_completion_stream_chunks_end_with_usage_and_done(void **state) {
  (void)state;
  struct api_server_request req;
  parse_ok(API_SERVER_ENDPOINT_COMPLETIONS,
           "{\"model\":\"smol\",\"prompt\":\"p\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &req);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "cmpl-abc", 1700000000), LLB_STATUS_OK);
  struct api_server_buf out = {0};
  struct llb_completion_output c;
  int32_t prompt_ids[3] = {1, 2, 3}, t1[2] = {10, 11}, t2[1] = {12};
  struct llb_request_output ro = one(0, "Hel", t1, 2, LLB_FINISH_REASON_NONE, false, &c);
  ro.prompt_token_ids = prompt_ids;
  ro.num_prompt_token_ids = 3;
  ro.metrics.num_cached_tokens = 2; /* two prompt tokens came from the prefix cache */
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  ro = one(0, "lo", t2, 1, LLB_FINISH_REASON_LENGTH, true, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  assert_true(api_server_response_done(&r));
  assert_int_equal(api_server_response_stream_end(&r, &out), LLB_STATUS_OK);
  char ev[8][2048];
  int n = sse_events(out.data, ev, 8);
  assert_int_equal(n, 4);
  json_t *j = json_loads(ev[0], 0, NULL);
  assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
  assert_string_equal(json_string_value(json_object_get(j, "id")), "cmpl-abc");
  json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(ch, "text")), "Hel");
  assert_true(json_is_null(json_object_get(ch, "finish_reason")));
  json_decref(j);
  j = json_loads(ev[1], 0, NULL);
  ch = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
  json_decref(j);
  j = json_loads(ev[2], 0, NULL);
  assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
  json_t *u = json_object_get(j, "usage");
  assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 3);
  assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 3);
  assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 6);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 2);
  json_decref(j);
  assert_string_equal(ev[3], "[DONE]");
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

static void test_chat_stream_sends_role_first_per_choice(void **state) {
  (void)state;
  struct api_server_request req;
  parse_ok(API_SERVER_ENDPOINT_CHAT,
           "{\"model\":\"smol\",\"n\":2,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &req);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "chatcmpl-1", 1), LLB_STATUS_OK);
  struct api_server_buf out = {0};
  struct llb_completion_output c;
  int32_t t[1] = {5};
  struct llb_request_output ro = one(1, "B", t, 1, LLB_FINISH_REASON_NONE, false, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  ro = one(0, "A", t, 1, LLB_FINISH_REASON_STOP, false, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  ro = one(1, "", NULL, 0, LLB_FINISH_REASON_STOP, true, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  assert_int_equal(api_server_response_stream_end(&r, &out), LLB_STATUS_OK);
  char ev[8][2048];
  int n = sse_events(out.data, ev, 8);
  assert_int_equal(n, 6); /* role1, B, role0, A, finish1, DONE (no usage chunk) */
  static const struct {
    int index;
    const char *role, *content, *finish;
  } want[5] = {{1, "assistant", "", NULL}, {1, NULL, "B", NULL}, {0, "assistant", "", NULL},
               {0, NULL, "A", "stop"}, {1, NULL, NULL, "stop"}};
  for (int i = 0; i < 5; i++) {
    json_t *j = json_loads(ev[i], 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    assert_null(json_object_get(j, "usage"));
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_integer_value(json_object_get(ch, "index")), want[i].index);
    json_t *d = json_object_get(ch, "delta");
    json_t *role = json_object_get(d, "role"), *content = json_object_get(d, "content");
    if (want[i].role) assert_string_equal(json_string_value(role), want[i].role);
    else assert_null(role);
    if (want[i].content) assert_string_equal(json_string_value(content), want[i].content);
    else assert_null(content);
    json_t *f = json_object_get(ch, "finish_reason");
    if (want[i].finish) assert_string_equal(json_string_value(f), want[i].finish);
    else assert_true(json_is_null(f));
    json_decref(j);
  }
  assert_string_equal(ev[5], "[DONE]");
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

/* Non-streaming: deltas of two prompts x n=2 accumulate into four ordered choices. */
static void test_non_stream_accumulates_choices_of_every_prompt(void **state) {
  (void)state;
  struct api_server_request req;
  parse_ok(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[\"a\",\"b\"],\"n\":2,\"stop\":\"!\"}", &req);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "cmpl-2", 5), LLB_STATUS_OK);
  struct llb_completion_output c;
  int32_t t[2] = {1, 2}, p[4] = {7, 8, 9, 10};
  const char *texts[2][2] = {{"x", "y"}, {"zz", "w"}};
  for (int prompt = 0; prompt < 2; prompt++)
    for (int idx = 1; idx >= 0; idx--)
      for (int piece = 0; piece < 2; piece++) {
        bool last = piece == 1;
        struct llb_request_output ro = one(idx, texts[prompt][piece], t, 1,
                                           last ? LLB_FINISH_REASON_STOP : LLB_FINISH_REASON_NONE,
                                           last && idx == 0, &c);
        if (last) c.stop_reason = llb_str_c("!");
        ro.prompt_token_ids = p;
        ro.num_prompt_token_ids = prompt + 1;
        assert_int_equal(api_server_response_add_output(&r, prompt, &ro), LLB_STATUS_OK);
      }
  assert_true(api_server_response_done(&r));
  struct api_server_buf out = {0};
  assert_int_equal(api_server_response_render(&r, &out), LLB_STATUS_OK);
  json_t *j = json_loads(out.data, 0, NULL);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
  json_t *choices = json_object_get(j, "choices");
  assert_int_equal(json_array_size(choices), 4);
  const char *want[4] = {"xy", "xy", "zzw", "zzw"};
  for (int i = 0; i < 4; i++) {
    json_t *ch = json_array_get(choices, i);
    assert_int_equal(json_integer_value(json_object_get(ch, "index")), i);
    assert_string_equal(json_string_value(json_object_get(ch, "text")), want[i]);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    assert_string_equal(json_string_value(json_object_get(ch, "stop_reason")), "!");
  }
  json_t *u = json_object_get(j, "usage");
  assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 1 + 2);
  assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 8);
  json_decref(j);
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

/* echo + logprobs has the engine score the prompt (the GenerateRequest's prompt_logprobs) for
 * the echoed tokens' logprobs, but only a client that asked for prompt_logprobs gets that
 * field in its response. */
static void test_echo_logprobs_score_the_prompt_without_a_prompt_logprobs_field(void **state) {
  (void)state;
  const char *bodies[2] = {"{\"model\":\"smol\",\"prompt\":\"Say\",\"echo\":true,\"logprobs\":2}",
                           "{\"model\":\"smol\",\"prompt\":\"Say\",\"echo\":true,\"logprobs\":2,\"prompt_logprobs\":1}"};
  for (int asked = 0; asked < 2; asked++) {
    struct api_server_request req;
    parse_ok(API_SERVER_ENDPOINT_COMPLETIONS, bodies[asked], &req);
    struct llb_generate_request g;
    api_server_request_to_generate(&req, 0, "cmpl-p", &g);
    assert_ptr_equal(g.sampling_params, &req.sampling_params);
    assert_int_equal(g.sampling_params->prompt_logprobs, 2);
    assert_int_equal(g.sampling_params->output_kind, LLB_OUTPUT_KIND_DELTA);
    struct api_server_response r;
    assert_int_equal(api_server_response_init(&r, &req, "cmpl-p", 5), LLB_STATUS_OK);
    struct llb_completion_output c;
    int32_t t[1] = {1};
    struct llb_request_output ro = one(0, "!", t, 1, LLB_FINISH_REASON_LENGTH, true, &c);
    ro.num_prompt_token_ids = 1; /* a one-token prompt: no prompt logprobs to wait for */
    assert_int_equal(api_server_response_add_output(&r, 0, &ro), LLB_STATUS_OK);
    struct api_server_buf out = {0};
    assert_int_equal(api_server_response_render(&r, &out), LLB_STATUS_OK);
    json_t *j = json_loads(out.data, 0, NULL);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_non_null(choice);
    assert_int_equal(json_object_get(choice, "prompt_logprobs") != NULL, asked);
    json_decref(j);
    api_server_buf_free(&out);
    api_server_response_free(&r);
    api_server_request_free(&req);
  }
}

static void test_echo_prepends_the_prompt_once_per_choice(void **state) {
  (void)state;
  struct api_server_request req;
  parse_ok(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":[\"Say: \",\"Q: \"],\"echo\":true}", &req);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "cmpl-e", 5), LLB_STATUS_OK);
  struct llb_completion_output c;
  int32_t t[1] = {1};
  for (int prompt = 0; prompt < 2; prompt++) {
    struct llb_request_output ro = one(0, "hi", t, 1, LLB_FINISH_REASON_NONE, false, &c);
    assert_int_equal(api_server_response_add_output(&r, prompt, &ro), LLB_STATUS_OK);
    ro = one(0, "!", t, 1, LLB_FINISH_REASON_LENGTH, true, &c);
    assert_int_equal(api_server_response_add_output(&r, prompt, &ro), LLB_STATUS_OK);
  }
  struct api_server_buf out = {0};
  assert_int_equal(api_server_response_render(&r, &out), LLB_STATUS_OK);
  json_t *j = json_loads(out.data, 0, NULL);
  json_t *choices = json_object_get(j, "choices");
  assert_string_equal(json_string_value(json_object_get(json_array_get(choices, 0), "text")), "Say: hi!");
  assert_string_equal(json_string_value(json_object_get(json_array_get(choices, 1), "text")), "Q: hi!");
  json_decref(j);
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);

  /* streamed: the prompt rides on the first chunk only, even when that chunk has no text */
  parse_ok(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"Say: \",\"echo\":true,\"stream\":true}", &req);
  assert_int_equal(api_server_response_init(&r, &req, "cmpl-s", 5), LLB_STATUS_OK);
  struct llb_request_output ro = one(0, "", t, 1, LLB_FINISH_REASON_NONE, false, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  ro = one(0, "ok", t, 1, LLB_FINISH_REASON_LENGTH, true, &c);
  assert_int_equal(api_server_response_stream_output(&r, 0, &ro, &out), LLB_STATUS_OK);
  char ev[4][2048];
  assert_int_equal(sse_events(out.data, ev, 4), 2);
  const char *want[2] = {"Say: ", "ok"};
  for (int i = 0; i < 2; i++) {
    j = json_loads(ev[i], 0, NULL);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "text")), want[i]);
    json_decref(j);
  }
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

static void test_tokenize_replies_render_vllm_shapes(void **state) {
  (void)state;
  struct api_server_tokenize t = {.endpoint = API_SERVER_ENDPOINT_TOKENIZE};
  int32_t ids[3] = {1, 4093, 2};
  struct llb_request_output ro = {.request_id = llb_str_c("tok-1"), .prompt_token_ids = ids,
                                  .num_prompt_token_ids = 3, .finished = true, .max_model_len = 2048};
  struct api_server_buf out = {0};
  assert_int_equal(api_server_tokenize_render(&t, &ro, "smol", 7, &out), LLB_STATUS_OK);
  json_t *j = json_loads(out.data, 0, NULL);
  assert_int_equal(json_integer_value(json_object_get(j, "count")), 3);
  assert_int_equal(json_integer_value(json_object_get(j, "max_model_len")), 2048);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "tokens"), 1)), 4093);
  json_decref(j);
  api_server_buf_free(&out);
  /* detokenize: the text; bytes that are not UTF-8 (ids cut inside a character) become U+FFFD */
  t.endpoint = API_SERVER_ENDPOINT_DETOKENIZE;
  ro.prompt = (struct llb_str){"caf\xc3", 4};
  assert_int_equal(api_server_tokenize_render(&t, &ro, "smol", 7, &out), LLB_STATUS_OK);
  j = json_loads(out.data, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(j, "prompt")), "caf\xef\xbf\xbd");
  json_decref(j);
  api_server_buf_free(&out);
  /* an engine error on the ids names the request's field */
  struct api_server_error e;
  api_server_error_from_status(LLB_STATUS_INVALID_ARGUMENT, "prompt_token_ids[1]: token id 99 is outside", "prompt_token_ids[1]",
                        &e);
  api_server_tokenize_map_error(&t, &e);
  assert_string_equal(e.param, "tokens[1]");
  assert_string_equal(e.message, "tokens[1]: token id 99 is outside");
  /* /v1/models/{id}: the model object with max_model_len */
  t.endpoint = API_SERVER_ENDPOINT_MODEL_INFO;
  assert_int_equal(api_server_tokenize_render(&t, &ro, "smol", 7, &out), LLB_STATUS_OK);
  j = json_loads(out.data, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(j, "id")), "smol");
  assert_string_equal(json_string_value(json_object_get(j, "object")), "model");
  assert_int_equal(json_integer_value(json_object_get(j, "max_model_len")), 2048);
  json_decref(j);
  api_server_buf_free(&out);
}

static struct llb_token_logprobs tok_lp(int32_t id, const char *text, float lp, struct llb_top_logprob *top,
                                        int32_t num_top) {
  return (struct llb_token_logprobs){.token_id = id, .logprob = lp, .rank = 1, .decoded = llb_str_c(text),
                                     .top = top, .num_top = num_top};
}

static void test_logprobs_shapes_for_completions_and_chat(void **state) {
  (void)state;
  struct llb_top_logprob top[2] = {{.token_id = 4, .logprob = -0.1f, .decoded = llb_str_c("Hi")},
                                   {.token_id = 5, .logprob = -INFINITY, .decoded = llb_str_c("Yo")}};
  struct llb_token_logprobs lps[2] = {tok_lp(4, "Hi", -0.1f, top, 2), tok_lp(6, "!", -2.0f, top, 1)};
  int32_t ids[2] = {4, 6};
  /* Completions: two deltas; text_offset continues; -inf clamps to -9999. */
  struct api_server_request req;
  parse_ok(API_SERVER_ENDPOINT_COMPLETIONS, "{\"model\":\"smol\",\"prompt\":\"p\",\"logprobs\":2}", &req);
  struct api_server_response r;
  assert_int_equal(api_server_response_init(&r, &req, "cmpl-3", 5), LLB_STATUS_OK);
  struct llb_completion_output c;
  struct llb_request_output ro = one(0, "Hi", ids, 1, LLB_FINISH_REASON_NONE, false, &c);
  c.logprobs = &lps[0];
  c.num_logprobs = 1;
  assert_int_equal(api_server_response_add_output(&r, 0, &ro), LLB_STATUS_OK);
  ro = one(0, "!", ids + 1, 1, LLB_FINISH_REASON_LENGTH, true, &c);
  c.logprobs = &lps[1];
  c.num_logprobs = 1;
  assert_int_equal(api_server_response_add_output(&r, 0, &ro), LLB_STATUS_OK);
  struct api_server_buf out = {0};
  assert_int_equal(api_server_response_render(&r, &out), LLB_STATUS_OK);
  json_t *j = json_loads(out.data, 0, NULL);
  json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
  assert_int_equal(json_array_size(json_object_get(lp, "tokens")), 2);
  assert_string_equal(json_string_value(json_array_get(json_object_get(lp, "tokens"), 1)), "!");
  assert_int_equal(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)), 2);
  assert_float_equal(json_real_value(json_array_get(json_object_get(lp, "token_logprobs"), 1)), -2.0, 1e-6);
  json_t *top0 = json_array_get(json_object_get(lp, "top_logprobs"), 0);
  assert_float_equal(json_real_value(json_object_get(top0, "Yo")), -9999.0, 0);
  json_decref(j);
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);

  /* Chat: content entries with bytes and top_logprobs cut to top_logprobs = 1. */
  parse_ok(API_SERVER_ENDPOINT_CHAT,
           "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":1}",
           &req);
  assert_int_equal(api_server_response_init(&r, &req, "chatcmpl-3", 5), LLB_STATUS_OK);
  ro = one(0, "Hi!", ids, 2, LLB_FINISH_REASON_STOP, true, &c);
  c.logprobs = lps;
  c.num_logprobs = 2;
  assert_int_equal(api_server_response_add_output(&r, 0, &ro), LLB_STATUS_OK);
  assert_int_equal(api_server_response_render(&r, &out), LLB_STATUS_OK);
  j = json_loads(out.data, 0, NULL);
  json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "Hi!");
  json_t *content = json_object_get(json_object_get(ch, "logprobs"), "content");
  assert_int_equal(json_array_size(content), 2);
  json_t *e0 = json_array_get(content, 0);
  assert_string_equal(json_string_value(json_object_get(e0, "token")), "Hi");
  assert_int_equal(json_array_size(json_object_get(e0, "bytes")), 2);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(e0, "bytes"), 0)), 'H');
  assert_int_equal(json_array_size(json_object_get(e0, "top_logprobs")), 1);
  json_decref(j);
  api_server_buf_free(&out);
  api_server_response_free(&r);
  api_server_request_free(&req);
}

static void test_stream_error_event_is_openai_error_object(void **state) {
  (void)state;
  struct api_server_error e;
  api_server_error_set(&e, 503, NULL, "engine gone");
  struct api_server_buf out = {0};
  assert_int_equal(api_server_response_stream_error(&e, &out), LLB_STATUS_OK);
  char ev[2][2048];
  assert_int_equal(sse_events(out.data, ev, 2), 1);
  json_t *j = json_loads(ev[0], 0, NULL);
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "engine gone");
  json_decref(j);
  api_server_buf_free(&out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_completion_stream_chunks_end_with_usage_and_done),
      cmocka_unit_test(test_chat_stream_sends_role_first_per_choice),
      cmocka_unit_test(test_non_stream_accumulates_choices_of_every_prompt),
      cmocka_unit_test(test_echo_prepends_the_prompt_once_per_choice),
      cmocka_unit_test(test_echo_logprobs_score_the_prompt_without_a_prompt_logprobs_field),
      cmocka_unit_test(test_tokenize_replies_render_vllm_shapes),
      cmocka_unit_test(test_logprobs_shapes_for_completions_and_chat),
      cmocka_unit_test(test_stream_error_event_is_openai_error_object),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
