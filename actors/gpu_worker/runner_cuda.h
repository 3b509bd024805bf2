/* The model runner's CUDA module (private to runner_backend.c; built only with LLB_HAVE_CUDA):
 * kernels/cuda's op table (backend_cuda_ops) and its device queries, exported from a module
 * that the worker dlopens only for --device cuda, so that a CPU worker never maps cudart and
 * cuBLAS (~140 MB resident per process: cuBLAS's relocated data alone is ~85 MB). The forward
 * pass itself is model/forward/forward.c's llama_forward, run by the worker over this table.
 * Every CUDA failure comes back as a status (the cuda_* functions' CUDA_TRY mapping); nothing
 * aborts.
 */
#ifndef LLB_GPU_WORKER_RUNNER_CUDA_H
#define LLB_GPU_WORKER_RUNNER_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/status.h"

struct backend_ops;

/* Sequences (and logits rows) one step may carry: vLLM's largest max_num_seqs default. The
 * device logits are this many rows x vocab_size floats. */
#define RUNNER_CUDA_MAX_SEQS 1024

/* The module carries its own copy of llmbus_base (its static libraries are linked with
 * --exclude-libs): log settings are handed over by log_init, and a message of a failed call
 * into the module (its ops included) is read back with last_error; clear_error forgets it
 * before a call, so that runner_backend.c can tell whether the module raised the error. */
#define RUNNER_CUDA_MODULE "libllmbus_runner_cuda.so"
#define RUNNER_CUDA_API_SYMBOL "llb_runner_cuda_api"

struct runner_cuda_api {
  size_t abi_size; /* sizeof(struct runner_cuda_api) the module was built with */
  void (*log_init)(const char *actor, llb_log_level level);
  const char *(*last_error)(void); /* llb_err_last() inside the module ("" if none) */
  void (*clear_error)(void);       /* llb_err_clear() inside the module */
  /* OK when a CUDA device is usable; DEVICE with the runtime's reason ("cudaGetDeviceCount:
   * ...") otherwise. */
  llb_status (*probe)(void);
  /* Name, memory and compute capability of device 0 into buf [cap] (cuda_device_describe). */
  llb_status (*describe)(char *buf, size_t cap);
  /* backend_cuda_ops(): the table llama_forward runs over (kernels/cuda/cuda_backend.h). */
  const struct backend_ops *(*ops)(void);
};

/* Exported by the module under RUNNER_CUDA_API_SYMBOL. */
const struct runner_cuda_api *llb_runner_cuda_api(void);

#endif
