/* The api server actor (see actor.h): its state, HTTP requests and their GenerateRequests,
 * the RequestOutputs that answer them, disconnects and timeouts, and the life cycle (create,
 * start: the listener set up on the bus loop, stop: calls in flight ended on the loop,
 * destroy). The pieces with state of their own are modules given what they need: the reply
 * inbox (inbox.h), the seq table and call structs (api_server_call.h), resends (api_server_resend.h), the
 * listener (http_listener.h), setup and teardown on the loop (loop_call.h), replies
 * (http_reply.h), routes without the engine (plain_routes.h), peers' beats (peer_beats.h), the
 * header gate of keys and request rates (api_server_gate.h). */
#include "actors/api_server/actor.h"
#include "actors/api_server/api_server_gate.h"
#include "schemas/lora_registry.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actors/api_server/api_server_call.h"
#include "actors/api_server/api_server_cors.h"
#include "actors/api_server/api_server_images.h"
#include "actors/api_server/api_server_keys.h"
#include "actors/api_server/api_server_lora_admin.h"
#include "actors/api_server/api_server_metrics.h"
#include "actors/api_server/api_server_resend.h"
#include "actors/api_server/api_server_responses.h"
#include "actors/api_server/api_server_structured.h"
#include "actors/api_server/http_listener.h"
#include "actors/api_server/http_reply.h"
#include "actors/api_server/inbox.h"
#include "actors/api_server/loop_call.h"
#include "actors/api_server/peer_beats.h"
#include "actors/api_server/plain_routes.h"
#include "base/hash.h"
#include "base/log.h"
#include "schemas/request_output.h"

#define API_SERVER_SSE_KEEPALIVE_NS 3000000000LL /* a stream silent this long gets ": keep-alive" */

struct api_server_actor {
  struct api_server_actor_options o;
  struct api_server_cors cors; /* from the options (api_server_cors.h) */
  char http_host[128];
  int http_port, bound_port;
  char model_name[API_SERVER_MAX_MODEL_BYTES];
  char model_alias_buf[API_SERVER_MAX_MODEL_ALIASES][API_SERVER_MAX_MODEL_BYTES]; /* --served-model-name's others */
  const char *model_names[API_SERVER_MAX_MODEL_ALIASES + 1]; /* [num_model_names]: model_name, then the aliases */
  int num_model_names;
  uint64_t seed_counter; /* draws of the --seed generator (loop thread) */
  char *local_media_dir; /* realpath of --allowed-local-media-path, or NULL (owned) */
  struct api_server_gate *gate;  /* the header gate (with API keys), or NULL (owned) */
  char tenant[64];
  struct bus *bus;
  struct event_base *base;
  char inbox_subject[128];        /* replies come on <inbox_subject>.<seq> */
  struct api_server_loop_call *loop;     /* setup and teardown on the loop thread */
  struct api_server_inbox *inbox;        /* RequestOutputs from the delivery threads to the loop */
  struct api_server_http_listener *listener; /* NULL until set up, and after the teardown */
  bool stopped;
  /* Loop-thread state. */
  struct api_server_sub_table *subs;
  struct api_server_resend_ctx resend;   /* the bus, inbox subject and seq table, for resends */
  struct api_server_call *calls;
  int32_t max_model_len;          /* from the last tokenize reply; 0 = unknown */
  uint64_t id_salt;
  uint64_t id_counter;
  struct llb_arena arena;
  struct llb_buf enc;
  struct api_server_metrics *metrics;
  atomic_int_fast64_t inflight;
  struct api_server_peer_beats *peers;   /* engine stats, heartbeats: /health, restarts seen */
  struct llb_metrics_merge *merge; /* the engine actors' metrics, merged into /metrics */
  struct api_server_lora_admin *lora_admin; /* --lora-dir: the LoRA load/unload routes, else NULL */
};

/* The sampling seed of a request that gives none: from the --seed generator (splitmix64 of the
 * seed and a counter: the same requests in the same order get the same seeds, as vLLM's --seed
 * makes its sampler reproducible), else random (getrandom; falls back to the id salt and a
 * counter). Loop thread. */
static uint64_t random_seed(struct api_server_actor *a) {
  if (a->o.has_seed) return llb_mix64(a->o.seed + LLB_SPLITMIX64_GAMMA * ++a->seed_counter);
  uint64_t seed;
  if (getrandom(&seed, sizeof seed, 0) == (ssize_t)sizeof seed) return seed;
  return llb_mix64(a->id_salt + LLB_SPLITMIX64_GAMMA * ++a->id_counter); /* splitmix64 */
}

/* ---- calls -------------------------------------------------------------------------- */

static void publish_abort(struct api_server_actor *a, struct api_server_sub *s) {
  api_server_sub_publish_abort(a->bus, s);
  s->finished = true;
}

/* (Re)starts c's first-output timeout: the engine must keep talking (docs/design.md §6: never a
 * hang). */
static void arm_timer(struct api_server_call *c) {
  if (c->timer) evtimer_add(c->timer, &(struct timeval){.tv_sec = c->a->o.first_output_timeout_s});
}

/* Forgets the HTTP side of `c` (the request was answered or the client went away). */
static void detach_http(struct api_server_call *c) {
  if (c->conn) evhttp_connection_set_closecb(c->conn, NULL, NULL);
  c->conn = NULL;
  c->req = NULL;
}

/* Ends a held refusal's hold: its gate ticket back, the error freed. */
static void unhold(struct api_server_call *c) {
  if (!c->held) return;
  api_server_gate_release(c->a->gate, c->held_ticket);
  free(c->held);
  c->held = NULL;
}

static void call_free(struct api_server_call *c) {
  struct api_server_actor *a = c->a;
  unhold(c);
  detach_http(c);
  bus_span_end(a->bus, &c->span);
  for (int32_t i = 0; i < c->num_subs; i++) {
    api_server_sub_table_remove(a->subs, &c->subs[i]);
    api_server_resend_free(&c->subs[i]);
  }
  if (c->prev) c->prev->next = c->next;
  else a->calls = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->timer) event_free(c->timer);
  if (c->probe) event_free(c->probe);
  api_server_response_free(&c->resp);
  api_server_request_free(&c->parsed);
  api_server_tokenize_free(&c->tok);
  api_server_embeddings_free(c->emb);
  free(c->emb);
  free(c->subs);
  free(c);
  atomic_fetch_sub(&a->inflight, 1);
  api_server_metrics_request_ended(a->metrics);
}

