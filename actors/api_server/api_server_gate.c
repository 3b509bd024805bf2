/* The api server's header gate: API keys, tenants' request rates and generations in flight,
 * refusals held (api_server_gate.h). */
#include "actors/api_server/api_server_gate.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_buf.h"
#include "actors/api_server/api_server_error.h"
#include "actors/api_server/api_server_keys.h"
#include "base/log.h"

/* One tenant with front-door limits: its bucket, its generations in flight, its held refusals. */
struct gate_tenant {
  struct api_server_request_rate r;
  double tokens;
  int64_t refilled_ns;
  int32_t in_flight, held;
};

struct api_server_gate {
  const struct api_server_keys *keys;
  char *refused_response; /* the 401 */
  struct gate_tenant t[API_SERVER_MAX_REQUEST_RATES];
  int32_t num;
  _Atomic int64_t hold_ms;   /* the longest hold */
  char limit_response[1024]; /* the last 429 */
};

/* A verdict's ticket: the tenant's index and what it holds (a held refusal or a generation). */
static int32_t ticket_of(int32_t i, bool held) { return i * 2 + (held ? 1 : 0); }

/* The whole HTTP answer of e (Connection: close), with `extra` header lines; malloc'd or NULL. */
static char *whole_answer(const struct api_server_error *e, const char *status_line, const char *extra) {
  struct api_server_buf body = {0};
  if (!api_server_error_render(e, &body)) return NULL;
  size_t cap = body.len + strlen(status_line) + strlen(extra) + 128;
  char *out = malloc(cap);
  if (out)
    snprintf(out, cap, "%s\r\nContent-Type: application/json\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n%.*s",
             status_line, extra, body.len, (int)body.len, body.data);
  api_server_buf_free(&body);
  return out;
}

/* The index of tenant's entry, or g->num when it has none. */
static int32_t index_of(const struct api_server_gate *g, const char *tenant) {
  int32_t i = 0;
  while (i < g->num && strcmp(g->t[i].r.tenant, tenant) != 0) i++;
  return i;
}

