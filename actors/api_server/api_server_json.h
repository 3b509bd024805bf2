/* The api server's JSON helpers for request bodies (jansson): type names as error messages
 * give them, and a body loaded as one object. Pure logic; a leaf the parsers share. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_JSON_H
#define LLB_ACTORS_API_SERVER_API_SERVER_JSON_H

#include <stddef.h>

#include "actors/api_server/api_server_error.h"

/* JSON type of v as an error message names it ("object", "array", "string", "integer",
 * "number", "boolean", "null"); "nothing" for v = NULL (an absent field). Static string. */
struct json_t;
const char *api_server_json_type_name(const struct json_t *v);

/* Parses a request body (len bytes, NULL = empty) that must be one JSON object, duplicate keys
 * refused. Returns the new reference (the caller json_decref's it), or NULL with a 400 in err
 * naming the parse error's line and column or the body's type. */
struct json_t *api_server_json_load_object(const char *body, size_t len, struct api_server_error *err);

#endif
