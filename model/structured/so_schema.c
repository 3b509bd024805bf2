/* JSON Schema (draft 2020-12, with draft 4-7 forms) → structured-output grammar nodes.
 *
 * A schema is read as a conjunction: its own keywords, its $ref target's and its allOf
 * members' (flattened), and its anyOf / oneOf lists, which are distributed: each alternative
 * becomes a branch holding everything beside it, so `{"type": "object", "required": ["a"],
 * "anyOf": [A, B]}` is (object ∧ required a ∧ A) ∨ (object ∧ required a ∧ B). A branch's
 * schemas are merged keyword by keyword (so_schema_merge.c) and built into nodes: one per
 * allowed type; strings with pattern / format as a DFA over the decoded text (so_regex.c,
 * so_format.c), numbers with bounds / multipleOf as a DFA over their text (so_number.c);
 * an enum or const beside other keywords keeps the values those keywords accept (each value's
 * text is run through the matcher of the rest). Conjunctions are memoized by the set of
 * schemas they hold, which makes recursive schemas finite. After building, a least fixpoint
 * finds the nodes that can produce a finite value; the others are cut off (an optional
 * property that cannot be written may not appear, an alternative that cannot end is dropped),
 * so the matcher never walks into a dead end. What cannot be enforced is refused by name. */
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "model/structured/so_internal.h"

#define SO_MAX_SCHEMA_DEPTH 64
#define SO_CONJ_MAX 256 /* schemas visited by one conjunction */
#define SO_MAX_PATH 128 /* $ref / allOf chain being flattened */
#define SO_MAX_GRAMMAR_DFA_STATES 16384 /* a grammar's automata: 1 KiB of transitions each */
#define SO_SCHEMA_WORK SO_REGEX_MAX_WORK /* one budget for all of a schema's automata */

/* A conjunction being compiled: the schemas whose own keywords all apply (holders) and the
 * anyOf / oneOf lists still to choose from (pending, each with the schema holding it). */
struct conj {
  const json_t *visited[SO_CONJ_MAX];
  int32_t n_visited;
  const json_t *holders[SO_CONJ_MAX];
  int32_t n_holders;
  const json_t *pending[SO_CONJ_MAX];
  const json_t *owners[SO_CONJ_MAX];
  int32_t n_pending;
  const json_t *forbidden; /* while flattening an alternative: the schema holding its list */
  bool unsat;              /* a `false` schema is in it */
};

struct memo_entry {
  uint64_t hash;
  const json_t **key; /* holders, NULL, pending: sorted, owned */
  int32_t key_len;
  int32_t node; /* the conjunction's node once built (-1: no value meets it) */
  int32_t slot; /* the anyOf a reference got while the body was being built, -1 when none */
  bool done;
};

/* A string or number node already built with the same automaton constraints (by key text). */
struct dfa_entry {
  char *key; /* owned */
  size_t key_len;
  int32_t node;
};

struct compiler {
  struct so_grammar *g;
  int32_t cap;
  json_t *root;
  struct memo_entry *memo;
  int32_t n_memo, memo_cap;
  int32_t any; /* node of "any JSON value", -1 until built */
  const json_t *path[SO_MAX_PATH];
  int32_t n_path;
  struct dfa_entry *dfas; /* automata built, so that the same constraints share one */
  int32_t n_dfas, dfas_cap;
  int64_t dfa_states;     /* states of every automaton of the grammar (one copy each) */
  int64_t work;           /* regex work units left for the whole schema */
};

static llb_status new_node(struct compiler *c, enum so_node_kind kind, int32_t *out) {
  if (c->g->n_nodes == SO_MAX_NODES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "schema needs more than %d grammar nodes", SO_MAX_NODES);
  if (c->g->n_nodes == c->cap) {
    int32_t cap = c->cap ? c->cap * 2 : 16;
    struct so_node *n = realloc(c->g->nodes, sizeof(*n) * (size_t)cap);
    if (!n) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar nodes");
    c->g->nodes = n;
    c->cap = cap;
  }
  struct so_node *nd = &c->g->nodes[c->g->n_nodes];
  memset(nd, 0, sizeof(*nd));
  nd->kind = kind;
  nd->additional = -1;
  nd->items = -1;
  nd->max_items = -1;
  nd->max_length = -1;
  nd->max_props = -1;
  *out = c->g->n_nodes++;
  return LLB_STATUS_OK;
}

/* Appends literal bytes text[0..len) to node i (copied). */
static llb_status add_literal(struct compiler *c, int32_t i, const char *text, size_t len) {
  struct so_node *nd = &c->g->nodes[i];
  if (nd->n_lits == SO_MAX_LITERALS)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d choices", SO_MAX_LITERALS);
  char **lits = realloc(nd->lits, sizeof(char *) * ((size_t)nd->n_lits + 1));
  if (lits) nd->lits = lits;
  size_t *lens = realloc(nd->lit_lens, sizeof(size_t) * ((size_t)nd->n_lits + 1));
  if (lens) nd->lit_lens = lens;
  char *copy = malloc(len + 1);
  if (!lits || !lens || !copy) {
    free(copy);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar literal");
  }
  memcpy(copy, text, len);
  copy[len] = 0;
  nd->lits[nd->n_lits] = copy;
  nd->lit_lens[nd->n_lits++] = len;
  return LLB_STATUS_OK;
}

/* Adds alternative `child` to anyOf node i (once; -1, a branch allowing nothing, is skipped). */
static llb_status add_child(struct compiler *c, int32_t i, int32_t child) {
  struct so_node *nd = &c->g->nodes[i];
  if (child < 0) return LLB_STATUS_OK;
  for (int32_t k = 0; k < nd->n_children; k++)
    if (nd->children[k] == child) return LLB_STATUS_OK;
  if (nd->n_children == SO_MAX_ANY_OF)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d alternatives", SO_MAX_ANY_OF);
  int32_t *ch = realloc(nd->children, sizeof(int32_t) * ((size_t)nd->n_children + 1));
  if (!ch) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar alternatives");
  nd->children = ch;
  nd->children[nd->n_children++] = child;
  return LLB_STATUS_OK;
}

