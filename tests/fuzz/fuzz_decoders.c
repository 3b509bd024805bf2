/* Fuzz entry for every schemas decoder: each input is offered to all decoders (the identifier
 * check routes it; the others must refuse it cleanly). Whatever a decoder accepts must encode
 * again and decode again: the codec never accepts a view it could not have produced.
 * Built as a libFuzzer target with -DLLB_FUZZ=ON (clang), and linked with fuzz_driver.c for
 * a bounded, fixed-seed run under ctest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/test_codec_samples.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct llb_arena arena;
  static struct llb_buf again;
  static int ready;
  if (!ready) {
    llb_arena_init(&arena, NULL, 0);
    ready = 1;
  }
  _Alignas(16) uint8_t view[CODEC_MAX_VIEW_BYTES];
  _Alignas(16) uint8_t view2[CODEC_MAX_VIEW_BYTES];
  for (int i = 0; i < codec_num_cases(); i++) {
    const struct codec_case *c = codec_case_at(i);
    llb_status st = c->decode(data, size, &arena, view);
    if (st == LLB_STATUS_OK) {
      if (llb_message_identify(data, size) != c->kind) {
        fprintf(stderr, "%s accepted a buffer with another identifier\n", c->name);
        abort();
      }
      if (c->encode_view(view, &again) != LLB_STATUS_OK ||
          c->decode(again.data, again.len, &arena, view2) != LLB_STATUS_OK) {
        fprintf(stderr, "%s: accepted view does not round-trip: %s\n", c->name, llb_err_last());
        abort();
      }
    } else if (st != LLB_STATUS_MALFORMED && st != LLB_STATUS_TOO_LARGE) {
      fprintf(stderr, "%s: unexpected status %s: %s\n", c->name, llb_strerror(st),
              llb_err_last());
      abort();
    }
    llb_arena_reset(&arena);
  }
  return 0;
}
