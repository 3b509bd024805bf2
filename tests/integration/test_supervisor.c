/* cmd/supervisor: embedded nats-server, restart of a killed child, and a SIGTERM that leaves
 * no process (child, grandchild or nats-server) and no temporary directory behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "bus/bus.h"
#include "base/log.h"
#include "cmd/supervisor/serve_hash_key.h"
#include "cmd/supervisor/supervisor.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 30000

/* ---- /proc helpers ---- */

/* /proc/<pid>/<name> into buf[cap] (NUL-terminated); its length, or -1 if it cannot be read. */
static ssize_t proc_read(pid_t pid, const char *name, char *buf, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = '\0';
  return (ssize_t)n;
}

/* Reads comm, state and ppid of `pid`; false if it does not exist. */
static bool proc_stat(pid_t pid, char *comm, size_t cap, char *state, pid_t *ppid) {
  char buf[512];
  if (proc_read(pid, "stat", buf, sizeof buf) < 0) return false;
  char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (!open || !close || close[1] != ' ') return false;
  size_t len = (size_t)(close - open - 1);
  if (comm) snprintf(comm, cap, "%.*s", (int)len, open + 1);
  char st = close[2];
  if (state) *state = st;
  if (ppid) *ppid = (pid_t)atoi(close + 4);
  return true;
}

/* A live (not zombie) process? */
static bool alive(pid_t pid) {
  char state;
  return pid > 0 && proc_stat(pid, NULL, 0, &state, NULL) && state != 'Z' && state != 'X';
}

/* Children of `parent` whose comm is `comm`: up to max pids into out; returns the count. */
static int children_named(pid_t parent, const char *comm, pid_t *out, int max) {
  DIR *d = opendir("/proc");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    pid_t pid = (pid_t)atoi(e->d_name);
    char c[64], state;
    pid_t pp;
    if (pid <= 0 || !proc_stat(pid, c, sizeof c, &state, &pp)) continue;
    if (pp == parent && strcmp(c, comm) == 0 && state != 'Z' && n < max) out[n++] = pid;
  }
  if (d) closedir(d);
  return n;
}

struct child_query {
  pid_t parent;
  const char *comm;
  pid_t not_this;
  pid_t found;
};

static bool has_child(void *arg) {
  struct child_query *q = arg;
  pid_t pids[8];
  int n = children_named(q->parent, q->comm, pids, 8);
  for (int i = 0; i < n; i++)
    if (pids[i] != q->not_this) {
      q->found = pids[i];
      return true;
    }
  return false;
}

static bool pid_gone(void *arg) { return !alive(*(pid_t *)arg); }

static bool file_has_line(void *arg) {
  FILE *f = fopen(arg, "r");
  if (!f) return false;
  char buf[512];
  bool ok = fgets(buf, sizeof buf, f) && strchr(buf, '\n');
  fclose(f);
  return ok;
}

static bool connect_ok(const char *url) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) return false;
  bool ok = bus_flush(b, WAIT_MS) == LLB_STATUS_OK;
  bus_destroy(b);
  return ok;
}

/* ---- the helper process: a supervisor with two children, driven by supervisor_poll ---- */

static struct supervisor *helper_sup;

static void helper_on_term(int sig) {
  (void)sig;
  supervisor_request_stop(helper_sup);
}

static int run_helper(const char *info_path) {
  llb_log_set_actor("test-supervisor");
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.restart_min_ms = 50;
  cfg.stop_timeout_ms = 5000;
  if (supervisor_create(&cfg, &helper_sup) != LLB_STATUS_OK) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = helper_on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  struct child_spec sleeper, shell;
  if (child_spec_init(&sleeper, "sleeper", "/bin/sleep") != LLB_STATUS_OK ||
      child_spec_add_arg(&sleeper, "300") != LLB_STATUS_OK ||
      child_spec_init(&shell, "shell", "/bin/sh") != LLB_STATUS_OK ||
      child_spec_add_arg(&shell, "-c") != LLB_STATUS_OK ||
      child_spec_add_arg(&shell, "sleep 301 & wait") != LLB_STATUS_OK)
    return 3;
  sleeper.pass_nats_url = false;
  shell.pass_nats_url = false;
  if (supervisor_add_child(helper_sup, &sleeper) != LLB_STATUS_OK ||
      supervisor_add_child(helper_sup, &shell) != LLB_STATUS_OK)
    return 4;
  if (supervisor_start(helper_sup) != LLB_STATUS_OK) {
    fprintf(stderr, "helper: %s\n", llb_err_last());
    return 5;
  }
  FILE *f = fopen(info_path, "w");
  if (!f) return 6;
  fprintf(f, "%s %s %d\n", supervisor_nats_url(helper_sup), supervisor_temp_dir(helper_sup),
          (int)supervisor_child_pid(helper_sup, "nats-server"));
  fclose(f);
  while (!supervisor_poll(helper_sup, 1000)) {
  }
  llb_status st = supervisor_stop(helper_sup);
  supervisor_destroy(helper_sup);
  return st == LLB_STATUS_OK ? 0 : 7;
}

