/* The threads that serve an intake queue (intake_queue.h), and their CPU priority.
 *
 * Intake work shares the machine's cores with the engine's forward pass (on a small host, the
 * same cores). A request whose intake stays cheap (validation, a short template and prompt)
 * runs at the pool's priority; once one request has used more than `demote_after_cpu_ns` of
 * its thread's CPU time (a long but admissible prompt, a real vision model's images, a large
 * grammar), that thread's nice value is raised to INTAKE_WORKERS_DEMOTED_NICE for the rest of
 * the request, so the scheduler of the kernel gives the cores to the engine first and the
 * request still finishes when they are idle.
 *
 * Why a thread is replaced rather than restored: an unprivileged thread may raise its nice
 * value but not lower it again (setpriority(2) needs CAP_SYS_NICE or RLIMIT_NICE for that), so
 * a demoted thread ends after its request and a monitor thread, still at the pool's priority,
 * starts a new one in its place (a new thread inherits its creator's nice value). The monitor
 * reads each busy worker's CPU clock (pthread_getcpuclockid) every few milliseconds while any is
 * busy and sleeps otherwise; a demotion happens between `demote_after_cpu_ns` and that plus one
 * poll. The queue decides the order (deficit round robin per tenant) as before: which thread
 * runs an item, and at which priority, does not change which item is taken next.
 */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_INTAKE_WORKERS_H
#define LLB_ACTORS_INPUT_PROCESSOR_INTAKE_WORKERS_H

#include <stdint.h>

#include "actors/input_processor/intake_queue.h"
#include "base/status.h"

#define INTAKE_WORKERS_DEMOTED_NICE 19 /* the lowest CFS weight short of SCHED_IDLE */
#define INTAKE_WORKERS_MAX 64

/* The work on one popped item; runs on a worker thread, owns the item. */
typedef void (*intake_work_fn)(void *user, void *item);

struct intake_workers;

/* Starts n (1..INTAKE_WORKERS_MAX) threads that pop items of q and hand each to fn(user, item),
 * then mark it done, and the monitor that demotes a thread whose current item has used more than
 * demote_after_cpu_ns of CPU (0 = never) and replaces it afterwards. q and user must outlive
 * intake_workers_stop. Errors: INVALID_ARGUMENT, IO (a thread could not start; those started
 * are stopped). */
llb_status intake_workers_start(struct intake_queue *q, int n, int64_t demote_after_cpu_ns, intake_work_fn fn,
                                void *user, struct intake_workers **out);

/* Items whose thread was demoted since start. */
int64_t intake_workers_demoted(const struct intake_workers *w);

/* Closes the queue, lets the workers finish every queued item, joins them and frees. NULL ok. */
void intake_workers_stop(struct intake_workers *w);

#endif
