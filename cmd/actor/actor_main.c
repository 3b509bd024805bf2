/* The shared actor main: flags, connect, heartbeat, run, drain (see actor_main.h). */
#include "cmd/actor/actor_main.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "bus/credentials.h"
#include "bus/span.h"
#include "bus/subject.h"
#include "schemas/control.h"

#ifndef LLB_DEFAULT_MODEL_PATH
#define LLB_DEFAULT_MODEL_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

#define ACTOR_MAIN_EXIT_OK 0
#define ACTOR_MAIN_EXIT_FAILURE 1
#define ACTOR_MAIN_EXIT_USAGE 2

#define HEARTBEAT_CAP_BYTES 65536 /* a worker announcing LoRA adapters: up to 32, each a name of <= 128 bytes
                                     and, loaded at run time, a path of <= 1024 and a tenant of <= 64 */
/* Bound on waiting for the NATS client's own threads to end before the process exits. */
#define ACTOR_MAIN_SHUTDOWN_WAIT_MS 5000

/* The common flags as a table over am->common, so one parser serves both lists. */
enum { NUM_COMMON_FLAGS = 17 };
static void common_flags_table(struct actor_main *am, struct flag *t) {
  struct actor_common_flags *c = &am->common;
  const struct flag table[NUM_COMMON_FLAGS] = {
      {.name = "nats", .kind = FLAG_KIND_STRING, .target = &c->nats_url,
       .help = "NATS server URL(s), comma-separated"},
      {.name = "prefix", .kind = FLAG_KIND_STRING, .target = &c->prefix,
       .help = "subject prefix"},
      {.name = "engine-id", .kind = FLAG_KIND_STRING, .target = &c->engine_id,
       .help = "engine id (<eid> in llm.engine.<eid>.*)"},
      {.name = "instance", .kind = FLAG_KIND_STRING, .target = &c->instance,
       .help = "instance name in the health subject"},
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &c->model_path,
       .help = "GGUF model path"},
      {.name = "creds", .kind = FLAG_KIND_STRING, .target = &c->creds_file,
       .help = "NATS credentials file (.creds)"},
      {.name = "nats-user", .kind = FLAG_KIND_STRING, .target = &c->nats_user,
       .help = "NATS user (with --nats-password-file)"},
      {.name = "nats-password-file", .kind = FLAG_KIND_STRING, .target = &c->nats_password_file,
       .help = "file holding the NATS user's password (mode 0600; never on the command line)"},
      {.name = "hash-key-file", .kind = FLAG_KIND_STRING, .target = &c->hash_key_file,
       .help = "file holding the deployment's hash key (64 hex digits, mode 0600): keys the prefix-cache block "
               "hashes, multimodal item hashes and request-id tags (base/hash.h); default: a random key of this "
               "process"},
      {.name = "log-level", .kind = FLAG_KIND_STRING, .target = &c->log_level,
       .help = "debug|info|warn|error"},
      {.name = "heartbeat-ms", .kind = FLAG_KIND_INT64, .target = &c->heartbeat_ms,
       .help = "heartbeat interval, ms"},
      {.name = "metrics-port", .kind = FLAG_KIND_INT32, .target = &c->metrics_port,
       .help = "Prometheus GET /metrics port (0 = none)"},
      {.name = "metrics-host", .kind = FLAG_KIND_STRING, .target = &c->metrics_host,
       .help = "address of the metrics listener"},
      {.name = "metrics-publish-ms", .kind = FLAG_KIND_INT64, .target = &c->metrics_publish_ms, .min = -1,
       .max = 3600000,
       .help = "publish the metrics on <prefix>.health.<actor>.<instance>.metrics this often, for the api server's "
               "/metrics (one scrape for the stack); 0 = --heartbeat-ms, -1 = never"},
      {.name = "otlp-endpoint", .aliases = "otlp-traces-endpoint", .kind = FLAG_KIND_STRING, .target = &c->otlp_endpoint,
       .help = "export spans as OTLP/HTTP JSON to URL/v1/traces (http://host:port)"},
      {.name = "trace-sample-ratio", .kind = FLAG_KIND_DOUBLE, .target = &c->trace_sample_ratio,
       .help = "fraction of new traces sampled (requests arriving with a traceparent keep its flag)"},
      {.name = "trace-publish", .kind = FLAG_KIND_BOOL, .target = &c->trace_publish,
       .help = "also publish span batches (OTLP JSON) on <prefix>.trace.<actor>"},
  };
  memcpy(t, table, sizeof table);
}

