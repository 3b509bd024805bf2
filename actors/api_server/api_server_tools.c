/* tools, tool_choice, parallel_tool_calls and the tool fields of messages (see api_server_tools.h). */
#include "actors/api_server/api_server_tools.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct api_server_tools {
  json_t *tools;                 /* the request's array (borrowed from its document), NULL = none */
  json_t *tool_choice;           /* borrowed, NULL = absent */
  bool parallel_tool_calls;
  enum api_server_tool_choice choice;
  enum tool_format parser;
  char named[API_SERVER_MAX_TOOL_NAME_BYTES + 1];
  char *tools_json;              /* compact JSON of tools, owned */
  char *schema_json;             /* required / named: the structured-output schema, owned */
  char **owned;                  /* [num_owned] message tool_calls JSON texts */
  int num_owned, cap_owned;
};



/* r->tools, allocated on first use (parallel_tool_calls defaults to true). */
static struct api_server_tools *tools_of(struct api_server_request *r) {
  if (!r->tools) {
    r->tools = calloc(1, sizeof *r->tools);
    if (r->tools) r->tools->parallel_tool_calls = true;
  }
  return r->tools;
}

llb_status api_server_tool_parser_from_name(const char *name, enum tool_format *out) {
  if (name && strcmp(name, "hermes") == 0) *out = TOOL_FORMAT_HERMES;
  else if (name && strcmp(name, "llama3_json") == 0) *out = TOOL_FORMAT_LLAMA3_JSON;
  else if (name && strcmp(name, "mistral") == 0) *out = TOOL_FORMAT_MISTRAL;
  else
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--tool-call-parser must be hermes, llama3_json or mistral, got \"%s\"",
                    name ? name : "");
  return LLB_STATUS_OK;
}

/* Refuses any key of object `o` not in the NULL-terminated `allowed`; `where` names o. */
static llb_status only_keys(json_t *o, const char *where, const char *const *allowed, struct api_server_error *err) {
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    bool ok = false;
    for (int i = 0; allowed[i] && !ok; i++) ok = strcmp(key, allowed[i]) == 0;
    if (!ok) {
      char f[160];
      snprintf(f, sizeof f, "%.100s.%.50s", where, key);
      return api_server_error_bad(err, f, "Unrecognized request argument supplied: %s", f);
    }
  }
  return LLB_STATUS_OK;
}

/* A string field `key` of object `o` (`where` names o); `required` or NULL when absent. */
static llb_status str_field(json_t *o, const char *where, const char *key, bool required, size_t max_bytes,
                            const char **out, struct api_server_error *err) {
  char f[160];
  snprintf(f, sizeof f, "%.100s.%.50s", where, key);
  json_t *v = json_object_get(o, key);
  *out = NULL;
  if (!v || json_is_null(v)) return required ? api_server_error_bad(err, f, "'%s' is required", f) : LLB_STATUS_OK;
  if (!json_is_string(v)) return api_server_error_bad(err, f, "'%s' must be a string, got %s", f, api_server_json_type_name(v));
  size_t n = json_string_length(v);
  if (strlen(json_string_value(v)) != n) return api_server_error_bad(err, f, "'%s' must not contain NUL characters", f);
  if (n > max_bytes) return api_server_error_bad(err, f, "'%s' is %zu bytes, at most %zu allowed", f, n, max_bytes);
  *out = json_string_value(v);
  return LLB_STATUS_OK;
}

static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > API_SERVER_MAX_TOOL_NAME_BYTES) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  }
  return true;
}

