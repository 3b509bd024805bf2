/* The api server's header gate: API keys and tenants' request rates (api_gate.h). */
#include "actors/api_server/api_gate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_buf.h"
#include "actors/api_server/api_error.h"
#include "actors/api_server/api_keys.h"
#include "base/log.h"

struct api_gate {
  const struct api_keys *keys;
  char *refused_response;                            /* the 401 */
  struct api_request_rate rates[API_MAX_REQUEST_RATES];
  double tokens[API_MAX_REQUEST_RATES];              /* each rate's bucket */
  int64_t refilled_ns[API_MAX_REQUEST_RATES];
  int32_t num_rates;
  char rate_response[1024];                          /* the last 429 */
};

/* The whole HTTP answer of e (Connection: close), with `extra` header lines; malloc'd or NULL. */
static char *whole_answer(const struct api_error *e, const char *status_line, const char *extra) {
  struct api_buf body = {0};
  if (!api_error_render(e, &body)) return NULL;
  size_t cap = body.len + strlen(status_line) + strlen(extra) + 128;
  char *out = malloc(cap);
  if (out)
    snprintf(out, cap, "%s\r\nContent-Type: application/json\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n%.*s",
             status_line, extra, body.len, (int)body.len, body.data);
  api_buf_free(&body);
  return out;
}

/* NULL when the tenant has no rate or one request is left in its bucket (taken), else its 429. */
static const char *over_rate(struct api_gate *g, const char *tenant) {
  int32_t i = 0;
  while (i < g->num_rates && strcmp(g->rates[i].tenant, tenant) != 0) i++;
  if (i == g->num_rates) return NULL;
  const struct api_request_rate *r = &g->rates[i];
  const int64_t now = llb_now_ns();
  g->tokens[i] = fmin(r->burst, g->tokens[i] + r->per_s * (double)(now - g->refilled_ns[i]) / 1e9);
  g->refilled_ns[i] = now;
  if (g->tokens[i] >= 1.0) {
    g->tokens[i] -= 1.0;
    return NULL;
  }
  struct api_error e;
  api_error_set(&e, 429, NULL, "tenant %s is over its rate of %g requests/s (requests_per_s); retry later", tenant,
                r->per_s);
  snprintf(e.code, sizeof e.code, "rate_limit_exceeded");
  const int64_t retry_s = (int64_t)ceil((1.0 - g->tokens[i]) / r->per_s);
  char extra[64];
  snprintf(extra, sizeof extra, "Retry-After: %lld\r\n", (long long)(retry_s > 0 ? retry_s : 1));
  char *answer = whole_answer(&e, "HTTP/1.1 429 Too Many Requests", extra);
  if (!answer) return g->refused_response; /* out of memory: refused all the same */
  snprintf(g->rate_response, sizeof g->rate_response, "%s", answer);
  free(answer);
  return g->rate_response;
}

const char *api_gate_check(void *gate, bool is_options, const char *authorization) {
  struct api_gate *g = gate;
  if (is_options) return NULL;
  const char *tenant = api_keys_tenant_of(g->keys, authorization);
  return tenant ? over_rate(g, tenant) : g->refused_response;
}

static llb_status take_rates(struct api_gate *g, const struct api_request_rate *rates, int32_t n) {
  if (n < 0 || n > API_MAX_REQUEST_RATES || (n && !rates))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: %d request rates (0..%d)", n, API_MAX_REQUEST_RATES);
  for (int32_t i = 0; i < n; i++) {
    const struct api_request_rate *r = &rates[i];
    if (!(r->per_s > 0 && r->per_s <= 1e9 && r->burst >= 1 && r->burst <= 1e9) || !r->tenant[0] ||
        !memchr(r->tenant, '\0', sizeof r->tenant))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: request rate %d: a tenant, a rate in (0, 1e9] and a "
                      "burst in [1, 1e9]", i);
    g->rates[i] = *r;
    g->tokens[i] = r->burst;
    g->refilled_ns[i] = llb_now_ns();
  }
  g->num_rates = n;
  return LLB_STATUS_OK;
}

llb_status api_gate_create(const struct api_keys *keys, const struct api_request_rate *rates, int32_t num_rates,
                           struct api_gate **out) {
  *out = NULL;
  if (!keys) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_gate: no API keys");
  struct api_gate *g = calloc(1, sizeof *g);
  if (!g) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_gate");
  g->keys = keys;
  llb_status st = take_rates(g, rates, num_rates);
  if (st == LLB_STATUS_OK) {
    struct api_error e;
    api_error_set(&e, 401, NULL, "missing or incorrect API key: send `Authorization: Bearer YOUR_KEY`");
    snprintf(e.code, sizeof e.code, "invalid_api_key");
    g->refused_response = whole_answer(&e, "HTTP/1.1 401 Unauthorized", "WWW-Authenticate: Bearer\r\n");
    if (!g->refused_response) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "401 answer");
  }
  if (st != LLB_STATUS_OK) {
    api_gate_destroy(g);
    return st;
  }
  *out = g;
  return LLB_STATUS_OK;
}

void api_gate_destroy(struct api_gate *g) {
  if (!g) return;
  free(g->refused_response);
  free(g);
}
