/* base/strmap, base/u64map, base/array and base/hash: the containers and hashes every folder shares. The
 * hash values are pinned: block hashes are compared across actors (the KV protocol), so a
 * change of value is a protocol change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/array.h"
#include "base/hash.h"
#include "base/strmap.h"
#include "base/u64map.h"

static void test_strmap_put_get_replace_remove(void **state) {
  (void)state;
  struct llb_strmap *m = NULL;
  assert_int_equal(llb_strmap_create(0, &m), LLB_STATUS_OK);
  int a = 1, b = 2, c = 3;
  char key[16] = "req-1";
  assert_int_equal(llb_strmap_put(m, key, &a), LLB_STATUS_OK);
  key[4] = '9'; /* the map keeps its own copy of the key */
  assert_ptr_equal(llb_strmap_get(m, "req-1"), &a);
  assert_null(llb_strmap_get(m, "req-9"));
  assert_int_equal(llb_strmap_put(m, "req-1", &b), LLB_STATUS_OK); /* replace */
  assert_ptr_equal(llb_strmap_get(m, "req-1"), &b);
  assert_int_equal(llb_strmap_size(m), 1);
  assert_int_equal(llb_strmap_put(m, "", &c), LLB_STATUS_OK); /* the empty key is a key */
  assert_ptr_equal(llb_strmap_get(m, ""), &c);
  assert_ptr_equal(llb_strmap_remove(m, "req-1"), &b);
  assert_null(llb_strmap_remove(m, "req-1"));
  assert_null(llb_strmap_get(m, "req-1"));
  assert_int_equal(llb_strmap_size(m), 1);
  llb_strmap_destroy(m);
  llb_strmap_destroy(NULL);
}

static void collect(void *ctx, const char *key, void *value) {
  char *out = ctx;
  (void)value;
  strcat(out, key);
  strcat(out, ",");
}

static void test_strmap_bounded_forgets_oldest_and_iterates_in_order(void **state) {
  (void)state;
  struct llb_strmap *m = NULL;
  assert_int_equal(llb_strmap_create(3, &m), LLB_STATUS_OK);
  int v = 0;
  const char *keys[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++) assert_int_equal(llb_strmap_put(m, keys[i], &v), LLB_STATUS_OK);
  assert_int_equal(llb_strmap_size(m), 3);
  assert_null(llb_strmap_get(m, "a"));
  char seen[64] = "";
  llb_strmap_foreach(m, collect, seen);
  assert_string_equal(seen, "b,c,d,");
  llb_strmap_destroy(m);
}

static void test_strmap_many_keys_survive_growth(void **state) {
  (void)state;
  struct llb_strmap *m = NULL;
  assert_int_equal(llb_strmap_create(0, &m), LLB_STATUS_OK);
  enum { N = 5000 };
  static int vals[N];
  char key[32];
  for (int i = 0; i < N; i++) {
    snprintf(key, sizeof key, "cmpl-%d-0", i);
    vals[i] = i;
    assert_int_equal(llb_strmap_put(m, key, &vals[i]), LLB_STATUS_OK);
  }
  for (int i = 0; i < N; i += 2) {
    snprintf(key, sizeof key, "cmpl-%d-0", i);
    assert_ptr_equal(llb_strmap_remove(m, key), &vals[i]);
  }
  assert_int_equal(llb_strmap_size(m), N / 2);
  for (int i = 0; i < N; i++) {
    snprintf(key, sizeof key, "cmpl-%d-0", i);
    if (i % 2) assert_ptr_equal(llb_strmap_get(m, key), &vals[i]);
    else assert_null(llb_strmap_get(m, key));
  }
  llb_strmap_destroy(m);
}

static void test_u64map_put_get_replace_remove(void **state) {
  (void)state;
  struct llb_u64map *m = NULL;
  assert_int_equal(llb_u64map_create(&m), LLB_STATUS_OK);
  int a = 1, b = 2, c = 3;
  assert_int_equal(llb_u64map_put(m, 42, &a), LLB_STATUS_OK);
  assert_int_equal(llb_u64map_put(m, 0, &b), LLB_STATUS_OK); /* 0 and the largest are keys too */
  assert_int_equal(llb_u64map_put(m, UINT64_MAX, &c), LLB_STATUS_OK);
  assert_ptr_equal(llb_u64map_get(m, 42), &a);
  assert_ptr_equal(llb_u64map_get(m, 0), &b);
  assert_ptr_equal(llb_u64map_get(m, UINT64_MAX), &c);
  assert_null(llb_u64map_get(m, 43));
  assert_int_equal(llb_u64map_put(m, 42, &c), LLB_STATUS_OK); /* replace */
  assert_ptr_equal(llb_u64map_get(m, 42), &c);
  assert_int_equal(llb_u64map_size(m), 3);
  assert_int_equal(llb_u64map_put(m, 7, NULL), LLB_STATUS_INVALID_ARGUMENT); /* NULL means absent */
  assert_int_equal(llb_u64map_size(m), 3);
  assert_ptr_equal(llb_u64map_remove(m, 42), &c);
  assert_null(llb_u64map_remove(m, 42));
  assert_null(llb_u64map_get(m, 42));
  assert_ptr_equal(llb_u64map_get(m, 0), &b);
  assert_int_equal(llb_u64map_size(m), 2);
  llb_u64map_destroy(m);
  llb_u64map_destroy(NULL);
}

