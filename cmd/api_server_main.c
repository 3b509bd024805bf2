/* llmbus-api-server: the OpenAI-compatible HTTP + SSE front door (actors/api_server/actor.h).
 * Flags: the common actor flags (cmd/actor/actor_main.h) plus --http, --served-model-name,
 * --max-body-bytes, --request-timeout-s, --first-output-timeout-s, --max-concurrent,
 * --tenant, --health-actors, --api-key, --api-keys, --seed, --enable-auto-tool-choice,
 * --tool-call-parser, --reasoning-parser and the CORS options
 * (--allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials, as vLLM),
 * --tenant-limits (the tenants file: its `loras=` say whose LoRA adapters are whose, its
 * `requests_per_s=` / `burst_requests=` each tenant's HTTP request rate);
 * checked and made into the actor's options by api_server_config_init (api_server_options.h). */
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>

#include "actors/api_server/actor.h"
#include "actors/input_processor/tenant_limits.h"
#include "cmd/actor/actor_main.h"
#include "schemas/lora_registry.h"

#define API_MAIN_LORA_TTL_NS (20LL * 1000 * 1000 * 1000) /* a worker silent this long serves no adapter */

struct api_main {
  struct api_server_flags f;
  struct flag_list names, keys, key_files; /* the repeatable flags, made into f's arrays */
  struct api_server_config cfg; /* the flags checked and made into the actor's options */
  const char *tenants_file;     /* --tenant-limits: whose adapters are whose (`loras=`); NULL = none */
  struct lora_registry *loras;  /* the adapters the workers announce (the actor feeds it) */
  struct api_server_request_rate rates[API_SERVER_MAX_REQUEST_RATES]; /* the tenants file's request rates */
  int32_t num_rates;
  struct api_server_actor *actor;
};

/* The tenants with any limit in tc: the front door's (a request rate, max_concurrent), and a
 * place to count the held refusals of those the engine limits (api_server_gate.h). */
static void api_main_rates(struct api_main *m, const struct tenant_limits_config *tc) {
  for (int i = 0; i < tc->num && m->num_rates < API_SERVER_MAX_REQUEST_RATES; i++) {
    const struct tenant_limit *t = &tc->tenants[i];
    if (t->requests_per_s <= 0 && t->max_concurrent <= 0 && t->max_queued <= 0 && t->tokens_per_s <= 0) continue;
    struct api_server_request_rate *r = &m->rates[m->num_rates++];
    snprintf(r->tenant, sizeof r->tenant, "%s", t->name);
    r->per_s = t->requests_per_s > 0 ? t->requests_per_s : 0;
    r->burst = t->requests_per_s > 0 ? t->burst_requests : 0;
    r->max_concurrent = t->max_concurrent;
  }
}

/* The LoRA registry, with each tenant's `loras=` of the tenants file, and its request rates. */
static llb_status api_main_loras(struct api_main *m) {
  llb_status st = lora_registry_create(API_MAIN_LORA_TTL_NS, &m->loras);
  if (st || !m->tenants_file) return st;
  struct tenant_limits_config *tc = calloc(1, sizeof *tc);
  st = tc ? tenant_limits_config_load(m->tenants_file, tc) : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tenants file");
  if (!st) st = tenant_limits_restrict_loras(tc, m->loras);
  if (!st) api_main_rates(m, tc);
  free(tc);
  return st;
}

static llb_status api_main_configure(struct actor_main *am, void *user) {
  struct api_main *m = user;
  m->f.served_model_names = m->names.items;
  m->f.num_served_model_names = m->names.num;
  m->f.api_keys = m->keys.items;
  m->f.num_api_keys = m->keys.num;
  m->f.api_keys_files = m->key_files.items;
  m->f.num_api_keys_files = m->key_files.num;
  llb_status st = api_server_config_init(&m->cfg, &m->f, am->common.model_path, am->common.heartbeat_ms);
  return st ? st : api_main_loras(m);
}

static llb_status api_main_start(struct actor_main *am, void *user) {
  struct api_main *m = user;
  struct api_server_actor_options o = m->cfg.options;
  o.registry = am->metrics;
  o.loras = m->loras;
  o.request_rates = m->rates;
  o.num_request_rates = m->num_rates;
  llb_status st = api_server_actor_create(&o, &m->actor);
  if (st != LLB_STATUS_OK) return st;
  return api_server_actor_start(m->actor, am->bus);
}

static void api_main_stop(struct actor_main *am, void *user) {
  (void)am;
  struct api_main *m = user;
  api_server_actor_stop(m->actor);
}

static void api_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct api_main *m = user;
  api_server_actor_destroy(m->actor);
  m->actor = NULL;
  api_server_config_free(&m->cfg);
  lora_registry_destroy(m->loras);
  m->loras = NULL;
}

