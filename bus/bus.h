/* The llmbus actor runtime: one NATS connection driven by a libevent loop.
 *
 * An actor creates a bus with bus_connect(), subscribes its handlers, optionally starts a
 * heartbeat, then calls bus_actor_run(), which returns after a graceful drain once SIGTERM,
 * SIGINT or bus_stop() arrives. NATS types never appear here: only bus/ includes nats.h.
 *
 * THREADING CONTRACT
 * - The bus owns one libevent loop, run by a thread the bus starts in bus_connect() (the
 *   "loop thread"); socket I/O of the connection happens there. It keeps running until
 *   bus_destroy(), so requests work before, during and after nothing else runs.
 * - Message handlers run on the NATS client's delivery threads: one thread per
 *   subscription. Messages of one subscription are delivered one at a time, in order;
 *   handlers of different subscriptions run concurrently. A handler may block (e.g. do a
 *   bus_request()), which delays only its own subscription.
 * - Handlers of bus_subscribe_on_loop() subscriptions run on the loop thread instead, right
 *   after the read that brought their messages (one at a time, in order per subscription).
 * - Heartbeat callbacks and anything the caller adds to bus_event_base() run on the loop
 *   thread. Never block there and never call bus_request() or bus_sub_next_msg() from it
 *   (the reply could not be read: deadlock until the timeout).
 * - Thread-safe from any thread: bus_publish*, bus_request*, bus_respond*, bus_subscribe*,
 *   bus_new_inbox, bus_max_payload, bus_stop (also async-signal-safe). bus_actor_run and
 *   bus_destroy are called once, from the thread that owns the bus, never from a handler.
 * - Messages given to a handler are valid only until the handler returns; copy what you keep.
 *
 * Every publish also carries `Llmbus-Sent-Ns: <wall clock ns>` for the receive-latency
 * histogram (bus_options.metrics).
 *
 * Trace context: every publish/request carries a W3C `traceparent` header (bus/trace.h).
 * The caller passes the span that sends (or NULL to start a new trace); handlers see the
 * sender's context in msg->trace (a new trace when none or an invalid one arrived);
 * bus_respond(..., NULL) answers under a child span of it.
 *
 * Source followed: NATS C client 3.4 (nats.h: natsOptions_*, natsConnection_*, libevent
 * adapter); bus/README.md (SendAsap, loop start before flush, loopbreak after close).
 */
#ifndef LLB_BUS_BUS_H
#define LLB_BUS_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/subject.h"
#include "bus/trace.h"

struct bus;         /* opaque: a connection plus its loop */
struct bus_sub;     /* opaque: one subscription, owned by its bus */
struct event_base;  /* libevent */

/* Connection settings. Initialise with bus_options_init(), then override fields. Strings are
 * borrowed for the duration of bus_connect() only. */
struct bus_options {
  const char *urls;            /* comma-separated server URLs; default "nats://127.0.0.1:4222" */
  const char *name;            /* client name shown by the server; default "llmbus" */
  const char *creds_file;      /* NATS credentials (.creds: JWT + NKey seed), NULL = none */
  const char *user;            /* NATS user (nats-server `authorization`/`accounts` users), NULL =
                                * none (or the user of the URL); needs `password` */
  const char *password;        /* that user's password; never logged, never in an error */
  const char *tls_ca_file;     /* PEM CA bundle to verify the server, NULL = no TLS unless URL tls:// */
  const char *tls_cert_file;   /* PEM client certificate (with tls_key_file), NULL = none */
  const char *tls_key_file;    /* PEM client key, NULL = none */
  const char *prefix;          /* subject prefix, default BUS_DEFAULT_PREFIX ("llm") */
  int64_t connect_timeout_ms;  /* per server attempt at start-up, default 2000 */
  int max_reconnect;           /* reconnect attempts after a loss; -1 (default) = forever */
  int64_t reconnect_wait_min_ms; /* first reconnect backoff, default 100; doubles per round */
  int64_t reconnect_wait_max_ms; /* backoff cap, default 5000 */
  int64_t drain_timeout_ms;    /* bus_actor_run()'s drain limit, default 30000 */
  bool install_signal_handlers; /* default true: bus_connect() installs SIGTERM/SIGINT handlers
                                 * that request a stop (so one arriving during start-up is
                                 * not lost); bus_destroy() restores the previous ones. One
                                 * bus per process should set it. */
  struct llb_metrics *metrics; /* NULL (default) = none; else the bus records, label subject
                                * (a subscription's subject pattern; "_INBOX" for inboxes):
                                * llmbus:bus_request_latency_seconds (request -> reply),
                                * llmbus:bus_receive_latency_seconds (publish -> delivery,
                                * from the sender's Llmbus-Sent-Ns header, wall clock),
                                * llmbus:bus_handler_seconds (time in the handler).
                                * Borrowed: must outlive the bus. */
};

