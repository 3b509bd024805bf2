/* The libevent loop thread of the bus and the NATS client's hooks into it (split out of
 * bus.c; see bus.h and bus_internal.h). */
#include "bus/bus_internal.h"

#include <pthread.h>
#include <stdlib.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <nats/nats.h>

static pthread_once_t libevent_once = PTHREAD_ONCE_INIT;
static void libevent_init_once(void) { evthread_use_pthreads(); }

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
 * The client's event-loop callbacks (natsOptions_SetEventLoop), as libnats' libevent adapter
 * (nats/adapters/libevent.h) does them, plus two things of ours:
 * - after each read the bus's deliver event is activated when subscriptions are delivered on
 *   the loop (bus_subscribe_on_loop): their handlers run in the same turn of the loop, from an
 *   event of the bus's own, so that freeing the read event (a reconnect's re-attach, the
 *   close) never waits for a handler;
 * - the bus knows when the client has detached. libnats posts the closed callback BEFORE it
 *   detaches (conn.c _close), and a drain closes the connection on the client's own drain
 *   thread: so "closed" alone does not mean the client is done with b->base. Freeing the base
 *   then (bus_destroy) let the drain thread's event_free lock and write into freed memory:
 *   heap corruption, SIGSEGV/SIGABRT at exit. bus_destroy waits for bus_ev_detach before it
 *   frees. */

struct bus_ev {
  struct bus *bus;
  natsConnection *nc;
  struct event *read, *write; /* on the connection's socket; NULL after a failed re-attach */
};

static void on_socket(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  struct bus_ev *e = arg;
  if (what & EV_READ) {
    natsConnection_ProcessReadEvent(e->nc);
    if (atomic_load_explicit(&e->bus->num_loop_subs, memory_order_relaxed) > 0)
      event_active(e->bus->deliver_ev, EV_READ, 0);
  }
  if (what & EV_WRITE) natsConnection_ProcessWriteEvent(e->nc);
}

/* The bus the calling thread corked (bus_cork); NULL none. */
static _Thread_local struct bus *corked;

static void set_write_ev(struct bus *b, struct event *ev) {
  pthread_mutex_lock(&b->ev_mu);
  b->write_ev = ev;
  pthread_mutex_unlock(&b->ev_mu);
}

void bus_cork(struct bus *b) {
  if (corked && corked != b) bus_uncork(corked);
  corked = b;
}

/* Writes what the corked thread held back from this thread (the write libnats would have had
 * the loop thread do on its write event; under the connection's lock): no wake-up of the loop
 * thread. Whatever the socket does not take at once is left to the loop (the write event, as
 * for any publish): libnats removes the event when it wrote all, which clears write_held. */
void bus_uncork(struct bus *b) {
  if (!b || corked != b) return;
  corked = NULL;
  if (!atomic_load(&b->write_held)) return;
  natsConnection_ProcessWriteEvent(b->nc);
  if (!atomic_exchange(&b->write_held, false)) return;
  pthread_mutex_lock(&b->ev_mu);
  if (b->write_ev) event_add(b->write_ev, NULL);
  pthread_mutex_unlock(&b->ev_mu);
}

static void free_events(struct bus_ev *e) {
  set_write_ev(e->bus, NULL);
  atomic_store(&e->bus->write_held, false);
  if (e->read) event_free(e->read); /* waits for a callback the loop thread is running */
  if (e->write) event_free(e->write);
  e->read = e->write = NULL;
}

/* `loop` is the bus (natsOptions_SetEventLoop in bus.c); *user_data our bus_ev, NULL on the
 * first attach, the same one on a reconnect's (new socket: new events). */
natsStatus bus_ev_attach(void **user_data, void *loop, natsConnection *nc, natsSock sock) {
  struct bus *b = loop;
  struct bus_ev *e = *user_data;
  const bool created = e == NULL;
  if (created) {
    e = calloc(1, sizeof *e);
    if (!e) return NATS_NO_MEMORY;
    e->bus = b;
    e->nc = nc;
  }
  free_events(e);
  e->read = event_new(b->base, sock, EV_READ | EV_PERSIST, on_socket, e);
  e->write = event_new(b->base, sock, EV_WRITE | EV_PERSIST, on_socket, e);
  if (!e->read || !e->write || event_add(e->read, NULL) != 0) {
    free_events(e);
    /* on a first attach libnats will not call detach; after a re-attach it will (e stays) */
    if (created) free(e);
    return NATS_NO_MEMORY;
  }
  *user_data = e;
  set_write_ev(b, e->write);
  if (created) {
    pthread_mutex_lock(&b->mu);
    b->ev_attached = true;
    pthread_mutex_unlock(&b->mu);
  }
  return NATS_OK;
}

static natsStatus add_or_del(struct event *ev, bool add) {
  if (!ev) return NATS_ERR;
  return (add ? event_add(ev, NULL) : event_del_noblock(ev)) == 0 ? NATS_OK : NATS_ERR;
}

natsStatus bus_ev_read(void *user_data, bool add) {
  struct bus_ev *e = user_data;
  return e ? add_or_del(e->read, add) : NATS_ERR;
}

/* Called by libnats under its connection lock, from the publishing thread when a publish
 * finds nothing waiting to be written (add) and from the loop thread once all is written
 * (remove). A corked thread's add is held back until its bus_uncork: libnats, which thinks the
 * event added, calls nothing more until then, so whatever is published meanwhile goes in the
 * same write. */
natsStatus bus_ev_write(void *user_data, bool add) {
  struct bus_ev *e = user_data;
  if (!e) return NATS_ERR;
  if (add && corked == e->bus && e->write) {
    atomic_store(&e->bus->write_held, true);
    return NATS_OK;
  }
  if (!add) atomic_store(&e->bus->write_held, false);
  return add_or_del(e->write, add);
}

/* Called once by libnats when it closes the connection, on whichever thread closes it (the
 * drain thread after a drain). event_free inside waits for a callback of these events that
 * the loop thread is running. */
natsStatus bus_ev_detach(void *user_data) {
  struct bus_ev *e = user_data;
  if (!e) return NATS_OK;
  struct bus *b = e->bus;
  free_events(e);
  free(e);
  pthread_mutex_lock(&b->mu);
  b->ev_attached = false;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu); /* last touch of b: bus_destroy may free it from here on */
  return NATS_OK;
}
