#include "bus/subject.h"

#include <stdio.h>
#include <string.h>

static const char *const engine_kinds[] = {"requests", "abort",   "kv",    "encoder",
                                           "execute",  "outputs", "stats", "dead_letter",
                                           "resync", "history"};

bool bus_token_valid(const char *token) {
  if (!token || !*token) return false;
  size_t n = 0;
  for (const char *p = token; *p; p++, n++) {
    unsigned char c = (unsigned char)*p;
    if (c <= 0x20 || c >= 0x7f || c == '.' || c == '*' || c == '>') return false;
  }
  return n <= BUS_TOKEN_MAX;
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
                      "subject prefix \"%s\": token \"%s\" is empty or holds a space, '*' or '>'",
                      prefix, tok);
    if (!dot) return LLB_STATUS_OK;
    p = dot + 1;
  }
}

static llb_status check_token(const char *what, const char *token) {
  if (bus_token_valid(token)) return LLB_STATUS_OK;
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                  "%s \"%s\" is not a valid subject token (1..%d printable characters, "
                  "no spaces, '.', '*' or '>')",
                  what, token ? token : "(null)", BUS_TOKEN_MAX);
}

static llb_status join(char *buf, size_t cap, const char *prefix, const char *a, const char *b,
                       const char *c) {
  if (!buf || cap == 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subject buffer is NULL");
  int n = c ? snprintf(buf, cap, "%s.%s.%s.%s", prefix, a, b, c)
            : snprintf(buf, cap, "%s.%s.%s", prefix, a, b);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "subject needs %d bytes, buffer holds %zu", n + 1, cap);
  }
  return LLB_STATUS_OK;
}

llb_status bus_subject_generate(const char *prefix, const char *tenant, char *buf, size_t cap) {
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st == LLB_STATUS_OK) st = check_token("tenant", tenant);
  if (st != LLB_STATUS_OK) return st;
  return join(buf, cap, prefix, "generate", tenant, NULL);
}

llb_status bus_subject_abort(const char *prefix, const char *tenant, char *buf, size_t cap) {
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st == LLB_STATUS_OK) st = check_token("tenant", tenant);
  if (st != LLB_STATUS_OK) return st;
  return join(buf, cap, prefix, "abort", tenant, NULL);
}

llb_status bus_subject_engine(const char *prefix, const char *eid, const char *kind, char *buf,
                              size_t cap) {
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st == LLB_STATUS_OK) st = check_token("engine id", eid);
  if (st != LLB_STATUS_OK) return st;
  bool known = false;
  for (size_t i = 0; kind && i < sizeof engine_kinds / sizeof engine_kinds[0]; i++)
    if (strcmp(kind, engine_kinds[i]) == 0) known = true;
  if (!known)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "engine subject kind \"%s\" is not one of requests, abort, kv, encoder, "
                    "execute, outputs, stats, dead_letter, resync, history",
                    kind ? kind : "(null)");
  return join(buf, cap, prefix, "engine", eid, kind);
}

llb_status bus_subject_engine_health(const char *prefix, const char *eid, const char *actor, char *buf, size_t cap) {
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st == LLB_STATUS_OK) st = check_token("engine id", eid);
  if (st == LLB_STATUS_OK && !(actor && strcmp(actor, "*") == 0)) st = check_token("actor name", actor);
  if (st != LLB_STATUS_OK) return st;
  if (!buf || cap == 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subject buffer is NULL");
  const int n = snprintf(buf, cap, "%s.engine.%s.health.%s", prefix, eid, actor);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "subject needs %d bytes, buffer holds %zu", n + 1, cap);
  }
  return LLB_STATUS_OK;
}

llb_status bus_subject_health(const char *prefix, const char *actor, const char *instance,
                              char *buf, size_t cap) {
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st == LLB_STATUS_OK) st = check_token("actor name", actor);
  if (st == LLB_STATUS_OK) st = check_token("instance name", instance);
  if (st != LLB_STATUS_OK) return st;
  return join(buf, cap, prefix, "health", actor, instance);
}
