/* Jinja evaluator: walks the syntax tree with jinja2's semantics. Expressions (names and
 * for-loop scopes, calls, filters, tests, the operators of jinja_ops.c, the sandbox's
 * attribute lookup of jinja_methods.c) and statements (output, if, for with jinja2's loop
 * object, set, macros and call blocks, filter blocks, break/continue) are one recursion: a
 * macro call is an expression whose body is statements, and statements evaluate
 * expressions; so they live in this one file, and what they reach (jinja_ops.c,
 * jinja_filters.c, jinja_methods.c, jinja_value.c) never calls back. Bounds: steps (loop
 * iterations + macro calls), macro call depth, output and memory. jinja.c runs a template
 * through jx_exec_body. */
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja_internal.h"

static bool eval_expr(struct jx_render *r, struct jscope *sc, const struct jnode *e, struct jv *out);
static bool call_value(struct jx_render *r, const struct jnode *at, struct jv fn, struct jv *args, size_t nargs,
                       const char **kw, struct jv *kwv, size_t nkw, struct jv *out);

/* ---- expressions ---- */

/* Evaluates args of a call/filter/test node: positional into pos, keywords into kwv. */
static bool eval_args(struct jx_render *r, struct jscope *sc, const struct jnode *e, struct jv **pos,
                      size_t *npos, struct jv **kwv) {
  struct jv *v = jx_alloc(&r->arena, (e->n_items + 1) * sizeof(struct jv));
  if (!v) return jx_oom(r, e);
  for (size_t i = 0; i < e->n_items; i++)
    if (!eval_expr(r, sc, e->items[i], &v[i])) return false;
  *pos = v;
  *npos = e->n_items - e->n_kw;
  *kwv = v + *npos;
  return true;
}

static bool eval_filter(struct jx_render *r, struct jscope *sc, const struct jnode *e, const struct jv *input, struct jv *out) {
  struct jv v, *pos = NULL, *kwv = NULL; /* set by eval_args before any use */
  size_t npos = 0;
  if (e->a) {
    if (!(e->a->kind == JN_FILTER && input ? eval_filter(r, sc, e->a, input, &v) : eval_expr(r, sc, e->a, &v))) return false;
  } else {
    v = *input;
  }
  if (!eval_args(r, sc, e, &pos, &npos, &kwv)) return false;
  return jx_apply_filter(r, e, e->name, v, pos, npos, e->kw_names, kwv, e->n_kw, out);
}

/* Applies a filter chain (a JN_FILTER whose innermost operand is NULL) to input. */
static bool eval_filter_chain(struct jx_render *r, struct jscope *sc, const struct jnode *chain, struct jv input, struct jv *out) {
  return eval_filter(r, sc, chain, &input, out);
}

static bool lookup(struct jx_render *r, struct jscope *sc, const struct jnode *e, struct jv *out) {
  size_t n = strlen(e->name);
  for (struct jscope *s = sc; s; s = s->parent) {
    struct jv *v = jx_dict_get_cstr(s->vars, e->name, n);
    if (v) { *out = *v; return true; }
  }
  if (jx_global_lookup(r, e->name, out)) return r->err == LLB_STATUS_OK;
  *out = jx_undef_msg(r, "'%s' is undefined%s", e->name, "");
  return true;
}

static bool eval_seq(struct jx_render *r, struct jscope *sc, const struct jnode *e, struct jv *out) {
  if (e->kind == JN_DICT) {
    struct jdict *d = jx_dict_new(&r->arena);
    if (!d) return jx_oom(r, e);
    for (size_t i = 0; i + 1 < e->n_items; i += 2) {
      struct jv k, v;
      if (!eval_expr(r, sc, e->items[i], &k) || !eval_expr(r, sc, e->items[i + 1], &v)) return false;
      if (!jx_dict_set(&r->arena, d, k, v)) return jx_oom(r, e);
    }
    out->kind = JV_DICT;
    out->u.d = d;
    return true;
  }
  struct jlist *l = jx_list_new(&r->arena, e->n_items);
  if (!l) return jx_oom(r, e);
  for (size_t i = 0; i < e->n_items; i++) {
    struct jv v;
    if (!eval_expr(r, sc, e->items[i], &v)) return false;
    jx_list_push(&r->arena, l, v);
  }
  l->is_tuple = e->kind == JN_TUPLE;
  out->kind = JV_LIST;
  out->u.l = l;
  return true;
}

