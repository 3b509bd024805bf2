/* OpenAI's error object ({"error": {"message", "type", "param", "code"}}): what every
 * request parser and endpoint of the api server refuses with, and how it is rendered. Pure
 * logic; a leaf the parsers share. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_ERROR_H
#define LLB_ACTORS_API_SERVER_API_SERVER_ERROR_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/api_server_buf.h"
#include "base/status.h"

/* An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}. */
struct api_server_error {
  int http_status;  /* 400, 404, 413, 429, 500, 503, ... */
  char type[40];    /* "invalid_request_error", "not_found_error", ... */
  char param[96];   /* offending field, "" = null */
  char code[40];    /* machine-readable code ("model_not_found"), "" = null */
  char message[600];
  int64_t retry_after_s; /* 429: the Retry-After header; 0 = 1 s (a full queue clears in a step) */
};

/* Sets `e` (printf-style message); returns `e->http_status`. */
int api_server_error_set(struct api_server_error *e, int http_status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fills `e` from an engine error (RequestOutput.error: an llb_status code, message, field):
 * INVALID_ARGUMENT / MALFORMED / UNSUPPORTED / TOO_LARGE → 400, NOT_FOUND → 404,
 * QUEUE_FULL → 429, TIMEOUT / NO_SERVER / CONNECTION / CLOSED → 503, anything else → 500. */
void api_server_error_from_status(int32_t code, const char *message, const char *field,
                           struct api_server_error *e);

/* `{"error": {...}}` of `e` into `out` (appended). False when out of memory. */
bool api_server_error_render(const struct api_server_error *e, struct api_server_buf *out);

/* Sets a 400 error naming `param` (NULL = none) with the formatted message and returns
 * INVALID_ARGUMENT: the request parsers' one refusal path. */
llb_status api_server_error_bad(struct api_server_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets a 500 "out of memory" and returns OUT_OF_MEMORY. */
llb_status api_server_error_oom(struct api_server_error *err);

#endif
