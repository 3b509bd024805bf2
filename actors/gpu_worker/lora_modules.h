/* The LoRA adapters a worker serves, as vLLM's `--lora-modules` gives them.
 *
 * Each value is `name=path` or vLLM's JSON form {"name": .., "path": .., "base_model_name": ..}
 * (vllm/entrypoints/openai/cli_args.py LoRAParserAction). Names pass bus_name_check as model
 * names (an adapter is a served model: its name is a request's `model`). Each adapter gets its
 * lora_int_id from its name alone (lora_module_int_id), so that every engine and every restart
 * agree on it without configuration; two names whose ids collide are refused, as is a name given
 * twice. Pure logic: no file is opened here (the worker loads and checks each adapter against its
 * base model, model/forward/lora.h).
 */
#ifndef LLB_ACTORS_GPU_WORKER_LORA_MODULES_H
#define LLB_ACTORS_GPU_WORKER_LORA_MODULES_H

#include <stdint.h>

#include "base/status.h"

#define LORA_MODULES_MAX 32 /* adapters one worker serves at most (cmd/flags FLAG_LIST_MAX) */

/* One adapter of --lora-modules. */
struct lora_module {
  char *name;            /* malloc'd; a valid model name */
  char *path;            /* malloc'd; the adapter GGUF, non-empty */
  char *base_model_name; /* malloc'd; JSON form's base_model_name, NULL = the served model */
  int32_t lora_int_id;   /* lora_module_int_id(name) */
};

struct lora_modules {
  struct lora_module items[LORA_MODULES_MAX]; /* [num] in the order given */
  int num;
};

/* The lora_int_id of an adapter named `name`: FNV-1a 64 of its bytes (base/hash.h) reduced to
 * [1, 2^31 - 1] (vLLM's ids are positive). The same on every host and across restarts. */
int32_t lora_module_int_id(const char *name);

/* Parses values[0..n) (each one `--lora-modules` value) into *out (zeroed first; free with
 * lora_modules_free, also after an error). Errors: INVALID_ARGUMENT naming the value: not
 * `name=path` nor a JSON object with string "name" and "path" (unknown keys refused), a name
 * bus_name_check refuses, a name given twice, two names with the same lora_int_id, more than
 * LORA_MODULES_MAX; OUT_OF_MEMORY. */
llb_status lora_modules_parse(const char *const *values, int n, struct lora_modules *out);

/* The module named `name` (NUL-terminated), or NULL. */
const struct lora_module *lora_modules_find(const struct lora_modules *m, const char *name);

/* Frees what m holds and zeroes it. NULL ok. */
void lora_modules_free(struct lora_modules *m);

#endif