int main(int argc, char **argv) {
  struct api_main m = {.f = {
                            .http = "127.0.0.1:8000",
                            .max_body_bytes = 1024 * 1024,
                            .request_timeout_s = 10,
                            .first_output_timeout_s = 60,
                            .max_concurrent = 256, .max_connections = API_SERVER_DEFAULT_MAX_CONNECTIONS,
                            .tenant = "default",
                            .health_actors = API_SERVER_ACTOR_DEFAULT_HEALTH_ACTORS,
                            .health_missed_beats = 3,
                            .tool_call_parser = "hermes",
                        }};
  const struct flag flags[] = {
      {.name = "http", .kind = FLAG_KIND_STRING, .target = &m.f.http,
       .help = "HOST:PORT to listen on (port 0 = any free port)"},
      {.name = "served-model-name", .aliases = "model-name", .kind = FLAG_KIND_LIST, .target = &m.names,
       .metavar = "NAME", .greedy = true,
       .help = "served model ids (repeatable, or several after one flag): all listed by /v1/models and accepted "
               "as `model`; none = the --model file's basename without .gguf"},
      {.name = "max-body-bytes", .kind = FLAG_KIND_INT64, .target = &m.f.max_body_bytes,
       .help = "largest request body (413 above)"},
      {.name = "request-timeout-s", .kind = FLAG_KIND_INT64, .target = &m.f.request_timeout_s,
       .help = "HTTP read/write inactivity limit (slow clients are closed)"},
      {.name = "first-output-timeout-s", .kind = FLAG_KIND_INT64, .target = &m.f.first_output_timeout_s,
       .help = "503 when the engine sends nothing for this long"},
      {.name = "max-concurrent", .kind = FLAG_KIND_INT32, .target = &m.f.max_concurrent,
       .help = "requests in flight here (429 above)"},
      {.name = "max-connections", .kind = FLAG_KIND_INT32, .target = &m.f.max_connections,
       .help = "open HTTP connections at most (more are answered 503 and closed at once)"},
      {.name = "tenant", .kind = FLAG_KIND_STRING, .target = &m.f.tenant,
       .help = "publish on <prefix>.generate.<tenant>"},
      {.name = "health-actors", .kind = FLAG_KIND_STRING, .target = &m.f.health_actors,
       .help = "actors whose ready heartbeat /health requires (comma list; empty = none)"},
      {.name = "api-key", .kind = FLAG_KIND_LIST, .target = &m.keys, .metavar = "KEY",
       .help = "require `Authorization: Bearer KEY` on every route (repeatable); requests go to --tenant "
               "(visible in ps: prefer --api-keys)"},
      {.name = "api-keys", .kind = FLAG_KIND_LIST, .target = &m.key_files, .metavar = "FILE",
       .help = "file of `KEY TENANT` lines (mode 0600; repeatable): every route needs one of the keys; a request "
               "goes to its key's tenant"},
      {.name = "seed", .kind = FLAG_KIND_STRING, .target = &m.f.seed, .metavar = "S",
       .help = "requests without a seed get theirs from a generator seeded with S (the same requests in the same "
               "order give the same answers); default: random seeds"},
      {.name = "enable-auto-tool-choice", .kind = FLAG_KIND_BOOL, .target = &m.f.enable_auto_tool_choice,
       .help = "tool_choice \"auto\" (the default when a request has tools) parses tool calls out of the output "
               "with --tool-call-parser; without it such a request is refused (400), as vLLM's"},
      {.name = "tool-call-parser", .kind = FLAG_KIND_STRING, .target = &m.f.tool_call_parser,
       .help = "how tool_choice auto reads tool calls in the output: hermes (<tool_call>{...}</tool_call>; Qwen, "
               "Hermes, SmolLM3), llama3_json, mistral (vLLM's parser names)"},
      {.name = "reasoning-parser", .kind = FLAG_KIND_STRING, .target = &m.f.reasoning_parser,
       .help = "split reasoning models' thinking into reasoning_content, and start structured output after it: "
               "deepseek_r1, qwen3 (<think>...</think>), granite, gpt_oss (vLLM's parser names); empty = none"},
      {.name = "allowed-origins", .kind = FLAG_KIND_STRING, .target = &m.f.allowed_origins,
       .help = "CORS: comma-separated origins browsers may call from (default *: any, as vLLM)"},
      {.name = "allowed-methods", .kind = FLAG_KIND_STRING, .target = &m.f.allowed_methods,
       .help = "CORS: comma-separated methods (default *)"},
      {.name = "allowed-headers", .kind = FLAG_KIND_STRING, .target = &m.f.allowed_headers,
       .help = "CORS: comma-separated request headers (default *)"},
      {.name = "allowed-local-media-path", .kind = FLAG_KIND_STRING, .target = &m.f.allowed_local_media_path,
       .help = "image_url parts may name file:///path when the file's realpath is inside DIR (vLLM's flag); "
               "without it file URLs are refused"},
      {.name = "lora-dir", .kind = FLAG_KIND_STRING, .target = &m.f.lora_dir, .metavar = "DIR",
       .help = "the workers' --lora-dir: POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's) load "
               "and unload adapters beneath it on every worker (behind the API key; an adapter belongs to the "
               "tenant that loaded it); without it those routes are 404"},
      {.name = "allow-credentials", .kind = FLAG_KIND_BOOL, .target = &m.f.allow_credentials,
       .help = "CORS: Access-Control-Allow-Credentials: true (the origin is then echoed, never *)"},
      {.name = "tenant-limits", .kind = FLAG_KIND_STRING, .target = &m.tenants_file, .metavar = "FILE",
       .help = "the tenants file (llmbus serve --tenants): an adapter listed in some tenants' loras=a,b is theirs "
               "only, answered 404 and not listed in /v1/models for the others"},
      {.name = "health-missed-beats", .kind = FLAG_KIND_INT32, .target = &m.f.health_missed_beats,
       .help = "/health answers 503 when an actor sent no ready heartbeat for this many --heartbeat-ms "
               "intervals (the actors beat at the same interval; default 3)"},
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