/* Aborts every engine request of `c` that may still run. Subs without an engine id yet are
 * aborted when their first output arrives (the call stays until then or the timeout). */
static void abort_running(struct api_server_call *c) {
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_server_sub *s = &c->subs[i];
    if (!s->finished && s->engine_id[0]) publish_abort(c->a, s);
  }
}

static bool all_subs_settled(const struct api_server_call *c) {
  for (int32_t i = 0; i < c->num_subs; i++)
    if (!c->subs[i].finished) return false;
  return true;
}

/* Writes b to c's response (a stream chunk); nothing once the client went away. */
static void write_chunk(struct api_server_call *c, const struct api_server_buf *b) {
  if (!c->req || b->len == 0) return;
  struct evbuffer *eb = evbuffer_new();
  if (!eb) return;
  evbuffer_add(eb, b->data, b->len);
  evhttp_send_reply_chunk(c->req, eb);
  evbuffer_free(eb);
  c->t_last_write_ns = llb_now_ns();
}

/* Ends `c` with error `e`: an HTTP error, or an SSE error event + [DONE] on a started
 * stream; running engine requests are aborted. */
static void call_fail(struct api_server_call *c, const struct api_server_error *e) {
  struct api_server_actor *a = c->a;
  LLB_LOG_WARN("request_failed", "id=%s status=%d error=\"%.200s\"", c->resp.id, e->http_status, e->message);
  c->span.error = true;
  bus_span_attr_int(&c->span, "http.response.status_code", e->http_status);
  abort_running(c);
  struct evhttp_request *req = c->req;
  const bool stream = req && c->headers_sent; /* started: an error event, then [DONE] */
  if (stream) {
    struct api_server_buf b = {0};
    if (api_server_response_stream_error(e, &b) == LLB_STATUS_OK && api_server_buf_append(&b, "data: [DONE]\n\n", 14))
      write_chunk(c, &b);
    api_server_buf_free(&b);
  }
  detach_http(c);
  if (stream) evhttp_send_reply_end(req);
  if (req && !stream) api_server_http_send_error(a->metrics, req, e);
  else api_server_metrics_request_failed(a->metrics, e->http_status);
  c->client_gone = true;
  if (all_subs_settled(c)) call_free(c);
}

/* Whether refusal e of a request whose body was body_bytes is held before it is sent, as the
 * header gate holds its own 429s (api_server_gate.h: a client retrying at once comes back once
 * per hold, and a held answer keeps its max_concurrent slot): an engine's 429 (the tenant's
 * limits in the input processor), or a client error (4xx) for a body of
 * API_SERVER_GATE_COSTLY_BODY_BYTES or more, which the front door parsed (and the input
 * processor may have worked on) before refusing it. */
static bool refusal_is_held(const struct api_server_error *e, size_t body_bytes) {
  return e->http_status == 429 ||
         (e->http_status >= 400 && e->http_status < 500 && body_bytes >= API_SERVER_GATE_COSTLY_BODY_BYTES);
}

/* Holds refusal e on c for ms with the gate's ticket (given back when the hold ends); c's timer
 * ends the hold (on_timer answers it). False: out of memory, the ticket given back. */
static bool start_hold(struct api_server_call *c, const struct api_server_error *e, int32_t ticket, int64_t ms) {
  c->held = malloc(sizeof *c->held);
  if (!c->held) {
    api_server_gate_release(c->a->gate, ticket);
    return false;
  }
  *c->held = *e;
  c->held_ticket = ticket;
  evtimer_del(c->timer);
  const struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
  evtimer_add(c->timer, &tv);
  return true;
}

/* The engine refused the call: held (refusal_is_held) when the gate has room for it, its requests
 * aborted now; else call_fail at once. */
static void call_fail_or_hold(struct api_server_call *c, const struct api_server_error *e) {
  struct api_server_actor *a = c->a;
  int64_t ms = 0;
  const int32_t ticket = refusal_is_held(e, c->body_bytes) && a->gate && c->req && !c->headers_sent && c->timer &&
                                 !c->held
                             ? api_server_gate_hold(a->gate, c->tenant, e->retry_after_s, &ms)
                             : -1;
  if (ticket < 0 || !start_hold(c, e, ticket, ms)) {
    call_fail(c, e);
    return;
  }
  abort_running(c);
}

/* The request finished: metrics, free. */
static void call_succeed(struct api_server_call *c) {
  struct api_server_actor *a = c->a;
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
  api_server_metrics_request_succeeded(a->metrics, reason ? reason : "stop", prompt, c->resp.completion_tokens, ttft,
                                 (double)(now - c->t_start_ns) / 1e9);
  LLB_LOG_INFO("request_done", "id=%s prompt_tokens=%lld completion_tokens=%lld e2e_ms=%.1f", c->resp.id,
               (long long)prompt, (long long)c->resp.completion_tokens, (double)(now - c->t_start_ns) / 1e6);
  call_free(c);
}

/* ---- replies (loop thread) ---------------------------------------------------------- */

static void tokenize_reply(struct api_server_actor *a, struct evhttp_request *req, const struct api_server_tokenize *t,
                           const struct llb_request_output *ro) {
  if (ro->max_model_len > 0) a->max_model_len = ro->max_model_len;
  struct api_server_buf b = {0};
  api_server_http_send_rendered(a->metrics, req, api_server_tokenize_render(t, ro, a->model_name, (int64_t)time(NULL), &b), &b);
  api_server_buf_free(&b);
}

static void embeddings_reply(struct api_server_actor *a, struct evhttp_request *req, const struct api_server_embeddings *e,
                             const char *id) {
  struct api_server_buf b = {0};
  api_server_http_send_rendered(a->metrics, req, api_server_embeddings_render(e, id, (int64_t)time(NULL), &b), &b);
  api_server_buf_free(&b);
}

/* ---- outputs (loop thread) ---------------------------------------------------------- */

static void start_stream(struct api_server_call *c) {
  struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
  evhttp_add_header(h, "Content-Type", "text/event-stream");
  evhttp_add_header(h, "Cache-Control", "no-cache");
  evhttp_send_reply_start(c->req, 200, "OK");
  c->headers_sent = true;
}

/* /tokenize, /detokenize or /v1/models/{id} (c->tok set), not completions or chat. */
static bool is_tokenize_call(const struct api_server_call *c) { return c->tok.endpoint >= API_SERVER_ENDPOINT_TOKENIZE; }

