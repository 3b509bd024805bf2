/* Hashing (hash.h): the keyed hashes over libsodium's BLAKE2b. */
#include "base/hash.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

/* BLAKE2b's shortest output in libsodium is 16 bytes; the 64-bit hashes keep the first 8. */
#define OUT_BYTES crypto_generichash_BYTES_MIN

void llb_hash_key_generate(struct llb_hash_key *key) {
  /* < 0 only without any source of randomness, where randombytes_buf aborts the process
   * (libsodium's rule): no key is better than a predictable one */
  if (sodium_init() < 0) memset(key->bytes, 0, sizeof key->bytes);
  randombytes_buf(key->bytes, sizeof key->bytes);
}

uint64_t llb_random_u64_nonzero(void) {
  uint64_t v = 0;
  if (sodium_init() < 0) return 1; /* unreachable: randombytes_buf aborts without randomness */
  while (v == 0) randombytes_buf(&v, sizeof v);
  return v;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

llb_status llb_hash_key_from_hex(const char *text, struct llb_hash_key *key) {
  if (!text) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "hash key: none given");
  while (is_space(*text)) text++;
  size_t n = strlen(text);
  while (n > 0 && is_space(text[n - 1])) n--;
  if (n != 2 * LLB_HASH_KEY_BYTES)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "hash key: %zu characters, expected %d hex digits", n,
                    2 * LLB_HASH_KEY_BYTES);
  struct llb_hash_key k;
  for (size_t i = 0; i < LLB_HASH_KEY_BYTES; i++) {
    int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      sodium_memzero(&k, sizeof k);
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "hash key: a character that is not a hex digit");
    }
    k.bytes[i] = (uint8_t)(hi << 4 | lo);
  }
  *key = k;
  sodium_memzero(&k, sizeof k);
  return LLB_STATUS_OK;
}