/* Generation routes: what the engine's max_concurrent counts. */
static bool is_generation(const struct http_gate_request *r) {
  static const char *const routes[] = {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings"};
  if (!r->is_post || !r->path) return false;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (strcmp(r->path, routes[i]) == 0) return true;
  return false;
}

/* false when t has no rate or one request is left in its bucket (taken); else *retry_s. */
static bool over_rate(struct gate_tenant *t, int64_t *retry_s) {
  if (t->r.per_s <= 0) return false;
  const int64_t now = llb_now_ns();
  t->tokens = fmin(t->r.burst, t->tokens + t->r.per_s * (double)(now - t->refilled_ns) / 1e9);
  t->refilled_ns = now;
  if (t->tokens >= 1.0) {
    t->tokens -= 1.0;
    return false;
  }
  const double wait_s = ceil((1.0 - t->tokens) / t->r.per_s); /* a tiny per_s: huge, clamped */
  *retry_s = wait_s < 1 ? 1 : wait_s > 3600 ? 3600 : (int64_t)wait_s;
  return true;
}

/* Refuses into v with e's 429 and Retry-After retry_s, held while the tenant has room. */
static void refuse(struct api_server_gate *g, int32_t i, struct api_server_error *e, int64_t retry_s, struct http_gate_verdict *v) {
  snprintf(e->code, sizeof e->code, "rate_limit_exceeded");
  char extra[64];
  snprintf(extra, sizeof extra, "Retry-After: %lld\r\n", (long long)retry_s);
  char *answer = whole_answer(e, "HTTP/1.1 429 Too Many Requests", extra);
  if (!answer) {
    v->refusal = g->refused_response; /* out of memory: refused all the same */
    return;
  }
  snprintf(g->limit_response, sizeof g->limit_response, "%s", answer);
  free(answer);
  v->refusal = g->limit_response;
  struct gate_tenant *t = &g->t[i];
  const int64_t most = atomic_load(&g->hold_ms);
  if (t->held >= API_SERVER_GATE_MAX_HELD || most <= 0) return; /* answered at once */
  t->held++;
  v->hold_ms = retry_s * 1000 < most ? retry_s * 1000 : most;
  v->ticket = ticket_of(i, true);
}

void api_server_gate_check(void *gate, const struct http_gate_request *r, struct http_gate_verdict *v) {
  struct api_server_gate *g = gate;
  *v = (struct http_gate_verdict){.ticket = -1};
  if (r->is_options) return;
  const char *tenant = api_server_keys_tenant_of(g->keys, r->authorization);
  if (!tenant) {
    v->refusal = g->refused_response;
    return;
  }
  const int32_t i = index_of(g, tenant);
  if (i == g->num) return;
  struct gate_tenant *t = &g->t[i];
  struct api_server_error e;
  const bool counted = t->r.max_concurrent > 0 && is_generation(r);
  if (counted && t->in_flight >= t->r.max_concurrent) { /* before the bucket: no token spent on it */
    api_server_error_set(&e, 429, NULL, "tenant %s has %d requests in flight; its limit is %d (max_concurrent); retry later",
                  tenant, t->in_flight, t->r.max_concurrent);
    refuse(g, i, &e, 1, v);
    return;
  }
  int64_t retry_s = 1;
  if (over_rate(t, &retry_s)) {
    api_server_error_set(&e, 429, NULL, "tenant %s is over its rate of %g requests/s (requests_per_s); retry later", tenant,
                  t->r.per_s);
    refuse(g, i, &e, retry_s, v);
    return;
  }
  if (counted) {
    t->in_flight++;
    v->ticket = ticket_of(i, false);
  }
}

int32_t api_server_gate_hold(struct api_server_gate *g, const char *tenant, int64_t retry_after_s, int64_t *hold_ms) {
  if (!g || !tenant) return -1;
  const int32_t i = index_of(g, tenant);
  const int64_t most = atomic_load(&g->hold_ms);
  if (i == g->num || g->t[i].held >= API_SERVER_GATE_MAX_HELD || most <= 0) return -1;
  g->t[i].held++;
  const int64_t want = (retry_after_s > 1 ? retry_after_s : 1) * 1000;
  *hold_ms = want < most ? want : most;
  return ticket_of(i, true);
}

void api_server_gate_release(void *gate, int32_t ticket) {
  struct api_server_gate *g = gate;
  const int32_t i = ticket / 2;
  if (!g || ticket < 0 || i >= g->num) return;
  int32_t *n = ticket % 2 ? &g->t[i].held : &g->t[i].in_flight;
  if (*n > 0) (*n)--;
}

void api_server_gate_set_hold_ms(struct api_server_gate *g, int64_t hold_ms) {
  if (g) atomic_store(&g->hold_ms, hold_ms > 0 ? hold_ms : 0);
}

static llb_status take_rates(struct api_server_gate *g, const struct api_server_request_rate *rates, int32_t n) {
  if (n < 0 || n > API_SERVER_MAX_REQUEST_RATES || (n && !rates))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: %d request rates (0..%d)", n, API_SERVER_MAX_REQUEST_RATES);
  for (int32_t i = 0; i < n; i++) {
    const struct api_server_request_rate *r = &rates[i];
    const bool rate_ok = r->per_s == 0 || (r->per_s > 0 && r->per_s <= 1e9 && r->burst >= 1 && r->burst <= 1e9);
    if (!rate_ok || r->max_concurrent < 0 || r->max_concurrent > 1000000 || !r->tenant[0] ||
        !memchr(r->tenant, '\0', sizeof r->tenant))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: request rate %d: a tenant, a rate of 0 or in (0, 1e9] "
                      "with a burst in [1, 1e9], max_concurrent in [0, 1e6]", i);
    g->t[i] = (struct gate_tenant){.r = *r, .tokens = r->burst, .refilled_ns = llb_now_ns()};
  }
  g->num = n;
  return LLB_STATUS_OK;
}

llb_status api_server_gate_create(const struct api_server_keys *keys, const struct api_server_request_rate *rates, int32_t num_rates,
                           struct api_server_gate **out) {
  *out = NULL;
  if (!keys) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_gate: no API keys");
  struct api_server_gate *g = calloc(1, sizeof *g);
  if (!g) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_gate");
  g->keys = keys;
  atomic_init(&g->hold_ms, API_SERVER_GATE_HOLD_MS);
  llb_status st = take_rates(g, rates, num_rates);
  if (st == LLB_STATUS_OK) {
    struct api_server_error e;
    api_server_error_set(&e, 401, NULL, "missing or incorrect API key: send `Authorization: Bearer YOUR_KEY`");
    snprintf(e.code, sizeof e.code, "invalid_api_key");
    g->refused_response = whole_answer(&e, "HTTP/1.1 401 Unauthorized", "WWW-Authenticate: Bearer\r\n");
    if (!g->refused_response) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "401 answer");
  }
  if (st != LLB_STATUS_OK) {
    api_server_gate_destroy(g);
    return st;
  }
  *out = g;
  return LLB_STATUS_OK;
}

void api_server_gate_destroy(struct api_server_gate *g) {
  if (!g) return;
  free(g->refused_response);
  free(g);
}
