/* The scheduler: EngineCore's step loop as pure logic (vLLM v1 vllm/v1/core/sched/
 * scheduler.py), and the one owner of the KV block state (docs/design.md §4). One step:
 *
 *   sched_schedule(s, &out, &kv)              plan: running first, then waiting; chunked
 *                                             prefill; preemption by recompute
 *   if (!kv_step_empty(&kv)) {                one round trip to the kv_manager
 *     send kv, get res;
 *     sched_apply_kv_result(s, &res, &out);   block ids, prefix hits, failures
 *   }
 *   if (out.total_num_scheduled_tokens > 0) { execute on the worker
 *     get model output mo (mo.step == out.step);
 *     sched_update_from_output(s, &mo, &eo);  append tokens, stop checks → EngineCoreOutputs
 *   }
 *
 * Blocks: the scheduler owns each request's block table and each block's reference count
 * (sched_blocks.c); the kv_manager is its prefix index (free queue in LRU order, block hash
 * -> block), the scheduler its only client. Knowing exactly which blocks are free, it plans
 * every allocation against that count (assuming no prefix hit: a hit only lowers
 * consumption) and never overcommits. RELEASE (the ids whose count dropped to zero) and
 * CACHE (newly full blocks by id and hash) are deferred and ride ahead of the next step's
 * allocations; a released block counts as free at once, which is exact because the RELEASE
 * is sent before any ALLOCATE that could use it. So a step whose requests need no new block
 * (decode inside a block, or inside the lookahead) sends nothing to the kv_manager. Deferred
 * ops are flushed when a step allocates, when max_deferred_kv_ops accumulate, or when nothing
 * is scheduled. After any doubt about the kv_manager's state (sched_kv_resync) the next kv
 * step carries every held block (resync), which rebuilds its free queue.
 *
 * Allocation sizes: a request gets ceil((num_computed + scheduled + lookahead) /
 * block_size) blocks when it needs more (num_lookahead_tokens, trimmed when blocks are
 * short), so a decode stream costs one KV round trip per (1 + lookahead / block_size)
 * blocks. A new request's prefix-cache hit is capped below the planned chunk's end, so
 * at least one token is computed and the planned blocks still cover it.
 *
 * n > 1 is fanned out by the input processor: the scheduler sees independent requests.
 * Every sched_output has a step number; a model output must name the step it answers.
 *
 * Commit and asynchronous scheduling (vLLM v1 core/sched/async_scheduler.py): a planned step
 * is committed when the caller has sent it, which the scheduler learns lazily, at the next
 * sched_schedule or sched_update_from_output. Committing advances each request's
 * num_computed_tokens by its scheduled tokens at once (vLLM _update_after_schedule) and, for
 * a request whose scheduled range reaches the end of its known tokens, counts a placeholder
 * for the token the worker will sample. With async_scheduling, sched_schedule may plan step
 * N+1 while step N is committed and unanswered (depth 2, never more): a request decoding in
 * N gets its next decode in N+1 with no token in the message (the worker feeds the token it
 * sampled in N: CachedRequestData.num_output_tokens counts it); a request mid-prefill gets
 * only prompt tokens, never a decode off a placeholder; a request whose placeholders already
 * reach max_tokens or max_model_len is not scheduled again. When N's output is applied its
 * tokens are appended and stops checked; a request that finished at N leaves at once (its
 * blocks are freed with the next kv step, which the worker executes after N+1) and the token
 * N+1 computed for it is discarded, never emitted. Without async_scheduling, or with a caller
 * that always applies the output before scheduling again, it is the synchronous loop above.
 * Not thread-safe: one owner (the actor's loop).
 */
#ifndef LLB_SCHEDULER_H
#define LLB_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "schemas/encoder_ops.h"
#include "schemas/kv_ops.h"
#include "actors/scheduler/sched_output.h"
#include "actors/scheduler/sched_queue.h"
#include "actors/scheduler/sched_request.h"
#include "base/status.h"

struct scheduler;

