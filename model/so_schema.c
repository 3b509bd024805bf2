/* JSON Schema (draft 2020-12 / OpenAI strict subset) → structured-output grammar nodes.
 * What a keyword asks that the matcher cannot enforce is refused (UNSUPPORTED, naming it)
 * rather than ignored, so an output that passes the matcher validates against the schema. */
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/so_internal.h"

#define SO_MAX_SCHEMA_DEPTH 64

struct ref_memo {
  const json_t *schema;
  int32_t node;
};

struct compiler {
  struct so_grammar *g;
  int32_t cap;
  json_t *root;
  struct ref_memo memo[256];
  int32_t n_memo;
  int32_t any; /* node of "any JSON value", -1 until built */
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
  *out = c->g->n_nodes++;
  return LLB_STATUS_OK;
}

/* Appends literal bytes text[0..len) to node i (copied). */
static llb_status add_literal(struct compiler *c, int32_t i, const char *text, size_t len) {
  struct so_node *nd = &c->g->nodes[i];
  if (nd->n_lits == SO_MAX_LITERALS)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d enum values or choices", SO_MAX_LITERALS);
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

static llb_status add_child(struct compiler *c, int32_t i, int32_t child) {
  struct so_node *nd = &c->g->nodes[i];
  if (nd->n_children == SO_MAX_ANY_OF)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d alternatives", SO_MAX_ANY_OF);
  int32_t *ch = realloc(nd->children, sizeof(int32_t) * ((size_t)nd->n_children + 1));
  if (!ch) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar alternatives");
  nd->children = ch;
  nd->children[nd->n_children++] = child;
  return LLB_STATUS_OK;
}

/* Serialized compact JSON of v as a literal of node i. */
static llb_status add_json_literal(struct compiler *c, int32_t i, const json_t *v) {
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "enum value");
  llb_status st = add_literal(c, i, text, strlen(text));
  free(text);
  return st;
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

static llb_status compile(struct compiler *c, json_t *s, int depth, int32_t *out);

static bool is_annotation(const char *key) {
  static const char *const names[] = {"title", "description", "default", "examples", "$schema",
                                      "$id", "$comment", "deprecated", "readOnly", "writeOnly",
                                      "$defs", "definitions", "strict", "name", "discriminator"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(key, names[i]) == 0) return true;
  return false;
}

static llb_status get_count(const json_t *s, const char *key, int64_t dflt, int64_t *out) {
  const json_t *v = json_object_get(s, key);
  *out = dflt;
  if (!v) return LLB_STATUS_OK;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a non-negative integer", key);
  *out = json_integer_value(v);
  return LLB_STATUS_OK;
}

static llb_status compile_ref(struct compiler *c, const char *ref, int depth, int32_t *out) {
  json_t *target = NULL;
  if (strcmp(ref, "#") == 0) target = c->root;
  else if (strncmp(ref, "#/$defs/", 8) == 0) target = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
  else if (strncmp(ref, "#/definitions/", 14) == 0)
    target = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
  else return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "$ref \"%.64s\": only #, #/$defs/NAME and #/definitions/NAME", ref);
  if (!target) return LLB_ERRF(LLB_STATUS_MALFORMED, "$ref \"%.64s\" names no schema", ref);
  for (int32_t i = 0; i < c->n_memo; i++)
    if (c->memo[i].schema == target) {
      *out = c->memo[i].node;
      return LLB_STATUS_OK;
    }
  if (c->n_memo == (int32_t)(sizeof(c->memo) / sizeof(c->memo[0])))
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "too many $ref targets");
  /* The reference is a one-way anyOf filled in after its body compiles: recursion works. */
  int32_t slot, body;
  llb_status st = new_node(c, SO_NODE_ANY_OF, &slot);
  if (st != LLB_STATUS_OK) return st;
  c->memo[c->n_memo++] = (struct ref_memo){target, slot};
  st = compile(c, target, depth + 1, &body);
  if (st == LLB_STATUS_OK) st = add_child(c, slot, body);
  *out = slot;
  return st;
}

