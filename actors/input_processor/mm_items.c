/* Content hash of multimodal items. See mm_items.h. */
#include "actors/input_processor/mm_items.h"

#include <stdio.h>
#include <string.h>

#define K1 UINT64_C(0x9e3779b97f4a7c15)
#define K2 UINT64_C(0xc2b2ae3d27d4eb4f)
#define K3 UINT64_C(0x165667b19e3779f9)

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t fmix(uint64_t h) {
  h ^= h >> 33;
  h *= UINT64_C(0xff51afd7ed558ccd);
  h ^= h >> 33;
  h *= UINT64_C(0xc4ceb9fe1a85ec53);
  return h ^ (h >> 33);
}

struct h128 {
  uint64_t a, b;
  uint64_t n;
};

static void absorb(struct h128 *h, uint64_t w) {
  h->a = rotl(h->a ^ (w * K1), 31) * K2;
  h->b = rotl(h->b + (w ^ K3), 27) * K1 + h->a;
  h->n++;
}

static void absorb_bytes(struct h128 *h, const void *data, size_t len) {
  const unsigned char *p = data;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    absorb(h, w);
  }
  uint64_t tail = (uint64_t)len << 56; /* the length separates fields */
  for (size_t k = 0; i + k < len; k++) tail |= (uint64_t)p[i + k] << (8 * k);
  absorb(h, tail);
}

void inproc_mm_hash(const char *salt, const struct inproc_mm_item *it, char *out) {
  struct h128 h = {UINT64_C(0x6c6c6d6275732d6d), UINT64_C(0x6d2d6974656d7331), 0}; /* "llmbus-m" "m-items1" */
  const char *strs[3] = {salt ? salt : "", it->modality ? it->modality : "", it->dtype ? it->dtype : ""};
  for (int i = 0; i < 3; i++) absorb_bytes(&h, strs[i], strlen(strs[i]));
  absorb(&h, ((uint64_t)(uint32_t)it->num_rows << 32) | (uint32_t)it->num_cols);
  absorb_bytes(&h, it->data, it->data_bytes > 0 ? (size_t)it->data_bytes : 0);
  uint64_t a = fmix(h.a ^ rotl(h.b, 17) ^ h.n), b = fmix(h.b ^ rotl(a, 29) ^ K2);
  snprintf(out, INPROC_MM_HASH_BYTES, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}