struct sched_config {
  int32_t max_num_batched_tokens;  /* token budget per step (default 2048) */
  int32_t max_num_seqs;            /* running requests at most (default 256) */
  int32_t max_model_len;           /* prompt + output tokens at most (default 2048) */
  int32_t long_prefill_token_threshold; /* > 0: a prefill takes at most this many tokens per step */
  bool enable_chunked_prefill;     /* default true; false: a prompt is scheduled whole or waits */
  bool enable_prefix_caching;      /* default true */
  enum sched_policy policy;        /* default FCFS */
  int32_t num_blocks;              /* the kv_manager's pool size (default 1024) */
  int32_t block_size;              /* tokens per block (default 16) */
  int32_t num_lookahead_tokens;    /* extra slots per allocation (default = block_size) */
  int32_t max_deferred_kv_ops;     /* flush deferred RELEASE/CACHE work beyond this (default 64) */
  int32_t max_num_waiting;         /* waiting requests at most; a new one beyond it is refused
                                      with QUEUE_FULL (default 1024; 0 = unlimited) */
  int32_t encoder_cache_size;      /* encoder outputs kept, embedding rows (default 4096; the
                                      encoder_cache actor must get the same value) */
  int32_t encoder_compute_budget;  /* embedding rows encoded per step at most (default 0 =
                                      max_num_batched_tokens, as vLLM) */
  int64_t max_encoder_bytes_per_step; /* item bytes sent to the worker per step at most, beyond
                                      the first item (keeps SchedulerOutput under the bus'
                                      max_payload; default 768 KiB; 0 = unlimited) */
  int32_t max_resync_blocks;       /* held blocks a resync may list (its KVStep must fit the bus'
                                      max_payload: the actor sets 7/8 of it, in block ids, with
                                      sched_set_max_resync_blocks); over it, running requests are
                                      preempted (pick order as for lack of blocks) until it fits,
                                      instead of the round trip failing and every request being
                                      preempted; exports are kept (default 0 = unlimited) */
  int32_t vocab_size;              /* the model's vocabulary: token ids of admitted requests
                                      must be below it (default 0 = unknown: ids only >= 0) */
  bool async_scheduling;           /* allow planning step N+1 before step N's output is applied
                                      (default true; see the head comment) */
  int32_t num_speculative_tokens;  /* speculative decoding (vLLM speculative_config
                                      num_speculative_tokens): drafts the worker proposes are
                                      scheduled, at most this many per request and step, and
                                      verified in one forward (sched_spec.c); 0 = off (default).
                                      Needs async_scheduling false; at most LLB_MAX_SPEC_TOKENS */
  bool enable_lora;                /* requests may run LoRA adapters (vLLM --enable-lora); without
                                      it a request naming one is refused (INVALID_ARGUMENT) */
  bool kv_transfer;                /* disaggregated prefill/decode with KV transfer (sched_kv.c):
                                      a handed-off request's blocks are exported to the decode
                                      engine (held until finished_sending); a hand-off admitted
                                      with remote KV fetches it (WAITING_FOR_REMOTE_KVS) instead
                                      of computing it. Off: the decode side recomputes */
  float kv_export_expires_s;       /* an export's lifetime on the worker (default 10 s): a decode engine
                                      that held a prefix fetches only the rest, and the worker
                                      ends such an export at its expiry */
  int32_t max_loras;               /* distinct adapters among a step's requests at most (vLLM
                                      --max-loras, default 1): a waiting request whose adapter
                                      would exceed it stays waiting while others are scheduled */
  struct llb_hash_key hash_key;    /* keys the block hashes (base/hash.h): the deployment's secret,
                                      the same for every scheduler of an engine and its restarts
                                      (default: a random one per sched_config_init) */
  /* Frees a sched_new_request.user the scheduler still holds when its request ends without a
   * final output or the scheduler is destroyed (sched_request.user); NULL = users need no
   * freeing. */
  void (*free_user)(void *user);
};

