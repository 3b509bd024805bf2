/* The model runner's forward pass on the CPU or a CUDA device (runner_backend.h). */
#include "actors/gpu_worker/runner_backend.h"

#include <string.h>

#ifdef LLB_HAVE_CUDA
#include "actors/gpu_worker/runner_cuda.h"
#endif

llb_status model_runner_device_check(enum model_runner_device d) {
  if (d == MODEL_RUNNER_DEVICE_CPU) return LLB_STATUS_OK;
  if (d != MODEL_RUNNER_DEVICE_CUDA) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "device %d", (int)d);
#ifdef LLB_HAVE_CUDA
  return runner_cuda_probe();
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
#ifdef LLB_HAVE_CUDA
    const float util = cfg->gpu_memory_utilization > 0.0f ? cfg->gpu_memory_utilization : 0.9f;
    if ((st = runner_cuda_create(cfg->gguf, cfg->max_num_batched_tokens, cfg->block_size, util, &b->num_blocks,
                                 &b->cuda)))
      return st;
    b->config = runner_cuda_config(b->cuda);
    b->kv_bytes = runner_cuda_kv_bytes(b->cuda);
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
  if (!st) st = llama_forward_ctx_create(m, cfg->max_num_batched_tokens, cfg->num_threads, &b->fwd);
  if (st) runner_backend_destroy(b);
  return st;
}

llb_status runner_backend_forward(struct runner_backend *b, const struct llama_batch *batch, float *logits) {
#ifdef LLB_HAVE_CUDA
  if (b->cuda) return runner_cuda_forward(b->cuda, batch, logits);
#endif
  return llama_forward(b->fwd, b->kv, batch, logits);
}

void runner_backend_destroy(struct runner_backend *b) {
  llama_forward_ctx_destroy(b->fwd);
  llama_kv_cache_destroy(b->kv);
#ifdef LLB_HAVE_CUDA
  runner_cuda_destroy(b->cuda);
#endif
  memset(b, 0, sizeof(*b));
}
