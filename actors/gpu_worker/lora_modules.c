#include "actors/gpu_worker/lora_modules.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "bus/subject.h"

int32_t lora_module_int_id(const char *name) {
  const uint64_t h = llb_fnv1a64_str(name);
  return (int32_t)(h % UINT64_C(0x7fffffff)) + 1;
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* vLLM's JSON form: {"name": .., "path": .., "base_model_name": ..}. */
static llb_status parse_json(const char *value, struct lora_module *m) {
  json_error_t err;
  json_t *o = json_loads(value, 0, &err);
  llb_status st = LLB_STATUS_OK;
  if (!json_is_object(o)) {
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules %s: not a JSON object (%s)", value, err.text);
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    char **dst = strcmp(key, "name") == 0 ? &m->name : strcmp(key, "path") == 0 ? &m->path
                 : strcmp(key, "base_model_name") == 0 ? &m->base_model_name : NULL;
    if (!dst || !json_is_string(v)) {
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules: \"%s\" is %s", key,
                    dst ? "not a string" : "not one of name, path, base_model_name");
      goto out;
    }
    if (!(*dst = dup_n(json_string_value(v), json_string_length(v)))) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "--lora-modules: out of memory");
      goto out;
    }
  }
  if (!m->name || !m->path)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules %s: \"name\" and \"path\" are required", value);
out:
  json_decref(o);
  return st;
}

static llb_status parse_one(const char *value, struct lora_module *m) {
  llb_status st;
  if (value[0] == '{') {
    if ((st = parse_json(value, m))) return st;
  } else {
    const char *eq = strchr(value, '=');
    if (!eq) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules %s: not name=path (nor JSON)", value);
    if (!(m->name = dup_n(value, (size_t)(eq - value))) || !(m->path = strdup(eq + 1)))
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "--lora-modules: out of memory");
  }
  if ((st = bus_name_check(BUS_NAME_KIND_MODEL, "--lora-modules name", m->name))) return st;
  if (!m->path[0]) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules %s: the path is empty", m->name);
  m->lora_int_id = lora_module_int_id(m->name);
  return LLB_STATUS_OK;
}

llb_status lora_modules_parse(const char *const *values, int n, struct lora_modules *out) {
  memset(out, 0, sizeof *out);
  if (n > LORA_MODULES_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules: %d adapters, at most %d", n, LORA_MODULES_MAX);
  for (int i = 0; i < n; i++) {
    struct lora_module *m = &out->items[out->num++];
    llb_status st = parse_one(values[i], m);
    if (st) return st;
    for (int j = 0; j < i; j++) {
      if (strcmp(out->items[j].name, m->name) == 0)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules: adapter \"%s\" given twice", m->name);
      if (out->items[j].lora_int_id == m->lora_int_id) /* ids derive from names: refuse, never renumber */
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                        "--lora-modules: adapters \"%s\" and \"%s\" have the same lora_int_id %d: rename one",
                        out->items[j].name, m->name, m->lora_int_id);
    }
  }
  return LLB_STATUS_OK;
}

const struct lora_module *lora_modules_find(const struct lora_modules *m, const char *name) {
  for (int i = 0; i < m->num; i++)
    if (strcmp(m->items[i].name, name) == 0) return &m->items[i];
  return NULL;
}

void lora_modules_free(struct lora_modules *m) {
  if (!m) return;
  for (int i = 0; i < m->num; i++) {
    free(m->items[i].name);
    free(m->items[i].path);
    free(m->items[i].base_model_name);
  }
  memset(m, 0, sizeof *m);
}
