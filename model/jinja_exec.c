/* Jinja statements: output, if, for (jinja2's loop object and loop scope), set, macros and
 * call blocks, filter blocks, break/continue; and the public template API
 * (model/jinja.h). Bounds: steps (loop iterations + macro calls), macro call depth, output
 * and memory. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/jinja_internal.h"

struct jinja_template {
  struct jx_arena arena;
  struct jnode *body;
};

static bool exec_body(struct jx_render *r, struct jscope *sc, const struct jnode *body);

static bool step(struct jx_render *r, const struct jnode *at) {
  if (++r->steps > r->limits.max_steps)
    return jx_fail(r, at, LLB_STATUS_TOO_LARGE, "template ran more than %llu loop iterations and macro calls",
                   (unsigned long long)r->limits.max_steps);
  return true;
}

static struct jscope *scope_new(struct jx_render *r, struct jscope *parent) {
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
  bool ok = exec_body(r, sc, body);
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
    if (n->c && !jx_eval_filter_chain(r, sc, n->c, v, &v)) return false;
  } else if (!jx_eval(r, sc, n->a, &v)) {
    return false;
  }
  if (!n->d) return assign(r, sc, n, v);
  struct jv ns;
  if (!jx_eval(r, sc, n->d, &ns)) return false;
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
  if (!jx_eval(r, sc, n->a, &it) || !jx_iterate(r, n->a, it, &src)) return false;
  struct jscope *ls = scope_new(r, sc);
  struct jdict *loop = jx_dict_new(&r->arena);
  if (!ls || !loop) return jx_oom(r, n);
  loop->special = JDICT_LOOP;
  items = src;
  if (n->d) { /* `for x in xs if cond`: filtered before loop.length is known, as jinja2 */
    if (!(items = jx_list_new(&r->arena, 0))) return jx_oom(r, n);
    for (size_t i = 0; i < src->len; i++) {
      struct jv c;
      if (!step(r, n) || !assign(r, ls, n, src->items[i]) || !jx_eval(r, ls, n->d, &c)) return false;
      if (jx_truthy(c) && !jx_list_push(&r->arena, items, src->items[i])) return jx_oom(r, n);
    }
  }
  struct jv loopv = {.kind = JV_DICT, .u.d = loop};
  if (!jx_dict_set_cstr(&r->arena, ls->vars, "loop", loopv)) return jx_oom(r, n);
  for (size_t i = 0; i < items->len; i++) {
    if (!step(r, n) || !assign(r, ls, n, items->items[i])) return false;
    if (!set_loop(r, loop, items, i)) return jx_oom(r, n);
    if (!exec_body(r, ls, n->b)) return false;
    int ctl = r->loop_ctl;
    r->loop_ctl = 0;
    if (ctl == 1) break;
  }
  if (items->len == 0 && n->c) return exec_body(r, sc, n->c);
  return true;
}

static bool exec_stmt(struct jx_render *r, struct jscope *sc, const struct jnode *n) {
  struct jv v;
  switch (n->kind) {
  case JN_BODY: return exec_body(r, sc, n);
  case JN_TEXT: return emit(r, n, n->lit);
  case JN_OUTPUT: return jx_eval(r, sc, n->a, &v) && emit(r, n, v);
  case JN_IF:
    if (!jx_eval(r, sc, n->a, &v)) return false;
    if (jx_truthy(v)) return exec_body(r, sc, n->b);
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
    bool ok = jx_eval(r, sc, n->a, &v);
    r->pending_caller = NULL;
    return ok && emit(r, n, v);
  }
  case JN_FILTER_BLOCK:
    return capture(r, sc, n->b, &v) && jx_eval_filter_chain(r, sc, n->a, v, &v) && emit(r, n, v);
  case JN_BREAK: r->loop_ctl = 1; return true;
  case JN_CONTINUE: r->loop_ctl = 2; return true;
  default: return jx_fail(r, n, LLB_STATUS_INTERNAL, "not a statement");
  }
}

