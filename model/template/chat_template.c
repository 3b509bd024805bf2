/* Chat templates rendered in C. Each renderer transcribes one official Jinja template;
 * the Jinja source is quoted above it. Jinja's `trim` is Python's str.strip() (Unicode
 * whitespace), reproduced by jinja_trim. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/chat_template.h"

struct sbuf {
  char *data;
  size_t len, cap;
  bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
      b->oom = true;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Bytes of the Unicode whitespace code point (Python str.isspace) at s, else 0. */
static size_t space_len(const unsigned char *s, size_t n) {
  if (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x1F)) return 1;
  if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
  if (n >= 3 && s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3; /* U+1680 */
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 &&
      (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF)) return 3; /* U+2000-200A, 2028, 2029, 202F */
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3; /* U+205F */
  if (n >= 3 && s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
  return 0;
}

/* Appends s with leading and trailing whitespace removed (Jinja `trim`). */
static void sb_trim(struct sbuf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s), start = 0, end = n;
  for (size_t l; start < n && (l = space_len(p + start, n - start)) > 0;) start += l;
  /* trailing: scan forward remembering the end of the last non-space character */
  size_t i = start;
  end = start;
  while (i < n) {
    size_t l = space_len(p + i, n - i);
    if (l) {
      i += l;
    } else {
      i++;
      while (i < n && (p[i] & 0xC0) == 0x80) i++;
      end = i;
    }
  }
  sb_add(b, s + start, end - start);
}

