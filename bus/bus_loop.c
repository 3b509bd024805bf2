/* The libevent loop thread of the bus (split out of bus.c; see bus.h and bus_internal.h): the
 * actor's timers and evhttp run there; the NATS connection does its own socket I/O. */
#include "bus/bus_internal.h"

#include <pthread.h>

#include <event2/event.h>
#include <event2/thread.h>

static pthread_once_t libevent_once = PTHREAD_ONCE_INIT;
/* Events are added from other threads (loop_call, the heartbeat's timer from bus_connect's
 * caller): libevent's locks and cross-thread wake-up, before the first event_base_new. */
static void libevent_init_once(void) { (void)evthread_use_pthreads(); }

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
