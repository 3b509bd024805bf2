/* The scheduler's durable intake (docs/design.md §6, `--durable`): EngineCoreRequests come from the
 * engine's JetStream pull consumer instead of a plain subscription, and each stays in the
 * stream until the request left the scheduler (finished, aborted or refused), so a scheduler
 * that dies loses nothing: its successor gets the unfinished ones again and recomputes them.
 *
 * One thread fetches, hands each new message to `deliver` and keeps every held message alive
 * with an in-progress ack every ack_wait/4; the step thread acknowledges with
 * durable_intake_done. A redelivery of a held message is dropped; a message delivered more
 * than max_deliver times is copied to <prefix>.engine.<eid>.dead_letter and delivered with a
 * refusal.
 *
 * Stall watch: when nothing was fetched for stall_ms, the fetch thread asks the server for the
 * consumer's state (one API call per stall_ms while idle); if it holds messages for us that it
 * does not deliver (never-delivered ones while under max_ack_pending, or more delivered and
 * unacknowledged than this intake holds: lost deliveries) on two checks in a row, that is logged with the consumer's
 * state (`durable_consumer_stalled`), counted, and the pull subscription is made again. */
#ifndef LLB_ACTORS_SCHEDULER_DURABLE_INTAKE_H
#define LLB_ACTORS_SCHEDULER_DURABLE_INTAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/bus.h"

struct durable_intake;

struct durable_intake_config {
  struct bus *bus;          /* borrowed */
  const char *prefix;       /* dead letters go to <prefix>.engine.<eid>.dead_letter */
  const char *engine_id;    /* the consumer engine_<eid>; copied */
  int64_t ack_wait_ms;      /* redelivery after this long without an ack (> 0) */
  int32_t max_deliver;      /* deliveries at most; the next is dead-lettered (0 = no limit) */
  int32_t max_ack_pending;  /* requests held at once */
  int32_t stream_replicas;  /* the stream's replicas (bus/jetstream.h) */
  int64_t stall_ms;         /* a stall: nothing fetched for this long while the consumer has messages
                               for us (below); 0 = max(10 s, 4 x ack_wait_ms) */
  /* Fetch thread: decodes and queues an EngineCoreRequest for the step thread (stream_seq: its
   * message; replayed: delivered before; refuse: NULL = admit, else admission refuses it with
   * this message). Returns false when it was not queued (undecodable, out of memory): the
   * message is then acknowledged (undecodable) or terminated (a dead letter). */
  bool (*deliver)(void *user, const struct bus_msg *msg, uint64_t stream_seq, bool replayed, const char *refuse);
  void *user;
};

/* What it did so far (scheduler_actor_stats: num_replayed, ...). stalls: times the consumer
 * was found stalled and subscribed to again (below). */
struct durable_intake_counters {
  uint64_t replayed, dead_lettered, redelivered_held, acked, stalls;
};

/* Creates the engine's pull consumer (stream and consumer ensured) and starts the fetch
 * thread. Errors: INVALID_ARGUMENT, OUT_OF_MEMORY, bus_subject_engine's, bus_js_pull_create's,
 * INTERNAL (thread); *out is then NULL. */
llb_status durable_intake_start(const struct durable_intake_config *c, struct durable_intake **out);

/* Joins the fetch thread (nothing more is delivered). Idempotent; NULL ok. */
void durable_intake_stop(struct durable_intake *d);

/* The request of this stream message left the scheduler (finished, aborted, refused): its
 * message is acknowledged and forgotten. NULL d, 0 or an unknown seq: nothing. Any thread. */
void durable_intake_done(struct durable_intake *d, uint64_t stream_seq);

void durable_intake_get_counters(struct durable_intake *d, struct durable_intake_counters *out);

/* Stops and frees it (held messages are not acknowledged: the server delivers them again
 * ack_wait after the last in-progress ack). NULL ok. */
void durable_intake_destroy(struct durable_intake *d);

#endif
