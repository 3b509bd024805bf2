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
#include "cmd/supervisor.h"

/* The actor programs of one engine, in start order, and which options each takes. */
static const struct {
  const char *name;
  const char *program;
  bool takes_model;
  bool takes_http;
} serve_actors[] = {
    {"kv-manager", "llmbus-kv-manager", false, false},
    {"gpu-worker", "llmbus-gpu-worker", true, false},
    {"scheduler", "llmbus-scheduler", true, false},
    {"output-processor", "llmbus-output-processor", true, false},
    {"input-processor", "llmbus-input-processor", true, false},
    {"api-server", "llmbus-api-server", true, true},
    {"encoder-cache", "llmbus-encoder-cache", false, false},
};

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
    {"num-blocks", true, A_KV | A_WORKER | A_SCHED, "KV cache blocks (the cache is allocated once)"},
    {"block-size", true, A_KV | A_WORKER | A_SCHED, "tokens per KV block"},
    {"max-num-seqs", true, A_SCHED, "requests running at once"},
    {"max-num-waiting", true, A_SCHED, "requests waiting at most (more get QUEUE_FULL / 429)"},
    {"max-num-batched-tokens", true, A_SCHED | A_WORKER, "token budget of one step"},
    {"max-model-len", true, A_SCHED | A_IN, "context length limit (prompt + output)"},
    {"policy", true, A_SCHED, "fcfs | priority"},
    {"no-prefix-caching", false, A_KV | A_SCHED, "disable the prefix cache"},
    {"no-async-scheduling", false, A_SCHED,
     "apply each step's output before planning the next (no step ahead on the worker)"},
    {"encoder-cache-size", true, A_SCHED | A_ENC,
     "encoder-output cache, embedding rows (multimodal items kept for reuse)"},
    {"encoder-compute-budget", true, A_SCHED, "embedding rows encoded per step (0 = the token budget)"},
    {"stats-interval-ms", true, A_SCHED, "SchedulerStats period while there is work"},
    {"ack-wait-ms", true, A_SCHED,
     "durable: a request a dead scheduler held is delivered again after this long (default 2000)"},
    {"max-deliver", true, A_SCHED,
     "durable: deliveries of one request at most, then dead-lettered with an error (default 3)"},
    {"threads", true, A_WORKER, "worker threads for the forward pass"},
    {"device", true, A_WORKER, "cpu | cuda"},
    {"numerics", true, A_WORKER, "packed | ggml (cpu: llama.cpp's arithmetic, bit-exact with it)"},
    {"engine-id", true, A_ALL, "engine id (<eid> in llm.engine.<eid>.*)"},
    {"prefix", true, A_ALL, "subject prefix (default llm)"},
    {"log-level", true, A_ALL, "debug | info | warn | error"},
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

