/* The scheduler actor's answer to an output processor that lost requests (it restarted, or
 * missed a request's first output): on <prefix>.engine.<eid>.resync (an AbortRequests
 * message: the ids) the named requests are marked, and each one's next EngineCoreOutput
 * carries its whole output from position 0 with the first-output fields and `resync` set
 * (actor_outputs.c), from which the output processor rebuilds its detokenizer state
 * (DESIGN.md §6). The clients drop what they already have (CompletionOutput.resync). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/actor_internal.h"
#include "base/log.h"
#include "schemas/control.h"

struct resync_item {
  struct resync_item *next;
  char id[];
};

static void on_resync(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct scheduler_actor *a = user;
  llb_arena_reset(&a->resync_arena);
  struct llb_abort_requests ids;
  llb_status st = llb_abort_requests_decode(msg->data, msg->len, &a->resync_arena, &ids);
  if (st != LLB_STATUS_OK) {
    char q[400];
    LLB_LOG_WARN("bad_message", "kind=resync subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                 llb_log_quote(q, sizeof q, llb_err_last()));
    return;
  }
  for (int32_t i = 0; i < ids.num_request_ids; i++) {
    struct resync_item *it = malloc(sizeof *it + ids.request_ids[i].len + 1);
    if (!it) break;
    memcpy(it->id, ids.request_ids[i].data, ids.request_ids[i].len + 1);
    pthread_mutex_lock(&a->mu);
    it->next = a->resync_head;
    a->resync_head = it;
    pthread_mutex_unlock(&a->mu);
  }
}

llb_status sched_actor_resync_init(struct scheduler_actor *a, const char *prefix) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine(prefix, a->engine_id, "resync", subject, sizeof subject);
  if (!st) st = bus_subscribe(a->bus, subject, NULL, on_resync, a, NULL);
  return st;
}

void sched_actor_resync_take(struct scheduler_actor *a) {
  pthread_mutex_lock(&a->mu);
  struct resync_item *list = a->resync_head;
  a->resync_head = NULL;
  pthread_mutex_unlock(&a->mu);
  while (list) {
    struct resync_item *it = list;
    list = it->next;
    struct req_meta *m = req_meta_find(a->sched, it->id);
    if (m && !m->resync) {
      m->resync = true;
      atomic_fetch_add(&a->c_resyncs, 1);
      LLB_LOG_INFO("request_resync", "req=%s reason=output_processor_asked", it->id);
    }
    free(it);
  }
}

void sched_actor_resync_free(struct scheduler_actor *a) {
  while (a->resync_head) {
    struct resync_item *it = a->resync_head;
    a->resync_head = it->next;
    free(it);
  }
}
