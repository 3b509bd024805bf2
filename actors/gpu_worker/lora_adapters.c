#include "actors/gpu_worker/lora_adapters.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward/lora.h"
#include "model/gguf/gguf.h"

llb_status lora_adapters_load(const struct lora_modules *m, const struct llama_model *base, int32_t max_lora_rank,
                              struct lora_adapters *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < m->num; i++) {
    const struct lora_module *mod = &m->items[i];
    struct llama_lora *a = NULL;
    llb_status st = gguf_open(mod->path, &out->files[i]);
    if (!st) st = llama_lora_load(out->files[i], base, max_lora_rank, &a);
    if (st) {
      char why[512]; /* the loader's message, copied before LLB_ERRF writes the error record */
      snprintf(why, sizeof why, "%s", llb_err_last());
      gguf_close(out->files[i]);
      out->files[i] = NULL;
      return LLB_ERRF(st, "--lora-modules %s=%s: %s", mod->name, mod->path, why);
    }
    out->adapters[i] = a;
    out->ids[i] = mod->lora_int_id;
    out->num = i + 1;
    if (!(out->names[i] = strdup(mod->name))) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA adapter names");
    out->beat[i] = (struct llb_lora_adapter){llb_str_c(out->names[i]), mod->lora_int_id, llama_lora_rank(a)};
  }
  return LLB_STATUS_OK;
}

void lora_adapters_free(struct lora_adapters *a) {
  if (!a) return;
  for (int32_t i = 0; i < a->num; i++) {
    llama_lora_destroy(a->adapters[i]);
    gguf_close(a->files[i]);
    free(a->names[i]);
  }
  memset(a, 0, sizeof *a);
}
