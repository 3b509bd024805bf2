/* `llmbus serve`: the whole stack under one supervisor (see supervisor.h). */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/gpu_worker/lora_modules.h"
#include "base/log.h"
#include "bus/subject.h"
#include "cmd/supervisor/run_dir.h"
#include "cmd/supervisor/serve_hash_key.h"
#include "cmd/supervisor/serve_nats_config.h"
#include "cmd/supervisor/supervisor.h"
#include "schemas/control.h"

#define BUS_TOKEN_MAX_SERVE 72 /* an engine id (a subject token of <= 64 bytes) and its index */

/* The actor programs of one engine, in start order, and which options each takes. */
static const struct {
  const char *name;
  const char *program;
  bool takes_model;
  bool takes_http;
  bool per_engine; /* one per engine (--engines N); the others serve every engine */
} serve_actors[] = {
    {"kv-manager", "llmbus-kv-manager", false, false, true},
    {"gpu-worker", "llmbus-gpu-worker", true, false, true},
    {"scheduler", "llmbus-scheduler", true, false, true},
    {"output-processor", "llmbus-output-processor", true, false, true},
    {"input-processor", "llmbus-input-processor", true, false, false},
    {"api-server", "llmbus-api-server", true, true, false},
    {"encoder-cache", "llmbus-encoder-cache", false, false, true},
};
#define NUM_SERVE_ACTORS (int)(sizeof serve_actors / sizeof serve_actors[0])

/* Engine flags serve passes on, and the actors (by index in serve_actors) that take each:
 * the KV geometry must agree between kv_manager, worker and scheduler. */
enum { A_KV = 1 << 0, A_WORKER = 1 << 1, A_SCHED = 1 << 2, A_OUT = 1 << 3, A_IN = 1 << 4,
       A_API = 1 << 5, A_ENC = 1 << 6, A_ALL = 0x7f };
