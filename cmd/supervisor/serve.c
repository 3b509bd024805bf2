/* `llmbus serve`: the whole stack under one supervisor (see supervisor.h). */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/supervisor/serve_nats_config.h"
#include "cmd/supervisor/supervisor.h"

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
  bool takes_value;
  unsigned actors;
  const char *help;
} engine_flags[] = {
    {"num-blocks", true, A_WORKER,
     "KV cache blocks of each engine's worker (allocated once; its scheduler and kv_manager adopt it)"},
    {"block-size", true, A_KV | A_WORKER | A_SCHED, "tokens per KV block"},
    {"max-num-seqs", true, A_SCHED, "requests running at once"},
    {"max-num-waiting", true, A_SCHED, "requests waiting at most (more get QUEUE_FULL / 429)"},
    {"max-num-batched-tokens", true, A_SCHED | A_WORKER, "token budget of one step"},
    {"max-model-len", true, A_SCHED | A_IN | A_WORKER, "context length limit (prompt + output)"},
    {"policy", true, A_SCHED, "fcfs | priority"},
    {"no-prefix-caching", false, A_KV | A_SCHED, "disable the prefix cache"},
    {"speculative-config", true, A_SCHED | A_WORKER,
     "speculative decoding, vLLM's JSON {\"method\":\"ngram\",\"num_speculative_tokens\":K,...}: n-gram drafts "
     "verified in one forward (turns async scheduling off; cpu worker)"},
    {"no-async-scheduling", false, A_SCHED,
     "apply each step's output before planning the next (no step ahead on the worker)"},
    {"encoder-cache-size", true, A_SCHED | A_ENC,
     "encoder-output cache, embedding rows (multimodal items kept for reuse)"},
    {"encoder-compute-budget", true, A_SCHED, "embedding rows encoded per step (0 = the token budget)"},
    {"stats-interval-ms", true, A_SCHED, "SchedulerStats period while there is work"},
    {"log-stats-interval-ms", true, A_SCHED, "event=engine_stats log line period (default 10000; 0 = none)"},
    {"ack-wait-ms", true, A_SCHED,
     "durable: a request a dead scheduler held is delivered again after this long (default 2000)"},
    {"max-deliver", true, A_SCHED,
     "durable: deliveries of one request at most, then dead-lettered with an error (default 3)"},
    {"stream-replicas", true, A_SCHED | A_IN,
     "durable: replicas of the requests stream (default 1; 3 with --nats on a 3-node cluster: ops/cluster/)"},
    {"threads", true, A_WORKER, "worker threads for the forward pass"},
    {"decode-threads", true, A_WORKER,
     "cpu: of those, the threads of a decode step (default: all; fewer leave cores to the actors)"},
    {"device", true, A_WORKER, "cpu | cuda"},
    {"numerics", true, A_WORKER, "packed | ggml (cpu: llama.cpp's arithmetic, bit-exact with it)"},
    {"packed-cache-dir", true, A_WORKER,
     "cpu: the host's shared packed-weight cache (default $XDG_CACHE_HOME/llmbus or ~/.cache/llmbus; "
     "\"\" = each worker packs privately)"},
    {"engine-id", true, A_ALL,
     "engine id (<eid> in llm.engine.<eid>.*); with --engines N > 1 the engines are <eid>0..<eid>N-1"},
    {"router", true, A_IN, "cache-aware | least-loaded | random: how input processors pick an engine"},
    {"mmproj", true, A_IN | A_WORKER, "GGUF mmproj of the model: image_url parts (workers encode, input processors plan)"},
    {"chat-template", true, A_IN, "Jinja chat template FILE instead of the GGUF's tokenizer.chat_template"},
    {"prefix", true, A_ALL, "subject prefix (default llm)"},
    {"log-level", true, A_ALL, "debug | info | warn | error"},
    {"otlp-endpoint", true, A_ALL, "every actor exports its spans as OTLP/HTTP JSON to URL/v1/traces"},
    {"trace-sample-ratio", true, A_ALL, "fraction of new traces sampled (head sampling; default 1.0)"},
    {"trace-publish", false, A_ALL, "every actor also publishes its span batches on <prefix>.trace.<actor>"},
    {"api-key", true, A_API, "HTTP needs `Authorization: Bearer KEY` (tenant default; shows in ps)"},
    {"api-keys", true, A_API, "file of `KEY TENANT` lines (mode 0600): HTTP keys and their tenants"},
    {"tool-call-parser", true, A_API, "hermes | llama3_json | mistral: tool calls in outputs (tool_choice auto)"},
    {"allowed-origins", true, A_API, "CORS: comma-separated origins (default *, as vLLM)"},
    {"allowed-methods", true, A_API, "CORS: comma-separated methods (default *)"},
    {"allowed-headers", true, A_API, "CORS: comma-separated request headers (default *)"},
    {"allow-credentials", false, A_API, "CORS: Access-Control-Allow-Credentials: true"},
    {"allowed-local-media-path", true, A_API, "image_url parts may read file:///path inside DIR (vLLM's)"},
    {"heartbeat-ms", true, A_ALL,
     "heartbeat interval of every actor (a worker / kv_manager silent for 3 is dead; default 2000)"},
};
#define NUM_ENGINE_FLAGS (int)(sizeof engine_flags / sizeof engine_flags[0])

