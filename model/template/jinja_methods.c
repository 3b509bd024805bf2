/* Jinja builtins reached by name: Python's str, dict and list methods as the immutable
 * sandbox exposes them (mutating methods refused when called), the globals HF's
 * apply_chat_template provides (range, namespace, dict, raise_exception, strftime_now), and
 * the sandbox's attribute and item lookup that finds the methods. The str operations here
 * (strip, case, replace) also serve the filters of the same names (jinja_filters.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/template/jinja_internal.h"

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith",
                                          "upper", "lower", "replace", "title", "capitalize", "format",
                                          "find", "count", "join", "splitlines", "isdigit", "isalpha",
                                          "isspace", "rsplit"};
static const char *const dict_methods[] = {"get", "items", "keys", "values"};
static const char *const dict_mutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
static const char *const list_methods[] = {"index", "count"};
static const char *const list_mutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
static const char *const globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

static int find(const char *const *names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return (int)i;
  return -1;
}
#define FIND(tab, name) find((tab), sizeof(tab) / sizeof(*(tab)), (name))

static bool make_fn(struct jx_render *r, enum jfunc_kind k, const char *name, const struct jv *self, struct jv *out) {
  struct jfunc *fn = jx_alloc(&r->arena, sizeof(*fn));
  struct jv *s = self ? jx_alloc(&r->arena, sizeof(*s)) : NULL;
  if (!fn || (self && !s)) return jx_oom(r, NULL);
  if (s) *s = *self;
  fn->kind = k;
  fn->name = name;
  fn->self = s;
  out->kind = JV_FUNC;
  out->u.fn = fn;
  return true;
}

bool jx_method_lookup(struct jx_render *r, struct jv obj, const char *name, struct jv *out) {
  int i;
  if (obj.kind == JV_STR && (i = FIND(str_methods, name)) >= 0) return make_fn(r, JF_METHOD, str_methods[i], &obj, out) || true;
  if (obj.kind == JV_DICT && (i = FIND(dict_methods, name)) >= 0) return make_fn(r, JF_METHOD, dict_methods[i], &obj, out) || true;
  if (obj.kind == JV_DICT && (i = FIND(dict_mutators, name)) >= 0) return make_fn(r, JF_UNSAFE, dict_mutators[i], &obj, out) || true;
  if (obj.kind == JV_LIST && (i = FIND(list_methods, name)) >= 0) return make_fn(r, JF_METHOD, list_methods[i], &obj, out) || true;
  if (obj.kind == JV_LIST && (i = FIND(list_mutators, name)) >= 0) return make_fn(r, JF_UNSAFE, list_mutators[i], &obj, out) || true;
  return false;
}

bool jx_global_lookup(struct jx_render *r, const char *name, struct jv *out) {
  int i = FIND(globals, name);
  if (i < 0) return false;
  return make_fn(r, JF_GLOBAL, globals[i], NULL, out) || true;
}

static struct jv *arg(struct jv *args, size_t nargs, const char **kw, struct jv *kwv, size_t nkw, size_t i, const char *name) {
  if (i < nargs) return &args[i];
  for (size_t k = 0; k < nkw; k++)
    if (strcmp(kw[k], name) == 0) return &kwv[k];
  return NULL;
}
#define ARG(i, name) arg(args, nargs, kw, kwv, nkw, (i), (name))

static bool out_list(struct jx_render *r, const struct jnode *at, struct jlist *l, struct jv *out) {
  if (!l) return jx_oom(r, at);
  out->kind = JV_LIST;
  out->u.l = l;
  return true;
}

/* str.split / rsplit (rsplit only differs with maxsplit, which counts from the right). */
static bool m_split(struct jx_render *r, const struct jnode *at, struct jstr *s, struct jv *sep, struct jv *maxv,
                    bool right, struct jv *out) {
  struct jlist *l = jx_list_new(&r->arena, 0);
  int64_t max = maxv && maxv->kind == JV_INT ? maxv->u.i : -1;
  bool ok = l != NULL;
  const char *p = s->data, *end = p + s->len;
  if (right && max >= 0) return jx_fail(r, at, LLB_STATUS_UNSUPPORTED, "rsplit with maxsplit is not supported");
  if (!sep || sep->kind == JV_NONE) {
    for (int64_t n = 0; ok;) {
      while (p < end && jx_is_space_cp((unsigned char)*p)) p++;
      if (p == end) break;
      const char *e = p;
      if (max >= 0 && n >= max) {
        const char *t = end;
        while (t > p && jx_is_space_cp((unsigned char)t[-1])) t--;
        ok = jx_list_push(&r->arena, l, jx_mkstr(&r->arena, p, (size_t)(t - p), &ok));
        break;
      }
      while (e < end && !jx_is_space_cp((unsigned char)*e)) e++;
      ok = jx_list_push(&r->arena, l, jx_mkstr(&r->arena, p, (size_t)(e - p), &ok));
      p = e;
      n++;
    }
    return ok ? out_list(r, at, l, out) : jx_oom(r, at);
  }
  if (sep->kind != JV_STR) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "must be str or None, not %s", jx_type_name(*sep));
  if (sep->u.s->len == 0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "empty separator");
  for (int64_t n = 0; ok; n++) {
    const char *hit = (max < 0 || n < max) ? memmem(p, (size_t)(end - p), sep->u.s->data, sep->u.s->len) : NULL;
    const char *e = hit ? hit : end;
    ok = jx_list_push(&r->arena, l, jx_mkstr(&r->arena, p, (size_t)(e - p), &ok));
    if (!hit) break;
    p = hit + sep->u.s->len;
  }
  return ok ? out_list(r, at, l, out) : jx_oom(r, at);
}