static llb_status literals_node(struct compiler *c, const char *a, const char *b, int32_t *out) {
  llb_status st = new_node(c, SO_NODE_LITERALS, out);
  if (st == LLB_STATUS_OK) st = add_literal(c, *out, a, strlen(a));
  if (st == LLB_STATUS_OK && b) st = add_literal(c, *out, b, strlen(b));
  return st;
}

/* Any JSON value: object of any values, array of any values, string, number, true/false/null. */
static llb_status any_node(struct compiler *c, int32_t *out) {
  if (c->any >= 0) {
    *out = c->any;
    return LLB_STATUS_OK;
  }
  int32_t any, obj, arr, str, num, lit, nul;
  llb_status st = new_node(c, SO_NODE_ANY_OF, &any);
  if (st == LLB_STATUS_OK) c->any = any;
  if (st == LLB_STATUS_OK) st = new_node(c, SO_NODE_OBJECT, &obj);
  if (st == LLB_STATUS_OK) st = new_node(c, SO_NODE_ARRAY, &arr);
  if (st == LLB_STATUS_OK) st = new_node(c, SO_NODE_STRING, &str);
  if (st == LLB_STATUS_OK) st = new_node(c, SO_NODE_NUMBER, &num);
  if (st == LLB_STATUS_OK) st = literals_node(c, "true", "false", &lit);
  if (st == LLB_STATUS_OK) st = literals_node(c, "null", NULL, &nul);
  if (st != LLB_STATUS_OK) return st;
  c->g->nodes[obj].additional = any;
  c->g->nodes[arr].items = any;
  int32_t kids[] = {obj, arr, str, num, lit, nul};
  for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]) && st == LLB_STATUS_OK; i++)
    st = add_child(c, any, kids[i]);
  *out = any;
  return st;
}

/* ---- $ref: a JSON pointer into the document (RFC 6901, with %-escapes of the URI fragment) ---- */

static int hexval(char x) {
  return x >= '0' && x <= '9' ? x - '0' : x >= 'a' && x <= 'f' ? x - 'a' + 10 : x >= 'A' && x <= 'F' ? x - 'A' + 10 : -1;
}

/* One reference token of ref (from *p to the next '/') unescaped into tok; false when malformed. */
static bool pointer_token(const char **p, char *tok, size_t cap) {
  size_t n = 0;
  for (; **p && **p != '/'; (*p)++) {
    char ch = **p;
    if (ch == '%') {
      if (hexval((*p)[1]) < 0 || hexval((*p)[2]) < 0) return false;
      ch = (char)(hexval((*p)[1]) * 16 + hexval((*p)[2]));
      *p += 2;
    }
    if (ch == '~') {
      const char e = (*p)[1];
      if (e != '0' && e != '1') return false;
      ch = e == '0' ? '~' : '/';
      (*p)++;
    }
    if (n + 1 >= cap) return false;
    tok[n++] = ch;
  }
  tok[n] = 0;
  return true;
}

static llb_status resolve_ref(const struct compiler *c, const char *ref, const json_t **out) {
  if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "$ref \"%.64s\": only JSON pointers into this schema (\"#\", \"#/...\")", ref);
  const json_t *t = c->root;
  const char *p = ref + 1;
  char tok[256];
  while (*p == '/' && t) {
    p++;
    if (!pointer_token(&p, tok, sizeof(tok))) return LLB_ERRF(LLB_STATUS_MALFORMED, "$ref \"%.64s\" is not a JSON pointer", ref);
    if (json_is_object(t)) t = json_object_get(t, tok);
    else if (json_is_array(t)) {
      char *end;
      const long i = strtol(tok, &end, 10);
      t = tok[0] >= '0' && tok[0] <= '9' && !*end && (tok[0] != '0' || !tok[1]) ? json_array_get(t, (size_t)i) : NULL;
    } else t = NULL;
  }
  if (!t || (!json_is_object(t) && !json_is_boolean(t))) return LLB_ERRF(LLB_STATUS_MALFORMED, "$ref \"%.64s\" names no schema", ref);
  *out = t;
  return LLB_STATUS_OK;
}

/* ---- conjunctions ---- */

static bool holds(const json_t *const *v, int32_t n, const json_t *s) {
  for (int32_t i = 0; i < n; i++)
    if (v[i] == s) return true;
  return false;
}

/* Keywords of s other than annotations and $ref / allOf / anyOf / oneOf? */
static bool has_own_keywords(const json_t *s) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)s, key, v) {
    if (strcmp(key, "$ref") && strcmp(key, "allOf") && strcmp(key, "anyOf") && strcmp(key, "oneOf") &&
        !so_keyword_is_annotation(key))
      return true;
  }
  return false;
}

static llb_status flatten(struct compiler *c, struct conj *q, const json_t *s);