static bool eval_slice(struct jx_render *r, struct jscope *sc, const struct jnode *e, struct jv *out) {
  struct jv obj, v[3] = {jv_none(), jv_none(), jv_none()};
  const struct jnode *parts[3] = {e->b, e->c, e->d};
  if (!eval_expr(r, sc, e->a, &obj)) return false;
  for (int k = 0; k < 3; k++)
    if (parts[k] && !eval_expr(r, sc, parts[k], &v[k])) return false;
  return jx_slice(r, e, obj, v, out);
}

static bool eval_expr(struct jx_render *r, struct jscope *sc, const struct jnode *e, struct jv *out) {
  struct jv a, b, *pos = NULL, *kwv = NULL; /* set by eval_args before any use */
  size_t npos = 0;
  bool res;
  switch (e->kind) {
  case JN_LITERAL: *out = e->lit; return true;
  case JN_NAME: return lookup(r, sc, e, out);
  case JN_LIST: case JN_TUPLE: case JN_DICT: return eval_seq(r, sc, e, out);
  case JN_GETATTR: return eval_expr(r, sc, e->a, &a) && jx_getattr(r, e, a, e->name, out);
  case JN_GETITEM:
    return eval_expr(r, sc, e->a, &a) && eval_expr(r, sc, e->b, &b) && jx_getitem(r, e, a, b, out);
  case JN_SLICE: return eval_slice(r, sc, e, out);
  case JN_CALL:
    if (!eval_expr(r, sc, e->a, &a) || !eval_args(r, sc, e, &pos, &npos, &kwv)) return false;
    return call_value(r, e, a, pos, npos, e->kw_names, kwv, e->n_kw, out);
  case JN_FILTER: return eval_filter(r, sc, e, NULL, out);
  case JN_TEST:
    if (!eval_expr(r, sc, e->a, &a) || !eval_args(r, sc, e, &pos, &npos, &kwv)) return false;
    if (!jx_apply_test(r, e, e->name, a, pos, npos, &res)) return false;
    *out = jv_bool(res != (e->op == 1));
    return true;
  case JN_UNARY: return eval_expr(r, sc, e->a, &a) && jx_unop(r, e, e->op, a, out);
  case JN_BINARY:
    return eval_expr(r, sc, e->a, &a) && eval_expr(r, sc, e->b, &b) && jx_binop(r, e, e->op, a, b, out);
  case JN_COMPARE:
    return eval_expr(r, sc, e->a, &a) && eval_expr(r, sc, e->b, &b) && jx_compare_op(r, e, e->op, a, b, out);
  case JN_AND: /* Python's: the deciding operand, not a bool */
    if (!eval_expr(r, sc, e->a, &a)) return false;
    if (!jx_truthy(a)) { *out = a; return true; }
    return eval_expr(r, sc, e->b, out);
  case JN_OR:
    if (!eval_expr(r, sc, e->a, &a)) return false;
    if (jx_truthy(a)) { *out = a; return true; }
    return eval_expr(r, sc, e->b, out);
  case JN_NOT:
    if (!eval_expr(r, sc, e->a, &a)) return false;
    *out = jv_bool(!jx_truthy(a));
    return true;
  case JN_COND:
    if (!eval_expr(r, sc, e->a, &a)) return false;
    if (jx_truthy(a)) return eval_expr(r, sc, e->b, out);
    if (e->c) return eval_expr(r, sc, e->c, out);
    *out = jx_undef_msg(r, "the inline if-expression on line %s evaluated to false and no else section was defined.%s", "?", "");
    return true;
  default:
    return jx_fail(r, e, LLB_STATUS_INTERNAL, "not an expression");
  }
}

/* ---- statements ---- */

