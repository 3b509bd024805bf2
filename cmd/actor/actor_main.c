/* The shared actor main: flags, connect, heartbeat, run, drain (see actor_main.h). */
#include "cmd/actor/actor_main.h"

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
/* Returned by parse_args when the program should go on. */
#define ACTOR_MAIN_CONTINUE (-1)

#define HEARTBEAT_CAP_BYTES 1024
/* Bound on waiting for the NATS client's own threads to end before the process exits. */
#define ACTOR_MAIN_SHUTDOWN_WAIT_MS 5000

llb_status actor_main_parse_int64(const char *value, int64_t min, int64_t max, int64_t *out) {
  if (!value || !*value)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "expected an integer, got an empty value");
  errno = 0;
  char *end = NULL;
  long long v = strtoll(value, &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "'%s' is not an integer in [%" PRId64 ", %" PRId64 "]", value, min, max);
  *out = (int64_t)v;
  return LLB_STATUS_OK;
}

static llb_status parse_double(const char *value, double *out) {
  errno = 0;
  char *end = NULL;
  double v = strtod(value, &end);
  if (!*value || errno != 0 || *end != '\0')
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "'%s' is not a number", value);
  *out = v;
  return LLB_STATUS_OK;
}

/* The common flags as a table over am->common, so one parser serves both lists. */
enum { NUM_COMMON_FLAGS = 15 };
static void common_flags_table(struct actor_main *am, struct actor_flag *t) {
  struct actor_common_flags *c = &am->common;
  const struct actor_flag table[NUM_COMMON_FLAGS] = {
      {"nats", ACTOR_FLAG_KIND_STRING, &c->nats_url, "NATS server URL(s), comma-separated", NULL},
      {"prefix", ACTOR_FLAG_KIND_STRING, &c->prefix, "subject prefix", NULL},
      {"engine-id", ACTOR_FLAG_KIND_STRING, &c->engine_id, "engine id (<eid> in llm.engine.<eid>.*)",
       NULL},
      {"instance", ACTOR_FLAG_KIND_STRING, &c->instance, "instance name in the health subject",
       NULL},
      {"model", ACTOR_FLAG_KIND_STRING, &c->model_path, "GGUF model path", NULL},
      {"creds", ACTOR_FLAG_KIND_STRING, &c->creds_file, "NATS credentials file (.creds)", NULL},
      {"nats-user", ACTOR_FLAG_KIND_STRING, &c->nats_user, "NATS user (with --nats-password-file)", NULL},
      {"nats-password-file", ACTOR_FLAG_KIND_STRING, &c->nats_password_file,
       "file holding the NATS user's password (mode 0600; never on the command line)", NULL},
      {"log-level", ACTOR_FLAG_KIND_STRING, &c->log_level, "debug|info|warn|error", NULL},
      {"heartbeat-ms", ACTOR_FLAG_KIND_INT64, &c->heartbeat_ms, "heartbeat interval, ms", NULL},
      {"metrics-port", ACTOR_FLAG_KIND_INT32, &c->metrics_port, "Prometheus GET /metrics port (0 = none)", NULL},
      {"metrics-host", ACTOR_FLAG_KIND_STRING, &c->metrics_host, "address of the metrics listener", NULL},
      {"otlp-endpoint", ACTOR_FLAG_KIND_STRING, &c->otlp_endpoint,
       "export spans as OTLP/HTTP JSON to URL/v1/traces (http://host:port)", NULL},
      {"trace-sample-ratio", ACTOR_FLAG_KIND_DOUBLE, &c->trace_sample_ratio,
       "fraction of new traces sampled (requests arriving with a traceparent keep its flag)", NULL},
      {"trace-publish", ACTOR_FLAG_KIND_BOOL, &c->trace_publish,
       "also publish span batches (OTLP JSON) on <prefix>.trace.<actor>", NULL},
  };
  memcpy(t, table, sizeof table);
}

