/* A conjunction of JSON Schema objects (the schemas a value must meet at once: one schema with
 * its $ref and allOf members, or an anyOf branch with the keywords beside it) merged keyword
 * by keyword into one constraint set: types intersected, lengths and counts tightened, lists
 * (patterns, formats, numeric bounds, enums) collected, and per property / array position the
 * list of schemas its value must meet. JSON Schema's semantics, with one default of our own
 * (OpenAI strict mode): an object schema that lists properties and says nothing of
 * additionalProperties is closed. Keywords that cannot be enforced are refused by name. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/structured/so_internal.h"

bool so_keyword_is_annotation(const char *key) {
  static const char *const names[] = {"title",     "description", "default",    "examples",      "$schema",
                                      "$id",       "$comment",    "deprecated", "readOnly",      "writeOnly",
                                      "$defs",     "definitions", "strict",     "name",          "discriminator",
                                      "$anchor",   "contentEncoding", "contentMediaType", "contentSchema",
                                      "$vocabulary", "example",  "nullable",   "xml",           "externalDocs"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(key, names[i]) == 0) return true;
  return strncmp(key, "x-", 2) == 0; /* OpenAPI extensions */
}

llb_status so_schema_list_add(struct so_schema_list *l, const json_t *s) {
  if (l->n == l->cap) {
    int32_t cap = l->cap ? 2 * l->cap : 4;
    const json_t **v = realloc(l->v, sizeof(*v) * (size_t)cap);
    if (!v) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "schema list");
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = s;
  return LLB_STATUS_OK;
}

void so_cons_free(struct so_cons *c) {
  for (int32_t i = 0; i < c->n_prefix; i++) free(c->prefix[i].v);
  for (int32_t i = 0; i < c->n_props; i++) free(c->props[i].schemas.v);
  free(c->items.v);
  free(c->additional.v);
  memset(c, 0, sizeof(*c));
}

static uint32_t type_bits(const char *t) {
  static const struct {
    const char *name;
    uint32_t bits;
  } types[] = {{"null", SO_T_NULL},       {"boolean", SO_T_BOOLEAN}, {"object", SO_T_OBJECT}, {"array", SO_T_ARRAY},
               {"string", SO_T_STRING},   {"integer", SO_T_INTEGER}, {"number", SO_T_NUMBER | SO_T_INTEGER}};
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
    if (strcmp(t, types[i].name) == 0) return types[i].bits;
  return 0;
}

/* The types one schema allows: "type" (a name or a list). OpenAPI's `nullable` is not JSON
 * Schema and is ignored, as a validator ignores it: write ["string", "null"]. */
static llb_status holder_types(const json_t *h, uint32_t *out) {
  const json_t *type = json_object_get(h, "type");
  *out = SO_T_ALL;
  if (!type) return LLB_STATUS_OK;
  uint32_t bits = 0;
  if (json_is_string(type)) {
    bits = type_bits(json_string_value(type));
    if (!bits) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema type \"%.32s\" is not a JSON Schema type", json_string_value(type));
  } else if (json_is_array(type) && json_array_size(type) > 0) {
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) {
      uint32_t b = json_is_string(t) ? type_bits(json_string_value(t)) : 0;
      if (!b) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema type list must hold JSON Schema type names");
      bits |= b;
    }
  } else {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema type must be a string or a non-empty list of strings");
  }
  *out = bits;
  return LLB_STATUS_OK;
}

static llb_status get_count(const json_t *v, const char *key, int64_t *out) {
  if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) <= 0x7fffffff &&
      json_real_value(v) == (double)(int64_t)json_real_value(v)) {
    *out = (int64_t)json_real_value(v); /* 2.0 is an integer to JSON Schema */
    return LLB_STATUS_OK;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a non-negative integer", key);
  *out = json_integer_value(v);
  return LLB_STATUS_OK;
}

static void tighten_min(int64_t *cur, int64_t v) {
  if (v > *cur) *cur = v;
}

