/* The kv_manager actor: binds kv_manager (pure logic) to llm.engine.<eid>.kv.
 *
 * Each request carries one KVStep (schemas/kv_step.h); the actor decodes it, converts it to
 * the logic's kv_step (schemas/kv_ops.h), applies it with kv_manager_apply_step and replies
 * one KVStepResult. A message that does not decode (garbage, truncated, wrong identifier,
 * bad field) is answered with a KVStepResult whose `error` is set (code = llb_status,
 * message from the decoder), counted and logged; the actor keeps serving.
 *
 * Recovery (docs/design.md §4, §6): the block state is the scheduler's; a KVStep with
 * `resync` (or `reset`) carries every block it references, and the manager rebuilds its free
 * queue from that list. A manager that has not had one since it started (a restarted
 * kv_manager), or a step number not above the last one (a restarted scheduler) without one,
 * is refused with STATE_LOST in `error`: the scheduler resyncs on its next step. A refused step
 * changes nothing.
 *
 * Threading: one subscription, so handlers run one at a time on its delivery thread; the
 * manager, the arena and the buffers are touched only there. Counters are atomic.
 */
#ifndef LLB_ACTORS_KV_MANAGER_ACTOR_H
#define LLB_ACTORS_KV_MANAGER_ACTOR_H

#include <stdint.h>

#include "actors/kv_manager/kv_manager.h"
#include "bus/bus.h"
#include "base/status.h"

struct kv_manager_actor;

/* What cmd/kv_manager_main.c fills from its flags. */
struct kv_manager_actor_options {
  const char *engine_id;       /* <eid> of <prefix>.engine.<eid>.kv; NULL = "0"; copied */
  struct kv_manager_config kv; /* the pool (kv_manager.h): num_blocks, block_size, prefix caching */
};

/* Counters since start (monotonic). */
struct kv_manager_actor_stats {
  uint64_t num_steps;      /* KVSteps applied */
  uint64_t num_malformed;  /* messages that did not decode */
  uint64_t num_failed;     /* steps that decoded but were refused (STATE_LOST, a bad held list) or out of memory */
  uint64_t num_resyncs;    /* steps applied with resync or reset */
};

/* Checks the options and creates the manager (nothing subscribed yet). Errors:
 * INVALID_ARGUMENT (NULL, an engine id that is not one subject token), those of
 * kv_manager_create, OUT_OF_MEMORY. *out: kv_manager_actor_destroy(). */
llb_status kv_manager_actor_create(const struct kv_manager_actor_options *o,
                                   struct kv_manager_actor **out);

/* Subscribes <prefix>.engine.<eid>.kv on `bus` (borrowed; it outlives the subscription:
 * destroy the bus before the actor). Errors: those of bus_subject_engine and bus_subscribe. */
llb_status kv_manager_actor_start(struct kv_manager_actor *a, struct bus *bus);

/* Stops taking steps: unsubscribes (a step being handled still gets its reply). Call before
 * bus_destroy; after the bus drained there is nothing left to stop. Idempotent; NULL ok. */
void kv_manager_actor_stop(struct kv_manager_actor *a);

/* Frees the actor and its manager. NULL ok. Call only when no handler can run (after
 * bus_destroy or a drain of the bus it was started on). */
void kv_manager_actor_destroy(struct kv_manager_actor *a);

/* A snapshot of the counters; thread-safe. */
void kv_manager_actor_stats(const struct kv_manager_actor *a, struct kv_manager_actor_stats *out);

#endif