struct sched_stats {
  uint64_t step;
  int32_t num_running, num_waiting;
  int32_t num_free_blocks;         /* blocks no request holds */
  double kv_cache_usage;           /* 1 - free / num_blocks */
  uint64_t prefix_cache_queries;   /* tokens of the requests looked up (vLLM PrefixCacheStats) */
  uint64_t prefix_cache_hits;      /* tokens found */
  uint64_t num_preemptions;
  uint64_t num_prompt_tokens;      /* tokens computed while catching up to the context */
  uint64_t num_generation_tokens;  /* tokens sampled and kept */
  uint64_t num_kv_round_trips;     /* kv_steps sent */
  uint64_t num_kv_protocol_faults; /* replies that disagreed with the block state (free count,
                                      an ALLOCATE giving a held block, a refused RELEASE) */
  uint64_t num_kv_resyncs;         /* resyncs asked for (each sends every held block once) */
  uint64_t num_kv_alloc_failures;  /* ALLOCATE ops refused although planned */
  uint64_t encoder_cache_queries;  /* check_and_update calls (vLLM encoder cache stats) */
  uint64_t encoder_cache_hits;     /* ... that found the item cached */
  uint64_t encoder_inputs_computed; /* items sent to the worker's encoder */
  uint64_t encoder_embeds_computed; /* their embedding rows */
  uint64_t num_encoder_round_trips; /* encoder steps sent */
  uint64_t num_encoder_mismatches; /* encoder_cache answers that differed from the mirror */
  uint64_t spec_num_drafts;        /* speculative decoding (vLLM SpecDecodingStats): request
                                      steps that verified drafts */
  uint64_t spec_num_draft_tokens;  /* drafts verified */
  uint64_t spec_num_accepted_tokens; /* drafts accepted (equal to the target's token) */
  uint64_t kv_recv_tokens;         /* tokens whose KV came from a prefill engine (finished_recving) */
  uint64_t kv_recv_failures;       /* receives that failed (recomputed here) */
  uint64_t kv_sends;               /* requests whose blocks were exported to a decode engine */
  int32_t num_waiting_for_remote_kvs; /* now */
};

/* vLLM-like defaults (see the field comments). */
void sched_config_init(struct sched_config *c);

/* Creates a scheduler. Caller frees with sched_destroy. Errors: INVALID_ARGUMENT (a value
 * out of range, named in the message), OUT_OF_MEMORY. */
llb_status sched_create(const struct sched_config *cfg, struct scheduler **out);
/* Frees the scheduler and every request it holds. Accepts NULL. */
void sched_destroy(struct scheduler *s);

/* Queues a request (status WAITING). Everything in `nr` is copied. Errors:
 * INVALID_ARGUMENT (duplicate id, empty prompt, bad fields: sched_new_request_validate against
 * cfg.vocab_size), TOO_LARGE (prompt not shorter
 * than max_model_len, or more blocks than the pool has), OUT_OF_MEMORY. */
llb_status sched_add_request(struct scheduler *s, const struct sched_new_request *nr);

/* Plans step N+1: first commits step N if it was planned and not committed yet (the caller
 * sent it, or it had no tokens), then fills `out` and the step's kv step in `kv` (both cleared
 * first). When kv_step_empty(kv), `out` is final. Otherwise send kv and call
 * sched_apply_kv_result with the answer before anything else. Errors: INVALID_ARGUMENT if a
 * kv round trip is unanswered, or a committed step is unanswered without async_scheduling,
 * or two are with it; OUT_OF_MEMORY. */
llb_status sched_schedule(struct scheduler *s, struct sched_output *out, struct kv_step *kv);

/* Consumes the kv_manager's answer to the last kv step: gives new requests their blocks
 * and prefix hits (num_computed_tokens jumps by the hit, the scheduled count shrinks by
 * it), running ones their new blocks; a refused allocation unschedules that request for
 * this step (a new one goes back to the front of the waiting queue) and counts an
 * alloc failure. Every block id is checked (in range, distinct, a fresh block held by no
 * one): an answer that disagrees with the block state (such ids, a refused RELEASE or CACHE,
 * a free count other than ours) takes nothing from the op concerned, is counted
 * (num_kv_protocol_faults) and makes the next kv step a resync. Rewrites `out` (final).
 * Errors: INVALID_ARGUMENT (no kv step pending, step or op count mismatch: then every
 * request of the step is unscheduled and the next kv step resyncs), OUT_OF_MEMORY. */
llb_status sched_apply_kv_result(struct scheduler *s, const struct kv_step_result *res,
                                 struct sched_output *out);

