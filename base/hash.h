/* Hashing: the one copy of each hash function the project uses (docs/design.md §1).
 *
 * - FNV-1a 64 (Fowler, Noll, Vo; the IETF draft-eastlake-fnv constants): small keys of hash
 *   tables (request ids, token texts), file identities. Fast, not collision resistant.
 * - splitmix64 (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators"):
 *   its finalizer `llb_mix64` (a bijection with full avalanche) and its generator step.
 * - `llb_hash_bytes` and `llb_block_hash`: the prefix cache's hashes (vLLM
 *   kv_cache_utils.hash_block_tokens). Their values are part of the KV protocol: the scheduler
 *   computes block hashes, the kv_manager compares them and the input processor's router
 *   reads them, so they never change between versions that talk to each other.
 * Every function is pure: no allocation, no state but what the caller passes.
 */
#ifndef LLB_BASE_HASH_H
#define LLB_BASE_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* FNV-1a 64's offset basis: the h to start a hash with. */
#define LLB_FNV1A64_INIT UINT64_C(0xcbf29ce484222325)

/* FNV-1a 64 over data[len], continuing from h (LLB_FNV1A64_INIT to start). data may be NULL
 * when len is 0. */
static inline uint64_t llb_fnv1a64(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * UINT64_C(1099511628211);
  return h;
}

/* FNV-1a 64 of a NUL-terminated string (its bytes without the NUL). */
static inline uint64_t llb_fnv1a64_str(const char *s) {
  uint64_t h = LLB_FNV1A64_INIT;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
  return h;
}

/* The splitmix64 finalizer: a bijection on 64-bit words with full avalanche. */
static inline uint64_t llb_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  x ^= x >> 31;
  return x;
}

/* splitmix64's golden-ratio increment. */
#define LLB_SPLITMIX64_GAMMA UINT64_C(0x9e3779b97f4a7c15)

/* The next value of the splitmix64 generator whose state is *state (any seed; advanced). */
static inline uint64_t llb_splitmix64_next(uint64_t *state) {
  *state += LLB_SPLITMIX64_GAMMA;
  return llb_mix64(*state);
}

/* Absorbs the word w into the hash state h: mix64(h ^ w) + gamma. Distinct words absorbed
 * from the same state give distinct states (mix64 is a bijection). */
static inline uint64_t llb_hash_absorb(uint64_t h, uint64_t w) {
  return llb_mix64(h ^ w) + LLB_SPLITMIX64_GAMMA;
}

/* 64-bit hash of a byte string (a cache_salt, a multimodal item's mm_hash string): its length,
 * then 8-byte little-endian words, then the zero-padded tail, each absorbed. data may be NULL
 * when len is 0. */
uint64_t llb_hash_bytes(const void *data, size_t len);

/* ---- Prefix-cache block hashes (vLLM kv_cache_utils.hash_block_tokens) ----
 * A block's hash chains its parent's: hash(parent_hash, token ids of the block, extra keys),
 * so equal hashes mean equal prefixes (up to 64-bit collisions: about 2^-64 per pair). Each
 * 64-bit word is absorbed by llb_hash_absorb, with distinct domain tags before the tokens,
 * the salt and each multimodal hash, and the counts last. */

/* The parent hash of a sequence's first block (vLLM NONE_HASH). */
#define LLB_BLOCK_HASH_ROOT UINT64_C(0x6c6c6d6275732d31) /* "llmbus-1" */

/* Keys beside the tokens that make equal tokens different blocks. */
struct llb_block_extra_keys {
  bool has_cache_salt;          /* vLLM adds the salt to the first block only */
  uint64_t cache_salt_hash;     /* llb_hash_bytes() of the salt string */
  int32_t num_mm_hashes;
  const uint64_t *mm_hashes;    /* [num_mm_hashes] multimodal inputs overlapping the block */
};

/* Hash of one full block: tokens[num_tokens] with its parent's hash and extra keys (NULL =
 * none). */
uint64_t llb_block_hash(uint64_t parent_hash, const int32_t *tokens, int32_t num_tokens,
                        const struct llb_block_extra_keys *extra);

#endif
