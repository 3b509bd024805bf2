/* The scheduler's channel to its worker (`.execute`): a SchedulerOutput is published with the
 * reply subject <inbox>.<step> and the worker's replies, copied into a queue by one
 * subscription's handler (on the bus's loop thread: bus_subscribe_on_loop, so a reply wakes the
 * loop and the step thread, no delivery thread), are taken oldest first by the step thread.
 * So the step thread never blocks a reader, a reply (a no-responders status too) names its step,
 * and replies to steps forgotten after a failure are recognised and dropped. At most two
 * steps are in flight (asynchronous scheduling: step N executing, N+1 queued on the worker);
 * one in synchronous use (send, then receive). Round trips are timed into
 * `llmbus:bus_request_latency_seconds{subject=".execute"}`.
 *
 * A wait ends early on a peer failure (peer_health.h) or when the actor stops. State under a
 * lock of its own; everything but exec_channel_wake / _stop is the step thread's. */
#ifndef LLB_ACTORS_SCHEDULER_EXEC_CHANNEL_H
#define LLB_ACTORS_SCHEDULER_EXEC_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "actors/scheduler/peer_health.h"
#include "base/status.h"
#include "bus/bus.h"

struct exec_channel;

/* A worker reply taken off the queue: the encoded ModelRunnerOutput of `step`. Freed with
 * free(). */
struct exec_reply {
  struct exec_reply *next;
  uint64_t step;          /* from the subject <inbox>.<step>; 0 when it names none */
  char status[16];        /* the NATS Status header ("503": no responders), "" none */
  int64_t received_ns;    /* llb_now_ns() on arrival: the round trip ends here */
  size_t len;
  uint8_t data[];
};

/* Creates the reply inbox and subscribes <inbox>.*; subj_execute (copied) is where steps go,
 * timeout_ms (> 0) how long a receive waits. Errors: INVALID_ARGUMENT, OUT_OF_MEMORY,
 * bus_new_inbox's, bus_subscribe's. When the subscription failed *out is set all the same
 * (destroy it after the bus); else it is NULL on error. */
llb_status exec_channel_create(struct bus *bus, const char *subj_execute, int64_t timeout_ms,
                               struct exec_channel **out);

/* Frees queued replies and the channel; after the bus is destroyed or drained. NULL ok. */
void exec_channel_destroy(struct exec_channel *ch);

/* The actor stops: a receive waiting (or to come) returns CLOSED at once. Any thread. */
void exec_channel_stop(struct exec_channel *ch);

/* A peer failure was recorded: a waiting receive looks at peer_health now. Any thread. */
void exec_channel_wake(struct exec_channel *ch);

/* While a receive waits, fn(user) runs on the step thread every every_ms (no lock held), so the
 * scheduler still publishes its stats during a long step: an engine busy with a 10 s prefill
 * must not look gone to the routers, whose liveness is 3 stats intervals + 1 s. every_ms 0 or
 * fn NULL: none. Step thread. */
void exec_channel_set_tick(struct exec_channel *ch, int64_t every_ms, void (*fn)(void *user), void *user);

/* Steps sent whose replies are awaited (0..2). */
int32_t exec_channel_num_pending(const struct exec_channel *ch);

/* Forgets every step in flight (after a failure): their replies, should they come, are
 * dropped as stale by the next receive. */
void exec_channel_forget(struct exec_channel *ch);

/* Publishes `step` (data, len: its encoded SchedulerOutput) with reply subject
 * <inbox>.<step> and records it as pending. Steps grow. Errors: INTERNAL (two already in
 * flight), bus_publish_msg's. */
llb_status exec_channel_send(struct exec_channel *ch, uint64_t step, const void *data, size_t len);

/* Waits up to timeout_ms for the reply to the oldest pending step (which leaves the pending
 * list whatever happens; older replies are dropped) and returns it in *out (caller frees).
 * health (NULL = none) is looked at while waiting: its missed-beat rule runs whenever its next
 * deadline passes. Errors: TIMEOUT, NOT_FOUND (no responders: a status reply), CLOSED (the
 * actor stops), ABORTED (a peer failure was taken: the step is abandoned), INTERNAL (a reply
 * for a later step, nothing pending). */
llb_status exec_channel_receive(struct exec_channel *ch, struct peer_health *health, struct exec_reply **out);

#endif
