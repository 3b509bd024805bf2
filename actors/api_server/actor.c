/* The api server actor: evhttp on the bus loop, RequestOutputs from one wildcard inbox
 * (see actor.h). */
#include "actors/api_server/actor.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actors/api_server/actor_internal.h"
#include "actors/api_server/api_images.h"
#include "actors/api_server/api_structured.h"
#include "actors/api_server/api_keys.h"
#include "actors/api_server/http_deadline.h"
#include "actors/api_server/api_metrics.h"
#include "actors/api_server/api_options.h"
#include "actors/api_server/api_request.h"
#include "actors/api_server/api_response.h"
#include "base/log.h"
#include "schemas/control.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

/* ---- the seq table (loop thread) ---------------------------------------------------- */

void api_table_add(struct api_actor *a, struct api_sub *s) {
  struct api_sub **b = &a->table[s->seq % SUB_TABLE_SIZE];
  s->next = *b;
  *b = s;
}

void api_table_remove(struct api_actor *a, struct api_sub *s) {
  for (struct api_sub **p = &a->table[s->seq % SUB_TABLE_SIZE]; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      return;
    }
}

static struct api_sub *table_find(struct api_actor *a, uint64_t seq) {
  for (struct api_sub *s = a->table[seq % SUB_TABLE_SIZE]; s; s = s->next)
    if (s->seq == seq) return s;
  return NULL;
}

/* ---- calls -------------------------------------------------------------------------- */

static void on_close(struct evhttp_connection *conn, void *arg);

void api_publish_abort(struct api_actor *a, const struct api_sub *s) {
  struct llb_abort_request ab = {.request_id = llb_str_c(s->engine_id)};
  struct llb_buf buf = {0};
  llb_status st = llb_abort_request_encode_buf(&ab, &buf);
  char subject[BUS_SUBJECT_MAX];
  if (st == LLB_STATUS_OK) st = bus_subject_abort(bus_prefix(a->bus), s->call->tenant, subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = bus_publish(a->bus, subject, buf.data, buf.len, NULL);
  llb_buf_free(&buf);
  if (st != LLB_STATUS_OK)
    LLB_LOG_WARN("abort_publish_failed", "request_id=%s error=\"%s\"", s->engine_id, llb_err_last());
  else
    LLB_LOG_INFO("request_aborted", "request_id=%s", s->engine_id);
}

static void publish_abort(struct api_actor *a, struct api_sub *s) {
  api_publish_abort(a, s);
  s->finished = true;
}

/* Forgets the HTTP side of `c` (the request was answered or the client went away). */
static void detach_http(struct api_call *c) {
  if (c->conn) evhttp_connection_set_closecb(c->conn, NULL, NULL);
  c->conn = NULL;
  c->req = NULL;
}

/* The "http" span of a call: a child of the client's `traceparent` header when it carries a
 * valid one (its sampled flag decides), else the root of a new trace sampled by the head
 * ratio. Its context goes on every message the call sends and back on the response's
 * `traceparent` header (same trace id), so a client can find its trace. */
static void trace_begin(struct api_call *c, struct evhttp_request *req) {
  struct evkeyvalq *in = evhttp_request_get_input_headers(req);
  const char *tp = evhttp_find_header(in, BUS_TRACEPARENT_HEADER);
  struct bus_trace_ctx parent;
  bool have_parent = tp && bus_traceparent_parse(tp, &parent) == LLB_STATUS_OK;
  if (!have_parent) llb_err_clear();
  bus_span_begin(&c->span, have_parent ? &parent : NULL, "http", BUS_SPAN_KIND_SERVER);
  bus_span_attr_str(&c->span, "http.request.method",
                    evhttp_request_get_command(req) == EVHTTP_REQ_GET ? "GET" : "POST");
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
  bus_span_attr_str(&c->span, "url.path", path ? path : "");
  char out[BUS_TRACEPARENT_LEN + 1];
  evhttp_add_header(evhttp_request_get_output_headers(req), BUS_TRACEPARENT_HEADER,
                    bus_traceparent_format(&c->span.ctx, out, sizeof out));
}

static void call_free(struct api_call *c) {
  struct api_actor *a = c->a;
  detach_http(c);
  bus_span_end(a->bus, &c->span);
  for (int32_t i = 0; i < c->num_subs; i++) {
    api_table_remove(a, &c->subs[i]);
    api_resend_free(&c->subs[i]);
  }
  if (c->prev) c->prev->next = c->next;
  else a->calls = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->timer) event_free(c->timer);
  if (c->probe) event_free(c->probe);
  api_response_free(&c->resp);
  api_request_free(&c->parsed);
  api_tokenize_free(&c->tok);
  api_embeddings_free(c->emb);
  free(c->emb);
  free(c->subs);
  free(c);
  atomic_fetch_sub(&a->inflight, 1);
  api_metrics_request_ended(a->metrics);
}

