/* The encoder_cache actor: binds the encoder-cache manager (schemas/encoder_ops.h, applied
 * by encoder_cache.h) to <prefix>.engine.<eid>.encoder.
 *
 * Each request carries one EncoderStep from the scheduler (its only client, which runs the
 * same manager as a mirror and checks that the answers agree); the actor applies it and
 * replies one EncoderStepResult. A message that does not decode gets an EncoderStepResult
 * with `error` set (code = llb_status, the decoder's message), is counted and logged; the
 * actor keeps serving. A step number not above the last one means the scheduler restarted:
 * every entry is dropped first (its references are gone).
 *
 * Threading: one subscription, handlers run one at a time; counters are read under a mutex.
 */
#ifndef LLB_ACTORS_ENCODER_CACHE_ACTOR_H
#define LLB_ACTORS_ENCODER_CACHE_ACTOR_H

#include <stdint.h>

#include "actors/encoder_cache/encoder_cache.h"
#include "bus/bus.h"
#include "base/status.h"

struct encoder_cache_actor;

/* What cmd/encoder_cache_main.c fills from its flags. */
struct encoder_cache_actor_options {
  const char *engine_id; /* <eid> of <prefix>.engine.<eid>.encoder; NULL = "0"; copied */
  int32_t cache_size;    /* embedding rows, >= 1 (the scheduler's --encoder-cache-size) */
};

struct encoder_cache_actor_stats {
  struct ecache_stats stats;
  uint64_t num_malformed;  /* messages that did not decode */
  uint64_t num_failed;     /* steps that could not be applied (out of memory) */
};

/* Checks the options and creates a manager of o->cache_size embedding rows (nothing
 * subscribed yet). Errors: INVALID_ARGUMENT (NULL, an engine id that is not one subject
 * token), those of encoder_cache_create, OUT_OF_MEMORY. *out: encoder_cache_actor_destroy(). */
llb_status encoder_cache_actor_create(const struct encoder_cache_actor_options *o,
                                      struct encoder_cache_actor **out);

/* Subscribes <prefix>.engine.<eid>.encoder on `bus` (borrowed; destroy the bus before the
 * actor). Errors: those of bus_subject_engine and bus_subscribe. */
llb_status encoder_cache_actor_start(struct encoder_cache_actor *a, struct bus *bus);

/* Stops taking steps: unsubscribes (a step being handled still gets its reply). Call before
 * bus_destroy; after the bus drained there is nothing left to stop. Idempotent; NULL ok. */
void encoder_cache_actor_stop(struct encoder_cache_actor *a);

/* Frees the actor and its manager; NULL ok. Only when no handler can run (after bus_destroy
 * or a drain). */
void encoder_cache_actor_destroy(struct encoder_cache_actor *a);

/* Snapshot of the counters; thread-safe. */
void encoder_cache_actor_stats(const struct encoder_cache_actor *a,
                               struct encoder_cache_actor_stats *out);

#endif
