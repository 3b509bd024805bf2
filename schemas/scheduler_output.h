/* SchedulerOutput: scheduler -> gpu_worker, one per step (schemas/scheduler_output.fbs;
 * vLLM v1 vllm/v1/core/sched/output.py). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_SCHEDULER_OUTPUT_H
#define LLB_SCHEMAS_SCHEDULER_OUTPUT_H

#include "schemas/codec.h"
#include "schemas/kv_transfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A request the worker has not seen (or sees again after preemption). */
struct llb_new_request_data {
  struct llb_str req_id;                             /* required */
  const int32_t *prompt_token_ids;                   /* [num_prompt_token_ids] */
  int32_t num_prompt_token_ids;
  const struct llb_sampling_params *sampling_params; /* required */
  const int32_t *block_ids;                          /* [num_block_ids], in order */
  int32_t num_block_ids;
  int32_t num_computed_tokens;
  const struct llb_mm_feature *mm_features;
  int32_t num_mm_features;
  const int32_t *output_token_ids;                   /* [num_output_token_ids]: already
                                                        generated (resumed requests) */
  int32_t num_output_token_ids;
  struct llb_structured_outputs structured_outputs;  /* kind NONE = unconstrained */
  struct llb_pooling_params pooling_params;          /* type NONE = sample; else pool */
  struct llb_lora_request lora_request;              /* lora_int_id >= 1; name "" = the base model */
};

/* Deltas for requests in the worker's persistent batch: parallel arrays of num_reqs. The
 * flattened arrays hold request i's entries after those of requests 0..i-1. */
struct llb_cached_request_data {
  int32_t num_reqs;
  const struct llb_str *req_ids;        /* [num_reqs] */
  const bool *resumed_from_preemption;  /* [num_reqs] */
  const int32_t *new_token_ids;         /* [num_new_token_ids] (pipeline parallelism only) */
  int32_t num_new_token_ids;            /* = sum of new_token_counts */
  const int32_t *new_token_counts;      /* [num_reqs]; encode: NULL = all 0 */
  const int32_t *new_block_ids;         /* [num_new_block_ids] */
  int32_t num_new_block_ids;            /* = sum of new_block_counts */
  const int32_t *new_block_counts;      /* [num_reqs]; encode: NULL = all 0 */
  const int32_t *num_computed_tokens;   /* [num_reqs] */
  const int32_t *num_output_tokens;     /* [num_reqs] */
};

struct llb_scheduled_tokens {
  struct llb_str req_id; /* required */
  int32_t num_tokens;    /* >= 0 */
  struct llb_str traceparent; /* the request's step span, "" = not traced */
  /* vLLM scheduled_spec_decode_tokens: drafts verified this step, the last
   * num_spec_token_ids of num_tokens (<= num_tokens - 1); NULL/0 = none */
  const int32_t *spec_token_ids;
  int32_t num_spec_token_ids;
};

struct llb_scheduled_encoder_input {
  struct llb_str req_id;    /* required */
  const int32_t *input_ids; /* [num_input_ids]: indices into the request's mm_features */
  int32_t num_input_ids;
  /* The inputs to encode with their data, parallel to input_ids ([num_mm_features] =
   * num_input_ids when present; 0 = none: the worker then uses the request's own). */
  const struct llb_mm_feature *mm_features;
  int32_t num_mm_features;
};

/* Disaggregated prefill/decode (issue 36; vLLM v1 KVConnectorMetadata, nixl_connector.py ReqMeta):
 * scheduler_output.fbs KVRecvRequest / KVSendRequest / KVConnectorMetadata. What the worker's KV
 * connector (actors/gpu_worker/kv_transfer.h) does around the step. Checked both ways: ids
 * required and at most LLB_KV_REQ_ID_MAX bytes, remote_engine_id one subject token (1..64
 * letters, digits, '-', '_'), block ids >= 0, counts in [1, LLB_KV_MAX_BLOCKS_PER_REQ], the
 * block-count relations below (with SchedulerOutput.block_size), expires_in_s finite in
 * (0, LLB_KV_MAX_EXPIRES_S]. */

