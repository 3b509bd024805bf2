/* Chat templates: the built-in templates as their Jinja sources, rendered by the one chat
 * renderer (chat_render.h over the Jinja interpreter), and the recognition of a model's template
 * family by distinctive substrings of its source. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/chat_render.h"
#include "model/template/chat_template.h"
#include "model/template/jinja.h"

/* The official templates, verbatim (each model's tokenizer_config.json chat_template), with the
 * texts of the special tokens they read as bos_token / eos_token. */
static const struct chat_template_builtin k_builtins[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_CHATML] = {/* OpenHermes-2.5-Mistral-7B */
        .bos_token = "", .eos_token = "",
        .source =
            "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
            " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
            "{% endif %}"},
    [CHAT_TEMPLATE_SMOLLM2] = {/* SmolLM2-135M-Instruct (read from its GGUF) */
        .bos_token = "", .eos_token = "",
        .source =
            "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n'"
            " }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"},
    [CHAT_TEMPLATE_LLAMA3] = {/* Meta-Llama-3-8B-Instruct */
        .bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>",
        .source =
            "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>'"
            " + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
            "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
            "{% endif %}"},
    [CHAT_TEMPLATE_MISTRAL] = {/* Mistral-7B-Instruct-v0.1 */
        .bos_token = "<s>", .eos_token = "</s>",
        .source =
            "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
            "%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
            "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
            "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
            "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
            "{% endfor %}"},
    [CHAT_TEMPLATE_MISTRAL_V3] = {/* Mistral-7B-Instruct-v0.3, its branch without tools */
        .bos_token = "<s>", .eos_token = "</s>",
        .source =
            "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messages[0][\"content\"] %}"
            "\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}"
            "\n{%- endif %}\n{%- set ns = namespace() %}\n{%- set ns.index = 0 %}\n{%- for message in loop_messages %}"
            "\n    {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n        {{- raise_exception(\"After "
            "the optional system message, conversation roles must alternate user/assistant/user/assistant/...\") }}"
            "\n    {%- endif %}\n    {%- set ns.index = ns.index + 1 %}\n{%- endfor %}\n{{- bos_token }}"
            "\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}"
            "\n        {%- if loop.last and system_message is defined %}\n            {{- \"[INST] \" + system_message "
            "+ \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST] \" +"
            " message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- elif message[\"role\"] == \"assistant\" "
            "%}\n        {{- \" \" + message[\"content\"]|trim + eos_token}}\n    {%- else %}"
            "\n        {{- raise_exception(\"Only user and assistant roles are supported, with the exception of an initial "
            "optional system message!\") }}\n    {%- endif %}\n{%- endfor %}"},
    [CHAT_TEMPLATE_GEMMA] = {/* gemma-2-2b-it */
        .bos_token = "<bos>", .eos_token = "<eos>",
        .source =
            "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
            "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
            "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
            "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
            "{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
            "+ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}"
            "{% endif %}"},
    [CHAT_TEMPLATE_GEMMA3] = {/* gemma-3-1b-it, text parts */
        .bos_token = "<bos>", .eos_token = "<eos>",
        .source =
            "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set first_user_prefix = messages[0]['"
            "content'] + '\\n\\n' -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}"
            "\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}"
            "\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 "
            "% 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") "
            "}}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" "
            "-%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}"
            "\n    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}"
            "\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}"
            "\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}"
            "\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}"},
    [CHAT_TEMPLATE_PHI3] = {/* Phi-3.5-mini-instruct */
        .bos_token = "<s>", .eos_token = "<|endoftext|>",
        .source =
            "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] "
            "+ '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
            "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"
            "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}"
            "{{ eos_token }}{% endif %}"},
};

static const char *const k_names[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_CHATML] = "chatml",         [CHAT_TEMPLATE_LLAMA3] = "llama3",
    [CHAT_TEMPLATE_MISTRAL] = "mistral",       [CHAT_TEMPLATE_GEMMA] = "gemma",
    [CHAT_TEMPLATE_PHI3] = "phi3",             [CHAT_TEMPLATE_SMOLLM2] = "smollm2",
    [CHAT_TEMPLATE_MISTRAL_V3] = "mistral-v3", [CHAT_TEMPLATE_GEMMA3] = "gemma3",
};

#define NAME_LIST "chatml, smollm2, llama3, mistral (mistral-v1), mistral-v3, gemma, gemma3, phi3"

const char *chat_template_name(enum chat_template_kind k) {
  return (unsigned)k < CHAT_TEMPLATE_COUNT ? k_names[k] : "unknown";
}

llb_status chat_template_from_name(const char *name, enum chat_template_kind *out) {
  if (!name || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat_template_from_name: NULL argument");
  if (strcmp(name, "mistral-v1") == 0) name = "mistral";
  for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++) {
    if (strcmp(name, k_names[k]) == 0) {
      *out = (enum chat_template_kind)k;
      return LLB_STATUS_OK;
    }
  }
  return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "unknown chat template name '%s' (known: " NAME_LIST ")", name);
}

static llb_status unsupported(const char *why) {
  return LLB_ERRF(LLB_STATUS_UNSUPPORTED,
                  "chat template not supported: %s; name one of " NAME_LIST " with the chat template option", why);
}

