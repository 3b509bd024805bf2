/* The worker's model runner: a persistent input batch across steps, the flattened batch of
 * each step, the forward pass and sampling (vLLM v1 vllm/v1/worker/gpu_model_runner.py
 * `_update_states`, `_prepare_inputs`, `execute_model`; gpu_input_batch.py InputBatch and
 * block_table.py BlockTable).
 *
 * Pure logic: no bus, no FlatBuffers. It reads the plain C view of a SchedulerOutput
 * (schemas/scheduler_output.h) and fills the plain C view of a ModelRunnerOutput
 * (schemas/model_runner_output.h); the actor decodes and encodes around it.
 *
 * Per request the runner keeps its id, prompt + output token ids, sampling params, block
 * table row and num_computed_tokens. Each step it
 *   1. applies the scheduler's updates: drops finished_req_ids and preempted_req_ids, adds
 *      scheduled_new_reqs (also a request resumed after preemption, which comes again as new
 *      with its blocks and num_computed_tokens = 0), applies scheduled_cached_reqs deltas
 *      (block ids appended, or replaced when resumed_from_preemption; num_computed_tokens;
 *      num_output_tokens trims outputs the scheduler did not accept);
 *   2. builds the flattened batch over the requests with scheduled tokens, in persistent
 *      batch order: token ids of [num_computed_tokens, +num_scheduled), positions,
 *      slot_mapping (block_id * block_size + offset), query_start_loc, seq_lens,
 *      block_tables, and logits_indices only for requests whose scheduled range reaches the
 *      end of their known tokens (a partial prefill chunk samples nothing, as vLLM discards it);
 *   3. runs the forward pass (llama_forward over the CPU or the CUDA op table: the
 *      same flattened batch, logits copied back to the host) and samples each such request
 *      with the CPU sampler (sampler_sample, stream 0, output_pos = outputs so far),
 *      appending the token to the request.
 * A pooling request (NewRequestData.pooling_params, vLLM's embed task; pooler.h) gets no
 * logits row: the rows of each chunk its pooling type needs are copied out of the forward as
 * final-norm hidden states (llama_batch.hidden_indices) and added to its pooler state; on
 * the step that completes its prompt its vector goes to pooler_output (num_pooled[i] floats),
 * and nothing is sampled for it. It must come with num_computed_tokens 0 and runs on the CPU
 * device only (UNSUPPORTED on CUDA, blamed on the request).
 * Requests are kept in rows; a removed row is filled with the last one (vLLM's condense).
 *
 * The whole SchedulerOutput is checked before anything changes: an unknown request id, a
 * block id outside [0, num_blocks), a scheduled range beyond the request's known tokens or
 * blocks, or more tokens than max_num_batched_tokens leave the batch as it was and return an
 * error (only OUT_OF_MEMORY may leave it half updated). Not thread-safe: one caller at a time.
 */
#ifndef LLB_GPU_WORKER_MODEL_RUNNER_H
#define LLB_GPU_WORKER_MODEL_RUNNER_H

#include <stdint.h>

#include "actors/gpu_worker/ngram_proposer.h"
#include "base/status.h"
#include "model/reasoning/reasoning.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

/* Where the forward pass runs. The zero value is the CPU. */
enum model_runner_device {
  MODEL_RUNNER_DEVICE_CPU = 0,  /* model/forward/forward.h over the host KV cache */
  MODEL_RUNNER_DEVICE_CUDA = 1, /* llama_forward over backend_cuda_ops(); only in builds with LLB_HAVE_CUDA */
  MODEL_RUNNER_DEVICE_SIM = 2,  /* no forward: each step waits its cost model's time and samples
                                   deterministic tokens (runner_sim.h) */
};

struct sim_cost_model;
struct sim_step_shape;

