/* llmbus-scheduler's flags made into a scheduler_actor_options: names to enums, the model's
 * context and vocabulary where the flags leave them open, and every range checked before the
 * bus is touched (so that a bad flag is a usage error, not a failed start). */
#ifndef LLB_CMD_ACTOR_SCHEDULER_OPTIONS_H
#define LLB_CMD_ACTOR_SCHEDULER_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/actor.h"
#include "base/status.h"

/* What the flags say beyond scheduler_actor_options' own fields (all borrowed). */
struct scheduler_flags {
  const char *policy;             /* "fcfs" | "priority" */
  bool no_prefix_caching;
  bool no_async_scheduling;
  int32_t num_speculative_tokens; /* --speculative-config's K; 0 = off (turns async scheduling off) */
  int32_t max_model_len;          /* 0 = min(the model's context_length, 4096) */
  int32_t vocab_size;             /* 0 = the model's */
  const char *model_path;         /* the GGUF file, or NULL / "" */
  const char *engine_id, *instance;
  int64_t heartbeat_ms;           /* this actor's --heartbeat-ms: the peers' unless set apart */
};

/* Completes *cfg (its sched fields and the flags it holds already: timeouts, durable, ...)
 * from *f: policy, prefix caching, async scheduling, speculative tokens, max_model_len and
 * vocab_size (from the GGUF's llama config when 0), num_lookahead_tokens, engine id,
 * instance, model name (the file name), peer heartbeat (0 = f->heartbeat_ms, < 0 = off).
 * *blocks_from_worker: sched.num_blocks is 0, the worker's heartbeat gives it at start.
 * Then sched_create's checks run on the result (a stand-in block count when the worker
 * gives it). Errors: INVALID_ARGUMENT naming the flag; the GGUF's errors when it must be
 * read and cannot (with max_model_len given, an unreadable model only loses the vocabulary
 * check, logged). cfg's strings point into *f. */
llb_status scheduler_actor_options_resolve(const struct scheduler_flags *f, struct scheduler_actor_options *cfg,
                                           bool *blocks_from_worker);

#endif
