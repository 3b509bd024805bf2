/* llmbus-bench: resident memory of a server's process tree, from /proc. See bench.h. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/bench/bench.h"

/* Socket inode of a TCP listener on `port` in /proc/net/<file>, 0 if none. */
static unsigned long listen_inode(const char *file, int port) {
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char line[512];
  unsigned long found = 0;
  if (!fgets(line, sizeof line, f)) { /* header */
    fclose(f);
    return 0;
  }
  while (!found && fgets(line, sizeof line, f)) {
    char local[128];
    unsigned st = 0;
    unsigned long inode = 0;
    /* sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, " %*s %127s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) != 3) continue;
    const char *colon = strrchr(local, ':');
    if (!colon || st != 0x0A) continue; /* TCP_LISTEN */
    if ((int)strtol(colon + 1, NULL, 16) == port) found = inode;
  }
  fclose(f);
  return found;
}

static bool is_pid_name(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return false;
  return true;
}

pid_t bench_find_listener(int port) {
  unsigned long inode = listen_inode("/proc/net/tcp", port);
  if (!inode) inode = listen_inode("/proc/net/tcp6", port);
  if (!inode) return -1;
  char want[64];
  snprintf(want, sizeof want, "socket:[%lu]", inode);
  DIR *proc = opendir("/proc");
  if (!proc) return -1;
  pid_t found = -1;
  struct dirent *e;
  while (found < 0 && (e = readdir(proc))) {
    if (!is_pid_name(e->d_name)) continue;
    char dir[300];
    snprintf(dir, sizeof dir, "/proc/%.16s/fd", e->d_name);
    DIR *fds = opendir(dir);
    if (!fds) continue;
    struct dirent *fe;
    while ((fe = readdir(fds))) {
      char path[600], target[64];
      snprintf(path, sizeof path, "%s/%.256s", dir, fe->d_name);
      ssize_t n = readlink(path, target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (strcmp(target, want) == 0) {
        found = (pid_t)atoi(e->d_name);
        break;
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return found;
}

/* comm and parent pid of `pid` from /proc/<pid>/stat; false if gone. */
static bool proc_stat(pid_t pid, char *comm, size_t cap, pid_t *ppid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (!open || !close || close < open) return false;
  size_t cl = (size_t)(close - open - 1);
  if (comm) snprintf(comm, cap, "%.*s", (int)cl, open + 1);
  char state;
  int pp = 0;
  if (sscanf(close + 1, " %c %d", &state, &pp) != 2) return false;
  *ppid = (pid_t)pp;
  return true;
}

pid_t bench_stack_root(pid_t pid, const char *comm_prefix) {
  pid_t cur = pid;
  for (int depth = 0; depth < 64; depth++) {
    char comm[64];
    pid_t ppid;
    if (!proc_stat(cur, comm, sizeof comm, &ppid) || ppid <= 1) break;
    char pcomm[64];
    pid_t pp;
    if (!proc_stat(ppid, pcomm, sizeof pcomm, &pp)) break;
    if (strncmp(pcomm, comm_prefix, strlen(comm_prefix)) != 0) break;
    cur = ppid;
  }
  return cur;
}

/* The number after "Key:" in a /proc status-like file; -1 if absent. */
static int64_t status_field(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  size_t kl = strlen(key);
  int64_t v = -1;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
      v = strtoll(line + kl + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

/* "Key:   1234 kB" of a /proc status-like file, in bytes; -1 if absent. */
static int64_t kb_field(const char *path, const char *key) {
  int64_t v = status_field(path, key);
  return v < 0 ? v : v * 1024;
}

/* The pids of `root` and all its descendants: *out malloc'd, count in *n. */
static llb_status tree_pids(pid_t root, pid_t **out, size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  size_t cap = 1024, n = 0, n_in = 0;
  pid_t *pids = malloc(cap * sizeof *pids), *ppids = malloc(cap * sizeof *ppids);
  bool *in = NULL;
  DIR *proc = opendir("/proc");
  llb_status st = LLB_STATUS_OK;
  if (!pids || !ppids || !proc) {
    st = LLB_ERRF(proc ? LLB_STATUS_OUT_OF_MEMORY : LLB_STATUS_IO, "listing /proc");
    goto done;
  }
  struct dirent *e;
  while ((e = readdir(proc))) {
    if (!is_pid_name(e->d_name)) continue;
    pid_t pid = (pid_t)atoi(e->d_name), pp;
    if (!proc_stat(pid, NULL, 0, &pp)) continue;
    if (n == cap) {
      cap *= 2;
      pid_t *a = realloc(pids, cap * sizeof *a);
      if (a) pids = a;
      pid_t *b = realloc(ppids, cap * sizeof *b);
      if (b) ppids = b;
      if (!a || !b) {
        st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "process list");
        goto done;
      }
    }
    pids[n] = pid;
    ppids[n] = pp;
    n++;
  }
  in = calloc(n ? n : 1, sizeof *in);
  if (!in) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "process list");
    goto done;
  }
  /* Fixed point: a process is in when it is root or its parent is in. */
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; i++) {
      if (in[i]) continue;
      bool take = pids[i] == root;
      for (size_t j = 0; j < n && !take; j++) take = in[j] && pids[j] == ppids[i];
      if (take) in[i] = changed = true;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (in[i]) pids[n_in++] = pids[i];
  if (n_in == 0) st = LLB_ERRF(LLB_STATUS_NOT_FOUND, "no process %d", (int)root);
done:
  if (proc) closedir(proc);
  free(ppids);
  free(in);
  if (st == LLB_STATUS_OK) {
    *out = pids;
    *n_out = n_in;
  } else {
    free(pids);
  }
  return st;
}

llb_status bench_tree_memory(pid_t root, struct bench_mem *out) {
  memset(out, 0, sizeof *out);
  pid_t rp;
  if (!proc_stat(root, out->root_comm, sizeof out->root_comm, &rp))
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no process %d", (int)root);
  pid_t *pids;
  size_t n;
  llb_status st = tree_pids(root, &pids, &n);
  if (st != LLB_STATUS_OK) return st;
  int64_t max_shared = 0;
  for (size_t i = 0; i < n; i++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pids[i]);
    int64_t rss = kb_field(path, "VmRSS");
    if (rss < 0) continue; /* gone, or a kernel thread */
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pids[i]);
    int64_t pss = kb_field(path, "Pss"), pc = kb_field(path, "Private_Clean"), pd = kb_field(path, "Private_Dirty");
    int64_t priv = pc >= 0 && pd >= 0 ? pc + pd : rss;
    out->rss_bytes += rss;
    out->pss_bytes += pss > 0 ? pss : rss;
    out->unique_bytes += priv;
    if (rss - priv > max_shared) max_shared = rss - priv;
    out->num_procs++;
  }
  out->unique_bytes += max_shared;
  free(pids);
  return LLB_STATUS_OK;
}

/* Sums over the live threads of `pid`: CPU nanoseconds (/proc/<pid>/task/<tid>/schedstat, first
 * field) and voluntary context switches (status: the times a thread went to sleep and had to be
 * woken). False when the process is gone. */
static bool proc_threads_cpu(pid_t pid, int64_t *cpu_ns, int64_t *sleeps) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return false;
  *cpu_ns = *sleeps = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_pid_name(e->d_name)) continue;
    char file[300];
    snprintf(file, sizeof file, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
    FILE *f = fopen(file, "r");
    long long ns = 0;
    if (f) {
      if (fscanf(f, "%lld", &ns) == 1) *cpu_ns += ns;
      fclose(f);
    }
    snprintf(file, sizeof file, "/proc/%d/task/%s/status", (int)pid, e->d_name);
    int64_t v = status_field(file, "voluntary_ctxt_switches");
    if (v > 0) *sleeps += v;
  }
  closedir(d);
  return true;
}

