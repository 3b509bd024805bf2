/* Tool-call parsers: a model's generated text → content + tool calls (pure logic).
 *
 * The formats of vLLM's tool parsers (vllm/entrypoints/openai/tool_parsers/, read, not
 * copied) and of its tool_choice handling (serving_chat.py):
 *   TOOL_FORMAT_HERMES       text <tool_call>{"name": N, "arguments": {...}}</tool_call> ...
 *                            (Hermes, Qwen 2/2.5/3, SmolLM3); the closing tag may be missing
 *                            at the very end, as vLLM's regex allows;
 *   TOOL_FORMAT_LLAMA3_JSON  [<|python_tag|>]{"name": N, "parameters": {...}}[; {...}] —
 *                            the whole output is calls when it starts with "{" or the tag,
 *                            else it is content (Llama 3.1/3.2/3.3 JSON tool calling);
 *   TOOL_FORMAT_MISTRAL      text [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (v3
 *                            tokenizers) or text [TOOL_CALLS]N[ARGS]{...}[TOOL_CALLS]... (v11+);
 *   TOOL_FORMAT_NAMED        the whole text is the arguments of the one named tool
 *                            (tool_choice {"type": "function", ...}, constrained by its schema);
 *   TOOL_FORMAT_REQUIRED     [{"name": N, "parameters": {...}}, ...] (tool_choice "required",
 *                            constrained by the array schema of api_server_tools.h).
 * "arguments" and "parameters" are both accepted as the arguments key in every JSON format. An
 * argument value that is a JSON string (some models stringify) is taken as its decoded text.
 *
 * tool_parse() reads the whole text so far. final = false (streaming): calls are reported as
 * far as they are known (a name only once complete; arguments as the raw JSON text of the value
 * so far, which only grows), and content stops before anything that may still become markup
 * (a partial "<tool_call" at the end is held back). final = true: every call must be complete
 * and its arguments valid JSON; otherwise the snapshot is `malformed`, with the whole text as
 * content and no calls (vLLM's fallback: the output stays plain content). Never crashes on
 * any input; lengths are bounded by TOOL_MAX_CALLS (calls beyond it make the text malformed).
 *
 * tool_stream_*: the streamed form. Each feed re-parses the text so far and returns what is new
 * since the previous feed as OpenAI delta objects, in vLLM's order: content text as
 * {"content"}; per call first {"tool_calls": [{"index", "id", "type": "function",
 * "function": {"name"}}]}, then {"tool_calls": [{"index", "function": {"arguments": piece}}]}.
 * Nothing of the markup is ever in a delta.
 */
#ifndef LLB_ACTORS_API_SERVER_TOOL_PARSER_H
#define LLB_ACTORS_API_SERVER_TOOL_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"
#include "base/status.h"

enum tool_format {
  TOOL_FORMAT_HERMES = 0,
  TOOL_FORMAT_LLAMA3_JSON = 1,
  TOOL_FORMAT_MISTRAL = 2,
  TOOL_FORMAT_NAMED = 3,
  TOOL_FORMAT_REQUIRED = 4,
};

#define TOOL_MAX_CALLS 64 /* calls in one output */
#define TOOL_ID_BYTES 48  /* "chatcmpl-tool-" + 32 hex + NUL */

struct tool_call_snap {
  struct api_server_buf name;      /* len 0 = not known yet */
  struct api_server_buf arguments; /* JSON text of the arguments so far */
  bool complete;
};

struct tool_snapshot {
  struct api_server_buf content;                       /* text outside the markup */
  struct tool_call_snap calls[TOOL_MAX_CALLS];  /* [num_calls] */
  int32_t num_calls;
  bool malformed;                               /* final: the text is content, no calls */
};

/* Parses `text[len]` in `format` into `out` (zero it first; free with tool_snapshot_free).
 * `named` is the tool's name for TOOL_FORMAT_NAMED (else unused; borrowed). Errors:
 * OUT_OF_MEMORY only; a malformed text is a result, not an error. */
llb_status tool_parse(enum tool_format format, const char *named, const char *text, size_t len,
                      bool final, struct tool_snapshot *out);

/* Frees the buffers of `s`; `s` is zeroed. NULL ok. */
void tool_snapshot_free(struct tool_snapshot *s);

/* A fresh tool call id into `out[TOOL_ID_BYTES]`: "chatcmpl-tool-<32 hex>" (vLLM), or 9
 * alphanumeric characters for TOOL_FORMAT_MISTRAL (Mistral's own ids). From getrandom(). */
void tool_call_id(enum tool_format format, char out[TOOL_ID_BYTES]);

/* One streamed choice's parser state. */
struct tool_stream {
  enum tool_format format;
  char named[65];                    /* TOOL_FORMAT_NAMED: the tool */
  bool single_call;                  /* parallel_tool_calls false: calls after the first dropped */
  struct api_server_buf text;               /* everything generated so far */
  size_t content_sent;               /* bytes of snapshot content sent */
  int32_t num_started;               /* calls whose id + name went out */
  size_t args_sent[TOOL_MAX_CALLS];  /* bytes of each call's arguments sent */
  char ids[TOOL_MAX_CALLS][TOOL_ID_BYTES];
};

/* Sets up `s` (caller-allocated); free with tool_stream_free. `named` may be NULL. */
void tool_stream_init(struct tool_stream *s, enum tool_format format, const char *named, bool single_call);
void tool_stream_free(struct tool_stream *s);

/* Appends `delta[n]` and returns in *deltas (a new JSON array; caller json_decref's it) the
 * OpenAI delta objects that are new; `final` on the choice's last output flushes held-back
 * text. Errors: OUT_OF_MEMORY (*deltas NULL). */
llb_status tool_stream_feed(struct tool_stream *s, const char *delta, size_t n, bool final,
                            struct json_t **deltas);

/* True once a call's id + name went out (the finish_reason is then "tool_calls"). */
bool tool_stream_called(const struct tool_stream *s);

#endif
