/* Jinja values: the bounded arena, byte buffers, containers, Python's truthiness, equality,
 * ordering, str()/repr() and json.dumps (as Python 3 prints them), and values from JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja_internal.h"

/* ---- arena ---- */
struct jx_chunk {
  struct jx_chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

enum { JX_CHUNK_BYTES = 64 * 1024 };

void jx_arena_init(struct jx_arena *a, size_t limit_bytes) {
  memset(a, 0, sizeof(*a));
  a->limit_bytes = limit_bytes;
}

void jx_arena_free(struct jx_arena *a) {
  struct jx_chunk *c = a->head;
  while (c) {
    struct jx_chunk *next = c->next;
    free(c);
    c = next;
  }
  a->head = NULL;
}

void *jx_alloc(struct jx_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  struct jx_chunk *c = a->head;
  if (!c || c->size - c->used < n) {
    size_t size = n > JX_CHUNK_BYTES ? n : JX_CHUNK_BYTES;
    if (a->used_bytes + size > a->limit_bytes || size < n) {
      a->exhausted = true;
      return NULL;
    }
    c = malloc(sizeof(*c) + size);
    if (!c) return NULL;
    c->size = size;
    c->used = 0;
    c->next = a->head;
    a->head = c;
    a->used_bytes += size;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

/* ---- buffer ---- */
void jx_buf_init(struct jx_buf *b, size_t limit) {
  memset(b, 0, sizeof(*b));
  b->limit = limit;
}

void jx_buf_free(struct jx_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

bool jx_buf_put(struct jx_buf *b, const char *s, size_t n) {
  if (b->overflow) return false;
  if (n > b->limit || b->len > b->limit - n) {
    b->overflow = true;
    return false;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
      b->overflow = true;
      return false;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
  return true;
}

bool jx_buf_puts(struct jx_buf *b, const char *s) { return jx_buf_put(b, s, strlen(s)); }

bool jx_buf_printf(struct jx_buf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0) return false;
  return jx_buf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* ---- containers ---- */
struct jstr *jx_str_new(struct jx_arena *a, const char *s, size_t n) {
  struct jstr *r = jx_alloc(a, sizeof(*r) + n + 1);
  if (!r) return NULL;
  r->len = n;
  if (n) memcpy(r->data, s, n);
  r->data[n] = '\0';
  return r;
}

struct jv jx_mkstr(struct jx_arena *a, const char *s, size_t n, bool *ok) {
  struct jv v = {.kind = JV_STR};
  v.u.s = jx_str_new(a, s, n);
  if (!v.u.s) *ok = false;
  return v;
}

struct jlist *jx_list_new(struct jx_arena *a, size_t cap) {
  struct jlist *l = jx_alloc(a, sizeof(*l));
  if (!l) return NULL;
  if (cap) {
    l->items = jx_alloc(a, cap * sizeof(struct jv));
    if (!l->items) return NULL;
    l->cap = cap;
  }
  return l;
}

bool jx_list_push(struct jx_arena *a, struct jlist *l, struct jv v) {
  if (l->len == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    struct jv *items = jx_alloc(a, cap * sizeof(struct jv));
    if (!items) return false;
    if (l->len) memcpy(items, l->items, l->len * sizeof(struct jv));
    l->items = items;
    l->cap = cap;
  }
  l->items[l->len++] = v;
  return true;
}

struct jdict *jx_dict_new(struct jx_arena *a) { return jx_alloc(a, sizeof(struct jdict)); }

struct jv *jx_dict_get(const struct jdict *d, struct jv key) {
  for (size_t i = 0; i < d->len; i++)
    if (jx_equal(d->keys[i], key)) return &d->vals[i];
  return NULL;
}

struct jv *jx_dict_get_cstr(const struct jdict *d, const char *key, size_t n) {
  for (size_t i = 0; i < d->len; i++) {
    const struct jv *k = &d->keys[i];
    if (k->kind == JV_STR && k->u.s->len == n && memcmp(k->u.s->data, key, n) == 0)
      return &d->vals[i];
  }
  return NULL;
}

static bool dict_append(struct jx_arena *a, struct jdict *d, struct jv key, struct jv val) {
  if (d->len == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    struct jv *keys = jx_alloc(a, cap * sizeof(struct jv));
    struct jv *vals = jx_alloc(a, cap * sizeof(struct jv));
    if (!keys || !vals) return false;
    if (d->len) {
      memcpy(keys, d->keys, d->len * sizeof(struct jv));
      memcpy(vals, d->vals, d->len * sizeof(struct jv));
    }
    d->keys = keys;
    d->vals = vals;
    d->cap = cap;
  }
  d->keys[d->len] = key;
  d->vals[d->len] = val;
  d->len++;
  return true;
}

bool jx_dict_set(struct jx_arena *a, struct jdict *d, struct jv key, struct jv val) {
  struct jv *have = jx_dict_get(d, key);
  if (have) {
    *have = val;
    return true;
  }
  return dict_append(a, d, key, val);
}

bool jx_dict_set_cstr(struct jx_arena *a, struct jdict *d, const char *key, struct jv val) {
  struct jv *have = jx_dict_get_cstr(d, key, strlen(key));
  if (have) {
    *have = val;
    return true;
  }
  bool ok = true;
  struct jv k = jx_mkstr(a, key, strlen(key), &ok);
  return ok && jx_dict_set(a, d, k, val);
}

/* ---- UTF-8 ---- */
size_t jx_utf8_next(const char *s, size_t n, uint32_t *cp) {
  const unsigned char *u = (const unsigned char *)s;
  size_t len = u[0] < 0x80 ? 1 : (u[0] >> 5) == 6 ? 2 : (u[0] >> 4) == 14 ? 3 : (u[0] >> 3) == 30 ? 4 : 1;
  if (len > n) len = 1;
  for (size_t i = 1; i < len; i++)
    if ((u[i] & 0xC0) != 0x80) len = 1;
  if (len == 1) {
    *cp = u[0];
  } else {
    uint32_t c = u[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) c = (c << 6) | (u[i] & 0x3F);
    *cp = c;
  }
  return len;
}

size_t jx_utf8_len(const char *s, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += jx_utf8_next(s + i, n - i, &cp);
    count++;
  }
  return count;
}

size_t jx_utf8_offset(const char *s, size_t n, size_t cp_index) {
  size_t i = 0;
  for (size_t k = 0; k < cp_index && i < n; k++) {
    uint32_t cp;
    i += jx_utf8_next(s + i, n - i, &cp);
  }
  return i;
}

bool jx_is_space_cp(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- Python semantics ---- */
bool jx_truthy(struct jv v) {
  switch (v.kind) {
  case JV_UNDEF: case JV_NONE: return false;
  case JV_BOOL: return v.u.b;
  case JV_INT: return v.u.i != 0;
  case JV_FLOAT: return v.u.f != 0.0;
  case JV_STR: return v.u.s->len != 0;
  case JV_LIST: return v.u.l->is_gen || v.u.l->len != 0;
  case JV_DICT: return v.u.d->special != JDICT_PLAIN || v.u.d->len != 0;
  case JV_FUNC: return true;
  }
  return false;
}

static bool is_num(struct jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double num_f(struct jv v) {
  return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(struct jv v) { return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b; }

bool jx_equal(struct jv a, struct jv b) {
  if (is_num(a) && is_num(b)) {
    if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) return num_f(a) == num_f(b);
    return num_i(a) == num_i(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
  case JV_UNDEF: case JV_NONE: return true;
  case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->data, b.u.s->data, a.u.s->len) == 0;
  case JV_LIST:
    if (a.u.l->len != b.u.l->len || a.u.l->is_tuple != b.u.l->is_tuple) return false;
    for (size_t i = 0; i < a.u.l->len; i++)
      if (!jx_equal(a.u.l->items[i], b.u.l->items[i])) return false;
    return true;
  case JV_DICT:
    if (a.u.d == b.u.d) return true;
    if (a.u.d->special || b.u.d->special || a.u.d->len != b.u.d->len) return false;
    for (size_t i = 0; i < a.u.d->len; i++) {
      struct jv *o = jx_dict_get(b.u.d, a.u.d->keys[i]);
      if (!o || !jx_equal(a.u.d->vals[i], *o)) return false;
    }
    return true;
  case JV_FUNC: return a.u.fn == b.u.fn;
  default: return false;
  }
}

int jx_compare(struct jv a, struct jv b, bool *ok) {
  *ok = true;
  if (is_num(a) && is_num(b)) {
    if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) {
      double x = num_f(a), y = num_f(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = num_i(a), y = num_i(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == JV_STR && b.kind == JV_STR) {
    size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
    int c = memcmp(a.u.s->data, b.u.s->data, n);
    if (c) return c < 0 ? -1 : 1;
    return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len ? 1 : 0;
  }
  if (a.kind == JV_LIST && b.kind == JV_LIST) {
    size_t n = a.u.l->len < b.u.l->len ? a.u.l->len : b.u.l->len;
    for (size_t i = 0; i < n; i++) {
      if (jx_equal(a.u.l->items[i], b.u.l->items[i])) continue;
      return jx_compare(a.u.l->items[i], b.u.l->items[i], ok);
    }
    return a.u.l->len < b.u.l->len ? -1 : a.u.l->len > b.u.l->len ? 1 : 0;
  }
  *ok = false;
  return 0;
}

const char *jx_type_name(struct jv v) {
  switch (v.kind) {
  case JV_UNDEF: return "Undefined";
  case JV_NONE: return "NoneType";
  case JV_BOOL: return "bool";
  case JV_INT: return "int";
  case JV_FLOAT: return "float";
  case JV_STR: return "str";
  case JV_LIST: return v.u.l->is_tuple ? "tuple" : "list";
  case JV_DICT:
    return v.u.d->special == JDICT_NAMESPACE ? "Namespace"
           : v.u.d->special == JDICT_LOOP    ? "LoopContext" : "dict";
  case JV_FUNC: return "function";
  }
  return "object";
}

void jx_float_repr(double f, char out[32]) {
  if (isnan(f)) { strcpy(out, "nan"); return; }
  if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
  char tmp[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
    if (strtod(tmp, NULL) == f) break;
  }
  /* tmp is d.ddde[+-]XX: Python's repr uses fixed notation for -4 <= exp < 16 */
  char *e = strchr(tmp, 'e');
  int exp = atoi(e + 1);
  *e = '\0';
  char digits[24];
  size_t nd = 0;
  bool neg = tmp[0] == '-';
  for (const char *p = tmp + neg; *p; p++)
    if (*p != '.') digits[nd++] = *p;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = '\0';
  char *o = out;
  if (neg) *o++ = '-';
  if (exp >= -5 + 1 && exp < 16) {
    if (exp < 0) {
      o += sprintf(o, "0.");
      for (int i = 0; i < -exp - 1; i++) *o++ = '0';
      o += sprintf(o, "%s", digits);
    } else {
      for (int i = 0; i <= exp; i++) *o++ = (size_t)i < nd ? digits[i] : '0';
      *o++ = '.';
      if ((size_t)exp + 1 < nd) o += sprintf(o, "%s", digits + exp + 1);
      else *o++ = '0';
    }
    *o = '\0';
  } else {
    *o++ = digits[0];
    if (nd > 1) {
      *o++ = '.';
      o += sprintf(o, "%s", digits + 1);
    }
    sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  }
}

static bool repr_str(struct jx_buf *b, const struct jstr *s) {
  bool has_sq = memchr(s->data, '\'', s->len) != NULL, has_dq = memchr(s->data, '"', s->len) != NULL;
  char q = has_sq && !has_dq ? '"' : '\'';
  bool ok = jx_buf_put(b, &q, 1);
  for (size_t i = 0; i < s->len; i++) {
    unsigned char c = (unsigned char)s->data[i];
    if (c == (unsigned char)q || c == '\\') { char e[2] = {'\\', (char)c}; ok = ok && jx_buf_put(b, e, 2); }
    else if (c == '\n') ok = ok && jx_buf_puts(b, "\\n");
    else if (c == '\r') ok = ok && jx_buf_puts(b, "\\r");
    else if (c == '\t') ok = ok && jx_buf_puts(b, "\\t");
    else if (c < 0x20 || c == 0x7f) ok = ok && jx_buf_printf(b, "\\x%02x", c);
    else ok = ok && jx_buf_put(b, (const char *)&c, 1);
  }
  return ok && jx_buf_put(b, &q, 1);
}

static bool str_or_repr(struct jx_buf *b, struct jv v, bool repr, int depth) {
  char num[32];
  /* only namespaces are mutable, so only they make cycles: print them as Python does */
  if (depth > 64) return jx_buf_puts(b, "...");
  switch (v.kind) {
  case JV_UNDEF: return true;
  case JV_NONE: return jx_buf_puts(b, "None");
  case JV_BOOL: return jx_buf_puts(b, v.u.b ? "True" : "False");
  case JV_INT: return jx_buf_printf(b, "%lld", (long long)v.u.i);
  case JV_FLOAT: jx_float_repr(v.u.f, num); return jx_buf_puts(b, num);
  case JV_STR: return repr ? repr_str(b, v.u.s) : jx_buf_put(b, v.u.s->data, v.u.s->len);
  case JV_LIST: {
    const struct jlist *l = v.u.l;
    if (l->is_gen) return jx_buf_puts(b, "<generator object>");
    bool ok = jx_buf_puts(b, l->is_tuple ? "(" : "[");
    for (size_t i = 0; i < l->len && ok; i++) {
      if (i) ok = jx_buf_puts(b, ", ");
      ok = ok && str_or_repr(b, l->items[i], true, depth + 1);
    }
    if (l->is_tuple && l->len == 1) ok = ok && jx_buf_puts(b, ",");
    return ok && jx_buf_puts(b, l->is_tuple ? ")" : "]");
  }
  case JV_DICT: {
    const struct jdict *d = v.u.d;
    bool ok = jx_buf_puts(b, d->special == JDICT_NAMESPACE ? "<Namespace {" : "{");
    for (size_t i = 0; i < d->len && ok; i++) {
      if (i) ok = jx_buf_puts(b, ", ");
      ok = ok && str_or_repr(b, d->keys[i], true, depth + 1) && jx_buf_puts(b, ": ") &&
           str_or_repr(b, d->vals[i], true, depth + 1);
    }
    return ok && jx_buf_puts(b, d->special == JDICT_NAMESPACE ? "}>" : "}");
  }
  case JV_FUNC: return jx_buf_printf(b, "<function %s>", v.u.fn->name ? v.u.fn->name : "?");
  }
  return false;
}

bool jx_str_append(struct jx_buf *b, struct jv v) { return str_or_repr(b, v, false, 0); }
bool jx_repr_append(struct jx_buf *b, struct jv v) { return str_or_repr(b, v, true, 0); }

static bool json_str(struct jx_buf *b, const char *s, size_t n) {
  bool ok = jx_buf_put(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n && ok; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    ok = jx_buf_put(b, s + run, i - run);
    run = i + 1;
    switch (c) {
    case '"': ok = ok && jx_buf_puts(b, "\\\""); break;
    case '\\': ok = ok && jx_buf_puts(b, "\\\\"); break;
    case '\n': ok = ok && jx_buf_puts(b, "\\n"); break;
    case '\r': ok = ok && jx_buf_puts(b, "\\r"); break;
    case '\t': ok = ok && jx_buf_puts(b, "\\t"); break;
    case '\b': ok = ok && jx_buf_puts(b, "\\b"); break;
    case '\f': ok = ok && jx_buf_puts(b, "\\f"); break;
    default: ok = ok && jx_buf_printf(b, "\\u%04x", c);
    }
  }
  return ok && jx_buf_put(b, s + run, n - run) && jx_buf_put(b, "\"", 1);
}

static bool json_newline(struct jx_buf *b, const char *indent, int level) {
  bool ok = jx_buf_put(b, "\n", 1);
  for (int i = 0; i < level && ok; i++) ok = jx_buf_puts(b, indent);
  return ok;
}

static int key_cmp(const void *x, const void *y) {
  const struct jv *a = *(const struct jv *const *)x, *b = *(const struct jv *const *)y;
  bool ok;
  return jx_compare(*a, *b, &ok);
}

static bool json_dict(struct jx_buf *b, const struct jdict *d, const char *indent,
                      const char *isep, const char *ksep, bool sort, int depth, const char **bad) {
  if (d->len == 0) return jx_buf_puts(b, "{}");
  size_t *order = malloc(d->len * sizeof(size_t));
  const struct jv **keys = malloc(d->len * sizeof(*keys));
  bool ok = order && keys;
  for (size_t i = 0; ok && i < d->len; i++) {
    keys[i] = &d->keys[i];
    if (d->keys[i].kind != JV_STR) { *bad = "non-string key"; ok = false; }
  }
  if (ok && sort) qsort(keys, d->len, sizeof(*keys), key_cmp);
  for (size_t i = 0; ok && i < d->len; i++) order[i] = (size_t)(keys[i] - d->keys);
  ok = ok && jx_buf_puts(b, "{");
  for (size_t i = 0; ok && i < d->len; i++) {
    if (i) ok = jx_buf_puts(b, isep);
    if (ok && indent) ok = json_newline(b, indent, depth + 1);
    const struct jv *k = &d->keys[order[i]];
    ok = ok && json_str(b, k->u.s->data, k->u.s->len) && jx_buf_puts(b, ksep) &&
         jx_json_append(b, d->vals[order[i]], indent, isep, ksep, sort, depth + 1, bad);
  }
  if (ok && indent) ok = json_newline(b, indent, depth);
  free(order);
  free(keys);
  return ok && jx_buf_puts(b, "}");
}

bool jx_json_append(struct jx_buf *b, struct jv v, const char *indent, const char *isep,
                    const char *ksep, bool sort, int depth, const char **bad) {
  char num[32];
  if (depth > 128) { *bad = "nesting deeper than 128"; return false; }
  switch (v.kind) {
  case JV_NONE: return jx_buf_puts(b, "null");
  case JV_BOOL: return jx_buf_puts(b, v.u.b ? "true" : "false");
  case JV_INT: return jx_buf_printf(b, "%lld", (long long)v.u.i);
  case JV_FLOAT:
    if (isnan(v.u.f)) return jx_buf_puts(b, "NaN");
    if (isinf(v.u.f)) return jx_buf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
    jx_float_repr(v.u.f, num);
    return jx_buf_puts(b, num);
  case JV_STR: return json_str(b, v.u.s->data, v.u.s->len);
  case JV_LIST: {
    if (v.u.l->is_gen) { *bad = "generator"; return false; }
    if (v.u.l->len == 0) return jx_buf_puts(b, "[]");
    bool ok = jx_buf_puts(b, "[");
    for (size_t i = 0; ok && i < v.u.l->len; i++) {
      if (i) ok = jx_buf_puts(b, isep);
      if (ok && indent) ok = json_newline(b, indent, depth + 1);
      ok = ok && jx_json_append(b, v.u.l->items[i], indent, isep, ksep, sort, depth + 1, bad);
    }
    if (ok && indent) ok = json_newline(b, indent, depth);
    return ok && jx_buf_puts(b, "]");
  }
  case JV_DICT:
    if (v.u.d->special == JDICT_PLAIN) return json_dict(b, v.u.d, indent, isep, ksep, sort, depth, bad);
    /* fall through */
  default:
    *bad = jx_type_name(v);
    return false;
  }
}

bool jx_from_json(struct jx_arena *a, const json_t *j, struct jv *out, int depth) {
  if (depth > 128) return false;
  bool ok = true;
  switch (json_typeof(j)) {
  case JSON_NULL: *out = jv_none(); return true;
  case JSON_TRUE: *out = jv_bool(true); return true;
  case JSON_FALSE: *out = jv_bool(false); return true;
  case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return true;
  case JSON_REAL: *out = jv_float(json_real_value(j)); return true;
  case JSON_STRING: *out = jx_mkstr(a, json_string_value(j), json_string_length(j), &ok); return ok;
  case JSON_ARRAY: {
    struct jlist *l = jx_list_new(a, json_array_size(j));
    if (!l) return false;
    for (size_t i = 0; i < json_array_size(j); i++) {
      struct jv item;
      if (!jx_from_json(a, json_array_get(j, i), &item, depth + 1) || !jx_list_push(a, l, item))
        return false;
    }
    out->kind = JV_LIST;
    out->u.l = l;
    return true;
  }
  case JSON_OBJECT: {
    struct jdict *d = jx_dict_new(a);
    if (!d) return false;
    const char *key;
    size_t klen;
    json_t *val;
    void *tmp;
    json_object_keylen_foreach_safe((json_t *)j, tmp, key, klen, val) {
      struct jv k = jx_mkstr(a, key, klen, &ok), item;
      /* jansson keys are unique already: append without the linear lookup */
      if (!ok || !jx_from_json(a, val, &item, depth + 1) || !dict_append(a, d, k, item)) return false;
    }
    out->kind = JV_DICT;
    out->u.d = d;
    return true;
  }
  }
  return false;
}
