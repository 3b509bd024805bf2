/* GenerateRequest and AbortRequest: client -> input_processor (schemas/generate_request.fbs).
 * Conventions of every codec function: schemas/codec.h. */
#ifndef LLB_SCHEMAS_GENERATE_REQUEST_H
#define LLB_SCHEMAS_GENERATE_REQUEST_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

struct llb_chat_message {
  struct llb_str role;         /* "system", "user", "assistant", "tool" */
  struct llb_str content;
  struct llb_str tool_calls;   /* assistant: JSON array of OpenAI tool calls; "" = none */
  struct llb_str tool_call_id; /* tool: the call answered; "" = none */
  struct llb_str name;         /* optional participant / tool name */
  bool content_is_null;        /* content was JSON null (assistant turn of tool calls) */
  const uint32_t *image_offsets; /* [num_image_offsets] byte offsets into content of its image
                                    parts, non-decreasing (checked by the input processor) */
  int32_t num_image_offsets;
};

/* A raw multimodal input: precomputed embeddings replacing placeholder tokens ("embeds"), or
 * an encoded image ("image": data = the file, dtype "jpeg" / "png", shape and offset unused). */
struct llb_mm_item {
  struct llb_str modality;
  const uint8_t *data;        /* [num_rows, num_cols] of dtype, little-endian; or the image file */
  int64_t data_bytes;         /* num_rows * num_cols * element size (checked); the file's size */
  struct llb_str dtype;       /* "f16" or "f32"; "jpeg" or "png" (llb_mm_dtype_is_encoded) */
  int32_t num_rows, num_cols; /* >= 1 */
  int32_t placeholder_offset; /* >= 0 */
};

/* One of prompt, messages or prompt_token_ids carries the input (checked by the input
 * processor, not by the codec). */
struct llb_generate_request {
  uint16_t version;                  /* set by decode; encode writes LLB_SCHEMA_VERSION */
  struct llb_str request_id;         /* the client's id, may be empty */
  struct llb_str prompt;
  const struct llb_chat_message *messages;
  int32_t num_messages;
  const int32_t *prompt_token_ids;   /* [num_prompt_token_ids] */
  int32_t num_prompt_token_ids;
  struct llb_str chat_template;      /* template name, "" = the model's */
  bool add_generation_prompt;        /* vLLM default true */
  bool raw;                          /* no chat template */
  const struct llb_sampling_params *sampling_params; /* encode: NULL = defaults; decode: never NULL */
  int32_t priority;
  struct llb_str cache_salt;
  const struct llb_mm_item *mm_items;
  int32_t num_mm_items;
  struct llb_structured_outputs structured_outputs; /* kind NONE = unconstrained */
  struct llb_str tools;                /* JSON array of OpenAI tools for the template; "" = none */
  struct llb_str chat_template_kwargs; /* JSON object of extra template variables; "" = none */
  bool continue_final_message;         /* continue the last assistant message (vLLM) */
  struct llb_pooling_params pooling_params; /* type NONE = a generation; else an embedding */
  struct llb_lora_request lora_request;     /* the adapter named as `model`; name "" = the base (its id is ignored) */
};

struct llb_abort_request {
  uint16_t version;
  struct llb_str request_id; /* required, non-empty */
};

/* Zeroes `m` and sets the vLLM defaults that are not zero (add_generation_prompt). */
void llb_generate_request_init(struct llb_generate_request *m);

llb_status llb_generate_request_encode(const struct llb_generate_request *m, uint8_t *buf,
                                       size_t cap, size_t *len_out);
llb_status llb_generate_request_encode_buf(const struct llb_generate_request *m,
                                           struct llb_buf *out);
llb_status llb_generate_request_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                       struct llb_generate_request *out);

llb_status llb_abort_request_encode(const struct llb_abort_request *m, uint8_t *buf, size_t cap,
                                    size_t *len_out);
llb_status llb_abort_request_encode_buf(const struct llb_abort_request *m, struct llb_buf *out);
llb_status llb_abort_request_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                    struct llb_abort_request *out);

#ifdef __cplusplus
}
#endif

#endif
