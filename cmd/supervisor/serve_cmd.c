/* `llmbus serve`: its command line (vLLM's `vllm serve` where the concept is the same, and
 * llama-server's short flags), the API keys file, the connection file (connection.h), and the
 * run itself: the stack of serve.c under the supervisor (supervisor.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "bus/subject.h"
#include "cmd/flags/flags.h"
#include "cmd/supervisor/connection.h"
#include "cmd/supervisor/run_dir.h"
#include "cmd/supervisor/serve_hash_key.h"
#include "cmd/supervisor/serve_nats_config.h"
#include "cmd/supervisor/supervisor.h"

#ifndef LLB_DEFAULT_MODEL_PATH
#define LLB_DEFAULT_MODEL_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

#define SERVE_DEFAULT_HOST "127.0.0.1"
#define SERVE_API_KEY_MIN_BYTES 8 /* the api server's bounds (actors/api_server/api_server_keys.h) */
#define SERVE_API_KEY_MAX_BYTES 256
#define SERVE_DEFAULT_PORT 8000

/* serve's own flags, as given. */
struct serve_cli {
  struct serve_options so;
  const char *model;       /* --model / -m */
  const char *host;        /* --host; NULL = --http's, else 127.0.0.1 */
  int32_t port;            /* --port; -1 = --http's, else 8000 */
  const char *http;        /* --http HOST:PORT */
  int32_t engines, metrics_port, monitor_port, input_processors;
  const char *state_dir;
  const char *connection_name;
  struct flag_list served_names, api_keys;
  bool dry_run;
  char http_buf[300];
};

/* --enable-prefix-caching undoes a --no-enable-prefix-caching given before it (or in --config). */
static llb_status enable_prefix_caching(const struct flag *f, const char *value) {
  (void)value;
  serve_engine_flag_remove(f->target, "no-prefix-caching");
  return LLB_STATUS_OK;
}

static llb_status set_port(const struct flag *f, const char *value) {
  int64_t v;
  llb_status st = flags_parse_int64(value, 0, 65535, &v);
  if (!st) *(int32_t *)f->target = (int32_t)v;
  return st;
}

#define SERVE_OWN_FLAGS 20

