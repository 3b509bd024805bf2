/* The reasoning markup of reasoning models (vLLM's --reasoning-parser): where a model's
 * thinking ends and its answer starts, in the output text (the api server splits
 * message.reasoning_content from message.content) and in token ids (the worker starts a
 * structured-output grammar after the end of reasoning, vLLM's rule).
 *
 * Formats (vLLM vllm/reasoning/, read, not copied):
 *   deepseek_r1  "<think>" ... "</think>"; the output may start inside the thinking without
 *                "<think>" (the template opened it): everything before "</think>" is
 *                reasoning, all of it when "</think>" never comes.
 *   qwen3        "<think>" ... "</think>", reasoning only when the output starts with
 *                "<think>" (with enable_thinking false the template closes an empty block in
 *                the prompt and the output is all content).
 *   granite      "Here's my thought process:" (or "Here is") ... "Here's my response:".
 *   gpt_oss      harmony channels: "<|channel|>analysis<|message|>" ... then
 *                "<|end|><|start|>assistant<|channel|>final<|message|>" (or the last
 *                three tokens alone) before the answer; its markers are special tokens, so
 *                the text must keep them (skip_special_tokens false).
 * Leading whitespace before a start marker is skipped. A reasoning block that never ends is
 * all reasoning. */
#ifndef LLB_MODEL_REASONING_H
#define LLB_MODEL_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum reasoning_parser {
  REASONING_NONE = 0,
  REASONING_DEEPSEEK_R1 = 1,
  REASONING_QWEN3 = 2,
  REASONING_GRANITE = 3,
  REASONING_GPT_OSS = 4,
};

#define REASONING_MAX_PARSER REASONING_GPT_OSS

/* The parser of vLLM name `name`; REASONING_NONE when there is none by that name. */
enum reasoning_parser reasoning_parser_from_name(const char *name);

/* vLLM's name of p ("" for NONE or out of range). */
const char *reasoning_parser_name(enum reasoning_parser p);

/* The names accepted, comma separated (for error messages). */
const char *reasoning_parser_names(void);

/* True when p's markers are special tokens that the output text must keep. */
bool reasoning_needs_special_tokens(enum reasoning_parser p);

/* A split of an output text into its reasoning and content: byte ranges of the text. */
struct reasoning_split {
  size_t reasoning_begin, reasoning_end;
  size_t content_begin, content_end;
  bool has_reasoning; /* reasoning markup was found (the reasoning may be empty) */
  bool ended;         /* the end marker came: what follows is content */
};

/* Splits text[0..len). final: the whole output. Not final (a stream so far): what could still
 * turn out to be markup (a partial start or end marker at the end of the text, or a text so
 * short that whether it starts a reasoning block is not known) is in neither part, so that
 * the parts only grow as the text does. p NONE: all content. */
void reasoning_split_text(enum reasoning_parser p, const char *text, size_t len, bool final,
                          struct reasoning_split *out);

/* The marker texts of p: NULL-terminated static lists. false (lists untouched) for NONE or
 * out of range. */
bool reasoning_marker_texts(enum reasoning_parser p, const char *const **starts, const char *const **ends);

/* Token-id forms of a parser's markers in one tokenizer (its special-token text parsed; the
 * worker encodes reasoning_marker_texts). */
#define REASONING_MAX_MARKERS 4
#define REASONING_MAX_MARKER_IDS 16
struct reasoning_marker_ids {
  int32_t num_start, num_end;
  int32_t start_len[REASONING_MAX_MARKERS], end_len[REASONING_MAX_MARKERS];
  int32_t start[REASONING_MAX_MARKERS][REASONING_MAX_MARKER_IDS];
  int32_t end[REASONING_MAX_MARKERS][REASONING_MAX_MARKER_IDS];
};

/* Whether the text of ids[0..n) ends inside reasoning, from `in_reasoning` at its start: each
 * start marker opens it, each end marker closes it (vLLM's is_reasoning_end over a prompt,
 * whose last marker decides). *end_at gets the index just past the first end marker that
 * closes it, or -1 when none does. */
bool reasoning_scan_ids(const struct reasoning_marker_ids *m, const int32_t *ids, int64_t n, bool in_reasoning,
                        int64_t *end_at);

#endif
