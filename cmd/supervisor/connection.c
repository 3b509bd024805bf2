/* The connection file of a running `llmbus serve`; see connection.h. */
#include "cmd/supervisor/connection.h"
#include "cmd/supervisor/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONNECTION_FILE_MAX_BYTES (64 * 1024)

llb_status serve_connection_dir(char *buf, size_t cap) {
  const char *xdg = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
  int n;
  if (xdg && xdg[0] == '/') {
    n = snprintf(buf, cap, "%s/llmbus", xdg);
  } else if (home && home[0] == '/') {
    char cache[PATH_MAX];
    snprintf(cache, sizeof cache, "%s/.cache", home);
    if (mkdir(cache, 0700) != 0 && errno != EEXIST)
      return LLB_ERRF(LLB_STATUS_IO, "cannot create %s: %s", cache, strerror(errno));
    n = snprintf(buf, cap, "%s/.cache/llmbus", home);
  } else {
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "neither XDG_RUNTIME_DIR nor HOME is set: no connection directory");
  }
  if (n < 0 || (size_t)n >= cap) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "connection directory path too long");
  if (mkdir(buf, 0700) != 0 && errno != EEXIST)
    return LLB_ERRF(LLB_STATUS_IO, "cannot create %s: %s", buf, strerror(errno));
  return LLB_STATUS_OK;
}

unsigned long long serve_connection_self_start(void) { return run_dir_proc_start_time(getpid()); }

bool serve_connection_alive(const struct serve_connection *c) {
  if (c->pid <= 0 || (kill((pid_t)c->pid, 0) != 0 && errno != EPERM)) return false;
  const unsigned long long now = run_dir_proc_start_time((pid_t)c->pid);
  return c->pid_start == 0 || now == 0 || now == c->pid_start;
}

static void copy(char *dst, size_t cap, json_t *obj, const char *key) {
  const char *v = json_string_value(json_object_get(obj, key));
  snprintf(dst, cap, "%s", v ? v : "");
}

llb_status serve_connection_read(const char *path, struct serve_connection *out) {
  memset(out, 0, sizeof *out);
  json_error_t e;
  json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
  if (!j) {
    if (access(path, R_OK) != 0) return LLB_ERRF(LLB_STATUS_IO, "cannot read %s: %s", path, strerror(errno));
    return LLB_ERRF(LLB_STATUS_MALFORMED, "%s: line %d: %s", path, e.line, e.text);
  }
  json_t *pid = json_object_get(j, "pid"), *models = json_object_get(j, "models");
  if (!json_is_object(j) || !json_is_integer(pid) || !json_is_string(json_object_get(j, "nats_url"))) {
    json_decref(j);
    return LLB_ERRF(LLB_STATUS_MALFORMED, "%s: not an llmbus connection file (pid, nats_url)", path);
  }
  out->pid = (long)json_integer_value(pid);
  out->pid_start = (unsigned long long)json_integer_value(json_object_get(j, "pid_start"));
  out->started_at = json_number_value(json_object_get(j, "started_at"));
  copy(out->name, sizeof out->name, j, "name");
  copy(out->nats_url, sizeof out->nats_url, j, "nats_url");
  copy(out->prefix, sizeof out->prefix, j, "prefix");
  copy(out->tenant, sizeof out->tenant, j, "tenant");
  copy(out->nats_user, sizeof out->nats_user, j, "nats_user");
  copy(out->nats_password_file, sizeof out->nats_password_file, j, "nats_password_file");
  copy(out->operator_user, sizeof out->operator_user, j, "operator_user");
  copy(out->operator_password_file, sizeof out->operator_password_file, j, "operator_password_file");
  copy(out->http_url, sizeof out->http_url, j, "http_url");
  copy(out->model_path, sizeof out->model_path, j, "model_path");
  for (size_t i = 0; json_is_array(models) && i < json_array_size(models) && out->num_models < SERVE_CONNECTION_MAX_MODELS;
       i++) {
    const char *m = json_string_value(json_array_get(models, i));
    if (m) snprintf(out->models[out->num_models++], sizeof out->models[0], "%s", m);
  }
  json_decref(j);
  return LLB_STATUS_OK;
}

static json_t *to_json(const struct serve_connection *c) {
  json_t *models = json_array();
  for (int i = 0; i < c->num_models; i++) json_array_append_new(models, json_string(c->models[i]));
  return json_pack("{s:s, s:I, s:I, s:f, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:s}", "name", c->name, "pid",
                   (json_int_t)c->pid, "pid_start", (json_int_t)c->pid_start, "started_at", c->started_at,
                   "nats_url", c->nats_url, "prefix", c->prefix, "tenant", c->tenant, "nats_user", c->nats_user,
                   "nats_password_file", c->nats_password_file, "operator_user", c->operator_user,
                   "operator_password_file", c->operator_password_file, "http_url", c->http_url, "models", models,
                   "model_path", c->model_path);
}

