/* The api server's requests in flight, as plain structs that the actor (actor.c) and the
 * resend (api_server_resend.h) share: one api_server_call per HTTP request, one api_server_sub per GenerateRequest
 * it sent (one per prompt, or per embeddings input); the seq table that finds a sub by the
 * <seq> of its reply subject <inbox>.<seq>; and a sub's AbortRequest. Loop thread only. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_CALL_H
#define LLB_ACTORS_API_SERVER_API_SERVER_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_delta.h"
#include "actors/api_server/api_server_embeddings.h"
#include "actors/api_server/api_server_request.h"
#include "actors/api_server/api_server_resend.h"
#include "actors/api_server/api_server_response.h"
#include "actors/api_server/api_server_tokenize.h"
#include "base/status.h"
#include "bus/bus.h"
#include "bus/span.h"

struct api_server_actor;         /* actor.c's: opaque here */
struct event;             /* libevent */
struct evhttp_connection; /* libevent */
struct evhttp_request;    /* libevent */

/* One GenerateRequest of a call (one prompt). */
struct api_server_sub {
  uint64_t seq;            /* of its reply subject <inbox>.<seq>; api_server_sub_table_add gives it */
  struct api_server_call *call;
  int32_t prompt_index;
  char engine_id[256];  /* RequestOutput.request_id, "" until the first output */
  bool finished;        /* final output seen, or aborted */
  struct api_server_resend resend; /* sent again while no input processor takes it (api_server_resend.h) */
  struct api_server_delta delta;   /* what was forwarded, for resync outputs (api_server_delta.h) */
  int64_t t_last_heard_ns;  /* llb_now_ns of its last output, or of its (re)send */
  int64_t op_restart_handled_ns; /* the output processor restart it was sent again for */
};

/* One HTTP request in flight. */
struct api_server_call {
  struct api_server_actor *a;              /* the actor serving it (its callbacks' way back) */
  struct evhttp_request *req;       /* NULL once the client went away */
  struct evhttp_connection *conn;   /* NULL once the client went away */
  struct api_server_request parsed;
  struct api_server_tokenize tok;          /* /tokenize, /detokenize, /v1/models/{id}: tok.endpoint set */
  struct api_server_response resp;
  struct api_server_embeddings *emb;       /* /v1/embeddings, else NULL */
  struct api_server_sub *subs;             /* [num_subs] */
  const char *tenant;               /* whose subjects: the key's tenant, or the actor's */
  int32_t num_subs;
  bool headers_sent, client_gone;
  int64_t t_start_ns, t_first_token_ns, t_last_token_ns;
  int64_t t_last_write_ns;          /* last chunk written to a stream (keep-alive comments) */
  int64_t gen_tokens;
  uint64_t reconnects;              /* bus_num_reconnects when its requests were (re)sent */
  int64_t reconnect_seen_ns;        /* when a reconnect was seen whose resend waits, else 0 */
  struct event *timer;              /* first-output timeout; the end of a held refusal's hold */
  size_t body_bytes;                /* the request body's length */
  struct api_server_error *held;           /* an engine's 429 or costly refusal held before it is sent
                                       (api_server_gate_hold), or NULL */
  int32_t held_ticket;              /* its api_server_gate ticket */
  struct event *probe;              /* periodic check that the client is still there */
  struct api_server_call *prev, *next;     /* the actor's list */
  struct bus_span span;             /* "http": the request from arrival to the response's end */
};

/* Subs by the seq of their reply subject. */
struct api_server_sub_table;

/* An empty table. Errors: OUT_OF_MEMORY. *out: api_server_sub_table_destroy (the subs stay the
 * caller's). */
llb_status api_server_sub_table_create(struct api_server_sub_table **out);
void api_server_sub_table_destroy(struct api_server_sub_table *t); /* NULL ok */

/* Gives s a seq no sub of this table had before (1, 2, ...) and files it under it.
 * Errors: OUT_OF_MEMORY (s keeps its seq and is not filed under a new one). */
llb_status api_server_sub_table_add(struct api_server_sub_table *t, struct api_server_sub *s);
/* Files s, already in, under a new seq and takes its old seq out (a resend's new reply
 * subject). Errors: OUT_OF_MEMORY (s stays filed under its old seq). */
llb_status api_server_sub_table_renumber(struct api_server_sub_table *t, struct api_server_sub *s);
/* Takes s out (no-op when it is not in). */
void api_server_sub_table_remove(struct api_server_sub_table *t, struct api_server_sub *s);
/* The sub filed under seq, or NULL (a late output of a request already answered). */
struct api_server_sub *api_server_sub_table_find(const struct api_server_sub_table *t, uint64_t seq);

/* Publishes an AbortRequest for s->engine_id on <prefix>.abort.<its call's tenant>; logs
 * request_aborted, or abort_publish_failed with the cause. */
void api_server_sub_publish_abort(struct bus *bus, const struct api_server_sub *s);

#endif
