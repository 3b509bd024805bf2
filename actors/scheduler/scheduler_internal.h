/* Private to actors/scheduler: the scheduler's state, shared by scheduler.c (schedule, kv
 * reply, update), sched_blocks.c (the block state), sched_encoder.c (encoder-input
 * scheduling) and the other core files. Not a public header. */
#ifndef LLB_ACTORS_SCHEDULER_SCHEDULER_INTERNAL_H
#define LLB_ACTORS_SCHEDULER_SCHEDULER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/scheduler.h"
#include "base/strmap.h"

/* An op of the kv step in flight and the request it concerns. */
struct op_ref {
  struct sched_request *req;
  enum kv_op_kind kind;
};

/* One request of a committed step (sent to the worker, output not applied yet). */
struct sched_step_entry {
  struct sched_request *req;
  int32_t num_scheduled_tokens;
  bool samples;                      /* the step reaches the end of its known tokens */
  bool pools;                        /* a pooling request's step that completes its prompt */
  int32_t num_spec_tokens;           /* drafts verified in this step (the last scheduled tokens) */
};

/* A committed step: what its output is applied against (sched_update_from_output). */
struct sched_step_record {
  uint64_t step;
  struct sched_step_entry *entries;  /* [num] of cap max_num_seqs */
  int32_t num;
};

struct scheduler {
  struct sched_config cfg;
  int32_t max_blocks_per_req;
  uint64_t next_arrival_seq, step;
  bool planned;                      /* the last sched_schedule's step is not committed yet */
  bool kv_in_flight;
  struct sched_step_record inflight[2]; /* committed steps, oldest at inflight_head */
  int32_t inflight_head, num_inflight;

  struct llb_strmap *reqs;           /* the request registry: live requests by id */

  struct sched_request **running;    /* [num_running] in admission order, cap max_num_seqs */
  int32_t num_running;
  struct sched_queue waiting;
  struct sched_request **scheduled;  /* this step's requests, cap max_num_seqs */
  int32_t num_scheduled;
  int32_t total_scheduled;

  struct op_ref *op_refs;            /* [num_op_refs] ALLOCATE ops of the kv step in flight */
  int32_t num_op_refs, cap_op_refs;
  int32_t num_block_ops;             /* ops ahead of them (CACHE, RELEASE: sched_blocks_emit) */

  /* The block state (docs/design.md §4): this is its one owner; the kv_manager is the prefix
   * index it drives by block id (sched_kv.c's block-state section). */
  int32_t *block_refs;               /* [num_blocks]: requests (and exports) holding each block */
  int32_t num_free;                  /* blocks with no reference, minus this step's plan */
  int32_t *rel_ids;                  /* [num_rel_ids]: count dropped to zero, RELEASE not sent yet,
                                        in eviction order (a request's tail first) */
  int32_t num_rel_ids, cap_rel_ids;
  int32_t *cache_ids;                /* [num_cache]: released requests' full computed blocks ... */
  uint64_t *cache_hashes;            /* ... and their hashes: CACHE not sent yet */
  int32_t num_cache, cap_cache_ids, cap_cache_hashes;
  int32_t num_released;              /* requests released since the last kv step (deferred ops) */
  uint32_t *seen;                    /* [num_blocks] stamps: duplicate check of a kv reply */
  uint32_t seen_stamp;
  bool kv_resync_pending;            /* the next kv step carries every held block (resync) */
  bool kv_reset_pending;             /* ... and drops every hash: the KV contents are gone */
  bool kv_sent_resync, kv_sent_reset; /* the kv step in flight carries them */
  struct sched_str_list finished_ids; /* for the next sched_output */
  struct sched_str_list preempted_ids;
  struct sched_stats stats;

