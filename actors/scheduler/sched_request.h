/* A request inside the scheduler (vLLM v1 vllm/v1/request.py Request): its tokens (prompt
 * then outputs, in one buffer sized at creation so no step allocates), progress, KV blocks
 * and full-block hashes, and the per-step scratch the scheduler fills.
 *
 * Callers outside the scheduler only read it (sched_find_request). The token buffer holds
 * num_prompt_tokens + max_tokens ids (capped by max_model_len); block arrays hold
 * ceil(max_model_len / block_size) entries.
 */
#ifndef LLB_SCHED_REQUEST_H
#define LLB_SCHED_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hash.h"
#include "base/status.h"
#include "schemas/codec.h"
#include "schemas/sampling_params.h"

enum sched_request_status {
  SCHED_REQUEST_STATUS_WAITING = 0,
  SCHED_REQUEST_STATUS_RUNNING,
  SCHED_REQUEST_STATUS_PREEMPTED,          /* waiting again, to be recomputed */
  SCHED_REQUEST_STATUS_WAITING_FOR_REMOTE_KVS, /* blocks allocated, the worker fetches their KV
                                              from the prefill engine (vLLM's status) */
  SCHED_REQUEST_STATUS_FINISHED_STOPPED,   /* EOS or a stop token */
  SCHED_REQUEST_STATUS_FINISHED_LENGTH_CAPPED,
  SCHED_REQUEST_STATUS_FINISHED_ABORTED,
  SCHED_REQUEST_STATUS_FINISHED_ERROR,
  SCHED_REQUEST_STATUS_FINISHED_HANDED_OFF, /* goes on on a decode engine (sched_hand_off) */
};

/* Why a request finished; values equal FinishReason in schemas/common.fbs. */
enum sched_finish_reason {
  SCHED_FINISH_REASON_NONE = 0,
  SCHED_FINISH_REASON_STOP = 1,
  SCHED_FINISH_REASON_LENGTH = 2,
  SCHED_FINISH_REASON_ABORT = 3,
  SCHED_FINISH_REASON_ERROR = 4,
  /* Internal, never on the wire: the request left this (prefill) engine for a decode engine
   * after its first token (sched_hand_off); the client's stream goes on there. */
  SCHED_FINISH_REASON_HANDED_OFF = 100,
};

/* Decode side of a KV transfer (vLLM v1 WAITING_FOR_REMOTE_KVS): NONE (computes its KV), WANTED
 * (admitted with remote KV, blocks not allocated yet), RECVING (blocks allocated, the worker
 * fetches; status WAITING_FOR_REMOTE_KVS until finished_recving / failed_recving). */
enum sched_kv_recv_state {
  SCHED_KV_RECV_NONE = 0,
  SCHED_KV_RECV_WANTED,
  SCHED_KV_RECV_RECVING,
};

/* A multimodal input: its embeddings replace `length` placeholder tokens from `offset`;
 * mm_hash (llb_hash_bytes of the content hash string, computed by sched_request_create under
 * the scheduler's key when `hash` is set) is an extra key of every block the placeholders
 * overlap. The strings and data are copied by sched_request_create (NULL =
 * none); `hash` is the encoder-cache key (when NULL or "", the request takes no part in
 * encoder scheduling: its embeddings are assumed present, as in tests of block hashing). */
struct sched_mm_feature {
  int32_t offset;
  int32_t length;
  uint64_t mm_hash;
  const char *hash;         /* content hash string (vLLM mm_hash / identifier) */
  const char *modality;     /* "embeds", "image", ... */
  const char *dtype;        /* "f16" / "f32" */
  int32_t num_cols;
  const uint8_t *data;      /* [length, num_cols] of dtype, little-endian; 16-byte aligned;
                               or an image file (dtype "jpeg" / "png") */
  int64_t data_bytes;
  const uint8_t *is_embed;  /* [length]: 1 = the position takes the next encoder row (vLLM
                               PlaceholderRange.is_embed); NULL = every position does */
  int32_t num_embeds;       /* encoder rows (the 1s of is_embed; length without a mask): what
                               the encoder budget and the encoder cache count. Set by
                               sched_request_create from is_embed */
};

/* What sched_add_request needs (vLLM EngineCoreRequest); everything is copied but `user` and
 * `sampling_params`. */
