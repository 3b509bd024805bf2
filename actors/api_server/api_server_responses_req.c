/* POST /v1/responses request → Chat Completions body (see api_server_responses.h). */
#include "actors/api_server/api_server_responses.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Responses fields the response object repeats (as given). */
static const char *const echoed[] = {"instructions", "max_output_tokens", "temperature", "top_p", "tools",
                                     "tool_choice", "parallel_tool_calls", "text", "metadata", "user", "reasoning"};

/* Chat fields that have a Responses name or no place here. */
static const char *const chat_only[] = {"messages", "max_tokens", "max_completion_tokens", "response_format", "n",
                                        "stream_options", "logprobs", "top_logprobs", "echo", "functions",
                                        "function_call", "add_generation_prompt", "continue_final_message"};

static bool in(const char *key, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(key, list[i]) == 0) return true;
  return false;
}

/* The text of a Responses content part list as chat content parts; NULL with err set. */
static json_t *content_parts(json_t *content, const char *where, struct api_server_error *err) {
  if (json_is_string(content)) return json_incref(content);
  if (!json_is_array(content)) {
    api_server_error_bad(err, where, "'%s' must be a string or an array of content parts", where);
    return NULL;
  }
  json_t *parts = json_array();
  size_t i;
  json_t *p;
  json_array_foreach(content, i, p) {
    const char *type = json_string_value(json_object_get(p, "type"));
    char f[128];
    snprintf(f, sizeof f, "%.80s[%zu]", where, i);
    if (type && (!strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text"))) {
      json_t *text = json_object_get(p, "text");
      if (!json_is_string(text)) {
        api_server_error_bad(err, f, "'%s.text' must be a string", f);
        json_decref(parts);
        return NULL;
      }
      json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
    } else if (type && !strcmp(type, "input_image")) {
      json_t *url = json_object_get(p, "image_url");
      if (!json_is_string(url)) {
        api_server_error_bad(err, f, "'%s.image_url' must be a string (a data: URL)", f);
        json_decref(parts);
        return NULL;
      }
      json_array_append_new(parts, json_pack("{s:s, s:{s:O}}", "type", "image_url", "image_url", "url", url));
    } else {
      api_server_error_bad(err, f, "content part type '%.40s' is not supported (input_text, output_text, input_image)",
                    type ? type : "(none)");
      json_decref(parts);
      return NULL;
    }
  }
  return parts;
}

/* The text of a function_call_output's output (a string, or its parts' texts joined). */
static json_t *tool_output_text(json_t *output) {
  if (json_is_string(output)) return json_incref(output);
  if (!json_is_array(output)) return NULL;
  struct api_server_buf b = {0};
  size_t i;
  json_t *p;
  bool ok = api_server_buf_append(&b, "", 0);
  json_array_foreach(output, i, p) {
    const char *t = json_string_value(json_object_get(p, "text"));
    if (t) ok = ok && api_server_buf_append(&b, t, strlen(t));
  }
  json_t *s = ok ? json_stringn(b.data, b.len) : NULL;
  api_server_buf_free(&b);
  return s;
}

/* One input item appended to messages (function calls in a row share one assistant message). */
static llb_status add_item(json_t *messages, json_t *item, size_t i, struct api_server_error *err) {
  char f[64];
  snprintf(f, sizeof f, "input[%zu]", i);
  if (!json_is_object(item)) return api_server_error_bad(err, f, "'%s' must be an object", f);
  const char *type = json_string_value(json_object_get(item, "type"));
  json_t *role = json_object_get(item, "role");
  if ((!type || !strcmp(type, "message")) && json_is_string(role)) {
    const char *r = json_string_value(role);
    if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
      return api_server_error_bad(err, f, "'%s.role' must be user, system, developer or assistant", f);
    char where[80];
    snprintf(where, sizeof where, "%s.content", f);
    json_t *content = content_parts(json_object_get(item, "content"), where, err);
    if (!content) return LLB_STATUS_INVALID_ARGUMENT;
    json_array_append_new(messages, json_pack("{s:s, s:o}", "role", strcmp(r, "developer") ? r : "system", "content", content));
    return LLB_STATUS_OK;
  }
  if (type && !strcmp(type, "function_call")) {
    json_t *id = json_object_get(item, "call_id"), *name = json_object_get(item, "name"), *args = json_object_get(item, "arguments");
    if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
      return api_server_error_bad(err, f, "'%s' needs call_id, name and arguments strings", f);
    json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function", "name", name,
                             "arguments", args);
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    json_t *calls = json_object_get(last, "tool_calls");
    if (json_is_array(calls) && json_is_null(json_object_get(last, "content"))) json_array_append_new(calls, call);
    else json_array_append_new(messages, json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls", call));
    return LLB_STATUS_OK;
  }
  if (type && !strcmp(type, "function_call_output")) {
    json_t *id = json_object_get(item, "call_id"), *out = tool_output_text(json_object_get(item, "output"));
    if (!json_is_string(id) || !out) {
      json_decref(out);
      return api_server_error_bad(err, f, "'%s' needs a call_id string and an output string", f);
    }
    json_array_append_new(messages, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", out));
    return LLB_STATUS_OK;
  }
  if (type && !strcmp(type, "reasoning")) return LLB_STATUS_OK; /* earlier thinking is not fed back */
  return api_server_error_bad(err, f, "input item type '%.40s' is not supported (message, function_call, "
                       "function_call_output, reasoning)", type ? type : "(none)");
}

static llb_status messages_of(json_t *root, json_t *chat, struct api_server_error *err) {
  json_t *input = json_object_get(root, "input"), *instructions = json_object_get(root, "instructions");
  if (instructions && !json_is_null(instructions) && !json_is_string(instructions))
    return api_server_error_bad(err, "instructions", "'instructions' must be a string");
  json_t *messages = json_array(); /* owned by chat from here on */
  if (json_object_set_new(chat, "messages", messages) != 0)
    return api_server_error_oom(err);
  if (json_is_string(instructions))
    json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "system", "content", instructions));
  if (json_is_string(input)) {
    json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "user", "content", input));
    return LLB_STATUS_OK;
  }
  if (!json_is_array(input) || json_array_size(input) == 0)
    return api_server_error_bad(err, "input", "'input' must be a string or a non-empty array of items");
  size_t i;
  json_t *item;
  json_array_foreach(input, i, item) {
    llb_status st = add_item(messages, item, i, err);
    if (st != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

/* text.format → response_format. */
static llb_status format_of(json_t *text, json_t *chat, struct api_server_error *err) {
  if (!text || json_is_null(text)) return LLB_STATUS_OK;
  json_t *format = json_object_get(text, "format");
  if (!json_is_object(text)) return api_server_error_bad(err, "text", "'text' must be an object");
  const char *k;
  json_t *v;
  json_object_foreach(text, k, v) {
    if (strcmp(k, "format") && strcmp(k, "verbosity")) return api_server_error_bad(err, "text", "Unrecognized request argument supplied: text.%.40s", k);
  }
  if (!format || json_is_null(format)) return LLB_STATUS_OK;
  const char *type = json_string_value(json_object_get(format, "type"));
  if (!type) return api_server_error_bad(err, "text.format.type", "'text.format.type' is required");
  if (!strcmp(type, "text")) return LLB_STATUS_OK;
  if (!strcmp(type, "json_object")) {
    json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    return LLB_STATUS_OK;
  }
  if (strcmp(type, "json_schema"))
    return api_server_error_bad(err, "text.format.type", "'text.format.type' must be text, json_object or json_schema");
  json_t *spec = json_object();
  json_object_foreach(format, k, v) {
    if (strcmp(k, "type")) json_object_set(spec, k, v); /* name, schema, strict, description */
  }
  if (!json_object_get(spec, "name")) json_object_set_new(spec, "name", json_string("response"));
  json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", spec));
  return LLB_STATUS_OK;
}

/* Function tools and tool_choice → chat's. */
static llb_status tools_of(json_t *root, json_t *chat, struct api_server_error *err) {
  json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
  if (tools && !json_is_null(tools)) {
    if (!json_is_array(tools)) return api_server_error_bad(err, "tools", "'tools' must be an array");
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
      char f[48];
      snprintf(f, sizeof f, "tools[%zu]", i);
      const char *type = json_string_value(json_object_get(t, "type"));
      if (!type || strcmp(type, "function"))
        return api_server_error_bad(err, f, "tool type '%.40s' is not supported: only function tools", type ? type : "(none)");
      json_t *fn = json_object();
      const char *k;
      json_t *v;
      json_object_foreach(t, k, v) {
        if (!strcmp(k, "name") || !strcmp(k, "description") || !strcmp(k, "parameters")) json_object_set(fn, k, v);
        else if (strcmp(k, "type") && strcmp(k, "strict")) {
          json_decref(fn);
          return api_server_error_bad(err, f, "Unrecognized request argument supplied: %s.%.40s", f, k);
        }
      }
      json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
  }
  if (choice && !json_is_null(choice)) {
    if (json_is_string(choice)) json_object_set(chat, "tool_choice", choice);
    else if (json_is_object(choice) && json_is_string(json_object_get(choice, "name")) &&
             json_is_string(json_object_get(choice, "type")) && !strcmp(json_string_value(json_object_get(choice, "type")), "function"))
      json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                                                         json_object_get(choice, "name")));
    else return api_server_error_bad(err, "tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
  }
  return LLB_STATUS_OK;
}

/* Fields that change what runs only in ways this server does not do. */
static llb_status refusals(json_t *root, struct api_server_error *err) {
  json_t *v;
  if ((v = json_object_get(root, "store")) && json_is_true(v))
    return api_server_error_bad(err, "store", "'store' true is not supported: responses are not stored (send store: false; "
                         "previous_response_id cannot name a stored response)");
  static const char *const never[] = {"previous_response_id", "conversation", "prompt"};
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
    if ((v = json_object_get(root, never[i])) && !json_is_null(v))
      return api_server_error_bad(err, never[i], "'%s' is not supported: responses are not stored; send the whole input", never[i]);
  if ((v = json_object_get(root, "background")) && json_is_true(v))
    return api_server_error_bad(err, "background", "'background' true is not supported");
  if ((v = json_object_get(root, "include")) && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
    return api_server_error_bad(err, "include", "'include' is not supported (only [])");
  if ((v = json_object_get(root, "truncation")) && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
    return api_server_error_bad(err, "truncation", "'truncation' must be \"disabled\": a prompt over the context is a 400");
  if ((v = json_object_get(root, "reasoning")) && !json_is_null(v) && !json_is_object(v))
    return api_server_error_bad(err, "reasoning", "'reasoning' must be an object");
  return LLB_STATUS_OK;
}

static const char *const handled[] = {"input", "instructions", "max_output_tokens", "text", "tools", "tool_choice", "store",
                                      "previous_response_id", "conversation", "prompt", "background", "include",
                                      "truncation", "reasoning", "stream"};

llb_status api_server_responses_to_chat(const char *body, size_t len, struct api_server_responses **out, char **chat_body,
                                 size_t *chat_len, struct api_server_error *err) {
  *out = NULL;
  *chat_body = NULL;
  json_t *root = api_server_json_load_object(body, len, err);
  if (!root) return LLB_STATUS_INVALID_ARGUMENT;
  json_t *chat = json_object();
  struct api_server_responses *q = calloc(1, sizeof *q);
  llb_status st = chat && q ? refusals(root, err) : api_server_error_oom(err);
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (st != LLB_STATUS_OK) break;
    if (in(k, chat_only, sizeof chat_only / sizeof chat_only[0]))
      st = api_server_error_bad(err, k, "Unrecognized request argument supplied: %s (a Chat Completions field)", k);
    else if (!in(k, handled, sizeof handled / sizeof handled[0]))
      json_object_set(chat, k, v); /* model, temperature, top_p, user, metadata, parallel_tool_calls, vLLM extras */
  }
  if (st == LLB_STATUS_OK) st = messages_of(root, chat, err);
  if (st == LLB_STATUS_OK) st = format_of(json_object_get(root, "text"), chat, err);
  if (st == LLB_STATUS_OK) st = tools_of(root, chat, err);
  if (st == LLB_STATUS_OK && (v = json_object_get(root, "max_output_tokens")) && !json_is_null(v))
    json_object_set(chat, "max_completion_tokens", v);
  if (st == LLB_STATUS_OK && json_is_true(json_object_get(root, "stream"))) { /* usage comes with response.completed */
    json_object_set_new(chat, "stream", json_true());
    json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
  }
  if (st == LLB_STATUS_OK) {
    q->echo = json_object();
    for (size_t i = 0; i < sizeof echoed / sizeof echoed[0]; i++)
      if ((v = json_object_get(root, echoed[i]))) json_object_set(q->echo, echoed[i], v);
    q->reasoning_index = q->message_index = -1;
    *chat_body = json_dumps(chat, JSON_COMPACT);
    if (!*chat_body || !q->echo) st = api_server_error_oom(err);
    else *chat_len = strlen(*chat_body);
  }
  json_decref(chat);
  json_decref(root);
  if (st != LLB_STATUS_OK) {
    api_server_responses_free(q);
    free(*chat_body);
    *chat_body = NULL;
    return st;
  }
  *out = q;
  return LLB_STATUS_OK;
}

void api_server_responses_free(struct api_server_responses *r) {
  if (!r) return;
  json_decref(r->echo);
  api_server_reasoning_stream_free(&r->split);
  api_server_buf_free(&r->reasoning);
  api_server_buf_free(&r->content);
  free(r);
}

/* s with every `from` replaced by `to`, in place (cap bytes). */
static void replace_all(char *s, size_t cap, const char *from, const char *to) {
  char out[700];
  size_t n = 0;
  const size_t fl = strlen(from), tl = strlen(to);
  for (const char *p = s; *p && n + 1 < sizeof out;) {
    if (strncmp(p, from, fl) == 0 && n + tl < sizeof out) {
      memcpy(out + n, to, tl);
      n += tl;
      p += fl;
    } else {
      out[n++] = *p++;
    }
  }
  if (n >= cap) n = cap - 1; /* a longer result is cut at the field's size */
  memcpy(s, out, n);
  s[n] = 0;
}

void api_server_responses_map_error(struct api_server_error *e) {
  static const char *const names[][2] = {{"messages", "input"}, {"max_completion_tokens", "max_output_tokens"},
                                         {"response_format.json_schema", "text.format"}, {"response_format", "text.format"},
                                         {"].function.", "]."}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    replace_all(e->param, sizeof e->param, names[i][0], names[i][1]);
    replace_all(e->message, sizeof e->message, names[i][0], names[i][1]);
  }
}