/* Aborts every engine request of `c` that may still run. Subs without an engine id yet are
 * aborted when their first output arrives (the call stays until then or the timeout). */
static void abort_running(struct api_call *c) {
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_sub *s = &c->subs[i];
    if (!s->finished && s->engine_id[0]) publish_abort(c->a, s);
  }
}

static bool all_subs_settled(const struct api_call *c) {
  for (int32_t i = 0; i < c->num_subs; i++)
    if (!c->subs[i].finished) return false;
  return true;
}

/* Ends `c` with error `e`: an HTTP error, or an SSE error event + [DONE] on a started
 * stream; running engine requests are aborted. */
void api_call_fail(struct api_call *c, const struct api_error *e) {
  struct api_actor *a = c->a;
  LLB_LOG_WARN("request_failed", "id=%s status=%d error=\"%.200s\"", c->resp.id, e->http_status, e->message);
  c->span.error = true;
  bus_span_attr_int(&c->span, "http.response.status_code", e->http_status);
  abort_running(c);
  if (c->req) {
    struct evhttp_request *req = c->req;
    bool started = c->headers_sent;
    detach_http(c);
    if (started) {
      struct api_buf b = {0};
      if (api_response_stream_error(e, &b) == LLB_STATUS_OK && api_buf_append(&b, "data: [DONE]\n\n", 14)) {
        struct evbuffer *eb = evbuffer_new();
        if (eb) {
          evbuffer_add(eb, b.data, b.len);
          evhttp_send_reply_chunk(req, eb);
          evbuffer_free(eb);
        }
      }
      api_buf_free(&b);
      evhttp_send_reply_end(req);
      api_metrics_request_failed(a->metrics, e->http_status);
    } else {
      api_http_send_error(a->metrics, req, e);
    }
  } else {
    api_metrics_request_failed(a->metrics, e->http_status);
  }
  c->client_gone = true;
  if (all_subs_settled(c)) call_free(c);
}

/* The request finished: metrics, free. */
static void call_succeed(struct api_call *c) {
  struct api_actor *a = c->a;
  int64_t now = llb_now_ns();
  const char *reason = NULL;
  int64_t nchoices = (int64_t)c->resp.num_prompts * c->resp.n;
  for (int64_t i = 0; i < nchoices && !reason; i++) {
    const char *r = llb_finish_reason_name((enum llb_finish_reason)c->resp.choices[i].finish_reason);
    if (c->resp.choices[i].finished && r) reason = r;
  }
  int64_t prompt = 0;
  for (int32_t i = 0; i < c->resp.num_prompts; i++) prompt += c->resp.prompt_tokens[i] > 0 ? c->resp.prompt_tokens[i] : 0;
  double ttft = c->t_first_token_ns ? (double)(c->t_first_token_ns - c->t_start_ns) / 1e9 : -1;
  api_metrics_request_succeeded(a->metrics, reason ? reason : "stop", prompt, c->resp.completion_tokens, ttft,
                                 (double)(now - c->t_start_ns) / 1e9);
  LLB_LOG_INFO("request_done", "id=%s prompt_tokens=%lld completion_tokens=%lld e2e_ms=%.1f", c->resp.id,
               (long long)prompt, (long long)c->resp.completion_tokens, (double)(now - c->t_start_ns) / 1e6);
  call_free(c);
}

/* ---- plain routes and replies (loop thread) ------------------------------------------ */

