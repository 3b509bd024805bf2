/* Jinja's runtime over values: the render's errors (jx_fail, jx_oom, undefined values),
 * str() and iteration, and Python's operators (arithmetic, comparison, `in`, unary, slicing)
 * with jinja2's semantics. A leaf of the interpreter: the evaluator (jinja_eval.c), the
 * filters and the methods call it; it calls only the values of jinja_value.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja_internal.h"

bool jx_fail(struct jx_render *r, const struct jnode *node, llb_status st, const char *fmt, ...) {
  if (r->err != LLB_STATUS_OK) return false;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  r->err = st;
  if (node) snprintf(r->err_msg, sizeof(r->err_msg), "line %d col %d: %s", node->line, node->col, msg);
  else snprintf(r->err_msg, sizeof(r->err_msg), "%s", msg);
  return false;
}

bool jx_oom(struct jx_render *r, const struct jnode *node) {
  if (r->arena.exhausted)
    return jx_fail(r, node, LLB_STATUS_TOO_LARGE, "template used more than %zu bytes of memory",
                   r->limits.max_memory_bytes);
  return jx_fail(r, node, LLB_STATUS_OUT_OF_MEMORY, "out of memory");
}

bool jx_undefined_error(struct jx_render *r, const struct jnode *at, struct jv v) {
  return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "%s", v.u.s ? v.u.s->data : "value is undefined");
}

struct jv jx_undef_msg(struct jx_render *r, const char *fmt, const char *a, const char *b) {
  char msg[200];
  snprintf(msg, sizeof(msg), fmt, a, b);
  struct jv v = jv_undef();
  v.u.s = jx_str_new(&r->arena, msg, strlen(msg));
  return v;
}

bool jx_to_str(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *out) {
  if (v.kind == JV_STR) { *out = v; return true; }
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  bool ok = jx_str_append(&b, v);
  if (ok) *out = jx_mkstr(&r->arena, b.data ? b.data : "", b.len, &ok);
  else if (b.overflow) jx_fail(r, at, LLB_STATUS_TOO_LARGE, "string longer than %zu bytes", b.limit);
  jx_buf_free(&b);
  return ok || (r->err ? false : jx_oom(r, at));
}

bool jx_iterate(struct jx_render *r, const struct jnode *at, struct jv v, struct jlist **out) {
  struct jlist *l;
  bool ok = true;
  switch (v.kind) {
  case JV_UNDEF: l = jx_list_new(&r->arena, 0); break;
  case JV_LIST: *out = v.u.l; return true;
  case JV_DICT:
    if (v.u.d->special != JDICT_PLAIN) goto bad;
    l = jx_list_new(&r->arena, v.u.d->len);
    for (size_t i = 0; l && i < v.u.d->len; i++) jx_list_push(&r->arena, l, v.u.d->keys[i]);
    break;
  case JV_STR:
    l = jx_list_new(&r->arena, v.u.s->len);
    for (size_t i = 0; l && ok && i < v.u.s->len;) {
      uint32_t cp;
      size_t n = jx_utf8_next(v.u.s->data + i, v.u.s->len - i, &cp);
      ok = jx_list_push(&r->arena, l, jx_mkstr(&r->arena, v.u.s->data + i, n, &ok));
      i += n;
    }
    break;
  default:
  bad:
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "'%s' object is not iterable", jx_type_name(v));
  }
  if (!l || !ok) return jx_oom(r, at);
  *out = l;
  return true;
}

bool jx_buf_to_str(struct jx_render *r, const struct jnode *at, struct jx_buf *b, struct jv *out) {
  bool ok = !b->overflow;
  if (ok) *out = jx_mkstr(&r->arena, b->data ? b->data : "", b->len, &ok);
  if (!ok && b->overflow) jx_fail(r, at, LLB_STATUS_TOO_LARGE, "string longer than %zu bytes", b->limit);
  else if (!ok) jx_oom(r, at);
  jx_buf_free(b);
  return ok;
}

static bool type_error(struct jx_render *r, const struct jnode *at, const char *op, struct jv a, struct jv b) {
  if (a.kind == JV_UNDEF) return jx_undefined_error(r, at, a);
  if (b.kind == JV_UNDEF) return jx_undefined_error(r, at, b);
  return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "unsupported operand type(s) for %s: '%s' and '%s'",
                 op, jx_type_name(a), jx_type_name(b));
}

static bool is_num(struct jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double to_f(struct jv v) { return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b; }
/* The integer of an int or bool (0 for a float: callers use it only when neither side is a
 * float; reading u.b of a float was undefined behaviour, found by fuzz_jinja). */