static bool step(struct jx_render *r, const struct jnode *at) {
  if (++r->steps > r->limits.max_steps)
    return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "template ran more than %llu loop iterations and macro calls",
                   (unsigned long long)r->limits.max_steps);
  return true;
}

struct jscope *jx_scope_new(struct jx_render *r, struct jscope *parent) {
  struct jscope *s = jx_alloc(&r->arena, sizeof(*s));
  if (!s || !(s->vars = jx_dict_new(&r->arena))) return NULL;
  s->parent = parent;
  return s;
}

static bool emit(struct jx_render *r, const struct jnode *at, struct jv v) {
  if (jx_str_append(r->out, v)) return true;
  if (r->out->overflow)
    return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "output larger than %zu bytes", r->out->limit);
  return jx_oom(r, at);
}

/* Renders body into a new string (block set, filter block, macro call). */
static bool capture(struct jx_render *r, struct jscope *sc, const struct jnode *body, struct jv *out) {
  struct jx_buf buf, *saved = r->out;
  jx_buf_init(&buf, r->limits.max_output_bytes);
  r->out = &buf;
  bool ok = jx_exec_body(r, sc, body);
  r->out = saved;
  if (ok) {
    *out = jx_mkstr(&r->arena, buf.data ? buf.data : "", buf.len, &ok);
    if (!ok) jx_oom(r, body);
  }
  jx_buf_free(&buf);
  return ok;
}

static bool assign(struct jx_render *r, struct jscope *sc, const struct jnode *n, struct jv v) {
  if (n->n_kw == 1) {
    if (!jx_dict_set_cstr(&r->arena, sc->vars, n->kw_names[0], v)) return jx_oom(r, n);
    return true;
  }
  if (v.kind != JV_LIST && v.kind != JV_STR && v.kind != JV_DICT)
    return jx_fail(r, n, LLB_STATUS_INVALID_ARGUMENT, "cannot unpack non-iterable %s object", jx_type_name(v));
  struct jlist *l;
  if (!jx_iterate(r, n, v, &l)) return false;
  if (l->len != n->n_kw)
    return jx_fail(r, n, LLB_STATUS_INVALID_ARGUMENT, "cannot unpack %zu values into %zu names", l->len, n->n_kw);
  for (size_t i = 0; i < n->n_kw; i++)
    if (!jx_dict_set_cstr(&r->arena, sc->vars, n->kw_names[i], l->items[i])) return jx_oom(r, n);
  return true;
}

static bool exec_set(struct jx_render *r, struct jscope *sc, const struct jnode *n) {
  struct jv v;
  if (n->kind == JN_SET_BLOCK) {
    if (!capture(r, sc, n->b, &v)) return false;
    if (n->c && !eval_filter_chain(r, sc, n->c, v, &v)) return false;
  } else if (!eval_expr(r, sc, n->a, &v)) {
    return false;
  }
  if (!n->d) return assign(r, sc, n, v);
  struct jv ns;
  if (!eval_expr(r, sc, n->d, &ns)) return false;
  if (ns.kind != JV_DICT || ns.u.d->special != JDICT_NAMESPACE)
    return jx_fail(r, n, LLB_STATUS_INVALID_ARGUMENT, "can't assign attribute on non-namespace object");
  if (!jx_dict_set_cstr(&r->arena, ns.u.d, n->kw_names[0], v)) return jx_oom(r, n);
  return true;
}

static bool set_loop(struct jx_render *r, struct jdict *loop, struct jlist *items, size_t i) {
  size_t len = items->len;
  struct jv none = jv_undef();
  return jx_dict_set_cstr(&r->arena, loop, "index", jv_int((int64_t)i + 1)) &&
         jx_dict_set_cstr(&r->arena, loop, "index0", jv_int((int64_t)i)) &&
         jx_dict_set_cstr(&r->arena, loop, "revindex", jv_int((int64_t)(len - i))) &&
         jx_dict_set_cstr(&r->arena, loop, "revindex0", jv_int((int64_t)(len - i - 1))) &&
         jx_dict_set_cstr(&r->arena, loop, "first", jv_bool(i == 0)) &&
         jx_dict_set_cstr(&r->arena, loop, "last", jv_bool(i + 1 == len)) &&
         jx_dict_set_cstr(&r->arena, loop, "length", jv_int((int64_t)len)) &&
         jx_dict_set_cstr(&r->arena, loop, "depth", jv_int(1)) &&
         jx_dict_set_cstr(&r->arena, loop, "depth0", jv_int(0)) &&
         jx_dict_set_cstr(&r->arena, loop, "previtem", i > 0 ? items->items[i - 1] : none) &&
         jx_dict_set_cstr(&r->arena, loop, "nextitem", i + 1 < len ? items->items[i + 1] : none);
}