static void api_route_tokenize_reply(struct api_actor *a, struct evhttp_request *req, const struct api_tokenize *t,
                              const struct llb_request_output *ro) {
  if (ro->max_model_len > 0) a->max_model_len = ro->max_model_len;
  struct api_buf b = {0};
  api_http_send_rendered(a->metrics, req, api_tokenize_render(t, ro, a->model_name, (int64_t)time(NULL), &b), &b);
  api_buf_free(&b);
}

static void api_route_embeddings_reply(struct api_actor *a, struct evhttp_request *req, const struct api_embeddings *e,
                                const char *id) {
  struct api_buf b = {0};
  api_http_send_rendered(a->metrics, req, api_embeddings_render(e, id, (int64_t)time(NULL), &b), &b);
  api_buf_free(&b);
}

static void api_route_version(struct evhttp_request *req) {
  static const char body[] = "{\"version\":\"" LLB_VERSION_STRING "\"}";
  api_http_send_body(req, 200, "application/json", body, sizeof body - 1);
}

static void api_route_models(struct api_actor *a, struct evhttp_request *req) {
  struct api_buf b = {0};
  bool ok = api_buf_printf(&b, "{\"object\":\"list\",\"data\":[") &&
            api_model_object_render(a->model_name, (int64_t)time(NULL), a->max_model_len, &b) == LLB_STATUS_OK &&
            api_buf_printf(&b, "]}");
  if (ok) api_http_send_body(req, 200, "application/json", b.data, b.len);
  else evhttp_send_error(req, 500, NULL);
  api_buf_free(&b);
}

static void api_route_metrics(struct api_actor *a, struct evhttp_request *req) {
  struct api_buf b = {0};
  char *more = NULL;
  size_t more_len = 0;
  bool ok = api_metrics_render(a->metrics, &b) &&
            (!a->o.registry || llb_metrics_render(a->o.registry, &more, &more_len) == LLB_STATUS_OK) &&
            (!more || api_buf_append(&b, more, more_len));
  free(more);
  if (ok)
    api_http_send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
  else
    evhttp_send_error(req, 500, NULL);
  api_buf_free(&b);
}

/* ---- outputs (loop thread) ---------------------------------------------------------- */

static void write_chunk(struct api_call *c, const struct api_buf *b) {
  if (!c->req || b->len == 0) return;
  struct evbuffer *eb = evbuffer_new();
  if (!eb) return;
  evbuffer_add(eb, b->data, b->len);
  evhttp_send_reply_chunk(c->req, eb);
  evbuffer_free(eb);
  c->t_last_write_ns = llb_now_ns();
}

static void start_stream(struct api_call *c) {
  struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
  evhttp_add_header(h, "Content-Type", "text/event-stream");
  evhttp_add_header(h, "Cache-Control", "no-cache");
  evhttp_send_reply_start(c->req, 200, "OK");
  c->headers_sent = true;
}

/* /tokenize, /detokenize or /v1/models/{id} (c->tok set), not completions or chat. */
static bool is_tokenize_call(const struct api_call *c) { return c->tok.endpoint >= API_ENDPOINT_TOKENIZE; }