static int serve_own_flags(struct serve_cli *c, struct flag *t) {
  const struct flag own[SERVE_OWN_FLAGS] = {
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &c->model, .metavar = "PATH",
       .help = "GGUF model file (also the first positional argument, as vllm serve MODEL)"},
      {.name = "host", .kind = FLAG_KIND_STRING, .target = &c->host, .metavar = "HOST",
       .help = "address of the OpenAI-compatible HTTP server (default 127.0.0.1: loopback only)"},
      {.name = "port", .kind = FLAG_KIND_INT32, .target = &c->port, .metavar = "PORT", .set = set_port,
       .help = "its port (default 8000; 0 = a free one)"},
      {.name = "http", .kind = FLAG_KIND_STRING, .target = &c->http, .metavar = "HOST:PORT",
       .help = "both at once (--host and --port override their half)"},
      {.name = "served-model-name", .aliases = "alias", .short_name = 'a', .kind = FLAG_KIND_LIST,
       .target = &c->served_names, .metavar = "NAME", .greedy = true,
       .help = "model name(s) of the API: listed in /v1/models, accepted as `model` (default: the GGUF file's "
               "name without .gguf)"},
      {.name = "api-key", .kind = FLAG_KIND_LIST, .target = &c->api_keys, .metavar = "KEY",
       .help = "HTTP requests need `Authorization: Bearer KEY` (repeatable; also $LLMBUS_API_KEY, as vLLM's "
               "VLLM_API_KEY); the keys go to the api server in a 0600 file, never on a command line"},
      {.name = "engines", .aliases = "data-parallel-size|dp", .kind = FLAG_KIND_INT32, .target = &c->engines,
       .metavar = "N",
       .help = "engines on this host (scheduler, kv_manager, worker, output processor, encoder cache each; "
               "worker threads split between them) behind input processors that route by load and prefix"},
      {.name = "enable-prefix-caching", .kind = FLAG_KIND_BOOL, .target = &c->so, .set = enable_prefix_caching,
       .help = "the prefix cache (on unless --no-enable-prefix-caching)"},
      {.name = "nats", .kind = FLAG_KIND_STRING, .target = &c->so.nats_url, .metavar = "URL",
       .help = "use this NATS server (comma-separated list) instead of an embedded one"},
      {.name = "metrics-port", .kind = FLAG_KIND_INT32, .target = &c->metrics_port, .metavar = "P",
       .help = "Prometheus /metrics of each actor on P, P+1, ... in the order kv-manager, gpu-worker, scheduler, "
               "output-processor, input-processor, api-server, encoder-cache (0 = none; the api server's HTTP "
               "/metrics carries every actor's series anyway)"},
      {.name = "metrics-host", .kind = FLAG_KIND_STRING, .target = &c->so.metrics_host, .metavar = "HOST",
       .help = "address of those listeners (default 127.0.0.1)"},
      {.name = "nats-monitor-port", .kind = FLAG_KIND_INT32, .target = &c->monitor_port, .metavar = "P",
       .help = "the embedded nats-server's monitoring port on 127.0.0.1 (-1: a free one, logged in "
               "event=nats_ready; 0 = none)"},
      {.name = "tenants", .kind = FLAG_KIND_STRING, .target = &c->so.tenants_file, .metavar = "FILE",
       .help = "tenants and their limits, one a line: a NATS account each (embedded server only; default: the "
               "one tenant \"default\"); every actor logs in as its own user, passwords generated per run"},
      {.name = "state-dir", .kind = FLAG_KIND_STRING, .target = &c->state_dir, .metavar = "DIR",
       .help = "the embedded nats-server's JetStream store (unfinished requests survive a restart) and the hash "
               "key (created 0700); default: a temporary directory removed at exit"},
      {.name = "hash-key-file", .kind = FLAG_KIND_STRING, .target = &c->so.hash_key_file, .metavar = "FILE",
       .help = "the deployment's hash key (64 hex digits, mode 0600): keys the prefix-cache and multimodal hashes "
               "and the request-id tags; give the same file to the serve of every host of a deployment (default: "
               "one per run, or kept in --state-dir)"},
      {.name = "no-durable", .kind = FLAG_KIND_BOOL, .target = &c->so.no_durable,
       .help = "requests on a plain subject, not the JetStream stream (a scheduler that dies loses the requests "
               "it held)"},
      {.name = "roles", .kind = FLAG_KIND_STRING, .target = &c->so.roles, .metavar = "R0,R1,..",
       .help = "disaggregated prefill/decode: each engine's role, one per --engines (prefill | decode | both; "
               "default both): prompts go to prefill engines, which hand each request to a decode engine after "
               "its first token (docs/scaling.md); e.g. --engines 2 --roles prefill,decode"},
      {.name = "no-kv-transfer", .kind = FLAG_KIND_BOOL, .target = &c->so.no_kv_transfer,
       .help = "with --roles: decode engines compute a hand-off's prompt again instead of fetching its KV blocks "
               "from the prefill engine's worker"},
      {.name = "input-processors", .kind = FLAG_KIND_INT32, .target = &c->input_processors, .metavar = "N",
       .help = "input processors in the queue group (1..8; one takes requests while another restarts)"},
      {.name = "connection-name", .kind = FLAG_KIND_STRING, .target = &c->connection_name, .metavar = "NAME",
       .help = "name of the connection file clients find this serve by (`llmbus chat --connect NAME`; default: "
               "the first served model name)"},
  };
  memcpy(t, own, sizeof own);
  return SERVE_OWN_FLAGS;
}

static const struct flag serve_dev_flags_proto[] = {
    {.name = "no-nats-auth", .kind = FLAG_KIND_BOOL,
     .help = "embedded nats-server without accounts and users (development and tests only: any local client may "
             "then publish anywhere)"},
    {.name = "dry-run", .kind = FLAG_KIND_BOOL,
     .help = "print each actor's command line (what every flag became) and exit"},
};

static const char serve_usage[] =
    "usage: llmbus serve [MODEL] [flags]\n"
    "\n"
    "Runs the whole llmbus stack under one supervisor until Ctrl-C / SIGTERM: every actor process,\n"
    "restarted if it dies, and (without --nats) an embedded nats-server on 127.0.0.1 with a free port\n"
    "and JetStream. The flags are vLLM's (`vllm serve`) where the concept is the same, with\n"
    "llama-server's short forms (-m, -c, -t, -np); docs/cli-flags.md maps both to these.\n"
    "While it runs, `llmbus generate/chat/status/tokenize` find it through its connection file.\n";