/* {"type": "function", "function": {...}} of tools[i]. */
static llb_status check_tool(json_t *t, size_t i, json_t *all, struct api_server_error *err) {
  char where[64], fw[80];
  snprintf(where, sizeof where, "tools[%zu]", i);
  if (!json_is_object(t)) return api_server_error_bad(err, where, "'%s' must be an object, got %s", where, api_server_json_type_name(t));
  static const char *const keys[] = {"type", "function", NULL};
  static const char *const fkeys[] = {"name", "description", "parameters", "strict", NULL};
  const char *type, *name, *desc;
  llb_status st = only_keys(t, where, keys, err);
  if (!st) st = str_field(t, where, "type", false, 64, &type, err);
  snprintf(fw, sizeof fw, "%s.type", where);
  if (!st && type && strcmp(type, "function") != 0)
    return api_server_error_bad(err, fw, "'%s' must be \"function\", got \"%.40s\"", fw, type);
  snprintf(fw, sizeof fw, "%s.function", where);
  json_t *f = json_object_get(t, "function");
  if (!st && !json_is_object(f)) return api_server_error_bad(err, fw, "'%s' must be an object, got %s", fw, api_server_json_type_name(f));
  if (!st) st = only_keys(f, fw, fkeys, err);
  if (!st) st = str_field(f, fw, "name", true, 1024, &name, err);
  if (!st) st = str_field(f, fw, "description", false, API_SERVER_MAX_TOOLS_BYTES, &desc, err);
  if (st) return st;
  char nf[96];
  snprintf(nf, sizeof nf, "%s.name", fw);
  if (!name_ok(name))
    return api_server_error_bad(err, nf, "'%s' must match [a-zA-Z0-9_-]{1,64}, got \"%.80s\"", nf, name);
  for (size_t k = 0; k < i; k++) {
    const char *other = json_string_value(json_object_get(json_object_get(json_array_get(all, k), "function"), "name"));
    if (other && strcmp(other, name) == 0) return api_server_error_bad(err, nf, "'%s' repeats the tool name \"%s\"", nf, name);
  }
  json_t *p = json_object_get(f, "parameters"), *strict = json_object_get(f, "strict");
  snprintf(nf, sizeof nf, "%s.parameters", fw);
  if (p && !json_is_null(p) && !json_is_object(p))
    return api_server_error_bad(err, nf, "'%s' must be a JSON Schema object, got %s", nf, api_server_json_type_name(p));
  snprintf(nf, sizeof nf, "%s.strict", fw);
  if (strict && !json_is_null(strict) && !json_is_boolean(strict))
    return api_server_error_bad(err, nf, "'%s' must be a boolean, got %s", nf, api_server_json_type_name(strict));
  return LLB_STATUS_OK;
}

static llb_status parse_tools(json_t *v, struct api_server_tools *t, struct api_server_error *err) {
  if (!json_is_array(v)) return api_server_error_bad(err, "tools", "'tools' must be an array, got %s", api_server_json_type_name(v));
  size_t n = json_array_size(v);
  if (n == 0) return api_server_error_bad(err, "tools", "'tools' must not be empty (leave it out for no tools)");
  if (n > API_SERVER_MAX_TOOLS) return api_server_error_bad(err, "tools", "'tools' holds at most %d tools, got %zu", API_SERVER_MAX_TOOLS, n);
  for (size_t i = 0; i < n; i++) {
    llb_status st = check_tool(json_array_get(v, i), i, v, err);
    if (st) return st;
  }
  t->tools = v;
  return LLB_STATUS_OK;
}

static llb_status parse_tool_choice(json_t *v, struct api_server_tools *t, struct api_server_error *err) {
  t->tool_choice = v;
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    if (!strcmp(s, "none")) t->choice = API_SERVER_TOOL_CHOICE_NONE;
    else if (!strcmp(s, "auto")) t->choice = API_SERVER_TOOL_CHOICE_AUTO;
    else if (!strcmp(s, "required")) t->choice = API_SERVER_TOOL_CHOICE_REQUIRED;
    else
      return api_server_error_bad(err, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                 "\"function\", \"function\": {\"name\": ...}}, got \"%.40s\"", s);
    return LLB_STATUS_OK;
  }
  if (!json_is_object(v))
    return api_server_error_bad(err, "tool_choice", "'tool_choice' must be a string or an object, got %s", api_server_json_type_name(v));
  static const char *const keys[] = {"type", "function", NULL}, *const fkeys[] = {"name", NULL};
  const char *type, *name;
  llb_status st = only_keys(v, "tool_choice", keys, err);
  if (!st) st = str_field(v, "tool_choice", "type", true, 64, &type, err);
  if (!st && strcmp(type, "function") != 0)
    return api_server_error_bad(err, "tool_choice.type", "'tool_choice.type' must be \"function\", got \"%.40s\"", type);
  json_t *f = json_object_get(v, "function");
  if (!st && !json_is_object(f))
    return api_server_error_bad(err, "tool_choice.function", "'tool_choice.function' must be an object, got %s", api_server_json_type_name(f));
  if (!st) st = only_keys(f, "tool_choice.function", fkeys, err);
  if (!st) st = str_field(f, "tool_choice.function", "name", true, API_SERVER_MAX_TOOL_NAME_BYTES, &name, err);
  if (st) return st;
  t->choice = API_SERVER_TOOL_CHOICE_NAMED;
  snprintf(t->named, sizeof t->named, "%s", name);
  return LLB_STATUS_OK;
}