void llb_hash_key_to_hex(const struct llb_hash_key *key, char out[2 * LLB_HASH_KEY_BYTES + 1]) {
  sodium_bin2hex(out, 2 * LLB_HASH_KEY_BYTES + 1, key->bytes, sizeof key->bytes);
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Starts a keyed BLAKE2b state with the domain tag and its length absorbed. */
static void start(crypto_generichash_state *st, const struct llb_hash_key *key, const char *domain) {
  crypto_generichash_init(st, key->bytes, sizeof key->bytes, OUT_BYTES);
  const size_t n = strlen(domain);
  uint8_t len[8];
  put_u64(len, n);
  crypto_generichash_update(st, len, sizeof len);
  crypto_generichash_update(st, (const uint8_t *)domain, n);
}

void llb_keyed_hash128(const struct llb_hash_key *key, const char *domain, const void *data, size_t len,
                       uint8_t out[16]) {
  crypto_generichash_state st;
  start(&st, key, domain);
  if (len) crypto_generichash_update(&st, data, len);
  crypto_generichash_final(&st, out, OUT_BYTES);
}

void llb_keyed_hash128_parts(const struct llb_hash_key *key, const char *domain, const struct llb_hash_part *parts,
                             int num_parts, uint8_t out[16]) {
  crypto_generichash_state st;
  start(&st, key, domain);
  for (int i = 0; i < num_parts; i++) {
    uint8_t len[8];
    put_u64(len, parts[i].len);
    crypto_generichash_update(&st, len, sizeof len);
    if (parts[i].len) crypto_generichash_update(&st, parts[i].data, parts[i].len);
  }
  crypto_generichash_final(&st, out, OUT_BYTES);
}

uint64_t llb_keyed_hash64(const struct llb_hash_key *key, const char *domain, const void *data, size_t len) {
  uint8_t out[OUT_BYTES];
  llb_keyed_hash128(key, domain, data, len, out);
  return get_u64(out);
}

uint64_t llb_hash_bytes(const struct llb_hash_key *key, const void *data, size_t len) {
  return llb_keyed_hash64(key, "llmbus-bytes", data, len);
}

/* Tags keep a salt from reading as tokens or as a multimodal hash. */
enum { TAG_SALT = 0x53, TAG_MM = 0x4d, TAG_LORA = 0x4c };

uint64_t llb_block_hash(const struct llb_hash_key *key, uint64_t parent_hash, const int32_t *tokens,
                        int32_t num_tokens, const struct llb_block_extra_keys *extra) {
  crypto_generichash_state st;
  start(&st, key, "llmbus-block-2");
  uint8_t head[16], buf[256];
  put_u64(head, parent_hash);
  put_u64(head + 8, (uint64_t)(num_tokens > 0 ? num_tokens : 0));
  crypto_generichash_update(&st, head, sizeof head);
  size_t used = 0;
  for (int32_t i = 0; i < num_tokens; i++) { /* 32-bit little-endian ids, 64 at a time */
    const uint32_t t = (uint32_t)tokens[i];
    for (int b = 0; b < 4; b++) buf[used++] = (uint8_t)(t >> (8 * b));
    if (used == sizeof buf) {
      crypto_generichash_update(&st, buf, used);
      used = 0;
    }
  }
  if (used) crypto_generichash_update(&st, buf, used);
  if (extra && extra->has_cache_salt) {
    uint8_t s[9] = {TAG_SALT};
    put_u64(s + 1, extra->cache_salt_hash);
    crypto_generichash_update(&st, s, sizeof s);
  }
  for (int32_t k = 0; extra && extra->mm_hashes && k < extra->num_mm_hashes; k++) {
    uint8_t m[9] = {TAG_MM};
    put_u64(m + 1, extra->mm_hashes[k]);
    crypto_generichash_update(&st, m, sizeof m);
  }
  if (extra && extra->has_lora) {
    uint8_t l[9] = {TAG_LORA};
    put_u64(l + 1, extra->lora_name_hash);
    crypto_generichash_update(&st, l, sizeof l);
  }
  uint8_t out[OUT_BYTES];
  crypto_generichash_final(&st, out, OUT_BYTES);
  return get_u64(out);
}

void llb_request_tag(const struct llb_hash_key *key, const char *tenant, const char *base, size_t len,
                       char out[LLB_REQUEST_TAG_HEX + 1]) {
  const char *t = tenant ? tenant : "";
  const struct llb_hash_part parts[2] = {{t, strlen(t)}, {base, len}};
  uint8_t mac[16];
  llb_keyed_hash128_parts(key, "llmbus-request-id-tag", parts, 2, mac);
  for (int i = 0; i < LLB_REQUEST_TAG_HEX / 2; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

/* Whether id[from..end) ends in a tag of `tenant` over what precedes it (constant time in the
 * comparison: the tag is a MAC). */
static bool tag_matches(const struct llb_hash_key *key, const char *id, size_t from, size_t end, const char *tenant) {
  char want[LLB_REQUEST_TAG_HEX + 1];
  llb_request_tag(key, tenant, id + from, end - LLB_REQUEST_TAG_HEX - from, want);
  unsigned diff = 0;
  for (size_t i = 0; i < LLB_REQUEST_TAG_HEX; i++) diff |= (unsigned)(want[i] ^ id[end - LLB_REQUEST_TAG_HEX + i]);
  return diff == 0;
}

bool llb_request_id_owned_by(const struct llb_hash_key *key, const char *id, size_t len, const char *tenant) {
  enum { SUFFIX = 1 + 8 + LLB_REQUEST_TAG_HEX }; /* "-<8 random hex><tag>" */
  if (!id) return false;
  size_t end = len;
  while (end > 0 && id[end - 1] != '@') end--;
  end = end ? end - 1 : len; /* the id without "@<eid>" */
  if (end < SUFFIX || id[end - SUFFIX] != '-') return false;
  for (size_t i = end - SUFFIX + 1; i < end; i++)
    if (!isxdigit((unsigned char)id[i]) || isupper((unsigned char)id[i])) return false;
  if (tag_matches(key, id, 0, end, tenant)) return true;
  size_t k = 0; /* a child "<i>_<parent>": the parent's tag */
  while (k < 2 && k < end && isdigit((unsigned char)id[k])) k++;
  return k > 0 && k < end && id[k] == '_' && end - (k + 1) >= SUFFIX && tag_matches(key, id, k + 1, end, tenant);
}
