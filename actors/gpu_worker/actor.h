/* The gpu_worker actor: binds the model runner (model_runner.h) to the bus.
 *
 * Subscribes <prefix>.engine.<eid>.execute (no queue group: the batch is per-worker state, so
 * a second worker on the same engine gets every step too, and the scheduler takes the first
 * reply). Each request is a SchedulerOutput; it is decoded (verified), run as one step and
 * answered with a ModelRunnerOutput whose step is the request's. A malformed message, an
 * inconsistent step or a failed forward pass is answered with the error field set (step 0
 * when the message could not be decoded), counted and logged; the actor keeps serving.
 * A message without a reply subject is counted and logged.
 *
 * With kv_transfer (issue 36) each step's SchedulerOutput.kv_connector_metadata goes to the KV
 * connector before the step (kv_connector_before_step, with the step's finished and preempted ids)
 * and the reply carries the transfers that ended since the last reply in
 * ModelRunnerOutput.kv_connector_output (also on an error reply).
 *
 * Threading: one subscription, so steps run one at a time on its delivery thread (the
 * runner is not thread-safe and needs no lock). Counters are atomic. The KV connector serves
 * fetches on its own subscription's thread and fetches on a thread of its own (kv_transfer.h).
 */
#ifndef LLB_ACTORS_GPU_WORKER_ACTOR_H
#define LLB_ACTORS_GPU_WORKER_ACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/gpu_worker/kv_transfer.h"
#include "actors/gpu_worker/lora_adapters.h"
#include "actors/gpu_worker/model_runner.h"
#include "bus/bus.h"
#include "base/status.h"

struct gpu_worker_actor_options {
  const char *model_path;         /* GGUF of a LLaMA-family model; required */
  const char *engine_id;          /* <eid>; NULL = "0" */
  int32_t num_blocks;             /* KV cache blocks (same value as kv_manager, scheduler);
                                     cuda: 0 = sized from gpu_memory_utilization (logged) */
  int32_t block_size;             /* tokens per block (same value as kv_manager, scheduler) */
  int32_t max_num_batched_tokens; /* forward scratch rows, >= the scheduler's budget */
  int32_t num_threads;            /* forward threads, >= 1 (cpu) */
  int32_t num_threads_decode;     /* of those, for steps of <= LLAMA_DECODE_MAX_TOKENS tokens
                                     (llama_forward_options.n_threads_decode); 0 = num_threads */
  enum model_runner_device device; /* cpu (zero value) or cuda */
  float gpu_memory_utilization;   /* cuda: (0, 1], 0 = 0.9 (model_runner_config) */
  enum backend_kv_dtype kv_cache_dtype; /* the KV cache's element type (model_runner_config) */
  int64_t kv_cache_memory_bytes;  /* cpu with num_blocks 0: the cache's size (model_runner_config) */
  enum llama_matmul_mode matmul;  /* cpu: packed (default) or ggml numerics (model_runner_config) */
  const char *packed_cache_dir;   /* cpu: shared packed-weight cache directory (model/forward/forward.h); NULL/"" = off */
  struct ngram_proposer_config spec; /* speculative decoding (--speculative-config); all 0 = off */
  int32_t max_model_len;          /* cpu: the engine's context limit, 0 = the model's (model_runner_config) */
  const char *mmproj_path;        /* GGUF mmproj (model/vision/clip.h): the "image" encoder; its output width
                                     must equal the model's hidden size. NULL/"" = images refused */
  const struct sim_cost_model *sim_cost; /* sim: the step-time model (runner_sim.h; copied);
                                     NULL = the built-in one */
  const struct lora_modules *lora_modules; /* --lora-modules (lora_modules.h; borrowed for the call):
                                     each loaded and checked against the model at create (cpu
                                     only); NULL or none = the base model only */
  int32_t max_lora_rank;          /* vLLM's --max-lora-rank: adapters of higher rank are refused */
  const char *lora_dir;           /* --lora-dir: LoRAUpdate loads adapters from files beneath it at run
                                     time (<prefix>.lora.update; cpu only); NULL/"" = none */
  bool kv_transfer;               /* disaggregated prefill/decode (issue 36; kv_transfer.h): the KV connector
                                     serves <prefix>.engine.<eid>.kv_fetch and fetches other engines' blocks
                                     (cpu and sim; cuda refuses at create). Off: a SchedulerOutput's
                                     reqs_to_send are answered finished_sending and its reqs_to_recv
                                     failed_recving at once (nothing exported, nothing fetched) */
  struct kv_connector_config kv_config; /* with kv_transfer: limits and timeouts (engine_id is set
                                     from engine_id); all 0 = the defaults */
  const char *step_log_path;      /* NULL/"" = none; else each step that ran a batch appends one JSON
                                     line: its shape (model_runner_last_step_shape) and the seconds
                                     model_runner_execute took (llmbus-kernel-bench --fit-steps) */
};

