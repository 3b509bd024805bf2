/* The model runner's forward pass on its device (private to model_runner.c): model/forward/forward.c's
 * llama_forward over the CPU op table or, in builds with LLB_HAVE_CUDA, over the CUDA one
 * that the worker takes from its dlopen'd module (runner_cuda.h), behind one create / forward /
 * destroy. The only file of the runner that tests LLB_HAVE_CUDA (to load that module). Not
 * thread-safe.
 */
#ifndef LLB_GPU_WORKER_RUNNER_BACKEND_H
#define LLB_GPU_WORKER_RUNNER_BACKEND_H

#include <stdint.h>

#include "actors/gpu_worker/model_runner.h"
#include "base/status.h"
#include "model/gguf/config.h"
#include "model/forward/forward.h"

struct runner_cuda_api;

struct runner_backend {
  enum model_runner_device device;
  const struct llama_config *config;  /* of the model */
  int32_t num_blocks;                 /* KV cache blocks (sized from memory for CUDA num_blocks 0) */
  int64_t kv_bytes;                   /* KV cache bytes */
  struct llama_model *cuda_model;     /* CUDA: the model's views, loaded here from cfg->gguf (the
                                         caller may close the file once create returns: the
                                         forward context has uploaded what it reads) */
  struct llama_forward_ctx *fwd;
  struct llama_kv_cache *kv;          /* in the memory of fwd's backend */
  const struct runner_cuda_api *cuda; /* CUDA: the module, whose messages failures carry */
  struct llama_config sim_config;     /* SIM: the model's config (config points here); no fwd, no kv */
};

/* Creates the forward context and KV cache of cfg->device into *b (zeroed first): SIM only the
 * config from cfg->gguf (no forward, no cache: runner_sim.h); CPU over m;
 * CUDA over a model loaded from cfg->gguf with the module's op table (see
 * model_runner_create). On error *b holds nothing to free. Errors: those of
 * model_runner_create's backend part; CUDA ones carry the module's message. */
llb_status runner_backend_create(struct runner_backend *b, const struct llama_model *m,
                                 const struct model_runner_config *cfg);

/* One step of batch (host arrays); logits (host [num_logits, vocab_size]). Not for SIM. */
llb_status runner_backend_forward(struct runner_backend *b, const struct llama_batch *batch, float *logits);

/* Frees what runner_backend_create made; a zeroed *b is fine. */
void runner_backend_destroy(struct runner_backend *b);

#endif
