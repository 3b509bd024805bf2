/* Hashing: the one copy of each hash function the project uses (docs/design.md §1).
 *
 * - FNV-1a 64 (Fowler, Noll, Vo; the IETF draft-eastlake-fnv constants): small keys of hash
 *   tables (request ids, token texts), file identities. Fast, not collision resistant.
 * - splitmix64 (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators"):
 *   its finalizer `llb_mix64` (a bijection with full avalanche) and its generator step.
 * - keyed BLAKE2b (libsodium's crypto_generichash): `llb_block_hash`, `llb_hash_bytes`,
 *   `llb_keyed_hash64/128` for everything a client's input can steer (below).
 * Every function is pure: no allocation, no state but what the caller passes.
 */
#ifndef LLB_BASE_HASH_H
#define LLB_BASE_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* FNV-1a 64's offset basis: the h to start a hash with. */
#define LLB_FNV1A64_INIT UINT64_C(0xcbf29ce484222325)

/* FNV-1a 64's prime. The FNV constants are written here only (tests/unit/check_layout.py
 * refuses them anywhere else): every FNV the project computes goes through the functions below. */
#define LLB_FNV1A64_PRIME UINT64_C(0x100000001b3)

/* FNV-1a 64 over data[len], continuing from h (LLB_FNV1A64_INIT to start). data may be NULL
 * when len is 0. */
static inline uint64_t llb_fnv1a64(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * LLB_FNV1A64_PRIME;
  return h;
}

/* FNV-1a 64 of a NUL-terminated string (its bytes without the NUL). */
static inline uint64_t llb_fnv1a64_str(const char *s) {
  uint64_t h = LLB_FNV1A64_INIT;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * LLB_FNV1A64_PRIME;
  return h;
}

/* One FNV-1a 64 round over a whole 64-bit word, continuing from h: (h ^ word) * prime. Not
 * FNV-1a of the word's bytes (that is llb_fnv1a64 over 8 bytes, 8 rounds): one round per word,
 * for keys that are arrays of words (the regex DFA's NFA-state bitsets, the schema compiler's
 * pointer sets) and for the tools' float-bit digests, whose values are pinned. */
static inline uint64_t llb_fnv1a64_word(uint64_t h, uint64_t word) { return (h ^ word) * LLB_FNV1A64_PRIME; }

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

/* ---- Keyed hashes (libsodium's BLAKE2b, RFC 7693, keyed) ----
 * What tenants can steer goes through these: prefix-cache block hashes, multimodal item hashes,
 * the tenant tag in request ids. Keyed with a per-deployment secret that `llmbus serve`
 * generates (or reads from --hash-key-file) and hands to the engine actors, so a client that
 * sees every hash value still cannot construct an input with a hash of its choosing (vLLM moved
 * to SHA-256 after CVE-2025-25183 for the same reason). A process that is given no key draws
 * one at random (llb_hash_key_generate): safe, only not shared. */

#define LLB_HASH_KEY_BYTES 32

/* A deployment's secret key; only its holder can compute the hashes below. */
struct llb_hash_key {
  uint8_t bytes[LLB_HASH_KEY_BYTES];
};

/* Fills *key with fresh random bytes (the kernel's CSPRNG through libsodium). Never fails:
 * libsodium aborts the process when the system has no randomness at all. */
void llb_hash_key_generate(struct llb_hash_key *key);

/* 64 fresh random bits, never 0 (the kernel's CSPRNG through libsodium, as llb_hash_key_generate:
 * never fails). For identities that must differ across processes and restarts: a scheduler's
 * first KV epoch, a worker's incarnation, sampling seeds. */
uint64_t llb_random_u64_nonzero(void);

/* Parses a key written as 64 hex digits (what llb_hash_key_to_hex writes; surrounding ASCII
 * whitespace ignored) into *key. INVALID_ARGUMENT for anything else (the message never quotes
 * the text: it is a secret). */
llb_status llb_hash_key_from_hex(const char *text, struct llb_hash_key *key);

/* Writes the key as 64 lowercase hex digits and a NUL into out[65]. */
void llb_hash_key_to_hex(const struct llb_hash_key *key, char out[2 * LLB_HASH_KEY_BYTES + 1]);

/* 64-bit keyed hash of a byte string under a domain tag (a short constant naming what is hashed,
 * so equal bytes hashed for different purposes never agree). data may be NULL when len is 0. */
