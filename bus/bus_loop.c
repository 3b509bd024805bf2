/* The libevent loop thread of the bus and the NATS client's hooks into it (split out of
 * bus.c; see bus.h and bus_internal.h). */
#include "bus/bus_internal.h"

#include <pthread.h>
#include <stdlib.h>

#include <event2/event.h>
#include <nats/nats.h>
/* Defines non-static functions: included in this one file only (bus/README.md). */
#include <nats/adapters/libevent.h>

static pthread_once_t libevent_once = PTHREAD_ONCE_INIT;
static void libevent_init_once(void) { natsLibevent_Init(); }

void bus_libevent_init(void) { pthread_once(&libevent_once, libevent_init_once); }

/* ---- the loop thread ---- */

void *bus_loop_main(void *arg) {
  struct bus *b = arg;
  event_base_loop(b->base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

/* event_base_loopbreak() before the loop starts is lost (the loop clears the flag on entry);
 * an activated event is not, so the stop goes through one. */
void bus_loop_on_stop(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  event_base_loopbreak(arg);
}

/* ---- the client's hooks into the loop ----
 *
 * The libevent adapter's callbacks, wrapped so the bus knows when the client has detached
 * from the loop. libnats posts the closed callback BEFORE it detaches (conn.c _close), and a
 * drain closes the connection on the client's own drain thread: so "closed" alone does not
 * mean the client is done with b->base. Freeing the base then (bus_destroy) let the drain
 * thread's natsLibevent_Detach -> event_free lock and write into freed memory: heap
 * corruption, SIGSEGV/SIGABRT at exit. bus_destroy waits for bus_ev_detach before it frees. */

struct bus_ev {
  struct bus *bus;
  void *nle; /* the adapter's natsLibeventEvents; NULL after a failed re-attach */
};

/* `loop` is the bus (natsOptions_SetEventLoop in bus.c); *user_data our bus_ev. */
natsStatus bus_ev_attach(void **user_data, void *loop, natsConnection *nc, natsSock sock) {
  struct bus *b = loop;
  struct bus_ev *e = *user_data;
  bool created = false;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) return NATS_NO_MEMORY;
    e->bus = b;
    created = true;
  }
  void *nle = e->nle;
  natsStatus s = natsLibevent_Attach(&nle, b->base, nc, sock);
  if (s != NATS_OK) {
    /* The adapter freed its state; on a first attach libnats will not call detach. */
    e->nle = NULL;
    if (created) free(e);
    return s;
  }
  e->nle = nle;
  *user_data = e;
  if (created) {
    pthread_mutex_lock(&b->mu);
    b->ev_attached = true;
    pthread_mutex_unlock(&b->mu);
  }
  return NATS_OK;
}

natsStatus bus_ev_read(void *user_data, bool add) {
  struct bus_ev *e = user_data;
  return e && e->nle ? natsLibevent_Read(e->nle, add) : NATS_ERR;
}

natsStatus bus_ev_write(void *user_data, bool add) {
  struct bus_ev *e = user_data;
  return e && e->nle ? natsLibevent_Write(e->nle, add) : NATS_ERR;
}

/* Called once by libnats when it closes the connection, on whichever thread closes it (the
 * drain thread after a drain). event_free inside waits for a callback of these events that
 * the loop thread is running. */
natsStatus bus_ev_detach(void *user_data) {
  struct bus_ev *e = user_data;
  if (!e) return NATS_OK;
  struct bus *b = e->bus;
  if (e->nle) natsLibevent_Detach(e->nle);
  free(e);
  pthread_mutex_lock(&b->mu);
  b->ev_attached = false;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu); /* last touch of b: bus_destroy may free it from here on */
  return NATS_OK;
}