/* Parses the common flags and the actor's own (cmd/flags/flags.h) into am; the values live in
 * am->args. Returns FLAGS_CONTINUE, or an exit code (0 after --help, 2 on a usage error). */
static int parse_args(struct actor_main *am, int argc, char **argv) {
  struct flag common[NUM_COMMON_FLAGS];
  common_flags_table(am, common);
  const struct actor_main_spec *s = am->spec;
  char usage[512], title[96];
  snprintf(usage, sizeof usage, "usage: %s [flags]\n%s%s", s->program ? s->program : s->actor,
           s->summary ? s->summary : "", s->summary ? "\n" : "");
  snprintf(title, sizeof title, "%s flags", s->actor);
  const struct flag_section sections[] = {{"common flags", common, NUM_COMMON_FLAGS},
                                          {title, s->flags, s->num_flags}};
  const struct flag_command c = {.program = s->program ? s->program : s->actor, .usage = usage,
                                 .sections = sections, .num_sections = 2, .max_positional = 0};
  return flags_parse(&c, argc, argv, &am->args);
}

static llb_status apply_log_level(const char *level) {
  static const struct { const char *name; llb_log_level level; } levels[] = {
      {"debug", LLB_LOG_LEVEL_DEBUG}, {"info", LLB_LOG_LEVEL_INFO},
      {"warn", LLB_LOG_LEVEL_WARN},   {"error", LLB_LOG_LEVEL_ERROR}};
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
    if (strcmp(level, levels[i].name) == 0) {
      llb_log_set_level(levels[i].level);
      return LLB_STATUS_OK;
    }
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--log-level '%s': expected debug|info|warn|error",
                  level);
}

static void geometry_watch_free(struct geometry_watch *w);

/* Runs on the bus loop thread: encode one Heartbeat, never block. */
static llb_status heartbeat_fill(void *user, uint8_t *buf, size_t cap, size_t *len) {
  struct actor_main *am = user;
  int32_t num_loras = 0;
  const struct llb_lora_adapter *loras = am->lora_lock ? am->lora_lock(am->lora_user, &num_loras) : NULL;
  struct llb_heartbeat hb = {
      .version = LLB_SCHEMA_VERSION,
      .actor = llb_str_c(am->spec->actor),
      .instance = llb_str_c(am->common.instance),
      .host = llb_str_c(am->host_buf),
      .pid = (int32_t)getpid(),
      .uptime_s = (double)(llb_now_ns() - am->start_ns) / 1e9,
      .seq = atomic_fetch_add(&am->heartbeat_seq, 1),
      .timestamp = (double)llb_wall_ns() / 1e9,
      .ready = atomic_load(&am->ready),
      .inflight = atomic_load(&am->inflight),
      .engine_id = llb_str_c(am->common.engine_id),
      .num_gpu_blocks = atomic_load(&am->kv_num_blocks),
      .block_size = atomic_load(&am->kv_block_size),
      .lora_adapters = loras,
      .num_lora_adapters = num_loras,
  };
  const llb_status st = llb_heartbeat_encode(&hb, buf, cap, len);
  if (am->lora_lock) am->lora_unlock(am->lora_user);
  return st;
}

