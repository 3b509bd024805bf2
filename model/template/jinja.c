/* The public Jinja API (model/template/jinja.h): a template is lexed (jinja_lex.c) and parsed
 * (jinja_parse.c) once into its own arena; each render gets its own state, arena, root
 * scope and bounded output and runs the tree through the evaluator (jinja_eval.c). */
#include <stdlib.h>
#include <string.h>

#include "model/template/jinja_internal.h"

struct jinja_template {
  struct jx_arena arena;
  struct jnode *body;
};

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
  bool ok = (r->root = jx_scope_new(r, NULL)) != NULL;
  if (!ok) jx_oom(r, NULL);
  if (ok && context) {
    struct jv ctx;
    ok = jx_from_json(&r->arena, context, &ctx, 0);
    if (ok) r->root->vars = ctx.u.d;
    else jx_fail(r, NULL, r->arena.exhausted ? LLB_STATUS_TOO_LARGE : LLB_STATUS_INVALID_ARGUMENT,
                 "context too large or nested deeper than 128");
  }
  ok = ok && jx_exec_body(r, r->root, t->body);
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
