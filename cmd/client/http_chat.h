/* `llmbus chat --url http://HOST:PORT/v1`: a chat client of any OpenAI-compatible server, as
 * `vllm chat --url` is: GET <url>/models picks the model (the first listed, unless given),
 * then each turn POSTs the conversation to <url>/chat/completions with "stream": true and
 * prints the content deltas of the server-sent events as they arrive. libevent's evhttp client
 * (the loop runs in the calling thread for the length of one request); plain http only.
 *
 * An interrupt (client_interrupted(), polled every 100 ms) cancels the request in flight: the
 * connection is closed, which a server takes as the client gone (vLLM and llmbus abort the
 * request then). Threading: one thread.
 */
#ifndef LLB_CMD_CLIENT_HTTP_CHAT_H
#define LLB_CMD_CLIENT_HTTP_CHAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "model/template/chat_template.h"
#include "schemas/sampling_params.h"

struct http_chat;

struct http_chat_options {
  const char *url;     /* base URL, "http://HOST:PORT/v1" */
  const char *api_key; /* sent as `Authorization: Bearer KEY`; NULL = none */
  const char *model;   /* NULL = the first of GET <url>/models */
  int64_t timeout_s;   /* longest wait for the server's next bytes */
  const struct llb_sampling_params *sp; /* temperature, top_p, max_tokens, seed, stop: sent when
                                         * they differ from the defaults; borrowed */
};

/* Parses the URL and asks the server for its models (unless o->model). Errors:
 * INVALID_ARGUMENT (not an http:// URL), CONNECTION / TIMEOUT (no answer), MALFORMED (no model
 * in the answer), the server's HTTP error. *out: http_chat_destroy(). */
llb_status http_chat_create(const struct http_chat_options *o, struct http_chat **out);

/* The model the chat talks to (owned by c). */
const char *http_chat_model(const struct http_chat *c);

/* One turn: streams the answer to msgs[0, n) to `out` (a final newline added) and returns its
 * text in *answer (malloc'd; caller frees). Errors: ABORTED (interrupted: the request was
 * cancelled), the server's error (status and its message), CONNECTION, TIMEOUT, MALFORMED. */
llb_status http_chat_complete(struct http_chat *c, const struct chat_message *msgs, size_t n, FILE *out,
                              char **answer);

void http_chat_destroy(struct http_chat *c);

#endif
