/* GET /metrics over evhttp on its own thread (see metrics_http.h). */
#include "bus/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

#include "base/log.h"

#define METRICS_HTTP_MAX_HEADERS_BYTES 8192
#define METRICS_HTTP_TIMEOUT_S 10

struct bus_metrics_http {
  struct event_base *base;
  struct evhttp *http;
  struct event *stop_ev;
  pthread_t thread;
  bool thread_started;
  struct llb_metrics *registry;
  int port;
};

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static void threads_init(void) { evthread_use_pthreads(); }

static void on_request(struct evhttp_request *req, void *arg) {
  struct bus_metrics_http *h = arg;
  const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
  if (!path || strcmp(path, "/metrics") != 0) {
    evhttp_send_error(req, HTTP_NOTFOUND, "only /metrics here");
    return;
  }
  if (evhttp_request_get_command(req) != EVHTTP_REQ_GET && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
    evhttp_send_error(req, 405, "GET /metrics");
    return;
  }
  char *text = NULL;
  size_t len = 0;
  if (llb_metrics_render(h->registry, &text, &len) != LLB_STATUS_OK) {
    evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
    return;
  }
  struct evbuffer *b = evbuffer_new();
  if (!b || evbuffer_add(b, text, len) != 0) {
    free(text);
    evbuffer_free(b);
    evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
    return;
  }
  free(text);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
  evhttp_send_reply(req, HTTP_OK, "OK", b);
  evbuffer_free(b);
}

static void *server_main(void *arg) {
  struct bus_metrics_http *h = arg;
  event_base_loop(h->base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

/* An activated event is not lost before the loop starts, unlike event_base_loopbreak. */
static void on_stop(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  event_base_loopbreak(arg);
}

static int bound_port(struct evhttp_bound_socket *sock) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return -1;
}

llb_status bus_metrics_http_start(const char *host, int port, struct llb_metrics *r,
                                  struct bus_metrics_http **out) {
  *out = NULL;
  if (!host || !r || port < 0 || port > 65535)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics listener: host, registry and a port in 0..65535 needed");
  pthread_once(&threads_once, threads_init);
  struct bus_metrics_http *h = calloc(1, sizeof *h);
  if (!h) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics listener: out of memory");
  h->registry = r;
  llb_status st = LLB_STATUS_OK;
  h->base = event_base_new();
  h->http = h->base ? evhttp_new(h->base) : NULL;
  h->stop_ev = h->base ? event_new(h->base, -1, 0, on_stop, h->base) : NULL;
  if (!h->http || !h->stop_ev) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics listener: libevent set-up failed");
    goto fail;
  }
  evhttp_set_max_headers_size(h->http, METRICS_HTTP_MAX_HEADERS_BYTES);
  evhttp_set_max_body_size(h->http, 0);
  evhttp_set_timeout(h->http, METRICS_HTTP_TIMEOUT_S);
  evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
  evhttp_set_gencb(h->http, on_request, h);
  struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(h->http, host, (uint16_t)port);
  if (!sock) {
    st = LLB_ERRF(LLB_STATUS_IO, "metrics listener: cannot listen on %s:%d (in use, or no such address)", host, port);
    goto fail;
  }
  h->port = bound_port(sock);
  if (pthread_create(&h->thread, NULL, server_main, h) != 0) {
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "metrics listener: cannot start its thread");
    goto fail;
  }
  h->thread_started = true;
  *out = h;
  return LLB_STATUS_OK;
fail:
  bus_metrics_http_stop(h);
  return st;
}

int bus_metrics_http_port(const struct bus_metrics_http *h) { return h ? h->port : -1; }

void bus_metrics_http_stop(struct bus_metrics_http *h) {
  if (!h) return;
  if (h->thread_started) {
    event_active(h->stop_ev, 0, 0);
    pthread_join(h->thread, NULL);
  }
  if (h->http) evhttp_free(h->http);
  if (h->stop_ev) event_free(h->stop_ev);
  if (h->base) event_base_free(h->base);
  free(h);
}
