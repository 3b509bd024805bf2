#include "bus/subject.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const engine_kinds[] = {"requests", "abort",   "kv",    "encoder",
                                           "execute",  "outputs", "stats", "dead_letter",
                                           "resync", "history", "kv_fetch"};
static const char *const tenant_kinds[] = {"generate", "abort", "tokenize"};

static bool is_alnum(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool bus_token_valid(const char *token) {
  if (!token || !*token) return false;
  size_t n = 0;
  for (const char *p = token; *p; p++, n++) {
    unsigned char c = (unsigned char)*p;
    if (!is_alnum(c) && c != '-' && c != '_') return false;
    if (n >= BUS_TOKEN_MAX) return false;
  }
  return true;
}

static bool model_name_valid(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > BUS_MODEL_NAME_MAX || s[0] == '.' || s[0] == '/' || s[0] == '-' || strstr(s, ".."))
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!is_alnum(c) && !strchr("._-/:+", c)) return false;
  }
  return true;
}

/* value with every byte outside printable ASCII shown as '?', at most cap - 1 bytes */
static const char *printable(const char *value, char *buf, size_t cap) {
  size_t i = 0;
  for (; value[i] && i + 1 < cap; i++) buf[i] = value[i] > 0x20 && value[i] < 0x7f ? value[i] : '?';
  buf[i] = '\0';
  return buf;
}

llb_status bus_name_check(enum bus_name_kind kind, const char *what, const char *value) {
  if (!value) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: no value", what);
  char shown[80];
  switch (kind) {
    case BUS_NAME_KIND_TOKEN:
      if (bus_token_valid(value)) return LLB_STATUS_OK;
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s \"%s\": a name is 1..%d letters, digits, '-' or '_'", what,
                      printable(value, shown, sizeof shown), BUS_TOKEN_MAX);
    case BUS_NAME_KIND_PREFIX:
      if (bus_prefix_check(value) == LLB_STATUS_OK) return LLB_STATUS_OK;
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "%s \"%s\": a prefix is names joined by '.', each 1..%d letters, digits, '-' or '_'", what,
                      printable(value, shown, sizeof shown), BUS_TOKEN_MAX);
    case BUS_NAME_KIND_MODEL:
      if (model_name_valid(value)) return LLB_STATUS_OK;
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "%s \"%s\": a model name is 1..%d letters, digits and \"._-/:+\", not starting with "
                      "'.', '/' or '-', without \"..\"", what, printable(value, shown, sizeof shown),
                      BUS_MODEL_NAME_MAX);
  }
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: unknown kind of name", what);
}

llb_status bus_prefix_check(const char *prefix) {
  if (!prefix || !*prefix) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subject prefix is empty");
  if (strlen(prefix) > BUS_SUBJECT_MAX / 2)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subject prefix longer than %d bytes",
                    BUS_SUBJECT_MAX / 2);
  char tok[BUS_SUBJECT_MAX];
  const char *p = prefix;
  for (;;) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    memcpy(tok, p, n);
    tok[n] = '\0';
    if (!bus_token_valid(tok))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "subject prefix \"%s\": token \"%s\" is not 1..%d letters, digits, '-' or '_'",
                      prefix, tok, BUS_TOKEN_MAX);
    if (!dot) return LLB_STATUS_OK;
    p = dot + 1;
  }
}

static llb_status check_token(const char *what, const char *token) {
  if (bus_token_valid(token)) return LLB_STATUS_OK;
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                  "%s \"%s\" is not a valid subject token (1..%d letters, digits, '-' or '_')",
                  what, token ? token : "(null)", BUS_TOKEN_MAX);
}

/* snprintf(buf, cap, fmt, ...): TOO_LARGE, buf emptied, when the subject does not fit. */
__attribute__((format(printf, 3, 4))) static llb_status put(char *buf, size_t cap, const char *fmt, ...) {
  if (!buf || cap == 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subject buffer is NULL");
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "subject needs %d bytes, buffer holds %zu", n + 1, cap);
  }
  return LLB_STATUS_OK;
}

static llb_status join(char *buf, size_t cap, const char *prefix, const char *a, const char *b,
                       const char *c) {
  return c ? put(buf, cap, "%s.%s.%s.%s", prefix, a, b, c) : put(buf, cap, "%s.%s.%s", prefix, a, b);
}

/* *prefix: NULL becomes BUS_DEFAULT_PREFIX; INVALID_ARGUMENT when it is not a valid prefix. */
static llb_status prefix_or_default(const char **prefix) {
  if (!*prefix) *prefix = BUS_DEFAULT_PREFIX;
  return bus_prefix_check(*prefix);
}