static llb_status compile_object(struct compiler *c, json_t *s, int depth, int32_t node) {
  json_t *props = json_object_get(s, "properties");
  json_t *required = json_object_get(s, "required");
  json_t *extra = json_object_get(s, "additionalProperties");
  if (props && !json_is_object(props)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema properties must be an object");
  if (required && !json_is_array(required)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema required must be an array");
  size_t n = props ? json_object_size(props) : 0;
  if (n > SO_MAX_PROPERTIES) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "object with more than %d properties", SO_MAX_PROPERTIES);
  struct so_property *pr = calloc(n ? n : 1, sizeof(*pr));
  if (!pr) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema properties");
  c->g->nodes[node].props = pr;
  const char *key;
  json_t *sub;
  int32_t i = 0;
  json_object_foreach(props, key, sub) {
    json_t *name = json_string(key);
    char *quoted = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
    json_decref(name);
    if (!quoted) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "property name");
    size_t ql = strlen(quoted);
    memmove(quoted, quoted + 1, ql - 2); /* the key between its quotes */
    quoted[ql - 2] = 0;
    c->g->nodes[node].props[i].name = quoted;
    c->g->nodes[node].props[i].name_len = ql - 2;
    c->g->nodes[node].n_props = ++i;
    int32_t child;
    llb_status st = compile(c, sub, depth + 1, &child);
    if (st != LLB_STATUS_OK) return st;
    c->g->nodes[node].props[i - 1].node = child;
  }
  size_t k;
  json_t *r;
  json_array_foreach(required, k, r) {
    if (!json_is_string(r)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema required must list strings");
    json_t *known = props ? json_object_get(props, json_string_value(r)) : NULL;
    int32_t idx = -1, j = 0;
    json_object_foreach(props, key, sub) {
      if (sub == known) idx = j;
      j++;
    }
    if (idx < 0)
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "required property \"%.64s\" has no schema in properties",
                      json_string_value(r));
    c->g->nodes[node].required_mask |= 1ull << idx;
  }
  if (extra && !json_is_boolean(extra) && !json_is_object(extra))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema additionalProperties must be a boolean or a schema");
  if (json_is_true(extra) || (json_is_object(extra) && json_object_size(extra) == 0)) {
    int32_t any;
    llb_status st = any_node(c, &any);
    if (st != LLB_STATUS_OK) return st;
    c->g->nodes[node].additional = any;
  } else if (json_is_object(extra)) {
    int32_t child;
    llb_status st = compile(c, extra, depth + 1, &child);
    if (st != LLB_STATUS_OK) return st;
    c->g->nodes[node].additional = child;
  }
  return LLB_STATUS_OK;
}

static llb_status compile_typed(struct compiler *c, json_t *s, const char *type, int depth, int32_t *out) {
  llb_status st;
  if (strcmp(type, "boolean") == 0) return literals_node(c, "true", "false", out);
  if (strcmp(type, "null") == 0) return literals_node(c, "null", NULL, out);
  if (strcmp(type, "number") == 0) return new_node(c, SO_NODE_NUMBER, out);
  if (strcmp(type, "integer") == 0) return new_node(c, SO_NODE_INTEGER, out);
  if (strcmp(type, "string") == 0) {
    int64_t lo, hi;
    if ((st = get_count(s, "minLength", 0, &lo)) || (st = get_count(s, "maxLength", -1, &hi))) return st;
    if (hi >= 0 && hi < lo) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema maxLength < minLength");
    if ((st = new_node(c, SO_NODE_STRING, out))) return st;
    c->g->nodes[*out].min_length = lo;
    c->g->nodes[*out].max_length = hi;
    return LLB_STATUS_OK;
  }
  if (strcmp(type, "array") == 0) {
    int64_t lo, hi;
    if ((st = get_count(s, "minItems", 0, &lo)) || (st = get_count(s, "maxItems", -1, &hi))) return st;
    if (hi >= 0 && hi < lo) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema maxItems < minItems");
    json_t *items = json_object_get(s, "items");
    int32_t child;
    if (items && !json_is_object(items) && !json_is_true(items))
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema items must be one schema");
    st = items && json_is_object(items) ? compile(c, items, depth + 1, &child) : any_node(c, &child);
    if (st || (st = new_node(c, SO_NODE_ARRAY, out))) return st;
    c->g->nodes[*out].items = child;
    c->g->nodes[*out].min_items = lo;
    c->g->nodes[*out].max_items = hi;
    return LLB_STATUS_OK;
  }
  if (strcmp(type, "object") == 0) {
    if ((st = new_node(c, SO_NODE_OBJECT, out))) return st;
    return compile_object(c, s, depth, *out);
  }
  return LLB_ERRF(LLB_STATUS_MALFORMED, "schema type \"%.32s\" is not a JSON Schema type", type);
}

