/* libFuzzer target for the HTTP request → GenerateRequest mapping (actors/api_server:
 * api_server_request_parse, api_server_tokenize_parse, api_server_embeddings_parse, api_server_request_to_generate): any
 * body on any endpoint must give either a request or an OpenAI error object with an HTTP
 * status, never a crash or undefined behaviour (ASan/UBSan); an accepted request must map to
 * GenerateRequests that encode and decode (the bytes the input processor gets); an accepted
 * embeddings request renders a response once each input has a vector; an accepted Responses
 * request renders its response object and stream events from a made-up output. The first input
 * byte picks the endpoint; the rest is the body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_embeddings.h"
#include "actors/api_server/api_server_request.h"
#include "actors/api_server/api_server_responses.h"
#include "actors/api_server/api_server_tokenize.h"
#include "schemas/arena.h"
#include "schemas/generate_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct api_server_parse_options opts = {.served_model = "smol", .max_n = 4, .reasoning_parser = 1};

/* Encodes `gr`, decodes it back; aborts when what was accepted cannot travel. */
static void must_travel(const struct llb_generate_request *gr) {
  struct llb_buf buf = {0};
  llb_status st = llb_generate_request_encode_buf(gr, &buf);
  if (st == LLB_STATUS_OK) {
    struct llb_arena arena;
    llb_arena_init(&arena, NULL, 0);
    struct llb_generate_request back;
    if (llb_generate_request_decode(buf.data, buf.len, &arena, &back) != LLB_STATUS_OK) {
      fprintf(stderr, "accepted request does not decode: %s\n", llb_err_last());
      abort();
    }
    llb_arena_destroy(&arena);
  } else if (st != LLB_STATUS_TOO_LARGE) {
    fprintf(stderr, "accepted request does not encode: %s\n", llb_err_last());
    abort();
  }
  llb_buf_free(&buf);
}

static void check_error(const struct api_server_error *err) {
  if (err->http_status < 400 || err->http_status > 599 || !err->message[0]) {
    fprintf(stderr, "error without status or message: %d\n", err->http_status);
    abort();
  }
  struct api_server_buf out = {0};
  if (!api_server_error_render(err, &out)) abort();
  api_server_buf_free(&out);
}

/* The response object and the stream of a Responses request, from an output in three deltas
 * (reasoning markup, a tool-call-looking text, a cut by max tokens). */
static void responses(const struct api_server_request *r) {
  static const char *const parts[] = {"<think>x</thi", "nk>[{\"name\":\"f\",\"arguments\":{}}]", " done"};
  for (int stream = 0; stream < 2; stream++) {
    struct api_server_response resp;
    if (api_server_response_init(&resp, r, "resp_1", 0) != LLB_STATUS_OK) abort();
    struct api_server_buf out = {0};
    for (int k = 0; k < 3; k++) {
      struct llb_completion_output c = {.text = {parts[k], strlen(parts[k])},
                                        .finish_reason = k == 2 ? LLB_FINISH_REASON_LENGTH : LLB_FINISH_REASON_NONE};
      const struct llb_request_output ro = {.outputs = &c, .num_outputs = 1, .finished = k == 2};
      llb_status st = stream ? api_server_responses_stream_output(&resp, r->responses, &ro, &out)
                             : api_server_response_add_output(&resp, 0, &ro);
      if (st != LLB_STATUS_OK) abort();
    }
    if ((stream ? api_server_responses_stream_end(&resp, r->responses, &out) : api_server_responses_render(&resp, r->responses, &out)) !=
        LLB_STATUS_OK)
      abort();
    api_server_buf_free(&out);
    api_server_response_free(&resp);
  }
}

static void generate(const uint8_t *body, size_t len, enum api_server_endpoint ep) {
  struct api_server_request r;
  struct api_server_error err;
  llb_status st = api_server_request_parse(ep, (const char *)body, len, &opts, &r, &err);
  if (st != LLB_STATUS_OK) {
    if (st == LLB_STATUS_INVALID_ARGUMENT) check_error(&err);
    return;
  }
  int32_t n = ep == API_SERVER_ENDPOINT_COMPLETIONS ? r.num_prompts : 1;
  for (int32_t i = 0; i < n; i++) {
    struct llb_generate_request gr;
    api_server_request_to_generate(&r, i, "fuzz-1", &gr);
    must_travel(&gr);
  }
  if (r.responses) responses(&r);
  api_server_request_free(&r);
}

static void tokenize(const uint8_t *body, size_t len, enum api_server_endpoint ep) {
  struct api_server_tokenize t;
  struct api_server_error err;
  llb_status st = api_server_tokenize_parse(ep, (const char *)body, len, "smol", &opts, &t, &err);
  if (st != LLB_STATUS_OK) {
    if (st == LLB_STATUS_INVALID_ARGUMENT) check_error(&err);
    return;
  }
  struct llb_generate_request gr;
  api_server_tokenize_to_generate(&t, "fuzz-1", &gr);
  must_travel(&gr);
  api_server_tokenize_free(&t);
}

static void embeddings(const uint8_t *body, size_t len) {
  struct api_server_embeddings e;
  struct api_server_error err;
  llb_status st = api_server_embeddings_parse((const char *)body, len, &opts, &e, &err);
  if (st != LLB_STATUS_OK) {
    if (st == LLB_STATUS_INVALID_ARGUMENT) check_error(&err);
    return;
  }
  static const float vec[3] = {0.25f, -1.5e-7f, 3.0e38f};
  for (int32_t i = 0; i < e.req.num_prompts; i++) {
    struct llb_generate_request gr;
    api_server_embeddings_to_generate(&e, i, "fuzz-1", &gr);
    if (gr.pooling_params.pooling_type == LLB_POOLING_NONE) abort();
    must_travel(&gr);
    const struct llb_request_output ro = {.finished = true, .pooling_output = vec, .num_pooling_output = 3};
    if (api_server_embeddings_add_output(&e, i, &ro) != LLB_STATUS_OK) abort();
  }
  struct api_server_buf out = {0};
  if (!api_server_embeddings_done(&e) || api_server_embeddings_render(&e, "embd-1", 0, &out) != LLB_STATUS_OK) abort();
  api_server_buf_free(&out);
  api_server_embeddings_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 6) {
  case 0: generate(data + 1, size - 1, API_SERVER_ENDPOINT_COMPLETIONS); break;
  case 1: generate(data + 1, size - 1, API_SERVER_ENDPOINT_CHAT); break;
  case 2: tokenize(data + 1, size - 1, API_SERVER_ENDPOINT_TOKENIZE); break;
  case 3: tokenize(data + 1, size - 1, API_SERVER_ENDPOINT_DETOKENIZE); break;
  case 4: embeddings(data + 1, size - 1); break;
  default: generate(data + 1, size - 1, API_SERVER_ENDPOINT_RESPONSES); break;
  }
  return 0;
}
