/* The api server's HTTP replies; see http_reply.h. */
#include "actors/api_server/http_reply.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>

static const char *reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Internal Server Error" : "Error";
  }
}

void api_server_http_send_body(struct evhttp_request *req, int status, const char *ctype, const char *body,
                      size_t len) {
  struct evbuffer *b = evbuffer_new();
  if (!b) {
    evhttp_send_error(req, 500, NULL);
    return;
  }
  evbuffer_add(b, body, len);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
  evhttp_send_reply(req, status, reason_phrase(status), b);
  evbuffer_free(b);
}

void api_server_http_send_error(struct api_server_metrics *metrics, struct evhttp_request *req, const struct api_server_error *e) {
  struct api_server_buf b = {0};
  if (!api_server_error_render(e, &b)) {
    evhttp_send_error(req, 500, NULL);
    return;
  }
  /* A full queue clears within a step or two; a tenant's token bucket says when it refills.
   * vLLM's clients and OpenAI's back off on this. */
  if (e->http_status == 429) {
    char secs[24];
    snprintf(secs, sizeof secs, "%lld", (long long)(e->retry_after_s > 0 ? e->retry_after_s : 1));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", secs);
  }
  api_server_http_send_body(req, e->http_status, "application/json", b.data, b.len);
  api_server_buf_free(&b);
  api_server_metrics_request_failed(metrics, e->http_status);
}

void api_server_http_send_unauthorized(struct api_server_metrics *metrics, struct evhttp_request *req) {
  struct api_server_error e;
  api_server_error_set(&e, 401, NULL, "missing or incorrect API key: send `Authorization: Bearer YOUR_KEY`");
  snprintf(e.code, sizeof e.code, "invalid_api_key");
  evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
  api_server_http_send_error(metrics, req, &e);
}

bool api_server_http_cors(const struct api_server_cors *cors, struct evhttp_request *req, enum evhttp_cmd_type method) {
  struct evkeyvalq *in = evhttp_request_get_input_headers(req), *out = evhttp_request_get_output_headers(req);
  struct api_server_cors_header h[6];
  int n = 0;
  char why[128];
  enum api_server_cors_verdict v = api_server_cors_check(cors, method == EVHTTP_REQ_OPTIONS, evhttp_find_header(in, "Origin"),
                                           evhttp_find_header(in, "Access-Control-Request-Method"),
                                           evhttp_find_header(in, "Access-Control-Request-Headers"), h, &n, why,
                                           sizeof why);
  for (int i = 0; i < n; i++) evhttp_add_header(out, h[i].name, h[i].value); /* refuses CR/LF */
  if (v == API_SERVER_CORS_PREFLIGHT) {
    evhttp_send_reply(req, 200, "OK", NULL);
    return false;
  }
  if (v == API_SERVER_CORS_DENIED) {
    api_server_http_send_body(req, 400, "text/plain", why, strlen(why));
    return false;
  }
  return true;
}

void api_server_http_echo_request_id(struct evhttp_request *req) {
  const char *id = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
  if (!id) return;
  size_t n = strlen(id);
  for (size_t i = 0; i < n; i++) /* visible ASCII only: nothing to inject, nothing to escape */
    if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7E) return;
  if (n == 0 || n > 256) return;
  evhttp_add_header(evhttp_request_get_output_headers(req), "X-Request-Id", id);
}

void api_server_http_send_rendered(struct api_server_metrics *metrics, struct evhttp_request *req, llb_status render_status,
                            const struct api_server_buf *b) {
  if (render_status == LLB_STATUS_OK) {
    api_server_http_send_body(req, 200, "application/json", b->data, b->len);
    return;
  }
  struct api_server_error e;
  api_server_error_set(&e, 500, NULL, "could not render the response");
  api_server_http_send_error(metrics, req, &e);
}


void api_server_http_span_begin(struct bus_span *span, struct evhttp_request *req) {
  struct evkeyvalq *in = evhttp_request_get_input_headers(req);
  const char *tp = evhttp_find_header(in, BUS_TRACEPARENT_HEADER);
  struct bus_trace_ctx parent;
  bool have_parent = tp && bus_traceparent_parse(tp, &parent) == LLB_STATUS_OK;
  if (!have_parent) llb_err_clear();
  bus_span_begin(span, have_parent ? &parent : NULL, "http", BUS_SPAN_KIND_SERVER);
  bus_span_attr_str(span, "http.request.method", evhttp_request_get_command(req) == EVHTTP_REQ_GET ? "GET" : "POST");
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
  bus_span_attr_str(span, "url.path", path ? path : "");
  char out[BUS_TRACEPARENT_LEN + 1];
  evhttp_add_header(evhttp_request_get_output_headers(req), BUS_TRACEPARENT_HEADER,
                    bus_traceparent_format(&span->ctx, out, sizeof out));
}
