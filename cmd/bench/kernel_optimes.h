/* llmbus-kernel-bench --op-times: where a decode step's time goes, op by op. The forward calls
 * its eval callback (model/forward/forward.h llama_forward_options.eval_cb) on the calling
 * thread after each op with the name llama.cpp's graph gives that op's output ("attn_norm",
 * "Qcur", "kqv_out", "ffn_out", ...); the time from one callback to the next is the op (or ops)
 * that computed the second one's tensor. Each is summed over the timed steps twice: wall time
 * and the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID: its own chunks and its spin-waits
 * for the other threads' chunks; wall minus CPU is time the OS held the thread off its core). */
#ifndef LLB_CMD_KERNEL_OPTIMES_H
#define LLB_CMD_KERNEL_OPTIMES_H

#include <stdbool.h>
#include <stdint.h>

enum { KERNEL_OPTIMES_MAX_OPS = 64 };

struct kernel_optimes {
  bool on;                                      /* sum the callbacks (the timed steps only) */
  int n;                                        /* distinct names seen */
  const char *name[KERNEL_OPTIMES_MAX_OPS];     /* the forward's literals (borrowed) */
  int64_t calls[KERNEL_OPTIMES_MAX_OPS];
  int64_t wall_ns[KERNEL_OPTIMES_MAX_OPS], cpu_ns[KERNEL_OPTIMES_MAX_OPS];
  int64_t last_wall, last_cpu;                  /* the previous callback (or the step's start) */
  int64_t steps, step_wall_ns, step_cpu_ns;     /* whole steps, from kernel_optimes_step_begin to _end */
  int64_t begin_wall, begin_cpu;
};

/* Zeroes the sums (a new batch size), leaving `on` off. */
void kernel_optimes_reset(struct kernel_optimes *t);

/* The eval_cb: adds the time since the last callback (or step start) to `name`'s entry while
 * t->on; names past KERNEL_OPTIMES_MAX_OPS go to the last entry's. user is a struct
 * kernel_optimes. */
void kernel_optimes_cb(void *user, const char *name, int32_t il, const float *data, int64_t n);

/* Around one timed step (llama_session_decode_batch). */
void kernel_optimes_step_begin(struct kernel_optimes *t);
void kernel_optimes_step_end(struct kernel_optimes *t);

/* Prints one line per op, in the order the step first ran them: calls per step, wall and CPU
 * microseconds per step and the share of the step's wall time, then the matmuls' total, the
 * rest and what fell outside the callbacks. `rows` per step turns steps into tokens. */
void kernel_optimes_print(const struct kernel_optimes *t, int rows);

#endif