/* n keys whose home slot in a fresh map (16 slots, llb_mix64(key) & 15, as u64map.h says) is
 * `home`, from `from` up. */
static uint64_t colliding_keys(uint64_t home, int n, uint64_t from, uint64_t *out) {
  for (uint64_t k = from;; k++) {
    if ((llb_mix64(k) & 15) != home) continue;
    *out++ = k;
    if (--n == 0) return k + 1;
  }
}

/* One cluster that wraps from the last slot to the first: keys homed at 15 and at 0 and 1
 * interleave. Removing any one of them (a backward shift across the wrap) leaves every other
 * one found, and the freed slot takes a new key. */
static void test_u64map_removal_from_a_wrapping_cluster_keeps_the_rest(void **state) {
  (void)state;
  enum { N = 8 }; /* the most a 16-slot map holds before it grows */
  uint64_t keys[N];
  uint64_t next = colliding_keys(15, 3, 0, keys);
  next = colliding_keys(0, 3, next, keys + 3);
  colliding_keys(1, 2, next, keys + 6);
  int vals[N];
  for (int removed = 0; removed < N; removed++) {
    struct llb_u64map *m = NULL;
    assert_int_equal(llb_u64map_create(&m), LLB_STATUS_OK);
    for (int i = 0; i < N; i++) assert_int_equal(llb_u64map_put(m, keys[(i * 3) % N], &vals[(i * 3) % N]), LLB_STATUS_OK);
    assert_ptr_equal(llb_u64map_remove(m, keys[removed]), &vals[removed]);
    for (int i = 0; i < N; i++) {
      if (i == removed) assert_null(llb_u64map_get(m, keys[i]));
      else assert_ptr_equal(llb_u64map_get(m, keys[i]), &vals[i]);
    }
    assert_int_equal(llb_u64map_put(m, keys[removed], &vals[removed]), LLB_STATUS_OK);
    for (int i = 0; i < N; i++) assert_ptr_equal(llb_u64map_get(m, keys[i]), &vals[i]);
    llb_u64map_destroy(m);
  }
}

struct u64map_seen {
  int64_t count;
  void **want; /* [keys], the reference */
  uint8_t *visited;
  bool ok;
};

static void visit(void *ctx, uint64_t key, void *value) {
  struct u64map_seen *s = ctx;
  s->count++;
  if (key >= 20000 || s->want[key] != value || s->visited[key]) s->ok = false;
  else s->visited[key] = 1;
}

/* 200,000 random puts and removes over 20,000 keys against a plain array: every get agrees,
 * through growth to thousands of keys, and iteration visits each key once with its value. */
static void test_u64map_matches_a_reference_through_growth_and_removals(void **state) {
  (void)state;
  enum { KEYS = 20000, OPS = 200000 };
  static void *want[KEYS];
  static uint8_t visited[KEYS];
  static int vals[2];
  struct llb_u64map *m = NULL;
  assert_int_equal(llb_u64map_create(&m), LLB_STATUS_OK);
  uint64_t rng = 1;
  int64_t size = 0, max_size = 0;
  for (int op = 0; op < OPS; op++) {
    const uint64_t r = llb_splitmix64_next(&rng), k = r % KEYS;
    const bool put = op < OPS / 2 ? (r >> 32) % 4 != 0 : (r >> 32) % 4 == 0; /* fill, then drain */
    if (put) {
      void *v = &vals[(r >> 40) & 1];
      size += want[k] == NULL;
      want[k] = v;
      assert_int_equal(llb_u64map_put(m, k, v), LLB_STATUS_OK);
    } else {
      assert_ptr_equal(llb_u64map_remove(m, k), want[k]);
      size -= want[k] != NULL;
      want[k] = NULL;
    }
    if (size > max_size) max_size = size;
    const uint64_t probe = llb_splitmix64_next(&rng) % KEYS;
    assert_ptr_equal(llb_u64map_get(m, probe), want[probe]);
  }
  assert_true(max_size > 5000);
  assert_int_equal(llb_u64map_size(m), size);
  for (uint64_t k = 0; k < KEYS; k++) assert_ptr_equal(llb_u64map_get(m, k), want[k]);
  struct u64map_seen seen = {.want = want, .visited = visited, .ok = true};
  llb_u64map_foreach(m, visit, &seen);
  assert_true(seen.ok);
  assert_int_equal(seen.count, size);
  llb_u64map_destroy(m);
}

