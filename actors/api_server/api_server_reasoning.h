/* Reasoning content of chat outputs (vLLM --reasoning-parser; model/reasoning/reasoning.h has the
 * formats): a choice's text split into `reasoning_content` and `content`, whole or streamed.
 *
 * Streamed, each choice keeps its text so far and what it already sent of each part; every
 * feed splits the whole text again (outputs are short; no state to get wrong, as the tool
 * parser does) and hands back the new bytes of each part. What could still be markup (a
 * partial "</think>" at the end) is held back until the next feed or the last. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_REASONING_H
#define LLB_ACTORS_API_SERVER_API_SERVER_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"
#include "base/status.h"
#include "model/reasoning/reasoning.h"

struct api_server_reasoning_stream {
  struct api_server_buf text; /* the choice's text so far */
  size_t reasoning_sent, content_sent;
};

/* Frees s's text; s may be reused after it is zeroed. NULL ok. */
void api_server_reasoning_stream_free(struct api_server_reasoning_stream *s);

/* Appends delta[0..n) and returns in *reasoning / *content the bytes of each part not handed
 * out before (pointers into s, valid until the next feed); final: the output ended, nothing is
 * held back. Errors: OUT_OF_MEMORY. */
llb_status api_server_reasoning_stream_feed(struct api_server_reasoning_stream *s, enum reasoning_parser p, const char *delta,
                                     size_t n, bool final, struct llb_str *reasoning, struct llb_str *content);

/* The chat template's thinking switch in chat_template_kwargs (compact JSON or ""):
 * enable_thinking (Qwen3's) or thinking (DeepSeek V3.1's, Granite's) set to false turns the
 * reasoning split and the structured-output wait off for the request. */
bool api_server_reasoning_thinking_enabled(struct llb_str chat_template_kwargs);

#endif
