/* Process supervisor: see supervisor.h. */
#include "cmd/supervisor/supervisor.h"
#include "cmd/supervisor/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
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

#include "base/log.h"

struct child {
  struct child_spec spec;
  bool is_nats;
  pid_t pid;                 /* 0 = not running */
  int64_t started_ns;        /* when the current run started */
  int64_t restart_at_ns;     /* when to start again; 0 = not scheduled */
  int64_t backoff_ms;        /* last backoff used */
  int restarts;
  int fast_fails;            /* consecutive runs that failed within crash_loop_window_ms */
  int last_status;           /* waitpid status of the last exit */
  int err_fd;                /* read end of the child's stderr pipe, -1 none */
  char line[512];            /* the stderr line being read */
  size_t line_len;
  char last_error[512];      /* its last "level=error" line, else its last line */
  bool last_error_is_error;
};

struct supervisor {
  struct supervisor_config cfg;
  char nats_bin[512];
  char nats_url[128];
  int nats_monitor_port; /* the embedded server's monitoring port, 0 = none */
  char temp_dir[256];
  void (*on_started)(struct supervisor *s, void *user); /* supervisor_on_started */
  void *on_started_user;
  struct child children[SUPERVISOR_MAX_CHILDREN + 1]; /* + the embedded nats-server */
  int num_children;
  bool started, stopping;
  int wake_pipe[2]; /* SIGCHLD / stop requests write a byte */
  volatile sig_atomic_t stop_requested;
  struct child *crash_looped; /* the child that gave up the supervisor, NULL none */
  struct sigaction old_chld, old_term, old_int;
  bool chld_installed, term_installed;
};

/* ---- child specs ---- */

llb_status child_spec_init(struct child_spec *spec, const char *name, const char *program) {
  if (!spec || !name || !*name || !program || !*program)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "child spec: empty name or program");
  memset(spec, 0, sizeof *spec);
  if (strlen(name) >= sizeof spec->name)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "child name \"%s\" is too long", name);
  snprintf(spec->name, sizeof spec->name, "%s", name);
  spec->pass_nats_url = true;
  return child_spec_add_arg(spec, program);
}

llb_status child_spec_add_arg(struct child_spec *spec, const char *arg) {
  if (!spec || !arg) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "child spec: NULL argument");
  if (spec->argc >= CHILD_SPEC_MAX_ARGS - 3) /* room for --nats URL and the NULL */
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "child %s: more than %d arguments", spec->name,
                    CHILD_SPEC_MAX_ARGS - 3);
  if (strlen(arg) >= CHILD_SPEC_ARG_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "child %s: argument longer than %d bytes: %.60s...",
                    spec->name, CHILD_SPEC_ARG_MAX - 1, arg);
  snprintf(spec->args[spec->argc++], CHILD_SPEC_ARG_MAX, "%s", arg);
  return LLB_STATUS_OK;
}

/* ---- small helpers ---- */

static void sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static bool port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

static const char *find_nats_server(const struct supervisor_config *c, char *buf, size_t cap) {
  if (c->nats_server_bin) return c->nats_server_bin;
  if (access("/usr/sbin/nats-server", X_OK) == 0) return "/usr/sbin/nats-server";
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(buf, cap, "%.*s/nats-server", (int)n, path);
    if (access(buf, X_OK) == 0) return buf;
    path = colon ? colon + 1 : NULL;
  }
  return NULL;
}

/* ---- signals: one supervisor per process owns them ---- */

static volatile sig_atomic_t wake_fd = -1;
static volatile sig_atomic_t *stop_flag;

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  if (wake_fd >= 0) {
    ssize_t w = write(wake_fd, "c", 1);
    (void)w;
  }
  errno = saved;
}

static void on_stop_signal(int sig) {
  (void)sig;
  int saved = errno;
  if (stop_flag) *stop_flag = 1;
  if (wake_fd >= 0) {
    ssize_t w = write(wake_fd, "s", 1);
    (void)w;
  }
  errno = saved;
}

