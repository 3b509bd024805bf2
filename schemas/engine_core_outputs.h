/* EngineCoreOutputs: scheduler -> output_processor, one per step
 * (schemas/engine_core_outputs.fbs; vLLM v1 EngineCoreOutput(s)). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_ENGINE_CORE_OUTPUTS_H
#define LLB_SCHEMAS_ENGINE_CORE_OUTPUTS_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

enum llb_finish_reason {
  LLB_FINISH_REASON_NONE = 0, /* still running */
  LLB_FINISH_REASON_STOP = 1, /* EOS, stop token or stop string */
  LLB_FINISH_REASON_LENGTH = 2,
  LLB_FINISH_REASON_ABORT = 3,
  LLB_FINISH_REASON_ERROR = 4,
};

/* "stop", "length", "abort", "error" (OpenAI's names), NULL for NONE/unknown. */
const char *llb_finish_reason_name(enum llb_finish_reason r);

struct llb_engine_core_output {
  struct llb_str request_id;        /* required */
  const int32_t *new_token_ids;     /* [num_new_token_ids] */
  int32_t num_new_token_ids;
  int32_t first_output_pos;         /* output position of new_token_ids[0], >= 0 */
  enum llb_finish_reason finish_reason;
  struct llb_str stop_reason;       /* matched stop string, or "" */
  int32_t stop_token_id;            /* matched stop token, -1 none */
  struct llb_logprobs_lists new_logprobs; /* rows = new tokens, or 0 */
  int32_t num_cached_tokens;
  struct llb_str reply_to;
  struct llb_str external_id;
  double arrival_time;              /* seconds since the epoch */
  int64_t queued_time_ns;           /* wall clock ns since the epoch; 0 = unknown */
  int64_t scheduled_time_ns;
  int64_t first_token_time_ns;
  int32_t num_preemptions;
  const int32_t *prompt_token_ids;  /* on a request's first output, else NULL/0 */
  int32_t num_prompt_token_ids;
  const struct llb_sampling_params *sampling_params; /* on a request's first output, else NULL */
  struct llb_str parent_request_id; /* n > 1 */
  int32_t index;                    /* n > 1: completion index */
  struct llb_error_info error;      /* with finish_reason ERROR */
  struct llb_str traceparent;       /* EngineCoreRequest's trace context, "" = not traced */
  struct llb_str trace_parent_span_id;
  int64_t trace_start_time_ns;
  bool resync;                      /* the whole output from position 0 (see the .fbs) */
  const float *pooling_output;      /* [num_pooling_output]: a pooling request's vector, on
                                       its finishing output; NULL/0 otherwise */
  int32_t num_pooling_output;       /* <= LLB_MAX_POOLED_DIMS */
  struct llb_logprobs_lists prompt_logprobs; /* rows = prompt tokens 1..P-1; num_tokens 0 = none */
  struct llb_str handed_off_to;     /* prefill engine: the request goes on on this decode engine
                                       ("" = not handed off; see the .fbs) */
  const int32_t *handed_off_token_ids; /* [num_handed_off_token_ids] decode engine's first output of
                                       a hand-off: the outputs already delivered (see the .fbs) */
  int32_t num_handed_off_token_ids;
};

struct llb_engine_core_outputs {
  uint16_t version;
  struct llb_str engine_id;
  uint64_t step;
  double timestamp; /* seconds since the epoch */
  const struct llb_engine_core_output *outputs; /* [num_outputs] */
  int32_t num_outputs;
};

/* Sets stop_token_id = -1 and zeroes the rest. */
void llb_engine_core_output_init(struct llb_engine_core_output *o);

llb_status llb_engine_core_outputs_encode(const struct llb_engine_core_outputs *m, uint8_t *buf,
                                          size_t cap, size_t *len_out);
llb_status llb_engine_core_outputs_encode_buf(const struct llb_engine_core_outputs *m,
                                              struct llb_buf *out);
llb_status llb_engine_core_outputs_decode(const uint8_t *buf, size_t len,
                                          struct llb_arena *arena,
                                          struct llb_engine_core_outputs *out);

#ifdef __cplusplus
}
#endif

#endif
