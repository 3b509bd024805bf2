/* The LoRA adapters a worker serves, loaded at start (vLLM --lora-modules) or at run time (vLLM's
 * /v1/load_lora_adapter, from a file beneath --lora-dir): each adapter's GGUF opened and checked
 * against the base model (model/forward/lora.h llama_lora_load: architecture, shapes, types,
 * rank <= max_lora_rank) and kept mapped. What the runner is given (model_runner_set_loras) and
 * what the worker announces in its Heartbeat (lora_adapters: name, lora_int_id, rank; a run-time
 * adapter flagged dynamic with its path and owning tenant) come from here. An adapter unloaded at
 * run time is retired, not freed: requests admitted with it still run with it, and
 * lora_adapters_reap frees it once no request holds it. Not thread-safe: the caller locks. */
#ifndef LLB_ACTORS_GPU_WORKER_LORA_ADAPTERS_H
#define LLB_ACTORS_GPU_WORKER_LORA_ADAPTERS_H

#include <stdbool.h>
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
  char *paths[LORA_MODULES_MAX];                     /* [num] dynamic: beneath --lora-dir, owned; else NULL */
  char *owners[LORA_MODULES_MAX];                    /* [num] dynamic: owning tenant, owned; else NULL */
  /* unloaded, kept alive while a request may still run with them (lora_adapters_reap) */
  int32_t num_retired;
  struct gguf_file *retired_files[LORA_MODULES_MAX]; /* [num_retired] */
  struct llama_lora *retired[LORA_MODULES_MAX];      /* [num_retired] */
};

/* Loads every module of m against base (borrowed; must outlive *out) with rank at most
 * max_lora_rank, into *out (zeroed first; free with lora_adapters_free, also after an error).
 * Errors: the GGUF reader's and llama_lora_load's (MALFORMED, UNSUPPORTED, TOO_LARGE for a rank
 * over max_lora_rank, ...), the message prefixed with the module's name and path;
 * OUT_OF_MEMORY. */
llb_status lora_adapters_load(const struct lora_modules *m, const struct llama_model *base, int32_t max_lora_rank,
                              struct lora_adapters *out);

/* Loads the adapter `name` at run time from `rel` beneath the directory `dir` (base/open_beneath.h:
 * no "..", no absolute path, no symbolic link, a regular file) against base with rank at most
 * max_lora_rank, owned by tenant `owner`, its lora_int_id lora_module_int_id(name). Errors:
 * INVALID_ARGUMENT (a name a model may not have, one served already: vLLM's "The lora adapter
 * 'N' has already been loaded.", or one whose id another adapter has), NOT_FOUND
 * (LORA_ADAPTERS_NOT_FOUND_TEXT for a file that is missing, outside dir, a link or not a
 * regular file alike: no existence oracle), TOO_LARGE (at
 * LORA_MODULES_MAX, or a rank over max_lora_rank), the GGUF reader's and llama_lora_load's
 * errors (MALFORMED, UNSUPPORTED, ...: the message names rel, never dir), UNSUPPORTED (no
 * openat2), OUT_OF_MEMORY. Nothing changes on an error. */
#define LORA_ADAPTERS_NOT_FOUND_TEXT "no such adapter file under the LoRA directory"
llb_status lora_adapters_add(struct lora_adapters *a, const char *name, const char *dir, const char *rel,
                             const char *owner, const struct llama_model *base, int32_t max_lora_rank);

/* Stops serving the run-time adapter `name` (vLLM's /v1/unload_lora_adapter): it leaves the
 * lists at once and is retired (kept alive for the requests that hold it). Errors: NOT_FOUND
 * (not served: vLLM's "The lora adapter 'N' cannot be found."), INVALID_ARGUMENT (a --lora-modules adapter: never unloaded), TOO_LARGE
 * (LORA_MODULES_MAX adapters retired and still in use). */
llb_status lora_adapters_remove(struct lora_adapters *a, const char *name);

/* Frees each retired adapter for which in_use(user, adapter) is false. */
void lora_adapters_reap(struct lora_adapters *a, bool (*in_use)(void *user, const struct llama_lora *adapter),
                        void *user);

/* Frees the adapters, the retired ones too, and closes their files. NULL ok. */
void lora_adapters_free(struct lora_adapters *a);

#endif