struct sched_new_request {
  const char *request_id;               /* unique among live requests, <= 255 bytes */
  const int32_t *prompt_token_ids;      /* [num_prompt_tokens], >= 1 */
  int32_t num_prompt_tokens;
  /* non-NULL; borrowed, not copied: it must stay valid while the request is live (until it
   * finishes; the scheduler reads it only before then). The scheduler actor's req_meta, the
   * request's `user`, holds it (actors/scheduler/req_meta.h). */
  const struct llb_sampling_params *sampling_params;
  int32_t eos_token_id;                 /* -1 = none */
  double arrival_time;                  /* seconds since the Unix epoch */
  int32_t priority;                     /* lower runs first (priority policy) */
  const char *cache_salt;               /* NULL or "" = none */
  const struct sched_mm_feature *mm_features; /* [num_mm_features], sorted by offset */
  int32_t num_mm_features;
  struct llb_structured_outputs structured_outputs; /* kind NONE = unconstrained; spec copied */
  struct llb_pooling_params pooling_params; /* type NONE: sample; else a pooling request (vLLM
                                               embed task): prompt only, then it finishes */
  /* A request replayed from the durable stream after a scheduler restart: the outputs it had
   * produced (the output processor's history). They become its first outputs, recomputed as
   * context in its prefill instead of generated again one step at a time (as after a
   * preemption); at most max_tokens - 1 of them are kept, so it still samples. NULL/0 = none. */
  const int32_t *resume_output_ids;     /* [num_resume_output_ids] */
  int32_t num_resume_output_ids;
  /* vLLM LoRARequest: the adapter it runs with (lora_name copied; a key of every block hash);
   * NULL/"" and 0 = the base model. The scheduler adds one only with sched_config.enable_lora. */
  const char *lora_name;
  int32_t lora_int_id;                  /* >= 1 with a name */
  /* Disaggregated prefill/decode with KV transfer (sched_config.kv_transfer): a hand-off whose
   * first kv_remote_num_tokens tokens' KV the prefill engine kv_remote_engine_id holds (under
   * request id kv_remote_request_id): fetched instead of computed (WAITING_FOR_REMOTE_KVS); at
   * most num_prompt_tokens + outputs - 1. NULL / 0 = none. Strings copied. */
  const char *kv_remote_engine_id, *kv_remote_request_id;
  int32_t kv_remote_num_tokens;
  /* The caller's own data for this request (the scheduler actor's routing and first-output
   * fields), or NULL: never read by the scheduler, which carries it as sched_request.user. */
  void *user;
};

struct sched_request {
  char *request_id;
  /* sched_new_request.user. It leaves with the request's final output: the output that
   * finishes it (sched_engine_output.user) takes it over and this becomes NULL; a request
   * finished without an output (its ABORT went out before) or still live when the scheduler
   * is destroyed has it freed by sched_config.free_user. So the owner frees each user once,
   * after publishing the final output that carries it. */
  void *user;
  const struct llb_sampling_params *sampling_params; /* sched_new_request's, borrowed */
  struct llb_pooling_params pooling_params; /* type NONE: it samples */
  int32_t eos_token_id;
  double arrival_time;
  int32_t priority;
  uint64_t arrival_seq;                 /* admission order: ties in the waiting queue */

  int32_t *token_ids;                   /* [cap_tokens]: prompt, then outputs */
  int32_t num_prompt_tokens, num_tokens, cap_tokens;
  int32_t max_tokens;                   /* resolved output cap (-1 in params = context) */
  int32_t num_computed_tokens;          /* tokens whose KV is in the cache */
  enum sched_request_status status;
  enum sched_finish_reason finish_reason;
  int32_t stop_token_id;                /* the stop token that finished it, -1 none */

  int32_t *block_ids;                   /* [num_block_ids] of cap_blocks, in order */
  int32_t num_block_ids, cap_blocks;
  uint64_t *block_hashes;               /* [num_block_hashes]: hashes of full token blocks */
  int32_t num_block_hashes;
  int32_t num_cached_blocks;            /* blocks registered in the prefix cache (CACHE sent) */
  bool has_cache_salt;
  uint64_t cache_salt_hash;
  uint64_t tenant_key;                  /* sched_fair_tenant_key of the salt: 0 = none */
  char *lora_name;                      /* the adapter (owned), NULL = the base model */
  int32_t lora_int_id;                  /* 0 = the base model */
  uint64_t lora_name_hash;              /* llb_hash_bytes of lora_name: in every block hash */
  struct sched_mm_feature *mm_features; /* [num_mm_features] */
  int32_t num_mm_features;
  void *mm_blob;                        /* owns the features' strings and data */
  int32_t *enc_input_ids;               /* [num_mm_features] scratch: this step's encoder inputs */
  int32_t num_enc_inputs;

  struct llb_structured_outputs structured_outputs; /* sent with every NewRequestData; spec
                                           owned (so_spec) */
  char *so_spec;
  int32_t num_cached_tokens;            /* prefix-cache hit of the first scheduling, -1 unknown */
  int32_t num_preemptions;
  bool on_worker;                       /* in the worker's persistent batch */
  bool abort_pending;                   /* aborted while its step was in flight */
  bool retired;                         /* finished, unreferenced: destroyed at the next
                                           sched_schedule (sched_retire) */
  struct sched_request *retired_next;   /* the scheduler's list of retired requests */
  /* KV transfer (disaggregated prefill/decode; scheduler.c) */
  enum sched_kv_recv_state kv_recv;           /* decode side: where its remote KV stands */
  char *kv_remote_engine_id, *kv_remote_request_id; /* owned; NULL = not a receiver */
  int32_t kv_remote_num_tokens;         /* tokens whose KV it receives */
  int32_t kv_remote_first_block;        /* the remote block its first fetched block is (the ones
                                           before hit its own prefix cache) */
  bool kv_sending;                      /* prefill side: handed off, its blocks held for the
                                           decode engine's fetch until finished_sending */
  double kv_send_deadline_s;            /* released then at the latest (sched_kv_tick's clock) */
  int32_t num_output_placeholders;      /* tokens the worker samples in committed steps whose
                                           output is not back yet (async scheduling, vLLM's
                                           num_output_placeholders); 0 in synchronous use */
  int32_t num_inflight_steps;           /* committed steps not applied yet that include it: a
                                           finished request lives on until they are applied */
  enum sched_finish_reason abort_reason;
  int32_t num_failed_steps;             /* consecutive failed worker steps it took part in (the
                                           worker answered with an error naming nobody); a
                                           "suspect" while > 0, an error at SCHED_MAX_FAILED_STEPS */
  uint64_t failure_stamp;               /* counts one failure once (it may be in two steps) */

