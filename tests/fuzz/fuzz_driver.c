/* Standalone driver for LLVMFuzzerTestOneInput (no libFuzzer needed): mutates the encodings
 * of the sample messages with a fixed seed for a bounded number of iterations or seconds.
 *   fuzz_schemas_decoders [iterations (default 200000)] [seconds (default 5)] [seed]
 *   fuzz_schemas_decoders --write-seeds DIR   (the sample encodings, one file per message kind:
 *                                              the libFuzzer corpus tests/fuzz/corpus/fuzz_schemas_decoders)
 * Mutations: bit flips, random bytes, interesting values, truncation and extension (half of
 * the time with the size prefix rewritten so the verifier, not the size check, must catch
 * it), splices from another sample. Exit 0 when every input was handled. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/unit/test_codec_samples.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng;
static uint64_t next_rand(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Mutates buf[0..*len) in place (capacity cap); returns nothing, may change *len. */
static void mutate(uint8_t *buf, size_t *len, size_t cap, const struct llb_buf *seeds, int nseeds) {
  static const uint32_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff,
                                         0x80000000u, 0xffffffffu, 4, 8, 12, 16};
  int rounds = 1 + (int)(next_rand() % 4);
  for (int r = 0; r < rounds && *len > 0; r++) {
    size_t pos = next_rand() % *len;
    switch (next_rand() % 6) {
    case 0:
      buf[pos] ^= (uint8_t)(1u << (next_rand() % 8));
      break;
    case 1:
      buf[pos] = (uint8_t)next_rand();
      break;
    case 2: { /* a 32-bit interesting value at an aligned position */
      uint32_t v = interesting[next_rand() % (sizeof interesting / sizeof interesting[0])];
      pos &= ~(size_t)3;
      if (pos + 4 <= *len)
        memcpy(buf + pos, &v, 4);
      break;
    }
    case 3:
      *len = pos;
      break;
    case 4: {
      size_t extra = 1 + next_rand() % 64;
      if (*len + extra <= cap) {
        for (size_t i = 0; i < extra; i++)
          buf[*len + i] = (uint8_t)next_rand();
        *len += extra;
      }
      break;
    }
    default: { /* splice a chunk of another sample at the same offset */
      const struct llb_buf *o = &seeds[next_rand() % (uint64_t)nseeds];
      if (pos < o->len) {
        size_t n = 1 + next_rand() % 32;
        if (pos + n > o->len)
          n = o->len - pos;
        if (pos + n > *len)
          n = *len - pos;
        memcpy(buf + pos, o->data + pos, n);
      }
      break;
    }
    }
  }
  if (*len >= 4 && next_rand() % 2) {
    uint32_t n = (uint32_t)(*len - 4);
    memcpy(buf, &n, 4);
  }
}

static int write_seeds(const char *dir) {
  for (int i = 0; i < codec_num_cases(); i++) {
    struct llb_buf b = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, codec_case_at(i)->name);
    FILE *f = codec_case_at(i)->encode_sample(&b) == LLB_STATUS_OK ? fopen(path, "wb") : NULL;
    bool ok = f && fwrite(b.data, 1, b.len, f) == b.len;
    if (f) ok = fclose(f) == 0 && ok;
    llb_buf_free(&b);
    if (!ok) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
  long iterations = argc > 1 ? atol(argv[1]) : 200000;
  double seconds = argc > 2 ? atof(argv[2]) : 5.0;
  rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 0x5eed;
  int nseeds = codec_num_cases();
  struct llb_buf seeds[LLB_MESSAGE_KIND_COUNT] = {{0}};
  size_t cap = 0;
  for (int i = 0; i < nseeds; i++) {
    if (codec_case_at(i)->encode_sample(&seeds[i]) != LLB_STATUS_OK) {
      fprintf(stderr, "sample %s does not encode: %s\n", codec_case_at(i)->name, llb_err_last());
      return 1;
    }
    if (seeds[i].len > cap)
      cap = seeds[i].len;
  }
  cap += 128;
  uint8_t *buf = malloc(cap);
  double start = now_s();
  long n = 0;
  for (; n < iterations; n++) {
    if ((n & 1023) == 0 && now_s() - start > seconds)
      break;
    const struct llb_buf *s = &seeds[next_rand() % (uint64_t)nseeds];
    size_t len = s->len;
    memcpy(buf, s->data, len);
    mutate(buf, &len, cap, seeds, nseeds);
    /* An exact-size heap copy, so that ASan catches a read past the end. */
    uint8_t *input = malloc(len ? len : 1);
    memcpy(input, buf, len);
    LLVMFuzzerTestOneInput(input, len);
    free(input);
  }
  printf("fuzz_schemas_decoders: %ld inputs in %.2f s, no failure\n", n, now_s() - start);
  free(buf);
  for (int i = 0; i < nseeds; i++)
    llb_buf_free(&seeds[i]);
  return n > 0 ? 0 : 1;
}
