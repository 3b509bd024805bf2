/* POST /v1/responses: OpenAI's Responses API over the chat path (pure logic: no network).
 *
 * Request (api_server_responses_req.c): the body is checked and rewritten as a Chat Completions body,
 * which api_server_request_parse then reads like any chat request (the same validation, template,
 * structured output, tools, reasoning split): `input` (a string, or a list of message items
 * with string or input_text / output_text / input_image parts, function_call and
 * function_call_output items; reasoning items are dropped) becomes `messages`, `instructions`
 * a system message first; max_output_tokens → max_completion_tokens; `text.format` (text,
 * json_object, json_schema) → response_format; function `tools` → chat tools; tool_choice
 * "auto" / "none" / "required" / {"type": "function", "name"}; stream; temperature, top_p,
 * user, metadata, parallel_tool_calls; `reasoning` is accepted and has no effect. vLLM's
 * sampling extras (seed, logit_bias, top_k, ...) pass through as on chat. Refused with a 400
 * naming the field: store true (responses are not stored: previous_response_id cannot name
 * one; absent / false is what runs), previous_response_id, conversation, background true,
 * prompt, include other than [], truncation "auto", non-function tools, chat-only fields
 * (messages, max_tokens, response_format, n, ...). Errors of the chat parser come back under
 * the Responses field names (input, max_output_tokens, text.format).
 *
 * Response (api_server_responses.c): a `response` object: output items `reasoning` (with a reasoning
 * parser; content [{type: reasoning_text}]), `message` (output_text), `function_call` (one per
 * call the tool parser finds); status completed, or incomplete with incomplete_details
 * {reason: max_output_tokens}; usage {input_tokens, output_tokens, total_tokens, details};
 * the request's fields repeated. Streamed as SSE events (`event: <type>` + data with
 * sequence_number): response.created, response.in_progress, response.output_item.added,
 * response.reasoning_text.delta / .done, response.content_part.added,
 * response.output_text.delta / .done, response.content_part.done,
 * response.function_call_arguments.delta / .done, response.output_item.done, then
 * response.completed (or response.incomplete). With tools the text is held until the end,
 * where the tool parser reads it whole: calls and text then come as whole items.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_RESPONSES_H
#define LLB_ACTORS_API_SERVER_API_SERVER_RESPONSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_reasoning.h"
#include "actors/api_server/api_server_request.h"
#include "actors/api_server/api_server_response.h"
#include "base/status.h"
#include "schemas/request_output.h"

/* A Responses request: the fields its response repeats, and its stream's progress. */
struct api_server_responses {
  struct json_t *echo; /* instructions, max_output_tokens, temperature, top_p, tools, tool_choice,
                        * parallel_tool_calls, text, metadata, user, reasoning (as given) */
  /* streaming */
  int64_t seq;                       /* sequence_number of the next event */
  bool started;                      /* response.created went out */
  int32_t num_items;                 /* output_index of the next item */
  int32_t reasoning_index, message_index; /* their output_index; -1 = not open */
  bool reasoning_done, message_done;
  struct api_server_reasoning_stream split; /* the text so far, split */
  struct api_server_buf reasoning, content; /* what went out of each */
};

/* Rewrites Responses body[0..len) as a Chat Completions body: *chat_body (caller frees) and *out
 * (caller frees with api_server_responses_free). 400 in err naming the Responses field (INVALID_ARGUMENT),
 * OUT_OF_MEMORY. */
llb_status api_server_responses_to_chat(const char *body, size_t len, struct api_server_responses **out, char **chat_body,
                                 size_t *chat_len, struct api_server_error *err);

/* Frees r; NULL ok. */
void api_server_responses_free(struct api_server_responses *r);

/* An error of the chat parser, or of the engine, renamed to the Responses fields. */
void api_server_responses_map_error(struct api_server_error *e);

/* Non-streaming: the response object of r (outputs accumulated by api_server_response_add_output)
 * appended to out. OUT_OF_MEMORY. */
llb_status api_server_responses_render(struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out);

/* Streaming: the events of one DELTA RequestOutput appended to out (the first output also
 * sends response.created and response.in_progress). OUT_OF_MEMORY. */
llb_status api_server_responses_stream_output(struct api_server_response *r, struct api_server_responses *q,
                                       const struct llb_request_output *ro, struct api_server_buf *out);

/* Streaming: response.completed (or response.incomplete) with the whole response. */
llb_status api_server_responses_stream_end(struct api_server_response *r, struct api_server_responses *q, struct api_server_buf *out);

#endif
