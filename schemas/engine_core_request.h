/* EngineCoreRequest and AbortRequests: input_processor -> scheduler
 * (schemas/engine_core_request.fbs; vLLM v1 EngineCoreRequest). Conventions: codec.h. */
#ifndef LLB_SCHEMAS_ENGINE_CORE_REQUEST_H
#define LLB_SCHEMAS_ENGINE_CORE_REQUEST_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* KVTransferParams (engine_core_request.fbs; vLLM v1 kv_transfer_params). */
struct llb_kv_transfer_params {
  bool do_remote_decode;            /* prefill here, then hand over to remote_engine_id */
  bool do_remote_prefill;           /* a hand-off from the prefill engine remote_engine_id */
  struct llb_str remote_engine_id;  /* "" = none */
  struct llb_str remote_request_id; /* the request's id on the prefill engine */
  int32_t remote_num_blocks;        /* its blocks holding the first num_tokens tokens */
  int32_t num_tokens;               /* tokens whose KV the prefill engine holds */
};

struct llb_engine_core_request {
  uint16_t version;
  struct llb_str request_id;        /* internal, unique per engine; required */
  struct llb_str external_id;       /* the client's request_id */
  const int32_t *prompt_token_ids;  /* [num_prompt_token_ids], required non-empty */
  int32_t num_prompt_token_ids;
  const struct llb_sampling_params *sampling_params; /* required */
  int32_t eos_token_id;             /* -1 = none */
  double arrival_time;              /* seconds since the Unix epoch */
  int32_t priority;                 /* lower runs first */
  struct llb_str cache_salt;
  const struct llb_mm_feature *mm_features;
  int32_t num_mm_features;
  struct llb_str reply_to;          /* the client's reply subject */
  int32_t client_index;             /* completion index of an n > 1 child */
  struct llb_str parent_request_id; /* set on n > 1 children */
  struct llb_str traceparent;       /* the request span's W3C traceparent, "" = not traced */
  struct llb_str trace_parent_span_id; /* its parent span id (16 hex), "" = root */
  int64_t trace_start_time_ns;      /* its start, wall clock ns since the epoch */
  struct llb_structured_outputs structured_outputs; /* kind NONE = unconstrained */
  struct llb_pooling_params pooling_params; /* type NONE = sample; else pool the prompt only */
  struct llb_str resume_request_id; /* a resend of that request ("" = none; see the .fbs) */
  struct llb_lora_request lora_request; /* resolved adapter (lora_int_id >= 1); name "" = the base model */
  bool has_kv_transfer_params;      /* false: aggregated (kv_transfer_params zero) */
  struct llb_kv_transfer_params kv_transfer_params;
  const int32_t *output_token_ids;  /* [num_output_token_ids] outputs it already has (hand-off) */
  int32_t num_output_token_ids;
};

struct llb_abort_requests {
  uint16_t version;
  const struct llb_str *request_ids; /* [num_request_ids] */
  int32_t num_request_ids;
};

llb_status llb_engine_core_request_encode(const struct llb_engine_core_request *m, uint8_t *buf,
                                          size_t cap, size_t *len_out);
llb_status llb_engine_core_request_encode_buf(const struct llb_engine_core_request *m,
                                              struct llb_buf *out);
llb_status llb_engine_core_request_decode(const uint8_t *buf, size_t len,
                                          struct llb_arena *arena,
                                          struct llb_engine_core_request *out);

llb_status llb_abort_requests_encode(const struct llb_abort_requests *m, uint8_t *buf,
                                     size_t cap, size_t *len_out);
llb_status llb_abort_requests_encode_buf(const struct llb_abort_requests *m, struct llb_buf *out);
llb_status llb_abort_requests_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                     struct llb_abort_requests *out);

#ifdef __cplusplus
}
#endif

#endif
