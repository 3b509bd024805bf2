/* Jinja filters and tests: jinja2 3.1's filters.py / tests.py for what chat templates use,
 * with HF's tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja_internal.h"

/* Argument i (positional) or the keyword `name`, or NULL. */
static struct jv *arg(struct jv *args, size_t nargs, const char **kw, struct jv *kwv, size_t nkw,
                      size_t i, const char *name) {
  if (i < nargs) return &args[i];
  for (size_t k = 0; k < nkw; k++)
    if (strcmp(kw[k], name) == 0) return &kwv[k];
  return NULL;
}
#define ARG(i, name) arg(args, nargs, kw, kwv, nkw, (i), (name))

static bool need_str(struct jx_render *r, const struct jnode *at, struct jv *v, struct jv *out) {
  return jx_to_str(r, at, *v, out);
}

static bool list_out(struct jlist *l, struct jv *out) {
  if (!l) return false;
  out->kind = JV_LIST;
  out->u.l = l;
  return true;
}

/* jinja2's make_attrgetter: "a.b.0" through getitem. */
static bool attr_path(struct jx_render *r, const struct jnode *at, struct jv obj, struct jv path, struct jv *out) {
  if (path.kind == JV_INT) return jx_getitem(r, at, obj, path, out);
  struct jv s;
  if (!jx_to_str(r, at, path, &s)) return false;
  const char *p = s.u.s->data, *end = p + s.u.s->len;
  *out = obj;
  while (p <= end) {
    const char *dot = memchr(p, '.', (size_t)(end - p));
    size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
    bool digits = n > 0;
    for (size_t i = 0; i < n; i++) digits = digits && p[i] >= '0' && p[i] <= '9';
    bool ok = true;
    struct jv key = digits && n < 18 ? jv_int(strtoll(p, NULL, 10)) : jx_mkstr(&r->arena, p, n, &ok);
    if (!ok) return jx_oom(r, at);
    if (out->kind == JV_UNDEF) return true;
    if (!jx_getitem(r, at, *out, key, out)) return false;
    if (!dot) break;
    p = dot + 1;
  }
  return true;
}

static bool f_tojson(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *args, size_t nargs,
                     const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  struct jv *ind = ARG(1, "indent"), *seps = ARG(2, "separators"), *sk = ARG(3, "sort_keys");
  char indent[64];
  const char *indent_s = NULL, *isep = ", ", *ksep = ": ";
  if (ind && ind->kind == JV_INT) {
    int64_t n = ind->u.i < 0 ? 0 : ind->u.i > 32 ? 32 : ind->u.i;
    memset(indent, ' ', (size_t)n);
    indent[n] = '\0';
    indent_s = indent;
    isep = ",";
  } else if (ind && ind->kind == JV_STR) {
    snprintf(indent, sizeof(indent), "%s", ind->u.s->data);
    indent_s = indent;
    isep = ",";
  }
  if (seps && seps->kind == JV_LIST && seps->u.l->len == 2 && seps->u.l->items[0].kind == JV_STR &&
      seps->u.l->items[1].kind == JV_STR) {
    isep = seps->u.l->items[0].u.s->data;
    ksep = seps->u.l->items[1].u.s->data;
  }
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  const char *bad = NULL;
  if (!jx_json_append(&b, v, indent_s, isep, ksep, sk && jx_truthy(*sk), 0, &bad) && bad) {
    jx_buf_free(&b);
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "Object of type %s is not JSON serializable", bad);
  }
  return jx_buf_to_str(r, at, &b, out);
}

static bool f_length(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *out) {
  switch (v.kind) {
  case JV_STR: *out = jv_int((int64_t)jx_utf8_len(v.u.s->data, v.u.s->len)); return true;
  case JV_LIST: if (v.u.l->is_gen) break; *out = jv_int((int64_t)v.u.l->len); return true;
  case JV_DICT: if (v.u.d->special == JDICT_PLAIN) { *out = jv_int((int64_t)v.u.d->len); return true; } break;
  case JV_UNDEF: *out = jv_int(0); return true;
  default: break;
  }
  return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "object of type '%s' has no len()",
                 v.kind == JV_LIST && v.u.l->is_gen ? "generator" : jx_type_name(v));
}