/* ---- tests ---- */

static void test_killed_child_restarts_and_sigterm_leaves_no_process(void **state) {
  (void)state;
  char dir[] = "/tmp/llmbus-suptest-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char info[128];
  snprintf(info, sizeof info, "%s/info", dir);
  pid_t parent = getpid();
  pid_t helper = fork();
  assert_true(helper >= 0);
  if (helper == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    execl("/proc/self/exe", "test_supervisor", "--helper", info, (char *)NULL);
    _exit(127);
  }
  assert_true(nats_test_wait_until(file_has_line, info, WAIT_MS));
  char url[128], tmp_dir[256];
  int nats_pid = 0;
  FILE *f = fopen(info, "r");
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%127s %255s %d", url, tmp_dir, &nats_pid), 3);
  fclose(f);
  struct stat stt;
  assert_int_equal(stat(tmp_dir, &stt), 0);
  assert_true(alive(nats_pid));
  assert_true(connect_ok(url));

  struct child_query sleeper = {.parent = helper, .comm = "sleep"};
  assert_true(nats_test_wait_until(has_child, &sleeper, WAIT_MS));
  struct child_query shell = {.parent = helper, .comm = "sh"};
  assert_true(nats_test_wait_until(has_child, &shell, WAIT_MS));
  struct child_query grandchild = {.parent = shell.found, .comm = "sleep"};
  assert_true(nats_test_wait_until(has_child, &grandchild, WAIT_MS));

  /* SIGKILL one child: a new one appears. */
  pid_t old = sleeper.found;
  assert_int_equal(kill(old, SIGKILL), 0);
  struct child_query again = {.parent = helper, .comm = "sleep", .not_this = old};
  assert_true(nats_test_wait_until(has_child, &again, WAIT_MS));
  assert_int_not_equal(again.found, old);
  fprintf(stderr, "sleeper restarted: pid %d -> %d\n", (int)old, (int)again.found);

  /* SIGTERM the supervisor: it exits 0 and nothing remains. */
  assert_int_equal(kill(helper, SIGTERM), 0);
  int status = 0;
  assert_int_equal(waitpid(helper, &status, 0), helper);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  pid_t all[] = {again.found, shell.found, grandchild.found, (pid_t)nats_pid};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (!nats_test_wait_until(pid_gone, &all[i], WAIT_MS))
      fail_msg("process %d is still alive after the supervisor exited", (int)all[i]);
  }
  assert_int_not_equal(stat(tmp_dir, &stt), 0);
  unlink(info);
  rmdir(dir);
}

/* Whether process pid's environment holds the entry `want` ("NAME=value"). */
static bool environ_has(pid_t pid, const char *want) {
  static char buf[65536];
  const ssize_t got = proc_read(pid, "environ", buf, sizeof buf);
  if (got < 0) return false;
  for (size_t i = 0, n = (size_t)got; i < n; i += strlen(buf + i) + 1)
    if (strcmp(buf + i, want) == 0) return true;
  return false;
}

/* The embedded nats-server runs with one Go P (GOMAXPROCS=1: fewer wake-ups per routed message)
 * unless the environment sets GOMAXPROCS, which it then keeps. */
static void test_embedded_nats_gets_gomaxprocs_1_unless_set(void **state) {
  (void)state;
  const char *had = getenv("GOMAXPROCS");
  char saved[64] = "";
  if (had) snprintf(saved, sizeof saved, "%s", had);
  for (int round = 0; round < 2; round++) {
    if (round == 0) unsetenv("GOMAXPROCS");
    else setenv("GOMAXPROCS", "2", 1);
    struct supervisor_config cfg;
    supervisor_config_init(&cfg);
    cfg.jetstream = false;
    struct supervisor *s = NULL;
    assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
    assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
    pid_t nats = supervisor_child_pid(s, "nats-server");
    assert_true(alive(nats));
    assert_true(environ_has(nats, round == 0 ? "GOMAXPROCS=1" : "GOMAXPROCS=2"));
    assert_int_equal(supervisor_stop(s), LLB_STATUS_OK);
    supervisor_destroy(s);
  }
  if (had) setenv("GOMAXPROCS", saved, 1);
  else unsetenv("GOMAXPROCS");
}

