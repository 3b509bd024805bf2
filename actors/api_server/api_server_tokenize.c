/* /tokenize, /detokenize and /v1/models/{id} bodies (see api_server_tokenize.h). */
#include "actors/api_server/api_server_tokenize.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static llb_status bad(struct api_server_error *err, const char *param, const char *msg) {
  api_server_error_set(err, 400, param, "%s", msg);
  return LLB_STATUS_INVALID_ARGUMENT;
}

/* A boolean option that must be `want` when given (null = default). */
static llb_status only_value(json_t *v, const char *key, bool want, const char *why, struct api_server_error *err) {
  if (json_is_null(v)) return LLB_STATUS_OK;
  if (!json_is_boolean(v)) {
    api_server_error_set(err, 400, key, "'%s' must be a boolean, got %s", key, api_server_json_type_name(v));
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  if (json_is_true(v) == want) return LLB_STATUS_OK;
  api_server_error_set(err, 400, key, "'%s' = %s is not supported: %s", key, want ? "false" : "true", why);
  return LLB_STATUS_INVALID_ARGUMENT;
}

/* Copies the fields of `root` that api_server_request_parse understands into `sub` and takes the
 * tokenize-only options; refuses everything else. */
static llb_status split_fields(enum api_server_endpoint ep, json_t *root, json_t *sub, struct api_server_tokenize *out,
                               struct api_server_error *err) {
  const char *key;
  json_t *v;
  bool chat = json_object_get(root, "messages") != NULL;
  json_object_foreach(root, key, v) {
    llb_status st = LLB_STATUS_OK;
    if (!strcmp(key, "model")) {
      json_object_set(sub, key, v);
    } else if (ep == API_SERVER_ENDPOINT_TOKENIZE && !strcmp(key, "prompt")) {
      if (!json_is_string(v)) {
        api_server_error_set(err, 400, "prompt", "'prompt' must be a string, got %s", api_server_json_type_name(v));
        return LLB_STATUS_INVALID_ARGUMENT;
      }
      json_object_set(sub, key, v);
    } else if (ep == API_SERVER_ENDPOINT_TOKENIZE && (!strcmp(key, "messages") || (chat && !strcmp(key, "chat_template_kwargs")))) {
      json_object_set(sub, key, v); /* the template variables change the prompt (vLLM's TokenizeChatRequest) */
    } else if (ep == API_SERVER_ENDPOINT_TOKENIZE && !strcmp(key, "add_generation_prompt")) {
      if (!json_is_null(v) && !json_is_boolean(v)) return bad(err, key, "'add_generation_prompt' must be a boolean");
      if (json_is_boolean(v)) out->add_generation_prompt = json_is_true(v);
    } else if (ep == API_SERVER_ENDPOINT_TOKENIZE && !strcmp(key, "add_special_tokens")) {
      st = only_value(v, key, !chat, chat ? "the chat template writes the special tokens"
                                          : "a prompt is tokenized as a completion prompt is", err);
    } else if (ep == API_SERVER_ENDPOINT_TOKENIZE && !strcmp(key, "return_token_strs")) {
      st = only_value(v, key, false, "token strings are not returned", err);
    } else if (ep == API_SERVER_ENDPOINT_DETOKENIZE && !strcmp(key, "tokens")) {
      if (!json_is_array(v)) {
        api_server_error_set(err, 400, "tokens", "'tokens' must be an array of token ids, got %s", api_server_json_type_name(v));
        return LLB_STATUS_INVALID_ARGUMENT;
      }
      for (size_t i = 0; i < json_array_size(v); i++) {
        if (!json_is_integer(json_array_get(v, i))) {
          char p[32];
          snprintf(p, sizeof p, "tokens[%zu]", i);
          api_server_error_set(err, 400, p, "'%s' must be an integer token id, got %s", p,
                        api_server_json_type_name(json_array_get(v, i)));
          return LLB_STATUS_INVALID_ARGUMENT;
        }
      }
      json_object_set(sub, "prompt", v);
    } else {
      api_server_error_set(err, 400, key, "Unrecognized request argument supplied: %.80s", key);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    if (st != LLB_STATUS_OK) return st;
  }
  if (ep == API_SERVER_ENDPOINT_TOKENIZE && !json_object_get(sub, "prompt") == !json_object_get(sub, "messages"))
    return bad(err, "prompt", "give exactly one of 'prompt' (a string) or 'messages'");
  if (ep == API_SERVER_ENDPOINT_DETOKENIZE && !json_object_get(sub, "prompt")) return bad(err, "tokens", "'tokens' is required");
  return LLB_STATUS_OK;
}

llb_status api_server_tokenize_parse(enum api_server_endpoint endpoint, const char *body, size_t len, const char *model,
                              const struct api_server_parse_options *o, struct api_server_tokenize *out, struct api_server_error *err) {
  memset(out, 0, sizeof *out);
  memset(err, 0, sizeof *err);
  out->endpoint = endpoint;
  out->add_generation_prompt = true;
  if (endpoint == API_SERVER_ENDPOINT_MODEL_INFO) {
    if (!api_server_model_served(o, model)) {
      api_server_error_set(err, 404, "model", "The model `%.200s` does not exist. Served: `%s`.", model ? model : "",
                    o->served_model);
      snprintf(err->code, sizeof err->code, "model_not_found");
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    snprintf(out->req.model, sizeof out->req.model, "%s", model);
    llb_sampling_params_init(&out->req.sampling_params); /* the defaults go on the wire */
    return LLB_STATUS_OK;
  }
  if (endpoint != API_SERVER_ENDPOINT_TOKENIZE && endpoint != API_SERVER_ENDPOINT_DETOKENIZE)
    return bad(err, NULL, "not a tokenize endpoint");
  json_t *root = api_server_json_load_object(body, len, err);
  if (!root) return LLB_STATUS_INVALID_ARGUMENT;
  llb_status st = LLB_STATUS_INVALID_ARGUMENT;
  json_t *sub = json_object();
  char *text = NULL;
  if (!sub) {
    st = api_server_error_oom(err);
    goto done;
  }
  if ((st = split_fields(endpoint, root, sub, out, err)) != LLB_STATUS_OK) goto done;
  bool chat = json_object_get(sub, "messages") != NULL;
  text = json_dumps(sub, JSON_COMPACT);
  if (!text) {
    api_server_error_set(err, 500, NULL, "out of memory");
    st = LLB_STATUS_OUT_OF_MEMORY;
    goto done;
  }
  /* The same validation (model 404, prompt, messages) and errors as the generate endpoints. */
  st = api_server_request_parse(chat ? API_SERVER_ENDPOINT_CHAT : API_SERVER_ENDPOINT_COMPLETIONS, text, strlen(text), o, &out->req, err);
  if (st != LLB_STATUS_OK && endpoint == API_SERVER_ENDPOINT_DETOKENIZE && strncmp(err->param, "prompt", 6) == 0) {
    char p[sizeof err->param];
    snprintf(p, sizeof p, "tokens%.80s", err->param + 6);
    snprintf(err->param, sizeof err->param, "%s", p);
  }
done:
  free(text);
  json_decref(sub);
  json_decref(root);
  if (st != LLB_STATUS_OK) memset(&out->req, 0, sizeof out->req);
  return st;
}

void api_server_tokenize_free(struct api_server_tokenize *t) {
  if (!t) return;
  api_server_request_free(&t->req);
  memset(t, 0, sizeof *t);
}

void api_server_tokenize_to_generate(const struct api_server_tokenize *t, const char *request_id, struct llb_generate_request *out) {
  if (t->endpoint == API_SERVER_ENDPOINT_MODEL_INFO) {
    llb_generate_request_init(out);
    out->request_id = llb_str_c(request_id);
    out->sampling_params = &t->req.sampling_params;
    return;
  }
  api_server_request_to_generate(&t->req, 0, request_id, out);
  out->add_generation_prompt = t->add_generation_prompt;
}

void api_server_tokenize_map_error(const struct api_server_tokenize *t, struct api_server_error *e) {
  static const char from[] = "prompt_token_ids";
  if (t->endpoint != API_SERVER_ENDPOINT_DETOKENIZE || strncmp(e->param, from, sizeof from - 1) != 0) return;
  char p[sizeof e->param];
  snprintf(p, sizeof p, "tokens%.80s", e->param + sizeof from - 1);
  snprintf(e->param, sizeof e->param, "%s", p);
  /* the message names the field too */
  char *at = strstr(e->message, from);
  if (at && at == e->message) {
    char m[sizeof e->message];
    snprintf(m, sizeof m, "tokens%s", e->message + sizeof from - 1);
    snprintf(e->message, sizeof e->message, "%s", m);
  }
}

static llb_status dump_into(json_t *obj, struct api_server_buf *out) {
  char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(obj);
  bool ok = s && api_server_buf_append(out, s, strlen(s));
  free(s);
  return ok ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_tokenize: rendering");
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  size_t k = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
  if (!k || k > n) return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) || (s[0] == 0xF0 && s[1] < 0x90) ||
      (s[0] == 0xF4 && s[1] > 0x8F))
    return 0;
  return k;
}

/* A JSON string of text[len] with every invalid byte as U+FFFD (detokenized ids may end inside
 * a character; HF decode does the same replacement). */
static json_t *lossy_string(const char *text, size_t len) {
  struct api_server_buf b = {0};
  const unsigned char *s = (const unsigned char *)text;
  bool ok = api_server_buf_append(&b, "", 0);
  for (size_t i = 0; ok && i < len;) {
    size_t k = utf8_seq(s + i, len - i);
    ok = k ? api_server_buf_append(&b, s + i, k) : api_server_buf_append(&b, "\xEF\xBF\xBD", 3);
    i += k ? k : 1;
  }
  json_t *j = ok ? json_stringn(b.data, b.len) : NULL;
  api_server_buf_free(&b);
  return j;
}

static json_t *model_object(const char *model, const char *parent, int64_t created, int32_t max_model_len) {
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", model, "object", "model", "created",
                        (json_int_t)created, "owned_by", "llmbus", "root", model, "parent",
                        parent ? json_string(parent) : json_null());
  if (o && max_model_len > 0) json_object_set_new(o, "max_model_len", json_integer(max_model_len));
  return o;
}