/* Fills `o` with the defaults documented above. */
void bus_options_init(struct bus_options *o);

/* One received message, as a handler (or bus_request) sees it. */
struct bus_msg {
  const char *subject;         /* NUL-terminated */
  const char *reply;           /* reply subject, NULL if none */
  const uint8_t *data;         /* [len] payload bytes (not NUL-terminated) */
  size_t len;
  struct bus_trace_ctx trace;  /* the sender's span, or a new trace (see trace_received) */
  bool trace_received;         /* false: no valid traceparent arrived; `trace` is new */
  void *impl;                  /* private to bus.c */
};

/* One header (key, value) of an outgoing message; strings borrowed for the call. */
struct bus_header {
  const char *key;
  const char *value;
};

/* An outgoing message for bus_publish_msg() / bus_request_msg(). */
struct bus_out_msg {
  const char *subject;
  const char *reply;                 /* NULL = none */
  const void *data;                  /* [len] bytes, may be NULL when len == 0 */
  size_t len;
  const struct bus_trace_ctx *trace; /* span that sends; NULL = start a new trace */
  const struct bus_header *headers;  /* [num_headers] extra headers; "traceparent" is ignored */
  int num_headers;
};

/* Handler of a subscription; runs on the subscription's delivery thread (see above).
 * `msg` is valid until the handler returns (or longer: bus_msg_keep). */
typedef void (*bus_handler_fn)(struct bus *bus, const struct bus_msg *msg, void *user);

/* Fills buf[cap] (at most `cap` bytes) with an encoded heartbeat and sets *len. Runs on the
 * loop thread every interval; an error status skips that beat (logged). */
typedef llb_status (*bus_heartbeat_fn)(void *user, uint8_t *buf, size_t cap, size_t *len);

/* Connects to the first server of o->urls that answers and starts the loop thread.
 * The connection uses SendAsap (no write coalescing: ~0.1-0.3 ms loopback round trips) and
 * reconnects with exponential backoff (reconnect_wait_min_ms doubling to _max_ms, with
 * jitter), forever by default; each disconnect, reconnect and close is logged as one line
 * (event=bus_disconnected|bus_reconnected|bus_closed). Errors: LLB_STATUS_NO_SERVER naming
 * the URL(s) when none answers; LLB_STATUS_INVALID_ARGUMENT for bad options (prefix, TLS or
 * credential files that cannot be loaded: the message names the file); LLB_STATUS_CONNECTION
 * otherwise. On success *out is owned by the caller: bus_destroy(). */
llb_status bus_connect(const struct bus_options *o, struct bus **out);

/* Closes the connection (no drain: use bus_actor_run or bus_drain for that), stops the loop
 * thread and frees everything, subscriptions included. No handler runs after it returns.
 * NULL ok. Never call it from a handler or from the loop thread. */
void bus_destroy(struct bus *bus);

/* Call once at the very end of a process that used buses, after its last bus_destroy():
 * waits up to timeout_ms (> 0) for the NATS client's internal threads (the thread that
 * closes a drained connection, delivery threads, timers) to end and releases the client
 * library, so none of them still runs while the process exits. No bus may be connected
 * afterwards. Errors: LLB_STATUS_TIMEOUT (some thread still runs; it ends on its own),
 * LLB_STATUS_INVALID_ARGUMENT (timeout_ms <= 0), LLB_STATUS_INTERNAL (called from a handler
 * or another client thread). */
