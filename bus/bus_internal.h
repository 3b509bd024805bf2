/* Private to bus/: struct bus, shared by bus.c (connection, messages, subscriptions, actor
 * loop) and bus_loop.c (the libevent loop thread and the NATS client's hooks into it). Not a
 * public header: it names NATS and libevent types. */
#ifndef LLB_BUS_BUS_INTERNAL_H
#define LLB_BUS_BUS_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>
#include <nats/nats.h>

#include "base/metrics.h"
#include "bus/bus.h"

struct bus_sub;
struct otlp_exporter;

/* Messages bus_msg_release keeps before destroying them together, and the largest payload it
 * keeps (bytes; a larger one is destroyed at once): at most 32 x 4 KiB held per bus. */
#define BUS_GRAVE_MAX 32
#define BUS_GRAVE_MSG_BYTES 4096

/* Bytes a connection may hold not yet written to the server before a publish or request is
 * refused (QUEUE_FULL): 64 x the 1 MiB max_payload, far above a step's messages. */
#define BUS_MAX_BUFFERED (64 * 1024 * 1024)

struct bus {
  natsConnection *nc;
  struct event_base *base;
  struct event *loop_stop_ev; /* activated to end the loop; queued even before it runs */
  pthread_t loop_thread;
  bool loop_started;
  char prefix[BUS_SUBJECT_MAX / 2 + 1];
  char urls[1024];
  void (*before_drain)(void *user); /* bus_set_before_drain */
  void *before_drain_user;
  char urls_shown[1024]; /* urls without credentials, for logs and errors */
  char url[256]; /* last connected server, without credentials */
  int64_t rc_min_ms, rc_max_ms, drain_timeout_ms;
  bool install_signals;

  pthread_mutex_t mu; /* guards the fields below and url */
  pthread_cond_t cv;
  bool closed; /* the connection's closed callback ran */
  bool ev_attached; /* the client is attached to the loop (see bus_ev_attach / bus_ev_detach) */
  struct bus_sub *subs;

  int stop_pipe[2]; /* bus_stop writes a byte; bus_actor_run polls the read end */
  bool signals_installed;
  struct sigaction old_term, old_int;

  _Atomic uint64_t num_reconnects; /* bus_num_reconnects */
  _Atomic uint64_t num_async_errors; /* slow consumers, refused publishes (on_async_error) */
  _Atomic int64_t last_reconnect_ns; /* bus_last_reconnect_ns */
  struct event *hb_ev; /* heartbeat timer on the loop thread; NULL = none */
  uint8_t *hb_buf;
  size_t hb_cap;
  bus_heartbeat_fn hb_fn;
  void *hb_user;
  char hb_subject[BUS_SUBJECT_MAX];
  struct event *mp_ev; /* metrics_publish.c: its timer on the loop thread; NULL = none */
  struct llb_metrics *mp_metrics;
  bool mp_failed_logged;
  char mp_subject[BUS_SUBJECT_MAX];
  char hb_also_subject[BUS_SUBJECT_MAX]; /* "" = none (bus_heartbeat_also) */

  /* bus histograms (bus_options.metrics; NULL = not recorded), label subject */
  struct llb_metric *m_request, *m_receive, *m_handler;
  /* span.c: the tracer (NULL = tracing off) and where batches are published */
  struct otlp_exporter *_Atomic tracer;
  atomic_bool trace_publish_closed;
  char trace_subject[BUS_SUBJECT_MAX];

  /* subscriptions delivered on the loop thread (bus_subscribe_on_loop) */
  struct event *deliver_ev;      /* activated after each read while num_loop_subs > 0 */
  struct event *drain_ev;        /* bus_drain: a timer that lets those subscriptions drain */
  atomic_int num_loop_subs;
  atomic_bool draining;          /* bus_drain started */

  /* bus_cork: the write event of the connection's socket (NULL while detached) and whether
   * a corked thread's publish held back adding it */
  pthread_mutex_t ev_mu;         /* guards write_ev (attach, detach, uncork) */
  struct event *write_ev;
  atomic_bool write_held;

  pthread_mutex_t grave_mu; /* guards grave, num_grave (bus_msg_release) */
  natsMsg *grave[BUS_GRAVE_MAX];
  int num_grave;
};

/* ---- metrics_publish.c ---- */

/* Stops bus_metrics_publish_start's timer (waits for a tick in progress); none: nothing. */
void bus_metrics_publish_stop(struct bus *b);

