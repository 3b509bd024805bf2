/* Progress lines on a terminal (progress.h). */
#include "base/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/log.h"

#define DRAW_EVERY_NS 200000000LL

static void put_duration(char *buf, int cap, double s) {
  const long t = s < 0 ? 0 : (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, (size_t)cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, (size_t)cap, "%ld:%02ld", t / 60, t % 60);
}

void llb_progress_format(const struct llb_progress *p, double done, int64_t elapsed_ns, char *buf, int cap) {
  const double frac = p->total > 0 ? (done > p->total ? 1.0 : done / p->total) : 0.0;
  const double elapsed_s = (double)elapsed_ns / 1e9;
  char el[32], eta[32] = "?";
  put_duration(el, sizeof el, elapsed_s);
  if (done > 0) put_duration(eta, sizeof eta, elapsed_s * (p->total - done) / done);
  snprintf(buf, (size_t)cap, "%s %3.0f%%  %.0f/%.0f %s  elapsed %s  ETA %s", p->label, 100.0 * frac, done, p->total,
           p->unit, el, eta);
}

void llb_progress_begin(struct llb_progress *p, const char *label, double total, const char *unit) {
  const char *after = getenv("LLMBUS_PROGRESS_AFTER_MS");
  *p = (struct llb_progress){.label = label, .unit = unit, .total = total, .start_ns = llb_now_ns(),
                             .quiet_ns = after ? (int64_t)atol(after) * 1000000LL : LLB_PROGRESS_QUIET_NS,
                             .tty = isatty(STDERR_FILENO) == 1};
}

void llb_progress_update(struct llb_progress *p, double done) {
  if (!p->tty) return;
  const int64_t t = llb_now_ns();
  if (t - p->start_ns < p->quiet_ns || (p->drawn && t - p->last_draw_ns < DRAW_EVERY_NS)) return;
  char line[256];
  llb_progress_format(p, done, t - p->start_ns, line, sizeof line);
  fprintf(stderr, "\r%s\033[K", line); /* \033[K: erase what a longer line left */
  fflush(stderr);
  p->drawn = true;
  p->last_draw_ns = t;
}

void llb_progress_end(struct llb_progress *p) {
  if (p->drawn) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
  }
  p->drawn = false;
}