llb_status chat_template_detect(const char *src, enum chat_template_kind *out) {
  if (!src || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat_template_detect: NULL argument");
  if (chat_template_from_name(src, out) == LLB_STATUS_OK) return LLB_STATUS_OK; /* a bare name */
  if (strstr(src, "<|im_start|>")) {
    if (strstr(src, "You are a helpful AI assistant named SmolLM")) return *out = CHAT_TEMPLATE_SMOLLM2, LLB_STATUS_OK;
    if (strstr(src, "<|im_sep|>")) return unsupported("Phi-4 style ChatML with <|im_sep|>");
    if (strstr(src, "You are ")) return unsupported("ChatML variant with a built-in default system prompt");
    return *out = CHAT_TEMPLATE_CHATML, LLB_STATUS_OK;
  }
  if (strstr(src, "<|start_header_id|>") && strstr(src, "<|end_header_id|>")) {
    if (strstr(src, "Cutting Knowledge Date")) return unsupported("Llama 3.1+ template with a dated system block");
    return *out = CHAT_TEMPLATE_LLAMA3, LLB_STATUS_OK;
  }
  if (strstr(src, "[INST]")) {
    if (strstr(src, "[SYSTEM_PROMPT]")) return unsupported("Mistral v7 template ([SYSTEM_PROMPT])");
    if (strstr(src, "<<SYS>>")) return unsupported("Llama 2 template (<<SYS>>)");
    if (strstr(src, " [/INST]")) return *out = CHAT_TEMPLATE_MISTRAL, LLB_STATUS_OK;
    return *out = CHAT_TEMPLATE_MISTRAL_V3, LLB_STATUS_OK;
  }
  if (strstr(src, "<start_of_turn>")) {
    *out = strstr(src, "first_user_prefix") ? CHAT_TEMPLATE_GEMMA3 : CHAT_TEMPLATE_GEMMA;
    return LLB_STATUS_OK;
  }
  if (strstr(src, "<|assistant|>") && strstr(src, "<|end|>")) return *out = CHAT_TEMPLATE_PHI3, LLB_STATUS_OK;
  return unsupported("no known template family matches its source");
}

llb_status chat_template_from_gguf(const struct gguf_file *f, enum chat_template_kind *out) {
  if (!f || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat_template_from_gguf: NULL argument");
  if (gguf_find_key(f, "tokenizer.chat_template") < 0)
    return LLB_ERRF(LLB_STATUS_NOT_FOUND,
                    "the model has no tokenizer.chat_template; name one of " NAME_LIST " with the chat template option");
  struct gguf_str s;
  llb_status st = gguf_get_str(f, "tokenizer.chat_template", &s);
  if (st != LLB_STATUS_OK) return st;
  char *src = malloc(s.len + 1);
  if (!src) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "chat template of %llu bytes", (unsigned long long)s.len);
  memcpy(src, s.data, s.len);
  src[s.len] = '\0';
  st = chat_template_detect(src, out);
  free(src);
  return st;
}

const struct chat_template_builtin *chat_template_builtin(enum chat_template_kind k) {
  return (unsigned)k < CHAT_TEMPLATE_COUNT ? &k_builtins[k] : NULL;
}

/* Every built-in template compiled once per process, on first use; read-only afterwards, so
 * renders on any thread share them. */
static struct jinja_template *g_compiled[CHAT_TEMPLATE_COUNT];
static llb_status g_compile_status;
static char g_compile_error[256];
static pthread_once_t g_compile_once = PTHREAD_ONCE_INIT;

static void compile_builtins(void) {
  for (int k = 0; k < CHAT_TEMPLATE_COUNT && g_compile_status == LLB_STATUS_OK; k++) {
    const char *src = k_builtins[k].source;
    g_compile_status = jinja_template_create(src, strlen(src), &g_compiled[k]);
    if (g_compile_status != LLB_STATUS_OK)
      snprintf(g_compile_error, sizeof g_compile_error, "built-in template %s: %s", k_names[k], llb_err_last());
  }
}

llb_status chat_template_apply(enum chat_template_kind k, const struct chat_message *msgs, size_t n,
                               bool add_generation_prompt, char **text_out) {
  if (!text_out || (!msgs && n)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat_template_apply: NULL argument");
  *text_out = NULL;
  if ((unsigned)k >= CHAT_TEMPLATE_COUNT) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat template kind %d", (int)k);
  for (size_t i = 0; i < n; i++)
    if (!msgs[i].role || !msgs[i].content)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat message %zu has no role or content", i);
  pthread_once(&g_compile_once, compile_builtins);
  if (g_compile_status != LLB_STATUS_OK) return LLB_ERRF(LLB_STATUS_INTERNAL, "%s", g_compile_error);
  const struct chat_render_input in = {.messages = msgs, .num_messages = n, .add_generation_prompt = add_generation_prompt,
                                       .bos_token = k_builtins[k].bos_token, .eos_token = k_builtins[k].eos_token};
  return LLB_UPDATE_ERR_STACK(chat_render_jinja(g_compiled[k], &in, text_out));
}