static void init_common(struct actor_main *am) {
  if (gethostname(am->host_buf, sizeof am->host_buf) != 0) snprintf(am->host_buf, sizeof am->host_buf, "host");
  am->host_buf[sizeof am->host_buf - 1] = '\0';
  snprintf(am->instance_buf, sizeof am->instance_buf, "%s-%ld", am->host_buf, (long)getpid());
  /* A name is letters, digits, '-' and '_' (bus/subject.h): hostnames may have dots. */
  for (char *p = am->instance_buf; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_') *p = '-';
  if (strlen(am->instance_buf) > BUS_TOKEN_MAX) /* keep the pid, the end */
    memmove(am->instance_buf, am->instance_buf + strlen(am->instance_buf) - BUS_TOKEN_MAX, BUS_TOKEN_MAX + 1);
  am->common = (struct actor_common_flags){
      .nats_url = "nats://127.0.0.1:4222",
      .prefix = BUS_DEFAULT_PREFIX,
      .engine_id = "0",
      .instance = am->instance_buf,
      .model_path = LLB_DEFAULT_MODEL_PATH,
      .creds_file = NULL,
      .log_level = "info",
      .heartbeat_ms = 2000,
      .metrics_port = 0,
      .metrics_host = "127.0.0.1",
      .trace_sample_ratio = 1.0,
  };
}

/* Every log line of the process names its engine and instance. */
static void set_log_context(const struct actor_main *am) {
  char ctx[160];
  snprintf(ctx, sizeof ctx, "engine=%s instance=%s", am->common.engine_id, am->common.instance);
  llb_log_set_context(ctx);
}

/* The registry (process metrics, label engine) and, with --metrics-port, its listener. Only
 * running out of memory is an error: a port that cannot be bound leaves the actor without
 * it (logged), as the engine's work does not depend on being scraped. */
static llb_status metrics_start(struct actor_main *am) {
  llb_status st = llb_metrics_create(&am->metrics);
  if (st == LLB_STATUS_OK) st = llb_metrics_add_const_label(am->metrics, "engine", am->common.engine_id);
  if (st == LLB_STATUS_OK) st = llb_metrics_register_process(am->metrics);
  if (st != LLB_STATUS_OK || am->common.metrics_port == 0) return st;
  if (bus_metrics_http_start(am->common.metrics_host, am->common.metrics_port, am->metrics, &am->metrics_http) !=
      LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_WARN("metrics_listen_failed", "host=%s port=%d error=%s", am->common.metrics_host,
                  (int)am->common.metrics_port, llb_log_quote(q, sizeof q, llb_err_last()));
    return LLB_STATUS_OK;
  }
  LLB_LOG_INFO("metrics_listening", "host=%s port=%d path=/metrics", am->common.metrics_host,
               bus_metrics_http_port(am->metrics_http));
  return LLB_STATUS_OK;
}

static int run_parsed(struct actor_main *am);

static void metrics_stop(struct actor_main *am) {
  bus_metrics_http_stop(am->metrics_http);
  am->metrics_http = NULL;
  llb_metrics_destroy(am->metrics);
  am->metrics = NULL;
}

/* --hash-key-file into am->hash_key (a private file, as the NATS password's), else a random key
 * of this process: hashes it makes are then its own, safe but not shared. */
static llb_status load_hash_key(struct actor_main *am) {
  if (!am->common.hash_key_file) {
    llb_hash_key_generate(&am->hash_key);
    return LLB_STATUS_OK;
  }
  char text[BUS_PASSWORD_MAX + 1];
  llb_status st = bus_password_file_read(am->common.hash_key_file, text, sizeof text);
  if (st == LLB_STATUS_OK) st = llb_hash_key_from_hex(text, &am->hash_key);
  memset(text, 0, sizeof text);
  if (st != LLB_STATUS_OK)
    return LLB_ERRF(st, "--hash-key-file %s: %s", am->common.hash_key_file, llb_err_last());
  am->has_hash_key = true;
  return LLB_STATUS_OK;
}

/* An engine's actor beats on its engine's health subject too (actor_main_spec.engine_scoped). */
static llb_status beat_on_engine_subject(struct actor_main *am) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine_health(am->common.prefix, am->common.engine_id, am->spec->actor, subject,
                                            sizeof subject);
  return st ? st : bus_heartbeat_also(am->bus, subject);
}