static void test_embedded_nats_accepts_clients_and_is_removed(void **state) {
  (void)state;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  struct supervisor *s = NULL;
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  const char *url = supervisor_nats_url(s);
  assert_memory_equal(url, "nats://127.0.0.1:", 17);
  assert_true(connect_ok(url));
  char tmp_dir[256];
  snprintf(tmp_dir, sizeof tmp_dir, "%s", supervisor_temp_dir(s));
  pid_t nats = supervisor_child_pid(s, "nats-server");
  assert_true(alive(nats));
  /* JetStream got its own store in the temporary directory. */
  char js[300];
  snprintf(js, sizeof js, "%s/js", tmp_dir);
  struct stat st;
  assert_int_equal(stat(js, &st), 0);
  assert_int_equal(supervisor_stop(s), LLB_STATUS_OK);
  assert_false(alive(nats));
  assert_int_not_equal(stat(tmp_dir, &st), 0);
  supervisor_destroy(s);
}

static void test_external_url_is_passed_to_children(void **state) {
  (void)state;
  struct nats_test_server srv;
  assert_int_equal(nats_test_server_start(&srv, 0, false), 0);
  char dir[] = "/tmp/llmbus-suptest-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char out[128], script[300];
  snprintf(out, sizeof out, "%s/args", dir);
  snprintf(script, sizeof script, "echo \"$@\" > %s; exec sleep 300", out);
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = srv.url;
  struct supervisor *s = NULL;
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  struct child_spec spec;
  assert_int_equal(child_spec_init(&spec, "echo", "/bin/sh"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&spec, "-c"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&spec, script), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&spec, "echo"), LLB_STATUS_OK); /* $0 */
  assert_int_equal(supervisor_add_child(s, &spec), LLB_STATUS_OK);
  assert_int_equal(supervisor_add_child(s, &spec), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  assert_string_equal(supervisor_nats_url(s), srv.url);
  assert_int_equal(supervisor_child_pid(s, "nats-server"), 0);
  assert_true(nats_test_wait_until(file_has_line, out, WAIT_MS));
  FILE *f = fopen(out, "r");
  char line[256] = "";
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  char want[200];
  snprintf(want, sizeof want, "--nats %s\n", srv.url);
  assert_string_equal(line, want);
  pid_t child = supervisor_child_pid(s, "echo");
  assert_true(alive(child));
  assert_int_equal(supervisor_stop(s), LLB_STATUS_OK);
  assert_false(alive(child));
  supervisor_destroy(s);
  unlink(out);
  rmdir(dir);
  nats_test_server_stop(&srv);
}

/* Whether file `path` holds 2 lines or more. */
static bool file_has_two_lines(void *path) {
  FILE *f = fopen(path, "r");
  int lines = 0, c;
  while (f && (c = fgetc(f)) != EOF) lines += c == '\n';
  if (f) fclose(f);
  return lines >= 2;
}

/* supervisor_stop stops the children stage by stage (child_spec.stop_stage): a back-end child
 * (stage 2) gets its SIGTERM only after the front (stage 0) has exited, so a clean stop never
 * has the front send work to an actor that is already gone. Added back first, front last. */
static void test_stop_goes_stage_by_stage(void **state) {
  (void)state;
  struct nats_test_server srv;
  assert_int_equal(nats_test_server_start(&srv, 0, false), 0);
  char dir[] = "/tmp/llmbus-suptest-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char out[64], front[400], back[400];
  snprintf(out, sizeof out, "%s/order", dir);
  snprintf(front, sizeof front, "trap 'echo front >> %s; exit 0' TERM; echo up >> %s.front; while :; do sleep 0.05; done",
           out, out);
  snprintf(back, sizeof back,
           "trap 'if grep -q front %s; then echo back-after >> %s; else echo back-before >> %s; fi; exit 0' TERM; "
           "while :; do sleep 0.05; done", out, out, out);
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = srv.url;
  cfg.stop_timeout_ms = 5000;
  struct supervisor *s = NULL;
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  struct child_spec b, f;
  assert_int_equal(child_spec_init(&b, "back", "/bin/sh"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&b, "-c"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&b, back), LLB_STATUS_OK);
  b.pass_nats_url = false;
  b.stop_stage = 2;
  assert_int_equal(child_spec_init(&f, "front", "/bin/sh"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&f, "-c"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&f, front), LLB_STATUS_OK);
  f.pass_nats_url = false;
  f.stop_stage = 0;
  assert_int_equal(supervisor_add_child(s, &b), LLB_STATUS_OK);
  assert_int_equal(supervisor_add_child(s, &f), LLB_STATUS_OK);
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  char up[160];
  snprintf(up, sizeof up, "%s.front", out);
  assert_true(nats_test_wait_until(file_has_line, up, WAIT_MS)); /* its trap is set */
  assert_int_equal(supervisor_stop(s), LLB_STATUS_OK);
  assert_true(nats_test_wait_until(file_has_two_lines, out, WAIT_MS));
  FILE *fp = fopen(out, "r");
  char l1[64] = "", l2[64] = "";
  assert_non_null(fgets(l1, sizeof l1, fp));
  assert_non_null(fgets(l2, sizeof l2, fp));
  fclose(fp);
  assert_string_equal(l1, "front\n");
  assert_string_equal(l2, "back-after\n");
  supervisor_destroy(s);
  unlink(out);
  unlink(up);
  rmdir(dir);
  nats_test_server_stop(&srv);
}

