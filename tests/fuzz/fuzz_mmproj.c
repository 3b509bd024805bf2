/* libFuzzer target for the mmproj loader (model/vision/clip.h clip_model_load, the input processor's
 * and the worker's --mmproj): any bytes as the GGUF file of a vision projector, written to a
 * memfd the loader maps by its /proc path. Seed: run.sh writes a tiny random-weight mmproj with
 * tests/tools/make_mmproj.py. Oracle beyond no crash, leak or hang: a model that loads plans
 * an image into a positive number of rows of its output width. */
#include <fcntl.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/vision/clip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static int file_fd = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (file_fd < 0) { /* a memfd the loader opens by path: no disk */
    file_fd = memfd_create("llmbus-fuzz-mmproj", MFD_CLOEXEC);
    if (file_fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", file_fd);
  }
  if (ftruncate(file_fd, 0) != 0 || pwrite(file_fd, data, size, 0) != (ssize_t)size) abort();
  struct clip_model *m = NULL;
  if (clip_model_load(path, 1, &m) != LLB_STATUS_OK) return 0;
  struct clip_plan p;
  if (clip_image_plan(m, 40, 30, &p) == LLB_STATUS_OK) {
    if (clip_model_n_embd_out(m) < 1 || p.num_rows < 1 || p.num_rows != p.num_tiles * p.rows_per_tile) abort();
    clip_plan_free(&p);
  }
  clip_model_destroy(m);
  return 0;
}