int actor_main_exec(const struct actor_main_spec *spec, int argc, char **argv) {
  if (!spec || !spec->actor || !spec->start) {
    fprintf(stderr, "actor_main_exec: spec needs an actor name and a start hook\n");
    return ACTOR_MAIN_EXIT_FAILURE;
  }
  struct actor_main am_storage;
  memset(&am_storage, 0, sizeof am_storage);
  struct actor_main *am = &am_storage;
  am->spec = spec;
  am->start_ns = llb_now_ns();
  atomic_init(&am->ready, false);
  atomic_init(&am->inflight, 0);
  atomic_init(&am->heartbeat_seq, 0);
  atomic_init(&am->kv_num_blocks, 0);
  atomic_init(&am->kv_block_size, 0);
  atomic_init(&am->fail_exit, false);
  init_common(am);

  int rc = parse_args(am, argc, argv);
  if (rc == FLAGS_CONTINUE) rc = run_parsed(am);
  flag_args_free(&am->args);
  return rc;
}

/* Everything after the flags (see actor_main.h): checks, metrics, connect, start, run, stop. */
static int run_parsed(struct actor_main *am) {
  const struct actor_main_spec *spec = am->spec;
  llb_log_set_actor(spec->actor);
  set_log_context(am);
  llb_status cst = apply_log_level(am->common.log_level);
  if (cst == LLB_STATUS_OK) cst = bus_name_check(BUS_NAME_KIND_PREFIX, "--prefix", am->common.prefix);
  if (cst == LLB_STATUS_OK) cst = bus_name_check(BUS_NAME_KIND_TOKEN, "--engine-id", am->common.engine_id);
  if (cst == LLB_STATUS_OK) cst = bus_name_check(BUS_NAME_KIND_TOKEN, "--instance", am->common.instance);
  if (cst == LLB_STATUS_OK) cst = load_hash_key(am);
  if (cst == LLB_STATUS_OK && am->common.heartbeat_ms <= 0)
    cst = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--heartbeat-ms must be > 0");
  if (cst == LLB_STATUS_OK && (am->common.metrics_port < 0 || am->common.metrics_port > 65535))
    cst = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--metrics-port must be in 0..65535");
  if (cst == LLB_STATUS_OK && !(am->common.trace_sample_ratio >= 0 && am->common.trace_sample_ratio <= 1))
    cst = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--trace-sample-ratio must be in [0, 1]");
  if (cst != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", spec->actor, llb_err_last());
    return ACTOR_MAIN_EXIT_USAGE;
  }
  if (metrics_start(am) != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", spec->actor, llb_err_last());
    return ACTOR_MAIN_EXIT_FAILURE;
  }
  if (spec->configure && spec->configure(am, spec->user) != LLB_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", spec->actor, llb_err_last());
    metrics_stop(am);
    return ACTOR_MAIN_EXIT_USAGE;
  }

  struct bus_options o;
  bus_options_init(&o);
  o.urls = am->common.nats_url;
  o.name = spec->program ? spec->program : spec->actor;
  o.prefix = am->common.prefix;
  o.creds_file = am->common.creds_file;
  o.metrics = am->metrics;
  char password[BUS_PASSWORD_MAX + 1] = "";
  llb_status st = LLB_STATUS_OK;
  if ((am->common.nats_user != NULL) != (am->common.nats_password_file != NULL))
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--nats-user and --nats-password-file go together");
  else if (am->common.nats_password_file)
    st = bus_password_file_read(am->common.nats_password_file, password, sizeof password);
  if (st == LLB_STATUS_OK && am->common.nats_user) {
    o.user = am->common.nats_user;
    o.password = password;
  }
  if (st == LLB_STATUS_OK) st = bus_connect(&o, &am->bus);
  memset(password, 0, sizeof password);
  if (st != LLB_STATUS_OK) {
    char q[512], u[512];
    LLB_LOG_ERROR("connect_failed", "url=%s user=%s status=%s error=%s",
                  llb_log_redact_url(u, sizeof u, am->common.nats_url),
                  am->common.nats_user ? am->common.nats_user : "none", llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
    if (spec->destroy) spec->destroy(am, spec->user);
    metrics_stop(am);
    return ACTOR_MAIN_EXIT_FAILURE;
  }
  bus_trace_set_sample_ratio(am->common.trace_sample_ratio);
  struct bus_tracing_options to;
  bus_tracing_options_init(&to);
  to.otlp_endpoint = am->common.otlp_endpoint;
  to.publish = am->common.trace_publish;
  to.service_name = spec->actor;
  to.instance = am->common.instance;
  to.engine_id = am->common.engine_id;
  st = bus_tracing_start(am->bus, &to);
  if (st != LLB_STATUS_OK) { /* a bad endpoint URL: a usage error, said before anything runs */
    fprintf(stderr, "%s: %s\n", spec->actor, llb_err_last());
    bus_destroy(am->bus);
    if (spec->destroy) spec->destroy(am, spec->user);
    (void)bus_shutdown(ACTOR_MAIN_SHUTDOWN_WAIT_MS);
    return ACTOR_MAIN_EXIT_USAGE;
  }
  char url[256];
  bus_connected_url(am->bus, url, sizeof url);
  LLB_LOG_INFO("connected", "url=%s prefix=%s engine_id=%s instance=%s", url, am->common.prefix,
               am->common.engine_id, am->common.instance);

  int rc = ACTOR_MAIN_EXIT_OK;
  st = spec->start(am, spec->user);
  if (st != LLB_STATUS_OK && bus_stop_requested(am->bus)) { /* SIGTERM while starting: a clean stop */
    LLB_LOG_INFO("stopped_during_start", "status=%s", llb_strerror(st));
    goto out;
  }
  if (st != LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_ERROR("start_failed", "status=%s error=%s", llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
    rc = ACTOR_MAIN_EXIT_FAILURE;
    goto out;
  }
  atomic_store(&am->ready, true);
  st = bus_heartbeat_start(am->bus, spec->actor, am->common.instance, am->common.heartbeat_ms,
                           HEARTBEAT_CAP_BYTES, heartbeat_fill, am);
  if (st != LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_ERROR("heartbeat_failed", "status=%s error=%s", llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
    rc = ACTOR_MAIN_EXIT_FAILURE;
    goto out;
  }
  if (spec->engine_scoped && (st = beat_on_engine_subject(am)) != LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_ERROR("heartbeat_failed", "status=%s error=%s", llb_strerror(st),
                  llb_log_quote(q, sizeof q, llb_err_last()));
    rc = ACTOR_MAIN_EXIT_FAILURE;
    goto out;
  }
  const int64_t publish_ms = am->common.metrics_publish_ms ? am->common.metrics_publish_ms : am->common.heartbeat_ms;
  if (publish_ms > 0 &&
      bus_metrics_publish_start(am->bus, spec->actor, am->common.instance, publish_ms, am->metrics) != LLB_STATUS_OK) {
    char q[512]; /* the engine's work does not depend on being scraped */
    LLB_LOG_WARN("metrics_publish_failed", "error=%s", llb_log_quote(q, sizeof q, llb_err_last()));
  }
  LLB_LOG_INFO("ready", "actor=%s", spec->actor);
  st = bus_actor_run(am->bus);
  atomic_store(&am->ready, false);
  if (st != LLB_STATUS_OK) {
    LLB_LOG_WARN("drain_incomplete", "status=%s", llb_strerror(st));
    rc = ACTOR_MAIN_EXIT_FAILURE;
  }
  if (atomic_load(&am->fail_exit)) rc = ACTOR_MAIN_EXIT_FAILURE;
out:
  if (spec->stop) spec->stop(am, spec->user);
  bus_destroy(am->bus);
  am->bus = NULL;
  geometry_watch_free(am->geometry_watch); /* no handler runs once the bus is gone */
  if (spec->destroy) spec->destroy(am, spec->user);
  metrics_stop(am);
  /* The NATS client ends its threads after bus_destroy (the drain's closing thread releases
   * the connection last): wait for them, so none runs while the process exits. */
  if (bus_shutdown(ACTOR_MAIN_SHUTDOWN_WAIT_MS) != LLB_STATUS_OK) {
    char q[512];
    LLB_LOG_WARN("bus_shutdown_incomplete", "error=%s", llb_log_quote(q, sizeof q, llb_err_last()));
  }
  LLB_LOG_INFO("exit", "code=%d", rc);
  return rc;
}

llb_status actor_main_engine_subject(const struct actor_main *am, const char *kind, char *buf,
                                     size_t cap) {
  return bus_subject_engine(am->common.prefix, am->common.engine_id, kind, buf, cap);
}

void actor_main_set_ready(struct actor_main *am, bool ready) { atomic_store(&am->ready, ready); }

void actor_main_set_inflight(struct actor_main *am, int32_t inflight) {
  atomic_store(&am->inflight, inflight);
}

void actor_main_set_lora_source(struct actor_main *am,
                                 const struct llb_lora_adapter *(*lock)(void *user, int32_t *num),
                                 void (*unlock)(void *user), void *user) {
  am->lora_unlock = unlock;
  am->lora_user = user;
  am->lora_lock = lock;
}

void actor_main_set_kv_geometry(struct actor_main *am, int32_t num_blocks, int32_t block_size) {
  atomic_store(&am->kv_num_blocks, num_blocks);
  atomic_store(&am->kv_block_size, block_size);
}

/* True (and the geometry set) when msg is a ready heartbeat of this engine's worker with a
 * geometry inside the bounds. */
/* A ready beat of this engine's worker with a sane geometry: *num_blocks, *block_size and, when
 * seen is not NULL, the worker's instance, pid and seq into it. */
static bool worker_geometry(const struct actor_main *am, const struct bus_msg *msg, struct llb_arena *arena,
                            int32_t *num_blocks, int32_t *block_size, struct actor_main *seen) {
  struct llb_heartbeat hb;
  llb_arena_reset(arena);
  if (llb_heartbeat_decode(msg->data, msg->len, arena, &hb) != LLB_STATUS_OK) return false;
  const size_t n = strlen(am->common.engine_id);
  if (!hb.ready || hb.actor.len != strlen("gpu_worker") || memcmp(hb.actor.data, "gpu_worker", hb.actor.len) != 0 ||
      hb.engine_id.len != n ||
      memcmp(hb.engine_id.data, am->common.engine_id, n) != 0)
    return false;
  if (hb.num_gpu_blocks < 1 || hb.num_gpu_blocks > ACTOR_MAIN_MAX_KV_BLOCKS || hb.block_size < 1 ||
      hb.block_size > ACTOR_MAIN_MAX_BLOCK_SIZE)
    return false;
  *num_blocks = hb.num_gpu_blocks, *block_size = hb.block_size;
  if (seen && hb.instance.len < sizeof seen->kv_worker_instance && strlen(hb.instance.data) == hb.instance.len) {
    memcpy(seen->kv_worker_instance, hb.instance.data, hb.instance.len + 1);
    seen->kv_worker_pid = hb.pid, seen->kv_worker_seq = hb.seq;
  }
  return true;
}

bool actor_main_kv_geometry_worker(const struct actor_main *am, struct peer_beat *out) {
  if (!am->kv_worker_instance[0]) return false;
  *out = (struct peer_beat){.instance = am->kv_worker_instance, .pid = am->kv_worker_pid,
                            .seq = am->kv_worker_seq, .ready = true};
  return true;
}

struct geometry_watch {
  struct actor_main *am;
  int32_t num_blocks, block_size; /* adopted */
  struct llb_arena arena;         /* one delivery thread per subscription */
};

static void geometry_watch_free(struct geometry_watch *w) {
  if (!w) return;
  llb_arena_destroy(&w->arena);
  free(w);
}

static void on_worker_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct geometry_watch *w = user;
  int32_t nb, bs;
  if (!worker_geometry(w->am, msg, &w->arena, &nb, &bs, NULL) || (nb == w->num_blocks && bs == w->block_size)) return;
  if (atomic_exchange(&w->am->fail_exit, true)) return;
  LLB_LOG_ERROR("kv_geometry_changed", "adopted_num_blocks=%d adopted_block_size=%d worker_num_blocks=%d "
                "worker_block_size=%d action=restart", w->num_blocks, w->block_size, nb, bs);
  bus_stop(bus);
}

/* One not-ready heartbeat of this (starting) actor on its own health subject: the engine's
 * worker answers a peer it sees starting with a heartbeat at once (actor_main_answer_hellos),
 * so the geometry comes without waiting out the worker's --heartbeat-ms. */
static void publish_hello(struct actor_main *am) {
  uint8_t buf[HEARTBEAT_CAP_BYTES];
  char subject[BUS_SUBJECT_MAX], engine_subject[BUS_SUBJECT_MAX];
  size_t len = 0;
  if (bus_subject_health(am->common.prefix, am->spec->actor, am->common.instance, subject, sizeof subject) ||
      bus_subject_engine_health(am->common.prefix, am->common.engine_id, am->spec->actor, engine_subject,
                                sizeof engine_subject) ||
      heartbeat_fill(am, buf, sizeof buf, &len) || bus_publish(am->bus, subject, buf, len, NULL) ||
      bus_publish(am->bus, engine_subject, buf, len, NULL)) {
    char q[400];
    LLB_LOG_DEBUG("hello_failed", "error=%s", llb_log_quote(q, sizeof q, llb_err_last()));
  }
}

#define HELLO_EVERY_MS 250

static llb_status geometry_wait_loop(struct actor_main *am, struct bus_sub *sub, int64_t timeout_ms,
                                     int32_t *num_blocks, int32_t *block_size) {
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  const int64_t end_ns = llb_now_ns() + timeout_ms * 1000000;
  int64_t hello_ns = 0;
  llb_status st = LLB_STATUS_TIMEOUT;
  while (st == LLB_STATUS_TIMEOUT && llb_now_ns() < end_ns) {
    if (bus_stop_requested(am->bus)) {
      st = LLB_ERRF(LLB_STATUS_ABORTED, "stopped while waiting for the worker's KV geometry");
      break;
    }
    if (llb_now_ns() - hello_ns >= HELLO_EVERY_MS * 1000000LL) { /* the worker may be starting too */
      publish_hello(am);
      hello_ns = llb_now_ns();
    }
    struct bus_msg *msg = NULL;
    const int64_t left_ms = (end_ns - llb_now_ns()) / 1000000;
    st = bus_sub_next_msg(sub, left_ms < 100 ? (left_ms > 0 ? left_ms : 1) : 100, &msg);
    if (st == LLB_STATUS_OK) {
      st = worker_geometry(am, msg, &arena, num_blocks, block_size, am) ? LLB_STATUS_OK : LLB_STATUS_TIMEOUT;
      bus_msg_destroy(msg);
    }
  }
  llb_arena_destroy(&arena);
  return st;
}

llb_status actor_main_wait_kv_geometry(struct actor_main *am, int64_t timeout_ms, int32_t *num_blocks,
                                       int32_t *block_size) {
  char subject[BUS_SUBJECT_MAX];
  /* this engine's worker beats: its engine's health subject */
  llb_status st = bus_subject_engine_health(am->common.prefix, am->common.engine_id, "gpu_worker", subject,
                                            sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  struct bus_sub *sub = NULL;
  st = bus_subscribe_sync(am->bus, subject, &sub);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("kv_geometry_wait", "subject=%s engine_id=%s timeout_ms=%lld", subject, am->common.engine_id,
               (long long)timeout_ms);
  st = geometry_wait_loop(am, sub, timeout_ms, num_blocks, block_size);
  bus_unsubscribe(sub);
  if (st == LLB_STATUS_TIMEOUT)
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "--num-blocks 0: no gpu_worker of engine %s announced its KV blocks on %s "
                    "within %lld ms", am->common.engine_id, subject, (long long)timeout_ms);
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("kv_geometry", "num_blocks=%d block_size=%d source=gpu_worker", *num_blocks, *block_size);
  /* keep watching (lives as long as the process: the bus keeps the handler's user pointer) */
  struct geometry_watch *w = calloc(1, sizeof *w);
  if (!w) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "geometry watch");
  *w = (struct geometry_watch){.am = am, .num_blocks = *num_blocks, .block_size = *block_size};
  llb_arena_init(&w->arena, NULL, 0);
  am->geometry_watch = w;
  return bus_subscribe(am->bus, subject, NULL, on_worker_heartbeat, w, NULL);
}

/* A heartbeat now, at most one per HELLO_ANSWER_GAP_MS (any delivery thread). Before the
 * periodic beats start it does nothing: they beat at once anyway. */
#define HELLO_ANSWER_GAP_MS 100

static void beat_now_rate_limited(struct actor_main *am, struct bus *bus) {
  const int64_t now = llb_now_ns(), last = atomic_load(&am->hello_answered_ns);
  if (now - last >= HELLO_ANSWER_GAP_MS * 1000000LL &&
      atomic_compare_exchange_strong(&am->hello_answered_ns, &(int64_t){last}, now))
    (void)bus_heartbeat_now(bus);
}

static llb_status subscribe_health(struct actor_main *am, const char *peer, bus_handler_fn fn) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_pattern_health(am->common.prefix, peer, subject, sizeof subject);
  return st ? st : bus_subscribe(am->bus, subject, NULL, fn, am, NULL);
}