static const struct {
  const char *name;
  const char *aliases; /* vLLM's / llama-server's other spellings ('|'-separated; cmd/flags/flags.h) */
  char short_name;     /* llama-server's one-letter flag, where it means the same */
  enum flag_kind kind; /* BOOL: no value; INT64 / DOUBLE: checked here, before any actor starts */
  unsigned actors;
  const char *help;
} engine_flags[] = {
    {"num-blocks", "num-gpu-blocks-override", 0, FLAG_KIND_INT64, A_WORKER,
     "KV cache blocks of each engine's worker (allocated once; its scheduler and kv_manager adopt it)"},
    {"block-size", NULL, 0, FLAG_KIND_INT64, A_KV | A_WORKER | A_SCHED, "tokens per KV block"},
    {"max-num-seqs", "np|parallel", 0, FLAG_KIND_INT64, A_SCHED, "requests running at once"},
    {"max-num-waiting", NULL, 0, FLAG_KIND_INT64, A_SCHED, "requests waiting at most (more get QUEUE_FULL / 429)"},
    {"max-num-batched-tokens", NULL, 0, FLAG_KIND_INT64, A_SCHED | A_WORKER, "token budget of one step"},
    {"max-model-len", "ctx-size", 'c', FLAG_KIND_INT64, A_SCHED | A_IN | A_WORKER, "context length limit (prompt + output)"},
    {"policy", "scheduling-policy", 0, FLAG_KIND_STRING, A_SCHED, "fcfs | priority"},
    {"no-prefix-caching", "no-enable-prefix-caching", 0, FLAG_KIND_BOOL, A_KV | A_SCHED, "disable the prefix cache"},
    {"speculative-config", NULL, 0, FLAG_KIND_STRING, A_SCHED | A_WORKER,
     "speculative decoding, vLLM's JSON {\"method\":\"ngram\",\"num_speculative_tokens\":K,...}: n-gram drafts "
     "verified in one forward (turns async scheduling off; cpu worker)"},
    {"no-async-scheduling", NULL, 0, FLAG_KIND_BOOL, A_SCHED,
     "apply each step's output before planning the next (no step ahead on the worker)"},
    {"encoder-cache-size", NULL, 0, FLAG_KIND_INT64, A_SCHED | A_ENC,
     "encoder-output cache, embedding rows (multimodal items kept for reuse)"},
    {"encoder-compute-budget", NULL, 0, FLAG_KIND_INT64, A_SCHED, "embedding rows encoded per step (0 = the token budget)"},
    {"stats-interval-ms", NULL, 0, FLAG_KIND_INT64, A_SCHED, "SchedulerStats period while there is work"},
    {"log-stats-interval-ms", NULL, 0, FLAG_KIND_INT64, A_SCHED, "event=engine_stats log line period (default 10000; 0 = none)"},
    {"ack-wait-ms", NULL, 0, FLAG_KIND_INT64, A_SCHED,
     "durable: a request a dead scheduler held is delivered again after this long (default 2000)"},
    {"max-deliver", NULL, 0, FLAG_KIND_INT64, A_SCHED,
     "durable: deliveries of one request at most, then dead-lettered with an error (default 3)"},
    {"stream-replicas", NULL, 0, FLAG_KIND_INT64, A_SCHED | A_IN,
     "durable: replicas of the requests stream (default 1; 3 with --nats on a 3-node cluster: ops/cluster/)"},
    {"threads", NULL, 't', FLAG_KIND_INT64, A_WORKER, "worker threads for the forward pass (default: the CPUs online)"},
    {"decode-threads", NULL, 0, FLAG_KIND_INT64, A_WORKER,
     "cpu: of those, the threads of a decode step (default: all; fewer leave cores to the actors)"},
    {"device", NULL, 0, FLAG_KIND_STRING, A_WORKER, "cpu | cuda | sim (no forward: modelled step times, deterministic tokens)"},
    {"sim-cost", NULL, 0, FLAG_KIND_STRING, A_WORKER, "sim: the step-time model JSON (llmbus-kernel-bench --fit; ops/sim/)"},
    {"step-log", NULL, 0, FLAG_KIND_STRING, A_WORKER, "workers append each step's shape and time to FILE (kernel-bench --fit-steps)"},
    {"kv-cache-dtype", NULL, 0, FLAG_KIND_STRING, A_WORKER,
     "auto | fp16 | fp8 | q8_0: the KV cache's element type (cpu; fp8 and q8_0 about half of fp16's bytes)"},
    {"kv-cache-memory-bytes", "kv-cache-memory", 0, FLAG_KIND_INT64, A_WORKER,
     "cpu: each engine's KV cache size in bytes instead of --num-blocks (the block count follows the dtype)"},
    {"gpu-memory-utilization", NULL, 0, FLAG_KIND_DOUBLE, A_WORKER,
     "cuda: fraction of device memory for weights, scratch and KV cache (sizes the KV cache; default 0.9)"},
    {"numerics", NULL, 0, FLAG_KIND_STRING, A_WORKER, "packed | ggml (cpu: llama.cpp's arithmetic, bit-exact with it)"},
    {"packed-cache-dir", NULL, 0, FLAG_KIND_STRING, A_WORKER,
     "cpu: the host's shared packed-weight cache (default $XDG_CACHE_HOME/llmbus or ~/.cache/llmbus; "
     "\"\" = each worker packs privately)"},
    {"engine-id", NULL, 0, FLAG_KIND_STRING, A_ALL,
     "engine id (<eid> in llm.engine.<eid>.*); with --engines N > 1 the engines are <eid>0..<eid>N-1"},
    {"router", NULL, 0, FLAG_KIND_STRING, A_IN, "cache-aware | least-loaded | random: how input processors pick an engine"},
    {"disagg-min-prompt-tokens", NULL, 0, FLAG_KIND_INT64, A_IN,
     "with --roles: prompts of at least this many tokens are disaggregated (prefill engine, then decode engine), "
     "shorter ones served aggregated (default 256; 0 = every prompt)"},
    {"max-prefill-queue-size", NULL, 0, FLAG_KIND_INT64, A_IN,
     "with --roles: a prefill engine this many requests deep is saturated, new prompts are served aggregated "
     "(default 16; 0 = no limit)"},
    {"disagg-transfer-bytes-per-s", NULL, 0, FLAG_KIND_DOUBLE, A_IN,
     "with --roles and --disagg-prefill-tokens-per-s: prompts whose KV moves slower over the bus than the decode "
     "engine computes it are served aggregated"},
    {"disagg-prefill-tokens-per-s", NULL, 0, FLAG_KIND_DOUBLE, A_IN, "with --roles: a decode engine's prefill rate"},
    {"disagg-kv-bytes-per-token", NULL, 0, FLAG_KIND_INT64, A_IN,
     "with --roles: the KV a token moves (default: the model's fp16 cache)"},
    {"mmproj", NULL, 0, FLAG_KIND_STRING, A_IN | A_WORKER, "GGUF mmproj of the model: image_url parts (workers encode, input processors plan)"},
    {"chat-template", NULL, 0, FLAG_KIND_STRING, A_IN,
     "chat template instead of the GGUF's tokenizer.chat_template: a Jinja FILE, the Jinja text itself, or a "
     "built-in name (chatml, llama3, ...)"},
    {"prefix", NULL, 0, FLAG_KIND_STRING, A_ALL, "subject prefix (default llm)"},
    {"log-level", NULL, 0, FLAG_KIND_STRING, A_ALL, "debug | info | warn | error"},
    {"otlp-endpoint", "otlp-traces-endpoint", 0, FLAG_KIND_STRING, A_ALL,
     "every actor exports its spans as OTLP/HTTP JSON to URL/v1/traces"},
    {"trace-sample-ratio", NULL, 0, FLAG_KIND_DOUBLE, A_ALL, "fraction of new traces sampled (head sampling; default 1.0)"},
    {"trace-publish", NULL, 0, FLAG_KIND_BOOL, A_ALL, "every actor also publishes its span batches on <prefix>.trace.<actor>"},
    {"api-keys", NULL, 0, FLAG_KIND_STRING, A_API, "file of `KEY TENANT` lines (mode 0600): HTTP keys and their tenants"},
    {"seed", NULL, 0, FLAG_KIND_INT64, A_API,
     "seed of the sampling seeds the api server draws for requests that give none (the same requests in the "
     "same order then give the same answers; default: random)"},
    {"enable-auto-tool-choice", NULL, 0, FLAG_KIND_BOOL, A_API,
     "tool_choice \"auto\" (the default with tools) parses tool calls out of the output, as vLLM's; without it "
     "such a request is refused (400)"},
    {"tool-call-parser", NULL, 0, FLAG_KIND_STRING, A_API, "hermes | llama3_json | mistral: tool calls in outputs (tool_choice auto)"},
    {"reasoning-parser", NULL, 0, FLAG_KIND_STRING, A_API,
     "deepseek_r1 | qwen3 | granite | gpt_oss: thinking into reasoning_content; structured output after it"},
    {"allowed-origins", NULL, 0, FLAG_KIND_STRING, A_API, "CORS: comma-separated origins (default *, as vLLM)"},
    {"allowed-methods", NULL, 0, FLAG_KIND_STRING, A_API, "CORS: comma-separated methods (default *)"},
    {"allowed-headers", NULL, 0, FLAG_KIND_STRING, A_API, "CORS: comma-separated request headers (default *)"},
    {"allow-credentials", NULL, 0, FLAG_KIND_BOOL, A_API, "CORS: Access-Control-Allow-Credentials: true"},
    {"allowed-local-media-path", NULL, 0, FLAG_KIND_STRING, A_API, "image_url parts may read file:///path inside DIR (vLLM's)"},
    {"enable-lora", NULL, 0, FLAG_KIND_BOOL, A_WORKER | A_SCHED, "serve LoRA adapters (vLLM's): --lora-modules"},
    {"lora-modules", NULL, 0, FLAG_KIND_LIST, A_WORKER,
     "LoRA adapters, each name=path (a llama.cpp GGUF LoRA) or vLLM's JSON {\"name\":..,\"path\":..,"
     "\"base_model_name\":..}; a request's `model` names one (needs --enable-lora)"},
    {"lora-dir", NULL, 0, FLAG_KIND_STRING, A_WORKER | A_API,
     "POST /v1/load_lora_adapter loads adapters from files beneath DIR at run time (no \"..\", no symbolic "
     "link), /v1/unload_lora_adapter unloads them (needs --enable-lora)"},
    {"max-loras", NULL, 0, FLAG_KIND_INT64, A_SCHED, "distinct adapters in one step at most (default 1, as vLLM)"},
    {"max-lora-rank", NULL, 0, FLAG_KIND_INT64, A_WORKER, "largest adapter rank accepted (default 16, as vLLM)"},
    {"stream-interval", NULL, 0, FLAG_KIND_INT64, A_OUT,
     "tokens per streamed output (vLLM's): fewer messages and SSE events of up to N tokens each; the first and "
     "the last at once (default 1: every token)"},
    {"heartbeat-ms", NULL, 0, FLAG_KIND_INT64, A_ALL,
     "heartbeat interval of every actor (a worker / kv_manager silent for 3 is dead; default 2000)"},
};
#define NUM_ENGINE_FLAGS (int)(sizeof engine_flags / sizeof engine_flags[0])

