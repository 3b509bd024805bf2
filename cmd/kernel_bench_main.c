/* llmbus-kernel-bench: the flags of cmd/bench/kernel_bench.h.
 *
 *   llmbus-kernel-bench [--model PATH] [--threads N] [--decode-threads N] [--runs N] [--prefill N] [--decode N] [--context N]
 *                       [--batch B[,B...]] [--check] [--roofline] [--packed-cache-dir DIR]
 *                       [--kv-cache-dtype auto|fp16|fp8|q8_0]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench/kernel_bench.h"

#ifndef LLB_DEFAULT_MODEL
#define LLB_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

int main(int argc, char **argv) {
  struct kernel_bench_options o = {.model = LLB_DEFAULT_MODEL, .threads = 2, .runs = 5, .n_prefill = 512,
                                   .n_decode = 32, .decode_context = 16, .batches = {1, 16}, .n_batches = 2};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--check")) o.check = true;
    else if (!strcmp(a, "--roofline")) o.roofline = true;
    else if (v && !strcmp(a, "--model")) o.model = argv[++i];
    else if (v && !strcmp(a, "--packed-cache-dir")) o.packed_cache_dir = argv[++i];
    else if (v && !strcmp(a, "--kv-cache-dtype")) o.kv_cache_dtype = argv[++i];
    else if (v && !strcmp(a, "--threads")) o.threads = atoi(argv[++i]);
    else if (v && !strcmp(a, "--decode-threads")) o.decode_threads = atoi(argv[++i]);
    else if (v && !strcmp(a, "--runs")) o.runs = atoi(argv[++i]);
    else if (v && !strcmp(a, "--prefill")) o.n_prefill = atoi(argv[++i]);
    else if (v && !strcmp(a, "--decode")) o.n_decode = atoi(argv[++i]);
    else if (v && !strcmp(a, "--context")) o.decode_context = atoi(argv[++i]);
    else if (v && !strcmp(a, "--batch")) {
      o.n_batches = 0;
      for (char *s = argv[++i]; *s && o.n_batches < KERNEL_BENCH_MAX_BATCHES;) {
        o.batches[o.n_batches++] = (int32_t)strtol(s, &s, 10);
        if (*s == ',') s++;
        else break;
      }
    } else {
      fprintf(stderr, "usage: %s [--model PATH] [--threads N] [--decode-threads N] [--runs N] [--prefill N] [--decode N] [--context N] "
                      "[--batch B[,B...]] [--check] [--roofline] [--packed-cache-dir DIR] [--kv-cache-dtype auto|fp16|fp8|q8_0]\n", argv[0]);
      return 2;
    }
  }
  return kernel_bench_run(&o);
}