static bool affix(struct jx_render *r, const struct jnode *at, struct jstr *s, struct jv *a, bool end, bool *res) {
  if (!a) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "startswith/endswith need an argument");
  if (a->kind == JV_LIST) {
    *res = false;
    for (size_t i = 0; i < a->u.l->len && !*res; i++)
      if (!affix(r, at, s, &a->u.l->items[i], end, res)) return false;
    return true;
  }
  if (a->kind != JV_STR) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "startswith first arg must be str or a tuple of str");
  size_t n = a->u.s->len;
  *res = n <= s->len && memcmp(end ? s->data + s->len - n : s->data, a->u.s->data, n) == 0;
  return true;
}

/* str.format: {} {0} {name} and {{ }}; format specs are refused. */
static bool m_format(struct jx_render *r, const struct jnode *at, struct jstr *s, struct jv *args, size_t nargs,
                     const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  size_t auto_i = 0;
  for (size_t i = 0; i < s->len; i++) {
    char c = s->data[i];
    if ((c == '{' || c == '}') && i + 1 < s->len && s->data[i + 1] == c) { jx_buf_put(&b, &c, 1); i++; continue; }
    if (c != '{') { jx_buf_put(&b, &c, 1); continue; }
    const char *close = memchr(s->data + i, '}', s->len - i);
    if (!close) { jx_buf_free(&b); return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "Single '{' encountered in format string"); }
    size_t n = (size_t)(close - (s->data + i + 1));
    const char *f = s->data + i + 1;
    struct jv *v = NULL;
    if (memchr(f, ':', n) || memchr(f, '!', n) || memchr(f, '.', n) || memchr(f, '[', n)) {
      jx_buf_free(&b);
      return jx_fail(r, at, LLB_STATUS_UNSUPPORTED, "format specs in str.format are not supported");
    }
    if (n == 0) v = auto_i < nargs ? &args[auto_i++] : NULL;
    else if (f[0] >= '0' && f[0] <= '9') { size_t k = (size_t)atoi(f); v = k < nargs ? &args[k] : NULL; }
    else for (size_t k = 0; k < nkw && !v; k++) if (strlen(kw[k]) == n && memcmp(kw[k], f, n) == 0) v = &kwv[k];
    if (!v) { jx_buf_free(&b); return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "str.format: missing argument"); }
    jx_str_append(&b, *v);
    i += n + 1;
  }
  bool ok = !b.overflow;
  if (ok) *out = jx_mkstr(&r->arena, b.data ? b.data : "", b.len, &ok);
  jx_buf_free(&b);
  return ok || jx_fail(r, at, LLB_STATUS_TOO_LARGE, "string too large");
}

