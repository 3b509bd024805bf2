/* Per-tenant limits: in flight, queued, token bucket (see tenant_limits.h). */
#include "actors/input_processor/tenant_limits.h"

#include "schemas/codec.h"
#include "schemas/lora_registry.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/strmap.h"
#include "bus/subject.h"

#define MAX_COUNT 1000000
#define MAX_RATE 1e9
#define DEFAULT_BURST_SECONDS 10.0
#define SLOT_RETRY_AFTER_MS 1000 /* a slot frees when some request ends: no better estimate */
#define MAX_ID_BYTES 256

/* One admitted child, the value under its request id in tenant_limits.tracked. */
struct tracked {
  int16_t tenant;    /* index into cfg.tenants */
  bool queued;       /* no token out yet */
  int64_t admitted_ms;
  char id[];         /* its request id (the key) */
};

struct tenant_state {
  int32_t in_flight, queued;
  double bucket;        /* tokens available */
  int64_t refilled_ms;  /* when bucket was last topped up; -1 = never (full) */
};

struct tenant_limits {
  pthread_mutex_t mu;
  struct tenant_limits_config cfg;
  struct tenant_state state[TENANT_LIMITS_MAX_TENANTS];
  int64_t ttl_ms;
  struct llb_strmap *tracked; /* request id -> struct tracked (owned) */
  struct tracked **expired;   /* [cap_expired] scratch of expire() */
  int64_t cap_expired;
  int64_t next_expiry_ms;
};

/* ---- limits file ---- */

static bool parse_number(const char *v, double max, double *out) {
  errno = 0;
  char *end = NULL;
  double d = strtod(v, &end);
  if (errno || !end || end == v || *end || !isfinite(d) || d < 0 || d > max) return false;
  *out = d;
  return true;
}

/* `loras=a,b`: each a model name (bus_name_check's rule), into t->loras. */
static bool loras_valid(const char *val, struct tenant_limit *t, char *why, size_t why_cap) {
  if (strlen(val) >= sizeof t->loras)
    return snprintf(why, why_cap, "loras=: longer than %zu bytes", sizeof t->loras - 1), false;
  char list[sizeof t->loras];
  snprintf(list, sizeof list, "%s", val);
  char *save = NULL;
  int n = 0;
  for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save), n++)
    if (!llb_lora_name_valid(name, strlen(name)))
      return snprintf(why, why_cap, "loras=: '%.80s' is not a model name", name), false;
  if (n == 0) return snprintf(why, why_cap, "loras=: no adapter named"), false;
  snprintf(t->loras, sizeof t->loras, "%s", val);
  return true;
}

llb_status tenant_limits_restrict_loras(const struct tenant_limits_config *cfg, struct lora_registry *r) {
  llb_status st = LLB_STATUS_OK;
  for (int i = 0; i < cfg->num && !st; i++) {
    char list[sizeof cfg->tenants[i].loras];
    snprintf(list, sizeof list, "%s", cfg->tenants[i].loras);
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name && !st; name = strtok_r(NULL, ",", &save))
      st = lora_registry_restrict(r, name, cfg->tenants[i].name);
  }
  return st;
}

int tenant_limits_parse_line(const char *line, struct tenant_limit *t, char *why, size_t why_cap) {
  char buf[512];
  if (strlen(line) >= sizeof buf) return snprintf(why, why_cap, "line longer than %zu bytes", sizeof buf - 1), -1;
  snprintf(buf, sizeof buf, "%s", line);
  memset(t, 0, sizeof *t);
  char *save = NULL;
  char *name = strtok_r(buf, " \t\r\n", &save);
  if (!name) return 0;
  if (!bus_token_valid(name) || strlen(name) >= TENANT_NAME_MAX)
    return snprintf(why, why_cap, "'%.80s' is not a tenant name (letters, digits, '-', '_')", name), -1;
  snprintf(t->name, sizeof t->name, "%s", name);
  for (char *kv; (kv = strtok_r(NULL, " \t\r\n", &save));) {
    char *eq = strchr(kv, '=');
    double v = 0;
    if (!eq) return snprintf(why, why_cap, "'%.80s' is not key=value", kv), -1;
    *eq = '\0';
    const char *key = kv, *val = eq + 1;
    if (strcmp(key, "loras") == 0) {
      if (!loras_valid(val, t, why, why_cap)) return -1;
      continue;
    }
    bool count = strcmp(key, "max_concurrent") == 0 || strcmp(key, "max_queued") == 0;
    bool rate = strcmp(key, "tokens_per_s") == 0 || strcmp(key, "burst_tokens") == 0 ||
                strcmp(key, "requests_per_s") == 0 || strcmp(key, "burst_requests") == 0;
    if (!count && !rate)
      return snprintf(why, why_cap, "unknown limit '%.40s' (max_concurrent, max_queued, tokens_per_s, "
                      "burst_tokens, requests_per_s, burst_requests, loras)", key), -1;
    if (!parse_number(val, count ? MAX_COUNT : MAX_RATE, &v) || (count && v != floor(v)))
      return snprintf(why, why_cap, "%s=%.40s: expected %s", key, val,
                      count ? "an integer 0..1000000" : "a number 0..1e9"), -1;
    if (strcmp(key, "max_concurrent") == 0) t->max_concurrent = (int32_t)v;
    else if (strcmp(key, "max_queued") == 0) t->max_queued = (int32_t)v;
    else if (strcmp(key, "tokens_per_s") == 0) t->tokens_per_s = v;
    else if (strcmp(key, "burst_tokens") == 0) t->burst_tokens = v;
    else if (strcmp(key, "requests_per_s") == 0) t->requests_per_s = v;
    else t->burst_requests = v;
  }
  if (t->tokens_per_s > 0 && t->burst_tokens == 0) t->burst_tokens = DEFAULT_BURST_SECONDS * t->tokens_per_s;
  if (t->requests_per_s > 0 && t->burst_requests == 0) t->burst_requests = fmax(1.0, t->requests_per_s);
  if (t->requests_per_s > 0 && t->burst_requests < 1)
    return snprintf(why, why_cap, "burst_requests=%g: at least 1 (one request must fit)", t->burst_requests), -1;
  return 1;
}