llb_status bench_tree_cpu(pid_t root, struct bench_proc_cpu **out, size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  pid_t *pids;
  size_t n;
  llb_status st = tree_pids(root, &pids, &n);
  if (st != LLB_STATUS_OK) return st;
  struct bench_proc_cpu *v = calloc(n ? n : 1, sizeof *v);
  if (!v) {
    free(pids);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "bench_tree_cpu: %zu processes", n);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    pid_t pp;
    int64_t ns, sleeps;
    if (!proc_stat(pids[i], v[k].comm, sizeof v[k].comm, &pp) || !proc_threads_cpu(pids[i], &ns, &sleeps)) continue;
    v[k].pid = pids[i];
    v[k].cpu_s = (double)ns / 1e9;
    v[k].sleeps = sleeps;
    k++;
  }
  free(pids);
  *out = v;
  *n_out = k;
  return LLB_STATUS_OK;
}

double bench_proc_cpu_total(const struct bench_proc_cpu *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i].cpu_s;
  return s;
}

double bench_tree_cpu_seconds(pid_t root) {
  struct bench_proc_cpu *v;
  size_t n;
  if (bench_tree_cpu(root, &v, &n) != LLB_STATUS_OK) return -1;
  const double s = bench_proc_cpu_total(v, n);
  free(v);
  return s;
}

double bench_loadavg(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  double v = -1;
  if (!f) return v;
  if (fscanf(f, "%lf", &v) != 1) v = -1;
  fclose(f);
  return v;
}
