/* Private to model/template/jinja*.c: the arena, values, syntax tree and render state shared by the
 * lexer (jinja_lex.c), parser (jinja_parse.c), values (jinja_value.c), operators
 * (jinja_ops.c), builtins (jinja_filters.c, jinja_methods.c), evaluator (jinja_eval.c) and
 * the public API (jinja.c). Calls go one way, in the order values <- operators <- methods
 * <- filters <- evaluator <- jinja.c: nothing below the evaluator evaluates syntax. Not
 * public API. */
#ifndef LLB_MODEL_JINJA_INTERNAL_H
#define LLB_MODEL_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/template/jinja.h"

/* ---- arena: every allocation of a parse or a render, freed at once; bounded ---- */
struct jx_chunk;
struct jx_arena {
  struct jx_chunk *head;
  size_t used_bytes, limit_bytes;
  bool exhausted; /* an allocation was refused by the limit */
};
void jx_arena_init(struct jx_arena *a, size_t limit_bytes);
void jx_arena_free(struct jx_arena *a);
/* Zeroed memory, 16-aligned; NULL when the limit (or malloc) refuses. */
void *jx_alloc(struct jx_arena *a, size_t n);

/* ---- values ---- */
enum jv_kind { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC };

struct jstr {
  size_t len;
  bool markup; /* Markup (the `safe` filter): `+` with a str HTML-escapes the str */
  char data[]; /* NUL-terminated */
};
struct jv;
struct jlist {
  size_t len, cap;
  struct jv *items;
  bool is_tuple;
  bool is_gen; /* a generator in jinja2 (select/map results): no len(), not JSON */
};
enum jdict_special { JDICT_PLAIN, JDICT_NAMESPACE, JDICT_LOOP };
struct jdict {
  size_t len, cap;
  struct jv *keys, *vals;
  enum jdict_special special;
};
struct jnode;
enum jfunc_kind { JF_MACRO, JF_GLOBAL, JF_METHOD, JF_UNSAFE };
struct jfunc {
  enum jfunc_kind kind;
  const char *name;         /* macro, global or method name */
  const struct jnode *node; /* JF_MACRO: the macro node */
  struct jv *self;          /* JF_METHOD / JF_UNSAFE: the object */
  struct jscope *scope;     /* JF_MACRO: where it was defined (a call block's caller too) */
};
struct jv {
  enum jv_kind kind;
  union {
    bool b;
    int64_t i;
    double f;
    struct jstr *s; /* JV_STR; JV_UNDEF: the name it was looked up by (may be NULL) */
    struct jlist *l;
    struct jdict *d;
    struct jfunc *fn;
  } u;
};

static inline struct jv jv_undef(void) { struct jv v = {.kind = JV_UNDEF}; return v; }
static inline struct jv jv_none(void) { struct jv v = {.kind = JV_NONE}; return v; }
static inline struct jv jv_bool(bool b) { struct jv v = {.kind = JV_BOOL, .u.b = b}; return v; }
static inline struct jv jv_int(int64_t i) { struct jv v = {.kind = JV_INT, .u.i = i}; return v; }
static inline struct jv jv_float(double f) { struct jv v = {.kind = JV_FLOAT, .u.f = f}; return v; }

