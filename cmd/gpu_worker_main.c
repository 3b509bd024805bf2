/* llmbus-gpu-worker: SchedulerOutput → forward pass + sampling → ModelRunnerOutput on
 * <prefix>.engine.<eid>.execute (actors/gpu_worker/actor.h). Flags: the common actor flags
 * (cmd/actor/actor_main.h) plus --num-blocks, --block-size (the same values as the kv_manager's and
 * the scheduler's), --max-num-batched-tokens (forward scratch; >= the scheduler's),
 * --threads, --device cpu|cuda|sim (--sim-cost FILE: the sim's step-time model) and
 * --gpu-memory-utilization (cuda: the fraction of device
 * memory for weights, scratch and KV cache when --num-blocks is 0). Every heartbeat carries
 * the KV geometry it allocated, which a scheduler / kv_manager started with --num-blocks 0
 * adopts (cmd/actor/actor_main.h, actor_main_wait_kv_geometry).
 * --device cuda without a usable device (or in a build without CUDA) ends at start with exit
 * 1 and one start_failed log line naming the CUDA error; --device cpu never calls CUDA. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "actors/gpu_worker/actor.h"
#include "actors/gpu_worker/lora_modules.h"
#include "actors/gpu_worker/runner_sim.h"
#include "cmd/actor/actor_main.h"
#include "cmd/actor/spec_config.h"

struct worker_main {
  int32_t num_blocks, block_size, max_num_batched_tokens, threads;
  int32_t decode_threads; /* 0 = threads */
  int32_t max_model_len; /* 0 = the model's context_length */
  const char *device;
  const char *numerics;
  const char *packed_cache_dir;
  const char *speculative_config; /* JSON, "" = off */
  struct ngram_proposer_config spec;
  const char *mmproj;
  const char *sim_cost_path; /* "" = the built-in model */
  const char *step_log;      /* "" = none */
  struct sim_cost_model sim_cost;
  bool has_sim_cost;
  double gpu_memory_utilization;
  const char *kv_cache_dtype;      /* vLLM's names (llama_kv_dtype_parse) */
  int64_t kv_cache_memory_bytes;   /* > 0: the cache's size, --num-blocks ignored */
  enum backend_kv_dtype kv_dtype;
  enum model_runner_device dev;
  enum llama_matmul_mode matmul;
  bool enable_lora;
  struct flag_list lora_values;    /* --lora-modules as given */
  struct lora_modules loras;       /* parsed */
  int32_t max_lora_rank;
  const char *lora_dir;            /* --lora-dir */
  bool kv_transfer;                /* the KV connector (actors/gpu_worker/kv_transfer.h) */
  struct gpu_worker_actor *actor;
};

