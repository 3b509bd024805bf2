/* Persistent thread pool: claimable chunks published through one 64-bit work word, workers
 * that spin briefly and then sleep on a futex.
 *
 * The work word holds (op generation << 32) | flags | next unclaimed chunk. An op's
 * description lives in slots[generation & 1]; a thread claims chunk i of op g by a CAS
 * that still finds generation g in the word. Because the caller publishes op g + 1 only
 * after every chunk of op g is done, and writes op g + 2 into the slot of op g, a claim that
 * succeeds always reads the description of its own op, and a stale worker (one that slept
 * through several ops) simply fails its CAS and moves on to the newest op. */
#include "kernels/cpu/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker spins before it sleeps: far longer than the gap between two ops
 * of a step (microseconds), short enough that an idle engine stops burning a core at once.
 * It sleeps sooner when the caller is off its core or blocked (idle_wait: the caller's CPU
 * clock looked at every CPU_POOL_LOOK_NS after the first wait_spin_ns). */
#define CPU_POOL_SPIN_NS 2000000
/* Pauses between clock reads while spinning. */
#define CPU_POOL_SPIN_CHECK 256
/* Pauses the caller spins waiting for a worker's chunk before it starts yielding the core
 * (the worker may be descheduled on a loaded machine); cpu_threadpool_run and the barrier. */
#define CPU_POOL_YIELD_ITERS 4000
/* The caller of cpu_threadpool_parallel, its own chunks done, spins this long for the chunks
 * workers still hold; then it looks every CPU_POOL_LOOK_NS whether a worker holding chunks is
 * off its core (its CPU clock ran less than half the time: the OS gave the core to another
 * process) and if so sleeps until the op's last chunk is done. A sleeping caller leaves its
 * core idle, so the processes that took the worker's core (on a 2-core machine: the bus and the
 * actors serving the tokens) can run there instead of preempting a forward thread again, where
 * a spinning caller burnt the core for nothing. A worker that is running is waited for
 * spinning, as before. LLMBUS_POOL_WAIT_SPIN_US overrides the spin. The same spin and looks
 * serve the other side: an idle worker waiting for the next op sleeps once the caller that
 * publishes it is off its core or blocked (idle_wait). */
#define CPU_POOL_WAIT_SPIN_NS 10000
#define CPU_POOL_LOOK_NS 5000

/* Claims a thread makes per op at most, about (chunks are taken in groups beyond it). */
#define CPU_POOL_CLAIMS_PER_THREAD 8

#define WORK_ALL_BIT ((uint64_t)1 << 31)    /* op runs once on every thread (cpu_threadpool_run) */
#define WORK_INDEX_MASK (WORK_ALL_BIT - 1)   /* next unclaimed chunk */

struct cpu_worker {
  struct cpu_threadpool *pool;
  int ith;
  pthread_t thread;
  clockid_t clock;       /* its CPU-time clock (pthread_getcpuclockid) */
  bool has_clock;
  int64_t looked_cpu_ns; /* the caller's last look at that clock, -1 none (caller only) */
  _Alignas(64) _Atomic int holding; /* 1 while it runs a claimed group of chunks */
};

struct cpu_op_slot {
  _Atomic(cpu_chunk_fn) chunk_fn;
  _Atomic(cpu_task_fn) task_fn;
  _Atomic(void *) arg;
  _Atomic int64_t n_chunks;
  _Atomic int64_t grain;            /* chunks taken per claim */
  _Alignas(64) _Atomic int64_t done; /* chunks finished (own cache line: every chunk adds) */
};