/* Delivery thread: a not-ready beat of this engine's scheduler or kv_manager (one starting,
 * maybe waiting for the geometry, or an engine recovering) gets a heartbeat at once.
 * Untrusted: only a decodable beat of our engine counts. */
static void on_peer_hello(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct actor_main *am = user;
  uint8_t mem[2048];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_heartbeat hb;
  const size_t n = strlen(am->common.engine_id);
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) == LLB_STATUS_OK && !hb.ready &&
      hb.engine_id.len == n && memcmp(hb.engine_id.data, am->common.engine_id, n) == 0)
    beat_now_rate_limited(am, bus);
  llb_arena_destroy(&arena);
}

llb_status actor_main_answer_hellos(struct actor_main *am) {
  llb_status st = LLB_STATUS_OK;
  static const char *const peers[] = {"scheduler", "kv_manager"};
  for (int i = 0; i < 2 && !st; i++) { /* this engine's own: not every engine's */
    char subject[BUS_SUBJECT_MAX];
    st = bus_subject_engine_health(am->common.prefix, am->common.engine_id, peers[i], subject, sizeof subject);
    if (!st) st = bus_subscribe(am->bus, subject, NULL, on_peer_hello, am, NULL);
  }
  return st;
}

/* Delivery thread: a beat of a front door that started less than NEW_PEER_ANSWER_S ago gets a
 * heartbeat at once, not rate limited (front doors beat every --heartbeat-ms: a few answers per
 * start), so that one starting beside others learns what this actor announces (a worker's LoRA
 * adapters) within milliseconds, not --heartbeat-ms later. */