  struct encoder_cache *ec;          /* mirror of the encoder_cache actor's manager */
  struct encoder_step enc_pending;   /* FREE_REQUEST ops for the next encoder step */
  bool enc_reset_pending;            /* the next encoder step resets the actor */
  int32_t enc_budget;                /* encoder_compute_budget resolved */
  uint64_t num_step_failures;        /* sched_step_failed calls that counted (stamps) */
  int32_t *step_loras;               /* [num_step_loras] of cap max_loras: the distinct adapters of
                                        the running requests while a step is planned */
  int32_t num_step_loras;
  struct sched_request **lora_skipped; /* waiting requests passed over for max_loras this step */
  int32_t num_lora_skipped, cap_lora_skipped;
  struct sched_request *retired;     /* finished, unreferenced: destroyed at the next schedule
                                        (a list through sched_request.retired_next) */
  /* KV transfer (sched_kv.c) */
  struct sched_request **kv_senders; /* handed off, blocks held until finished_sending */
  int32_t num_kv_senders, cap_kv_senders;
  struct sched_request **kv_new_sends; /* of those, the ones the worker has not been told yet */
  int32_t num_kv_new_sends, cap_kv_new_sends;
  int32_t num_kv_recving;            /* requests in WAITING_FOR_REMOTE_KVS */
  bool kv_poll_allowed;              /* sched_kv_tick */
  double kv_now_s;                   /* the caller's clock at the last sched_kv_tick */
  bool planned_kv;                   /* the planned step carries KV transfers or a poll */
  uint64_t kv_epoch;                 /* block-accounting epoch (sched_kv_new_epoch), never 0 */
};

/* True when r takes part in encoder scheduling (a feature with a content hash). */
static inline bool sched_has_encoder_inputs(const struct sched_request *r) {
  for (int32_t k = 0; k < r->num_mm_features; k++)
    if (r->mm_features[k].hash && r->mm_features[k].hash[0]) return true;
  return false;
}

/* Takes r out of this step's scheduled list: its planned blocks count as free again,
 * its scheduled token count reset (scheduler.c). */
void sched_remove_scheduled(struct scheduler *s, struct sched_request *r);

/* Fills `out` from the scheduled list; `final` marks new requests as sent to the worker
 * (scheduler.c). Errors: OUT_OF_MEMORY. */
llb_status sched_assemble_output(struct scheduler *s, struct sched_output *out, bool final);

/* The live request with that id, or NULL (scheduler.c). */
struct sched_request *sched_map_get(const struct scheduler *s, const char *id);

/* Ends r with `reason`: output into eo (when not NULL), leaves running/waiting and the map,
 * its blocks released (RELEASE with the next kv step), destroyed when nothing refers
 * to it (scheduler.c). Errors: OUT_OF_MEMORY. */
llb_status sched_finish(struct scheduler *s, struct sched_request *r, enum sched_finish_reason reason,
                        struct sched_engine_outputs *eo, int32_t first_pos, int32_t n_new);

/* A finished request is destroyed when nothing refers to it any more: no committed step whose
 * output is not applied, no export holding its blocks (its released blocks are ids in rel_ids,
 * not references to it). */
static inline bool sched_can_destroy(const struct sched_request *r) {
  return sched_request_is_finished(r) && r->num_inflight_steps == 0 && !r->kv_sending && !r->retired;
}

/* Destroys r once sched_can_destroy: at the next sched_schedule (or sched_destroy), so that
 * the pointers into it the last sched_output and the caller's model output hold (request ids,
 * block tables) stay valid until the caller plans again (sched_retire.c). */
void sched_retire(struct scheduler *s, struct sched_request *r);
/* Destroys the retired requests (sched_retire.c). */
void sched_destroy_retired(struct scheduler *s);

/* ---- KV transfer of disaggregated prefill/decode (vLLM v1 KV connector, scheduler side:
 * delay_free_blocks, WAITING_FOR_REMOTE_KVS; the flow: sched_kv.c's head comment). In
 * scheduler.c but sched_kv_apply_output (sched_kv.c). ---- */

/* Grows a pointer array by one (scheduler.c). OUT_OF_MEMORY. */
llb_status sched_push_request(struct sched_request ***arr, int32_t *num, int32_t *cap, struct sched_request *r);
/* ---- the block state (sched_blocks.c: reference counts, deferred RELEASE / CACHE, resync) ---- */

/* Allocates the block state of a new scheduler (block_refs, seen). OUT_OF_MEMORY. */
llb_status sched_blocks_init(struct scheduler *s);
void sched_blocks_free(struct scheduler *s);
/* Drops r's references to its blocks: the ids whose count reaches zero (tail first) and its
 * full computed blocks not registered yet go out as RELEASE and CACHE with the next kv step.
 * Cannot fail: out of memory, the next kv step resyncs instead. */
void sched_release_blocks(struct scheduler *s, struct sched_request *r);
/* Takes a reference on each of ids[n] for r (appended to its block table; the caller checked
 * the room and the ids with sched_blocks_reply_ok). */
