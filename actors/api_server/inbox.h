/* The api server's reply inbox: RequestOutputs (and NATS "no responders" notices) on
 * <inbox>.<seq>. The subscription is delivered on the bus's loop thread
 * (bus_subscribe_on_loop: no delivery thread's wake-up a token), the thread of the HTTP
 * connections too; the bus handler copies each message into a locked queue and activates the
 * wake event, which runs in the same turn of the loop (the queue is taken whole and each item
 * goes to the handler, in arrival order), or, before bind and after unbind (setup, teardown),
 * keeps it for api_server_inbox_drain / _destroy. Hostile
 * input: a subject whose last token is not a number is dropped here; the payload is decoded
 * by the handler. */
#ifndef LLB_ACTORS_API_SERVER_INBOX_H
#define LLB_ACTORS_API_SERVER_INBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/bus.h"

struct event_base; /* libevent */
struct api_server_inbox;

/* One message as the loop thread sees it; valid during the handler call. */
struct api_server_inbox_item {
  uint64_t seq;        /* the <seq> of its subject */
  bool no_responders;  /* an empty message with a 503 Status header: nobody took the request */
  size_t len;
  const uint8_t *data; /* [len] */
};

/* Called on the loop thread for each item; `user` as given to api_server_inbox_create. */
typedef void (*api_server_inbox_fn)(const struct api_server_inbox_item *it, void *user);

/* An inbox that hands items to fn(it, user). Errors: OUT_OF_MEMORY. *out: api_server_inbox_destroy. */
llb_status api_server_inbox_create(api_server_inbox_fn fn, void *user, struct api_server_inbox **out);

/* Loop thread: creates the wake event on `base`; items arriving from now on are handled on the
 * loop. Errors: OUT_OF_MEMORY. */
llb_status api_server_inbox_bind(struct api_server_inbox *q, struct event_base *base);

/* Loop thread: handles every item that arrived so far (the teardown's last delivery). */
void api_server_inbox_drain(struct api_server_inbox *q);

/* Loop thread: frees the wake event; items arriving later wait in the queue (freed by
 * api_server_inbox_destroy). */
void api_server_inbox_unbind(struct api_server_inbox *q);

/* The bus handler of <inbox>.* (user: the api_server_inbox); the loop thread (any thread is safe). */
void api_server_inbox_on_msg(struct bus *bus, const struct bus_msg *msg, void *user);

/* Frees the queue and the inbox; after the bus delivers nothing more (bus_destroy). NULL ok. */
void api_server_inbox_destroy(struct api_server_inbox *q);

#endif