static void handle_output(struct api_server_actor *a, struct api_server_sub *s, const struct llb_request_output *ro) {
  struct api_server_call *c = s->call;
  bool first = !s->engine_id[0];
  if (first) snprintf(s->engine_id, sizeof s->engine_id, "%s", ro->request_id.data);
  s->t_last_heard_ns = llb_now_ns();
  if (c->held) { /* refused, the answer held: the other prompts' outputs (aborted) are dropped */
    if (ro->finished || ro->error.code != 0) s->finished = true;
    return;
  }
  if (c->client_gone) {
    /* The client left before this request's first output: abort it now. */
    if (!s->finished && !ro->finished) publish_abort(a, s);
    s->finished = true;
    if (all_subs_settled(c)) call_free(c);
    return;
  }
  if (ro->error.code == LLB_STATUS_STATE_LOST && api_server_resend_state_lost(&a->resend, c, s)) {
    arm_timer(c);
    return; /* the same seeded request again: its api_server_delta forwards only what the client lacks */
  }
  if (ro->error.code != 0) {
    struct api_server_error e;
    api_server_error_from_status(ro->error.code, ro->error.message.data, ro->error.field.data, &e);
    api_server_structured_map_error(&c->parsed, &e);
    api_server_images_map_error(&c->parsed, &e);
    if (c->parsed.responses) api_server_responses_map_error(&e);
    e.retry_after_s = (ro->error.retry_after_ms + 999) / 1000; /* a per-tenant rate says when */
    if (is_tokenize_call(c)) api_server_tokenize_map_error(&c->tok, &e);
    s->finished = true;
    call_fail_or_hold(c, &e);
    return;
  }
  if (c->emb) { /* /v1/embeddings: one FINAL_ONLY output per input, answered when all are in */
    if (ro->finished) s->finished = true;
    llb_status est = api_server_embeddings_add_output(c->emb, s->prompt_index, ro);
    if (est != LLB_STATUS_OK) {
      struct api_server_error e;
      api_server_error_set(&e, 500, NULL, "%s", llb_err_last());
      call_fail(c, &e);
    } else if (!api_server_embeddings_done(c->emb)) {
      arm_timer(c);
    } else {
      struct evhttp_request *req = c->req;
      detach_http(c);
      embeddings_reply(a, req, c->emb, c->resp.id);
      call_succeed(c);
    }
    return;
  }
  if (is_tokenize_call(c)) { /* one reply answers it */
    s->finished = true;
    struct evhttp_request *req = c->req;
    detach_http(c);
    tokenize_reply(a, req, &c->tok, ro);
    call_free(c);
    return;
  }
  /* An output processor that restarted repeats a completion from its start: keep the rest. */
  struct llb_request_output trimmed = *ro;
  struct llb_completion_output *cs = llb_arena_alloc(&a->arena, (size_t)(ro->num_outputs > 0 ? ro->num_outputs : 1) * sizeof *cs,
                                                     _Alignof(struct llb_completion_output));
  if (cs) {
    api_server_delta_apply(&s->delta, &trimmed, cs);
    ro = &trimmed;
  }
  int64_t now = llb_now_ns();
  int64_t before = c->resp.completion_tokens;
  struct api_server_buf b = {0};
  llb_status st;
  struct api_server_responses *rq = c->parsed.responses;
  if (c->parsed.stream) {
    if (!c->headers_sent) start_stream(c);
    st = rq ? api_server_responses_stream_output(&c->resp, rq, ro, &b) : api_server_response_stream_output(&c->resp, s->prompt_index, ro, &b);
  } else {
    st = api_server_response_add_output(&c->resp, s->prompt_index, ro);
  }
  int64_t added = c->resp.completion_tokens - before;
  if (added > 0) {
    if (c->t_last_token_ns) /* one sample per token gap: `added` tokens came after this gap */
      api_server_metrics_observe_itl(c->a->metrics, (double)(now - c->t_last_token_ns) / 1e9 / (double)added, added);
    else if (added > 1) /* tokens that came with the first one */
      api_server_metrics_observe_itl(c->a->metrics, 0.0, added - 1);
    if (!c->t_first_token_ns) c->t_first_token_ns = now;
    c->t_last_token_ns = now;
    c->gen_tokens += added;
  }
  if (ro->finished) s->finished = true;
  if (st != LLB_STATUS_OK) {
    api_server_buf_free(&b);
    struct api_server_error e;
    api_server_error_set(&e, 500, NULL, "could not render the response: %s", llb_err_last());
    call_fail(c, &e);
    return;
  }
  arm_timer(c);
  if (!api_server_response_done(&c->resp)) {
    write_chunk(c, &b);
    api_server_buf_free(&b);
    return;
  }
  struct evhttp_request *req = c->req;
  detach_http(c);
  if (c->parsed.stream) {
    st = rq ? api_server_responses_stream_end(&c->resp, rq, &b) : api_server_response_stream_end(&c->resp, &b);
    c->req = req;
    write_chunk(c, &b);
    c->req = NULL;
    evhttp_send_reply_end(req);
  } else {
    api_server_http_send_rendered(a->metrics, req, rq ? api_server_responses_render(&c->resp, rq, &b) : api_server_response_render(&c->resp, &b), &b);
  }
  api_server_buf_free(&b);
  call_succeed(c);
}

/* One item of the reply inbox (inbox.h). */
static void on_inbox_item(const struct api_server_inbox_item *it, void *user) {
  struct api_server_actor *a = user;
  struct api_server_sub *s = api_server_sub_table_find(a->subs, it->seq);
  if (!s || s->finished) return; /* a late output of a request already answered */
  struct api_server_call *c = s->call;
  if (it->no_responders && !c->client_gone && api_server_resend_schedule(a->bus, a->base, s)) return;
  if (it->no_responders) {
    struct api_server_error e;
    api_server_error_set(&e, 503, NULL, "no input processor is serving %s.generate.%s (is the engine running, "
                  "and the tenant served?)", bus_prefix(a->bus), c->tenant);
    s->finished = true;
    if (c->client_gone) {
      if (all_subs_settled(c)) call_free(c);
      return;
    }
    call_fail(c, &e);
    return;
  }
  llb_arena_reset(&a->arena);
  struct llb_request_output ro;
  llb_status st = llb_request_output_decode(it->data, it->len, &a->arena, &ro);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_WARN("output_malformed", "seq=%" PRIu64 " bytes=%zu error=\"%s\"", it->seq, it->len, llb_err_last());
    if (c->client_gone) return;
    struct api_server_error e;
    api_server_error_set(&e, 500, NULL, "the engine sent a malformed RequestOutput: %s", llb_err_last());
    call_fail(c, &e);
    return;
  }
  handle_output(a, s, &ro);
}