/* The HTTP status of GET `path` on 127.0.0.1:port; 0 when nothing answers. */
static int http_status(int port, const char *path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int status = 0;
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
    char req[256], resp[64] = {0};
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    if (write(fd, req, (size_t)n) == n && read(fd, resp, sizeof resp - 1) > 12) sscanf(resp, "HTTP/%*s %d", &status);
  }
  if (fd >= 0) close(fd);
  return status;
}

/* serve's --nats-monitor-port: the embedded server's monitoring port, on loopback. */
static void test_embedded_nats_monitoring_port_answers_on_loopback(void **state) {
  (void)state;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_monitor_port = -1; /* a free one */
  struct supervisor *s = NULL;
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  const int port = supervisor_nats_monitor_port(s);
  assert_true(port > 0);
  assert_int_equal(http_status(port, "/varz"), 200);
  assert_int_equal(supervisor_stop(s), LLB_STATUS_OK);
  supervisor_destroy(s);
  supervisor_config_init(&cfg); /* default: none */
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  assert_int_equal(supervisor_nats_monitor_port(s), 0);
  supervisor_destroy(s);
}

/* Each actor of serve gets its own metrics port, base + its index; 0 gives none. */
static void test_serve_gives_each_actor_its_metrics_port(void **state) {
  (void)state;
  static struct child_spec specs[SUPERVISOR_MAX_CHILDREN]; /* 64 KiB each: not on the stack */
  struct serve_options o = {.bin_dir = "/opt/llmbus/bin", .metrics_port = 9460, .metrics_host = "0.0.0.0"};
  int n = serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN);
  assert_int_equal(n, 8); /* 7 actors, the input processor twice (serve's default) */
  for (int i = 0; i < n; i++) {
    char want[16];
    snprintf(want, sizeof want, "%d", 9460 + i);
    bool port = false, host = false;
    for (int a = 1; a + 1 < specs[i].argc; a++) {
      if (!strcmp(specs[i].args[a], "--metrics-port")) port = !strcmp(specs[i].args[a + 1], want);
      if (!strcmp(specs[i].args[a], "--metrics-host")) host = !strcmp(specs[i].args[a + 1], "0.0.0.0");
    }
    assert_true(port && host);
  }
  o.metrics_port = 0;
  n = serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN);
  for (int i = 0; i < n; i++)
    for (int a = 1; a < specs[i].argc; a++) assert_string_not_equal(specs[i].args[a], "--metrics-port");
  char *bad[] = {"serve", "--metrics-port", "65530", NULL}; /* no room for 7 ports */
  assert_int_equal(cmd_serve(3, bad), 2);
}

static void test_serve_actor_specs_and_usage(void **state) {
  (void)state;
  static struct child_spec specs[SUPERVISOR_MAX_CHILDREN]; /* 64 KiB each: not on the stack */
  struct serve_options o = {.model_path = "/m/model.gguf", .http_addr = "127.0.0.1:8000",
                            .bin_dir = "/opt/llmbus/bin"};
  int n = serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN);
  assert_int_equal(n, 8); /* two input processors by default */
  assert_string_equal(specs[7].name, "input-processor-2");
  assert_string_equal(specs[7].args[0], "/opt/llmbus/bin/llmbus-input-processor");
  const char *programs[] = {"llmbus-input-processor", "llmbus-scheduler", "llmbus-kv-manager",
                            "llmbus-gpu-worker", "llmbus-output-processor", "llmbus-api-server",
                            "llmbus-encoder-cache"};
  for (int p = 0; p < 7; p++) {
    char path[128];
    snprintf(path, sizeof path, "/opt/llmbus/bin/%s", programs[p]);
    bool found = false;
    for (int i = 0; i < n; i++)
      if (strcmp(specs[i].args[0], path) == 0) {
        found = true;
        assert_true(specs[i].pass_nats_url);
        bool has_http = false, has_model = false;
        for (int a = 1; a + 1 < specs[i].argc; a++) {
          if (!strcmp(specs[i].args[a], "--http")) has_http = !strcmp(specs[i].args[a + 1], "127.0.0.1:8000");
          if (!strcmp(specs[i].args[a], "--model")) has_model = !strcmp(specs[i].args[a + 1], "/m/model.gguf");
        }
        assert_int_equal(has_http, strcmp(programs[p], "llmbus-api-server") == 0);
        /* stopping: the front first, then the scheduler, then what serves its steps */
        const bool front = p == 0 || strcmp(programs[p], "llmbus-api-server") == 0;
        assert_int_equal(specs[i].stop_stage, front ? 0 : strcmp(programs[p], "llmbus-scheduler") == 0 ? 1 : 2);
        assert_int_equal(has_model, strcmp(programs[p], "llmbus-kv-manager") != 0 &&
                                        strcmp(programs[p], "llmbus-encoder-cache") != 0);
      }
    assert_true(found);
  }
  assert_int_equal(serve_actor_specs(&o, specs, 2), -1);
  char *help[] = {"serve", "--help", NULL};
  assert_int_equal(cmd_serve(2, help), 0);
  char *bad[] = {"serve", "--bogus", NULL};
  assert_int_equal(cmd_serve(2, bad), 2);
  /* The actor programs are not next to this test binary: a clear failure, not a restart loop. */
  char *none[] = {"serve", "--nats", "nats://127.0.0.1:1", NULL};
  assert_int_equal(cmd_serve(3, none), 1);
}

