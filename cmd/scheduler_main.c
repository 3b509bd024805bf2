/* llmbus-scheduler: EngineCore's step loop on llm.engine.<eid>.* (actors/scheduler). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "actors/scheduler/actor.h"
#include "cmd/actor/scheduler_options.h"
#include "base/log.h"
#include "cmd/actor/actor_main.h"
#include "cmd/actor/spec_config.h"

struct sched_main {
  struct scheduler_actor_options cfg;
  int32_t max_model_len;  /* 0 = min(model context, 4096) */
  int32_t vocab_size;     /* 0 = the model's */
  const char *policy;
  bool no_prefix_caching;
  bool no_async_scheduling;
  const char *speculative_config; /* JSON, "" = off */
  const char *role;               /* prefill | decode | both */
  bool blocks_from_worker; /* --num-blocks 0 */
  struct scheduler_actor *actor;
};

#define SCHED_GEOMETRY_WAIT_MS 300000 /* a worker loading a large model onto a GPU */

static llb_status sched_configure(struct actor_main *am, void *user) {
  struct sched_main *m = user;
  struct ngram_proposer_config spec;
  llb_status st = spec_config_parse(m->speculative_config, &spec);
  if (!st) st = llb_engine_role_parse(m->role, &m->cfg.role);
  if (st) return st;
  const struct scheduler_flags f = {
      .policy = m->policy, .no_prefix_caching = m->no_prefix_caching, .no_async_scheduling = m->no_async_scheduling,
      .num_speculative_tokens = spec.num_speculative_tokens, .max_model_len = m->max_model_len,
      .vocab_size = m->vocab_size, .model_path = am->common.model_path, .engine_id = am->common.engine_id,
      .instance = am->common.instance, .heartbeat_ms = am->common.heartbeat_ms};
  return scheduler_actor_options_resolve(&f, &m->cfg, &m->blocks_from_worker);
}

/* The engine recovering from a worker / kv_manager failure is not ready: the heartbeat says
 * so, and the api server's /health answers 503 until it is back. */
static void sched_on_ready(void *user, bool ready) { actor_main_set_ready(user, ready); }

/* SIGTERM: tell the routers first, so no new request is sent here while the engine stops. */
static void sched_before_drain(void *user) {
  struct sched_main *m = user;
  scheduler_actor_announce_draining(m->actor);
}

static llb_status sched_start(struct actor_main *am, void *user) {
  struct sched_main *m = user;
  m->cfg.metrics = am->metrics;
  m->cfg.sched.hash_key = am->hash_key; /* the deployment's: every restart hashes blocks alike */
  m->cfg.on_ready = sched_on_ready;
  m->cfg.on_ready_user = am;
  if (m->blocks_from_worker) { /* --num-blocks 0: the engine's worker says (its heartbeat) */
    int32_t nb, bs;
    llb_status st = actor_main_wait_kv_geometry(am, SCHED_GEOMETRY_WAIT_MS, &nb, &bs);
    if (st != LLB_STATUS_OK) return st;
    if (bs != m->cfg.sched.block_size)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "the worker's block size is %d, --block-size %d", bs,
                      m->cfg.sched.block_size);
    m->cfg.sched.num_blocks = nb;
  }
  struct peer_beat worker_seen; /* the watch of the worker starts from the beat just taken */
  m->cfg.worker_seen = actor_main_kv_geometry_worker(am, &worker_seen) ? &worker_seen : NULL;
  llb_status st = scheduler_actor_create(&m->cfg, &m->actor);
  if (st == LLB_STATUS_OK) st = scheduler_actor_start(m->actor, am->bus);
  if (st == LLB_STATUS_OK) bus_set_before_drain(am->bus, sched_before_drain, m);
  return st;
}

static void sched_stop(struct actor_main *am, void *user) {
  (void)am;
  struct sched_main *m = user;
  scheduler_actor_stop(m->actor);
}

