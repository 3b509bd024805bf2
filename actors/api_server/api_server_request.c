/* OpenAI request parsing and validation (see api_server_request.h). */
#include "actors/api_server/api_server_request.h"
#include "base/log.h"
#include "schemas/lora_registry.h"

#include "actors/api_server/api_server_reasoning.h"
#include "actors/api_server/api_server_responses.h"
#include "actors/api_server/api_server_chat_fields.h"

#include "actors/api_server/api_server_embeds.h"
#include "actors/api_server/api_server_images.h"
#include "actors/api_server/api_server_params.h"
#include "actors/api_server/api_server_tools.h"
#include "actors/api_server/api_server_structured.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing helpers ---------------------------------------------------------------- */

struct req_impl {
  json_t *root;
  char **owned; /* [num_owned] malloc'd strings (joined content parts, image offsets) */
  int num_owned, cap_owned;
  const char *local_media_dir; /* --allowed-local-media-path (realpath) or NULL */
};

static bool own_string(struct req_impl *im, char *s) {
  if (im->num_owned == im->cap_owned) {
    int cap = im->cap_owned ? im->cap_owned * 2 : 8;
    char **o = realloc(im->owned, (size_t)cap * sizeof *o);
    if (!o) return false;
    im->owned = o;
    im->cap_owned = cap;
  }
  im->owned[im->num_owned++] = s;
  return true;
}

static bool own_cb(void *im, char *s) { return own_string(im, s); }

#define BAD(param, ...) api_server_error_bad(err, (param), __VA_ARGS__)

/* Every get_* accepts v = NULL (an absent field, as json_object_get returns it) and names
 * the field as required: a body is hostile input, no accessor may assume a key exists. */
static llb_status get_bool(json_t *v, const char *name, bool *out, struct api_server_error *err) {
  if (!v) return BAD(name, "'%s' is required", name);
  if (!json_is_boolean(v)) return BAD(name, "'%s' must be a boolean, got %s", name, api_server_json_type_name(v));
  *out = json_is_true(v);
  return LLB_STATUS_OK;
}

static llb_status get_int(json_t *v, const char *name, int64_t lo, int64_t hi, int64_t *out,
                          struct api_server_error *err) {
  if (!v) return BAD(name, "'%s' is required", name);
  if (!json_is_integer(v))
    return BAD(name, "'%s' must be an integer, got %s", name, api_server_json_type_name(v));
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return BAD(name, "'%s' must be in [%lld, %lld], got %lld", name, (long long)lo, (long long)hi,
               (long long)x);
  *out = x;
  return LLB_STATUS_OK;
}

/* A number in [lo, hi]; lo_open excludes lo. */
static llb_status get_num(json_t *v, const char *name, double lo, bool lo_open, double hi,
                          float *out, struct api_server_error *err) {
  if (!v) return BAD(name, "'%s' is required", name);
  if (!json_is_number(v)) return BAD(name, "'%s' must be a number, got %s", name, api_server_json_type_name(v));
  double x = json_number_value(v);
  if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
    return BAD(name, "'%s' must be in %s%g, %g], got %g", name, lo_open ? "(" : "[", lo, hi, x);
  *out = (float)x;
  return LLB_STATUS_OK;
}

/* Valid UTF-8 is guaranteed by jansson; NUL bytes inside strings are not: refuse them, the
 * rest of the pipeline uses C strings. */
static llb_status get_str(json_t *v, const char *name, const char **out, size_t *len,
                          struct api_server_error *err) {
  if (!v) return BAD(name, "'%s' is required", name);
  if (!json_is_string(v)) return BAD(name, "'%s' must be a string, got %s", name, api_server_json_type_name(v));
  size_t n = json_string_length(v);
  const char *s = json_string_value(v);
  if (strlen(s) != n) return BAD(name, "'%s' must not contain NUL characters", name);
  *out = s;
  if (len) *len = n;
  return LLB_STATUS_OK;
}

