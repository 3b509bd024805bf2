/* Tool-call text formats → snapshots (see tool_parser.h). A small scanner over JSON text that
 * tolerates an unfinished end: every function returns how far it got and whether the value it
 * scanned is complete, so the same code serves the streamed (partial) and the final parse. */
#include "actors/api_server/tool_parser.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_PARTIAL ((size_t)-1) /* the value runs past the end of the text */
#define SCAN_BAD ((size_t)-2)     /* not JSON here */

static const char HERMES_START[] = "<tool_call>", HERMES_END[] = "</tool_call>";
static const char PYTHON_TAG[] = "<|python_tag|>";
static const char MISTRAL_CALLS[] = "[TOOL_CALLS]", MISTRAL_ARGS[] = "[ARGS]";

static size_t skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  return i;
}

/* End (exclusive) of the string opening at s[i] == '"', or SCAN_PARTIAL. */
static size_t scan_string(const char *s, size_t n, size_t i) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return SCAN_PARTIAL;
}

static bool is_scalar_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '+' || c == '.' ||
         c == 'E';
}

/* End (exclusive) of the JSON value at s[i] (i at its first byte), SCAN_PARTIAL when it runs
 * past n (a scalar touching the end is partial unless `final`), SCAN_BAD when s[i] starts no
 * value or brackets mismatch. Depth is bounded by the text itself; no recursion. */
static size_t scan_value(const char *s, size_t n, size_t i, bool final) {
  if (i >= n) return SCAN_PARTIAL;
  if (s[i] == '"') return scan_string(s, n, i);
  if (s[i] == '{' || s[i] == '[') {
    char stack[256];
    int depth = 0;
    for (; i < n; i++) {
      char c = s[i];
      if (c == '"') {
        size_t e = scan_string(s, n, i);
        if (e == SCAN_PARTIAL) return e;
        i = e - 1;
      } else if (c == '{' || c == '[') {
        if (depth == (int)sizeof stack) return SCAN_BAD;
        stack[depth++] = c == '{' ? '}' : ']';
      } else if (c == '}' || c == ']') {
        if (depth == 0 || stack[depth - 1] != c) return SCAN_BAD;
        if (--depth == 0) return i + 1;
      }
    }
    return SCAN_PARTIAL;
  }
  if (!is_scalar_char(s[i])) return SCAN_BAD;
  while (i < n && is_scalar_char(s[i])) i++;
  return i < n || final ? i : SCAN_PARTIAL;
}

static bool set_buf(struct api_server_buf *b, const char *s, size_t n) {
  b->len = 0;
  return api_server_buf_append(b, s, n);
}

/* The decoded text of the complete JSON string s[0..n) into b; false when not a valid string. */
static bool decode_string(const char *s, size_t n, struct api_server_buf *b, bool *oom) {
  json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
  bool ok = json_is_string(v);
  if (ok && !set_buf(b, json_string_value(v), json_string_length(v))) *oom = true;
  json_decref(v);
  return ok;
}

static bool valid_json(const char *s, size_t n) {
  json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
  json_decref(v);
  return v != NULL;
}

static bool key_is(const char *s, size_t n, const char *name) {
  size_t k = strlen(name);
  return n == k + 2 && memcmp(s + 1, name, k) == 0;
}

struct scan {
  const char *s;
  size_t n;
  bool final;
  bool oom;
};

/* One call object {"name": N, "arguments"|"parameters": V, ...} at *i into c. Returns true
 * when the object is complete (*i after it); false when partial (c filled as far as known) or
 * bad (*bad set). A complete object needs a string name; absent arguments are "{}". */