static int64_t to_i(struct jv v) { return v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? v.u.b : 0; }

static bool concat(struct jx_render *r, const struct jnode *at, struct jv a, struct jv b, struct jv *out) {
  struct jx_buf buf;
  jx_buf_init(&buf, r->limits.max_output_bytes);
  bool ok = jx_str_append(&buf, a) && jx_str_append(&buf, b);
  if (ok) *out = jx_mkstr(&r->arena, buf.data ? buf.data : "", buf.len, &ok);
  else if (buf.overflow) jx_fail(r, at, LLB_STATUS_TOO_LARGE, "string longer than %zu bytes", buf.limit);
  jx_buf_free(&buf);
  return ok || (r->err ? false : jx_oom(r, at));
}

/* Markup + str (or str + Markup): markupsafe escapes the plain side. */
static bool markup_add(struct jx_render *r, const struct jnode *at, struct jv a, struct jv b, struct jv *out) {
  struct jx_buf buf;
  jx_buf_init(&buf, r->limits.max_output_bytes);
  for (int side = 0; side < 2; side++) {
    const struct jstr *s = side ? b.u.s : a.u.s;
    for (size_t i = 0; i < s->len; i++) {
      char c = s->data[i];
      const char *e = s->markup ? NULL : c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                    : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
      if (e) jx_buf_puts(&buf, e);
      else jx_buf_put(&buf, &c, 1);
    }
  }
  bool ok = !buf.overflow;
  if (ok) *out = jx_mkstr(&r->arena, buf.data ? buf.data : "", buf.len, &ok);
  jx_buf_free(&buf);
  if (!ok) return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "string longer than %zu bytes", buf.limit);
  out->u.s->markup = true;
  return true;
}

static bool repeat(struct jx_render *r, const struct jnode *at, struct jv seq, int64_t times, struct jv *out) {
  if (times < 0) times = 0;
  size_t unit = seq.kind == JV_STR ? seq.u.s->len : seq.u.l->len * sizeof(struct jv);
  if (unit && (uint64_t)times > r->limits.max_memory_bytes / unit)
    return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "repetition larger than the memory bound");
  bool ok = true;
  if (seq.kind == JV_STR) {
    struct jstr *s = jx_alloc(&r->arena, sizeof(*s) + unit * (size_t)times + 1);
    if (!s) return jx_oom(r, at);
    for (int64_t k = 0; k < times; k++) memcpy(s->data + unit * (size_t)k, seq.u.s->data, unit);
    s->len = unit * (size_t)times;
    out->kind = JV_STR;
    out->u.s = s;
    return true;
  }
  struct jlist *l = jx_list_new(&r->arena, seq.u.l->len * (size_t)times);
  for (int64_t k = 0; l && ok && k < times; k++)
    for (size_t i = 0; ok && i < seq.u.l->len; i++) ok = jx_list_push(&r->arena, l, seq.u.l->items[i]);
  if (!l || !ok) return jx_oom(r, at);
  out->kind = JV_LIST;
  out->u.l = l;
  return true;
}