static int engine_flag_index(const char *name) {
  for (int i = 0; i < NUM_ENGINE_FLAGS; i++)
    if (strcmp(engine_flags[i].name, name) == 0) return i;
  return -1;
}

/* Repeatable: each value reaches the actor (`--api-keys A --api-keys B`); any other flag given
 * again replaces its value (the command line overrides a --config file). */
static bool engine_flag_repeats(const char *name) {
  return strcmp(name, "api-keys") == 0 || strcmp(name, "lora-modules") == 0;
}

int serve_engine_flag_add(struct serve_options *o, const char *name, const char *value) {
  int i = engine_flag_index(name);
  if (i < 0) return -1;
  const bool takes_value = engine_flags[i].kind != FLAG_KIND_BOOL;
  const char *v = takes_value ? value : NULL;
  for (int f = 0; f < o->num_engine_flags && !engine_flag_repeats(name); f++)
    if (strcmp(o->engine_flags[f].name, engine_flags[i].name) == 0) {
      o->engine_flags[f].value = v;
      return takes_value ? 1 : 0;
    }
  if (o->num_engine_flags >= SERVE_MAX_ENGINE_FLAGS) return -1;
  o->engine_flags[o->num_engine_flags++] = (struct serve_engine_flag){engine_flags[i].name, v};
  return takes_value ? 1 : 0;
}