static bool scan_call(struct scan *sc, size_t *i, struct tool_call_snap *c, bool *bad) {
  const char *s = sc->s;
  size_t n = sc->n, p = skip_ws(s, n, *i);
  bool args_seen = false;
  if (p >= n) return false;
  if (s[p] != '{') return (*bad = true), false;
  for (p++;;) {
    p = skip_ws(s, n, p);
    if (p >= n) return false;
    if (s[p] == '}') break;
    if (s[p] == ',') {
      p++;
      continue;
    }
    if (s[p] != '"') return (*bad = true), false;
    size_t ks = p, ke = scan_string(s, n, p);
    if (ke == SCAN_PARTIAL) return false;
    p = skip_ws(s, n, ke);
    if (p >= n) return false;
    if (s[p] != ':') return (*bad = true), false;
    size_t vs = skip_ws(s, n, p + 1), ve = scan_value(s, n, vs, sc->final);
    if (ve == SCAN_BAD) return (*bad = true), false;
    bool is_args = key_is(s + ks, ke - ks, "arguments") || key_is(s + ks, ke - ks, "parameters");
    if (key_is(s + ks, ke - ks, "name")) {
      if (ve == SCAN_PARTIAL) return false;
      if (s[vs] != '"' || !decode_string(s + vs, ve - vs, &c->name, &sc->oom) || c->name.len == 0)
        return (*bad = true), false;
    } else if (is_args && ve == SCAN_PARTIAL) {
      if (vs < n && (s[vs] == '{' || s[vs] == '[')) sc->oom |= !set_buf(&c->arguments, s + vs, n - vs);
      return false;
    } else if (is_args) {
      args_seen = true;
      if (s[vs] == '"') {
        if (!decode_string(s + vs, ve - vs, &c->arguments, &sc->oom)) return (*bad = true), false;
      } else {
        sc->oom |= !set_buf(&c->arguments, s + vs, ve - vs);
      }
    } else if (ve == SCAN_PARTIAL) {
      return false;
    }
    p = ve;
  }
  if (c->name.len == 0) return (*bad = true), false;
  if (!args_seen) sc->oom |= !set_buf(&c->arguments, "{}", 2);
  if (sc->oom) return false;
  if (!valid_json(c->arguments.data, c->arguments.len)) return (*bad = true), false;
  c->complete = true;
  *i = p + 1;
  return true;
}

/* The next call slot of out, or NULL (too many: malformed). */
static struct tool_call_snap *next_call(struct tool_snapshot *out) {
  if (out->num_calls >= TOOL_MAX_CALLS) {
    out->malformed = true;
    return NULL;
  }
  return &out->calls[out->num_calls++];
}

/* A call array [obj, obj, ...] at *i. Returns true when complete; false when partial or bad. */
static bool scan_call_array(struct scan *sc, size_t *i, struct tool_snapshot *out) {
  size_t p = skip_ws(sc->s, sc->n, *i);
  if (p >= sc->n) return false;
  if (sc->s[p] != '[') return (out->malformed = true), false;
  for (p++;;) {
    p = skip_ws(sc->s, sc->n, p);
    if (p >= sc->n) return false;
    if (sc->s[p] == ']') break;
    if (sc->s[p] == ',' && out->num_calls > 0) {
      p++;
      continue;
    }
    struct tool_call_snap *c = next_call(out);
    bool bad = false;
    if (!c) return false;
    if (!scan_call(sc, &p, c, &bad)) {
      out->malformed |= bad;
      return false;
    }
  }
  *i = p + 1;
  return true;
}

/* Content text: s[from, to) appended; when `hold` names a start marker and the parse is not
 * final, a tail that may be the marker's beginning is held back. */
static void add_content(struct scan *sc, struct tool_snapshot *out, size_t from, size_t to, const char *hold) {
  if (hold && !sc->final) {
    size_t m = strlen(hold);
    for (size_t k = m - 1; k > 0; k--) {
      if (to - from >= k && memcmp(sc->s + to - k, hold, k) == 0) {
        to -= k;
        break;
      }
    }
  }
  sc->oom |= !api_server_buf_append(&out->content, sc->s + from, to - from);
}

static const char *find(const char *s, size_t n, size_t from, const char *needle) {
  size_t m = strlen(needle);
  for (size_t i = from; i + m <= n; i++)
    if (s[i] == needle[0] && memcmp(s + i, needle, m) == 0) return s + i;
  return NULL;
}