llb_status api_server_tools_parse_field(const char *key, json_t *v, struct api_server_request *r, bool *handled,
                                 struct api_server_error *err) {
  *handled = false;
  if (r->endpoint != API_SERVER_ENDPOINT_CHAT) return LLB_STATUS_OK;
  bool tools = !strcmp(key, "tools"), choice = !strcmp(key, "tool_choice"), par = !strcmp(key, "parallel_tool_calls");
  if (!tools && !choice && !par) return LLB_STATUS_OK;
  *handled = true;
  struct api_server_tools *t = tools_of(r);
  if (!t) return api_server_error_oom(err);
  if (tools) return parse_tools(v, t, err);
  if (choice) return parse_tool_choice(v, t, err);
  if (!json_is_boolean(v))
    return api_server_error_bad(err, key, "'parallel_tool_calls' must be a boolean, got %s", api_server_json_type_name(v));
  t->parallel_tool_calls = json_is_true(v);
  return LLB_STATUS_OK;
}

static bool own(struct api_server_tools *t, char *s) {
  if (t->num_owned == t->cap_owned) {
    int cap = t->cap_owned ? t->cap_owned * 2 : 8;
    char **o = realloc(t->owned, (size_t)cap * sizeof *o);
    if (!o) return false;
    t->owned = o;
    t->cap_owned = cap;
  }
  t->owned[t->num_owned++] = s;
  return true;
}

/* An assistant message's tool_calls array: checked, kept as compact JSON in msg->tool_calls. */
static llb_status parse_message_calls(json_t *v, const char *name, struct api_server_request *r, struct llb_chat_message *msg,
                                      struct api_server_error *err) {
  char where[96];
  snprintf(where, sizeof where, "%s.tool_calls", name);
  if (!json_is_array(v)) return api_server_error_bad(err, where, "'%s' must be an array, got %s", where, api_server_json_type_name(v));
  if (json_array_size(v) > TOOL_MAX_CALLS)
    return api_server_error_bad(err, where, "'%s' holds at most %d calls, got %zu", where, TOOL_MAX_CALLS, json_array_size(v));
  static const char *const keys[] = {"id", "type", "function", NULL}, *const fkeys[] = {"name", "arguments", NULL};
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *c = json_array_get(v, i), *f = json_object_get(c, "function");
    char cw[128], fw[144];
    snprintf(cw, sizeof cw, "%s[%zu]", where, i);
    snprintf(fw, sizeof fw, "%s.function", cw);
    const char *id, *type, *fname, *args;
    if (!json_is_object(c)) return api_server_error_bad(err, cw, "'%s' must be an object, got %s", cw, api_server_json_type_name(c));
    llb_status st = only_keys(c, cw, keys, err);
    if (!st) st = str_field(c, cw, "id", true, 256, &id, err);
    if (!st) st = str_field(c, cw, "type", true, 64, &type, err);
    if (!st && strcmp(type, "function") != 0)
      return api_server_error_bad(err, cw, "'%s.type' must be \"function\", got \"%.40s\"", cw, type);
    if (!st && !json_is_object(f)) return api_server_error_bad(err, fw, "'%s' must be an object, got %s", fw, api_server_json_type_name(f));
    if (!st) st = only_keys(f, fw, fkeys, err);
    if (!st) st = str_field(f, fw, "name", true, API_SERVER_MAX_TOOL_NAME_BYTES, &fname, err);
    if (!st) st = str_field(f, fw, "arguments", true, API_SERVER_MAX_TOOLS_BYTES, &args, err);
    if (st) return st;
  }
  struct api_server_tools *t = tools_of(r);
  char *s = t ? json_dumps(v, JSON_COMPACT) : NULL;
  if (!s || !own(t, s)) {
    free(s);
    return api_server_error_oom(err);
  }
  msg->tool_calls = llb_str_c(s);
  return LLB_STATUS_OK;
}