llb_status bus_shutdown(int64_t timeout_ms);

/* The subject prefix of this bus ("llm" by default); owned by the bus. */
const char *bus_prefix(const struct bus *bus);

/* The server's max_payload in bytes (1 MiB by default); 0 while disconnected. */
int64_t bus_max_payload(struct bus *bus);

/* Reconnections of this bus since bus_connect (after a lost connection; what was in flight
 * in the server then may be lost: a request whose reply never comes, a publish nobody got).
 * Thread-safe. */
uint64_t bus_num_reconnects(struct bus *bus);
/* llb_now_ns() of the last reconnect (set before bus_num_reconnects counts it); 0 = none.
 * Thread-safe. */
int64_t bus_last_reconnect_ns(struct bus *bus);

/* The URL of the server currently connected into buf[cap], credentials removed
 * (llb_log_redact_url); "" when disconnected. */
void bus_connected_url(struct bus *bus, char *buf, size_t cap);

/* The libevent base of the loop thread, for timers or evhttp of the same actor; events
 * added there run on the loop thread. Owned by the bus. */
struct event_base *bus_event_base(struct bus *bus);

/* Publishes `len` bytes on `subject` with a traceparent of `trace` (NULL = new trace).
 * Errors: LLB_STATUS_TOO_LARGE (message names sizes and the server's max_payload),
 * LLB_STATUS_INVALID_ARGUMENT (bad subject), LLB_STATUS_CLOSED, LLB_STATUS_CONNECTION,
 * LLB_STATUS_QUEUE_FULL (64 MiB already wait to be written: the server stalls; nothing sent).
 * While reconnecting, messages are buffered by the client (8 MiB) and sent on reconnect. */
llb_status bus_publish(struct bus *bus, const char *subject, const void *data, size_t len,
                       const struct bus_trace_ctx *trace);

/* Publishes a message with a reply subject and/or extra headers; errors as bus_publish. */
llb_status bus_publish_msg(struct bus *bus, const struct bus_out_msg *m);

/* Sends a request and waits up to timeout_ms for the first reply. *reply is owned by the
 * caller (bus_msg_destroy). Errors: LLB_STATUS_TIMEOUT (message names subject and timeout),
 * LLB_STATUS_NOT_FOUND when no subscriber listens ("no responders on <subject>"), those of bus_publish.
 * Blocks the calling thread: never call it on the loop thread. */
llb_status bus_request(struct bus *bus, const char *subject, const void *data, size_t len,
                       const struct bus_trace_ctx *trace, int64_t timeout_ms,
                       struct bus_msg **reply);

/* bus_request with headers; m->reply is ignored (the bus uses its own inbox). */
llb_status bus_request_msg(struct bus *bus, const struct bus_out_msg *m, int64_t timeout_ms,
                           struct bus_msg **reply);

/* Publishes `len` bytes to msg->reply. Call it several times for a streamed reply.
 * trace NULL = a child span of msg->trace. INVALID_ARGUMENT if msg has no reply subject. */
llb_status bus_respond(struct bus *bus, const struct bus_msg *msg, const void *data, size_t len,
                       const struct bus_trace_ctx *trace);

/* Records one request -> reply latency of `subject` in llmbus:bus_request_latency_seconds
 * (bus_options.metrics; nothing without), for a request made by hand: published with a reply
 * subject whose reply is read elsewhere (the scheduler's pipelined execute steps). */
void bus_record_request_latency(struct bus *bus, const char *subject, double seconds);

/* Frees a message returned by bus_request / bus_sub_next_msg. NULL ok. Never call it on a
 * message given to a handler. */
void bus_msg_destroy(struct bus_msg *msg);

/* Inside a handler of an asynchronous subscription: takes `msg` over so that it outlives the
 * handler (work queued for other threads; bus_respond works on it from any thread). Returns
 * the message, which the caller frees with bus_msg_destroy, or NULL when out of memory (msg
 * then stays the handler's as before). After a non-NULL return the handler must not use msg. */
