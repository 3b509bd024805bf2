/* --speculative-config parsing; see spec_config.h. */
#include "cmd/actor/spec_config.h"

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

static llb_status get_int(json_t *o, const char *key, int32_t *v, bool *given) {
  json_t *x = json_object_get(o, key);
  *given = x != NULL && !json_is_null(x);
  if (!*given) return LLB_STATUS_OK;
  if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1 << 20)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--speculative-config: %s must be a non-negative integer", key);
  *v = (int32_t)json_integer_value(x);
  return LLB_STATUS_OK;
}

static llb_status parse_object(json_t *o, struct ngram_proposer_config *out) {
  static const char *const known[] = {"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"};
  const char *key;
  json_t *val;
  json_object_foreach(o, key, val) {
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= strcmp(key, known[i]) == 0;
    if (!ok)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "--speculative-config: unknown key \"%s\" (method, num_speculative_tokens, prompt_lookup_max, "
                      "prompt_lookup_min)", key);
  }
  const char *method = json_string_value(json_object_get(o, "method"));
  if (!method || strcmp(method, "ngram") != 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--speculative-config: method must be \"ngram\" (the n-gram "
                    "prompt-lookup proposer; no draft models here)");
  bool has_k, has_min, has_max;
  llb_status st = get_int(o, "num_speculative_tokens", &out->num_speculative_tokens, &has_k);
  if (!st) st = get_int(o, "prompt_lookup_min", &out->prompt_lookup_min, &has_min);
  if (!st) st = get_int(o, "prompt_lookup_max", &out->prompt_lookup_max, &has_max);
  if (st) return st;
  if (!has_k || out->num_speculative_tokens < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--speculative-config: num_speculative_tokens (>= 1) is required");
  if (!has_min && !has_max) out->prompt_lookup_min = out->prompt_lookup_max = 5; /* vLLM's default */
  else if (!has_min) out->prompt_lookup_min = out->prompt_lookup_max;
  else if (!has_max) out->prompt_lookup_max = out->prompt_lookup_min;
  st = ngram_proposer_config_check(out);
  return st ? LLB_ERRF(st, "--speculative-config: %s", llb_err_last()) : LLB_STATUS_OK;
}

llb_status spec_config_parse(const char *json, struct ngram_proposer_config *out) {
  *out = (struct ngram_proposer_config){0};
  if (!json || !json[0]) return LLB_STATUS_OK;
  json_error_t err;
  json_t *o = json_loads(json, 0, &err);
  if (!o || !json_is_object(o)) {
    json_decref(o);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--speculative-config: not a JSON object (%s)",
                    o ? "another JSON value" : err.text);
  }
  llb_status st = parse_object(o, out);
  json_decref(o);
  if (st) *out = (struct ngram_proposer_config){0};
  return st;
}
