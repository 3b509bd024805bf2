/* The api server's options: what api_server_actor_create takes (struct api_server_actor_options), the
 * option strings parsed (HOST:PORT, name lists), and llmbus-api-server's flags made into those
 * options (checked, the served model's name derived from the GGUF path, API keys loaded).
 * Pure: no bus, no network; files only for the keys file. */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_OPTIONS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"
#include "base/metrics.h"
#include "base/status.h"

struct api_server_keys;
struct lora_registry;

#define API_SERVER_MAX_MODEL_ALIASES 15 /* --served-model-name: 16 names in all */

#define API_SERVER_ACTOR_DEFAULT_HEALTH_ACTORS \
  "input_processor,scheduler,kv_manager,gpu_worker,output_processor"

#define API_SERVER_DEFAULT_MAX_CONNECTIONS 1024
#define API_SERVER_MAX_REQUEST_RATES 64 /* tenants with a request rate (the tenants file's at most) */

/* A tenant's limits at the front door, checked on a request's headers before its body is read
 * (api_server_gate.h): its HTTP request rate, a token bucket of `burst` requests (>= 1) refilled at
 * `per_s` a second, full at start (the tenants file's requests_per_s / burst_requests; per_s 0 =
 * no rate), and its generation requests in flight at this api server, at most max_concurrent
 * (the tenants file's; 0 = no limit here). */
struct api_server_request_rate {
  char tenant[64];
  double per_s, burst;
  int32_t max_concurrent;
};

struct api_server_actor_options {
  const char *http_addr;           /* "HOST:PORT"; NULL = "127.0.0.1:8000"; port 0 = any */
  const char *model_name;          /* served model id (the first of --served-model-name); required */
  const char *const *model_aliases; /* [num_model_aliases] the other names also accepted as
                                       `model` and listed by /v1/models; borrowed */
  int num_model_aliases;
  bool has_seed;                   /* --seed: requests without a seed get theirs from a generator */
  uint64_t seed;                   /* seeded with this (splitmix64 of seed and a counter) */
  bool enable_auto_tool_choice;    /* tool_choice "auto" (given, or implied by tools) allowed; else
                                      400, as vLLM without --enable-auto-tool-choice */
  const char *tenant;              /* NULL = "default"; the tenant of every request when
                                      api_keys is NULL */
  const struct api_server_keys *api_keys; /* NULL = no authentication; else every route (/health and
                                      /metrics included) needs `Authorization: Bearer KEY`
                                      (401 otherwise) and a request is published on its
                                      key's tenant's subjects (api_server_keys.h). Borrowed:
                                      outlives the actor */
  size_t max_body_bytes;           /* 0 = 1 MiB */
  int64_t request_timeout_s;       /* HTTP read/write inactivity limit, and the time a whole
                                      request may take to arrive; 0 = 10 */
  int64_t first_output_timeout_s;  /* 0 = 60 */
  int32_t max_concurrent;          /* requests in flight here; 0 = 256 */
  int32_t max_connections;         /* open HTTP connections at most (more: 503, closed at once,
                                      http_guard.h); 0 = API_SERVER_DEFAULT_MAX_CONNECTIONS */
  const char *health_actors;       /* comma list; NULL = API_SERVER_ACTOR_DEFAULT_HEALTH_ACTORS, "" = none */
  int64_t health_window_ms;        /* 0 = 10000; llmbus-api-server: --health-missed-beats x
                                      --heartbeat-ms (3 x 2000) */
  int32_t tool_call_parser;        /* enum tool_format (tool_parser.h) of tool_choice auto:
                                      0 = hermes, 1 = llama3_json, 2 = mistral */
  int32_t reasoning_parser;        /* enum reasoning_parser (model/reasoning/reasoning.h); 0 = none */
  const char *cors_allowed_origins; /* comma list; NULL or "*" = every origin (vLLM's default) */
  const char *cors_allowed_methods; /* comma list; NULL or "*" = every method */
  const char *cors_allowed_headers; /* comma list; NULL or "*" = every header */
  bool cors_allow_credentials;      /* Access-Control-Allow-Credentials (api_server_cors.h) */
  struct llb_metrics *registry;    /* NULL = none; else GET /metrics also renders it (the
                                      process's metrics, bus histograms); borrowed */
  const char *allowed_local_media_path; /* vLLM's --allowed-local-media-path DIR: file:// image
                                      URLs whose realpath is inside DIR are read (api_server_images.h);
                                      NULL = file URLs refused. Must exist (checked at create) */
  struct lora_registry *loras;     /* the LoRA adapters the workers announce, per tenant
                                      (schemas/lora_registry.h): fed with the heartbeats the actor
                                      hears; a request's `model` may name one its tenant may use
                                      (chat, completions, responses), /v1/models lists them. NULL =
                                      none. Borrowed: outlives the actor */
  const char *lora_dir;            /* the workers' --lora-dir: POST /v1/load_lora_adapter and
                                      /v1/unload_lora_adapter (api_server_lora_admin.h; needs loras);
                                      NULL = those routes are 404 */
  const struct api_server_request_rate *request_rates; /* [num_request_rates] (copied): with api_keys,
                                      a request of a listed tenant over its rate or its
                                      max_concurrent is answered 429 with Retry-After from its
                                      headers, its body never read (the answer held: api_server_gate.h);
                                      NULL = no rates */
  int32_t num_request_rates;       /* 0..API_SERVER_MAX_REQUEST_RATES */
};