/* Multimodal encoder inputs of the step (vLLM _try_schedule_encoder_inputs), after
 * sched_schedule and, when it had kv ops, sched_apply_kv_result (so a prefix hit that
 * already covers an item needs no encoding). For each scheduled request, in order, the items
 * whose placeholders overlap its scheduled tokens: cached ones take a reference
 * (check_and_update), the others are allocated against the encoder-cache mirror under the
 * step's encoder_compute_budget (and max_encoder_bytes_per_step); the request's tokens are
 * cut before the first item that does not fit (to 0 when its computed tokens are already
 * inside that item: then it leaves this step). Fills out->encoder_inputs and
 * out->free_encoder_mm_hashes (entries evicted this step) and rewrites `out` (final).
 * `enc` (cleared first) gets the step's ops for the encoder_cache actor: the FREE_REQUEST
 * ops of requests finished or preempted since the last encoder step, then this step's ops
 * with the mirror's answers in `expected`; enc->reset asks the actor to drop everything
 * first (after sched_preempt_all or a mismatch). When enc->num_ops == 0 and !enc->reset,
 * nothing needs sending. Requests without a hashed mm feature are not touched. Errors:
 * INVALID_ARGUMENT (a kv step unanswered, or no step planned), OUT_OF_MEMORY. */
llb_status sched_schedule_encoder(struct scheduler *s, struct sched_output *out,
                                  struct encoder_step *enc);

/* Checks the encoder_cache actor's answer to the last encoder step against the mirror:
 * each op's result and the free rows. A difference is counted (num_encoder_mismatches),
 * logged, and makes the next encoder step a reset (the mirror is reset now; its entries'
 * hashes go to the worker in the next free_encoder_mm_hashes; items are recomputed when
 * needed). The current step is unaffected (the mirror decided it). */
void sched_apply_encoder_result(struct scheduler *s, const struct encoder_step *enc,
                                const bool *results, int32_t num_results, int32_t num_free_slots);

/* Applies the worker's output for the oldest committed step (committing the planned one
 * first): appends the sampled tokens of requests whose scheduled range reached the end of
 * their known tokens (partial prefills sample nothing), checks stops, and writes one entry
 * per request with new tokens or a finish into `eo` (cleared first). Tokens of requests
 * that finished since the step was planned are discarded. Finished requests leave; their
 * blocks are freed with the next kv step; their ids reach the worker in the next
 * sched_output. Errors: INVALID_ARGUMENT (a kv step unanswered, no step in flight, or
 * mo->step is not the oldest), OUT_OF_MEMORY. */
llb_status sched_update_from_output(struct scheduler *s, const struct sched_model_output *mo,
                                    struct sched_engine_outputs *eo);

/* Finishes requests with `reason` (ABORT or ERROR), appending their final outputs to `eo`
 * (not cleared). A request whose step is in flight finishes when that step's output is
 * applied. Unknown ids are ignored (already finished). Errors: OUT_OF_MEMORY. */
llb_status sched_abort_requests(struct scheduler *s, const char *const *req_ids, int32_t n,
                                enum sched_finish_reason reason, struct sched_engine_outputs *eo);

/* Disaggregated prefill/decode, the prefill side (vLLM v1: a request with do_remote_decode
 * finishes on the prefill engine after its first token): request `req_id` (running or waiting,
 * with at least one output) finishes here with SCHED_FINISH_REASON_HANDED_OFF (internal: the
 * wire says NONE, the client's stream goes on on the decode engine). Its final output, with no
 * new token, is appended to `eo` (not cleared) and takes its user over; it leaves as any finished
 * request (its id in the next finished_req_ids, its blocks freed with the next kv step, to the
 * prefix cache; a step in flight that includes it is discarded when applied). Call after the
 * caller handed the request over (published it to the decode engine). Errors: INVALID_ARGUMENT
 * (unknown, finished, aborted, pooling, no output yet), OUT_OF_MEMORY. */
llb_status sched_hand_off(struct scheduler *s, const char *req_id, struct sched_engine_outputs *eo);

/* KV transfer housekeeping (sched_config.kv_transfer), before each sched_schedule: now_s is the
 * caller's clock (seconds, monotonic). Exports whose deadline (kv_export_expires_s after they
 * were sent, plus as long again) passed without finished_sending are released (a worker that
 * restarted never reports them; one that is alive dropped them at their expiry). With `poll`,
 * while transfers are under way (a request in WAITING_FOR_REMOTE_KVS, or an export held) the
 * next sched_schedule plans a step even with no tokens (sched_output.kv_poll), so that the
 * worker's output says which ended; the caller polls at the rate it wants (an idle engine would
 * otherwise send such steps back to back). */