static llb_status flatten_list(struct compiler *c, struct conj *q, const json_t *list, const char *kw) {
  if (!json_is_array(list) || json_array_size(list) == 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a non-empty array", kw);
  size_t i;
  const json_t *a;
  llb_status st = LLB_STATUS_OK;
  json_array_foreach(list, i, a) if (st == LLB_STATUS_OK) st = flatten(c, q, a);
  return st;
}

/* Adds s, its $ref target and allOf members to q; its anyOf / oneOf lists become pending. */
static llb_status flatten(struct compiler *c, struct conj *q, const json_t *s) {
  if (json_is_true(s)) return LLB_STATUS_OK;
  if (json_is_false(s)) {
    q->unsat = true;
    return LLB_STATUS_OK;
  }
  if (!json_is_object(s)) return LLB_ERRF(LLB_STATUS_MALFORMED, "a schema must be an object or a boolean");
  if (s == q->forbidden || holds(c->path, c->n_path, s))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema $ref cycle that reads no input");
  if (holds(q->visited, q->n_visited, s)) return LLB_STATUS_OK; /* s ∧ s = s */
  if (q->n_visited == SO_CONJ_MAX || c->n_path == SO_MAX_PATH)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d schemas apply to one value", SO_CONJ_MAX);
  q->visited[q->n_visited++] = s;
  if (has_own_keywords(s)) q->holders[q->n_holders++] = s;
  c->path[c->n_path++] = s;
  llb_status st = LLB_STATUS_OK;
  const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
  if (ref) {
    const json_t *target = NULL;
    if (!json_is_string(ref)) st = LLB_ERRF(LLB_STATUS_MALFORMED, "schema $ref must be a string");
    else st = resolve_ref(c, json_string_value(ref), &target);
    if (st == LLB_STATUS_OK) st = flatten(c, q, target);
  }
  if (all && st == LLB_STATUS_OK) st = flatten_list(c, q, all, "allOf");
  static const char *const unions[] = {"anyOf", "oneOf"};
  for (int k = 0; k < 2 && st == LLB_STATUS_OK; k++) {
    const json_t *u = json_object_get(s, unions[k]);
    if (!u) continue;
    if (!json_is_array(u) || json_array_size(u) == 0) st = LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a non-empty array", unions[k]);
    else if (json_array_size(u) == 1) st = flatten(c, q, json_array_get(u, 0));
    else {
      q->owners[q->n_pending] = s;
      q->pending[q->n_pending++] = u;
    }
  }
  c->n_path--;
  return st;
}

static int cmp_ptr(const void *a, const void *b) {
  const uintptr_t x = (uintptr_t) * (const json_t *const *)a, y = (uintptr_t) * (const json_t *const *)b;
  return x < y ? -1 : x > y;
}

/* q's memo key (sorted holders, NULL, sorted pending) into key[]; returns its length. */
static int32_t conj_key(const struct conj *q, const json_t **key, uint64_t *hash) {
  memcpy(key, q->holders, sizeof(*key) * (size_t)q->n_holders);
  qsort(key, (size_t)q->n_holders, sizeof(*key), cmp_ptr);
  key[q->n_holders] = NULL;
  memcpy(key + q->n_holders + 1, q->pending, sizeof(*key) * (size_t)q->n_pending);
  qsort(key + q->n_holders + 1, (size_t)q->n_pending, sizeof(*key), cmp_ptr);
  const int32_t n = q->n_holders + 1 + q->n_pending;
  uint64_t h = LLB_FNV1A64_INIT;
  for (int32_t i = 0; i < n; i++) h = llb_fnv1a64_word(h, (uint64_t)(uintptr_t)key[i]);
  *hash = h;
  return n;
}

static struct memo_entry *memo_find(struct compiler *c, const json_t **key, int32_t n, uint64_t hash) {
  for (int32_t i = 0; i < c->n_memo; i++) {
    struct memo_entry *e = &c->memo[i];
    if (e->hash == hash && e->key_len == n && memcmp(e->key, key, sizeof(*key) * (size_t)n) == 0) return e;
  }
  return NULL;
}

static llb_status memo_add(struct compiler *c, const json_t **key, int32_t n, uint64_t hash, int32_t *index) {
  if (c->n_memo == c->memo_cap) {
    int32_t cap = c->memo_cap ? 2 * c->memo_cap : 64;
    struct memo_entry *m = realloc(c->memo, sizeof(*m) * (size_t)cap);
    if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema memo");
    c->memo = m;
    c->memo_cap = cap;
  }
  const json_t **k = malloc(sizeof(*k) * (size_t)n);
  if (!k) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema memo");
  memcpy(k, key, sizeof(*k) * (size_t)n);
  c->memo[c->n_memo] = (struct memo_entry){.hash = hash, .key = k, .key_len = n, .node = -1, .slot = -1};
  *index = c->n_memo++;
  return LLB_STATUS_OK;
}

static llb_status compile_conj(struct compiler *c, struct conj *q, int depth, int32_t *out);

/* The node of values meeting every schema of list (none: any value); -1 when none can. */
static llb_status compile_list(struct compiler *c, const struct so_schema_list *list, int depth, int32_t *out) {
  struct conj *q = calloc(1, sizeof(*q));
  if (!q) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema conjunction");
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < list->n && st == LLB_STATUS_OK; i++) st = flatten(c, q, list->v[i]);
  if (st == LLB_STATUS_OK) st = compile_conj(c, q, depth, out);
  free(q);
  return st;
}

/* ---- enum / const: the values the rest of the schema accepts ---- */

struct strbuf {
  char *s;
  size_t n, cap;
  bool oom;
};

static void sb_put(struct strbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void sb_json(struct strbuf *b, const json_t *v) {
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!t) b->oom = true;
  else sb_put(b, t, strlen(t));
  free(t);
}

/* Compact JSON of v, numbers as the engine writes them (so_number_text: 1e3 is 1000). */
static void dump_value(struct strbuf *b, const json_t *v) {
  char t[96];
  if (json_is_real(v) && so_number_text(v, t, sizeof(t))) {
    sb_put(b, t, strlen(t));
  } else if (json_is_real(v)) { /* past 40 digits: its shortest round-trip form */
    const double x = json_real_value(v);
    for (int p = 1; p <= 17; p++) {
      snprintf(t, sizeof(t), "%.*g", p, x);
      if (strtod(t, NULL) == x) break;
    }
    sb_put(b, t, strlen(t));
  } else if (json_is_object(v)) {
    const char *key;
    const json_t *e;
    bool first = true;
    sb_put(b, "{", 1);
    json_object_foreach((json_t *)v, key, e) {
      json_t *k = json_string(key);
      if (!first) sb_put(b, ",", 1);
      first = false;
      if (!k) b->oom = true;
      else sb_json(b, k);
      json_decref(k);
      sb_put(b, ":", 1);
      dump_value(b, e);
    }
    sb_put(b, "}", 1);
  } else if (json_is_array(v)) {
    size_t i;
    const json_t *e;
    sb_put(b, "[", 1);
    json_array_foreach(v, i, e) {
      if (i) sb_put(b, ",", 1);
      dump_value(b, e);
    }
    sb_put(b, "]", 1);
  } else {
    sb_json(b, v);
  }
}