llb_status api_server_tools_parse_message(json_t *m, const char *name, bool content_null, struct api_server_request *r,
                                   struct llb_chat_message *msg, struct api_server_error *err) {
  const char *s;
  bool assistant = msg->role.len == 9 && memcmp(msg->role.data, "assistant", 9) == 0;
  bool tool = msg->role.len == 4 && memcmp(msg->role.data, "tool", 4) == 0;
  json_t *nv = json_object_get(m, "name");
  char f[96];
  snprintf(f, sizeof f, "%s.name", name);
  if (json_is_null(nv)) return api_server_error_bad(err, f, "'%s' must be a string, got null", f);
  llb_status st = str_field(m, name, "name", false, API_SERVER_MAX_USER_BYTES, &s, err);
  if (st) return st;
  if (s) msg->name = llb_str_c(s);
  json_t *calls = json_object_get(m, "tool_calls"), *id = json_object_get(m, "tool_call_id");
  if (calls && !json_is_null(calls)) {
    snprintf(f, sizeof f, "%s.tool_calls", name);
    if (!assistant) return api_server_error_bad(err, f, "'%s' is allowed on assistant messages only", f);
    if ((st = parse_message_calls(calls, name, r, msg, err))) return st;
  }
  if (id && !json_is_null(id) && !tool) {
    snprintf(f, sizeof f, "%s.tool_call_id", name);
    return api_server_error_bad(err, f, "'%s' is allowed on tool messages only", f);
  }
  if (tool) {
    if ((st = str_field(m, name, "tool_call_id", true, 256, &s, err))) return st;
    msg->tool_call_id = llb_str_c(s);
  }
  msg->content_is_null = content_null && assistant;
  return LLB_STATUS_OK;
}

/* The tool whose function name is `name`, or NULL. */
static json_t *find_tool(json_t *tools, const char *name) {
  for (size_t i = 0; i < json_array_size(tools); i++) {
    json_t *f = json_object_get(json_array_get(tools, i), "function");
    const char *n = json_string_value(json_object_get(f, "name"));
    if (n && strcmp(n, name) == 0) return f;
  }
  return NULL;
}

/* A tool's parameters (a new reference): its schema, or an empty object schema. */
static json_t *parameters_of(json_t *function) {
  json_t *p = json_object_get(function, "parameters");
  if (json_is_object(p)) return json_deep_copy(p);
  return json_pack("{s:s, s:{}}", "type", "object", "properties");
}

/* vLLM's required-choice schema (protocol.py _get_json_schema_from_tool, in the form the
 * grammar engine compiles: anyOf alone, each alternative an object). NULL on a $defs name that
 * two tools define differently (*clash set) or out of memory. */
static json_t *required_schema(json_t *tools, bool single, bool *clash) {
  json_t *alts = json_array(), *defs = json_object();
  for (size_t i = 0; alts && defs && i < json_array_size(tools); i++) {
    json_t *f = json_object_get(json_array_get(tools, i), "function"), *p = parameters_of(f);
    json_t *d = json_object_get(p, "$defs");
    const char *k;
    json_t *dv;
    json_object_foreach(d, k, dv) {
      json_t *prev = json_object_get(defs, k);
      if (prev && !json_equal(prev, dv)) *clash = true;
      json_object_set(defs, k, dv);
    }
    json_object_del(p, "$defs");
    json_t *alt = json_pack("{s:s, s:{s:{s:s, s:O}, s:o}, s:[s, s], s:b}", "type", "object", "properties", "name",
                            "type", "string", "const", json_object_get(f, "name"), "parameters", p, "required",
                            "name", "parameters", "additionalProperties", 0);
    if (!alt || json_array_append_new(alts, alt) != 0) {
      json_decref(alts);
      alts = NULL;
    }
  }
  json_t *schema = alts && !*clash ? json_pack("{s:s, s:i, s:{s:o}}", "type", "array", "minItems", 1, "items",
                                               "anyOf", alts)
                                   : (json_decref(alts), NULL);
  if (schema && single) json_object_set_new(schema, "maxItems", json_integer(1));
  if (schema && json_object_size(defs) > 0) json_object_set(schema, "$defs", defs);
  json_decref(defs);
  return schema;
}

