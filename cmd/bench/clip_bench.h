/* llmbus-clip-bench: images/s and tiles/s of the image encoder (model/vision/clip.h) per image size,
 * the median (min, max) of N runs after a warm-up, and the CPU seconds a tile takes. */
#ifndef LLB_CMD_CLIP_BENCH_H
#define LLB_CMD_CLIP_BENCH_H

#include <stdint.h>

#define CLIP_BENCH_MAX_RUNS 64
#define CLIP_BENCH_MAX_SIZES 16

/* What to measure (strings borrowed). */
struct clip_bench_options {
  const char *mmproj; /* the mmproj GGUF (model/vision/clip.h) */
  int threads;        /* >= 1 */
  int runs;           /* 1..CLIP_BENCH_MAX_RUNS */
  int32_t sizes[CLIP_BENCH_MAX_SIZES][2]; /* [n_sizes] {width, height} of the synthetic images */
  int n_sizes;        /* 1..CLIP_BENCH_MAX_SIZES */
};

/* Runs the benchmark, printing one line per size to stdout as it is measured (errors to
 * stderr). Returns the process exit code: 0, 1 (the model or an encode failed), 2 (options
 * out of range). */
int clip_bench_run(const struct clip_bench_options *o);

#endif
