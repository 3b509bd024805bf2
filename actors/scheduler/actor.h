/* The scheduler actor: EngineCore's step loop on the bus (docs/design.md §4).
 *
 * Subscribes <prefix>.engine.<eid>.requests (EngineCoreRequest) and .abort (AbortRequests);
 * their handlers only decode, copy and enqueue under a mutex, then signal the step thread.
 * The step thread owns the scheduler (scheduler.h) and, per step:
 *   admit queued requests (sched_add_request; a refused one gets an ERROR output), apply
 *   queued aborts, sched_schedule → if kv ops: ONE request to .kv (KVStep → KVStepResult)
 *   → sched_apply_kv_result → sched_schedule_encoder → if encoder ops: ONE request to
 *   .encoder (EncoderStep → EncoderStepResult, multimodal requests only) → if tokens: request to .execute (SchedulerOutput →
 *   ModelRunnerOutput) → sched_update_from_output → ONE EngineCoreOutputs on .outputs
 *   with every request's new tokens (a request's first output carries its prompt, sampling
 *   params, parent id + index and arrival time). SchedulerStats on .stats every
 *   stats_interval_ms while there is work, at least every stats_idle_interval_ms.
 * It sleeps on a condition variable when there is nothing to do (never busy-waits).
 *
 * Failure (docs/design.md §6): a timeout, an error reply or an undecodable reply from the
 * kv_manager or the worker logs one line and preempts every running request
 * (sched_preempt_all: their blocks are released with the next KV step). The block state is the
 * scheduler's (docs/design.md §4): after a failed or refused KV round trip, or a kv_manager seen
 * restarted, the next KV step carries every held block (resync) and a new, empty kv_manager
 * rebuilds its free queue from it, exports of disaggregated prefill included; after a worker
 * failure it also drops the prefix cache (reset). Then the loop backs off (100 ms doubling to
 * 2 s) and goes on: requests are recomputed when the actor is back. Those timeouts are the last
 * resort: with peer_heartbeat_ms set, the heartbeats of the engine's gpu_worker and kv_manager
 * tell within about a second that one was restarted (a new instance id or pid) or fell silent
 * (peer_missed_beats intervals); the step thread then abandons the steps in flight at once
 * (also while it waits for a worker reply, asynchronous scheduling), preempts everything,
 * resyncs the kv_manager and drops its prefix cache (reset; exports survive when only the
 * kv_manager failed) and retries as soon as the new instance beats.
 *
 * Buffers (wire views, encoded messages, decode arena) are reused across steps: at steady
 * state a step allocates only inside the FlatBuffers encoder's reused builder.
 */
#ifndef LLB_ACTORS_SCHEDULER_ACTOR_H
#define LLB_ACTORS_SCHEDULER_ACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/scheduler.h"
#include "base/metrics.h"
#include "base/status.h"
#include "bus/bus.h"
#include "bus/peer_watch.h"
#include "schemas/control.h"

struct scheduler_actor;

/* What cmd/scheduler_main.c fills from its flags (scheduler_actor_options_resolve). */
struct scheduler_actor_options {
  struct sched_config sched;
  const char *engine_id;          /* <eid>; copied */
  const char *model_name;         /* announced in SchedulerStats.model (file name); copied, may be NULL */
  const char *instance;           /* announced in SchedulerStats.instance; copied, may be NULL */
  int64_t kv_timeout_ms;          /* KVStep round trip limit (default 5000) */
  int64_t encoder_timeout_ms;     /* EncoderStep round trip limit (default 5000) */
  int64_t execute_timeout_ms;     /* SchedulerOutput round trip limit (default 60000) */
  int64_t stats_interval_ms;      /* while there is work (default 1000) */
  int64_t stats_idle_interval_ms; /* at least this often (default 1000): routers take an engine
                                   * that fell silent for 3 of these as gone */
  /* Failure detection from the heartbeats of this engine's gpu_worker and kv_manager on
   * <prefix>.health.<actor>.* (bus/peer_watch.h): a new instance (id or pid), or no beat for
   * more than peer_missed_beats x peer_heartbeat_ms, abandons the steps in flight and
   * preempts every running request at once. 0 = off (only the timeouts above). */
  int64_t peer_heartbeat_ms;      /* the peers' --heartbeat-ms (default 0 = off) */
  int32_t peer_missed_beats;      /* default 3 */
  /* The worker's beat that gave the KV geometry at start-up (peer_health_config.worker_seen:
   * the watch starts from it); borrowed until scheduler_actor_start returns; NULL = none. */
  const struct peer_beat *worker_seen;
  /* Optional (NULL): called on the step thread when the engine starts recovering (false: a
   * peer failure or a failed round trip; requests wait for recompute) and when it is back
   * (true: a step was applied after it, or there is nothing to run). llmbus-scheduler turns it
   * into its Heartbeat.ready, which the api server's /health reports. */
  void (*on_ready)(void *user, bool ready);
  void *on_ready_user;
  /* Observability (engine_metrics.h): the scheduler's series go into `metrics` (NULL = none;
   * borrowed) and an engine_stats log line every log_stats_interval_ms (default 10000, as
   * vLLM's; 0 = none). */
  struct llb_metrics *metrics;
  int64_t log_stats_interval_ms;
  /* Durable ingestion (bus/jetstream.h): requests come from the engine's JetStream pull
   * consumer and are acknowledged when they leave the scheduler; a restarted scheduler gets
   * the unfinished ones again. Off: a plain subscription on .requests (lost if it dies). */
  bool durable;                   /* default false */
  int64_t ack_wait_ms;            /* redelivery after this long without an ack (default 1000) */
  int32_t max_deliver;            /* deliveries at most; the next is dead-lettered (default 3:
                                     a scheduler crashing 3 times soon after its start would
                                     otherwise stop `llmbus serve` as a crash loop first) */
  int32_t max_ack_pending;        /* requests held at once (default 4096) */
  int32_t stream_replicas;        /* replicas of the requests stream if this scheduler creates
                                     it (1..5; 0 = 1; 3 on a 3-node cluster: bus/jetstream.h) */
  /* Disaggregated prefill/decode (handoff.h, docs/scaling.md): what the engine serves, announced
   * in SchedulerStats.role for the routers (default BOTH). A request with do_remote_decode is
   * handed over after its first token whatever the role; a DECODE engine remembers aborts of
   * requests it does not run yet, so a hand-off racing its abort is dropped. */
  enum llb_engine_role role;
};

