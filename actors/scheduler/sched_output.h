/* The scheduler's boundary structs as plain C (vLLM v1 vllm/v1/core/sched/output.py,
 * vllm/v1/outputs.py, vllm/v1/engine/__init__.py): SchedulerOutput (sched_output), the
 * worker's ModelRunnerOutput (sched_model_output) and EngineCoreOutputs
 * (sched_engine_outputs). Wire forms: schemas/scheduler_output.fbs, model_runner_output.fbs,
 * engine_core_outputs.fbs.
 *
 * Ownership: the caller owns each struct and reuses it across steps (arrays grow, then
 * stay). Pointers inside a sched_output (ids, token ids, block ids, params) point into the
 * scheduler's requests and are valid until the next sched_update_from_output,
 * sched_abort_requests or sched_preempt_all call; strings in the string lists and in
 * sched_engine_outputs are copies.
 */
#ifndef LLB_SCHED_OUTPUT_H
#define LLB_SCHED_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/sched_request.h"
#include "base/status.h"
#include "schemas/sampling_params.h"

/* A growable list of copied NUL-terminated strings. */
struct sched_str_list {
  int32_t num, cap;
  int64_t *offsets;             /* [num] into chars */
  int64_t num_chars, cap_chars;
  char *chars;
};

void sched_str_list_clear(struct sched_str_list *l);
void sched_str_list_free(struct sched_str_list *l);
llb_status sched_str_list_add(struct sched_str_list *l, const char *s); /* OUT_OF_MEMORY */
const char *sched_str_list_get(const struct sched_str_list *l, int32_t i); /* valid until the next add */

/* NewRequestData: a request the worker has not seen, or sees again after preemption. */
struct sched_new_req_data {
  const char *req_id;
  const int32_t *prompt_token_ids;       /* [num_prompt_tokens] */
  int32_t num_prompt_tokens;
  const int32_t *output_token_ids;       /* [num_output_tokens]: a resumed request's outputs,
                                            recomputed as part of its context */
  int32_t num_output_tokens;
  const struct llb_sampling_params *sampling_params;
  const int32_t *block_ids;              /* [num_block_ids]: all of the request's blocks */
  int32_t num_block_ids;
  int32_t num_computed_tokens;           /* prefix-cache hit: tokens not to compute */
  int32_t num_scheduled_tokens;
  bool resumed_from_preemption;
  const struct sched_mm_feature *mm_features; /* [num_mm_features] */
  int32_t num_mm_features;
  const struct llb_structured_outputs *structured_outputs; /* the request's; kind NONE = none */
  struct llb_pooling_params pooling_params; /* type NONE: it samples */
  const char *lora_name;                 /* its LoRA adapter, NULL = the base model */
  int32_t lora_int_id;                   /* 0 = the base model */
};

/* CachedRequestData, one entry: deltas for a request in the worker's persistent batch. */
struct sched_cached_req_data {
  const char *req_id;
  const int32_t *new_block_ids;          /* [num_new_block_ids] appended this step */
  int32_t num_new_block_ids;
  int32_t num_computed_tokens;           /* before this step's tokens */
  int32_t num_output_tokens;
  int32_t num_scheduled_tokens;
  const int32_t *spec_token_ids;         /* [num_spec_tokens] drafts verified this step: the last
                                            num_spec_tokens of num_scheduled_tokens (vLLM
                                            scheduled_spec_decode_tokens) */
  int32_t num_spec_tokens;
};

/* ScheduledEncoderInput: the request's mm_features[input_ids[i]] are encoded this step. */
struct sched_encoder_input {
  const char *req_id;
  const int32_t *input_ids;              /* [num_input_ids] */
  int32_t num_input_ids;
  const struct sched_mm_feature *mm_features; /* the request's [num_mm_features] (with data) */
};

/* KV transfer of disaggregated prefill/decode (vLLM v1 KVConnectorMetadata; schemas/
 * scheduler_output.h llb_kv_recv_request / llb_kv_send_request). Pointers into the requests:
 * valid until the next sched_schedule. */
struct sched_kv_recv {
  const char *req_id;
  const int32_t *local_block_ids;        /* [num_local_block_ids] blocks to fill, in order */
  int32_t num_local_block_ids;
  const char *remote_engine_id, *remote_request_id;
  int32_t remote_first_block;            /* the remote block local_block_ids[0] receives */
  int32_t num_tokens;                    /* tokens whose KV moves, from the request's start */
};

struct sched_kv_send {
  const char *req_id;
  const int32_t *block_ids;              /* [num_block_ids] the blocks holding the KV, in order */
  int32_t num_block_ids;
  int32_t num_tokens;
  float expires_in_s;
};