llb_status api_server_model_object_render(const char *model, const char *parent, int64_t created, int32_t max_model_len,
                                   struct api_server_buf *out) {
  return dump_into(model_object(model, parent, created, max_model_len), out);
}

llb_status api_server_tokenize_render(const struct api_server_tokenize *t, const struct llb_request_output *ro, const char *model,
                               int64_t created, struct api_server_buf *out) {
  if (t->endpoint == API_SERVER_ENDPOINT_MODEL_INFO) return dump_into(model_object(model, NULL, created, ro->max_model_len), out);
  if (t->endpoint == API_SERVER_ENDPOINT_DETOKENIZE) {
    json_t *text = lossy_string(ro->prompt.data ? ro->prompt.data : "", ro->prompt.len);
    return dump_into(text ? json_pack("{s:o}", "prompt", text) : NULL, out);
  }
  json_t *tokens = json_array();
  for (int32_t i = 0; tokens && i < ro->num_prompt_token_ids; i++)
    if (json_array_append_new(tokens, json_integer(ro->prompt_token_ids[i])) != 0) {
      json_decref(tokens);
      tokens = NULL;
    }
  json_t *o = tokens ? json_pack("{s:i, s:i, s:o, s:n}", "count", (int)ro->num_prompt_token_ids, "max_model_len",
                                 (int)ro->max_model_len, "tokens", tokens, "token_strs")
                     : NULL;
  return dump_into(o, out);
}
