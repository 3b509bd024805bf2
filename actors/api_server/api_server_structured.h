/* Structured-output request fields → one GenerateRequest.structured_outputs (pure logic).
 *
 * Accepted on /v1/completions and /v1/chat/completions (vLLM
 * vllm/entrypoints/openai/protocol.py, vllm/sampling_params.py StructuredOutputsParams):
 *   - response_format (OpenAI): {"type": "text"} (no constraint), {"type": "json_object"},
 *     {"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}
 *     (schema required, an object; strict is accepted either way: the output is always
 *     enforced);
 *   - structured_outputs (vLLM): an object with exactly one of json (a schema object, or a
 *     string holding one), regex (string), choice (array of strings), grammar (string),
 *     json_object (true); vLLM's options disable_any_whitespace, disable_fallback,
 *     disable_additional_properties, whitespace_pattern, structural_tag are refused by name;
 *   - guided_json, guided_choice, guided_regex, guided_grammar (vLLM's older fields), same
 *     values as the matching structured_outputs key.
 * At most one constraint per request: a second one is a 400 naming it. The spec is passed on
 * as text (a schema re-serialized compactly); whether the engine can enforce it (supported
 * keywords, regex and grammar kinds) is the input processor's check, which answers with field
 * "structured_outputs" — api_server_structured_map_error renames that to the field the client used.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_STRUCTURED_H
#define LLB_ACTORS_API_SERVER_API_SERVER_STRUCTURED_H

#include <stdbool.h>

#include "actors/api_server/api_server_request.h"
#include "base/status.h"

struct json_t;

/* Parses top-level field `key` = `v` into r->structured_outputs when it is one of the fields
 * above: sets *handled and returns OK or INVALID_ARGUMENT (err set: 400 naming the field, e.g.
 * "response_format.json_schema.schema"), OUT_OF_MEMORY. *handled false: not ours. A JSON null
 * is the caller's to skip. The spec is owned by r (freed by api_server_request_free). */
llb_status api_server_structured_parse_field(const char *key, struct json_t *v, struct api_server_request *r, bool *handled,
                                      struct api_server_error *err);

/* An engine error about the spec (param "structured_outputs...") is renamed to the field the
 * request used (r->structured_param, e.g. "response_format"); other errors are unchanged. */
void api_server_structured_map_error(const struct api_server_request *r, struct api_server_error *e);

#endif