/* A request whose KV this engine receives (decode side): local_block_ids[i] receives the remote
 * export's block remote_first_block + i (the earlier ones this engine already holds: a prefix
 * cache hit); remote_first_block + num_local_block_ids = ceil(num_tokens / block_size). */
struct llb_kv_recv_request {
  struct llb_str req_id;             /* required: this engine's request id */
  const int32_t *local_block_ids;    /* [num_local_block_ids] this worker's blocks, in order */
  int32_t num_local_block_ids;       /* >= 1 */
  struct llb_str remote_engine_id;   /* required: the exporting engine (a subject token) */
  struct llb_str remote_request_id;  /* required: the request's id on that engine */
  int32_t remote_first_block;        /* >= 0 */
  int32_t num_tokens;                /* >= 1: tokens whose KV is moved, from the request's start */
};

/* A request whose KV this engine exports (prefill side): block_ids are served to fetches naming
 * req_id until the fetcher releases the export (naming its generation: kv_transfer.fbs) or
 * expires_in_s passed; then req_id is reported in finished_sending. num_block_ids = ceil(num_tokens / block_size). */
struct llb_kv_send_request {
  struct llb_str req_id;     /* required: this engine's request id */
  const int32_t *block_ids;  /* [num_block_ids] this worker's blocks holding the KV, in order */
  int32_t num_block_ids;     /* >= 1 */
  int32_t num_tokens;        /* >= 1 */
  float expires_in_s;        /* finite, in (0, LLB_KV_MAX_EXPIRES_S] */
};

/* Both counts and the epoch 0 = absent on the wire. */
struct llb_kv_connector_metadata {
  const struct llb_kv_recv_request *reqs_to_recv; /* [num_reqs_to_recv] */
  int32_t num_reqs_to_recv;
  const struct llb_kv_send_request *reqs_to_send; /* [num_reqs_to_send] */
  int32_t num_reqs_to_send;
  /* The scheduler's block-accounting epoch (0 = none): a change makes the worker drop every
   * export it holds before the step, unreported (their blocks may be reallocated in it). */
  uint64_t epoch;
};

struct llb_scheduler_output {
  uint16_t version;
  uint64_t step;
  const struct llb_new_request_data *scheduled_new_reqs; /* [num_scheduled_new_reqs] */
  int32_t num_scheduled_new_reqs;
  struct llb_cached_request_data scheduled_cached_reqs;
  const struct llb_scheduled_tokens *num_scheduled_tokens; /* [num_scheduled_reqs] */
  int32_t num_scheduled_reqs;
  int32_t total_num_scheduled_tokens; /* = sum of num_scheduled_tokens[].num_tokens (checked) */
  const struct llb_scheduled_encoder_input *scheduled_encoder_inputs;
  int32_t num_scheduled_encoder_inputs;
  const struct llb_str *finished_req_ids;
  int32_t num_finished_req_ids;
  const struct llb_str *free_encoder_mm_hashes;
  int32_t num_free_encoder_mm_hashes;
  const struct llb_str *preempted_req_ids;
  int32_t num_preempted_req_ids;
  int32_t block_size; /* >= 1 */
  struct llb_kv_connector_metadata kv_connector_metadata; /* issue 36; zero = none */
};

llb_status llb_scheduler_output_encode(const struct llb_scheduler_output *m, uint8_t *buf,
                                       size_t cap, size_t *len_out);
llb_status llb_scheduler_output_encode_buf(const struct llb_scheduler_output *m,
                                           struct llb_buf *out);
llb_status llb_scheduler_output_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                       struct llb_scheduler_output *out);

#ifdef __cplusplus
}
#endif

#endif
