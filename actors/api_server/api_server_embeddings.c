/* POST /v1/embeddings: parsing, per-input GenerateRequests, response (see api_server_embeddings.h). */
#include "actors/api_server/api_server_embeddings.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static llb_status bad(struct api_server_error *err, const char *param, const char *msg) {
  api_server_error_set(err, 400, param, "%s", msg);
  return LLB_STATUS_INVALID_ARGUMENT;
}

static llb_status take_input(json_t *v, json_t *sub, struct api_server_error *err) {
  if (json_is_string(v) ? json_string_length(v) == 0 : json_is_array(v) ? json_array_size(v) == 0 : true) {
    api_server_error_set(err, 400, "input", "'input' must be a non-empty string, array of strings, array of token ids "
                  "or array of token-id arrays, got %s", json_is_string(v) || json_is_array(v) ? "an empty one"
                                                                                               : api_server_json_type_name(v));
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
    json_t *x = json_array_get(v, i);
    if ((json_is_string(x) && json_string_length(x) == 0) || (json_is_array(x) && json_array_size(x) == 0)) {
      char p[32];
      snprintf(p, sizeof p, "input[%zu]", i);
      api_server_error_set(err, 400, p, "'%s' is empty", p);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
  }
  json_object_set(sub, "prompt", v);
  return LLB_STATUS_OK;
}

static llb_status take_pooling_type(json_t *v, struct api_server_embeddings *out, struct api_server_error *err) {
  const char *s = json_is_string(v) ? json_string_value(v) : NULL;
  if (json_is_null(v)) return LLB_STATUS_OK;
  if (s && !strcmp(s, "LAST")) out->pooling.pooling_type = LLB_POOLING_LAST;
  else if (s && !strcmp(s, "MEAN")) out->pooling.pooling_type = LLB_POOLING_MEAN;
  else if (s && !strcmp(s, "CLS")) out->pooling.pooling_type = LLB_POOLING_CLS;
  else return bad(err, "pooling_type", "'pooling_type' must be one of \"LAST\", \"MEAN\", \"CLS\"");
  return LLB_STATUS_OK;
}

/* The embedding options into `out`; model, input and user into `sub` (a completions body). */
static llb_status split_fields(json_t *root, json_t *sub, struct api_server_embeddings *out, struct api_server_error *err) {
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    llb_status st = LLB_STATUS_OK;
    if (!strcmp(key, "model") || !strcmp(key, "user")) {
      json_object_set(sub, key, v);
    } else if (!strcmp(key, "input")) {
      st = take_input(v, sub, err);
    } else if (!strcmp(key, "encoding_format")) {
      const char *s = json_is_string(v) ? json_string_value(v) : NULL;
      if (s && !strcmp(s, "base64")) out->base64 = true;
      else if (!json_is_null(v) && !(s && !strcmp(s, "float")))
        st = bad(err, key, "'encoding_format' must be \"float\" or \"base64\"");
    } else if (!strcmp(key, "dimensions")) {
      if (!json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > LLB_MAX_POOLED_DIMS))
        st = bad(err, key, "'dimensions' must be a positive integer");
      else if (json_is_integer(v)) out->pooling.dimensions = (int32_t)json_integer_value(v);
    } else if (!strcmp(key, "normalize")) {
      if (!json_is_null(v) && !json_is_boolean(v)) st = bad(err, key, "'normalize' must be a boolean");
      else if (json_is_boolean(v)) out->pooling.normalize = json_is_true(v);
    } else if (!strcmp(key, "pooling_type")) {
      st = take_pooling_type(v, out, err);
    } else {
      api_server_error_set(err, 400, key, "Unrecognized request argument supplied: %.80s", key);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    if (st != LLB_STATUS_OK) return st;
  }
  if (!json_object_get(sub, "prompt")) return bad(err, "input", "'input' is required");
  json_t *one = json_integer(1);
  if (!one || json_object_set_new(sub, "max_tokens", one) != 0) {
    api_server_error_set(err, 500, NULL, "out of memory");
    return LLB_STATUS_OUT_OF_MEMORY;
  }
  return LLB_STATUS_OK;
}

static llb_status alloc_results(struct api_server_embeddings *e, struct api_server_error *err) {
  const size_t n = (size_t)e->req.num_prompts;
  e->vectors = calloc(n, sizeof *e->vectors);
  e->dims = calloc(n, sizeof *e->dims);
  e->prompt_tokens = calloc(n, sizeof *e->prompt_tokens);
  if (e->vectors && e->dims && e->prompt_tokens) return LLB_STATUS_OK;
  api_server_error_set(err, 500, NULL, "out of memory");
  return LLB_STATUS_OUT_OF_MEMORY;
}

