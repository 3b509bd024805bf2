/* Chat templates built in by name (llama-server's --chat-template NAME), and the recognition of
 * a model's tokenizer.chat_template (Jinja source) by distinctive substrings. Each kind is one
 * family's official template, kept as its Jinja source (named below with the model whose
 * tokenizer_config.json it is) and rendered by the one chat renderer, model/template/chat_render.h
 * over the Jinja interpreter, as the model's own template is. Rendered text contains the special
 * tokens as text (including the BOS text when the template emits it): tokenize it with
 * parse_special = true and add_special = false, or BOS is doubled.
 */
#ifndef LLB_MODEL_CHAT_TEMPLATE_H
#define LLB_MODEL_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "model/gguf/gguf.h"

enum chat_template_kind {
  CHAT_TEMPLATE_CHATML,     /* "chatml": <|im_start|>role\ncontent<|im_end|>\n (OpenHermes-2.5) */
  CHAT_TEMPLATE_LLAMA3,     /* "llama3": Meta-Llama-3-8B-Instruct (BOS text, trimmed content) */
  CHAT_TEMPLATE_MISTRAL,    /* "mistral" / "mistral-v1": Mistral-7B-Instruct-v0.1/v0.2 ("[INST] x [/INST]") */
  CHAT_TEMPLATE_GEMMA,      /* "gemma": gemma-2-it (system role rejected) */
  CHAT_TEMPLATE_PHI3,       /* "phi3": Phi-3(.5)-mini-instruct */
  CHAT_TEMPLATE_SMOLLM2,    /* "smollm2": ChatML with SmolLM2's default system prompt */
  CHAT_TEMPLATE_MISTRAL_V3, /* "mistral-v3": Mistral-7B-Instruct-v0.3 ("[INST] x[/INST]", no tools) */
  CHAT_TEMPLATE_GEMMA3,     /* "gemma3": gemma-3-it (system folded into the first user turn) */
  CHAT_TEMPLATE_COUNT
};

/* One chat message; role is "system", "user", "assistant" (other roles as the template
 * treats them). Both strings NUL-terminated, borrowed. */
struct chat_message {
  const char *role;
  const char *content;
};

/* Recognises a Jinja chat template source (NUL-terminated). UNSUPPORTED with a message that
 * says why and lists the names for chat_template_from_name when it is not one of the kinds
 * (or is a variant whose output they would not reproduce, e.g. Llama 3.1's dated system
 * block). INVALID_ARGUMENT if jinja_source is NULL. */
llb_status chat_template_detect(const char *jinja_source, enum chat_template_kind *out);

/* Kind by name: "chatml", "smollm2", "llama3", "mistral" (= "mistral-v1"), "mistral-v3",
 * "gemma", "gemma3", "phi3". UNSUPPORTED naming the value and listing the names otherwise. */
llb_status chat_template_from_name(const char *name, enum chat_template_kind *out);

/* Canonical name of a kind ("chatml"); "unknown" for a bad value. */
const char *chat_template_name(enum chat_template_kind k);

/* Detects the kind of f's tokenizer.chat_template. NOT_FOUND (suggesting a template name)
 * when the file has none; otherwise as chat_template_detect. */
llb_status chat_template_from_gguf(const struct gguf_file *f, enum chat_template_kind *out);

/* A built-in template: its Jinja source and the texts of the family's special tokens that the
 * source reads as bos_token and eos_token ("" where it reads none). Static storage. */
struct chat_template_builtin {
  const char *source, *bos_token, *eos_token;
};

/* Kind k's built-in template; NULL for a bad kind. */
const struct chat_template_builtin *chat_template_builtin(enum chat_template_kind k);

/* Renders n messages with kind k's built-in template through the chat renderer (chat_render.h;
 * the templates are compiled once per process, on first use, and shared by every thread), with
 * add_generation_prompt as in HF's apply_chat_template. *text_out is malloc'd and
 * NUL-terminated; the caller frees it. INVALID_ARGUMENT (message as the template's
 * raise_exception) where the template rejects the conversation: roles that must alternate
 * user/assistant, a system role the model does not support; the renderer's TOO_LARGE and
 * OUT_OF_MEMORY. */
llb_status chat_template_apply(enum chat_template_kind k, const struct chat_message *msgs, size_t n,
                               bool add_generation_prompt, char **text_out);

#endif
