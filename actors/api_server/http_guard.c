/* Whole-request read deadlines for evhttp connections (see http_deadline.h). */
#include "actors/api_server/http_deadline.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"

/* One connection's deadline. Before it is adopted the record knows only the bufferevent it
 * created (holding a reference, so that the pointer stays valid whatever evhttp does); once
 * adopted it knows the connection, whose close callback frees the record. */
struct deadline {
  struct deadline *prev, *next;
  struct http_deadlines *d;
  struct bufferevent *bev;          /* until adopted (a reference is held), else NULL */
  struct evhttp_connection *evcon;  /* once adopted */
  struct event *timer;              /* adopt (at once), then the deadline */
  int64_t start_ns;                 /* the deadline is start + timeout */
};

struct http_deadlines {
  struct evhttp *http;
  struct event_base *base;          /* from the first bufferevent callback */
  int64_t timeout_ms;
  struct deadline *head;
  uint64_t num_expired;
};

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void on_timer(evutil_socket_t fd, short what, void *arg);

static struct deadline *deadline_new(struct http_deadlines *d) {
  struct deadline *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->timer = evtimer_new(d->base, on_timer, t);
  if (!t->timer) {
    free(t);
    return NULL;
  }
  t->d = d;
  t->start_ns = mono_ns();
  t->next = d->head;
  if (d->head) d->head->prev = t;
  d->head = t;
  return t;
}

static void deadline_free(struct deadline *t) {
  struct http_deadlines *d = t->d;
  if (t->prev) t->prev->next = t->next;
  else d->head = t->next;
  if (t->next) t->next->prev = t->prev;
  event_free(t->timer);
  if (t->bev) bufferevent_decref(t->bev);
  free(t);
}

/* Arms the timer for what is left of the deadline (0 = at once). */
static void arm(struct deadline *t, int64_t left_ms) {
  if (left_ms < 0) left_ms = 0;
  struct timeval tv = {.tv_sec = (time_t)(left_ms / 1000), .tv_usec = (suseconds_t)(left_ms % 1000) * 1000};
  evtimer_add(t->timer, &tv);
}

static void on_closed(struct evhttp_connection *evcon, void *arg) {
  (void)evcon;
  deadline_free(arg);
}

/* The connection evhttp built on our bufferevent: its callbacks' argument. A bufferevent
 * whose callbacks are all unset was freed by evhttp already (bufferevent_free unsets them;
 * our reference kept the memory). */
static void adopt(struct deadline *t) {
  bufferevent_data_cb rd, wr;
  bufferevent_event_cb ev;
  void *cbarg = NULL;
  bufferevent_getcb(t->bev, &rd, &wr, &ev, &cbarg);
  if (!rd && !wr && !ev) {
    deadline_free(t);
    return;
  }
  bufferevent_decref(t->bev); /* from now on the close callback says when it goes */
  t->bev = NULL;
  t->evcon = cbarg;
  evhttp_connection_set_closecb(t->evcon, on_closed, t);
  arm(t, t->d->timeout_ms - (mono_ns() - t->start_ns) / 1000000);
}

static void expire(struct deadline *t) {
  struct evhttp_connection *evcon = t->evcon;
  struct http_deadlines *d = t->d;
  char *host = NULL;
  ev_uint16_t port = 0;
  evhttp_connection_get_peer(evcon, &host, &port);
  LLB_LOG_WARN("http_read_timeout", "peer=%s:%u timeout_ms=%lld: no complete request in time, closed",
               host ? host : "?", (unsigned)port, (long long)d->timeout_ms);
  d->num_expired++;
  evhttp_connection_set_closecb(evcon, NULL, NULL);
  deadline_free(t);
  evhttp_connection_free(evcon);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct deadline *t = arg;
  if (t->bev) adopt(t);
  else expire(t);
}

/* evhttp's hook for a new connection's bufferevent: the same kind evhttp makes itself, plus
 * a deadline record adopted on the next loop turn (the connection does not exist yet). */
static struct bufferevent *on_new_bufferevent(struct event_base *base, void *arg) {
  struct http_deadlines *d = arg;
  d->base = base;
  struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (!bev) return NULL;
  struct deadline *t = deadline_new(d);
  if (!t) {
    LLB_LOG_ERROR("http_deadline_dropped", "reason=out_of_memory: this connection has no read deadline");
    return bev;
  }
  bufferevent_incref(bev);
  t->bev = bev;
  arm(t, 0);
  return bev;
}

/* The answer was written: the next request on this kept-alive connection gets a deadline. */
static void on_complete(struct evhttp_request *req, void *arg) {
  struct http_deadlines *d = arg;
  struct evhttp_connection *evcon = evhttp_request_get_connection(req);
  if (!evcon || !d->base) return;
  struct deadline *t = deadline_new(d);
  if (!t) return;
  t->evcon = evcon;
  evhttp_connection_set_closecb(evcon, on_closed, t);
  arm(t, d->timeout_ms);
}

llb_status http_deadlines_create(struct evhttp *http, int64_t timeout_ms, struct http_deadlines **out) {
  *out = NULL;
  if (!http || timeout_ms <= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "http deadlines: no server or timeout %lld ms", (long long)timeout_ms);
  struct http_deadlines *d = calloc(1, sizeof *d);
  if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "http deadlines");
  d->http = http;
  d->timeout_ms = timeout_ms;
  evhttp_set_bevcb(http, on_new_bufferevent, d);
  *out = d;
  return LLB_STATUS_OK;
}

void http_deadlines_request_read(struct http_deadlines *d, struct evhttp_request *req) {
  struct evhttp_connection *evcon = evhttp_request_get_connection(req);
  if (!d || !evcon) return;
  struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
  for (struct deadline *t = d->head; t; t = t->next) {
    if (t->evcon != evcon && !(t->bev && t->bev == bev)) continue;
    if (t->evcon) evhttp_connection_set_closecb(evcon, NULL, NULL);
    deadline_free(t);
    break;
  }
  evhttp_request_set_on_complete_cb(req, on_complete, d);
}

uint64_t http_deadlines_num_expired(const struct http_deadlines *d) { return d ? d->num_expired : 0; }

void http_deadlines_destroy(struct http_deadlines *d) {
  if (!d) return;
  while (d->head) {
    deadline_free(d->head); /* only unadopted ones are left: evhttp_free closed the others */
  }
  free(d);
}
