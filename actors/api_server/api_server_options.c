/* The api server's options and llmbus-api-server's flags; see api_server_options.h. */
#include "actors/api_server/api_server_options.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "actors/api_server/api_server_keys.h"
#include "actors/api_server/api_server_tools.h"
#include "bus/subject.h"
#include "model/reasoning/reasoning.h"

/* --api-key / --api-keys into one key set (*out NULL when neither is given). */
static llb_status load_keys(const struct api_server_flags *f, struct api_server_keys **out) {
  *out = NULL;
  if (!f->num_api_keys && !f->num_api_keys_files) return LLB_STATUS_OK;
  struct api_server_keys *keys;
  llb_status st = api_server_keys_create(&keys);
  if (st != LLB_STATUS_OK) return st;
  for (int i = 0; st == LLB_STATUS_OK && i < f->num_api_keys; i++) st = api_server_keys_add(keys, f->api_keys[i], f->tenant);
  for (int i = 0; st == LLB_STATUS_OK && i < f->num_api_keys_files; i++)
    st = api_server_keys_load_file(keys, f->api_keys_files[i]);
  if (st != LLB_STATUS_OK) {
    api_server_keys_destroy(keys);
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
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cannot derive a model name from --model \"%s\": give --served-model-name",
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
      f->health_missed_beats < 1 || f->max_connections < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--request-timeout-s, --first-output-timeout-s, "
                    "--max-concurrent, --max-connections and --health-missed-beats must be >= 1");
  enum tool_format tool_format;
  llb_status st = api_server_tool_parser_from_name(f->tool_call_parser, &tool_format);
  const char *model_name = f->num_served_model_names > 0 ? f->served_model_names[0] : NULL;
  for (int i = 0; st == LLB_STATUS_OK && i < f->num_served_model_names; i++)
    if (!*f->served_model_names[i] || strlen(f->served_model_names[i]) >= API_SERVER_MAX_MODEL_BYTES)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--served-model-name must be 1..%d bytes", API_SERVER_MAX_MODEL_BYTES - 1);
    else
      st = bus_name_check(BUS_NAME_KIND_MODEL, "--served-model-name", f->served_model_names[i]);
  char *end = NULL;
  const unsigned long long seed = f->seed ? strtoull(f->seed, &end, 10) : 0;
  if (st == LLB_STATUS_OK && f->seed && (!*f->seed || *end || f->seed[0] == '-'))
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--seed '%s' is not a non-negative integer", f->seed);
  if (st == LLB_STATUS_OK && !(model_name && *model_name)) {
    st = derive_model_name(model_path, c->model_name, sizeof c->model_name);
    model_name = c->model_name;
  }
  if (st == LLB_STATUS_OK) st = bus_name_check(BUS_NAME_KIND_MODEL, "--served-model-name", model_name);
  enum reasoning_parser reasoning = reasoning_parser_from_name(f->reasoning_parser);
  if (st == LLB_STATUS_OK && f->reasoning_parser && *f->reasoning_parser && reasoning == REASONING_NONE)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--reasoning-parser must be one of %s, got \"%s\"", reasoning_parser_names(),
                  f->reasoning_parser);
  if (st == LLB_STATUS_OK) st = load_keys(f, &c->keys);
  if (st != LLB_STATUS_OK) return st;
  c->options = (struct api_server_actor_options){
      .http_addr = f->http,
      .model_name = model_name,
      .model_aliases = f->num_served_model_names > 1 ? f->served_model_names + 1 : NULL,
      .num_model_aliases = f->num_served_model_names > 1 ? f->num_served_model_names - 1 : 0,
      .has_seed = f->seed != NULL,
      .seed = (uint64_t)seed,
      .enable_auto_tool_choice = f->enable_auto_tool_choice,
      .tenant = f->tenant,
      .api_keys = c->keys,
      .max_body_bytes = (size_t)f->max_body_bytes,
      .request_timeout_s = f->request_timeout_s,
      .first_output_timeout_s = f->first_output_timeout_s,
      .max_concurrent = f->max_concurrent,
      .max_connections = f->max_connections,
      .health_actors = f->health_actors,
      .health_window_ms = f->health_missed_beats * heartbeat_ms,
      .tool_call_parser = (int32_t)tool_format,
      .reasoning_parser = (int32_t)reasoning,
      .cors_allowed_origins = f->allowed_origins,
      .cors_allowed_methods = f->allowed_methods,
      .cors_allowed_headers = f->allowed_headers,
      .cors_allow_credentials = f->allow_credentials,
      .allowed_local_media_path = f->allowed_local_media_path,
      .lora_dir = f->lora_dir && f->lora_dir[0] ? f->lora_dir : NULL,
  };
  return LLB_STATUS_OK;
}

void api_server_config_free(struct api_server_config *c) {
  if (!c) return;
  api_server_keys_destroy(c->keys);
  c->keys = NULL;
  c->options.api_keys = NULL;
}

llb_status api_server_parse_host_port(const char *addr, char *host, size_t cap, int *port) {
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

bool api_server_host_is_loopback(const char *host) {
  if (!host || !*host) return false;
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return false;
  bool loop = true;
  for (struct addrinfo *r = res; r && loop; r = r->ai_next) {
    if (r->ai_family == AF_INET)
      loop = (ntohl(((struct sockaddr_in *)r->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else if (r->ai_family == AF_INET6)
      loop = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)r->ai_addr)->sin6_addr);
    else
      loop = false;
  }
  freeaddrinfo(res);
  return loop;
}

int api_server_parse_name_list(const char *list, char *names, size_t name_cap, int max) {
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
