#include "tests/integration/nats_test_server.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/status.h"
#include "bus/bus.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

bool nats_test_wait_until(bool (*pred)(void *arg), void *arg, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    if (pred(arg)) return true;
    if (now_ms() >= deadline) return pred(arg);
    sleep_ms(2);
  }
}

const char *nats_test_server_bin(void) {
  static char found[512];
  const char *env = getenv("NATS_SERVER_BIN");
  if (env && access(env, X_OK) == 0) return env;
  if (access("/usr/sbin/nats-server", X_OK) == 0) return "/usr/sbin/nats-server";
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(found, sizeof found, "%.*s/nats-server", (int)n, path);
    if (access(found, X_OK) == 0) return found;
    path = colon ? colon + 1 : NULL;
  }
  return NULL;
}

bool nats_test_port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    unlink(path);
    return;
  }
  struct dirent *e;
  char sub[1024];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    struct stat st;
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(sub);
    else
      unlink(sub);
  }
  closedir(d);
  rmdir(path);
}

/* Reads the port from DIR/nats-server_<pid>.ports: {"nats":["nats://127.0.0.1:PORT"],...}. */
static int read_ports_file(const struct nats_test_server *s) {
  char path[512], buf[512];
  snprintf(path, sizeof path, "%s/nats-server_%d.ports", s->dir, (int)s->pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strstr(buf, "127.0.0.1:");
  if (!p) return 0;
  int port = atoi(p + strlen("127.0.0.1:"));
  return port > 0 && port < 65536 ? port : 0;
}

static bool child_exited(struct nats_test_server *s, int *status) {
  pid_t r = waitpid(s->pid, status, WNOHANG);
  return r == s->pid;
}

static int spawn(struct nats_test_server *s, int port) {
  const char *bin = nats_test_server_bin();
  if (!bin) {
    fprintf(stderr, "nats_test_server: no nats-server binary (set NATS_SERVER_BIN)\n");
    return -1;
  }
  char port_arg[16], log_path[512], js_dir[512];
  snprintf(port_arg, sizeof port_arg, "%d", port > 0 ? port : -1);
  snprintf(log_path, sizeof log_path, "%s/server.log", s->dir);
  snprintf(js_dir, sizeof js_dir, "%s/js", s->dir);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "nats_test_server: fork: %s\n", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (s->jetstream)
      execl(bin, "nats-server", "-a", "127.0.0.1", "-p", port_arg, "--ports_file_dir", s->dir,
            "-js", "-sd", js_dir, (char *)NULL);
    else
      execl(bin, "nats-server", "-a", "127.0.0.1", "-p", port_arg, "--ports_file_dir", s->dir,
            (char *)NULL);
    _exit(127);
  }
  s->pid = pid;
  int64_t deadline = now_ms() + 15000;
  int status;
  while (now_ms() < deadline) {
    if (child_exited(s, &status)) {
      fprintf(stderr, "nats_test_server: nats-server exited early (status 0x%x); see %s\n",
              status, log_path);
      s->pid = 0;
      return -1;
    }
    int p = port > 0 ? port : read_ports_file(s);
    if (p > 0 && nats_test_port_open(p)) {
      s->port = p;
      snprintf(s->url, sizeof s->url, "nats://127.0.0.1:%d", p);
      return 0;
    }
    sleep_ms(5);
  }
  fprintf(stderr, "nats_test_server: nats-server did not accept connections within 15 s; see %s\n",
          log_path);
  nats_test_server_kill(s);
  return -1;
}

int nats_test_server_start(struct nats_test_server *s, int port, bool jetstream) {
  memset(s, 0, sizeof *s);
  s->jetstream = jetstream;
  const char *tmp = getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/llmbus-nats-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(s->dir)) {
    fprintf(stderr, "nats_test_server: mkdtemp %s: %s\n", s->dir, strerror(errno));
    s->dir[0] = '\0';
    return -1;
  }
  if (spawn(s, port) != 0) {
    nats_test_server_stop(s);
    return -1;
  }
  return 0;
}

int nats_test_server_kill(struct nats_test_server *s) {
  if (s->pid <= 0) return 0;
  int status = 0;
  kill(s->pid, SIGTERM);
  int64_t deadline = now_ms() + 5000;
  while (!child_exited(s, &status)) {
    if (now_ms() >= deadline) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &status, 0);
      break;
    }
    sleep_ms(2);
  }
  s->pid = 0;
  return 0;
}

int nats_test_server_restart(struct nats_test_server *s) {
  if (s->pid > 0) nats_test_server_kill(s);
  int64_t deadline = now_ms() + 15000;
  while (now_ms() < deadline) {
    if (spawn(s, s->port) == 0) return 0;
    sleep_ms(100); /* the port may still be held for a moment */
  }
  return -1;
}

void nats_test_server_stop(struct nats_test_server *s) {
  nats_test_server_kill(s);
  if (s->dir[0]) {
    remove_tree(s->dir);
    s->dir[0] = '\0';
  }
}

struct bus *nats_test_connect(const char *url, const char *name, const char *prefix) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = url;
  o.name = name;
  if (prefix) o.prefix = prefix;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) fail_msg("bus_connect %s to %s: %s", name, url, llb_err_last());
  return b;
}