/* Every name that reaches nats.conf, a subject or a file is refused before anything starts,
 * with the flag named (issue 38: configuration syntax in --prefix reached nats.conf and
 * nats-server failed to start). */
static void test_serve_refuses_names_with_syntax_before_starting(void **state) {
  (void)state;
  static struct child_spec specs[SUPERVISOR_MAX_CHILDREN]; /* 64 KiB each: not on the stack */
  static const struct {
    const char *flag, *value, *needle;
  } bad[] = {
      {"prefix", "llm\"}, accounts: {X: {}", "--prefix"}, {"prefix", "a b", "--prefix"},
      {"prefix", "a.>", "--prefix"},  {"prefix", "x#y", "--prefix"},
      {"engine-id", "e\"0", "--engine-id"}, {"engine-id", "../e", "--engine-id"},
      {"engine-id", "e.1", "--engine-id"},   {"engine-id", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "--engine-id"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct serve_options o = {.model_path = "/m/model.gguf", .bin_dir = "/opt/llmbus/bin"};
    assert_int_equal(serve_engine_flag_add(&o, bad[i].flag, bad[i].value), 1);
    assert_int_equal(serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN), -1);
    if (!strstr(llb_err_last(), bad[i].needle)) fail_msg("%s=%s: %s", bad[i].flag, bad[i].value, llb_err_last());
  }
  /* a model file whose name is no model name (the front door serves it under that name) */
  struct serve_options o = {.model_path = "/m/my\"model.gguf", .bin_dir = "/opt/llmbus/bin"};
  assert_int_equal(serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN), -1);
  assert_non_null(strstr(llb_err_last(), "model name"));
  /* 64 bytes plus an index no longer fits one token with --engines */
  struct serve_options e = {.model_path = "/m/model.gguf", .bin_dir = "/opt/llmbus/bin", .num_engines = 2};
  assert_int_equal(serve_engine_flag_add(&e, "engine-id", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 1);
  assert_int_equal(serve_actor_specs(&e, specs, SUPERVISOR_MAX_CHILDREN), -1);
  /* and the good ones still pass */
  struct serve_options ok = {.model_path = "/m/SmolLM2-135M-Instruct.Q4_1.gguf", .bin_dir = "/opt/llmbus/bin"};
  assert_int_equal(serve_engine_flag_add(&ok, "prefix", "acme.llm"), 1);
  assert_int_equal(serve_engine_flag_add(&ok, "engine-id", "gpu_0-a"), 1);
  assert_true(serve_actor_specs(&ok, specs, SUPERVISOR_MAX_CHILDREN) > 0);
  char *cli[] = {"serve", "--nats", "nats://127.0.0.1:1", "--prefix", "llm\"}", NULL};
  assert_int_equal(cmd_serve(5, cli), 1); /* refused with the message, nothing started */
}

/* Value of `--flag` in a spec's arguments, "" for a flag without a value, NULL if absent. */
static const char *spec_flag(const struct child_spec *spec, const char *flag) {
  for (int a = 1; a < spec->argc; a++)
    if (!strcmp(spec->args[a], flag))
      return a + 1 < spec->argc && strncmp(spec->args[a + 1], "--", 2) ? spec->args[a + 1] : "";
  return NULL;
}

static const struct child_spec *spec_named(const struct child_spec *specs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(specs[i].name, name)) return &specs[i];
  return NULL;
}

/* The deployment's hash key reaches every scheduler and input processor as a 0600 file (never
 * on a command line), and no other actor; with --state-dir the key is kept for the next serve
 * (ids in the durable stream stay valid), with --hash-key-file it is the operator's (the same
 * on every host); a key file others may read, or that holds no key, is refused. */