struct sched_output {
  uint64_t step;
  int32_t block_size;
  int32_t num_new_reqs, cap_new_reqs;
  struct sched_new_req_data *new_reqs;   /* [num_new_reqs] */
  int32_t num_cached_reqs, cap_cached_reqs;
  struct sched_cached_req_data *cached_reqs; /* [num_cached_reqs] */
  int32_t total_num_scheduled_tokens;    /* sum over both lists */
  struct sched_str_list finished_req_ids;  /* the worker drops their state */
  struct sched_str_list preempted_req_ids; /* the worker drops their state (recompute later) */
  int32_t num_encoder_inputs, cap_encoder_inputs;
  struct sched_encoder_input *encoder_inputs; /* [num_encoder_inputs] (sched_schedule_encoder) */
  struct sched_str_list free_encoder_mm_hashes; /* evicted: the worker drops their outputs */
  struct sched_kv_recv *kv_recvs;        /* [num_kv_recvs] receives starting with this step */
  int32_t num_kv_recvs, cap_kv_recvs;
  struct sched_kv_send *kv_sends;        /* [num_kv_sends] exports starting with this step */
  int32_t num_kv_sends, cap_kv_sends;
  uint64_t kv_epoch;                     /* the scheduler's block-accounting epoch (0: no KV transfer) */
  bool kv_poll;                          /* no tokens and no transfer to start, but transfers are
                                            under way: send it anyway, its output says which ended */
};

/* Whether `o` must go to the worker although it has no tokens (transfers to start or to ask
 * about). */
static inline bool sched_output_has_kv(const struct sched_output *o) {
  return o->num_kv_recvs > 0 || o->num_kv_sends > 0 || o->kv_poll;
}

void sched_output_init(struct sched_output *o);
void sched_output_free(struct sched_output *o); /* accepts NULL */

/* ModelRunnerOutput as the scheduler reads it (caller-owned, read-only). */
struct sched_model_output {
  uint64_t step;                         /* the sched_output.step this answers */
  int32_t num_reqs;
  const char *const *req_ids;            /* [num_reqs] */
  const int32_t *num_sampled;            /* [num_reqs]; 0 = none (partial prefill) */
  const int32_t *sampled_token_ids;      /* flattened, sum(num_sampled) */
  const int32_t *num_pooled;             /* [num_reqs] floats of each pooled vector; NULL = none */
  const float *pooler_output;            /* flattened, sum(num_pooled) */
  const int32_t *num_spec_tokens;        /* [num_reqs] the worker's drafts for the next step; NULL = none */
  const int32_t *spec_token_ids;         /* flattened, sum(num_spec_tokens) */
  /* vLLM KVConnectorOutput: transfers that ended since the worker's previous output */
  const char *const *finished_sending;   /* [num_finished_sending] exports done: free their blocks */
  int32_t num_finished_sending;
  const char *const *finished_recving;   /* [num_finished_recving] every block received */
  int32_t num_finished_recving;
  const char *const *failed_recving;     /* [num_failed_recving] recompute them here */
  int32_t num_failed_recving;
};

/* EngineCoreOutput, one entry; strings and tokens live in the owning sched_engine_outputs. */
struct sched_engine_output {
  int64_t req_id_offset;                 /* read with sched_engine_outputs_req_id */
  int64_t token_offset;                  /* read with sched_engine_outputs_tokens */
  int32_t num_new_tokens;
  int32_t first_output_pos;              /* output position of the first new token */
  enum sched_finish_reason finish_reason; /* NONE while running */
  int32_t stop_token_id;                 /* -1 none */
  int32_t num_cached_tokens;             /* prefix-cache hit, tokens (0 if none) */
  int32_t num_preemptions;
  int64_t pooled_offset;                 /* read with sched_engine_outputs_pooled */
  int32_t num_pooled;                    /* a pooling request's vector (finishing output), 0 none */
  /* The request's sched_request.user when the output was added: owned by this output when it
   * is the final one (finish_reason != NONE: the request let go of it), borrowed otherwise. */
  void *user;
};

struct sched_engine_outputs {
  uint64_t step;
  int32_t num_outputs, cap_outputs;
  struct sched_engine_output *outputs;   /* [num_outputs] */
  int64_t num_token_ids, cap_token_ids;
  int32_t *token_ids;                    /* pool */
  struct sched_str_list req_ids;         /* pool */
  int64_t num_pooled, cap_pooled;
  float *pooled;                         /* pool of pooled vectors */
};

void sched_engine_outputs_init(struct sched_engine_outputs *o);
void sched_engine_outputs_free(struct sched_engine_outputs *o); /* accepts NULL */
void sched_engine_outputs_clear(struct sched_engine_outputs *o, uint64_t step);
/* Appends an output for r with its tokens [first_output_pos, first_output_pos + n) of the
 * outputs and r's user; a final output (r->finish_reason != NONE) takes r->user over (r's
 * becomes NULL). Errors: OUT_OF_MEMORY (r unchanged). */
llb_status sched_engine_outputs_add(struct sched_engine_outputs *o, struct sched_request *r,
                                    int32_t first_output_pos, int32_t n);
/* Attaches a copy of vec [n] (a pooling request's vector) to output i. OUT_OF_MEMORY. */
llb_status sched_engine_outputs_set_pooled(struct sched_engine_outputs *o, int32_t i, const float *vec, int32_t n);
/* Output i's pooled vector ([outputs[i].num_pooled]), NULL when none. */
const float *sched_engine_outputs_pooled(const struct sched_engine_outputs *o, int32_t i);
const char *sched_engine_outputs_req_id(const struct sched_engine_outputs *o, int32_t i);
const int32_t *sched_engine_outputs_tokens(const struct sched_engine_outputs *o, int32_t i);

#endif
