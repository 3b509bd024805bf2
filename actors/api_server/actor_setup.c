/* The api server's life cycle (see actor.h): options checked and the actor created, the HTTP
 * listener and the bus subscriptions set up on the bus loop thread, stop, and teardown (calls in
 * flight failed, the listener freed on the loop). Requests and outputs: actor.c. */
#include "actors/api_server/actor.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actors/api_server/actor_internal.h"
#include "actors/api_server/api_structured.h"
#include "actors/api_server/api_keys.h"
#include "actors/api_server/http_deadline.h"
#include "actors/api_server/api_metrics.h"
#include "actors/api_server/api_options.h"
#include "actors/api_server/api_request.h"
#include "actors/api_server/api_response.h"
#include "base/log.h"
#include "schemas/control.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

static llb_status loop_err(struct api_actor *a, llb_status st) {
  snprintf(a->setup_error, sizeof a->setup_error, "%s", llb_err_last());
  return st;
}

static void setup_signal(struct api_actor *a, llb_status st) {
  pthread_mutex_lock(&a->setup_mu);
  a->setup_status = st;
  a->setup_done = true;
  pthread_cond_broadcast(&a->setup_cv);
  pthread_mutex_unlock(&a->setup_mu);
}

static llb_status run_on_loop(struct api_actor *a, event_callback_fn fn) {
  pthread_mutex_lock(&a->setup_mu);
  a->setup_done = false;
  pthread_mutex_unlock(&a->setup_mu);
  struct timeval zero = {0, 0};
  if (event_base_once(a->base, -1, EV_TIMEOUT, fn, a, &zero) != 0)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "event_base_once failed");
  pthread_mutex_lock(&a->setup_mu);
  while (!a->setup_done) pthread_cond_wait(&a->setup_cv, &a->setup_mu);
  llb_status st = a->setup_status;
  pthread_mutex_unlock(&a->setup_mu);
  return st;
}

static void loop_setup(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_actor *a = arg;
  llb_status st = LLB_STATUS_OK;
  a->wake = event_new(a->base, -1, EV_PERSIST | EV_READ, api_on_wake, a);
  a->http = evhttp_new(a->base);
  if (!a->wake || !a->http) {
    setup_signal(a, loop_err(a, LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "evhttp_new failed")));
    return;
  }
  event_add(a->wake, NULL);
  /* Bodies up to 4x the limit reach us (JSON 413); beyond that evhttp refuses them itself. */
  size_t hard = a->o.max_body_bytes * 4 + 65536;
  evhttp_set_max_body_size(a->http, (ev_ssize_t)hard);
  evhttp_set_max_headers_size(a->http, 64 * 1024);
  evhttp_set_timeout(a->http, (int)a->o.request_timeout_s); /* inactivity: reset by every byte */
  st = http_deadlines_create(a->http, a->o.request_timeout_s * 1000, &a->deadlines); /* and in total */
  if (st) {
    setup_signal(a, loop_err(a, st));
    return;
  }
  evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                          EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
  evhttp_set_gencb(a->http, api_on_request, a);
  struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(a->http, a->http_host, (ev_uint16_t)a->http_port);
  if (!sock) {
    st = LLB_ERRF(LLB_STATUS_IO, "cannot listen on %s:%d (address in use or not local?)", a->http_host, a->http_port);
    setup_signal(a, loop_err(a, st));
    return;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  evutil_socket_t s = evhttp_bound_socket_get_fd(sock);
  if (getsockname(s, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) a->bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6) a->bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  setup_signal(a, LLB_STATUS_OK);
}

/* Second half of the teardown, once the last replies had a moment to flush. */
static void loop_free_http(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_actor *a = arg;
  if (a->http) evhttp_free(a->http);
  a->http = NULL;
  http_deadlines_destroy(a->deadlines);
  a->deadlines = NULL;
  pthread_mutex_lock(&a->qmu);
  if (a->wake) event_free(a->wake);
  a->wake = NULL;
  pthread_mutex_unlock(&a->qmu);
  setup_signal(a, LLB_STATUS_OK);
}

static void loop_teardown(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_actor *a = arg;
  a->stopped = true;
  api_on_wake(-1, 0, a); /* deliver what already arrived */
  struct api_error e;
  api_error_set(&e, 503, NULL, "the server is shutting down");
  while (a->calls) {
    struct api_call *c = a->calls;
    /* Subs without an engine id cannot be aborted: settle them so api_call_fail frees the call. */
    for (int32_t i = 0; i < c->num_subs; i++)
      if (!c->subs[i].engine_id[0]) c->subs[i].finished = true;
    api_call_fail(c, &e);
  }
  struct timeval flush = {.tv_sec = 0, .tv_usec = 300 * 1000};
  if (event_base_once(a->base, -1, EV_TIMEOUT, loop_free_http, a, &flush) != 0) loop_free_http(-1, 0, a);
}

/* ---- public ------------------------------------------------------------------------- */

