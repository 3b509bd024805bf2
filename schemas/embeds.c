/* Finite checks on embedding rows (see embeds.h). */
#include "schemas/embeds.h"

#include <string.h>

int64_t llb_embeds_first_nonfinite(const void *data, int64_t bytes, const char *dtype) {
  const unsigned char *p = data;
  if (!p || bytes <= 0 || !dtype) return -1;
  if (strcmp(dtype, "f32") == 0) {
    for (int64_t i = 0; i + 4 <= bytes; i += 4) {
      uint32_t w = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
      if ((w & UINT32_C(0x7f800000)) == UINT32_C(0x7f800000)) return i / 4; /* exponent all ones */
    }
  } else if (strcmp(dtype, "f16") == 0) {
    for (int64_t i = 0; i + 2 <= bytes; i += 2) {
      uint16_t h = (uint16_t)(p[i] | p[i + 1] << 8);
      if ((h & 0x7c00) == 0x7c00) return i / 2;
    }
  }
  return -1;
}