llb_status api_server_tools_check(struct api_server_request *r, enum tool_format parser, bool auto_allowed, struct api_server_error *err) {
  struct api_server_tools *t = r->tools;
  if (!t) return LLB_STATUS_OK;
  t->parser = parser;
  if (!t->tools) {
    if (t->tool_choice && !json_is_null(t->tool_choice) && t->choice != API_SERVER_TOOL_CHOICE_NONE)
      return api_server_error_bad(err, "tool_choice", "When using 'tool_choice', 'tools' must be set");
    return LLB_STATUS_OK;
  }
  if (!t->tool_choice) t->choice = API_SERVER_TOOL_CHOICE_AUTO;
  if (t->choice == API_SERVER_TOOL_CHOICE_AUTO && !auto_allowed) /* vLLM's serving_chat.py check and message */
    return api_server_error_bad(err, "tool_choice",
                         "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  json_t *schema = NULL;
  if (t->choice >= API_SERVER_TOOL_CHOICE_REQUIRED && r->structured_outputs.kind != LLB_SO_NONE)
    return api_server_error_bad(err, "tool_choice", "'tool_choice' required or named constrains the output itself; it cannot be "
               "combined with '%s'", r->structured_param);
  if (t->choice == API_SERVER_TOOL_CHOICE_NAMED) {
    json_t *f = find_tool(t->tools, t->named);
    if (!f) return api_server_error_bad(err, "tool_choice", "Tool \"%s\" named in 'tool_choice' is not in 'tools'", t->named);
    schema = parameters_of(f);
  } else if (t->choice == API_SERVER_TOOL_CHOICE_REQUIRED) {
    bool clash = false;
    schema = required_schema(t->tools, !t->parallel_tool_calls, &clash);
    if (clash) return api_server_error_bad(err, "tools", "two tools define the same \"$defs\" name differently");
  }
  t->tools_json = json_dumps(t->tools, JSON_COMPACT);
  if (!t->tools_json || (t->choice >= API_SERVER_TOOL_CHOICE_REQUIRED && !schema)) {
    json_decref(schema);
    return api_server_error_oom(err);
  }
  if (strlen(t->tools_json) > API_SERVER_MAX_TOOLS_BYTES) {
    json_decref(schema);
    return api_server_error_bad(err, "tools", "'tools' is %zu bytes of JSON, at most %d allowed", strlen(t->tools_json), API_SERVER_MAX_TOOLS_BYTES);
  }
  if (schema) {
    t->schema_json = json_dumps(schema, JSON_COMPACT);
    json_decref(schema);
    if (!t->schema_json) return api_server_error_oom(err);
    if (strlen(t->schema_json) > LLB_SO_MAX_SPEC_BYTES)
      return api_server_error_bad(err, "tools", "the tool_choice schema built from 'tools' is %zu bytes, at most %d allowed",
                 strlen(t->schema_json), LLB_SO_MAX_SPEC_BYTES);
    /* the engine's errors about the schema (a keyword it cannot enforce) name "tools" */
    r->structured_outputs = (struct llb_structured_outputs){.kind = LLB_SO_JSON, .spec = llb_str_c(t->schema_json)};
    snprintf(r->structured_param, sizeof r->structured_param, "tools");
  }
  if (t->choice == API_SERVER_TOOL_CHOICE_AUTO && (parser == TOOL_FORMAT_HERMES || parser == TOOL_FORMAT_MISTRAL))
    r->sampling_params.skip_special_tokens = false;
  return LLB_STATUS_OK;
}

void api_server_tools_to_generate(const struct api_server_request *r, struct llb_generate_request *out) {
  const struct api_server_tools *t = r->tools;
  if (!t || !t->tools_json) return;
  out->tools = llb_str_c(t->tools_json);
}

bool api_server_tools_output_format(const struct api_server_request *r, enum tool_format *format, const char **named,
                             bool *single_call) {
  const struct api_server_tools *t = r->tools;
  if (r->endpoint != API_SERVER_ENDPOINT_CHAT || !t || !t->tools || t->choice == API_SERVER_TOOL_CHOICE_NONE) return false;
  *format = t->choice == API_SERVER_TOOL_CHOICE_NAMED      ? TOOL_FORMAT_NAMED
            : t->choice == API_SERVER_TOOL_CHOICE_REQUIRED ? TOOL_FORMAT_REQUIRED
                                                    : t->parser;
  *named = t->named;
  *single_call = !t->parallel_tool_calls;
  return true;
}

void api_server_tools_free(struct api_server_request *r) {
  struct api_server_tools *t = r->tools;
  if (!t) return;
  for (int i = 0; i < t->num_owned; i++) free(t->owned[i]);
  free(t->owned);
  free(t->tools_json);
  free(t->schema_json);
  free(t);
  r->tools = NULL;
}
