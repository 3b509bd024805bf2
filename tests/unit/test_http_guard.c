/* actors/api_server/http_guard (through the api server's listener, http_listener.h) with the
 * api server's gate (api_server_gate.h) on a real evhttp on loopback, its event loop on a thread: a
 * request whose headers carry no valid key is answered 401 before its body is read (the client
 * never sends the body it announced: without the gate the server would wait for it), also on a
 * kept-alive connection; a preflight passes; a connection over max_connections gets 503 at once,
 * and a freed slot takes the next one; a tenant at its max_concurrent is refused 429 on the
 * headers and that answer is held (a tarpit) while another tenant's request is served, and its
 * slot comes back when its request is answered. */
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
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "actors/api_server/api_server_gate.h"
#include "actors/api_server/api_server_keys.h"
#include "actors/api_server/http_listener.h"

#define KEY "sk-test-0123456789"   /* tenant b: no limits */
#define KEY_A "sk-test-aaaaaaaaaa" /* tenant a: max_concurrent=1 */

static struct event_base *base;
static struct api_server_http_listener *listener;
static struct api_server_keys *keys;
static struct api_server_gate *gate;
static pthread_t loop_thread;
static atomic_int bodies_read, num_parked;
static struct evhttp_request *parked; /* loop thread only */

static void answer(struct evhttp_request *req) {
  struct evbuffer *out = evbuffer_new();
  evbuffer_add(out, "ok", 2);
  evhttp_send_reply(req, 200, "OK", out);
  evbuffer_free(out);
}

/* A request with `X-Park: 1` is left unanswered (in flight) until answer_parked. */
static void on_request(struct evhttp_request *req, void *arg) {
  (void)arg;
  api_server_http_listener_request_read(listener, req);
  atomic_fetch_add(&bodies_read, 1);
  if (evhttp_find_header(evhttp_request_get_input_headers(req), "X-Park")) {
    parked = req;
    atomic_fetch_add(&num_parked, 1);
    return;
  }
  answer(req);
}

static void on_answer_parked(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what, (void)arg;
  if (parked) answer(parked);
  parked = NULL;
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
  const struct api_server_request_rate limits[] = {{.tenant = "a", .max_concurrent = 1}};
  if (api_server_keys_create(&keys) || api_server_keys_add(keys, KEY, "b") || api_server_keys_add(keys, KEY_A, "a") ||
      api_server_gate_create(keys, limits, 1, &gate))
    return -1;
  const struct api_server_http_listener_options o = {.host = "127.0.0.1", .port = 0, .max_body_bytes = 1 << 20,
                                              .request_timeout_s = 60, .max_connections = 6,
                                              .gate = api_server_gate_check, .release = api_server_gate_release,
                                              .gate_user = gate, .on_request = on_request};
  if (!base || api_server_http_listener_create(base, &o, &listener) != LLB_STATUS_OK) return -1;
  return pthread_create(&loop_thread, NULL, run_loop, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  event_base_loopbreak(base);
  pthread_join(loop_thread, NULL);
  api_server_http_listener_destroy(listener);
  api_server_gate_destroy(gate);
  api_server_keys_destroy(keys);
  event_base_free(base);
  return 0;
}

static int connect_to_server(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)api_server_http_listener_port(listener))};
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
  int open_fds[6];
  for (int i = 0; i < 6; i++) {
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
  for (int i = 1; i < 6; i++) close(open_fds[i]);
}

static void send_a_generation(int fd, const char *key, const char *extra) {
  char req[512];
  snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s"
           "Content-Length: 4\r\n\r\nbody", key, extra);
  send_all(fd, req);
}

static void test_a_tenant_at_its_max_concurrent_is_held_then_refused_while_another_is_served(void **state) {
  (void)state;
  api_server_gate_set_hold_ms(gate, 60000);
  int a1 = connect_to_server(); /* a's one generation in flight */
  send_a_generation(a1, KEY_A, "X-Park: 1\r\n");
  for (int i = 0; i < 2000 && atomic_load(&num_parked) == 0; i++) usleep(10000);
  assert_int_equal(atomic_load(&num_parked), 1);
  const int before = atomic_load(&bodies_read);
  int a2 = connect_to_server(); /* a's second: over max_concurrent, its 10 MB never sent */
  send_all(a2, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY_A "\r\n"
               "Content-Length: 10000000\r\n\r\n");
  int b = connect_to_server(); /* b meanwhile: served */
  send_a_generation(b, KEY, "");
  assert_int_equal(read_status(b), 200);
  close(b);
  struct pollfd p = {.fd = a2, .events = POLLIN}; /* a's refusal is still held: nothing to read */
  assert_int_equal(poll(&p, 1, 0), 0);
  close(a2);
  /* a short hold: the 429 comes, after a's body was sent meanwhile (not read: dropped) */
  api_server_gate_set_hold_ms(gate, 50);
  int a3 = connect_to_server();
  send_a_generation(a3, KEY_A, "");
  assert_int_equal(read_status(a3), 429);
  close(a3);
  /* the same route in absolute form with an escaped letter (evhttp routes it by its decoded
   * path) is counted as well, not let through uncounted */
  int a5 = connect_to_server();
  send_all(a5, "POST http://x/v1/%63ompletions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY_A "\r\n"
               "Content-Length: 2\r\n\r\n{}");
  assert_int_equal(read_status(a5), 429);
  close(a5);
  assert_int_equal(atomic_load(&bodies_read), before + 1); /* b's only */
  /* a's first is answered: its slot comes back, a's next generation passes */
  assert_int_equal(event_base_once(base, -1, EV_TIMEOUT, on_answer_parked, NULL, &(struct timeval){0}), 0);
  assert_int_equal(read_status(a1), 200);
  close(a1);
  int a4 = connect_to_server();
  send_a_generation(a4, KEY_A, "");
  assert_int_equal(read_status(a4), 200);
  close(a4);
  api_server_gate_set_hold_ms(gate, API_SERVER_GATE_HOLD_MS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_request_without_a_key_is_refused_before_its_body),
      cmocka_unit_test(test_a_keyed_request_and_a_preflight_pass_and_keep_alive_is_gated_again),
      cmocka_unit_test(test_connections_over_the_limit_get_503_at_once),
      cmocka_unit_test(test_a_tenant_at_its_max_concurrent_is_held_then_refused_while_another_is_served),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