/* JSON Schema equality: numbers by value (1 == 1.0), the rest as jansson compares them. */
static bool value_equal(const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
  return json_equal((json_t *)a, (json_t *)b);
}

/* Is v one of the values of an enum (is_enum) or the value of a const? */
static bool in_values(const json_t *v, const json_t *list, bool is_enum) {
  if (!is_enum) return value_equal(v, list);
  size_t i;
  const json_t *e;
  json_array_foreach(list, i, e) if (value_equal(v, e)) return true;
  return false;
}

/* Does the grammar rooted at node `root` accept text[0..n) whole? */
static bool node_accepts(const struct compiler *c, int32_t root, const char *text, size_t n, struct so_state *a,
                         struct so_state *b) {
  const struct so_grammar view = {.nodes = c->g->nodes, .n_nodes = c->g->n_nodes, .root = root};
  so_state_init(&view, a);
  for (size_t i = 0; i < n; i++) {
    if (!so_state_feed(&view, a, (uint8_t)text[i], b)) return false;
    struct so_state *t = a;
    a = b;
    b = t;
  }
  return so_state_is_complete(&view, a);
}

/* The values of the first enum / const that are in every other one and that node `rest`
 * accepts, as literal nodes (64 to a node, under an anyOf); *out -1 when none is left. */
static llb_status values_node(struct compiler *c, const struct so_cons *k, int32_t rest, int32_t *out) {
  const json_t *lists[2 * SO_CONS_MAX];
  bool is_enum[2 * SO_CONS_MAX];
  int32_t n_lists = 0;
  for (int32_t i = 0; i < k->n_consts; i++) lists[n_lists] = k->consts[i], is_enum[n_lists++] = false;
  for (int32_t i = 0; i < k->n_enums; i++) lists[n_lists] = k->enums[i], is_enum[n_lists++] = true;
  const json_t *first = lists[0];
  const size_t n_values = is_enum[0] ? json_array_size(first) : 1;
  if (n_values > SO_MAX_ENUM_VALUES) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d enum values", SO_MAX_ENUM_VALUES);
  struct so_state *sa = malloc(sizeof(*sa)), *sb = malloc(sizeof(*sb));
  llb_status st = sa && sb ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "enum check");
  int32_t lit = -1;
  *out = -1;
  for (size_t i = 0; i < n_values && st == LLB_STATUS_OK; i++) {
    const json_t *v = is_enum[0] ? json_array_get(first, i) : first;
    bool keep = true;
    for (int32_t l = 1; l < n_lists && keep; l++) keep = in_values(v, lists[l], is_enum[l]);
    struct strbuf text = {0};
    dump_value(&text, v);
    if (text.oom) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "enum value");
    else if (keep && node_accepts(c, rest, text.s, text.n, sa, sb)) {
      if (lit < 0 || c->g->nodes[lit].n_lits == SO_MAX_LITERALS) {
        if ((st = new_node(c, SO_NODE_LITERALS, &lit)) == LLB_STATUS_OK && *out >= 0) {
          if (c->g->nodes[*out].kind == SO_NODE_LITERALS) { /* a second chunk: put both under an anyOf */
            int32_t any, prev = *out;
            if ((st = new_node(c, SO_NODE_ANY_OF, &any)) == LLB_STATUS_OK && (st = add_child(c, any, prev)) == LLB_STATUS_OK)
              *out = any;
          }
          if (st == LLB_STATUS_OK) st = add_child(c, *out, lit);
        } else if (st == LLB_STATUS_OK) {
          *out = lit;
        }
      }
      if (st == LLB_STATUS_OK) st = add_literal(c, lit, text.s, text.n);
    }
    free(text.s);
  }
  free(sa);
  free(sb);
  return st;
}

/* ---- one branch: merged keywords → nodes ---- */

/* A node of `kind` sharing the automaton of the node built for the same key, if any (*found). */
static llb_status dfa_lookup(struct compiler *c, const struct strbuf *key, enum so_node_kind kind, int32_t *out, bool *found) {
  *found = false;
  for (int32_t i = 0; i < c->n_dfas; i++) {
    const struct dfa_entry *e = &c->dfas[i];
    if (e->key_len != key->n || memcmp(e->key, key->s, key->n)) continue;
    llb_status st = new_node(c, kind, out);
    if (st != LLB_STATUS_OK) return st;
    c->g->nodes[*out].dfa = c->g->nodes[e->node].dfa;
    c->g->nodes[*out].dfa_shared = true;
    *found = true;
    return LLB_STATUS_OK;
  }
  return LLB_STATUS_OK;
}

/* Node `node` of kind takes ownership of *dfa (remembered under key); counts its states. */
static llb_status dfa_keep(struct compiler *c, const struct strbuf *key, enum so_node_kind kind, struct so_dfa *dfa,
                           int32_t *out) {
  if (c->dfa_states + dfa->n > SO_MAX_GRAMMAR_DFA_STATES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "the schema's patterns, formats and numeric bounds need more than %d automaton "
                    "states", SO_MAX_GRAMMAR_DFA_STATES);
  if (c->n_dfas == c->dfas_cap) {
    const int32_t cap = c->dfas_cap ? 2 * c->dfas_cap : 16;
    struct dfa_entry *d = realloc(c->dfas, sizeof(*d) * (size_t)cap);
    if (!d) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "automaton cache");
    c->dfas = d;
    c->dfas_cap = cap;
  }
  char *k = malloc(key->n + 1);
  llb_status st = k ? new_node(c, kind, out) : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "automaton cache");
  if (st != LLB_STATUS_OK) {
    free(k);
    return st;
  }
  memcpy(k, key->s, key->n);
  c->dfas[c->n_dfas++] = (struct dfa_entry){.key = k, .key_len = key->n, .node = *out};
  c->g->nodes[*out].dfa = *dfa;
  memset(dfa, 0, sizeof(*dfa));
  c->dfa_states += c->g->nodes[*out].dfa.n;
  return LLB_STATUS_OK;
}

