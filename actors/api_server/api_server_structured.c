/* Structured-output request fields (see api_server_structured.h). */
#include "actors/api_server/api_server_structured.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static llb_status bad(struct api_server_error *err, const char *param, const char *fmt, const char *a, const char *b) {
  char msg[400];
  snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
  api_server_error_set(err, 400, param, "%s", msg);
  return LLB_STATUS_INVALID_ARGUMENT;
}

static const char *kind_name(enum llb_structured_outputs_kind k) {
  switch (k) {
    case LLB_SO_JSON: return "json";
    case LLB_SO_JSON_OBJECT: return "json_object";
    case LLB_SO_CHOICE: return "choice";
    case LLB_SO_REGEX: return "regex";
    case LLB_SO_GRAMMAR: return "grammar";
    default: return "none";
  }
}

/* Records kind + spec (spec_text owned, may be NULL for json_object) as the request's one
 * constraint; a second constraint is refused naming `param`. Takes ownership of spec_text. */
static llb_status set_spec(struct api_server_request *r, const char *param, enum llb_structured_outputs_kind kind,
                           char *spec_text, struct api_server_error *err) {
  if (r->structured_outputs.kind != LLB_SO_NONE) {
    free(spec_text);
    char msg[300];
    snprintf(msg, sizeof msg,
             "'%s' conflicts with '%s': a request takes at most one structured output constraint "
             "(json, json_object, choice, regex or grammar)", param, r->structured_param);
    api_server_error_set(err, 400, param, "%s", msg);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  size_t len = spec_text ? strlen(spec_text) : 0;
  if (len > LLB_SO_MAX_SPEC_BYTES) {
    free(spec_text);
    api_server_error_set(err, 400, param, "'%s' is %zu bytes, at most %d allowed", param, len, LLB_SO_MAX_SPEC_BYTES);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  r->structured_spec = spec_text;
  r->structured_outputs = (struct llb_structured_outputs){.kind = kind, .spec = {spec_text ? spec_text : "", len}};
  snprintf(r->structured_param, sizeof r->structured_param, "%.*s", (int)sizeof r->structured_param - 1, param);
  return LLB_STATUS_OK;
}

static llb_status oom(struct api_server_error *err) {
  api_server_error_set(err, 500, NULL, "out of memory");
  return LLB_STATUS_OUT_OF_MEMORY;
}

/* A JSON Schema given as an object (or, as vLLM allows, a string holding one). */
static llb_status set_schema(struct api_server_request *r, const char *param, json_t *v, struct api_server_error *err) {
  if (json_is_string(v)) {
    char *text = strdup(json_string_value(v));
    return text ? set_spec(r, param, LLB_SO_JSON, text, err) : oom(err);
  }
  if (!json_is_object(v))
    return bad(err, param, "'%s' must be a JSON Schema object, got %s", param, api_server_json_type_name(v));
  char *text = json_dumps(v, JSON_COMPACT);
  return text ? set_spec(r, param, LLB_SO_JSON, text, err) : oom(err);
}

static llb_status set_choice(struct api_server_request *r, const char *param, json_t *v, struct api_server_error *err) {
  if (!json_is_array(v) || json_array_size(v) == 0)
    return bad(err, param, "'%s' must be a non-empty array of strings, got %s", param,
               json_is_array(v) ? "an empty array" : api_server_json_type_name(v));
  size_t i;
  json_t *s;
  json_array_foreach(v, i, s) {
    if (!json_is_string(s))
      return bad(err, param, "'%s' must hold strings only, got %s", param, api_server_json_type_name(s));
  }
  char *text = json_dumps(v, JSON_COMPACT);
  return text ? set_spec(r, param, LLB_SO_CHOICE, text, err) : oom(err);
}

static llb_status set_text(struct api_server_request *r, const char *param, enum llb_structured_outputs_kind kind,
                           json_t *v, struct api_server_error *err) {
  if (!json_is_string(v) || json_string_length(v) == 0)
    return bad(err, param, "'%s' must be a non-empty string, got %s", param,
               json_is_string(v) ? "an empty string" : api_server_json_type_name(v));
  char *text = strdup(json_string_value(v));
  return text ? set_spec(r, param, kind, text, err) : oom(err);
}

/* OpenAI response_format. */
static llb_status parse_response_format(json_t *v, struct api_server_request *r, struct api_server_error *err) {
  const char *p = "response_format";
  json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
  if (!json_is_string(t))
    return bad(err, p, "'%s' must be an object with a string 'type' (text, json_object, json_schema)%s", p, NULL);
  const char *type = json_string_value(t);
  const char *key;
  json_t *x;
  json_object_foreach(v, key, x) {
    if (strcmp(key, "type") && !(strcmp(type, "json_schema") == 0 && strcmp(key, "json_schema") == 0)) {
      char f[96];
      snprintf(f, sizeof f, "%s.%.60s", p, key);
      return bad(err, f, "Unrecognized request argument supplied: %s%s", f, NULL);
    }
  }
  if (strcmp(type, "text") == 0) return LLB_STATUS_OK;
  if (strcmp(type, "json_object") == 0) return set_spec(r, p, LLB_SO_JSON_OBJECT, NULL, err);
  if (strcmp(type, "json_schema") != 0)
    return bad(err, "response_format.type", "'response_format.type' must be text, json_object or json_schema, got \"%.40s\"%s",
               type, NULL);
  json_t *js = json_object_get(v, "json_schema");
  if (!json_is_object(js))
    return bad(err, "response_format.json_schema", "'response_format.json_schema' is required with type json_schema "
               "and must be an object, got %s%s", api_server_json_type_name(js), NULL);
  json_object_foreach(js, key, x) {
    if (strcmp(key, "name") && strcmp(key, "description") && strcmp(key, "schema") && strcmp(key, "strict")) {
      char f[96];
      snprintf(f, sizeof f, "response_format.json_schema.%.40s", key);
      return bad(err, f, "Unrecognized request argument supplied: %s%s", f, NULL);
    }
  }
  json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
  if (name && !json_is_string(name))
    return bad(err, "response_format.json_schema.name", "'response_format.json_schema.name' must be a string, got %s%s",
               api_server_json_type_name(name), NULL);
  if (strict && !json_is_boolean(strict) && !json_is_null(strict))
    return bad(err, "response_format.json_schema.strict",
               "'response_format.json_schema.strict' must be a boolean, got %s%s", api_server_json_type_name(strict), NULL);
  json_t *schema = json_object_get(js, "schema");
  if (!schema) return bad(err, "response_format.json_schema.schema", "'%s' is required%s",
                          "response_format.json_schema.schema", NULL);
  llb_status st = set_schema(r, "response_format.json_schema.schema", schema, err);
  if (st == LLB_STATUS_OK) snprintf(r->structured_param, sizeof r->structured_param, "%s", p);
  return st;
}

/* vLLM structured_outputs: exactly one constraint key. */
static llb_status parse_structured_outputs(json_t *v, struct api_server_request *r, struct api_server_error *err) {
  const char *p = "structured_outputs";
  if (!json_is_object(v)) return bad(err, p, "'%s' must be an object, got %s", p, api_server_json_type_name(v));
  const char *key;
  json_t *x;
  json_object_foreach(v, key, x) {
    char f[96];
    snprintf(f, sizeof f, "%s.%.60s", p, key);
    if (json_is_null(x)) continue;
    llb_status st;
    if (!strcmp(key, "json")) st = set_schema(r, f, x, err);
    else if (!strcmp(key, "choice")) st = set_choice(r, f, x, err);
    else if (!strcmp(key, "regex")) st = set_text(r, f, LLB_SO_REGEX, x, err);
    else if (!strcmp(key, "grammar")) st = set_text(r, f, LLB_SO_GRAMMAR, x, err);
    else if (!strcmp(key, "json_object")) {
      if (!json_is_boolean(x)) return bad(err, f, "'%s' must be a boolean, got %s", f, api_server_json_type_name(x));
      st = json_is_true(x) ? set_spec(r, f, LLB_SO_JSON_OBJECT, NULL, err) : LLB_STATUS_OK;
    } else if (!strcmp(key, "disable_any_whitespace") || !strcmp(key, "disable_fallback") ||
               !strcmp(key, "disable_additional_properties") || !strcmp(key, "whitespace_pattern") ||
               !strcmp(key, "structural_tag")) {
      return bad(err, f, "'%s' is not supported (output is compact JSON with no whitespace between tokens)%s", f, NULL);
    } else {
      return bad(err, f, "Unrecognized request argument supplied: %s%s", f, NULL);
    }
    if (st != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

llb_status api_server_structured_parse_field(const char *key, json_t *v, struct api_server_request *r, bool *handled,
                                      struct api_server_error *err) {
  *handled = true;
  if (!strcmp(key, "response_format")) return parse_response_format(v, r, err);
  if (!strcmp(key, "structured_outputs")) return parse_structured_outputs(v, r, err);
  if (!strcmp(key, "guided_json")) return set_schema(r, key, v, err);
  if (!strcmp(key, "guided_choice")) return set_choice(r, key, v, err);
  if (!strcmp(key, "guided_regex")) return set_text(r, key, LLB_SO_REGEX, v, err);
  if (!strcmp(key, "guided_grammar")) return set_text(r, key, LLB_SO_GRAMMAR, v, err);
  *handled = false;
  return LLB_STATUS_OK;
}

void api_server_structured_map_error(const struct api_server_request *r, struct api_server_error *e) {
  if (r->structured_outputs.kind == LLB_SO_NONE || strncmp(e->param, "structured_outputs", 18) != 0) return;
  char msg[sizeof e->message + 128];
  snprintf(msg, sizeof msg, "'%s' (%s): %s", r->structured_param, kind_name(r->structured_outputs.kind), e->message);
  snprintf(e->message, sizeof e->message, "%.*s", (int)sizeof e->message - 1, msg);
  snprintf(e->param, sizeof e->param, "%s", r->structured_param);
}