void serve_engine_flag_remove(struct serve_options *o, const char *name) {
  int k = 0;
  for (int f = 0; f < o->num_engine_flags; f++)
    if (strcmp(o->engine_flags[f].name, name) != 0) o->engine_flags[k++] = o->engine_flags[f];
  o->num_engine_flags = k;
}

/* cmd/flags setter of every engine flag: f->target is the serve_options. A number is checked
 * here, so that `--max-num-seqs x` is a usage error of serve, not an actor's crash loop. */
static llb_status engine_flag_set(const struct flag *f, const char *value) {
  int64_t i;
  double d;
  llb_status st = f->kind == FLAG_KIND_INT64    ? flags_parse_int64(value, INT32_MIN, INT64_MAX, &i)
                  : f->kind == FLAG_KIND_DOUBLE ? flags_parse_double(value, -1e300, 1e300, &d)
                                                : LLB_STATUS_OK;
  if (st != LLB_STATUS_OK) return st;
  if (serve_engine_flag_add(f->target, f->name, value) < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "too many engine flags (at most %d)", SERVE_MAX_ENGINE_FLAGS);
  return LLB_STATUS_OK;
}

int serve_engine_flag_table(struct serve_options *o, struct flag *out, int cap) {
  if (cap < NUM_ENGINE_FLAGS) return -1;
  for (int i = 0; i < NUM_ENGINE_FLAGS; i++)
    out[i] = (struct flag){.name = engine_flags[i].name, .aliases = engine_flags[i].aliases,
                           .short_name = engine_flags[i].short_name,
                           .kind = engine_flags[i].kind, .target = o,
                           .metavar = engine_flags[i].kind == FLAG_KIND_INT64    ? "N"
                                      : engine_flags[i].kind == FLAG_KIND_DOUBLE ? "X"
                                      : engine_flags[i].kind == FLAG_KIND_LIST   ? "NAME=PATH"
                                                                                 : "V",
                           .help = engine_flags[i].help, .set = engine_flag_set,
                           .greedy = engine_flags[i].kind == FLAG_KIND_LIST}; /* vLLM's nargs='+' */
  return NUM_ENGINE_FLAGS;
}