void sched_take_blocks(struct scheduler *s, struct sched_request *r, const int32_t *ids, int32_t n);
/* The deferred block ops into kv, preceded by the resync or reset when pending: CACHE of
 * released requests' blocks, RELEASE, CACHE of running requests' newly full blocks. Returns
 * the number of ops added through *num_ops. Errors: OUT_OF_MEMORY. */
llb_status sched_blocks_emit(struct scheduler *s, struct kv_step *kv, int32_t *num_ops);
/* Number of deferred block ops waiting for a kv step. */
int32_t sched_blocks_num_deferred(const struct scheduler *s);
/* Whether ids[n], the blocks an ALLOCATE gave with `num_hit` prefix hits first, can be taken:
 * in range, distinct, and each fresh one held by nobody (a kv_manager that lost track would
 * otherwise hand a held block to a second request). */
bool sched_blocks_reply_ok(struct scheduler *s, const int32_t *ids, int32_t n, int32_t num_hit);
/* The kv step in flight was answered validly: the resync / reset it carried is done. */
void sched_blocks_synced(struct scheduler *s);
/* Prefill side: r (handed off, out of the map) keeps its blocks for the decode engine's fetch and
 * is exported with the next step. Errors: OUT_OF_MEMORY (then its blocks are released). */
llb_status sched_kv_hold(struct scheduler *s, struct sched_request *r);
/* Decode side, r's ALLOCATE answered with a prefix hit of `hit` tokens: r waits for its remote
 * KV (WAITING_FOR_REMOTE_KVS) and its receive goes into out. Errors: OUT_OF_MEMORY. */
llb_status sched_kv_start_recv(struct scheduler *s, struct sched_request *r, struct sched_output *out);
/* r leaves WAITING_FOR_REMOTE_KVS other than by its transfer's end (preemption, abort): the count. */
void sched_kv_recv_dropped(struct scheduler *s, struct sched_request *r);
/* The step's exports and poll into out (end of sched_schedule). Errors: OUT_OF_MEMORY. */
llb_status sched_kv_fill_output(struct scheduler *s, struct sched_output *out);
/* The worker's KVConnectorOutput (sched_update_from_output). */
void sched_kv_apply_output(struct scheduler *s, const struct sched_model_output *mo);
/* Every export ends without a RELEASE (the scheduler is destroyed): the held requests are
 * destroyed. */
void sched_kv_release_senders(struct scheduler *s);

/* Commits the planned step if there is one: records it, advances num_computed_tokens,
 * counts placeholders (sched_inflight.c). No allocation. */
void sched_commit_step(struct scheduler *s);

/* Forgets the committed steps: their requests lose the references and placeholders; finished
 * ones nothing else holds are destroyed (sched_inflight.c). */
void sched_drop_inflight_steps(struct scheduler *s);

/* True when a suspect (num_failed_steps > 0) is in a step in flight or in this step's
 * scheduled list: a step takes at most one suspect, so that a second failure names it
 * (sched_inflight.c). */
bool sched_suspect_in_flight(const struct scheduler *s);

/* Speculative decoding (sched_spec.c). The drafts r may verify this step on top of the `n`
 * tokens tokens_to_schedule gave it: its worker's drafts when it is a plain decode on the
 * worker (one token, nothing in flight) and may sample (not pooling), capped by
 * num_speculative_tokens, max_tokens, max_model_len and the remaining `budget`; 0 else. */
int32_t sched_spec_num_drafts(const struct scheduler *s, const struct sched_request *r, int32_t n,
                              int32_t budget);

/* Applies a step entry's verification (vLLM update_from_output with spec tokens): checks that
 * the worker returned 1 .. 1 + drafts tokens, rolls num_computed_tokens back over the
 * rejected drafts (their slots are overwritten by the next step's tokens) and counts the
 * drafts and accepted tokens. Errors: INVALID_ARGUMENT (too many tokens). */
llb_status sched_spec_apply(struct scheduler *s, const struct sched_step_entry *e, int32_t n_sampled);

/* Takes the worker's new drafts for r (ModelRunnerOutput.spec_token_ids): ids outside the
 * vocabulary or beyond num_speculative_tokens are dropped (hostile input). */
void sched_spec_set_drafts(const struct scheduler *s, struct sched_request *r, const int32_t *ids, int32_t n);

#endif