void supervisor_request_stop(struct supervisor *s) {
  if (!s) return;
  s->stop_requested = 1;
  ssize_t w = write(s->wake_pipe[1], "s", 1);
  (void)w;
}

/* ---- lifecycle ---- */

void supervisor_config_init(struct supervisor_config *c) {
  memset(c, 0, sizeof *c);
  c->jetstream = true;
  c->nats_ready_timeout_ms = 10000;
  c->stop_timeout_ms = 35000;
  c->restart_min_ms = 100;
  c->restart_max_ms = 5000;
  c->restart_reset_ms = 1000;
  c->crash_loop_max_fails = 3;
  c->crash_loop_window_ms = 5000;
}

llb_status supervisor_create(const struct supervisor_config *c, struct supervisor **out) {
  if (!c || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "supervisor_create: NULL argument");
  *out = NULL;
  struct supervisor *s = calloc(1, sizeof *s);
  if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "supervisor_create: no memory");
  s->cfg = *c;
  s->wake_pipe[0] = s->wake_pipe[1] = -1;
  if (c->nats_url) {
    if (strlen(c->nats_url) >= sizeof s->nats_url) {
      free(s);
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NATS URL too long");
    }
    snprintf(s->nats_url, sizeof s->nats_url, "%s", c->nats_url);
    s->cfg.nats_url = s->nats_url;
  }
  s->cfg.nats_server_bin = NULL;
  if (c->nats_server_bin) snprintf(s->nats_bin, sizeof s->nats_bin, "%s", c->nats_server_bin);
  if (pipe2(s->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    llb_status st = LLB_ERRF(LLB_STATUS_IO, "supervisor: pipe: %s", strerror(errno));
    free(s);
    return st;
  }
  *out = s;
  return LLB_STATUS_OK;
}

static struct child *find_child(const struct supervisor *s, const char *name) {
  for (int i = 0; i < s->num_children; i++)
    if (strcmp(s->children[i].spec.name, name) == 0) return (struct child *)&s->children[i];
  return NULL;
}

static llb_status start_child(struct supervisor *s, struct child *c);

llb_status supervisor_add_child(struct supervisor *s, const struct child_spec *spec) {
  if (!s || !spec || spec->argc < 1 || !spec->name[0])
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "add_child: empty spec");
  if (find_child(s, spec->name))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "add_child: a child named %s exists", spec->name);
  if (s->num_children >= SUPERVISOR_MAX_CHILDREN)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "add_child: more than %d children",
                    SUPERVISOR_MAX_CHILDREN);
  struct child *c = &s->children[s->num_children++];
  memset(c, 0, sizeof *c);
  c->err_fd = -1;
  c->spec = *spec;
  c->backoff_ms = 0;
  if (s->started && !s->stopping) return start_child(s, c);
  return LLB_STATUS_OK;
}

/* In the forked nats-server child, before exec: one Go P (GOMAXPROCS=1) unless the
 * environment sets GOMAXPROCS. With more, the Go scheduler hands the goroutines of one routed
 * message (the sender's read loop, the receiver's flush) to other OS threads and wakes them:
 * ~16 wake-ups and ~460 us of nats-server CPU per streamed token at batch 1, taken from the
 * forward's cores on a small machine; one P routes the engine's few thousand messages a second
 * with fewer (ops/bench/README.md "Served against the forward"). glibc's fork leaves malloc
 * usable in the child, so putenv may grow the environment. */
static void nats_child_env(void) {
  static char gomaxprocs[] = "GOMAXPROCS=1";
  if (!getenv("GOMAXPROCS")) putenv(gomaxprocs);
}

