/* The scheduler's spans (docs/design.md §8; step_trace.c says which). All calls run on the step
 * thread, except step_trace_request_init (the request handler's thread, before the request is
 * handed over). Not public API. */
#ifndef LLB_ACTORS_SCHEDULER_STEP_TRACE_H
#define LLB_ACTORS_SCHEDULER_STEP_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/bus.h"
#include "bus/trace.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/scheduler_output.h"

/* Steps whose spans can be open at once: two in flight (async) plus one being published. */
#define SCHED_TRACE_STEPS 4

/* A request's trace context, from EngineCoreRequest (the input processor's request span). */
struct sched_req_trace {
  bool on;                 /* a valid, sampled traceparent arrived */
  bool queue_recorded;     /* scheduler.queue was recorded (first scheduling) */
  struct bus_trace_ctx ctx;
  char traceparent[BUS_TRACEPARENT_LEN + 1];
  char parent_span_id[17]; /* "" = the request span is a root */
  int64_t start_time_ns;
};

struct scheduler;
struct sched_output;
struct step_trace;

/* Reads r's trace fields into *t (an invalid or unsampled one: off). Any thread. */
void step_trace_request_init(struct sched_req_trace *t, const struct llb_engine_core_request *r);
/* Copies a request's trace context onto its EngineCoreOutput (for the output processor's spans). */
void step_trace_fill_output(const struct sched_req_trace *t, struct llb_engine_core_output *o);

/* The step records of one scheduler, whose spans go to bus' exporter (borrowed). Errors:
 * OUT_OF_MEMORY. */
llb_status step_trace_create(struct bus *bus, struct step_trace **out);
/* Frees the records. NULL ok. */
void step_trace_destroy(struct step_trace *t);
/* After step o was planned (its KV round trip from kv_start_ns to kv_end_ns, 0, 0 when none):
 * opens the step spans of its traced requests (their metas found in sched). */
void step_trace_planned(struct step_trace *t, const struct scheduler *sched, const struct sched_output *o,
                        int64_t plan_ns, int64_t kv_start_ns, int64_t kv_end_ns);
/* Puts each traced request's step-span traceparent into the wire's ScheduledTokens[n]. */
void step_trace_fill_wire(struct step_trace *t, uint64_t step, struct llb_scheduled_tokens *tokens, int32_t n);
/* The worker round trip of `step`: sent / its reply received. */
void step_trace_exec_sent(struct step_trace *t, uint64_t step);
void step_trace_exec_received(struct step_trace *t, uint64_t step);
/* The outputs of `step` are about to be published (with_step: a step was applied): ends the
 * spans of it and of older steps (those forgotten after a failure end in error) at end_ns,
 * taken before the publish, so that they end before anything downstream of it. */
void step_trace_steps_done(struct step_trace *t, uint64_t step, bool with_step, int64_t end_ns);

#endif