static bool exec_for(struct jx_render *r, struct jscope *sc, const struct jnode *n) {
  struct jv it;
  struct jlist *src, *items;
  if (!eval_expr(r, sc, n->a, &it) || !jx_iterate(r, n->a, it, &src)) return false;
  struct jscope *ls = jx_scope_new(r, sc);
  struct jdict *loop = jx_dict_new(&r->arena);
  if (!ls || !loop) return jx_oom(r, n);
  loop->special = JDICT_LOOP;
  items = src;
  if (n->d) { /* `for x in xs if cond`: filtered before loop.length is known, as jinja2 */
    if (!(items = jx_list_new(&r->arena, 0))) return jx_oom(r, n);
    for (size_t i = 0; i < src->len; i++) {
      struct jv c;
      if (!step(r, n) || !assign(r, ls, n, src->items[i]) || !eval_expr(r, ls, n->d, &c)) return false;
      if (jx_truthy(c) && !jx_list_push(&r->arena, items, src->items[i])) return jx_oom(r, n);
    }
  }
  struct jv loopv = {.kind = JV_DICT, .u.d = loop};
  if (!jx_dict_set_cstr(&r->arena, ls->vars, "loop", loopv)) return jx_oom(r, n);
  for (size_t i = 0; i < items->len; i++) {
    if (!step(r, n) || !assign(r, ls, n, items->items[i])) return false;
    if (!set_loop(r, loop, items, i)) return jx_oom(r, n);
    if (!jx_exec_body(r, ls, n->b)) return false;
    int ctl = r->loop_ctl;
    r->loop_ctl = 0;
    if (ctl == 1) break;
  }
  if (items->len == 0 && n->c) return jx_exec_body(r, sc, n->c);
  return true;
}

static bool exec_stmt(struct jx_render *r, struct jscope *sc, const struct jnode *n) {
  struct jv v;
  switch (n->kind) {
  case JN_BODY: return jx_exec_body(r, sc, n);
  case JN_TEXT: return emit(r, n, n->lit);
  case JN_OUTPUT: return eval_expr(r, sc, n->a, &v) && emit(r, n, v);
  case JN_IF:
    if (!eval_expr(r, sc, n->a, &v)) return false;
    if (jx_truthy(v)) return jx_exec_body(r, sc, n->b);
    return n->c ? exec_stmt(r, sc, n->c) : true;
  case JN_FOR: return exec_for(r, sc, n);
  case JN_SET: case JN_SET_BLOCK: return exec_set(r, sc, n);
  case JN_MACRO: {
    struct jfunc *fn = jx_alloc(&r->arena, sizeof(*fn));
    if (!fn) return jx_oom(r, n);
    fn->kind = JF_MACRO;
    fn->name = n->name;
    fn->node = n;
    fn->scope = sc;
    struct jv f = {.kind = JV_FUNC, .u.fn = fn};
    return jx_dict_set_cstr(&r->arena, sc->vars, n->name, f) || jx_oom(r, n);
  }
  case JN_CALL_BLOCK: {
    struct jfunc *fn = jx_alloc(&r->arena, sizeof(*fn));
    if (!fn) return jx_oom(r, n);
    fn->kind = JF_MACRO;
    fn->name = "caller";
    fn->node = n;
    fn->scope = sc;
    r->pending_caller = fn;
    bool ok = eval_expr(r, sc, n->a, &v);
    r->pending_caller = NULL;
    return ok && emit(r, n, v);
  }
  case JN_FILTER_BLOCK:
    return capture(r, sc, n->b, &v) && eval_filter_chain(r, sc, n->a, v, &v) && emit(r, n, v);
  case JN_BREAK: r->loop_ctl = 1; return true;
  case JN_CONTINUE: r->loop_ctl = 2; return true;
  default: return jx_fail(r, n, LLB_STATUS_INTERNAL, "not a statement");
  }
}