/* fork + exec of one child in its own process group. */
static llb_status start_child(struct supervisor *s, struct child *c) {
  char *argv[CHILD_SPEC_MAX_ARGS + 1];
  int n = 0;
  for (int i = 0; i < c->spec.argc; i++) argv[n++] = c->spec.args[i];
  if (c->spec.pass_nats_url && !c->is_nats && s->nats_url[0]) {
    argv[n++] = "--nats";
    argv[n++] = s->nats_url;
  }
  argv[n] = NULL;
  char log_path[512] = "";
  if (c->is_nats) snprintf(log_path, sizeof log_path, "%s/nats-server.log", s->temp_dir);
  int err_pipe[2] = {-1, -1}; /* the child's stderr, forwarded by the supervisor (crash loops) */
  if (!c->is_nats && pipe2(err_pipe, O_CLOEXEC) != 0) err_pipe[0] = err_pipe[1] = -1;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    if (err_pipe[0] >= 0) close(err_pipe[0]), close(err_pipe[1]);
    return LLB_ERRF(LLB_STATUS_IO, "fork for %s: %s", c->spec.name, strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127); /* the supervisor died before prctl */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    if (err_pipe[1] >= 0) dup2(err_pipe[1], STDERR_FILENO); /* dup2 clears O_CLOEXEC */
    if (log_path[0]) {
      int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
    }
    if (c->is_nats) nats_child_env();
    if (strchr(argv[0], '/'))
      execv(argv[0], argv);
    else
      execvp(argv[0], argv);
    char msg[700];
    int m = snprintf(msg, sizeof msg, "level=error event=child_exec_failed name=%s program=%s error=\"%s\"\n",
                     c->spec.name, argv[0], strerror(errno));
    if (m > 0) {
      ssize_t w = write(STDERR_FILENO, msg, (size_t)m);
      (void)w;
    }
    _exit(127);
  }
  setpgid(pid, pid); /* also from the parent: no window where a signal to the group misses */
  if (err_pipe[1] >= 0) {
    close(err_pipe[1]);
    if (c->err_fd >= 0) close(c->err_fd);
    c->err_fd = err_pipe[0];
    fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
  }
  c->line_len = 0;
  c->last_error[0] = '\0';
  c->last_error_is_error = false;
  c->pid = pid;
  c->started_ns = llb_now_ns();
  c->restart_at_ns = 0;
  LLB_LOG_INFO("child_started", "name=%s pid=%d program=%s restarts=%d", c->spec.name, (int)pid,
               argv[0], c->restarts);
  return LLB_STATUS_OK;
}

/* The client port of the embedded server from its ports file; *monitor_port (may be NULL)
 * gets its monitoring port ("monitoring":["http://127.0.0.1:P"]), 0 when none. */