static bool f_join(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *sep, struct jv *attr, struct jv *out) {
  struct jlist *l;
  struct jv s = {.kind = JV_STR};
  if (!jx_iterate(r, at, v, &l)) return false;
  if (sep && !jx_to_str(r, at, *sep, &s)) return false;
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  for (size_t i = 0; i < l->len; i++) {
    struct jv item = l->items[i];
    if (attr && !attr_path(r, at, item, *attr, &item)) { jx_buf_free(&b); return false; }
    if (i && sep) jx_buf_put(&b, s.u.s->data, s.u.s->len);
    jx_str_append(&b, item);
  }
  return jx_buf_to_str(r, at, &b, out);
}

/* Sort key: ignore case of strings unless case_sensitive (jinja2's ignore_case). */
struct sort_ctx {
  struct jx_render *r;
  const struct jnode *at;
  bool case_sensitive, failed;
};
static struct jv sort_key(struct sort_ctx *c, struct jv v) {
  if (c->case_sensitive || v.kind != JV_STR) return v;
  struct jv o;
  return jx_case(c->r, c->at, v, 0, &o) ? o : v;
}
static int sort_cmp(struct sort_ctx *c, struct jv a, struct jv b) {
  bool ok;
  int x = jx_compare(sort_key(c, a), sort_key(c, b), &ok);
  if (!ok && !c->failed) {
    c->failed = true;
    jx_fail(c->r, c->at, LLB_STATUS_INVALID_ARGUMENT, "'<' not supported between instances of '%s' and '%s'",
            jx_type_name(a), jx_type_name(b));
  }
  return x;
}
/* Stable merge sort of items by keys (keys[i] belongs to items[i]). */
static void msort(struct sort_ctx *c, struct jv *keys, struct jv *items, struct jv *tk, struct jv *ti, size_t n, bool rev) {
  if (n < 2) return;
  size_t h = n / 2;
  msort(c, keys, items, tk, ti, h, rev);
  msort(c, keys + h, items + h, tk, ti, n - h, rev);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int x = sort_cmp(c, keys[j], keys[i]);
    bool take_right = rev ? x > 0 : x < 0;
    if (take_right) { tk[k] = keys[j]; ti[k++] = items[j++]; }
    else { tk[k] = keys[i]; ti[k++] = items[i++]; }
  }
  while (i < h) { tk[k] = keys[i]; ti[k++] = items[i++]; }
  while (j < n) { tk[k] = keys[j]; ti[k++] = items[j++]; }
  memcpy(keys, tk, n * sizeof(*keys));
  memcpy(items, ti, n * sizeof(*items));
}

/* Sorted copy of l by attribute path (or by item, or by pair index when by >= 0). */
static bool sorted(struct jx_render *r, const struct jnode *at, struct jlist *l, struct jv *attr, int by,
                   bool rev, bool cs, struct jlist **out) {
  size_t n = l->len;
  struct jlist *o = jx_list_new(&r->arena, n);
  struct jv *keys = jx_alloc(&r->arena, (n + 1) * sizeof(struct jv) * 3);
  if (!o || !keys) return jx_oom(r, at);
  for (size_t i = 0; i < n; i++) {
    o->items[i] = l->items[i];
    keys[i] = l->items[i];
    if (by >= 0 && keys[i].kind == JV_LIST && keys[i].u.l->len == 2) keys[i] = keys[i].u.l->items[by];
    if (attr && !attr_path(r, at, l->items[i], *attr, &keys[i])) return false;
  }
  o->len = n;
  struct sort_ctx c = {.r = r, .at = at, .case_sensitive = cs};
  msort(&c, keys, o->items, keys + n + 1, keys + 2 * n + 2, n, rev);
  *out = o;
  return !c.failed;
}

