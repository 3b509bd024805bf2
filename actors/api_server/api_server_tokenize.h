/* vLLM's /tokenize and /detokenize, and the engine-side facts of GET /v1/models/{id} (pure
 * logic: no network, no bus).
 *
 * Shapes (vLLM vllm/entrypoints/openai/protocol.py TokenizeCompletionRequest,
 * TokenizeChatRequest, DetokenizeRequest and their responses):
 *   POST /tokenize   {"model", "prompt": str} or {"model", "messages": [...]}, optional
 *                    "add_generation_prompt" (messages; default true), "add_special_tokens"
 *                    (only its default: true for a prompt, false for messages: the chat
 *                    template writes its own), "return_token_strs" (only false)
 *                    → {"count": N, "max_model_len": M, "tokens": [...], "token_strs": null}
 *   POST /detokenize {"model", "tokens": [int, ...]} → {"prompt": text}
 *   GET /v1/models/{id} → the model object of /v1/models with "max_model_len"
 * The api server has no tokenizer: each call is one GenerateRequest (the input fields only) on
 * <prefix>.tokenize.<tenant>, answered by an input processor with one RequestOutput
 * (prompt_token_ids, prompt, max_model_len; actors/input_processor/actor.h), so the tokens are
 * exactly those a generate request would get (chat template, special tokens in the text).
 * The model, prompt and messages are validated by api_server_request_parse (same errors, same 404);
 * detokenize errors name "tokens[i]".
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_TOKENIZE_H
#define LLB_ACTORS_API_SERVER_API_SERVER_TOKENIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"
#include "base/status.h"
#include "schemas/request_output.h"

struct api_server_tokenize {
  enum api_server_endpoint endpoint;  /* API_SERVER_ENDPOINT_TOKENIZE, _DETOKENIZE or _MODEL_INFO */
  struct api_server_request req;      /* one text prompt, one token-id prompt (detokenize) or messages */
  bool add_generation_prompt;  /* messages: the template's assistant header (default true) */
};

/* Parses the body of `endpoint` (MODEL_INFO reads no body: `model` is the path's id, checked
 * against o->served_model: 404 otherwise). OK: free `out` with api_server_tokenize_free;
 * INVALID_ARGUMENT with `err` (400 / 404; nothing to free); OUT_OF_MEMORY (500). */
llb_status api_server_tokenize_parse(enum api_server_endpoint endpoint, const char *body, size_t len, const char *model,
                              const struct api_server_parse_options *o, struct api_server_tokenize *out, struct api_server_error *err);

/* Frees what api_server_tokenize_parse allocated; `t` is zeroed. NULL ok. */
void api_server_tokenize_free(struct api_server_tokenize *t);

/* The GenerateRequest for <prefix>.tokenize.<tenant>: borrows from `t` (its sampling params
 * too; the defaults for /v1/models/{id}) and `request_id`. */
void api_server_tokenize_to_generate(const struct api_server_tokenize *t, const char *request_id, struct llb_generate_request *out);

/* Renames the engine's field in `e` to the request's: detokenize ids travel as
 * prompt_token_ids, so "prompt_token_ids[i]" becomes "tokens[i]". */
void api_server_tokenize_map_error(const struct api_server_tokenize *t, struct api_server_error *e);

/* The HTTP body for the input processor's reply `ro` (no error in it) appended to `out`:
 * the tokenize / detokenize response, or the model object (id `model`, `created` in Unix
 * seconds). OUT_OF_MEMORY. */
llb_status api_server_tokenize_render(const struct api_server_tokenize *t, const struct llb_request_output *ro, const char *model,
                               int64_t created, struct api_server_buf *out);

/* The model object of /v1/models for `model` ("max_model_len" when max_model_len > 0; "parent":
 * `parent`, a LoRA adapter's base model, or null), as a JSON text appended to `out`.
 * OUT_OF_MEMORY. */
llb_status api_server_model_object_render(const char *model, const char *parent, int64_t created, int32_t max_model_len,
                                   struct api_server_buf *out);

#endif
