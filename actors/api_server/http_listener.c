/* The api server's evhttp listener; see http_listener.h. */
#include "actors/api_server/http_listener.h"

#include <event2/http.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "actors/api_server/http_guard.h"

struct api_server_http_listener {
  struct evhttp *http;
  struct http_guard *guard; /* read deadlines, connection limit, header gate */
  int port;
};

static int bound_port(struct evhttp_bound_socket *sock) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return 0;
}

llb_status api_server_http_listener_create(struct event_base *base, const struct api_server_http_listener_options *o,
                                    struct api_server_http_listener **out) {
  struct api_server_http_listener *l = calloc(1, sizeof *l);
  if (!l || !(l->http = evhttp_new(base))) {
    free(l);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "evhttp_new failed");
  }
  /* Bodies up to 4x the limit reach us (JSON 413); beyond that evhttp refuses them itself. */
  size_t hard = o->max_body_bytes * 4 + 65536;
  evhttp_set_max_body_size(l->http, (ev_ssize_t)hard);
  evhttp_set_max_headers_size(l->http, 64 * 1024);
  evhttp_set_timeout(l->http, (int)o->request_timeout_s); /* inactivity: reset by every byte */
  static const char busy_body[] =
      "{\"error\": {\"message\": \"too many open connections; retry later\", \"type\": \"ServiceUnavailableError\", "
      "\"param\": null, \"code\": 503}}\n";
  char busy[512];
  snprintf(busy, sizeof busy, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", strlen(busy_body), busy_body);
  const struct http_guard_options go = {.read_timeout_ms = o->request_timeout_s * 1000, /* and in total */
                                        .max_connections = o->max_connections, .busy_response = busy,
                                        .gate = o->gate, .release = o->release,
                                        .gate_user = o->gate_user};
  llb_status st = http_guard_create(l->http, &go, &l->guard);
  if (st != LLB_STATUS_OK) {
    api_server_http_listener_destroy(l);
    return st;
  }
  evhttp_set_allowed_methods(l->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                          EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
  evhttp_set_gencb(l->http, o->on_request, o->arg);
  struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(l->http, o->host, (ev_uint16_t)o->port);
  if (!sock) {
    st = LLB_ERRF(LLB_STATUS_IO, "cannot listen on %s:%d (address in use or not local?)", o->host, o->port);
    api_server_http_listener_destroy(l);
    return st;
  }
  l->port = bound_port(sock);
  *out = l;
  return LLB_STATUS_OK;
}

int api_server_http_listener_port(const struct api_server_http_listener *l) { return l ? l->port : 0; }

void api_server_http_listener_request_read(struct api_server_http_listener *l, struct evhttp_request *req) {
  http_guard_request_read(l->guard, req);
}

void api_server_http_listener_destroy(struct api_server_http_listener *l) {
  if (!l) return;
  if (l->http) evhttp_free(l->http);
  http_guard_destroy(l->guard); /* after evhttp_free, which closed every connection */
  free(l);
}
