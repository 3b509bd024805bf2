/* Private to actors/api_server: the actor's state and the helpers shared by actor.c
 * (requests, outputs, routes), actor_setup.c (create, start, the loop's setup and teardown,
 * destroy) and api_resend.c. HTTP replies are http_reply.h, what is heard about the peers
 * peer_beats.h, both with their own arguments. Threading: see actor.h. */
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
#include "actors/api_server/http_reply.h"
#include "actors/api_server/peer_beats.h"
#include "bus/span.h"
#include "schemas/codec.h"

#define SUB_TABLE_SIZE 1024
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
  int64_t reconnect_seen_ns;        /* when a reconnect was seen whose resend waits, else 0 */
  struct event *timer;              /* first-output timeout */
  struct event *probe;              /* periodic check that the client is still there */
  struct api_call *prev, *next;     /* the actor's list */
  struct bus_span span;             /* "http": the request from arrival to the response's end */
};

struct api_actor {
  struct api_actor_options o;
  struct api_cors cors;             /* from the options (api_cors.h) */
  char http_host[128];
  int http_port, bound_port;
  char model_name[API_MAX_MODEL_BYTES];
  char *local_media_dir; /* realpath of --allowed-local-media-path, or NULL (owned) */
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
  struct api_peer_beats *peers; /* engine stats, heartbeats: /health, restarts seen */
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

#endif
