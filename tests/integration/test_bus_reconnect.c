/* bus/ survives a nats-server restart on the same port: both connections reconnect, the
 * responder's subscription is restored, request/reply works again, and each disconnect and
 * reconnect is logged as one structured line. A stalled server makes publishes refuse once
 * 64 MiB wait to be written, instead of the process growing without a bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bus/bus.h"
#include "base/log.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 30000

static void echo_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)user;
  bus_respond(b, m, m->data, m->len, NULL);
}

static struct bus *connect_to(const char *url, const char *name) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.name = name;
  o.reconnect_wait_min_ms = 20;
  o.reconnect_wait_max_ms = 200;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) fail_msg("bus_connect: %s", llb_err_last());
  return b;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc(1, (size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
  fclose(f);
  return s;
}

static bool two_reconnect_lines(void *arg) {
  char *log = read_file(arg);
  const char *p = log ? strstr(log, "event=bus_reconnected") : NULL;
  bool ok = p && strstr(p + 1, "event=bus_reconnected");
  free(log);
  return ok;
}

static void test_reconnects_after_server_restart_on_same_port(void **state) {
  (void)state;
  struct nats_test_server srv;
  assert_int_equal(nats_test_server_start(&srv, 0, false), 0);

  /* Capture this process's log lines (stderr) into a file. */
  char log_path[300];
  snprintf(log_path, sizeof log_path, "%s/client.log", srv.dir);
  int saved = dup(STDERR_FILENO);
  int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0 && saved >= 0);
  dup2(fd, STDERR_FILENO);
  close(fd);

  struct bus *resp = connect_to(srv.url, "resp");
  struct bus *req = connect_to(srv.url, "req");
  assert_int_equal(bus_subscribe(resp, "llm.test.rc", "g", echo_handler, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(resp, WAIT_MS), LLB_STATUS_OK);
  struct bus_msg *r = NULL;
  assert_int_equal(bus_request(req, "llm.test.rc", "a", 1, NULL, WAIT_MS, &r), LLB_STATUS_OK);
  bus_msg_destroy(r);

  assert_int_equal(nats_test_server_kill(&srv), 0);
  assert_int_equal(nats_test_server_restart(&srv), 0);

  /* Retry until both sides are back (the condition itself is what we wait on). */
  llb_status st = LLB_STATUS_TIMEOUT;
  int64_t deadline = llb_now_ns() + (int64_t)WAIT_MS * 1000000;
  int attempts = 0;
  while (llb_now_ns() < deadline) {
    attempts++;
    st = bus_request(req, "llm.test.rc", "b", 1, NULL, 500, &r);
    if (st == LLB_STATUS_OK) break;
    usleep(20000);
  }
  /* The reconnect callbacks run on the client's own thread: their lines may land just after
   * the first successful request, so wait for both before giving stderr back. */
  nats_test_wait_until(two_reconnect_lines, log_path, WAIT_MS);
  dup2(saved, STDERR_FILENO);
  close(saved);
  assert_int_equal(st, LLB_STATUS_OK);
  assert_int_equal(r->len, 1);
  assert_memory_equal(r->data, "b", 1);
  bus_msg_destroy(r);
  fprintf(stderr, "request/reply back after %d attempt(s)\n", attempts);

  bus_destroy(req);
  bus_destroy(resp);
  char *log = read_file(log_path);
  assert_non_null(log);
  fprintf(stderr, "--- captured log ---\n%s--------------------\n", log ? log : "");
  char want[128];
  snprintf(want, sizeof want, "event=bus_disconnected url=%s", srv.url);
  assert_non_null(strstr(log, want));
  snprintf(want, sizeof want, "event=bus_reconnected url=%s", srv.url);
  assert_non_null(strstr(log, want));
  /* Each connection logs its own disconnect and reconnect. */
  const char *p = strstr(log, "event=bus_reconnected");
  assert_non_null(p);
  assert_non_null(strstr(p + 1, "event=bus_reconnected"));
  free(log);
  nats_test_server_stop(&srv);
}

/* A stopped server reads nothing: 256 KiB publishes fill the socket, then the client's buffer
 * up to 64 MiB, and the next one is refused (QUEUE_FULL, saying why) rather than buffered; once
 * the server runs again the bus publishes again, without a reconnect. Before, libnats buffered
 * every message (a flood reached ~2 GB). */
static void test_a_stalled_server_makes_publish_refuse_not_grow(void **state) {
  (void)state;
  struct nats_test_server srv;
  if (nats_test_server_start(&srv, 0, false) != 0) fail_msg("nats-server did not start");
  struct bus *b = nats_test_connect(srv.url, "flooder", NULL);
  enum { MSG = 256 * 1024, MAX_MSGS = 1024 };
  char *buf = calloc(1, MSG);
  assert_non_null(buf);
  assert_int_equal(kill(srv.pid, SIGSTOP), 0);
  llb_status st = LLB_STATUS_OK;
  int sent = 0;
  for (; sent < MAX_MSGS; sent++)
    if ((st = bus_publish(b, "flood.stalled", buf, MSG, NULL)) != LLB_STATUS_OK) break;
  assert_int_equal(kill(srv.pid, SIGCONT), 0);
  assert_int_equal(st, LLB_STATUS_QUEUE_FULL);
  assert_non_null(strstr(llb_err_last(), "not yet written"));
  /* 64 MiB in the client's buffer, the rest in the loopback socket's (a few MiB) */
  assert_in_range(sent, 64 * 1024 * 1024 / MSG - 1, 96 * 1024 * 1024 / MSG);
  bool again = false;
  for (int i = 0; i < 1500 && !again; i++) {
    again = bus_publish(b, "flood.stalled", buf, 16, NULL) == LLB_STATUS_OK;
    if (!again) nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  assert_true(again);
  assert_int_equal(bus_flush(b, 10000), LLB_STATUS_OK);
  free(buf);
  bus_destroy(b);
  nats_test_server_stop(&srv);
}

int main(void) {
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reconnects_after_server_restart_on_same_port),
      cmocka_unit_test(test_a_stalled_server_makes_publish_refuse_not_grow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