#define NEW_PEER_ANSWER_S 5.0

static void on_new_peer(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)user;
  uint8_t mem[2048];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_heartbeat hb;
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) == LLB_STATUS_OK && hb.uptime_s >= 0 &&
      hb.uptime_s < NEW_PEER_ANSWER_S)
    (void)bus_heartbeat_now(bus);
  llb_arena_destroy(&arena);
}

llb_status actor_main_answer_new_peers(struct actor_main *am, const char *peer) {
  return subscribe_health(am, peer, on_new_peer);
}

/* Delivery thread: a beat of the watched peer within RECONNECT_ANSWER_MS of this actor's own
 * reconnect (noticed at the first such beat) is answered with a heartbeat at once. */
#define RECONNECT_ANSWER_MS 2000

static void on_peer_after_reconnect(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)msg;
  struct actor_main *am = user;
  const uint64_t n = bus_num_reconnects(bus);
  const int64_t now = llb_now_ns();
  if (n == 0) return;
  if (atomic_exchange(&am->answered_reconnects, n) != n)
    atomic_store(&am->answer_until_ns, now + RECONNECT_ANSWER_MS * 1000000LL);
  if (now <= atomic_load(&am->answer_until_ns)) beat_now_rate_limited(am, bus);
}

llb_status actor_main_answer_after_reconnect(struct actor_main *am, const char *peer) {
  return subscribe_health(am, peer, on_peer_after_reconnect);
}