/* The checks that need every flag, and --host / --port / --http into so.http_addr. */
static int serve_resolve(const struct flag_command *cmd, struct serve_cli *c, const struct flag_args *args) {
  if (args->num_positional == 1 && c->model) return flags_usage_error(cmd, "give the model once (MODEL or --model)");
  if (args->num_positional == 1) c->model = args->positional[0];
  c->so.model_path = c->model;
  if (c->engines < 1 || c->engines > SERVE_MAX_ENGINES)
    return flags_usage_error(cmd, "--engines %d: 1..%d", c->engines, SERVE_MAX_ENGINES);
  if (c->metrics_port < 0 || c->metrics_port > 65535) return flags_usage_error(cmd, "--metrics-port: 0..65535");
  if (c->monitor_port < -1 || c->monitor_port > 65535) return flags_usage_error(cmd, "--nats-monitor-port: -1..65535");
  if (c->input_processors < 1 || c->input_processors > 8) return flags_usage_error(cmd, "--input-processors: 1..8");
  c->so.num_engines = c->engines;
  c->so.metrics_port = c->metrics_port;
  c->so.num_input_processors = c->input_processors;
  if (c->so.metrics_port > 0 && c->so.metrics_port + SUPERVISOR_MAX_CHILDREN > 65536)
    return flags_usage_error(cmd, "--metrics-port %d leaves no room for every actor's port", c->so.metrics_port);
  char host[256] = SERVE_DEFAULT_HOST;
  int port = SERVE_DEFAULT_PORT;
  if (c->http) {
    const char *colon = strrchr(c->http, ':');
    char *end = NULL;
    long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == c->http || !end || *end || p < 0 || p > 65535 || (size_t)(colon - c->http) >= sizeof host)
      return flags_usage_error(cmd, "--http '%s' is not HOST:PORT", c->http);
    snprintf(host, sizeof host, "%.*s", (int)(colon - c->http), c->http);
    port = (int)p;
  }
  if (c->host) snprintf(host, sizeof host, "%s", c->host);
  if (c->port >= 0) port = c->port;
  const bool v6 = strchr(host, ':') && host[0] != '[';
  snprintf(c->http_buf, sizeof c->http_buf, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
  c->so.http_addr = c->http_buf;
  const char *env_key = getenv("LLMBUS_API_KEY");
  for (int i = 0; i <= c->api_keys.num; i++) { /* as the api server takes them (api_server_keys.h), said before the start */
    const char *k = i < c->api_keys.num ? c->api_keys.items[i] : env_key;
    if (k && (i < c->api_keys.num || *k) &&
        (strlen(k) < SERVE_API_KEY_MIN_BYTES || strlen(k) > SERVE_API_KEY_MAX_BYTES || strpbrk(k, " \t\r\n")))
      return flags_usage_error(cmd, "%s: an API key is %d..%d characters without white space",
                               i < c->api_keys.num ? "--api-key" : "$LLMBUS_API_KEY", SERVE_API_KEY_MIN_BYTES,
                               SERVE_API_KEY_MAX_BYTES);
  }
  c->so.served_model_names = c->served_names.items;
  c->so.num_served_model_names = c->served_names.num;
  return FLAGS_CONTINUE;
}

/* --- API keys -------------------------------------------------------------------------- */

/* --api-key values and $LLMBUS_API_KEY (checked by serve_resolve) as `KEY default` lines of a
 * 0600 file in dir (the connection directory; named for this process, removed at exit, or by a
 * later serve when this one died), given to the api server as --api-keys.
 * path[0] = '\0' when there is no key. Errors: IO. */
static llb_status write_api_keys(const struct serve_cli *c, const char *dir, char *path, size_t cap) {
  path[0] = '\0';
  const char *env = getenv("LLMBUS_API_KEY");
  const int n = c->api_keys.num + (env && *env ? 1 : 0);
  if (n == 0) return LLB_STATUS_OK;
  snprintf(path, cap, "%s/" SERVE_CONNECTION_KEYS_PREFIX "%ld", dir, (long)getpid()); /* ours alone */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    llb_status st = LLB_ERRF(LLB_STATUS_IO, "cannot write %s: %s", path, strerror(errno));
    path[0] = '\0';
    return st;
  }
  for (int i = 0; i < n; i++) fprintf(f, "%s %s\n", i < c->api_keys.num ? c->api_keys.items[i] : env, BUS_DEFAULT_TENANT);
  if (fclose(f) != 0) return LLB_ERRF(LLB_STATUS_IO, "cannot write %s: %s", path, strerror(errno));
  return LLB_STATUS_OK;
}