llb_status api_server_embeddings_parse(const char *body, size_t len, const struct api_server_parse_options *o,
                                struct api_server_embeddings *out, struct api_server_error *err) {
  memset(out, 0, sizeof *out);
  memset(err, 0, sizeof *err);
  out->pooling = (struct llb_pooling_params){.pooling_type = LLB_POOLING_LAST, .normalize = true};
  json_t *root = api_server_json_load_object(body, len, err);
  if (!root) return LLB_STATUS_INVALID_ARGUMENT;
  llb_status st = LLB_STATUS_INVALID_ARGUMENT;
  json_t *sub = json_object();
  char *text = NULL;
  if (!sub) {
    st = api_server_error_oom(err);
  } else if ((st = split_fields(root, sub, out, err)) == LLB_STATUS_OK) {
    text = json_dumps(sub, JSON_COMPACT);
    if (!text) {
      api_server_error_set(err, 500, NULL, "out of memory");
      st = LLB_STATUS_OUT_OF_MEMORY;
    } else {
      /* the checks and errors of a completions prompt (model 404, token ids, sizes) */
      st = api_server_request_parse(API_SERVER_ENDPOINT_COMPLETIONS, text, strlen(text), o, &out->req, err);
      if (st != LLB_STATUS_OK && strncmp(err->param, "prompt", 6) == 0) {
        char p[sizeof err->param];
        snprintf(p, sizeof p, "input%.80s", err->param + 6);
        snprintf(err->param, sizeof err->param, "%s", p);
      }
      if (st == LLB_STATUS_OK && (st = alloc_results(out, err)) != LLB_STATUS_OK) api_server_embeddings_free(out);
      if (st == LLB_STATUS_OK) { /* one RequestOutput per input, with the pooled vector */
        out->req.sampling_params.n = 1;
        out->req.sampling_params.max_tokens = 1;
        out->req.sampling_params.output_kind = LLB_OUTPUT_KIND_FINAL_ONLY;
      }
    }
  }
  free(text);
  json_decref(sub);
  json_decref(root);
  return st;
}

void api_server_embeddings_free(struct api_server_embeddings *e) {
  if (!e) return;
  for (int32_t i = 0; e->vectors && i < e->req.num_prompts; i++) free(e->vectors[i]);
  free(e->vectors);
  free(e->dims);
  free(e->prompt_tokens);
  api_server_request_free(&e->req);
  memset(e, 0, sizeof *e);
}

void api_server_embeddings_to_generate(const struct api_server_embeddings *e, int32_t i, const char *request_id,
                                struct llb_generate_request *out) {
  api_server_request_to_generate(&e->req, i, request_id, out);
  out->pooling_params = e->pooling;
}

llb_status api_server_embeddings_add_output(struct api_server_embeddings *e, int32_t i, const struct llb_request_output *ro) {
  if (!ro->finished) return LLB_STATUS_OK;
  if (i < 0 || i >= e->req.num_prompts || e->vectors[i])
    return LLB_ERRF(LLB_STATUS_INTERNAL, "embedding input %d answered twice", i);
  if (ro->num_pooling_output < 1)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "the engine finished input %d without an embedding", i);
  e->vectors[i] = malloc((size_t)ro->num_pooling_output * sizeof(float));
  if (!e->vectors[i]) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "embedding of %d floats", ro->num_pooling_output);
  memcpy(e->vectors[i], ro->pooling_output, (size_t)ro->num_pooling_output * sizeof(float));
  e->dims[i] = ro->num_pooling_output;
  e->prompt_tokens[i] = ro->num_prompt_token_ids > 0 ? ro->num_prompt_token_ids : ro->metrics.num_prompt_tokens;
  e->num_done++;
  return LLB_STATUS_OK;
}

/* RFC 4648 §4 base64 (with padding) of the vector's little-endian float32 bytes, as OpenAI's
 * encoding_format "base64" (numpy.frombuffer(base64.b64decode(s), dtype="<f4")). */
static bool render_base64(const float *v, int32_t n, struct api_server_buf *out) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const size_t len = (size_t)n * 4;
  uint8_t *bytes = malloc(len ? len : 1);
  if (!bytes) return false;
  for (int32_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; k++) bytes[(size_t)i * 4 + (size_t)k] = (uint8_t)(u >> (8 * k));
  }
  bool ok = api_server_buf_append(out, "\"", 1);
  for (size_t i = 0; ok && i < len; i += 3) {
    const uint32_t x = (uint32_t)bytes[i] << 16 | (i + 1 < len ? (uint32_t)bytes[i + 1] << 8 : 0) |
                       (i + 2 < len ? bytes[i + 2] : 0);
    const char q[4] = {tab[x >> 18 & 63], tab[x >> 12 & 63], i + 1 < len ? tab[x >> 6 & 63] : '=',
                       i + 2 < len ? tab[x & 63] : '='};
    ok = api_server_buf_append(out, q, 4);
  }
  free(bytes);
  return ok && api_server_buf_append(out, "\"", 1);
}

llb_status api_server_embeddings_render(const struct api_server_embeddings *e, const char *id, int64_t created,
                                 struct api_server_buf *out) {
  bool ok = api_server_buf_printf(out, "{\"id\":\"%s\",\"object\":\"list\",\"created\":%lld,\"model\":", id, (long long)created);
  json_t *model = json_string(e->req.model);
  char *m = model ? json_dumps(model, JSON_ENCODE_ANY) : NULL;
  ok = ok && m && api_server_buf_printf(out, "%s,\"data\":[", m);
  free(m);
  json_decref(model);
  int64_t tokens = 0;
  for (int32_t i = 0; ok && i < e->req.num_prompts; i++) {
    tokens += e->prompt_tokens[i];
    ok = api_server_buf_printf(out, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
    if (ok && e->base64) {
      ok = render_base64(e->vectors[i], e->dims[i], out);
    } else {
      ok = ok && api_server_buf_append(out, "[", 1);
      for (int32_t k = 0; ok && k < e->dims[i]; k++) /* %.9g: every float32 reads back exactly */
        ok = api_server_buf_printf(out, "%s%.9g", k ? "," : "", (double)e->vectors[i][k]);
      ok = ok && api_server_buf_append(out, "]", 1);
    }
    ok = ok && api_server_buf_append(out, "}", 1);
  }
  ok = ok && api_server_buf_printf(out, "],\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}", (long long)tokens,
                            (long long)tokens);
  return ok ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "embeddings response");
}