static bool exec_body(struct jx_render *r, struct jscope *sc, const struct jnode *body) {
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
  struct jscope *frame = scope_new(r, fn->scope);
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
    if (!have && m->defaults[p] && !jx_eval(r, frame, m->defaults[p], &v)) return false;
    if (!jx_dict_set_cstr(&r->arena, frame->vars, m->kw_names[p], v)) return jx_oom(r, at);
  }
  r->call_depth++;
  bool ok = capture(r, frame, m->b, out);
  r->call_depth--;
  r->loop_ctl = 0;
  return ok;
}

bool jx_call(struct jx_render *r, struct jscope *sc, const struct jnode *at, struct jv fn, struct jv *args,
             size_t nargs, const char **kw, struct jv *kwv, size_t nkw, struct jv *out) {
  (void)sc;
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

/* ---- public API ---- */

void jinja_render_opts_default(struct jinja_render_opts *o) {
  memset(o, 0, sizeof(*o));
  o->limits.max_output_bytes = 4u << 20;
  o->limits.max_memory_bytes = 256u << 20;
  o->limits.max_steps = 1000000;
  o->limits.max_call_depth = 64;
}

llb_status jinja_template_create(const char *src, size_t len, struct jinja_template **out) {
  if (!src || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "jinja_template_create: NULL argument");
  *out = NULL;
  if (len > JINJA_MAX_SOURCE_BYTES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "jinja template of %zu bytes; at most %d", len, JINJA_MAX_SOURCE_BYTES);
  struct jinja_template *t = calloc(1, sizeof(*t));
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja template");
  /* tokens and nodes take a few dozen bytes per source byte at most */
  jx_arena_init(&t->arena, 64 * (size_t)JINJA_MAX_SOURCE_BYTES);
  struct jtok *toks;
  size_t n;
  llb_status st = jx_lex(&t->arena, src, len, &toks, &n);
  if (st == LLB_STATUS_OK) st = jx_parse(&t->arena, toks, n, &t->body);
  if (st != LLB_STATUS_OK) {
    jinja_template_destroy(t);
    return LLB_UPDATE_ERR_STACK(st);
  }
  *out = t;
  return LLB_STATUS_OK;
}

void jinja_template_destroy(struct jinja_template *t) {
  if (!t) return;
  jx_arena_free(&t->arena);
  free(t);
}

llb_status jinja_template_render(const struct jinja_template *t, const json_t *context,
                                 const struct jinja_render_opts *opts, char **text_out, size_t *len_out) {
  if (!t || !text_out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "jinja_template_render: NULL argument");
  if (context && !json_is_object(context))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "jinja_template_render: context is not a JSON object");
  struct jinja_render_opts dflt;
  if (!opts) {
    jinja_render_opts_default(&dflt);
    opts = &dflt;
  }
  struct jx_render *r = calloc(1, sizeof(*r));
  if (!r) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja render");
  struct jx_buf out;
  r->limits = opts->limits;
  r->now_unix_s = opts->now_unix_s;
  jx_arena_init(&r->arena, opts->limits.max_memory_bytes);
  jx_buf_init(&out, opts->limits.max_output_bytes);
  r->out = &out;
  bool ok = (r->root = scope_new(r, NULL)) != NULL;
  if (!ok) jx_oom(r, NULL);
  if (ok && context) {
    struct jv ctx;
    ok = jx_from_json(&r->arena, context, &ctx, 0);
    if (ok) r->root->vars = ctx.u.d;
    else jx_fail(r, NULL, r->arena.exhausted ? LLB_STATUS_TOO_LARGE : LLB_STATUS_INVALID_ARGUMENT,
                 "context too large or nested deeper than 128");
  }
  ok = ok && exec_body(r, r->root, t->body);
  llb_status st = LLB_STATUS_OK;
  if (ok) {
    *text_out = out.data ? out.data : strdup("");
    if (len_out) *len_out = out.len;
    if (!*text_out) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja render");
  } else {
    st = LLB_ERRF(r->err ? r->err : LLB_STATUS_INTERNAL, "jinja template %s", r->err_msg);
    jx_buf_free(&out);
  }
  jx_arena_free(&r->arena);
  free(r);
  return st;
}
