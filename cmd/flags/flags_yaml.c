/* `--config FILE`: a YAML mapping of long flag names to values made into args (flags.h),
 * as vLLM's FlexibleArgumentParser reads its config file (vllm/utils: _load_config_file):
 * `max-num-seqs: 8` is `--max-num-seqs 8`, `enable-prefix-caching: false` is
 * `--no-enable-prefix-caching`, a list repeats the flag, a mapping is passed as JSON text
 * (`speculative-config: {method: ngram, ...}`). libyaml's document loader (Debian libyaml-dev). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "cmd/flags/flags.h"

#define CONFIG_MAX_ARGS 1024
#define CONFIG_MAX_DEPTH 16

struct arg_list {
  char **args;
  int num, cap;
};

static llb_status push(struct arg_list *l, const char *s, size_t len) {
  if (l->num == CONFIG_MAX_ARGS) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "more than %d values", CONFIG_MAX_ARGS);
  if (l->num == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    char **p = realloc(l->args, (size_t)cap * sizeof *p);
    if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "config args");
    l->args = p, l->cap = cap;
  }
  char *copy = strndup(s, len);
  if (!copy) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "config args");
  l->args[l->num++] = copy;
  return LLB_STATUS_OK;
}

static void arg_list_free(struct arg_list *l) {
  for (int i = 0; i < l->num; i++) free(l->args[i]);
  free(l->args);
  memset(l, 0, sizeof *l);
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static bool plain(const yaml_node_t *n) { return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

/* YAML 1.1's booleans (what PyYAML, and so vLLM, reads). -1 when the scalar is none. */
static int yaml_bool(const yaml_node_t *n) {
  static const char *const yes[] = {"true", "yes", "on", "y"}, *const no[] = {"false", "no", "off", "n"};
  if (!plain(n)) return -1;
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
    if (strcasecmp(scalar(n), yes[i]) == 0) return 1;
    if (strcasecmp(scalar(n), no[i]) == 0) return 0;
  }
  return -1;
}

static bool yaml_null(const yaml_node_t *n) {
  return plain(n) && (!*scalar(n) || strcmp(scalar(n), "~") == 0 || strcasecmp(scalar(n), "null") == 0);
}

/* A plain scalar as JSON: a number, true/false/null, else a string. */
static json_t *scalar_json(const yaml_node_t *n) {
  if (yaml_null(n)) return json_null();
  int b = yaml_bool(n);
  if (b >= 0) return json_boolean(b);
  if (plain(n)) {
    char *end;
    errno = 0;
    long long i = strtoll(scalar(n), &end, 10);
    if (!errno && *scalar(n) && !*end) return json_integer(i);
    double d = strtod(scalar(n), &end);
    if (!errno && *scalar(n) && !*end) return json_real(d);
  }
  return json_string(scalar(n));
}

static json_t *node_json(yaml_document_t *doc, yaml_node_t *n, int depth) {
  if (!n || depth > CONFIG_MAX_DEPTH) return NULL;
  if (n->type == YAML_SCALAR_NODE) return scalar_json(n);
  json_t *j = n->type == YAML_SEQUENCE_NODE ? json_array() : json_object();
  if (n->type == YAML_SEQUENCE_NODE) {
    for (yaml_node_item_t *it = n->data.sequence.items.start; j && it < n->data.sequence.items.top; it++)
      if (json_array_append_new(j, node_json(doc, yaml_document_get_node(doc, *it), depth + 1)) != 0)
        json_decref(j), j = NULL;
  } else {
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; j && p < n->data.mapping.pairs.top; p++) {
      yaml_node_t *k = yaml_document_get_node(doc, p->key);
      if (!k || k->type != YAML_SCALAR_NODE ||
          json_object_set_new(j, scalar(k), node_json(doc, yaml_document_get_node(doc, p->value), depth + 1)) != 0)
        json_decref(j), j = NULL;
    }
  }
  return j;
}

/* Whether `name` is f's long name or one of its '|'-separated aliases. */
static bool flag_named(const struct flag *f, const char *name, size_t len) {
  if (strlen(f->name) == len && strncmp(f->name, name, len) == 0) return true;
  for (const char *a = f->aliases; a && *a;) {
    size_t n = strcspn(a, "|");
    if (n == len && strncmp(a, name, len) == 0) return true;
    a += n + (a[n] == '|');
  }
  return false;
}

