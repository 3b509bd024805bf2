/* The model runner's CUDA module: kernels/cuda's op table and device queries behind
 * runner_cuda.h. */
#include "actors/gpu_worker/runner_cuda.h"

#include "base/log.h"
#include "kernels/cuda/cuda_backend.h"

static llb_status api_probe(void) {
  char reason[256];
  if (cuda_device_probe(reason, sizeof reason) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_DEVICE, "no usable CUDA device: %s", reason);
  return LLB_STATUS_OK;
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
      .clear_error = llb_err_clear,
      .probe = api_probe,
      .describe = cuda_device_describe,
      .ops = backend_cuda_ops,
  };
  return &api;
}