/* The value of engine flag `name` in o, NULL when absent (or valueless). */
static const char *engine_flag_value(const struct serve_options *o, const char *name) {
  for (int f = 0; f < o->num_engine_flags; f++)
    if (strcmp(o->engine_flags[f].name, name) == 0) return o->engine_flags[f].value ? o->engine_flags[f].value : "";
  return NULL;
}

/* The id of engine e of o->num_engines: --engine-id (default "0") for one engine, else
 * "<engine-id>e" ("0".."N-1" without --engine-id). */
static void serve_engine_id(const struct serve_options *o, int e, char *buf, size_t cap) {
  const char *base = engine_flag_value(o, "engine-id");
  if (o->num_engines <= 1) snprintf(buf, cap, "%s", base && *base ? base : "0");
  else snprintf(buf, cap, "%s%d", base ? base : "", e);
}

/* Forward-pass threads of each worker: --threads (default: the CPUs online) split evenly
 * between the engines of this host. */
static int worker_threads(const struct serve_options *o) {
  const char *t = engine_flag_value(o, "threads");
  long total = t ? strtol(t, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  long each = total / (o->num_engines > 0 ? o->num_engines : 1);
  return each >= 1 ? (int)each : 1;
}

static llb_status add_arg_pair(struct child_spec *spec, const char *flag, const char *value) {
  llb_status st = child_spec_add_arg(spec, flag);
  return st ? st : child_spec_add_arg(spec, value);
}

/* The default shared packed-weight cache: $XDG_CACHE_HOME/llmbus, else ~/.cache/llmbus; ""
 * when neither is known. Every worker of the host maps one copy of the packed weights, and a
 * restarted worker maps it instead of packing again. */
static void default_packed_cache_dir(char *buf, size_t cap) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0] == '/') snprintf(buf, cap, "%s/llmbus", xdg);
  else if (home && home[0] == '/') snprintf(buf, cap, "%s/.cache/llmbus", home);
  else buf[0] = '\0';
}

