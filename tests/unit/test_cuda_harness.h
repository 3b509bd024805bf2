/* A tiny assert harness for the CUDA tests (no cmocka: they also build in the standalone
 * project kernels/cuda/standalone on GPU machines without our other dependencies).
 * CHECK records a failure and goes on; RUN_CASE prints PASS/FAIL per case; tc_finish gives
 * the exit code. tc_require_device exits 77 ("no CUDA device: <reason>") without a device. */
#ifndef LLB_TESTS_UNIT_TEST_CUDA_HARNESS_H
#define LLB_TESTS_UNIT_TEST_CUDA_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "kernels/cuda/cuda_backend.h"

static int tc_failures;

#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
      fprintf(stderr, __VA_ARGS__);                                              \
      fputc('\n', stderr);                                                       \
      tc_failures++;                                                             \
    }                                                                            \
  } while (0)

/* A call that must return LLB_STATUS_OK; on failure the case stops (return). */
#define CHECK_OK(call)                                                           \
  do {                                                                           \
    llb_status st_ = (call);                                                     \
    if (st_ != LLB_STATUS_OK) {                                                  \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,        \
              llb_strerror(st_), llb_err_last_where());                          \
      tc_failures++;                                                             \
      return;                                                                    \
    }                                                                            \
  } while (0)

#define RUN_CASE(fn)                                                             \
  do {                                                                           \
    const int before_ = tc_failures;                                             \
    fn();                                                                        \
    printf("%s %s\n", tc_failures == before_ ? "PASS" : "FAIL", #fn);            \
    fflush(stdout);                                                              \
  } while (0)

static inline void tc_require_device(void) {
  char reason[256];
  if (cuda_device_probe(reason, sizeof(reason)) != LLB_STATUS_OK) {
    printf("no CUDA device: %s\n", reason);
    exit(77);
  }
  char desc[256];
  if (cuda_device_describe(desc, sizeof(desc)) == LLB_STATUS_OK) printf("device: %s\n", desc);
}

static inline int tc_finish(void) {
  printf("%d failure(s)\n", tc_failures);
  return tc_failures ? 1 : 0;
}

/* splitmix64 stream: tests draw fresh non-zero data from it per case and seed. */
static inline uint64_t tc_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* Uniform in [-1, 1). */
static inline float tc_uniform(uint64_t *s) { return (float)(tc_next(s) >> 40) * (2.0f / 16777216.0f) - 1.0f; }

/* Device buffer from host data (the case stops on failure through CHECK_OK's return). */
static inline llb_status tc_upload(struct cuda_ctx *c, const void *h, size_t bytes, void **d) {
  llb_status st = cuda_mem_alloc(bytes, d);
  if (st != LLB_STATUS_OK) return st;
  return cuda_copy_to_device(c, *d, h, bytes);
}

#endif