static llb_status worker_main_configure(struct actor_main *am, void *user) {
  (void)am;
  struct worker_main *m = user;
  if (strcmp(m->device, "cpu") == 0)
    m->dev = MODEL_RUNNER_DEVICE_CPU;
  else if (strcmp(m->device, "cuda") == 0)
    m->dev = MODEL_RUNNER_DEVICE_CUDA;
  else if (strcmp(m->device, "sim") == 0)
    m->dev = MODEL_RUNNER_DEVICE_SIM;
  else
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--device %s: one of cpu, cuda, sim", m->device);
  if (m->sim_cost_path[0] && m->dev != MODEL_RUNNER_DEVICE_SIM)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--sim-cost is for --device sim");
  if (m->sim_cost_path[0]) {
    llb_status cst = sim_cost_model_load(m->sim_cost_path, &m->sim_cost);
    if (cst) return cst;
    m->has_sim_cost = true;
  }
  if (strcmp(m->numerics, "packed") == 0)
    m->matmul = LLAMA_MATMUL_PACKED;
  else if (strcmp(m->numerics, "ggml") == 0)
    m->matmul = LLAMA_MATMUL_GGML;
  else
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--numerics %s: one of packed, ggml", m->numerics);
  llb_status sst = spec_config_parse(m->speculative_config, &m->spec);
  if (sst) return sst;
  if (!(m->gpu_memory_utilization > 0.0 && m->gpu_memory_utilization <= 1.0))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--gpu-memory-utilization %g: in (0, 1]", m->gpu_memory_utilization);
  llb_status kst = llama_kv_dtype_parse(m->kv_cache_dtype, &m->kv_dtype);
  if (kst) return kst;
  if (m->kv_dtype != BACKEND_KV_DTYPE_F16 && m->dev == MODEL_RUNNER_DEVICE_CUDA)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--kv-cache-dtype %s: the cuda backend's cache is fp16 only",
                    m->kv_cache_dtype);
  if (m->kv_cache_memory_bytes < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--kv-cache-memory-bytes %lld: >= 0", (long long)m->kv_cache_memory_bytes);
  if (m->kv_cache_memory_bytes > 0 && m->dev == MODEL_RUNNER_DEVICE_CPU) m->num_blocks = 0; /* sized from it */
  const int32_t min_blocks = m->dev == MODEL_RUNNER_DEVICE_CUDA || (m->num_blocks == 0 && m->kv_cache_memory_bytes > 0) ? 0 : 1;
  if (m->num_blocks < min_blocks || m->block_size < 1 || m->max_num_batched_tokens < 1 || m->threads < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "--num-blocks %d, --block-size %d, --max-num-batched-tokens %d, --threads %d: each must be >= 1 "
                    "(--num-blocks 0: sized from device memory, --device cuda only)",
                    m->num_blocks, m->block_size, m->max_num_batched_tokens, m->threads);
  if (m->decode_threads < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--decode-threads %d: >= 1 (0: as --threads)", m->decode_threads);
  if (m->decode_threads == 0 || m->decode_threads > m->threads) m->decode_threads = m->threads;
  if (m->max_model_len < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--max-model-len %d: >= 0 (0 = the model's context length)",
                    m->max_model_len);
  if (m->lora_values.num && !m->enable_lora)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-modules needs --enable-lora (LoRA is not enabled)");
  if (m->lora_dir && m->lora_dir[0] && !m->enable_lora)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--lora-dir needs --enable-lora (LoRA is not enabled)");
  llb_status lst = lora_modules_parse(m->lora_values.items, m->lora_values.num, &m->loras);
  if (lst) lora_modules_free(&m->loras); /* the values it took before the bad one */
  return lst;
}

static llb_status worker_main_start(struct actor_main *am, void *user) {
  struct worker_main *m = user;
  const struct gpu_worker_actor_options o = {
      .model_path = am->common.model_path, .engine_id = am->common.engine_id,
      .num_blocks = m->num_blocks, .block_size = m->block_size,
      .max_num_batched_tokens = m->max_num_batched_tokens, .num_threads = m->threads,
      .num_threads_decode = m->decode_threads,
      .device = m->dev, .gpu_memory_utilization = (float)m->gpu_memory_utilization, .matmul = m->matmul,
      .kv_cache_dtype = m->kv_dtype, .kv_cache_memory_bytes = m->kv_cache_memory_bytes,
      .packed_cache_dir = m->packed_cache_dir, .spec = m->spec, .mmproj_path = m->mmproj,
      .max_model_len = m->max_model_len, .sim_cost = m->has_sim_cost ? &m->sim_cost : NULL,
      .step_log_path = m->step_log, .lora_modules = &m->loras, .max_lora_rank = m->max_lora_rank,
      .lora_dir = m->lora_dir, .kv_transfer = m->kv_transfer};
  llb_status st = gpu_worker_actor_create(&o, &m->actor);
  if (st) return st;
  if (am->metrics && (st = gpu_worker_actor_register_metrics(m->actor, am->metrics))) return st;
  /* every heartbeat carries the geometry: --num-blocks 0 scheduler / kv_manager wait for it */
  actor_main_set_kv_geometry(am, gpu_worker_actor_num_blocks(m->actor), m->block_size);
  /* what the front doors resolve `model` against */
  actor_main_set_lora_source(am, gpu_worker_actor_loras_lock, gpu_worker_actor_loras_unlock, m->actor);
  if ((st = gpu_worker_actor_start(m->actor, am->bus))) return st;
  if (gpu_worker_actor_serves_loras(m->actor) && ((st = actor_main_answer_new_peers(am, "input_processor")) ||
                    (st = actor_main_answer_new_peers(am, "api_server"))))
    return st;
  return actor_main_answer_hellos(am);
}

static void worker_main_stop(struct actor_main *am, void *user) {
  (void)am;
  struct worker_main *m = user;
  gpu_worker_actor_stop(m->actor);
}

static void worker_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct worker_main *m = user;
  gpu_worker_actor_destroy(m->actor);
  m->actor = NULL;
  lora_modules_free(&m->loras);
}

int main(int argc, char **argv) {
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  struct worker_main m = {.num_blocks = 1024, .block_size = 16, .max_num_batched_tokens = 512,
                          .threads = ncpu > 0 ? (int32_t)ncpu : 1, .decode_threads = 0, .device = "cpu", .numerics = "packed", .packed_cache_dir = "", .speculative_config = "",
                          .sim_cost_path = "", .step_log = "", .gpu_memory_utilization = 0.9,
                          .kv_cache_dtype = "auto", .max_lora_rank = 16};
  const struct flag flags[] = {
      {.name = "kv-transfer", .kind = FLAG_KIND_BOOL, .target = &m.kv_transfer,
       .help = "disaggregated prefill/decode: export handed-off requests' KV blocks on "
               "<prefix>.engine.<eid>.kv_fetch and fetch hand-offs' blocks from their prefill engine's worker "
               "(CPU and sim runners; the scheduler's --kv-transfer says which)"},
      {.name = "num-blocks", .kind = FLAG_KIND_INT32, .target = &m.num_blocks,
       .help = "KV cache blocks (same as kv_manager and scheduler)"},
      {.name = "block-size", .kind = FLAG_KIND_INT32, .target = &m.block_size,
       .help = "tokens per KV block (same as kv_manager and scheduler)"},
      {.name = "max-num-batched-tokens", .kind = FLAG_KIND_INT32, .target = &m.max_num_batched_tokens,
       .help = "tokens per step the forward scratch holds (>= the scheduler's)"},
      {.name = "threads", .kind = FLAG_KIND_INT32, .target = &m.threads,
       .help = "forward-pass threads (default here: the CPUs online)"},
      {.name = "decode-threads", .kind = FLAG_KIND_INT32, .target = &m.decode_threads,
       .help = "cpu: of --threads, those that run a decode step (at most 8 tokens), whose speed is mostly the "
               "memory's: the others sleep and leave their cores to the bus and the other actors on the host; "
               "0 = all of --threads (llama.cpp's --threads vs --threads-batch)"},
      {.name = "device", .kind = FLAG_KIND_STRING, .target = &m.device,
       .help = "backend: cpu, cuda (builds with CUDA; needs a GPU) or sim (no forward: each step waits the time "
               "of --sim-cost and emits deterministic tokens; actors/gpu_worker/runner_sim.h)"},
      {.name = "sim-cost", .kind = FLAG_KIND_STRING, .target = &m.sim_cost_path,
       .help = "sim: the step-time model, a JSON file (llmbus-kernel-bench --fit writes one; ops/sim/ has profiles); "
               "default: the built-in fit of SmolLM2-135M Q4_1 on one CPU thread"},
      {.name = "step-log", .kind = FLAG_KIND_STRING, .target = &m.step_log,
       .help = "append one JSON line per step that ran a batch: its shape and how long it took (what "
               "llmbus-kernel-bench --fit-steps fits the sim's model to); \"\" = none"},
      {.name = "numerics", .kind = FLAG_KIND_STRING, .target = &m.numerics,
       .help = "cpu: packed (the engine's int8 panels) or ggml (llama.cpp's CPU arithmetic, bit-exact with it)"},
      {.name = "gpu-memory-utilization", .kind = FLAG_KIND_DOUBLE, .target = &m.gpu_memory_utilization,
       .help = "cuda: fraction (0, 1] of device memory for weights + scratch + KV cache (sizes the KV cache "
               "when --num-blocks is 0; the number reaches kv_manager and scheduler in the heartbeat)"},
      {.name = "kv-cache-dtype", .kind = FLAG_KIND_STRING, .target = &m.kv_cache_dtype,
       .metavar = "auto|fp16|fp8|q8_0",
       .help = "cpu: the KV cache's element type (vLLM's names; fp8 = e4m3, q8_0 = llama.cpp's cache type): fp8 "
               "and q8_0 take about half of fp16's bytes per block; cuda: fp16 only"},
      {.name = "kv-cache-memory-bytes", .aliases = "kv-cache-memory", .kind = FLAG_KIND_INT64, .target = &m.kv_cache_memory_bytes, .metavar = "B",
       .help = "cpu: the KV cache's size in bytes instead of --num-blocks: the block count follows --kv-cache-dtype "
               "(and reaches the scheduler and kv_manager in the heartbeat); 0 = --num-blocks"},
      {.name = "max-model-len", .kind = FLAG_KIND_INT32, .target = &m.max_model_len,
       .help = "the engine's context length limit (as the scheduler's); picks phi3 LongRoPE's factor set as "
               "llama.cpp's n_ctx does; 0 = the model's context_length"},
      {.name = "mmproj", .kind = FLAG_KIND_STRING, .target = &m.mmproj,
       .help = "GGUF mmproj of the model (llama.cpp mtmd's format): the image encoder for image_url parts; its "
               "output width must equal the model's hidden size"},
      {.name = "packed-cache-dir", .kind = FLAG_KIND_STRING, .target = &m.packed_cache_dir,
       .help = "cpu: directory of the host's shared packed-weight cache (the first worker packs and writes it, "
               "the others and a restarted worker map it; \"\" = private packing)"},
      {.name = "enable-lora", .kind = FLAG_KIND_BOOL, .target = &m.enable_lora,
       .help = "serve LoRA adapters (vLLM's): --lora-modules"},
      {.name = "lora-modules", .kind = FLAG_KIND_LIST, .target = &m.lora_values, .metavar = "NAME=PATH",
       .greedy = true,
       .help = "LoRA adapters (llama.cpp GGUF LoRA files), each name=path or vLLM's JSON {\"name\":..,\"path\":..,"
               "\"base_model_name\":..}: loaded and checked against the model at start (a bad file stops the "
               "worker); a request's lora_request names one (cpu only)"},
      {.name = "lora-dir", .kind = FLAG_KIND_STRING, .target = &m.lora_dir, .metavar = "DIR",
       .help = "with --enable-lora: the directory whose files /v1/load_lora_adapter may load at run time "
               "(lora_path is resolved beneath it only: no \"..\", no symbolic link; cpu only)"},
      {.name = "max-lora-rank", .kind = FLAG_KIND_INT32, .target = &m.max_lora_rank, .min = 1, .max = 4096,
       .help = "largest adapter rank accepted (vLLM's, default 16); the forward's scratch is sized for it"},
      {.name = "speculative-config", .kind = FLAG_KIND_STRING, .target = &m.speculative_config,
       .help = "speculative decoding, vLLM's JSON: {\"method\":\"ngram\",\"num_speculative_tokens\":K,"
               "\"prompt_lookup_max\":N,\"prompt_lookup_min\":M}: n-gram drafts proposed after each sample (cpu only)"},
  };
  const struct actor_main_spec spec = {
      .actor = "gpu_worker",
      .program = "llmbus-gpu-worker",
      .summary = "runs each scheduled step: forward pass over the paged KV cache and sampling",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .configure = worker_main_configure,
      .start = worker_main_start,
      .stop = worker_main_stop,
      .destroy = worker_main_destroy,
      .user = &m,
      .engine_scoped = true, /* its beats reach its engine's peers on the engine's subject */
  };
  return actor_main_exec(&spec, argc, argv);
}