const struct flag *flags_find(const struct flag_command *c, const char *name) {
  for (int s = 0; s < c->num_sections; s++)
    for (int i = 0; i < c->sections[s].num_flags; i++)
      if (flag_named(&c->sections[s].flags[i], name, strlen(name))) return &c->sections[s].flags[i];
  return NULL;
}

/* The args of one `key: value` pair. */
static llb_status pair_args(const struct flag_command *c, yaml_document_t *doc, const char *key, yaml_node_t *v,
                            struct arg_list *out) {
  char name[128];
  snprintf(name, sizeof name, "%s", key);
  for (char *p = name; *p; p++)
    if (*p == '_') *p = '-';
  const struct flag *f = flags_find(c, name);
  const int line = (int)v->start_mark.line + 1;
  if (!f) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "line %d: '%s' is not a flag of %s", line, key, c->program);
  char dashed[sizeof name + 16];
  snprintf(dashed, sizeof dashed, "--%s", name);
  const bool takes_value = f->kind != FLAG_KIND_BOOL && f->kind != FLAG_KIND_FALSE;
  if (v->type == YAML_SCALAR_NODE && !takes_value) {
    const int b = yaml_bool(v);
    if (b < 0) return LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: %s takes true or false", line, key);
    if (b) return push(out, dashed, strlen(dashed));
    char neg[sizeof name + 8];
    snprintf(neg, sizeof neg, "no-%s", name);
    if (f->kind == FLAG_KIND_BOOL && flags_find(c, neg)) {
      snprintf(dashed, sizeof dashed, "--%s", neg);
      return push(out, dashed, strlen(dashed));
    }
    return LLB_STATUS_OK; /* false for a switch that is off unless given */
  }
  if (v->type == YAML_SCALAR_NODE) {
    if (yaml_null(v)) return LLB_STATUS_OK;
    llb_status st = push(out, dashed, strlen(dashed));
    return st ? st : push(out, scalar(v), v->data.scalar.length);
  }
  if (v->type == YAML_SEQUENCE_NODE) {
    if (f->kind != FLAG_KIND_LIST) return LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: %s takes one value, not a list", line, key);
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
      yaml_node_t *item = yaml_document_get_node(doc, *it);
      if (!item || item->type != YAML_SCALAR_NODE)
        return LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: the items of %s must be scalars", line, key);
      llb_status st = push(out, dashed, strlen(dashed));
      if (!st) st = push(out, scalar(item), item->data.scalar.length);
      if (st) return st;
    }
    return LLB_STATUS_OK;
  }
  if (!takes_value) return LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: %s takes true or false", line, key);
  json_t *j = node_json(doc, v, 0);
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!text) return LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: %s: a mapping that is not JSON", line, key);
  llb_status st = push(out, dashed, strlen(dashed));
  if (!st) st = push(out, text, strlen(text));
  free(text);
  return st;
}

llb_status flags_config_args(const struct flag_command *c, const char *path, char ***args_out, int *num_out) {
  *args_out = NULL;
  *num_out = 0;
  FILE *fp = fopen(path, "rb");
  if (!fp) return LLB_ERRF(LLB_STATUS_IO, "cannot open: %s", strerror(errno));
  yaml_parser_t parser;
  yaml_document_t doc;
  struct arg_list out = {0};
  llb_status st = LLB_STATUS_OK;
  if (!yaml_parser_initialize(&parser)) {
    fclose(fp);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "YAML parser");
  }
  yaml_parser_set_input_file(&parser, fp);
  if (!yaml_parser_load(&parser, &doc)) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: %s", (int)parser.problem_mark.line + 1,
                  parser.problem ? parser.problem : "not YAML");
    yaml_parser_delete(&parser);
    fclose(fp);
    return st;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (root && root->type != YAML_MAPPING_NODE)
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "not a mapping of flag names to values");
  for (yaml_node_pair_t *p = root && !st ? root->data.mapping.pairs.start : NULL;
       p && !st && p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
    if (!k || !v || k->type != YAML_SCALAR_NODE)
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "line %d: a key that is not a flag name", k ? (int)k->start_mark.line + 1 : 0);
    else
      st = pair_args(c, &doc, scalar(k), v, &out);
  }
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  fclose(fp);
  if (st) {
    arg_list_free(&out);
    return st;
  }
  *args_out = out.args;
  *num_out = out.num;
  return LLB_STATUS_OK;
}
