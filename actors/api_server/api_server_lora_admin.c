/* vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter over <prefix>.lora.update; see
 * api_server_lora_admin.h. */
#include "actors/api_server/api_server_lora_admin.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_error.h"
#include "actors/api_server/api_server_json.h"
#include "actors/api_server/http_reply.h"
#include "actors/api_server/inbox.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "schemas/lora_registry.h"

#define KEPT_MAX 32      /* adapters loaded at run time that this server keeps on every worker */
#define RESEND_TICK_S 2  /* how often a worker lacking one is looked for */
#define TOMBSTONE_NS (30LL * 1000 * 1000 * 1000) /* an unloaded name is not learnt back for this long */

/* One update under way: a client's (req set) or a rollback / resend (no client). */
struct lora_op {
  struct api_server_lora_admin *l;
  struct lora_op *next;
  uint64_t seq;
  struct evhttp_request *req;   /* NULL: nobody waits, or the client went away */
  struct evhttp_connection *conn;
  struct llb_lora_update u;     /* strings point into the buffers below */
  char name[LLB_LORA_NAME_MAX + 1], path[LLB_LORA_PATH_MAX + 1], tenant[LLB_LORA_TENANT_MAX + 1];
  char client_path[LLB_LORA_PATH_MAX + 1]; /* lora_path as the client gave it (errors) */
  bool from_client;             /* a client's update: a partial load is undone */
  int32_t expected, answered, failed;
  int32_t first_code;
  char first_error[512];
  struct event *timer;
};

/* An adapter this server keeps loaded on every worker. */
struct kept {
  char name[LLB_LORA_NAME_MAX + 1], path[LLB_LORA_PATH_MAX + 1], tenant[LLB_LORA_TENANT_MAX + 1];
  bool loaded_here; /* else learnt from the heartbeats: kept while some worker still announces it */
};

struct api_server_lora_admin {
  char *lora_dir;
  struct lora_registry *loras;
  int64_t window_ns;             /* a worker heard within it is expected to answer */
  struct api_server_metrics *metrics;
  struct bus *bus;
  struct event_base *base;
  struct api_server_inbox *inbox;
  char inbox_subject[128];
  char subject[BUS_SUBJECT_MAX];
  uint64_t next_seq;
  struct lora_op *ops;
  struct kept kept[KEPT_MAX];
  int32_t num_kept;
  char tomb[KEPT_MAX][LLB_LORA_NAME_MAX + 1]; /* names unloaded here lately, not learnt back */
  int64_t tomb_ns[KEPT_MAX];
  struct event *resend;
  struct llb_buf enc;
  struct llb_arena arena;
};

/* ---- the kept set ------------------------------------------------------------------------ */

static int32_t kept_find(const struct api_server_lora_admin *l, const char *name) {
  for (int32_t i = 0; i < l->num_kept; i++)
    if (strcmp(l->kept[i].name, name) == 0) return i;
  return -1;
}

static void kept_put(struct api_server_lora_admin *l, const char *name, const char *path, const char *tenant, bool here) {
  int32_t i = kept_find(l, name);
  if (i < 0 && l->num_kept < KEPT_MAX) i = l->num_kept++;
  if (i < 0) return;
  struct kept *k = &l->kept[i];
  snprintf(k->name, sizeof k->name, "%s", name);
  snprintf(k->path, sizeof k->path, "%s", path);
  snprintf(k->tenant, sizeof k->tenant, "%s", tenant);
  k->loaded_here = here || k->loaded_here;
}

static void kept_drop(struct api_server_lora_admin *l, const char *name, bool tombstone) {
  const int32_t i = kept_find(l, name);
  if (i >= 0) l->kept[i] = l->kept[--l->num_kept];
  if (!tombstone) return;
  int32_t t = 0;
  for (int32_t j = 1; j < KEPT_MAX; j++)
    if (l->tomb_ns[j] < l->tomb_ns[t]) t = j;
  snprintf(l->tomb[t], sizeof l->tomb[t], "%s", name);
  l->tomb_ns[t] = llb_now_ns();
}