static void tighten_max(int64_t *cur, int64_t v) {
  if (*cur < 0 || v < *cur) *cur = v;
}

static llb_status add_num(struct so_cons *c, const json_t *v, enum so_num_kind kind, const char *key) {
  if (!json_is_number(v)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema %s must be a number", key);
  if (c->n_nums == SO_CONS_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d numeric bounds on one value", SO_CONS_MAX);
  c->nums[c->n_nums++] = (struct so_num_keyword){.value = v, .kind = kind};
  return LLB_STATUS_OK;
}

/* minimum / maximum / exclusive* / multipleOf of one schema (draft 4's boolean exclusive* too). */
static llb_status merge_numbers(struct so_cons *c, const json_t *h) {
  static const struct {
    const char *key, *excl;
    enum so_num_kind kind, xkind;
  } sides[] = {{"minimum", "exclusiveMinimum", SO_NUM_MIN, SO_NUM_XMIN}, {"maximum", "exclusiveMaximum", SO_NUM_MAX, SO_NUM_XMAX}};
  llb_status st = LLB_STATUS_OK;
  for (int k = 0; k < 2 && st == LLB_STATUS_OK; k++) {
    const json_t *v = json_object_get(h, sides[k].key), *x = json_object_get(h, sides[k].excl);
    if (x && !json_is_boolean(x) && (st = add_num(c, x, sides[k].xkind, sides[k].excl))) break;
    if (v) st = add_num(c, v, json_is_true(x) ? sides[k].xkind : sides[k].kind, sides[k].key);
  }
  const json_t *m = json_object_get(h, "multipleOf");
  if (m && st == LLB_STATUS_OK) st = add_num(c, m, SO_NUM_MULTIPLE, "multipleOf");
  return st;
}

static llb_status merge_strings(struct so_cons *c, const json_t *h) {
  llb_status st = LLB_STATUS_OK;
  const json_t *v;
  int64_t n;
  if ((v = json_object_get(h, "minLength")) && !(st = get_count(v, "minLength", &n))) tighten_min(&c->min_length, n);
  if (st == LLB_STATUS_OK && (v = json_object_get(h, "maxLength")) && !(st = get_count(v, "maxLength", &n)))
    tighten_max(&c->max_length, n);
  if (st != LLB_STATUS_OK) return st;
  if ((v = json_object_get(h, "pattern"))) {
    if (!json_is_string(v)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema pattern must be a string");
    if (c->n_patterns == SO_CONS_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d patterns on one value", SO_CONS_MAX);
    c->patterns[c->n_patterns++] = json_string_value(v);
  }
  if ((v = json_object_get(h, "format"))) {
    if (!json_is_string(v)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema format must be a string");
    if (!so_format_regex(json_string_value(v)))
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema format \"%.32s\" is not supported (supported: %s)",
                      json_string_value(v), so_format_names());
    if (c->n_formats == SO_CONS_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d formats on one value", SO_CONS_MAX);
    c->formats[c->n_formats++] = json_string_value(v);
  }
  return LLB_STATUS_OK;
}

/* One schema's array parts: its prefix (prefixItems, or draft 7's items array) and what the
 * elements past it meet (items, or additionalItems beside an items array; NULL = anything). */
struct array_parts {
  const json_t *prefix; /* array or NULL */
  const json_t *rest;
};

static llb_status array_parts(const json_t *h, struct array_parts *p) {
  const json_t *prefix = json_object_get(h, "prefixItems"), *items = json_object_get(h, "items");
  p->prefix = NULL;
  p->rest = items;
  if (prefix) {
    if (!json_is_array(prefix)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema prefixItems must be an array");
    p->prefix = prefix;
  } else if (json_is_array(items)) {
    p->prefix = items;
    p->rest = json_object_get(h, "additionalItems");
  }
  if (p->rest && !json_is_object(p->rest) && !json_is_boolean(p->rest))
    return LLB_ERRF(LLB_STATUS_MALFORMED, "schema items must be a schema");
  if (p->prefix && json_array_size(p->prefix) > SO_MAX_PREFIX_ITEMS)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d prefixItems", SO_MAX_PREFIX_ITEMS);
  return LLB_STATUS_OK;
}

static llb_status merge_arrays(struct so_cons *c, const json_t *const *holders, int32_t n) {
  llb_status st = LLB_STATUS_OK;
  struct array_parts p;
  for (int32_t h = 0; h < n && st == LLB_STATUS_OK; h++) {
    if ((st = array_parts(holders[h], &p))) break;
    if (p.prefix && (int32_t)json_array_size(p.prefix) > c->n_prefix) c->n_prefix = (int32_t)json_array_size(p.prefix);
    const json_t *v;
    int64_t k;
    if ((v = json_object_get(holders[h], "minItems")) && !(st = get_count(v, "minItems", &k))) tighten_min(&c->min_items, k);
    if (st == LLB_STATUS_OK && (v = json_object_get(holders[h], "maxItems")) && !(st = get_count(v, "maxItems", &k)))
      tighten_max(&c->max_items, k);
    if (json_is_true(json_object_get(holders[h], "uniqueItems"))) c->unique_items = true;
  }
  for (int32_t h = 0; h < n && st == LLB_STATUS_OK; h++) {
    array_parts(holders[h], &p);
    const int32_t len = p.prefix ? (int32_t)json_array_size(p.prefix) : 0;
    for (int32_t i = 0; i < c->n_prefix && st == LLB_STATUS_OK; i++) {
      const json_t *s = i < len ? json_array_get(p.prefix, (size_t)i) : p.rest;
      if (s) st = so_schema_list_add(&c->prefix[i], s);
    }
    if (p.rest && st == LLB_STATUS_OK) st = so_schema_list_add(&c->items, p.rest);
  }
  return st;
}

static int32_t prop_index(const struct so_cons *c, const char *name) {
  for (int32_t i = 0; i < c->n_props; i++)
    if (strcmp(c->props[i].name, name) == 0) return i;
  return -1;
}

static llb_status add_prop_name(struct so_cons *c, const char *name) {
  if (prop_index(c, name) >= 0) return LLB_STATUS_OK;
  if (c->n_props == SO_MAX_PROPERTIES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "object with more than %d properties", SO_MAX_PROPERTIES);
  c->props[c->n_props++].name = name;
  return LLB_STATUS_OK;
}

/* Pass 1: every property name (declared or required), counts, what extra keys meet. */
static llb_status object_names(struct so_cons *c, const json_t *const *holders, int32_t n, bool *declared, bool *said) {
  llb_status st = LLB_STATUS_OK;
  for (int32_t h = 0; h < n && st == LLB_STATUS_OK; h++) {
    const json_t *props = json_object_get(holders[h], "properties"), *req = json_object_get(holders[h], "required");
    const json_t *extra = json_object_get(holders[h], "additionalProperties"), *v;
    if (props && !json_is_object(props)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema properties must be an object");
    if (req && !json_is_array(req)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema required must be an array");
    if (extra && !json_is_boolean(extra) && !json_is_object(extra))
      return LLB_ERRF(LLB_STATUS_MALFORMED, "schema additionalProperties must be a boolean or a schema");
    const char *key;
    size_t i;
    json_object_foreach((json_t *)props, key, v) if (st == LLB_STATUS_OK) st = add_prop_name(c, key);
    json_array_foreach(req, i, v) {
      if (!json_is_string(v)) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema required must list strings");
      if (st == LLB_STATUS_OK) st = add_prop_name(c, json_string_value(v));
    }
    if (props) *declared = true;
    if (extra) *said = true;
    if (extra && !json_is_true(extra) && st == LLB_STATUS_OK) st = so_schema_list_add(&c->additional, extra);
    int64_t k;
    if (st == LLB_STATUS_OK && (v = json_object_get(holders[h], "minProperties")) && !(st = get_count(v, "minProperties", &k)))
      tighten_min(&c->min_props, k);
    if (st == LLB_STATUS_OK && (v = json_object_get(holders[h], "maxProperties")) && !(st = get_count(v, "maxProperties", &k)))
      tighten_max(&c->max_props, k);
  }
  return st;
}

static llb_status merge_objects(struct so_cons *c, const json_t *const *holders, int32_t n) {
  bool declared = false, said = false;
  llb_status st = object_names(c, holders, n, &declared, &said);
  /* Pass 2: a property's value meets the schema each holder gives its name, or, where a holder
   * does not name it, that holder's additionalProperties. */
  for (int32_t i = 0; i < c->n_props && st == LLB_STATUS_OK; i++)
    for (int32_t h = 0; h < n && st == LLB_STATUS_OK; h++) {
      const json_t *s = json_object_get(json_object_get(holders[h], "properties"), c->props[i].name);
      if (!s) s = json_object_get(holders[h], "additionalProperties");
      if (s && !json_is_true(s)) st = so_schema_list_add(&c->props[i].schemas, s);
    }
  for (int32_t h = 0; h < n && st == LLB_STATUS_OK; h++) {
    size_t k;
    const json_t *r;
    json_array_foreach(json_object_get(holders[h], "required"), k, r) c->required |= 1ull << prop_index(c, json_string_value(r));
  }
  c->closed = declared && !said; /* OpenAI strict mode's default */
  return st;
}

static bool is_known(const char *key) {
  static const char *const names[] = {
      "type",     "enum",        "const",      "minLength",        "maxLength",        "pattern",       "format",
      "minimum",  "maximum",     "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "items",      "prefixItems",
      "additionalItems", "minItems", "maxItems", "uniqueItems",  "properties",       "required",      "additionalProperties",
      "minProperties", "maxProperties", "$ref", "allOf", "anyOf", "oneOf"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(key, names[i]) == 0) return true;
  return so_keyword_is_annotation(key);
}

/* Keywords refused with the reason (docs/structured-output.md lists them). */
static llb_status check_keywords(const json_t *h) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)h, key, v) {
    if (strcmp(key, "patternProperties") == 0 && json_is_object(v) && json_object_size(v) == 0) continue;
    if (!is_known(key)) return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "schema keyword \"%.64s\" is not supported", key);
  }
  return LLB_STATUS_OK;
}

static llb_status merge_values(struct so_cons *c, const json_t *h) {
  const json_t *en = json_object_get(h, "enum"), *cn = json_object_get(h, "const");
  if (en) {
    if (!json_is_array(en) || json_array_size(en) == 0) return LLB_ERRF(LLB_STATUS_MALFORMED, "schema enum must be a non-empty array");
    if (c->n_enums == SO_CONS_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d enums on one value", SO_CONS_MAX);
    c->enums[c->n_enums++] = en;
  }
  if (cn) {
    if (c->n_consts == SO_CONS_MAX) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d consts on one value", SO_CONS_MAX);
    c->consts[c->n_consts++] = cn;
  }
  return LLB_STATUS_OK;
}

llb_status so_cons_merge(const json_t *const *holders, int32_t n, struct so_cons *out) {
  memset(out, 0, sizeof(*out));
  out->types = SO_T_ALL;
  out->max_length = out->max_items = out->max_props = -1;
  llb_status st = LLB_STATUS_OK;
  for (int32_t h = 0; h < n && st == LLB_STATUS_OK; h++) {
    uint32_t types;
    if ((st = check_keywords(holders[h])) || (st = holder_types(holders[h], &types))) break;
    out->types &= types;
    if ((st = merge_values(out, holders[h])) || (st = merge_strings(out, holders[h]))) break;
    st = merge_numbers(out, holders[h]);
  }
  if (st == LLB_STATUS_OK) st = merge_arrays(out, holders, n);
  if (st == LLB_STATUS_OK) st = merge_objects(out, holders, n);
  return st;
}