struct cpu_threadpool {
  int n_threads;
  struct cpu_worker *workers; /* [n_threads - 1], worker i has ith = i + 1 */
  int n_started;
  uint32_t gen;                /* caller-side generation of the last published op */
  struct cpu_op_slot slots[2]; /* op g in slots[g & 1] */
  _Alignas(64) _Atomic uint64_t work; /* (gen << 32) | flags | next chunk; own cache line:
                                         every claim is a CAS on it */
  _Alignas(64) _Atomic uint32_t wake;       /* futex word, bumped once per published op */
  _Atomic int n_sleeping;
  _Alignas(64) _Atomic uint32_t done_wake; /* futex word the caller sleeps on for an op's end */
  _Atomic int caller_sleeping;  /* set while the caller may be asleep on done_wake */
  pid_t caller_tid;             /* kernel id of the thread that published the last op, 0 none
                                 * (caller side; a pthread_t is reused once its thread exits) */
  _Atomic int caller_clock;     /* its CPU-time clock (a clockid_t), for idle workers */
  _Atomic int caller_has_clock;
  int64_t wait_spin_ns;         /* CPU_POOL_WAIT_SPIN_NS or the environment's */
  _Atomic int pending;         /* workers that have not finished the current run() */
  _Atomic int stop;
  _Atomic int parked;          /* cpu_threadpool_park: idle workers sleep without spinning;
                                  cleared by the next published op */
  _Atomic uint32_t active;     /* threads that take chunks (cpu_threadpool_set_active); workers
                                  with ith >= active sleep on this word (a futex) */
  _Atomic int barrier_count;
  _Atomic uint32_t barrier_gen;
};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait_u32(_Atomic uint32_t *addr, uint32_t expected) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims and runs chunks of op g (whose word was w), `grain` at a time (fewer at the end),
 * until none is left or a newer op is published. */
static void claim_chunks(struct cpu_threadpool *p, uint64_t w, int ith) {
  const uint32_t g = (uint32_t)(w >> 32);
  struct cpu_op_slot *s = &p->slots[g & 1];
  for (;;) {
    if ((uint32_t)(w >> 32) != g) return;
    const int64_t idx = (int64_t)(w & WORK_INDEX_MASK);
    /* may read a newer op's counts if g is already over; the CAS below then fails */
    const int64_t n = atomic_load_explicit(&s->n_chunks, memory_order_relaxed);
    if (idx >= n) return;
    int64_t k = atomic_load_explicit(&s->grain, memory_order_relaxed);
    if (k < 1 || k > n - idx) k = n - idx < 1 ? 1 : n - idx;
    if (atomic_compare_exchange_weak_explicit(&p->work, &w, w + (uint64_t)k, memory_order_acq_rel,
                                              memory_order_acquire)) {
      if (ith > 0) atomic_store_explicit(&p->workers[ith - 1].holding, 1, memory_order_relaxed);
      const cpu_chunk_fn fn = atomic_load_explicit(&s->chunk_fn, memory_order_relaxed);
      void *arg = atomic_load_explicit(&s->arg, memory_order_relaxed);
      for (int64_t i = 0; i < k; i++) fn(arg, idx + i, ith);
      if (ith > 0) atomic_store_explicit(&p->workers[ith - 1].holding, 0, memory_order_relaxed);
      /* seq_cst: the add and the load of caller_sleeping order against the caller's store of
       * caller_sleeping and load of done (wait_op_done's sleep) */
      if (atomic_fetch_add(&s->done, k) + k == n && ith != 0 && atomic_load(&p->caller_sleeping)) {
        atomic_fetch_add(&p->done_wake, 1);
        futex_wake_all(&p->done_wake);
      }
      w = atomic_load_explicit(&p->work, memory_order_acquire);
    }
  }
}

/* Whether the caller (the thread that published the last op) ran less than half of the
 * `elapsed` ns since this worker's last look at its CPU clock (*last: that clock then, -1 none;
 * a first look gives no verdict). Records this look in *last. A clock that cannot be read (the
 * caller has no clock, or its thread is gone) counts as off its core. */
static bool caller_off_core(struct cpu_threadpool *p, int64_t *last, int64_t elapsed) {
  struct timespec ts;
  if (!atomic_load_explicit(&p->caller_has_clock, memory_order_acquire) ||
      clock_gettime((clockid_t)atomic_load_explicit(&p->caller_clock, memory_order_relaxed), &ts) != 0)
    return true;
  const int64_t cpu = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  const bool off = *last >= 0 && elapsed > 0 && cpu - *last < elapsed / 2;
  *last = cpu;
  return off;
}

/* Sleeps on `wake` until an op newer than done_gen is published (or a spurious wake-up);
 * *word is the work word after it. */
static void idle_sleep(struct cpu_threadpool *p, uint32_t done_gen, uint64_t *word) {
  atomic_fetch_add(&p->n_sleeping, 1);
  const uint32_t seen = atomic_load(&p->wake);
  *word = atomic_load(&p->work);
  if ((uint32_t)(*word >> 32) == done_gen) futex_wait_u32(&p->wake, seen);
  atomic_fetch_sub(&p->n_sleeping, 1);
  *word = atomic_load_explicit(&p->work, memory_order_acquire);
}

