/* The scheduler actor's way from a request id to its req_meta: the scheduler's registry of
 * live requests, whose sched_request.user is the meta (req_meta.h). Its own file because the
 * modules that req_meta.c builds on (prompt_logprobs.c, step_trace.c) look metas up too. */
#include "actors/scheduler/req_meta.h"

#include "actors/scheduler/scheduler.h"

struct req_meta *req_meta_find(const struct scheduler *sched, const char *id) {
  const struct sched_request *r = sched_find_request(sched, id);
  return r ? r->user : NULL;
}
