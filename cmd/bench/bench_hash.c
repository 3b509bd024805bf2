/* llmbus-bench hash: what the keyed hashes of issue 38 cost (base/hash.h, libsodium's keyed
 * BLAKE2b): a prefix-cache block hash of `--block-size` tokens (the scheduler makes one per full
 * block: one per block_size decode steps of a request, prompt_len / block_size at its
 * admission), the cache-salt hash and a request id's tenant tag (the input processor makes
 * one per request). Prints the median over --repeats runs of --iterations hashes each, in ns of
 * the thread's CPU time (so a loaded machine does not inflate them),
 * and with --step-ms the share of a decode step of that length the block hashes of a batch of
 * --batch requests take in the worst step (each request's block filling in the same step). */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "cmd/bench/bench.h"
#include "cmd/flags/flags.h"

/* This thread's CPU time: what the hashes cost, whatever else runs on the machine. */
static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int bench_hash_main(int argc, char **argv) {
  int32_t block_size = 16, batch = 1, repeats = 5;
  int64_t iterations = 200000;
  double step_ms = 0;
  const struct flag t[] = {
      {.name = "block-size", .kind = FLAG_KIND_INT32, .target = &block_size, .metavar = "N", .min = 1, .max = 4096,
       .help = "tokens per prefix-cache block"},
      {.name = "iterations", .kind = FLAG_KIND_INT64, .target = &iterations, .metavar = "N", .min = 1, .max = 1e12,
       .help = "hashes per run"},
      {.name = "repeats", .kind = FLAG_KIND_INT32, .target = &repeats, .metavar = "N", .min = 1, .max = 99,
       .help = "runs (the median is printed)"},
      {.name = "step-ms", .kind = FLAG_KIND_DOUBLE, .target = &step_ms, .metavar = "MS", .min = 0, .max = 1e6,
       .help = "a decode step of this length: print the block hashes' share of it (0 = none)"},
      {.name = "batch", .kind = FLAG_KIND_INT32, .target = &batch, .metavar = "N", .min = 1, .max = 65536,
       .help = "with --step-ms: requests in the step, each filling a block in it (the worst step)"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {
      .program = "llmbus-bench hash", .sections = &sec, .num_sections = 1, .max_positional = 0,
      .usage = "usage: llmbus-bench hash [flags]\nThe keyed hashes' CPU cost: a block hash, a cache-salt hash, a "
               "request id's tenant tag.\n"};
  struct flag_args args;
  int rc = flags_parse(&cmd, argc, argv, &args);
  flag_args_free(&args);
  if (rc != FLAGS_CONTINUE) return rc;
  struct llb_hash_key key;
  llb_hash_key_generate(&key);
  int32_t *tokens = malloc((size_t)block_size * sizeof *tokens);
  if (!tokens) return 1;
  for (int32_t i = 0; i < block_size; i++) tokens[i] = 1000 + 37 * i;
  double block_ns[99], salt_ns[99], tag_ns[99];
  uint64_t sink = 0;
  const char *salt = "7:tenant1", *id = "chatcmpl-0123456789abcdef-9f8e7d6c";
  for (int r = 0; r < repeats; r++) {
    uint64_t parent = LLB_BLOCK_HASH_ROOT;
    const struct llb_block_extra_keys extra = {.has_cache_salt = true, .cache_salt_hash = 42};
    int64_t t0 = cpu_ns();
    for (int64_t i = 0; i < iterations; i++) parent = llb_block_hash(&key, parent, tokens, block_size, &extra);
    int64_t t1 = cpu_ns();
    for (int64_t i = 0; i < iterations; i++) sink ^= llb_hash_bytes(&key, salt, strlen(salt));
    int64_t t2 = cpu_ns();
    uint8_t tag[16];
    const struct llb_hash_part parts[2] = {{"tenant1", 7}, {id, strlen(id)}};
    for (int64_t i = 0; i < iterations; i++) llb_keyed_hash128_parts(&key, "llmbus-request-id-tag", parts, 2, tag);
    int64_t t3 = cpu_ns();
    sink ^= parent ^ tag[0];
    block_ns[r] = (double)(t1 - t0) / (double)iterations;
    salt_ns[r] = (double)(t2 - t1) / (double)iterations;
    tag_ns[r] = (double)(t3 - t2) / (double)iterations;
  }
  qsort(block_ns, (size_t)repeats, sizeof(double), cmp_double);
  qsort(salt_ns, (size_t)repeats, sizeof(double), cmp_double);
  qsort(tag_ns, (size_t)repeats, sizeof(double), cmp_double);
  const double b = block_ns[repeats / 2];
  printf("block_hash_ns=%.1f block_size=%d salt_hash_ns=%.1f request_id_tag_ns=%.1f (medians of %d x %" PRId64
         ", sink %llx)\n", b, block_size, salt_ns[repeats / 2], tag_ns[repeats / 2], repeats, iterations,
         (unsigned long long)(sink & 0xf));
  if (step_ms > 0)
    printf("decode step %.3f ms, batch %d: block hashes of its worst step %.4f%% of it, %.6f%% on average "
           "(one block a request every %d steps)\n", step_ms, batch, 100.0 * b * batch / (step_ms * 1e6),
           100.0 * b * batch / block_size / (step_ms * 1e6), block_size);
  free(tokens);
  return 0;
}