/* INVALID_ARGUMENT unless kind is one of the n names of kinds. */
static llb_status check_kind(const char *what, const char *kind, const char *const *kinds, size_t n) {
  for (size_t i = 0; kind && i < n; i++)
    if (strcmp(kind, kinds[i]) == 0) return LLB_STATUS_OK;
  char all[160] = "";
  for (size_t i = 0; i < n; i++)
    snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? ", " : "", kinds[i]);
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s kind \"%s\" is not one of %s", what, kind ? kind : "(null)", all);
}

/* "<prefix>.<kind>.<tenant>" */
static llb_status tenant_subject(const char *prefix, const char *kind, const char *tenant, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK) st = check_token("tenant", tenant);
  if (st != LLB_STATUS_OK) return st;
  return join(buf, cap, prefix, kind, tenant, NULL);
}

llb_status bus_subject_generate(const char *prefix, const char *tenant, char *buf, size_t cap) {
  return tenant_subject(prefix, "generate", tenant, buf, cap);
}

llb_status bus_subject_abort(const char *prefix, const char *tenant, char *buf, size_t cap) {
  return tenant_subject(prefix, "abort", tenant, buf, cap);
}

llb_status bus_subject_tokenize(const char *prefix, const char *tenant, char *buf, size_t cap) {
  return tenant_subject(prefix, "tokenize", tenant, buf, cap);
}

llb_status bus_subject_engine(const char *prefix, const char *eid, const char *kind, char *buf,
                              size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK) st = check_token("engine id", eid);
  if (st != LLB_STATUS_OK) return st;
  st = check_kind("engine subject", kind, engine_kinds, sizeof engine_kinds / sizeof engine_kinds[0]);
  if (st != LLB_STATUS_OK) return st;
  return join(buf, cap, prefix, "engine", eid, kind);
}

llb_status bus_subject_engine_health(const char *prefix, const char *eid, const char *actor, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK) st = check_token("engine id", eid);
  if (st == LLB_STATUS_OK && !(actor && strcmp(actor, "*") == 0)) st = check_token("actor name", actor);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.engine.%s.health.%s", prefix, eid, actor);
}

llb_status bus_subject_health(const char *prefix, const char *actor, const char *instance,
                              char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK) st = check_token("actor name", actor);
  if (st == LLB_STATUS_OK) st = check_token("instance name", instance);
  if (st != LLB_STATUS_OK) return st;
  return join(buf, cap, prefix, "health", actor, instance);
}

llb_status bus_subject_health_metrics(const char *prefix, const char *actor, const char *instance, char *buf,
                                      size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK) st = check_token("actor name", actor);
  if (st == LLB_STATUS_OK) st = check_token("instance name", instance);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.health.%s.%s.metrics", prefix, actor, instance);
}

llb_status bus_subject_trace(const char *prefix, const char *actor, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK) st = check_token("actor name", actor);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.trace.%s", prefix, actor);
}

llb_status bus_subject_lora_update(const char *prefix, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.lora.update", prefix);
}

llb_status bus_subject_kv_fetch(const char *prefix, const char *eid, char *buf, size_t cap) {
  return bus_subject_engine(prefix, eid, "kv_fetch", buf, cap);
}

static llb_status check_inbox(const char *inbox) {
  if (inbox && bus_prefix_check(inbox) == LLB_STATUS_OK) return LLB_STATUS_OK;
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "reply inbox \"%s\" is not tokens joined by '.'",
                  inbox ? inbox : "(null)");
}

llb_status bus_subject_reply(const char *inbox, uint64_t seq, char *buf, size_t cap) {
  llb_status st = check_inbox(inbox);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.%" PRIu64, inbox, seq);
}

llb_status bus_pattern_tenants(const char *prefix, const char *kind, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK)
    st = check_kind("tenant subject", kind, tenant_kinds, sizeof tenant_kinds / sizeof tenant_kinds[0]);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.%s.*", prefix, kind);
}

llb_status bus_pattern_engines(const char *prefix, const char *kind, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK)
    st = check_kind("engine subject", kind, engine_kinds, sizeof engine_kinds / sizeof engine_kinds[0]);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.engine.*.%s", prefix, kind);
}

llb_status bus_pattern_health(const char *prefix, const char *actor, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st == LLB_STATUS_OK && actor) st = check_token("actor name", actor);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.health.%s.*", prefix, actor ? actor : "*");
}

llb_status bus_pattern_health_metrics(const char *prefix, char *buf, size_t cap) {
  llb_status st = prefix_or_default(&prefix);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.health.*.*.metrics", prefix);
}

llb_status bus_pattern_replies(const char *inbox, char *buf, size_t cap) {
  llb_status st = check_inbox(inbox);
  if (st != LLB_STATUS_OK) return st;
  return put(buf, cap, "%s.*", inbox);
}