/* ---- HTTP handlers (loop thread) ---------------------------------------------------- */

static void on_close(struct evhttp_connection *conn, void *arg) {
  (void)conn;
  struct api_server_call *c = arg;
  /* When evhttp itself failed the connection (EOF, write error, timeout) it detached our
   * request (no connection) and leaves freeing it to us; otherwise it frees it after this
   * callback. */
  struct evhttp_request *orphan = c->req && !evhttp_request_get_connection(c->req) ? c->req : NULL;
  LLB_LOG_INFO("client_disconnected", "id=%s", c->resp.id);
  c->req = NULL;
  c->conn = NULL;
  c->client_gone = true;
  abort_running(c);
  api_server_metrics_request_failed(c->a->metrics, 499);
  if (all_subs_settled(c)) call_free(c);
  if (orphan) evhttp_request_free(orphan);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_server_call *c = arg;
  if (c->held && !c->client_gone) { /* the hold is over: the refusal goes out */
    struct api_server_error e = *c->held;
    unhold(c);
    call_fail(c, &e);
    return;
  }
  if (c->client_gone) {
    /* Nobody waits and no engine id arrived to abort: give up on those. */
    for (int32_t i = 0; i < c->num_subs; i++) c->subs[i].finished = true;
    call_free(c);
    return;
  }
  bool any = false;
  for (int32_t i = 0; i < c->num_subs; i++) any |= c->subs[i].engine_id[0] != '\0';
  struct api_server_error e;
  api_server_error_set(&e, 503, NULL, any ? "the engine sent no output for %lld s" : "no engine answered within %lld s",
                (long long)c->a->o.first_output_timeout_s);
  for (int32_t i = 0; i < c->num_subs; i++)
    if (!c->subs[i].engine_id[0]) c->subs[i].finished = true;
  call_fail(c, &e);
}

/* libevent 2.1 does not read from a connection while its request is being answered, so a
 * client that leaves before anything is written goes unnoticed until the reply: peek at the
 * socket instead. EOF or an error frees the connection, whose close callback aborts. */
