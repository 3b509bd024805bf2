/* Intake worker threads and their demotion (intake_workers.h). */
#include "actors/input_processor/intake_workers.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

#define POLL_MIN_NS (1000 * 1000LL)      /* the monitor's poll while a worker is busy: budget / 2 */
#define POLL_MAX_NS (5 * 1000 * 1000LL)  /* within [1, 5] ms */
#define RESPAWN_RETRY_NS (100 * 1000 * 1000LL)

enum worker_state {
  WORKER_EMPTY,   /* no thread (never started, or its thread ended for good) */
  WORKER_RUNNING, /* a thread lives here */
  WORKER_ENDED,   /* its thread returned: join it; `replace` says whether a new one takes over */
  WORKER_RESPAWN, /* joined; its replacement could not start yet */
};

struct worker {
  struct intake_workers *pool;
  pthread_t thread;
  enum worker_state state;
  bool replace;            /* ended because it was demoted: start another in its place */
  pid_t tid;               /* for setpriority(2) */
  clockid_t cpu_clock;     /* its CPU-time clock (pthread_getcpuclockid) */
  bool busy, demoted;      /* working on an item; that item's thread runs demoted */
  int64_t item_start_cpu_ns;
};

struct intake_workers {
  struct intake_queue *q;
  intake_work_fn fn;
  void *user;
  int64_t budget_ns;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the monitor waits here (CLOCK_MONOTONIC) */
  pthread_t monitor;
  bool monitor_started, stopping;
  atomic_int_fast64_t demoted;
  int n;
  struct worker workers[];
};