static void print_flag(FILE *f, const struct actor_flag *fl) {
  char head[64];
  snprintf(head, sizeof head, "--%s%s", fl->name,
           fl->kind == ACTOR_FLAG_KIND_BOOL ? "" : " VALUE");
  fprintf(f, "  %-28s %s", head, fl->help ? fl->help : "");
  switch (fl->kind) {
  case ACTOR_FLAG_KIND_INT32: fprintf(f, " (default %" PRId32 ")", *(int32_t *)fl->target); break;
  case ACTOR_FLAG_KIND_INT64: fprintf(f, " (default %" PRId64 ")", *(int64_t *)fl->target); break;
  case ACTOR_FLAG_KIND_DOUBLE: fprintf(f, " (default %g)", *(double *)fl->target); break;
  case ACTOR_FLAG_KIND_STRING: {
    const char *v = *(const char **)fl->target;
    if (v) fprintf(f, " (default %s)", v);
    break;
  }
  case ACTOR_FLAG_KIND_BOOL:
  case ACTOR_FLAG_KIND_CUSTOM: break;
  }
  fputc('\n', f);
}

static void print_usage(FILE *f, struct actor_main *am, const struct actor_flag *common) {
  const struct actor_main_spec *s = am->spec;
  fprintf(f, "usage: %s [flags]\n%s%s", s->program ? s->program : s->actor,
          s->summary ? s->summary : "", s->summary ? "\n" : "");
  fprintf(f, "\ncommon flags:\n");
  for (int i = 0; i < NUM_COMMON_FLAGS; i++) print_flag(f, &common[i]);
  fprintf(f, "  %-28s %s\n", "--help", "print this help and exit");
  if (s->num_flags > 0) {
    fprintf(f, "\n%s flags:\n", s->actor);
    for (int i = 0; i < s->num_flags; i++) print_flag(f, &s->flags[i]);
  }
}

static llb_status set_flag(const struct actor_flag *fl, const char *value) {
  int64_t v = 0;
  llb_status st = LLB_STATUS_OK;
  switch (fl->kind) {
  case ACTOR_FLAG_KIND_BOOL: *(bool *)fl->target = true; break;
  case ACTOR_FLAG_KIND_INT32:
    st = actor_main_parse_int64(value, INT32_MIN, INT32_MAX, &v);
    if (st == LLB_STATUS_OK) *(int32_t *)fl->target = (int32_t)v;
    break;
  case ACTOR_FLAG_KIND_INT64:
    st = actor_main_parse_int64(value, INT64_MIN, INT64_MAX, &v);
    if (st == LLB_STATUS_OK) *(int64_t *)fl->target = v;
    break;
  case ACTOR_FLAG_KIND_DOUBLE: st = parse_double(value, (double *)fl->target); break;
  case ACTOR_FLAG_KIND_STRING: *(const char **)fl->target = value; break;
  case ACTOR_FLAG_KIND_CUSTOM:
    if (!fl->set) return LLB_ERRF(LLB_STATUS_INTERNAL, "--%s has no setter", fl->name);
    st = fl->set(value, fl->target);
    break;
  }
  return st;
}

static const struct actor_flag *find_flag(const struct actor_flag *common,
                                          const struct actor_main_spec *s, const char *name,
                                          size_t len) {
  for (int i = 0; i < NUM_COMMON_FLAGS; i++)
    if (strlen(common[i].name) == len && strncmp(common[i].name, name, len) == 0) return &common[i];
  for (int i = 0; i < s->num_flags; i++)
    if (strlen(s->flags[i].name) == len && strncmp(s->flags[i].name, name, len) == 0)
      return &s->flags[i];
  return NULL;
}

