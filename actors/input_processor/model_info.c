/* What the input processor reads from the model's files; see model_info.h. */
#include "actors/input_processor/model_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "actors/input_processor/pd_decision.h"
#include "model/gguf/config.h"

/* An integer "<general.architecture>.<what>" of f; 0 when absent. */
static int64_t arch_int(const struct gguf_file *f, const char *what) {
  struct gguf_str arch;
  int64_t v = 0;
  if (gguf_get_str(f, "general.architecture", &arch) == LLB_STATUS_OK && arch.len < 64) {
    char key[96];
    snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.data, what);
    if (gguf_get_int(f, key, &v) != LLB_STATUS_OK) v = 0;
  }
  return v;
}

int32_t input_processor_model_max_model_len(const struct gguf_file *f, int32_t cap) {
  const int64_t ctx = arch_int(f, "context_length");
  return ctx > 0 && ctx < cap ? (int32_t)ctx : cap;
}

int32_t input_processor_model_hidden_size(const struct gguf_file *f) {
  const int64_t v = arch_int(f, "embedding_length");
  return v > 0 && v < (1 << 20) ? (int32_t)v : 0;
}

int64_t input_processor_model_kv_bytes_per_token(const struct gguf_file *f) {
  struct llama_config *c = malloc(sizeof *c); /* large: a flag per layer */
  int64_t bytes = 0;
  if (c && llama_config_from_gguf(f, c) == LLB_STATUS_OK)
    bytes = pd_kv_bytes_per_token_fp16(c->block_count, c->head_count_kv, c->head_dim);
  free(c);
  return bytes;
}

char *input_processor_model_token_text(const struct tokenizer *t, int32_t id) {
  size_t n = 0;
  const char *s = id >= 0 ? tokenizer_token_text(t, id, &n) : NULL;
  return strndup(s ? s : "", s ? n : 0);
}

/* clip_image_plan as the input processor's planner (mm_images.h). */
static llb_status plan_image(void *ctx, int32_t width, int32_t height, struct input_processor_image_plan *out) {
  struct clip_plan p;
  llb_status st = clip_image_plan(ctx, width, height, &p);
  if (st != LLB_STATUS_OK) return st;
  out->text = p.prompt; /* ownership moves to the caller */
  out->rows = p.num_rows;
  p.prompt = NULL;
  clip_plan_free(&p);
  return LLB_STATUS_OK;
}

llb_status input_processor_model_load_mmproj(const char *path, int32_t hidden_size, struct clip_model **clip, char *id,
                                    size_t cap, struct input_processor_image_config *image) {
  llb_status st = clip_model_load(path, 1, clip);
  if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st);
  if (clip_model_n_embd_out(*clip) != hidden_size)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--mmproj %s projects to %d columns but the model's hidden size is %d",
                    path, clip_model_n_embd_out(*clip), hidden_size);
  struct stat sb;
  const char *slash = strrchr(path, '/');
  snprintf(id, cap, "%.64s:%lld", slash ? slash + 1 : path, stat(path, &sb) == 0 ? (long long)sb.st_size : 0LL);
  *image = (struct input_processor_image_config){.plan = plan_image, .plan_ctx = *clip, .mmproj_id = id};
  return LLB_STATUS_OK;
}