static llb_status parse_stop(json_t *v, struct llb_sampling_params *sp, struct api_server_error *err) {
  char name[64];
  json_t *one = v;
  size_t count = 1;
  if (json_is_array(v)) {
    count = json_array_size(v);
    if (count > LLB_MAX_STOP_STRINGS)
      return BAD("stop", "'stop' holds at most %d strings, got %zu", LLB_MAX_STOP_STRINGS, count);
  } else if (!json_is_string(v)) {
    return BAD("stop", "'stop' must be a string or an array of strings, got %s", api_server_json_type_name(v));
  }
  for (size_t i = 0; i < count; i++) {
    if (json_is_array(v)) {
      one = json_array_get(v, i);
      snprintf(name, sizeof name, "stop[%zu]", i);
    } else {
      snprintf(name, sizeof name, "stop");
    }
    const char *s = NULL;
    size_t n = 0;
    if (get_str(one, name, &s, &n, err) != LLB_STATUS_OK) return LLB_STATUS_INVALID_ARGUMENT;
    if (n == 0) return BAD(name, "'%s' must not be empty", name);
    if (n > LLB_MAX_STOP_STRING_BYTES)
      return BAD(name, "'%s' is %zu bytes, at most %d allowed", name, n, LLB_MAX_STOP_STRING_BYTES);
    memcpy(sp->stop[sp->num_stop], s, n + 1);
    sp->num_stop++;
  }
  return LLB_STATUS_OK;
}

static llb_status parse_stop_token_ids(json_t *v, struct llb_sampling_params *sp,
                                       struct api_server_error *err) {
  if (!json_is_array(v))
    return BAD("stop_token_ids", "'stop_token_ids' must be an array of integers, got %s",
               api_server_json_type_name(v));
  if (json_array_size(v) > LLB_MAX_STOP_TOKEN_IDS)
    return BAD("stop_token_ids", "'stop_token_ids' holds at most %d ids", LLB_MAX_STOP_TOKEN_IDS);
  for (size_t i = 0; i < json_array_size(v); i++) {
    char name[64];
    snprintf(name, sizeof name, "stop_token_ids[%zu]", i);
    int64_t x;
    if (get_int(json_array_get(v, i), name, 0, INT32_MAX, &x, err) != LLB_STATUS_OK)
      return LLB_STATUS_INVALID_ARGUMENT;
    sp->stop_token_ids[sp->num_stop_token_ids++] = (int32_t)x;
  }
  return LLB_STATUS_OK;
}

/* A token-id array [ints] into *ids (malloc'd). */
static llb_status parse_ids(json_t *v, const char *name, int32_t **ids, int32_t *n,
                            struct api_server_error *err) {
  size_t count = json_array_size(v);
  if (count == 0) return BAD(name, "'%s' must not be empty", name);
  if (count > INT32_MAX / 2) return BAD(name, "'%s' is too long", name);
  int32_t *out = malloc(count * sizeof *out);
  if (!out) return api_server_error_oom(err);
  for (size_t i = 0; i < count; i++) {
    char el[96];
    snprintf(el, sizeof el, "%.63s[%zu]", name, i);
    int64_t x = 0;
    if (get_int(json_array_get(v, i), el, 0, INT32_MAX, &x, err) != LLB_STATUS_OK) {
      free(out);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
    out[i] = (int32_t)x;
  }
  *ids = out;
  *n = (int32_t)count;
  return LLB_STATUS_OK;
}

/* prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] (OpenAI / vLLM). */
static llb_status parse_prompt(json_t *v, struct api_server_request *r, struct api_server_error *err) {
  size_t count = 1;
  bool list = json_is_array(v);
  bool single_ids = list && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0));
  if (list && !single_ids) {
    count = json_array_size(v);
    if (count == 0) return BAD("prompt", "'prompt' must not be empty");
    if (count > API_SERVER_MAX_PROMPTS)
      return BAD("prompt", "'prompt' holds at most %d prompts, got %zu", API_SERVER_MAX_PROMPTS, count);
  } else if (!list && !json_is_string(v)) {
    return BAD("prompt", "'prompt' must be a string, an array of strings, an array of token ids "
                         "or an array of token-id arrays, got %s", api_server_json_type_name(v));
  }
  r->prompts = calloc(count, sizeof *r->prompts);
  if (!r->prompts) return api_server_error_oom(err);
  r->num_prompts = (int32_t)count;
  for (size_t i = 0; i < count; i++) {
    json_t *p = list && !single_ids ? json_array_get(v, i) : v;
    char name[64];
    if (list && !single_ids)
      snprintf(name, sizeof name, "prompt[%zu]", i);
    else
      snprintf(name, sizeof name, "prompt");
    struct api_server_prompt *dst = &r->prompts[i];
    if (json_is_string(p)) {
      if (get_str(p, name, &dst->text, &dst->text_len, err) != LLB_STATUS_OK)
        return LLB_STATUS_INVALID_ARGUMENT;
    } else if (json_is_array(p)) {
      llb_status st = parse_ids(p, name, &dst->token_ids, &dst->num_token_ids, err);
      if (st != LLB_STATUS_OK) return st;
    } else {
      return BAD(name, "'%s' must be a string or an array of token ids, got %s", name,
                 api_server_json_type_name(p));
    }
  }
  return LLB_STATUS_OK;
}

