/* The model runner's CUDA backend: kernels/cuda/cuda_forward.h behind runner_cuda.h. */
#include "actors/gpu_worker/runner_cuda.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_forward.h"

struct runner_cuda {
  struct cuda_model *model;
  struct cuda_forward_ctx *fwd;
  struct cuda_kv_cache *kv;
  int64_t kv_bytes;
};

llb_status runner_cuda_probe(void) {
  char reason[256];
  if (cuda_device_probe(reason, sizeof reason) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_DEVICE, "no usable CUDA device: %s", reason);
  return LLB_STATUS_OK;
}

/* Prefixes the message of the last error with the stage that failed. */
static llb_status staged(llb_status st, const char *stage) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", llb_err_last());
  return LLB_ERRF(st, "cuda %s: %s", stage, msg);
}

llb_status runner_cuda_create(const struct gguf_file *f, int32_t max_num_tokens, int32_t block_size,
                              float gpu_memory_utilization, int32_t *num_blocks, struct runner_cuda **out) {
  *out = NULL;
  llb_status st = runner_cuda_probe();
  if (st) return st;
  struct runner_cuda *rc = calloc(1, sizeof(*rc));
  if (!rc) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "cuda runner");
  if ((st = cuda_model_load(f, &rc->model))) {
    st = staged(st, "model load");
    goto fail;
  }
  const struct llama_config *c = cuda_model_config(rc->model);
  const int32_t ctx_len = c->context_length > 0 ? c->context_length : max_num_tokens;
  const int32_t max_seqs = max_num_tokens < RUNNER_CUDA_MAX_SEQS ? max_num_tokens : RUNNER_CUDA_MAX_SEQS;
  const struct cuda_forward_params p = {
      .max_num_tokens = max_num_tokens, .max_num_seqs = max_seqs, .max_num_logits = max_seqs,
      .max_blocks_per_seq = (ctx_len + block_size - 1) / block_size, .max_context_len = ctx_len,
      .use_graphs = true, .device_sampling = false};
  if ((st = cuda_forward_ctx_create(rc->model, &p, &rc->fwd))) {
    st = staged(st, "forward context");
    goto fail;
  }
  if (*num_blocks == 0 &&
      (st = cuda_kv_blocks_for_memory(rc->model, block_size, gpu_memory_utilization, num_blocks))) {
    st = staged(st, "KV cache size");
    goto fail;
  }
  if ((st = cuda_kv_cache_create(rc->model, *num_blocks, block_size, &rc->kv))) {
    st = staged(st, "KV cache");
    goto fail;
  }
  rc->kv_bytes = (int64_t)cuda_kv_bytes_per_block(rc->model, block_size) * *num_blocks;
  char dev[160];
  if (cuda_device_describe(dev, sizeof dev)) snprintf(dev, sizeof dev, "unknown");
  LLB_LOG_INFO("gpu_worker_cuda",
               "device=\"%s\" weights_gib=%.3f num_blocks=%d block_size=%d kv_cache_gib=%.3f "
               "gpu_memory_utilization=%.3f max_context_len=%d",
               dev, (double)cuda_model_weight_bytes(rc->model) / (1024.0 * 1024.0 * 1024.0), *num_blocks,
               block_size, (double)rc->kv_bytes / (1024.0 * 1024.0 * 1024.0), (double)gpu_memory_utilization,
               ctx_len);
  *out = rc;
  return LLB_STATUS_OK;
fail:
  runner_cuda_destroy(rc);
  return st;
}

void runner_cuda_destroy(struct runner_cuda *rc) {
  if (!rc) return;
  cuda_kv_cache_destroy(rc->kv);
  cuda_forward_ctx_destroy(rc->fwd);
  cuda_model_destroy(rc->model);
  free(rc);
}

const struct llama_config *runner_cuda_config(const struct runner_cuda *rc) { return cuda_model_config(rc->model); }

int64_t runner_cuda_kv_bytes(const struct runner_cuda *rc) { return rc->kv_bytes; }

llb_status runner_cuda_forward(struct runner_cuda *rc, const struct llama_batch *b, float *logits) {
  return cuda_forward(rc->fwd, rc->kv, b, NULL, logits, NULL);
}

static void api_log_init(const char *actor, llb_log_level level) {
  llb_log_set_actor(actor);
  llb_log_set_level(level);
}

static const char *api_last_error(void) { return llb_err_last(); }

const struct runner_cuda_api *llb_runner_cuda_api(void) {
  static const struct runner_cuda_api api = {
      .abi_size = sizeof(struct runner_cuda_api),
      .log_init = api_log_init,
      .last_error = api_last_error,
      .probe = runner_cuda_probe,
      .create = runner_cuda_create,
      .destroy = runner_cuda_destroy,
      .config = runner_cuda_config,
      .kv_bytes = runner_cuda_kv_bytes,
      .forward = runner_cuda_forward,
  };
  return &api;
}