static const char *const filter_names[] = {
    "abs", "attr", "batch", "capitalize", "count", "d", "default", "dictsort", "first", "float",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount"};
static const char *const test_names[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "filter",
    "float", "ge", "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper",
    "==", "!=", "<", "<=", ">", ">="};

static bool in_list(const char *const *names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return true;
  return false;
}
bool jx_filter_exists(const char *name) {
  return in_list(filter_names, sizeof(filter_names) / sizeof(*filter_names), name);
}
bool jx_test_exists(const char *name) {
  return in_list(test_names, sizeof(test_names) / sizeof(*test_names), name);
}

/* select/reject/selectattr/rejectattr: keep items whose (attribute's) test result == keep. */
static bool f_select(struct jx_render *r, const struct jnode *at, struct jv v, bool by_attr,
                     bool keep, struct jv *args, size_t nargs, struct jv *out) {
  struct jlist *l, *o;
  if (!jx_truthy(v)) v = jv_undef(); /* jinja2: `if seq:` before iterating */
  if (!jx_iterate(r, at, v, &l) || !(o = jx_list_new(&r->arena, 0))) return r->err ? false : jx_oom(r, at);
  o->is_gen = true;
  size_t first = by_attr ? 1 : 0;
  if (by_attr && nargs < 1) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "missing attribute");
  const char *test = NULL;
  if (nargs > first) {
    if (args[first].kind != JV_STR || !jx_test_exists(args[first].u.s->data))
      return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "no test named in select");
    test = args[first].u.s->data;
  }
  for (size_t i = 0; i < l->len; i++) {
    struct jv item = l->items[i];
    bool res;
    if (by_attr && !attr_path(r, at, item, args[0], &item)) return false;
    if (test) {
      if (!jx_apply_test(r, at, test, item, args + first + 1, nargs - first - 1, &res)) return false;
    } else {
      res = jx_truthy(item);
    }
    if (res == keep && !jx_list_push(&r->arena, o, l->items[i])) return jx_oom(r, at);
  }
  return list_out(o, out);
}

static bool f_map(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *args,
                  size_t nargs, const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  struct jlist *l, *o;
  if (!jx_truthy(v)) v = jv_undef();
  if (!jx_iterate(r, at, v, &l) || !(o = jx_list_new(&r->arena, l->len))) return r->err ? false : jx_oom(r, at);
  o->is_gen = true;
  struct jv *attr = NULL, *dflt = NULL;
  for (size_t k = 0; k < nkw; k++) {
    if (strcmp(kw[k], "attribute") == 0) attr = &kwv[k];
    else if (strcmp(kw[k], "default") == 0) dflt = &kwv[k];
  }
  if (!attr && (nargs < 1 || args[0].kind != JV_STR || !jx_filter_exists(args[0].u.s->data)))
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "map needs attribute= or a filter name");
  for (size_t i = 0; i < l->len; i++) {
    struct jv item = l->items[i];
    if (attr) {
      if (!attr_path(r, at, item, *attr, &item)) return false;
      if (item.kind == JV_UNDEF && dflt) item = *dflt;
    } else if (!jx_apply_filter(r, at, args[0].u.s->data, item, args + 1, nargs - 1, kw, kwv, nkw, &item)) {
      return false;
    }
    jx_list_push(&r->arena, o, item);
  }
  return list_out(o, out);
}

static bool f_indent(struct jx_render *r, const struct jnode *at, struct jv s, struct jv *width, struct jv *first,
                     struct jv *blank, struct jv *out) {
  char ind[64];
  if (width && width->kind == JV_STR) snprintf(ind, sizeof(ind), "%s", width->u.s->data);
  else {
    int64_t w = width && width->kind == JV_INT ? width->u.i : 4;
    w = w < 0 ? 0 : w > 63 ? 63 : w;
    memset(ind, ' ', (size_t)w);
    ind[w] = '\0';
  }
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  if (first && jx_truthy(*first)) jx_buf_puts(&b, ind);
  const char *p = s.u.s->data, *end = p + s.u.s->len;
  for (bool line0 = true; p < end; line0 = false) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    if (!line0) {
      jx_buf_put(&b, "\n", 1);
      if (n || (blank && jx_truthy(*blank))) jx_buf_puts(&b, ind);
    }
    jx_buf_put(&b, p, n);
    p += n + (nl ? 1 : 0);
  }
  return jx_buf_to_str(r, at, &b, out);
}

