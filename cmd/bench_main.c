/* llmbus-bench: `serve` (an OpenAI-compatible endpoint under load) and `engine` (the bus
 * overhead per decode step), over cmd/bench/ (bench.h). */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cmd/bench/bench.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: llmbus-bench serve [options]    serving benchmark over HTTP (vLLM `bench serve`)\n"
          "       llmbus-bench engine [options]   decode step in-process vs through the bus\n"
          "       llmbus-bench hash [options]     the keyed hashes' cost per block and per decode step\n"
          "Each takes --help.\n");
}

int main(int argc, char **argv) {
  llb_log_set_actor("bench");
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "serve")) return bench_serve_main(argc - 1, argv + 1);
  if (!strcmp(argv[1], "engine")) return bench_engine_main(argc - 1, argv + 1);
  if (!strcmp(argv[1], "hash")) return bench_hash_main(argc - 1, argv + 1);
  fprintf(stderr, "llmbus-bench: unknown command %s\n", argv[1]);
  usage(stderr);
  return 2;
}
