/* Graceful drain: a child process runs an actor loop (bus_actor_run) with a slow handler;
 * it gets SIGTERM while the handler is in flight. The handler's reply still arrives and the
 * process exits 0. Also: a programmatic bus_stop() ends bus_actor_run; a busy actor that gets
 * SIGTERM in the middle of its traffic exits 0 every time (the client's drain thread used to
 * detach from the loop after bus_destroy had freed it: heap corruption at exit); after a
 * drain returns the client holds no event of the loop any more; a subscription delivered on the
 * loop drains too, at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "bus/bus.h"
#include "base/log.h"
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

/* A busy actor: answers every message (outgoing traffic while it drains), beats every 5 ms
 * (loop-thread timer), then frees its state and churns the heap after bus_destroy so that a
 * write into freed bus memory shows up as a crash, and ends with bus_shutdown. */
struct busy_state {
  atomic_long handled;
};

static void busy_handler(struct bus *b, const struct bus_msg *m, void *user) {
  struct busy_state *st = user;
  atomic_fetch_add(&st->handled, 1);
  bus_publish(b, "llm.test.busy.echo", m->data, m->len, NULL);
}

static llb_status busy_beat(void *user, uint8_t *buf, size_t cap, size_t *len) {
  (void)user;
  (void)cap;
  buf[0] = 'h';
  *len = 1;
  return LLB_STATUS_OK;
}

static int run_busy_actor(const char *url) {
  llb_log_set_actor("busy-child");
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  struct busy_state *st = calloc(1, sizeof *st);
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.drain_timeout_ms = 10000;
  struct bus *b = NULL;
  if (!st || bus_connect(&o, &b) != LLB_STATUS_OK) return 2;
  if (bus_subscribe(b, "llm.test.busy", NULL, busy_handler, st, NULL) != LLB_STATUS_OK ||
      bus_heartbeat_start(b, "busy", "child", 5, 16, busy_beat, NULL) != LLB_STATUS_OK ||
      bus_publish(b, "llm.test.busy.ready", "r", 1, NULL) != LLB_STATUS_OK ||
      bus_flush(b, 5000) != LLB_STATUS_OK) {
    bus_destroy(b);
    return 3;
  }
  llb_status rs = bus_actor_run(b);
  bus_destroy(b);
  free(st);
  /* Heap churn: reuses what bus_destroy freed while any straggler would still write to it. */
  void *blocks[512];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 512; i++) {
      blocks[i] = malloc((size_t)(16 + (i * 37) % 2048));
      if (blocks[i]) memset(blocks[i], 0xA5, (size_t)(16 + (i * 37) % 2048));
    }
    for (int i = 0; i < 512; i++) free(blocks[i]);
    usleep(200);
  }
  if (bus_shutdown(5000) != LLB_STATUS_OK) return 5;
  return rs == LLB_STATUS_OK ? 0 : 4;
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

static pid_t spawn_busy_actor(void) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execl("/proc/self/exe", "test_bus_drain", "--busy", srv.url, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* waitpid bounded by timeout_ms; SIGKILLs and fails the test when the child hangs. */
static int wait_child(pid_t pid, int64_t timeout_ms) {
  int status = 0;
  for (int64_t waited = 0;; waited += 10) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) fail_msg("waitpid: %s", strerror(errno));
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail_msg("child %d still running %lld ms after SIGTERM", (int)pid, (long long)timeout_ms);
    }
    usleep(10 * 1000);
  }
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

struct flood {
  struct bus *bus;
  atomic_bool stop;
  atomic_long sent;
};

static void *flood_main(void *arg) {
  struct flood *f = arg;
  char payload[256];
  memset(payload, 'p', sizeof payload);
  while (!atomic_load(&f->stop)) {
    for (int i = 0; i < 64; i++)
      if (bus_publish(f->bus, "llm.test.busy", payload, sizeof payload, NULL) == LLB_STATUS_OK)
        atomic_fetch_add(&f->sent, 1);
    usleep(200);
  }
  return NULL;
}

#define BUSY_ROUNDS 20

