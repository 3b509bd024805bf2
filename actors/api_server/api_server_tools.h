/* Tools / function calling on /v1/chat/completions: the request side (pure logic).
 *
 * Fields (OpenAI API reference; vLLM protocol.py ChatCompletionRequest and serving_chat.py):
 *   - tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
 *     "strict"?}}], 1..API_SERVER_MAX_TOOLS, names [a-zA-Z0-9_-]{1,64} and distinct, parameters a
 *     JSON Schema object, API_SERVER_MAX_TOOLS_BYTES in all → GenerateRequest.tools (the validated
 *     array, compact JSON) for the chat template, whatever the tool_choice;
 *   - tool_choice: "none" | "auto" (default with tools) | "required" |
 *     {"type": "function", "function": {"name"}} naming one of the tools; anything but "none"
 *     needs tools. required → structured_outputs JSON with vLLM's schema: an array (minItems 1;
 *     maxItems 1 without parallel_tool_calls) of anyOf {"name": const, "parameters": <the
 *     tool's parameters>} objects, the tools' "$defs" hoisted to the root; named → the tool's
 *     parameters schema ({"type": "object", "properties": {}} when absent); at most
 *     LLB_SO_MAX_SPEC_BYTES; set as r->structured_outputs with structured_param "tools" (so the
 *     engine's refusal of a schema keyword names "tools"); refused together with
 *     response_format / structured_outputs / guided_* (api_server_structured.h). auto with the hermes / mistral parser turns skip_special_tokens
 *     off (vLLM's adjust_request: their markers may be special tokens);
 *   - parallel_tool_calls: boolean, default true; false keeps only the first call (vLLM's
 *     maybe_filter_parallel_tool_calls);
 *   - messages: assistant "tool_calls" ([{"id", "type": "function", "function": {"name",
 *     "arguments": string}}], at most TOOL_MAX_CALLS) with "content" null or absent
 *     (content_is_null), tool messages with "tool_call_id" (required there), "name" → the
 *     ChatMessage fields of the same names.
 * Errors are 400s naming the field ("tools[2].function.name", "tool_choice",
 * "messages[1].tool_calls[0].function.arguments").
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_TOOLS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_TOOLS_H

#include <stdbool.h>

#include "actors/api_server/api_server_request.h"
#include "actors/api_server/tool_parser.h"
#include "base/status.h"

#define API_SERVER_MAX_TOOLS 128
#define API_SERVER_MAX_TOOLS_BYTES (256 * 1024)
#define API_SERVER_MAX_TOOL_NAME_BYTES 64

enum api_server_tool_choice {
  API_SERVER_TOOL_CHOICE_NONE = 0,
  API_SERVER_TOOL_CHOICE_AUTO = 1,
  API_SERVER_TOOL_CHOICE_REQUIRED = 2,
  API_SERVER_TOOL_CHOICE_NAMED = 3,
};

/* "hermes" | "llama3_json" | "mistral" (vLLM's --tool-call-parser names) → *out.
 * INVALID_ARGUMENT naming the choices otherwise. */
llb_status api_server_tool_parser_from_name(const char *name, enum tool_format *out);

/* Top-level `key` = `v` when it is tools / tool_choice / parallel_tool_calls on the chat
 * endpoint: sets *handled; OK or INVALID_ARGUMENT (err set). Checks that need every field
 * run in api_server_tools_check. */
llb_status api_server_tools_parse_field(const char *key, struct json_t *v, struct api_server_request *r, bool *handled,
                                 struct api_server_error *err);

/* The tool fields of message `m` (named `name`, "messages[i]"; its content already parsed,
 * `content_null` when it was null or absent) into `msg`. INVALID_ARGUMENT / OUT_OF_MEMORY. */
llb_status api_server_tools_parse_message(struct json_t *m, const char *name, bool content_null, struct api_server_request *r,
                                   struct llb_chat_message *msg, struct api_server_error *err);

/* Cross-checks and derived values once the request is parsed: tool_choice against tools,
 * the GenerateRequest tools JSON, the structured-output schema; `parser` is the server's
 * --tool-call-parser; without `auto_allowed` (--enable-auto-tool-choice) tool_choice "auto",
 * given or implied by tools, is refused with vLLM's message. OK / INVALID_ARGUMENT /
 * OUT_OF_MEMORY. */
llb_status api_server_tools_check(struct api_server_request *r, enum tool_format parser, bool auto_allowed, struct api_server_error *err);

/* Sets the tools of `out` from `r` (borrowed; valid while r lives); the tool_choice schema
 * travels as r->structured_outputs (api_server_request_to_generate). */
void api_server_tools_to_generate(const struct api_server_request *r, struct llb_generate_request *out);

/* How the output of `r` is parsed for tool calls: false when it is not (no tools, tool_choice
 * none, another endpoint); else *format, *named (borrowed) and *single_call. */
bool api_server_tools_output_format(const struct api_server_request *r, enum tool_format *format, const char **named,
                             bool *single_call);

/* Frees r->tools. */
void api_server_tools_free(struct api_server_request *r);

#endif
