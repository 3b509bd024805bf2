/* llmbus-api-server: the OpenAI-compatible HTTP + SSE front door (actors/api_server/actor.h).
 * Flags: the common actor flags (cmd/actor/actor_main.h) plus --http, --model-name,
 * --max-body-bytes, --request-timeout-s, --first-output-timeout-s, --max-concurrent,
 * --tenant, --health-actors, --api-key, --api-keys, --tool-call-parser, --reasoning-parser and the
 * CORS options (--allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials, as vLLM);
 * checked and made into the actor's options by api_server_config_init (api_options.h). */
#include <stdint.h>

#include "actors/api_server/actor.h"
#include "cmd/actor/actor_main.h"

struct api_main {
  struct api_server_flags f;
  struct api_server_config cfg; /* the flags checked and made into the actor's options */
  struct api_actor *actor;
};

static llb_status api_main_configure(struct actor_main *am, void *user) {
  struct api_main *m = user;
  return api_server_config_init(&m->cfg, &m->f, am->common.model_path, am->common.heartbeat_ms);
}

static llb_status api_main_start(struct actor_main *am, void *user) {
  struct api_main *m = user;
  struct api_actor_options o = m->cfg.options;
  o.registry = am->metrics;
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
  api_server_config_free(&m->cfg);
}

int main(int argc, char **argv) {
  struct api_main m = {.f = {
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
                        }};
  const struct actor_flag flags[] = {
      {"http", ACTOR_FLAG_KIND_STRING, &m.f.http, "HOST:PORT to listen on (port 0 = any free port)", NULL},
      {"model-name", ACTOR_FLAG_KIND_STRING, &m.f.model_name,
       "served model id; empty = the --model file's basename without .gguf", NULL},
      {"max-body-bytes", ACTOR_FLAG_KIND_INT64, &m.f.max_body_bytes, "largest request body (413 above)", NULL},
      {"request-timeout-s", ACTOR_FLAG_KIND_INT64, &m.f.request_timeout_s,
       "HTTP read/write inactivity limit (slow clients are closed)", NULL},
      {"first-output-timeout-s", ACTOR_FLAG_KIND_INT64, &m.f.first_output_timeout_s,
       "503 when the engine sends nothing for this long", NULL},
      {"max-concurrent", ACTOR_FLAG_KIND_INT32, &m.f.max_concurrent, "requests in flight here (429 above)", NULL},
      {"tenant", ACTOR_FLAG_KIND_STRING, &m.f.tenant, "publish on <prefix>.generate.<tenant>", NULL},
      {"health-actors", ACTOR_FLAG_KIND_STRING, &m.f.health_actors,
       "actors whose ready heartbeat /health requires (comma list; empty = none)", NULL},
      {"api-key", ACTOR_FLAG_KIND_STRING, &m.f.api_key,
       "require `Authorization: Bearer KEY` on every route; requests go to --tenant (visible in ps: "
       "prefer --api-keys)", NULL},
      {"api-keys", ACTOR_FLAG_KIND_STRING, &m.f.api_keys_file,
       "file of `KEY TENANT` lines (mode 0600): every route needs one of the keys; a request goes to "
       "its key's tenant", NULL},
      {"tool-call-parser", ACTOR_FLAG_KIND_STRING, &m.f.tool_call_parser,
       "how tool_choice auto reads tool calls in the output: hermes (<tool_call>{...}</tool_call>; Qwen, "
       "Hermes, SmolLM3), llama3_json, mistral (vLLM's parser names)", NULL},
      {"reasoning-parser", ACTOR_FLAG_KIND_STRING, &m.f.reasoning_parser,
       "split reasoning models' thinking into reasoning_content, and start structured output after it: "
       "deepseek_r1, qwen3 (<think>...</think>), granite, gpt_oss (vLLM's parser names); empty = none", NULL},
      {"allowed-origins", ACTOR_FLAG_KIND_STRING, &m.f.allowed_origins,
       "CORS: comma-separated origins browsers may call from (default *: any, as vLLM)", NULL},
      {"allowed-methods", ACTOR_FLAG_KIND_STRING, &m.f.allowed_methods, "CORS: comma-separated methods (default *)", NULL},
      {"allowed-headers", ACTOR_FLAG_KIND_STRING, &m.f.allowed_headers, "CORS: comma-separated request headers (default *)",
       NULL},
      {"allowed-local-media-path", ACTOR_FLAG_KIND_STRING, &m.f.allowed_local_media_path,
       "image_url parts may name file:///path when the file's realpath is inside DIR (vLLM's flag); "
       "without it file URLs are refused", NULL},
      {"allow-credentials", ACTOR_FLAG_KIND_BOOL, &m.f.allow_credentials,
       "CORS: Access-Control-Allow-Credentials: true (the origin is then echoed, never *)", NULL},
      {"health-missed-beats", ACTOR_FLAG_KIND_INT32, &m.f.health_missed_beats,
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