struct bus_msg *bus_msg_keep(const struct bus_msg *msg);

/* Value of header `key` of `msg` (first one if repeated), NULL if absent. Valid as long as
 * the message. */
const char *bus_msg_header(const struct bus_msg *msg, const char *key);

/* Subscribes `fn` to `subject` (wildcards allowed), in queue group `queue` (NULL = none:
 * every subscriber gets every message; a group shares them, each message to one member).
 * `user` is passed to fn and must outlive the subscription. *out (may be NULL) is owned by
 * the bus. Errors: INVALID_ARGUMENT, CLOSED, CONNECTION. */
llb_status bus_subscribe(struct bus *bus, const char *subject, const char *queue,
                         bus_handler_fn fn, void *user, struct bus_sub **out);

/* As bus_subscribe, but `fn` runs on the bus's loop thread (bus_event_base), in the turn of
 * the loop that read the message, instead of on a delivery thread of the subscription's own.
 * A message then costs no wake-up of a delivery thread, and what the handler publishes is
 * written by the loop thread without a wake-up of its own: for the subscriptions of an
 * actor's per-token path (the api server's replies, the output processor's outputs, the
 * scheduler's worker replies), where each wake-up takes a core from the forward on a small
 * machine. The handler must not block: no bus_request, bus_sub_next_msg or bus_flush, no lock
 * held across such a call; it holds up every other message, timer and connection of the loop
 * while it runs. bus_msg_keep works as for bus_subscribe. At most 8 such subscriptions per
 * bus (INVALID_ARGUMENT beyond); other errors as bus_subscribe. A drain (bus_actor_run,
 * bus_drain) delivers what arrived before it, as for the other subscriptions. */
llb_status bus_subscribe_on_loop(struct bus *bus, const char *subject, const char *queue,
                                 bus_handler_fn fn, void *user, struct bus_sub **out);

/* Corks what the calling thread publishes on `bus` until bus_uncork: each message is queued
 * in order as always, but not written yet; bus_uncork writes everything from the calling thread
 * (one send; what the socket does not take at once is left to the loop thread). Two messages
 * published microseconds apart (the scheduler's EngineCoreOutputs of step N and its
 * SchedulerOutput of step N+2) then cost one write and one read for nats-server instead of two
 * each, and no wake-up of the loop thread (a plain publish from a thread other than the loop's
 * wakes it to write); the first waits for the second. What other threads publish meanwhile
 * may wait for the uncork too. So the thread must uncork before it waits for anything:
 * bus_request, bus_request_msg, bus_flush, bus_sub_next_msg and the JetStream calls
 * (jetstream.h) uncork first by themselves, a wait of the caller's own is the caller's to
 * mind. One bus per thread: corking another uncorks the first. Not on the loop thread (it
 * writes in its own turn anyway). NULL ok. */
void bus_cork(struct bus *bus);

/* Ends bus_cork of the calling thread and writes what it held back (see bus_cork). Nothing
 * when the thread has not corked `bus`. NULL ok. */
void bus_uncork(struct bus *bus);

/* Subscribes without a handler: messages are queued for bus_sub_next_msg(). Use it to read
 * a streamed reply on an inbox. *out is owned by the bus. */
llb_status bus_subscribe_sync(struct bus *bus, const char *subject, struct bus_sub **out);

/* Next message of a synchronous subscription, waiting up to timeout_ms. *msg is owned by the
 * caller (bus_msg_destroy). Errors: TIMEOUT, INVALID_ARGUMENT (not a sync subscription),
 * CLOSED. */
llb_status bus_sub_next_msg(struct bus_sub *sub, int64_t timeout_ms, struct bus_msg **msg);

/* Messages delivered to the subscription and not yet handed out (not counting one a handler
 * is running on): 0 means a handler that returns now waits for the next one. -1 on error. */
int64_t bus_sub_pending(const struct bus_sub *sub);

/* Removes the interest of a subscription; no new message is delivered after it returns
 * except one already being handled. Memory stays with the bus until bus_destroy(). */
llb_status bus_unsubscribe(struct bus_sub *sub);

