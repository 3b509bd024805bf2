/* `llmbus chat --url`: OpenAI chat completions over HTTP with libevent's evhttp; see http_chat.h. */
#include "cmd/client/http_chat.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/client/client.h"

#define HTTP_CHAT_TICK_MS 100
#define HTTP_CHAT_MAX_BODY (4 << 20) /* an error body or the model list: more is refused */

struct http_chat {
  struct event_base *base;
  struct evhttp_connection *conn;
  char host[256];
  int port;
  char path[512]; /* the URL's path without a trailing '/': "/v1" */
  char model[256];
  char auth[512];  /* "Bearer KEY" or "" */
  int64_t timeout_s;
  struct llb_sampling_params sp;
};

/* One request in flight. */
struct exchange {
  struct http_chat *c;
  struct evhttp_request *req;
  bool stream;         /* SSE deltas to `out` (else the body is kept whole) */
  FILE *out;
  int status;
  bool done, cancelled, conn_failed, saw_done;
  struct evbuffer *body; /* the whole body (not streamed, or an error) */
  struct evbuffer *sse;  /* streamed bytes not yet a whole line */
  char *text;            /* [text_len] the answer so far */
  size_t text_len, text_cap;
  char error[512];       /* an error event's message */
};

static bool text_add(struct exchange *x, const char *s, size_t n) {
  if (x->text_len + n + 1 > x->text_cap) {
    size_t cap = x->text_cap ? 2 * x->text_cap : 256;
    while (cap < x->text_len + n + 1) cap *= 2;
    char *p = realloc(x->text, cap);
    if (!p) return false;
    x->text = p, x->text_cap = cap;
  }
  memcpy(x->text + x->text_len, s, n);
  x->text_len += n;
  x->text[x->text_len] = '\0';
  return true;
}

/* One `data:` payload of the stream: a chunk whose choices[0].delta.content is printed, an
 * error object, or [DONE]. */
static void on_data(struct exchange *x, const char *data) {
  if (strcmp(data, "[DONE]") == 0) {
    x->saw_done = true;
    return;
  }
  json_t *j = json_loads(data, 0, NULL);
  const char *content = json_string_value(
      json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "content"));
  const char *err = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
  if (!j) snprintf(x->error, sizeof x->error, "not JSON in the stream: %.100s", data);
  else if (err) snprintf(x->error, sizeof x->error, "%s", err);
  if (content && *content) {
    fputs(content, x->out);
    fflush(x->out);
    if (!text_add(x, content, strlen(content))) snprintf(x->error, sizeof x->error, "out of memory");
  }
  json_decref(j);
}

static void read_sse_lines(struct exchange *x) {
  char *line;
  size_t len;
  while ((line = evbuffer_readln(x->sse, &len, EVBUFFER_EOL_CRLF))) {
    if (strncmp(line, "data:", 5) == 0) on_data(x, line + 5 + (line[5] == ' '));
    free(line);
  }
}

static void keep_body(struct exchange *x, struct evbuffer *in) {
  if (evbuffer_get_length(x->body) + evbuffer_get_length(in) > HTTP_CHAT_MAX_BODY) {
    evbuffer_drain(in, evbuffer_get_length(in));
    return;
  }
  evbuffer_add_buffer(x->body, in);
}

static void on_chunk(struct evhttp_request *req, void *arg) {
  struct exchange *x = arg;
  x->status = evhttp_request_get_response_code(req);
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  if (x->stream && x->status == 200) {
    evbuffer_add_buffer(x->sse, in);
    read_sse_lines(x);
  } else {
    keep_body(x, in);
  }
}

static void on_done(struct evhttp_request *req, void *arg) {
  struct exchange *x = arg;
  x->done = true;
  x->req = NULL; /* freed by libevent after this callback */
  if (!req || evhttp_request_get_response_code(req) == 0) {
    x->conn_failed = true;
  } else {
    on_chunk(req, x); /* what came with the end */
  }
  event_base_loopbreak(x->c->base);
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct exchange *x = arg;
  if (x->done || !client_interrupted()) return;
  if (x->req) evhttp_cancel_request(x->req);
  x->req = NULL;
  x->cancelled = x->done = true;
  event_base_loopbreak(x->c->base);
}

