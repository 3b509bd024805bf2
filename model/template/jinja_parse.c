/* Jinja parser: tokens to a syntax tree, by recursive descent following jinja2 3.1's
 * parser.py (its operator precedence: condexpr < or < and < not < compare < + - < ~ <
 * * / // % < ** < unary < postfix/filters/tests). Nesting is bounded. */
#include <string.h>

#include "model/template/jinja_internal.h"

enum { MAX_PARSE_DEPTH = 128 };

struct parser {
  struct jx_arena *a;
  const struct jtok *t;
  size_t n, i;
  int depth;
  llb_status err;
};

static const struct jtok *cur(struct parser *P) { return &P->t[P->i]; }
static const struct jtok *peek(struct parser *P, size_t k) {
  return P->i + k < P->n ? &P->t[P->i + k] : &P->t[P->n - 1];
}

static bool fail(struct parser *P, const struct jtok *at, const char *fmt, const char *arg) {
  if (P->err) return false;
  char msg[256];
  snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
  P->err = LLB_ERRF(LLB_STATUS_MALFORMED, "jinja template line %d col %d: %s", at->line, at->col, msg);
  return false;
}

static bool is_op(const struct jtok *t, const char *op) {
  return t->kind == JT_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}
static bool is_name(const struct jtok *t, const char *name) {
  return t->kind == JT_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}
static bool accept_op(struct parser *P, const char *op) {
  if (!is_op(cur(P), op)) return false;
  P->i++;
  return true;
}
static bool accept_name(struct parser *P, const char *name) {
  if (!is_name(cur(P), name)) return false;
  P->i++;
  return true;
}
static bool expect_op(struct parser *P, const char *op) {
  if (accept_op(P, op)) return true;
  return fail(P, cur(P), "expected '%s'", op);
}

static char *tok_str(struct parser *P, const struct jtok *t) {
  char *s = jx_alloc(P->a, t->len + 1);
  if (!s) { fail(P, t, "out of memory%s", NULL); P->err = LLB_STATUS_OUT_OF_MEMORY; return NULL; }
  memcpy(s, t->s, t->len);
  return s;
}

static struct jnode *node(struct parser *P, enum jn_kind k, const struct jtok *at) {
  struct jnode *n = jx_alloc(P->a, sizeof(*n));
  if (!n) {
    if (!P->err) P->err = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja parser");
    return NULL;
  }
  n->kind = k;
  n->line = at->line;
  n->col = at->col;
  return n;
}

/* Growable node list in the arena. */
struct nlist {
  struct jnode **items;
  const char **names;
  size_t n, cap;
};
static bool nl_push(struct parser *P, struct nlist *l, struct jnode *x, const char *name) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    struct jnode **items = jx_alloc(P->a, cap * sizeof(*items));
    const char **names = jx_alloc(P->a, cap * sizeof(*names));
    if (!items || !names) {
      if (!P->err) P->err = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja parser");
      return false;
    }
    if (l->n) {
      memcpy(items, l->items, l->n * sizeof(*items));
      memcpy(names, l->names, l->n * sizeof(*names));
    }
    l->items = items;
    l->names = names;
    l->cap = cap;
  }
  l->items[l->n] = x;
  l->names[l->n] = name;
  l->n++;
  return true;
}

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, bool with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *n);

static bool enter(struct parser *P) {
  if (++P->depth > MAX_PARSE_DEPTH) {
    if (!P->err)
      P->err = LLB_ERRF(LLB_STATUS_TOO_LARGE, "jinja template line %d col %d: nested deeper than %d",
                        cur(P)->line, cur(P)->col, MAX_PARSE_DEPTH);
    return false;
  }
  return true;
}

