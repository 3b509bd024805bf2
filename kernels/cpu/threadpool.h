/* Persistent thread pool for the CPU kernels.
 *
 * Created once with n_threads (the caller counts as thread 0, so n_threads - 1 workers are
 * started); each cpu_threadpool_run() hands one task to all threads and returns when every
 * thread has finished it. Nothing is allocated and no thread is created per run. Idle
 * workers spin briefly (a decode step dispatches hundreds of small tasks) and then sleep
 * on a futex, so an idle engine costs no CPU. Shape follows ggml's threadpool (spin, then
 * sleep on a generation counter) without its graph machinery.
 */
#ifndef LLB_KERNELS_CPU_THREADPOOL_H
#define LLB_KERNELS_CPU_THREADPOOL_H

#include <stdint.h>

#include "bus/status.h"

struct cpu_threadpool;

/* A task: runs once on every thread, ith in [0, nth). */
typedef void (*cpu_task_fn)(void *arg, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads in [1, 256]). INVALID_ARGUMENT on a bad count,
 * INTERNAL if a thread cannot be started. Caller frees with cpu_threadpool_destroy. */
llb_status cpu_threadpool_create(int n_threads, struct cpu_threadpool **out);

/* Stops and joins the workers. NULL ok. Must not be called while a run is in progress. */
void cpu_threadpool_destroy(struct cpu_threadpool *p);

/* Number of threads including the caller. */
int cpu_threadpool_size(const struct cpu_threadpool *p);

/* Runs fn(arg, ith, nth) on all threads (the caller is ith 0) and waits for all of them.
 * Not reentrant: one run at a time, from one caller thread. */
void cpu_threadpool_run(struct cpu_threadpool *p, cpu_task_fn fn, void *arg);

/* Barrier among the threads of the current run; call from inside a task, from every
 * thread the same number of times. Memory written before it is visible after it. */
void cpu_threadpool_barrier(struct cpu_threadpool *p);

#endif