bool jx_exec_body(struct jx_render *r, struct jscope *sc, const struct jnode *body) {
  for (size_t i = 0; i < body->n_items && !r->loop_ctl; i++)
    if (!exec_stmt(r, sc, body->items[i])) return false;
  return true;
}

/* Calls a macro (or a call block's caller): parameters bound positionally, then by
 * keyword, then to their defaults (evaluated in the new frame, so they may use earlier
 * parameters); missing ones are undefined, as in jinja2. */
static bool call_macro(struct jx_render *r, const struct jnode *at, struct jfunc *fn, struct jv *args,
                       size_t nargs, const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  const struct jnode *m = fn->node;
  if (!step(r, at)) return false;
  if (r->call_depth >= r->limits.max_call_depth)
    return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "macro calls nested deeper than %d", r->limits.max_call_depth);
  if (nargs > m->n_kw)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "macro '%s' takes not more than %zu argument(s)", fn->name, m->n_kw);
  struct jscope *frame = jx_scope_new(r, fn->scope);
  if (!frame) return jx_oom(r, at);
  struct jfunc *caller = r->pending_caller;
  r->pending_caller = NULL;
  if (caller) {
    struct jv c = {.kind = JV_FUNC, .u.fn = caller};
    if (!jx_dict_set_cstr(&r->arena, frame->vars, "caller", c)) return jx_oom(r, at);
  }
  for (size_t k = 0; k < nkw; k++) {
    size_t p = 0;
    while (p < m->n_kw && strcmp(m->kw_names[p], kw[k]) != 0) p++;
    if (p == m->n_kw)
      return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "macro '%s' takes no keyword argument '%s'", fn->name, kw[k]);
  }
  for (size_t p = 0; p < m->n_kw; p++) {
    struct jv v = jv_undef();
    bool have = p < nargs;
    if (have) v = args[p];
    for (size_t k = 0; k < nkw && !have; k++)
      if (strcmp(m->kw_names[p], kw[k]) == 0) { v = kwv[k]; have = true; }
    if (!have && m->defaults[p] && !eval_expr(r, frame, m->defaults[p], &v)) return false;
    if (!jx_dict_set_cstr(&r->arena, frame->vars, m->kw_names[p], v)) return jx_oom(r, at);
  }
  r->call_depth++;
  bool ok = capture(r, frame, m->b, out);
  r->call_depth--;
  r->loop_ctl = 0;
  return ok;
}

/* Calls a callable with positional args and keyword args (names kw[0..nkw)). */
static bool call_value(struct jx_render *r, const struct jnode *at, struct jv fn, struct jv *args, size_t nargs,
                       const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  if (fn.kind == JV_UNDEF) {
    if (fn.u.s) return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "%s", fn.u.s->data);
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "call of an undefined value");
  }
  if (fn.kind != JV_FUNC)
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "'%s' object is not callable", jx_type_name(fn));
  switch (fn.u.fn->kind) {
  case JF_MACRO: return call_macro(r, at, fn.u.fn, args, nargs, kw, kwv, nkw, out);
  case JF_GLOBAL: return jx_call_global(r, at, fn.u.fn, args, nargs, kw, kwv, nkw, out);
  case JF_METHOD: return jx_call_method(r, at, fn.u.fn, args, nargs, kw, kwv, nkw, out);
  case JF_UNSAFE:
    return jx_fail(r, at, LLB_STATUS_INVALID_ARGUMENT, "access to attribute '%s' of '%s' object is unsafe.",
                   fn.u.fn->name, jx_type_name(*fn.u.fn->self));
  }
  return false;
}
