/* Private to actors/api_server/actor*.c: the actor's state and the helpers shared by
 * actor.c (requests, outputs, setup) and actor_routes.c (plain routes, error replies, the
 * stats and heartbeat handlers). Threading: see actor.h. */
#ifndef LLB_ACTORS_API_SERVER_ACTOR_INTERNAL_H
#define LLB_ACTORS_API_SERVER_ACTOR_INTERNAL_H

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/actor.h"
#include "actors/api_server/api_cors.h"
#include "actors/api_server/api_delta.h"
#include "actors/api_server/api_embeddings.h"
#include "actors/api_server/api_metrics.h"
#include "actors/api_server/api_request.h"
#include "actors/api_server/api_resend.h"
#include "actors/api_server/api_response.h"
#include "actors/api_server/api_tokenize.h"
#include "bus/span.h"
#include "schemas/codec.h"

#define SUB_TABLE_SIZE 1024
#define MAX_HEALTH_ACTORS 8
#define API_SSE_KEEPALIVE_NS 3000000000LL /* a stream silent this long gets ": keep-alive" */

/* One RequestOutput (or no-responders notice) handed from a NATS thread to the loop. */
struct inbox_item {
  struct inbox_item *next;
  uint64_t seq;
  bool no_responders;
  size_t len;
  uint8_t data[]; /* [len] */
};

struct api_call;

/* One GenerateRequest of a call (one prompt). */
struct api_sub {
  uint64_t seq;
  struct api_call *call;
  int32_t prompt_index;
  char engine_id[256];  /* RequestOutput.request_id, "" until the first output */
  bool finished;        /* final output seen, or aborted */
  struct api_sub *next; /* in the seq table bucket */
  struct api_resend resend; /* sent again while no input processor takes it (api_resend.h) */
  struct api_delta delta;   /* what was forwarded, for resync outputs (api_delta.h) */
  int64_t t_last_heard_ns;  /* llb_now_ns of its last output, or of its (re)send */
  int64_t op_restart_handled_ns; /* the output processor restart it was sent again for */
};

/* One HTTP request in flight. Lives on the loop thread. */
struct api_call {
  struct api_actor *a;
  struct evhttp_request *req;       /* NULL once the client went away */
  struct evhttp_connection *conn;   /* NULL once the client went away */
  struct api_request parsed;
  struct api_tokenize tok;          /* /tokenize, /detokenize, /v1/models/{id}: tok.endpoint set */
  struct api_response resp;
  struct api_embeddings *emb;       /* /v1/embeddings, else NULL */
  struct api_sub *subs;             /* [num_subs] */
  const char *tenant;               /* whose subjects: the key's tenant, or the actor's */
  int32_t num_subs;
  bool headers_sent, client_gone;
  int64_t t_start_ns, t_first_token_ns, t_last_token_ns;
  int64_t t_last_write_ns;          /* last chunk written to a stream (keep-alive comments) */
  int64_t gen_tokens;
  uint64_t reconnects;              /* bus_num_reconnects when its requests were (re)sent */
  struct event *timer;              /* first-output timeout */
  struct event *probe;              /* periodic check that the client is still there */
  struct api_call *prev, *next;     /* the actor's list */
  struct bus_span span;             /* "http": the request from arrival to the response's end */
};

#define API_MAX_OP_SEEN 16

struct health_entry {
  char actor[64];
  _Atomic int64_t last_ready_ns; /* llb_now_ns of the last ready heartbeat, 0 = never */
  _Atomic int64_t last_not_ready_ns; /* of the last heartbeat saying not ready (a scheduler
                                        recovering from a worker failure), 0 = never */
};

