/* RequestOutputs → OpenAI response objects and SSE chunks (pure logic: no network, no bus).
 *
 * One api_server_response per HTTP request. A completions request with several prompts becomes one
 * GenerateRequest per prompt ("sub-request" prompt_index); choice indexes are
 * prompt_index * n + CompletionOutput.index, as vLLM's serving_completion.py numbers them.
 *
 * Every sub-request runs with output_kind DELTA (so the server sees the first token and can
 * time it). Non-streaming: api_server_response_add_output() accumulates each RequestOutput, then
 * api_server_response_render() gives the `text_completion` / `chat.completion` object with usage.
 * Streaming:
 * api_server_response_stream_output() turns each RequestOutput into `data: {...}\n\n` events
 * (`text_completion` / `chat.completion.chunk`; chat sends each choice's role first), and
 * api_server_response_stream_end() adds the usage chunk (stream_options.include_usage: empty
 * `choices`) and `data: [DONE]\n\n`. Chunk and field shapes follow OpenAI's API reference and
 * vLLM's protocol.py (logprobs: completions {tokens, token_logprobs, top_logprobs,
 * text_offset}; chat {content: [{token, logprob, bytes, top_logprobs}]}; -inf → -9999.0 as
 * vLLM). Usage counts prompt tokens once per prompt and every generated token, and
 * `prompt_tokens_details.cached_tokens` the prompt tokens served from the prefix cache
 * (RequestMetrics.num_cached_tokens, as vLLM with --enable-prompt-tokens-details). With `echo`
 * (completions) each choice's text starts with its prompt's text: in the first chunk of the
 * choice when streaming (vLLM serving_completion.py).
 * Chat with tools (tool_choice other than none): each choice's text goes through its tool-call
 * parser (tool_parser.h): the message gets `tool_calls` ([{id, type, function: {name,
 * arguments}}]), content null when only whitespace is left, finish_reason "tool_calls"; a text
 * that does not parse stays content. Streamed, the deltas are the parser's (one chunk each).
 * Chat with a reasoning parser (api_server_reasoning.h): the message gets `reasoning_content` (null
 * when the output has no reasoning) beside `content` (null when only reasoning came), and the
 * tool parser reads the content only; streamed, reasoning goes out as `delta.reasoning_content`.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_RESPONSE_H
#define LLB_ACTORS_API_SERVER_API_SERVER_RESPONSE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/api_server_reasoning.h"
#include "actors/api_server/api_server_request.h"
#include "actors/api_server/tool_parser.h"
#include "base/status.h"
#include "schemas/request_output.h"

struct api_server_choice_state {
  bool seen;             /* an output of this choice arrived */
  bool role_sent;        /* chat stream: the role delta went out */
  bool echoed;           /* echo: the prompt text went out (or into text) */
  bool finished;
  int64_t text_offset;   /* completions logprobs: bytes of text so far */
  struct api_server_buf text;   /* non-streaming: text so far */
  void *logprobs;        /* non-streaming: JSON logprobs so far (private), NULL = none */
  int32_t finish_reason; /* enum llb_finish_reason */
  char stop_reason[LLB_MAX_STOP_STRING_BYTES + 1];
  struct tool_stream *tool_stream; /* chat stream with tool parsing: this choice's parser */
  struct api_server_reasoning_stream reasoning_stream; /* chat stream with a reasoning parser */
};