/* Writes a new unique inbox subject ("_INBOX.<random>") into buf[cap]. */
llb_status bus_new_inbox(struct bus *bus, char *buf, size_t cap);

/* Waits until the server has processed everything published so far, up to timeout_ms. */
llb_status bus_flush(struct bus *bus, int64_t timeout_ms);

/* Publishes a heartbeat on "<prefix>.health.<actor>.<instance>" every interval_ms (first one
 * right away), with the bytes `fn` writes into a buffer of `cap` bytes. Replaces a previous
 * heartbeat. The callback runs on the loop thread; `user` must outlive the bus. */
llb_status bus_heartbeat_start(struct bus *bus, const char *actor, const char *instance,
                               int64_t interval_ms, size_t cap, bus_heartbeat_fn fn, void *user);

/* Also publishes every heartbeat (periodic and bus_heartbeat_now) on `subject`, besides the
 * health subject: an engine's actors beat on <prefix>.engine.<eid>.health.<actor> too
 * (bus_subject_engine_health), where that engine's peers listen. "" stops it. Call after
 * bus_heartbeat_start. Errors: INVALID_ARGUMENT (not started, or subject too long). */
llb_status bus_heartbeat_also(struct bus *bus, const char *subject);

/* Publishes one heartbeat now, from the calling thread (any thread), besides the periodic
 * ones: for a peer that just appeared and waits for what the beat says (a restarted
 * scheduler waiting for its worker's KV geometry), so it need not wait out the interval.
 * The bus itself beats at once after every reconnect.
 * The heartbeat callback must then be safe to call from any thread. INVALID_ARGUMENT
 * before bus_heartbeat_start (or after the bus stopped beating); those of bus_publish. */
llb_status bus_heartbeat_now(struct bus *bus);

/* Publishes `metrics` (llb_metrics_render: Prometheus' text format 0.0.4) on
 * "<prefix>.health.<actor>.<instance>.metrics" every interval_ms (first right away), from the
 * loop thread, until the drain: the api server merges every actor's series into its own
 * /metrics (one scrape for the whole stack, as vLLM serves all on its API port). Replaces a
 * previous one. A publish that fails (a render over the server's max_payload) is logged once.
 * `metrics` must outlive the bus. Errors: INVALID_ARGUMENT (names, interval), INTERNAL. */
struct llb_metrics;
llb_status bus_metrics_publish_start(struct bus *bus, const char *actor, const char *instance, int64_t interval_ms,
                                     struct llb_metrics *metrics);

/* Asks bus_actor_run() to stop: safe from any thread and from a signal handler. A stop
 * requested before bus_actor_run() is called makes it return right after draining. */
void bus_stop(struct bus *bus);

/* Whether a stop (bus_stop, SIGTERM, SIGINT) is pending, without consuming it: for start-up
 * work that waits (a start hook polls it to give up early). NULL: false. */
bool bus_stop_requested(struct bus *bus);

/* Sets `fn(user)` to run once in bus_actor_run() when the stop arrives, before the drain: the
 * connection still publishes (an actor says goodbye there, e.g. the scheduler's last
 * SchedulerStats with `draining`). Runs on the thread of bus_actor_run; `user` must outlive
 * the call. NULL clears it. */
void bus_set_before_drain(struct bus *bus, void (*fn)(void *user), void *user);

/* Runs the actor until bus_stop(), SIGTERM or SIGINT (when o->install_signal_handlers), then
 * drains: subscriptions stop taking new messages, queued and in-flight handlers finish (their
 * replies are sent), pending publishes are flushed and the connection is closed, within
 * drain_timeout_ms. Returns LLB_STATUS_OK after a clean drain (main then exits 0),
 * LLB_STATUS_TIMEOUT if the drain did not finish in time. Blocks the calling thread. Call
 * bus_destroy() afterwards. */
llb_status bus_actor_run(struct bus *bus);

/* Drains now (as bus_actor_run does after a stop) and waits up to timeout_ms. */
llb_status bus_drain(struct bus *bus, int64_t timeout_ms);

#endif