static int read_ports_file(const char *dir, pid_t pid, int *monitor_port) {
  char path[512], buf[512];
  snprintf(path, sizeof path, "%s/nats-server_%d.ports", dir, (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *m = strstr(buf, "http://127.0.0.1:");
  if (monitor_port) *monitor_port = m ? atoi(m + strlen("http://127.0.0.1:")) : 0;
  const char *p = strstr(buf, "nats://127.0.0.1:");
  return p ? atoi(p + strlen("nats://127.0.0.1:")) : 0;
}

static void reap(struct supervisor *s, struct child *c, int status);
static void signal_group(struct child *c, int sig);

/* nats-server failed to start: its log moves out of the temporary directory (removed when the
 * supervisor stops) to $TMPDIR/llmbus-nats-server-<our pid>.log, so the error that names it
 * names a file that is still there. path[cap]: where it is now. */
static void keep_nats_log(const struct supervisor *s, char *path, size_t cap) {
  char from[sizeof s->temp_dir + 32];
  snprintf(from, sizeof from, "%s/nats-server.log", s->temp_dir);
  const char *tmp = getenv("TMPDIR");
  snprintf(path, cap, "%s/llmbus-nats-server-%ld.log", tmp && *tmp ? tmp : "/tmp", (long)getpid());
  if (rename(from, path) != 0) snprintf(path, cap, "%s (%s)", from, strerror(errno));
}

static llb_status start_nats(struct supervisor *s) {
  char found[512];
  const char *bin = s->nats_bin[0] ? s->nats_bin : find_nats_server(&s->cfg, found, sizeof found);
  if (!bin)
    return LLB_ERRF(LLB_STATUS_NO_SERVER,
                    "no --nats URL given and no nats-server binary found (/usr/sbin, PATH)");
  llb_status dst = run_dir_create("serve", s->temp_dir, sizeof s->temp_dir);
  if (dst != LLB_STATUS_OK) return dst;
  struct child *c = &s->children[SUPERVISOR_MAX_CHILDREN];
  memset(c, 0, sizeof *c);
  c->err_fd = -1;
  c->is_nats = true;
  char js_dir[400];
  if (s->cfg.state_dir) snprintf(js_dir, sizeof js_dir, "%s", s->cfg.state_dir);
  else snprintf(js_dir, sizeof js_dir, "%s/js", s->temp_dir);
  llb_status st = child_spec_init(&c->spec, "nats-server", bin);
  const char *args[] = {"-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", s->temp_dir};
  for (size_t i = 0; st == LLB_STATUS_OK && i < sizeof args / sizeof args[0]; i++)
    st = child_spec_add_arg(&c->spec, args[i]);
  const int monitor_arg = c->spec.argc + 1; /* index of -m's value */
  if (st == LLB_STATUS_OK && s->cfg.nats_monitor_port != 0) {
    char mp[16];
    snprintf(mp, sizeof mp, "%d", s->cfg.nats_monitor_port < 0 ? -1 : s->cfg.nats_monitor_port);
    st = child_spec_add_arg(&c->spec, "-m");
    if (st == LLB_STATUS_OK) st = child_spec_add_arg(&c->spec, mp);
  }
  if (st == LLB_STATUS_OK && s->cfg.jetstream) {
    st = child_spec_add_arg(&c->spec, "-js");
    if (st == LLB_STATUS_OK) st = child_spec_add_arg(&c->spec, "-sd");
    if (st == LLB_STATUS_OK) st = child_spec_add_arg(&c->spec, js_dir);
  }
  if (st == LLB_STATUS_OK && s->cfg.nats_config_file) {
    st = child_spec_add_arg(&c->spec, "-c");
    if (st == LLB_STATUS_OK) st = child_spec_add_arg(&c->spec, s->cfg.nats_config_file);
  }
  if (st != LLB_STATUS_OK) return st;
  if ((st = start_child(s, c)) != LLB_STATUS_OK) return st;
  int64_t deadline = llb_now_ns() + s->cfg.nats_ready_timeout_ms * 1000000;
  int port = 0;
  while (llb_now_ns() < deadline) {
    int status;
    if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
      c->pid = 0;
      char log[512];
      keep_nats_log(s, log, sizeof log);
      return LLB_ERRF(LLB_STATUS_NO_SERVER, "%s exited at start-up (status 0x%x); its log: %s", bin, status, log);
    }
    if (!port) port = read_ports_file(s->temp_dir, c->pid, &s->nats_monitor_port);
    if (port > 0 && port_open(port)) break;
    sleep_ms(5);
  }
  if (!(port > 0 && port_open(port))) {
    signal_group(c, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
    char log[512];
    keep_nats_log(s, log, sizeof log);
    return LLB_ERRF(LLB_STATUS_NO_SERVER, "%s did not accept connections within %lld ms; its log: %s",
                    bin, (long long)s->cfg.nats_ready_timeout_ms, log);
  }
  snprintf(s->nats_url, sizeof s->nats_url, "nats://127.0.0.1:%d", port);
  /* A restart must come back on the same port: the children hold this URL. */
  char port_arg[16];
  snprintf(port_arg, sizeof port_arg, "%d", port);
  snprintf(c->spec.args[4], CHILD_SPEC_ARG_MAX, "%s", port_arg);
  if (s->cfg.nats_monitor_port != 0 && s->nats_monitor_port > 0)
    snprintf(c->spec.args[monitor_arg], CHILD_SPEC_ARG_MAX, "%d", s->nats_monitor_port);
  char mon[64] = "none";
  if (s->nats_monitor_port > 0) snprintf(mon, sizeof mon, "http://127.0.0.1:%d", s->nats_monitor_port);
  LLB_LOG_INFO("nats_ready", "url=%s monitor=%s pid=%d store=%s", s->nats_url, mon, (int)c->pid, js_dir);
  return LLB_STATUS_OK;
}

static void install_chld(struct supervisor *s) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigchld;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  wake_fd = s->wake_pipe[1];
  stop_flag = &s->stop_requested;
  sigaction(SIGCHLD, &sa, &s->old_chld);
  s->chld_installed = true;
}

llb_status supervisor_start(struct supervisor *s) {
  if (!s) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "supervisor_start: NULL");
  if (s->started) return LLB_STATUS_OK;
  install_chld(s);
  s->started = true;
  s->stopping = false;
  llb_status st = LLB_STATUS_OK;
  if (!s->cfg.nats_url) st = start_nats(s);
  for (int i = 0; st == LLB_STATUS_OK && i < s->num_children; i++)
    st = start_child(s, &s->children[i]);
  if (st != LLB_STATUS_OK) {
    char saved[600];
    snprintf(saved, sizeof saved, "%s", llb_err_last());
    llb_status err = st;
    supervisor_stop(s);
    return LLB_ERRF(err, "%s", saved);
  }
  char shown[512];
  LLB_LOG_INFO("supervisor_started", "nats=%s children=%d", llb_log_redact_url(shown, sizeof shown, s->nats_url),
               s->num_children);
  return LLB_STATUS_OK;
}