static bool f_int(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *dflt, bool to_float, struct jv *out) {
  struct jv d = dflt ? *dflt : (to_float ? jv_float(0.0) : jv_int(0));
  (void)r; (void)at;
  switch (v.kind) {
  case JV_INT: case JV_BOOL: *out = to_float ? jv_float((double)(v.kind == JV_INT ? v.u.i : v.u.b)) : jv_int(v.kind == JV_INT ? v.u.i : v.u.b); return true;
  case JV_FLOAT: *out = to_float ? v : (isfinite(v.u.f) && fabs(v.u.f) < 9e18 ? jv_int((int64_t)v.u.f) : d); return true;
  case JV_STR: {
    char *end;
    const char *s = v.u.s->data;
    if (!to_float) {
      long long x = strtoll(s, &end, 10);
      while (*end == ' ' || *end == '\t' || *end == '\n') end++;
      if (end != s && *end == '\0') { *out = jv_int(x); return true; }
    }
    double f = strtod(s, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == s || *end != '\0') { *out = d; return true; }
    *out = to_float ? jv_float(f) : (isfinite(f) && fabs(f) < 9e18 ? jv_int((int64_t)f) : d);
    return true;
  }
  default: *out = d; return true;
  }
}

static bool f_first_last(struct jx_render *r, const struct jnode *at, struct jv v, bool last, struct jv *out) {
  struct jlist *l;
  if (!jx_iterate(r, at, v, &l)) return false;
  if (l->len == 0) { *out = jv_undef(); return true; }
  *out = l->items[last ? l->len - 1 : 0];
  return true;
}

static bool f_minmax(struct jx_render *r, const struct jnode *at, struct jv v, bool is_max, struct jv *cs, struct jv *attr, struct jv *out) {
  struct jlist *l, *s;
  if (!jx_iterate(r, at, v, &l) || !sorted(r, at, l, attr, -1, false, cs && jx_truthy(*cs), &s)) return false;
  *out = s->len ? s->items[is_max ? s->len - 1 : 0] : jv_undef();
  return true;
}

static bool f_unique(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *cs, struct jv *attr, struct jv *out) {
  struct jlist *l, *o, *seen;
  if (!jx_iterate(r, at, v, &l)) return false;
  if (!(o = jx_list_new(&r->arena, 0)) || !(seen = jx_list_new(&r->arena, 0))) return jx_oom(r, at);
  struct sort_ctx c = {.r = r, .at = at, .case_sensitive = cs && jx_truthy(*cs)};
  for (size_t i = 0; i < l->len; i++) {
    struct jv key = l->items[i];
    if (attr && !attr_path(r, at, key, *attr, &key)) return false;
    key = sort_key(&c, key);
    bool dup = false;
    for (size_t k = 0; k < seen->len && !dup; k++) dup = jx_equal(seen->items[k], key);
    if (!dup && (!jx_list_push(&r->arena, seen, key) || !jx_list_push(&r->arena, o, l->items[i]))) return jx_oom(r, at);
  }
  return list_out(o, out);
}

static bool f_items(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *out) {
  if (v.kind == JV_UNDEF) return list_out(jx_list_new(&r->arena, 0), out) || jx_oom(r, at);
  if (v.kind != JV_DICT || v.u.d->special != JDICT_PLAIN)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "Can only get item pairs from a mapping.");
  struct jlist *o = jx_list_new(&r->arena, v.u.d->len);
  if (!o) return jx_oom(r, at);
  for (size_t i = 0; i < v.u.d->len; i++) {
    struct jlist *p = jx_list_new(&r->arena, 2);
    if (!p) return jx_oom(r, at);
    p->is_tuple = true;
    jx_list_push(&r->arena, p, v.u.d->keys[i]);
    jx_list_push(&r->arena, p, v.u.d->vals[i]);
    jx_list_push(&r->arena, o, (struct jv){.kind = JV_LIST, .u.l = p});
  }
  return list_out(o, out);
}

