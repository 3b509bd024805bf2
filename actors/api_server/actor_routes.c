/* Plain routes of the api server (models, health, metrics, version), the replies of tokenize
 * calls, error replies and their headers, and the stats / heartbeat handlers (see actor.h,
 * actor_internal.h). */
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/api_server/actor_internal.h"
#include "base/hash.h"
#include "base/log.h"
#include "schemas/control.h"

static const char *reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Internal Server Error" : "Error";
  }
}

void api_http_send_body(struct evhttp_request *req, int status, const char *ctype, const char *body,
                      size_t len) {
  struct evbuffer *b = evbuffer_new();
  if (!b) {
    evhttp_send_error(req, 500, NULL);
    return;
  }
  evbuffer_add(b, body, len);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
  evhttp_send_reply(req, status, reason_phrase(status), b);
  evbuffer_free(b);
}

void api_http_send_error(struct api_actor *a, struct evhttp_request *req, const struct api_error *e) {
  struct api_buf b = {0};
  if (!api_error_render(e, &b)) {
    evhttp_send_error(req, 500, NULL);
    return;
  }
  /* A full queue clears within a step or two; a tenant's token bucket says when it refills.
   * vLLM's clients and OpenAI's back off on this. */
  if (e->http_status == 429) {
    char secs[24];
    snprintf(secs, sizeof secs, "%lld", (long long)(e->retry_after_s > 0 ? e->retry_after_s : 1));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", secs);
  }
  api_http_send_body(req, e->http_status, "application/json", b.data, b.len);
  api_buf_free(&b);
  api_metrics_request_failed(a->metrics, e->http_status);
}

void api_http_send_unauthorized(struct api_actor *a, struct evhttp_request *req) {
  struct api_error e;
  api_error_set(&e, 401, NULL, "missing or incorrect API key: send `Authorization: Bearer YOUR_KEY`");
  snprintf(e.code, sizeof e.code, "invalid_api_key");
  evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
  api_http_send_error(a, req, &e);
}

bool api_http_cors(struct api_actor *a, struct evhttp_request *req, enum evhttp_cmd_type method) {
  struct evkeyvalq *in = evhttp_request_get_input_headers(req), *out = evhttp_request_get_output_headers(req);
  struct api_cors_header h[6];
  int n = 0;
  char why[128];
  enum api_cors_verdict v = api_cors_check(&a->cors, method == EVHTTP_REQ_OPTIONS, evhttp_find_header(in, "Origin"),
                                           evhttp_find_header(in, "Access-Control-Request-Method"),
                                           evhttp_find_header(in, "Access-Control-Request-Headers"), h, &n, why,
                                           sizeof why);
  for (int i = 0; i < n; i++) evhttp_add_header(out, h[i].name, h[i].value); /* refuses CR/LF */
  if (v == API_CORS_PREFLIGHT) {
    evhttp_send_reply(req, 200, "OK", NULL);
    return false;
  }
  if (v == API_CORS_DENIED) {
    api_http_send_body(req, 400, "text/plain", why, strlen(why));
    return false;
  }
  return true;
}

void api_http_echo_request_id(struct evhttp_request *req) {
  const char *id = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
  if (!id) return;
  size_t n = strlen(id);
  for (size_t i = 0; i < n; i++) /* visible ASCII only: nothing to inject, nothing to escape */
    if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7E) return;
  if (n == 0 || n > 256) return;
  evhttp_add_header(evhttp_request_get_output_headers(req), "X-Request-Id", id);
}

void api_http_send_rendered(struct api_actor *a, struct evhttp_request *req, llb_status render_status,
                            const struct api_buf *b) {
  if (render_status == LLB_STATUS_OK) {
    api_http_send_body(req, 200, "application/json", b->data, b->len);
    return;
  }
  struct api_error e;
  api_error_set(&e, 500, NULL, "could not render the response");
  api_http_send_error(a, req, &e);
}

void api_route_tokenize_reply(struct api_actor *a, struct evhttp_request *req, const struct api_tokenize *t,
                              const struct llb_request_output *ro) {
  if (ro->max_model_len > 0) a->max_model_len = ro->max_model_len;
  struct api_buf b = {0};
  api_http_send_rendered(a, req, api_tokenize_render(t, ro, a->model_name, (int64_t)time(NULL), &b), &b);
  api_buf_free(&b);
}

void api_route_embeddings_reply(struct api_actor *a, struct evhttp_request *req, const struct api_embeddings *e,
                                const char *id) {
  struct api_buf b = {0};
  api_http_send_rendered(a, req, api_embeddings_render(e, id, (int64_t)time(NULL), &b), &b);
  api_buf_free(&b);
}

void api_route_version(struct api_actor *a, struct evhttp_request *req) {
  (void)a;
  static const char body[] = "{\"version\":\"" LLB_VERSION_STRING "\"}";
  api_http_send_body(req, 200, "application/json", body, sizeof body - 1);
}

void api_on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct api_actor *a = user;
  uint8_t mem[4096];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_scheduler_stats s;
  if (llb_scheduler_stats_decode(msg->data, msg->len, &arena, &s) == LLB_STATUS_OK)
    api_metrics_engine_stats(a->metrics, &s);
  else
    LLB_LOG_WARN("stats_malformed", "subject=%s error=\"%s\"", msg->subject, llb_err_last());
  llb_arena_destroy(&arena);
}

