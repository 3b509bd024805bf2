/* actors/api_server/http_guard (through the api server's listener, http_listener.h) on a real
 * evhttp on loopback, its event loop on a thread: a request whose headers carry no valid key is
 * answered 401 before its body is read (the client never sends the body it announced: without
 * the gate the server would wait for it), also on a kept-alive connection; a preflight passes;
 * a connection over max_connections gets 503 at once, and a freed slot takes the next one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "actors/api_server/http_listener.h"

#define KEY "sk-test-0123456789"

static struct event_base *base;
static struct api_http_listener *listener;
static pthread_t loop_thread;
static atomic_int bodies_read;

static const char *gate(void *user, bool is_options, const char *authorization) {
  (void)user;
  static const char refused[] = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  return is_options || (authorization && strcmp(authorization, "Bearer " KEY) == 0) ? NULL : refused;
}

static void on_request(struct evhttp_request *req, void *arg) {
  (void)arg;
  api_http_listener_request_read(listener, req);
  atomic_fetch_add(&bodies_read, 1);
  struct evbuffer *out = evbuffer_new();
  evbuffer_add(out, "ok", 2);
  evhttp_send_reply(req, 200, "OK", out);
  evbuffer_free(out);
}

static void *run_loop(void *arg) {
  (void)arg;
  event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

static int setup(void **state) {
  (void)state;
  evthread_use_pthreads();
  base = event_base_new();
  const struct api_http_listener_options o = {.host = "127.0.0.1", .port = 0, .max_body_bytes = 1 << 20,
                                              .request_timeout_s = 60, .max_connections = 3, .gate = gate,
                                              .on_request = on_request};
  if (!base || api_http_listener_create(base, &o, &listener) != LLB_STATUS_OK) return -1;
  return pthread_create(&loop_thread, NULL, run_loop, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  event_base_loopbreak(base);
  pthread_join(loop_thread, NULL);
  api_http_listener_destroy(listener);
  event_base_free(base);
  return 0;
}

static int connect_to_server(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)api_http_listener_port(listener))};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {.tv_sec = 20}; /* a hang guard: the answers here come at once or never */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

static void send_all(int fd, const char *s) { assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s)); }

/* Reads one response's status line and headers (enough to see the status). */
static int read_status(int fd) {
  char buf[4096];
  size_t n = 0;
  while (n < sizeof buf - 1) {
    ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
    if (r <= 0) break;
    n += (size_t)r;
    buf[n] = '\0';
    if (strstr(buf, "\r\n\r\n")) break;
  }
  buf[n] = '\0';
  int status = 0;
  if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return -1;
  return status;
}

static void test_a_request_without_a_key_is_refused_before_its_body(void **state) {
  (void)state;
  int before = atomic_load(&bodies_read);
  int fd = connect_to_server();
  /* announces 10 MB and sends none of it: only the headers can be answered */
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n"
               "Authorization: Bearer sk-wrong-000000000\r\n\r\n");
  assert_int_equal(read_status(fd), 401);
  close(fd);
  fd = connect_to_server(); /* no Authorization at all, headers sent in pieces */
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
  usleep(20000);
  send_all(fd, "Content-Length: 5000000\r\n\r\n");
  assert_int_equal(read_status(fd), 401);
  close(fd);
  assert_int_equal(atomic_load(&bodies_read), before);
}

static void test_a_keyed_request_and_a_preflight_pass_and_keep_alive_is_gated_again(void **state) {
  (void)state;
  int fd = connect_to_server();
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n"
               "Content-Length: 4\r\n\r\nbody");
  assert_int_equal(read_status(fd), 200);
  usleep(50000); /* the rest of the answer ("ok") */
  char drain[16];
  (void)recv(fd, drain, sizeof drain, MSG_DONTWAIT);
  /* the next request on the same connection, without the key */
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n");
  assert_int_equal(read_status(fd), 401);
  close(fd);
  fd = connect_to_server();
  send_all(fd, "OPTIONS /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: https://a.example\r\n"
               "Access-Control-Request-Method: POST\r\n\r\n");
  assert_int_equal(read_status(fd), 200);
  close(fd);
}

static void test_connections_over_the_limit_get_503_at_once(void **state) {
  (void)state;
  int open_fds[3];
  for (int i = 0; i < 3; i++) {
    open_fds[i] = connect_to_server();
    send_all(open_fds[i], "GET /health HTTP/1.1\r\n"); /* idle, half a request */
  }
  usleep(100000);
  int fd = connect_to_server();
  assert_int_equal(read_status(fd), 503);
  close(fd);
  close(open_fds[0]); /* a slot frees: the next connection is served */
  usleep(200000);
  fd = connect_to_server();
  send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n\r\n");
  assert_int_equal(read_status(fd), 200);
  close(fd);
  close(open_fds[1]);
  close(open_fds[2]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_request_without_a_key_is_refused_before_its_body),
      cmocka_unit_test(test_a_keyed_request_and_a_preflight_pass_and_keep_alive_is_gated_again),
      cmocka_unit_test(test_connections_over_the_limit_get_503_at_once),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
