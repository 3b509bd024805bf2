/* Requests that resume where another left off (docs/design.md §6; history_fetch.c says how): a
 * replay from the durable stream, or a resend naming the request it replaces, is admitted with
 * the outputs it had as its first outputs instead of generating them again. Step thread. */
#ifndef LLB_ACTORS_SCHEDULER_HISTORY_FETCH_H
#define LLB_ACTORS_SCHEDULER_HISTORY_FETCH_H

#include <stdint.h>

#include "actors/scheduler/req_meta.h"
#include "actors/scheduler/sched_output.h"
#include "bus/bus.h"

struct scheduler;

/* Before admitting `list` (req_metas linked by next): a resend whose replaced request still
 * runs in sched takes its outputs over (the old one is aborted, its final output into side);
 * the other replays and resends are asked for on <prefix>.engine.<engine_id>.history (one
 * request on bus, 300 ms at most). Each one found gets resume_ids and resync set. Returns how
 * many got outputs; nothing changes for the rest (no answer: they start from their prompts). */
int32_t history_fetch(struct bus *bus, const char *engine_id, struct scheduler *sched,
                      struct sched_engine_outputs *side, struct req_meta *list);

#endif
