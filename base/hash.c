/* Hashing (hash.h). */
#include "base/hash.h"

#include <string.h>

uint64_t llb_hash_bytes(const void *data, size_t len) {
  const unsigned char *p = data;
  uint64_t h = llb_hash_absorb(UINT64_C(0x13198a2e03707344), (uint64_t)len);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = llb_hash_absorb(h, w);
  }
  uint64_t tail = 0;
  for (size_t k = 0; i + k < len; k++) tail |= (uint64_t)p[i + k] << (8 * k);
  return llb_mix64(llb_hash_absorb(h, tail));
}

/* Domain tags keep a salt from reading as a token or an mm hash. */
enum { TAG_TOKENS = 0x546f6b, TAG_SALT = 0x53616c74, TAG_MM = 0x4d4d };

uint64_t llb_block_hash(uint64_t parent_hash, const int32_t *tokens, int32_t num_tokens,
                        const struct llb_block_extra_keys *extra) {
  uint64_t h = llb_hash_absorb(UINT64_C(0x243f6a8885a308d3), parent_hash);
  h = llb_hash_absorb(h, TAG_TOKENS);
  int32_t i = 0;
  for (; i + 1 < num_tokens; i += 2) /* two 32-bit tokens per word */
    h = llb_hash_absorb(h, (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32));
  if (i < num_tokens) h = llb_hash_absorb(h, (uint64_t)(uint32_t)tokens[i] | (UINT64_C(1) << 63));
  int32_t num_mm = 0;
  if (extra) {
    if (extra->has_cache_salt) {
      h = llb_hash_absorb(h, TAG_SALT);
      h = llb_hash_absorb(h, extra->cache_salt_hash);
    }
    for (int32_t k = 0; k < extra->num_mm_hashes && extra->mm_hashes; k++) {
      h = llb_hash_absorb(h, TAG_MM);
      h = llb_hash_absorb(h, extra->mm_hashes[k]);
    }
    num_mm = extra->num_mm_hashes;
  }
  h = llb_hash_absorb(h, ((uint64_t)(uint32_t)num_tokens << 32) | (uint32_t)num_mm);
  return llb_mix64(h);
}
