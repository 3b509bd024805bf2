/* A restarted scheduler's replays resume where they were (DESIGN.md §6). A request delivered
 * again from the durable stream carries only its prompt; generating its outputs again would
 * take one step per token before its client hears anything new (the output processor drops
 * the positions it already sent). The output processor still holds every token it received:
 * the step thread asks it, on <prefix>.engine.<eid>.history (request: an AbortRequests with the
 * replayed ids; reply: an EngineCoreOutputs, one output per request it knows, new_token_ids
 * from position 0), and admits each request with those tokens as its first outputs, computed
 * as context in its prefill, as after a preemption. Sampling is keyed by output position, so
 * the tokens that follow are the fault-free ones. No answer within HISTORY_TIMEOUT_MS (the
 * output processor restarted too, or is gone) leaves the replays as they are. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/actor_internal.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"

#define HISTORY_TIMEOUT_MS 300

/* A replayed generation of the list (pooling requests have no outputs). */
static bool wants_history(const struct req_meta *m) {
  return m->resync && m->stream_seq != 0 && m->reject_status == LLB_STATUS_OK &&
         m->pooling_params.pooling_type == LLB_POOLING_NONE && !m->resume_ids;
}

static struct req_meta *find_meta(struct req_meta *list, const struct llb_str *id) {
  for (struct req_meta *m = list; m; m = m->next)
    if (wants_history(m) && strlen(m->id) == id->len && memcmp(m->id, id->data, id->len) == 0) return m;
  return NULL;
}

/* Copies the history of each output into its request's meta; returns how many got one. The
 * reply is untrusted input: ids outside the vocabulary are left to the scheduler's
 * validation (which refuses the request), lengths are bounded by max_tokens there. */
static int32_t take_reply(struct req_meta *list, const struct llb_engine_core_outputs *outs) {
  int32_t n = 0;
  for (int32_t i = 0; i < outs->num_outputs; i++) {
    const struct llb_engine_core_output *o = &outs->outputs[i];
    struct req_meta *m = find_meta(list, &o->request_id);
    if (!m || o->first_output_pos != 0 || o->num_new_token_ids < 1) continue;
    m->resume_ids = malloc((size_t)o->num_new_token_ids * sizeof *m->resume_ids);
    if (!m->resume_ids) continue;
    memcpy(m->resume_ids, o->new_token_ids, (size_t)o->num_new_token_ids * sizeof *m->resume_ids);
    m->num_resume = o->num_new_token_ids;
    n++;
  }
  return n;
}

void sched_actor_fetch_history(struct scheduler_actor *a, struct req_meta *list) {
  int32_t num = 0;
  for (struct req_meta *m = list; m; m = m->next) num += wants_history(m);
  if (num == 0) return;
  struct llb_str *ids = calloc((size_t)num, sizeof *ids);
  if (!ids) return;
  int32_t k = 0;
  for (struct req_meta *m = list; m; m = m->next)
    if (wants_history(m)) ids[k++] = llb_str_c(m->id);
  char subject[BUS_SUBJECT_MAX];
  struct llb_buf buf = {0};
  struct bus_msg *reply = NULL;
  const struct llb_abort_requests req = {.version = 1, .request_ids = ids, .num_request_ids = num};
  const int64_t t0 = llb_now_ns();
  llb_status st = bus_subject_engine(bus_prefix(a->bus), a->engine_id, "history", subject, sizeof subject);
  if (!st) st = llb_abort_requests_encode_buf(&req, &buf);
  if (!st) st = bus_request(a->bus, subject, buf.data, buf.len, NULL, HISTORY_TIMEOUT_MS, &reply);
  int32_t got = 0;
  if (!st) {
    struct llb_arena arena;
    llb_arena_init(&arena, NULL, 0);
    struct llb_engine_core_outputs outs;
    st = llb_engine_core_outputs_decode(reply->data, reply->len, &arena, &outs);
    if (!st) got = take_reply(list, &outs);
    llb_arena_destroy(&arena);
  }
  char q[300];
  LLB_LOG_INFO("replay_history", "replayed=%d with_history=%d status=%s error=%s ms=%.1f", num, got,
               llb_strerror(st), st ? llb_log_quote(q, sizeof q, llb_err_last()) : "\"\"",
               (double)(llb_now_ns() - t0) / 1e6);
  atomic_fetch_add(&a->c_history_resumed, (uint64_t)got);
  bus_msg_destroy(reply);
  llb_buf_free(&buf);
  free(ids);
}