static void on_probe(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_server_call *c = arg;
  struct api_server_actor *a = c->a;
  if (!c->held && api_server_resend_poll(&a->resend, c, api_server_peer_beats_ip_beat_ns(a->peers), api_server_peer_beats_op_restart_ns(a->peers),
                      llb_now_ns()) > 0)
    arm_timer(c);
  if (!c->conn) return;
  struct bufferevent *bev = evhttp_connection_get_bufferevent(c->conn);
  evutil_socket_t s = bev ? bufferevent_getfd(bev) : -1;
  if (s < 0) return;
  /* A stream the engine keeps waiting (a restarted actor being replaced) gets an SSE comment
   * now and then, so that evhttp's inactivity timeout does not cut it silently. */
  if (c->headers_sent && c->req && llb_now_ns() - c->t_last_write_ns > API_SERVER_SSE_KEEPALIVE_NS) {
    const struct api_server_buf ka = {.data = (char *)": keep-alive\n\n", .len = 14};
    write_chunk(c, &ka);
  }
  char byte;
  ssize_t n = recv(s, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    evhttp_connection_free(c->conn); /* runs on_close, which may free `c` */
}

static void make_id(struct api_server_actor *a, enum api_server_endpoint ep, char *buf, size_t cap) {
  a->id_counter++;
  const char *kind = ep == API_SERVER_ENDPOINT_CHAT ? "chatcmpl" : ep == API_SERVER_ENDPOINT_COMPLETIONS ? "cmpl"
                     : ep == API_SERVER_ENDPOINT_EMBEDDINGS ? "embd" : ep == API_SERVER_ENDPOINT_RESPONSES ? "resp" : "tok";
  snprintf(buf, cap, "%s%c%016" PRIx64 "%08" PRIx64, kind, ep == API_SERVER_ENDPOINT_RESPONSES ? '_' : '-', a->id_salt,
           a->id_counter);
}

/* GET /v1/models: the served names, then the LoRA adapters the tenant may use (vLLM's ModelCard:
 * parent = the base model's id). */
static void route_models(struct api_server_actor *a, struct evhttp_request *req, const char *tenant) {
  static char loras[LORA_REGISTRY_MAX_LIST][LLB_LORA_NAME_MAX + 1]; /* loop thread only */
  const int32_t n = a->o.loras ? lora_registry_list(a->o.loras, tenant, llb_now_ns(), loras, LORA_REGISTRY_MAX_LIST) : 0;
  api_server_route_models(req, a->model_names, a->num_model_names, a->max_model_len, loras, n < LORA_REGISTRY_MAX_LIST ? n : LORA_REGISTRY_MAX_LIST);
}

/* GET /v1/models/{id} of a LoRA adapter the tenant may use: its card (parent = the base's id),
 * answered here. False when id is no such adapter (the engine answers, 404 for an unknown id). */
static bool route_lora_card(struct api_server_actor *a, struct evhttp_request *req, const char *id, const char *tenant) {
  if (!a->o.loras || lora_registry_lookup(a->o.loras, id, tenant, llb_now_ns()) <= 0) return false;
  struct api_server_buf b = {0};
  if (api_server_model_object_render(id, a->model_name, (int64_t)time(NULL), a->max_model_len, &b) == LLB_STATUS_OK)
    api_server_http_send_body(req, 200, "application/json", b.data, b.len);
  else
    evhttp_send_error(req, 500, NULL);
  api_server_buf_free(&b);
  return true;
}

/* What every call starts with: its actor, tenant, body length, start time and span. */
static void call_init(struct api_server_call *c, struct api_server_actor *a, struct evhttp_request *req,
                      const char *tenant, size_t body_bytes) {
  c->a = a;
  c->tenant = tenant;
  c->body_bytes = body_bytes;
  c->t_start_ns = llb_now_ns();
  api_server_http_span_begin(&c->span, req);
}

/* c answers req from now on: on the actor's list of calls and counted in flight (call_free
 * undoes both). */
static void call_attach(struct api_server_call *c, struct evhttp_request *req) {
  struct api_server_actor *a = c->a;
  c->req = req;
  c->conn = evhttp_request_get_connection(req);
  c->next = a->calls;
  if (a->calls) a->calls->prev = c;
  a->calls = c;
  atomic_fetch_add(&a->inflight, 1);
  api_server_metrics_request_started(a->metrics);
}

/* A new call for `req`: its body parsed as endpoint ep wants, its subs allocated (one per
 * prompt or input), its response begun. NULL with e set (400/404 from the parser, 500 out of
 * memory). */
static struct api_server_call *call_new(struct api_server_actor *a, struct evhttp_request *req, enum api_server_endpoint ep,
                                 const char *model, const char *tenant, struct api_server_error *e) {
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  size_t len = evbuffer_get_length(in);
  const char *body = len ? (const char *)evbuffer_pullup(in, (ev_ssize_t)len) : "";
  struct api_server_call *c = calloc(1, sizeof *c);
  if (!c) {
    api_server_error_set(e, 500, NULL, "out of memory");
    return NULL;
  }
  call_init(c, a, req, tenant, len);
  struct api_server_parse_options po = {.served_model = a->model_name, .model_aliases = a->model_names + 1,
                                .num_model_aliases = a->num_model_names - 1, .tool_parser = a->o.tool_call_parser,
                                .no_auto_tool_choice = !a->o.enable_auto_tool_choice,
                                .reasoning_parser = a->o.reasoning_parser,
                                .allowed_local_media_path = a->local_media_dir, .loras = a->o.loras,
                                .tenant = tenant};
  const bool emb = ep == API_SERVER_ENDPOINT_EMBEDDINGS, tok = ep >= API_SERVER_ENDPOINT_TOKENIZE && ep <= API_SERVER_ENDPOINT_MODEL_INFO;
  if (emb && !(c->emb = calloc(1, sizeof *c->emb))) api_server_error_set(e, 500, NULL, "out of memory");
  if ((emb && !c->emb) ||
      (emb ? api_server_embeddings_parse(body, len, &po, c->emb, e) != LLB_STATUS_OK
       : tok ? api_server_tokenize_parse(ep, body, len, model, &po, &c->tok, e) != LLB_STATUS_OK
             : api_server_request_parse(ep, body, len, &po, &c->parsed, e) != LLB_STATUS_OK)) {
    free(c->emb);
    free(c);
    return NULL;
  }
  char id[64];
  make_id(a, ep, id, sizeof id);
  c->num_subs = ep == API_SERVER_ENDPOINT_COMPLETIONS ? c->parsed.num_prompts : emb ? c->emb->req.num_prompts : 1;
  c->subs = calloc((size_t)c->num_subs, sizeof *c->subs);
  snprintf(c->resp.id, sizeof c->resp.id, "%s", id);
  if (!c->subs || (!tok && !emb && api_server_response_init(&c->resp, &c->parsed, id, (int64_t)time(NULL)) != LLB_STATUS_OK)) {
    free(c->subs);
    api_server_embeddings_free(c->emb);
    free(c->emb);
    api_server_request_free(&c->parsed);
    api_server_tokenize_free(&c->tok);
    free(c);
    api_server_error_set(e, 500, NULL, "out of memory");
    return NULL;
  }
  return c;
}

/* Publishes sub i of c: its GenerateRequest (request id = the call's id, "-i" with several
 * subs) on the tenant's generate or tokenize subject, reply <inbox>.<seq>; keeps a copy to
 * send again (api_server_resend.h). */
static llb_status publish_sub(struct api_server_actor *a, struct api_server_call *c, int32_t i) {
  struct api_server_sub *s = &c->subs[i];
  const bool tok = is_tokenize_call(c);
  s->t_last_heard_ns = llb_now_ns();
  char rid[96], reply[192], subject[BUS_SUBJECT_MAX];
  if (c->num_subs > 1) snprintf(rid, sizeof rid, "%s-%d", c->resp.id, i);
  else snprintf(rid, sizeof rid, "%s", c->resp.id);
  llb_status st = bus_subject_reply(a->inbox_subject, s->seq, reply, sizeof reply);
  if (st == LLB_STATUS_OK)
    st = (tok ? bus_subject_tokenize : bus_subject_generate)(bus_prefix(a->bus), c->tenant, subject, sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  struct llb_generate_request gr;
  if (tok) api_server_tokenize_to_generate(&c->tok, rid, &gr);
  else if (c->emb) api_server_embeddings_to_generate(c->emb, i, rid, &gr);
  else api_server_request_to_generate(&c->parsed, i, rid, &gr);
  st = llb_generate_request_encode_buf(&gr, &a->enc);
  if (st != LLB_STATUS_OK) return st;
  struct bus_out_msg m = {.subject = subject, .reply = reply, .data = a->enc.data, .len = a->enc.len,
                          .trace = &c->span.ctx};
  st = bus_publish_msg(a->bus, &m);
  if (st == LLB_STATUS_OK && api_server_resend_keep(s, m.subject, reply, m.data, m.len) != LLB_STATUS_OK)
    LLB_LOG_WARN("generate_not_resendable", "seq=%" PRIu64 " reason=out_of_memory", s->seq);
  return st;
}

/* A costly body the api server refused itself (the parser's 4xx for a body of
 * API_SERVER_GATE_COSTLY_BODY_BYTES or more: it was read and parsed) is held as
 * call_fail_or_hold holds the engine's refusal: in a call of no prompts that only waits out the
 * hold (on_timer answers it, on_close frees it). False: not held (no limits for the tenant, its
 * holds full, out of memory): answer at once. */
static bool hold_parse_refusal(struct api_server_actor *a, struct evhttp_request *req, const char *tenant, size_t len,
                               const struct api_server_error *e) {
  int64_t ms = 0;
  const int32_t ticket =
      a->gate && refusal_is_held(e, len) ? api_server_gate_hold(a->gate, tenant, e->retry_after_s, &ms) : -1;
  if (ticket < 0) return false;
  struct api_server_call *c = calloc(1, sizeof *c);
  if (c) {
    c->a = a;
    c->timer = evtimer_new(a->base, on_timer, c);
  }
  if (!c || !c->timer) {
    free(c);
    api_server_gate_release(a->gate, ticket);
    return false;
  }
  if (!start_hold(c, e, ticket, ms)) { /* it gave the ticket back */
    event_free(c->timer);
    free(c);
    return false;
  }
  call_init(c, a, req, tenant, len);
  call_attach(c, req);
  evhttp_connection_set_closecb(c->conn, on_close, c);
  return true;
}

/* Completions and chat (ep), or a tokenize call (/tokenize, /detokenize, /v1/models/{id}:
 * one GenerateRequest on the tokenize subject, `model` = the path's id for the last). */
static void handle_generate(struct api_server_actor *a, struct evhttp_request *req, enum api_server_endpoint ep,
                            const char *model, const char *tenant) {
  struct api_server_error e;
  size_t len = evbuffer_get_length(evhttp_request_get_input_buffer(req));
  if (len > a->o.max_body_bytes) {
    api_server_error_set(&e, 413, NULL, "the request body is %zu bytes, over the limit of %zu bytes", len, a->o.max_body_bytes);
    api_server_http_send_error(a->metrics, req, &e);
    return;
  }
  if (atomic_load(&a->inflight) >= a->o.max_concurrent) {
    api_server_error_set(&e, 429, NULL, "too many requests in flight (%d); retry later", a->o.max_concurrent);
    api_server_http_send_error(a->metrics, req, &e);
    return;
  }
  struct api_server_call *c = call_new(a, req, ep, model, tenant, &e);
  if (!c) {
    if (!hold_parse_refusal(a, req, tenant, len, &e)) api_server_http_send_error(a->metrics, req, &e);
    return;
  }
  call_attach(c, req);
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_server_sub *s = &c->subs[i];
    s->call = c;
    s->prompt_index = i;
    if (api_server_sub_table_add(a->subs, s) != LLB_STATUS_OK) {
      api_server_error_set(&e, 503, NULL, "out of memory; retry later");
      for (int32_t j = 0; j < c->num_subs; j++) c->subs[j].finished = true;
      call_fail(c, &e);
      return;
    }
  }
  evhttp_connection_set_closecb(c->conn, on_close, c);
  c->timer = evtimer_new(a->base, on_timer, c);
  arm_timer(c);
  c->reconnects = bus_num_reconnects(a->bus);
  if (!is_tokenize_call(c) && !c->parsed.sampling_params.has_seed) {
    /* Drawn here rather than by the input processor, so that a request sent again after a
     * reconnect (api_server_resend_after_reconnect) repeats the same tokens. */
    c->parsed.sampling_params.seed = random_seed(a);
    c->parsed.sampling_params.has_seed = true;
  }
  c->probe = event_new(a->base, -1, EV_PERSIST, on_probe, c);
  if (c->probe) {
    struct timeval tv = {.tv_sec = 0, .tv_usec = 250 * 1000};
    event_add(c->probe, &tv);
  }
  for (int32_t i = 0; i < c->num_subs; i++) {
    llb_status st = publish_sub(a, c, i);
    if (st == LLB_STATUS_OK) continue;
    if (st == LLB_STATUS_TOO_LARGE)
      api_server_error_set(&e, 413, NULL, "the request is too large for the bus: %s", llb_err_last());
    else if (st == LLB_STATUS_INVALID_ARGUMENT)
      api_server_error_set(&e, 400, NULL, "%s", llb_err_last());
    else
      api_server_error_set(&e, 503, NULL, "cannot reach the engine: %s", llb_err_last());
    for (int32_t j = i; j < c->num_subs; j++) c->subs[j].finished = true;
    call_fail(c, &e);
    return;
  }
}

static void on_request(struct evhttp_request *req, void *arg) {
  struct api_server_actor *a = arg;
  api_server_http_listener_request_read(a->listener, req);
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
  enum evhttp_cmd_type method = evhttp_request_get_command(req);
  struct api_server_error e;
  if (!path) path = "";
  bool post = method == EVHTTP_REQ_POST, get = method == EVHTTP_REQ_GET;
  struct {
    const char *path;
    bool is_post;
  } routes[] = {{"/v1/completions", true}, {"/v1/chat/completions", true}, {"/v1/models", false},
                {"/health", false},        {"/metrics", false},            {"/tokenize", true},
                {"/detokenize", true},     {"/version", false},            {"/v1/models/", false},
                {"/v1/embeddings", true},  {"/v1/responses", true},        {"/v1/load_lora_adapter", true},
                {"/v1/unload_lora_adapter", true}};
  api_server_http_echo_request_id(req);
  if (!api_server_http_cors(&a->cors, req, method)) return; /* a preflight, answered before authentication */
  const char *tenant = a->tenant;
  if (a->o.api_keys) {
    tenant = api_server_keys_tenant_of(a->o.api_keys, evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization"));
    if (!tenant) {
      api_server_http_send_unauthorized(a->metrics, req);
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
  if (route >= 11 && !a->lora_admin) route = -1; /* without --lora-dir, as vLLM without runtime updating */
  if (route < 0) {
    api_server_error_set(&e, 404, NULL, "no route %.200s", path);
    api_server_http_send_error(a->metrics, req, &e);
    return;
  }
  if (routes[route].is_post ? !post : !get) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", routes[route].is_post ? "POST" : "GET");
    api_server_error_set(&e, 405, NULL, "%s takes %s", routes[route].path, routes[route].is_post ? "POST" : "GET");
    api_server_http_send_error(a->metrics, req, &e);
    return;
  }
  if (a->stopped) {
    api_server_error_set(&e, 503, NULL, "the server is shutting down");
    api_server_http_send_error(a->metrics, req, &e);
    return;
  }
  switch (route) {
    case 0: handle_generate(a, req, API_SERVER_ENDPOINT_COMPLETIONS, NULL, tenant); break;
    case 1: handle_generate(a, req, API_SERVER_ENDPOINT_CHAT, NULL, tenant); break;
    case 2: route_models(a, req, tenant); break;
    case 3: api_server_peer_beats_route_health(a->peers, req); break;
    case 4: api_server_route_metrics(req, a->merge, api_server_metrics_registry(a->metrics), a->o.registry); break;
    case 5: handle_generate(a, req, API_SERVER_ENDPOINT_TOKENIZE, NULL, tenant); break;
    case 6: handle_generate(a, req, API_SERVER_ENDPOINT_DETOKENIZE, NULL, tenant); break;
    case 7: api_server_route_version(req); break;
    case 9: handle_generate(a, req, API_SERVER_ENDPOINT_EMBEDDINGS, NULL, tenant); break;
    case 10: handle_generate(a, req, API_SERVER_ENDPOINT_RESPONSES, NULL, tenant); break;
    case 11:
    case 12: api_server_lora_admin_route(a->lora_admin, req, route == 11, tenant); break;
    default:
      if (!route_lora_card(a, req, model_id, tenant)) handle_generate(a, req, API_SERVER_ENDPOINT_MODEL_INFO, model_id, tenant);
      break;
  }
}

/* ---- life cycle ---------------------------------------------------------------------- */

/* On the loop thread: the inbox's wake event and the HTTP listener. */
static void loop_setup(struct api_server_loop_call *lc, void *arg) {
  struct api_server_actor *a = arg;
  llb_status st = api_server_inbox_bind(a->inbox, a->base);
  if (st == LLB_STATUS_OK && a->lora_admin) st = api_server_lora_admin_bind(a->lora_admin, a->base);
  if (st != LLB_STATUS_OK) {
    api_server_loop_call_done(lc, st);
    return;
  }
  const struct api_server_http_listener_options lo = {.host = a->http_host, .port = a->http_port,
                                               .max_body_bytes = a->o.max_body_bytes,
                                               .request_timeout_s = a->o.request_timeout_s,
                                               .max_connections = a->o.max_connections,
                                               .gate = a->gate ? api_server_gate_check : NULL,
                                               .release = a->gate ? api_server_gate_release : NULL, .gate_user = a->gate,
                                               .on_request = on_request, .arg = a};
  st = api_server_http_listener_create(a->base, &lo, &a->listener);
  if (st == LLB_STATUS_OK) a->bound_port = api_server_http_listener_port(a->listener);
  else api_server_inbox_unbind(a->inbox);
  api_server_loop_call_done(lc, st);
}

/* Second half of the teardown, once the last replies had a moment to flush. */
static void loop_free_http(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_server_actor *a = arg;
  api_server_http_listener_destroy(a->listener);
  a->listener = NULL;
  api_server_inbox_unbind(a->inbox);
  api_server_lora_admin_unbind(a->lora_admin);
  api_server_loop_call_done(a->loop, LLB_STATUS_OK);
}

static void loop_teardown(struct api_server_loop_call *lc, void *arg) {
  (void)lc;
  struct api_server_actor *a = arg;
  a->stopped = true;
  api_server_inbox_drain(a->inbox); /* deliver what already arrived */
  struct api_server_error e;
  api_server_error_set(&e, 503, NULL, "the server is shutting down");
  while (a->calls) {
    struct api_server_call *c = a->calls;
    /* Subs without an engine id cannot be aborted: settle them so call_fail frees the call. */
    for (int32_t i = 0; i < c->num_subs; i++)
      if (!c->subs[i].engine_id[0]) c->subs[i].finished = true;
    call_fail(c, &e);
  }
  struct timeval flush = {.tv_sec = 0, .tv_usec = 300 * 1000};
  if (event_base_once(a->base, -1, EV_TIMEOUT, loop_free_http, a, &flush) != 0) loop_free_http(-1, 0, a);
}

/* The options' values with their defaults, the media directory, CORS and the address. */
static llb_status take_options(struct api_server_actor *a, const struct api_server_actor_options *o) {
  a->o = *o;
  if (!a->o.max_body_bytes) a->o.max_body_bytes = 1024 * 1024;
  if (a->o.request_timeout_s <= 0) a->o.request_timeout_s = 10;
  if (a->o.first_output_timeout_s <= 0) a->o.first_output_timeout_s = 60;
  if (a->o.max_concurrent <= 0) a->o.max_concurrent = 256;
  if (a->o.max_connections <= 0) a->o.max_connections = API_SERVER_DEFAULT_MAX_CONNECTIONS;
  if (a->o.health_window_ms <= 0) a->o.health_window_ms = 10000;
  snprintf(a->model_name, sizeof a->model_name, "%s", o->model_name);
  a->model_names[a->num_model_names++] = a->model_name;
  if (o->num_model_aliases > API_SERVER_MAX_MODEL_ALIASES)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: at most %d served model names", API_SERVER_MAX_MODEL_ALIASES + 1);
  for (int i = 0; i < o->num_model_aliases; i++) {
    if (!o->model_aliases[i] || !*o->model_aliases[i] || strlen(o->model_aliases[i]) >= API_SERVER_MAX_MODEL_BYTES)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: a served model name must be 1..%d bytes",
                      API_SERVER_MAX_MODEL_BYTES - 1);
    snprintf(a->model_alias_buf[i], sizeof a->model_alias_buf[i], "%s", o->model_aliases[i]);
    a->model_names[a->num_model_names++] = a->model_alias_buf[i];
  }
  a->o.model_aliases = NULL; /* borrowed strings: the copies above are used */
  snprintf(a->tenant, sizeof a->tenant, "%s", o->tenant ? o->tenant : BUS_DEFAULT_TENANT);
  if (o->allowed_local_media_path && o->allowed_local_media_path[0]) {
    char real[PATH_MAX];
    if (!realpath(o->allowed_local_media_path, real) || !(a->local_media_dir = strdup(real)))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allowed-local-media-path %s: %s", o->allowed_local_media_path,
                      strerror(errno));
  }
  llb_status st = api_server_cors_parse(o->cors_allowed_origins, o->cors_allowed_methods, o->cors_allowed_headers,
                                 o->cors_allow_credentials, &a->cors);
  if (st == LLB_STATUS_OK && o->api_keys)
    st = api_server_gate_create(o->api_keys, o->request_rates, o->num_request_rates, &a->gate);
  a->o.request_rates = NULL; /* copied by the gate */
  if (st == LLB_STATUS_OK)
    st = api_server_parse_host_port(o->http_addr ? o->http_addr : "127.0.0.1:8000", a->http_host, sizeof a->http_host,
                             &a->http_port);
  /* wherever the address came from (--http, --host/--port): reachable from other machines with
   * no key at all is worth a line at start */
  if (st == LLB_STATUS_OK && !o->api_keys && !api_server_host_is_loopback(a->http_host))
    LLB_LOG_WARN("http_open_without_api_key", "host=%s port=%d: every client that reaches this address may use "
                 "the server; give --api-key or --api-keys, or listen on 127.0.0.1", a->http_host, a->http_port);
  return st;
}

llb_status api_server_actor_create(const struct api_server_actor_options *o,
                                   struct api_server_actor **out) {
  if (!o || !o->model_name || !*o->model_name || strlen(o->model_name) >= API_SERVER_MAX_MODEL_BYTES)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: --model-name must be 1..%d bytes", API_SERVER_MAX_MODEL_BYTES - 1);
  struct api_server_actor *a = calloc(1, sizeof *a);
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: out of memory");
  if (getrandom(&a->id_salt, sizeof a->id_salt, 0) != (ssize_t)sizeof a->id_salt)
    a->id_salt = (uint64_t)llb_wall_ns() ^ ((uint64_t)getpid() << 32);
  llb_arena_init(&a->arena, NULL, 0);
  llb_status st = take_options(a, o);
  if (st == LLB_STATUS_OK) st = api_server_loop_call_create(&a->loop);
  if (st == LLB_STATUS_OK) st = api_server_inbox_create(on_inbox_item, a, &a->inbox);
  if (st == LLB_STATUS_OK) st = api_server_sub_table_create(&a->subs);
  if (st == LLB_STATUS_OK) st = api_server_metrics_create(a->model_name, &a->metrics);
  if (st == LLB_STATUS_OK) st = llb_metrics_merge_create(a->o.health_window_ms, &a->merge);
  if (st == LLB_STATUS_OK)
    st = api_server_peer_beats_create(o->health_actors ? o->health_actors : API_SERVER_ACTOR_DEFAULT_HEALTH_ACTORS,
                               a->o.health_window_ms, a->metrics, &a->peers);
  if (st == LLB_STATUS_OK && o->lora_dir && !o->loras)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: --lora-dir needs the LoRA registry");
  if (st == LLB_STATUS_OK && o->lora_dir) st = api_server_lora_admin_create(o->lora_dir, o->loras, a->o.health_window_ms, a->metrics,
                                                           &a->lora_admin);
  if (st != LLB_STATUS_OK) {
    api_server_actor_destroy(a);
    return st;
  }
  *out = a;
  return LLB_STATUS_OK;
}

/* The tenant's subjects fit (the generate one is logged); the inbox subject. */
static llb_status make_subjects(struct api_server_actor *a, char *generate, size_t cap) {
  const char *prefix = bus_prefix(a->bus);
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_generate(prefix, a->tenant, generate, cap);
  if (st == LLB_STATUS_OK) st = bus_subject_abort(prefix, a->tenant, subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = bus_subject_tokenize(prefix, a->tenant, subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = bus_new_inbox(a->bus, a->inbox_subject, sizeof a->inbox_subject);
  return st;
}

/* Delivery thread: <prefix>.health.<actor>.<instance>.metrics, an actor's Prometheus text
 * (bus_metrics_publish_start). Api servers' own are left out: each serves its own series. */
static void on_actor_metrics(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct api_server_actor *a = user;
  const size_t skip = strlen(bus_prefix(bus)) + strlen(".health.");
  char actor[64], instance[96];
  if (strlen(msg->subject) <= skip ||
      sscanf(msg->subject + skip, "%63[^.].%95[^.].metrics", actor, instance) != 2 || !strcmp(actor, "api_server"))
    return;
  if (llb_metrics_merge_put(a->merge, actor, instance, (const char *)msg->data, msg->len, llb_now_ns()) != LLB_STATUS_OK)
    LLB_LOG_DEBUG("actor_metrics_refused", "subject=%s bytes=%zu", msg->subject, msg->len);
}

llb_status api_server_actor_start(struct api_server_actor *a, struct bus *bus) {
  a->bus = bus;
  a->base = bus_event_base(bus);
  a->resend = (struct api_server_resend_ctx){.bus = bus, .inbox = a->inbox_subject, .table = a->subs};
  char generate[BUS_SUBJECT_MAX], subj[BUS_SUBJECT_MAX];
  llb_status st = make_subjects(a, generate, sizeof generate);
  if (st == LLB_STATUS_OK && a->lora_admin) st = api_server_lora_admin_start(a->lora_admin, bus);
  if (st == LLB_STATUS_OK) st = api_server_loop_call_run(a->loop, a->base, loop_setup, a);
  if (st != LLB_STATUS_OK) return st;
  st = bus_pattern_replies(a->inbox_subject, subj, sizeof subj);
  if (st == LLB_STATUS_OK) st = bus_subscribe_on_loop(bus, subj, NULL, api_server_inbox_on_msg, a->inbox, NULL);
  if (st == LLB_STATUS_OK) st = bus_pattern_engines(bus_prefix(bus), "stats", subj, sizeof subj);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, subj, NULL, api_server_peer_beats_on_stats, a->peers, NULL);
  if (st == LLB_STATUS_OK) st = bus_pattern_health(bus_prefix(bus), NULL, subj, sizeof subj);
  api_server_peer_beats_set_loras(a->peers, a->o.loras);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, subj, NULL, api_server_peer_beats_on_heartbeat, a->peers, NULL);
  if (st == LLB_STATUS_OK) st = bus_pattern_health_metrics(bus_prefix(bus), subj, sizeof subj);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, subj, NULL, on_actor_metrics, a, NULL);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("api_server_listening", "http=%s:%d model=%s generate=%s inbox=%s.*", a->http_host, a->bound_port,
               a->model_name, generate, a->inbox_subject);
  return LLB_STATUS_OK;
}

int api_server_actor_port(const struct api_server_actor *a) { return a ? a->bound_port : 0; }

void api_server_actor_stats(const struct api_server_actor *a, struct api_server_actor_stats *out) {
  struct api_server_actor *m = (struct api_server_actor *)a; /* atomics: loads only */
  *out = (struct api_server_actor_stats){.inflight = atomic_load(&m->inflight)};
}

void api_server_actor_stop(struct api_server_actor *a) {
  if (!a || !a->base || a->stopped || !a->listener) return;
  api_server_loop_call_run(a->loop, a->base, loop_teardown, a);
}

void api_server_actor_destroy(struct api_server_actor *a) {
  if (!a) return;
  api_server_inbox_destroy(a->inbox);
  api_server_lora_admin_destroy(a->lora_admin);
  api_server_sub_table_destroy(a->subs);
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->enc);
  api_server_peer_beats_destroy(a->peers);
  api_server_metrics_destroy(a->metrics);
  llb_metrics_merge_destroy(a->merge);
  api_server_loop_call_destroy(a->loop);
  free(a->local_media_dir);
  api_server_gate_destroy(a->gate);
  free(a);
}