static void handle_output(struct api_actor *a, struct api_sub *s, const struct llb_request_output *ro) {
  struct api_call *c = s->call;
  bool first = !s->engine_id[0];
  if (first) snprintf(s->engine_id, sizeof s->engine_id, "%s", ro->request_id.data);
  s->t_last_heard_ns = llb_now_ns();
  if (c->client_gone) {
    /* The client left before this request's first output: abort it now. */
    if (!s->finished && !ro->finished) publish_abort(a, s);
    s->finished = true;
    if (all_subs_settled(c)) call_free(c);
    return;
  }
  if (ro->error.code == LLB_STATUS_STATE_LOST && api_resend_state_lost(a, c, s)) {
    if (c->timer) evtimer_add(c->timer, &(struct timeval){.tv_sec = a->o.first_output_timeout_s});
    return; /* the same seeded request again: its api_delta forwards only what the client lacks */
  }
  if (ro->error.code != 0) {
    struct api_error e;
    api_error_from_status(ro->error.code, ro->error.message.data, ro->error.field.data, &e);
    api_structured_map_error(&c->parsed, &e);
    api_images_map_error(&c->parsed, &e);
    e.retry_after_s = (ro->error.retry_after_ms + 999) / 1000; /* a per-tenant rate says when */
    if (is_tokenize_call(c)) api_tokenize_map_error(&c->tok, &e);
    s->finished = true;
    api_call_fail(c, &e);
    return;
  }
  if (c->emb) { /* /v1/embeddings: one FINAL_ONLY output per input, answered when all are in */
    if (ro->finished) s->finished = true;
    llb_status est = api_embeddings_add_output(c->emb, s->prompt_index, ro);
    if (est != LLB_STATUS_OK) {
      struct api_error e;
      api_error_set(&e, 500, NULL, "%s", llb_err_last());
      api_call_fail(c, &e);
    } else if (!api_embeddings_done(c->emb)) {
      if (c->timer) evtimer_add(c->timer, &(struct timeval){.tv_sec = a->o.first_output_timeout_s});
    } else {
      struct evhttp_request *req = c->req;
      detach_http(c);
      api_route_embeddings_reply(a, req, c->emb, c->resp.id);
      call_succeed(c);
    }
    return;
  }
  if (is_tokenize_call(c)) { /* one reply answers it */
    s->finished = true;
    struct evhttp_request *req = c->req;
    detach_http(c);
    api_route_tokenize_reply(a, req, &c->tok, ro);
    call_free(c);
    return;
  }
  /* An output processor that restarted repeats a completion from its start: keep the rest. */
  struct llb_request_output trimmed = *ro;
  struct llb_completion_output *cs = llb_arena_alloc(&a->arena, (size_t)(ro->num_outputs > 0 ? ro->num_outputs : 1) * sizeof *cs,
                                                     _Alignof(struct llb_completion_output));
  if (cs) {
    api_delta_apply(&s->delta, &trimmed, cs);
    ro = &trimmed;
  }
  int64_t now = llb_now_ns();
  int64_t before = c->resp.completion_tokens;
  struct api_buf b = {0};
  llb_status st;
  if (c->parsed.stream) {
    if (!c->headers_sent) start_stream(c);
    st = api_response_stream_output(&c->resp, s->prompt_index, ro, &b);
  } else {
    st = api_response_add_output(&c->resp, s->prompt_index, ro);
  }
  int64_t added = c->resp.completion_tokens - before;
  if (added > 0) {
    if (c->t_last_token_ns) /* one sample per token gap: `added` tokens came after this gap */
      api_metrics_observe_itl(c->a->metrics, (double)(now - c->t_last_token_ns) / 1e9 / (double)added, added);
    else if (added > 1) /* tokens that came with the first one */
      api_metrics_observe_itl(c->a->metrics, 0.0, added - 1);
    if (!c->t_first_token_ns) c->t_first_token_ns = now;
    c->t_last_token_ns = now;
    c->gen_tokens += added;
  }
  if (ro->finished) s->finished = true;
  if (st != LLB_STATUS_OK) {
    api_buf_free(&b);
    struct api_error e;
    api_error_set(&e, 500, NULL, "could not render the response: %s", llb_err_last());
    api_call_fail(c, &e);
    return;
  }
  if (c->timer) { /* re-armed: the engine must keep talking (DESIGN.md §6: never a hang) */
    struct timeval tv = {.tv_sec = a->o.first_output_timeout_s};
    evtimer_add(c->timer, &tv);
  }
  if (!api_response_done(&c->resp)) {
    write_chunk(c, &b);
    api_buf_free(&b);
    return;
  }
  struct evhttp_request *req = c->req;
  detach_http(c);
  if (c->parsed.stream) {
    st = api_response_stream_end(&c->resp, &b);
    c->req = req;
    write_chunk(c, &b);
    c->req = NULL;
    evhttp_send_reply_end(req);
  } else {
    api_http_send_rendered(a->metrics, req, api_response_render(&c->resp, &b), &b);
  }
  api_buf_free(&b);
  call_succeed(c);
}