struct model_runner_config {
  int32_t num_blocks;             /* KV cache blocks (--num-blocks), >= 1; 0 = sized from memory:
                                     CPU from kv_cache_memory_bytes, CUDA from
                                     gpu_memory_utilization of the device memory */
  int32_t block_size;             /* tokens per block (--block-size), >= 1 */
  int32_t max_num_batched_tokens; /* rows of the forward scratch, >= the scheduler's budget */
  int32_t num_threads;            /* forward threads, the caller included, >= 1 (CPU only) */
  int32_t num_threads_decode;     /* threads of a decode step (llama_forward_options.n_threads_decode;
                                     0 = num_threads; CPU only) */
  enum model_runner_device device; /* CPU (default) or CUDA */
  enum backend_kv_dtype kv_cache_dtype; /* the cache's element type (--kv-cache-dtype; default
                                     F16); CPU: all of kernels/backend.h's, CUDA: F16 only */
  int64_t kv_cache_memory_bytes;  /* CPU with num_blocks 0: the cache's bytes, so that its block
                                     count follows kv_cache_dtype (vLLM's --kv-cache-memory-bytes) */
  float gpu_memory_utilization;   /* CUDA with num_blocks 0: fraction (0, 1] of the device's total
                                     memory for weights + scratch + KV cache; 0 = 0.9 */
  const struct gguf_file *gguf;   /* CUDA: the model file, copied to the device during
                                     model_runner_create; SIM: its config and tokenizer are read
                                     (borrowed for the call only); CPU: unused */
  enum llama_matmul_mode matmul;  /* CPU: the engine's packed numerics (default) or llama.cpp's
                                     (LLAMA_MATMUL_GGML, --numerics ggml); CUDA: unused */
  const char *packed_cache_dir;   /* CPU: the host's shared packed-weight cache (llama_forward_options);
                                     NULL/"" = private packing; CUDA: unused */
  int32_t max_model_len;          /* CPU: the engine's context limit (llama_forward_options:
                                     phi3 LongRoPE's factor set); 0 = the model's context_length */
  struct ngram_proposer_config spec; /* speculative decoding (--speculative-config, method ngram):
                                     drafts proposed after each sample and verified when the
                                     scheduler schedules them (runner_spec.c); all 0 = off; CPU only */
  const struct sim_cost_model *sim_cost; /* SIM: the step-time model (copied); NULL = the built-in
                                     one (sim_cost_model_default); other devices: unused */
  int32_t max_lora_rank;          /* CPU: LoRA scratch up to this rank (llama_forward_options; vLLM's
                                     --max-lora-rank); 0 = no adapters (model_runner_set_loras refused) */
};

struct model_runner; /* opaque */

/* Creates a runner. SIM: m is unused (may be NULL); the config and the tokenizer come from
 * cfg->gguf, nothing else is loaded or allocated for the model (runner_sim.h); spec decoding is
 * refused (UNSUPPORTED). CPU: over model m (borrowed; must outlive the runner), allocating the
 * paged KV cache (cfg->num_blocks x cfg->block_size slots) and the forward scratch for
 * cfg->max_num_batched_tokens rows with cfg->num_threads threads. CUDA: m is unused (may be
 * NULL); the model is loaded from cfg->gguf and a forward context over the CUDA op table
 * uploads it to the device (fp16 weights; the file may be closed after), created for
 * cfg->max_num_batched_tokens rows (sequences and logits rows up to that, at most
 * RUNNER_CUDA_MAX_SEQS = 1024; contexts up to the model's context_length), then the device KV cache of cfg->num_blocks blocks, or, with
 * num_blocks 0, of as many as cfg->gpu_memory_utilization leaves (logged, and read back with
 * model_runner_num_blocks). Both: the sampler (on the host).
 * *out: caller frees with model_runner_destroy. Errors: INVALID_ARGUMENT (config),
 * TOO_LARGE / OUT_OF_MEMORY (KV cache, host or device), INTERNAL (threads); CUDA:
 * UNSUPPORTED "built without CUDA" in builds without LLB_HAVE_CUDA, DEVICE naming the CUDA
 * error (no device, driver), UNSUPPORTED for what the CUDA table does not run (naming it),
 * and the model load's errors. Never aborts on a CUDA failure. */
llb_status model_runner_create(const struct llama_model *m, const struct model_runner_config *cfg,
                               struct model_runner **out);

/* OK when runners on device d can be created in this process: always for the CPU and SIM (touches
 * no CUDA); for CUDA, UNSUPPORTED "built without CUDA" in builds without LLB_HAVE_CUDA, else
 * DEVICE with the CUDA runtime's reason when no device is usable (cuda_device_probe). */