/* --- connection file ------------------------------------------------------------------- */

/* The served model names as the api server derives them: the flags, else the GGUF's basename. */
static void connection_models(const struct serve_cli *c, struct serve_connection *conn) {
  for (int i = 0; i < c->served_names.num && conn->num_models < SERVE_CONNECTION_MAX_MODELS; i++)
    snprintf(conn->models[conn->num_models++], sizeof conn->models[0], "%s", c->served_names.items[i]);
  if (conn->num_models) return;
  const char *base = strrchr(conn->model_path, '/');
  base = base ? base + 1 : conn->model_path;
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) n -= 5;
  snprintf(conn->models[conn->num_models++], sizeof conn->models[0], "%.*s", (int)n, base);
}

static const char *engine_flag(const struct serve_options *o, const char *name) {
  for (int f = 0; f < o->num_engine_flags; f++)
    if (strcmp(o->engine_flags[f].name, name) == 0) return o->engine_flags[f].value;
  return NULL;
}

/* What a client needs: URLs, the tenant's and the operator's logins, model names. */
static void connection_fill(const struct serve_cli *c, struct supervisor *sup, const struct serve_nats_auth *auth,
                            const char *name, struct serve_connection *conn) {
  memset(conn, 0, sizeof *conn);
  snprintf(conn->name, sizeof conn->name, "%s", name);
  conn->pid = (long)getpid();
  conn->pid_start = serve_connection_self_start();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  conn->started_at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  snprintf(conn->nats_url, sizeof conn->nats_url, "%s", supervisor_nats_url(sup));
  const char *prefix = engine_flag(&c->so, "prefix");
  snprintf(conn->prefix, sizeof conn->prefix, "%s", prefix ? prefix : BUS_DEFAULT_PREFIX);
  struct serve_tenants tenants;
  if (!c->so.tenants_file || serve_tenants_read(c->so.tenants_file, &tenants) != LLB_STATUS_OK)
    serve_tenants_default(&tenants);
  snprintf(conn->tenant, sizeof conn->tenant, "%s", tenants.names[0]);
  if (auth) {
    snprintf(conn->nats_user, sizeof conn->nats_user, "tenant-%s", conn->tenant);
    if (serve_nats_auth_password_file(auth, conn->nats_user, conn->nats_password_file,
                                      sizeof conn->nats_password_file) != LLB_STATUS_OK)
      conn->nats_user[0] = '\0';
    snprintf(conn->operator_user, sizeof conn->operator_user, "operator");
    if (serve_nats_auth_password_file(auth, "operator", conn->operator_password_file,
                                      sizeof conn->operator_password_file) != LLB_STATUS_OK)
      conn->operator_user[0] = '\0';
  }
  char host[256];
  const char *colon = strrchr(c->so.http_addr, ':');
  snprintf(host, sizeof host, "%.*s", (int)(colon - c->so.http_addr), c->so.http_addr);
  if (!strcmp(host, "0.0.0.0") || !strcmp(host, "[::]") || !*host) snprintf(host, sizeof host, "127.0.0.1");
  snprintf(conn->http_url, sizeof conn->http_url, "http://%s:%s/v1", host, colon + 1);
  if (!realpath(c->so.model_path ? c->so.model_path : LLB_DEFAULT_MODEL_PATH, conn->model_path))
    snprintf(conn->model_path, sizeof conn->model_path, "%s", c->so.model_path ? c->so.model_path : LLB_DEFAULT_MODEL_PATH);
  connection_models(c, conn);
}

/* --- the run --------------------------------------------------------------------------- */

static void print_dry_run(const struct child_spec *specs, int n, bool keys) {
  for (int i = 0; i < n; i++) {
    printf("%s:", specs[i].name);
    for (int a = 0; a < specs[i].argc; a++) printf(" %s", specs[i].args[a]);
    printf("%s\n", keys && !strcmp(specs[i].name, "api-server") ? " --api-keys <the keys file>" : "");
  }
}

/* Names the connection, writes the API keys file and adds it to the api server's flags. The
 * keys file is written before the specs are made, so that the api server gets it. */
