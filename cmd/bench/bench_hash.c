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
  int32_t block_size = 16, batch = 1;
  int64_t iterations = 200000;
  int repeats = 5;
  double step_ms = 0;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--block-size") && v) block_size = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iterations") && v) iterations = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && v) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--step-ms") && v) step_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && v) batch = atoi(argv[++i]);
    else {
      fprintf(!strcmp(argv[i], "--help") ? stdout : stderr,
              "usage: llmbus-bench hash [--block-size 16] [--iterations 200000] [--repeats 5] [--step-ms MS "
              "[--batch 1]]\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  if (block_size < 1 || block_size > 4096 || iterations < 1 || repeats < 1 || repeats > 99 || batch < 1) return 2;
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