static void handle_item(struct api_actor *a, struct inbox_item *it) {
  struct api_sub *s = table_find(a, it->seq);
  if (!s || s->finished) return; /* a late output of a request already answered */
  struct api_call *c = s->call;
  if (it->no_responders && !c->client_gone && api_resend_schedule(a, s)) return;
  if (it->no_responders) {
    struct api_error e;
    api_error_set(&e, 503, NULL, "no input processor is serving %s.generate.%s (is the engine running, "
                  "and the tenant served?)", bus_prefix(a->bus), c->tenant);
    s->finished = true;
    if (c->client_gone) {
      if (all_subs_settled(c)) call_free(c);
      return;
    }
    api_call_fail(c, &e);
    return;
  }
  llb_arena_reset(&a->arena);
  struct llb_request_output ro;
  llb_status st = llb_request_output_decode(it->data, it->len, &a->arena, &ro);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_WARN("output_malformed", "seq=%" PRIu64 " bytes=%zu error=\"%s\"", it->seq, it->len, llb_err_last());
    if (c->client_gone) return;
    struct api_error e;
    api_error_set(&e, 500, NULL, "the engine sent a malformed RequestOutput: %s", llb_err_last());
    api_call_fail(c, &e);
    return;
  }
  handle_output(a, s, &ro);
}

void api_on_wake(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_actor *a = arg;
  pthread_mutex_lock(&a->qmu);
  struct inbox_item *it = a->qhead;
  a->qhead = a->qtail = NULL;
  pthread_mutex_unlock(&a->qmu);
  while (it) {
    struct inbox_item *next = it->next;
    handle_item(a, it);
    free(it);
    it = next;
  }
}

/* NATS delivery thread: copy and hand over. */
void api_on_inbox(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct api_actor *a = user;
  const char *dot = strrchr(msg->subject, '.');
  char *end = NULL;
  uint64_t seq = dot ? strtoull(dot + 1, &end, 10) : 0;
  if (!dot || !end || *end) return;
  const char *status = bus_msg_header(msg, "Status");
  struct inbox_item *it = malloc(sizeof *it + msg->len);
  if (!it) return;
  it->next = NULL;
  it->seq = seq;
  it->no_responders = msg->len == 0 && status && strncmp(status, "503", 3) == 0;
  it->len = msg->len;
  if (msg->len) memcpy(it->data, msg->data, msg->len);
  pthread_mutex_lock(&a->qmu);
  if (a->qtail) a->qtail->next = it;
  else a->qhead = it;
  a->qtail = it;
  if (a->wake) event_active(a->wake, EV_READ, 0);
  pthread_mutex_unlock(&a->qmu);
}

/* ---- HTTP handlers (loop thread) ---------------------------------------------------- */

static void on_close(struct evhttp_connection *conn, void *arg) {
  (void)conn;
  struct api_call *c = arg;
  /* When evhttp itself failed the connection (EOF, write error, timeout) it detached our
   * request (no connection) and leaves freeing it to us; otherwise it frees it after this
   * callback. */
  struct evhttp_request *orphan = c->req && !evhttp_request_get_connection(c->req) ? c->req : NULL;
  LLB_LOG_INFO("client_disconnected", "id=%s", c->resp.id);
  c->req = NULL;
  c->conn = NULL;
  c->client_gone = true;
  abort_running(c);
  api_metrics_request_failed(c->a->metrics, 499);
  if (all_subs_settled(c)) call_free(c);
  if (orphan) evhttp_request_free(orphan);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_call *c = arg;
  if (c->client_gone) {
    /* Nobody waits and no engine id arrived to abort: give up on those. */
    for (int32_t i = 0; i < c->num_subs; i++) c->subs[i].finished = true;
    call_free(c);
    return;
  }
  bool any = false;
  for (int32_t i = 0; i < c->num_subs; i++) any |= c->subs[i].engine_id[0] != '\0';
  struct api_error e;
  api_error_set(&e, 503, NULL, any ? "the engine sent no output for %lld s" : "no engine answered within %lld s",
                (long long)c->a->o.first_output_timeout_s);
  for (int32_t i = 0; i < c->num_subs; i++)
    if (!c->subs[i].engine_id[0]) c->subs[i].finished = true;
  api_call_fail(c, &e);
}

/* libevent 2.1 does not read from a connection while its request is being answered, so a
 * client that leaves before anything is written goes unnoticed until the reply: peek at the
 * socket instead. EOF or an error frees the connection, whose close callback aborts. */