uint64_t llb_keyed_hash64(const struct llb_hash_key *key, const char *domain, const void *data, size_t len);

/* 128-bit keyed hash of a byte string under a domain tag into out[16]. */
void llb_keyed_hash128(const struct llb_hash_key *key, const char *domain, const void *data, size_t len,
                       uint8_t out[16]);

/* One field of llb_keyed_hash128_parts. */
struct llb_hash_part {
  const void *data; /* [len] bytes; may be NULL when len is 0 */
  size_t len;
};

/* 128-bit keyed hash of a sequence of fields under a domain tag into out[16]: each field is
 * absorbed with its length first, so ("ab", "c") and ("a", "bc") never agree. */
void llb_keyed_hash128_parts(const struct llb_hash_key *key, const char *domain, const struct llb_hash_part *parts,
                             int num_parts, uint8_t out[16]);

/* 64-bit keyed hash of a byte string (a cache_salt, a multimodal item's mm_hash string) for the
 * block hash's extra keys: llb_keyed_hash64 under the domain "llmbus-bytes". */
uint64_t llb_hash_bytes(const struct llb_hash_key *key, const void *data, size_t len);

/* ---- Request-id tenant tags ----
 * An internal request id ends (before "@<engine>") in "-<8 random hex><tag>", the tag a 64-bit
 * keyed MAC of (tenant, what precedes it) as LLB_REQUEST_TAG_HEX lowercase hex digits: only a
 * holder of the deployment's key can make one, and anyone holding it can check which tenant an
 * id belongs to (the input processor on aborts and resends, the scheduler on a resend's
 * takeover). A child id "<i>_<parent>" carries its parent's tag. */
#define LLB_REQUEST_TAG_HEX 16

/* The tag of tenant (NULL = "") over base[0..len) ("<external>-<8 random hex>") into out. */
void llb_request_tag(const struct llb_hash_key *key, const char *tenant, const char *base, size_t len,
                     char out[LLB_REQUEST_TAG_HEX + 1]);

/* True when request id[0..len) (parent or child, with or without "@<engine>") ends in the tag
 * of `tenant` over what precedes it; false for anything else, NULL included. The comparison
 * takes the same time whatever the tag holds. */
bool llb_request_id_owned_by(const struct llb_hash_key *key, const char *id, size_t len, const char *tenant);

/* ---- Prefix-cache block hashes (vLLM kv_cache_utils.hash_block_tokens) ----
 * A block's hash chains its parent's: hash(parent_hash, token ids of the block, extra keys),
 * so equal hashes mean equal prefixes (up to 64-bit collisions: about 2^-64 per pair, and an
 * attacker without the key can neither compute a hash nor aim a collision). One keyed BLAKE2b
 * over: a domain tag, the parent, the token count, the tokens (32-bit little endian), then the
 * salt and each multimodal hash, each behind its own tag. The scheduler computes them, the
 * kv_manager only compares them, so every scheduler of one engine (a restarted one included)
 * must hold the same key: `llmbus serve` gives each the key file of the run. */

/* The parent hash of a sequence's first block (vLLM NONE_HASH). */
#define LLB_BLOCK_HASH_ROOT UINT64_C(0x6c6c6d6275732d31) /* "llmbus-1" */

/* Keys beside the tokens that make equal tokens different blocks. */
struct llb_block_extra_keys {
  bool has_cache_salt;          /* vLLM adds the salt to the first block only */
  uint64_t cache_salt_hash;     /* llb_hash_bytes() of the salt string */
  int32_t num_mm_hashes;
  const uint64_t *mm_hashes;    /* [num_mm_hashes] multimodal inputs overlapping the block */
  bool has_lora;                /* the request runs a LoRA adapter: vLLM's _gen_lora_extra_hash_keys
                                   adds its name to every block, so an adapter's KV and the base's
                                   (or another adapter's) are never shared */
  uint64_t lora_name_hash;      /* llb_hash_bytes() of the adapter's name */
};

/* Hash of one full block: tokens[num_tokens] with its parent's hash and extra keys (NULL =
 * none), under key. */
uint64_t llb_block_hash(const struct llb_hash_key *key, uint64_t parent_hash, const int32_t *tokens,
                        int32_t num_tokens, const struct llb_block_extra_keys *extra);

#endif