/* The automaton of a string's content: its patterns, formats and lengths intersected. */
static llb_status string_dfa(struct compiler *c, const struct so_cons *k, struct so_dfa *dfa) {
  struct so_dfa part = {0};
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < k->n_patterns + k->n_formats && st == LLB_STATUS_OK; i++) {
    const bool pattern = i < k->n_patterns;
    const char *rx = pattern ? k->patterns[i] : so_format_regex(k->formats[i - k->n_patterns]);
    st = so_regex_compile(rx, strlen(rx), pattern ? SO_REGEX_SEARCH : 0, &c->work, i ? &part : dfa);
    if (st != LLB_STATUS_OK && pattern) {
      char why[200];
      snprintf(why, sizeof(why), "%s", llb_err_last());
      st = LLB_ERRF(st, "schema pattern \"%.64s\": %s", rx, why);
    }
    if (st == LLB_STATUS_OK && i) st = so_dfa_intersect(dfa, &part);
  }
  if (st == LLB_STATUS_OK && (k->min_length > 0 || k->max_length >= 0)) {
    if ((st = so_dfa_code_points(k->min_length, k->max_length, &part)) == LLB_STATUS_OK) st = so_dfa_intersect(dfa, &part);
  }
  so_dfa_free(&part);
  return st;
}

static llb_status string_node(struct compiler *c, const struct so_cons *k, int32_t *out) {
  *out = -1;
  if (k->max_length >= 0 && k->max_length < k->min_length) return LLB_STATUS_OK;
  if (k->n_patterns + k->n_formats == 0) {
    llb_status st = new_node(c, SO_NODE_STRING, out);
    if (st == LLB_STATUS_OK) c->g->nodes[*out].min_length = k->min_length, c->g->nodes[*out].max_length = k->max_length;
    return st;
  }
  struct strbuf key = {0};
  char len[48];
  snprintf(len, sizeof(len), "s%lld,%lld", (long long)k->min_length, (long long)k->max_length);
  sb_put(&key, len, strlen(len) + 1);
  for (int32_t i = 0; i < k->n_patterns; i++) sb_put(&key, "p", 1), sb_put(&key, k->patterns[i], strlen(k->patterns[i]) + 1);
  for (int32_t i = 0; i < k->n_formats; i++) sb_put(&key, "f", 1), sb_put(&key, k->formats[i], strlen(k->formats[i]) + 1);
  bool found = false;
  llb_status st = key.oom ? LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "string constraints") : dfa_lookup(c, &key, SO_NODE_STRING, out, &found);
  struct so_dfa dfa = {0};
  if (st == LLB_STATUS_OK && !found) st = string_dfa(c, k, &dfa);
  if (st == LLB_STATUS_OK && !found && dfa.n > 0) st = dfa_keep(c, &key, SO_NODE_STRING, &dfa, out);
  so_dfa_free(&dfa);
  free(key.s);
  return st;
}

static llb_status number_node(struct compiler *c, const struct so_cons *k, bool integer, int32_t *out) {
  *out = -1;
  if (k->n_nums == 0) return new_node(c, integer ? SO_NODE_INTEGER : SO_NODE_NUMBER, out);
  struct strbuf key = {0};
  sb_put(&key, integer ? "i" : "n", 1);
  for (int32_t i = 0; i < k->n_nums; i++) {
    char kind = (char)('0' + k->nums[i].kind);
    sb_put(&key, &kind, 1);
    dump_value(&key, k->nums[i].value);
  }
  bool found = false;
  llb_status st = key.oom ? LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "numeric constraints") : dfa_lookup(c, &key, SO_NODE_NUMBER_DFA, out, &found);
  struct so_dfa dfa = {0};
  if (st == LLB_STATUS_OK && !found) st = so_number_dfa(k->nums, k->n_nums, integer, &c->work, &dfa);
  if (st == LLB_STATUS_OK && !found && dfa.n > 0) st = dfa_keep(c, &key, SO_NODE_NUMBER_DFA, &dfa, out);
  so_dfa_free(&dfa);
  free(key.s);
  return st;
}

static llb_status array_node(struct compiler *c, const struct so_cons *k, int depth, int32_t *out) {
  int32_t prefix[SO_MAX_PREFIX_ITEMS], n_prefix = 0, items = -1;
  int64_t max = k->max_items;
  llb_status st = LLB_STATUS_OK;
  *out = -1;
  for (int32_t i = 0; i < k->n_prefix && st == LLB_STATUS_OK && (max < 0 || i < max); i++) {
    st = compile_list(c, &k->prefix[i], depth + 1, &prefix[n_prefix]);
    if (st == LLB_STATUS_OK && prefix[n_prefix] < 0) max = i; /* element i cannot be written: none from i on */
    if (prefix[n_prefix] < 0) break;
    n_prefix++;
  }
  if (st == LLB_STATUS_OK && n_prefix == k->n_prefix && (max < 0 || max > n_prefix)) {
    st = compile_list(c, &k->items, depth + 1, &items);
    if (st == LLB_STATUS_OK && items < 0) max = n_prefix;
  }
  if (st != LLB_STATUS_OK || (max >= 0 && max < k->min_items)) return st;
  if (k->unique_items && (max < 0 || max > 1))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema keyword \"uniqueItems\" is not supported (beside maxItems over 1)");
  if ((st = new_node(c, SO_NODE_ARRAY, out))) return st;
  for (int32_t i = 0; i < n_prefix && st == LLB_STATUS_OK; i++) {
    struct so_node *nd = &c->g->nodes[*out];
    int32_t *ch = realloc(nd->children, sizeof(int32_t) * (size_t)(i + 1));
    if (!ch) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prefixItems");
    nd->children = ch;
    ch[nd->n_children++] = prefix[i];
  }
  struct so_node *nd = &c->g->nodes[*out];
  nd->items = items;
  nd->min_items = k->min_items;
  nd->max_items = max;
  return LLB_STATUS_OK;
}

