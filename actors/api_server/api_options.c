/* The api server's options and llmbus-api-server's flags; see api_options.h. */
#include "actors/api_server/api_options.h"

#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_keys.h"
#include "actors/api_server/api_tools.h"
#include "model/reasoning.h"

/* --api-key / --api-keys into one key set (*out NULL when neither is given). */
static llb_status load_keys(const struct api_server_flags *f, struct api_keys **out) {
  *out = NULL;
  if (!f->api_key && !f->api_keys_file) return LLB_STATUS_OK;
  struct api_keys *keys;
  llb_status st = api_keys_create(&keys);
  if (st != LLB_STATUS_OK) return st;
  if (f->api_key) st = api_keys_add(keys, f->api_key, f->tenant);
  if (st == LLB_STATUS_OK && f->api_keys_file) st = api_keys_load_file(keys, f->api_keys_file);
  if (st != LLB_STATUS_OK) {
    api_keys_destroy(keys);
    return st;
  }
  *out = keys;
  return LLB_STATUS_OK;
}

/* The GGUF file's basename without ".gguf" into name[cap]. */
static llb_status derive_model_name(const char *model_path, char *name, size_t cap) {
  const char *path = model_path ? model_path : "";
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) n -= 5;
  if (n == 0 || n >= cap)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cannot derive a model name from --model \"%s\": give --model-name",
                    path);
  memcpy(name, base, n);
  name[n] = '\0';
  return LLB_STATUS_OK;
}

llb_status api_server_config_init(struct api_server_config *c, const struct api_server_flags *f,
                                  const char *model_path, int64_t heartbeat_ms) {
  memset(c, 0, sizeof *c);
  if (f->max_body_bytes < 1024 || f->max_body_bytes > ((int64_t)1 << 30))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--max-body-bytes must be in [1024, 1 GiB], got %lld",
                    (long long)f->max_body_bytes);
  if (f->request_timeout_s < 1 || f->first_output_timeout_s < 1 || f->max_concurrent < 1 ||
      f->health_missed_beats < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--request-timeout-s, --first-output-timeout-s, "
                    "--max-concurrent and --health-missed-beats must be >= 1");
  enum tool_format tool_format;
  llb_status st = api_tool_parser_from_name(f->tool_call_parser, &tool_format);
  const char *model_name = f->model_name;
  if (st == LLB_STATUS_OK && !(model_name && *model_name)) {
    st = derive_model_name(model_path, c->model_name, sizeof c->model_name);
    model_name = c->model_name;
  }
  enum reasoning_parser reasoning = reasoning_parser_from_name(f->reasoning_parser);
  if (st == LLB_STATUS_OK && f->reasoning_parser && *f->reasoning_parser && reasoning == REASONING_NONE)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--reasoning-parser must be one of %s, got \"%s\"", reasoning_parser_names(),
                  f->reasoning_parser);
  if (st == LLB_STATUS_OK) st = load_keys(f, &c->keys);
  if (st != LLB_STATUS_OK) return st;
  c->options = (struct api_actor_options){
      .http_addr = f->http,
      .model_name = model_name,
      .tenant = f->tenant,
      .api_keys = c->keys,
      .max_body_bytes = (size_t)f->max_body_bytes,
      .request_timeout_s = f->request_timeout_s,
      .first_output_timeout_s = f->first_output_timeout_s,
      .max_concurrent = f->max_concurrent,
      .health_actors = f->health_actors,
      .health_window_ms = f->health_missed_beats * heartbeat_ms,
      .tool_call_parser = (int32_t)tool_format,
      .reasoning_parser = (int32_t)reasoning,
      .cors_allowed_origins = f->allowed_origins,
      .cors_allowed_methods = f->allowed_methods,
      .cors_allowed_headers = f->allowed_headers,
      .cors_allow_credentials = f->allow_credentials,
      .allowed_local_media_path = f->allowed_local_media_path,
  };
  return LLB_STATUS_OK;
}

void api_server_config_free(struct api_server_config *c) {
  if (!c) return;
  api_keys_destroy(c->keys);
  c->keys = NULL;
  c->options.api_keys = NULL;
}

llb_status api_parse_host_port(const char *addr, char *host, size_t cap, int *port) {
  const char *colon = strrchr(addr, ':');
  char *end = NULL;
  long p = colon ? strtol(colon + 1, &end, 10) : -1;
  size_t hl = colon ? (size_t)(colon - addr) : 0;
  if (!colon || !end || *end || colon[1] == '\0' || p < 0 || p > 65535 || hl == 0 || hl >= cap)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: --http \"%s\" is not HOST:PORT", addr);
  memcpy(host, addr, hl);
  host[hl] = '\0';
  if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') { /* [::1] */
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = '\0';
  }
  *port = (int)p;
  return LLB_STATUS_OK;
}

int api_parse_name_list(const char *list, char *names, size_t name_cap, int max) {
  int kept = 0;
  while (*list && kept < max) {
    size_t n = strcspn(list, ",");
    if (n > 0 && n < name_cap) {
      memcpy(names + (size_t)kept * name_cap, list, n);
      names[(size_t)kept * name_cap + n] = '\0';
      kept++;
    }
    list += n;
    if (*list == ',') list++;
  }
  return kept;
}