const char *supervisor_nats_url(const struct supervisor *s) { return s->nats_url; }
const char *supervisor_temp_dir(const struct supervisor *s) { return s->temp_dir; }

int supervisor_nats_monitor_port(const struct supervisor *s) { return s->nats_monitor_port; }

/* One complete stderr line of c: kept when it is an error line, or when no error line was. */
static void child_line(struct child *c) {
  c->line[c->line_len] = '\0';
  bool is_error = strstr(c->line, "level=error") != NULL;
  if (c->line_len > 0 && (is_error || !c->last_error_is_error)) {
    snprintf(c->last_error, sizeof c->last_error, "%s", c->line);
    c->last_error_is_error = is_error;
  }
  c->line_len = 0;
}

/* Forwards what c wrote to stderr since the last call to ours (its logs read as before) and
 * keeps its last error line; at EOF the pipe is closed. Never blocks. */
static void drain_child_stderr(struct child *c) {
  char buf[4096];
  while (c->err_fd >= 0) {
    ssize_t n = read(c->err_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        if (c->line_len) child_line(c);
        close(c->err_fd);
        c->err_fd = -1;
      }
      return;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(STDERR_FILENO, buf + off, (size_t)(n - off));
      if (w <= 0 && errno != EINTR) break;
      if (w > 0) off += w;
    }
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == '\n') child_line(c);
      else if (c->line_len < sizeof c->line - 1) c->line[c->line_len++] = buf[i];
    }
  }
}

static void drain_all_stderr(struct supervisor *s) {
  for (int i = 0; i < s->num_children; i++) drain_child_stderr(&s->children[i]);
}

int64_t supervisor_restart_delay_ms(const struct supervisor_config *cfg, int64_t prev_ms, int64_t up_ms) {
  if (up_ms >= cfg->restart_reset_ms || prev_ms <= 0) return cfg->restart_min_ms;
  return prev_ms * 2 > cfg->restart_max_ms ? cfg->restart_max_ms : prev_ms * 2;
}