static bool m_str(struct jx_render *r, const struct jnode *at, const char *name, struct jstr *s, struct jv *args,
                  size_t nargs, const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  struct jv sv = {.kind = JV_STR, .u.s = s};
  bool res, ok = true;
  #define IS(n) (strcmp(name, (n)) == 0)
  if (IS("strip")) return jx_strip(r, at, sv, ARG(0, "chars"), 3, out);
  if (IS("lstrip")) return jx_strip(r, at, sv, ARG(0, "chars"), 1, out);
  if (IS("rstrip")) return jx_strip(r, at, sv, ARG(0, "chars"), 2, out);
  if (IS("split") || IS("rsplit")) return m_split(r, at, s, ARG(0, "sep"), ARG(1, "maxsplit"), IS("rsplit"), out);
  if (IS("startswith") || IS("endswith")) {
    if (!affix(r, at, s, ARG(0, "prefix"), IS("endswith"), &res)) return false;
    *out = jv_bool(res);
    return true;
  }
  if (IS("upper")) return jx_case(r, at, sv, 1, out);
  if (IS("lower")) return jx_case(r, at, sv, 0, out);
  if (IS("capitalize")) return jx_case(r, at, sv, 2, out);
  if (IS("title")) return jx_case(r, at, sv, 4, out);
  if (IS("replace")) {
    struct jv *o = ARG(0, "old"), *n = ARG(1, "new"), *c = ARG(2, "count");
    if (!o || !n) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "replace needs old and new");
    return jx_replace(r, at, sv, *o, *n, c && c->kind == JV_INT ? c->u.i : -1, out);
  }
  if (IS("format")) return m_format(r, at, s, args, nargs, kw, kwv, nkw, out);
  if (IS("find") || IS("count")) {
    struct jv *sub = ARG(0, "sub");
    if (!sub || sub->kind != JV_STR) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "%s needs a str", name);
    const char *hit = memmem(s->data, s->len, sub->u.s->data, sub->u.s->len);
    if (IS("find")) {
      *out = jv_int(hit ? (int64_t)jx_utf8_len(s->data, (size_t)(hit - s->data)) : -1);
      return true;
    }
    int64_t n = 0;
    if (sub->u.s->len == 0) n = (int64_t)jx_utf8_len(s->data, s->len) + 1;
    else for (; hit; n++) hit = memmem(hit + sub->u.s->len, s->len - (size_t)(hit + sub->u.s->len - s->data), sub->u.s->data, sub->u.s->len);
    *out = jv_int(n);
    return true;
  }
  if (IS("join")) {
    struct jlist *l;
    struct jx_buf b;
    if (!ARG(0, "iterable") || !jx_iterate(r, at, *ARG(0, "iterable"), &l)) return r->err ? false : jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "join needs an iterable");
    jx_buf_init(&b, r->limits.max_output_bytes);
    for (size_t i = 0; i < l->len; i++) {
      if (l->items[i].kind != JV_STR) { jx_buf_free(&b); return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "sequence item %zu: expected str instance", i); }
      if (i) jx_buf_put(&b, s->data, s->len);
      jx_buf_put(&b, l->items[i].u.s->data, l->items[i].u.s->len);
    }
    ok = !b.overflow;
    if (ok) *out = jx_mkstr(&r->arena, b.data ? b.data : "", b.len, &ok);
    jx_buf_free(&b);
    return ok || jx_fail(r, at, LLB_STATUS_TOO_LARGE, "string too large");
  }
  if (IS("splitlines")) {
    struct jv nl = jx_mkstr(&r->arena, "\n", 1, &ok);
    if (!ok || !m_split(r, at, s, &nl, NULL, false, out)) return ok ? false : jx_oom(r, at);
    if (out->u.l->len && out->u.l->items[out->u.l->len - 1].u.s->len == 0) out->u.l->len--;
    return true;
  }
  res = s->len > 0;
  for (size_t i = 0; i < s->len; i++) {
    char c = s->data[i];
    if (IS("isdigit")) res = res && c >= '0' && c <= '9';
    else if (IS("isalpha")) res = res && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    else res = res && jx_is_space_cp((unsigned char)c);
  }
  *out = jv_bool(res);
  return true;
  #undef IS
}

