/* The request parsers' JSON helpers; see api_server_json.h. */
#include "actors/api_server/api_server_json.h"

#include <jansson.h>

const char *api_server_json_type_name(const json_t *v) {
  if (!v) return "nothing"; /* an absent field: json_object_get gave NULL */
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
  }
}

json_t *api_server_json_load_object(const char *body, size_t len, struct api_server_error *err) {
  json_error_t jerr;
  json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    api_server_error_bad(err, NULL, "We could not parse the JSON body of your request: %s at line %d column %d", jerr.text,
                  jerr.line, jerr.column);
    return NULL;
  }
  if (!json_is_object(root)) {
    api_server_error_bad(err, NULL, "The request body must be a JSON object, got %s", api_server_json_type_name(root));
    json_decref(root);
    return NULL;
  }
  return root;
}
