/* The walk check of the structured-output fuzz targets (see so_fuzz_walk.h). */
#include "tests/fuzz/so_fuzz_walk.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/status.h"

static const char *const extra[] = {"ab",   "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xe2\x82", "\n\n", "{\"",
                                    "1.5",  "true",     "\":",           "\\u00",             "},{",      "-0"};
enum { N_EXTRA = sizeof extra / sizeof extra[0], N_VOCAB = 255 + N_EXTRA + 1, EOS = N_VOCAB - 1 };

static struct so_vocab *vocab(void) {
  static struct so_vocab *v;
  if (v) return v;
  static char bytes[255];
  const char *pieces[N_VOCAB];
  size_t lens[N_VOCAB];
  for (int i = 0; i < 255; i++) {
    bytes[i] = (char)(i + 1);
    pieces[i] = &bytes[i];
    lens[i] = 1;
  }
  for (int i = 0; i < N_EXTRA; i++) pieces[255 + i] = extra[i], lens[255 + i] = strlen(extra[i]);
  pieces[EOS] = "", lens[EOS] = 0;
  const int32_t eos = EOS;
  if (so_vocab_create(N_VOCAB, pieces, lens, &eos, 1, &v) != LLB_STATUS_OK) abort();
  return v;
}

void so_fuzz_walk(const struct so_grammar *g, uint64_t h) {
  struct so_vocab *v = vocab();
  struct so_matcher *m = NULL, *probe = NULL;
  if (so_matcher_create(g, &m) != LLB_STATUS_OK || so_matcher_create(g, &probe) != LLB_STATUS_OK) abort();
  uint32_t mask[(N_VOCAB + 31) / 32];
  for (int step = 0; step < 24; step++) {
    int32_t n = so_vocab_fill_mask(v, m, mask);
    int32_t allowed[N_VOCAB], k = 0;
    for (int32_t id = 0; id < N_VOCAB; id++) {
      bool bit = mask[id / 32] >> (id % 32) & 1u;
      so_matcher_copy_state(probe, m);
      if (bit != so_matcher_accept_token(probe, v, id)) abort();
      if (bit) allowed[k++] = id;
    }
    if (k != n) abort();
    if ((mask[EOS / 32] >> (EOS % 32) & 1u) != so_matcher_is_complete(m)) abort();
    if (k == 0) break;
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    int32_t pick = allowed[(h >> 33) % (uint64_t)k];
    if (pick == EOS) break;
    if (!so_matcher_accept_token(m, v, pick)) abort();
  }
  so_matcher_destroy(m);
  so_matcher_destroy(probe);
}

uint64_t so_fuzz_seed(const uint8_t *data, size_t size) {
  return llb_fnv1a64(UINT64_C(1469598103934665603), data, size); /* not FNV's basis: kept, so seeds stay */
}