  /* speculative decoding: the worker's drafts for the next step (vLLM Request.spec_token_ids),
   * replaced by every output that includes the request, dropped on preemption */
  int32_t spec_token_ids[LLB_MAX_SPEC_TOKENS];
  int32_t num_spec_tokens;

  /* per-step scratch (valid between sched_schedule and sched_update_from_output) */
  int32_t num_scheduled_tokens;
  int32_t num_scheduled_spec_tokens;    /* drafts among num_scheduled_tokens (the last ones) */
  int32_t planned_new_blocks;           /* free blocks reserved for this step */
  int32_t num_lookahead_tokens;         /* slots beyond the scheduled tokens this step */
  int32_t step_blocks_begin;            /* block_ids index where this step's blocks start */
  bool scheduled_as_new;                /* NewRequestData (first time or resumed) */
  bool lookup;                          /* prefix-cache lookup with this step's ALLOCATE */
  int32_t queue_index;                  /* position in the waiting queue's heap, -1 none */
  int64_t sampled_offset;               /* this step's sampled tokens in the model output */
  int32_t num_sampled;
  int64_t pooled_offset;                /* this step's pooled vector in the model output */
  int32_t num_pooled;                   /* its floats, 0 = none */
};

/* Checks `nr` as input from an untrusted sender (anyone who can publish on
 * <prefix>.engine.<eid>.requests): token ids (prompt, eos_token_id, stop_token_ids) inside
 * [0, vocab_size) (vocab_size <= 0: unknown, ids only checked >= 0), sampling floats finite
 * and inside the ranges the input processor enforces, counts within their arrays, the
 * multimodal items' sizes and finite f16/f32 embedding rows. The worker fails a whole step on
 * such values; this keeps them out of it. Errors: INVALID_ARGUMENT naming the field. */
llb_status sched_new_request_validate(const struct sched_new_request *nr, int32_t vocab_size);

/* Creates a request from `nr`: copies ids, params, salt hash and mm features, resolves
 * max_tokens against max_model_len, computes the prompt's full-block hashes. Caller frees
 * with sched_request_destroy. Errors: INVALID_ARGUMENT (empty prompt, prompt not shorter
 * than max_model_len, bad id), OUT_OF_MEMORY. */
llb_status sched_request_create(const struct sched_new_request *nr, int32_t max_model_len,
                                int32_t block_size, const struct llb_hash_key *hash_key, uint64_t arrival_seq,
                                struct sched_request **out);
void sched_request_destroy(struct sched_request *r); /* accepts NULL */

static inline int32_t sched_request_num_output_tokens(const struct sched_request *r) {
  return r->num_tokens - r->num_prompt_tokens;
}
/* Tokens whose KV a request handed off after step output has for sure: every position before its
 * last sampled token (a step computing that one may still be in flight). */
static inline int32_t sched_request_kv_export_tokens(const struct sched_request *r) {
  return r->num_computed_tokens < r->num_tokens - 1 ? r->num_computed_tokens : r->num_tokens - 1;
}

/* A pooling request (vLLM's embed task): computes its prompt, samples nothing. */
static inline bool sched_request_is_pooling(const struct sched_request *r) {
  return r->pooling_params.pooling_type != LLB_POOLING_NONE;
}
static inline bool sched_request_is_finished(const struct sched_request *r) {
  return r->status >= SCHED_REQUEST_STATUS_FINISHED_STOPPED;
}

/* Extends block_hashes over every full block of token_ids (vLLM Request.block_hashes,
 * chained with llb_block_hash under hash_key, the key every hash of the request was made
 * with). No allocation. */
void sched_request_update_block_hashes(struct sched_request *r, int32_t block_size,
                                       const struct llb_hash_key *hash_key);

/* Appends one sampled token and applies vLLM's stop checks in its order (v1/core/sched/
 * utils.py check_stop): max_tokens or max_model_len reached caps it (LENGTH); else, once
 * min_tokens are out, EOS (unless ignore_eos) or a stop_token_id stops it (STOP). Returns the finish reason
 * (NONE = keep going) and sets status/finish_reason/stop_token_id. Never overflows: the
 * buffer holds every token up to the length cap. */
enum sched_finish_reason sched_request_append_token(struct sched_request *r, int32_t token_id,
                                                    int32_t max_model_len);

#endif
