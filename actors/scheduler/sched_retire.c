/* Retired requests: finished and unreferenced, destroyed at the next sched_schedule (or
 * sched_destroy) rather than at once, so that what the caller still holds from the last step
 * (sched_output's request ids and block tables, the ids of its model output) stays valid
 * until it plans again. A leaf of the core files. */
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"

void sched_retire(struct scheduler *s, struct sched_request *r) {
  if (!sched_can_destroy(r)) return;
  r->retired = true;
  r->retired_next = s->retired; /* an intrusive list: retiring cannot fail */
  s->retired = r;
}

void sched_destroy_retired(struct scheduler *s) {
  while (s->retired) {
    struct sched_request *r = s->retired;
    s->retired = r->retired_next;
    sched_request_destroy(r);
  }
}
