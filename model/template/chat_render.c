/* The request → Jinja context mapping of HF's apply_chat_template (transformers
 * utils/chat_template_utils.py and vLLM's chat_utils.py), rendered by model/template/jinja.h. */
#include "model/template/chat_render.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf/gguf.h"

static bool present(const char *s) { return s && s[0]; }

/* tool_calls JSON with each function.arguments JSON string parsed into its value, as vLLM
 * does before templating (templates call arguments | tojson or iterate arguments.items()). */
static llb_status parse_tool_calls(const char *text, size_t i, json_t **out) {
  json_error_t e;
  json_t *calls = json_loads(text, 0, &e);
  if (!calls || !json_is_array(calls)) {
    json_decref(calls);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "messages[%zu].tool_calls: not a JSON array", i);
  }
  size_t k;
  json_t *call;
  json_array_foreach(calls, k, call) {
    json_t *fn = json_object_get(call, "function");
    json_t *args = fn ? json_object_get(fn, "arguments") : NULL;
    if (!json_is_string(args)) continue;
    json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, &e);
    if (parsed) json_object_set_new(fn, "arguments", parsed);
  }
  *out = calls;
  return LLB_STATUS_OK;
}

/* content with its image parts: a list of parts (OPENAI) or a string with the marker where
 * each image was (STRING). Empty text parts are left out, as a client sends none. */
static json_t *content_with_images(const struct chat_render_input *in, const char *content,
                                   const struct chat_message_extra *x) {
  size_t len = strlen(content), at = 0;
  bool list = in->image_format == CHAT_IMAGE_FORMAT_OPENAI;
  json_t *parts = list ? json_array() : NULL;
  char *joined = NULL;
  size_t jlen = 0;
  FILE *f = list ? NULL : open_memstream(&joined, &jlen);
  if (list ? !parts : !f) return NULL;
  for (int32_t k = 0; k <= x->num_image_offsets; k++) {
    size_t end = k < x->num_image_offsets ? x->image_offsets[k] : len;
    if (end > len || end < at) end = at; /* the caller checked; never read outside */
    if (list && end > at) {
      json_t *p = json_pack("{s:s, s:s%}", "type", "text", "text", content + at, end - at);
      if (!p || json_array_append_new(parts, p)) goto oom;
    } else if (!list) {
      fwrite(content + at, 1, end - at, f);
    }
    at = end;
    if (k == x->num_image_offsets) break;
    if (list) {
      json_t *p = json_pack("{s:s}", "type", "image");
      if (!p || json_array_append_new(parts, p)) goto oom;
    } else {
      fputs(in->image_marker ? in->image_marker : "", f);
    }
  }
  if (list) return parts;
  if (fclose(f) != 0) {
    free(joined);
    return NULL;
  }
  json_t *s = json_stringn(joined, jlen);
  free(joined);
  return s;
oom:
  json_decref(parts);
  return NULL;
}

static llb_status build_messages(const struct chat_render_input *in, json_t *arr) {
  for (size_t i = 0; i < in->num_messages; i++) {
    const struct chat_message *m = &in->messages[i];
    const struct chat_message_extra *x = in->extras ? &in->extras[i] : NULL;
    json_t *o = json_object();
    if (!o || json_array_append_new(arr, o)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "chat context");
    json_object_set_new(o, "role", json_string(m->role));
    /* A null content (an assistant turn of tool calls) renders as "", as vLLM's "string"
     * content format does (chat_utils: the text parts joined, none here): templates such as
     * SmolLM2's concatenate message['content'] unconditionally, which None would break. */
    if (x && x->num_image_offsets > 0) {
      json_t *c = content_with_images(in, m->content ? m->content : "", x);
      if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "chat context: image parts");
      json_object_set_new(o, "content", c);
    } else {
      json_object_set_new(o, "content", json_string(m->content ? m->content : ""));
    }
    if (!x) continue;
    if (present(x->tool_calls_json)) {
      json_t *calls = NULL;
      llb_status st = parse_tool_calls(x->tool_calls_json, i, &calls);
      if (st != LLB_STATUS_OK) return st;
      json_object_set_new(o, "tool_calls", calls);
    }
    if (present(x->tool_call_id)) json_object_set_new(o, "tool_call_id", json_string(x->tool_call_id));
    if (present(x->name)) json_object_set_new(o, "name", json_string(x->name));
  }
  return LLB_STATUS_OK;
}