static int engine_flag_index(const char *name) {
  for (int i = 0; i < NUM_ENGINE_FLAGS; i++)
    if (strcmp(engine_flags[i].name, name) == 0) return i;
  return -1;
}

bool serve_engine_flag_known(const char *name, bool *takes_value) {
  int i = engine_flag_index(name);
  if (i >= 0 && takes_value) *takes_value = engine_flags[i].takes_value;
  return i >= 0;
}

int serve_engine_flag_add(struct serve_options *o, const char *name, const char *value) {
  int i = engine_flag_index(name);
  if (i < 0 || o->num_engine_flags >= SERVE_MAX_ENGINE_FLAGS) return -1;
  o->engine_flags[o->num_engine_flags++] =
      (struct serve_engine_flag){engine_flags[i].name, engine_flags[i].takes_value ? value : NULL};
  return engine_flags[i].takes_value ? 1 : 0;
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
  /* durable requests (JetStream): the scheduler and the input processor must agree */
  const bool durable_actor = !strcmp(serve_actors[a].name, "scheduler") || !strcmp(serve_actors[a].name, "input-processor");
  /* stopping: the front first (no new requests), then the scheduler (no new steps), then what
   * serves its steps, so no step of a clean stop meets an actor that is gone */
  spec->stop_stage = !serve_actors[a].per_engine ? 0 : !strcmp(serve_actors[a].name, "scheduler") ? 1 : 2;
  if (!st && durable_actor && !o->no_durable) st = child_spec_add_arg(spec, "--durable");
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
static void log_metrics_ports(const struct serve_options *o, const struct child_spec *specs, int n) {
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

/* A port in [min, 65535] (min -1 also takes -1: a free one). 0 on success. */
static int actor_port_arg(const char *s, int min, int64_t *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < min || v > 65535) return -1;
  *out = v;
  return 0;
}

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: llmbus serve [--nats URL] [--model PATH] [--http HOST:PORT] [--engines N] [--tenants FILE]\n"
          "                    [--state-dir DIR] [--no-durable] [--input-processors N] [--help]\n"
          "\n"
          "Runs the whole llmbus stack under one supervisor until Ctrl-C / SIGTERM:\n"
          "every actor process, restarted if it dies, and (without --nats) an embedded\n"
          "nats-server on 127.0.0.1 with a free port and JetStream in a temporary store.\n"
          "\n"
          "  --nats URL        use this NATS server (comma-separated list) instead\n"
          "  --model PATH      GGUF model file for the actors that need one\n"
          "  --http HOST:PORT  address of the OpenAI-compatible HTTP front door\n"
          "  --engines N       N engines on this host (scheduler, kv_manager, worker, output and\n"
          "                    encoder cache each; worker threads split between them), behind\n"
          "                    one input processor that routes by load and prefix (default 1)\n"
          "  --metrics-port P  Prometheus /metrics of each actor on P, P+1, ... in the order\n"
          "                    kv-manager, gpu-worker, scheduler, output-processor,\n"
          "                    input-processor, api-server, encoder-cache (default %d; 0 = none)\n"
          "  --metrics-host H  address of those listeners (default 127.0.0.1)\n"
          "  --nats-monitor-port P  the embedded nats-server's monitoring port on 127.0.0.1\n"
          "                    (default -1: a free one, logged in event=nats_ready; 0 = none)\n"
          "  --tenants FILE    tenants and their limits, one a line: a NATS account each (embedded\n"
          "                    server only; default: the one tenant \"default\"); every actor logs in\n"
          "                    as its own user, password generated per run (cmd/supervisor/serve_nats_config.h)\n"
          "  --state-dir DIR   the embedded nats-server's JetStream store (requests not yet\n"
          "                    finished survive a nats-server or serve restart); default: a\n"
          "                    temporary directory removed at exit\n"
          "  --no-nats-auth    embedded nats-server without accounts and users (development and\n"
          "                    tests only: any local client may then publish anywhere)\n"
          "  --no-durable      requests on a plain subject, not the JetStream stream (a\n"
          "                    scheduler that dies loses the requests it held)\n"
          "  --input-processors N  input processors in the queue group (default 2: one\n"
          "                    takes requests while another restarts)\n"
          "  --help            this text\n"
          "\nengine flags, passed on to the actors that take them:\n", SERVE_DEFAULT_METRICS_PORT);
  for (int i = 0; i < NUM_ENGINE_FLAGS; i++) {
    char name[64];
    snprintf(name, sizeof name, "--%s%s", engine_flags[i].name, engine_flags[i].takes_value ? " V" : "");
    fprintf(f, "  %-26s %s\n", name, engine_flags[i].help);
  }
}