static llb_status add_engine_flags(const struct serve_options *o, int actor, struct child_spec *spec) {
  llb_status st = LLB_STATUS_OK;
  /* --device cuda without --num-blocks: the worker sizes the KV cache from device memory and
   * the kv_manager and scheduler take its number from the worker's heartbeat. */
  const char *dev = engine_flag_value(o, "device");
  if (dev && strcmp(dev, "cuda") == 0 && !engine_flag_value(o, "num-blocks") &&
      (engine_flags[engine_flag_index("num-blocks")].actors & (1u << actor)))
    if ((st = child_spec_add_arg(spec, "--num-blocks")) || (st = child_spec_add_arg(spec, "0"))) return st;
  for (int f = 0; f < o->num_engine_flags && !st; f++) {
    int i = engine_flag_index(o->engine_flags[f].name);
    if (i < 0 || !(engine_flags[i].actors & (1u << actor))) continue;
    char arg[80];
    snprintf(arg, sizeof arg, "--%s", engine_flags[i].name);
    st = child_spec_add_arg(spec, arg);
    if (!st && o->engine_flags[f].value) st = child_spec_add_arg(spec, o->engine_flags[f].value);
  }
  return st;
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
  int n = (int)(sizeof serve_actors / sizeof serve_actors[0]);
  if (!o || !specs || max < n) {
    LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "serve_actor_specs: room for %d specs needed", n);
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
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, serve_actors[i].program);
    if (child_spec_init(&specs[i], serve_actors[i].name, path) != LLB_STATUS_OK) return -1;
    if (serve_actors[i].takes_model && o->model_path &&
        (child_spec_add_arg(&specs[i], "--model") != LLB_STATUS_OK ||
         child_spec_add_arg(&specs[i], o->model_path) != LLB_STATUS_OK))
      return -1;
    if (serve_actors[i].takes_http && o->http_addr &&
        (child_spec_add_arg(&specs[i], "--http") != LLB_STATUS_OK ||
         child_spec_add_arg(&specs[i], o->http_addr) != LLB_STATUS_OK))
      return -1;
    if (add_engine_flags(o, i, &specs[i]) != LLB_STATUS_OK) return -1;
    const bool durable_actor = strcmp(serve_actors[i].name, "scheduler") == 0 ||
                               strcmp(serve_actors[i].name, "input-processor") == 0;
    if (durable_actor && !o->no_durable && child_spec_add_arg(&specs[i], "--durable") != LLB_STATUS_OK)
      return -1;
  }
  return add_input_processor_replicas(o, specs, n, max);
}

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: llmbus serve [--nats URL] [--model PATH] [--http HOST:PORT] [--state-dir DIR]\n"
          "                    [--no-durable] [--input-processors N] [--help]\n"
          "\n"
          "Runs the whole llmbus stack under one supervisor until Ctrl-C / SIGTERM:\n"
          "every actor process, restarted if it dies, and (without --nats) an embedded\n"
          "nats-server on 127.0.0.1 with a free port and JetStream in a temporary store.\n"
          "\n"
          "  --nats URL        use this NATS server (comma-separated list) instead\n"
          "  --model PATH      GGUF model file for the actors that need one\n"
          "  --http HOST:PORT  address of the OpenAI-compatible HTTP front door\n"
          "  --state-dir DIR   the embedded nats-server's JetStream store (requests not yet\n"
          "                    finished survive a nats-server or serve restart); default: a\n"
          "                    temporary directory removed at exit\n"
          "  --no-durable      requests on a plain subject, not the JetStream stream (a\n"
          "                    scheduler that dies loses the requests it held)\n"
          "  --input-processors N  input processors in the queue group (default 2: one\n"
          "                    takes requests while another restarts)\n"
          "  --help            this text\n"
          "\nengine flags, passed on to the actors that take them:\n");
  for (int i = 0; i < NUM_ENGINE_FLAGS; i++) {
    char name[64];
    snprintf(name, sizeof name, "--%s%s", engine_flags[i].name, engine_flags[i].takes_value ? " V" : "");
    fprintf(f, "  %-26s %s\n", name, engine_flags[i].help);
  }
}

int cmd_serve(int argc, char **argv) {
  struct serve_options so = {0};
  const char *state_dir = NULL;
  static const struct option longopts[] = {
      {"nats", required_argument, NULL, 'n'},
      {"model", required_argument, NULL, 'm'},
      {"http", required_argument, NULL, 'H'},
      {"state-dir", required_argument, NULL, 's'},
      {"no-durable", no_argument, NULL, 'D'},
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
      case 's': state_dir = optarg; break;
      case 'D': so.no_durable = true; break;
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
  if (so.model_path && access(so.model_path, R_OK) != 0) {
    fprintf(stderr, "llmbus serve: cannot read model %s (run ops/fetch-model.sh?)\n", so.model_path);
    return 1;
  }
  llb_log_set_actor("supervisor");
  struct child_spec *specs = calloc(SUPERVISOR_MAX_CHILDREN, sizeof *specs);
  if (!specs) return 1;
  int rc = 1;
  struct supervisor *sup = NULL;
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
  free(specs);
  return rc;
}
