/* The model runner's CUDA backend (private to model_runner.c; built only with LLB_HAVE_CUDA):
 * the device model, forward context and paged KV cache of kernels/cuda/cuda_forward.h behind
 * the calls the runner makes on the CPU backend. Every CUDA failure comes back as a status
 * (the cuda_* functions' CUDA_TRY mapping); nothing aborts. Not thread-safe.
 */
#ifndef LLB_GPU_WORKER_RUNNER_CUDA_H
#define LLB_GPU_WORKER_RUNNER_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/status.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gguf.h"

/* Sequences (and logits rows) one step may carry: vLLM's largest max_num_seqs default. The
 * device logits scratch is this many rows x vocab_size floats. */
#define RUNNER_CUDA_MAX_SEQS 1024

struct runner_cuda; /* opaque: cuda_model + cuda_forward_ctx + cuda_kv_cache */

/* OK when a CUDA device is usable; DEVICE with the runtime's reason ("cudaGetDeviceCount:
 * ...") otherwise. */
llb_status runner_cuda_probe(void);

/* Loads f to the device (f may be closed after), creates a forward context for
 * max_num_tokens rows (sequences and logits rows up to min(max_num_tokens,
 * RUNNER_CUDA_MAX_SEQS); block tables as wide as the model's
 * context_length needs) with decode graphs, then the KV cache: *num_blocks blocks of
 * block_size tokens, or with *num_blocks == 0 as many as gpu_memory_utilization (0, 1] of the
 * device's memory leaves (written back to *num_blocks). Logs "gpu_worker_cuda" (device,
 * weights, blocks, KV GiB). *out: runner_cuda_destroy. Errors: those of cuda_model_load,
 * cuda_forward_ctx_create, cuda_kv_blocks_for_memory and cuda_kv_cache_create, each
 * prefixed with the stage. */
llb_status runner_cuda_create(const struct gguf_file *f, int32_t max_num_tokens, int32_t block_size,
                              float gpu_memory_utilization, int32_t *num_blocks, struct runner_cuda **out);

/* NULL ok. */
void runner_cuda_destroy(struct runner_cuda *rc);

/* The device model's configuration (valid while rc lives). */
const struct llama_config *runner_cuda_config(const struct runner_cuda *rc);

/* Bytes of the device KV cache (K and V, fp16, every layer). */
int64_t runner_cuda_kv_bytes(const struct runner_cuda *rc);

/* One step of b (host arrays, model/forward.h semantics) on the device; logits (host
 * [b->num_logits, vocab_size]) receive the logits rows. Errors of cuda_forward:
 * INVALID_ARGUMENT / UNSUPPORTED (a batch beyond the context's sizes), DEVICE, OUT_OF_MEMORY. */
llb_status runner_cuda_forward(struct runner_cuda *rc, const struct llama_batch *b, float *logits);

/* The runner as a loadable module: runner_cuda.c and the CUDA kernels are built into
 * RUNNER_CUDA_MODULE (next to the binaries), which the worker dlopens only for --device cuda,
 * so that a CPU worker never maps cudart and cuBLAS (~140 MB resident per process: cuBLAS's
 * relocated data alone is ~85 MB). The module carries its own copies of llmbus_base and
 * llmbus_model: log settings are handed over by log_init, and a failed call's message is
 * read back with last_error (runner_backend.c re-raises it). */
#define RUNNER_CUDA_MODULE "libllmbus_runner_cuda.so"
#define RUNNER_CUDA_API_SYMBOL "llb_runner_cuda_api"

struct runner_cuda_api {
  size_t abi_size; /* sizeof(struct runner_cuda_api) the module was built with */
  void (*log_init)(const char *actor, llb_log_level level);
  const char *(*last_error)(void); /* llb_err_last() inside the module */
  llb_status (*probe)(void);
  llb_status (*create)(const struct gguf_file *f, int32_t max_num_tokens, int32_t block_size,
                       float gpu_memory_utilization, int32_t *num_blocks, struct runner_cuda **out);
  void (*destroy)(struct runner_cuda *rc);
  const struct llama_config *(*config)(const struct runner_cuda *rc);
  int64_t (*kv_bytes)(const struct runner_cuda *rc);
  llb_status (*forward)(struct runner_cuda *rc, const struct llama_batch *b, float *logits);
};

/* Exported by the module under RUNNER_CUDA_API_SYMBOL. */
const struct runner_cuda_api *llb_runner_cuda_api(void);

#endif