llb_status tenant_limits_config_load(const char *path, struct tenant_limits_config *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f) return LLB_ERRF(LLB_STATUS_IO, "tenants file %s: %s", path, strerror(errno));
  char line[600], why[200];
  int lineno = 0;
  llb_status st = LLB_STATUS_OK;
  while (st == LLB_STATUS_OK && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "#")] = '\0';
    struct tenant_limit t;
    int r = tenant_limits_parse_line(line, &t, why, sizeof why);
    if (r < 0) st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenants file %s:%d: %s", path, lineno, why);
    if (r <= 0) continue;
    for (int i = 0; i < out->num && st == LLB_STATUS_OK; i++)
      if (strcmp(out->tenants[i].name, t.name) == 0)
        st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenants file %s:%d: tenant '%s' twice", path, lineno, t.name);
    if (st == LLB_STATUS_OK && out->num >= TENANT_LIMITS_MAX_TENANTS)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenants file %s: more than %d tenants", path,
                    TENANT_LIMITS_MAX_TENANTS);
    if (st == LLB_STATUS_OK) out->tenants[out->num++] = t;
  }
  fclose(f);
  if (st == LLB_STATUS_OK && out->num == 0)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenants file %s names no tenant", path);
  return st;
}

/* ---- the table of admitted children ---- */

static struct tracked *find(struct tenant_limits *tl, const char *id) { return llb_strmap_get(tl->tracked, id); }

static void forget(struct tenant_limits *tl, struct tracked *t) {
  struct tenant_state *s = &tl->state[t->tenant];
  s->in_flight--;
  if (t->queued) s->queued--;
  llb_strmap_remove(tl->tracked, t->id);
  free(t);
}

struct expiry {
  struct tenant_limits *tl;
  int64_t now_ms, num;
};

static void collect_expired(void *ctx, const char *key, void *value) {
  (void)key;
  struct expiry *e = ctx;
  struct tracked *t = value;
  if (e->now_ms - t->admitted_ms <= e->tl->ttl_ms) return;
  if (llb_array_reserve((void **)&e->tl->expired, &e->tl->cap_expired, e->num + 1, sizeof(*e->tl->expired)))
    return; /* out of memory: the rest expire at a later call */
  e->tl->expired[e->num++] = t;
}

/* Forgets children admitted more than ttl_ms ago (their outputs never came). */
static void expire(struct tenant_limits *tl, int64_t now_ms) {
  if (now_ms < tl->next_expiry_ms) return;
  tl->next_expiry_ms = now_ms + tl->ttl_ms / 4 + 1;
  struct expiry e = {.tl = tl, .now_ms = now_ms};
  llb_strmap_foreach(tl->tracked, collect_expired, &e);
  for (int64_t i = 0; i < e.num; i++) forget(tl, tl->expired[i]);
}

static void free_tracked(void *ctx, const char *key, void *value) {
  (void)ctx, (void)key;
  free(value);
}

/* ---- public ---- */