/* ---- span.c ---- */

/* Stops publishing trace batches (the connection is about to go). */
void bus_tracing_close_publish(struct bus *b);
/* Flushes and frees the tracer; after every handler and the loop thread ended. */
void bus_tracing_stop(struct bus *b);
/* ---- nats_status.c ---- */

/* The one mapping of NATS return codes to our status. */
llb_status bus_map_nats(natsStatus s);

/* Records a NATS failure with the caller's location: "<what>: <nats status> (<detail>)". */
#define BUS_NATS_ERR(s, what)                                                             \
  llb_err_set(bus_map_nats(s), __FILE__, __func__, __LINE__, "%s: %s (%s)", (what),     \
              natsStatus_GetText(s), nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "")

/* Fills the view `bm` of `m` (subject, reply, data, trace; impl = m, not owned). */
void bus_fill_msg(struct bus_msg *bm, natsMsg *m);

/* A heap bus_msg that owns `m` (freed by bus_msg_destroy); on OUT_OF_MEMORY `m` is destroyed. */
llb_status bus_wrap_owned_msg(natsMsg *m, struct bus_msg **out);

/* Builds the natsMsg of `m` with its traceparent and headers, after the size check against
 * max_payload; *out is owned by the caller (natsMsg_Destroy). Errors: as bus_publish. */
llb_status bus_build_msg(struct bus *b, const struct bus_out_msg *m, const char *reply,
                         natsMsg **out);

/* Destroys `m` (a message this bus sent or delivered; NULL ok), BUS_GRAVE_MAX at a time.
 * libnats hands every natsMsg_Destroy to its garbage-collector thread and wakes that thread
 * when it sleeps: one wake-up of its own per message sent or received, which on a machine
 * whose cores run the forward costs more than the free. Kept here, messages go to it in
 * batches (about one wake-up per batch). Any thread. */
void bus_msg_release(struct bus *b, natsMsg *m);

/* Destroys every message bus_msg_release kept (bus_destroy, after the last handler). */
void bus_msg_release_flush(struct bus *b);

/* ---- bus.c: subscriptions delivered on the loop thread ---- */

/* Subscriptions bus_subscribe_on_loop may make on one bus. */
#define BUS_LOOP_SUBS_MAX 8

/* Callback of b->deliver_ev and b->drain_ev (arg: the bus), on the loop thread: hands every
 * message waiting on a subscription made by bus_subscribe_on_loop to its handler; while the
 * connection drains, lets such a subscription with nothing left complete its drain. */
void bus_loop_deliver(evutil_socket_t fd, short what, void *arg);

/* ---- bus_loop.c ---- */

/* evthread_use_pthreads once per process; call before the first event_base_new (bus/README.md). */
void bus_libevent_init(void);

/* The loop thread's body: runs b->base (arg: the struct bus) until bus_loop_on_stop. */
void *bus_loop_main(void *arg);

/* Callback of b->loop_stop_ev (arg: the event_base): breaks the loop. */
void bus_loop_on_stop(evutil_socket_t fd, short what, void *arg);

/* The client's event-loop callbacks (natsOptions_SetEventLoop with `loop` = the bus), as
 * libnats' libevent adapter, plus: each read activates b->deliver_ev while subscriptions are
 * delivered on the loop; bus_ev_detach clears b->ev_attached, which bus_destroy waits for
 * before freeing b->base. */
natsStatus bus_ev_attach(void **user_data, void *loop, natsConnection *nc, natsSock sock);
natsStatus bus_ev_read(void *user_data, bool add);
natsStatus bus_ev_write(void *user_data, bool add);
natsStatus bus_ev_detach(void *user_data);

/* ---- bus_metrics.c ---- */

#define BUS_SENT_HEADER "Llmbus-Sent-Ns"

/* Registers the bus histograms in r (NULL: none; a registration failure is logged and the
 * bus goes on without them). */
void bus_metrics_init(struct bus *b, struct llb_metrics *r);

/* The series of family m for `subject` (inboxes fold into "_INBOX"); NULL when m is. */
struct llb_series *bus_metrics_series(struct llb_metric *m, const char *subject);

/* Observes publish -> delivery of m into s from its BUS_SENT_HEADER (ignored when absent,
 * malformed, or off by more than an hour: clocks of two hosts). */
void bus_metrics_observe_receive(struct llb_series *s, natsMsg *m);

#endif
