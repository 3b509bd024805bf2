/* llmbus-api-server: the OpenAI-compatible HTTP + SSE front door (actors/api_server/actor.h).
 * Flags: the common actor flags (cmd/actor/actor_main.h) plus --http, --model-name,
 * --max-body-bytes, --request-timeout-s, --first-output-timeout-s, --max-concurrent,
 * --tenant, --health-actors, --api-key, --api-keys, --tool-call-parser and the CORS options
 * (--allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials, as vLLM). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "actors/api_server/actor.h"
#include "actors/api_server/api_keys.h"
#include "actors/api_server/api_tools.h"
#include "cmd/actor/actor_main.h"

struct api_main {
  const char *http;
  const char *model_name;
  int64_t max_body_bytes;
  int64_t request_timeout_s;
  int64_t first_output_timeout_s;
  int32_t max_concurrent;
  const char *tenant;
  const char *health_actors;
  int32_t health_missed_beats;
  const char *api_key;      /* one key, for --tenant */
  const char *api_keys_file; /* KEY TENANT lines */
  const char *tool_call_parser; /* hermes | llama3_json | mistral */
  const char *allowed_origins, *allowed_methods, *allowed_headers; /* CORS (api_cors.h) */
  bool allow_credentials;
  const char *allowed_local_media_path; /* file:// image URLs under it (api_images.h) */
  enum tool_format tool_format;
  struct api_keys *keys;    /* NULL = no authentication */
  char derived_name[256];
  struct api_actor *actor;
};

/* --api-key / --api-keys into m->keys (NULL when neither is given). */
static llb_status api_main_load_keys(struct api_main *m) {
  if (!m->api_key && !m->api_keys_file) return LLB_STATUS_OK;
  llb_status st = api_keys_create(&m->keys);
  if (st == LLB_STATUS_OK && m->api_key) st = api_keys_add(m->keys, m->api_key, m->tenant);
  if (st == LLB_STATUS_OK && m->api_keys_file) st = api_keys_load_file(m->keys, m->api_keys_file);
  if (st != LLB_STATUS_OK) {
    api_keys_destroy(m->keys); /* destroy does not run after a configure error */
    m->keys = NULL;
  }
  return st;
}

/* The served model id: --model-name, else the GGUF file's basename without ".gguf". */
static llb_status api_main_configure(struct actor_main *am, void *user) {
  struct api_main *m = user;
  if (m->max_body_bytes < 1024 || m->max_body_bytes > ((int64_t)1 << 30))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--max-body-bytes must be in [1024, 1 GiB], got %lld",
                    (long long)m->max_body_bytes);
  if (m->request_timeout_s < 1 || m->first_output_timeout_s < 1 || m->max_concurrent < 1 ||
      m->health_missed_beats < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--request-timeout-s, --first-output-timeout-s, "
                    "--max-concurrent and --health-missed-beats must be >= 1");
  llb_status st = api_tool_parser_from_name(m->tool_call_parser, &m->tool_format);
  if (st != LLB_STATUS_OK) return st;
  if (m->model_name && *m->model_name) return api_main_load_keys(m);
  const char *path = am->common.model_path ? am->common.model_path : "";
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) n -= 5;
  if (n == 0 || n >= sizeof m->derived_name)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cannot derive a model name from --model \"%s\": give --model-name",
                    path);
  memcpy(m->derived_name, base, n);
  m->derived_name[n] = '\0';
  m->model_name = m->derived_name;
  return api_main_load_keys(m);
}

static llb_status api_main_start(struct actor_main *am, void *user) {
  struct api_main *m = user;
  struct api_actor_options o = {
      .http_addr = m->http,
      .model_name = m->model_name,
      .tenant = m->tenant,
      .max_body_bytes = (size_t)m->max_body_bytes,
      .request_timeout_s = m->request_timeout_s,
      .first_output_timeout_s = m->first_output_timeout_s,
      .max_concurrent = m->max_concurrent,
      .health_actors = m->health_actors,
      .health_window_ms = m->health_missed_beats * am->common.heartbeat_ms,
      .registry = am->metrics,
      .api_keys = m->keys,
      .tool_call_parser = (int32_t)m->tool_format,
      .cors_allowed_origins = m->allowed_origins,
      .cors_allowed_methods = m->allowed_methods,
      .cors_allowed_headers = m->allowed_headers,
      .cors_allow_credentials = m->allow_credentials,
      .allowed_local_media_path = m->allowed_local_media_path,
  };
  llb_status st = api_actor_create(&o, &m->actor);
  if (st != LLB_STATUS_OK) return st;
  return api_actor_start(m->actor, am->bus);
}

