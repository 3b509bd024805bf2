/* A throw-away nats-server for integration tests.
 *
 * Starts /usr/sbin/nats-server (or the one on PATH, or $NATS_SERVER_BIN) on 127.0.0.1 with
 * a free port chosen by the server (`-p -1 --ports_file_dir DIR`), or on a given port (to
 * restart on the same one), waits until it accepts TCP connections, and kills it at the end.
 * The child gets PR_SET_PDEATHSIG(SIGKILL), so a crashed test leaves no server behind.
 * Its log goes to DIR/server.log (kept on failure for reading).
 *
 * Usage:
 *   struct nats_test_server srv;
 *   if (nats_test_server_start(&srv, 0, false) != 0) skip or fail (reason on stderr);
 *   connect to srv.url ...
 *   nats_test_server_stop(&srv);
 */
#ifndef LLB_TESTS_NATS_TEST_SERVER_H
#define LLB_TESTS_NATS_TEST_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

struct bus;

struct nats_test_server {
  pid_t pid;          /* 0 when not running */
  int port;           /* the port it listens on */
  bool jetstream;     /* started with -js -sd DIR/js */
  char dir[256];      /* temporary directory (ports file, log, JetStream store) */
  char url[64];       /* "nats://127.0.0.1:<port>" */
};

/* Returns the path of a nats-server binary, or NULL (tests then skip with exit code 77). */
const char *nats_test_server_bin(void);

/* Starts a server on `port` (0 = a free one picked by the server), with JetStream if
 * `jetstream`. Waits up to 15 s for it to accept connections. Returns 0, or -1 with the
 * reason on stderr (the server is then stopped and the directory removed). */
int nats_test_server_start(struct nats_test_server *s, int port, bool jetstream);

/* Stops the server (SIGTERM, SIGKILL after 5 s), keeps the directory and the port, so that
 * nats_test_server_restart() can bring it back on the same port. Returns 0 if it exited. */
int nats_test_server_kill(struct nats_test_server *s);

/* Starts it again on the same port and directory (after nats_test_server_kill). Retries for
 * up to 15 s while the port is still being released. Returns 0 or -1. */
int nats_test_server_restart(struct nats_test_server *s);

/* Stops the server if running and removes its directory. Safe to call twice. */
void nats_test_server_stop(struct nats_test_server *s);

/* True if a TCP connection to 127.0.0.1:port succeeds now. */
bool nats_test_port_open(int port);

/* Waits up to timeout_ms for `pred(arg)` to become true, polling every 2 ms. Returns the
 * predicate's last value. For conditions that cannot be waited on with a condition variable
 * (files, /proc, another process). */
bool nats_test_wait_until(bool (*pred)(void *arg), void *arg, int timeout_ms);

/* Connects a bus named `name` to `url` with subject prefix `prefix` (NULL: the default "llm"),
 * without signal handlers. Inside a cmocka test: fails the test (fail_msg, the bus error)
 * when it cannot connect, so it never returns NULL. The caller owns the bus (bus_destroy). */
struct bus *nats_test_connect(const char *url, const char *name, const char *prefix);

#endif