/* ---- growable byte buffer (malloc'd, bounded) ---- */
struct jx_buf {
  char *data;
  size_t len, cap, limit;
  bool overflow; /* limit or malloc refused an append */
};
void jx_buf_init(struct jx_buf *b, size_t limit);
void jx_buf_free(struct jx_buf *b);
bool jx_buf_put(struct jx_buf *b, const char *s, size_t n);
bool jx_buf_puts(struct jx_buf *b, const char *s);
bool jx_buf_printf(struct jx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- value helpers (jinja_value.c); NULL / false = out of memory ---- */
struct jstr *jx_str_new(struct jx_arena *a, const char *s, size_t n);
struct jlist *jx_list_new(struct jx_arena *a, size_t cap);
bool jx_list_push(struct jx_arena *a, struct jlist *l, struct jv v);
struct jdict *jx_dict_new(struct jx_arena *a);
/* Sets key (replaces the value of an equal key, else appends). */
bool jx_dict_set(struct jx_arena *a, struct jdict *d, struct jv key, struct jv val);
bool jx_dict_set_cstr(struct jx_arena *a, struct jdict *d, const char *key, struct jv val);
/* Value of key, or NULL. */
struct jv *jx_dict_get(const struct jdict *d, struct jv key);
struct jv *jx_dict_get_cstr(const struct jdict *d, const char *key, size_t n);
struct jv jx_mkstr(struct jx_arena *a, const char *s, size_t n, bool *ok);

bool jx_truthy(struct jv v);
bool jx_equal(struct jv a, struct jv b);
/* Python's ordering (numbers, strings, lists); *ok false when the kinds do not compare. */
int jx_compare(struct jv a, struct jv b, bool *ok);
const char *jx_type_name(struct jv v); /* Python's: "str", "int", "dict", "Undefined" ... */
/* str(v) appended to b (Python's str: True, None, 1.5, ['a'], {'k': 1}). */
bool jx_str_append(struct jx_buf *b, struct jv v);
/* repr(v) appended to b. */
bool jx_repr_append(struct jx_buf *b, struct jv v);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) appended to b;
 * indent_str NULL = no indent. false with *bad set to the offending value's type name when
 * it cannot be serialized (as Python's TypeError), or on overflow (*bad NULL). */
bool jx_json_append(struct jx_buf *b, struct jv v, const char *indent_str, const char *item_sep,
                    const char *key_sep, bool sort_keys, int depth, const char **bad);
/* Converts jansson JSON into values in a. */
bool jx_from_json(struct jx_arena *a, const json_t *j, struct jv *out, int depth);
/* Python float repr ("1.0", "1e-05", "inf"). */
void jx_float_repr(double f, char out[32]);
/* Number of code points of UTF-8 s[0..n). */
size_t jx_utf8_len(const char *s, size_t n);
/* Byte offset of code point index cp (clamped to n). */
size_t jx_utf8_offset(const char *s, size_t n, size_t cp);
/* Decodes one code point at s (n > 0 bytes); returns its byte length (1 on invalid). */
size_t jx_utf8_next(const char *s, size_t n, uint32_t *cp);
bool jx_is_space_cp(uint32_t cp); /* Python str.isspace() for one code point */

/* ---- tokens and syntax tree (jinja_lex.c, jinja_parse.c) ---- */
enum jt_kind {
  JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
  JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF
};
struct jtok {
  enum jt_kind kind;
  int line, col;
  const char *s; /* TEXT, NAME, STRING (decoded), OP; in the template arena */
  size_t len;
  int64_t i;
  double f;
};
/* Tokenizes src with HF's settings into an arena array; MALFORMED with line/col. */
llb_status jx_lex(struct jx_arena *a, const char *src, size_t len, struct jtok **toks,
                  size_t *n_toks);

enum jn_kind {
  /* statements */
  JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK,
  JN_FILTER_BLOCK, JN_BREAK, JN_CONTINUE,
  /* expressions */
  JN_LITERAL, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL,
  JN_FILTER, JN_TEST, JN_UNARY, JN_BINARY, JN_COMPARE, JN_AND, JN_OR, JN_NOT, JN_COND
};
enum jn_op {
  JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
  JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN, JOP_NEG, JOP_POS
};
struct jnode {
  enum jn_kind kind;
  int line, col;
  int op;            /* enum jn_op; JN_TEST: 1 = negated */
  const char *name;  /* NAME, GETATTR attribute, FILTER/TEST/MACRO name, SET target */
  struct jv lit;     /* LITERAL */
  struct jnode *a, *b, *c;    /* operands; IF: cond, then, else; FOR: iter, body, else;
                                 SLICE: start, stop, step (each may be NULL) */
  struct jnode *d;            /* FOR: condition filter; SET: namespace object */
  struct jnode **items;       /* BODY statements, LIST/TUPLE/DICT(k,v pairs)/CALL args */
  size_t n_items;
  const char **kw_names;      /* CALL/FILTER/TEST: keyword names of the last n_kw args;
                                 MACRO: parameter names; FOR/SET: target names */
  size_t n_kw;                /* CALL: keyword args; MACRO/FOR/SET: names */
  struct jnode **defaults;    /* MACRO: default per parameter (NULL = required) */
};
/* Parses tokens into a body node. Unknown filters/tests are syntax errors (as jinja2). */
llb_status jx_parse(struct jx_arena *a, const struct jtok *toks, size_t n, struct jnode **out);

/* ---- render state ---- */
struct jscope {
  struct jscope *parent;
  struct jdict *vars;
};
struct jx_render {
  struct jx_arena arena;
  struct jx_buf *out; /* where output goes now (swapped for block set / filter / call) */
  struct jinja_limits limits;
  int64_t now_unix_s;
  uint64_t steps;
  int call_depth;
  struct jscope *root;
  llb_status err;          /* OK until the first failure */
  char err_msg[512];
  int loop_ctl;            /* 1 = break, 2 = continue pending */
  struct jfunc *pending_caller; /* a call block's `caller`, taken by the macro it calls */
};

/* ---- errors, conversions and operators (jinja_ops.c) ---- */
/* Records the first error (status, "line L col C: msg" when node != NULL) and returns
 * false. */
bool jx_fail(struct jx_render *r, const struct jnode *node, llb_status st, const char *fmt,
             ...) __attribute__((format(printf, 4, 5)));
bool jx_oom(struct jx_render *r, const struct jnode *node);
/* Fails with the message an undefined value carries (the name it was looked up by). */
bool jx_undefined_error(struct jx_render *r, const struct jnode *at, struct jv v);
/* An undefined value whose message is fmt with a and b (at most 200 bytes). */
struct jv jx_undef_msg(struct jx_render *r, const char *fmt, const char *a, const char *b);
/* str(v) as a new string value. */
bool jx_to_str(struct jx_render *r, const struct jnode *at, struct jv v, struct jv *out);
/* Iterates v as Python would (str: code points, dict: keys); *out a new list. */
bool jx_iterate(struct jx_render *r, const struct jnode *at, struct jv v, struct jlist **out);
/* b's bytes as a new string value; frees b. TOO_LARGE when b overflowed, OUT_OF_MEMORY. */
bool jx_buf_to_str(struct jx_render *r, const struct jnode *at, struct jx_buf *b, struct jv *out);
/* a op b for op JOP_ADD..JOP_CONCAT (Python's numbers, str/list + and *, Markup escaping). */
bool jx_binop(struct jx_render *r, const struct jnode *at, int op, struct jv a, struct jv b, struct jv *out);
/* a op b for op JOP_EQ..JOP_NOTIN, a bool. */
bool jx_compare_op(struct jx_render *r, const struct jnode *at, int op, struct jv a, struct jv b, struct jv *out);
/* -a (JOP_NEG) or +a (JOP_POS). */
bool jx_unop(struct jx_render *r, const struct jnode *at, int op, struct jv a, struct jv *out);
/* obj[v[0]:v[1]:v[2]] for a list or str (each bound None/undefined when absent). */
bool jx_slice(struct jx_render *r, const struct jnode *at, struct jv obj, struct jv v[3], struct jv *out);

/* ---- methods, globals and attribute lookup (jinja_methods.c) ---- */
/* obj.name / obj[key] with jinja2's sandboxed lookup order. */
bool jx_getattr(struct jx_render *r, const struct jnode *at, struct jv obj, const char *name,
                struct jv *out);
bool jx_getitem(struct jx_render *r, const struct jnode *at, struct jv obj, struct jv key,
                struct jv *out);
/* Python str.strip (which: 1 left, 2 right, 3 both; chars NULL/None = whitespace). */
bool jx_strip(struct jx_render *r, const struct jnode *at, struct jv s, struct jv *chars, int which,
              struct jv *out);
/* mode 0 lower, 1 upper, 2 capitalize, 3 jinja's title filter, 4 Python's str.title. */
bool jx_case(struct jx_render *r, const struct jnode *at, struct jv s, int mode, struct jv *out);
/* Python str.replace (count < 0: all). */
bool jx_replace(struct jx_render *r, const struct jnode *at, struct jv s, struct jv old, struct jv nw,
                int64_t count, struct jv *out);
/* Method lookup: true when type(obj) has a method `name` (bound into *out; mutating methods
 * become JF_UNSAFE, refused when called, as ImmutableSandboxedEnvironment does). */
bool jx_method_lookup(struct jx_render *r, struct jv obj, const char *name, struct jv *out);
bool jx_call_method(struct jx_render *r, const struct jnode *at, struct jfunc *fn,
                    struct jv *args, size_t nargs, const char **kw, struct jv *kwv, size_t nkw,
                    struct jv *out);
/* Globals: range, namespace, dict, raise_exception, strftime_now, lipsum-free set. */
bool jx_global_lookup(struct jx_render *r, const char *name, struct jv *out);
bool jx_call_global(struct jx_render *r, const struct jnode *at, struct jfunc *fn,
                    struct jv *args, size_t nargs, const char **kw, struct jv *kwv, size_t nkw,
                    struct jv *out);

/* ---- filters and tests (jinja_filters.c) ---- */
bool jx_filter_exists(const char *name);
bool jx_test_exists(const char *name);
bool jx_apply_filter(struct jx_render *r, const struct jnode *at, const char *name, struct jv v,
                     struct jv *args, size_t nargs, const char **kw, struct jv *kwv, size_t nkw,
                     struct jv *out);
bool jx_apply_test(struct jx_render *r, const struct jnode *at, const char *name, struct jv v,
                   struct jv *args, size_t nargs, bool *out);

/* ---- evaluator (jinja_eval.c) ---- */
/* A new scope (empty variables) under parent; NULL when out of memory. */
struct jscope *jx_scope_new(struct jx_render *r, struct jscope *parent);
/* Runs the statements of a body node in scope sc, writing to r->out; false on the first
 * error (recorded in r). */
bool jx_exec_body(struct jx_render *r, struct jscope *sc, const struct jnode *body);

#endif