static void test_sigterm_during_traffic_always_exits_zero(void **state) {
  (void)state;
  struct bus *c = connect_client();
  struct bus_sub *ready = NULL;
  assert_int_equal(bus_subscribe_sync(c, "llm.test.busy.ready", &ready), LLB_STATUS_OK);
  assert_int_equal(bus_flush(c, WAIT_MS), LLB_STATUS_OK);
  for (int round = 0; round < BUSY_ROUNDS; round++) {
    pid_t pid = spawn_busy_actor();
    assert_true(pid > 0);
    struct bus_msg *m = NULL;
    assert_int_equal(bus_sub_next_msg(ready, WAIT_MS, &m), LLB_STATUS_OK);
    bus_msg_destroy(m);
    struct flood f = {.bus = c};
    atomic_init(&f.stop, false);
    atomic_init(&f.sent, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flood_main, &f), 0);
    usleep((useconds_t)(20 + (round % 5) * 15) * 1000); /* SIGTERM at varying points */
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status = wait_child(pid, WAIT_MS);
    atomic_store(&f.stop, true);
    pthread_join(t, NULL);
    assert_true(atomic_load(&f.sent) > 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail_msg("round %d: busy actor ended with %s %d after SIGTERM", round,
               WIFSIGNALED(status) ? "signal" : "exit code",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  bus_destroy(c);
}

static void test_drain_returns_after_client_left_the_loop(void **state) {
  (void)state;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  for (int round = 0; round < 10; round++) {
    struct bus *b = NULL;
    assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
    struct busy_state st;
    atomic_init(&st.handled, 0);
    assert_int_equal(bus_subscribe(b, "llm.test.busy", NULL, busy_handler, &st, NULL), LLB_STATUS_OK);
    for (int i = 0; i < 200; i++) bus_publish(b, "llm.test.busy", "x", 1, NULL);
    bus_stop(b);
    assert_int_equal(bus_actor_run(b), LLB_STATUS_OK);
    /* The client's read/write/keep-alive events are gone: it no longer uses the loop, so
     * bus_destroy may free it. */
    assert_int_equal(event_base_get_num_events(bus_event_base(b), EVENT_BASE_COUNT_ADDED), 0);
    bus_destroy(b);
  }
}

/* A subscription delivered on the loop (bus_subscribe_on_loop: a NATS synchronous subscription
 * that the loop reads) drains as the others: what arrived before the stop is handled, and the
 * drain ends at once rather than at its timeout (libnats removes a draining synchronous
 * subscription only from a NextMsg with a timeout). */
static void test_drain_of_an_on_loop_subscription_delivers_and_ends(void **state) {
  (void)state;
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.install_signal_handlers = false;
  o.drain_timeout_ms = 20000;
  for (int round = 0; round < 3; round++) {
    struct bus *b = NULL;
    assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
    struct busy_state st;
    atomic_init(&st.handled, 0);
    assert_int_equal(bus_subscribe_on_loop(b, "llm.test.busy", NULL, busy_handler, &st, NULL), LLB_STATUS_OK);
    assert_int_equal(bus_flush(b, 5000), LLB_STATUS_OK);
    for (int i = 0; i < 200; i++) bus_publish(b, "llm.test.busy", "x", 1, NULL);
    bus_stop(b); /* the drain's UNSUB follows the 200 on the connection: all come back first */
    const int64_t t0 = llb_now_ns();
    assert_int_equal(bus_actor_run(b), LLB_STATUS_OK);
    const int64_t ms = (llb_now_ns() - t0) / 1000000;
    assert_true(ms < 5000);
    assert_int_equal(atomic_load(&st.handled), 200);
    assert_int_equal(event_base_get_num_events(bus_event_base(b), EVENT_BASE_COUNT_ADDED), 0);
    bus_destroy(b);
  }
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
  if (argc == 3 && strcmp(argv[1], "--busy") == 0) return run_busy_actor(argv[2]);
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigterm_drains_in_flight_handler_and_exits_zero),
      cmocka_unit_test(test_bus_stop_ends_actor_run),
      cmocka_unit_test(test_drain_past_its_timeout_reports_timeout),
      cmocka_unit_test(test_sigterm_during_traffic_always_exits_zero),
      cmocka_unit_test(test_drain_returns_after_client_left_the_loop),
      cmocka_unit_test(test_drain_of_an_on_loop_subscription_delivers_and_ends),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