static bool tombstoned(const struct api_server_lora_admin *l, const char *name, int64_t now) {
  for (int32_t j = 0; j < KEPT_MAX; j++)
    if (l->tomb_ns[j] && now - l->tomb_ns[j] < TOMBSTONE_NS && strcmp(l->tomb[j], name) == 0) return true;
  return false;
}

/* ---- updates ----------------------------------------------------------------------------- */

static void on_client_close(struct evhttp_connection *conn, void *arg) {
  (void)conn;
  struct lora_op *op = arg;
  op->req = NULL;
  op->conn = NULL;
}

static void op_free(struct lora_op *op) {
  struct api_server_lora_admin *l = op->l;
  for (struct lora_op **p = &l->ops; *p; p = &(*p)->next)
    if (*p == op) {
      *p = op->next;
      break;
    }
  if (op->conn) evhttp_connection_set_closecb(op->conn, NULL, NULL);
  if (op->timer) event_free(op->timer);
  free(op);
}

static void send_error(struct api_server_lora_admin *l, struct evhttp_request *req, int status, const char *msg) {
  struct api_server_error e;
  api_server_error_set(&e, status, NULL, "%s", msg);
  api_server_http_send_error(l->metrics, req, &e);
}

/* The text a client gets for a file the workers could not open, whatever the reason. */
static void not_found_text(const struct lora_op *op, char *buf, size_t cap) {
  snprintf(buf, cap, "LoRA adapter '%s': '%.256s': " API_SERVER_LORA_ADMIN_NOT_FOUND, op->name, op->client_path);
}

static llb_status op_publish(struct lora_op *op);

/* Every answer is in, or the time is up: the client's answer, a rollback, the kept set. */
static void op_finish(struct lora_op *op) {
  struct api_server_lora_admin *l = op->l;
  const bool load = op->u.op == LLB_LORA_UPDATE_LOAD;
  if (op->answered < op->expected && !op->failed) {
    op->failed = 1;
    op->first_code = LLB_STATUS_TIMEOUT;
    snprintf(op->first_error, sizeof op->first_error, "%d of %d workers answered within %d s", op->answered,
             op->expected, API_SERVER_LORA_ADMIN_TIMEOUT_S);
  }
  const bool ok = !op->failed;
  if (ok && load) kept_put(l, op->name, op->path, op->tenant, op->from_client);
  if (ok && !load) kept_drop(l, op->name, true);
  char q[600];
  LLB_LOG_INFO("lora_update", "op=%s name=%s path=%s tenant=%s workers=%d answered=%d failed=%d client=%d error=%s",
               load ? "load" : "unload", op->name, op->path, op->tenant, op->expected, op->answered, op->failed,
               op->req != NULL, llb_log_quote(q, sizeof q, op->first_error));
  if (op->req) {
    if (ok) {
      char text[LLB_LORA_NAME_MAX + 64];
      snprintf(text, sizeof text, "Success: LoRA adapter '%s' %s successfully.", op->name, load ? "added" : "removed");
      api_server_http_send_body(op->req, 200, "text/plain; charset=utf-8", text, strlen(text));
    } else {
      char text[700];
      if (load && op->first_code == LLB_STATUS_NOT_FOUND) not_found_text(op, text, sizeof text);
      else snprintf(text, sizeof text, "%s", op->first_error);
      send_error(l, op->req, op->first_code == LLB_STATUS_TIMEOUT ? 503 : 400, text);
    }
  }
  if (!ok && load && op->from_client && op->answered > op->failed) { /* some loaded it: unload it again */
    struct lora_op *undo = calloc(1, sizeof *undo);
    if (undo) {
      undo->l = l;
      snprintf(undo->name, sizeof undo->name, "%s", op->name);
      undo->u = (struct llb_lora_update){.op = LLB_LORA_UPDATE_UNLOAD, .lora_name = llb_str_c(undo->name)};
      if (op_publish(undo)) op_free(undo);
    }
  }
  op_free(op);
}

static void on_op_timeout(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  op_finish(arg);
}

/* Sends op's LoRAUpdate to every worker, expecting as many answers as workers beat; op joins
 * the list on success. */
