/* The scheduler's failure detection (docs/design.md §6): the heartbeats of its engine's gpu_worker
 * and kv_manager (on its engine's <prefix>.engine.<eid>.health.<actor>, which only that actor
 * may publish on: not every engine's beats) fed to one bus/peer_watch each, and its
 * own NATS reconnects. A peer replaced (new instance id or pid) or silent for missed_beats
 * intervals, or a reconnect of the scheduler's own connection (messages of the steps in flight
 * may be lost), is one failure: logged once (`peer_failure_detected`,
 * `bus_reconnect_recovery`), counted, and taken once by the step thread, which abandons the
 * steps in flight and preempts everything.
 *
 * Threads: heartbeats arrive on the bus' delivery thread; everything else is the step
 * thread's (also while it waits for a worker reply: exec_channel.c). State under a lock of
 * its own; the callbacks run with no lock held. */
#ifndef LLB_ACTORS_SCHEDULER_PEER_HEALTH_H
#define LLB_ACTORS_SCHEDULER_PEER_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/bus.h"
#include "bus/peer_watch.h"

struct peer_health;

struct peer_health_config {
  struct bus *bus;        /* borrowed; subscribed for the heartbeats */
  const char *prefix;     /* subjects <prefix>.engine.<eid>.health.gpu_worker and .kv_manager */
  const char *engine_id;  /* only beats naming this engine count; copied */
  int64_t heartbeat_ms;   /* the peers' interval; 0 = no watches (reconnects still count) */
  int32_t missed_beats;   /* silent for more than this many intervals: failed (>= 1 when on) */
  /* Delivery thread, after a heartbeat recorded a failure: wake a step thread waiting for a
   * worker reply (it takes the failure). */
  void (*on_failure)(void *user);
  /* Delivery thread: a peer was replaced, came back or became ready: the engine may go on
   * now rather than at the end of its back-off. */
  void (*on_peer_up)(void *user);
  void *user;
  /* The engine's worker as seen before the detection started (the heartbeat whose KV geometry the
   * scheduler took at start-up; actor_main_wait_kv_geometry), or NULL. Its watch starts from that
   * beat, so a worker killed before its next beat is seen replaced by its successor's first beat
   * (or silent), not taken for the first worker: a step sent to the dead one is abandoned at
   * once rather than at the execute timeout. The beat is copied. */
  const struct peer_beat *worker_seen;
};

/* Creates the detection and, when heartbeat_ms > 0, the watches and their subscriptions.
 * Errors: INVALID_ARGUMENT (prefix too long, bad config), OUT_OF_MEMORY, peer_watch_create's,
 * bus_subscribe's. When a subscription failed, *out is set all the same (a subscription made
 * may still deliver to it): the caller destroys it after the bus; else *out is NULL. */
llb_status peer_health_create(const struct peer_health_config *c, struct peer_health **out);

/* Frees it; after the bus is destroyed or drained (no more deliveries). NULL ok. */
void peer_health_destroy(struct peer_health *h);

/* Step thread, between steps: runs the missed-beat rule now and takes a failure detected
 * since the last take (true, `what` set: one line naming the peer and how). Always false
 * without watches. */
bool peer_health_take(struct peer_health *h, char *what, size_t cap);

/* The pieces of the above for a wait (exec_channel_receive): take a failure detected so far
 * without polling; the earliest llb_now_ns at which a poll could find a silent peer
 * (INT64_MAX none); run the missed-beat rule and the reconnect check at now_ns. */
bool peer_health_take_detected(struct peer_health *h, char *what, size_t cap);
int64_t peer_health_next_check_ns(struct peer_health *h);
void peer_health_poll(struct peer_health *h, int64_t now_ns);

/* Whether every failure the last successful take covered was the kv_manager's (none of the
 * worker, none of the scheduler's own connection): several detected before one take are
 * taken together, and `what` names only the last. Step thread, after a take returned true. */
bool peer_health_taken_kv_only(struct peer_health *h);

/* Failures detected (peers replaced or silent) and own reconnects acted on, so far. */
void peer_health_counters(struct peer_health *h, uint64_t *num_peer_failures, uint64_t *num_bus_recoveries);

#endif
