/* What the input processor reads from the model's files at start: its context length and
 * hidden size (GGUF metadata), the text of its bos/eos tokens (for chat templates), and the
 * multimodal projector it plans images with (--mmproj). Pure functions over their arguments. */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_MODEL_INFO_H
#define LLB_ACTORS_INPUT_PROCESSOR_MODEL_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "actors/input_processor/input_processor.h"
#include "base/status.h"
#include "model/vision/clip.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

/* Context length of the model: "<general.architecture>.context_length", capped at cap. A
 * vocab-only GGUF may lack it: then cap. */
int32_t input_processor_model_max_model_len(const struct gguf_file *f, int32_t cap);

/* "<general.architecture>.embedding_length": columns of "embeds" items; 0 if absent. */
int32_t input_processor_model_hidden_size(const struct gguf_file *f);

/* Bytes of KV one token takes in an fp16 cache (pd_decision.h), from the model's geometry
 * (model/gguf/config.h); 0 when the file has none (a vocab-only GGUF). */
int64_t input_processor_model_kv_bytes_per_token(const struct gguf_file *f);

/* The vocabulary text of token id, malloc'd ("" for a bad id); NULL on OOM. */
char *input_processor_model_token_text(const struct tokenizer *t, int32_t id);

/* Loads the projector at `path` for its image plans (the weights stay mapped, never run here)
 * into *clip (the caller destroys it, also on error); its output width must be hidden_size, as
 * the worker checks. Sets id (cap bytes: "<file name>:<bytes>", which enters the images'
 * mm_hash) and *image (the planner over *clip; id is borrowed by it). Errors: clip_model_load's,
 * INVALID_ARGUMENT (width). */
llb_status input_processor_model_load_mmproj(const char *path, int32_t hidden_size, struct clip_model **clip, char *id,
                                    size_t cap, struct input_processor_image_config *image);

#endif