llb_status serve_connection_write(const char *dir, const struct serve_connection *c, char *path, size_t cap) {
  char tmp[PATH_MAX];
  snprintf(path, cap, "%s/%s.json", dir, c->name);
  snprintf(tmp, sizeof tmp, "%s/.%s.json.%ld", dir, c->name, (long)getpid());
  json_t *j = to_json(c);
  char *text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
  json_decref(j);
  if (!text) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "connection file");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  llb_status st = LLB_STATUS_OK;
  const size_t len = strlen(text);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) != 0)
    st = LLB_ERRF(LLB_STATUS_IO, "cannot write %s: %s", tmp, strerror(errno));
  if (fd >= 0) close(fd);
  free(text);
  if (st == LLB_STATUS_OK && rename(tmp, path) != 0)
    st = LLB_ERRF(LLB_STATUS_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (st != LLB_STATUS_OK) unlink(tmp);
  return st;
}

/* Calls fn on every connection file of dir (path, its contents); stops when fn returns false. */
static void each_file(const char *dir, bool (*fn)(const char *path, const struct serve_connection *c, void *user),
                      void *user) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  struct serve_connection *c = malloc(sizeof *c);
  while (c && (e = readdir(d))) {
    const size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || n < 6 || strcmp(e->d_name + n - 5, ".json") != 0) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue; /* no such file */
    if (serve_connection_read(path, c) == LLB_STATUS_OK && !fn(path, c, user)) break;
  }
  free(c);
  closedir(d);
}

static bool remove_if_dead(const char *path, const struct serve_connection *c, void *user) {
  if (!serve_connection_alive(c) && unlink(path) == 0) ++*(int *)user;
  return true;
}

/* Keys files of serves that died before removing theirs. */
static int remove_dead_keys_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int removed = 0;
  const size_t n = strlen(SERVE_CONNECTION_KEYS_PREFIX);
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    if (strncmp(e->d_name, SERVE_CONNECTION_KEYS_PREFIX, n) != 0) continue;
    const long pid = strtol(e->d_name + n, &end, 10);
    if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    removed += unlink(path) == 0;
  }
  closedir(d);
  return removed;
}

int serve_connection_remove_stale(const char *dir) {
  int removed = 0;
  each_file(dir, remove_if_dead, &removed);
  return removed + remove_dead_keys_files(dir);
}

void serve_connection_remove_own(const char *path) {
  struct serve_connection *c = malloc(sizeof *c);
  if (c && serve_connection_read(path, c) == LLB_STATUS_OK && c->pid == (long)getpid()) unlink(path);
  free(c);
}

void serve_connection_pick_name(const char *dir, const char *want, long pid, char *name, size_t cap) {
  snprintf(name, cap, "%s", want && *want ? want : "llmbus");
  for (char *p = name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
          *p == '_' || *p == '-'))
      *p = '-';
  if (name[0] == '.') name[0] = '-';
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.json", dir, name);
  struct serve_connection *c = malloc(sizeof *c);
  if (c && serve_connection_read(path, c) == LLB_STATUS_OK && serve_connection_alive(c) && c->pid != pid) {
    const size_t len = strlen(name);
    if (len < cap) snprintf(name + len, cap - len, "-%ld", pid);
  }
  free(c);
}

struct newest {
  struct serve_connection *best;
  char live[512]; /* names, for an error */
};

static bool keep_newest(const char *path, const struct serve_connection *c, void *user) {
  (void)path;
  struct newest *n = user;
  if (!serve_connection_alive(c)) return true;
  if (!n->best->pid || c->started_at > n->best->started_at) *n->best = *c;
  const size_t len = strlen(n->live);
  snprintf(n->live + len, sizeof n->live - len, "%s%s", len ? ", " : "", c->name);
  return true;
}

llb_status serve_connection_find(const char *which, struct serve_connection *out) {
  memset(out, 0, sizeof *out);
  char dir[PATH_MAX], path[PATH_MAX + 64];
  if (which && strchr(which, '/')) {
    snprintf(path, sizeof path, "%s", which);
  } else {
    llb_status st = serve_connection_dir(dir, sizeof dir);
    if (st != LLB_STATUS_OK) return st;
    if (!which || !*which) {
      struct newest n = {.best = out};
      each_file(dir, keep_newest, &n);
      if (!out->pid)
        return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no running llmbus serve found in %s (start one, or give --nats URL)",
                        dir);
      return LLB_STATUS_OK;
    }
    snprintf(path, sizeof path, "%s/%s.json", dir, which);
  }
  llb_status st = serve_connection_read(path, out);
  if (st == LLB_STATUS_IO && !strchr(which, '/')) {
    struct serve_connection *tmp = malloc(sizeof *tmp);
    struct newest n = {.best = tmp};
    if (tmp) {
      memset(tmp, 0, sizeof *tmp);
      each_file(dir, keep_newest, &n);
    }
    free(tmp);
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no llmbus serve named %s (running: %s)", which, n.live[0] ? n.live : "none");
  }
  if (st == LLB_STATUS_OK && !serve_connection_alive(out))
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "the llmbus serve of %s (pid %ld) is not running", path, out->pid);
  return st;
}
