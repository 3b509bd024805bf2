/* Private per-run directories with an owner stamp (run_dir.h). */
#include "cmd/supervisor/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

#define MAX_DEPTH 16 /* ours hold a JetStream store: a few levels */

static const char *tmp_root(void) {
  const char *tmp = getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

unsigned long long run_dir_proc_start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  if (!p) return 0;
  for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

bool run_dir_owner_alive(pid_t pid, unsigned long long start_time) {
  if (pid <= 0) return false;
  unsigned long long now = run_dir_proc_start_time(pid);
  return now != 0 && now == start_time;
}

llb_status run_dir_create(const char *kind, char *path, size_t cap) {
  if (snprintf(path, cap, "%s/llmbus-%s-XXXXXX", tmp_root(), kind) >= (int)cap)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "run directory path under %s too long", tmp_root());
  if (!mkdtemp(path)) {
    llb_status st = LLB_ERRF(LLB_STATUS_IO, "mkdtemp %s: %s", path, strerror(errno));
    path[0] = '\0';
    return st;
  }
  char stamp[PATH_MAX], text[64];
  snprintf(stamp, sizeof stamp, "%s/" RUN_DIR_OWNER_FILE, path);
  int len = snprintf(text, sizeof text, "%d %llu\n", (int)getpid(), run_dir_proc_start_time(getpid()));
  int fd = open(stamp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0 && write(fd, text, (size_t)len) == len;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok) {
    llb_status st = LLB_ERRF(LLB_STATUS_IO, "owner stamp %s: %s", stamp, strerror(errno));
    run_dir_remove(path);
    path[0] = '\0';
    return st;
  }
  return LLB_STATUS_OK;
}

llb_status run_dir_prepare_private(const char *path) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST)
    return LLB_ERRF(LLB_STATUS_IO, "cannot create %s: %s", path, strerror(errno));
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return LLB_ERRF(LLB_STATUS_IO, "%s: not a directory of its own (%s)", path,
                    errno == ELOOP ? "a symbolic link" : strerror(errno));
  struct stat sb;
  llb_status st = LLB_STATUS_OK;
  if (fstat(fd, &sb) != 0) st = LLB_ERRF(LLB_STATUS_IO, "stat %s: %s", path, strerror(errno));
  else if (sb.st_uid != geteuid()) st = LLB_ERRF(LLB_STATUS_IO, "%s belongs to another user (uid %d)", path, (int)sb.st_uid);
  else if ((sb.st_mode & 077) != 0) {
    if (fchmod(fd, sb.st_mode & 0700) != 0) st = LLB_ERRF(LLB_STATUS_IO, "chmod %s: %s", path, strerror(errno));
    else LLB_LOG_WARN("state_dir_mode_fixed", "dir=%s mode=%o new_mode=%o", path, sb.st_mode & 0777, sb.st_mode & 0700);
  }
  close(fd);
  return st;
}

/* Removes `name` in the directory `parent` (a descriptor): a file or link is unlinked, a
 * directory emptied first. Never follows a link. */
static void remove_at(int parent, const char *name, int depth) {
  if (unlinkat(parent, name, 0) == 0 || (errno != EISDIR && errno != EPERM) || depth > MAX_DEPTH) return;
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) remove_at(dirfd(d), e->d_name, depth + 1);
  closedir(d);
  unlinkat(parent, name, AT_REMOVEDIR);
}

void run_dir_remove(const char *path) {
  if (!path || !*path) return;
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  const char *name = slash ? path + (slash - parent) + 1 : path;
  if (slash == parent) parent[1] = '\0';
  else if (slash) *slash = '\0';
  int fd = open(slash ? parent : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  remove_at(fd, name, 0);
  close(fd);
}

/* The owner stamp of directory `name` under the descriptor root; false without one. */
static bool read_stamp(int root, const char *name, pid_t *pid, unsigned long long *start) {
  char rel[NAME_MAX + 16];
  snprintf(rel, sizeof rel, "%s/" RUN_DIR_OWNER_FILE, name);
  int fd = openat(root, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  int p = 0;
  if (sscanf(buf, "%d %llu", &p, start) != 2 || p <= 0) return false;
  *pid = (pid_t)p;
  return true;
}

int run_dir_sweep_stale(const char *kind) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "llmbus-%s-", kind);
  int root = open(tmp_root(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return 0;
  DIR *d = fdopendir(root);
  if (!d) {
    close(root);
    return 0;
  }
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    struct stat sb;
    pid_t pid;
    unsigned long long start;
    if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode) ||
        sb.st_uid != geteuid() || !read_stamp(dirfd(d), e->d_name, &pid, &start) || run_dir_owner_alive(pid, start))
      continue;
    remove_at(dirfd(d), e->d_name, 0);
    removed++;
    LLB_LOG_INFO("stale_run_dir_removed", "dir=%s/%s owner_pid=%d", tmp_root(), e->d_name, (int)pid);
  }
  closedir(d);
  return removed;
}

int run_dir_sweep_all_stale(void) {
  return run_dir_sweep_stale("serve") + run_dir_sweep_stale("nats-auth") + run_dir_sweep_stale("hash-key");
}
