/* The kv_manager actor: binds kv_manager (pure logic) to llm.engine.<eid>.kv.
 *
 * Each request carries one KVStep (schemas/kv_step.h); the actor decodes it, converts it to
 * the logic's kv_step (schemas/kv_ops.h), applies it with kv_manager_apply_step and replies
 * one KVStepResult. A message that does not decode (garbage, truncated, wrong identifier,
 * bad field) is answered with a KVStepResult whose `error` is set (code = llb_status,
 * message from the decoder), counted and logged; the actor keeps serving.
 *
 * Recovery (docs/design.md §6):
 * - A KVStep whose step number is not above the last one seen means the scheduler
 *   restarted: every request's blocks are released first (kv_manager_reset keeps the
 *   prefix cache).
 * - An ALLOCATE with lookup for a request that still holds blocks (and is not freed earlier
 *   in the same step) means the scheduler lost the reply of an earlier step that gave it
 *   blocks: they are freed first, so the request is not stuck and no block leaks.
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

struct kv_manager_actor_counters {
  uint64_t num_steps;      /* KVSteps applied */
  uint64_t num_malformed;  /* messages that did not decode */
  uint64_t num_failed;     /* steps that decoded but could not be applied (out of memory) */
  uint64_t num_resets;     /* scheduler restarts detected */
  uint64_t num_stale_frees; /* requests freed before a lookup (see above) */
};

/* Creates the manager from `cfg` and subscribes to `subject` (normally
 * "<prefix>.engine.<eid>.kv") on `bus`. The actor must be destroyed after bus_destroy (or
 * after a drain: no handler may run). Errors: those of kv_manager_create, bus_subscribe,
 * OUT_OF_MEMORY. */
llb_status kv_manager_actor_create(struct bus *bus, const char *subject,
                                   const struct kv_manager_config *cfg,
                                   struct kv_manager_actor **out);

/* Frees the actor and its manager. NULL ok. Call only when no handler can run. */
void kv_manager_actor_destroy(struct kv_manager_actor *a);

/* A snapshot of the counters; thread-safe. */
void kv_manager_actor_get_counters(const struct kv_manager_actor *a,
                                   struct kv_manager_actor_counters *out);

#endif
