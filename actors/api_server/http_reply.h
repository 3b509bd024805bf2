/* The api server's HTTP replies (loop thread): a body with its status and Content-Type, an
 * OpenAI-shaped error object (counted in the api metrics; 429 with Retry-After), the 401 of a
 * missing or unknown key, a rendered JSON response, CORS headers and preflights, the echoed
 * X-Request-Id, the request's trace span. Each takes what it needs as arguments: the request,
 * the metrics, the CORS policy. */
#ifndef LLB_ACTORS_API_SERVER_HTTP_REPLY_H
#define LLB_ACTORS_API_SERVER_HTTP_REPLY_H

#include <event2/http.h>
#include <stdbool.h>
#include <stddef.h>

#include "actors/api_server/api_server_cors.h"
#include "actors/api_server/api_server_metrics.h"
#include "actors/api_server/api_server_response.h"
#include "base/status.h"
#include "bus/span.h"

/* Sends `body[len]` with `status` and Content-Type `ctype`. */
void api_server_http_send_body(struct evhttp_request *req, int status, const char *ctype, const char *body,
                        size_t len);
/* Sends `e` as OpenAI's error object and counts it in `metrics`. */
void api_server_http_send_error(struct api_server_metrics *metrics, struct evhttp_request *req, const struct api_server_error *e);
/* 401 in OpenAI's shape (code invalid_api_key) with `WWW-Authenticate: Bearer` (RFC 6750):
 * a missing or unknown API key. Says nothing about which. */
void api_server_http_send_unauthorized(struct api_server_metrics *metrics, struct evhttp_request *req);
/* Sends the rendered JSON `b` with 200 when render_status is OK, else a 500 error object
 * saying the response could not be rendered. */
void api_server_http_send_rendered(struct api_server_metrics *metrics, struct evhttp_request *req, llb_status render_status,
                            const struct api_server_buf *b);
/* CORS (api_server_cors.h): adds the response's CORS headers; answers a preflight (200) or a refused
 * one (400) itself and returns false then; true: go on serving the request. */
bool api_server_http_cors(const struct api_server_cors *cors, struct evhttp_request *req, enum evhttp_cmd_type method);
/* Echoes a sane X-Request-Id header of `req` into its response headers. */
void api_server_http_echo_request_id(struct evhttp_request *req);
/* Begins `span`, the "http" span of `req` (W3C Trace Context): a child of the request's
 * `traceparent` header when it carries a valid one (its sampled flag decides), else the root
 * of a new trace sampled by the head ratio. Its context goes back on the response's
 * `traceparent` header (same trace id), so a client can find its trace. */
void api_server_http_span_begin(struct bus_span *span, struct evhttp_request *req);

#endif