llb_status model_runner_device_check(enum model_runner_device d);

/* "cpu", "cuda" or "sim". */
const char *model_runner_device_name(enum model_runner_device d);

/* Frees the runner, its cache and its requests; NULL ok. */
void model_runner_destroy(struct model_runner *r);

/* The caller has no step queued and will wait for the next one: the forward's backend stops
 * holding the cores between steps (llama_forward_ctx_idle: the CPU pool's threads sleep
 * instead of spinning for 2 ms, leaving the machine to the scheduler and the bus that bring
 * the next step). Not between the calls of one step. NULL ok. */
void model_runner_idle(struct model_runner *r);

/* Bytes of the KV cache: 2 (K, V) x layers x num_blocks x block_size x head_count_kv x
 * head_dim x 2 (fp16). */
int64_t model_runner_kv_cache_bytes(const struct model_runner *r);

/* The KV cache's shape, for moving blocks between workers (kv_transfer.h, issue 36). */
struct model_runner_kv_geometry {
  int32_t num_blocks, block_size, num_layers, num_kv_heads, head_dim;
  enum backend_kv_dtype dtype;
  size_t block_bytes; /* one block, every layer's K and V: llama_kv_cache_block_bytes */
};

/* Fills *out (any device). */
void model_runner_kv_geometry(const struct model_runner *r, struct model_runner_kv_geometry *out);

/* Copies block `block_id` of the cache out into dst[len] (len = block_bytes): the layers in order,
 * each its K rows then its V rows (llama_kv_cache_block_read's layout). SIM: zeros (no KV memory).
 * May run on another thread than execute's, for a block no step reads or writes meanwhile.
 * Errors: INVALID_ARGUMENT (block id outside [0, num_blocks), len), UNSUPPORTED (CUDA). */
llb_status model_runner_kv_block_read(const struct model_runner *r, int32_t block_id, void *dst, size_t len);

/* Writes src[len] (the layout above) into block `block_id`. SIM: checks and drops the bytes. Same
 * threads and errors as model_runner_kv_block_read. */
llb_status model_runner_kv_block_write(struct model_runner *r, int32_t block_id, const void *src, size_t len);

/* KV cache blocks of the runner (cfg->num_blocks, or the number sized from device memory). */
int32_t model_runner_num_blocks(const struct model_runner *r);

/* The model's configuration (owned by the model; valid while the runner lives). */
const struct llama_config *model_runner_model_config(const struct model_runner *r);

/* Requests in the persistent batch. */
int32_t model_runner_num_reqs(const struct model_runner *r);

/* Runs one step (see the head comment) and fills *out: version, step = so->step, req_ids of
 * the scheduled requests in batch order, num_sampled (0 or 1 each; 1 + accepted drafts for a
 * request with scheduled_spec_decode_tokens, runner_spec.c), sampled_token_ids, spec_token_ids /
 * num_spec_tokens (the n-gram proposer's drafts for the next step, NULL when none),
 * pooler_output / num_pooled (NULL when no pooling request finished its prompt), and
 * logprobs when any sampled request asked for them (rows = sampled tokens; columns = the
 * sampled token then the top max-n of the batch, as vLLM pads to the largest request;
 * sampled_token_ranks 1-based, vLLM's count of logprobs >= the sampled one). A step with no
 * scheduled token only applies the updates. All arrays and strings of *out belong to the
 * runner and stay valid until the next call or model_runner_destroy.
 * On error *out has no tokens and out->error holds the status, its message and the offending
 * field (e.g. "scheduled_cached_reqs.req_ids[1]"), ready to encode.
 * Errors: NOT_FOUND (a delta or scheduled entry for an unknown request), INVALID_ARGUMENT
 * (block id out of range, block_size different from the runner's, a scheduled range past the
 * request's tokens or blocks, duplicate ids, bad sampling params), TOO_LARGE (more than
 * max_num_batched_tokens, or more blocks than num_blocks for one request), UNSUPPORTED
 * (a modality without an encoder), OUT_OF_MEMORY, and the forward pass' and sampler's errors.
 *
 * Multimodal (mm_encoder.h): new requests' mm_features give placeholder ranges and content
 * hashes (data optional); free_encoder_mm_hashes are dropped from the encoder-output cache,
 * then every scheduled_encoder_inputs item (with its data) is encoded into it; each
 * scheduled range then takes the overlapping rows of its items' cached outputs instead of
 * the token embeddings (llama_batch.input_embeds + embeds_mask). An overlapping item whose
 * output is not cached is an error (NOT_FOUND). */
