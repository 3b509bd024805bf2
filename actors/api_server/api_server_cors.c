/* CORS headers and preflights (see api_server_cors.h; Starlette's CORSMiddleware semantics). */
#include "actors/api_server/api_server_cors.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Splits `list` on commas into items[cap][item_cap] (trimmed). Returns the count, -1 on an
 * empty or too long entry or too many; *any = true when the list is NULL or "*". */
static int split(const char *list, char *items, size_t item_cap, int cap, bool *any) {
  *any = !list || strcmp(list, "*") == 0;
  if (*any) return 0;
  int n = 0;
  for (const char *p = list;;) {
    while (*p == ' ' || *p == '\t') p++;
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    if (len == 0 || len >= item_cap || n >= cap) return -1;
    if (len == 1 && *p == '*') *any = true;
    memcpy(items + (size_t)n * item_cap, p, len);
    items[(size_t)n * item_cap + len] = '\0';
    n++;
    if (!e) return n;
    p = e + 1;
  }
}

llb_status api_server_cors_parse(const char *origins, const char *methods, const char *headers, bool credentials,
                          struct api_server_cors *out) {
  memset(out, 0, sizeof *out);
  out->credentials = credentials;
  out->num_origins = split(origins, &out->origins[0][0], API_SERVER_CORS_MAX_ITEM_BYTES, API_SERVER_CORS_MAX_ITEMS, &out->any_origin);
  if (out->num_origins < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allowed-origins: comma-separated origins (at most %d, each < %d bytes)",
                    API_SERVER_CORS_MAX_ITEMS, API_SERVER_CORS_MAX_ITEM_BYTES);
  /* Starlette would echo any Origin back with credentials allowed: every web page could then
   * send a user's cookies or HTTP auth here and read the answer. Credentials need origins named. */
  if (credentials && out->any_origin)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allow-credentials needs --allowed-origins naming each origin: "
                    "with every origin allowed (*, the default), any web page could make credentialed requests");
  out->num_methods = split(methods, &out->methods[0][0], sizeof out->methods[0], API_SERVER_CORS_MAX_ITEMS, &out->any_method);
  if (out->num_methods < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allowed-methods: comma-separated methods");
  for (int i = 0; i < out->num_methods; i++)
    for (const char *c = out->methods[i]; *c; c++)
      if (!isalpha((unsigned char)*c) && *c != '*')
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allowed-methods: '%s' is not a method", out->methods[i]);
  out->num_headers = split(headers, &out->headers[0][0], API_SERVER_CORS_MAX_ITEM_BYTES, API_SERVER_CORS_MAX_ITEMS, &out->any_header);
  if (out->num_headers < 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allowed-headers: comma-separated headers");
  return LLB_STATUS_OK;
}

static bool origin_ok(const struct api_server_cors *c, const char *origin) {
  if (c->any_origin) return true;
  for (int i = 0; i < c->num_origins; i++)
    if (strcmp(c->origins[i], origin) == 0) return true;
  return false;
}

static bool method_ok(const struct api_server_cors *c, const char *m) {
  if (c->any_method) return true;
  for (int i = 0; i < c->num_methods; i++)
    if (strcasecmp(c->methods[i], m) == 0) return true;
  return false;
}

/* Every comma-separated header of `req` is allowed (Starlette always allows the CORS-safelisted
 * Accept, Accept-Language, Content-Language, Content-Type). */
static bool headers_ok(const struct api_server_cors *c, const char *req) {
  if (c->any_header || !req) return true;
  static const char *const safe[] = {"accept", "accept-language", "content-language", "content-type"};
  for (const char *p = req; *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t len = strcspn(p, ",");
    while (len && p[len - 1] == ' ') len--;
    if (len == 0) break;
    bool found = false;
    for (int i = 0; i < 4 && !found; i++) found = strlen(safe[i]) == len && strncasecmp(safe[i], p, len) == 0;
    for (int i = 0; i < c->num_headers && !found; i++)
      found = strlen(c->headers[i]) == len && strncasecmp(c->headers[i], p, len) == 0;
    if (!found) return false;
    p += strcspn(p, ",");
  }
  return true;
}

/* Access-Control-Allow-Origin (+ Vary, + credentials) into out. */
static void allow_origin(const struct api_server_cors *c, const char *origin, struct api_server_cors_header *out, int *n) {
  const bool star = c->any_origin && !c->credentials;
  out[*n].name = "Access-Control-Allow-Origin";
  snprintf(out[*n].value, sizeof out[*n].value, "%s", star ? "*" : origin);
  (*n)++;
  if (!star) {
    out[*n].name = "Vary";
    snprintf(out[*n].value, sizeof out[*n].value, "Origin");
    (*n)++;
  }
  if (c->credentials) {
    out[*n].name = "Access-Control-Allow-Credentials";
    snprintf(out[*n].value, sizeof out[*n].value, "true");
    (*n)++;
  }
}

static void join(char *dst, size_t cap, const char (*items)[API_SERVER_CORS_MAX_ITEM_BYTES], int n) {
  size_t used = 0;
  dst[0] = '\0';
  for (int i = 0; i < n && used < cap; i++) used += (size_t)snprintf(dst + used, cap - used, "%s%s", i ? ", " : "", items[i]);
}

enum api_server_cors_verdict api_server_cors_check(const struct api_server_cors *c, bool method_options, const char *origin,
                                     const char *request_method, const char *request_headers,
                                     struct api_server_cors_header *out, int *n_out, char *why, size_t why_cap) {
  *n_out = 0;
  if (!origin) return API_SERVER_CORS_PASS;
  if (!(method_options && request_method)) {
    if (origin_ok(c, origin)) allow_origin(c, origin, out, n_out);
    return API_SERVER_CORS_PASS;
  }
  const bool o = origin_ok(c, origin), m = method_ok(c, request_method), h = headers_ok(c, request_headers);
  if (!o || !m || !h) {
    snprintf(why, why_cap, "Disallowed CORS %s%s%s%s%s", o ? "" : "origin", !o && (!m || !h) ? ", " : "",
             m ? "" : "method", !m && !h ? ", " : "", h ? "" : "headers");
    return API_SERVER_CORS_DENIED;
  }
  allow_origin(c, origin, out, n_out);
  out[*n_out].name = "Access-Control-Allow-Methods";
  if (c->any_method) snprintf(out[*n_out].value, sizeof out[*n_out].value, "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  else {
    size_t used = 0;
    out[*n_out].value[0] = '\0';
    for (int i = 0; i < c->num_methods; i++)
      used += (size_t)snprintf(out[*n_out].value + used, sizeof out[*n_out].value - used, "%s%s", i ? ", " : "",
                               c->methods[i]);
  }
  (*n_out)++;
  out[*n_out].name = "Access-Control-Max-Age";
  snprintf(out[*n_out].value, sizeof out[*n_out].value, "600");
  (*n_out)++;
  if (request_headers || c->num_headers) {
    out[*n_out].name = "Access-Control-Allow-Headers";
    if (c->any_header) snprintf(out[*n_out].value, sizeof out[*n_out].value, "%s", request_headers ? request_headers : "*");
    else join(out[*n_out].value, sizeof out[*n_out].value, c->headers, c->num_headers);
    (*n_out)++;
  }
  return API_SERVER_CORS_PREFLIGHT;
}
