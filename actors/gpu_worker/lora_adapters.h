/* The LoRA adapters a worker serves, loaded at start (vLLM --lora-modules): each module's GGUF
 * opened and checked against the base model (model/forward/lora.h llama_lora_load: architecture,
 * shapes, types, rank <= max_lora_rank), kept mapped for the worker's life. What the runner is
 * given (model_runner_set_loras) and what the worker announces in its Heartbeat
 * (lora_adapters: name, lora_int_id, rank) come from here. */
#ifndef LLB_ACTORS_GPU_WORKER_LORA_ADAPTERS_H
#define LLB_ACTORS_GPU_WORKER_LORA_ADAPTERS_H

#include <stdint.h>

#include "actors/gpu_worker/lora_modules.h"
#include "base/status.h"
#include "schemas/control.h"

struct gguf_file;
struct llama_lora;
struct llama_model;

struct lora_adapters {
  int32_t num;
  struct gguf_file *files[LORA_MODULES_MAX];         /* [num] the adapters' mappings */
  struct llama_lora *adapters[LORA_MODULES_MAX];     /* [num] views into files[i] */
  int32_t ids[LORA_MODULES_MAX];                     /* [num] lora_int_id */
  struct llb_lora_adapter beat[LORA_MODULES_MAX];    /* [num] name (into names), id, rank */
  char *names[LORA_MODULES_MAX];                     /* [num] owned */
};

/* Loads every module of m against base (borrowed; must outlive *out) with rank at most
 * max_lora_rank, into *out (zeroed first; free with lora_adapters_free, also after an error).
 * Errors: the GGUF reader's and llama_lora_load's (MALFORMED, UNSUPPORTED, TOO_LARGE for a rank
 * over max_lora_rank, ...), the message prefixed with the module's name and path;
 * OUT_OF_MEMORY. */
llb_status lora_adapters_load(const struct lora_modules *m, const struct llama_model *base, int32_t max_lora_rank,
                              struct lora_adapters *out);

/* Frees the adapters and closes their files. NULL ok. */
void lora_adapters_free(struct lora_adapters *a);

#endif