int cmd_serve(int argc, char **argv) {
  struct serve_options so = {.metrics_port = SERVE_DEFAULT_METRICS_PORT};
  int64_t monitor_port = -1, metrics_port = SERVE_DEFAULT_METRICS_PORT;
  const char *state_dir = NULL;
  static const struct option longopts[] = {
      {"nats", required_argument, NULL, 'n'},
      {"model", required_argument, NULL, 'm'},
      {"http", required_argument, NULL, 'H'},
      {"engines", required_argument, NULL, 'e'},
      {"metrics-port", required_argument, NULL, 'P'},
      {"metrics-host", required_argument, NULL, 'A'},
      {"nats-monitor-port", required_argument, NULL, 'M'},
      {"tenants", required_argument, NULL, 't'},
      {"state-dir", required_argument, NULL, 's'},
      {"no-durable", no_argument, NULL, 'D'},
      {"no-nats-auth", no_argument, NULL, 'U'},
      {"input-processors", required_argument, NULL, 'I'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  /* Engine flags are taken out first; getopt sees only serve's own. */
  char **own = calloc((size_t)argc + 1, sizeof *own);
  if (!own) return 1;
  int n_own = 0;
  for (int a = 0; a < argc; a++) {
    bool takes_value = false;
    const char *name = strncmp(argv[a], "--", 2) == 0 ? argv[a] + 2 : NULL;
    if (a == 0 || !name || !serve_engine_flag_known(name, &takes_value)) {
      own[n_own++] = argv[a];
      continue;
    }
    if (takes_value && a + 1 >= argc) {
      fprintf(stderr, "llmbus serve: --%s needs a value\n", name);
      free(own);
      return 2;
    }
    if (serve_engine_flag_add(&so, name, takes_value ? argv[a + 1] : NULL) < 0) {
      fprintf(stderr, "llmbus serve: too many engine flags (at most %d)\n", SERVE_MAX_ENGINE_FLAGS);
      free(own);
      return 2;
    }
    if (takes_value) a++;
  }
  optind = 1;
  int ch, usage_rc = -1;
  while (usage_rc < 0 && (ch = getopt_long(n_own, own, "", longopts, NULL)) != -1) {
    switch (ch) {
      case 'n': so.nats_url = optarg; break;
      case 'm': so.model_path = optarg; break;
      case 'H': so.http_addr = optarg; break;
      case 'e': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v < 1 || v > SERVE_MAX_ENGINES) {
          fprintf(stderr, "llmbus serve: --engines %s: 1..%d\n", optarg, SERVE_MAX_ENGINES);
          usage_rc = 2;
        }
        so.num_engines = (int)v;
        break;
      }
      case 'A': so.metrics_host = optarg; break;
      case 'P':
      case 'M':
        if (actor_port_arg(optarg, ch == 'M' ? -1 : 0, ch == 'M' ? &monitor_port : &metrics_port) != 0) {
          fprintf(stderr, "llmbus serve: --%s: '%s' is not a port\n", ch == 'M' ? "nats-monitor-port" : "metrics-port",
                  optarg);
          usage_rc = 2;
        }
        break;
      case 't': so.tenants_file = optarg; break;
      case 's': state_dir = optarg; break;
      case 'D': so.no_durable = true; break;
      case 'U': so.no_nats_auth = true; break;
      case 'I': so.num_input_processors = atoi(optarg); if (so.num_input_processors < 1) so.num_input_processors = -1; break;
      case 'h': serve_usage(stdout); usage_rc = 0; break;
      default: serve_usage(stderr); usage_rc = 2; break;
    }
  }
  if (usage_rc < 0 && optind < n_own) {
    fprintf(stderr, "llmbus serve: unexpected argument \"%s\"\n", own[optind]);
    serve_usage(stderr);
    usage_rc = 2;
  }
  free(own);
  if (usage_rc >= 0) return usage_rc;
  so.metrics_port = (int)metrics_port;
  if (so.metrics_port + NUM_SERVE_ACTORS * (so.num_engines > 1 ? so.num_engines : 1) > 65536) {
    fprintf(stderr, "llmbus serve: --metrics-port %d leaves no room for every actor's port\n", so.metrics_port);
    return 2;
  }
  if (so.model_path && access(so.model_path, R_OK) != 0) {
    fprintf(stderr, "llmbus serve: cannot read model %s (run ops/fetch-model.sh?)\n", so.model_path);
    return 1;
  }
  llb_log_set_actor("supervisor");
  struct child_spec *specs = calloc(SUPERVISOR_MAX_CHILDREN, sizeof *specs);
  if (!specs) return 1;
  int rc = 1;
  struct supervisor *sup = NULL;
  struct serve_nats_auth *auth = NULL;
  int n = serve_actor_specs(&so, specs, SUPERVISOR_MAX_CHILDREN);
  if (n < 0) {
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
    goto done;
  }
  int missing = 0;
  for (int i = 0; i < n; i++)
    if (access(specs[i].args[0], X_OK) != 0) {
      fprintf(stderr, "llmbus serve: actor program %s not found (build it first)\n", specs[i].args[0]);
      missing++;
    }
  if (missing) goto done;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = so.nats_url;
  cfg.nats_monitor_port = (int)monitor_port;
  log_metrics_ports(&so, specs, n);
  if (serve_nats_auth_apply(&so, specs, n, &cfg, &auth) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
    goto done;
  }
  cfg.state_dir = state_dir;
  if (state_dir && mkdir(state_dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "llmbus serve: cannot create --state-dir %s: %s\n", state_dir, strerror(errno));
    goto done;
  }
  if (state_dir && so.nats_url)
    LLB_LOG_WARN("state_dir_ignored", "reason=--nats given: the external server keeps its own store");
  if (supervisor_create(&cfg, &sup) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (supervisor_add_child(sup, &specs[i]) != LLB_STATUS_OK) {
      fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
      goto done;
    }
  llb_status st = supervisor_run(sup);
  if (st == LLB_STATUS_OK)
    rc = 0;
  else
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
done:
  supervisor_destroy(sup);
  serve_nats_auth_destroy(auth);
  free(specs);
  return rc;
}