bool jx_binop(struct jx_render *r, const struct jnode *at, int op, struct jv a, struct jv b, struct jv *out) {
  static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
  if (op == JOP_CONCAT) return concat(r, at, a, b, out);
  if (op == JOP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
    if (a.u.s->markup != b.u.s->markup) return markup_add(r, at, a, b, out);
    if (!concat(r, at, a, b, out)) return false;
    out->u.s->markup = a.u.s->markup;
    return true;
  }
  if (op == JOP_ADD && a.kind == JV_LIST && b.kind == JV_LIST) {
    struct jlist *l = jx_list_new(&r->arena, a.u.l->len + b.u.l->len);
    bool ok = l != NULL;
    for (size_t i = 0; ok && i < a.u.l->len; i++) ok = jx_list_push(&r->arena, l, a.u.l->items[i]);
    for (size_t i = 0; ok && i < b.u.l->len; i++) ok = jx_list_push(&r->arena, l, b.u.l->items[i]);
    if (!ok) return jx_oom(r, at);
    l->is_tuple = a.u.l->is_tuple;
    out->kind = JV_LIST;
    out->u.l = l;
    return true;
  }
  if (op == JOP_MUL && (a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
    return repeat(r, at, a, to_i(b), out);
  if (op == JOP_MUL && (b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
    return repeat(r, at, b, to_i(a), out);
  if (!is_num(a) || !is_num(b)) return type_error(r, at, names[op], a, b);
  bool ints = a.kind != JV_FLOAT && b.kind != JV_FLOAT;
  int64_t x = to_i(a), y = to_i(b), z;
  double fx = to_f(a), fy = to_f(b);
  if ((op == JOP_DIV || op == JOP_FLOORDIV || op == JOP_MOD) && (ints ? y == 0 : fy == 0.0))
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "division by zero");
  switch (op) {
  case JOP_ADD:
    if (ints && !__builtin_add_overflow(x, y, &z)) { *out = jv_int(z); return true; }
    *out = jv_float(fx + fy); break;
  case JOP_SUB:
    if (ints && !__builtin_sub_overflow(x, y, &z)) { *out = jv_int(z); return true; }
    *out = jv_float(fx - fy); break;
  case JOP_MUL:
    if (ints && !__builtin_mul_overflow(x, y, &z)) { *out = jv_int(z); return true; }
    *out = jv_float(fx * fy); break;
  case JOP_DIV: *out = jv_float(fx / fy); break;
  case JOP_FLOORDIV:
    if (ints && !(x == INT64_MIN && y == -1)) {
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
      *out = jv_int(q);
    } else {
      *out = jv_float(floor(fx / fy));
    }
    break;
  case JOP_MOD:
    if (ints && !(x == INT64_MIN && y == -1)) {
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      *out = jv_int(m);
    } else {
      double m = fmod(fx, fy);
      if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
      *out = jv_float(m);
    }
    break;
  case JOP_POW:
    if (ints && y >= 0) {
      int64_t p = 1;
      bool over = false;
      for (int64_t k = 0; k < y && !over && p != 0 && !(p == 1 && (x == 1)); k++) over = __builtin_mul_overflow(p, x, &p);
      if (!over) { *out = jv_int(p); return true; }
    }
    *out = jv_float(pow(fx, fy)); break;
  default: return type_error(r, at, "?", a, b);
  }
  return true;
}

static bool contains(struct jx_render *r, const struct jnode *at, struct jv item, struct jv seq, bool *out) {
  switch (seq.kind) {
  case JV_UNDEF: *out = false; return true;
  case JV_STR:
    if (item.kind != JV_STR)
      return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "'in <string>' requires string as left operand, not %s", jx_type_name(item));
    *out = item.u.s->len == 0 || memmem(seq.u.s->data, seq.u.s->len, item.u.s->data, item.u.s->len) != NULL;
    return true;
  case JV_LIST:
    *out = false;
    for (size_t i = 0; i < seq.u.l->len && !*out; i++) *out = jx_equal(item, seq.u.l->items[i]);
    return true;
  case JV_DICT:
    *out = jx_dict_get(seq.u.d, item) != NULL;
    return true;
  default:
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "argument of type '%s' is not iterable", jx_type_name(seq));
  }
}

bool jx_compare_op(struct jx_render *r, const struct jnode *at, int op, struct jv a, struct jv b, struct jv *out) {
  static const char *const names[] = {"==", "!=", "<", "<=", ">", ">="};
  bool res = false;
  if (op == JOP_EQ || op == JOP_NE) {
    res = jx_equal(a, b) == (op == JOP_EQ);
  } else if (op == JOP_IN || op == JOP_NOTIN) {
    if (!contains(r, at, a, b, &res)) return false;
    res = res == (op == JOP_IN);
  } else {
    bool ok;
    int c = jx_compare(a, b, &ok);
    if (!ok) {
      if (a.kind == JV_UNDEF) return jx_undefined_error(r, at, a);
      if (b.kind == JV_UNDEF) return jx_undefined_error(r, at, b);
      return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "'%s' not supported between instances of '%s' and '%s'",
                     names[op - JOP_EQ], jx_type_name(a), jx_type_name(b));
    }
    res = op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0;
  }
  *out = jv_bool(res);
  return true;
}