/* Records an exit and schedules the restart with backoff. A child that failed (non-zero exit
 * or a signal) within crash_loop_window_ms of starting, crash_loop_max_fails times in a row,
 * cannot start (bad model, port in use, bad flag): restarting it forever helps nobody, so
 * the supervisor stops (supervisor_run returns its last error line). */
static void reap(struct supervisor *s, struct child *c, int status) {
  int64_t now = llb_now_ns();
  int64_t up_ms = (now - c->started_ns) / 1000000;
  c->pid = 0;
  c->last_status = status;
  drain_child_stderr(c); /* its last words, before its error line is judged */
  if (s->stopping) return;
  bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* SIGKILL comes from outside (an operator, the OOM killer, a chaos test): the child did not
   * fail to start, so it does not count towards a crash loop. */
  bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  c->fast_fails = failed && !killed && up_ms < s->cfg.crash_loop_window_ms ? c->fast_fails + 1 : 0;
  if (!c->is_nats && s->cfg.crash_loop_max_fails > 0 && c->fast_fails >= s->cfg.crash_loop_max_fails) {
    LLB_LOG_ERROR("child_crash_loop", "name=%s fails=%d window_ms=%lld action=stop last_error=\"%s\"", c->spec.name,
                  c->fast_fails, (long long)s->cfg.crash_loop_window_ms, c->last_error);
    if (!s->crash_looped) s->crash_looped = c;
    s->stop_requested = 1;
    return;
  }
  c->backoff_ms = supervisor_restart_delay_ms(&s->cfg, c->backoff_ms, up_ms);
  c->restart_at_ns = now + c->backoff_ms * 1000000;
  char how[48];
  if (WIFEXITED(status))
    snprintf(how, sizeof how, "exit_code=%d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(how, sizeof how, "signal=%d", WTERMSIG(status));
  else
    snprintf(how, sizeof how, "status=0x%x", status);
  LLB_LOG_WARN("child_exited", "name=%s %s uptime_ms=%lld restart_in_ms=%lld restarts=%d",
               c->spec.name, how, (long long)up_ms, (long long)c->backoff_ms, c->restarts);
}

bool supervisor_poll(struct supervisor *s, int64_t timeout_ms) {
  if (!s->started) return s->stop_requested;
  /* Reap only our own children, by pid. */
  for (int i = 0; i <= SUPERVISOR_MAX_CHILDREN; i++) {
    if (i >= s->num_children && i != SUPERVISOR_MAX_CHILDREN) continue;
    struct child *c = &s->children[i];
    int status;
    if (c->pid > 0 && waitpid(c->pid, &status, WNOHANG) == c->pid) reap(s, c, status);
  }
  int64_t now = llb_now_ns();
  int64_t wait_ms = timeout_ms;
  for (int i = 0; i <= SUPERVISOR_MAX_CHILDREN; i++) {
    if (i >= s->num_children && i != SUPERVISOR_MAX_CHILDREN) continue;
    struct child *c = &s->children[i];
    if (c->pid || !c->restart_at_ns || s->stop_requested) continue;
    if (c->restart_at_ns <= now) {
      c->restarts++;
      if (start_child(s, c) != LLB_STATUS_OK) {
        char q[600];
        LLB_LOG_ERROR("child_restart_failed", "name=%s err=%s", c->spec.name,
                      llb_log_quote(q, sizeof q, llb_err_last()));
        c->restart_at_ns = now + s->cfg.restart_max_ms * 1000000;
      }
    } else {
      int64_t due = (c->restart_at_ns - now) / 1000000 + 1;
      if (due < wait_ms) wait_ms = due;
    }
  }
  if (s->stop_requested) return true;
  struct pollfd p[SUPERVISOR_MAX_CHILDREN + 1] = {{.fd = s->wake_pipe[0], .events = POLLIN}};
  nfds_t np = 1;
  for (int i = 0; i < s->num_children; i++)
    if (s->children[i].err_fd >= 0) p[np++] = (struct pollfd){.fd = s->children[i].err_fd, .events = POLLIN};
  int r = poll(p, np, wait_ms < 0 ? 0 : (int)(wait_ms > 1000000 ? 1000000 : wait_ms));
  if (r > 0) {
    char buf[64];
    while (read(s->wake_pipe[0], buf, sizeof buf) > 0) {
    }
    drain_all_stderr(s);
  }
  return s->stop_requested;
}

static void signal_group(struct child *c, int sig) {
  if (c->pid <= 0) return;
  if (kill(-c->pid, sig) != 0) kill(c->pid, sig);
}

/* Whether child c is in the set stop_set stops: nats-server, or the actors of one stage (a
 * stage out of range counts as the nearest one, so every child is stopped). */
static bool in_stop_set(const struct child *c, bool nats, int stage) {
  int own = c->spec.stop_stage < 0 ? 0 : c->spec.stop_stage;
  if (own >= SUPERVISOR_STOP_STAGES) own = SUPERVISOR_STOP_STAGES - 1;
  return c->is_nats == nats && (nats || own == stage);
}

/* SIGTERM to every running child of the set (nats-server, or the actors of stop stage
 * `stage`), wait, SIGKILL the rest. Returns true if SIGKILL was needed. */
static bool stop_set(struct supervisor *s, bool nats, int stage) {
  int64_t t0 = llb_now_ns();
  for (int i = 0; i <= SUPERVISOR_MAX_CHILDREN; i++) {
    if (i >= s->num_children && i != SUPERVISOR_MAX_CHILDREN) continue;
    struct child *c = &s->children[i];
    if (in_stop_set(c, nats, stage)) signal_group(c, SIGTERM);
  }
  bool killed = false;
  for (;;) {
    bool any = false;
    for (int i = 0; i <= SUPERVISOR_MAX_CHILDREN; i++) {
      if (i >= s->num_children && i != SUPERVISOR_MAX_CHILDREN) continue;
      struct child *c = &s->children[i];
      if (!in_stop_set(c, nats, stage) || c->pid <= 0) continue;
      int status;
      if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
        LLB_LOG_INFO("child_stopped", "name=%s pid=%d %s=%d", c->spec.name, (int)c->pid,
                     WIFEXITED(status) ? "exit_code" : "signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        /* The group may still hold grandchildren: make sure they go too. */
        kill(-c->pid, SIGKILL);
        c->pid = 0;
      } else {
        any = true;
      }
    }
    if (!any) break;
    drain_all_stderr(s); /* a child logging its shutdown must never block on a full pipe */
    if (llb_now_ns() - t0 > s->cfg.stop_timeout_ms * 1000000) {
      for (int i = 0; i <= SUPERVISOR_MAX_CHILDREN; i++) {
        if (i >= s->num_children && i != SUPERVISOR_MAX_CHILDREN) continue;
        struct child *c = &s->children[i];
        if (!in_stop_set(c, nats, stage) || c->pid <= 0) continue;
        LLB_LOG_WARN("child_killed", "name=%s pid=%d after_ms=%lld", c->spec.name, (int)c->pid,
                     (long long)s->cfg.stop_timeout_ms);
        signal_group(c, SIGKILL);
        waitpid(c->pid, NULL, 0);
        c->pid = 0;
        killed = true;
      }
      break;
    }
    sleep_ms(5);
  }
  return killed;
}

llb_status supervisor_stop(struct supervisor *s) {
  if (!s || !s->started) return LLB_STATUS_OK;
  s->stopping = true;
  bool killed = false;
  for (int stage = 0; stage < SUPERVISOR_STOP_STAGES; stage++) killed |= stop_set(s, false, stage);
  killed |= stop_set(s, true, 0);
  for (int i = 0; i < s->num_children; i++) {
    drain_child_stderr(&s->children[i]);
    if (s->children[i].err_fd >= 0) close(s->children[i].err_fd);
    s->children[i].err_fd = -1;
  }
  if (s->temp_dir[0]) {
    run_dir_remove(s->temp_dir);
    s->temp_dir[0] = '\0';
  }
  if (s->chld_installed) {
    sigaction(SIGCHLD, &s->old_chld, NULL);
    s->chld_installed = false;
  }
  if (s->term_installed) {
    sigaction(SIGTERM, &s->old_term, NULL);
    sigaction(SIGINT, &s->old_int, NULL);
    s->term_installed = false;
  }
  wake_fd = -1;
  stop_flag = NULL;
  s->started = false;
  LLB_LOG_INFO("supervisor_stopped", "killed=%s", killed ? "yes" : "no");
  if (killed)
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "some children needed SIGKILL after %lld ms",
                    (long long)s->cfg.stop_timeout_ms);
  return LLB_STATUS_OK;
}