static bool f_batch(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *count, struct jv *fill, struct jv *out) {
  struct jlist *l, *o, *cur = NULL;
  if (!count || count->kind != JV_INT || count->u.i < 1)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "batch needs a positive count");
  if (!jx_iterate(r, at, v, &l) || !(o = jx_list_new(&r->arena, 0))) return r->err ? false : jx_oom(r, at);
  for (size_t i = 0; i < l->len; i++) {
    if (!cur || cur->len == (size_t)count->u.i) {
      if (!(cur = jx_list_new(&r->arena, 0)) || !jx_list_push(&r->arena, o, (struct jv){.kind = JV_LIST, .u.l = cur})) return jx_oom(r, at);
    }
    if (!jx_list_push(&r->arena, cur, l->items[i])) return jx_oom(r, at);
  }
  while (cur && fill && fill->kind != JV_NONE && cur->len < (size_t)count->u.i)
    if (!jx_list_push(&r->arena, cur, *fill)) return jx_oom(r, at);
  return list_out(o, out);
}

static bool f_wordcount(struct jx_render *r, const struct jnode *at, struct jv s, struct jv *out) {
  (void)r; (void)at;
  int64_t n = 0;
  bool in = false;
  for (size_t i = 0; i < s.u.s->len; i++) {
    unsigned char c = (unsigned char)s.u.s->data[i];
    bool w = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (w && !in) n++;
    in = w;
  }
  *out = jv_int(n);
  return true;
}

static bool f_round(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *prec, struct jv *method, struct jv *out) {
  if (v.kind != JV_INT && v.kind != JV_FLOAT && v.kind != JV_BOOL)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "round of a %s", jx_type_name(v));
  double x = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
  double p = pow(10.0, prec && prec->kind == JV_INT ? (double)prec->u.i : 0.0);
  const char *m = method && method->kind == JV_STR ? method->u.s->data : "common";
  double y = x * p;
  y = strcmp(m, "floor") == 0 ? floor(y) : strcmp(m, "ceil") == 0 ? ceil(y) : nearbyint(y);
  *out = jv_float(y / p);
  return true;
}

