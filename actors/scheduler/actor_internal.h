/* Private to actors/scheduler/actor*.c: the actor's state and the helpers shared by actor.c
 * (intake, step loop, lifecycle) and actor_outputs.c (outputs publishing). Not public API. */
#ifndef LLB_ACTORS_SCHEDULER_ACTOR_INTERNAL_H
#define LLB_ACTORS_SCHEDULER_ACTOR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/actor.h"
#include "actors/scheduler/prompt_logprobs.h"
#include "actors/scheduler/req_meta.h"
#include "actors/scheduler/step_trace.h"
#include "actors/scheduler/actor_wire.h"
#include "actors/scheduler/durable_intake.h"
#include "actors/scheduler/engine_metrics.h"
#include "actors/scheduler/exec_channel.h"
#include "actors/scheduler/peer_health.h"
#include "bus/subject.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"

struct abort_item;
struct resync_item;

struct scheduler_actor {
  struct bus *bus;
  struct scheduler_actor_config cfg;
  char engine_id[BUS_TOKEN_MAX + 1];
  char model_name[128], instance[96]; /* announced in SchedulerStats */
  char subj_requests[BUS_SUBJECT_MAX], subj_abort[BUS_SUBJECT_MAX], subj_kv[BUS_SUBJECT_MAX],
      subj_execute[BUS_SUBJECT_MAX], subj_outputs[BUS_SUBJECT_MAX], subj_stats[BUS_SUBJECT_MAX],
      subj_encoder[BUS_SUBJECT_MAX];
  struct scheduler *sched;
  /* The worker's reply of this step (arrays in `arena`, valid until the next step): its
   * logprobs rows go out with the step's EngineCoreOutputs. */
  struct llb_model_runner_output mro;
  bool have_mro;

  /* intake, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop, thread_started;
  struct req_meta *intake_head, *intake_tail;
  struct abort_item *abort_head;
  struct resync_item *resync_head; /* ids an output processor asked to resync (actor_resync.c) */
  pthread_t thread;

  /* handler-thread state (one subscription each) */
  struct llb_arena req_arena, abort_arena, resync_arena;
  struct llb_buf req_err_buf;

  /* step-thread state */
  struct req_meta **rejected;      /* [cap_rejected] this iteration's refused requests */
  int64_t num_rejected, cap_rejected;
  struct sched_output out;
  struct kv_step kv;
  struct kv_step_result kv_res;
  struct sched_engine_outputs eo, eo_side;
  struct sched_str_list carry_finished, carry_preempted, carry_free_mm;
  struct encoder_step enc;         /* this step's encoder ops */
  struct sched_wire wire;
  struct llb_engine_core_output *outs;
  int64_t cap_outs;
  struct llb_arena arena;          /* decoded replies, reset per round trip */
  struct llb_buf buf;              /* encoded messages */
  int64_t backoff_ms;
  bool recovering; /* a failure was seen and no step applied since (cfg.on_ready reported it) */
  bool kv_reset_pending; /* the worker failed: its KV contents are unknown, so the next KV
                            step tells the kv_manager to drop its prefix cache */
  int64_t last_stats_ns;
  struct sched_engine_metrics *metrics; /* step thread: series and the engine_stats line */
  /* the last failed execute: the worker answered with an error (not a timeout or a bus
   * failure), and the request it blamed ("" none); sched_step_failed isolates it */
  bool worker_error;
  char worker_blamed[256];

  /* the worker round trip (exec_channel.c): steps in flight, replies queued */
  struct exec_channel *exec;
  uint64_t last_applied_step;

  /* failure detection from heartbeats and own reconnects (peer_health.c) */
  struct peer_health *health;

  /* durable intake (durable_intake.c); NULL when cfg.durable is off */
  struct durable_intake *durable;

  struct sched_step_trace *trace_steps[SCHED_TRACE_STEPS]; /* actor_trace.c, step thread */

  atomic_uint_fast64_t c_steps, c_requests, c_rejected, c_aborted, c_kv_fail, c_exec_fail, c_pub,
      c_enc_fail, c_resyncs,
      c_history_resumed;
};

/* intake (actor.c): decodes an EngineCoreRequest and queues it for the step thread; `refuse`
 * (NULL = admit) makes admission refuse it with that message. stream_seq: its message in the
 * requests stream (0 = none); replayed: delivered before (a scheduler died running it), so its
 * first output is marked resync (an output processor that does not know it must tell the
 * client it repeats the completion from the start). Returns false when it was not queued (undecodable: answered on
 * msg->reply when there is one, logged and counted; or out of memory). Handler threads. */
bool sched_actor_intake(struct scheduler_actor *a, const struct bus_msg *msg, uint64_t stream_seq,
                        bool replayed, const char *refuse);

/* resync (actor_resync.c) */
/* Subscribes <prefix>.engine.<eid>.resync. Errors: bus_subscribe's, INVALID_ARGUMENT. */
llb_status sched_actor_resync_init(struct scheduler_actor *a, const char *prefix);
/* Step thread: marks the requests named since the last call (their next output resyncs). */
void sched_actor_resync_take(struct scheduler_actor *a);
/* Frees ids not taken (after the bus is destroyed). */
void sched_actor_resync_free(struct scheduler_actor *a);

/* history (actor_history.c) */
/* Step thread, before admission: asks the output processor for the outputs of the replayed
 * requests in `list` (one request, HISTORY_TIMEOUT_MS at most) and sets their resume_ids.
 * Nothing changes when it does not answer. */
void sched_actor_fetch_history(struct scheduler_actor *a, struct req_meta *list);

/* step thread: outputs (actor_outputs.c) */
/* Publishes one EngineCoreOutputs with the rejections, the side outputs (aborts) and the
 * step's outputs; then forgets finished requests and drops first-output data. */
void sched_actor_publish_outputs(struct scheduler_actor *a, uint64_t step, bool with_step);
void sched_actor_publish_stats(struct scheduler_actor *a);
/* Frees the metas owned by eo's final outputs (outputs never published: the actor stops). */
void sched_actor_free_output_users(struct sched_engine_outputs *eo);

#endif
