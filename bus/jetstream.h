/* Durable ingestion on NATS JetStream (DESIGN.md §6): the requests stream, one durable pull
 * consumer per engine, publishes confirmed by the server, and acknowledgements.
 *
 *   stream  "<PREFIX>_REQUESTS" (the prefix upper-cased, '.' → '_'), subjects
 *           "<prefix>.engine.*.requests", work-queue retention (a message leaves the stream
 *           when it is acknowledged), file storage (it survives a nats-server restart when
 *           the server's store directory does: `nats-server -js -sd DIR`);
 *   consumer "engine_<eid>", durable, pull, filtered on "<prefix>.engine.<eid>.requests",
 *           explicit acks, ack_wait as configured (a message neither acknowledged nor kept
 *           alive with bus_js_in_progress within ack_wait is delivered again), no max_deliver
 *           at the server: the consumer counts deliveries and decides itself (dead letter).
 *
 * Creation is idempotent: whoever starts first creates, later callers find what exists (a
 * stream or consumer of another shape is updated to this one, or refused with a message
 * when JetStream cannot change it), so an engine can run against an external nats-server
 * that already holds the stream. Thread-safety as bus.h: every call here may block for a
 * server round trip (never call them on the loop thread).
 *
 * Source followed: NATS C client 3.4 (js_AddStream, js_AddConsumer, js_PullSubscribe,
 * natsSubscription_Fetch, natsMsg_GetMetaData), the JetStream ack protocol (+ACK, +WPI,
 * -NAK, +TERM on the message's reply subject), nats-server 2.9.
 */
#ifndef LLB_BUS_JETSTREAM_H
#define LLB_BUS_JETSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/bus.h"

/* JetStream names: a stream or consumer name holds no '.', '*', '>' or space. */
#define BUS_JS_NAME_MAX 96

/* The requests stream's name for `prefix` into buf[cap] ("llm" → "LLM_REQUESTS"). */
llb_status bus_js_requests_stream_name(const char *prefix, char *buf, size_t cap);

/* Creates the requests stream of the bus' prefix if it does not exist (idempotent; see
 * above); max_bytes > 0 bounds its storage (0 = unlimited). Waits up to timeout_ms for
 * JetStream to answer (a nats-server just restarted may need a moment). Errors:
 * LLB_STATUS_NOT_FOUND (the server has no JetStream: "start nats-server with -js"),
 * LLB_STATUS_TIMEOUT, LLB_STATUS_INVALID_ARGUMENT (a stream of that name exists with another
 * retention, which JetStream cannot change), LLB_STATUS_CONNECTION. */
llb_status bus_js_requests_stream_ensure(struct bus *bus, int64_t max_bytes, int64_t timeout_ms);

/* Publishes to a subject that a stream captures and waits up to timeout_ms for the server's
 * confirmation that it is stored; *seq_out (may be NULL) gets the stream sequence. Headers and
 * trace as bus_publish_msg. Errors: LLB_STATUS_NOT_FOUND (no stream captures the subject),
 * LLB_STATUS_TIMEOUT, LLB_STATUS_QUEUE_FULL (the stream is full), bus_publish's. */
llb_status bus_js_publish(struct bus *bus, const struct bus_out_msg *m, int64_t timeout_ms,
                          uint64_t *seq_out);

/* A durable pull consumer's subscription. Owned by the caller: bus_js_pull_destroy(). */
struct bus_js_pull;

struct bus_js_pull_config {
  const char *engine_id;   /* consumer "engine_<eid>" on "<prefix>.engine.<eid>.requests" */
  int64_t ack_wait_ms;     /* > 0 */
  int32_t max_ack_pending; /* > 0: messages delivered and not yet acknowledged, at most */
};

/* One delivered message. Everything is copied: it outlives the fetch and the subscription;
 * acknowledge through the bus_js_* calls below, then free with bus_js_msg_destroy. */
struct bus_js_msg {
  struct bus_msg msg;        /* subject, data/len, trace (reply: the ack subject) */
  uint64_t stream_seq;       /* the message's sequence in the stream: stable across deliveries */
  uint64_t num_delivered;    /* 1 on the first delivery, 2 on the first redelivery, ... */
};

/* Ensures the consumer (idempotent, see above) and subscribes to it. Errors: those of
 * bus_js_requests_stream_ensure, INVALID_ARGUMENT (config). */
llb_status bus_js_pull_create(struct bus *bus, const struct bus_js_pull_config *cfg,
                              struct bus_js_pull **out);

/* Frees the subscription (messages still held are redelivered after ack_wait). NULL ok. */
void bus_js_pull_destroy(struct bus_js_pull *p);

/* Fetches up to `cap` messages, waiting up to timeout_ms for the first; *num gets how many
 * (0 on timeout, which is not an error). Each out[i] is owned by the caller. A consumer that
 * vanished (a nats-server restarted without its store) is created again. Errors: CLOSED,
 * CONNECTION (reconnecting: try again later), OUT_OF_MEMORY. */
llb_status bus_js_pull_fetch(struct bus_js_pull *p, int32_t cap, int64_t timeout_ms,
                             struct bus_js_msg **out, int32_t *num);

/* Acknowledges: processing is done, the stream forgets the message. */
llb_status bus_js_ack(struct bus *bus, const struct bus_js_msg *m);
/* Still working on it: restarts the message's ack_wait. */
llb_status bus_js_in_progress(struct bus *bus, const struct bus_js_msg *m);
/* Give it back: redeliver now (to whoever fetches next). */
llb_status bus_js_nak(struct bus *bus, const struct bus_js_msg *m);
/* Never deliver it again (and it leaves a work-queue stream). */
llb_status bus_js_term(struct bus *bus, const struct bus_js_msg *m);

/* Frees a message. NULL ok. */
void bus_js_msg_destroy(struct bus_js_msg *m);

#endif