static void parse_hermes(struct scan *sc, struct tool_snapshot *out) {
  size_t pos = 0, n = sc->n;
  for (;;) {
    const char *st = find(sc->s, n, pos, HERMES_START);
    if (!st) {
      add_content(sc, out, pos, n, HERMES_START);
      return;
    }
    add_content(sc, out, pos, (size_t)(st - sc->s), NULL);
    size_t body = (size_t)(st - sc->s) + strlen(HERMES_START);
    const char *end = find(sc->s, n, body, HERMES_END);
    struct scan inner = {sc->s, end ? (size_t)(end - sc->s) : n, sc->final || end != NULL, false};
    struct tool_call_snap *c = next_call(out);
    bool bad = false;
    if (!c) return;
    size_t p = body;
    bool done = scan_call(&inner, &p, c, &bad);
    sc->oom |= inner.oom;
    if (!done || skip_ws(sc->s, inner.n, p) != inner.n) {
      out->malformed |= bad || inner.final;
      return;
    }
    if (!end) return;
    pos = (size_t)(end - sc->s) + strlen(HERMES_END);
  }
}

/* True when s[i..n) is a proper prefix of `marker` (it may still become it). */
static bool maybe_marker(const char *s, size_t n, size_t i, const char *marker) {
  size_t m = strlen(marker);
  return n - i < m && memcmp(s + i, marker, n - i) == 0;
}

static void parse_llama3(struct scan *sc, struct tool_snapshot *out) {
  size_t p = skip_ws(sc->s, sc->n, 0);
  if (!sc->final && maybe_marker(sc->s, sc->n, p, PYTHON_TAG)) return; /* nothing known yet */
  if (find(sc->s, sc->n, p, PYTHON_TAG) == sc->s + p) p = skip_ws(sc->s, sc->n, p + strlen(PYTHON_TAG));
  else if (p >= sc->n || sc->s[p] != '{') {
    add_content(sc, out, 0, sc->n, NULL);
    return;
  }
  for (;;) {
    struct tool_call_snap *c = next_call(out);
    bool bad = false;
    if (!c) return;
    if (!scan_call(sc, &p, c, &bad)) {
      out->malformed |= bad || sc->final;
      return;
    }
    p = skip_ws(sc->s, sc->n, p);
    if (p >= sc->n) return;
    if (sc->s[p] != ';') {
      out->malformed = true;
      return;
    }
    p = skip_ws(sc->s, sc->n, p + 1);
    if (p >= sc->n) {
      out->malformed |= sc->final; /* a trailing ';' promises another call */
      return;
    }
  }
}

/* Mistral v11+: N[ARGS]{...} after a [TOOL_CALLS]. */
static bool scan_mistral_named(struct scan *sc, size_t *i, struct tool_snapshot *out) {
  size_t p = *i;
  const char *args = find(sc->s, sc->n, p, MISTRAL_ARGS);
  size_t name_end = args ? (size_t)(args - sc->s) : sc->n;
  for (size_t k = p; k < name_end; k++) {
    char c = sc->s[k];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')
      continue;
    if (!args && !sc->final && maybe_marker(sc->s, sc->n, k, MISTRAL_ARGS)) return false;
    return (out->malformed = true), false;
  }
  if (!args || name_end == p) {
    out->malformed |= sc->final || (args && name_end == p);
    return false;
  }
  struct tool_call_snap *c = next_call(out);
  if (!c) return false;
  sc->oom |= !set_buf(&c->name, sc->s + p, name_end - p);
  size_t vs = skip_ws(sc->s, sc->n, name_end + strlen(MISTRAL_ARGS)), ve = scan_value(sc->s, sc->n, vs, sc->final);
  if (ve == SCAN_BAD || (ve != SCAN_PARTIAL && sc->s[vs] != '{')) return (out->malformed = true), false;
  if (ve == SCAN_PARTIAL) {
    if (vs < sc->n && sc->s[vs] == '{') sc->oom |= !set_buf(&c->arguments, sc->s + vs, sc->n - vs);
    out->malformed |= sc->final;
    return false;
  }
  sc->oom |= !set_buf(&c->arguments, sc->s + vs, ve - vs);
  if (!valid_json(c->arguments.data, c->arguments.len)) return (out->malformed = true), false;
  c->complete = true;
  *i = ve;
  return true;
}