bool jx_call_method(struct jx_render *r, const struct jnode *at, struct jfunc *fn, struct jv *args, size_t nargs,
                    const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  struct jv self = *fn->self;
  const char *name = fn->name;
  if (self.kind == JV_STR) return m_str(r, at, name, self.u.s, args, nargs, kw, kwv, nkw, out);
  if (self.kind == JV_DICT) {
    struct jdict *d = self.u.d;
    if (strcmp(name, "get") == 0) {
      struct jv *k = ARG(0, "key"), *dflt = ARG(1, "default");
      if (!k) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "get expected at least 1 argument");
      struct jv *v = jx_dict_get(d, *k);
      *out = v ? *v : dflt ? *dflt : jv_none();
      return true;
    }
    struct jlist *l = jx_list_new(&r->arena, d->len);
    if (!l) return jx_oom(r, at);
    for (size_t i = 0; i < d->len; i++) {
      struct jv item = name[0] == 'k' ? d->keys[i] : d->vals[i];
      if (name[0] == 'i') {
        struct jlist *p = jx_list_new(&r->arena, 2);
        if (!p) return jx_oom(r, at);
        p->is_tuple = true;
        jx_list_push(&r->arena, p, d->keys[i]);
        jx_list_push(&r->arena, p, d->vals[i]);
        item = (struct jv){.kind = JV_LIST, .u.l = p};
      }
      jx_list_push(&r->arena, l, item);
    }
    return out_list(r, at, l, out);
  }
  struct jv *x = ARG(0, "value");
  if (self.kind != JV_LIST || !x) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "%s needs an argument", name);
  int64_t n = 0, first = -1;
  for (size_t i = 0; i < self.u.l->len; i++)
    if (jx_equal(self.u.l->items[i], *x)) { n++; if (first < 0) first = (int64_t)i; }
  if (strcmp(name, "index") == 0 && first < 0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "value is not in list");
  *out = jv_int(strcmp(name, "index") == 0 ? first : n);
  return true;
}

static bool g_range(struct jx_render *r, const struct jnode *at, struct jv *args, size_t nargs, struct jv *out) {
  int64_t v[3] = {0, 0, 1};
  if (nargs < 1 || nargs > 3) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "range expected 1 to 3 arguments");
  for (size_t i = 0; i < nargs; i++) {
    if (args[i].kind != JV_INT && args[i].kind != JV_BOOL) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "range arguments must be integers");
    v[nargs == 1 ? 1 : i] = args[i].kind == JV_INT ? args[i].u.i : args[i].u.b;
  }
  if (v[2] == 0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "range() arg 3 must not be zero");
  /* the sandbox's MAX_RANGE */
  double count = ((double)v[1] - (double)v[0]) / (double)v[2];
  if (count > 100000) return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  struct jlist *l = jx_list_new(&r->arena, count > 0 ? (size_t)count + 1 : 0);
  if (!l) return jx_oom(r, at);
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) jx_list_push(&r->arena, l, jv_int(i));
  return out_list(r, at, l, out);
}

