/* Durable ingestion on NATS JetStream (docs/design.md §6): the requests stream, one durable pull
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
 * Replicas: the stream is kept on `replicas` servers (1 for a single nats-server, 3 on a 3-node
 * cluster: it then outlives a node). Consumers inherit the stream's replica count (consumer
 * replicas 0), so an engine's consumer survives the node too. While the replicas elect a new
 * leader (2-8 s after the leader's node died, measured by tests/cluster/) nobody subscribes
 * the stream's subjects: publishes are retried with the same Nats-Msg-Id (the stream drops a
 * copy it already holds, within its 2-minute duplicate window) and fetches are sent again.
 *
 * Creation is idempotent: whoever starts first creates, later callers find what exists (a
 * stream of another shape is updated to this one where JetStream can: subjects, max_bytes,
 * more replicas, never fewer; what it refuses is logged and the stream used as it is, unless
 * it lacks the subject or work-queue retention), so an engine can run against an external
 * nats-server that already holds the stream. Thread-safety as bus.h: every call here may block for a
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
/* Replicas of a stream: JetStream allows 1..5. */
#define BUS_JS_MAX_REPLICAS 5
/* A Nats-Msg-Id, at most (bytes). */
#define BUS_JS_MSG_ID_MAX 256

/* The requests stream's name for `prefix` into buf[cap] ("llm" → "LLM_REQUESTS"). */
llb_status bus_js_requests_stream_name(const char *prefix, char *buf, size_t cap);

/* Creates the requests stream of the bus' prefix if it does not exist (idempotent; see
 * above) with `replicas` (1..BUS_JS_MAX_REPLICAS; on a single server more than 1 is logged and
 * 1 used); max_bytes > 0 bounds its storage (0 = unlimited). Waits up to timeout_ms for
 * JetStream to answer (a nats-server just restarted, or a cluster still electing its meta
 * leader, may need a moment). Errors: LLB_STATUS_NOT_FOUND (the server has no JetStream: "start
 * nats-server with -js"), LLB_STATUS_TIMEOUT, LLB_STATUS_INVALID_ARGUMENT (replicas out of
 * range; a stream of that name exists with another retention, which JetStream cannot change),
 * LLB_STATUS_CONNECTION. */
llb_status bus_js_requests_stream_ensure(struct bus *bus, int64_t max_bytes, int32_t replicas, int64_t timeout_ms);

/* Publishes to a subject that a stream captures and waits up to timeout_ms in all for the
 * server's confirmation that it is stored, sending it again (each attempt waits at most 2 s,
 * the last at least 100 ms, so a call may end up to 100 ms past timeout_ms) while no stream
 * leader answers or confirms: a leader election, a reconnect. msg_id (may be
 * NULL: no dedup; at most BUS_JS_MSG_ID_MAX bytes) goes out as Nats-Msg-Id on every attempt,
 * so a retry of a message the old leader stored is not stored twice (the stream answers with
 * the first copy's sequence). *seq_out (may be NULL) gets the stream sequence. Headers and
 * trace as bus_publish_msg. Errors: LLB_STATUS_NO_SERVER (no stream took it within timeout_ms:
 * an election lasting longer, JetStream off, or no stream captures the subject),
 * LLB_STATUS_TIMEOUT (never confirmed), LLB_STATUS_QUEUE_FULL (the stream is full),
 * INVALID_ARGUMENT, bus_publish's. */
llb_status bus_js_publish(struct bus *bus, const struct bus_out_msg *m, const char *msg_id, int64_t timeout_ms,
                          uint64_t *seq_out);

/* A durable pull consumer's subscription. Owned by the caller: bus_js_pull_destroy(). */
struct bus_js_pull;

struct bus_js_pull_config {
  const char *engine_id;   /* consumer "engine_<eid>" on "<prefix>.engine.<eid>.requests" */
  int64_t ack_wait_ms;     /* > 0 */
  int32_t max_ack_pending; /* > 0: messages delivered and not yet acknowledged, at most */
  int32_t replicas;        /* of the stream, if this call creates it (0 = 1); see
                              bus_js_requests_stream_ensure. The consumer inherits the stream's. */
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
 * nobody serves is looked up: between leaders (a cluster node died) the next fetch reaches the
 * new one; one that vanished (a nats-server restarted without its store) is created again.
 * Errors: CLOSED, CONNECTION (reconnecting, electing: fetch again later), OUT_OF_MEMORY. */
llb_status bus_js_pull_fetch(struct bus_js_pull *p, int32_t cap, int64_t timeout_ms,
                             struct bus_js_msg **out, int32_t *num);

/* What the server says of the consumer (its consumer info), for telling a stalled consumer
 * from an idle one. */
struct bus_js_pull_state {
  uint64_t num_pending;           /* stored for this consumer and never delivered */
  int64_t num_ack_pending;        /* delivered and not acknowledged (due redeliveries included) */
  int64_t num_waiting;            /* pull requests the server holds */
  int64_t num_redelivered;        /* delivered more than once and not acknowledged */
  uint64_t delivered_stream_seq;  /* the last delivered message's stream sequence */
  uint64_t ack_floor_stream_seq;  /* every message up to this one is acknowledged */
  int64_t max_ack_pending;        /* the consumer's limit: no delivery while num_ack_pending is at it */
};

/* Asks the server for the consumer's state (one JetStream API round trip, at most 2 s).
 * Errors: CONNECTION, TIMEOUT, NOT_FOUND (JetStream or the consumer missing). */
llb_status bus_js_pull_state(struct bus_js_pull *p, struct bus_js_pull_state *out);

/* Drops the subscription (what its inbox still holds is redelivered after ack_wait) and
 * subscribes again with a new inbox, the consumer ensured first: the recovery of a consumer
 * that stopped delivering to it. On an error the pull has no subscription and each
 * bus_js_pull_fetch tries again first. Not concurrent with bus_js_pull_fetch. Errors: those of
 * bus_js_pull_create. */
llb_status bus_js_pull_resubscribe(struct bus_js_pull *p);

/* Fault hook for tests (env): after this many messages a process's first pull fetched, its
 * subscription is unsubscribed under it, once: its fetches fail from then on while the
 * consumer's messages wait, until bus_js_pull_resubscribe. */
#define BUS_JS_FAULT_DEAF_ENV "LLMBUS_FAULT_JS_PULL_DEAF_AFTER"

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
