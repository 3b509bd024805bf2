/* nats.conf, users and passwords of `llmbus serve` (see serve_nats_config.h). */
#include "cmd/supervisor/serve_nats_config.h"

#include <crypt.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "actors/input_processor/tenant_limits.h"
#include "base/log.h"
#include "bus/subject.h"
#include "cmd/supervisor/run_dir.h"

#define PASSWORD_BYTES 32
#define MAX_USERS (8 + SERVE_NATS_MAX_TENANTS)
#define BCRYPT_HASH_MAX 128 /* "$2b$06$" + 53 characters */

/* Who may publish and subscribe where: docs/design.md §2, one row per actor. "P" stands for the
 * prefix. Every actor publishes its own heartbeat and may watch everyone's (health is how
 * failures and the KV geometry are seen); an engine's actors beat on their engine's
 * P.engine.<eid>.health.<actor> too (each only on its own actor's), where the engine's
 * scheduler, kv_manager and worker listen; and its span batches on P.trace.<actor>
 * (--trace-publish), which the operator may read. Replies to requests an actor received need no
 * publish permission of their own: allow_responses opens exactly those reply subjects. */
#define MAX_SUBJECTS 16
static const struct user_perms {
  const char *user;       /* child name in serve (cmd/supervisor/serve.c) */
  const char *account;    /* ENGINE or FRONT */
  const char *pub[MAX_SUBJECTS];
  const char *sub[MAX_SUBJECTS];
  bool allow_responses;
} user_perms[] = {
    {"kv-manager", "ENGINE", {"P.health.kv_manager.>", "P.engine.*.health.kv_manager", "P.trace.kv_manager"},
     {"P.engine.*.kv", "P.health.>", "P.engine.*.health.*"}, true},
    /* disaggregated prefill/decode: a decode engine's worker fetches KV blocks from a prefill
     * engine's worker (request/reply on P.engine.<eid>.kv_fetch; actors/gpu_worker/kv_transfer.h) */
    {"gpu-worker", "ENGINE", {"P.health.gpu_worker.>", "P.engine.*.health.gpu_worker", "P.trace.gpu_worker",
                              "P.engine.*.kv_fetch"},
     {"P.engine.*.execute", "P.lora.update", "P.health.>", "P.engine.*.health.*", "P.engine.*.kv_fetch", "_INBOX.>"},
     true},
    /* durable requests: its JetStream pull consumer ($JS.API: create, next; $JS.ACK: acks and
     * in-progress), the dead-letter subject, and the output processor's resync requests; a
     * prefill engine's hand-offs to a decode engine's requests (actors/scheduler/handoff.h) */
    {"scheduler", "ENGINE",
     {"P.engine.*.kv", "P.engine.*.encoder", "P.engine.*.execute", "P.engine.*.outputs", "P.engine.*.stats",
      "P.engine.*.dead_letter", "P.engine.*.history", "$JS.API.>", "$JS.ACK.>", "P.health.scheduler.>",
      "P.engine.*.health.scheduler", "P.trace.scheduler", "P.engine.*.requests"},
     {"P.engine.*.requests", "P.engine.*.abort", "P.engine.*.resync", "_INBOX.>", "P.health.>", "P.engine.*.health.*"},
     true},
    /* RequestOutputs go to the reply subject the input processor carried in the
     * EngineCoreRequest: in ENGINE that is always a service-import reply (_R_.…). It answers
     * a restarted scheduler's history requests (allow_responses). */
    {"output-processor", "ENGINE",
     {"_R_.>", "P.engine.*.abort", "P.engine.*.resync", "P.health.output_processor.>",
      "P.engine.*.health.output_processor", "P.trace.output_processor"},
     {"P.engine.*.outputs", "P.engine.*.history", "_INBOX.>", "P.health.>"}, true},
    /* it routes by the engines' stats (docs/design.md §9) and reads the outputs for per-tenant
     * limits: a request's first token and its end */
    /* durable: stores each request in the JetStream stream ($JS.API for the stream, the
     * store's confirmation on its inbox) */
    {"input-processor", "ENGINE",
     {"P.engine.*.requests", "P.engine.*.abort", "$JS.API.>", "P.health.input_processor.>", "P.trace.input_processor"},
     {"P.generate.*", "P.abort.*", "P.tokenize.*", "P.engine.*.stats", "P.engine.*.outputs", "_INBOX.>", "P.health.>"},
     true},
    {"encoder-cache", "ENGINE", {"P.health.encoder_cache.>", "P.engine.*.health.encoder_cache", "P.trace.encoder_cache"},
     {"P.engine.*.encoder", "P.health.>"}, true},
    /* the front door: the tenants' three services (it establishes the tenant from the API key),
     * its replies, the engines' load, everyone's beats (/health) and published metrics (its
     * one-scrape /metrics): nothing of the engine's */
    {"api-server", "FRONT", {"P.generate.*", "P.abort.*", "P.tokenize.*", "P.lora.update", "P.health.api_server.>",
                             "P.trace.api_server"},
     {"_INBOX.>", "P.engine.*.stats", "P.health.*.*", "P.health.*.*.metrics"}, false},
    /* `llmbus run`, `llmbus status` and the operator's own clients */
    {"operator", "FRONT", {"P.generate.*", "P.abort.*", "P.tokenize.*"},
     {"_INBOX.>", "P.engine.*.stats", "P.health.>", "P.trace.>"}, false},
};
#define NUM_USER_PERMS (int)(sizeof user_perms / sizeof user_perms[0])