bool jx_unop(struct jx_render *r, const struct jnode *at, int op, struct jv a, struct jv *out) {
  if (!is_num(a)) return type_error(r, at, op == JOP_NEG ? "unary -" : "unary +", a, jv_none());
  if (op == JOP_POS) *out = a.kind == JV_BOOL ? jv_int(a.u.b) : a;
  else if (a.kind == JV_FLOAT) *out = jv_float(-a.u.f);
  else *out = to_i(a) == INT64_MIN ? jv_float(9223372036854775808.0) : jv_int(-to_i(a));
  return true;
}

/* Python slice indices for a sequence of len n. */
static bool slice_bounds(struct jx_render *r, const struct jnode *at, struct jv *v, size_t n,
                         int64_t *start, int64_t *stop, int64_t *step) {
  for (int k = 0; k < 3; k++)
    if (v[k].kind != JV_NONE && v[k].kind != JV_UNDEF && v[k].kind != JV_INT)
      return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "slice indices must be integers or None");
  *step = v[2].kind == JV_INT ? v[2].u.i : 1;
  if (*step == 0) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "slice step cannot be zero");
  int64_t len = (int64_t)n, lo = *step < 0 ? -1 : 0, hi = *step < 0 ? len - 1 : len;
  int64_t *io[2] = {start, stop};
  for (int k = 0; k < 2; k++) {
    if (v[k].kind != JV_INT) { *io[k] = (k == 0) == (*step > 0) ? lo : hi; continue; }
    int64_t x = v[k].u.i;
    if (x < 0) x += len;
    if (x < lo) x = lo;
    if (x > hi) x = hi;
    *io[k] = x;
  }
  return true;
}

bool jx_slice(struct jx_render *r, const struct jnode *e, struct jv obj, struct jv v[3], struct jv *out) {
  if (obj.kind != JV_LIST && obj.kind != JV_STR) {
    if (obj.kind == JV_UNDEF) return jx_undefined_error(r, e, obj);
    return jx_fail(r, e, LLB_STATUS_INVALID_ARGUMENT, "'%s' object is not subscriptable", jx_type_name(obj));
  }
  bool is_str = obj.kind == JV_STR;
  size_t n = is_str ? jx_utf8_len(obj.u.s->data, obj.u.s->len) : obj.u.l->len;
  int64_t start = 0, stop = 0, step = 1;
  if (!slice_bounds(r, e, v, n, &start, &stop, &step)) return false;
  struct jlist *l = jx_list_new(&r->arena, 0);
  struct jx_buf b;
  jx_buf_init(&b, r->limits.max_output_bytes);
  /* a string's code point offsets, found once: one scan, not one per index (a slice of a long
   * string took O(n^2): 56 s for 55k code points, found by fuzz_jinja) */
  size_t *offs = is_str ? malloc((n + 1) * sizeof *offs) : NULL;
  bool ok = l != NULL && (!is_str || offs != NULL);
  if (ok && is_str) {
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
      uint32_t cp;
      offs[k] = at;
      at += jx_utf8_next(obj.u.s->data + at, obj.u.s->len - at, &cp);
    }
    offs[n] = at;
  }
  for (int64_t i = start; ok && (step > 0 ? i < stop : i > stop); i += step) {
    if (is_str) {
      ok = jx_buf_put(&b, obj.u.s->data + offs[i], offs[i + 1] - offs[i]);
    } else {
      ok = jx_list_push(&r->arena, l, obj.u.l->items[i]);
    }
  }
  if (ok && is_str) *out = jx_mkstr(&r->arena, b.data ? b.data : "", b.len, &ok);
  else if (ok) { out->kind = JV_LIST; out->u.l = l; l->is_tuple = obj.u.l->is_tuple; }
  jx_buf_free(&b);
  free(offs);
  return ok || jx_oom(r, e);
}
