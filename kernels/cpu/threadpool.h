/* Persistent thread pool for the CPU kernels.
 *
 * Created once with n_threads (the caller counts as thread 0, so n_threads - 1 workers are
 * started). Two ways to hand out work, both without allocation or thread creation:
 *
 *  - cpu_threadpool_parallel(): an op split into n_chunks independent chunks that threads
 *    CLAIM (atomic counter, as ggml's current_chunk), several at a time when there are many
 *    (about 8 claims per thread and op: each claim is a CAS on a cache line every thread
 *    writes). The caller works too and returns when
 *    every chunk is done. Nobody waits for a thread that has not claimed anything, so a
 *    worker that the OS has descheduled (a loaded machine) costs at most the chunk it holds,
 *    never a whole op: the caller simply does the remaining chunks itself. This is the path
 *    of every op of a forward step (hundreds per token). A caller left waiting for chunks a
 *    worker holds spins while that worker runs and sleeps (a futex the worker wakes) once the
 *    worker's CPU clock shows it off its core, leaving its own core to whatever took the
 *    worker's (LLMBUS_POOL_WAIT_SPIN_US: microseconds spun before the first look, default 10).
 *  - cpu_threadpool_run(): fn runs once on EVERY thread (ith = 0..nth-1), with
 *    cpu_threadpool_barrier() available inside; kept for work that needs all threads.
 *
 * Workers that find no work spin for up to 2 ms (ops of one step follow each other within
 * microseconds) and then sleep on a futex, so an idle engine costs no CPU. They sleep sooner,
 * after the same LLMBUS_POOL_WAIT_SPIN_US and a look every 5 us at the caller's CPU clock, when
 * the thread that publishes the ops ran less than half of that time: it is off its core (the OS
 * gave it to another process) or blocked (waiting for its next step), so no op can come, and a
 * spinning worker would only keep from its core the caller or whatever preempted it. A caller
 * that knows no op follows soon (a step is over and the next one is not here yet) parks the pool: the
 * workers sleep at once and leave the cores to the rest of the machine (on a small machine,
 * the actors and the bus that bring the next step).
 */
#ifndef LLB_KERNELS_CPU_THREADPOOL_H
#define LLB_KERNELS_CPU_THREADPOOL_H

#include <stdint.h>

#include "base/status.h"

struct cpu_threadpool;

/* A task: runs once on every thread, ith in [0, nth). */
typedef void (*cpu_task_fn)(void *arg, int ith, int nth);

/* A chunk of a parallel op: chunk in [0, n_chunks); ith is the thread running it (for
 * per-thread scratch), in [0, n_threads). */
typedef void (*cpu_chunk_fn)(void *arg, int64_t chunk, int ith);

/* Starts n_threads - 1 workers (n_threads in [1, 256]). INVALID_ARGUMENT on a bad count,
 * INTERNAL if a thread cannot be started. Caller frees with cpu_threadpool_destroy. */
llb_status cpu_threadpool_create(int n_threads, struct cpu_threadpool **out);

/* Stops and joins the workers. NULL ok. Must not be called while a run is in progress. */
void cpu_threadpool_destroy(struct cpu_threadpool *p);

/* Number of threads including the caller. */
int cpu_threadpool_size(const struct cpu_threadpool *p);

/* No op follows soon: idle workers sleep at once instead of spinning (within ~256 pauses,
 * a few microseconds); the next op wakes them (one futex wake). NULL ok; any time from the
 * caller's thread, between ops. */
void cpu_threadpool_park(struct cpu_threadpool *p);

/* How many threads (the caller included) take the chunks of the next ops, in [1, size]
 * (clamped); the others sleep until counted again. Set between ops by the caller: a step whose
 * speed is the memory's (a few rows reading every weight) runs no faster on more threads, and
 * the threads left out leave their cores to the rest of the machine. cpu_threadpool_run uses
 * every thread whatever is set. Starts at the pool's size. NULL ok. */
void cpu_threadpool_set_active(struct cpu_threadpool *p, int n);

/* The count cpu_threadpool_set_active set. */
int cpu_threadpool_active(const struct cpu_threadpool *p);

/* Runs fn(arg, chunk, ith) for every chunk in [0, n_chunks) on whichever threads claim them
 * (the caller included) and returns when all are done. n_chunks < 2^31. With one thread or
 * one chunk everything runs on the caller. Not reentrant: one call at a time, one caller. */
void cpu_threadpool_parallel(struct cpu_threadpool *p, cpu_chunk_fn fn, void *arg, int64_t n_chunks);

/* Runs fn(arg, ith, nth) on all threads (the caller is ith 0) and waits for all of them.
 * Not reentrant: one run at a time, from one caller thread. */
void cpu_threadpool_run(struct cpu_threadpool *p, cpu_task_fn fn, void *arg);

/* Barrier among the threads of the current cpu_threadpool_run; call from inside its task,
 * from every thread the same number of times. Memory written before it is visible after it. */
void cpu_threadpool_barrier(struct cpu_threadpool *p);

#endif
