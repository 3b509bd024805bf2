/* OpenAI request bodies → validated llmbus requests (pure logic: no network, no bus).
 *
 * api_server_request_parse() reads the JSON body of POST /v1/completions or /v1/chat/completions
 * (OpenAI API reference; field set and defaults as vLLM's
 * vllm/entrypoints/openai/protocol.py CompletionRequest / ChatCompletionRequest) and fills an
 * api_server_request: the prompts or chat messages, struct llb_sampling_params and the response
 * options (stream, include_usage, logprob shapes). Every problem is reported as an
 * api_server_error with the HTTP status and the offending field in OpenAI's `param` form
 * ("temperature", "messages[1].content", "prompt[2]"): malformed JSON and invalid values 400,
 * an unknown model 404, an unrecognized field 400 ("Unrecognized request argument supplied:
 * foo", OpenAI's wording). Checks that need the model (prompt length against the context,
 * token ids against the vocabulary) are the input processor's; its errors come back in
 * RequestOutput.error and are mapped by api_server_error_from_status().
 *
 * Errors are api_server_error.h's, the growable buffer api_server_buf.h's, the JSON helpers api_server_json.h's
 * (leaves that the field parsers this file calls share with it).
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_REQUEST_H
#define LLB_ACTORS_API_SERVER_API_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_buf.h"
#include "actors/api_server/api_server_error.h"
#include "actors/api_server/api_server_json.h"
#include "base/status.h"
#include "schemas/generate_request.h"

#define API_SERVER_MAX_PROMPTS 64       /* prompts in one completions request (a batch) */
#define API_SERVER_MAX_N 16             /* completions per prompt (the input processor's max_n) */
#define API_SERVER_MAX_MESSAGES 1024    /* chat messages */
#define API_SERVER_MAX_MODEL_BYTES 256  /* model name, NUL included */
#define API_SERVER_MAX_USER_BYTES 256
#define API_SERVER_MAX_CACHE_SALT_BYTES 200 /* the input processor prefixes the tenant (256 in all) */

enum api_server_endpoint {
  API_SERVER_ENDPOINT_COMPLETIONS = 0, /* POST /v1/completions */
  API_SERVER_ENDPOINT_CHAT = 1,        /* POST /v1/chat/completions */
  API_SERVER_ENDPOINT_TOKENIZE = 2,    /* POST /tokenize (api_server_tokenize.h) */
  API_SERVER_ENDPOINT_DETOKENIZE = 3,  /* POST /detokenize */
  API_SERVER_ENDPOINT_MODEL_INFO = 4,  /* GET /v1/models/{id} (asks the engine for max_model_len) */
  API_SERVER_ENDPOINT_EMBEDDINGS = 5,  /* POST /v1/embeddings (api_server_embeddings.h) */
  API_SERVER_ENDPOINT_RESPONSES = 6,   /* POST /v1/responses (api_server_responses.h): parsed as a chat request */
};

/* One completions prompt: text, or token ids. */
struct api_server_prompt {
  const char *text;          /* NUL-terminated, NULL when token ids are given */
  size_t text_len;
  int32_t *token_ids;        /* [num_token_ids], owned by the request; NULL for text */
  int32_t num_token_ids;
};

/* A parsed request. Strings point into the parsed JSON document or into memory the request
 * owns; everything is freed by api_server_request_free(). */