/* The error supervisor_run returns after a crash loop: the child, how it ended, its words. */
static llb_status crash_loop_error(const struct supervisor *s) {
  const struct child *c = s->crash_looped;
  char how[48];
  if (WIFEXITED(c->last_status)) snprintf(how, sizeof how, "exit code %d", WEXITSTATUS(c->last_status));
  else snprintf(how, sizeof how, "signal %d", WIFSIGNALED(c->last_status) ? WTERMSIG(c->last_status) : 0);
  return LLB_ERRF(LLB_STATUS_ABORTED, "%s failed %d times within %lld ms of starting (%s), so nothing was "
                  "restarted; its last error: %s", c->spec.name, c->fast_fails,
                  (long long)s->cfg.crash_loop_window_ms, how, c->last_error[0] ? c->last_error : "(none)");
}

const char *supervisor_crash_looped(const struct supervisor *s) {
  return s && s->crash_looped ? s->crash_looped->spec.name : NULL;
}

llb_status supervisor_run(struct supervisor *s) {
  if (!s) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "supervisor_run: NULL");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  stop_flag = &s->stop_requested;
  wake_fd = s->wake_pipe[1];
  sigaction(SIGTERM, &sa, &s->old_term);
  sigaction(SIGINT, &sa, &s->old_int);
  s->term_installed = true;
  if (!s->started) {
    llb_status st = supervisor_start(s);
    if (st != LLB_STATUS_OK) {
      if (s->term_installed) {
        sigaction(SIGTERM, &s->old_term, NULL);
        sigaction(SIGINT, &s->old_int, NULL);
        s->term_installed = false;
      }
      return st;
    }
  }
  if (s->on_started) s->on_started(s, s->on_started_user);
  while (!supervisor_poll(s, 1000)) {
  }
  LLB_LOG_INFO("supervisor_stopping", "children=%d", s->num_children);
  llb_status st = supervisor_stop(s);
  return s->crash_looped ? crash_loop_error(s) : st;
}

void supervisor_on_started(struct supervisor *s, void (*fn)(struct supervisor *s, void *user), void *user) {
  s->on_started = fn;
  s->on_started_user = user;
}

void supervisor_destroy(struct supervisor *s) {
  if (!s) return;
  supervisor_stop(s);
  for (int i = 0; i < s->num_children; i++)
    if (s->children[i].err_fd >= 0) close(s->children[i].err_fd);
  for (int i = 0; i < 2; i++)
    if (s->wake_pipe[i] >= 0) close(s->wake_pipe[i]);
  free(s);
}

pid_t supervisor_child_pid(const struct supervisor *s, const char *name) {
  if (!s || !name) return 0;
  if (strcmp(name, "nats-server") == 0) return s->children[SUPERVISOR_MAX_CHILDREN].pid;
  const struct child *c = find_child(s, name);
  return c ? c->pid : 0;
}

int supervisor_child_restarts(const struct supervisor *s, const char *name) {
  if (!s || !name) return -1;
  if (strcmp(name, "nats-server") == 0) return s->children[SUPERVISOR_MAX_CHILDREN].restarts;
  const struct child *c = find_child(s, name);
  return c ? c->restarts : -1;
}