/* An output processor's beat: a new instance-and-pid key after the first one means one
 * restarted (or joined); its predecessor's outputs may be lost (api_resend_after_op_restart). */
static void note_output_processor(struct api_actor *a, const struct llb_heartbeat *hb, int64_t now) {
  const uint32_t pid = (uint32_t)hb->pid; /* FNV-1a of the instance, then the pid */
  const uint64_t key = llb_fnv1a64(llb_fnv1a64(LLB_FNV1A64_INIT, hb->instance.data, hb->instance.len), &pid, sizeof pid);
  int oldest = 0;
  for (int i = 0; i < a->num_op_keys; i++) {
    if (a->op_keys[i] == key) {
      a->op_seen_ns[i] = now;
      return;
    }
    if (a->op_seen_ns[i] < a->op_seen_ns[oldest]) oldest = i;
  }
  if (a->num_op_keys > 0) {
    atomic_store(&a->op_restart_ns, now);
    LLB_LOG_INFO("output_processor_restart_seen", "instance=%.*s pid=%d engine_id=%.*s", (int)hb->instance.len,
                 hb->instance.data, hb->pid, (int)hb->engine_id.len, hb->engine_id.data);
  }
  const int at = a->num_op_keys < API_MAX_OP_SEEN ? a->num_op_keys++ : oldest;
  a->op_keys[at] = key;
  a->op_seen_ns[at] = now;
}

void api_on_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct api_actor *a = user;
  uint8_t mem[2048];
  struct llb_arena arena;
  llb_arena_init(&arena, mem, sizeof mem);
  struct llb_heartbeat hb;
  if (llb_heartbeat_decode(msg->data, msg->len, &arena, &hb) == LLB_STATUS_OK) {
    const int64_t now = llb_now_ns();
    for (int i = 0; i < a->num_health; i++)
      if (strcmp(a->health[i].actor, hb.actor.data) == 0)
        atomic_store(hb.ready ? &a->health[i].last_ready_ns : &a->health[i].last_not_ready_ns, now);
    if (strcmp(hb.actor.data, "output_processor") == 0) note_output_processor(a, &hb, now);
    else if (strcmp(hb.actor.data, "input_processor") == 0) atomic_store(&a->ip_beat_ns, now);
  }
  llb_arena_destroy(&arena);
}

void api_route_models(struct api_actor *a, struct evhttp_request *req) {
  struct api_buf b = {0};
  bool ok = api_buf_printf(&b, "{\"object\":\"list\",\"data\":[") &&
            api_model_object_render(a->model_name, (int64_t)time(NULL), a->max_model_len, &b) == LLB_STATUS_OK &&
            api_buf_printf(&b, "]}");
  if (ok) api_http_send_body(req, 200, "application/json", b.data, b.len);
  else evhttp_send_error(req, 500, NULL);
  api_buf_free(&b);
}

void api_route_health(struct api_actor *a, struct evhttp_request *req) {
  int64_t now = llb_now_ns();
  struct api_buf missing = {0}, recovering = {0};
  for (int i = 0; i < a->num_health; i++) {
    int64_t t = atomic_load(&a->health[i].last_ready_ns);
    int64_t t_not = atomic_load(&a->health[i].last_not_ready_ns);
    if (t_not > t && now - t_not <= a->o.health_window_ms * 1000000) /* says it is not ready */
      api_buf_printf(&recovering, "%s%s", recovering.len ? ", " : "", a->health[i].actor);
    else if (!t || now - t > a->o.health_window_ms * 1000000) /* silent: dead or restarting */
      api_buf_printf(&missing, "%s%s", missing.len ? ", " : "", a->health[i].actor);
  }
  if (missing.len == 0 && recovering.len == 0) {
    api_http_send_body(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
  } else {
    struct api_error e;
    if (missing.len && recovering.len)
      api_error_set(&e, 503, NULL, "not ready: no ready heartbeat within %lld ms from %s; not ready "
                    "(recovering from a worker or kv_manager failure): %s",
                    (long long)a->o.health_window_ms, missing.data, recovering.data);
    else if (missing.len)
      api_error_set(&e, 503, NULL, "not ready: no ready heartbeat within %lld ms from %s",
                    (long long)a->o.health_window_ms, missing.data);
    else
      api_error_set(&e, 503, NULL, "not ready (recovering from a worker or kv_manager failure): %s",
                    recovering.data);
    struct api_buf b = {0};
    if (api_error_render(&e, &b)) api_http_send_body(req, 503, "application/json", b.data, b.len);
    api_buf_free(&b);
  }
  api_buf_free(&missing);
  api_buf_free(&recovering);
}

void api_route_metrics(struct api_actor *a, struct evhttp_request *req) {
  struct api_buf b = {0};
  char *more = NULL;
  size_t more_len = 0;
  bool ok = api_metrics_render(a->metrics, &b) &&
            (!a->o.registry || llb_metrics_render(a->o.registry, &more, &more_len) == LLB_STATUS_OK) &&
            (!more || api_buf_append(&b, more, more_len));
  free(more);
  if (ok)
    api_http_send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
  else
    evhttp_send_error(req, 500, NULL);
  api_buf_free(&b);
}

