/* The api server's HTTP listener (libevent evhttp) on the bus loop: evhttp with the body and
 * header limits, the methods it lets through, the inactivity timeout, and its connections
 * policed (http_guard.h: whole-request read deadlines, a connection limit, the API key checked
 * on the headers before the body is read), bound to HOST:PORT, every request to one callback.
 * Loop thread only. */
#ifndef LLB_ACTORS_API_SERVER_HTTP_LISTENER_H
#define LLB_ACTORS_API_SERVER_HTTP_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/http_guard.h"
#include "base/status.h"

struct event_base;     /* libevent */
struct evhttp_request; /* libevent */
struct api_server_http_listener;

struct api_server_http_listener_options {
  const char *host;          /* to bind: a name or an address ("::1" without brackets) */
  int port;                  /* 0 = any free port */
  size_t max_body_bytes;     /* the server's limit (a JSON 413 above it); evhttp itself refuses
                                bodies over 4x it + 64 KiB (its own 413) */
  int64_t request_timeout_s; /* > 0: inactivity limit, and the time a whole request may take
                                to arrive (http_guard.h) */
  int32_t max_connections;   /* open connections at most (more: 503 and closed); 0 = no limit */
  /* the header gate and its release (http_guard.h); NULL = none: with API keys, whether a
   * request's headers carry one, and whether its tenant is within its front-door limits */
  void (*gate)(void *user, const struct http_gate_request *r, struct http_gate_verdict *v);
  void (*release)(void *user, int32_t ticket);
  void *gate_user;
  void (*on_request)(struct evhttp_request *req, void *arg); /* every request; first call
                                api_server_http_listener_request_read */
  void *arg;
};

/* Listens on o->host:o->port on `base`. Errors: IO naming the address when it cannot be
 * bound, OUT_OF_MEMORY. *out: api_server_http_listener_destroy. */
llb_status api_server_http_listener_create(struct event_base *base, const struct api_server_http_listener_options *o,
                                    struct api_server_http_listener **out);

/* The port bound (the chosen one for port 0); 0 when it cannot be read. */
int api_server_http_listener_port(const struct api_server_http_listener *l);

/* A complete request arrived: its connection's read deadline stops until it is answered. */
void api_server_http_listener_request_read(struct api_server_http_listener *l, struct evhttp_request *req);

/* Closes the listener and every connection (evhttp_free). NULL ok. */
void api_server_http_listener_destroy(struct api_server_http_listener *l);

#endif
