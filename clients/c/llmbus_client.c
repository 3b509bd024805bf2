/* libllmbus-client (llmbus_client.h): a client of llm.generate.<tenant> and
 * llm.tokenize.<tenant> over the project's bus and schemas C API. */
#include "clients/c/llmbus_client.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "base/log.h"
#include "base/status.h"
#include "bus/bus.h"
#include "bus/credentials.h"
#include "bus/subject.h"
#include "schemas/arena.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

#define CLIENT_DEFAULT_TIMEOUT_MS 60000
#define CLIENT_NO_RESPONDER_TRIES 7 /* 50 ms doubling to 1 s: about 5 s in all */
#define CLIENT_FIELD_MAX 1024

struct llmbus_client {
  struct bus *bus;
  char tenant[BUS_TOKEN_MAX + 1];
  int timeout_ms;
};

/* A connection file's fields (clients/python/llmbus/connection.py documents the format:
 * nats_user / nats_password_file, also read as user / password_file). */
struct conn_file {
  char nats_url[CLIENT_FIELD_MAX];
  char user[CLIENT_FIELD_MAX];
  char password_file[CLIENT_FIELD_MAX];
  char prefix[BUS_TOKEN_MAX + 1];
};

/* The enum names of llb_status ("QUEUE_FULL"), from base/status.h's one list. */
#define STATUS_NAME(name, text) #name,
static const char *const status_names[] = {LLB_STATUS_LIST(STATUS_NAME)};
#undef STATUS_NAME