struct serve_nats_auth {
  char dir[PATH_MAX];
  char config_path[PATH_MAX];
  char users[MAX_USERS][SERVE_NATS_NAME_MAX + 8];
  int num_users;
};

/* ---- tenants file ---- */

void serve_tenants_default(struct serve_tenants *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->names[0], sizeof out->names[0], "%s", BUS_DEFAULT_TENANT);
  out->num = 1;
}

llb_status serve_tenants_read(const char *path, struct serve_tenants *out) {
  memset(out, 0, sizeof *out);
  struct tenant_limits_config *cfg = calloc(1, sizeof *cfg);
  if (!cfg) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tenants");
  llb_status st = tenant_limits_config_load(path, cfg); /* one parser for the file: the limits' */
  for (int i = 0; st == LLB_STATUS_OK && i < cfg->num && i < SERVE_NATS_MAX_TENANTS; i++)
    snprintf(out->names[out->num++], SERVE_NATS_NAME_MAX, "%s", cfg->tenants[i].name);
  free(cfg);
  return st;
}

/* ---- nats.conf text ---- */

/* A growable-free writer into a fixed buffer: `ok` turns false on overflow. */
struct text {
  char *buf;
  size_t cap, len;
  bool ok;
};

static void put(struct text *t, const char *fmt, ...) {
  if (!t->ok) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= t->cap - t->len) t->ok = false;
  else t->len += (size_t)n;
}

/* A quoted subject with "P" at its start replaced by the prefix. */
static void put_subject(struct text *t, const char *pattern, const char *prefix) {
  if (pattern[0] == 'P' && pattern[1] == '.') put(t, "\"%s%s\"", prefix, pattern + 1);
  else put(t, "\"%s\"", pattern);
}

static void put_list(struct text *t, const char *const *subjects, const char *prefix) {
  put(t, "[");
  for (int i = 0; i < MAX_SUBJECTS && subjects[i]; i++) {
    put(t, i ? ", " : "");
    put_subject(t, subjects[i], prefix);
  }
  put(t, "]");
}

int serve_nats_user_permissions(const char *user, const char *prefix, char *buf, size_t cap) {
  struct text t = {buf, cap, 0, cap > 0};
  if (strncmp(user, "tenant-", 7) == 0 && bus_token_valid(user + 7)) {
    const char *tn = user + 7;
    put(&t, "{publish: {allow: [\"%s.generate.%s\", \"%s.abort.%s\", \"%s.tokenize.%s\"]}, "
            "subscribe: {allow: [\"_INBOX.>\"]}}", prefix, tn, prefix, tn, prefix, tn);
    return t.ok ? (int)t.len : -1;
  }
  for (int i = 0; i < NUM_USER_PERMS; i++) {
    if (strcmp(user_perms[i].user, user) != 0) continue;
    put(&t, "{publish: {allow: ");
    put_list(&t, user_perms[i].pub, prefix);
    put(&t, "}, subscribe: {allow: ");
    put_list(&t, user_perms[i].sub, prefix);
    put(&t, "}%s}", user_perms[i].allow_responses ? ", allow_responses: true" : "");
    return t.ok ? (int)t.len : -1;
  }
  return -1;
}

static const char *const tenant_services[] = {"generate", "abort", "tokenize"};

/* password_hash: the user's bcrypt hash (nats-server compares it; the password itself is only
 * in the user's 0600 file) */
static void put_user(struct text *t, const char *user, const char *password_hash, const char *prefix) {
  char perms[2048];
  if (serve_nats_user_permissions(user, prefix, perms, sizeof perms) < 0) {
    t->ok = false;
    return;
  }
  put(t, "      {user: \"%s\", password: \"%s\", permissions: %s}\n", user, password_hash, perms);
}

