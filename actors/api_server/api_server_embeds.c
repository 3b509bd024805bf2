/* "prompt_embeds" parsing (see api_server_embeds.h). */
#include "actors/api_server/api_server_embeds.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value of a base64 character, -1 if none. */
static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

llb_status api_server_base64_decode(const char *src, size_t len, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  size_t n = len;
  if (n % 4 == 0 && n >= 2 && src[n - 1] == '=') n -= src[n - 2] == '=' ? 2 : 1;
  if (n % 4 == 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "base64 length %zu is not valid", len);
  uint8_t *dst = malloc(n / 4 * 3 + 3);
  if (!dst) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "base64: %zu bytes", len);
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int x = b64_value((unsigned char)src[i]);
    if (x < 0) {
      free(dst);
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "invalid base64 character at offset %zu", i);
    }
    acc = (acc << 6) | (uint32_t)x;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      dst[o++] = (uint8_t)(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  *out = dst;
  *out_len = o;
  return LLB_STATUS_OK;
}

/* Sets a 400 naming `param` and returns INVALID_ARGUMENT. */
#define BAD(param, ...) (api_server_error_set(err, 400, (param), __VA_ARGS__), LLB_STATUS_INVALID_ARGUMENT)

/* One item object `v` named `name` into *m (m->data malloc'd on success). */
static llb_status parse_item(json_t *v, const char *name, const struct api_server_prompt *p,
                             struct llb_mm_item *m, struct api_server_error *err) {
  char f[128];
  if (!json_is_object(v)) return BAD(name, "'%s' must be an object, got %s", name, api_server_json_type_name(v));
  const char *key;
  json_t *x;
  json_object_foreach(v, key, x) {
    if (strcmp(key, "data") && strcmp(key, "dtype") && strcmp(key, "shape") &&
        strcmp(key, "placeholder_offset")) {
      snprintf(f, sizeof f, "%s.%.40s", name, key);
      return BAD(f, "Unrecognized request argument supplied: %s", f);
    }
  }
  snprintf(f, sizeof f, "%s.dtype", name);
  x = json_object_get(v, "dtype");
  const char *dt = json_is_string(x) ? json_string_value(x) : NULL;
  int64_t esize = 0;
  if (dt && (!strcmp(dt, "float32") || !strcmp(dt, "f32"))) {
    esize = 4;
    m->dtype = llb_str_c("f32");
  } else if (dt && (!strcmp(dt, "float16") || !strcmp(dt, "f16"))) {
    esize = 2;
    m->dtype = llb_str_c("f16");
  } else {
    return BAD(f, "'%s' must be \"float32\" or \"float16\"", f);
  }
  snprintf(f, sizeof f, "%s.shape", name);
  x = json_object_get(v, "shape");
  if (!json_is_array(x) || json_array_size(x) != 2 || !json_is_integer(json_array_get(x, 0)) ||
      !json_is_integer(json_array_get(x, 1)))
    return BAD(f, "'%s' must be [rows, hidden] (two integers)", f);
  json_int_t rows = json_integer_value(json_array_get(x, 0));
  json_int_t cols = json_integer_value(json_array_get(x, 1));
  if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX)
    return BAD(f, "'%s' must hold positive sizes, got [%lld, %lld]", f, (long long)rows, (long long)cols);
  snprintf(f, sizeof f, "%s.placeholder_offset", name);
  json_int_t off = 0;
  if ((x = json_object_get(v, "placeholder_offset")) && !json_is_null(x)) {
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return BAD(f, "'%s' must be a non-negative integer", f);
    off = json_integer_value(x);
  }
  if (off + rows > p->num_token_ids)
    return BAD(f, "'%s' + rows = %lld is beyond the prompt's %d tokens", f, (long long)(off + rows),
               p->num_token_ids);
  snprintf(f, sizeof f, "%s.data", name);
  x = json_object_get(v, "data");
  if (!json_is_string(x)) return BAD(f, "'%s' must be a base64 string, got %s", f, api_server_json_type_name(x));
  uint8_t *data = NULL;
  size_t n = 0;
  llb_status st = api_server_base64_decode(json_string_value(x), json_string_length(x), &data, &n);
  if (st == LLB_STATUS_OUT_OF_MEMORY) {
    api_server_error_set(err, 500, NULL, "out of memory");
    return st;
  }
  if (st != LLB_STATUS_OK) return BAD(f, "'%s' is not valid base64: %s", f, llb_err_last());
  if ((int64_t)n != (int64_t)rows * cols * esize) {
    free(data);
    return BAD(f, "'%s' holds %zu bytes but shape [%lld, %lld] of %s needs %lld", f, n, (long long)rows,
               (long long)cols, m->dtype.data, (long long)(rows * cols * esize));
  }
  m->modality = llb_str_c("embeds");
  m->data = data;
  m->data_bytes = (int64_t)n;
  m->num_rows = (int32_t)rows;
  m->num_cols = (int32_t)cols;
  m->placeholder_offset = (int32_t)off;
  return LLB_STATUS_OK;
}

llb_status api_server_parse_prompt_embeds(json_t *v, struct api_server_request *r, struct api_server_error *err) {
  if (json_is_null(v)) return LLB_STATUS_OK;
  bool list = json_is_array(v);
  if (!list && !json_is_object(v))
    return BAD("prompt_embeds", "'prompt_embeds' must be an array of items, got %s", api_server_json_type_name(v));
  size_t count = list ? json_array_size(v) : 1;
  if (count == 0) return BAD("prompt_embeds", "'prompt_embeds' must not be empty");
  if (count > API_SERVER_MAX_PROMPT_EMBEDS)
    return BAD("prompt_embeds", "'prompt_embeds' holds at most %d items, got %zu", API_SERVER_MAX_PROMPT_EMBEDS, count);
  if (r->num_prompts != 1 || r->prompts[0].text)
    return BAD("prompt", "'prompt' must be one array of token ids when 'prompt_embeds' is given");
  r->mm_items = calloc(count, sizeof *r->mm_items);
  if (!r->mm_items) {
    api_server_error_set(err, 500, NULL, "out of memory");
    return LLB_STATUS_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < count; i++) {
    char name[48];
    if (list)
      snprintf(name, sizeof name, "prompt_embeds[%zu]", i);
    else
      snprintf(name, sizeof name, "prompt_embeds");
    llb_status st = parse_item(list ? json_array_get(v, i) : v, name, &r->prompts[0], &r->mm_items[i], err);
    if (st != LLB_STATUS_OK) return st; /* items parsed so far are freed by api_server_request_free */
    r->num_mm_items++;
  }
  return LLB_STATUS_OK;
}
