/* The scheduler's waiting queue (vLLM v1 vllm/v1/core/sched/request_queue.py): FCFS (a
 * deque: arrivals at the back, preempted requests back at the front) or PRIORITY (a binary
 * min-heap on (priority, arrival_time, arrival order): lower priority value first, then
 * earlier arrival; a preempted request re-enters at its own rank). Capacity grows on push
 * only; not thread-safe.
 */
#ifndef LLB_SCHED_QUEUE_H
#define LLB_SCHED_QUEUE_H

#include <stdint.h>

#include "actors/scheduler/sched_request.h"
#include "base/status.h"

enum sched_policy {
  SCHED_POLICY_FCFS = 0,
  SCHED_POLICY_PRIORITY = 1,
};

struct sched_queue {
  enum sched_policy policy;
  int32_t head;                 /* FCFS: ring start */
  int32_t num, cap;
  struct sched_request **items; /* FCFS: ring [cap]; PRIORITY: heap [num] */
};

void sched_queue_init(struct sched_queue *q, enum sched_policy policy);
void sched_queue_free(struct sched_queue *q); /* frees the array, not the requests */
/* Adds an arrival (FCFS: back). Errors: OUT_OF_MEMORY. */
llb_status sched_queue_push(struct sched_queue *q, struct sched_request *r);
/* Adds a preempted request (FCFS: front; PRIORITY: its rank). Errors: OUT_OF_MEMORY. */
llb_status sched_queue_push_front(struct sched_queue *q, struct sched_request *r);
/* The next request to schedule, or NULL. */
struct sched_request *sched_queue_peek(const struct sched_queue *q);
struct sched_request *sched_queue_pop(struct sched_queue *q);
/* Removes r (abort); O(n) for FCFS, O(log n) for PRIORITY. Returns false if absent. */
bool sched_queue_remove(struct sched_queue *q, struct sched_request *r);
/* The i-th request in FCFS order (PRIORITY: heap order), for iteration. */
struct sched_request *sched_queue_at(const struct sched_queue *q, int32_t i);

#endif