/* Counters since start (monotonic). */
struct scheduler_actor_stats {
  uint64_t num_steps;             /* steps executed on the worker */
  uint64_t num_requests;          /* EngineCoreRequests admitted */
  uint64_t num_rejected;          /* refused (ERROR output) or undecodable */
  uint64_t num_aborted;           /* abort ids received */
  uint64_t num_kv_failures;       /* kv round trips that failed */
  uint64_t num_execute_failures;  /* execute round trips that failed */
  uint64_t num_encoder_failures;  /* encoder_cache round trips that failed */
  uint64_t num_outputs_published; /* EngineCoreOutputs messages */
  uint64_t num_peer_failures;     /* worker / kv_manager deaths or restarts seen in heartbeats */
  uint64_t num_replayed;          /* durable: requests delivered again (a scheduler died) */
  uint64_t num_dead_lettered;     /* durable: requests refused after max_deliver deliveries */
  uint64_t num_redelivered_held;  /* durable: redeliveries of a request still running (dropped) */
  uint64_t num_acked;             /* durable: requests acknowledged (left the scheduler) */
  uint64_t num_intake_stalls;     /* durable: consumer stalls found and subscribed again (durable_intake.h) */
  uint64_t num_resyncs;           /* requests sent whole again for an output processor */
  uint64_t num_history_resumed;   /* replays resumed from the output processor's history */
  uint64_t num_bus_recoveries;    /* own NATS reconnects acted on (steps in flight abandoned) */
  uint64_t num_handoffs_sent;     /* requests handed to a decode engine (handoff.h) */
  uint64_t num_handoffs_send_failed; /* ... whose publish failed (decoded here) */
  uint64_t num_handoffs_received; /* hand-offs admitted from a prefill engine */
  uint64_t num_handoffs_refused;  /* ... refused (malformed, or aborted before they came) */
};

/* Publishes one last SchedulerStats with `draining` set, so that routers send nothing new
 * to this engine while it stops (call when the stop arrives, before the bus drains; safe
 * while the step thread runs). Errors are logged. */
void scheduler_actor_announce_draining(struct scheduler_actor *a);

/* Defaults above, sched_config_init for the scheduler, engine id "0". */
void scheduler_actor_options_init(struct scheduler_actor_options *o);

/* Checks the options and creates the scheduler (nothing subscribed, no thread yet); the
 * strings are copied. Errors: INVALID_ARGUMENT (NULL, no engine id or one that is not a
 * subject token, a timeout or interval not positive), sched_create's, OUT_OF_MEMORY.
 * *out: scheduler_actor_destroy(). */
llb_status scheduler_actor_create(const struct scheduler_actor_options *o, struct scheduler_actor **out);

/* Subscribes .requests (or, with o->durable, the engine's JetStream consumer), .abort and
 * .resync under bus_prefix(bus) and starts the step thread. The first KV step resets the
 * kv_manager (a previous scheduler's blocks are unknown to this one). `bus` is borrowed: stop
 * the actor before bus_destroy, destroy it after. Errors: bus_subscribe's,
 * bus_js_pull_create's (durable), INVALID_ARGUMENT (subjects), OUT_OF_MEMORY, INTERNAL
 * (thread); what started is stopped again. */
llb_status scheduler_actor_start(struct scheduler_actor *a, struct bus *bus);

/* Stops and joins the step thread (a step in flight ends with its timeout at worst).
 * Idempotent; NULL ok; destroy calls it. */
void scheduler_actor_stop(struct scheduler_actor *a);

/* Frees everything; call after the bus is drained or destroyed (no handler may run). NULL ok. */
void scheduler_actor_destroy(struct scheduler_actor *a);

/* Snapshot of the counters; thread-safe. */
void scheduler_actor_stats(const struct scheduler_actor *a, struct scheduler_actor_stats *out);

#endif