static void on_probe(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_call *c = arg;
  uint64_t reconnects = bus_num_reconnects(c->a->bus);
  const int64_t now = llb_now_ns();
  if (reconnects != c->reconnects) { /* its replies may be lost with the server's reply mappings */
    c->reconnects = reconnects;
    /* when it happened, not when this probe noticed: an input processor that beat since
     * (actor_main_answer_after_reconnect answers our own reconnect beat) is back */
    const int64_t at = bus_last_reconnect_ns(c->a->bus);
    c->reconnect_seen_ns = at > 0 && at <= now ? at : now;
  }
  /* Sent again once an input processor beat after the reconnect (it has subscribed again: a
   * request published before that is dropped without a "no responders" across the accounts'
   * service import), or API_RESEND_WAIT_INPUT_NS after it at the latest. */
  if (c->reconnect_seen_ns && (api_peer_beats_ip_beat_ns(c->a->peers) > c->reconnect_seen_ns ||
                               now - c->reconnect_seen_ns > API_RESEND_WAIT_INPUT_NS)) {
    c->reconnect_seen_ns = 0;
    if (api_resend_after_reconnect(c->a, c) > 0 && c->timer) {
      struct timeval tv = {.tv_sec = c->a->o.first_output_timeout_s};
      evtimer_add(c->timer, &tv);
    }
  }
  if (api_resend_after_op_restart(c->a, c, api_peer_beats_op_restart_ns(c->a->peers), now) > 0 && c->timer) {
    struct timeval tv = {.tv_sec = c->a->o.first_output_timeout_s};
    evtimer_add(c->timer, &tv);
  }
  if (!c->conn) return;
  struct bufferevent *bev = evhttp_connection_get_bufferevent(c->conn);
  evutil_socket_t s = bev ? bufferevent_getfd(bev) : -1;
  if (s < 0) return;
  /* A stream the engine keeps waiting (a restarted actor being replaced) gets an SSE comment
   * now and then, so that evhttp's inactivity timeout does not cut it silently. */
  if (c->headers_sent && c->req && llb_now_ns() - c->t_last_write_ns > API_SSE_KEEPALIVE_NS) {
    const struct api_buf ka = {.data = (char *)": keep-alive\n\n", .len = 14};
    write_chunk(c, &ka);
  }
  char byte;
  ssize_t n = recv(s, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    evhttp_connection_free(c->conn); /* runs on_close, which may free `c` */
}

static void make_id(struct api_actor *a, enum api_endpoint ep, char *buf, size_t cap) {
  a->id_counter++;
  const char *kind = ep == API_ENDPOINT_CHAT ? "chatcmpl" : ep == API_ENDPOINT_COMPLETIONS ? "cmpl"
                     : ep == API_ENDPOINT_EMBEDDINGS ? "embd" : "tok";
  snprintf(buf, cap, "%s-%016" PRIx64 "%08" PRIx64, kind, a->id_salt, a->id_counter);
}

/* Completions and chat (ep), or a tokenize call (/tokenize, /detokenize, /v1/models/{id}:
 * one GenerateRequest on the tokenize subject, `model` = the path's id for the last). */
static void handle_generate(struct api_actor *a, struct evhttp_request *req, enum api_endpoint ep,
                            const char *model, const char *tenant) {
  struct api_error e;
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  size_t len = evbuffer_get_length(in);
  if (len > a->o.max_body_bytes) {
    api_error_set(&e, 413, NULL, "the request body is %zu bytes, over the limit of %zu bytes", len, a->o.max_body_bytes);
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  if (atomic_load(&a->inflight) >= a->o.max_concurrent) {
    api_error_set(&e, 429, NULL, "too many requests in flight (%d); retry later", a->o.max_concurrent);
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  const char *body = len ? (const char *)evbuffer_pullup(in, (ev_ssize_t)len) : "";
  struct api_call *c = calloc(1, sizeof *c);
  if (!c) {
    api_error_set(&e, 500, NULL, "out of memory");
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  c->a = a;
  c->tenant = tenant;
  c->t_start_ns = llb_now_ns();
  trace_begin(c, req);
  struct api_parse_options po = {.served_model = a->model_name, .tool_parser = a->o.tool_call_parser,
                                .allowed_local_media_path = a->local_media_dir};
  const bool emb = ep == API_ENDPOINT_EMBEDDINGS, tok = ep != API_ENDPOINT_COMPLETIONS && ep != API_ENDPOINT_CHAT && !emb;
  if (emb && !(c->emb = calloc(1, sizeof *c->emb))) api_error_set(&e, 500, NULL, "out of memory");
  if ((emb && !c->emb) ||
      (emb ? api_embeddings_parse(body, len, &po, c->emb, &e) != LLB_STATUS_OK
       : tok ? api_tokenize_parse(ep, body, len, model, &po, &c->tok, &e) != LLB_STATUS_OK
             : api_request_parse(ep, body, len, &po, &c->parsed, &e) != LLB_STATUS_OK)) {
    free(c->emb);
    free(c);
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  char id[64];
  make_id(a, ep, id, sizeof id);
  c->num_subs = ep == API_ENDPOINT_COMPLETIONS ? c->parsed.num_prompts : emb ? c->emb->req.num_prompts : 1;
  c->subs = calloc((size_t)c->num_subs, sizeof *c->subs);
  if (emb) snprintf(c->resp.id, sizeof c->resp.id, "%s", id);
  if (!c->subs || (!tok && !emb && api_response_init(&c->resp, &c->parsed, id, (int64_t)time(NULL)) != LLB_STATUS_OK)) {
    free(c->subs);
    api_embeddings_free(c->emb);
    free(c->emb);
    api_request_free(&c->parsed);
    api_tokenize_free(&c->tok);
    free(c);
    api_error_set(&e, 500, NULL, "out of memory");
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  c->req = req;
  c->conn = evhttp_request_get_connection(req);
  c->next = a->calls;
  if (a->calls) a->calls->prev = c;
  a->calls = c;
  atomic_fetch_add(&a->inflight, 1);
  api_metrics_request_started(a->metrics);
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_sub *s = &c->subs[i];
    s->seq = ++a->next_seq;
    s->call = c;
    s->prompt_index = i;
    api_table_add(a, s);
  }
  evhttp_connection_set_closecb(c->conn, on_close, c);
  c->timer = evtimer_new(a->base, on_timer, c);
  if (c->timer) {
    struct timeval tv = {.tv_sec = a->o.first_output_timeout_s};
    evtimer_add(c->timer, &tv);
  }
  c->reconnects = bus_num_reconnects(a->bus);
  if (!tok && !c->parsed.sampling_params.has_seed) {
    /* Drawn here rather than by the input processor, so that a request sent again after a
     * reconnect (api_resend_after_reconnect) repeats the same tokens. */
    c->parsed.sampling_params.seed = api_random_seed(a);
    c->parsed.sampling_params.has_seed = true;
  }
  c->probe = event_new(a->base, -1, EV_PERSIST, on_probe, c);
  if (c->probe) {
    struct timeval tv = {.tv_sec = 0, .tv_usec = 250 * 1000};
    event_add(c->probe, &tv);
  }
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_sub *s = &c->subs[i];
    s->t_last_heard_ns = llb_now_ns();
    char rid[96], reply[192];
    if (c->num_subs > 1) snprintf(rid, sizeof rid, "%s-%d", id, i);
    else snprintf(rid, sizeof rid, "%s", id);
    snprintf(reply, sizeof reply, "%s.%" PRIu64, a->inbox, s->seq);
    struct llb_generate_request gr;
    if (tok) api_tokenize_to_generate(&c->tok, rid, &gr);
    else if (emb) api_embeddings_to_generate(c->emb, i, rid, &gr);
    else api_request_to_generate(&c->parsed, i, rid, &gr);
    llb_status st = llb_generate_request_encode_buf(&gr, &a->enc);
    if (st == LLB_STATUS_OK) {
      char subject[BUS_SUBJECT_MAX];
      if (snprintf(subject, sizeof subject, "%s.%s.%s", bus_prefix(a->bus), tok ? "tokenize" : "generate",
                   c->tenant) >= (int)sizeof subject)
        st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subject of tenant %s too long", c->tenant);
      struct bus_out_msg m = {.subject = subject, .reply = reply, .data = a->enc.data, .len = a->enc.len,
                              .trace = &c->span.ctx};
      if (st == LLB_STATUS_OK) st = bus_publish_msg(a->bus, &m);
      if (st == LLB_STATUS_OK && api_resend_keep(s, m.subject, reply, m.data, m.len) != LLB_STATUS_OK)
        LLB_LOG_WARN("generate_not_resendable", "seq=%" PRIu64 " reason=out_of_memory", s->seq);
    }
    if (st != LLB_STATUS_OK) {
      if (st == LLB_STATUS_TOO_LARGE)
        api_error_set(&e, 413, NULL, "the request is too large for the bus: %s", llb_err_last());
      else if (st == LLB_STATUS_INVALID_ARGUMENT)
        api_error_set(&e, 400, NULL, "%s", llb_err_last());
      else
        api_error_set(&e, 503, NULL, "cannot reach the engine: %s", llb_err_last());
      for (int32_t j = i; j < c->num_subs; j++) c->subs[j].finished = true;
      api_call_fail(c, &e);
      return;
    }
  }
}

void api_on_request(struct evhttp_request *req, void *arg) {
  struct api_actor *a = arg;
  http_deadlines_request_read(a->deadlines, req);
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
  enum evhttp_cmd_type method = evhttp_request_get_command(req);
  struct api_error e;
  if (!path) path = "";
  bool post = method == EVHTTP_REQ_POST, get = method == EVHTTP_REQ_GET;
  struct {
    const char *path;
    bool is_post;
  } routes[] = {{"/v1/completions", true}, {"/v1/chat/completions", true}, {"/v1/models", false},
                {"/health", false},        {"/metrics", false},            {"/tokenize", true},
                {"/detokenize", true},     {"/version", false},            {"/v1/models/", false},
                {"/v1/embeddings", true}};
  api_http_echo_request_id(req);
  if (!api_http_cors(&a->cors, req, method)) return; /* a preflight, answered before authentication */
  const char *tenant = a->tenant;
  if (a->o.api_keys) {
    tenant = api_keys_tenant_of(a->o.api_keys, evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization"));
    if (!tenant) {
      api_http_send_unauthorized(a->metrics, req);
      return;
    }
  }
  int route = -1;
  for (int i = 0; i < (int)(sizeof routes / sizeof routes[0]); i++)
    if (strcmp(path, routes[i].path) == 0) route = i;
  const char *model_id = NULL; /* /v1/models/{id}: ids may hold '/' ("org/name") */
  if (route < 0 && strncmp(path, "/v1/models/", 11) == 0 && path[11]) {
    route = 8;
    model_id = path + 11;
  }
  if (route < 0) {
    api_error_set(&e, 404, NULL, "no route %.200s", path);
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  if (routes[route].is_post ? !post : !get) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", routes[route].is_post ? "POST" : "GET");
    api_error_set(&e, 405, NULL, "%s takes %s", routes[route].path, routes[route].is_post ? "POST" : "GET");
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  if (a->stopped) {
    api_error_set(&e, 503, NULL, "the server is shutting down");
    api_http_send_error(a->metrics, req, &e);
    return;
  }
  switch (route) {
    case 0: handle_generate(a, req, API_ENDPOINT_COMPLETIONS, NULL, tenant); break;
    case 1: handle_generate(a, req, API_ENDPOINT_CHAT, NULL, tenant); break;
    case 2: api_route_models(a, req); break;
    case 3: api_peer_beats_route_health(a->peers, req); break;
    case 4: api_route_metrics(a, req); break;
    case 5: handle_generate(a, req, API_ENDPOINT_TOKENIZE, NULL, tenant); break;
    case 6: handle_generate(a, req, API_ENDPOINT_DETOKENIZE, NULL, tenant); break;
    case 7: api_route_version(req); break;
    case 9: handle_generate(a, req, API_ENDPOINT_EMBEDDINGS, NULL, tenant); break;
    default: handle_generate(a, req, API_ENDPOINT_MODEL_INFO, model_id, tenant); break;
  }
}

/* ---- setup / teardown on the loop thread -------------------------------------------- */
