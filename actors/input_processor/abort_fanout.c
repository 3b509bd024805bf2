/* Where an abort goes: the engine an id names, the decode engines, or every engine (see
 * abort_fanout.h). */
#include "actors/input_processor/abort_fanout.h"

#include <stdio.h>
#include <string.h>

#include "actors/input_processor/actor.h"
#include "actors/input_processor/input_processor.h"
#include "base/log.h"
#include "bus/subject.h"

llb_status abort_fanout_publish(const struct abort_fanout *f, const char *eid, const struct llb_str *ids, int32_t n,
                                const struct bus_trace_ctx *trace) {
  struct llb_abort_requests ab = {.request_ids = ids, .num_request_ids = n};
  struct llb_buf buf = {0};
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine(bus_prefix(f->bus), eid, "abort", subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = llb_abort_requests_encode_buf(&ab, &buf);
  if (st == LLB_STATUS_OK) st = bus_publish(f->bus, subject, buf.data, buf.len, trace);
  if (st != LLB_STATUS_OK) atomic_fetch_add(f->publish_errors, 1);
  llb_buf_free(&buf);
  return st;
}

int abort_fanout_everywhere(const struct abort_fanout *f, const struct llb_str *ids, int32_t n,
                            const struct bus_trace_ctx *trace, llb_status *st) {
  enum { MAX_FANOUT = 64 };
  struct engine_router_engine rows[MAX_FANOUT];
  int total = engine_router_list(f->router, llb_now_ns(), rows, MAX_FANOUT);
  if (total > MAX_FANOUT) total = MAX_FANOUT;
  *st = abort_fanout_publish(f, f->default_engine_id, ids, n, trace);
  int sent = 1;
  for (int i = 0; i < total; i++) {
    if (strcmp(rows[i].engine_id, f->default_engine_id) == 0) continue;
    llb_status s2 = abort_fanout_publish(f, rows[i].engine_id, ids, n, trace);
    if (*st == LLB_STATUS_OK) *st = s2;
    sent++;
  }
  return sent;
}

/* The id alone to every decode engine but `eid` (abort_fanout_request). Returns the number of
 * engines; *st the first error. */
static int abort_decode_engines(const struct abort_fanout *f, const char *eid, const struct llb_str *id,
                                const struct bus_trace_ctx *trace, llb_status *st) {
  enum { MAX_DECODE = 64 };
  char ids[MAX_DECODE][BUS_TOKEN_MAX + 1];
  int n = engine_router_decode_engines(f->router, ids, MAX_DECODE), sent = 0;
  for (int i = 0; i < n && i < MAX_DECODE; i++) {
    if (strcmp(ids[i], eid) == 0) continue;
    llb_status s2 = abort_fanout_publish(f, ids[i], id, 1, trace);
    if (*st == LLB_STATUS_OK) *st = s2;
    sent++;
  }
  return sent;
}

int abort_fanout_request(const struct abort_fanout *f, struct llb_str id, const struct bus_trace_ctx *trace,
                         llb_status *st) {
  char child_ids[INPUT_PROCESSOR_ACTOR_MAX_N][INPUT_PROCESSOR_MAX_ID_BYTES];
  struct llb_str ids[INPUT_PROCESSOR_ACTOR_MAX_N + 1];
  ids[0] = id;
  for (int32_t i = 0; i < INPUT_PROCESSOR_ACTOR_MAX_N; i++) {
    snprintf(child_ids[i], sizeof child_ids[i], "%d_%s", i, id.data);
    ids[i + 1] = llb_str_c(child_ids[i]);
  }
  char eid[BUS_TOKEN_MAX + 1];
  if (input_processor_engine_of_id(id.data, id.len, eid, sizeof eid) && engine_router_known(f->router, eid)) {
    *st = abort_fanout_publish(f, eid, ids, INPUT_PROCESSOR_ACTOR_MAX_N + 1, trace);
    return 1 + abort_decode_engines(f, eid, &id, trace, st);
  }
  return abort_fanout_everywhere(f, ids, INPUT_PROCESSOR_ACTOR_MAX_N + 1, trace, st);
}