static int64_t clock_ns(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts) != 0) return 0;
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker_main(void *arg) {
  struct worker *me = arg;
  struct intake_workers *w = me->pool;
  pthread_mutex_lock(&w->mu);
  me->tid = gettid();
  if (pthread_getcpuclockid(pthread_self(), &me->cpu_clock) != 0) me->cpu_clock = CLOCK_THREAD_CPUTIME_ID;
  pthread_mutex_unlock(&w->mu);
  void *item;
  int slot;
  bool demoted = false;
  while (!demoted && intake_queue_pop(w->q, &item, &slot)) {
    pthread_mutex_lock(&w->mu);
    me->busy = true;
    me->demoted = false;
    me->item_start_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    pthread_cond_signal(&w->cv); /* the monitor starts watching */
    pthread_mutex_unlock(&w->mu);
    w->fn(w->user, item);
    intake_queue_done(w->q, slot);
    pthread_mutex_lock(&w->mu);
    me->busy = false; /* under mu: a demotion never lands on the next item */
    demoted = me->demoted;
    pthread_mutex_unlock(&w->mu);
  }
  pthread_mutex_lock(&w->mu);
  me->state = WORKER_ENDED;
  me->replace = demoted; /* it cannot lower its nice value again unprivileged: a new thread takes over */
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Starts a thread in slot me (mu held); it inherits this thread's nice value. */
static bool worker_spawn(struct worker *me) {
  me->busy = me->demoted = me->replace = false;
  if (pthread_create(&me->thread, NULL, worker_main, me) != 0) return false;
  me->state = WORKER_RUNNING;
  return true;
}

/* Joins ended threads and starts replacements; returns the threads running, *retry when a
 * replacement could not start (mu held). */
static int reap(struct intake_workers *w, bool *retry) {
  int running = 0;
  *retry = false;
  for (int i = 0; i < w->n; i++) {
    struct worker *k = &w->workers[i];
    if (k->state == WORKER_ENDED) {
      pthread_join(k->thread, NULL); /* it is past its last use of mu */
      k->state = k->replace ? WORKER_RESPAWN : WORKER_EMPTY;
    }
    if (k->state == WORKER_RESPAWN && !worker_spawn(k)) {
      if (!*retry) LLB_LOG_ERROR("intake_worker_respawn_failed", "slot=%d", i);
      k->state = WORKER_RESPAWN;
      *retry = true;
    }
    running += k->state == WORKER_RUNNING;
  }
  return running;
}

/* Demotes each busy worker whose item has used more than the budget; true when any is still
 * being watched (mu held). */
static bool demote(struct intake_workers *w) {
  bool watching = false;
  for (int i = 0; w->budget_ns > 0 && i < w->n; i++) {
    struct worker *k = &w->workers[i];
    if (k->state != WORKER_RUNNING || !k->busy || k->demoted) continue;
    if (clock_ns(k->cpu_clock) - k->item_start_cpu_ns < w->budget_ns) {
      watching = true;
      continue;
    }
    k->demoted = true;
    atomic_fetch_add(&w->demoted, 1);
    if (setpriority(PRIO_PROCESS, (id_t)k->tid, INTAKE_WORKERS_DEMOTED_NICE) != 0)
      LLB_LOG_WARN("intake_demote_failed", "tid=%d errno=%d", (int)k->tid, errno);
  }
  return watching;
}

static void wait_ns(struct intake_workers *w, int64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t t = (int64_t)ts.tv_nsec + ns;
  ts.tv_sec += t / 1000000000LL;
  ts.tv_nsec = t % 1000000000LL;
  pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

static void *monitor_main(void *arg) {
  struct intake_workers *w = arg;
  int64_t poll = w->budget_ns / 2;
  poll = poll < POLL_MIN_NS ? POLL_MIN_NS : poll > POLL_MAX_NS ? POLL_MAX_NS : poll;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    bool retry;
    const int running = reap(w, &retry);
    if (running == 0 && w->stopping) break; /* the queue is closed and drained (or no thread can start) */
    const bool watching = demote(w);
    if (retry) wait_ns(w, RESPAWN_RETRY_NS);
    else if (watching) wait_ns(w, poll);
    else pthread_cond_wait(&w->cv, &w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

llb_status intake_workers_start(struct intake_queue *q, int n, int64_t demote_after_cpu_ns, intake_work_fn fn,
                                void *user, struct intake_workers **out) {
  *out = NULL;
  if (!q || n < 1 || n > INTAKE_WORKERS_MAX || !fn || demote_after_cpu_ns < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "intake workers: 1..%d, a function, a budget >= 0", INTAKE_WORKERS_MAX);
  struct intake_workers *w = calloc(1, sizeof *w + (size_t)n * sizeof(struct worker));
  if (!w) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "intake workers");
  w->q = q, w->fn = fn, w->user = user, w->budget_ns = demote_after_cpu_ns, w->n = n;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  for (int i = 0; i < n; i++) w->workers[i].pool = w;
  pthread_mutex_lock(&w->mu);
  int started = 0;
  while (started < n && worker_spawn(&w->workers[started])) started++;
  pthread_mutex_unlock(&w->mu);
  if (started == n && pthread_create(&w->monitor, NULL, monitor_main, w) == 0) {
    w->monitor_started = true;
    *out = w;
    return LLB_STATUS_OK;
  }
  intake_workers_stop(w); /* joins those started, frees w */
  return LLB_ERRF(LLB_STATUS_IO, "intake worker thread %d of %d could not start", started, n);
}

int64_t intake_workers_demoted(const struct intake_workers *w) {
  return atomic_load(&((struct intake_workers *)w)->demoted);
}

void intake_workers_stop(struct intake_workers *w) {
  if (!w) return;
  intake_queue_close(w->q);
  pthread_mutex_lock(&w->mu);
  w->stopping = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->monitor_started) {
    pthread_join(w->monitor, NULL);
  } else { /* start failed: no monitor, join what started */
    for (int i = 0; i < w->n; i++)
      if (w->workers[i].state == WORKER_RUNNING || w->workers[i].state == WORKER_ENDED)
        pthread_join(w->workers[i].thread, NULL);
  }
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