/* The whole nats.conf; hashes[i] is the bcrypt hash of a->users[i]'s password. */
static bool render_config(const struct serve_nats_auth *a, const struct serve_tenants *tn, const char *prefix,
                          char hashes[][BCRYPT_HASH_MAX], struct text *t) {
  put(t, "# Generated by `llmbus serve` for this run (cmd/supervisor/serve_nats_config.h); removed at exit.\n");
  put(t, "max_payload: %d\nmax_connections: %d\n", SERVE_NATS_MAX_PAYLOAD, SERVE_NATS_MAX_CONNECTIONS);
  put(t, "accounts: {\n");
  for (int pass = 0; pass < 2; pass++) {
    const char *acct = pass == 0 ? "ENGINE" : "FRONT";
    put(t, "  %s: {\n    users: [\n", acct);
    for (int u = 0; u < a->num_users; u++)
      for (int i = 0; i < NUM_USER_PERMS; i++)
        if (strcmp(user_perms[i].user, a->users[u]) == 0 && strcmp(user_perms[i].account, acct) == 0)
          put_user(t, a->users[u], hashes[u], prefix);
    put(t, "    ]\n");
    if (pass == 0) {
      put(t, "    jetstream: enabled\n    exports: [\n");
      for (int k = 0; k < tn->num; k++)
        for (int s = 0; s < 3; s++)
          put(t, "      {service: \"%s.%s.%s\", response: stream, accounts: [\"TENANT_%s\", \"FRONT\"]}\n", prefix,
              tenant_services[s], tn->names[k], tn->names[k]);
      /* LoRAUpdate: every worker answers (api_server_lora_admin.h), so a stream of responses */
      put(t, "      {service: \"%s.lora.update\", response: stream, accounts: [\"FRONT\"]}\n", prefix);
      put(t, "      {stream: \"%s.engine.*.stats\", accounts: [\"FRONT\"]}\n", prefix);
      put(t, "      {stream: \"%s.health.>\", accounts: [\"FRONT\"]}\n", prefix);
      put(t, "      {stream: \"%s.trace.>\", accounts: [\"FRONT\"]}\n    ]\n", prefix);
    } else {
      put(t, "    imports: [\n");
      for (int k = 0; k < tn->num; k++)
        for (int s = 0; s < 3; s++)
          put(t, "      {service: {account: \"ENGINE\", subject: \"%s.%s.%s\"}}\n", prefix, tenant_services[s],
              tn->names[k]);
      put(t, "      {service: {account: \"ENGINE\", subject: \"%s.lora.update\"}}\n", prefix);
      put(t, "      {stream: {account: \"ENGINE\", subject: \"%s.engine.*.stats\"}}\n", prefix);
      put(t, "      {stream: {account: \"ENGINE\", subject: \"%s.health.>\"}}\n", prefix);
      put(t, "      {stream: {account: \"ENGINE\", subject: \"%s.trace.>\"}}\n    ]\n", prefix);
    }
    put(t, "  }\n");
  }
  for (int k = 0; k < tn->num; k++) {
    char user[SERVE_NATS_NAME_MAX + 8];
    snprintf(user, sizeof user, "tenant-%s", tn->names[k]);
    int u = 0;
    while (u < a->num_users && strcmp(a->users[u], user) != 0) u++;
    if (u == a->num_users) return false;
    put(t, "  \"TENANT_%s\": {\n    users: [\n", tn->names[k]);
    put_user(t, user, hashes[u], prefix);
    put(t, "    ]\n    imports: [\n");
    for (int s = 0; s < 3; s++)
      put(t, "      {service: {account: \"ENGINE\", subject: \"%s.%s.%s\"}}\n", prefix, tenant_services[s],
          tn->names[k]);
    put(t, "    ]\n    jetstream: disabled\n");
    put(t, "    limits: {max_connections: %d, max_subscriptions: %d, max_payload: %d}\n  }\n",
        SERVE_NATS_TENANT_MAX_CONNECTIONS, SERVE_NATS_TENANT_MAX_SUBSCRIPTIONS, SERVE_NATS_TENANT_MAX_PAYLOAD);
  }
  put(t, "}\n");
  return t->ok;
}

/* ---- files ---- */