/* Call arguments after '(' : positional then name=value; fills items/kw of n. */
static bool parse_args(struct parser *P, struct jnode *n) {
  struct nlist pos = {0}, kw = {0};
  while (!accept_op(P, ")")) {
    if (pos.n + kw.n && !expect_op(P, ",")) return false;
    if (accept_op(P, ")")) break;
    if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), "=")) {
      const char *name = tok_str(P, cur(P));
      P->i += 2;
      struct jnode *v = parse_expr(P);
      if (!v || !name || !nl_push(P, &kw, v, name)) return false;
    } else {
      if (kw.n) return fail(P, cur(P), "positional argument after keyword argument%s", NULL);
      struct jnode *v = parse_expr(P);
      if (!v || !nl_push(P, &pos, v, NULL)) return false;
    }
  }
  size_t total = pos.n + kw.n;
  n->items = jx_alloc(P->a, (total + 1) * sizeof(*n->items));
  n->kw_names = jx_alloc(P->a, (kw.n + 1) * sizeof(*n->kw_names));
  if (!n->items || !n->kw_names) { P->err = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja parser"); return false; }
  for (size_t k = 0; k < pos.n; k++) n->items[k] = pos.items[k];
  for (size_t k = 0; k < kw.n; k++) {
    n->items[pos.n + k] = kw.items[k];
    n->kw_names[k] = kw.names[k];
  }
  n->n_items = total;
  n->n_kw = kw.n;
  return true;
}

static struct jnode *parse_filter(struct parser *P, struct jnode *operand) {
  const struct jtok *at = cur(P);
  if (at->kind != JT_NAME) { fail(P, at, "expected a filter name%s", NULL); return NULL; }
  struct jnode *n = node(P, JN_FILTER, at);
  if (!n || !(n->name = tok_str(P, at))) return NULL;
  P->i++;
  n->a = operand;
  if (accept_op(P, "(") && !parse_args(P, n)) return NULL;
  return n;
}