/* An image part: its file becomes the next "image" item of r, its place the next offset of m. */
static llb_status add_image_part(json_t *part, const char *pname, size_t at, struct req_impl *im,
                                 struct api_server_request *r, struct llb_chat_message *m, struct api_server_error *err) {
  if (r->num_mm_items >= API_SERVER_MAX_IMAGES)
    return BAD(pname, "at most %d images per request", API_SERVER_MAX_IMAGES);
  uint8_t *data;
  size_t len;
  const char *dtype;
  llb_status st = api_server_image_part_read(part, pname, im->local_media_dir, &data, &len, &dtype, err);
  if (st != LLB_STATUS_OK) return st;
  if (!r->mm_items && !(r->mm_items = calloc(API_SERVER_MAX_IMAGES, sizeof *r->mm_items))) {
    free(data);
    return api_server_error_oom(err);
  }
  r->mm_items[r->num_mm_items++] = (struct llb_mm_item){.modality = llb_str_c("image"), .data = data,
                                                        .data_bytes = (int64_t)len, .dtype = llb_str_c(dtype)};
  uint32_t *offs = (uint32_t *)m->image_offsets;
  if (m->num_image_offsets == 0) {
    offs = malloc(API_SERVER_MAX_IMAGES * sizeof *offs);
    if (!offs || !own_string(im, (char *)offs)) {
      free(offs);
      return api_server_error_oom(err);
    }
    m->image_offsets = offs;
  }
  offs[m->num_image_offsets++] = (uint32_t)at;
  return LLB_STATUS_OK;
}

/* content: "text" | null | [{"type": "text", "text": "..."} | {"type": "image_url", ...}, ...]
 * (text parts joined; image parts become items of r at their byte offsets, api_server_images.h). */
