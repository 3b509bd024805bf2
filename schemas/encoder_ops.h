/* The scheduler <-> encoder_cache contract as plain C (no FlatBuffers): the encoder-output
 * accounting of vLLM v1 (vllm/v1/core/encoder_cache_manager.py EncoderCacheManager) and the
 * batched op list of one step. Shared like kv_ops.h: the encoder_cache actor owns the
 * authoritative manager; the scheduler, its only client, runs the same manager as an exact
 * mirror so that it can decide within schedule() and send all of a step's ops in ONE
 * EncoderStep (schemas/encoder_step.fbs, identical op kinds), whose answers must equal the
 * mirror's.
 *
 * Units: every size is in embedding rows (encoder output tokens). An entry is keyed by the
 * item's content hash (mm_hash string). Its state:
 *   referenced  one or more requests hold it (check_and_update hit or allocate);
 *   freeable    no request holds it; still cached, evicted oldest-freeable first by
 *               can_allocate when room is needed (then listed in the freed hashes, which the
 *               worker drops through SchedulerOutput.free_encoder_mm_hashes).
 * num_free_slots counts rows not held by any entry; num_freeable_slots counts free rows plus
 * rows of freeable entries (what eviction could reach). Not thread-safe.
 */
#ifndef LLB_SCHEMAS_ENCODER_OPS_H
#define LLB_SCHEMAS_ENCODER_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* Op kinds; values equal EncoderOpKind in schemas/encoder_step.fbs. */
enum encoder_op_kind {
  ENCODER_OP_KIND_CHECK_AND_UPDATE = 0, /* cached? then req takes a reference */
  ENCODER_OP_KIND_CAN_ALLOCATE = 1,     /* fits budget and cache (may evict freeable entries) */
  ENCODER_OP_KIND_ALLOCATE = 2,         /* reserve num_embeds rows for mm_hash, req holds it */
  ENCODER_OP_KIND_FREE_REQUEST = 3,     /* req drops all its references */
};

struct encoder_cache;

/* Creates an empty manager of cache_size rows (>= 1). Errors: INVALID_ARGUMENT,
 * OUT_OF_MEMORY. Free with encoder_cache_destroy. */
llb_status encoder_cache_create(int32_t cache_size, struct encoder_cache **out);
void encoder_cache_destroy(struct encoder_cache *ec); /* NULL ok */

/* Drops every entry and reference and the freed list (the outputs are gone: worker restart).
 * Sizes return to cache_size. */
void encoder_cache_reset(struct encoder_cache *ec);

/* Evicts every entry, referenced or not: their hashes go to the freed list (so that the
 * worker drops them) and every reference is forgotten. Errors: OUT_OF_MEMORY (then the
 * manager is reset without recording the rest). */
llb_status encoder_cache_evict_all(struct encoder_cache *ec);

/* vLLM check_and_update_cache: *hit = mm_hash is cached; then req_id holds a reference
 * (a freeable entry becomes referenced again and leaves the eviction queue). Errors:
 * OUT_OF_MEMORY (nothing changed). */
llb_status encoder_cache_check_and_update(struct encoder_cache *ec, const char *req_id,
                                          const char *mm_hash, bool *hit);

/* vLLM can_allocate: false when num_embeds > encoder_compute_budget (rows still computable
 * this step), or when num_embeds + num_embeds_to_schedule (rows already planned this step)
 * exceed what free + freeable rows can hold. Otherwise evicts freeable entries, oldest first,
 * only until that many rows are free (their hashes go to the freed list), and returns true. */
bool encoder_cache_can_allocate(struct encoder_cache *ec, int32_t num_embeds,
                                int32_t encoder_compute_budget, int32_t num_embeds_to_schedule);

/* vLLM allocate: a new entry of num_embeds rows held by req_id. Errors: INVALID_ARGUMENT
 * (already cached, or fewer than num_embeds free rows: call can_allocate first; nothing
 * changed), OUT_OF_MEMORY. */
llb_status encoder_cache_allocate(struct encoder_cache *ec, const char *req_id,
                                  const char *mm_hash, int32_t num_embeds);

/* vLLM free(request): req_id drops every reference it holds; entries left with none become
 * freeable (queued for eviction, newest last), not freed. Unknown ids are ignored. */
void encoder_cache_free_request(struct encoder_cache *ec, const char *req_id);

/* vLLM get_freed_mm_hashes, in two calls: the hashes evicted since the last clear (strings
 * owned by the manager, valid until the next call that changes it). */
int32_t encoder_cache_num_freed(const struct encoder_cache *ec);
const char *encoder_cache_freed(const struct encoder_cache *ec, int32_t i);
void encoder_cache_clear_freed(struct encoder_cache *ec);

int32_t encoder_cache_size(const struct encoder_cache *ec);
int32_t encoder_cache_num_free_slots(const struct encoder_cache *ec);
int32_t encoder_cache_num_freeable_slots(const struct encoder_cache *ec);
int32_t encoder_cache_num_entries(const struct encoder_cache *ec);
/* References held on mm_hash: -1 not cached, 0 freeable, else the count. */
int32_t encoder_cache_num_refs(const struct encoder_cache *ec, const char *mm_hash);

/* One op of a step, strings held in the step's pool. */
struct encoder_op {
  enum encoder_op_kind kind;
  int64_t req_id_off, mm_hash_off; /* into encoder_step.chars; mm_hash "" for FREE_REQUEST */
  int32_t input_id;                /* index into the request's mm_features */
  int32_t num_embeds;
  int32_t encoder_compute_budget;  /* CAN_ALLOCATE */
  int32_t num_embeds_to_schedule;  /* CAN_ALLOCATE */
  bool expected;                   /* the mirror's answer (scheduler side) */
};

/* A step's ops in order; strings are copied into `chars`. Zero-initialize or _init; reuse
 * across steps (arrays grow, then stay). */
struct encoder_step {
  uint64_t step;
  bool reset;                      /* drop every entry first */
  int32_t num_ops, cap_ops;
  struct encoder_op *ops;          /* [num_ops] */
  int64_t num_chars, cap_chars;
  char *chars;                     /* string pool */
};

void encoder_step_init(struct encoder_step *s);
void encoder_step_free(struct encoder_step *s);        /* NULL ok; leaves it initialized */
void encoder_step_clear(struct encoder_step *s, uint64_t step);
/* Appends an op (strings copied). Errors: OUT_OF_MEMORY. */
llb_status encoder_step_add(struct encoder_step *s, const struct encoder_op *op, const char *req_id,
                            const char *mm_hash);
const char *encoder_step_req_id(const struct encoder_step *s, const struct encoder_op *op);
const char *encoder_step_mm_hash(const struct encoder_step *s, const struct encoder_op *op);

#endif
