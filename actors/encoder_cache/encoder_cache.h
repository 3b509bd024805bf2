/* The encoder_cache actor's pure logic: applies one EncoderStep (the wire view of
 * schemas/encoder_step.h) to the encoder-cache manager (schemas/encoder_ops.h, vLLM v1
 * EncoderCacheManager) and builds the EncoderStepResult: one `ok` per op in op order (the
 * answer of CheckAndUpdate / CanAllocate, success of Allocate / FreeRequest), the hashes
 * evicted during the step (the worker may drop them) and the free rows after it.
 * No bus, no FlatBuffers. Not thread-safe: one caller (the actor's handler).
 */
#ifndef LLB_ACTORS_ENCODER_CACHE_H
#define LLB_ACTORS_ENCODER_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "schemas/encoder_ops.h"
#include "schemas/encoder_step.h"

struct ecache_stats {
  uint64_t num_steps;      /* steps applied */
  uint64_t num_queries;    /* CheckAndUpdate ops */
  uint64_t num_hits;       /* ... answered true */
  uint64_t num_allocated;  /* entries allocated (items the worker encodes) */
  uint64_t num_evicted;    /* entries evicted */
  uint64_t num_resets;
};

/* Reusable answer of ecache_apply: arrays owned here, valid until the next apply. */
struct ecache_result {
  bool *results;                 /* [num_results] */
  int32_t num_results, cap_results;
  struct llb_str *freed;         /* [num_freed] views of the manager's freed hashes */
  int32_t num_freed, cap_freed;
};

void ecache_result_free(struct ecache_result *r); /* NULL ok; zeroes it */

/* Applies `in` to `ec` (reset first when in->reset), op by op, and fills *wire (results,
 * freed_mm_hashes, num_free_slots, step; arrays in `res`, valid until the next apply; the
 * freed list of `ec` is cleared at the start of each apply). A refused op (Allocate without
 * room, ...) answers false and the step goes on. Errors: OUT_OF_MEMORY (the step is then
 * half applied: the scheduler treats it as a failure and resets). */
llb_status ecache_apply(struct encoder_cache *ec, const struct llb_encoder_step *in,
                        struct ecache_result *res, struct ecache_stats *stats,
                        struct llb_encoder_step_result *wire);

#endif