struct api_server_request {
  enum api_server_endpoint endpoint;
  char model[API_SERVER_MAX_MODEL_BYTES];
  bool is_lora;                   /* `model` names a LoRA adapter (GenerateRequest.lora_request) */
  bool stream;
  bool include_usage;             /* stream_options.include_usage */
  struct api_server_prompt *prompts;     /* [num_prompts], completions only */
  int32_t num_prompts;
  struct llb_chat_message *messages; /* [num_messages], chat only */
  int32_t num_messages;
  struct llb_sampling_params sampling_params; /* n, temperature, ..., logprobs (-1 = none), as
                                   * the engine gets them: output_kind DELTA, prompt_logprobs
                                   * raised to top_logprobs with echo (api_server_request_parse) */
  int32_t prompt_logprobs;        /* the client's prompt_logprobs (-1 = none): the response's field */
  bool chat_logprobs;             /* chat: logprobs = true */
  int32_t top_logprobs;           /* chat: top_logprobs (0..20); completions: logprobs or -1 */
  char user[API_SERVER_MAX_USER_BYTES];
  struct llb_mm_item *mm_items;   /* [num_mm_items] "prompt_embeds" (api_server_embeds.h), completions;
                                   * chat: "image" items of image_url parts (api_server_images.h);
                                   * each item's data is owned by the request */
  int32_t num_mm_items;
  int32_t priority;               /* lower runs first (scheduler --policy priority); api_server_params.h */
  char cache_salt[API_SERVER_MAX_CACHE_SALT_BYTES]; /* "" = none; api_server_params.h */
  bool echo;                      /* completions: prompt text prepended to each choice's text */
  /* chat, for the model's Jinja template (vLLM's extra fields) */
  struct llb_str chat_template_kwargs; /* compact JSON object; "" = none (owned via impl) */
  bool continue_final_message;    /* needs add_generation_prompt false */
  bool no_generation_prompt;      /* add_generation_prompt = false */
  struct api_server_tools *tools;        /* chat: tools, tool_choice, message tool fields (api_server_tools.h);
                                   * NULL = none of them */
  void *impl;                     /* private: the JSON document and owned strings */
  struct llb_structured_outputs structured_outputs; /* api_server_structured.h; kind NONE = none */
  struct api_server_responses *responses; /* POST /v1/responses (api_server_responses.h), owned; NULL otherwise
                                   * (the request is then a chat request: endpoint CHAT) */
  int32_t reasoning;              /* chat: enum reasoning_parser of --reasoning-parser, 0 when none
                                   * or the request turned thinking off (api_server_reasoning.h): the
                                   * output is split into reasoning_content and content */
  char structured_param[48];      /* the field it came from ("response_format", "guided_json") */
  char *structured_spec;          /* owned spec text (structured_outputs.spec points here) */
};

/* What the parser checks against. */
struct api_server_parse_options {
  const char *served_model;  /* the model id accepted (404 otherwise); required */
  const char *const *model_aliases; /* [num_model_aliases] more ids accepted (--served-model-name
                                     * a b: b), borrowed; NULL = none */
  int num_model_aliases;
  int32_t max_n;             /* 0 = API_SERVER_MAX_N */
  int32_t tool_parser;       /* enum tool_format of --tool-call-parser (0 = hermes); api_server_tools.h */
  bool no_auto_tool_choice;  /* tool_choice "auto" (given, or implied by tools) is a 400, as vLLM's
                              * without --enable-auto-tool-choice */
  int32_t reasoning_parser;  /* enum reasoning_parser of --reasoning-parser (0 = none); model/reasoning/reasoning.h */
  const char *allowed_local_media_path; /* realpath of vLLM's --allowed-local-media-path: file://
                                           image URLs inside it are read (api_server_images.h); NULL = none */
  struct lora_registry *loras; /* LoRA adapters a `model` may name (chat, completions); NULL = none */
  const char *tenant;          /* whose adapters (lora_registry_lookup) */
};

bool api_server_model_served(const struct api_server_parse_options *o, const char *model);

/* Parses and validates `body[len]` (need not be NUL-terminated) for `endpoint` (RESPONSES: the
 * body is rewritten as a chat request, api_server_responses.h, and parsed as one: endpoint CHAT,
 * `responses` set).
 * Returns LLB_STATUS_OK and fills `out` (caller frees with api_server_request_free), or
 * LLB_STATUS_INVALID_ARGUMENT with `err` set (400 / 404; `out` needs no free), or
 * LLB_STATUS_OUT_OF_MEMORY (err 500). Defaults: completions max_tokens 16; chat
 * max_completion_tokens / max_tokens absent = -1 (up to the context length, as vLLM);
 * temperature 1, top_p 1, n 1; stream false. */
llb_status api_server_request_parse(enum api_server_endpoint endpoint, const char *body, size_t len,
                             const struct api_server_parse_options *o, struct api_server_request *out,
                             struct api_server_error *err);

/* Frees what api_server_request_parse allocated; `r` is zeroed. NULL ok. */
void api_server_request_free(struct api_server_request *r);

/* The GenerateRequest view of prompt `prompt_index` (completions) or of the messages (chat:
 * prompt_index 0): borrows from `r` (its sampling_params by pointer: output_kind DELTA, as
 * api_server_request_parse set them; api_server_response.h accumulates non-streamed outputs), valid while
 * `r` lives. `request_id` is borrowed. */
void api_server_request_to_generate(const struct api_server_request *r, int32_t prompt_index,
                             const char *request_id, struct llb_generate_request *out);

#endif