static void api_main_stop(struct actor_main *am, void *user) {
  (void)am;
  struct api_main *m = user;
  api_actor_stop(m->actor);
}

static void api_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct api_main *m = user;
  api_actor_destroy(m->actor);
  m->actor = NULL;
  api_keys_destroy(m->keys);
  m->keys = NULL;
}

int main(int argc, char **argv) {
  struct api_main m = {
      .http = "127.0.0.1:8000",
      .model_name = "",
      .max_body_bytes = 1024 * 1024,
      .request_timeout_s = 10,
      .first_output_timeout_s = 60,
      .max_concurrent = 256,
      .tenant = "default",
      .health_actors = API_ACTOR_DEFAULT_HEALTH_ACTORS,
      .health_missed_beats = 3,
      .tool_call_parser = "hermes",
  };
  const struct actor_flag flags[] = {
      {"http", ACTOR_FLAG_KIND_STRING, &m.http, "HOST:PORT to listen on (port 0 = any free port)", NULL},
      {"model-name", ACTOR_FLAG_KIND_STRING, &m.model_name,
       "served model id; empty = the --model file's basename without .gguf", NULL},
      {"max-body-bytes", ACTOR_FLAG_KIND_INT64, &m.max_body_bytes, "largest request body (413 above)", NULL},
      {"request-timeout-s", ACTOR_FLAG_KIND_INT64, &m.request_timeout_s,
       "HTTP read/write inactivity limit (slow clients are closed)", NULL},
      {"first-output-timeout-s", ACTOR_FLAG_KIND_INT64, &m.first_output_timeout_s,
       "503 when the engine sends nothing for this long", NULL},
      {"max-concurrent", ACTOR_FLAG_KIND_INT32, &m.max_concurrent, "requests in flight here (429 above)", NULL},
      {"tenant", ACTOR_FLAG_KIND_STRING, &m.tenant, "publish on <prefix>.generate.<tenant>", NULL},
      {"health-actors", ACTOR_FLAG_KIND_STRING, &m.health_actors,
       "actors whose ready heartbeat /health requires (comma list; empty = none)", NULL},
      {"api-key", ACTOR_FLAG_KIND_STRING, &m.api_key,
       "require `Authorization: Bearer KEY` on every route; requests go to --tenant (visible in ps: "
       "prefer --api-keys)", NULL},
      {"api-keys", ACTOR_FLAG_KIND_STRING, &m.api_keys_file,
       "file of `KEY TENANT` lines (mode 0600): every route needs one of the keys; a request goes to "
       "its key's tenant", NULL},
      {"tool-call-parser", ACTOR_FLAG_KIND_STRING, &m.tool_call_parser,
       "how tool_choice auto reads tool calls in the output: hermes (<tool_call>{...}</tool_call>; Qwen, "
       "Hermes, SmolLM3), llama3_json, mistral (vLLM's parser names)", NULL},
      {"allowed-origins", ACTOR_FLAG_KIND_STRING, &m.allowed_origins,
       "CORS: comma-separated origins browsers may call from (default *: any, as vLLM)", NULL},
      {"allowed-methods", ACTOR_FLAG_KIND_STRING, &m.allowed_methods, "CORS: comma-separated methods (default *)", NULL},
      {"allowed-headers", ACTOR_FLAG_KIND_STRING, &m.allowed_headers, "CORS: comma-separated request headers (default *)",
       NULL},
      {"allowed-local-media-path", ACTOR_FLAG_KIND_STRING, &m.allowed_local_media_path,
       "image_url parts may name file:///path when the file's realpath is inside DIR (vLLM's flag); "
       "without it file URLs are refused", NULL},
      {"allow-credentials", ACTOR_FLAG_KIND_BOOL, &m.allow_credentials,
       "CORS: Access-Control-Allow-Credentials: true (the origin is then echoed, never *)", NULL},
      {"health-missed-beats", ACTOR_FLAG_KIND_INT32, &m.health_missed_beats,
       "/health answers 503 when an actor sent no ready heartbeat for this many --heartbeat-ms "
       "intervals (the actors beat at the same interval; default 3)", NULL},
  };
  const struct actor_main_spec spec = {
      .actor = "api_server",
      .program = "llmbus-api-server",
      .summary = "OpenAI-compatible HTTP + SSE front door (/v1/completions, /v1/chat/completions, ...)",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .configure = api_main_configure,
      .start = api_main_start,
      .stop = api_main_stop,
      .destroy = api_main_destroy,
      .user = &m,
  };
  return actor_main_exec(&spec, argc, argv);
}
