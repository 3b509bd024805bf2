/* The scheduler's outputs on the bus: one EngineCoreOutputs per step on
 * <prefix>.engine.<eid>.outputs (the refused requests' error outputs, the side outputs of
 * aborts, the step's outputs; a request's first output carries its prompt, sampling params and
 * first-output fields, its first output with a token its prompt logprobs, a resynced one its
 * whole output from position 0), and SchedulerStats on .stats. Owns what it publishes with:
 * the output array and the encode buffer. Step thread, except
 * output_publisher_announce_draining. */
#ifndef LLB_ACTORS_SCHEDULER_OUTPUT_PUBLISHER_H
#define LLB_ACTORS_SCHEDULER_OUTPUT_PUBLISHER_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/req_meta.h"
#include "actors/scheduler/sched_output.h"
#include "base/status.h"
#include "bus/bus.h"
#include "schemas/control.h"
#include "schemas/model_runner_output.h"

struct output_publisher;
struct scheduler;
struct sched_stats;

struct output_publisher_config {
  struct bus *bus;                          /* borrowed */
  const char *engine_id, *model_name, *instance; /* announced; copied */
  const char *subj_outputs, *subj_stats;    /* copied */
  /* announced in SchedulerStats */
  int32_t num_blocks, block_size, max_num_seqs, max_num_batched_tokens, max_model_len;
  int32_t stats_interval_ms;
  enum llb_engine_role role;                /* what the engine serves (disaggregated prefill/decode) */
  /* A request's last output went out (finished, aborted or refused): stream_seq is its
   * requests-stream message (0 = none). Step thread; NULL = nothing to do. */
  void (*on_request_done)(void *user, uint64_t stream_seq);
  void *user;
};

/* What one publish sends. After it, the final outputs' metas and the rejected ones are freed
 * (their users set to NULL), first-output data of the others dropped, both output lists
 * cleared. */
struct output_step {
  uint64_t step;
  bool with_step;                      /* eo holds an applied step's outputs */
  struct req_meta **rejected;          /* [num_rejected] refused at admission; freed */
  int64_t num_rejected;
  struct sched_engine_outputs *side;   /* aborts and other outputs outside a step */
  struct sched_engine_outputs *eo;     /* the step's; read only when with_step */
  const struct llb_model_runner_output *mro; /* the applied worker reply (logprobs rows); NULL none */
  const struct scheduler *sched;       /* a resync reads the request's token buffer */
};

/* Errors: INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status output_publisher_create(const struct output_publisher_config *c, struct output_publisher **out);
void output_publisher_destroy(struct output_publisher *p); /* NULL ok */

/* Publishes one EngineCoreOutputs (nothing when there are no outputs; a failure is logged)
 * and cleans up as said above. Returns the wall-clock time taken before the publish, at
 * which the step's spans end (step_trace_steps_done). */
int64_t output_publisher_publish(struct output_publisher *p, const struct output_step *s);

/* Publishes SchedulerStats from the scheduler's stats snapshot (a failure is logged). */
void output_publisher_publish_stats(struct output_publisher *p, const struct sched_stats *s);

/* Publishes SchedulerStats with draining set (configuration only) and flushes; any thread
 * (a buffer of its own). */
void output_publisher_announce_draining(struct output_publisher *p);

/* EngineCoreOutputs published so far. Any thread. */
uint64_t output_publisher_num_published(struct output_publisher *p);

/* Frees the metas owned by eo's final outputs (outputs never published: the actor stops). */
void output_publisher_free_users(struct sched_engine_outputs *eo);

#endif
