/* The model runner's forward pass on the CPU or a CUDA device (runner_backend.h). */
#include "actors/gpu_worker/runner_backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "kernels/backend.h"
#include "actors/gpu_worker/runner_cuda.h"

#ifdef LLB_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>

static const struct runner_cuda_api *cuda_api_ptr;
static char cuda_api_error[PATH_MAX + 256];
static pthread_once_t cuda_api_once = PTHREAD_ONCE_INIT;

/* dlopens RUNNER_CUDA_MODULE from this executable's directory, once (the handle stays open). */
static void cuda_api_load(void) {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  const char *slash = NULL;
  if (n > 0) {
    path[n] = '\0';
    slash = strrchr(path, '/');
  }
  if (!slash || (size_t)(slash - path) + 1 + sizeof(RUNNER_CUDA_MODULE) > sizeof(path)) {
    snprintf(cuda_api_error, sizeof(cuda_api_error), "cannot locate this executable to find %s", RUNNER_CUDA_MODULE);
    return;
  }
  memcpy(path + (slash - path) + 1, RUNNER_CUDA_MODULE, sizeof(RUNNER_CUDA_MODULE));
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const struct runner_cuda_api *(*get)(void) = h ? (const struct runner_cuda_api *(*)(void))dlsym(h, RUNNER_CUDA_API_SYMBOL) : NULL;
  if (!get) {
    snprintf(cuda_api_error, sizeof(cuda_api_error), "CUDA runner module %s: %s", path, dlerror());
    if (h) dlclose(h);
    return;
  }
  const struct runner_cuda_api *api = get();
  if (!api || api->abi_size != sizeof(struct runner_cuda_api)) { /* a module of another build */
    snprintf(cuda_api_error, sizeof(cuda_api_error), "CUDA runner module %s does not match this binary", path);
    dlclose(h);
    return;
  }
  api->log_init(llb_log_get_actor(), llb_log_get_level());
  cuda_api_ptr = api;
}
#endif

/* The module's API, or NULL with *st set (UNSUPPORTED naming the module and dlerror, or the
 * build without CUDA). */
static const struct runner_cuda_api *cuda_api(llb_status *st) {
#ifdef LLB_HAVE_CUDA
  pthread_once(&cuda_api_once, cuda_api_load);
  if (!cuda_api_ptr) *st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: %s", cuda_api_error);
  return cuda_api_ptr;
#else
  *st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: built without CUDA (configure with nvcc, LLB_CUDA=ON)");
  return NULL;
#endif
}

/* A failed call's status with its messages: this image's (the forward, the runner) and the
 * module's (the CUDA ops), each when set since the errors were cleared. */
static llb_status cuda_fail(const struct runner_cuda_api *api, llb_status st, const char *stage) {
  char own[512];
  snprintf(own, sizeof own, "%s", llb_err_last());
  const char *dev = api->last_error();
  if (own[0] && dev[0]) return LLB_ERRF(st, "cuda %s: %s: %s", stage, own, dev);
  return LLB_ERRF(st, "cuda %s: %s", stage, dev[0] ? dev : own);
}

llb_status model_runner_device_check(enum model_runner_device d) {
  if (d == MODEL_RUNNER_DEVICE_CPU || d == MODEL_RUNNER_DEVICE_SIM) return LLB_STATUS_OK;
  if (d != MODEL_RUNNER_DEVICE_CUDA) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "device %d", (int)d);
  llb_status st = LLB_STATUS_OK;
  const struct runner_cuda_api *api = cuda_api(&st);
  if (!api) return st;
  api->clear_error();
  st = api->probe();
  return st ? LLB_ERRF(st, "%s", api->last_error()) : st;
}

const char *model_runner_device_name(enum model_runner_device d) {
  return d == MODEL_RUNNER_DEVICE_CUDA ? "cuda" : d == MODEL_RUNNER_DEVICE_SIM ? "sim" : "cpu";
}

/* What the CUDA backend does not run (its ops or the forward's device path refuse it), found in
 * f's config before anything is loaded. */