static llb_status parse_content(json_t *v, const char *name, struct req_impl *im, struct api_server_request *r,
                                struct llb_chat_message *m, struct api_server_error *err) {
  struct llb_str *out = &m->content;
  if (json_is_null(v) || !v) {
    *out = llb_str_c("");
    return LLB_STATUS_OK;
  }
  if (json_is_string(v)) {
    const char *s;
    size_t n;
    if (get_str(v, name, &s, &n, err) != LLB_STATUS_OK) return LLB_STATUS_INVALID_ARGUMENT;
    *out = (struct llb_str){s, n};
    return LLB_STATUS_OK;
  }
  if (!json_is_array(v))
    return BAD(name, "'%s' must be a string or an array of content parts, got %s", name,
               api_server_json_type_name(v));
  struct api_server_buf joined = {0};
  if (!api_server_buf_append(&joined, "", 0)) return api_server_error_oom(err);
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *part = json_array_get(v, i);
    char pname[128];
    snprintf(pname, sizeof pname, "%s[%zu]", name, i);
    char field[160];
    const char *type = NULL, *text = NULL;
    size_t n = 0;
    llb_status st = LLB_STATUS_OK;
    if (!json_is_object(part)) {
      st = BAD(pname, "'%s' must be a content part object, got %s", pname, api_server_json_type_name(part));
    } else {
      snprintf(field, sizeof field, "%s.type", pname);
      st = get_str(json_object_get(part, "type"), field, &type, NULL, err);
      if (st == LLB_STATUS_OK && strcmp(type, "image_url") == 0) {
        st = r->endpoint == API_SERVER_ENDPOINT_CHAT ? add_image_part(part, pname, joined.len, im, r, m, err)
                                              : BAD(pname, "'%s': images are taken by /v1/chat/completions", pname);
        if (st == LLB_STATUS_OK) continue;
      } else if (st == LLB_STATUS_OK && strcmp(type, "text") != 0) {
        st = BAD(pname, "'%s' must be a content part {\"type\": \"text\", \"text\": string} or {\"type\": "
                 "\"image_url\", \"image_url\": {\"url\": string}}, got type \"%.40s\"", pname, type);
      }
      snprintf(field, sizeof field, "%s.text", pname);
      if (st == LLB_STATUS_OK) st = get_str(json_object_get(part, "text"), field, &text, &n, err);
    }
    if (st != LLB_STATUS_OK) {
      api_server_buf_free(&joined);
      return st;
    }
    if (!api_server_buf_append(&joined, text, n)) {
      api_server_buf_free(&joined);
      return api_server_error_oom(err);
    }
  }
  if (!own_string(im, joined.data)) {
    api_server_buf_free(&joined);
    return api_server_error_oom(err);
  }
  *out = (struct llb_str){joined.data, joined.len};
  return LLB_STATUS_OK;
}