static int serve_prepare(const struct flag_command *cmd, struct serve_cli *c, char *dir, size_t dir_cap, char *name,
                         size_t name_cap, char *keys, size_t keys_cap) {
  dir[0] = name[0] = keys[0] = '\0';
  if (c->dry_run) return FLAGS_CONTINUE;
  if (serve_connection_dir(dir, dir_cap) != LLB_STATUS_OK) {
    LLB_LOG_WARN("no_connection_file", "error=\"%s\"", llb_err_last());
    dir[0] = '\0';
  }
  if (dir[0]) {
    const int stale = serve_connection_remove_stale(dir);
    if (stale) LLB_LOG_INFO("connection_files_removed", "dir=%s stale=%d", dir, stale);
    struct serve_connection tmp = {0};
    const char *want = c->connection_name ? c->connection_name : NULL;
    if (!want) {
      snprintf(tmp.model_path, sizeof tmp.model_path, "%s", c->so.model_path ? c->so.model_path : LLB_DEFAULT_MODEL_PATH);
      connection_models(c, &tmp);
      want = tmp.models[0];
    }
    serve_connection_pick_name(dir, want, (long)getpid(), name, name_cap);
  }
  const bool have_keys = c->api_keys.num > 0 || (getenv("LLMBUS_API_KEY") && *getenv("LLMBUS_API_KEY"));
  if (have_keys && !dir[0]) return flags_usage_error(cmd, "--api-key needs a directory for its keys file (set HOME)");
  if (have_keys && write_api_keys(c, dir, keys, keys_cap) != LLB_STATUS_OK)
    return flags_usage_error(cmd, "%s", llb_err_last());
  if (keys[0] && serve_engine_flag_add(&c->so, "api-keys", keys) < 0)
    return flags_usage_error(cmd, "too many engine flags");
  return FLAGS_CONTINUE;
}

/* What write_connection needs once the stack is up. */
struct connection_job {
  const struct serve_cli *c;
  const struct serve_nats_auth *auth;
  const char *dir, *name;
  char *path; /* [cap] the file written; "" = none */
  size_t cap;
};

/* The supervisor's on_started hook: the NATS URL is known, every actor started. */
static void write_connection(struct supervisor *sup, void *user) {
  struct connection_job *j = user;
  if (!j->dir[0]) return;
  char name[SERVE_CONNECTION_NAME_MAX]; /* again: another serve may have taken it while this one started */
  serve_connection_pick_name(j->dir, j->name, (long)getpid(), name, sizeof name);
  struct serve_connection *conn = calloc(1, sizeof *conn);
  if (conn) connection_fill(j->c, sup, j->auth, name, conn);
  if (!conn || serve_connection_write(j->dir, conn, j->path, j->cap) != LLB_STATUS_OK) {
    LLB_LOG_WARN("connection_file_failed", "error=\"%s\"", conn ? llb_err_last() : "out of memory");
    j->path[0] = '\0';
  } else {
    LLB_LOG_INFO("connection_file", "path=%s name=%s http=%s", j->path, name, conn->http_url);
  }
  free(conn);
}

/* The supervisor over specs[0..n): start, write the connection file, supervise, remove it. */
static int serve_run(struct serve_cli *c, struct child_spec *specs, int n, const char *dir, const char *name) {
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = c->so.nats_url;
  cfg.nats_monitor_port = c->monitor_port;
  cfg.state_dir = c->state_dir;
  struct supervisor *sup = NULL;
  struct serve_nats_auth *auth = NULL;
  int rc = 1;
  char conn_path[PATH_MAX + 128] = "";
  struct serve_hash_key key = {0};
  serve_log_metrics_ports(&c->so, specs, n);
  run_dir_sweep_all_stale(); /* what a SIGKILLed serve left behind: passwords, keys, prompts */
  c->so.state_dir = c->state_dir;
  if (c->state_dir && run_dir_prepare_private(c->state_dir) != LLB_STATUS_OK) {
    LLB_ERRF(LLB_STATUS_IO, "--state-dir: %s", llb_err_last());
    goto fail;
  }
  if (serve_hash_key_apply(&c->so, specs, n, &key) != LLB_STATUS_OK ||
      serve_nats_auth_apply(&c->so, specs, n, &cfg, &auth) != LLB_STATUS_OK)
    goto fail;
  if (c->state_dir && c->so.nats_url)
    LLB_LOG_WARN("state_dir_ignored", "reason=--nats given: the external server keeps its own store");
  if (supervisor_create(&cfg, &sup) != LLB_STATUS_OK) goto fail;
  for (int i = 0; i < n; i++)
    if (supervisor_add_child(sup, &specs[i]) != LLB_STATUS_OK) goto fail;
  struct connection_job job = {.c = c, .auth = auth, .dir = dir, .name = name, .path = conn_path,
                               .cap = sizeof conn_path};
  supervisor_on_started(sup, write_connection, &job);
  if (supervisor_run(sup) == LLB_STATUS_OK) rc = 0;
  else fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
  if (conn_path[0]) serve_connection_remove_own(conn_path);
  supervisor_destroy(sup);
  serve_nats_auth_destroy(auth);
  serve_hash_key_release(&key);
  return rc;
fail:
  fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
  supervisor_destroy(sup);
  serve_nats_auth_destroy(auth);
  serve_hash_key_release(&key);
  return 1;
}

