/* ModelRunnerOutput: gpu_worker -> scheduler, the reply to a SchedulerOutput
 * (schemas/model_runner_output.fbs; vLLM v1 vllm/v1/outputs.py). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_MODEL_RUNNER_OUTPUT_H
#define LLB_SCHEMAS_MODEL_RUNNER_OUTPUT_H

#include "schemas/codec.h"
#include "schemas/kv_transfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vLLM v1 outputs.py KVConnectorOutput (issue 36): request ids whose KV transfer ended since
 * the worker's previous ModelRunnerOutput, each reported once. All counts 0 = absent on the wire.
 * Ids checked as the requests' (required, at most LLB_KV_REQ_ID_MAX bytes: kv_transfer.h). */
struct llb_kv_connector_output {
  const struct llb_str *finished_sending; /* [num_finished_sending] exports fetched or expired */
  int32_t num_finished_sending;
  const struct llb_str *finished_recving; /* [num_finished_recving] every block received */
  int32_t num_finished_recving;
  const struct llb_str *failed_recving;   /* [num_failed_recving] transfer failed: recompute */
  int32_t num_failed_recving;
};

struct llb_model_runner_output {
  uint16_t version;
  uint64_t step;                     /* the SchedulerOutput.step answered */
  const struct llb_str *req_ids;     /* [num_reqs], batch order */
  int32_t num_reqs;
  const int32_t *sampled_token_ids;  /* [num_sampled_token_ids], request i after 0..i-1 */
  int32_t num_sampled_token_ids;     /* = sum of num_sampled (checked) */
  const int32_t *num_sampled;        /* [num_reqs], >= 0 */
  struct llb_logprobs_lists logprobs; /* num_tokens 0 = none */
  struct llb_error_info error;        /* code 0 = none */
  struct llb_str failed_req_id;       /* with error: the request the worker blames, "" = none */
  const float *pooler_output;         /* [num_pooler_output], request i's after 0..i-1 */
  int32_t num_pooler_output;          /* = sum of num_pooled (checked) */
  const int32_t *num_pooled;          /* [num_reqs], >= 0, each <= LLB_MAX_POOLED_DIMS; NULL = all 0 */
  /* vLLM prompt_logprobs_dict: rows = prompt tokens scored this step, request by request in
   * req_ids order; column 0 the prompt token (rank in sampled_token_ranks), then the top-k.
   * num_tokens 0 = none; then the two arrays below are NULL. */
  struct llb_logprobs_lists prompt_logprobs;
  const int32_t *num_prompt_logprobs;   /* [num_reqs] rows of each request */
  const int32_t *prompt_logprobs_start; /* [num_reqs] prompt index of each request's first row */
  /* vLLM spec_token_ids (speculative decoding): the proposer's drafts for each request's next
   * step, request i's after 0..i-1; num_spec_tokens NULL = none at all */
  const int32_t *spec_token_ids;        /* [num_spec_token_ids] */
  int32_t num_spec_token_ids;           /* = sum of num_spec_tokens (checked) */
  const int32_t *num_spec_tokens;       /* [num_reqs], each in [0, LLB_MAX_SPEC_TOKENS] */
  struct llb_kv_connector_output kv_connector_output; /* issue 36; zero = nothing ended */
};

llb_status llb_model_runner_output_encode(const struct llb_model_runner_output *m, uint8_t *buf,
                                          size_t cap, size_t *len_out);
llb_status llb_model_runner_output_encode_buf(const struct llb_model_runner_output *m,
                                              struct llb_buf *out);
llb_status llb_model_runner_output_decode(const uint8_t *buf, size_t len,
                                          struct llb_arena *arena,
                                          struct llb_model_runner_output *out);

#ifdef __cplusplus
}
#endif

#endif