static llb_status cuda_refusals(const struct gguf_file *f) {
  struct llama_config arch;
  if (llama_config_from_gguf(f, &arch) != LLB_STATUS_OK) return LLB_STATUS_OK; /* the load reports it */
  if (arch.attn_qkv_bias || arch.attn_qk_norm || arch.fused_qkv || arch.fused_gate_up || arch.gemma)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: architecture '%s' runs on the CPU only (its %s "
                    "are not in the CUDA forward yet)", arch.architecture,
                    arch.attn_qkv_bias ? "q/k/v biases" : arch.attn_qk_norm ? "q/k norms" : arch.gemma ? "GeGLU and scalings" : "fused projections");
  if (gguf_find_tensor(f, "rope_freqs.weight"))
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: this model's RoPE frequency factors "
                    "(rope_freqs.weight, Llama 3.x) are not in the CUDA forward yet; it runs on the CPU");
  if (arch.sliding_window > 0 || arch.rope_attn_factor != 1.0f || arch.rope_longrope || arch.post_norms ||
      arch.attn_logit_softcapping > 0.0f || arch.final_logit_softcapping > 0.0f)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: %s (sliding-window attention, LongRoPE, RoPE attention "
                    "factor, post norms and soft-capping run on the CPU forward only)", arch.architecture);
  return LLB_STATUS_OK;
}

/* KV blocks that fit in utilization of the device's total memory given what is in use now
 * (weights, forward context, other processes): vLLM's determine_num_available_blocks without
 * the profiling run (the context's scratch is preallocated). OUT_OF_MEMORY when not one fits. */
static llb_status kv_blocks_for_memory(const struct backend_ops *ops, size_t per_block, float utilization,
                                       int32_t *num_blocks) {
  size_t free_b, total_b;
  llb_status st = ops->memory_info(&free_b, &total_b);
  if (st) return st;
  const double budget = (double)total_b * utilization - (double)(total_b - free_b);
  const double n = budget > 0 ? floor(budget / (double)per_block) : 0.0;
  if (n < 1.0)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY,
                    "no KV block fits: %.2f GiB total x %.2f utilization, %.2f GiB in use, %zu bytes a block",
                    (double)total_b / 1073741824.0, utilization, (double)(total_b - free_b) / 1073741824.0,
                    per_block);
  *num_blocks = n > (double)INT32_MAX ? INT32_MAX : (int32_t)n;
  return LLB_STATUS_OK;
}

/* The CUDA part of create: the module's table, the model's views from cfg->gguf, the forward
 * options for the device; KV sizing happens after the context exists. */
static llb_status cuda_prepare(struct runner_backend *b, const struct model_runner_config *cfg,
                               struct llama_forward_options *fo) {
  llb_status st = cuda_refusals(cfg->gguf);
  if (st) return st;
  b->cuda = cuda_api(&st);
  if (!b->cuda) return st;
  b->cuda->clear_error();
  if ((st = b->cuda->probe())) return LLB_ERRF(st, "%s", b->cuda->last_error());
  if ((st = llama_model_load(cfg->gguf, &b->cuda_model))) return LLB_ERRF(st, "cuda model load: %s", llb_err_last());
  const struct llama_config *c = llama_model_config(b->cuda_model);
  const int32_t ctx_len = c->context_length > 0 ? c->context_length : cfg->max_num_batched_tokens;
  const int32_t max_seqs = cfg->max_num_batched_tokens < RUNNER_CUDA_MAX_SEQS ? cfg->max_num_batched_tokens
                                                                              : RUNNER_CUDA_MAX_SEQS;
  fo->ops = b->cuda->ops();
  fo->max_num_seqs = max_seqs, fo->max_num_logits = max_seqs;
  fo->max_blocks_per_seq = (ctx_len + cfg->block_size - 1) / cfg->block_size;
  return LLB_STATUS_OK;
}

static void cuda_log_ready(const struct runner_backend *b, const struct model_runner_config *cfg, float util) {
  char dev[160];
  if (b->cuda->describe(dev, sizeof dev)) snprintf(dev, sizeof dev, "unknown");
  size_t free_b = 0, total_b = 0;
  (void)llama_forward_ctx_ops(b->fwd)->memory_info(&free_b, &total_b);
  LLB_LOG_INFO("gpu_worker_cuda",
               "device=\"%s\" weights_gib=%.3f num_blocks=%d block_size=%d kv_cache_gib=%.3f "
               "gpu_memory_utilization=%.3f max_context_len=%d free_gib=%.2f total_gib=%.2f",
               dev, (double)llama_forward_ctx_weight_bytes(b->fwd) / 1073741824.0, b->num_blocks, cfg->block_size,
               (double)b->kv_bytes / 1073741824.0, (double)util, b->config->context_length,
               (double)free_b / 1073741824.0, (double)total_b / 1073741824.0);
}

