/* CORS for browser clients, as vLLM's server does it (its --allowed-origins, --allowed-methods,
 * --allowed-headers, --allow-credentials feed Starlette's CORSMiddleware; defaults: every
 * origin, method and header, no credentials). Pure logic: which headers a response gets.
 *
 * - A request with an `Origin` header from an allowed origin gets Access-Control-Allow-Origin
 *   ("*" when every origin is allowed, else the origin itself with `Vary: Origin`) and, with
 *   credentials, Access-Control-Allow-Credentials: true. Credentials are refused at start
 *   unless the origins are named (never every origin with credentials: Starlette echoes any
 *   origin then, which lets every web page make credentialed requests). A request
 *   from another origin is served without CORS headers (the browser then hides the answer).
 * - A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here,
 *   before authentication (browsers send no Authorization on a preflight): 200 with the
 *   allowed methods, headers (the requested ones when all are allowed) and Max-Age 600, or 400
 *   "Disallowed CORS origin, method, headers" naming what failed. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_CORS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define API_SERVER_CORS_MAX_ITEMS 32
#define API_SERVER_CORS_MAX_ITEM_BYTES 256

struct api_server_cors {
  bool any_origin, any_method, any_header, credentials;
  int num_origins, num_methods, num_headers;
  char origins[API_SERVER_CORS_MAX_ITEMS][API_SERVER_CORS_MAX_ITEM_BYTES];
  char methods[API_SERVER_CORS_MAX_ITEMS][16];
  char headers[API_SERVER_CORS_MAX_ITEMS][API_SERVER_CORS_MAX_ITEM_BYTES];
};

/* Parses the comma-separated lists (NULL or "*" = all; entries trimmed; origins compared
 * exactly, methods and headers case-insensitively) into *out. INVALID_ARGUMENT naming the
 * option for too many or too long entries, an empty entry, a method that is not a token, or
 * credentials with every origin allowed. */
llb_status api_server_cors_parse(const char *origins, const char *methods, const char *headers, bool credentials,
                          struct api_server_cors *out);

/* One response header to set. */
struct api_server_cors_header {
  const char *name;
  char value[1024];
};

enum api_server_cors_verdict {
  API_SERVER_CORS_PASS = 0,       /* not a preflight: serve the request, with `out` headers (maybe none) */
  API_SERVER_CORS_PREFLIGHT = 1,  /* answer 200 with `out` headers and no body */
  API_SERVER_CORS_DENIED = 2,     /* a preflight refused: 400 with `why` (plain text) */
};

/* What a request gets: `method_options` for an OPTIONS request; origin, request_method and
 * request_headers the values of Origin, Access-Control-Request-Method and
 * Access-Control-Request-Headers (NULL = absent). Fills out[0..*n_out) (at most 6). */
enum api_server_cors_verdict api_server_cors_check(const struct api_server_cors *c, bool method_options, const char *origin,
                                     const char *request_method, const char *request_headers,
                                     struct api_server_cors_header *out, int *n_out, char *why, size_t why_cap);

#endif
