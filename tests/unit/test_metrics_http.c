/* bus/metrics_http: GET /metrics answers the registry in the text format with its content
 * type; anything else is refused (404 / 405), oversized headers too, and the server stops. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "bus/metrics_http.h"

/* Sends `req` to 127.0.0.1:port and reads the whole answer into buf[cap]. */
static void exchange(int port, const char *req, size_t req_len, char *buf, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  for (size_t off = 0; off < req_len;) {
    ssize_t w = write(fd, req + off, req_len - off);
    if (w <= 0) break; /* the server may close early on a refused request */
    off += (size_t)w;
  }
  size_t n = 0;
  for (ssize_t r; n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0;) n += (size_t)r;
  buf[n] = '\0';
  close(fd);
}

static void test_get_metrics_serves_the_registry_and_nothing_else(void **state) {
  (void)state;
  struct llb_metrics *r;
  assert_int_equal(llb_metrics_create(&r), LLB_STATUS_OK);
  llb_series_add(llb_metric_series(llb_metrics_counter(r, "llmbus:x_total", "X.", 0, NULL), NULL), 42);
  struct bus_metrics_http *h;
  assert_int_equal(bus_metrics_http_start("127.0.0.1", 0, r, &h), LLB_STATUS_OK);
  const int port = bus_metrics_http_port(h);
  assert_true(port > 0);
  char buf[65536];
  const char *get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  exchange(port, get, strlen(get), buf, sizeof buf);
  assert_non_null(strstr(buf, "HTTP/1.1 200"));
  assert_non_null(strstr(buf, "Content-Type: text/plain; version=0.0.4"));
  assert_non_null(strstr(buf, "\nllmbus:x_total 42\n"));
  const char *other = "GET /secret HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  exchange(port, other, strlen(other), buf, sizeof buf);
  assert_non_null(strstr(buf, "HTTP/1.1 404"));
  const char *post = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  exchange(port, post, strlen(post), buf, sizeof buf);
  assert_non_null(strstr(buf, "HTTP/1.1 405"));
  /* 20 KB of headers: refused, never served */
  size_t big_len = 20000 + 64;
  char *big = malloc(big_len + 1);
  int k = snprintf(big, big_len, "GET /metrics HTTP/1.1\r\nX-Big: ");
  memset(big + k, 'a', 20000);
  memcpy(big + k + 20000, "\r\n\r\n", 5);
  exchange(port, big, strlen(big), buf, sizeof buf);
  assert_null(strstr(buf, "HTTP/1.1 200"));
  free(big);
  /* the port is taken while it runs: a second listener on it is an IO error naming it */
  struct bus_metrics_http *h2 = NULL;
  assert_int_equal(bus_metrics_http_start("127.0.0.1", port, r, &h2), LLB_STATUS_IO);
  assert_null(h2);
  bus_metrics_http_stop(h);
  llb_metrics_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get_metrics_serves_the_registry_and_nothing_else),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