struct api_actor {
  struct api_actor_options o;
  struct api_cors cors;             /* from the options (api_cors.h) */
  char http_host[128];
  int http_port, bound_port;
  char model_name[API_MAX_MODEL_BYTES];
  char tenant[64];
  struct bus *bus;
  struct event_base *base;
  struct evhttp *http;
  struct http_deadlines *deadlines; /* whole-request read deadlines (slow loris) */
  struct event *wake;
  char inbox[128];
  char generate_subject[BUS_SUBJECT_MAX], abort_subject[BUS_SUBJECT_MAX], tokenize_subject[BUS_SUBJECT_MAX];
  int32_t max_model_len;            /* from the last tokenize reply (loop thread); 0 = unknown */
  pthread_mutex_t qmu;
  struct inbox_item *qhead, *qtail;
  pthread_mutex_t setup_mu;
  pthread_cond_t setup_cv;
  bool setup_done;
  llb_status setup_status;
  char setup_error[512];
  bool started, stopped;
  /* Loop-thread state. */
  struct api_sub *table[SUB_TABLE_SIZE];
  struct api_call *calls;
  uint64_t next_seq;
  uint64_t id_salt;
  uint64_t id_counter;
  struct llb_arena arena;
  struct llb_buf enc;
  struct api_metrics *metrics;
  atomic_int_fast64_t inflight;
  struct health_entry health[MAX_HEALTH_ACTORS];
  int num_health;
  /* Output processors seen in heartbeats (heartbeat delivery thread only): a key of
   * instance and pid each, with when it last beat. A key that appears after the first is an
   * output processor that restarted (or joined): op_restart_ns is set to when it was seen. */
  uint64_t op_keys[API_MAX_OP_SEEN];
  int64_t op_seen_ns[API_MAX_OP_SEEN];
  int num_op_keys;
  _Atomic int64_t op_restart_ns; /* llb_now_ns, 0 = none seen */
};

/* actor.c's handlers that actor_setup.c installs: HTTP requests, the inbox (NATS delivery
 * threads), the wake-up of the loop, and failing a call (teardown). */
void api_on_request(struct evhttp_request *req, void *arg);
void api_on_inbox(struct bus *bus, const struct bus_msg *msg, void *user);
void api_on_wake(evutil_socket_t fd, short what, void *arg);
void api_call_fail(struct api_call *c, const struct api_error *e);

/* The seq table: subs by the sequence number in their reply subject (loop thread). */
void api_table_add(struct api_actor *a, struct api_sub *s);
void api_table_remove(struct api_actor *a, struct api_sub *s);
/* Publishes an AbortRequest for s->engine_id on its call's tenant's abort subject (loop thread). */
void api_publish_abort(struct api_actor *a, const struct api_sub *s);
/* A random sampling seed (getrandom; falls back to the id salt and a counter). */
uint64_t api_random_seed(struct api_actor *a);

/* Sends `body[len]` with `status` and Content-Type `ctype` (loop thread). */
void api_http_send_body(struct evhttp_request *req, int status, const char *ctype, const char *body,
                        size_t len);
/* Sends `e` as OpenAI's error object and counts it in the metrics (loop thread). */
void api_http_send_error(struct api_actor *a, struct evhttp_request *req, const struct api_error *e);

/* 401 in OpenAI's shape (code invalid_api_key) with `WWW-Authenticate: Bearer` (RFC 6750):
 * a missing or unknown API key. Says nothing about which. */
void api_http_send_unauthorized(struct api_actor *a, struct evhttp_request *req);
/* Sends the rendered JSON `b` with 200 when render_status is OK, else a 500 error object
 * saying the response could not be rendered (loop thread). */
void api_http_send_rendered(struct api_actor *a, struct evhttp_request *req, llb_status render_status,
                            const struct api_buf *b);
/* GET /v1/models, /health, /metrics, /version (loop thread). */
void api_route_models(struct api_actor *a, struct evhttp_request *req);
void api_route_version(struct api_actor *a, struct evhttp_request *req);
/* Answers a /tokenize, /detokenize or /v1/models/{id} call with the input processor's reply
 * `ro` (no error in it); remembers its max_model_len (loop thread). */
void api_route_tokenize_reply(struct api_actor *a, struct evhttp_request *req, const struct api_tokenize *t,
                              const struct llb_request_output *ro);
/* Answers a /v1/embeddings call whose every input has its vector (loop thread). */
void api_route_embeddings_reply(struct api_actor *a, struct evhttp_request *req, const struct api_embeddings *e,
                                const char *id);
/* CORS (api_cors.h): adds the response's CORS headers; answers a preflight (200) or a refused
 * one (400) itself and returns false then; true: go on serving the request. */
bool api_http_cors(struct api_actor *a, struct evhttp_request *req, enum evhttp_cmd_type method);
/* Echoes a sane X-Request-Id header of `req` into its response headers. */
void api_http_echo_request_id(struct evhttp_request *req);
void api_route_health(struct api_actor *a, struct evhttp_request *req);
void api_route_metrics(struct api_actor *a, struct evhttp_request *req);
/* Bus handlers of <prefix>.engine.*.stats and <prefix>.health.*.* (delivery threads). */
void api_on_stats(struct bus *bus, const struct bus_msg *msg, void *user);
void api_on_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user);

#endif