bool jx_call_global(struct jx_render *r, const struct jnode *at, struct jfunc *fn, struct jv *args, size_t nargs,
                    const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  const char *name = fn->name;
  if (strcmp(name, "range") == 0) return g_range(r, at, args, nargs, out);
  if (strcmp(name, "namespace") == 0 || strcmp(name, "dict") == 0) {
    struct jdict *d = jx_dict_new(&r->arena);
    if (!d) return jx_oom(r, at);
    d->special = name[0] == 'n' ? JDICT_NAMESPACE : JDICT_PLAIN;
    if (nargs > 1 || (nargs == 1 && (args[0].kind != JV_DICT || args[0].u.d->special)))
      return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "%s takes one mapping and keyword arguments", name);
    for (size_t i = 0; nargs == 1 && i < args[0].u.d->len; i++)
      if (!jx_dict_set(&r->arena, d, args[0].u.d->keys[i], args[0].u.d->vals[i])) return jx_oom(r, at);
    for (size_t k = 0; k < nkw; k++)
      if (!jx_dict_set_cstr(&r->arena, d, kw[k], kwv[k])) return jx_oom(r, at);
    out->kind = JV_DICT;
    out->u.d = d;
    return true;
  }
  if (strcmp(name, "raise_exception") == 0) {
    struct jv msg = jv_undef();
    if (nargs && !jx_to_str(r, at, args[0], &msg)) return false;
    return jx_fail(r, NULL, LLB_STATUS_INVALID_ARGUMENT, "raise_exception: %s", nargs ? msg.u.s->data : "");
  }
  /* strftime_now(format): HF's datetime.now().strftime(format) */
  struct jv *f = ARG(0, "format");
  if (!f || f->kind != JV_STR) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "strftime_now needs a format string");
  time_t now = r->now_unix_s ? (time_t)r->now_unix_s : time(NULL);
  struct tm tm;
  if (r->now_unix_s) gmtime_r(&now, &tm);
  else localtime_r(&now, &tm);
  char buf[256];
  size_t n = f->u.s->len < 128 ? strftime(buf, sizeof(buf), f->u.s->data, &tm) : 0;
  bool ok = true;
  *out = jx_mkstr(&r->arena, buf, n, &ok);
  return ok || jx_oom(r, at);
}

/* ---- attribute and item lookup: jinja2's sandboxed getattr/getitem (finds the methods above) ---- */

bool jx_getattr(struct jx_render *r, const struct jnode *at, struct jv obj, const char *name, struct jv *out) {
  if (obj.kind == JV_UNDEF) return jx_undefined_error(r, at, obj);
  if (obj.kind == JV_DICT && obj.u.d->special != JDICT_PLAIN) {
    struct jv *v = jx_dict_get_cstr(obj.u.d, name, strlen(name));
    *out = v ? *v : jx_undef_msg(r, "'%s' has no attribute '%s'", jx_type_name(obj), name);
    return true;
  }
  /* jinja2's getattr: the Python attribute (a method) first, then the item */
  if (jx_method_lookup(r, obj, name, out)) return r->err == LLB_STATUS_OK;
  if (obj.kind == JV_DICT) {
    struct jv *v = jx_dict_get_cstr(obj.u.d, name, strlen(name));
    if (v) { *out = *v; return true; }
    *out = jx_undef_msg(r, "'dict object' has no attribute '%s'%s", name, "");
    return true;
  }
  *out = jx_undef_msg(r, "'%s object' has no attribute '%s'", jx_type_name(obj), name);
  return true;
}

static bool list_index(int64_t i, size_t len, size_t *out) {
  if (i < 0) i += (int64_t)len;
  if (i < 0 || (uint64_t)i >= len) return false;
  *out = (size_t)i;
  return true;
}

bool jx_getitem(struct jx_render *r, const struct jnode *at, struct jv obj, struct jv key, struct jv *out) {
  if (obj.kind == JV_UNDEF) return jx_undefined_error(r, at, obj);
  bool int_key = key.kind == JV_INT || key.kind == JV_BOOL;
  int64_t ki = key.kind == JV_BOOL ? key.u.b : key.u.i;
  size_t idx;
  if (obj.kind == JV_DICT && obj.u.d->special == JDICT_PLAIN) {
    struct jv *v = jx_dict_get(obj.u.d, key);
    if (v) { *out = *v; return true; }
  } else if (obj.kind == JV_LIST && int_key) {
    if (list_index(ki, obj.u.l->len, &idx)) { *out = obj.u.l->items[idx]; return true; }
  } else if (obj.kind == JV_STR && int_key) {
    size_t n = jx_utf8_len(obj.u.s->data, obj.u.s->len);
    if (list_index(ki, n, &idx)) {
      size_t b = jx_utf8_offset(obj.u.s->data, obj.u.s->len, idx);
      uint32_t cp;
      size_t len = jx_utf8_next(obj.u.s->data + b, obj.u.s->len - b, &cp);
      bool ok = true;
      *out = jx_mkstr(&r->arena, obj.u.s->data + b, len, &ok);
      return ok || jx_oom(r, at);
    }
  }
  if (key.kind == JV_STR) return jx_getattr(r, at, obj, key.u.s->data, out);
  *out = jx_undef_msg(r, "'%s object' has no item of that key%s", jx_type_name(obj), "");
  return true;
}