static llb_status op_publish(struct lora_op *op) {
  struct api_server_lora_admin *l = op->l;
  op->expected = lora_registry_num_workers(l->loras, llb_now_ns(), l->window_ns);
  if (op->expected < 1) return LLB_ERRF(LLB_STATUS_NO_SERVER, "no worker is up to load LoRA adapters");
  op->seq = ++l->next_seq;
  char reply[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_reply(l->inbox_subject, op->seq, reply, sizeof reply);
  if (!st) st = llb_lora_update_encode_buf(&op->u, &l->enc);
  if (!st) {
    const struct bus_out_msg m = {.subject = l->subject, .reply = reply, .data = l->enc.data, .len = l->enc.len};
    st = bus_publish_msg(l->bus, &m);
  }
  if (st) return st;
  op->timer = evtimer_new(l->base, on_op_timeout, op);
  if (!op->timer) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA update timer");
  evtimer_add(op->timer, &(struct timeval){.tv_sec = API_SERVER_LORA_ADMIN_TIMEOUT_S});
  op->next = l->ops;
  l->ops = op;
  return LLB_STATUS_OK;
}

/* A worker's LoRAUpdateReply (loop thread, from the inbox). */
static void on_reply(const struct api_server_inbox_item *it, void *user) {
  struct api_server_lora_admin *l = user;
  struct lora_op *op = l->ops;
  while (op && op->seq != it->seq) op = op->next;
  if (!op) return; /* late: the op timed out */
  if (it->no_responders) {
    op->failed++;
    op->first_code = LLB_STATUS_NO_SERVER;
    snprintf(op->first_error, sizeof op->first_error, "no worker takes LoRA updates (started without --lora-dir)");
    op_finish(op);
    return;
  }
  llb_arena_reset(&l->arena);
  struct llb_lora_update_reply r;
  if (llb_lora_update_reply_decode(it->data, it->len, &l->arena, &r)) {
    char q[400];
    LLB_LOG_WARN("lora_update_reply_malformed", "bytes=%zu error=%s", it->len, llb_log_quote(q, sizeof q, llb_err_last()));
    return;
  }
  op->answered++;
  if (r.error.code && !op->failed) {
    op->first_code = r.error.code;
    snprintf(op->first_error, sizeof op->first_error, "%.*s", (int)r.error.message.len, r.error.message.data);
  }
  op->failed += r.error.code != 0;
  if (op->answered >= op->expected) op_finish(op);
}

/* ---- the routes -------------------------------------------------------------------------- */

/* The request's lora_name (and for a load lora_path, made relative to the directory) into op;
 * false with the 400 sent. */
static bool parse_body(struct api_server_lora_admin *l, struct evhttp_request *req, bool load, struct lora_op *op) {
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  const size_t len = evbuffer_get_length(in);
  struct api_server_error e;
  json_t *root = api_server_json_load_object(len ? (const char *)evbuffer_pullup(in, (ev_ssize_t)len) : "", len, &e);
  if (!root) {
    api_server_http_send_error(l->metrics, req, &e);
    return false;
  }
  const json_t *jn = json_object_get(root, "lora_name"), *jp = json_object_get(root, "lora_path");
  const char *name = json_is_string(jn) ? json_string_value(jn) : NULL;
  const char *path = json_is_string(jp) ? json_string_value(jp) : NULL;
  bool ok = name && name[0] && (!load || (path && path[0]));
  if (!ok)
    send_error(l, req, 400, load ? "Both 'lora_name' and 'lora_path' must be provided."
                                 : "'lora_name' needs to be provided to unload a LoRA adapter.");
  else if (!llb_lora_name_valid(name, strlen(name)))
    send_error(l, req, 400, "lora_name: 1..128 letters, digits and \"._-/:+\", not starting with '.', '/' or '-', "
                            "without \"..\"");
  if (ok && (ok = llb_lora_name_valid(name, strlen(name)))) {
    snprintf(op->name, sizeof op->name, "%s", name);
    snprintf(op->client_path, sizeof op->client_path, "%s", path ? path : "");
    const size_t dl = strlen(l->lora_dir);
    const char *rel = path ? path : "";
    if (rel[0] == '/') /* absolute: inside the directory, or nothing */
      rel = strncmp(rel, l->lora_dir, dl) == 0 && rel[dl] == '/' ? rel + dl + 1 : "";
    snprintf(op->path, sizeof op->path, "%s", strlen(rel) <= LLB_LORA_PATH_MAX ? rel : "");
  }
  json_decref(root);
  return ok;
}

/* Whether the caller may unload op->name; else the 400 is sent (another tenant's adapter looks
 * unknown). */
static bool may_unload(struct api_server_lora_admin *l, struct evhttp_request *req, const struct lora_op *op) {
  char owner[LLB_LORA_TENANT_MAX + 1], text[LLB_LORA_NAME_MAX + 96];
  int32_t n = lora_registry_served_by(l->loras, op->name, llb_now_ns(), owner, sizeof owner);
  const int32_t k = kept_find(l, op->name);
  if (k >= 0 && l->kept[k].loaded_here) { /* loaded here: known before the heartbeats tell */
    n = n ? n : 1;
    snprintf(owner, sizeof owner, "%s", l->kept[k].tenant);
  }
  if (n > 0 && !owner[0]) {
    snprintf(text, sizeof text, "The lora adapter '%s' was given by --lora-modules: it cannot be unloaded.", op->name);
    send_error(l, req, 400, text);
    return false;
  }
  if (n > 0 && (strcmp(owner, op->tenant) == 0 || strcmp(owner, LORA_REGISTRY_OPEN_TENANT) == 0)) return true;
  snprintf(text, sizeof text, "The lora adapter '%s' cannot be found.", op->name);
  send_error(l, req, 400, text);
  return false;
}

void api_server_lora_admin_route(struct api_server_lora_admin *l, struct evhttp_request *req, bool load, const char *tenant) {
  struct lora_op *op = calloc(1, sizeof *op);
  if (!op) {
    send_error(l, req, 500, "out of memory");
    return;
  }
  op->l = l;
  op->from_client = true;
  snprintf(op->tenant, sizeof op->tenant, "%s", tenant);
  if (!parse_body(l, req, load, op) || (!load && !may_unload(l, req, op))) {
    free(op);
    return;
  }
  char text[LLB_LORA_NAME_MAX + 700];
  if (load && (kept_find(l, op->name) >= 0 || lora_registry_served_by(l->loras, op->name, llb_now_ns(), NULL, 0) > 0)) {
    snprintf(text, sizeof text, "The lora adapter '%s' has already been loaded.", op->name);
    send_error(l, req, 400, text);
    free(op);
    return;
  }
  op->u = (struct llb_lora_update){.op = load ? LLB_LORA_UPDATE_LOAD : LLB_LORA_UPDATE_UNLOAD,
                                   .lora_name = llb_str_c(op->name), .lora_path = llb_str_c(op->path),
                                   .tenant = llb_str_c(op->tenant)};
  if (load && llb_lora_update_encode_buf(&op->u, &l->enc)) { /* a path that climbs out: as a missing file */
    not_found_text(op, text, sizeof text);
    send_error(l, req, 400, text);
    free(op);
    return;
  }
  llb_status st = op_publish(op);
  if (st) {
    snprintf(text, sizeof text, "%s", llb_err_last());
    send_error(l, req, 503, text);
    if (op->timer) event_free(op->timer);
    free(op);
    return;
  }
  op->req = req;
  op->conn = evhttp_request_get_connection(req);
  if (op->conn) evhttp_connection_set_closecb(op->conn, on_client_close, op);
}

/* ---- workers that lost an adapter ---------------------------------------------------------- */

/* Each tick: what the workers announce is learnt (after this server's restart); an adapter some
 * live worker lacks is sent again (a load: those that have it refuse it, harmlessly). */
static void on_resend_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_server_lora_admin *l = arg;
  const int64_t now = llb_now_ns();
  struct lora_registry_dynamic d[KEPT_MAX];
  const int32_t nd = lora_registry_dynamic(l->loras, now, d, KEPT_MAX);
  for (int32_t i = 0; i < nd && i < KEPT_MAX; i++)
    if (!tombstoned(l, d[i].name, now)) kept_put(l, d[i].name, d[i].path, d[i].tenant, false);
  const int32_t workers = lora_registry_num_workers(l->loras, now, 0);
  for (int32_t i = 0; i < l->num_kept; i++) {
    const struct kept *k = &l->kept[i];
    const int32_t have = lora_registry_served_by(l->loras, k->name, now, NULL, 0);
    if (have == 0 && !k->loaded_here) { /* unloaded through another api server */
      kept_drop(l, k->name, false);
      i--;
      continue;
    }
    bool busy = false;
    for (const struct lora_op *op = l->ops; op && !busy; op = op->next) busy = strcmp(op->name, k->name) == 0;
    if (busy || have >= workers) continue;
    struct lora_op *op = calloc(1, sizeof *op);
    if (!op) return;
    op->l = l;
    snprintf(op->name, sizeof op->name, "%s", k->name);
    snprintf(op->path, sizeof op->path, "%s", k->path);
    snprintf(op->client_path, sizeof op->client_path, "%s", k->path);
    snprintf(op->tenant, sizeof op->tenant, "%s", k->tenant);
    op->u = (struct llb_lora_update){.op = LLB_LORA_UPDATE_LOAD, .lora_name = llb_str_c(op->name),
                                     .lora_path = llb_str_c(op->path), .tenant = llb_str_c(op->tenant)};
    LLB_LOG_INFO("lora_resend", "name=%s workers=%d serving=%d", k->name, workers, have);
    if (op_publish(op)) free(op);
  }
}