/* Keywords each type reads; anything else that is no annotation is refused. */
static bool keyword_known(const char *key) {
  static const char *const names[] = {"type", "properties", "required", "additionalProperties",
                                      "items", "minItems", "maxItems", "minLength", "maxLength",
                                      "enum", "const", "anyOf", "oneOf", "allOf", "$ref"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(key, names[i]) == 0) return true;
  return is_annotation(key);
}

static llb_status compile_union(struct compiler *c, json_t *alts, const char *kw, int depth, int32_t *out) {
  if (!json_is_array(alts) || json_array_size(alts) == 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a non-empty array", kw);
  llb_status st = new_node(c, SO_NODE_ANY_OF, out);
  size_t i;
  json_t *a;
  json_array_foreach(alts, i, a) {
    int32_t child;
    if (st == LLB_STATUS_OK) st = compile(c, a, depth + 1, &child);
    if (st == LLB_STATUS_OK) st = add_child(c, *out, child);
  }
  return st;
}

static llb_status compile(struct compiler *c, json_t *s, int depth, int32_t *out) {
  if (depth > SO_MAX_SCHEMA_DEPTH) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "schema nested deeper than %d", SO_MAX_SCHEMA_DEPTH);
  if (json_is_true(s)) return any_node(c, out);
  if (!json_is_object(s)) return LLB_ERRF(LLB_STATUS_MALFORMED, "a schema must be an object or true");
  const char *key;
  json_t *v;
  bool has_other = false;
  json_object_foreach(s, key, v) {
    if (!keyword_known(key)) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema keyword \"%.64s\" is not supported", key);
    if (!is_annotation(key) && strcmp(key, "$ref") && strcmp(key, "anyOf") && strcmp(key, "oneOf") && strcmp(key, "allOf"))
      has_other = true;
  }
  json_t *ref = json_object_get(s, "$ref"), *any_of = json_object_get(s, "anyOf");
  json_t *one_of = json_object_get(s, "oneOf"), *all_of = json_object_get(s, "allOf");
  int combinators = !!ref + !!any_of + !!one_of + !!all_of;
  if (combinators > 1 || (combinators && has_other))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "$ref, anyOf, oneOf and allOf only alone (with annotations)");
  if (ref) {
    if (!json_is_string(ref)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema $ref must be a string");
    return compile_ref(c, json_string_value(ref), depth, out);
  }
  if (any_of) return compile_union(c, any_of, "anyOf", depth, out);
  if (one_of) return compile_union(c, one_of, "oneOf", depth, out);
  if (all_of) {
    if (!json_is_array(all_of) || json_array_size(all_of) != 1)
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "allOf only with one schema");
    return compile(c, json_array_get(all_of, 0), depth + 1, out);
  }
  json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
  if (en || cn) {
    if (en && cn) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "enum and const together");
    if (en && (!json_is_array(en) || json_array_size(en) == 0))
      return LLB_ERRF(LLB_STATUS_MALFORMED, "schema enum must be a non-empty array");
    llb_status st = new_node(c, SO_NODE_LITERALS, out);
    size_t i;
    json_t *e;
    if (cn && st == LLB_STATUS_OK) st = add_json_literal(c, *out, cn);
    json_array_foreach(en, i, e) if (st == LLB_STATUS_OK) st = add_json_literal(c, *out, e);
    return st; /* the values are the schema's: a type beside them adds nothing to emit */
  }
  json_t *type = json_object_get(s, "type");
  if (json_is_string(type)) return compile_typed(c, s, json_string_value(type), depth, out);
  if (json_is_array(type) && json_array_size(type) > 0) {
    llb_status st = new_node(c, SO_NODE_ANY_OF, out);
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) {
      int32_t child;
      if (st == LLB_STATUS_OK && !json_is_string(t)) st = LLB_ERRF(LLB_STATUS_MALFORMED, "schema type list must hold strings");
      if (st == LLB_STATUS_OK) st = compile_typed(c, s, json_string_value(t), depth, &child);
      if (st == LLB_STATUS_OK) st = add_child(c, *out, child);
    }
    return st;
  }
  if (type) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema type must be a string or a list of strings");
  if (json_object_get(s, "properties")) return compile_typed(c, s, "object", depth, out);
  if (json_object_get(s, "items")) return compile_typed(c, s, "array", depth, out);
  if (has_other) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema without a type");
  return any_node(c, out);
}

