/* The model runner's forward pass on the CPU or a CUDA device (runner_backend.h). */
#include "actors/gpu_worker/runner_backend.h"

#include <string.h>

#ifdef LLB_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "actors/gpu_worker/runner_cuda.h"

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

/* The module's API, or NULL with *st set (UNSUPPORTED naming the module and dlerror). */
static const struct runner_cuda_api *cuda_api(llb_status *st) {
  pthread_once(&cuda_api_once, cuda_api_load);
  if (!cuda_api_ptr) *st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: %s", cuda_api_error);
  return cuda_api_ptr;
}

/* A failed module call's status, with the module's message. */
static llb_status cuda_fail(const struct runner_cuda_api *api, llb_status st) {
  return LLB_ERRF(st, "%s", api->last_error());
}
#endif

llb_status model_runner_device_check(enum model_runner_device d) {
  if (d == MODEL_RUNNER_DEVICE_CPU) return LLB_STATUS_OK;
  if (d != MODEL_RUNNER_DEVICE_CUDA) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "device %d", (int)d);
#ifdef LLB_HAVE_CUDA
  llb_status st = LLB_STATUS_OK;
  const struct runner_cuda_api *api = cuda_api(&st);
  if (!api) return st;
  st = api->probe();
  return st ? cuda_fail(api, st) : st;
#else
  return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: built without CUDA (configure with nvcc, LLB_CUDA=ON)");
#endif
}

const char *model_runner_device_name(enum model_runner_device d) {
  return d == MODEL_RUNNER_DEVICE_CUDA ? "cuda" : "cpu";
}

llb_status runner_backend_create(struct runner_backend *b, const struct llama_model *m,
                                 const struct model_runner_config *cfg) {
  memset(b, 0, sizeof(*b));
  b->device = cfg->device;
  b->num_blocks = cfg->num_blocks;
  llb_status st;
  if (cfg->device == MODEL_RUNNER_DEVICE_CUDA) {
    /* the CUDA forward is LLaMA's: no q/k/v biases (qwen2), no q/k norms (qwen3) yet */
    struct llama_config arch;
    if (cfg->gguf && llama_config_from_gguf(cfg->gguf, &arch) == LLB_STATUS_OK &&
        (arch.attn_qkv_bias || arch.attn_qk_norm || arch.fused_qkv || arch.fused_gate_up || arch.gemma))
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: architecture '%s' runs on the CPU only (its %s "
                      "are not in the CUDA forward yet)", arch.architecture,
                      arch.attn_qkv_bias ? "q/k/v biases" : arch.attn_qk_norm ? "q/k norms" : arch.gemma ? "GeGLU and scalings" : "fused projections");
    if (cfg->gguf && gguf_find_tensor(cfg->gguf, "rope_freqs.weight"))
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "device cuda: this model's RoPE frequency factors "
                      "(rope_freqs.weight, Llama 3.x) are not in the CUDA forward yet; it runs on the CPU");
#ifdef LLB_HAVE_CUDA
    const float util = cfg->gpu_memory_utilization > 0.0f ? cfg->gpu_memory_utilization : 0.9f;
    st = LLB_STATUS_OK;
    const struct runner_cuda_api *api = cuda_api(&st);
    if (!api) return st;
    if ((st = api->create(cfg->gguf, cfg->max_num_batched_tokens, cfg->block_size, util, &b->num_blocks, &b->cuda)))
      return cuda_fail(api, st);
    b->config = api->config(b->cuda);
    b->kv_bytes = api->kv_bytes(b->cuda);
    return LLB_STATUS_OK;
#else
    return model_runner_device_check(cfg->device);
#endif
  }
  const struct llama_config *c = llama_model_config(m);
  b->config = c;
  b->kv_bytes = 2 * (int64_t)c->block_count * cfg->num_blocks * cfg->block_size * c->head_count_kv *
                c->head_dim * 2;
  st = llama_kv_cache_create(m, cfg->num_blocks, cfg->block_size, &b->kv);
  const struct llama_forward_options fo = {.max_num_tokens = cfg->max_num_batched_tokens,
                                           .n_threads = cfg->num_threads, .matmul = cfg->matmul,
                                           .packed_cache_dir = cfg->packed_cache_dir,
                                           .max_model_len = cfg->max_model_len};
  if (!st) st = llama_forward_ctx_create_opts(m, &fo, &b->fwd);
  if (st) runner_backend_destroy(b);
  return st;
}

llb_status runner_backend_forward(struct runner_backend *b, const struct llama_batch *batch, float *logits) {
#ifdef LLB_HAVE_CUDA
  if (b->cuda) {
    if (batch->num_hidden > 0) /* check_new refuses pooling requests on cuda before this */
      return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "hidden states (pooling) from the cuda forward");
    const llb_status st = cuda_api_ptr->forward(b->cuda, batch, logits);
    return st ? cuda_fail(cuda_api_ptr, st) : st;
  }
#endif
  return llama_forward(b->fwd, b->kv, batch, logits);
}

void runner_backend_destroy(struct runner_backend *b) {
  llama_forward_ctx_destroy(b->fwd);
  llama_kv_cache_destroy(b->kv);
#ifdef LLB_HAVE_CUDA
  if (b->cuda) cuda_api_ptr->destroy(b->cuda);
#endif
  memset(b, 0, sizeof(*b));
}
