/* OpenAI / vLLM request fields beyond the sampling basics (see api_server_params.h). */
#include "actors/api_server/api_server_params.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static llb_status bad(struct api_server_error *err, const char *param, const char *msg, const char *detail) {
  api_server_error_set(err, 400, param, "'%s' %s%s", param, msg, detail ? detail : "");
  return LLB_STATUS_INVALID_ARGUMENT;
}

/* {"<id>": bias, ...} → sp->logit_bias. */
static llb_status parse_logit_bias(json_t *v, struct llb_sampling_params *sp, struct api_server_error *err) {
  if (!json_is_object(v)) return bad(err, "logit_bias", "must be an object of token id to bias, got ", api_server_json_type_name(v));
  if (json_object_size(v) > LLB_MAX_LOGIT_BIAS) {
    api_server_error_set(err, 400, "logit_bias", "'logit_bias' holds at most %d entries, got %zu", LLB_MAX_LOGIT_BIAS,
                  json_object_size(v));
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  sp->num_logit_bias = 0;
  const char *key;
  json_t *b;
  json_object_foreach(v, key, b) {
    char *end = NULL;
    errno = 0;
    long id = strtol(key, &end, 10);
    if (!key[0] || key[0] == '-' || key[0] == '+' || key[0] == ' ' || *end || errno || id > INT32_MAX) {
      api_server_error_set(err, 400, "logit_bias", "'logit_bias' keys are token ids (decimal integers >= 0), got \"%.40s\"",
                    key);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    double x = json_is_number(b) ? json_number_value(b) : NAN;
    if (!json_is_number(b) || !isfinite(x) || x < -LLB_MAX_LOGIT_BIAS_VALUE || x > LLB_MAX_LOGIT_BIAS_VALUE) {
      char param[48];
      snprintf(param, sizeof param, "logit_bias[%ld]", id);
      api_server_error_set(err, 400, param, "'%s' must be a number in [-100, 100]", param);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    sp->logit_bias[sp->num_logit_bias++] = (struct llb_logit_bias){.token_id = (int32_t)id, .bias = (float)x};
  }
  return LLB_STATUS_OK;
}

llb_status api_server_params_parse_field(const char *key, json_t *v, struct api_server_request *r, bool *handled,
                                  struct api_server_error *err) {
  *handled = true;
  struct llb_sampling_params *sp = &r->sampling_params;
  if (strcmp(key, "logit_bias") == 0) return parse_logit_bias(v, sp, err);
  if (strcmp(key, "priority") == 0) {
    if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
      return bad(err, "priority", "must be a 32-bit integer, got ", api_server_json_type_name(v));
    r->priority = (int32_t)json_integer_value(v);
    return LLB_STATUS_OK;
  }
  if (strcmp(key, "cache_salt") == 0) {
    if (!json_is_string(v)) return bad(err, "cache_salt", "must be a string, got ", api_server_json_type_name(v));
    size_t n = json_string_length(v);
    if (n == 0 || n >= sizeof r->cache_salt || strlen(json_string_value(v)) != n) {
      api_server_error_set(err, 400, "cache_salt", "'cache_salt' must be 1..%zu bytes without NUL, got %zu bytes",
                    sizeof r->cache_salt - 1, n);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    memcpy(r->cache_salt, json_string_value(v), n + 1);
    return LLB_STATUS_OK;
  }
  if (strcmp(key, "truncate_prompt_tokens") == 0) {
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : 0;
    if (!json_is_integer(v) || x == 0 || x < -1 || x > INT32_MAX)
      return bad(err, "truncate_prompt_tokens", "must be -1 (the context length) or an integer >= 1", NULL);
    sp->truncate_prompt_tokens = (int32_t)x;
    return LLB_STATUS_OK;
  }
  if (strcmp(key, "prompt_logprobs") == 0) { /* vLLM: k >= 0 (its -1, the whole vocabulary, is not offered) */
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    if (!json_is_integer(v) || x < 0 || x > LLB_MAX_LOGPROBS)
      return bad(err, "prompt_logprobs", "must be an integer in [0, 20]", NULL);
    sp->prompt_logprobs = (int32_t)x;
    return LLB_STATUS_OK;
  }
  if (strcmp(key, "echo") == 0) {
    if (!json_is_boolean(v)) return bad(err, "echo", "must be a boolean, got ", api_server_json_type_name(v));
    if (json_is_true(v) && r->endpoint != API_SERVER_ENDPOINT_COMPLETIONS)
      return bad(err, "echo", "= true is supported on /v1/completions only", NULL);
    r->echo = json_is_true(v);
    return LLB_STATUS_OK;
  }
  *handled = false;
  return LLB_STATUS_OK;
}

llb_status api_server_params_check(const struct api_server_request *r, struct api_server_error *err) {
  if (!r->echo) return LLB_STATUS_OK;
  for (int32_t i = 0; i < r->num_prompts; i++)
    if (!r->prompts[i].text) return bad(err, "echo", "needs a text prompt (token-id prompts are not supported)", NULL);
  return LLB_STATUS_OK;
}
