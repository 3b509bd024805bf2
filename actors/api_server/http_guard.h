/* Per-connection policing of the api server's evhttp listener: what evhttp itself cannot do
 * about a hostile client, each on one record per connection.
 *
 * 1. Read deadlines (slow loris). evhttp's own timeout (evhttp_set_timeout) is an inactivity
 *    timeout: every byte received restarts it, so a client trickling one byte every few seconds
 *    holds a connection forever. Each connection gets a deadline by which a complete request
 *    (headers and body) must have arrived: from the accept, and on a kept-alive connection from
 *    the end of the previous response. A connection still reading when its deadline passes is
 *    closed without an answer. While a request is being answered no deadline runs.
 * 2. A limit on open connections: a connection accepted while max_connections are open gets
 *    the `busy_response` (503) and is closed at once, before anything of it is read.
 * 3. A header gate: the gate sees each request's method, path and Authorization header as
 *    soon as its headers have arrived, before evhttp reads the body; a request it refuses gets
 *    the answer the gate gives (a 401 without a key, a 429 over the tenant's limits) and its
 *    connection is closed, so a client without a key, or over its limits, cannot make the
 *    server read (and buffer) a body. A refusal the gate says to hold is sent only after its
 *    hold (a tarpit: nothing more is read from the connection meanwhile, it counts as open). A
 *    request pipelined behind another on one connection is read by evhttp at once and is
 *    checked when complete, as every request is (the gate does not see it).
 *    A verdict may carry a ticket, given back to the gate's `release` exactly once: when a
 *    held refusal is sent, when a passed request's answer has been written, or when its
 *    connection goes first.
 *
 * How: the listener's bufferevent callback (evhttp_set_bevcb) makes each connection's
 * bufferevent and keeps a reference to it; right after the accept (an activated event, before
 * any read of the connection) the record adopts the connection evhttp built on it, and with a
 * gate wraps the bufferevent's callbacks, again after every response (evhttp resets them for
 * the next request). A bufferevent whose callbacks are all unset was freed by evhttp: its record
 * goes at the next sweep (each accept, each timer).
 *
 * Threading: everything runs on the evhttp object's event-loop thread. Ownership: the guard is
 * created after the evhttp object and destroyed after evhttp_free. Source: libevent 2.1.12
 * (evhttp_set_bevcb, bufferevent_getcb/setcb, evhttp_request_set_on_complete_cb, http.c's
 * evhttp_start_read_); our own design. */
#ifndef LLB_ACTORS_API_SERVER_HTTP_GUARD_H
#define LLB_ACTORS_API_SERVER_HTTP_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

struct evhttp;
struct evhttp_request;
struct http_guard;

/* One request's headers, as the gate sees them. */
struct http_gate_request {
  bool is_options;           /* an OPTIONS (a CORS preflight carries no key) */
  bool is_post;
  const char *path;          /* the request target before any '?' (at most 255 bytes; longer: "") */
  const char *authorization; /* the Authorization header's value; NULL when absent */
};

/* The gate's verdict on them. */
struct http_gate_verdict {
  const char *refusal; /* NULL = pass; else the complete HTTP response to refuse with (the gate's,
                          valid until its next call: copied when held); the connection is closed
                          after it */
  int64_t hold_ms;     /* with a refusal: > 0 = sent only after this long (a tarpit) */
  int32_t ticket;      /* >= 0: given back to `release` once (above); -1 = none */
};

struct http_guard_options {
  int64_t read_timeout_ms;  /* > 0: the whole-request deadline */
  int32_t max_connections;  /* open connections at most; 0 = no limit */
  const char *busy_response; /* the complete HTTP response to a connection over the limit (copied) */
  /* The header gate; NULL = none. Fills *v (zeroed, ticket -1, before the call). */
  void (*gate)(void *user, const struct http_gate_request *r, struct http_gate_verdict *v);
  void (*release)(void *user, int32_t ticket); /* with tickets: required */
  void *gate_user;
};

/* Installs the guard on `http` (its bufferevent callback: call before the first connection is
 * accepted). Caller frees with http_guard_destroy after evhttp_free(http). Errors:
 * INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status http_guard_create(struct evhttp *http, const struct http_guard_options *o, struct http_guard **out);

/* A complete request arrived on its connection (call first thing in the request callback):
 * that connection's deadline stops, and restarts (with the gate) when the answer is written. */
void http_guard_request_read(struct http_guard *g, struct evhttp_request *req);

/* Counters since creation: connections closed because their deadline passed, connections
 * refused over max_connections, requests refused by the gate on their headers (held or not). */
uint64_t http_guard_num_expired(const struct http_guard *g);
uint64_t http_guard_num_busy(const struct http_guard *g);
uint64_t http_guard_num_refused(const struct http_guard *g);


/* Connections open now (records whose bufferevent evhttp has not freed). */
int32_t http_guard_num_open(struct http_guard *g);

/* Frees the records (after evhttp_free, which closed every connection). Accepts NULL. */
void http_guard_destroy(struct http_guard *g);

#endif