/* The server's error as a status: its JSON error message when it sent one. */
static llb_status http_error(struct exchange *x) {
  size_t n = evbuffer_get_length(x->body);
  char *b = malloc(n + 1);
  if (!b) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "error body");
  evbuffer_copyout(x->body, b, n);
  b[n] = '\0';
  json_t *j = json_loads(b, 0, NULL);
  const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
  if (!msg) msg = json_string_value(json_object_get(j, "message"));
  llb_status st = LLB_ERRF(x->status == 404 ? LLB_STATUS_NOT_FOUND : LLB_STATUS_INVALID_ARGUMENT, "HTTP %d: %.300s",
                           x->status, msg ? msg : b);
  json_decref(j);
  free(b);
  return st;
}

/* Sends one request (body NULL: GET) and runs the loop until it ends or an interrupt cancels it. */
static llb_status exchange_run(struct exchange *x, const char *path, const char *body) {
  struct http_chat *c = x->c;
  x->body = evbuffer_new();
  x->sse = evbuffer_new();
  struct event *tick = event_new(c->base, -1, EV_PERSIST, on_tick, x);
  x->req = evhttp_request_new(on_done, x);
  if (!x->body || !x->sse || !tick || !x->req) {
    if (x->req) evhttp_request_free(x->req);
    if (tick) event_free(tick);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "HTTP request");
  }
  evhttp_request_set_chunked_cb(x->req, on_chunk);
  struct evkeyvalq *h = evhttp_request_get_output_headers(x->req);
  char host[300];
  snprintf(host, sizeof host, "%s:%d", c->host, c->port);
  evhttp_add_header(h, "Host", host);
  evhttp_add_header(h, "User-Agent", "llmbus-chat");
  evhttp_add_header(h, "Accept", body ? "text/event-stream" : "application/json");
  if (c->auth[0]) evhttp_add_header(h, "Authorization", c->auth);
  if (body) {
    evhttp_add_header(h, "Content-Type", "application/json");
    evbuffer_add(evhttp_request_get_output_buffer(x->req), body, strlen(body));
  }
  const struct timeval tv = {0, HTTP_CHAT_TICK_MS * 1000};
  event_add(tick, &tv);
  if (evhttp_make_request(c->conn, x->req, body ? EVHTTP_REQ_POST : EVHTTP_REQ_GET, path) != 0) {
    x->req = NULL; /* freed by evhttp_make_request on failure */
    event_free(tick);
    return LLB_ERRF(LLB_STATUS_CONNECTION, "cannot send to %s:%d", c->host, c->port);
  }
  while (!x->done) event_base_loop(c->base, EVLOOP_ONCE);
  event_free(tick);
  if (x->cancelled) return LLB_ERRF(LLB_STATUS_ABORTED, "interrupted");
  if (x->conn_failed)
    return LLB_ERRF(LLB_STATUS_CONNECTION, "no answer from http://%s:%d%s (is the server running?)", c->host, c->port,
                    path);
  if (x->status != 200) return http_error(x);
  if (x->error[0]) return LLB_ERRF(LLB_STATUS_INTERNAL, "%s", x->error);
  return LLB_STATUS_OK;
}

static void exchange_free(struct exchange *x) {
  if (x->body) evbuffer_free(x->body);
  if (x->sse) evbuffer_free(x->sse);
  free(x->text);
}

/* GET <path>/models: the first model's id. */
static llb_status pick_model(struct http_chat *c) {
  struct exchange x = {.c = c};
  char path[600];
  snprintf(path, sizeof path, "%s/models", c->path);
  llb_status st = exchange_run(&x, path, NULL);
  if (st == LLB_STATUS_OK) {
    size_t n = evbuffer_get_length(x.body);
    char *b = malloc(n + 1);
    json_t *j = NULL;
    if (b) {
      evbuffer_copyout(x.body, b, n);
      b[n] = '\0';
      j = json_loads(b, 0, NULL);
    }
    const char *id = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    if (id) snprintf(c->model, sizeof c->model, "%s", id);
    else st = LLB_ERRF(LLB_STATUS_MALFORMED, "GET %s: no model in the answer", path);
    json_decref(j);
    free(b);
  }
  exchange_free(&x);
  return st;
}