struct api_server_response {
  enum api_server_endpoint endpoint;
  char id[64];           /* "cmpl-..." / "chatcmpl-..." */
  char model[API_SERVER_MAX_MODEL_BYTES];
  int64_t created;       /* Unix seconds */
  bool stream, include_usage;
  int32_t n, num_prompts;
  int32_t logprobs;      /* -1 = none; else top entries per position */
  struct api_server_choice_state *choices; /* [num_prompts * n] */
  int64_t *prompt_tokens;           /* [num_prompts], -1 = not known yet */
  int64_t *cached_tokens;           /* [num_prompts] prompt tokens found in the prefix cache */
  int64_t completion_tokens;
  int32_t num_finished;             /* sub-requests whose final output arrived */
  char **echo;                      /* [num_prompts] prompt texts to prepend (request echo), or NULL */
  bool tools;                       /* chat: outputs parsed for tool calls (api_server_tools.h) */
  enum tool_format tool_format;
  char tool_named[65];              /* TOOL_FORMAT_NAMED: the tool */
  bool tool_single_call;            /* parallel_tool_calls false */
  int32_t reasoning;                /* chat: enum reasoning_parser splitting reasoning_content out; 0 = none */
  /* prompt_logprobs (vLLM): per prompt its JSON list [null, {"<id>": {logprob, rank,
   * decoded_token}}, ...] (private), NULL = not arrived; the array is NULL when not asked */
  void **prompt_logprobs;           /* [num_prompts] */
  bool *prompt_logprobs_sent;       /* [num_prompts * n] streaming: went out with a chunk */
  /* echo with logprobs: per prompt the prompt's part of the completions logprobs (private
   * JSON, NULL = not arrived; every choice of the prompt starts with a copy) and the text
   * offset after it; the arrays are NULL without echo + logprobs */
  void **echo_logprobs;             /* [num_prompts] */
  int64_t *echo_offset;             /* [num_prompts] */
};

/* The vLLM prompt_logprobs list of one RequestOutput (json_t *, new reference): null for the
 * first prompt token, then per prompt token {"<token_id>": {"logprob", "rank",
 * "decoded_token"}} holding the prompt token and its top-k; num_prompt_tokens entries in all.
 * NULL when out of memory. (api_server_prompt_logprobs.c) */
void *api_server_prompt_logprobs_json(const struct llb_request_output *ro, int64_t num_prompt_tokens);

/* `echo` with `logprobs` (completions): the prompt's part of the logprobs object (json_t *,
 * new reference; {text_offset, token_logprobs, tokens, top_logprobs}, null logprob and top
 * for the first token, whose text is the part of prompt_text the others do not cover), from
 * ro's prompt logprobs; *offset advances over the prompt text. NULL when out of memory.
 * (api_server_prompt_logprobs.c) */
void *api_server_echo_logprobs_json(const struct llb_request_output *ro, const char *prompt_text, int32_t num_top,
                             int64_t *offset);

/* Sets up `r` for request `req` (borrowed for this call only). `id` is copied. Errors:
 * OUT_OF_MEMORY. Free with api_server_response_free. */
llb_status api_server_response_init(struct api_server_response *r, const struct api_server_request *req,
                             const char *id, int64_t created);
void api_server_response_free(struct api_server_response *r);

/* True when every sub-request delivered its final output. */
bool api_server_response_done(const struct api_server_response *r);

/* Counts one RequestOutput's tokens into the usage (both modes call it through the
 * functions below; exposed for metrics): prompt tokens of the first output that carries them
 * and generated tokens of every completion. Returns the generated tokens it added. */
int64_t api_server_response_count(struct api_server_response *r, int32_t prompt_index,
                           const struct llb_request_output *ro);

/* Non-streaming: accumulates one DELTA RequestOutput of sub-request `prompt_index` (text,
 * logprobs, finish and stop reasons per choice). INVALID_ARGUMENT for a bad index;
 * OUT_OF_MEMORY. */
llb_status api_server_response_add_output(struct api_server_response *r, int32_t prompt_index,
                                  const struct llb_request_output *ro);

/* Non-streaming: the response object (with usage) appended to `out`. OUT_OF_MEMORY. */
llb_status api_server_response_render(struct api_server_response *r, struct api_server_buf *out);

/* Streaming: SSE events for one DELTA RequestOutput of `prompt_index` appended to `out`
 * (one chunk per changed choice; none for an output with nothing new). Errors as above. */
llb_status api_server_response_stream_output(struct api_server_response *r, int32_t prompt_index,
                                      const struct llb_request_output *ro, struct api_server_buf *out);

/* Streaming: an error event `data: {"error": {...}}` appended to `out`. */
llb_status api_server_response_stream_error(const struct api_server_error *e, struct api_server_buf *out);

/* Streaming: the usage chunk (when include_usage) and `data: [DONE]` appended to `out`. */
llb_status api_server_response_stream_end(struct api_server_response *r, struct api_server_buf *out);

#endif