/* Worker w waits for an op newer than done_gen: spins (the next op of a step follows within
 * microseconds) and sleeps on a futex once the pool is parked, CPU_POOL_SPIN_NS have passed, or
 * (looked at every CPU_POOL_LOOK_NS after the first wait_spin_ns, times the workers: reading
 * another thread's CPU clock is a system call that takes the lock of that thread's run queue,
 * so the caller's clock is read about once per CPU_POOL_LOOK_NS whatever the pool's size; not
 * measured beyond 2 threads here) the caller is off its core or
 * blocked: no op can come until the caller runs again, and a spinning worker would hold a core
 * the caller (or whatever preempted it) could use. Returns true when w was left out of the
 * active threads meanwhile; *word is the last work word read. */
static bool idle_wait(struct cpu_threadpool *p, const struct cpu_worker *w, uint32_t done_gen, uint64_t *word) {
  const int64_t t0 = mono_ns();
  int64_t looked = 0, caller_cpu = -1;
  for (int spins = 1;; spins++) {
    cpu_relax();
    *word = atomic_load_explicit(&p->work, memory_order_acquire);
    if ((uint32_t)(*word >> 32) != done_gen) return false;
    if (spins % CPU_POOL_SPIN_CHECK != 0) continue;
    if ((uint32_t)w->ith >= atomic_load(&p->active)) return true;
    const int64_t now = mono_ns();
    bool sleep = atomic_load_explicit(&p->parked, memory_order_relaxed) || now - t0 > CPU_POOL_SPIN_NS;
    if (!sleep && now - t0 >= p->wait_spin_ns && now - looked >= CPU_POOL_LOOK_NS * (int64_t)(p->n_threads - 1)) {
      sleep = caller_off_core(p, &caller_cpu, looked ? now - looked : 0);
      looked = now;
    }
    if (!sleep) continue;
    idle_sleep(p, done_gen, word);
    if ((uint32_t)(*word >> 32) != done_gen) return false;
  }
}

static void *cpu_worker_main(void *opaque) {
  struct cpu_worker *w = opaque;
  struct cpu_threadpool *p = w->pool;
  uint32_t done_gen = 0; /* ops up to this generation need nothing from this worker */
  for (;;) {
    /* not counted (cpu_threadpool_set_active): sleep until counted again, whatever is published */
    for (uint32_t act; (uint32_t)w->ith >= (act = atomic_load(&p->active)) && !atomic_load(&p->stop);)
      futex_wait_u32(&p->active, act);
    uint64_t word = atomic_load_explicit(&p->work, memory_order_acquire);
    bool dropped = false; /* left out while waiting: back to the top */
    if ((uint32_t)(word >> 32) == done_gen) dropped = idle_wait(p, w, done_gen, &word);
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    /* an op published after set_active left this worker out: the count is seen with the op */
    if (dropped || ((word & WORK_ALL_BIT) == 0 && (uint32_t)w->ith >= atomic_load(&p->active))) continue;
    const uint32_t g = (uint32_t)(word >> 32);
    if (word & WORK_ALL_BIT) {
      /* the caller waits for every worker, so slot g stays valid until pending drops */
      struct cpu_op_slot *s = &p->slots[g & 1];
      const cpu_task_fn fn = atomic_load_explicit(&s->task_fn, memory_order_relaxed);
      fn(atomic_load_explicit(&s->arg, memory_order_relaxed), w->ith, p->n_threads);
      done_gen = g;
      atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    } else {
      claim_chunks(p, word, w->ith);
      done_gen = g;
    }
  }
  return NULL;
}

/* LLMBUS_POOL_WAIT_SPIN_US: microseconds in [0, 10^9]; unset, empty or not such a number:
 * CPU_POOL_WAIT_SPIN_NS. */
static int64_t wait_spin_ns_from_env(void) {
  const char *v = getenv("LLMBUS_POOL_WAIT_SPIN_US");
  if (!v || !*v) return CPU_POOL_WAIT_SPIN_NS;
  char *end = NULL;
  errno = 0;
  const long long us = strtoll(v, &end, 10);
  if (errno || *end || us < 0 || us > 1000000000LL) return CPU_POOL_WAIT_SPIN_NS;
  return (int64_t)us * 1000;
}

