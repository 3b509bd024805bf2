/* Test tool for model/vision/clip.h (tests/unit/test_clip.py drives it):
 *   clip_tool plan MMPROJ W H        prints "num_tiles grid_rows grid_cols rows_per_tile num_rows
 *                                    n_embd_out projector\n" then the prompt text
 *   clip_tool encode MMPROJ IMAGE    encodes IMAGE (JPEG/PNG), writes "rows n_embd_out\n" then
 *                                    rows * n_embd_out little-endian float32 to stdout
 * On an error: exit 2 and "<status name>: <message>" on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/vision/clip.h"

static int fail(llb_status st) {
  fprintf(stderr, "%s: %s\n", llb_strerror(st), llb_err_last());
  return 2;
}

static int plan(struct clip_model *m, int w, int h) {
  struct clip_plan p;
  llb_status st = clip_image_plan(m, w, h, &p);
  if (st != LLB_STATUS_OK) return fail(st);
  printf("%d %d %d %d %d %d %s\n", p.num_tiles, p.grid_rows, p.grid_cols, p.rows_per_tile, p.num_rows,
         clip_model_n_embd_out(m), clip_projector_type_name(p.projector_type));
  fwrite(p.prompt, 1, p.prompt_len, stdout);
  clip_plan_free(&p);
  return 0;
}

static int encode(struct clip_model *m, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  static uint8_t buf[64 << 20];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  const int32_t max_rows = 64 * 1024, d = clip_model_n_embd_out(m);
  float *out = malloc((size_t)max_rows * (size_t)d * sizeof(float));
  if (!out) return 1;
  int32_t rows = 0;
  llb_status st = clip_encode_image(m, buf, len, out, max_rows, &rows);
  if (st != LLB_STATUS_OK) {
    free(out);
    return fail(st);
  }
  printf("%d %d\n", rows, d);
  fwrite(out, sizeof(float), (size_t)rows * (size_t)d, stdout);
  free(out);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "plan") == 0 && argc != 5) || (strcmp(argv[1], "encode") == 0 && argc != 4)) {
    fprintf(stderr, "usage: clip_tool plan MMPROJ W H | clip_tool encode MMPROJ IMAGE\n");
    return 1;
  }
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  struct clip_model *m;
  llb_status st = clip_model_load(argv[2], 2, &m);
  if (st != LLB_STATUS_OK) return fail(st);
  int rc = strcmp(argv[1], "plan") == 0 ? plan(m, atoi(argv[3]), atoi(argv[4])) : encode(m, argv[3]);
  clip_model_destroy(m);
  return rc;
}
