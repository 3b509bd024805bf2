#include "actors/gpu_worker/lora_adapters.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/open_beneath.h"
#include "bus/subject.h"
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
    out->beat[i] = (struct llb_lora_adapter){.lora_name = llb_str_c(out->names[i]), .lora_int_id = mod->lora_int_id,
                                             .rank = llama_lora_rank(a)};
  }
  return LLB_STATUS_OK;
}

static int32_t find_name(const struct lora_adapters *a, const char *name) {
  for (int32_t i = 0; i < a->num; i++)
    if (strcmp(a->names[i], name) == 0) return i;
  return -1;
}

/* Why `name` (id `id`) cannot join a: served already, an id taken, or no room. OK when it can. */
static llb_status check_new(const struct lora_adapters *a, const char *name, int32_t id) {
  if (find_name(a, name) >= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "The lora adapter '%s' has already been loaded.", name);
  for (int32_t i = 0; i < a->num; i++)
    if (a->ids[i] == id)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapter '%s': its lora_int_id %d is adapter '%s''s; "
                      "choose another name", name, id, a->names[i]);
  if (a->num >= LORA_MODULES_MAX)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "LoRA adapter '%s': %d adapters served already, at most %d", name, a->num,
                    LORA_MODULES_MAX);
  return LLB_STATUS_OK;
}

/* Opens rel beneath dir and loads it against base; *file and *out on success only. */
static llb_status open_dynamic(const char *dir, const char *rel, const struct llama_model *base, int32_t max_lora_rank,
                               struct gguf_file **file, struct llama_lora **out) {
  const int fd = llb_open_regular_beneath(dir, rel);
  if (fd < 0 && errno == ENOSYS)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "loading LoRA adapters at run time needs Linux 5.6 or later (openat2)");
  if (fd < 0) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "'%s': " LORA_ADAPTERS_NOT_FOUND_TEXT, rel);
  llb_status st = gguf_open_fd(fd, rel, file);
  close(fd);
  if (!st && (st = llama_lora_load(*file, base, max_lora_rank, out))) {
    gguf_close(*file);
    *file = NULL;
  }
  return st;
}

llb_status lora_adapters_add(struct lora_adapters *a, const char *name, const char *dir, const char *rel,
                             const char *owner, const struct llama_model *base, int32_t max_lora_rank) {
  if (!name || !owner || !owner[0] || !rel)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapter: no name, owner or path");
  llb_status st = bus_name_check(BUS_NAME_KIND_MODEL, "lora_name", name);
  if (st) return st;
  const int32_t id = lora_module_int_id(name);
  if ((st = check_new(a, name, id))) return st;
  struct gguf_file *file = NULL;
  struct llama_lora *lora = NULL;
  if ((st = open_dynamic(dir, rel, base, max_lora_rank, &file, &lora))) {
    char why[512];
    snprintf(why, sizeof why, "%s", llb_err_last());
    return LLB_ERRF(st, "LoRA adapter '%s': %s", name, why);
  }
  const int32_t i = a->num;
  a->names[i] = strdup(name);
  a->paths[i] = strdup(rel);
  a->owners[i] = strdup(owner);
  if (!a->names[i] || !a->paths[i] || !a->owners[i]) {
    free(a->names[i]);
    free(a->paths[i]);
    free(a->owners[i]);
    a->names[i] = a->paths[i] = a->owners[i] = NULL;
    llama_lora_destroy(lora);
    gguf_close(file);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA adapter '%s'", name);
  }
  a->files[i] = file;
  a->adapters[i] = lora;
  a->ids[i] = id;
  a->beat[i] = (struct llb_lora_adapter){llb_str_c(a->names[i]), id, llama_lora_rank(lora), true,
                                         llb_str_c(a->paths[i]), llb_str_c(a->owners[i])};
  a->num = i + 1;
  return LLB_STATUS_OK;
}

llb_status lora_adapters_remove(struct lora_adapters *a, const char *name) {
  const int32_t i = name ? find_name(a, name) : -1;
  if (i < 0) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "The lora adapter '%s' cannot be found.", name ? name : "");
  if (!a->paths[i])
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "The lora adapter '%s' was given by --lora-modules: it cannot be "
                    "unloaded", name);
  if (a->num_retired >= LORA_MODULES_MAX)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "LoRA adapter '%s': %d unloaded adapters still serve requests; retry "
                    "when they finish", name, a->num_retired);
  a->retired[a->num_retired] = a->adapters[i];
  a->retired_files[a->num_retired++] = a->files[i];
  free(a->names[i]);
  free(a->paths[i]);
  free(a->owners[i]);
  for (int32_t j = i; j + 1 < a->num; j++) { /* keep the order: the beat lists them as loaded */
    a->files[j] = a->files[j + 1];
    a->adapters[j] = a->adapters[j + 1];
    a->ids[j] = a->ids[j + 1];
    a->beat[j] = a->beat[j + 1];
    a->names[j] = a->names[j + 1];
    a->paths[j] = a->paths[j + 1];
    a->owners[j] = a->owners[j + 1];
  }
  a->num--;
  const int32_t last = a->num;
  a->files[last] = NULL;
  a->adapters[last] = NULL;
  a->names[last] = a->paths[last] = a->owners[last] = NULL;
  return LLB_STATUS_OK;
}

void lora_adapters_reap(struct lora_adapters *a, bool (*in_use)(void *user, const struct llama_lora *adapter),
                        void *user) {
  int32_t kept = 0;
  for (int32_t i = 0; i < a->num_retired; i++) {
    if (in_use(user, a->retired[i])) {
      a->retired[kept] = a->retired[i];
      a->retired_files[kept++] = a->retired_files[i];
      continue;
    }
    llama_lora_destroy(a->retired[i]);
    gguf_close(a->retired_files[i]);
  }
  a->num_retired = kept;
}

void lora_adapters_free(struct lora_adapters *a) {
  if (!a) return;
  for (int32_t i = 0; i < a->num; i++) {
    llama_lora_destroy(a->adapters[i]);
    gguf_close(a->files[i]);
    free(a->names[i]);
    free(a->paths[i]);
    free(a->owners[i]);
  }
  for (int32_t i = 0; i < a->num_retired; i++) {
    llama_lora_destroy(a->retired[i]);
    gguf_close(a->retired_files[i]);
  }
  memset(a, 0, sizeof *a);
}