/* ---- life cycle -------------------------------------------------------------------------- */

llb_status api_server_lora_admin_create(const char *lora_dir, struct lora_registry *loras, int64_t window_ms,
                                 struct api_server_metrics *metrics, struct api_server_lora_admin **out) {
  *out = NULL;
  struct api_server_lora_admin *l = calloc(1, sizeof *l);
  if (!l || !(l->lora_dir = strdup(lora_dir))) {
    free(l);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: LoRA updates");
  }
  size_t dl = strlen(l->lora_dir);
  while (dl > 1 && l->lora_dir[dl - 1] == '/') l->lora_dir[--dl] = '\0'; /* "/a/b/" -> "/a/b" */
  l->loras = loras;
  l->window_ns = window_ms * 1000000;
  l->metrics = metrics;
  llb_arena_init(&l->arena, NULL, 0);
  llb_status st = api_server_inbox_create(on_reply, l, &l->inbox);
  if (st) {
    api_server_lora_admin_destroy(l);
    return st;
  }
  *out = l;
  return LLB_STATUS_OK;
}

llb_status api_server_lora_admin_start(struct api_server_lora_admin *l, struct bus *bus) {
  l->bus = bus;
  char pattern[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_lora_update(bus_prefix(bus), l->subject, sizeof l->subject);
  if (!st) st = bus_new_inbox(bus, l->inbox_subject, sizeof l->inbox_subject);
  if (!st) st = bus_pattern_replies(l->inbox_subject, pattern, sizeof pattern);
  if (!st) st = bus_subscribe(bus, pattern, NULL, api_server_inbox_on_msg, l->inbox, NULL);
  return st;
}

llb_status api_server_lora_admin_bind(struct api_server_lora_admin *l, struct event_base *base) {
  l->base = base;
  llb_status st = api_server_inbox_bind(l->inbox, base);
  if (!st && !(l->resend = event_new(base, -1, EV_PERSIST, on_resend_tick, l)))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA resend timer");
  if (!st) evtimer_add(l->resend, &(struct timeval){.tv_sec = RESEND_TICK_S});
  return st;
}

void api_server_lora_admin_unbind(struct api_server_lora_admin *l) {
  if (!l) return;
  while (l->ops) {
    struct lora_op *op = l->ops;
    if (op->req) send_error(l, op->req, 503, "the server is shutting down");
    op->req = NULL;
    op_free(op);
  }
  if (l->resend) event_free(l->resend);
  l->resend = NULL;
  api_server_inbox_unbind(l->inbox);
}

void api_server_lora_admin_destroy(struct api_server_lora_admin *l) {
  if (!l) return;
  api_server_inbox_destroy(l->inbox);
  llb_buf_free(&l->enc);
  llb_arena_destroy(&l->arena);
  free(l->lora_dir);
  free(l);
}