static llb_status object_node(struct compiler *c, const struct so_cons *k, int depth, int32_t *out) {
  int32_t nodes[SO_MAX_PROPERTIES], named = 0, additional = -1;
  llb_status st = LLB_STATUS_OK;
  *out = -1;
  for (int32_t i = 0; i < k->n_props && st == LLB_STATUS_OK; i++) {
    st = compile_list(c, &k->props[i].schemas, depth + 1, &nodes[i]);
    if (st == LLB_STATUS_OK && nodes[i] < 0 && (k->required >> i & 1u)) return LLB_STATUS_OK; /* required, cannot be */
    named += nodes[i] >= 0;
  }
  if (st == LLB_STATUS_OK && !k->closed) st = compile_list(c, &k->additional, depth + 1, &additional);
  if (st != LLB_STATUS_OK) return st;
  /* minProperties counts named properties, and other keys as one at most: two of them could be
   * the same key. Exact while the required ones and one other key meet it (a non-empty map:
   * minProperties 1 beside additionalProperties). */
  if (additional >= 0 && k->min_props > __builtin_popcountll(k->required) + 1)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema minProperties %lld beside additionalProperties beyond the %d required "
                    "properties and one other key (keys of additionalProperties could repeat)", (long long)k->min_props,
                    __builtin_popcountll(k->required));
  if (k->min_props > named + (additional >= 0)) return LLB_STATUS_OK;
  if (k->max_props >= 0 && (__builtin_popcountll(k->required) > k->max_props || k->min_props > k->max_props))
    return LLB_STATUS_OK;
  if ((st = new_node(c, SO_NODE_OBJECT, out))) return st;
  struct so_node *nd = &c->g->nodes[*out];
  nd->props = calloc((size_t)(k->n_props ? k->n_props : 1), sizeof(*nd->props));
  if (!nd->props) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema properties");
  for (int32_t i = 0; i < k->n_props && st == LLB_STATUS_OK; i++) {
    nd->props[i].name = strdup(k->props[i].name); /* decoded: the matcher decodes keys to compare */
    nd->props[i].name_len = nd->props[i].name ? strlen(nd->props[i].name) : 0;
    if (!nd->props[i].name) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "property name");
    nd->props[i].node = nodes[i];
    nd->n_props = i + 1;
  }
  nd->required_mask = k->required;
  nd->additional = additional;
  nd->min_props = k->min_props;
  nd->max_props = k->max_props;
  return st;
}

/* Nodes of the values of merged keywords k: one per allowed type, under an anyOf. */
static llb_status typed_node(struct compiler *c, const struct so_cons *k, int depth, int32_t *out) {
  int32_t kids[6], n = 0;
  llb_status st = LLB_STATUS_OK;
  *out = -1;
  if (k->types & SO_T_NULL) st = literals_node(c, "null", NULL, &kids[n++]);
  if (st == LLB_STATUS_OK && (k->types & SO_T_BOOLEAN)) st = literals_node(c, "true", "false", &kids[n++]);
  if (st == LLB_STATUS_OK && (k->types & SO_T_INTEGER)) st = number_node(c, k, !(k->types & SO_T_NUMBER), &kids[n++]);
  if (st == LLB_STATUS_OK && (k->types & SO_T_STRING)) st = string_node(c, k, &kids[n++]);
  if (st == LLB_STATUS_OK && (k->types & SO_T_ARRAY)) st = array_node(c, k, depth, &kids[n++]);
  if (st == LLB_STATUS_OK && (k->types & SO_T_OBJECT)) st = object_node(c, k, depth, &kids[n++]);
  if (st != LLB_STATUS_OK) return st;
  int32_t live = 0;
  for (int32_t i = 0; i < n; i++) live += kids[i] >= 0;
  if (live <= 1) {
    for (int32_t i = 0; i < n; i++)
      if (kids[i] >= 0) *out = kids[i];
    return LLB_STATUS_OK;
  }
  if ((st = new_node(c, SO_NODE_ANY_OF, out))) return st;
  for (int32_t i = 0; i < n && st == LLB_STATUS_OK; i++) st = add_child(c, *out, kids[i]);
  return st;
}

static llb_status build_branch(struct compiler *c, const struct conj *q, int depth, int32_t *out) {
  *out = -1;
  if (q->n_holders == 0) return any_node(c, out);
  struct so_cons *k = malloc(sizeof(*k));
  if (!k) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema keywords");
  llb_status st = so_cons_merge(q->holders, q->n_holders, k);
  if (st == LLB_STATUS_OK) st = typed_node(c, k, depth, out);
  if (st == LLB_STATUS_OK && *out >= 0 && k->n_enums + k->n_consts > 0) st = values_node(c, k, *out, out);
  so_cons_free(k);
  free(k);
  return st;
}

/* Chooses each alternative of q's first pending list in turn: an anyOf of the branches. */
static llb_status distribute(struct compiler *c, const struct conj *q, int depth, int32_t *out) {
  const json_t *list = q->pending[0];
  struct conj *b = malloc(sizeof(*b));
  llb_status st = b ? new_node(c, SO_NODE_ANY_OF, out) : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema branch");
  size_t i;
  const json_t *alt;
  json_array_foreach(list, i, alt) {
    if (st != LLB_STATUS_OK) break;
    *b = *q;
    b->n_pending--;
    memmove(b->pending, b->pending + 1, sizeof(b->pending[0]) * (size_t)b->n_pending);
    memmove(b->owners, b->owners + 1, sizeof(b->owners[0]) * (size_t)b->n_pending);
    b->forbidden = q->owners[0]; /* an alternative that leads back to its own list reads nothing */
    st = flatten(c, b, alt);
    b->forbidden = NULL;
    int32_t child = -1;
    if (st == LLB_STATUS_OK) st = compile_conj(c, b, depth + 1, &child);
    if (st == LLB_STATUS_OK) st = add_child(c, *out, child);
  }
  free(b);
  return st;
}

