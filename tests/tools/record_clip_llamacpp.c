/* Records the image embeddings llama.cpp's mtmd computes, for test_clip.py's golden files
 * (built and run by tests/tools/record_clip_llamacpp.sh against the llama.cpp tree of
 * ../shared/PLATFORM.md; not part of the llmbus build):
 *
 *   record_clip_llamacpp TEXT_MODEL MMPROJ RGB_FILE W H OUT FLASH_ATTN(0|1)
 *
 * RGB_FILE holds W * H * 3 raw 8-bit RGB bytes (the decoded test image, so that no decoder
 * differs). The text model is only there because mtmd_init_from_file needs one (its hidden
 * size must equal the projector's output). OUT gets "rows n_embd\n" and then rows * n_embd
 * float32: the embeddings of every image chunk of one "<__media__>" marker, in prompt order
 * (idefics3: slices row-major, then the overview). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "mtmd.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
  (void)user;
  if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s TEXT_MODEL MMPROJ RGB_FILE W H OUT FLASH_ATTN\n", argv[0]);
    return 1;
  }
  const int w = atoi(argv[4]), h = atoi(argv[5]);
  const size_t n_rgb = (size_t)w * (size_t)h * 3;
  unsigned char *rgb = malloc(n_rgb);
  FILE *f = fopen(argv[3], "rb");
  if (!rgb || !f || fread(rgb, 1, n_rgb, f) != n_rgb) {
    fprintf(stderr, "cannot read %zu bytes of %s\n", n_rgb, argv[3]);
    return 1;
  }
  fclose(f);
  llama_log_set(quiet, NULL);
  mtmd_log_set(quiet, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model *model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  struct mtmd_context_params cp = mtmd_context_params_default();
  cp.use_gpu = false;
  cp.n_threads = 2;
  cp.warmup = false;
  cp.print_timings = false;
  cp.flash_attn_type = atoi(argv[7]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  mtmd_context *ctx = mtmd_init_from_file(argv[2], model, cp);
  if (!ctx) return 1;
  mtmd_bitmap *bmp = mtmd_bitmap_init((uint32_t)w, (uint32_t)h, rgb);
  mtmd_input_chunks *chunks = mtmd_input_chunks_init();
  struct mtmd_input_text text = {mtmd_default_marker(), strlen(mtmd_default_marker()), false, true};
  const mtmd_bitmap *bitmaps[1] = {bmp};
  if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1) != 0) return 1;
  const int n_embd = llama_model_n_embd_inp(model);
  size_t rows = 0;
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++)
    if (mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks, i)) == MTMD_INPUT_CHUNK_TYPE_IMAGE)
      rows += mtmd_input_chunk_get_n_tokens(mtmd_input_chunks_get(chunks, i));
  FILE *out = fopen(argv[6], "wb");
  if (!out) return 1;
  fprintf(out, "%zu %d\n", rows, n_embd);
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
    const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_IMAGE) continue;
    if (mtmd_encode_chunk(ctx, c) != 0) return 1;
    fwrite(mtmd_get_output_embd(ctx), sizeof(float), mtmd_input_chunk_get_n_tokens(c) * (size_t)n_embd, out);
  }
  fclose(out);
  mtmd_input_chunks_free(chunks);
  mtmd_bitmap_free(bmp);
  mtmd_free(ctx);
  llama_model_free(model);
  free(rgb);
  return 0;
}
