/* Whole-request read deadlines for evhttp connections (slow loris).
 *
 * evhttp's own timeout (evhttp_set_timeout) is an inactivity timeout: every byte received
 * restarts it, so a client trickling one byte every few seconds holds a connection forever.
 * This module gives each connection a deadline by which a complete request (headers and
 * body) must have arrived: from the accept, and on a kept-alive connection from the end of
 * the previous response. A connection still reading when its deadline passes is closed
 * without an answer. While a request is being answered no deadline runs (the answer may
 * take as long as the engine does).
 *
 * Threading: everything runs on the evhttp object's event-loop thread. Ownership: the
 * deadlines object is created after the evhttp object and destroyed after evhttp_free.
 * Source: libevent 2.1.12 (evhttp_set_bevcb, evhttp_connection_set_closecb,
 * evhttp_request_set_on_complete_cb, bufferevent_getcb); our own design. */
#ifndef LLB_ACTORS_API_SERVER_HTTP_DEADLINE_H
#define LLB_ACTORS_API_SERVER_HTTP_DEADLINE_H

#include <stdint.h>

#include "base/status.h"

struct evhttp;
struct evhttp_request;
struct http_deadlines;

/* Installs the deadlines on `http` (its bufferevent callback: call before the first
 * connection is accepted). timeout_ms > 0. Caller frees with http_deadlines_destroy after
 * evhttp_free(http). Errors: INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status http_deadlines_create(struct evhttp *http, int64_t timeout_ms, struct http_deadlines **out);

/* A complete request arrived on its connection (call first thing in the request callback):
 * that connection's deadline stops, and restarts when the answer has been written. */
void http_deadlines_request_read(struct http_deadlines *d, struct evhttp_request *req);

/* Connections closed because their deadline passed, since creation. */
uint64_t http_deadlines_num_expired(const struct http_deadlines *d);

/* Frees the remaining records (after evhttp_free, which closed every connection). Accepts
 * NULL. */
void http_deadlines_destroy(struct http_deadlines *d);

#endif