static void sched_destroy_hook(struct actor_main *am, void *user) {
  (void)am;
  struct sched_main *m = user;
  if (m->actor) {
    struct scheduler_actor_stats c;
    scheduler_actor_stats(m->actor, &c);
    LLB_LOG_INFO("scheduler_counters", "steps=%llu requests=%llu rejected=%llu aborted=%llu "
                 "kv_failures=%llu execute_failures=%llu peer_failures=%llu outputs=%llu "
                 "replayed=%llu dead_lettered=%llu redelivered_held=%llu acked=%llu intake_stalls=%llu resyncs=%llu "
                 "bus_recoveries=%llu history_resumed=%llu handoffs_sent=%llu handoffs_send_failed=%llu "
                 "handoffs_received=%llu handoffs_refused=%llu",
                 (unsigned long long)c.num_steps, (unsigned long long)c.num_requests,
                 (unsigned long long)c.num_rejected, (unsigned long long)c.num_aborted,
                 (unsigned long long)c.num_kv_failures, (unsigned long long)c.num_execute_failures,
                 (unsigned long long)c.num_peer_failures, (unsigned long long)c.num_outputs_published,
                 (unsigned long long)c.num_replayed, (unsigned long long)c.num_dead_lettered,
                 (unsigned long long)c.num_redelivered_held, (unsigned long long)c.num_acked,
                 (unsigned long long)c.num_intake_stalls,
                 (unsigned long long)c.num_resyncs, (unsigned long long)c.num_bus_recoveries,
                 (unsigned long long)c.num_history_resumed, (unsigned long long)c.num_handoffs_sent,
                 (unsigned long long)c.num_handoffs_send_failed, (unsigned long long)c.num_handoffs_received,
                 (unsigned long long)c.num_handoffs_refused);
  }
  scheduler_actor_destroy(m->actor);
  m->actor = NULL;
}

