/* Retired requests: finished and unreferenced, destroyed at the next sched_schedule (or
 * sched_destroy) rather than at once, so that what the caller still holds from the last step
 * (sched_output's request ids and block tables, the ids of its model output) stays valid
 * until it plans again. A leaf of the core files. */
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"
#include "base/array.h"

void sched_retire(struct scheduler *s, struct sched_request *r) {
  if (!sched_can_destroy(r)) return;
  if (llb_array_reserve32((void **)&s->retired, &s->cap_retired, s->num_retired + 1, sizeof(*s->retired))) {
    sched_request_destroy(r); /* out of memory: now rather than never */
    return;
  }
  r->retired = true;
  s->retired[s->num_retired++] = r;
}

void sched_destroy_retired(struct scheduler *s) {
  for (int32_t i = 0; i < s->num_retired; i++) sched_request_destroy(s->retired[i]);
  s->num_retired = 0;
}