llb_status api_actor_create(const struct api_actor_options *o, struct api_actor **out) {
  if (!o || !o->model_name || !*o->model_name || strlen(o->model_name) >= API_MAX_MODEL_BYTES)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: --model-name must be 1..%d bytes", API_MAX_MODEL_BYTES - 1);
  struct api_actor *a = calloc(1, sizeof *a);
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: out of memory");
  a->o = *o;
  if (!a->o.max_body_bytes) a->o.max_body_bytes = 1024 * 1024;
  if (a->o.request_timeout_s <= 0) a->o.request_timeout_s = 10;
  if (a->o.first_output_timeout_s <= 0) a->o.first_output_timeout_s = 60;
  if (a->o.max_concurrent <= 0) a->o.max_concurrent = 256;
  if (a->o.health_window_ms <= 0) a->o.health_window_ms = 10000;
  snprintf(a->model_name, sizeof a->model_name, "%s", o->model_name);
  if (o->allowed_local_media_path && o->allowed_local_media_path[0]) {
    char real[PATH_MAX];
    if (!realpath(o->allowed_local_media_path, real) || !(a->local_media_dir = strdup(real))) {
      llb_status rst = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--allowed-local-media-path %s: %s",
                                o->allowed_local_media_path, strerror(errno));
      free(a);
      return rst;
    }
  }
  snprintf(a->tenant, sizeof a->tenant, "%s", o->tenant ? o->tenant : BUS_DEFAULT_TENANT);
  llb_status cst = api_cors_parse(o->cors_allowed_origins, o->cors_allowed_methods, o->cors_allowed_headers,
                                  o->cors_allow_credentials, &a->cors);
  if (cst != LLB_STATUS_OK) {
    free(a->local_media_dir);
    free(a);
    return cst;
  }
  llb_status pst = api_parse_host_port(o->http_addr ? o->http_addr : "127.0.0.1:8000", a->http_host,
                                       sizeof a->http_host, &a->http_port);
  if (pst != LLB_STATUS_OK) {
    free(a->local_media_dir);
    free(a);
    return pst;
  }
  if (getrandom(&a->id_salt, sizeof a->id_salt, 0) != (ssize_t)sizeof a->id_salt)
    a->id_salt = (uint64_t)llb_wall_ns() ^ ((uint64_t)getpid() << 32);
  pthread_mutex_init(&a->qmu, NULL);
  pthread_mutex_init(&a->setup_mu, NULL);
  pthread_cond_init(&a->setup_cv, NULL);
  llb_arena_init(&a->arena, NULL, 0);
  llb_status st = api_metrics_create(a->model_name, &a->metrics);
  if (st == LLB_STATUS_OK)
    st = api_peer_beats_create(o->health_actors ? o->health_actors : API_ACTOR_DEFAULT_HEALTH_ACTORS,
                               a->o.health_window_ms, a->metrics, &a->peers);
  if (st != LLB_STATUS_OK) {
    api_actor_destroy(a);
    return st;
  }
  *out = a;
  return LLB_STATUS_OK;
}

llb_status api_actor_start(struct api_actor *a, struct bus *bus) {
  a->bus = bus;
  a->base = bus_event_base(bus);
  const char *prefix = bus_prefix(bus);
  llb_status st = bus_subject_generate(prefix, a->tenant, a->generate_subject, sizeof a->generate_subject);
  if (st == LLB_STATUS_OK) st = bus_subject_abort(prefix, a->tenant, a->abort_subject, sizeof a->abort_subject);
  if (st == LLB_STATUS_OK &&
      snprintf(a->tokenize_subject, sizeof a->tokenize_subject, "%s.tokenize.%s", prefix, a->tenant) >=
          (int)sizeof a->tokenize_subject)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "api_server: tokenize subject too long");
  if (st == LLB_STATUS_OK) st = bus_new_inbox(bus, a->inbox, sizeof a->inbox);
  if (st != LLB_STATUS_OK) return st;
  st = run_on_loop(a, loop_setup);
  if (st != LLB_STATUS_OK) return LLB_ERRF(st, "%s", a->setup_error);
  a->started = true;
  char subj[BUS_SUBJECT_MAX];
  snprintf(subj, sizeof subj, "%s.*", a->inbox);
  st = bus_subscribe(bus, subj, NULL, api_on_inbox, a, NULL);
  if (st == LLB_STATUS_OK) {
    snprintf(subj, sizeof subj, "%s.engine.*.stats", prefix);
    st = bus_subscribe(bus, subj, NULL, api_peer_beats_on_stats, a->peers, NULL);
  }
  if (st == LLB_STATUS_OK) {
    snprintf(subj, sizeof subj, "%s.health.*.*", prefix);
    st = bus_subscribe(bus, subj, NULL, api_peer_beats_on_heartbeat, a->peers, NULL);
  }
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("api_server_listening", "http=%s:%d model=%s generate=%s inbox=%s.*", a->http_host, a->bound_port,
               a->model_name, a->generate_subject, a->inbox);
  return LLB_STATUS_OK;
}

int api_actor_port(const struct api_actor *a) { return a ? a->bound_port : 0; }

int64_t api_actor_inflight(const struct api_actor *a) { return a ? atomic_load(&a->inflight) : 0; }

void api_actor_stop(struct api_actor *a) {
  if (!a || !a->base || a->stopped || !a->http) return;
  run_on_loop(a, loop_teardown);
}

void api_actor_destroy(struct api_actor *a) {
  if (!a) return;
  struct inbox_item *it = a->qhead;
  while (it) {
    struct inbox_item *next = it->next;
    free(it);
    it = next;
  }
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->enc);
  api_peer_beats_destroy(a->peers);
  api_metrics_destroy(a->metrics);
  pthread_mutex_destroy(&a->qmu);
  pthread_mutex_destroy(&a->setup_mu);
  pthread_cond_destroy(&a->setup_cv);
  free(a->local_media_dir);
  free(a);
}