int main(int argc, char **argv) {
  struct sched_main m = {.policy = "fcfs", .speculative_config = "", .role = "both"};
  scheduler_actor_options_init(&m.cfg);
  struct sched_config *c = &m.cfg.sched;
  c->num_blocks = 1024;
  c->block_size = 16;
  c->max_num_seqs = 64;
  c->max_num_batched_tokens = 512;
  c->enable_chunked_prefill = true;
  const struct flag flags[] = {
      {.name = "num-blocks", .kind = FLAG_KIND_INT32, .target = &c->num_blocks,
       .help = "KV cache blocks (same value for scheduler, kv_manager and worker); 0 = the worker's, "
               "from its heartbeat (e.g. sized from GPU memory)"},
      {.name = "block-size", .kind = FLAG_KIND_INT32, .target = &c->block_size,
       .help = "tokens per block"},
      {.name = "max-num-seqs", .kind = FLAG_KIND_INT32, .target = &c->max_num_seqs,
       .help = "running requests at most"},
      {.name = "max-num-waiting", .kind = FLAG_KIND_INT32, .target = &c->max_num_waiting,
       .help = "waiting requests at most; more are refused with QUEUE_FULL (0 = unlimited)"},
      {.name = "max-num-batched-tokens", .kind = FLAG_KIND_INT32, .target = &c->max_num_batched_tokens,
       .help = "token budget per step (chunked prefill)"},
      {.name = "max-model-len", .kind = FLAG_KIND_INT32, .target = &m.max_model_len,
       .help = "prompt + output tokens at most; 0 = min(model context, 4096)"},
      {.name = "vocab-size", .kind = FLAG_KIND_INT32, .target = &m.vocab_size,
       .help = "token ids of requests must be below it; 0 = the model's vocabulary (without --model and "
               "with --max-model-len: ids are only checked >= 0)"},
      {.name = "policy", .kind = FLAG_KIND_STRING, .target = &m.policy,
       .help = "fcfs|priority"},
      {.name = "no-prefix-caching", .kind = FLAG_KIND_BOOL, .target = &m.no_prefix_caching,
       .help = "never look up the prefix cache"},
      {.name = "enable-lora", .kind = FLAG_KIND_BOOL, .target = &c->enable_lora,
       .help = "admit requests that run a LoRA adapter (vLLM's; the worker serves them: --lora-modules)"},
      {.name = "max-loras", .kind = FLAG_KIND_INT32, .target = &c->max_loras, .min = 1, .max = 1024,
       .help = "distinct adapters in one step at most (vLLM's; a request whose adapter would exceed it waits)"},
      {.name = "speculative-config", .kind = FLAG_KIND_STRING, .target = &m.speculative_config,
       .help = "speculative decoding, vLLM's JSON: {\"method\":\"ngram\",\"num_speculative_tokens\":K,"
               "\"prompt_lookup_max\":N,\"prompt_lookup_min\":M} (the same on the worker; turns async scheduling off)"},
      {.name = "no-async-scheduling", .kind = FLAG_KIND_BOOL, .target = &m.no_async_scheduling,
       .help = "synchronous steps: apply step N's output before sending step N+1"},
      {.name = "encoder-cache-size", .kind = FLAG_KIND_INT32, .target = &c->encoder_cache_size,
       .help = "encoder-output cache, embedding rows (same value for the encoder_cache actor)"},
      {.name = "encoder-compute-budget", .kind = FLAG_KIND_INT32, .target = &c->encoder_compute_budget,
       .help = "embedding rows encoded per step at most (0 = max-num-batched-tokens)"},
      {.name = "kv-timeout-ms", .kind = FLAG_KIND_INT64, .target = &m.cfg.kv_timeout_ms,
       .help = "KVStep round trip limit; beyond it every running request is preempted"},
      {.name = "execute-timeout-ms", .kind = FLAG_KIND_INT64, .target = &m.cfg.execute_timeout_ms,
       .help = "SchedulerOutput round trip limit; beyond it every running request is preempted"},
      {.name = "peer-heartbeat-ms", .kind = FLAG_KIND_INT64, .target = &m.cfg.peer_heartbeat_ms,
       .help = "heartbeat interval of the engine's gpu_worker and kv_manager; 0 = this actor's "
               "--heartbeat-ms, -1 = no failure detection from heartbeats (timeouts only)"},
      {.name = "peer-missed-beats", .kind = FLAG_KIND_INT32, .target = &m.cfg.peer_missed_beats,
       .help = "a gpu_worker / kv_manager silent for more than this many intervals is dead: the steps "
               "in flight are abandoned and every running request recomputed (default 3)"},
      {.name = "durable", .kind = FLAG_KIND_BOOL, .target = &m.cfg.durable,
       .help = "take requests from the engine's durable JetStream consumer (nats-server -js): each is "
               "acknowledged when it finished, so a restarted scheduler runs the unfinished ones again"},
      {.name = "ack-wait-ms", .kind = FLAG_KIND_INT64, .target = &m.cfg.ack_wait_ms,
       .help = "durable: a request held by a scheduler that stopped answering is delivered again after "
               "this long (default 1000: a restarted scheduler resumes its requests about 1 s after the "
               "kill; in-progress acks every quarter of it)"},
      {.name = "max-deliver", .kind = FLAG_KIND_INT32, .target = &m.cfg.max_deliver,
       .help = "durable: deliveries of one request at most; the next goes to "
               "<prefix>.engine.<eid>.dead_letter and its client gets an error (default 3)"},
      {.name = "stream-replicas", .kind = FLAG_KIND_INT32, .target = &m.cfg.stream_replicas,
       .help = "durable: replicas of the requests stream when this scheduler creates it (default 1; 3 on "
               "a 3-node NATS cluster, so the stream and the engine's consumer outlive a node)"},
      {.name = "stats-interval-ms", .kind = FLAG_KIND_INT64, .target = &m.cfg.stats_interval_ms,
       .help = "SchedulerStats period on <prefix>.engine.<eid>.stats while there is work (default 1000)"},
      {.name = "role", .kind = FLAG_KIND_STRING, .target = &m.role,
       .help = "prefill | decode | both (default): what this engine serves, announced in its SchedulerStats; "
               "routers send disaggregated requests' prompts to prefill engines and hand them to decode "
               "engines after the first token (docs/scaling.md)"},
      {.name = "kv-transfer", .kind = FLAG_KIND_BOOL, .target = &c->kv_transfer,
       .help = "disaggregated prefill/decode: a handed-off request's KV blocks are exported to its decode engine "
               "and a hand-off's KV is fetched from its prefill engine (the worker moves them: its --kv-transfer) "
               "instead of computed again"},
      {.name = "log-stats-interval-ms", .kind = FLAG_KIND_INT64, .target = &m.cfg.log_stats_interval_ms,
       .help = "one event=engine_stats log line (throughput, running, waiting, KV usage, prefix hit rate) "
               "this often; 0 = none"},
  };
  const struct actor_main_spec spec = {
      .actor = "scheduler",
      .program = "llmbus-scheduler",
      .summary = "EngineCore: schedules requests from <prefix>.engine.<eid>.requests, drives the "
                 "kv_manager and the worker, publishes EngineCoreOutputs.",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .configure = sched_configure,
      .start = sched_start,
      .stop = sched_stop,
      .destroy = sched_destroy_hook,
      .user = &m,
      .engine_scoped = true, /* its beats reach its engine's peers on the engine's subject */
  };
  return actor_main_exec(&spec, argc, argv);
}