bool jx_apply_filter(struct jx_render *r, const struct jnode *at, const char *name, struct jv v,
                     struct jv *args, size_t nargs, const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  struct jv s;
  #define IS(n) (strcmp(name, (n)) == 0)
  #define STR_IN() do { if (!need_str(r, at, &v, &s)) return false; } while (0)
  if (IS("tojson")) return f_tojson(r, at, v, args, nargs, kw, kwv, nkw, out);
  if (IS("safe")) {
    if (!jx_to_str(r, at, v, &s)) return false;
    struct jstr *m = jx_str_new(&r->arena, s.u.s->data, s.u.s->len);
    if (!m) return jx_oom(r, at);
    m->markup = true;
    out->kind = JV_STR;
    out->u.s = m;
    return true;
  }
  if (IS("string")) return jx_to_str(r, at, v, out);
  if (IS("length") || IS("count")) return f_length(r, at, v, out);
  if (IS("trim")) { STR_IN(); return jx_strip(r, at, s, ARG(0, "chars"), 3, out); }
  if (IS("upper")) { STR_IN(); return jx_case(r, at, s, 1, out); }
  if (IS("lower")) { STR_IN(); return jx_case(r, at, s, 0, out); }
  if (IS("capitalize")) { STR_IN(); return jx_case(r, at, s, 2, out); }
  if (IS("title")) { STR_IN(); return jx_case(r, at, s, 3, out); }
  if (IS("replace")) {
    struct jv *o = ARG(0, "old"), *n = ARG(1, "new"), *c = ARG(2, "count");
    STR_IN();
    if (!o || !n) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "replace needs old and new");
    return jx_replace(r, at, s, *o, *n, c && c->kind == JV_INT ? c->u.i : -1, out);
  }
  if (IS("default") || IS("d")) {
    struct jv *d = ARG(0, "default_value"), *b = ARG(1, "boolean");
    bool use = v.kind == JV_UNDEF || (b && jx_truthy(*b) && !jx_truthy(v));
    *out = use ? (d ? *d : jx_mkstr(&r->arena, "", 0, &(bool){true})) : v;
    return true;
  }
  if (IS("first") || IS("last")) return f_first_last(r, at, v, IS("last"), out);
  if (IS("join")) return f_join(r, at, v, ARG(0, "d"), ARG(1, "attribute"), out);
  if (IS("list")) {
    struct jlist *l, *o;
    if (!jx_iterate(r, at, v, &l) || !(o = jx_list_new(&r->arena, l->len))) return r->err ? false : jx_oom(r, at);
    for (size_t i = 0; i < l->len; i++) jx_list_push(&r->arena, o, l->items[i]);
    return list_out(o, out);
  }
  if (IS("items")) return f_items(r, at, v, out);
  if (IS("dictsort")) {
    struct jv items, *cs = ARG(0, "case_sensitive"), *by = ARG(1, "by"), *rev = ARG(2, "reverse");
    struct jlist *o;
    bool by_value = by && by->kind == JV_STR && strcmp(by->u.s->data, "value") == 0;
    if (!f_items(r, at, v, &items) || !sorted(r, at, items.u.l, NULL, by_value ? 1 : 0, rev && jx_truthy(*rev), cs && jx_truthy(*cs), &o)) return false;
    return list_out(o, out);
  }
  if (IS("sort")) {
    struct jv *rev = ARG(0, "reverse"), *cs = ARG(1, "case_sensitive"), *attr = ARG(2, "attribute");
    struct jlist *l, *o;
    if (!jx_iterate(r, at, v, &l) || !sorted(r, at, l, attr, -1, rev && jx_truthy(*rev), cs && jx_truthy(*cs), &o)) return false;
    return list_out(o, out);
  }
  if (IS("reverse")) {
    if (v.kind == JV_STR) {
      struct jlist *l;
      struct jx_buf b;
      if (!jx_iterate(r, at, v, &l)) return false;
      jx_buf_init(&b, r->limits.max_output_bytes);
      for (size_t i = l->len; i > 0; i--) jx_buf_put(&b, l->items[i - 1].u.s->data, l->items[i - 1].u.s->len);
      return jx_buf_to_str(r, at, &b, out);
    }
    struct jlist *l, *o;
    if (!jx_iterate(r, at, v, &l) || !(o = jx_list_new(&r->arena, l->len))) return r->err ? false : jx_oom(r, at);
    for (size_t i = l->len; i > 0; i--) jx_list_push(&r->arena, o, l->items[i - 1]);
    return list_out(o, out);
  }
  if (IS("unique")) return f_unique(r, at, v, ARG(0, "case_sensitive"), ARG(1, "attribute"), out);
  if (IS("min") || IS("max")) return f_minmax(r, at, v, IS("max"), ARG(0, "case_sensitive"), ARG(1, "attribute"), out);
  if (IS("selectattr") || IS("rejectattr") || IS("select") || IS("reject"))
    return f_select(r, at, v, name[6] == 'a', name[0] == 's', args, nargs, out);
  if (IS("map")) return f_map(r, at, v, args, nargs, kw, kwv, nkw, out);
  if (IS("int")) return f_int(r, at, v, ARG(0, "default"), false, out);
  if (IS("float")) return f_int(r, at, v, ARG(0, "default"), true, out);
  if (IS("abs")) {
    if (v.kind == JV_INT) *out = v.u.i == INT64_MIN ? jv_float(9223372036854775808.0) : jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    else if (v.kind == JV_FLOAT) *out = jv_float(fabs(v.u.f));
    else if (v.kind == JV_BOOL) *out = jv_int(v.u.b);
    else return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "bad operand type for abs(): '%s'", jx_type_name(v));
    return true;
  }
  if (IS("round")) return f_round(r, at, v, ARG(0, "precision"), ARG(1, "method"), out);
  if (IS("indent")) { STR_IN(); return f_indent(r, at, s, ARG(0, "width"), ARG(1, "first"), ARG(2, "blank"), out); }
  if (IS("wordcount")) { STR_IN(); return f_wordcount(r, at, s, out); }
  if (IS("batch")) return f_batch(r, at, v, ARG(0, "linecount"), ARG(1, "fill_with"), out);
  if (IS("sum")) {
    struct jv *attr = ARG(0, "attribute"), *start = ARG(1, "start"), acc = start ? *start : jv_int(0);
    struct jlist *l;
    if (!jx_iterate(r, at, v, &l)) return false;
    for (size_t i = 0; i < l->len; i++) {
      struct jv item = l->items[i];
      if (attr && !attr_path(r, at, item, *attr, &item)) return false;
      if (!jx_binop(r, at, JOP_ADD, acc, item, &acc)) return false;
    }
    *out = acc;
    return true;
  }
  if (IS("attr")) {
    struct jv *n = ARG(0, "name");
    if (!n || n->kind != JV_STR) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "attr needs a name");
    return jx_getattr(r, at, v, n->u.s->data, out);
  }
  #undef STR_IN
  #undef IS
  return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "No filter named '%s'.", name);
}

