/* A progress line for long commands, on a terminal only.
 *
 * `label  37%  12/32 chunks  elapsed 0:41  ETA 1:10`, redrawn in place on stderr at most 5
 * times a second, and only when stderr is a terminal: logs, pipes and files never see it (as
 * llama.cpp's and pip's progress bars). Nothing shows for the first LLB_PROGRESS_QUIET_NS
 * (LLMBUS_PROGRESS_AFTER_MS in the environment overrides it), so a short operation prints
 * nothing at all. llb_progress_end erases the line.
 * Not thread-safe: one thread updates one progress line.
 */
#ifndef LLB_BASE_PROGRESS_H
#define LLB_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#define LLB_PROGRESS_QUIET_NS 500000000LL /* 0.5 s */

struct llb_progress {
  const char *label; /* borrowed: must outlive the progress line */
  const char *unit;  /* "chunks", "MiB", ... borrowed */
  double total;      /* > 0 */
  int64_t start_ns, last_draw_ns;
  int64_t quiet_ns; /* nothing is drawn before this much time has passed */
  bool tty, drawn;
};

/* Starts a progress line of `total` units (stderr's terminal-ness is read here). */
void llb_progress_begin(struct llb_progress *p, const char *label, double total, const char *unit);

/* Reports `done` units of total; redraws when due. */
void llb_progress_update(struct llb_progress *p, double done);

/* Erases the line if one was drawn. */
void llb_progress_end(struct llb_progress *p);

/* The line for `done` of p's total after elapsed_ns, without drawing it (tests, and the
 * drawing itself): at most cap bytes with the terminating NUL. */
void llb_progress_format(const struct llb_progress *p, double done, int64_t elapsed_ns, char *buf, int cap);

#endif