llb_status tenant_limits_create(const struct tenant_limits_config *cfg, int64_t ttl_ms, struct tenant_limits **out) {
  *out = NULL;
  if (!cfg || cfg->num < 0 || cfg->num > TENANT_LIMITS_MAX_TENANTS || ttl_ms <= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenant_limits_create: bad config or ttl");
  struct tenant_limits *tl = calloc(1, sizeof *tl);
  if (!tl) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tenant limits");
  llb_status st = llb_strmap_create(0, &tl->tracked);
  if (st) {
    free(tl);
    return st;
  }
  pthread_mutex_init(&tl->mu, NULL);
  tl->cfg = *cfg;
  tl->ttl_ms = ttl_ms;
  for (int i = 0; i < cfg->num; i++) {
    tl->state[i].bucket = cfg->tenants[i].burst_tokens;
    tl->state[i].refilled_ms = -1;
  }
  *out = tl;
  return LLB_STATUS_OK;
}

void tenant_limits_destroy(struct tenant_limits *tl) {
  if (!tl) return;
  llb_strmap_foreach(tl->tracked, free_tracked, NULL);
  llb_strmap_destroy(tl->tracked);
  free(tl->expired);
  pthread_mutex_destroy(&tl->mu);
  free(tl);
}

static int tenant_index(const struct tenant_limits *tl, const char *tenant) {
  for (int i = 0; tenant && i < tl->cfg.num; i++)
    if (strcmp(tl->cfg.tenants[i].name, tenant) == 0) return i;
  return -1;
}

bool tenant_limits_applies(const struct tenant_limits *tl, const char *tenant) {
  int i = tl ? tenant_index(tl, tenant) : -1;
  if (i < 0) return false;
  const struct tenant_limit *l = &tl->cfg.tenants[i];
  return l->max_concurrent > 0 || l->max_queued > 0 || l->tokens_per_s > 0;
}

static void refill(const struct tenant_limit *l, struct tenant_state *s, int64_t now_ms) {
  if (s->refilled_ms >= 0 && now_ms > s->refilled_ms)
    s->bucket = fmin(l->burst_tokens, s->bucket + l->tokens_per_s * (double)(now_ms - s->refilled_ms) / 1000.0);
  if (s->refilled_ms < 0 || now_ms > s->refilled_ms) s->refilled_ms = now_ms;
}

/* The limit `n` more children (cost tokens; < 0: not known yet) would break, or OK; mu held. */
static llb_status check(struct tenant_limits *tl, int ti, int32_t n, double cost, int64_t now_ms,
                        int64_t *retry_after_ms) {
  const struct tenant_limit *l = &tl->cfg.tenants[ti];
  struct tenant_state *s = &tl->state[ti];
  *retry_after_ms = SLOT_RETRY_AFTER_MS;
  if (l->max_concurrent > 0 && s->in_flight + n > l->max_concurrent)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "tenant %s has %d requests in flight; its limit is %d (max_concurrent)",
                    l->name, s->in_flight, l->max_concurrent);
  if (l->max_queued > 0 && s->queued + n > l->max_queued)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "tenant %s has %d requests queued; its limit is %d (max_queued)",
                    l->name, s->queued, l->max_queued);
  if (l->tokens_per_s <= 0 || cost < 0) return LLB_STATUS_OK;
  if (cost > l->burst_tokens)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "the request counts %.0f tokens (prompt + max_tokens per choice); "
                    "tenant %s may use at most %.0f at once (burst_tokens)", cost, l->name, l->burst_tokens);
  refill(l, s, now_ms);
  if (s->bucket < cost) {
    *retry_after_ms = (int64_t)ceil((cost - s->bucket) * 1000.0 / l->tokens_per_s);
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "tenant %s is over its rate of %.0f tokens/s (tokens_per_s): the "
                    "request counts %.0f tokens, %.0f are available", l->name, l->tokens_per_s, cost, s->bucket);
  }
  return LLB_STATUS_OK;
}