llb_status cpu_threadpool_create(int n_threads, struct cpu_threadpool **out) {
  if (!out || n_threads < 1 || n_threads > 256)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "thread count %d not in [1, 256]", n_threads);
  *out = NULL;
  /* cache-line aligned: the claim word and the done counters sit on lines of their own */
  struct cpu_threadpool *p = aligned_alloc(64, (sizeof(*p) + 63) / 64 * 64);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "thread pool");
  memset(p, 0, sizeof(*p));
  p->n_threads = n_threads;
  atomic_store(&p->active, (uint32_t)n_threads);
  p->wait_spin_ns = wait_spin_ns_from_env();
  llb_status st = LLB_STATUS_OK;
  if (n_threads > 1) {
    const size_t bytes = ((size_t)n_threads - 1) * sizeof(*p->workers);
    p->workers = aligned_alloc(64, (bytes + 63) / 64 * 64); /* `holding` on a line of its own */
    if (p->workers) memset(p->workers, 0, bytes);
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
    char name[16]; /* what perf, top and ops/bench/served_cpu.py --threads show for it */
    snprintf(name, sizeof name, "llb-pool-%d", i + 1);
    (void)pthread_setname_np(p->workers[i].thread, name);
    p->workers[i].has_clock = pthread_getcpuclockid(p->workers[i].thread, &p->workers[i].clock) == 0;
  }
  *out = p;
  return LLB_STATUS_OK;
fail:
  cpu_threadpool_destroy(p);
  return st;
}

/* The calling thread's kernel id, cached per thread (one system call per thread's life). */
static pid_t self_tid(void) {
  static _Thread_local pid_t tid;
  if (!tid) tid = (pid_t)syscall(SYS_gettid);
  return tid;
}

/* Publishes op word (generation already in it) and wakes sleeping workers. The slot was
 * written before: the release store makes it visible to whoever reads the word. */
static void publish(struct cpu_threadpool *p, uint64_t word) {
  const pid_t tid = self_tid();
  if (tid != p->caller_tid) { /* a new caller: idle workers look at its clock */
    clockid_t clock;
    const bool ok = pthread_getcpuclockid(pthread_self(), &clock) == 0;
    atomic_store_explicit(&p->caller_has_clock, 0, memory_order_relaxed);
    atomic_store_explicit(&p->caller_clock, ok ? (int)clock : 0, memory_order_relaxed);
    atomic_store_explicit(&p->caller_has_clock, ok, memory_order_release);
    p->caller_tid = tid;
  }
  atomic_store_explicit(&p->parked, 0, memory_order_relaxed);
  atomic_store_explicit(&p->work, word, memory_order_release);
  /* seq_cst bump, then read n_sleeping: a worker counted itself before reading `wake`, so
   * either we see it and wake it, or it sees the new word before sleeping */
  atomic_fetch_add(&p->wake, 1);
  if (atomic_load(&p->n_sleeping) > 0) futex_wake_all(&p->wake);
}

void cpu_threadpool_destroy(struct cpu_threadpool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  futex_wake_all(&p->active);
  p->gen++;
  publish(p, (uint64_t)p->gen << 32);
  for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
  free(p->workers);
  free(p);
}

int cpu_threadpool_size(const struct cpu_threadpool *p) { return p->n_threads; }

void cpu_threadpool_set_active(struct cpu_threadpool *p, int n) {
  if (!p) return;
  const uint32_t v = (uint32_t)(n < 1 ? 1 : n > p->n_threads ? p->n_threads : n);
  const uint32_t old = atomic_exchange(&p->active, v);
  if (v > old) futex_wake_all(&p->active);
}

int cpu_threadpool_active(const struct cpu_threadpool *p) { return (int)atomic_load(&p->active); }

void cpu_threadpool_park(struct cpu_threadpool *p) {
  if (p && p->n_threads > 1) atomic_store_explicit(&p->parked, 1, memory_order_relaxed);
}

static void wait_spin(int *spins) {
  if (++*spins < CPU_POOL_YIELD_ITERS) cpu_relax();
  else sched_yield();
}

/* Whether a worker holding chunks ran less than half of the `elapsed` ns since the last look
 * at its CPU clock (0: a first look, no verdict). Records this look. */
static bool holder_off_core(struct cpu_threadpool *p, int64_t elapsed) {
  bool off = false;
  for (int i = 0; i < p->n_started; i++) {
    struct cpu_worker *w = &p->workers[i];
    struct timespec ts;
    if (!w->has_clock || !atomic_load_explicit(&w->holding, memory_order_relaxed) ||
        clock_gettime(w->clock, &ts) != 0) {
      w->looked_cpu_ns = -1;
      continue;
    }
    const int64_t cpu = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    if (elapsed > 0 && w->looked_cpu_ns >= 0 && cpu - w->looked_cpu_ns < elapsed / 2) off = true;
    w->looked_cpu_ns = cpu;
  }
  return off;
}

