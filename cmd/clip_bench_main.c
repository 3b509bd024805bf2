/* llmbus-clip-bench: the flags of cmd/bench/clip_bench.h.
 *
 *   llmbus-clip-bench --mmproj PATH [--threads N] [--runs N] [--sizes WxH[,WxH...]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench/clip_bench.h"
#include "model/image.h"

/* "224x224,512x384" -> sizes; returns the count, -1 on a bad list. */
static int parse_sizes(const char *s, int32_t (*wh)[2]) {
  int n = 0;
  while (*s && n < CLIP_BENCH_MAX_SIZES) {
    char *end;
    long w = strtol(s, &end, 10);
    if (*end != 'x') return -1;
    long h = strtol(end + 1, &end, 10);
    if (w < 1 || h < 1 || w > LLB_IMAGE_DEFAULT_MAX_SIDE || h > LLB_IMAGE_DEFAULT_MAX_SIDE || (*end && *end != ','))
      return -1;
    wh[n][0] = (int32_t)w, wh[n][1] = (int32_t)h, n++;
    s = *end ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  struct clip_bench_options o = {.threads = 2, .runs = 3,
                                 .sizes = {{224, 224}, {384, 384}, {512, 512}, {1024, 768}}, .n_sizes = 4};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && !strcmp(a, "--mmproj")) o.mmproj = argv[++i];
    else if (v && !strcmp(a, "--threads")) o.threads = atoi(argv[++i]);
    else if (v && !strcmp(a, "--runs")) o.runs = atoi(argv[++i]);
    else if (v && !strcmp(a, "--sizes")) {
      if ((o.n_sizes = parse_sizes(argv[++i], o.sizes)) < 1) return fprintf(stderr, "bad --sizes\n"), 2;
    } else {
      fprintf(stderr, "usage: llmbus-clip-bench --mmproj PATH [--threads N] [--runs N] [--sizes WxH[,WxH...]]\n");
      return 2;
    }
  }
  return clip_bench_run(&o);
}
