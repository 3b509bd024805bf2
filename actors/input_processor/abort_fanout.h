/* Where an abort goes (docs/design.md §9): AbortRequests for the ids of requests this input
 * processor routed, sent to the engine an id names (input_processor_engine_of_id), and to the
 * decode engines too, since a disaggregated request may have been handed over to one
 * (actors/scheduler/handoff.h); when the id names no engine the router knows (an id from before
 * routing, or an engine not yet announced to this replica), to every engine it knows and the
 * default one. The engines ignore ids they do not run. The callers (actor.c: a client's abort,
 * a failed publish of a request's children, a resend that cannot take over its request) validate
 * the ids and count the aborts; this module only publishes.
 *
 * Thread safety: as the bus and the router it borrows (every function may be called from any
 * thread). */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_ABORT_FANOUT_H
#define LLB_ACTORS_INPUT_PROCESSOR_ABORT_FANOUT_H

#include <stdatomic.h>
#include <stdint.h>

#include "actors/input_processor/engine_router.h"
#include "base/status.h"
#include "bus/bus.h"
#include "schemas/engine_core_request.h"

/* What an abort fan-out publishes with; every pointer borrowed from the actor, valid while it runs. */
struct abort_fanout {
  struct bus *bus;                      /* the actor's connection (its subject prefix) */
  struct engine_router *router;         /* the engines known, decode engines among them */
  const char *default_engine_id;        /* the input processor's --engine-id */
  atomic_uint_fast64_t *publish_errors; /* incremented once per publish that failed */
};

/* Publishes AbortRequests{ids[0 .. n)} on engine `eid`'s abort subject
 * (<prefix>.engine.<eid>.abort), under the trace context `trace` (may be NULL). The status of the
 * subject, the encoding or the publish (counted in publish_errors). */
llb_status abort_fanout_publish(const struct abort_fanout *f, const char *eid, const struct llb_str *ids, int32_t n,
                                const struct bus_trace_ctx *trace);

/* abort_fanout_publish of ids[0 .. n) to the default engine and to every other engine the router
 * lists (at most 64 of them). Returns the number of engines sent to; *st the first error, else
 * the default engine's status. */
int abort_fanout_everywhere(const struct abort_fanout *f, const struct llb_str *ids, int32_t n,
                            const struct bus_trace_ctx *trace, llb_status *st);

/* A client's abort of request `id` (NUL-terminated, printable, at most INPUT_PROCESSOR_MAX_ID_BYTES
 * - 8 bytes: the caller checked it is one of its tenant's): the id and every child id it may have
 * ("<i>_<id>", i < INPUT_PROCESSOR_ACTOR_MAX_N; the processor keeps no state) to the engine the
 * id names when the router knows it, and the id alone to every other decode engine (n > 1 is never
 * disaggregated; one that does not run it yet remembers it, so a hand-off racing the abort is
 * dropped there); else all of them everywhere (abort_fanout_everywhere). Returns the number of
 * engines sent to; *st the first error, LLB_STATUS_OK when every publish went out. */
int abort_fanout_request(const struct abort_fanout *f, struct llb_str id, const struct bus_trace_ctx *trace,
                         llb_status *st);

#endif