static void test_serve_hands_the_hash_key_to_schedulers_and_input_processors(void **state) {
  (void)state;
  static struct child_spec specs[SUPERVISOR_MAX_CHILDREN]; /* 64 KiB each: not on the stack */
  struct serve_options o = {.model_path = "/m/model.gguf", .bin_dir = "/opt/llmbus/bin", .num_engines = 2};
  int n = serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN);
  assert_true(n > 0);
  struct serve_hash_key key;
  assert_int_equal(serve_hash_key_apply(&o, specs, n, &key), LLB_STATUS_OK);
  int given = 0;
  for (int i = 0; i < n; i++) {
    const char *f = spec_flag(&specs[i], "--hash-key-file");
    const bool wants = !strncmp(specs[i].name, "scheduler", 9) || !strncmp(specs[i].name, "input-processor", 15);
    assert_int_equal(f != NULL, wants);
    if (f) assert_string_equal(f, key.path), given++;
  }
  assert_int_equal(given, 4); /* two schedulers, two input processors */
  struct stat sb;
  assert_int_equal(stat(key.path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", key.own_dir);
  serve_hash_key_release(&key);
  assert_int_not_equal(stat(dir, &sb), 0); /* a run's key goes with the run */

  char state_dir[] = "/tmp/llmbus-test-state-XXXXXX", first[128] = "", again[128] = "";
  assert_non_null(mkdtemp(state_dir));
  struct serve_options so = {.model_path = "/m/model.gguf", .bin_dir = "/opt/llmbus/bin", .state_dir = state_dir};
  for (int round = 0; round < 2; round++) {
    n = serve_actor_specs(&so, specs, SUPERVISOR_MAX_CHILDREN);
    assert_int_equal(serve_hash_key_apply(&so, specs, n, &key), LLB_STATUS_OK);
    FILE *f = fopen(key.path, "r");
    assert_non_null(f);
    assert_non_null(fgets(round ? again : first, sizeof first, f));
    fclose(f);
    serve_hash_key_release(&key);
  }
  assert_int_equal(strlen(first), 65); /* 64 hex digits and a line end */
  assert_string_equal(first, again);  /* kept across serves */
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/hash.key", state_dir);
  assert_int_equal(chmod(path, 0644), 0);
  struct serve_options op = {.model_path = "/m/model.gguf", .bin_dir = "/opt/llmbus/bin", .hash_key_file = path};
  n = serve_actor_specs(&op, specs, SUPERVISOR_MAX_CHILDREN);
  assert_int_equal(serve_hash_key_apply(&op, specs, n, &key), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(strstr(llb_err_last(), first)); /* never the key itself */
  serve_hash_key_release(&key);
  unlink(path);
  rmdir(state_dir);
}

/* Requests go through the JetStream stream by default: the scheduler and the input processor
 * get --durable (they must agree), no other actor does; --no-durable takes it away. */
static void test_serve_runs_the_engine_durable_unless_told_not_to(void **state) {
  (void)state;
  for (int off = 0; off < 2; off++) {
    struct serve_options o = {.bin_dir = "/opt/llmbus/bin", .no_durable = off == 1};
    static struct child_spec specs[SUPERVISOR_MAX_CHILDREN]; /* 64 KiB each: not on the stack */
    int n = serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
      const bool takes = !strcmp(specs[i].name, "scheduler") || !strncmp(specs[i].name, "input-processor", 15);
      assert_int_equal(spec_flag(&specs[i], "--durable") != NULL, takes && !off);
    }
  }
}

/* The KV geometry has one source, the worker: --num-blocks reaches it alone, and its
 * kv_manager and scheduler get 0 (they adopt the worker's number from its heartbeat), so they
 * cannot disagree about which blocks exist; flags go only to actors that accept them. */
static void test_serve_passes_engine_flags_to_the_actors_that_take_them(void **state) {
  (void)state;
  struct serve_options o = {.bin_dir = "/opt/llmbus/bin"};
  assert_int_equal(serve_engine_flag_add(&o, "num-blocks", "24"), 1);
  assert_int_equal(serve_engine_flag_add(&o, "no-prefix-caching", NULL), 0);
  assert_int_equal(serve_engine_flag_add(&o, "max-model-len", "512"), 1);
  assert_int_equal(serve_engine_flag_add(&o, "bogus", "1"), -1);
  static struct child_spec specs[SUPERVISOR_MAX_CHILDREN]; /* 64 KiB each: not on the stack */
  int n = serve_actor_specs(&o, specs, SUPERVISOR_MAX_CHILDREN);
  assert_int_equal(n, 8); /* two input processors by default */
  assert_string_equal(specs[7].name, "input-processor-2");
  assert_string_equal(specs[7].args[0], "/opt/llmbus/bin/llmbus-input-processor");
  const char *geometry[] = {"kv-manager", "gpu-worker", "scheduler"};
  for (int i = 0; i < 3; i++) {
    const struct child_spec *c = spec_named(specs, n, geometry[i]);
    assert_non_null(c);
    assert_string_equal(spec_flag(c, "--num-blocks"), i == 1 ? "24" : "0");
  }
  assert_null(spec_flag(spec_named(specs, n, "input-processor"), "--num-blocks"));
  assert_string_equal(spec_flag(spec_named(specs, n, "kv-manager"), "--no-prefix-caching"), "");
  assert_null(spec_flag(spec_named(specs, n, "gpu-worker"), "--no-prefix-caching"));
  assert_string_equal(spec_flag(spec_named(specs, n, "input-processor"), "--max-model-len"), "512");
  assert_string_equal(spec_flag(spec_named(specs, n, "scheduler"), "--max-model-len"), "512");
  assert_null(spec_flag(spec_named(specs, n, "output-processor"), "--max-model-len"));
  char *missing_value[] = {"serve", "--num-blocks", NULL};
  assert_int_equal(cmd_serve(2, missing_value), 2);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A child that cannot start (it fails at once, every time: a bad model file, a port in use)
 * was restarted forever; now its third quick failure stops the supervisor, which returns
 * ABORTED naming the child and quoting its last error line, and stops the other children. */
static void test_child_failing_at_every_start_stops_the_supervisor_with_its_error(void **state) {
  (void)state;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = "nats://127.0.0.1:1"; /* no embedded server: the children do not use it */
  cfg.restart_min_ms = 50;
  cfg.stop_timeout_ms = 5000;
  struct supervisor *s = NULL;
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  struct child_spec bad, good;
  assert_int_equal(child_spec_init(&bad, "bad-model", "/bin/sh"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&bad, "-c"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&bad, "echo 'level=info event=starting' >&2; "
                                            "echo 'level=error event=start_failed error=\"/m/x.gguf: not a GGUF "
                                            "file\"' >&2; echo 'level=info event=exit code=1' >&2; exit 1"),
                   LLB_STATUS_OK);
  assert_int_equal(child_spec_init(&good, "sleeper", "/bin/sleep"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&good, "300"), LLB_STATUS_OK);
  bad.pass_nats_url = good.pass_nats_url = false;
  assert_int_equal(supervisor_add_child(s, &bad), LLB_STATUS_OK);
  assert_int_equal(supervisor_add_child(s, &good), LLB_STATUS_OK);
  double t0 = now_ms();
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  pid_t sleeper = supervisor_child_pid(s, "sleeper");
  assert_true(sleeper > 0);
  assert_int_equal(supervisor_run(s), LLB_STATUS_ABORTED);
  double waited_ms = now_ms() - t0;
  const char *err = llb_err_last();
  fprintf(stderr, "supervisor gave up after %.0f ms: %s\n", waited_ms, err);
  assert_true(waited_ms < 10000);
  assert_non_null(strstr(err, "bad-model failed 3 times"));
  assert_non_null(strstr(err, "not a GGUF file"));
  assert_non_null(strstr(err, "exit code 1"));
  assert_string_equal(supervisor_crash_looped(s), "bad-model");
  assert_int_equal(supervisor_child_restarts(s, "bad-model"), 2);
  assert_true(nats_test_wait_until(pid_gone, &sleeper, WAIT_MS));
  supervisor_destroy(s);
}

/* A child that fails only after running a while (longer than the crash-loop window) is a
 * crash, not a configuration error: it keeps being restarted. */
static void test_child_failing_after_the_window_keeps_being_restarted(void **state) {
  (void)state;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  cfg.nats_url = "nats://127.0.0.1:1";
  cfg.restart_min_ms = 20;
  cfg.restart_max_ms = 40;
  cfg.crash_loop_window_ms = 150;
  cfg.stop_timeout_ms = 5000;
  struct supervisor *s = NULL;
  assert_int_equal(supervisor_create(&cfg, &s), LLB_STATUS_OK);
  struct child_spec late;
  assert_int_equal(child_spec_init(&late, "late", "/bin/sh"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&late, "-c"), LLB_STATUS_OK);
  assert_int_equal(child_spec_add_arg(&late, "sleep 0.4; echo 'level=error event=crash' >&2; exit 3"), LLB_STATUS_OK);
  late.pass_nats_url = false;
  assert_int_equal(supervisor_add_child(s, &late), LLB_STATUS_OK);
  assert_int_equal(supervisor_start(s), LLB_STATUS_OK);
  double t0 = now_ms();
  while (supervisor_child_restarts(s, "late") < 4 && now_ms() - t0 < WAIT_MS)
    assert_false(supervisor_poll(s, 100));
  assert_true(supervisor_child_restarts(s, "late") >= 4);
  assert_null(supervisor_crash_looped(s));
  assert_int_equal(supervisor_stop(s), LLB_STATUS_OK);
  supervisor_destroy(s);
}

/* The same through `llmbus serve` (the real actors, when built): a model file that is not
 * GGUF, and an HTTP port already in use, each end serve with exit code 1 and the failing
 * actor's error within 10 s. */
static void serve_expect_crash_loop(const char *llmbus, const char *model, const char *http, const char *want) {
  char out_path[] = "/tmp/llmbus-suptest-serve-XXXXXX";
  int fd = mkstemp(out_path);
  assert_true(fd >= 0);
  double t0 = now_ms();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd, STDERR_FILENO);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execl(llmbus, "llmbus", "serve", "--model", model, "--http", http, (char *)NULL);
    _exit(127);
  }
  close(fd);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0 && now_ms() - t0 < 30000) usleep(20000);
  double waited_ms = now_ms() - t0;
  if (kill(pid, 0) == 0 && waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("llmbus serve still running after %.0f ms", waited_ms);
  }
  char text[65536] = "";
  FILE *f = fopen(out_path, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(out_path);
  const char *summary = strstr(text, "llmbus serve: ");
  fprintf(stderr, "serve (%s) ended after %.0f ms: %.400s\n", want, waited_ms, summary ? summary : "(no summary)");
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 1);
  assert_true(waited_ms < 10000);
  assert_non_null(summary);
  assert_non_null(strstr(summary, "failed 3 times"));
  assert_non_null(strstr(summary, want));
}

