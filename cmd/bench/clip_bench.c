/* llmbus-clip-bench (clip_bench.h): speed of the image encoder (model/vision/clip.h) on an mmproj,
 * images per second per image size.
 *
 * For each size: a synthetic RGB image of that size (gradients and a hash pattern, decoded
 * already: the JPEG/PNG decode is not timed) goes through clip_encode_rgb (preprocessing, the
 * ViT and the projector for every tile); prints images/s and tiles/s as the median (min, max)
 * of --runs runs after one warm-up run, the tile count, the embedding rows and the CPU seconds
 * a tile took (all threads). Random weights
 * of a real encoder's shapes come from tests/tools/make_mmproj.py (e.g. --shape smolvlm-256m);
 * ops/bench/clip.sh runs the recorded configuration. */
#include "cmd/bench/clip_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/status.h"
#include "model/vision/clip.h"
#include "model/vision/image.h"

static int die(const char *what, llb_status st) {
  fprintf(stderr, "llmbus-clip-bench: %s: %s: %s\n", what, llb_strerror(st), llb_err_last());
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(struct llb_image *img) {
  for (int32_t y = 0; y < img->height; y++)
    for (int32_t x = 0; x < img->width; x++) {
      uint8_t *p = img->rgb + ((size_t)y * (size_t)img->width + (size_t)x) * 3;
      const uint32_t hsh = ((uint32_t)x * 2654435761u) ^ ((uint32_t)y * 40503u);
      p[0] = (uint8_t)(x * 255 / img->width);
      p[1] = (uint8_t)(y * 255 / img->height);
      p[2] = (uint8_t)(hsh >> 24);
    }
}

int clip_bench_run(const struct clip_bench_options *o) {
  const char *mmproj = o->mmproj;
  const int threads = o->threads, runs = o->runs, n_sizes = o->n_sizes;
  const int32_t(*sizes)[2] = o->sizes;
  if (n_sizes < 1 || n_sizes > CLIP_BENCH_MAX_SIZES) return fprintf(stderr, "bad --sizes\n"), 2;
  if (!mmproj || threads < 1 || runs < 1 || runs > CLIP_BENCH_MAX_RUNS) return fprintf(stderr, "need --mmproj\n"), 2;
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  struct clip_model *m;
  llb_status st = clip_model_load(mmproj, threads, &m);
  if (st != LLB_STATUS_OK) return die("load", st);
  printf("mmproj %s (%s, n_embd_out %d)\nthreads %d, runs %d\n", mmproj, clip_projector_type_name(clip_model_projector_type(m)),
         clip_model_n_embd_out(m), threads, runs);
  for (int si = 0; si < n_sizes; si++) {
    struct clip_plan plan;
    if ((st = clip_image_plan(m, sizes[si][0], sizes[si][1], &plan)) != LLB_STATUS_OK) return die("plan", st);
    struct llb_image img = {sizes[si][0], sizes[si][1], malloc((size_t)sizes[si][0] * (size_t)sizes[si][1] * 3)};
    float *out = malloc((size_t)plan.num_rows * (size_t)clip_model_n_embd_out(m) * sizeof(float));
    if (!img.rgb || !out) return die("buffers", LLB_STATUS_OUT_OF_MEMORY);
    fill(&img);
    double v[CLIP_BENCH_MAX_RUNS], c[CLIP_BENCH_MAX_RUNS];
    for (int r = 0; r <= runs; r++) { /* run 0 warms caches and is not counted */
      int32_t rows;
      const double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
      if ((st = clip_encode_rgb(m, &img, out, plan.num_rows, &rows)) != LLB_STATUS_OK) return die("encode", st);
      if (r > 0) v[r - 1] = 1.0 / (clock_s(CLOCK_MONOTONIC) - t0), c[r - 1] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(v, (size_t)runs, sizeof(double), cmp_double);
    qsort(c, (size_t)runs, sizeof(double), cmp_double);
    /* cpu s a tile: the steadier number on a shared machine (as llmbus-kernel-bench's cpu ms/tok) */
    printf("%5dx%-5d %2d tiles %5d rows  %8.3f images/s (min %.3f, max %.3f)  %7.3f tiles/s  cpu %.2f s/tile\n",
           sizes[si][0], sizes[si][1], plan.num_tiles, plan.num_rows, v[runs / 2], v[0], v[runs - 1],
           v[runs / 2] * plan.num_tiles, c[runs / 2] / plan.num_tiles);
    fflush(stdout); /* each size as it is measured: a long run can be cut short */
    clip_plan_free(&plan);
    free(img.rgb);
    free(out);
  }
  clip_model_destroy(m);
  return 0;
}