/* Writes len bytes to a new file (O_EXCL, mode 0600). */
static llb_status write_private(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return LLB_ERRF(LLB_STATUS_IO, "create %s: %s", path, strerror(errno));
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      return LLB_ERRF(LLB_STATUS_IO, "write %s: %s", path, strerror(errno));
    }
    off += (size_t)w;
  }
  if (close(fd) != 0) return LLB_ERRF(LLB_STATUS_IO, "close %s: %s", path, strerror(errno));
  return LLB_STATUS_OK;
}

static llb_status random_password(char out[2 * PASSWORD_BYTES + 1]) {
  unsigned char raw[PASSWORD_BYTES];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return LLB_ERRF(LLB_STATUS_IO, "getrandom: %s", strerror(errno));
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof raw; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
  memset(raw, 0, sizeof raw);
  return LLB_STATUS_OK;
}

llb_status serve_nats_auth_password_file(const struct serve_nats_auth *a, const char *user, char *buf,
                                         size_t cap) {
  for (int u = 0; u < a->num_users; u++)
    if (strcmp(a->users[u], user) == 0) {
      if (snprintf(buf, cap, "%s/%s.password", a->dir, user) >= (int)cap)
        return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "password file path of %s too long", user);
      return LLB_STATUS_OK;
    }
  return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no NATS user '%s' in this serve run", user);
}

/* The bcrypt hash ("$2b$<cost>$...", libxcrypt's crypt_r) of password into out[BCRYPT_HASH_MAX],
 * with a random salt. */
static llb_status bcrypt_hash(const char *password, char out[BCRYPT_HASH_MAX]) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  struct crypt_data *cd = calloc(1, sizeof *cd); /* 32 KiB: not on the stack */
  if (!cd) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "crypt_data");
  llb_status st = LLB_STATUS_OK;
  const char *h = NULL;
  if (!crypt_gensalt_rn("$2b$", SERVE_NATS_BCRYPT_COST, NULL, 0, salt, sizeof salt))
    st = LLB_ERRF(LLB_STATUS_IO, "crypt_gensalt $2b$: %s", strerror(errno));
  else if (!(h = crypt_r(password, salt, cd)) || h[0] != '$' || strlen(h) >= BCRYPT_HASH_MAX)
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "bcrypt of a password failed (libcrypt without $2b$?)");
  else
    memcpy(out, h, strlen(h) + 1);
  memset(cd, 0, sizeof *cd);
  free(cd);
  return st;
}

static llb_status write_all(struct serve_nats_auth *a, const struct serve_tenants *tn, const char *prefix) {
  char password[2 * PASSWORD_BYTES + 1];
  char(*hashes)[BCRYPT_HASH_MAX] = calloc(MAX_USERS, BCRYPT_HASH_MAX);
  llb_status st = hashes ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "password hashes");
  for (int u = 0; u < a->num_users && st == LLB_STATUS_OK; u++) {
    char path[PATH_MAX + 80];
    st = random_password(password);
    if (st == LLB_STATUS_OK) st = serve_nats_auth_password_file(a, a->users[u], path, sizeof path);
    if (st == LLB_STATUS_OK) st = write_private(path, password, strlen(password));
    if (st == LLB_STATUS_OK) st = bcrypt_hash(password, hashes[u]);
  }
  memset(password, 0, sizeof password);
  size_t cap = 16384 + (size_t)tn->num * 1024;
  char *conf = st == LLB_STATUS_OK ? malloc(cap) : NULL;
  if (st == LLB_STATUS_OK && !conf) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "nats.conf buffer");
  struct text t = {conf, cap, 0, true};
  if (st == LLB_STATUS_OK && !render_config(a, tn, prefix, hashes, &t))
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "nats.conf does not fit %zu bytes", cap);
  if (st == LLB_STATUS_OK) st = write_private(a->config_path, conf, t.len);
  free(conf);
  free(hashes);
  return st;
}

llb_status serve_nats_auth_create(const struct serve_tenants *tenants, const char *prefix,
                                  struct serve_nats_auth **out) {
  *out = NULL;
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st != LLB_STATUS_OK) return st;
  if (!tenants || tenants->num < 1 || tenants->num > SERVE_NATS_MAX_TENANTS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "serve_nats_auth_create: 1..%d tenants", SERVE_NATS_MAX_TENANTS);
  struct serve_nats_auth *a = calloc(1, sizeof *a);
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "serve_nats_auth");
  if ((st = run_dir_create("nats-auth", a->dir, sizeof a->dir)) != LLB_STATUS_OK) {
    free(a);
    return st;
  }
  snprintf(a->config_path, sizeof a->config_path, "%.*s/nats.conf", (int)(sizeof a->config_path - 16), a->dir);
  for (int i = 0; i < NUM_USER_PERMS; i++) snprintf(a->users[a->num_users++], sizeof a->users[0], "%s", user_perms[i].user);
  for (int k = 0; k < tenants->num; k++)
    snprintf(a->users[a->num_users++], sizeof a->users[0], "tenant-%s", tenants->names[k]);
  st = write_all(a, tenants, prefix);
  if (st != LLB_STATUS_OK) {
    serve_nats_auth_destroy(a);
    return st;
  }
  LLB_LOG_INFO("nats_auth_generated", "dir=%s config=%s users=%d tenants=%d", a->dir, a->config_path,
               a->num_users, tenants->num);
  *out = a;
  return LLB_STATUS_OK;
}