static struct jnode *parse_test(struct parser *P, struct jnode *operand) {
  const struct jtok *at = cur(P);
  struct jnode *n = node(P, JN_TEST, at);
  if (!n) return NULL;
  if (accept_name(P, "not")) n->op = 1;
  at = cur(P);
  if (at->kind != JT_NAME) { fail(P, at, "expected a test name%s", NULL); return NULL; }
  if (!(n->name = tok_str(P, at))) return NULL;
  P->i++;
  n->a = operand;
  const struct jtok *t = cur(P);
  if (accept_op(P, "(")) {
    if (!parse_args(P, n)) return NULL;
  } else if ((t->kind == JT_NAME || t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
              is_op(t, "[") || is_op(t, "{")) &&
             !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and") && !is_name(t, "if")) {
    /* jinja2: `x is divisibleby 3`, `x is equalto 'a'` take one primary argument */
    struct jnode *arg = parse_primary(P);
    if (!arg || !(arg = parse_postfix(P, arg))) return NULL;
    n->items = jx_alloc(P->a, sizeof(*n->items));
    if (!n->items) { P->err = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja parser"); return NULL; }
    n->items[0] = arg;
    n->n_items = 1;
  }
  return n;
}

static struct jnode *parse_filters_tests(struct parser *P, struct jnode *n) {
  while (n) {
    if (accept_op(P, "|")) n = parse_filter(P, n);
    else if (accept_name(P, "is")) n = parse_test(P, n);
    else if (is_op(cur(P), "(")) n = parse_postfix(P, n);
    else break;
  }
  return n;
}

static struct jnode *parse_subscript(struct parser *P, struct jnode *obj, const struct jtok *at) {
  struct jnode *parts[3] = {NULL, NULL, NULL};
  int k = 0;
  bool slice = false;
  for (;;) {
    if (is_op(cur(P), ":")) {
      slice = true;
      P->i++;
      if (++k > 2) { fail(P, cur(P), "bad slice%s", NULL); return NULL; }
      continue;
    }
    if (is_op(cur(P), "]")) break;
    if (parts[k]) { fail(P, cur(P), "expected ']'%s", NULL); return NULL; }
    if (!(parts[k] = parse_expr(P))) return NULL;
  }
  P->i++;
  struct jnode *n = node(P, slice ? JN_SLICE : JN_GETITEM, at);
  if (!n) return NULL;
  n->a = obj;
  if (slice) {
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
  } else {
    if (!parts[0]) { fail(P, at, "empty subscript%s", NULL); return NULL; }
    n->b = parts[0];
  }
  return n;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n) {
  while (n) {
    const struct jtok *at = cur(P);
    if (accept_op(P, ".")) {
      const struct jtok *t = cur(P);
      struct jnode *g;
      if (t->kind == JT_NAME) {
        g = node(P, JN_GETATTR, at);
        if (!g || !(g->name = tok_str(P, t))) return NULL;
      } else if (t->kind == JT_INT) {
        g = node(P, JN_GETITEM, at);
        struct jnode *k = node(P, JN_LITERAL, t);
        if (!g || !k) return NULL;
        k->lit = jv_int(t->i);
        g->b = k;
      } else {
        fail(P, t, "expected an attribute name after '.'%s", NULL);
        return NULL;
      }
      P->i++;
      g->a = n;
      n = g;
    } else if (accept_op(P, "[")) {
      n = parse_subscript(P, n, at);
    } else if (accept_op(P, "(")) {
      struct jnode *c = node(P, JN_CALL, at);
      if (!c) return NULL;
      c->a = n;
      if (!parse_args(P, c)) return NULL;
      n = c;
    } else {
      break;
    }
  }
  return n;
}

/* Comma-separated items until `close`; kind LIST/TUPLE; DICT takes key: value pairs. */
static struct jnode *parse_seq(struct parser *P, enum jn_kind kind, const char *close, const struct jtok *at) {
  struct nlist l = {0};
  size_t count = 0;
  while (!accept_op(P, close)) {
    if (count && !expect_op(P, ",")) return NULL;
    if (accept_op(P, close)) break;
    struct jnode *v = parse_expr(P);
    if (!v || !nl_push(P, &l, v, NULL)) return NULL;
    if (kind == JN_DICT) {
      if (!expect_op(P, ":") || !(v = parse_expr(P)) || !nl_push(P, &l, v, NULL)) return NULL;
    }
    count++;
  }
  if (kind == JN_TUPLE && count == 1 && !is_op(&P->t[P->i - 2], ",")) return l.items[0];
  struct jnode *n = node(P, kind, at);
  if (!n) return NULL;
  n->items = l.items;
  n->n_items = l.n;
  return n;
}

static struct jnode *parse_primary(struct parser *P) {
  const struct jtok *t = cur(P);
  struct jnode *n;
  if (t->kind == JT_NAME) {
    P->i++;
    n = node(P, JN_LITERAL, t);
    if (!n) return NULL;
    if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(true);
    else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(false);
    else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
    else {
      n->kind = JN_NAME;
      if (!(n->name = tok_str(P, t))) return NULL;
    }
    return n;
  }
  if (t->kind == JT_STRING) {
    size_t total = 0, k = P->i;
    for (; P->t[k].kind == JT_STRING; k++) total += P->t[k].len;
    struct jstr *s = jx_alloc(P->a, sizeof(*s) + total + 1);
    if (!s || !(n = node(P, JN_LITERAL, t))) { P->err = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja parser"); return NULL; }
    for (; P->i < k; P->i++) {
      memcpy(s->data + s->len, P->t[P->i].s, P->t[P->i].len);
      s->len += P->t[P->i].len;
    }
    n->lit.kind = JV_STR;
    n->lit.u.s = s;
    return n;
  }
  if (t->kind == JT_INT || t->kind == JT_FLOAT) {
    P->i++;
    if (!(n = node(P, JN_LITERAL, t))) return NULL;
    n->lit = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
    return n;
  }
  if (accept_op(P, "(")) return parse_seq(P, JN_TUPLE, ")", t);
  if (accept_op(P, "[")) return parse_seq(P, JN_LIST, "]", t);
  if (accept_op(P, "{")) return parse_seq(P, JN_DICT, "}", t);
  fail(P, t, "unexpected token in expression%s", NULL);
  return NULL;
}

static struct jnode *binary(struct parser *P, enum jn_kind k, int op, const struct jtok *at,
                            struct jnode *l, struct jnode *r) {
  if (!l || !r) return NULL;
  struct jnode *n = node(P, k, at);
  if (!n) return NULL;
  n->op = op;
  n->a = l;
  n->b = r;
  return n;
}

static struct jnode *parse_unary(struct parser *P, bool with_filter) {
  const struct jtok *t = cur(P);
  struct jnode *n;
  if (!enter(P)) return NULL;
  if (accept_op(P, "-") || accept_op(P, "+")) {
    n = node(P, JN_UNARY, t);
    if (n) {
      n->op = is_op(t, "-") ? JOP_NEG : JOP_POS;
      n->a = parse_unary(P, false);
      if (!n->a) n = NULL;
    }
  } else {
    n = parse_postfix(P, parse_primary(P));
  }
  if (with_filter) n = parse_filters_tests(P, n);
  P->depth--;
  return n;
}

static struct jnode *parse_pow(struct parser *P) {
  struct jnode *l = parse_unary(P, true);
  while (l && is_op(cur(P), "**")) {
    const struct jtok *at = cur(P);
    P->i++;
    l = binary(P, JN_BINARY, JOP_POW, at, l, parse_unary(P, true));
  }
  return l;
}

static struct jnode *parse_math2(struct parser *P) {
  struct jnode *l = parse_pow(P);
  for (;;) {
    const struct jtok *at = cur(P);
    int op = is_op(at, "*") ? JOP_MUL : is_op(at, "/") ? JOP_DIV : is_op(at, "//") ? JOP_FLOORDIV
           : is_op(at, "%") ? JOP_MOD : -1;
    if (!l || op < 0) return l;
    P->i++;
    l = binary(P, JN_BINARY, op, at, l, parse_pow(P));
  }
}

static struct jnode *parse_concat(struct parser *P) {
  struct jnode *l = parse_math2(P);
  while (l && is_op(cur(P), "~")) {
    const struct jtok *at = cur(P);
    P->i++;
    l = binary(P, JN_BINARY, JOP_CONCAT, at, l, parse_math2(P));
  }
  return l;
}

static struct jnode *parse_math1(struct parser *P) {
  struct jnode *l = parse_concat(P);
  for (;;) {
    const struct jtok *at = cur(P);
    int op = is_op(at, "+") ? JOP_ADD : is_op(at, "-") ? JOP_SUB : -1;
    if (!l || op < 0) return l;
    P->i++;
    l = binary(P, JN_BINARY, op, at, l, parse_concat(P));
  }
}

static struct jnode *parse_compare(struct parser *P) {
  struct jnode *l = parse_math1(P), *last = NULL;
  for (;;) {
    const struct jtok *at = cur(P);
    int op = is_op(at, "==") ? JOP_EQ : is_op(at, "!=") ? JOP_NE : is_op(at, "<") ? JOP_LT
           : is_op(at, "<=") ? JOP_LE : is_op(at, ">") ? JOP_GT : is_op(at, ">=") ? JOP_GE
           : is_name(at, "in") ? JOP_IN
           : is_name(at, "not") && is_name(peek(P, 1), "in") ? JOP_NOTIN : -1;
    if (!l || op < 0) return l;
    P->i += op == JOP_NOTIN ? 2 : 1;
    /* Python's chains: a < b < c is (a < b) and (b < c) */
    struct jnode *left = last ? last->b : l;
    struct jnode *c = binary(P, JN_COMPARE, op, at, left, parse_math1(P));
    if (!c) return NULL;
    l = last ? binary(P, JN_AND, 0, at, l, c) : c;
    last = c;
  }
}

static struct jnode *parse_not(struct parser *P) {
  const struct jtok *at = cur(P);
  if (is_name(at, "not") && !is_name(peek(P, 1), "in")) {
    P->i++;
    if (!enter(P)) return NULL;
    struct jnode *n = node(P, JN_NOT, at);
    if (n && !(n->a = parse_not(P))) n = NULL;
    P->depth--;
    return n;
  }
  return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P) {
  struct jnode *l = parse_not(P);
  while (l && is_name(cur(P), "and")) {
    const struct jtok *at = cur(P);
    P->i++;
    l = binary(P, JN_AND, 0, at, l, parse_not(P));
  }
  return l;
}

static struct jnode *parse_or(struct parser *P) {
  struct jnode *l = parse_and(P);
  while (l && is_name(cur(P), "or")) {
    const struct jtok *at = cur(P);
    P->i++;
    l = binary(P, JN_OR, 0, at, l, parse_and(P));
  }
  return l;
}

static struct jnode *parse_expr(struct parser *P) {
  if (!enter(P)) return NULL;
  struct jnode *n = parse_or(P);
  while (n && is_name(cur(P), "if")) {
    const struct jtok *at = cur(P);
    P->i++;
    struct jnode *c = node(P, JN_COND, at);
    if (!c || !(c->a = parse_or(P))) { n = NULL; break; }
    c->b = n;
    if (accept_name(P, "else") && !(c->c = parse_expr(P))) { n = NULL; break; }
    n = c;
  }
  P->depth--;
  return n;
}

/* expr or a bare tuple `a, b` (set values, for iterables). */
static struct jnode *parse_tuple(struct parser *P, bool condexpr) {
  const struct jtok *at = cur(P);
  struct nlist l = {0};
  for (;;) {
    struct jnode *v = condexpr ? parse_expr(P) : parse_or(P);
    if (!v || !nl_push(P, &l, v, NULL)) return NULL;
    if (!is_op(cur(P), ",")) break;
    P->i++;
    if (cur(P)->kind == JT_BLOCK_END || cur(P)->kind == JT_VAR_END || is_name(cur(P), "if")) break;
  }
  if (l.n == 1 && !is_op(&P->t[P->i - 1], ",")) return l.items[0];
  struct jnode *n = node(P, JN_TUPLE, at);
  if (!n) return NULL;
  n->items = l.items;
  n->n_items = l.n;
  return n;
}

/* ---- statements ---- */

static struct jnode *parse_body(struct parser *P, const char *const *ends, size_t n_ends, int *which);

/* Assignment target: NAME, NAME.attr (set only), or names separated by commas. */
static bool parse_target(struct parser *P, struct jnode *n, bool allow_attr) {
  struct nlist l = {0};
  bool paren = accept_op(P, "(");
  for (;;) {
    const struct jtok *t = cur(P);
    if (t->kind != JT_NAME) return fail(P, t, "expected a name to assign to%s", NULL);
    const char *name = tok_str(P, t);
    if (!name || !nl_push(P, &l, NULL, name)) return false;
    P->i++;
    if (allow_attr && l.n == 1 && is_op(cur(P), ".")) {
      P->i++;
      if (cur(P)->kind != JT_NAME) return fail(P, cur(P), "expected an attribute name%s", NULL);
      struct jnode *obj = node(P, JN_NAME, t);
      if (!obj) return false;
      obj->name = name;
      n->d = obj;
      if (!(l.names[0] = tok_str(P, cur(P)))) return false;
      P->i++;
      break;
    }
    if (!accept_op(P, ",")) break;
  }
  if (paren && !expect_op(P, ")")) return false;
  n->kw_names = l.names;
  n->n_kw = l.n;
  return true;
}

static bool end_tag(struct parser *P) {
  if (cur(P)->kind == JT_BLOCK_END) { P->i++; return true; }
  return fail(P, cur(P), "expected end of block tag '%%}'%s", NULL);
}

static struct jnode *parse_if(struct parser *P, const struct jtok *at) {
  static const char *const ends[] = {"elif", "else", "endif"};
  struct jnode *n = node(P, JN_IF, at);
  if (!n || !(n->a = parse_tuple(P, true)) || !end_tag(P)) return NULL;
  int which;
  if (!(n->b = parse_body(P, ends, 3, &which))) return NULL;
  if (which == 0) {
    if (!(n->c = parse_if(P, &P->t[P->i - 1]))) return NULL;
    return n;
  }
  if (which == 1) {
    if (!end_tag(P) || !(n->c = parse_body(P, ends + 2, 1, &which))) return NULL;
  }
  return end_tag(P) ? n : NULL;
}

static struct jnode *parse_for(struct parser *P, const struct jtok *at) {
  static const char *const ends[] = {"else", "endfor"};
  struct jnode *n = node(P, JN_FOR, at);
  if (!n || !parse_target(P, n, false)) return NULL;
  if (!accept_name(P, "in")) { fail(P, cur(P), "expected 'in'%s", NULL); return NULL; }
  if (!(n->a = parse_tuple(P, false))) return NULL;
  if (accept_name(P, "if") && !(n->d = parse_expr(P))) return NULL;
  if (is_name(cur(P), "recursive")) { fail(P, cur(P), "recursive loops are not supported%s", NULL); return NULL; }
  int which;
  if (!end_tag(P) || !(n->b = parse_body(P, ends, 2, &which))) return NULL;
  if (which == 0 && (!end_tag(P) || !(n->c = parse_body(P, ends + 1, 1, &which)))) return NULL;
  return end_tag(P) ? n : NULL;
}

static struct jnode *parse_set(struct parser *P, const struct jtok *at) {
  static const char *const ends[] = {"endset"};
  struct jnode *n = node(P, JN_SET, at);
  if (!n || !parse_target(P, n, true)) return NULL;
  if (accept_op(P, "=")) {
    if (!(n->a = parse_tuple(P, true))) return NULL;
    return end_tag(P) ? n : NULL;
  }
  n->kind = JN_SET_BLOCK;
  if (n->d || n->n_kw != 1) { fail(P, at, "a block set assigns one name%s", NULL); return NULL; }
  struct jnode *filt = NULL;
  while (accept_op(P, "|"))
    if (!(filt = parse_filter(P, filt))) return NULL;
  n->c = filt;
  int which;
  if (!end_tag(P) || !(n->b = parse_body(P, ends, 1, &which))) return NULL;
  return end_tag(P) ? n : NULL;
}

/* Parameters `(a, b=default)` of a macro or call block into n. */
static bool parse_params(struct parser *P, struct jnode *n) {
  struct nlist l = {0};
  if (!expect_op(P, "(")) return false;
  while (!accept_op(P, ")")) {
    if (l.n && !expect_op(P, ",")) return false;
    if (accept_op(P, ")")) break;
    if (cur(P)->kind != JT_NAME) return fail(P, cur(P), "expected a parameter name%s", NULL);
    const char *name = tok_str(P, cur(P));
    P->i++;
    struct jnode *def = NULL;
    if (accept_op(P, "=") && !(def = parse_expr(P))) return false;
    if (!name || !nl_push(P, &l, def, name)) return false;
  }
  n->kw_names = l.names;
  n->defaults = l.items;
  n->n_kw = l.n;
  return true;
}

static struct jnode *parse_macro(struct parser *P, const struct jtok *at) {
  static const char *const ends[] = {"endmacro"};
  struct jnode *n = node(P, JN_MACRO, at);
  if (!n) return NULL;
  if (cur(P)->kind != JT_NAME) { fail(P, cur(P), "expected a macro name%s", NULL); return NULL; }
  if (!(n->name = tok_str(P, cur(P)))) return NULL;
  P->i++;
  int which;
  if (!parse_params(P, n) || !end_tag(P) || !(n->b = parse_body(P, ends, 1, &which))) return NULL;
  return end_tag(P) ? n : NULL;
}

static struct jnode *parse_call_block(struct parser *P, const struct jtok *at) {
  static const char *const ends[] = {"endcall"};
  struct jnode *n = node(P, JN_CALL_BLOCK, at);
  if (!n) return NULL;
  if (is_op(cur(P), "(") && !parse_params(P, n)) return NULL;
  if (!(n->a = parse_expr(P))) return NULL;
  if (n->a->kind != JN_CALL) { fail(P, at, "expected a macro call after 'call'%s", NULL); return NULL; }
  int which;
  if (!end_tag(P) || !(n->b = parse_body(P, ends, 1, &which))) return NULL;
  return end_tag(P) ? n : NULL;
}

static struct jnode *parse_filter_block(struct parser *P, const struct jtok *at) {
  static const char *const ends[] = {"endfilter"};
  struct jnode *n = node(P, JN_FILTER_BLOCK, at), *filt = NULL;
  if (!n) return NULL;
  do {
    if (!(filt = parse_filter(P, filt))) return NULL;
  } while (accept_op(P, "|"));
  n->a = filt;
  int which;
  if (!end_tag(P) || !(n->b = parse_body(P, ends, 1, &which))) return NULL;
  return end_tag(P) ? n : NULL;
}

static struct jnode *parse_statement(struct parser *P) {
  const struct jtok *at = cur(P);
  if (at->kind != JT_NAME) { fail(P, at, "expected a tag name%s", NULL); return NULL; }
  P->i++;
  if (is_name(at, "if")) return parse_if(P, at);
  if (is_name(at, "for")) return parse_for(P, at);
  if (is_name(at, "set")) return parse_set(P, at);
  if (is_name(at, "macro")) return parse_macro(P, at);
  if (is_name(at, "call")) return parse_call_block(P, at);
  if (is_name(at, "filter")) return parse_filter_block(P, at);
  if (is_name(at, "break") || is_name(at, "continue")) {
    struct jnode *n = node(P, is_name(at, "break") ? JN_BREAK : JN_CONTINUE, at);
    return n && end_tag(P) ? n : NULL;
  }
  if (is_name(at, "generation")) { /* HF's AssistantTracker: renders its body */
    static const char *const ends[] = {"endgeneration"};
    int which;
    struct jnode *n;
    if (!end_tag(P) || !(n = parse_body(P, ends, 1, &which))) return NULL;
    return end_tag(P) ? n : NULL;
  }
  char *name = tok_str(P, at);
  fail(P, at, "unknown tag '%s'", name);
  return NULL;
}

/* Statements until `{% <one of ends> `; *which = its index (the name is consumed, the
 * tag's end is not). ends NULL: until the end of the template. */
static struct jnode *parse_body(struct parser *P, const char *const *ends, size_t n_ends, int *which) {
  const struct jtok *start = cur(P);
  struct nlist l = {0};
  if (!enter(P)) return NULL;
  for (;;) {
    const struct jtok *t = cur(P);
    struct jnode *s = NULL;
    if (t->kind == JT_EOF) {
      if (ends) {
        fail(P, t, "unexpected end of template, expected '%s'", ends[n_ends - 1]);
        return NULL;
      }
      break;
    }
    if (t->kind == JT_TEXT) {
      P->i++;
      if (!(s = node(P, JN_TEXT, t))) return NULL;
      s->lit.kind = JV_STR;
      if (!(s->lit.u.s = jx_str_new(P->a, t->s, t->len))) { P->err = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "jinja parser"); return NULL; }
    } else if (t->kind == JT_VAR_BEGIN) {
      P->i++;
      if (!(s = node(P, JN_OUTPUT, t)) || !(s->a = parse_tuple(P, true))) return NULL;
      if (cur(P)->kind != JT_VAR_END) { fail(P, cur(P), "expected end of print tag '}}'%s", NULL); return NULL; }
      P->i++;
    } else if (t->kind == JT_BLOCK_BEGIN) {
      const struct jtok *name = peek(P, 1);
      for (size_t k = 0; ends && k < n_ends; k++) {
        if (is_name(name, ends[k])) {
          P->i += 2;
          *which = (int)k;
          goto done;
        }
      }
      P->i++;
      if (!(s = parse_statement(P))) return NULL;
    } else {
      fail(P, t, "unexpected token%s", NULL);
      return NULL;
    }
    if (!nl_push(P, &l, s, NULL)) return NULL;
  }
done:
  P->depth--;
  struct jnode *b = node(P, JN_BODY, start);
  if (!b) return NULL;
  b->items = l.items;
  b->n_items = l.n;
  return b;
}

llb_status jx_parse(struct jx_arena *a, const struct jtok *toks, size_t n, struct jnode **out) {
  struct parser P = {.a = a, .t = toks, .n = n};
  int which;
  struct jnode *body = parse_body(&P, NULL, 0, &which);
  if (!body) return P.err ? P.err : LLB_ERRF(LLB_STATUS_MALFORMED, "jinja template: parse failed");
  *out = body;
  return LLB_STATUS_OK;
}
