/* Graceful drain: a child process runs an actor loop (bus_actor_run) with a slow handler;
 * it gets SIGTERM while the handler is in flight. The handler's reply still arrives and the
 * process exits 0. Also: a programmatic bus_stop() ends bus_actor_run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/log.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 30000

static struct nats_test_server srv;

/* ---- the child actor (this program run with --actor URL) ---- */

static void slow_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)user;
  /* Tell the test we are inside the handler, then take our time. */
  bus_publish(b, "llm.test.drain.started", m->data, m->len, NULL);
  bus_flush(b, 5000);
  usleep(1500 * 1000);
  bus_respond(b, m, "done", 4, NULL);
}

static int run_actor(const char *url) {
  llb_log_set_actor("drain-child");
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.drain_timeout_ms = 20000;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) {
    fprintf(stderr, "child: %s\n", llb_err_last());
    return 2;
  }
  if (bus_subscribe(b, "llm.test.drain", "workers", slow_handler, NULL, NULL) != LLB_STATUS_OK ||
      bus_publish(b, "llm.test.drain.ready", "r", 1, NULL) != LLB_STATUS_OK ||
      bus_flush(b, 5000) != LLB_STATUS_OK) {
    bus_destroy(b);
    return 3;
  }
  llb_status st = bus_actor_run(b);
  bus_destroy(b);
  return st == LLB_STATUS_OK ? 0 : 4;
}

/* ---- the test ---- */

static pid_t spawn_actor(void) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execl("/proc/self/exe", "test_bus_drain", "--actor", srv.url, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static struct bus *connect_client(void) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) fail_msg("%s", llb_err_last());
  return b;
}

static void test_sigterm_drains_in_flight_handler_and_exits_zero(void **state) {
  (void)state;
  struct bus *c = connect_client();
  struct bus_sub *ready = NULL, *started = NULL, *replies = NULL;
  assert_int_equal(bus_subscribe_sync(c, "llm.test.drain.ready", &ready), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(c, "llm.test.drain.started", &started), LLB_STATUS_OK);
  char inbox[128];
  assert_int_equal(bus_new_inbox(c, inbox, sizeof inbox), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(c, inbox, &replies), LLB_STATUS_OK);
  assert_int_equal(bus_flush(c, WAIT_MS), LLB_STATUS_OK);

  pid_t pid = spawn_actor();
  assert_true(pid > 0);
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(ready, WAIT_MS, &m), LLB_STATUS_OK);
  bus_msg_destroy(m);

  struct bus_out_msg req = {.subject = "llm.test.drain", .reply = inbox, .data = "job", .len = 3};
  assert_int_equal(bus_publish_msg(c, &req), LLB_STATUS_OK);
  assert_int_equal(bus_sub_next_msg(started, WAIT_MS, &m), LLB_STATUS_OK);
  bus_msg_destroy(m);

  assert_int_equal(kill(pid, SIGTERM), 0);

  assert_int_equal(bus_sub_next_msg(replies, WAIT_MS, &m), LLB_STATUS_OK);
  assert_int_equal(m->len, 4);
  assert_memory_equal(m->data, "done", 4);
  bus_msg_destroy(m);

  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);

  /* After the drain nobody serves the subject any more. */
  assert_int_equal(bus_request(c, "llm.test.drain", "x", 1, NULL, WAIT_MS, &m), LLB_STATUS_NOT_FOUND);
  bus_destroy(c);
}

static void *stop_later(void *arg) {
  usleep(50 * 1000);
  bus_stop(arg);
  return NULL;
}

static void test_bus_stop_ends_actor_run(void **state) {
  (void)state;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, stop_later, b), 0);
  assert_int_equal(bus_actor_run(b), LLB_STATUS_OK);
  pthread_join(t, NULL);
  /* After the drain the connection is closed: publishing says so. */
  assert_int_equal(bus_publish(b, "llm.test.x", "x", 1, NULL), LLB_STATUS_CLOSED);
  bus_destroy(b);

  /* A stop before the run makes it return at once. */
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
  bus_stop(b);
  assert_int_equal(bus_actor_run(b), LLB_STATUS_OK);
  bus_destroy(b);
}

static void sleepy_handler(struct bus *b, const struct bus_msg *m, void *user) {
  (void)b;
  (void)m;
  (void)user;
  usleep(1500 * 1000);
}

static void test_drain_past_its_timeout_reports_timeout(void **state) {
  (void)state;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe(b, "llm.test.sleepy", NULL, sleepy_handler, NULL, NULL), LLB_STATUS_OK);
  struct bus_msg *r = NULL;
  /* The request is delivered (then times out here): the handler is in flight. */
  assert_int_equal(bus_request(b, "llm.test.sleepy", "x", 1, NULL, 100, &r), LLB_STATUS_TIMEOUT);
  assert_int_equal(bus_drain(b, 200), LLB_STATUS_TIMEOUT);
  assert_non_null(strstr(llb_err_last(), "200 ms"));
  bus_destroy(b); /* waits for the handler's return */
}

static int setup(void **state) {
  (void)state;
  return nats_test_server_start(&srv, 0, false);
}

static int teardown(void **state) {
  (void)state;
  nats_test_server_stop(&srv);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--actor") == 0) return run_actor(argv[2]);
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigterm_drains_in_flight_handler_and_exits_zero),
      cmocka_unit_test(test_bus_stop_ends_actor_run),
      cmocka_unit_test(test_drain_past_its_timeout_reports_timeout),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