bool jx_apply_test(struct jx_render *r, const struct jnode *at, const char *name, struct jv v,
                   struct jv *args, size_t nargs, bool *out) {
  #define IS(n) (strcmp(name, (n)) == 0)
  struct jv *a0 = nargs ? &args[0] : NULL;
  bool num = v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
  bool plain_dict = v.kind == JV_DICT && v.u.d->special == JDICT_PLAIN;
  if (IS("defined")) *out = v.kind != JV_UNDEF;
  else if (IS("undefined")) *out = v.kind == JV_UNDEF;
  else if (IS("none")) *out = v.kind == JV_NONE;
  else if (IS("string")) *out = v.kind == JV_STR;
  else if (IS("mapping")) *out = plain_dict;
  else if (IS("iterable")) *out = v.kind == JV_STR || v.kind == JV_LIST || plain_dict || v.kind == JV_UNDEF;
  else if (IS("sequence")) *out = v.kind == JV_STR || v.kind == JV_LIST || plain_dict || v.kind == JV_UNDEF;
  else if (IS("number")) *out = num;
  else if (IS("integer")) *out = v.kind == JV_INT;
  else if (IS("float")) *out = v.kind == JV_FLOAT;
  else if (IS("boolean")) *out = v.kind == JV_BOOL;
  else if (IS("true")) *out = v.kind == JV_BOOL && v.u.b;
  else if (IS("false")) *out = v.kind == JV_BOOL && !v.u.b;
  else if (IS("callable")) *out = v.kind == JV_FUNC;
  else if (IS("filter") || IS("test")) *out = v.kind == JV_STR && (IS("filter") ? jx_filter_exists(v.u.s->data) : jx_test_exists(v.u.s->data));
  else if (IS("lower") || IS("upper")) {
    bool cased = false, ok = v.kind == JV_STR;
    for (size_t i = 0; ok && i < v.u.s->len; i++) {
      char c = v.u.s->data[i];
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        cased = true;
        ok = IS("lower") ? !(c >= 'A' && c <= 'Z') : !(c >= 'a' && c <= 'z');
      }
    }
    *out = ok && cased;
  } else if (IS("odd") || IS("even") || IS("divisibleby")) {
    if (v.kind != JV_INT) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "test %s needs an integer", name);
    int64_t d = IS("divisibleby") ? (a0 && a0->kind == JV_INT ? a0->u.i : 0) : 2;
    if (d == 0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "division by zero");
    bool even = v.u.i % d == 0;
    *out = IS("odd") ? !even : even;
  } else if (IS("sameas")) {
    if (!a0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "sameas needs an argument");
    bool scalar = v.kind == JV_NONE || v.kind == JV_BOOL || v.kind == JV_UNDEF;
    *out = v.kind == a0->kind && (scalar ? jx_equal(v, *a0) : v.kind == JV_INT ? v.u.i == a0->u.i : memcmp(&v.u, &a0->u, sizeof(v.u)) == 0);
  } else {
    static const char *const cmp[][3] = {{"eq", "equalto", "=="}, {"ne", "!=", "!="}, {"lt", "<", "<"},
                                          {"le", "<=", "<="}, {"gt", ">", ">"}, {"ge", ">=", ">="}, {"in", "in", "in"}};
    for (int k = 0; k < 7; k++) {
      if (!IS(cmp[k][0]) && !IS(cmp[k][1]) && !IS(cmp[k][2])) continue;
      if (!a0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "test %s needs an argument", name);
      struct jv res;
      if (!jx_compare_op(r, at, k == 6 ? JOP_IN : JOP_EQ + k, v, *a0, &res)) return false;
      *out = res.u.b;
      return true;
    }
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "no test named '%s'", name);
  }
  #undef IS
  return true;
}