static int serve_with(const struct flag_command *cmd, struct serve_cli *c) {
  if (c->so.model_path && access(c->so.model_path, R_OK) != 0) {
    fprintf(stderr, "llmbus serve: cannot read model %s (run ops/fetch-model.sh?)\n", c->so.model_path);
    return 1;
  }
  llb_log_set_actor("supervisor");
  char dir[PATH_MAX], name[SERVE_CONNECTION_NAME_MAX], keys[PATH_MAX + 128];
  int rc = serve_prepare(cmd, c, dir, sizeof dir, name, sizeof name, keys, sizeof keys);
  if (rc != FLAGS_CONTINUE) return rc;
  struct child_spec *specs = calloc(SUPERVISOR_MAX_CHILDREN, sizeof *specs);
  if (!specs) return 1;
  rc = 1;
  int n = serve_actor_specs(&c->so, specs, SUPERVISOR_MAX_CHILDREN);
  if (n < 0) {
    fprintf(stderr, "llmbus serve: %s\n", llb_err_last());
  } else if (c->dry_run) {
    print_dry_run(specs, n, c->api_keys.num > 0 || (getenv("LLMBUS_API_KEY") && *getenv("LLMBUS_API_KEY")));
    rc = 0;
  } else {
    int missing = 0;
    for (int i = 0; i < n; i++)
      if (access(specs[i].args[0], X_OK) != 0) {
        fprintf(stderr, "llmbus serve: actor program %s not found (build it first)\n", specs[i].args[0]);
        missing++;
      }
    if (!missing) rc = serve_run(c, specs, n, dir, name);
  }
  if (keys[0]) unlink(keys);
  free(specs);
  return rc;
}

int cmd_serve(int argc, char **argv) {
  struct serve_cli *c = calloc(1, sizeof *c);
  struct flag own[SERVE_OWN_FLAGS], engine[SERVE_MAX_ENGINE_FLAGS], dev[2];
  if (!c) return 1;
  *c = (struct serve_cli){.port = -1, .engines = 1, .metrics_port = SERVE_DEFAULT_METRICS_PORT, .monitor_port = -1,
                          .input_processors = SERVE_DEFAULT_INPUT_PROCESSORS};
  const int num_own = serve_own_flags(c, own);
  const int num_engine = serve_engine_flag_table(&c->so, engine, SERVE_MAX_ENGINE_FLAGS);
  memcpy(dev, serve_dev_flags_proto, sizeof dev);
  dev[0].target = &c->so.no_nats_auth;
  dev[1].target = &c->dry_run;
  const struct flag_section sections[] = {
      {"serve flags", own, num_own},
      {"engine flags (passed on to the actors that take them; `--dry-run` shows where)", engine, num_engine},
      {"development", dev, 2},
  };
  const struct flag_command cmd = {.program = "llmbus serve", .usage = serve_usage, .sections = sections,
                                   .num_sections = 3, .config = true, .max_positional = 1,
                                   .epilog = "docs/cli.md and docs/cli-flags.md: every flag, vLLM's and llama-server's "
                                             "names for each.\n"};
  struct flag_args args = {0};
  int rc = num_engine < 0 ? 1 : flags_parse(&cmd, argc, argv, &args);
  if (rc == FLAGS_CONTINUE) rc = serve_resolve(&cmd, c, &args);
  if (rc == FLAGS_CONTINUE) rc = serve_with(&cmd, c);
  flag_args_free(&args);
  free(c);
  return rc;
}