/* Returns ACTOR_MAIN_CONTINUE, or an exit code (0 after --help, 2 on a usage error). */
static int parse_args(struct actor_main *am, int argc, char **argv) {
  struct actor_flag common[NUM_COMMON_FLAGS];
  common_flags_table(am, common);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      print_usage(stdout, am, common);
      return ACTOR_MAIN_EXIT_OK;
    }
    if (strncmp(arg, "--", 2) != 0) {
      fprintf(stderr, "%s: unexpected argument '%s'\n\n", am->spec->actor, arg);
      print_usage(stderr, am, common);
      return ACTOR_MAIN_EXIT_USAGE;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
    const struct actor_flag *fl = find_flag(common, am->spec, name, name_len);
    if (!fl) {
      fprintf(stderr, "%s: unknown flag '--%.*s'\n\n", am->spec->actor, (int)name_len, name);
      print_usage(stderr, am, common);
      return ACTOR_MAIN_EXIT_USAGE;
    }
    const char *value = NULL;
    if (fl->kind == ACTOR_FLAG_KIND_BOOL) {
      if (eq) {
        fprintf(stderr, "%s: --%s takes no value\n", am->spec->actor, fl->name);
        return ACTOR_MAIN_EXIT_USAGE;
      }
    } else if (eq) {
      value = eq + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fprintf(stderr, "%s: --%s needs a value\n", am->spec->actor, fl->name);
      return ACTOR_MAIN_EXIT_USAGE;
    }
    if (set_flag(fl, value) != LLB_STATUS_OK) {
      fprintf(stderr, "%s: --%s: %s\n", am->spec->actor, fl->name, llb_err_last());
      return ACTOR_MAIN_EXIT_USAGE;
    }
  }
  return ACTOR_MAIN_CONTINUE;
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
  };
  return llb_heartbeat_encode(&hb, buf, cap, len);
}

static void init_common(struct actor_main *am) {
  if (gethostname(am->host_buf, sizeof am->host_buf) != 0) snprintf(am->host_buf, sizeof am->host_buf, "host");
  am->host_buf[sizeof am->host_buf - 1] = '\0';
  snprintf(am->instance_buf, sizeof am->instance_buf, "%s-%ld", am->host_buf, (long)getpid());
  /* A subject token has no '.', '*', '>' or spaces: hostnames may have dots. */
  for (char *p = am->instance_buf; *p; p++)
    if (*p == '.' || *p == '*' || *p == '>' || *p == ' ') *p = '-';
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

static void metrics_stop(struct actor_main *am) {
  bus_metrics_http_stop(am->metrics_http);
  am->metrics_http = NULL;
  llb_metrics_destroy(am->metrics);
  am->metrics = NULL;
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
  if (rc != ACTOR_MAIN_CONTINUE) return rc;
  llb_log_set_actor(spec->actor);
  set_log_context(am);
  if (apply_log_level(am->common.log_level) != LLB_STATUS_OK ||
      bus_prefix_check(am->common.prefix) != LLB_STATUS_OK ||
      !bus_token_valid(am->common.engine_id) || !bus_token_valid(am->common.instance) ||
      am->common.heartbeat_ms <= 0 || am->common.metrics_port < 0 || am->common.metrics_port > 65535 ||
      !(am->common.trace_sample_ratio >= 0 && am->common.trace_sample_ratio <= 1)) {
    if (!bus_token_valid(am->common.engine_id))
      LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--engine-id '%s' is not a subject token",
               am->common.engine_id);
    else if (!bus_token_valid(am->common.instance))
      LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--instance '%s' is not a subject token",
               am->common.instance);
    else if (am->common.heartbeat_ms <= 0)
      LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--heartbeat-ms must be > 0");
    else if (am->common.metrics_port < 0 || am->common.metrics_port > 65535)
      LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--metrics-port must be in 0..65535");
    else
      LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--trace-sample-ratio must be in [0, 1]");
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

  rc = ACTOR_MAIN_EXIT_OK;
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

void actor_main_set_kv_geometry(struct actor_main *am, int32_t num_blocks, int32_t block_size) {
  atomic_store(&am->kv_num_blocks, num_blocks);
  atomic_store(&am->kv_block_size, block_size);
}

/* True (and the geometry set) when msg is a ready heartbeat of this engine's worker with a
 * geometry inside the bounds. */
static bool worker_geometry(const struct actor_main *am, const struct bus_msg *msg, struct llb_arena *arena,
                            int32_t *num_blocks, int32_t *block_size) {
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
  if (!worker_geometry(w->am, msg, &w->arena, &nb, &bs) || (nb == w->num_blocks && bs == w->block_size)) return;
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
      st = worker_geometry(am, msg, &arena, num_blocks, block_size) ? LLB_STATUS_OK : LLB_STATUS_TIMEOUT;
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
  if (snprintf(subject, sizeof subject, "%s.health.%s.*", am->common.prefix, peer) >= (int)sizeof subject)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "prefix '%s' too long", am->common.prefix);
  return bus_subscribe(am->bus, subject, NULL, fn, am, NULL);
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