static llb_status build_context(const struct chat_render_input *in, json_t **out) {
  json_error_t e;
  json_t *ctx = NULL, *msgs = json_array();
  llb_status st = LLB_STATUS_OK;
  if (present(in->chat_template_kwargs_json)) {
    ctx = json_loads(in->chat_template_kwargs_json, 0, &e);
    if (!json_is_object(ctx)) st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "chat_template_kwargs: not a JSON object");
  } else {
    ctx = json_object();
  }
  if (st == LLB_STATUS_OK && (!ctx || !msgs)) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "chat context");
  if (st == LLB_STATUS_OK) st = build_messages(in, msgs);
  if (st == LLB_STATUS_OK && present(in->tools_json)) {
    json_t *tools = json_loads(in->tools_json, 0, &e);
    if (!json_is_array(tools)) {
      json_decref(tools);
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tools: not a JSON array");
    } else {
      json_object_set_new(ctx, "tools", tools);
    }
  }
  if (st != LLB_STATUS_OK) {
    json_decref(ctx);
    json_decref(msgs);
    return st;
  }
  /* the request's own variables win over kwargs of the same name */
  json_object_set_new(ctx, "messages", msgs);
  json_object_set_new(ctx, "add_generation_prompt", json_boolean(in->add_generation_prompt));
  json_object_set_new(ctx, "bos_token", json_string(in->bos_token ? in->bos_token : ""));
  json_object_set_new(ctx, "eos_token", json_string(in->eos_token ? in->eos_token : ""));
  *out = ctx;
  return LLB_STATUS_OK;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* The last occurrence of pat[m] in text[n] (Python's str.rindex) into *loc, NULL when none or
 * m == 0: Knuth-Morris-Pratt, one pass over each (restarting a search after every match would
 * be quadratic on repetitive text: a 150 KB request once kept an input processor busy for 12 s). */
static llb_status last_occurrence(const char *text, size_t n, const char *pat, size_t m, const char **loc) {
  *loc = NULL;
  if (m == 0 || m > n) return LLB_STATUS_OK;
  size_t *fail = malloc(m * sizeof *fail); /* fail[i]: longest proper border of pat[0..i] */
  if (!fail) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "continue_final_message: %zu bytes", m);
  fail[0] = 0;
  for (size_t i = 1, k = 0; i < m; i++) {
    while (k > 0 && pat[i] != pat[k]) k = fail[k - 1];
    if (pat[i] == pat[k]) k++;
    fail[i] = k;
  }
  for (size_t i = 0, k = 0; i < n; i++) {
    while (k > 0 && text[i] != pat[k]) k = fail[k - 1];
    if (text[i] == pat[k]) k++;
    if (k == m) {
      *loc = text + i + 1 - m;
      k = fail[k - 1];
    }
  }
  free(fail);
  return LLB_STATUS_OK;
}

/* transformers' continue_final_message: cut after the final message's content. */
static llb_status cut_after_final(const char *content, char *text, size_t *len) {
  size_t b = 0, e = strlen(content);
  while (b < e && is_space(content[b])) b++;
  while (e > b && is_space(content[e - 1])) e--;
  size_t n = e - b; /* content.strip() */
  const char *loc = NULL;
  llb_status st = last_occurrence(text, *len, content + b, n, &loc);
  if (st != LLB_STATUS_OK) return st;
  if (!loc) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "continue_final_message is set but the final message does not appear in the chat after "
                    "applying the chat template");
  }
  size_t at = (size_t)(loc - text), lstripped = strlen(content) - b;
  /* transformers compares the lstripped length against the unstripped content */
  size_t keep = (b == 0 && at + lstripped <= *len && memcmp(loc, content, lstripped) == 0) ? lstripped : n;
  *len = at + keep;
  text[*len] = '\0';
  return LLB_STATUS_OK;
}

llb_status chat_render_jinja(const struct jinja_template *t, const struct chat_render_input *in, char **text_out) {
  *text_out = NULL;
  if (in->continue_final_message && in->add_generation_prompt)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "continue_final_message and add_generation_prompt are not compatible; set add_generation_prompt false");
  if (in->continue_final_message && in->num_messages == 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "continue_final_message needs a final message");
  json_t *ctx = NULL;
  llb_status st = build_context(in, &ctx);
  if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st);
  struct jinja_render_opts o;
  jinja_render_opts_default(&o);
  o.limits.max_memory_bytes = 64u << 20; /* per request, on the actor's heap */
  char *text = NULL;
  size_t len = 0;
  st = jinja_template_render(t, ctx, &o, &text, &len);
  json_decref(ctx);
  if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st);
  if (in->continue_final_message) {
    const struct chat_message *last = &in->messages[in->num_messages - 1];
    st = cut_after_final(last->content ? last->content : "", text, &len);
    if (st != LLB_STATUS_OK) {
      free(text);
      return st;
    }
  }
  *text_out = text;
  return LLB_STATUS_OK;
}

static llb_status read_file(const char *path, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  FILE *fp = fopen(path, "rb");
  if (!fp) return LLB_ERRF(LLB_STATUS_IO, "--chat-template %s: %s", path, strerror(errno));
  char *buf = malloc(JINJA_MAX_SOURCE_BYTES + 1);
  size_t n = buf ? fread(buf, 1, JINJA_MAX_SOURCE_BYTES + 1, fp) : 0;
  bool err = ferror(fp);
  fclose(fp);
  if (!buf) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "--chat-template %s", path);
  if (err || n > JINJA_MAX_SOURCE_BYTES) {
    free(buf);
    return LLB_ERRF(err ? LLB_STATUS_IO : LLB_STATUS_TOO_LARGE, "--chat-template %s: %s", path,
                    err ? "read error" : "larger than 1 MiB");
  }
  *out = buf;
  *len = n;
  return LLB_STATUS_OK;
}

llb_status chat_render_load(const struct gguf_file *f, const char *source, struct jinja_template **out) {
  *out = NULL;
  const char *path = source;
  if (source && access(source, F_OK) != 0) { /* not a file: the template itself (vLLM's single-line form) */
    if (!strstr(source, "{{") && !strstr(source, "{%"))
      return LLB_ERRF(LLB_STATUS_IO, "--chat-template %.200s: no such file (nor a built-in name or Jinja text)",
                      source);
    return LLB_UPDATE_ERR_STACK(jinja_template_create(source, strlen(source), out));
  }
  if (path) {
    char *src = NULL;
    size_t len = 0;
    llb_status st = read_file(path, &src, &len);
    if (st == LLB_STATUS_OK) st = jinja_template_create(src, len, out);
    free(src);
    return LLB_UPDATE_ERR_STACK(st);
  }
  struct gguf_str s;
  if (gguf_get_str(f, "tokenizer.chat_template", &s) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "the model has no tokenizer.chat_template");
  return LLB_UPDATE_ERR_STACK(jinja_template_create(s.data, (size_t)s.len, out));
}