static llb_status add_engine_flags(const struct serve_options *o, int actor, const char *eid, struct child_spec *spec) {
  /* One engine's KV geometry has one source, its worker (docs/design.md §9): the kv_manager and the
   * scheduler take --num-blocks 0 and adopt the number the worker announces in its heartbeat. */
  llb_status st = LLB_STATUS_OK;
  if ((1u << actor) & (A_KV | A_SCHED)) st = add_arg_pair(spec, "--num-blocks", "0");
  if (!st) st = add_arg_pair(spec, "--engine-id", eid);
  if (!st && ((1u << actor) & A_WORKER) && !engine_flag_value(o, "packed-cache-dir")) {
    char dir[PATH_MAX];
    default_packed_cache_dir(dir, sizeof dir);
    if (dir[0]) st = add_arg_pair(spec, "--packed-cache-dir", dir);
  }
  if (!st && o->num_engines > 1 && ((1u << actor) & A_WORKER)) {
    char threads[16];
    snprintf(threads, sizeof threads, "%d", worker_threads(o));
    st = add_arg_pair(spec, "--threads", threads);
  }
  for (int f = 0; f < o->num_engine_flags && !st; f++) {
    int i = engine_flag_index(o->engine_flags[f].name);
    if (i < 0 || !(engine_flags[i].actors & (1u << actor))) continue;
    if (strcmp(engine_flags[i].name, "engine-id") == 0) continue; /* added above */
    if (o->num_engines > 1 && strcmp(engine_flags[i].name, "threads") == 0) continue;
    char arg[80];
    snprintf(arg, sizeof arg, "--%s", engine_flags[i].name);
    st = child_spec_add_arg(spec, arg);
    if (!st && o->engine_flags[f].value) st = child_spec_add_arg(spec, o->engine_flags[f].value);
  }
  return st;
}

/* Engine e's role from --roles ("prefill,decode,..."; absent: "both") into buf. False when the
 * list has no e-th entry. */
static bool serve_engine_role(const struct serve_options *o, int e, char *buf, size_t cap) {
  snprintf(buf, cap, "both");
  if (!o->roles) return true;
  const char *p = o->roles;
  for (int i = 0; i < e && p; i++) {
    p = strchr(p, ',');
    if (p) p++;
  }
  if (!p || !*p) return false;
  size_t n = strcspn(p, ",");
  snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
  return true;
}

/* --roles: one valid role per engine, and no more entries than engines. */
static llb_status check_roles(const struct serve_options *o) {
  if (!o->roles) return LLB_STATUS_OK;
  const int engines = o->num_engines > 1 ? o->num_engines : 1;
  int entries = 1;
  for (const char *p = o->roles; *p; p++) entries += *p == ',';
  if (entries != engines)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--roles %s: %d roles for %d engines (one per engine)", o->roles,
                    entries, engines);
  for (int e = 0; e < engines; e++) {
    char role[16];
    enum llb_engine_role r;
    if (!serve_engine_role(o, e, role, sizeof role) || llb_engine_role_parse(role, &r) != LLB_STATUS_OK)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--roles %s: engine %d's role '%s' is not prefill, decode or both",
                      o->roles, e, role);
  }
  return LLB_STATUS_OK;
}

/* Fills one actor's spec: program, --model, --http, engine flags. */
static llb_status actor_spec(const struct serve_options *o, const char *dir, int a, int engine, struct child_spec *spec) {
  char path[PATH_MAX + 64], name[64], eid[BUS_TOKEN_MAX_SERVE];
  snprintf(path, sizeof path, "%s/%s", dir, serve_actors[a].program);
  if (o->num_engines > 1 && serve_actors[a].per_engine) snprintf(name, sizeof name, "%s-%d", serve_actors[a].name, engine);
  else snprintf(name, sizeof name, "%s", serve_actors[a].name);
  serve_engine_id(o, engine, eid, sizeof eid);
  llb_status st = child_spec_init(spec, name, path);
  if (!st && serve_actors[a].takes_model && o->model_path) st = add_arg_pair(spec, "--model", o->model_path);
  if (!st && serve_actors[a].takes_http && o->http_addr) st = add_arg_pair(spec, "--http", o->http_addr);
  for (int i = 0; !st && serve_actors[a].takes_http && i < o->num_served_model_names; i++)
    st = add_arg_pair(spec, "--served-model-name", o->served_model_names[i]);
  /* durable requests (JetStream): the scheduler and the input processor must agree */
  const bool durable_actor = !strcmp(serve_actors[a].name, "scheduler") || !strcmp(serve_actors[a].name, "input-processor");
  /* stopping: the front first (no new requests), then the scheduler (no new steps), then what
   * serves its steps, so no step of a clean stop meets an actor that is gone */
  spec->stop_stage = !serve_actors[a].per_engine ? 0 : !strcmp(serve_actors[a].name, "scheduler") ? 1 : 2;
  if (!st && durable_actor && !o->no_durable) st = child_spec_add_arg(spec, "--durable");
  if (!st && o->roles && !strcmp(serve_actors[a].name, "scheduler")) {
    char role[16];
    (void)serve_engine_role(o, engine, role, sizeof role); /* checked by check_roles */
    st = add_arg_pair(spec, "--role", role);
  }
  /* hand-offs' KV blocks move between the engines' workers (disaggregated prefill/decode) */
  if (!st && o->roles && !o->no_kv_transfer &&
      (!strcmp(serve_actors[a].name, "scheduler") || !strcmp(serve_actors[a].name, "gpu-worker")))
    st = child_spec_add_arg(spec, "--kv-transfer");
  return st ? st : add_engine_flags(o, a, eid, spec);
}