llb_status http_chat_create(const struct http_chat_options *o, struct http_chat **out) {
  *out = NULL;
  struct evhttp_uri *uri = evhttp_uri_parse(o->url);
  const char *scheme = uri ? evhttp_uri_get_scheme(uri) : NULL, *host = uri ? evhttp_uri_get_host(uri) : NULL;
  if (!uri || !scheme || strcmp(scheme, "http") != 0 || !host || !*host) {
    if (uri) evhttp_uri_free(uri);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--url '%s': give http://HOST:PORT/v1 (https is not supported)", o->url);
  }
  struct http_chat *c = calloc(1, sizeof *c);
  if (!c) {
    evhttp_uri_free(uri);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "http chat");
  }
  snprintf(c->host, sizeof c->host, "%s", host);
  c->port = evhttp_uri_get_port(uri) > 0 ? evhttp_uri_get_port(uri) : 80;
  snprintf(c->path, sizeof c->path, "%s", evhttp_uri_get_path(uri) ? evhttp_uri_get_path(uri) : "");
  evhttp_uri_free(uri);
  for (size_t n = strlen(c->path); n > 0 && c->path[n - 1] == '/';) c->path[--n] = '\0';
  if (o->api_key && *o->api_key) snprintf(c->auth, sizeof c->auth, "Bearer %s", o->api_key);
  c->timeout_s = o->timeout_s > 0 ? o->timeout_s : 60;
  if (o->sp) c->sp = *o->sp;
  else llb_sampling_params_init(&c->sp);
  c->base = event_base_new();
  c->conn = c->base ? evhttp_connection_base_new(c->base, NULL, c->host, (unsigned short)c->port) : NULL;
  if (!c->conn) {
    http_chat_destroy(c);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "libevent HTTP connection");
  }
  evhttp_connection_set_timeout(c->conn, (int)c->timeout_s);
  llb_status st = LLB_STATUS_OK;
  if (o->model && *o->model) snprintf(c->model, sizeof c->model, "%s", o->model);
  else st = pick_model(c);
  if (st != LLB_STATUS_OK) {
    http_chat_destroy(c);
    return st;
  }
  *out = c;
  return LLB_STATUS_OK;
}

const char *http_chat_model(const struct http_chat *c) { return c->model; }

/* The request body: the conversation and the sampling parameters the user set. */
static char *request_body(const struct http_chat *c, const struct chat_message *msgs, size_t n) {
  json_t *messages = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content));
  const struct llb_sampling_params *sp = &c->sp;
  json_t *j = json_pack("{s:s, s:o, s:b, s:f}", "model", c->model, "messages", messages, "stream", 1, "temperature",
                        (double)sp->temperature);
  if (!j) return NULL;
  if (sp->max_tokens > 0) json_object_set_new(j, "max_tokens", json_integer(sp->max_tokens));
  if (sp->top_p != 1.0f) json_object_set_new(j, "top_p", json_real(sp->top_p));
  if (sp->top_k > 0) json_object_set_new(j, "top_k", json_integer(sp->top_k));
  if (sp->min_p > 0) json_object_set_new(j, "min_p", json_real(sp->min_p));
  if (sp->has_seed) json_object_set_new(j, "seed", json_integer((json_int_t)(sp->seed & INT64_MAX)));
  if (sp->num_stop > 0) {
    json_t *stop = json_array();
    for (int32_t i = 0; i < sp->num_stop; i++) json_array_append_new(stop, json_string(sp->stop[i]));
    json_object_set_new(j, "stop", stop);
  }
  char *text = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  return text;
}

llb_status http_chat_complete(struct http_chat *c, const struct chat_message *msgs, size_t n, FILE *out,
                              char **answer) {
  *answer = NULL;
  char *body = request_body(c, msgs, n);
  if (!body) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "request body");
  struct exchange x = {.c = c, .stream = true, .out = out};
  char path[600];
  snprintf(path, sizeof path, "%s/chat/completions", c->path);
  llb_status st = exchange_run(&x, path, body);
  free(body);
  if (x.text_len && x.text[x.text_len - 1] != '\n') fputc('\n', out);
  fflush(out);
  if (st == LLB_STATUS_OK) {
    *answer = x.text ? x.text : strdup("");
    x.text = NULL;
    if (!*answer) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "answer");
  }
  exchange_free(&x);
  return st;
}

void http_chat_destroy(struct http_chat *c) {
  if (!c) return;
  if (c->conn) evhttp_connection_free(c->conn);
  if (c->base) event_base_free(c->base);
  free(c);
}