/* ---- Python str operations behind the str methods above and the filters trim, lower, upper,
 * capitalize, title and replace ---- */

/* Python str.strip/lstrip/rstrip (chars NULL = whitespace); which: 1 left, 2 right, 3 both. */
bool jx_strip(struct jx_render *r, const struct jnode *at, struct jv s, struct jv *chars, int which, struct jv *out) {
  const char *d = s.u.s->data;
  size_t b = 0, e = s.u.s->len;
  bool use_chars = chars && chars->kind == JV_STR;
  if (chars && !use_chars && chars->kind != JV_NONE && chars->kind != JV_UNDEF)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "strip arg must be None or str");
  while ((which & 1) && b < e) {
    uint32_t cp, cc;
    size_t n = jx_utf8_next(d + b, e - b, &cp);
    bool hit = !use_chars && jx_is_space_cp(cp);
    for (size_t k = 0; use_chars && !hit && k < chars->u.s->len;) {
      k += jx_utf8_next(chars->u.s->data + k, chars->u.s->len - k, &cc);
      hit = cc == cp;
    }
    if (!hit) break;
    b += n;
  }
  while ((which & 2) && e > b) {
    size_t st = e - 1;
    while (st > b && ((unsigned char)d[st] & 0xC0) == 0x80) st--;
    uint32_t cp, cc;
    jx_utf8_next(d + st, e - st, &cp);
    bool hit = !use_chars && jx_is_space_cp(cp);
    for (size_t k = 0; use_chars && !hit && k < chars->u.s->len;) {
      k += jx_utf8_next(chars->u.s->data + k, chars->u.s->len - k, &cc);
      hit = cc == cp;
    }
    if (!hit) break;
    e = st;
  }
  bool ok = true;
  *out = jx_mkstr(&r->arena, d + b, e - b, &ok);
  return ok || jx_oom(r, at);
}

/* case: 0 lower, 1 upper, 2 capitalize, 3 jinja title, 4 Python str.title. ASCII letters. */
bool jx_case(struct jx_render *r, const struct jnode *at, struct jv s, int mode, struct jv *out) {
  struct jstr *o = jx_str_new(&r->arena, s.u.s->data, s.u.s->len);
  if (!o) return jx_oom(r, at);
  bool start = true;
  for (size_t i = 0; i < o->len; i++) {
    char c = o->data[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    bool up = mode == 1 || ((mode == 2 && i == 0) || (mode >= 3 && start));
    if (alpha || mode < 3) o->data[i] = up ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c);
    if (mode == 3) start = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    else if (mode == 4) start = !alpha && !((unsigned char)c & 0x80);
  }
  out->kind = JV_STR;
  out->u.s = o;
  return true;
}

/* Python str.replace(old, new, count). */
bool jx_replace(struct jx_render *r, const struct jnode *at, struct jv s, struct jv old, struct jv nw,
                int64_t count, struct jv *out) {
  if (old.kind != JV_STR || nw.kind != JV_STR)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "replace() arguments must be str");
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  const char *p = s.u.s->data, *end = p + s.u.s->len;
  const struct jstr *o = old.u.s, *n = nw.u.s;
  for (int64_t done = 0; p <= end && (count < 0 || done < count); done++) {
    const char *hit;
    if (o->len == 0) {
      if (!jx_buf_put(&b, n->data, n->len)) break;
      if (p == end) { p = end + 1; break; }
      uint32_t cp;
      size_t l = jx_utf8_next(p, (size_t)(end - p), &cp);
      jx_buf_put(&b, p, l);
      p += l;
      continue;
    }
    if (!(hit = memmem(p, (size_t)(end - p), o->data, o->len))) break;
    jx_buf_put(&b, p, (size_t)(hit - p));
    jx_buf_put(&b, n->data, n->len);
    p = hit + o->len;
  }
  if (p <= end) jx_buf_put(&b, p, (size_t)(end - p));
  return jx_buf_to_str(r, at, &b, out);
}
