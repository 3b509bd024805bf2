/* "prompt_embeds" of POST /v1/completions → GenerateRequest.mm_items (modality "embeds").
 *
 * vLLM accepts `prompt_embeds` as base64 of a torch-saved tensor. We have no torch, so an
 * item is the raw little-endian tensor bytes with an explicit dtype and shape:
 *   "prompt_embeds": [{"data": "<base64>", "dtype": "float32" | "float16",
 *                      "shape": [rows, hidden], "placeholder_offset": N}, ...]
 * (a single object is accepted as a one-item list; "f32" / "f16" are accepted as dtype;
 * placeholder_offset defaults to 0). Row r replaces the embedding of prompt token
 * placeholder_offset + r; the ids at those positions can be anything. The prompt must be one
 * token-id array. Checked here: base64 (standard alphabet, padding optional), dtype, shape
 * against the decoded byte count, the rows inside the prompt. hidden ≠ the model's
 * embedding_length, overlapping items and size limits are the input processor's checks.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_EMBEDS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_EMBEDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"

#define API_SERVER_MAX_PROMPT_EMBEDS 16 /* items in one request */

/* Decodes standard base64 (RFC 4648 §4; '=' padding optional, no whitespace) of `src[len]`
 * into a malloc'd buffer *out of *out_len bytes (caller frees; a 1-byte buffer for empty
 * input). Returns OK, INVALID_ARGUMENT (bad character or length; message says where) or
 * OUT_OF_MEMORY. */
llb_status api_server_base64_decode(const char *src, size_t len, uint8_t **out, size_t *out_len);

/* Parses `v` (the value of "prompt_embeds") for the already parsed prompts of `r` and sets
 * r->mm_items / r->num_mm_items (owned by `r`, freed by api_server_request_free). Errors are 400
 * with `param` naming the field ("prompt_embeds[0].shape"); OUT_OF_MEMORY is 500. */
llb_status api_server_parse_prompt_embeds(json_t *v, struct api_server_request *r, struct api_server_error *err);

#endif