static llb_status compile_conj(struct compiler *c, struct conj *q, int depth, int32_t *out) {
  *out = -1;
  if (depth > SO_MAX_SCHEMA_DEPTH) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "schema nested deeper than %d", SO_MAX_SCHEMA_DEPTH);
  if (q->unsat) return LLB_STATUS_OK;
  const json_t **key = malloc(sizeof(*key) * (size_t)(q->n_holders + q->n_pending + 1));
  if (!key) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema memo");
  uint64_t hash;
  const int32_t n = conj_key(q, key, &hash);
  struct memo_entry *e = memo_find(c, key, n, hash);
  int32_t index = -1, body = -1;
  llb_status st = LLB_STATUS_OK;
  if (e) {
    /* Done, or being built: a recursive reference, which gets an anyOf filled in afterwards. */
    if (!e->done && e->slot < 0) {
      const int32_t at = (int32_t)(e - c->memo);
      st = new_node(c, SO_NODE_ANY_OF, &c->memo[at].slot); /* new_node does not move the memo */
      e = &c->memo[at];
    }
    *out = e->done ? e->node : e->slot;
    free(key);
    return st;
  }
  st = memo_add(c, key, n, hash, &index);
  free(key);
  if (st != LLB_STATUS_OK) return st;
  if (q->n_pending == 0) st = build_branch(c, q, depth, &body);
  else st = distribute(c, q, depth, &body);
  if (st != LLB_STATUS_OK) return st;
  e = &c->memo[index];
  if (e->slot >= 0) {
    st = add_child(c, e->slot, body);
    body = e->slot;
  }
  e = &c->memo[index];
  e->node = body;
  e->done = true;
  *out = body;
  return st;
}

/* ---- after building: what can produce a value, and cutting off what cannot ---- */

static int32_t element_node(const struct so_node *nd, int64_t i) { return i < nd->n_children ? nd->children[i] : nd->items; }

static bool productive_now(const struct so_grammar *g, const uint8_t *ok, int32_t i) {
  const struct so_node *nd = &g->nodes[i];
  switch (nd->kind) {
  case SO_NODE_ANY_OF:
    for (int32_t k = 0; k < nd->n_children; k++)
      if (ok[nd->children[k]]) return true;
    return false;
  case SO_NODE_OBJECT: {
    int64_t named = 0;
    for (int32_t k = 0; k < nd->n_props; k++) {
      const bool p = nd->props[k].node >= 0 && ok[nd->props[k].node];
      if (!p && (nd->required_mask >> k & 1u)) return false;
      named += p;
    }
    return named + (nd->additional >= 0 && ok[nd->additional]) >= nd->min_props;
  }
  case SO_NODE_ARRAY:
    for (int64_t k = 0; k < nd->min_items; k++) {
      const int32_t e = element_node(nd, k);
      if (e < 0 || !ok[e]) return false;
      if (k >= nd->n_children) break; /* the rest are all items */
    }
    return true;
  case SO_NODE_LITERALS: return nd->n_lits > 0;
  case SO_NODE_REGEX:
  case SO_NODE_NUMBER_DFA: return nd->dfa.n > 0;
  default: return true;
  }
}

/* Least fixpoint of "can produce a finite value"; then every reference to a node that cannot
 * is cut: alternatives dropped, optional properties forbidden, arrays ended before it. */
static llb_status prune(struct so_grammar *g) {
  uint8_t *ok = calloc((size_t)g->n_nodes, 1);
  if (!ok) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar check");
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < g->n_nodes; i++)
      if (!ok[i] && productive_now(g, ok, i)) ok[i] = 1, changed = true;
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    struct so_node *nd = &g->nodes[i];
    if (nd->kind == SO_NODE_ANY_OF) {
      int32_t m = 0;
      for (int32_t k = 0; k < nd->n_children; k++)
        if (ok[nd->children[k]]) nd->children[m++] = nd->children[k];
      nd->n_children = m;
    } else if (nd->kind == SO_NODE_OBJECT) {
      for (int32_t k = 0; k < nd->n_props; k++)
        if (nd->props[k].node >= 0 && !ok[nd->props[k].node]) nd->props[k].node = -1;
      if (nd->additional >= 0 && !ok[nd->additional]) nd->additional = -1;
    } else if (nd->kind == SO_NODE_ARRAY) {
      for (int32_t k = 0; k <= nd->n_children; k++) {
        const int32_t e = element_node(nd, k);
        if (e >= 0 && ok[e]) continue;
        if (nd->max_items < 0 || nd->max_items > k) nd->max_items = k;
        if (k < nd->n_children) nd->n_children = k;
        nd->items = -1;
        break;
      }
    }
  }
  const bool root_ok = ok[g->root];
  free(ok);
  if (!root_ok) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema allows no value");
  return LLB_STATUS_OK;
}

/* An anyOf that reaches itself through anyOf alone would let the matcher expand forever
 * without reading a byte. DFS colours: 0 unseen, 1 on the path, 2 done. */
static bool any_of_cycle(const struct so_grammar *g, int32_t i, uint8_t *colour) {
  if (g->nodes[i].kind != SO_NODE_ANY_OF || colour[i] == 2) return false;
  if (colour[i] == 1) return true;
  colour[i] = 1;
  for (int32_t k = 0; k < g->nodes[i].n_children; k++)
    if (any_of_cycle(g, g->nodes[i].children[k], colour)) return true;
  colour[i] = 2;
  return false;
}

static llb_status check_grammar(struct so_grammar *g) {
  llb_status st = prune(g);
  if (st != LLB_STATUS_OK) return st;
  uint8_t *colour = calloc((size_t)g->n_nodes, 1);
  if (!colour) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar check");
  bool cycle = false;
  for (int32_t i = 0; i < g->n_nodes && !cycle; i++) cycle = any_of_cycle(g, i, colour);
  free(colour);
  if (cycle) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema $ref cycle that reads no input");
  return LLB_STATUS_OK;
}

