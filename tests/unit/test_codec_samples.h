/* Fully populated sample messages for the codec tests and the decoder fuzzer: one case per
 * message kind, with every field set, non-empty arrays and UTF-8 strings, plus type-erased
 * decode / encode wrappers so that generic tests can loop over all kinds. */
#ifndef LLB_TEST_CODEC_SAMPLES_H
#define LLB_TEST_CODEC_SAMPLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schemas/codec.h"

struct codec_case {
  const char *name;
  enum llb_message_kind kind;
  size_t view_size; /* bytes of the view struct */
  /* Encodes the sample into `out`. */
  llb_status (*encode_sample)(struct llb_buf *out);
  /* Encodes the sample into a caller buffer (llb_X_encode). */
  llb_status (*encode_sample_into)(uint8_t *buf, size_t cap, size_t *len_out);
  llb_status (*decode)(const uint8_t *buf, size_t len, struct llb_arena *arena, void *view);
  llb_status (*encode_view)(const void *view, struct llb_buf *out);
  /* True when a decoded view equals the sample field by field; prints the first mismatch. */
  bool (*equals_sample)(const void *view);
};

int codec_num_cases(void);
const struct codec_case *codec_case_at(int i);
const struct codec_case *codec_case_of(enum llb_message_kind kind);

/* The largest view_size of all cases (for a generic view buffer). */
#define CODEC_MAX_VIEW_BYTES 512

#endif