void sched_kv_tick(struct scheduler *s, bool poll, double now_s);
/* The step `out` (its kv_sends, from sched_schedule) never reached the worker (a KV or encoder
 * round trip failed, or the send did): its exports go with the next step instead, so that the
 * decode engine, which has the hand-off already, can still fetch them (else the worker never
 * registers them, the decode side waits on NotReady and the blocks stay held until the send
 * deadline). Exports ended meanwhile are skipped. Not for a step that was sent (the worker may
 * have registered them: a second registration would be a new export generation). */
void sched_kv_sends_unsent(struct scheduler *s, const struct sched_output *out);
/* Whether transfers are under way (see sched_kv_tick). */
bool sched_kv_pending(const struct scheduler *s);
/* The worker's KV contents may be gone (a worker or the bus seen failing): every
 * held export is ended (its blocks released with the next kv step) and the block-accounting
 * epoch advances. Every later step carries the new epoch (sched_output.kv_epoch), and the
 * worker drops the exports it holds before such a step, so no fetch reads a block reallocated
 * meanwhile. A new scheduler starts with a random epoch for the same reason: its
 * predecessor's exports go. A kv_manager failure needs none of this: the resync keeps every
 * held block, exports included (sched_kv_resync). */
void sched_kv_new_epoch(struct scheduler *s);

/* The kv_manager's state is in doubt (a failed, refused or mismatched KV round trip, a
 * restarted or replaced kv_manager): the next kv step carries resync with every block a
 * request or an export holds, and the kv_manager rebuilds its free queue from it (no block
 * held here can go to another request). A new scheduler starts with one pending. Pending
 * until a kv step carrying it is answered validly. */
void sched_kv_resync(struct scheduler *s);
/* Sets sched_config.max_resync_blocks (n >= 0; 0 = unlimited): the actor learns the bus'
 * max_payload only once connected, after sched_create. */
void sched_set_max_resync_blocks(struct scheduler *s, int32_t n);
/* The KV contents are gone (the worker failed): as sched_kv_resync, and the next kv step
 * drops every hash of the prefix cache (reset); blocks computed before are never registered
 * (deferred CACHE dropped, exports not cached when they end). */
void sched_kv_reset(struct scheduler *s);

/* Recovery (docs/design.md §6): preempts every running request for recompute (its blocks are
 * released with the next kv step) and forgets the steps in flight (their outputs, should they
 * come, are refused by step number). Exports stay held. The kv_manager needs no state from
 * before: what it should do about a failure is sched_kv_resync / sched_kv_reset. */
void sched_preempt_all(struct scheduler *s);

/* A request that takes part in this many failed steps in a row is finished with ERROR. */
#define SCHED_MAX_FAILED_STEPS 2

/* Recovery from a step the worker failed, isolating a poison request (one whose input makes
 * every step it is in fail) so that it cannot stall the others: with `blamed_req_id` (the
 * worker named it, ModelRunnerOutput.failed_req_id) that request is finished with ERROR at
 * once; without one and with `count` (the worker answered with an error, so the failure
 * follows from the batch, not from a restart or a timeout) every request of the failed
 * steps becomes a suspect (num_failed_steps + 1), a step then takes at most one suspect
 * (sched_schedule), and a suspect whose count reaches SCHED_MAX_FAILED_STEPS is finished
 * with ERROR; one step applied for it clears it. Then, in every case, sched_preempt_all(s):
 * the others are recomputed. Final outputs are appended to `eo` (not cleared).
 * Errors: OUT_OF_MEMORY. */
llb_status sched_step_failed(struct scheduler *s, const char *blamed_req_id, bool count,
                             struct sched_engine_outputs *eo);

void sched_get_stats(const struct scheduler *s, struct sched_stats *out);
int32_t sched_num_unfinished(const struct scheduler *s);  /* waiting + running */
/* The deployment's key this scheduler hashes with (sched_config.hash_key). Borrowed. */
const struct llb_hash_key *sched_hash_key(const struct scheduler *s);
/* The live request with that id (waiting or running), or NULL. Read-only. */
const struct sched_request *sched_find_request(const struct scheduler *s, const char *req_id);
/* Steps with tokens whose output is not applied yet, the last planned one included (it is
 * committed lazily): 0, 1, or 2 with async_scheduling. */
int32_t sched_num_steps_in_flight(const struct scheduler *s);
/* Reference count of a block (requests and exports holding it); -1 out of range. */
int32_t sched_block_ref_cnt(const struct scheduler *s, int32_t block_id);

#endif