static llb_status parse_messages(json_t *v, struct api_server_request *r, struct req_impl *im,
                                 struct api_server_error *err) {
  if (!json_is_array(v)) return BAD("messages", "'messages' must be an array, got %s", api_server_json_type_name(v));
  size_t count = json_array_size(v);
  if (count == 0) return BAD("messages", "'messages' must not be empty");
  if (count > API_SERVER_MAX_MESSAGES)
    return BAD("messages", "'messages' holds at most %d messages, got %zu", API_SERVER_MAX_MESSAGES, count);
  r->messages = calloc(count, sizeof *r->messages);
  if (!r->messages) return api_server_error_oom(err);
  r->num_messages = (int32_t)count;
  for (size_t i = 0; i < count; i++) {
    json_t *m = json_array_get(v, i);
    char name[64];
    snprintf(name, sizeof name, "messages[%zu]", i);
    if (!json_is_object(m)) return BAD(name, "'%s' must be an object, got %s", name, api_server_json_type_name(m));
    const char *key;
    json_t *val;
    json_object_foreach(m, key, val) {
      if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name") && strcmp(key, "tool_calls") &&
          strcmp(key, "tool_call_id")) {
        char field[160];
        snprintf(field, sizeof field, "%s.%s", name, key);
        return BAD(field, "Unrecognized request argument supplied: %s", field);
      }
    }
    char field[96];
    snprintf(field, sizeof field, "%s.role", name);
    const char *role;
    size_t role_len;
    if (get_str(json_object_get(m, "role"), field, &role, &role_len, err) != LLB_STATUS_OK)
      return LLB_STATUS_INVALID_ARGUMENT;
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
        strcmp(role, "developer") && strcmp(role, "tool"))
      return BAD(field, "'%s' must be one of system, developer, user, assistant, tool; got \"%.40s\"",
                 field, role);
    /* OpenAI's "developer" role is the system role of older models. */
    r->messages[i].role = strcmp(role, "developer") == 0 ? llb_str_c("system") : (struct llb_str){role, role_len};
    snprintf(field, sizeof field, "%s.content", name);
    json_t *content = json_object_get(m, "content");
    if (!content && strcmp(role, "assistant") != 0)
      return BAD(field, "'%s' is required", field);
    r->messages[i].content_is_null = !content || json_is_null(content);
    llb_status st = parse_content(content, field, im, r, &r->messages[i], err);
    if (st == LLB_STATUS_OK)
      st = api_server_tools_parse_message(m, name, !content || json_is_null(content), r, &r->messages[i], err);
    if (st != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

/* Known fields that are accepted only with their neutral value. */
static llb_status check_neutral(const char *key, json_t *val, const struct api_server_request *r,
                                bool *handled, struct api_server_error *err) {
  *handled = true;
  if (json_is_null(val)) return LLB_STATUS_OK;
  if (!strcmp(key, "parallel_tool_calls") || !strcmp(key, "store")) {
    if (json_is_false(val)) return LLB_STATUS_OK;
    if (json_is_boolean(val)) return BAD(key, "'%s' = true is not supported", key);
    return BAD(key, "'%s' must be a boolean, got %s", key, api_server_json_type_name(val));
  }
  if (!strcmp(key, "metadata")) {
    if (json_is_object(val) && json_object_size(val) == 0) return LLB_STATUS_OK;
    if (json_is_object(val)) return BAD(key, "'%s' is not supported", key);
    return BAD(key, "'%s' must be an object, got %s", key, api_server_json_type_name(val));
  }
  if (!strcmp(key, "best_of")) {
    if (json_is_integer(val) && json_integer_value(val) == r->sampling_params.n) return LLB_STATUS_OK;
    return BAD(key, "'best_of' is not supported (only best_of = n)");
  }
  if (!strcmp(key, "suffix") || !strcmp(key, "tools") || !strcmp(key, "tool_choice") ||
      !strcmp(key, "functions") || !strcmp(key, "function_call"))
    return BAD(key, "'%s' is not supported", key);
  *handled = false;
  return LLB_STATUS_OK;
}

static bool key_is(const char *key, const char *name) { return strcmp(key, name) == 0; }

/* One top-level field; unknown fields are refused. */
static llb_status parse_field(const char *key, json_t *v, struct api_server_request *r,
                              struct req_impl *im, struct api_server_error *err) {
  struct llb_sampling_params *sp = &r->sampling_params;
  bool chat = r->endpoint == API_SERVER_ENDPOINT_CHAT;
  int64_t x;
  llb_status st = LLB_STATUS_OK;
  if (key_is(key, "model") || key_is(key, "n") || key_is(key, "stream") ||
      key_is(key, "stream_options") || key_is(key, "max_tokens") ||
      key_is(key, "max_completion_tokens") ||
      (chat ? key_is(key, "messages") : key_is(key, "prompt") || key_is(key, "prompt_embeds")) ||
      key_is(key, "logprobs"))
    return LLB_STATUS_OK; /* handled in order by api_server_request_parse */
  if (json_is_null(v)) return LLB_STATUS_OK; /* null = default, as the OpenAI client sends it */
  if (key_is(key, "temperature")) return get_num(v, key, 0, false, 2, &sp->temperature, err);
  if (key_is(key, "top_p")) return get_num(v, key, 0, true, 1, &sp->top_p, err);
  if (key_is(key, "min_p")) return get_num(v, key, 0, false, 1, &sp->min_p, err);
  if (key_is(key, "presence_penalty")) return get_num(v, key, -2, false, 2, &sp->presence_penalty, err);
  if (key_is(key, "frequency_penalty")) return get_num(v, key, -2, false, 2, &sp->frequency_penalty, err);
  if (key_is(key, "repetition_penalty")) return get_num(v, key, 0, true, 2, &sp->repetition_penalty, err);
  if (key_is(key, "top_k")) {
    st = get_int(v, key, -1, INT32_MAX, &x, err);
    sp->top_k = (int32_t)x;
    return st;
  }
  if (key_is(key, "min_tokens")) {
    st = get_int(v, key, 0, INT32_MAX, &x, err);
    sp->min_tokens = (int32_t)x;
    return st;
  }
  if (key_is(key, "seed")) {
    if (!json_is_integer(v)) return BAD(key, "'seed' must be an integer, got %s", api_server_json_type_name(v));
    sp->has_seed = true;
    sp->seed = (uint64_t)json_integer_value(v);
    return LLB_STATUS_OK;
  }
  if (key_is(key, "stop")) return parse_stop(v, sp, err);
  if (key_is(key, "stop_token_ids")) return parse_stop_token_ids(v, sp, err);
  if (key_is(key, "ignore_eos")) return get_bool(v, key, &sp->ignore_eos, err);
  if (key_is(key, "skip_special_tokens")) return get_bool(v, key, &sp->skip_special_tokens, err);
  if (key_is(key, "include_stop_str_in_output"))
    return get_bool(v, key, &sp->include_stop_str_in_output, err);
  if (chat && key_is(key, "top_logprobs")) {
    st = get_int(v, key, 0, LLB_MAX_LOGPROBS, &x, err);
    r->top_logprobs = (int32_t)x;
    return st;
  }
  if (key_is(key, "user")) {
    const char *u;
    size_t n;
    if (get_str(v, key, &u, &n, err) != LLB_STATUS_OK) return LLB_STATUS_INVALID_ARGUMENT;
    if (n >= sizeof r->user) return BAD(key, "'user' is %zu bytes, at most %zu allowed", n, sizeof r->user - 1);
    memcpy(r->user, u, n + 1);
    return LLB_STATUS_OK;
  }
  bool handled;
  st = api_server_structured_parse_field(key, v, r, &handled, err);
  if (handled) return st;
  if (chat) {
    st = api_server_chat_template_field(key, v, r, own_cb, im, &handled, err);
    if (handled) return st;
  }
  st = api_server_params_parse_field(key, v, r, &handled, err);
  if (handled) return st;
  st = api_server_tools_parse_field(key, v, r, &handled, err);
  if (handled) return st;
  st = check_neutral(key, v, r, &handled, err);
  if (handled) return st;
  (void)im;
  return BAD(key, "Unrecognized request argument supplied: %s", key);
}

bool api_server_model_served(const struct api_server_parse_options *o, const char *model) {
  if (!model) return false;
  if (strcmp(model, o->served_model) == 0) return true;
  for (int i = 0; i < o->num_model_aliases; i++)
    if (strcmp(model, o->model_aliases[i]) == 0) return true;
  return false;
}

/* POST /v1/responses: the body as a chat request (api_server_responses.h). */
static llb_status parse_responses(const char *body, size_t len, const struct api_server_parse_options *o, struct api_server_request *out,
                                  struct api_server_error *err) {
  struct api_server_responses *q;
  char *chat;
  size_t n;
  llb_status st = api_server_responses_to_chat(body, len, &q, &chat, &n, err);
  if (st != LLB_STATUS_OK) return st;
  st = api_server_request_parse(API_SERVER_ENDPOINT_CHAT, chat, n, o, out, err);
  free(chat);
  if (st != LLB_STATUS_OK) {
    api_server_responses_free(q);
    api_server_responses_map_error(err);
    return st;
  }
  out->responses = q;
  return LLB_STATUS_OK;
}

llb_status api_server_request_parse(enum api_server_endpoint endpoint, const char *body, size_t len,
                             const struct api_server_parse_options *o, struct api_server_request *out,
                             struct api_server_error *err) {
  if (endpoint == API_SERVER_ENDPOINT_RESPONSES) return parse_responses(body, len, o, out, err);
  memset(out, 0, sizeof *out);
  memset(err, 0, sizeof *err);
  out->endpoint = endpoint;
  llb_sampling_params_init(&out->sampling_params);
  struct llb_sampling_params *sp = &out->sampling_params;
  bool chat = endpoint == API_SERVER_ENDPOINT_CHAT;
  sp->max_tokens = chat ? -1 : 16;
  out->top_logprobs = -1;
  struct req_impl *im = calloc(1, sizeof *im);
  if (!im) return api_server_error_oom(err);
  out->impl = im;
  im->local_media_dir = o->allowed_local_media_path;
  llb_status st = LLB_STATUS_INVALID_ARGUMENT;
  im->root = api_server_json_load_object(body, len, err);
  if (!im->root) goto fail;
  json_t *root = im->root;
  /* Order matters: n before best_of, model first so a wrong model is a 404. */
  const char *model;
  size_t model_len;
  json_t *mv = json_object_get(root, "model");
  if (!mv) {
    BAD("model", "'model' is required");
    goto fail;
  }
  if (get_str(mv, "model", &model, &model_len, err) != LLB_STATUS_OK) goto fail;
  out->is_lora = model_len < sizeof out->model && !api_server_model_served(o, model) && o->loras &&
                 lora_registry_lookup(o->loras, model, o->tenant, llb_now_ns()) > 0;
  if (model_len >= sizeof out->model || (!out->is_lora && !api_server_model_served(o, model))) {
    /* an adapter another tenant owns reads as unknown (docs/design.md §7) */
    api_server_error_set(err, 404, "model", "The model `%.200s` does not exist. Served: `%s`.", model,
                  o->served_model);
    snprintf(err->code, sizeof err->code, "model_not_found");
    goto fail;
  }
  memcpy(out->model, model, model_len + 1);
  json_t *v;
  int64_t x;
  if ((v = json_object_get(root, "n")) && !json_is_null(v)) {
    if (get_int(v, "n", 1, o->max_n > 0 ? o->max_n : API_SERVER_MAX_N, &x, err) != LLB_STATUS_OK) goto fail;
    sp->n = (int32_t)x;
  }
  if ((v = json_object_get(root, "stream")) && !json_is_null(v) &&
      get_bool(v, "stream", &out->stream, err) != LLB_STATUS_OK)
    goto fail;
  if ((v = json_object_get(root, "stream_options")) && !json_is_null(v)) {
    if (!out->stream) {
      BAD("stream_options", "'stream_options' is only allowed when 'stream' is true");
      goto fail;
    }
    if (!json_is_object(v)) {
      BAD("stream_options", "'stream_options' must be an object, got %s", api_server_json_type_name(v));
      goto fail;
    }
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e) {
      if (strcmp(k, "include_usage") == 0) {
        if (!json_is_null(e) && get_bool(e, "stream_options.include_usage", &out->include_usage, err) != LLB_STATUS_OK)
          goto fail;
      } else {
        char f[96];
        snprintf(f, sizeof f, "stream_options.%.60s", k);
        BAD(f, "Unrecognized request argument supplied: %s", f);
        goto fail;
      }
    }
  }
  /* max_completion_tokens (chat) wins over the deprecated max_tokens, as vLLM. */
  const char *mt_names[2] = {"max_tokens", "max_completion_tokens"};
  for (int i = 0; i < (chat ? 2 : 1); i++) {
    if ((v = json_object_get(root, mt_names[i])) && !json_is_null(v)) {
      if (get_int(v, mt_names[i], 1, INT32_MAX, &x, err) != LLB_STATUS_OK) goto fail;
      sp->max_tokens = (int32_t)x;
    }
  }
  if ((v = json_object_get(root, "logprobs")) && !json_is_null(v)) {
    if (chat) {
      if (get_bool(v, "logprobs", &out->chat_logprobs, err) != LLB_STATUS_OK) goto fail;
    } else {
      if (get_int(v, "logprobs", 0, LLB_MAX_LOGPROBS, &x, err) != LLB_STATUS_OK) goto fail;
      out->top_logprobs = (int32_t)x;
      sp->logprobs = (int32_t)x;
    }
  }
  const char *key;
  json_object_foreach(root, key, v) {
    if (parse_field(key, v, out, im, err) != LLB_STATUS_OK) goto fail;
  }
  if (chat) {
    if (out->top_logprobs >= 0 && !out->chat_logprobs) {
      BAD("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
      goto fail;
    }
    if (out->chat_logprobs) {
      if (out->top_logprobs < 0) out->top_logprobs = 0;
      sp->logprobs = out->top_logprobs;
    }
    if (!(v = json_object_get(root, "messages"))) {
      BAD("messages", "'messages' is required");
      goto fail;
    }
    st = parse_messages(v, out, im, err);
    if (st == LLB_STATUS_OK) st = api_server_chat_check(out, err);
  } else {
    if (!(v = json_object_get(root, "prompt")) || json_is_null(v)) {
      BAD("prompt", "'prompt' is required");
      goto fail;
    }
    st = parse_prompt(v, out, err);
    if (st == LLB_STATUS_OK && (v = json_object_get(root, "prompt_embeds")))
      st = api_server_parse_prompt_embeds(v, out, err);
  }
  if (st == LLB_STATUS_OK) st = api_server_params_check(out, err);
  if (st == LLB_STATUS_OK) st = api_server_tools_check(out, (enum tool_format)o->tool_parser, !o->no_auto_tool_choice, err);
  if (st != LLB_STATUS_OK) goto fail;
  if (chat && o->reasoning_parser && api_server_reasoning_thinking_enabled(out->chat_template_kwargs)) {
    /* vLLM's rule: a structured output starts once the reasoning has ended */
    out->reasoning = o->reasoning_parser;
    if (out->structured_outputs.kind != LLB_SO_NONE) out->structured_outputs.reasoning = (uint8_t)o->reasoning_parser;
    if (reasoning_needs_special_tokens((enum reasoning_parser)o->reasoning_parser)) sp->skip_special_tokens = false;
  }
  /* The params as the engine gets them, set once here so every prompt's GenerateRequest
   * points at them: DELTA outputs (non-streamed responses are accumulated by the server),
   * and echo + logprobs scores the prompt (vLLM), beyond what the client's prompt_logprobs
   * (kept for the response's own field) asked. */
  out->prompt_logprobs = sp->prompt_logprobs;
  sp->output_kind = LLB_OUTPUT_KIND_DELTA;
  if (out->echo && out->top_logprobs > sp->prompt_logprobs) sp->prompt_logprobs = out->top_logprobs;
  return LLB_STATUS_OK;
fail:
  api_server_request_free(out);
  return st == LLB_STATUS_OK ? LLB_STATUS_INVALID_ARGUMENT : st;
}

void api_server_request_free(struct api_server_request *r) {
  if (!r) return;
  for (int32_t i = 0; r->prompts && i < r->num_prompts; i++) free(r->prompts[i].token_ids);
  free(r->prompts);
  free(r->messages);
  for (int32_t i = 0; r->mm_items && i < r->num_mm_items; i++) free((void *)r->mm_items[i].data);
  free(r->mm_items);
  api_server_tools_free(r);
  api_server_responses_free(r->responses);
  free(r->structured_spec);
  struct req_impl *im = r->impl;
  if (im) {
    for (int i = 0; i < im->num_owned; i++) free(im->owned[i]);
    free(im->owned);
    json_decref(im->root);
    free(im);
  }
  memset(r, 0, sizeof *r);
}

void api_server_request_to_generate(const struct api_server_request *r, int32_t prompt_index,
                             const char *request_id, struct llb_generate_request *out) {
  llb_generate_request_init(out);
  out->request_id = llb_str_c(request_id);
  out->sampling_params = &r->sampling_params;
  out->priority = r->priority;
  if (r->cache_salt[0]) out->cache_salt = llb_str_c(r->cache_salt);
  out->structured_outputs = r->structured_outputs;
  if (r->is_lora) out->lora_request = (struct llb_lora_request){llb_str_c(r->model), 0}; /* resolved downstream */
  if (r->endpoint == API_SERVER_ENDPOINT_CHAT) {
    out->messages = r->messages;
    out->num_messages = r->num_messages;
    out->mm_items = r->mm_items; /* image parts (api_server_images.h) */
    out->num_mm_items = r->num_mm_items;
    out->chat_template_kwargs = r->chat_template_kwargs;
    out->continue_final_message = r->continue_final_message;
    out->add_generation_prompt = !r->no_generation_prompt;
    api_server_tools_to_generate(r, out);
    return;
  }
  const struct api_server_prompt *p = &r->prompts[prompt_index];
  if (p->text) {
    out->prompt = (struct llb_str){p->text, p->text_len};
    out->raw = true; /* completions: the prompt as given, no chat template */
  } else {
    out->prompt_token_ids = p->token_ids;
    out->num_prompt_token_ids = p->num_token_ids;
    out->mm_items = r->mm_items;
    out->num_mm_items = r->num_mm_items;
  }
}
