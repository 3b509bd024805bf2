/* Persistent thread pool: spin-then-futex workers woken through a generation counter. */
#include "kernels/cpu/threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Iterations a worker spins on the generation before sleeping (~tens of microseconds):
 * longer than the gap between two ops of one step, far shorter than the gap between steps. */
#define CPU_POOL_SPIN_ITERS 20000
/* Iterations the caller or a barrier spins before yielding the core. */
#define CPU_POOL_YIELD_ITERS 2000

struct cpu_worker {
  struct cpu_threadpool *pool;
  int ith;
  pthread_t thread;
};

struct cpu_threadpool {
  int n_threads;
  struct cpu_worker *workers; /* [n_threads - 1], worker i has ith = i + 1 */
  int n_started;
  cpu_task_fn fn;
  void *arg;
  _Atomic uint32_t generation; /* futex word: bumped once per run */
  _Atomic int n_sleeping;
  _Atomic int pending; /* workers that have not finished the current run */
  _Atomic int stop;
  _Atomic int barrier_count;
  _Atomic uint32_t barrier_gen;
};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void futex_wait_u32(_Atomic uint32_t *addr, uint32_t expected) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *cpu_worker_main(void *opaque) {
  struct cpu_worker *w = opaque;
  struct cpu_threadpool *p = w->pool;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
      if (spins < CPU_POOL_SPIN_ITERS) {
        cpu_relax();
        spins++;
      } else {
        atomic_fetch_add(&p->n_sleeping, 1);
        futex_wait_u32(&p->generation, seen);
        atomic_fetch_sub(&p->n_sleeping, 1);
      }
    }
    seen = g;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    p->fn(p->arg, w->ith, p->n_threads);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
  }
  return NULL;
}

llb_status cpu_threadpool_create(int n_threads, struct cpu_threadpool **out) {
  if (!out || n_threads < 1 || n_threads > 256)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "thread count %d not in [1, 256]", n_threads);
  *out = NULL;
  struct cpu_threadpool *p = calloc(1, sizeof(*p));
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "thread pool");
  p->n_threads = n_threads;
  llb_status st = LLB_STATUS_OK;
  if (n_threads > 1) {
    p->workers = calloc((size_t)n_threads - 1, sizeof(*p->workers));
    if (!p->workers) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "thread pool workers");
      goto fail;
    }
  }
  for (int i = 0; i < n_threads - 1; i++) {
    p->workers[i].pool = p;
    p->workers[i].ith = i + 1;
    if (pthread_create(&p->workers[i].thread, NULL, cpu_worker_main, &p->workers[i]) != 0) {
      st = LLB_ERRF(LLB_STATUS_INTERNAL, "cannot start worker thread %d", i + 1);
      goto fail;
    }
    p->n_started++;
  }
  *out = p;
  return LLB_STATUS_OK;
fail:
  cpu_threadpool_destroy(p);
  return st;
}

void cpu_threadpool_destroy(struct cpu_threadpool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  atomic_fetch_add(&p->generation, 1);
  futex_wake_all(&p->generation);
  for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
  free(p->workers);
  free(p);
}

int cpu_threadpool_size(const struct cpu_threadpool *p) { return p->n_threads; }

void cpu_threadpool_run(struct cpu_threadpool *p, cpu_task_fn fn, void *arg) {
  if (p->n_threads == 1) {
    fn(arg, 0, 1);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
  /* seq_cst bump, then read n_sleeping: a worker that went to sleep before the bump is
   * counted; one that counts itself after it sees the new generation in futex_wait. */
  atomic_fetch_add(&p->generation, 1);
  if (atomic_load(&p->n_sleeping) > 0) futex_wake_all(&p->generation);
  fn(arg, 0, p->n_threads);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
    if (++spins < CPU_POOL_YIELD_ITERS) cpu_relax();
    else sched_yield();
  }
}

void cpu_threadpool_barrier(struct cpu_threadpool *p) {
  if (p->n_threads == 1) return;
  uint32_t g = atomic_load(&p->barrier_gen);
  if (atomic_fetch_add(&p->barrier_count, 1) == p->n_threads - 1) {
    atomic_store(&p->barrier_count, 0);
    atomic_fetch_add(&p->barrier_gen, 1);
    return;
  }
  int spins = 0;
  while (atomic_load(&p->barrier_gen) == g) {
    if (++spins < CPU_POOL_YIELD_ITERS) cpu_relax();
    else sched_yield();
  }
}
