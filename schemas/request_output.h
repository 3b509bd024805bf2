/* RequestOutput: streamed to the client on its reply subject (schemas/request_output.fbs;
 * vLLM vllm/outputs.py). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_REQUEST_OUTPUT_H
#define LLB_SCHEMAS_REQUEST_OUTPUT_H

#include "schemas/codec.h"
#include "schemas/engine_core_outputs.h" /* enum llb_finish_reason */

#ifdef __cplusplus
extern "C" {
#endif

struct llb_top_logprob {
  int32_t token_id;
  float logprob;
  struct llb_str decoded;
};

struct llb_token_logprobs {
  int32_t token_id; /* the sampled token */
  float logprob;
  int32_t rank;     /* 1 = most likely */
  struct llb_str decoded;
  const struct llb_top_logprob *top; /* [num_top], num_top <= LLB_MAX_LOGPROBS */
  int32_t num_top;
};

struct llb_completion_output {
  int32_t index;
  struct llb_str text;
  const int32_t *token_ids; /* [num_token_ids] */
  int32_t num_token_ids;
  double cumulative_logprob;
  const struct llb_token_logprobs *logprobs; /* [num_logprobs]: 0 or one per token */
  int32_t num_logprobs;
  enum llb_finish_reason finish_reason;
  struct llb_str stop_reason;
  bool resync; /* text/token_ids/logprobs start from the beginning again (see the .fbs) */
};

struct llb_request_metrics {
  double arrival_time; /* all: seconds since the epoch, 0 = not yet */
  double first_scheduled_time;
  double first_token_time;
  double last_token_time;
  double finished_time;
  int32_t num_cached_tokens;
  int32_t num_prompt_tokens;
  int32_t num_generation_tokens;
};

struct llb_request_output {
  uint16_t version;
  struct llb_str request_id; /* required */
  const int32_t *prompt_token_ids;
  int32_t num_prompt_token_ids;
  struct llb_str prompt;
  const struct llb_completion_output *outputs; /* [num_outputs] */
  int32_t num_outputs;
  bool finished;
  struct llb_request_metrics metrics;
  struct llb_error_info error; /* code != 0: the request failed */
  int32_t max_model_len;       /* context length in tokens (tokenize replies); 0 = not given */
  const float *pooling_output; /* [num_pooling_output]: a pooling request's vector, when finished */
  int32_t num_pooling_output;  /* <= LLB_MAX_POOLED_DIMS */
  /* vLLM prompt_logprobs without the leading None: [num_prompt_logprobs] for prompt tokens
   * 1..P-1 (token_id the prompt token), on the first output with a generated token; 0 = none */
  const struct llb_token_logprobs *prompt_logprobs;
  int32_t num_prompt_logprobs;
};

llb_status llb_request_output_encode(const struct llb_request_output *m, uint8_t *buf, size_t cap,
                                     size_t *len_out);
llb_status llb_request_output_encode_buf(const struct llb_request_output *m, struct llb_buf *out);
llb_status llb_request_output_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                     struct llb_request_output *out);

#ifdef __cplusplus
}
#endif

#endif