void serve_nats_auth_destroy(struct serve_nats_auth *a) {
  if (!a) return;
  run_dir_remove(a->dir);
  free(a);
}

const char *serve_nats_auth_config_path(const struct serve_nats_auth *a) { return a->config_path; }

const char *serve_nats_auth_dir(const struct serve_nats_auth *a) { return a->dir; }

/* The NATS user of a child: its name, or with --engines N its name without the engine's
 * "-<index>" suffix ("scheduler-1" logs in as scheduler: every engine's actor has one row). */
static bool child_user(const struct serve_nats_auth *a, const char *child, char *user, size_t cap) {
  snprintf(user, cap, "%s", child);
  for (int pass = 0; pass < 2; pass++) {
    for (int u = 0; u < a->num_users; u++)
      if (strcmp(a->users[u], user) == 0) return true;
    char *dash = strrchr(user, '-');
    if (!dash || !dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1)) return false;
    *dash = '\0';
  }
  return false;
}

llb_status serve_nats_auth_add_child_args(const struct serve_nats_auth *a, struct child_spec *spec) {
  char path[PATH_MAX + 80], user[SERVE_NATS_NAME_MAX + 8];
  if (!child_user(a, spec->name, user, sizeof user))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no NATS user for actor %s", spec->name);
  llb_status st = serve_nats_auth_password_file(a, user, path, sizeof path);
  if (st == LLB_STATUS_OK) st = child_spec_add_arg(spec, "--nats-user");
  if (st == LLB_STATUS_OK) st = child_spec_add_arg(spec, user);
  if (st == LLB_STATUS_OK) st = child_spec_add_arg(spec, "--nats-password-file");
  if (st == LLB_STATUS_OK) st = child_spec_add_arg(spec, path);
  return st;
}

llb_status serve_nats_auth_apply(const struct serve_options *so, struct child_spec *specs, int n,
                                 struct supervisor_config *cfg, struct serve_nats_auth **out) {
  *out = NULL;
  if (so->no_nats_auth && so->tenants_file)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--tenants needs NATS accounts: not with --no-nats-auth");
  if (so->no_nats_auth) return LLB_STATUS_OK;
  if (so->nats_url) {
    if (so->tenants_file)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--tenants needs the embedded nats-server (no --nats): "
                      "with --nats, accounts are the server's configuration (see ops/nats/)");
    return LLB_STATUS_OK;
  }
  struct serve_tenants *tn = calloc(1, sizeof *tn);
  if (!tn) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "tenants");
  llb_status st = LLB_STATUS_OK;
  if (so->tenants_file) st = serve_tenants_read(so->tenants_file, tn);
  else serve_tenants_default(tn);
  const char *prefix = NULL;
  for (int f = 0; f < so->num_engine_flags; f++)
    if (strcmp(so->engine_flags[f].name, "prefix") == 0) prefix = so->engine_flags[f].value;
  struct serve_nats_auth *a = NULL;
  if (st == LLB_STATUS_OK) st = serve_nats_auth_create(tn, prefix, &a);
  free(tn);
  for (int i = 0; st == LLB_STATUS_OK && i < n; i++) {
    st = serve_nats_auth_add_child_args(a, &specs[i]);
    /* the input processors limit and resolve adapters per tenant; the api server lists them per tenant */
    if (st == LLB_STATUS_OK && so->tenants_file &&
        (strncmp(specs[i].name, "input-processor", 15) == 0 || strcmp(specs[i].name, "api-server") == 0) &&
        (st = child_spec_add_arg(&specs[i], "--tenant-limits")) == LLB_STATUS_OK)
      st = child_spec_add_arg(&specs[i], so->tenants_file);
  }
  if (st != LLB_STATUS_OK) {
    serve_nats_auth_destroy(a);
    return st;
  }
  cfg->nats_config_file = a->config_path;
  *out = a;
  return LLB_STATUS_OK;
}