/* An anyOf that reaches itself through anyOf alone ({"$ref": "#"} at the root, two $defs
 * naming each other) would let the matcher expand forever without reading a byte. DFS
 * colours: 0 unseen, 1 on the path, 2 done. */
static bool any_of_cycle(const struct so_grammar *g, int32_t i, uint8_t *colour) {
  if (g->nodes[i].kind != SO_NODE_ANY_OF || colour[i] == 2) return false;
  if (colour[i] == 1) return true;
  colour[i] = 1;
  for (int32_t k = 0; k < g->nodes[i].n_children; k++)
    if (any_of_cycle(g, g->nodes[i].children[k], colour)) return true;
  colour[i] = 2;
  return false;
}

static llb_status check_grammar(const struct so_grammar *g) {
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
    free(nd->dfa);
    free(nd->dfa_accept);
    so_gbnf_free(nd->gbnf);
  }
  free(g->nodes);
  free(g);
}

static atomic_uint_fast64_t next_grammar_id = 1;

uint64_t so_grammar_next_id(void) { return atomic_fetch_add(&next_grammar_id, 1); }

static llb_status compiler_init(struct compiler *c) {
  memset(c, 0, sizeof(*c));
  c->any = -1;
  c->g = calloc(1, sizeof(*c->g));
  if (!c->g) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar");
  c->g->id = atomic_fetch_add(&next_grammar_id, 1);
  return LLB_STATUS_OK;
}

static json_t *parse_spec(const char *text, size_t len, const char *what, llb_status *st) {
  if (len > SO_MAX_SPEC_BYTES) {
    *st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "%s of %zu bytes (at most %d)", what, len, SO_MAX_SPEC_BYTES);
    return NULL;
  }
  json_error_t err;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!j) *st = LLB_ERRF(LLB_STATUS_MALFORMED, "%s is not JSON: %s", what, err.text);
  return j;
}

llb_status so_grammar_compile_json_schema(const char *text, size_t len, struct so_grammar **out) {
  *out = NULL;
  struct compiler c;
  llb_status st = compiler_init(&c);
  if (st != LLB_STATUS_OK) return st;
  c.root = parse_spec(text, len, "json schema", &st);
  if (c.root) st = compile(&c, c.root, 0, &c.g->root);
  if (st == LLB_STATUS_OK) st = check_grammar(c.g);
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
    st = so_regex_compile(text, len, &c.g->nodes[c.g->root]);
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