/* Counters since start (monotonic). */
struct gpu_worker_actor_stats {
  uint64_t steps;         /* SchedulerOutputs answered without error */
  uint64_t step_errors;   /* well-formed SchedulerOutputs answered with an error */
  uint64_t malformed;     /* undecodable messages */
  uint64_t no_reply;      /* messages without a reply subject */
  uint64_t reply_errors;  /* replies that could not be encoded or sent (each logged) */
  uint64_t tokens;        /* tokens run through the forward pass */
};

struct gpu_worker_actor;

/* The adapters the worker serves ([*num] name, lora_int_id, rank; a run-time one dynamic with its
 * path and owner): what its Heartbeat announces (Heartbeat.lora_adapters). Locks the set: the list
 * is valid until gpu_worker_actor_loras_unlock, which must follow (no other call between). The
 * void * forms are actor_main_set_lora_source's. */
const struct llb_lora_adapter *gpu_worker_actor_loras_lock(void *actor, int32_t *num);
void gpu_worker_actor_loras_unlock(void *actor);

/* Whether the worker takes LoRAUpdates (created with a --lora-dir) or serves --lora-modules. */
bool gpu_worker_actor_serves_loras(const struct gpu_worker_actor *a);


/* Opens o->model_path, loads the model and creates the model runner on o->device (KV cache
 * of num_blocks x block_size, logged in MB with the device). sim: only the config and the
 * tokenizer are read (no weights, no KV memory), and the cost model is logged (gpu_worker_sim). cuda: the device is probed
 * first (model_runner_device_check), the weights go to the device only (no host copy) and
 * the file is closed once loaded. Errors: INVALID_ARGUMENT (options), UNSUPPORTED ("built
 * without CUDA") / DEVICE (the CUDA runtime's reason), the GGUF reader's / model loader's
 * error naming the file or tensor, those of model_runner_create.
 * *out: gpu_worker_actor_destroy(). */
llb_status gpu_worker_actor_create(const struct gpu_worker_actor_options *o, struct gpu_worker_actor **out);

/* The KV connector (o->kv_transfer), or NULL: its counters (kv_connector_stats) for tests and the
 * bench. Owned by the actor. */
struct kv_connector *gpu_worker_actor_kv_connector(const struct gpu_worker_actor *a);

/* Subscribes the execute handler on `bus` (borrowed; destroy the bus before the actor), and with
 * a --lora-dir the LoRAUpdate handler on <prefix>.lora.update (every worker, no queue group): a
 * load or unload (lora_adapters_add / _remove, the same checks as --lora-modules at start)
 * answered with a LoRAUpdateReply naming the engine; the runner takes the new set before its
 * next step, requests admitted with an unloaded adapter finish with it, and a heartbeat goes out
 * at once. With kv_transfer, the KV connector's kv_fetch service and fetcher (kv_connector_start).
 * Errors: those of bus_subscribe and bus_subject_engine, kv_connector_start's. */
llb_status gpu_worker_actor_start(struct gpu_worker_actor *a, struct bus *bus);

/* Stops taking steps: unsubscribes the execute handler (a step being run still gets its
 * reply). Call before bus_destroy; after the bus drained there is nothing left to stop.
 * Idempotent; NULL ok. */
void gpu_worker_actor_stop(struct gpu_worker_actor *a);

/* Counters, read atomically one by one. */
void gpu_worker_actor_stats(const struct gpu_worker_actor *a, struct gpu_worker_actor_stats *out);

/* KV blocks of the worker's cache: o->num_blocks, or the number sized from device memory
 * when that was 0 (the engine's geometry, announced to the scheduler and kv_manager). */
int32_t gpu_worker_actor_num_blocks(const struct gpu_worker_actor *a);

/* Exports the structured-output mask histograms (llmbus:structured_output_mask_seconds: the
 * helper thread's time per step; llmbus:structured_output_mask_wait_seconds: how long
 * sampling waited for it after the forward pass) in registry m (borrowed; outlives the
 * actor's steps). Observed on every step with a constrained request. With kv_transfer also the
 * KV connector's counters, read at each scrape: llmbus:kv_transfer_sent_bytes_total,
 * _received_bytes_total, _receives_total{result=finished|failed},
 * _fetches_total{result=served|refused}, _exports_total{result=accepted|refused},
 * _chunk_retries_total. Errors: OUT_OF_MEMORY. */
struct llb_metrics;
llb_status gpu_worker_actor_register_metrics(struct gpu_worker_actor *a, struct llb_metrics *m);

/* Frees the actor. Call after bus_destroy() of the bus it was started on. NULL ok. */
void gpu_worker_actor_destroy(struct gpu_worker_actor *a);

#endif