static void test_serve_ends_with_the_error_of_an_actor_that_cannot_start(void **state) {
  (void)state;
  const char *build = getenv("LLMBUS_BUILD_DIR"), *src = getenv("LLMBUS_SOURCE_DIR");
  char llmbus[1024], model[1024];
  snprintf(llmbus, sizeof llmbus, "%s/cmd/llmbus", build ? build : ".");
  if (!build || access(llmbus, X_OK) != 0) skip();
  char garbage[] = "/tmp/llmbus-suptest-model-XXXXXX";
  int fd = mkstemp(garbage);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "this is not a GGUF file at all", 30), 30);
  close(fd);
  serve_expect_crash_loop(llmbus, garbage, "127.0.0.1:0", "not a GGUF file");
  unlink(garbage);
  snprintf(model, sizeof model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
  if (access(model, R_OK) != 0) return;
  struct nats_test_server busy; /* any listening port will do */
  assert_int_equal(nats_test_server_start(&busy, 0, false), 0);
  char http[64];
  snprintf(http, sizeof http, "127.0.0.1:%d", busy.port);
  serve_expect_crash_loop(llmbus, model, http, "cannot listen");
  nats_test_server_stop(&busy);
}

/* A child that was serving when it died (killed from outside: an operator, the OOM killer, a
 * chaos test) comes back after restart_min_ms however often that happened; only children that
 * keep dying right after their start back off. */
