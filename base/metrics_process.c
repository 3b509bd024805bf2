/* Process metrics from /proc/self, as Prometheus client_golang's process collector
 * (prometheus/procfs: stat fields 22-24; /proc/stat btime; /proc/self/fd). CPU time comes
 * from CLOCK_PROCESS_CPUTIME_ID (nanoseconds) rather than stat's utime + stime, whose
 * clock ticks (10 ms) read 0 for an actor that has been mostly idle. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/metrics.h"

struct process_series {
  struct llb_series *cpu, *rss, *vms, *start, *fds, *max_fds;
};

static double boot_time_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  char line[256];
  double btime = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "btime ", 6) == 0) btime = strtod(line + 6, NULL);
  fclose(f);
  return btime;
}

static void read_stat(struct process_series *p) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* the command name (field 2) may hold spaces and ')': fields resume after the last ')' */
  char *p2 = strrchr(buf, ')');
  if (!p2) return;
  unsigned long long v[24] = {0}; /* v[k] = field k + 3 */
  char *s = p2 + 2;
  for (int k = 0; k < 24 && *s; k++) {
    if (k == 0) { /* field 3: state, a letter */
      s = strchr(s, ' ');
      if (!s) return;
      s++;
      continue;
    }
    char *end;
    v[k] = strtoull(s, &end, 10);
    if (end == s) break;
    s = end + (*end == ' ');
  }
  const double ticks = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
  struct timespec cpu;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0) llb_series_set(p->cpu, (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9);
  llb_series_set(p->start, boot_time_s() + (double)v[19] / ticks);
  llb_series_set(p->vms, (double)v[20]);
  llb_series_set(p->rss, (double)v[21] * page);
}

static void collect(struct llb_metrics *r, void *user) {
  (void)r;
  struct process_series *p = user;
  read_stat(p);
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
      if (e->d_name[0] != '.') n++;
    closedir(d);
    llb_series_set(p->fds, (double)(n - 1)); /* less the one opendir holds */
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) llb_series_set(p->max_fds, (double)rl.rlim_cur);
}

llb_status llb_metrics_register_process(struct llb_metrics *r) {
  static struct process_series storage; /* one process, one set: the series live in the registry */
  struct process_series *p = &storage;
  p->cpu = llb_metric_series(
      llb_metrics_counter(r, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", 0, NULL),
      NULL);
  p->rss = llb_metric_series(llb_metrics_gauge(r, "process_resident_memory_bytes", "Resident memory size in bytes.", 0, NULL), NULL);
  p->vms = llb_metric_series(llb_metrics_gauge(r, "process_virtual_memory_bytes", "Virtual memory size in bytes.", 0, NULL), NULL);
  p->start = llb_metric_series(
      llb_metrics_gauge(r, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", 0, NULL),
      NULL);
  p->fds = llb_metric_series(llb_metrics_gauge(r, "process_open_fds", "Number of open file descriptors.", 0, NULL), NULL);
  p->max_fds = llb_metric_series(
      llb_metrics_gauge(r, "process_max_fds", "Maximum number of open file descriptors.", 0, NULL), NULL);
  if (!p->cpu || !p->rss || !p->vms || !p->start || !p->fds || !p->max_fds) return LLB_UPDATE_ERR_STACK(LLB_STATUS_INTERNAL);
  return llb_metrics_on_collect(r, collect, p);
}
