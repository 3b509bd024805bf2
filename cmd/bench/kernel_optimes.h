/* llmbus-kernel-bench --op-times: where a decode step's time goes, op by op. The forward calls
 * its eval callback (model/forward/forward.h llama_forward_options.eval_cb) on the calling
 * thread after each op with the name llama.cpp's graph gives that op's output ("attn_norm",
 * "Qcur", "kqv_out", "ffn_out", ...); the wall time from one callback to the next is the op (or
 * ops) that computed the second one's tensor. Each op's time is summed per step and reported as
 * the median over the timed steps, as is the whole step: on a loaded machine the OS takes the
 * thread off its core in some steps, and the median leaves them out where a sum would not. Only
 * the vDSO monotonic clock is read (~25 ns a callback, ~450 callbacks a SmolLM2 step); a thread
 * CPU clock is a system call, ~0.8 us a callback, and a preemption point. */
#ifndef LLB_CMD_KERNEL_OPTIMES_H
#define LLB_CMD_KERNEL_OPTIMES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

enum { KERNEL_OPTIMES_MAX_OPS = 48 };

struct kernel_optimes {
  bool on;                                  /* inside a timed step */
  int n;                                    /* distinct names seen */
  const char *name[KERNEL_OPTIMES_MAX_OPS]; /* the forward's literals (borrowed) */
  int64_t calls[KERNEL_OPTIMES_MAX_OPS];    /* over all recorded steps */
  int64_t cur[KERNEL_OPTIMES_MAX_OPS];      /* this step's ns per op */
  int64_t last;                             /* the previous callback (or the step's start), ns */
  int64_t begin;                            /* the step's start, ns */
  int64_t *ns;                              /* [max_steps][KERNEL_OPTIMES_MAX_OPS] recorded steps' ns per op */
  int64_t *step_ns;                         /* [max_steps] whole steps */
  int steps, max_steps;
};

/* Makes room for max_steps (>= 1) timed steps. OUT_OF_MEMORY. Free with kernel_optimes_free. */
llb_status kernel_optimes_init(struct kernel_optimes *t, int max_steps);

void kernel_optimes_free(struct kernel_optimes *t);

/* Forgets the recorded steps and names (a new batch size). */
void kernel_optimes_reset(struct kernel_optimes *t);

/* The eval_cb: adds the wall time since the last callback (or the step's start) to `name`'s
 * entry inside a step; names past KERNEL_OPTIMES_MAX_OPS go to the last entry. user is a
 * struct kernel_optimes. */
void kernel_optimes_cb(void *user, const char *name, int32_t il, const float *data, int64_t n);

/* Around one timed step (llama_session_decode_batch); steps past max_steps are not recorded. */
void kernel_optimes_step_begin(struct kernel_optimes *t);
void kernel_optimes_step_end(struct kernel_optimes *t);

/* Prints one line per op, in the order a step first ran them: callbacks per step, the median
 * microseconds a step and its share of the median step; then the medians of the matmul ops
 * summed, of the others summed, and the median step. `rows` a step, for the header. */
void kernel_optimes_print(const struct kernel_optimes *t, int rows);

#endif