static llb_status add_metrics_flags(const struct serve_options *o, int actor, struct child_spec *spec) {
  if (o->metrics_port <= 0) return LLB_STATUS_OK;
  char port[16];
  snprintf(port, sizeof port, "%d", o->metrics_port + actor);
  llb_status st = child_spec_add_arg(spec, "--metrics-port");
  if (!st) st = child_spec_add_arg(spec, port);
  if (!st && o->metrics_host) st = child_spec_add_arg(spec, "--metrics-host");
  if (!st && o->metrics_host) st = child_spec_add_arg(spec, o->metrics_host);
  return st;
}

/* One line naming each actor's metrics address (specs[n], in the order their ports were
 * given), for a Prometheus scrape config. */
void serve_log_metrics_ports(const struct serve_options *o, const struct child_spec *specs, int n) {
  if (o->metrics_port <= 0) return;
  char line[2048];
  int len = 0;
  for (int i = 0; i < n && len < (int)sizeof line; i++)
    len += snprintf(line + len, sizeof line - (size_t)len, "%s%s=%d", i ? " " : "", specs[i].name,
                    o->metrics_port + i);
  LLB_LOG_INFO("metrics_ports", "host=%s %s", o->metrics_host ? o->metrics_host : "127.0.0.1", line);
}

/* More input processors beside the first, in its queue group: while one restarts, the other
 * takes the requests (a restart gap refuses nothing). Copies of the first's spec, named
 * "input-processor-<k>". Returns the new count, or -1. */
static int add_input_processor_replicas(const struct serve_options *o, struct child_spec *specs, int n,
                                        int max) {
  const int replicas = (o->num_input_processors > 0 ? o->num_input_processors : SERVE_DEFAULT_INPUT_PROCESSORS) - 1;
  int first = -1;
  for (int i = 0; i < n; i++)
    if (strcmp(specs[i].name, "input-processor") == 0) first = i;
  if (first < 0 || n + replicas > max) {
    LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "serve_actor_specs: room for %d specs needed", n + replicas);
    return -1;
  }
  for (int k = 0; k < replicas; k++) {
    specs[n] = specs[first];
    snprintf(specs[n].name, sizeof specs[n].name, "input-processor-%d", k + 2);
    n++;
  }
  return n;
}

/* --lora-modules (each value as the worker parses it: names, ids) only with --enable-lora, as vLLM. */
static llb_status check_loras(const struct serve_options *o) {
  const char *values[SERVE_MAX_ENGINE_FLAGS];
  int n = 0;
  for (int f = 0; f < o->num_engine_flags; f++)
    if (strcmp(o->engine_flags[f].name, "lora-modules") == 0) values[n++] = o->engine_flags[f].value;
  if (n && !engine_flag_value(o, "enable-lora"))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules needs --enable-lora (LoRA is not enabled)");
  if (engine_flag_value(o, "lora-dir") && !engine_flag_value(o, "enable-lora"))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-dir needs --enable-lora (LoRA is not enabled)");
  struct lora_modules m;
  llb_status st = lora_modules_parse(values, n, &m);
  lora_modules_free(&m);
  return st;
}

