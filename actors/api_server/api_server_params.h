/* The request fields of OpenAI's and vLLM's APIs beyond the sampling basics (pure logic).
 *
 * api_server_request_parse() (api_server_request.h) hands each top-level field to api_server_params_parse_field()
 * before refusing it as unrecognized, and calls api_server_params_check() once every field and the
 * prompt are parsed. Fields (vLLM vllm/entrypoints/openai/protocol.py):
 *   - logit_bias: {"<token id>": bias}: ids decimal in [0, 2^31), biases finite numbers in
 *     [-100, 100] (OpenAI), at most LLB_MAX_LOGIT_BIAS entries → sampling_params.logit_bias
 *     (ids against the vocabulary are the input processor's check: "logit_bias[<id>]");
 *   - priority: integer, lower runs first under `--policy priority` → GenerateRequest.priority;
 *   - cache_salt: non-empty string (< API_SERVER_MAX_CACHE_SALT_BYTES) → GenerateRequest.cache_salt,
 *     mixed into the prefix-cache hash after the tenant (input processor);
 *   - truncate_prompt_tokens: -1 (the context length) or >= 1: keep the last N prompt tokens
 *     → sampling_params.truncate_prompt_tokens;
 *   - echo (completions): the prompt text is prepended to each choice's text; refused with
 *     logprobs (that needs prompt logprobs) and with token-id prompts (no prompt text here).
 * Errors are 400s naming the field, like every other field's.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_PARAMS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_PARAMS_H

#include <stdbool.h>

#include "actors/api_server/api_server_request.h"
#include "base/status.h"

/* Parses top-level field `key` = `v` into `r` when it is one of the fields above: sets
 * *handled and returns OK or INVALID_ARGUMENT (err set). *handled false: not ours. A JSON null
 * is the default and is the caller's to skip. */
llb_status api_server_params_parse_field(const char *key, struct json_t *v, struct api_server_request *r, bool *handled,
                                  struct api_server_error *err);

/* Checks that need the whole request (echo against logprobs and token-id prompts). Returns OK
 * or INVALID_ARGUMENT with err set. */
llb_status api_server_params_check(const struct api_server_request *r, struct api_server_error *err);

#endif