llb_status model_runner_execute(struct model_runner *r, const struct llb_scheduler_output *so,
                                struct llb_model_runner_output *out);

/* The flattened batch of the last model_runner_execute that ran the forward pass (all arrays
 * owned by the runner, valid until the next call); num_tokens 0 before any. For tests and
 * diagnostics. */
const struct llama_batch *model_runner_last_batch(const struct model_runner *r);

/* The quantities the sim's cost model prices (runner_sim.h) of the last model_runner_execute
 * that ran a batch, on any device: tokens, sequences, sampled rows (random ones apart),
 * attended pairs, context tokens; all 0 when it ran none. What `--step-log` records of the real
 * worker's steps, and what `llmbus-kernel-bench --fit-steps` fits a model to. */
struct sim_step_shape model_runner_last_step_shape(const struct model_runner *r);

/* Structured output (runner_so.h): gives the runner the vocabulary its masks are computed
 * over (so_vocab_from_tokenizer of the model's tokenizer; ownership taken, even on failure).
 * Without one, a request with structured_outputs fails its step (UNSUPPORTED, named).
 * Each step, the sampled rows of constrained requests get their grammar's bitmask (computed on
 * a helper thread while the forward pass runs) applied to their logits before sampling
 * (disallowed tokens -inf, before logit_bias, penalties and logprobs, as vLLM), and a
 * request's matcher takes its outputs (replayed from the start on resume). Call before the
 * first execute. Errors: OUT_OF_MEMORY. */
struct so_vocab;
llb_status model_runner_set_structured_vocab(struct model_runner *r, struct so_vocab *vocab);

/* The LoRA adapters the runner serves (model/forward/lora.h): adapters[i] (borrowed: must outlive
 * the runner) for a NewRequestData whose lora_request.lora_int_id is ids[i]. A new request
 * naming an id not among them fails alone (NOT_FOUND, blamed on it: failed_req_id), never the
 * step; its rows run with its adapter (llama_batch.seq_loras). CPU only, created with
 * max_lora_rank >= every adapter's rank. Replaces the previous set, before the first execute or
 * between two (on the thread that calls execute): a request admitted before keeps the adapter it
 * was admitted with until it ends, so an adapter left out stays borrowed while
 * model_runner_lora_in_use says so. Errors: UNSUPPORTED (not the CPU device), INVALID_ARGUMENT (an id < 1 or repeated, a
 * rank over max_lora_rank), OUT_OF_MEMORY. */
struct llama_lora;
llb_status model_runner_set_loras(struct model_runner *r, const int32_t *ids, const struct llama_lora *const *adapters,
                                  int32_t n);

/* Whether a live request of r (admitted and neither finished nor preempted) runs with `adapter`:
 * an adapter unloaded at run time is freed only once this is false. */
bool model_runner_lora_in_use(const struct model_runner *r, const struct llama_lora *adapter);

/* The token ids of reasoning parser p's markers (runner_so_set_reasoning_markers); after
 * model_runner_set_structured_vocab. */
void model_runner_set_reasoning_markers(struct model_runner *r, enum reasoning_parser p,
                                        const struct reasoning_marker_ids *m);

/* Of the last step that sampled a constrained request: the helper thread's mask time (syncs +
 * bitmasks) and how long sampling waited for it after the forward pass, in seconds; both -1
 * when the last step had no constrained row. */
void model_runner_last_mask_seconds(const struct model_runner *r, double *mask_seconds, double *wait_seconds);

/* Installs the "image" encoder (model/vision/clip.h; borrowed, outlives r): mm_encoder.h. */
struct clip_model;
void model_runner_set_image_encoder(struct model_runner *r, struct clip_model *clip);

/* Encoder outputs held (items cached by mm_hash), and items encoded since creation. */
int32_t model_runner_num_encoder_outputs(const struct model_runner *r);
uint64_t model_runner_num_encoded(const struct model_runner *r);

#endif