void so_grammar_destroy(struct so_grammar *g) {
  if (!g) return;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    struct so_node *nd = &g->nodes[i];
    for (int32_t j = 0; j < nd->n_props; j++) free(nd->props[j].name);
    free(nd->props);
    for (int32_t j = 0; j < nd->n_lits; j++) free(nd->lits[j]);
    free(nd->lits);
    free(nd->lit_lens);
    free(nd->children);
    if (!nd->dfa_shared) so_dfa_free(&nd->dfa);
    so_gbnf_free(nd->gbnf);
  }
  free(g->nodes);
  free(g);
}

static atomic_uint_fast64_t next_grammar_id = 1;

static llb_status compiler_init(struct compiler *c) {
  memset(c, 0, sizeof(*c));
  c->any = -1;
  c->work = SO_SCHEMA_WORK;
  c->g = calloc(1, sizeof(*c->g));
  if (!c->g) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar");
  c->g->id = atomic_fetch_add(&next_grammar_id, 1);
  return LLB_STATUS_OK;
}

static void compiler_free_scratch(struct compiler *c) {
  for (int32_t i = 0; i < c->n_memo; i++) free(c->memo[i].key);
  free(c->memo);
  for (int32_t i = 0; i < c->n_dfas; i++) free(c->dfas[i].key);
  free(c->dfas);
  c->memo = NULL;
  c->dfas = NULL;
  c->n_memo = c->memo_cap = c->n_dfas = c->dfas_cap = 0;
}

static json_t *parse_spec(const char *text, size_t len, const char *what, llb_status *st) {
  if (len > SO_MAX_SPEC_BYTES) {
    *st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "%s of %zu bytes (at most %d)", what, len, SO_MAX_SPEC_BYTES);
    return NULL;
  }
  json_error_t err;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
  if (!j) *st = LLB_ERRF(LLB_STATUS_MALFORMED, "%s is not JSON: %s", what, err.text);
  return j;
}

llb_status so_grammar_compile_json_schema(const char *text, size_t len, struct so_grammar **out) {
  *out = NULL;
  struct compiler c;
  llb_status st = compiler_init(&c);
  if (st != LLB_STATUS_OK) return st;
  c.root = parse_spec(text, len, "json schema", &st);
  if (c.root) {
    struct so_schema_list top = {.v = (const json_t **)&c.root, .n = 1, .cap = 1};
    st = compile_list(&c, &top, 0, &c.g->root);
    if (st == LLB_STATUS_OK && c.g->root < 0) st = LLB_ERRF(LLB_STATUS_MALFORMED, "schema allows no value");
  }
  if (st == LLB_STATUS_OK) st = check_grammar(c.g);
  compiler_free_scratch(&c);
  json_decref(c.root);
  if (st != LLB_STATUS_OK) {
    so_grammar_destroy(c.g);
    return LLB_UPDATE_ERR_STACK(st);
  }
  *out = c.g;
  return LLB_STATUS_OK;
}

llb_status so_grammar_compile_regex(const char *text, size_t len, struct so_grammar **out) {
  *out = NULL;
  struct compiler c;
  llb_status st = compiler_init(&c);
  if (st != LLB_STATUS_OK) return st;
  if ((st = new_node(&c, SO_NODE_REGEX, &c.g->root)) == LLB_STATUS_OK)
    st = so_regex_compile(text, len, 0, NULL, &c.g->nodes[c.g->root].dfa);
  if (st == LLB_STATUS_OK && c.g->nodes[c.g->root].dfa.n == 0) st = LLB_ERRF(LLB_STATUS_MALFORMED, "regex matches nothing");
  if (st != LLB_STATUS_OK) {
    so_grammar_destroy(c.g);
    return LLB_UPDATE_ERR_STACK(st);
  }
  *out = c.g;
  return LLB_STATUS_OK;
}

llb_status so_grammar_compile_gbnf(const char *text, size_t len, struct so_grammar **out) {
  *out = NULL;
  struct compiler c;
  llb_status st = compiler_init(&c);
  if (st != LLB_STATUS_OK) return st;
  if ((st = new_node(&c, SO_NODE_GBNF, &c.g->root)) == LLB_STATUS_OK)
    st = so_gbnf_compile(text, len, &c.g->nodes[c.g->root].gbnf);
  if (st != LLB_STATUS_OK) {
    so_grammar_destroy(c.g);
    return LLB_UPDATE_ERR_STACK(st);
  }
  *out = c.g;
  return LLB_STATUS_OK;
}

llb_status so_grammar_compile_json_object(struct so_grammar **out) {
  static const char schema[] = "{\"type\":\"object\",\"additionalProperties\":true}";
  return so_grammar_compile_json_schema(schema, sizeof(schema) - 1, out);
}

llb_status so_grammar_compile_choice(const char *text, size_t len, struct so_grammar **out) {
  *out = NULL;
  struct compiler c;
  llb_status st = compiler_init(&c);
  if (st != LLB_STATUS_OK) return st;
  json_t *arr = parse_spec(text, len, "choice list", &st);
  if (arr && (!json_is_array(arr) || json_array_size(arr) == 0))
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "choice must be a non-empty array of strings");
  if (st == LLB_STATUS_OK) st = new_node(&c, SO_NODE_LITERALS, &c.g->root);
  size_t i;
  json_t *s;
  json_array_foreach(arr, i, s) {
    if (st != LLB_STATUS_OK) break;
    if (!json_is_string(s) || json_string_length(s) == 0)
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "choice %zu is not a non-empty string", i);
    else st = add_literal(&c, c.g->root, json_string_value(s), json_string_length(s));
  }
  json_decref(arr);
  if (st != LLB_STATUS_OK) {
    so_grammar_destroy(c.g);
    return LLB_UPDATE_ERR_STACK(st);
  }
  *out = c.g;
  return LLB_STATUS_OK;
}