llb_status tenant_limits_admit(struct tenant_limits *tl, const char *tenant, const char *const *request_ids,
                               int32_t n, double cost_tokens, double precharged_tokens, int64_t now_ms,
                               int64_t *retry_after_ms) {
  *retry_after_ms = 0;
  if (!tl || !tenant_limits_applies(tl, tenant)) return LLB_STATUS_OK;
  if (n < 1 || !request_ids || !isfinite(cost_tokens) || cost_tokens < 0 || !isfinite(precharged_tokens) ||
      precharged_tokens < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenant_limits_admit: bad arguments");
  for (int32_t i = 0; i < n; i++)
    if (!request_ids[i] || strlen(request_ids[i]) > MAX_ID_BYTES)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenant_limits_admit: bad request id");
  int ti = tenant_index(tl, tenant);
  const struct tenant_limit *l = &tl->cfg.tenants[ti];
  if (l->tokens_per_s > 0 && cost_tokens > l->burst_tokens)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "the request counts %.0f tokens (prompt + max_tokens per choice); "
                    "tenant %s may use at most %.0f at once (burst_tokens)", cost_tokens, l->name, l->burst_tokens);
  const double due = cost_tokens - precharged_tokens; /* < 0: the estimate was too high */
  pthread_mutex_lock(&tl->mu);
  expire(tl, now_ms);
  llb_status st = check(tl, ti, n, due > 0 ? due : -1, now_ms, retry_after_ms);
  for (int32_t i = 0; st == LLB_STATUS_OK && i < n; i++) {
    if (find(tl, request_ids[i])) continue; /* ids are unique per input processor; never twice */
    const size_t len = strlen(request_ids[i]);
    struct tracked *t = malloc(sizeof *t + len + 1);
    if (!t) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tenant limits id");
      break;
    }
    *t = (struct tracked){.tenant = (int16_t)ti, .queued = true, .admitted_ms = now_ms};
    memcpy(t->id, request_ids[i], len + 1);
    if ((st = llb_strmap_put(tl->tracked, t->id, t))) {
      free(t);
      break;
    }
    tl->state[ti].in_flight++;
    tl->state[ti].queued++;
  }
  if (st == LLB_STATUS_OK) {
    if (l->tokens_per_s > 0) tl->state[ti].bucket = fmin(l->burst_tokens, tl->state[ti].bucket - due);
    *retry_after_ms = 0;
  }
  pthread_mutex_unlock(&tl->mu);
  return st;
}

llb_status tenant_limits_precharge(struct tenant_limits *tl, const char *tenant, int32_t n, double estimate_tokens,
                                   int64_t now_ms, int64_t *retry_after_ms) {
  *retry_after_ms = 0;
  if (!tl || !tenant_limits_applies(tl, tenant)) return LLB_STATUS_OK;
  if (!isfinite(estimate_tokens) || estimate_tokens < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenant_limits_precharge: bad estimate");
  int ti = tenant_index(tl, tenant);
  pthread_mutex_lock(&tl->mu);
  expire(tl, now_ms);
  llb_status st = check(tl, ti, n > 0 ? n : 0, estimate_tokens, now_ms, retry_after_ms);
  if (st == LLB_STATUS_OK) {
    *retry_after_ms = 0;
    if (tl->cfg.tenants[ti].tokens_per_s > 0) tl->state[ti].bucket -= estimate_tokens;
  }
  pthread_mutex_unlock(&tl->mu);
  return st;
}

void tenant_limits_settle(struct tenant_limits *tl, const char *tenant, double delta_tokens, int64_t now_ms) {
  if (!tl || !isfinite(delta_tokens)) return;
  int ti = tenant_index(tl, tenant);
  if (ti < 0 || tl->cfg.tenants[ti].tokens_per_s <= 0) return;
  pthread_mutex_lock(&tl->mu);
  refill(&tl->cfg.tenants[ti], &tl->state[ti], now_ms);
  tl->state[ti].bucket = fmin(tl->cfg.tenants[ti].burst_tokens, tl->state[ti].bucket - delta_tokens);
  pthread_mutex_unlock(&tl->mu);
}

void tenant_limits_release(struct tenant_limits *tl, const char *const *request_ids, int32_t n) {
  if (!tl) return;
  pthread_mutex_lock(&tl->mu);
  for (int32_t i = 0; i < n; i++) {
    struct tracked *t = request_ids[i] ? find(tl, request_ids[i]) : NULL;
    if (t) forget(tl, t);
  }
  pthread_mutex_unlock(&tl->mu);
}

void tenant_limits_on_output(struct tenant_limits *tl, const char *request_id, bool has_tokens, bool finished,
                             int64_t now_ms) {
  if (!tl || !request_id) return;
  pthread_mutex_lock(&tl->mu);
  expire(tl, now_ms);
  struct tracked *t = find(tl, request_id);
  if (t && finished) {
    forget(tl, t);
  } else if (t && has_tokens && t->queued) {
    t->queued = false;
    tl->state[t->tenant].queued--;
  }
  pthread_mutex_unlock(&tl->mu);
}

void tenant_limits_counts(const struct tenant_limits *tl, const char *tenant, int32_t *in_flight, int32_t *queued) {
  *in_flight = *queued = 0;
  int ti = tl ? tenant_index(tl, tenant) : -1;
  if (ti < 0) return;
  pthread_mutex_lock((pthread_mutex_t *)&tl->mu);
  *in_flight = tl->state[ti].in_flight;
  *queued = tl->state[ti].queued;
  pthread_mutex_unlock((pthread_mutex_t *)&tl->mu);
}