/* Waits until the n_chunks chunks of the op in slot s are done: spins while the workers
 * holding its chunks run, and sleeps on done_wake (the worker that finishes the op's last chunk
 * wakes it) once one of them is off its core (CPU_POOL_WAIT_SPIN_NS). */
static void wait_op_done(struct cpu_threadpool *p, struct cpu_op_slot *s, int64_t n_chunks) {
  if (atomic_load_explicit(&s->done, memory_order_acquire) >= n_chunks) return;
  const int64_t t0 = mono_ns();
  int64_t looked = 0; /* when the workers' clocks were last looked at, 0 never */
  for (int64_t spins = 1;; spins++) {
    /* a holder preempted outside its `holding` window is invisible to the clocks: past
     * CPU_POOL_YIELD_ITERS the spin yields, so a caller sharing the holder's core lets it run */
    if (spins < CPU_POOL_YIELD_ITERS) cpu_relax();
    else sched_yield();
    if (atomic_load_explicit(&s->done, memory_order_acquire) >= n_chunks) return;
    if (spins % CPU_POOL_SPIN_CHECK != 0) continue;
    const int64_t now = mono_ns();
    if (now - t0 < p->wait_spin_ns || now - looked < CPU_POOL_LOOK_NS) continue;
    if (holder_off_core(p, looked ? now - looked : 0)) break;
    looked = now;
  }
  for (;;) {
    atomic_store(&p->caller_sleeping, 1);
    const uint32_t seen = atomic_load(&p->done_wake);
    if (atomic_load(&s->done) >= n_chunks) break;
    futex_wait_u32(&p->done_wake, seen);
  }
  atomic_store_explicit(&p->caller_sleeping, 0, memory_order_relaxed); /* done's load acquired */
}

void cpu_threadpool_parallel(struct cpu_threadpool *p, cpu_chunk_fn fn, void *arg, int64_t n_chunks) {
  if (n_chunks <= 0) return;
  if (p->n_threads == 1 || n_chunks == 1 || atomic_load_explicit(&p->active, memory_order_relaxed) == 1) {
    for (int64_t i = 0; i < n_chunks; i++) fn(arg, i, 0);
    return;
  }
  const uint32_t g = ++p->gen;
  struct cpu_op_slot *s = &p->slots[g & 1];
  atomic_store_explicit(&s->chunk_fn, fn, memory_order_relaxed);
  atomic_store_explicit(&s->arg, arg, memory_order_relaxed);
  atomic_store_explicit(&s->n_chunks, n_chunks, memory_order_relaxed);
  /* a claim is a CAS on a line every thread writes: ~CPU_POOL_CLAIMS_PER_THREAD claims a
   * thread per op keep that cost small and the load still balanced */
  const int64_t per = (int64_t)atomic_load_explicit(&p->active, memory_order_relaxed) * CPU_POOL_CLAIMS_PER_THREAD;
  atomic_store_explicit(&s->grain, n_chunks / per > 1 ? n_chunks / per : 1, memory_order_relaxed);
  atomic_store_explicit(&s->done, 0, memory_order_relaxed);
  const uint64_t word = (uint64_t)g << 32;
  publish(p, word);
  claim_chunks(p, word, 0);
  wait_op_done(p, s, n_chunks);
}

void cpu_threadpool_run(struct cpu_threadpool *p, cpu_task_fn fn, void *arg) {
  if (p->n_threads == 1) {
    fn(arg, 0, 1);
    return;
  }
  const int active = cpu_threadpool_active(p); /* a run needs every thread */
  cpu_threadpool_set_active(p, p->n_threads);
  const uint32_t g = ++p->gen;
  struct cpu_op_slot *s = &p->slots[g & 1];
  atomic_store_explicit(&s->task_fn, fn, memory_order_relaxed);
  atomic_store_explicit(&s->arg, arg, memory_order_relaxed);
  atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
  publish(p, ((uint64_t)g << 32) | WORK_ALL_BIT);
  fn(arg, 0, p->n_threads);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) wait_spin(&spins);
  cpu_threadpool_set_active(p, active);
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
  while (atomic_load(&p->barrier_gen) == g) wait_spin(&spins);
}