/* llmbus-api-server's own flags as given (cmd/api_server_main.c holds their defaults and
 * help). Strings are borrowed (argv or static). */
struct api_server_flags {
  const char *http;              /* --http HOST:PORT */
  const char *const *served_model_names; /* --served-model-name (--model-name): [num] names;
                                          * none = derived from the GGUF path */
  int num_served_model_names;
  int64_t max_body_bytes;        /* --max-body-bytes: [1024, 1 GiB] */
  int64_t request_timeout_s;     /* --request-timeout-s: >= 1 */
  int64_t first_output_timeout_s; /* --first-output-timeout-s: >= 1 */
  int32_t max_concurrent;        /* --max-concurrent: >= 1 */
  int32_t max_connections;       /* --max-connections: >= 1 */
  const char *tenant;            /* --tenant */
  const char *health_actors;     /* --health-actors */
  int32_t health_missed_beats;   /* --health-missed-beats: >= 1 */
  const char *const *api_keys;   /* --api-key (repeatable): [num_api_keys] keys, for --tenant */
  int num_api_keys;
  const char *const *api_keys_files; /* --api-keys (repeatable): KEY TENANT files (api_server_keys.h) */
  int num_api_keys_files;
  const char *seed;              /* --seed: decimal; NULL = random seeds */
  bool enable_auto_tool_choice;  /* --enable-auto-tool-choice */
  const char *tool_call_parser;  /* --tool-call-parser: hermes | llama3_json | mistral */
  const char *reasoning_parser;  /* --reasoning-parser: deepseek_r1 | qwen3 | granite | gpt_oss; NULL or "" = none */
  const char *allowed_origins, *allowed_methods, *allowed_headers; /* CORS (api_server_cors.h) */
  bool allow_credentials;
  const char *allowed_local_media_path; /* file:// image URLs under it (api_server_images.h) */
  const char *lora_dir;          /* --lora-dir: the workers'; enables the LoRA load/unload routes */
};

/* The flags made into the actor's options. Holds pointers into itself: do not copy or move
 * it while `options` is used. */
struct api_server_config {
  struct api_server_actor_options options; /* strings borrowed from the flags or model_name below;
                                       registry NULL (the caller sets its own) */
  char model_name[API_SERVER_MAX_MODEL_BYTES]; /* the name derived from the GGUF path, when used */
  struct api_server_keys *keys;                /* owned; NULL = no authentication */
};

/* Checks `f` and fills `c`: the served model is the first --served-model-name (the others its
 * aliases), else the basename of `model_path` (the --model GGUF; NULL = none) without ".gguf";
 * every --api-key (for --tenant) and --api-keys file loaded into one key set; --seed parsed; health_window_ms = health_missed_beats x heartbeat_ms
 * (the actors beat at that interval). Errors: INVALID_ARGUMENT naming the flag (a value out of
 * range, an unknown tool-call parser, no model name to derive), those of api_server_keys_add /
 * api_server_keys_load_file; `c` holds nothing to free then. Free with api_server_config_free. */
llb_status api_server_config_init(struct api_server_config *c, const struct api_server_flags *f,
                                  const char *model_path, int64_t heartbeat_ms);

/* Whether `host` (an address or a name to listen on) is only reachable from this machine:
 * 127.0.0.0/8, ::1, or a name that resolves to nothing else. "0.0.0.0", "::" and every other
 * address are not. Used for the start-up warning about an open front door without API keys. */
bool api_server_host_is_loopback(const char *host);

/* Frees the keys of c (after the actor that borrowed them is destroyed). NULL ok. */
void api_server_config_free(struct api_server_config *c);

/* "HOST:PORT" (the port after the last ':', 0..65535; "[::1]:8000" gives host "::1") into
 * host[cap] and *port. INVALID_ARGUMENT naming the text when it is not that. */
llb_status api_server_parse_host_port(const char *addr, char *host, size_t cap, int *port);

/* A comma-separated list of names into names[max][name_cap]; empty or too long names are
 * skipped. Returns how many were kept. */
int api_server_parse_name_list(const char *list, char *names, size_t name_cap, int max);

#endif