static bool role_is(const struct chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

static llb_status check_alternation(const struct chat_message *msgs, size_t n, const char *msg) {
  for (size_t i = 0; i < n; i++)
    if (role_is(&msgs[i], "user") != (i % 2 == 0)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s", msg);
  return LLB_STATUS_OK;
}

/* {% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']
 * + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}
 * {% endif %}  (SmolLM2 adds, on loop.first when messages[0]['role'] != 'system':
 * '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n') */
static void render_chatml(struct sbuf *b, const struct chat_message *msgs, size_t n, bool gen, bool smollm) {
  for (size_t i = 0; i < n; i++) {
    if (smollm && i == 0 && !role_is(&msgs[0], "system"))
      sb_str(b, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n");
    sb_str(b, "<|im_start|>");
    sb_str(b, msgs[i].role);
    sb_str(b, "\n");
    sb_str(b, msgs[i].content);
    sb_str(b, "<|im_end|>\n");
  }
  if (gen) sb_str(b, "<|im_start|>assistant\n");
}

/* {% set loop_messages = messages %}{% for message in loop_messages %}{% set content =
 * '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim
 * + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}
 * {{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant
 * <|end_header_id|>\n\n' }}{% endif %}   (bos_token = "<|begin_of_text|>") */
static void render_llama3(struct sbuf *b, const struct chat_message *msgs, size_t n, bool gen) {
  for (size_t i = 0; i < n; i++) {
    if (i == 0) sb_str(b, "<|begin_of_text|>");
    sb_str(b, "<|start_header_id|>");
    sb_str(b, msgs[i].role);
    sb_str(b, "<|end_header_id|>\n\n");
    sb_trim(b, msgs[i].content);
    sb_str(b, "<|eot_id|>");
  }
  if (gen) sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* {{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0
 * % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/
 * assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content']
 * + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}
 * {% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}
 * {% endfor %}   (bos "<s>", eos "</s>"; no generation prompt) */
static llb_status render_mistral_v1(struct sbuf *b, const struct chat_message *msgs, size_t n) {
  sb_str(b, "<s>");
  for (size_t i = 0; i < n; i++) {
    if (role_is(&msgs[i], "user") != (i % 2 == 0))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "Conversation roles must alternate user/assistant/user/assistant/...");
    if (role_is(&msgs[i], "user")) {
      sb_str(b, "[INST] ");
      sb_str(b, msgs[i].content);
      sb_str(b, " [/INST]");
    } else if (role_is(&msgs[i], "assistant")) {
      sb_str(b, msgs[i].content);
      sb_str(b, "</s>");
    } else {
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "Only user and assistant roles are supported!");
    }
  }
  return LLB_STATUS_OK;
}

/* Mistral-7B-Instruct-v0.3 without tools: an initial system message is kept aside; roles
 * after it must alternate; {{- bos_token }}; user: loop.last and system_message is defined →
 * "[INST] " + system_message + "\n\n" + content + "[/INST]", else "[INST] " + content +
 * "[/INST]"; assistant: " " + content|trim + eos_token; any other role raises. */
static llb_status render_mistral_v3(struct sbuf *b, const struct chat_message *msgs, size_t n) {
  const char *system = NULL;
  if (n && role_is(&msgs[0], "system")) system = msgs[0].content, msgs++, n--;
  llb_status st = check_alternation(msgs, n,
                                    "After the optional system message, conversation roles must alternate "
                                    "user/assistant/user/assistant/...");
  if (st != LLB_STATUS_OK) return st;
  sb_str(b, "<s>");
  for (size_t i = 0; i < n; i++) {
    if (role_is(&msgs[i], "user")) {
      sb_str(b, "[INST] ");
      if (i + 1 == n && system) {
        sb_str(b, system);
        sb_str(b, "\n\n");
      }
      sb_str(b, msgs[i].content);
      sb_str(b, "[/INST]");
    } else if (role_is(&msgs[i], "assistant")) {
      sb_str(b, " ");
      sb_trim(b, msgs[i].content);
      sb_str(b, "</s>");
    } else {
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "Only user and assistant roles are supported, with the exception "
                                                   "of an initial optional system message!");
    }
  }
  return LLB_STATUS_OK;
}

/* gemma-2-it: {{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System
 * role not supported') }}{% endif %}{% for message in messages %}(alternation check){% if
 * (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role =
 * message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim +
 * '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}
 * {% endif %}.  gemma-3-it instead takes an initial system message as first_user_prefix
 * (content + '\n\n'), written after '<start_of_turn>' + role + '\n' on loop.first. */
static llb_status render_gemma(struct sbuf *b, const struct chat_message *msgs, size_t n, bool gen, bool v3) {
  const char *prefix = NULL;
  if (n && role_is(&msgs[0], "system")) {
    if (!v3) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "System role not supported");
    prefix = msgs[0].content, msgs++, n--;
  }
  sb_str(b, "<bos>");
  llb_status st = check_alternation(msgs, n, "Conversation roles must alternate user/assistant/user/assistant/...");
  if (st != LLB_STATUS_OK) return st;
  for (size_t i = 0; i < n; i++) {
    sb_str(b, "<start_of_turn>");
    sb_str(b, role_is(&msgs[i], "assistant") ? "model" : msgs[i].role);
    sb_str(b, "\n");
    if (i == 0 && prefix) {
      sb_str(b, prefix);
      sb_str(b, "\n\n");
    }
    sb_trim(b, msgs[i].content);
    sb_str(b, "<end_of_turn>\n");
  }
  if (gen) sb_str(b, "<start_of_turn>model\n");
  return LLB_STATUS_OK;
}

/* {% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' +
 * message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' +
 * message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n'
 * + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}
 * {{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}   (eos "<|endoftext|>") */
static void render_phi3(struct sbuf *b, const struct chat_message *msgs, size_t n, bool gen) {
  for (size_t i = 0; i < n; i++) {
    if (!role_is(&msgs[i], "system") && !role_is(&msgs[i], "user") && !role_is(&msgs[i], "assistant")) continue;
    sb_str(b, "<|");
    sb_str(b, msgs[i].role);
    sb_str(b, "|>\n");
    sb_str(b, msgs[i].content);
    sb_str(b, "<|end|>\n");
  }
  sb_str(b, gen ? "<|assistant|>\n" : "<|endoftext|>");
}

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

llb_status chat_template_apply(enum chat_template_kind k, const struct chat_message *msgs, size_t n,
                               bool add_generation_prompt, char **text_out) {
  if (!text_out || (!msgs && n)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat_template_apply: NULL argument");
  *text_out = NULL;
  for (size_t i = 0; i < n; i++)
    if (!msgs[i].role || !msgs[i].content)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat message %zu has no role or content", i);
  struct sbuf b = {0};
  llb_status st = LLB_STATUS_OK;
  sb_add(&b, "", 0);
  switch (k) {
  case CHAT_TEMPLATE_CHATML: render_chatml(&b, msgs, n, add_generation_prompt, false); break;
  case CHAT_TEMPLATE_SMOLLM2: render_chatml(&b, msgs, n, add_generation_prompt, true); break;
  case CHAT_TEMPLATE_LLAMA3: render_llama3(&b, msgs, n, add_generation_prompt); break;
  case CHAT_TEMPLATE_MISTRAL: st = render_mistral_v1(&b, msgs, n); break;
  case CHAT_TEMPLATE_MISTRAL_V3: st = render_mistral_v3(&b, msgs, n); break;
  case CHAT_TEMPLATE_GEMMA: st = render_gemma(&b, msgs, n, add_generation_prompt, false); break;
  case CHAT_TEMPLATE_GEMMA3: st = render_gemma(&b, msgs, n, add_generation_prompt, true); break;
  case CHAT_TEMPLATE_PHI3: render_phi3(&b, msgs, n, add_generation_prompt); break;
  default: st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat template kind %d", (int)k); break;
  }
  if (st == LLB_STATUS_OK && b.oom) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "rendered chat");
  if (st != LLB_STATUS_OK) {
    free(b.data);
    return st;
  }
  *text_out = b.data;
  return LLB_STATUS_OK;
}