/* Every name of o that reaches a subject, the generated nats.conf or a file (bus/subject.h's one
 * rule): the prefix, each engine's id, the model name the front door derives from the model
 * file. Refused here, before anything starts, rather than by a child that would crash-loop. */
static llb_status check_names(const struct serve_options *o) {
  const char *prefix = engine_flag_value(o, "prefix");
  llb_status st = prefix ? bus_name_check(BUS_NAME_KIND_PREFIX, "--prefix", prefix) : LLB_STATUS_OK;
  for (int e = 0; st == LLB_STATUS_OK && e < (o->num_engines > 1 ? o->num_engines : 1); e++) {
    char eid[BUS_TOKEN_MAX_SERVE];
    serve_engine_id(o, e, eid, sizeof eid);
    st = bus_name_check(BUS_NAME_KIND_TOKEN, o->num_engines > 1 ? "--engine-id (with its engine index)" : "--engine-id",
                        eid);
  }
  if (st == LLB_STATUS_OK && o->model_path) { /* the api server's default --model-name */
    const char *base = strrchr(o->model_path, '/');
    char name[BUS_MODEL_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s", base ? base + 1 : o->model_path);
    size_t n = strlen(name);
    if (n > 5 && strcmp(name + n - 5, ".gguf") == 0) name[n - 5] = '\0';
    st = bus_name_check(BUS_NAME_KIND_MODEL, "the model name (the --model file's name without .gguf)", name);
  }
  if (!st) st = check_roles(o);
  return st ? st : check_loras(o);
}

int serve_actor_specs(const struct serve_options *o, struct child_spec *specs, int max) {
  int engines = o && o->num_engines > 0 ? o->num_engines : 1;
  int per_engine = 0;
  for (int i = 0; i < NUM_SERVE_ACTORS; i++) per_engine += serve_actors[i].per_engine;
  int n = NUM_SERVE_ACTORS + (engines - 1) * per_engine;
  if (!o || !specs || max < n) {
    LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "serve_actor_specs: room for %d specs needed (at most %d actors)", n, max);
    return -1;
  }
  if (o->num_input_processors < 0 || o->num_input_processors > 8) {
    LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--input-processors %d: 1 to 8", o->num_input_processors);
    return -1;
  }
  if (check_names(o) != LLB_STATUS_OK) return -1;
  char dir[PATH_MAX];
  if (o->bin_dir) {
    snprintf(dir, sizeof dir, "%s", o->bin_dir);
  } else {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
      LLB_ERRF(LLB_STATUS_IO, "cannot read /proc/self/exe to find the actor binaries");
      return -1;
    }
    exe[len] = '\0';
    snprintf(dir, sizeof dir, "%s", dirname(exe));
  }
  int k = 0;
  for (int e = 0; e < engines; e++) /* each engine's actors, then those shared by all */
    for (int a = 0; a < NUM_SERVE_ACTORS; a++)
      if (serve_actors[a].per_engine && actor_spec(o, dir, a, e, &specs[k++]) != LLB_STATUS_OK) return -1;
  for (int a = 0; a < NUM_SERVE_ACTORS; a++)
    if (!serve_actors[a].per_engine && actor_spec(o, dir, a, 0, &specs[k++]) != LLB_STATUS_OK) return -1;
  if ((k = add_input_processor_replicas(o, specs, k, max)) < 0) return -1;
  for (int i = 0; i < k; i++) /* metrics ports in spec order: base + i */
    if (add_metrics_flags(o, i, &specs[i]) != LLB_STATUS_OK) return -1;
  return k;
}