static void test_array_reserve_grows_and_keeps_contents(void **state) {
  (void)state;
  int64_t *items = NULL, cap = 0;
  for (int64_t i = 0; i < 1000; i++) {
    assert_int_equal(llb_array_reserve((void **)&items, &cap, i + 1, sizeof *items), LLB_STATUS_OK);
    assert_true(cap >= i + 1);
    items[i] = i * 7;
  }
  assert_true(cap < 2048); /* doubling, not one element at a time nor runaway */
  for (int64_t i = 0; i < 1000; i++) assert_int_equal(items[i], i * 7);
  int64_t before = cap;
  assert_int_equal(llb_array_reserve((void **)&items, &cap, 10, sizeof *items), LLB_STATUS_OK);
  assert_int_equal(cap, before); /* never shrinks */
  free(items);
}

static void test_array_reserve_refuses_bad_sizes_unchanged(void **state) {
  (void)state;
  char *items = NULL;
  int64_t cap = 0;
  assert_int_equal(llb_array_reserve((void **)&items, &cap, -1, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llb_array_reserve((void **)&items, &cap, 4, 0), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llb_array_reserve((void **)&items, &cap, INT64_MAX, 16), LLB_STATUS_TOO_LARGE);
  assert_int_equal(llb_array_reserve((void **)&items, &cap, INT64_MAX / 8, 16), LLB_STATUS_TOO_LARGE);
  assert_null(items);
  assert_int_equal(cap, 0);
  int32_t cap32 = 0;
  assert_int_equal(llb_array_reserve32((void **)&items, &cap32, 40, 1), LLB_STATUS_OK);
  assert_true(cap32 >= 40);
  assert_int_equal(llb_array_reserve32((void **)&items, &cap32, -5, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_true(cap32 >= 40);
  free(items);
}

static void test_hash_values_are_pinned(void **state) {
  (void)state;
  /* FNV-1a 64's published test values (draft-eastlake-fnv: "" and "a") */
  assert_true(llb_fnv1a64_str("") == UINT64_C(0xcbf29ce484222325));
  assert_true(llb_fnv1a64_str("a") == UINT64_C(0xaf63dc4c8601ec8c));
  assert_true(llb_fnv1a64(LLB_FNV1A64_INIT, "foobar", 6) == llb_fnv1a64_str("foobar"));
  assert_true(llb_fnv1a64_str("foobar") == UINT64_C(0x85944171f73967e8));
  /* splitmix64 from seed 0 (the reference generator's first outputs) */
  uint64_t s = 0;
  assert_true(llb_splitmix64_next(&s) == UINT64_C(0xe220a8397b1dcdaf));
  assert_true(llb_splitmix64_next(&s) == UINT64_C(0x6e789e6aa1b965f4));
}

/* key = bytes 0..31, as the known answers below (computed with Python's hashlib.blake2b) */
static struct llb_hash_key test_key(void) {
  struct llb_hash_key k;
  for (int i = 0; i < LLB_HASH_KEY_BYTES; i++) k.bytes[i] = (uint8_t)i;
  return k;
}

static void test_keyed_hashes_are_blake2b_under_the_key(void **state) {
  (void)state;
  const struct llb_hash_key key = test_key();
  /* blake2b(key=key, digest_size=16) over (8-byte length of the domain, domain, data): the
   * first 8 bytes, little endian */
  assert_true(llb_hash_bytes(&key, "", 0) == UINT64_C(0x5cdd6e0bfa77f369));
  assert_true(llb_hash_bytes(&key, "salt", 4) == UINT64_C(0x0cf3b6fff78d86ff));
  const int32_t tokens[5] = {1, 2, 3, 4, 5};
  const uint64_t mm[2] = {7, 9};
  struct llb_block_extra_keys ex = {.has_cache_salt = true, .cache_salt_hash = llb_hash_bytes(&key, "salt", 4),
                                    .num_mm_hashes = 2, .mm_hashes = mm};
  assert_true(llb_block_hash(&key, LLB_BLOCK_HASH_ROOT, tokens, 4, NULL) == UINT64_C(0x062b146463c03259));
  assert_true(llb_block_hash(&key, LLB_BLOCK_HASH_ROOT, tokens, 5, &ex) == UINT64_C(0xe46d779bd8cedf19));
  const struct llb_hash_part parts[2] = {{"alpha", 5}, {"req-00000001", 12}};
  uint8_t mac[16];
  llb_keyed_hash128_parts(&key, "llmbus-request-id-tag", parts, 2, mac);
  assert_int_equal(mac[0], 0x08);
  assert_int_equal(mac[7], 0xc4);
  /* a block's hash depends on its parent, its salt and its multimodal keys */
  assert_true(llb_block_hash(&key, 1, tokens, 4, NULL) != llb_block_hash(&key, 2, tokens, 4, NULL));
  ex.has_cache_salt = false;
  assert_true(llb_block_hash(&key, LLB_BLOCK_HASH_ROOT, tokens, 5, &ex) != UINT64_C(0xe46d779bd8cedf19));
}

/* Whoever lacks the key cannot compute a block's hash: under another key every hash differs,
 * and one key gives the same hash again (a restarted scheduler with the serve's key file). */
static void test_block_hash_needs_the_key(void **state) {
  (void)state;
  const struct llb_hash_key key = test_key();
  struct llb_hash_key other = key, random_key;
  other.bytes[31] ^= 1;
  llb_hash_key_generate(&random_key);
  int32_t tokens[16];
  for (int i = 0; i < 16; i++) tokens[i] = 100 + i;
  const uint64_t h = llb_block_hash(&key, LLB_BLOCK_HASH_ROOT, tokens, 16, NULL);
  assert_true(h == llb_block_hash(&key, LLB_BLOCK_HASH_ROOT, tokens, 16, NULL));
  assert_true(h != llb_block_hash(&other, LLB_BLOCK_HASH_ROOT, tokens, 16, NULL));
  assert_true(h != llb_block_hash(&random_key, LLB_BLOCK_HASH_ROOT, tokens, 16, NULL));
  char hex[2 * LLB_HASH_KEY_BYTES + 1];
  struct llb_hash_key back;
  llb_hash_key_to_hex(&random_key, hex);
  assert_int_equal(strlen(hex), 64);
  char padded[80];
  snprintf(padded, sizeof padded, "  %s\n", hex);
  assert_int_equal(llb_hash_key_from_hex(padded, &back), LLB_STATUS_OK);
  assert_memory_equal(back.bytes, random_key.bytes, LLB_HASH_KEY_BYTES);
  hex[5] = 'g';
  assert_int_equal(llb_hash_key_from_hex(hex, &back), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(strstr(llb_err_last(), hex)); /* a secret is never quoted */
  assert_int_equal(llb_hash_key_from_hex("abcd", &back), LLB_STATUS_INVALID_ARGUMENT);
}

/* Identities drawn with llb_random_u64_nonzero (a worker's incarnation, a scheduler's first KV
 * epoch) must never be 0 (the wire's "none") and must differ from one draw to the next. */
static void test_random_u64_is_nonzero_and_differs(void **state) {
  (void)state;
  uint64_t seen[256];
  for (int i = 0; i < 256; i++) {
    seen[i] = llb_random_u64_nonzero();
    assert_true(seen[i] != 0);
    for (int j = 0; j < i; j++) assert_true(seen[j] != seen[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strmap_put_get_replace_remove),
      cmocka_unit_test(test_strmap_bounded_forgets_oldest_and_iterates_in_order),
      cmocka_unit_test(test_strmap_many_keys_survive_growth),
      cmocka_unit_test(test_u64map_put_get_replace_remove),
      cmocka_unit_test(test_u64map_removal_from_a_wrapping_cluster_keeps_the_rest),
      cmocka_unit_test(test_u64map_matches_a_reference_through_growth_and_removals),
      cmocka_unit_test(test_array_reserve_grows_and_keeps_contents),
      cmocka_unit_test(test_array_reserve_refuses_bad_sizes_unchanged),
      cmocka_unit_test(test_hash_values_are_pinned),
      cmocka_unit_test(test_keyed_hashes_are_blake2b_under_the_key),
      cmocka_unit_test(test_block_hash_needs_the_key),
      cmocka_unit_test(test_random_u64_is_nonzero_and_differs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