static void parse_mistral(struct scan *sc, struct tool_snapshot *out) {
  const char *st = find(sc->s, sc->n, 0, MISTRAL_CALLS);
  if (!st) {
    add_content(sc, out, 0, sc->n, MISTRAL_CALLS);
    return;
  }
  add_content(sc, out, 0, (size_t)(st - sc->s), NULL);
  size_t p = skip_ws(sc->s, sc->n, (size_t)(st - sc->s) + strlen(MISTRAL_CALLS));
  if (p >= sc->n) {
    out->malformed |= sc->final;
    return;
  }
  if (sc->s[p] == '[') {
    if (!scan_call_array(sc, &p, out)) out->malformed |= sc->final;
    else if (skip_ws(sc->s, sc->n, p) != sc->n) out->malformed = true;
    return;
  }
  for (;;) {
    if (!scan_mistral_named(sc, &p, out)) return;
    p = skip_ws(sc->s, sc->n, p);
    if (p >= sc->n) return;
    if (!sc->final && maybe_marker(sc->s, sc->n, p, MISTRAL_CALLS)) return;
    if (find(sc->s, sc->n, p, MISTRAL_CALLS) != sc->s + p) {
      out->malformed = true;
      return;
    }
    p += strlen(MISTRAL_CALLS);
  }
}

static void parse_named(struct scan *sc, const char *named, struct tool_snapshot *out) {
  size_t p = skip_ws(sc->s, sc->n, 0), e = sc->n;
  struct tool_call_snap *c = next_call(out);
  sc->oom |= !set_buf(&c->name, named ? named : "", named ? strlen(named) : 0);
  if (sc->final)
    while (e > p && skip_ws(sc->s, e, e - 1) == e) e--;
  sc->oom |= !set_buf(&c->arguments, sc->s + p, e - p);
  if (!sc->final) return;
  size_t ve = scan_value(sc->s, e, p, true);
  if (p >= e || sc->s[p] != '{' || ve != e || !valid_json(sc->s + p, e - p)) out->malformed = true;
  else c->complete = true;
}

llb_status tool_parse(enum tool_format format, const char *named, const char *text, size_t len,
                      bool final, struct tool_snapshot *out) {
  struct scan sc = {text ? text : "", text ? len : 0, final, false};
  size_t p = 0;
  switch (format) {
    case TOOL_FORMAT_HERMES: parse_hermes(&sc, out); break;
    case TOOL_FORMAT_LLAMA3_JSON: parse_llama3(&sc, out); break;
    case TOOL_FORMAT_MISTRAL: parse_mistral(&sc, out); break;
    case TOOL_FORMAT_NAMED: parse_named(&sc, named, out); break;
    case TOOL_FORMAT_REQUIRED:
      if (scan_call_array(&sc, &p, out)) out->malformed |= skip_ws(sc.s, sc.n, p) != sc.n || out->num_calls == 0;
      else out->malformed |= final;
      break;
  }
  if (sc.oom) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tool_parse: out of memory");
  if (final && out->malformed) { /* vLLM's fallback: the whole output is content */
    for (int32_t i = 0; i < out->num_calls; i++) {
      api_server_buf_free(&out->calls[i].name);
      api_server_buf_free(&out->calls[i].arguments);
    }
    out->num_calls = 0;
    if (!set_buf(&out->content, sc.s, sc.n)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tool_parse: out of memory");
  }
  return LLB_STATUS_OK;
}

void tool_snapshot_free(struct tool_snapshot *s) {
  if (!s) return;
  api_server_buf_free(&s->content);
  for (int32_t i = 0; i < TOOL_MAX_CALLS; i++) {
    api_server_buf_free(&s->calls[i].name);
    api_server_buf_free(&s->calls[i].arguments);
  }
  memset(s, 0, sizeof *s);
}