/* SIM: the model's config alone (no weights, no KV memory); kv_bytes is what the cache would
 * take, for the ready line. */
static llb_status sim_create(struct runner_backend *b, const struct model_runner_config *cfg) {
  llb_status st = llama_config_from_gguf(cfg->gguf, &b->sim_config);
  if (st) return st;
  b->config = &b->sim_config;
  b->kv_bytes = 2 * (int64_t)b->sim_config.block_count * cfg->block_size * b->sim_config.head_count_kv *
                b->sim_config.head_dim * 2 * b->num_blocks;
  return LLB_STATUS_OK;
}

llb_status runner_backend_create(struct runner_backend *b, const struct llama_model *m,
                                 const struct model_runner_config *cfg) {
  memset(b, 0, sizeof(*b));
  b->device = cfg->device;
  b->num_blocks = cfg->num_blocks;
  if (cfg->device == MODEL_RUNNER_DEVICE_SIM) return sim_create(b, cfg);
  const bool cuda = cfg->device == MODEL_RUNNER_DEVICE_CUDA;
  struct llama_forward_options fo = {.max_num_tokens = cfg->max_num_batched_tokens, .n_threads = cfg->num_threads,
                                     .n_threads_decode = cfg->num_threads_decode,
                                     .matmul = cfg->matmul, .packed_cache_dir = cfg->packed_cache_dir,
                                     .max_model_len = cfg->max_model_len,
                                     .max_lora_rank = cuda ? 0 : cfg->max_lora_rank};
  llb_status st = LLB_STATUS_OK;
  if (cuda) {
    if ((st = cuda_prepare(b, cfg, &fo))) goto fail;
    m = b->cuda_model;
    b->cuda->clear_error();
    llb_err_clear();
  }
  const struct llama_config *c = llama_model_config(m);
  b->config = c;
  const char *stage = "forward context";
  st = llama_forward_ctx_create_opts(m, &fo, &b->fwd);
  const float util = cfg->gpu_memory_utilization > 0.0f ? cfg->gpu_memory_utilization : 0.9f;
  const size_t per_block = llama_kv_cache_block_bytes(m, cfg->block_size, cfg->kv_cache_dtype);
  if (!st && per_block == 0)
    st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "--kv-cache-dtype %s cannot hold this model's KV rows (head_dim %d)",
                  llama_kv_dtype_name(cfg->kv_cache_dtype), c->head_dim);
  if (!st && cuda && b->num_blocks == 0) {
    stage = "KV cache size";
    st = kv_blocks_for_memory(llama_forward_ctx_ops(b->fwd), per_block, util, &b->num_blocks);
  }
  if (!st && !cuda && b->num_blocks == 0) { /* --kv-cache-memory-bytes: the count follows the dtype */
    const int64_t n = cfg->kv_cache_memory_bytes / (int64_t)per_block;
    if (n < 1 || n > INT32_MAX)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--kv-cache-memory-bytes %lld holds %lld blocks of %zu bytes (%s)",
                    (long long)cfg->kv_cache_memory_bytes, (long long)n, per_block,
                    llama_kv_dtype_name(cfg->kv_cache_dtype));
    else
      b->num_blocks = (int32_t)n;
  }
  if (!st) {
    stage = "KV cache";
    st = llama_kv_cache_create_dtype_for(b->fwd, b->num_blocks, cfg->block_size, cfg->kv_cache_dtype, &b->kv);
  }
  if (st) {
    if (cuda) st = cuda_fail(b->cuda, st, stage);
    goto fail;
  }
  b->kv_bytes = (int64_t)per_block * b->num_blocks;
  if (cuda) cuda_log_ready(b, cfg, util);
  return LLB_STATUS_OK;
fail:
  runner_backend_destroy(b);
  return st;
}

llb_status runner_backend_forward(struct runner_backend *b, const struct llama_batch *batch, float *logits) {
  if (!b->cuda) return llama_forward(b->fwd, b->kv, batch, logits);
  b->cuda->clear_error();
  llb_err_clear();
  const llb_status st = llama_forward(b->fwd, b->kv, batch, logits);
  return st ? cuda_fail(b->cuda, st, "step") : st;
}

void runner_backend_destroy(struct runner_backend *b) {
  llama_kv_cache_destroy(b->kv);
  llama_forward_ctx_destroy(b->fwd);
  llama_model_destroy(b->cuda_model);
  memset(b, 0, sizeof(*b));
}