static int fail(llmbus_error *err, int code, const char *field, const char *fmt, ...) {
  if (!err) return code;
  memset(err, 0, sizeof *err);
  err->code = code;
  if (code >= 0 && code < (int)(sizeof status_names / sizeof *status_names))
    snprintf(err->status, sizeof err->status, "%s", status_names[code]);
  else
    snprintf(err->status, sizeof err->status, "code %d", code);
  snprintf(err->field, sizeof err->field, "%s", field ? field : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return code;
}

/* The last recorded llb error, as *err. */
static int fail_status(llmbus_error *err, llb_status st) { return fail(err, (int)st, NULL, "%s", llb_err_last()); }

void llmbus_sampling_init(llmbus_sampling *sp) {
  *sp = (llmbus_sampling){.max_tokens = 16, .temperature = 1.0f, .top_p = 1.0f};
}

/* ---- connection files ---------------------------------------------------------------- */

/* The string at key, else at alt (NULL: none), into buf; "" when neither is a string. */
static void copy_json_string(json_t *obj, const char *key, const char *alt, char *buf, size_t cap) {
  const char *v = json_string_value(json_object_get(obj, key));
  if (!v && alt) v = json_string_value(json_object_get(obj, alt));
  snprintf(buf, cap, "%s", v ? v : "");
}

/* Reads one connection file; returns the pid it names (0 when none), -1 when it is not one. */
static long conn_file_load(const char *path, struct conn_file *cf) {
  json_t *j = json_load_file(path, 0, NULL);
  if (!json_is_object(j) || !json_is_string(json_object_get(j, "nats_url"))) {
    json_decref(j);
    return -1;
  }
  copy_json_string(j, "nats_url", NULL, cf->nats_url, sizeof cf->nats_url);
  copy_json_string(j, "nats_user", "user", cf->user, sizeof cf->user);
  copy_json_string(j, "nats_password_file", "password_file", cf->password_file, sizeof cf->password_file);
  copy_json_string(j, "prefix", NULL, cf->prefix, sizeof cf->prefix);
  json_int_t pid = json_integer_value(json_object_get(j, "pid"));
  json_decref(j);
  return pid > 0 ? (long)pid : 0;
}

static int conn_dirs(char dirs[2][CLIENT_FIELD_MAX]) {
  int n = 0;
  const char *xdg = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
  if (xdg && *xdg) snprintf(dirs[n++], CLIENT_FIELD_MAX, "%s/llmbus", xdg);
  if (home && *home) snprintf(dirs[n++], CLIENT_FIELD_MAX, "%s/.cache/llmbus", home);
  return n;
}

/* The newest *.json of the directories whose serve is alive, or the one called `name`. */
static int conn_file_find(const char *name, struct conn_file *cf, llmbus_error *err) {
  char dirs[2][CLIENT_FIELD_MAX], path[2 * CLIENT_FIELD_MAX];
  int nd = conn_dirs(dirs);
  if (name && strchr(name, '/'))
    return conn_file_load(name, cf) >= 0 ? 0 : fail(err, LLB_STATUS_NOT_FOUND, NULL, "%s: not a connection file", name);
  time_t best_mtime = 0;
  bool found = false;
  for (int d = 0; d < nd; d++) {
    DIR *dir = opendir(dirs[d]);
    for (struct dirent *e; dir && (e = readdir(dir));) {
      size_t len = strlen(e->d_name);
      if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
      if (name && (strncmp(e->d_name, name, len - 5) != 0 || strlen(name) != len - 5) && strcmp(e->d_name, name) != 0)
        continue;
      snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
      struct stat sb;
      struct conn_file c;
      if (stat(path, &sb) != 0 || (found && sb.st_mtime < best_mtime)) continue;
      long pid = conn_file_load(path, &c);
      if (pid < 0 || (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue;
      *cf = c;
      best_mtime = sb.st_mtime;
      found = true;
    }
    if (dir) closedir(dir);
  }
  if (found) return 0;
  return fail(err, LLB_STATUS_NOT_FOUND, NULL,
              "no running `llmbus serve` found (no live connection file%s%s in %s%s%s); set nats_url",
              name ? " " : "", name ? name : "", nd ? dirs[0] : "$HOME/.cache/llmbus", nd > 1 ? " or " : "",
              nd > 1 ? dirs[1] : "");
}

/* ---- connect ------------------------------------------------------------------------- */

int llmbus_client_connect(const llmbus_client_options *o, llmbus_client **out, llmbus_error *err) {
  *out = NULL;
  struct conn_file cf = {0};
  const char *url = o->nats_url, *user = o->user, *pw_file = o->password_file, *prefix = o->prefix;
  if (!url) {
    int rc = conn_file_find(o->connection, &cf, err);
    if (rc) return rc;
    url = cf.nats_url;
    if (!user && cf.user[0]) user = cf.user;
    if (!pw_file && cf.password_file[0]) pw_file = cf.password_file;
    if (!prefix && cf.prefix[0]) prefix = cf.prefix;
  }
  if ((user != NULL) != (pw_file != NULL))
    return fail(err, LLB_STATUS_INVALID_ARGUMENT, "user", "user and password_file go together");
  /* A library stays quiet: the bus's connect/close lines are for actors. LLMBUS_LOG_LEVEL
   * still turns them on. */
  if (!getenv("LLMBUS_LOG_LEVEL")) llb_log_set_level(LLB_LOG_LEVEL_WARN);
  llb_log_set_actor("llmbus-client");
  llmbus_client *c = calloc(1, sizeof *c);
  if (!c) return fail(err, LLB_STATUS_OUT_OF_MEMORY, NULL, "client");
  const char *tenant = o->tenant ? o->tenant : (user && strncmp(user, "tenant-", 7) == 0 ? user + 7 : BUS_DEFAULT_TENANT);
  snprintf(c->tenant, sizeof c->tenant, "%s", tenant);
  c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : CLIENT_DEFAULT_TIMEOUT_MS;
  struct bus_options bo;
  bus_options_init(&bo);
  bo.urls = url;
  bo.name = "llmbus-client";
  bo.prefix = prefix;
  bo.install_signal_handlers = false;
  bo.max_reconnect = 5;
  char password[BUS_PASSWORD_MAX + 1] = "";
  llb_status st = LLB_STATUS_OK;
  if (pw_file) {
    st = bus_password_file_read(pw_file, password, sizeof password);
    bo.user = user;
    bo.password = password;
  }
  if (st == LLB_STATUS_OK) st = bus_connect(&bo, &c->bus);
  memset(password, 0, sizeof password);
  if (st != LLB_STATUS_OK) {
    free(c);
    return fail_status(err, st);
  }
  *out = c;
  return 0;
}

void llmbus_client_close(llmbus_client *c) {
  if (!c) return;
  bus_destroy(c->bus);
  free(c);
}

/* ---- generate ------------------------------------------------------------------------ */

static llb_status publish_request(llmbus_client *c, const char *kind, const struct llb_generate_request *gr,
                                  const char *reply) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = (strcmp(kind, "tokenize") == 0 ? bus_subject_tokenize : bus_subject_generate)(
      bus_prefix(c->bus), c->tenant, subject, sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  struct llb_buf buf = {0};
  st = llb_generate_request_encode_buf(gr, &buf);
  if (st == LLB_STATUS_OK) {
    struct bus_out_msg m = {.subject = subject, .reply = reply, .data = buf.data, .len = buf.len};
    st = bus_publish_msg(c->bus, &m);
  }
  llb_buf_free(&buf);
  return st;
}

static void send_abort(llmbus_client *c, const char *request_id) {
  char subject[BUS_SUBJECT_MAX];
  struct llb_abort_request ar = {.request_id = llb_str_c(request_id)};
  struct llb_buf buf = {0};
  if (request_id[0] && bus_subject_abort(bus_prefix(c->bus), c->tenant, subject, sizeof subject) == LLB_STATUS_OK &&
      llb_abort_request_encode_buf(&ar, &buf) == LLB_STATUS_OK) {
    (void)bus_publish(c->bus, subject, buf.data, buf.len, NULL);
    (void)bus_flush(c->bus, 1000);
  }
  llb_buf_free(&buf);
}

/* The engine's ErrorInfo as *err. */
static int fail_error_info(llmbus_error *err, const struct llb_error_info *e) {
  int rc = fail(err, e->code, NULL, "%.*s", (int)e->message.len, e->message.data ? e->message.data : "");
  if (err) {
    snprintf(err->field, sizeof err->field, "%.*s", (int)e->field.len, e->field.data ? e->field.data : "");
    err->retry_after_ms = e->retry_after_ms;
  }
  return rc;
}

/* Waits for one reply on sub: 1 = a RequestOutput in *ro, 0 = no responders, < 0 = *rc set. */
static int next_output(llmbus_client *c, struct bus_sub *sub, struct llb_arena *arena, struct llb_request_output *ro,
                       int *rc, llmbus_error *err) {
  struct bus_msg *m = NULL;
  llb_status st = bus_sub_next_msg(sub, c->timeout_ms, &m);
  if (st == LLB_STATUS_NOT_FOUND || (st == LLB_STATUS_OK && m->len == 0)) {
    bus_msg_destroy(m);
    return 0;
  }
  if (st == LLB_STATUS_TIMEOUT) {
    *rc = fail(err, LLB_STATUS_TIMEOUT, NULL, "no output from the engine within %d ms", c->timeout_ms);
    return -1;
  }
  if (st == LLB_STATUS_OK) {
    llb_arena_reset(arena);
    st = llb_request_output_decode(m->data, m->len, arena, ro);
    bus_msg_destroy(m);
  }
  if (st != LLB_STATUS_OK) {
    *rc = fail_status(err, st);
    return -1;
  }
  return 1;
}

/* Sends `gr` on kind and waits out "no responders" (about 5 s); returns 1 with the first
 * output in *ro, or < 0 with *rc set. */
static int send_and_first_output(llmbus_client *c, const char *kind, const struct llb_generate_request *gr,
                                 struct bus_sub *sub, const char *inbox, struct llb_arena *arena,
                                 struct llb_request_output *ro, int *rc, llmbus_error *err) {
  for (int tries = 0;; tries++) {
    llb_status st = publish_request(c, kind, gr, inbox);
    if (st != LLB_STATUS_OK) {
      *rc = fail_status(err, st);
      return -1;
    }
    int got = next_output(c, sub, arena, ro, rc, err);
    if (got != 0) return got;
    if (tries >= CLIENT_NO_RESPONDER_TRIES) {
      *rc = fail(err, LLB_STATUS_NOT_FOUND, NULL, "no input processor listens on %s.%s.%s (is `llmbus serve` running?)",
                 bus_prefix(c->bus), kind, c->tenant);
      return -1;
    }
    long ms = 50L << tries;
    struct timespec ts = {.tv_sec = (ms > 1000 ? 1000 : ms) / 1000, .tv_nsec = ((ms > 1000 ? 1000 : ms) % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Streams the outputs of a request already sent (first one in *ro) to fn. */
static int stream_pieces(llmbus_client *c, struct bus_sub *sub, struct llb_arena *arena, struct llb_request_output *ro,
                         llmbus_piece_fn fn, void *user, llmbus_error *err) {
  char request_id[256] = "";
  int rc = 0;
  for (;;) {
    if (!request_id[0]) snprintf(request_id, sizeof request_id, "%.*s", (int)ro->request_id.len, ro->request_id.data);
    if (ro->error.code != 0) return fail_error_info(err, &ro->error);
    for (int32_t i = 0; i < ro->num_outputs; i++) {
      const struct llb_completion_output *co = &ro->outputs[i];
      llmbus_piece p = {.request_id = request_id, .text = co->text.data ? co->text.data : "", .text_len = co->text.len,
                        .token_ids = co->token_ids, .num_token_ids = co->num_token_ids,
                        .finish_reason = llb_finish_reason_name(co->finish_reason)};
      if (fn && fn(&p, user) != 0) {
        send_abort(c, request_id);
        return fail(err, LLMBUS_ABORTED, NULL, "stopped by the caller; aborted request %s", request_id);
      }
    }
    if (ro->finished) return 0;
    int got = next_output(c, sub, arena, ro, &rc, err);
    if (got < 0) {
      send_abort(c, request_id);
      return rc;
    }
    if (got == 0) return fail(err, LLB_STATUS_NO_SERVER, NULL, "the engine went away during request %s", request_id);
  }
}

/* Sends one request on <prefix>.<kind>.<tenant> with an inbox; `then` consumes the outputs. */
typedef int (*outputs_fn)(llmbus_client *c, struct bus_sub *sub, struct llb_arena *arena, struct llb_request_output *ro,
                          void *ctx, llmbus_error *err);

static int with_request(llmbus_client *c, const char *kind, const struct llb_generate_request *gr, outputs_fn then,
                        void *ctx, llmbus_error *err) {
  char inbox[BUS_SUBJECT_MAX];
  struct bus_sub *sub = NULL;
  llb_status st = bus_new_inbox(c->bus, inbox, sizeof inbox);
  if (st == LLB_STATUS_OK) st = bus_subscribe_sync(c->bus, inbox, &sub);
  if (st != LLB_STATUS_OK) return fail_status(err, st);
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_request_output ro;
  int rc = 0;
  if (send_and_first_output(c, kind, gr, sub, inbox, &arena, &ro, &rc, err) > 0) rc = then(c, sub, &arena, &ro, ctx, err);
  llb_arena_destroy(&arena);
  (void)bus_unsubscribe(sub);
  return rc;
}

struct piece_ctx {
  llmbus_piece_fn fn;
  void *user;
};

static int generate_outputs(llmbus_client *c, struct bus_sub *sub, struct llb_arena *arena, struct llb_request_output *ro,
                            void *ctx, llmbus_error *err) {
  struct piece_ctx *p = ctx;
  return stream_pieces(c, sub, arena, ro, p->fn, p->user, err);
}

int llmbus_generate(llmbus_client *c, const char *prompt, const llmbus_sampling *sp, llmbus_piece_fn fn, void *user,
                    llmbus_error *err) {
  if (!c || !prompt) return fail(err, LLB_STATUS_INVALID_ARGUMENT, "prompt", "a client and a prompt are needed");
  llmbus_sampling defaults;
  llmbus_sampling_init(&defaults);
  if (!sp) sp = &defaults;
  struct llb_sampling_params params;
  llb_sampling_params_init(&params);
  params.max_tokens = sp->max_tokens;
  params.temperature = sp->temperature;
  params.top_p = sp->top_p;
  params.top_k = sp->top_k;
  params.ignore_eos = sp->ignore_eos != 0;
  params.output_kind = LLB_OUTPUT_KIND_DELTA;
  params.has_seed = true; /* seeded here, so that a request sent again repeats its tokens */
  params.seed = sp->seed;
  if (!sp->has_seed && getrandom(&params.seed, sizeof params.seed, 0) != (ssize_t)sizeof params.seed)
    params.seed = (uint64_t)time(NULL);
  struct llb_generate_request gr;
  llb_generate_request_init(&gr);
  gr.prompt = llb_str_c(prompt);
  gr.raw = true; /* text as it is (vLLM generate): no chat template */
  gr.sampling_params = &params;
  struct piece_ctx ctx = {fn, user};
  return with_request(c, "generate", &gr, generate_outputs, &ctx, err);
}

/* ---- tokenize ------------------------------------------------------------------------ */

struct ids_ctx {
  int32_t **ids;
  int *num_ids;
};

static int tokenize_output(llmbus_client *c, struct bus_sub *sub, struct llb_arena *arena, struct llb_request_output *ro,
                           void *ctx, llmbus_error *err) {
  (void)c, (void)sub, (void)arena;
  struct ids_ctx *x = ctx;
  if (ro->error.code != 0) return fail_error_info(err, &ro->error);
  *x->ids = malloc((size_t)(ro->num_prompt_token_ids ? ro->num_prompt_token_ids : 1) * sizeof(int32_t));
  if (!*x->ids) return fail(err, LLB_STATUS_OUT_OF_MEMORY, NULL, "token ids");
  if (ro->num_prompt_token_ids) memcpy(*x->ids, ro->prompt_token_ids, (size_t)ro->num_prompt_token_ids * sizeof(int32_t));
  *x->num_ids = ro->num_prompt_token_ids;
  return 0;
}

int llmbus_tokenize(llmbus_client *c, const char *prompt, int32_t **ids, int *num_ids, llmbus_error *err) {
  *ids = NULL;
  *num_ids = 0;
  if (!c || !prompt) return fail(err, LLB_STATUS_INVALID_ARGUMENT, "prompt", "a client and a prompt are needed");
  struct llb_generate_request gr;
  llb_generate_request_init(&gr);
  gr.prompt = llb_str_c(prompt);
  gr.raw = true; /* text as it is (vLLM generate): no chat template */
  struct ids_ctx ctx = {ids, num_ids};
  return with_request(c, "tokenize", &gr, tokenize_output, &ctx, err);
}
