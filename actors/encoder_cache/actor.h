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

struct encoder_cache_actor_counters {
  struct ecache_stats stats;
  uint64_t num_malformed;  /* messages that did not decode */
  uint64_t num_failed;     /* steps that could not be applied (out of memory) */
};

/* Creates a manager of cache_size embedding rows and subscribes to `subject` (normally
 * "<prefix>.engine.<eid>.encoder"). Destroy after bus_destroy or a drain. Errors: those of
 * encoder_cache_create and bus_subscribe, OUT_OF_MEMORY. */
llb_status encoder_cache_actor_create(struct bus *bus, const char *subject, int32_t cache_size,
                                      struct encoder_cache_actor **out);

/* Frees the actor and its manager; NULL ok. Only when no handler can run. */
void encoder_cache_actor_destroy(struct encoder_cache_actor *a);

/* Snapshot of the counters; thread-safe. */
void encoder_cache_actor_get_counters(struct encoder_cache_actor *a,
                                      struct encoder_cache_actor_counters *out);

#endif