static void test_restart_delay_backs_off_only_for_children_dying_at_start(void **state) {
  (void)state;
  struct supervisor_config cfg;
  supervisor_config_init(&cfg);
  assert_int_equal(supervisor_restart_delay_ms(&cfg, 0, 10), cfg.restart_min_ms);
  assert_int_equal(supervisor_restart_delay_ms(&cfg, cfg.restart_min_ms, 10), 2 * cfg.restart_min_ms);
  assert_int_equal(supervisor_restart_delay_ms(&cfg, cfg.restart_max_ms, 10), cfg.restart_max_ms);
  /* The chaos run's case: a scheduler killed for the 7th time after 4 s of serving. */
  assert_int_equal(supervisor_restart_delay_ms(&cfg, 3200, 3962), cfg.restart_min_ms);
  assert_int_equal(supervisor_restart_delay_ms(&cfg, 3200, cfg.restart_reset_ms), cfg.restart_min_ms);
  assert_true(cfg.restart_reset_ms <= 1000);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--helper") == 0) return run_helper(argv[2]);
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_restart_delay_backs_off_only_for_children_dying_at_start),
      cmocka_unit_test(test_embedded_nats_accepts_clients_and_is_removed),
      cmocka_unit_test(test_embedded_nats_gets_gomaxprocs_1_unless_set),
      cmocka_unit_test(test_external_url_is_passed_to_children),
      cmocka_unit_test(test_stop_goes_stage_by_stage),
      cmocka_unit_test(test_killed_child_restarts_and_sigterm_leaves_no_process),
      cmocka_unit_test(test_serve_actor_specs_and_usage),
      cmocka_unit_test(test_serve_refuses_names_with_syntax_before_starting),
      cmocka_unit_test(test_serve_hands_the_hash_key_to_schedulers_and_input_processors),
      cmocka_unit_test(test_embedded_nats_monitoring_port_answers_on_loopback),
      cmocka_unit_test(test_serve_gives_each_actor_its_metrics_port),
      cmocka_unit_test(test_serve_passes_engine_flags_to_the_actors_that_take_them),
      cmocka_unit_test(test_serve_runs_the_engine_durable_unless_told_not_to),
      cmocka_unit_test(test_child_failing_at_every_start_stops_the_supervisor_with_its_error),
      cmocka_unit_test(test_child_failing_after_the_window_keeps_being_restarted),
      cmocka_unit_test(test_serve_ends_with_the_error_of_an_actor_that_cannot_start),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
