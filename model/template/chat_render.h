/* The model's own Jinja chat template applied to a chat request, as Hugging Face's
 * apply_chat_template does for vLLM: the context holds messages (OpenAI message objects:
 * role, content (None when the client sent null), tool_calls with each
 * function.arguments parsed from its JSON string into a dict, tool_call_id, name), tools,
 * add_generation_prompt, bos_token, eos_token and the request's chat_template_kwargs.
 * continue_final_message renders without a generation prompt and cuts the text right after
 * the last message's content (transformers' apply_chat_template). */
#ifndef LLB_MODEL_TEMPLATE_CHAT_RENDER_H
#define LLB_MODEL_TEMPLATE_CHAT_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/template/chat_template.h"
#include "model/template/jinja.h"

/* The parts of a message beyond role and content (all borrowed, NUL-terminated; NULL or ""
 * = absent). */
struct chat_message_extra {
  const char *tool_calls_json; /* JSON array of OpenAI tool calls */
  const char *tool_call_id;
  const char *name;
  const uint32_t *image_offsets; /* [num_image_offsets] byte offsets into content of its image
                                    parts, non-decreasing, <= strlen(content) (checked by the
                                    caller); NULL = none */
  int32_t num_image_offsets;
};

/* How image parts reach the template (vLLM's chat content formats): OPENAI gives a message
 * with images its content as a list of parts ({"type": "text", "text": ...} and
 * {"type": "image"}), which templates of vision models iterate (SmolVLM's emits "<image>");
 * STRING keeps content a string with `image_marker` written where each image was (mtmd's
 * default marker "<__media__>" for templates that know no images). */
enum chat_image_format { CHAT_IMAGE_FORMAT_OPENAI = 0, CHAT_IMAGE_FORMAT_STRING = 1 };

/* One render's input; everything borrowed. */
struct chat_render_input {
  const struct chat_message *messages;        /* [num_messages] */
  const struct chat_message_extra *extras;    /* [num_messages] or NULL */
  size_t num_messages;
  bool add_generation_prompt;
  bool continue_final_message;
  const char *tools_json;                     /* JSON array; NULL or "" = none */
  const char *chat_template_kwargs_json;      /* JSON object; NULL or "" = none */
  const char *bos_token, *eos_token;          /* token texts; NULL = "" */
  enum chat_image_format image_format;        /* messages with image parts (extras) only */
  const char *image_marker;                   /* STRING: the text of one image */
};

/* Renders in with template t. *text_out is malloc'd (caller frees). Errors:
 * INVALID_ARGUMENT when tools / kwargs / tool_calls are not the JSON they must be, when
 * continue_final_message is combined with add_generation_prompt or the final message is not
 * in the output, and when the template fails or raises (the message says why, with
 * raise_exception's text); TOO_LARGE past the render bounds; OUT_OF_MEMORY. */
llb_status chat_render_jinja(const struct jinja_template *t, const struct chat_render_input *in,
                             char **text_out);

/* The chat template to render with: `source` (--chat-template) as vLLM reads it — the file at
 * that path when one exists, else the template text itself when it holds Jinja ("{{" or "{%")
 * — or, when source is NULL, f's tokenizer.chat_template. NOT_FOUND when the GGUF has none; IO
 * when the file cannot be read or source is neither a file nor Jinja (the message names it); the
 * parse errors of jinja_template_create (MALFORMED with line/col). Caller frees *out with
 * jinja_template_destroy. */
struct gguf_file;
llb_status chat_render_load(const struct gguf_file *f, const char *source, struct jinja_template **out);

#endif
