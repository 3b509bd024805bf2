/* The KV connector's export registry (actors/gpu_worker/kv_export.h, issue 36): only listed blocks
 * are read, in range; limits refuse (and report, so the blocks are freed); a duplicate id keeps
 * the first export; an export ends on a release naming its generation or at its expiry, reported
 * once, never on serving a block (a lost last reply is fetched again); a stale release or fetch
 * (another generation of the same id) ends and reads nothing; late fetches get Unknown or
 * Expired, unseen ids NotReady. A fake cache: block b reads as bytes of value b. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "actors/gpu_worker/kv_export.h"

enum { BLOCK_BYTES = 8, CACHE_BLOCKS = 16 };

static int reads;

static llb_status read_fake(void *user, int32_t block_id, uint8_t *dst) {
  (void)user;
  reads++;
  memset(dst, block_id, BLOCK_BYTES);
  return LLB_STATUS_OK;
}

static struct kv_export_registry *make(int32_t max_reqs, int64_t max_blocks) {
  const struct kv_export_limits lim = {.num_cache_blocks = CACHE_BLOCKS, .max_reqs = max_reqs, .max_blocks = max_blocks};
  struct kv_export_registry *r = NULL;
  assert_int_equal(kv_export_create(&lim, &r), LLB_STATUS_OK);
  return r;
}

static llb_status add(struct kv_export_registry *r, const char *id, const int32_t *blocks, int32_t n, float s,
                      int64_t now) {
  const struct llb_kv_send_request q = {.req_id = llb_str_c(id), .block_ids = blocks, .num_block_ids = n,
                                        .num_tokens = n * 4, .expires_in_s = s};
  return kv_export_add(r, &q, now);
}

static char why[256];

/* A fetch naming generation gen (0: any); *got (may be NULL) receives the export's generation. */
static enum llb_kv_transfer_status fetch_gen(struct kv_export_registry *r, const char *id, uint64_t gen, int32_t first,
                                             int32_t n, int64_t now, uint8_t *dst, uint64_t *got) {
  int32_t tokens = -1;
  uint64_t g = 12345;
  why[0] = '\0';
  enum llb_kv_transfer_status s =
      kv_export_fetch(r, id, gen, first, n, now, read_fake, NULL, dst, BLOCK_BYTES, &tokens, &g, why, sizeof why);
  if (s != LLB_KV_TRANSFER_OK) assert_true(why[0] != '\0'); /* every refusal says why */
  if (s == LLB_KV_TRANSFER_OK) assert_true(g != 0);
  if (got) *got = g;
  return s;
}

static enum llb_kv_transfer_status fetch(struct kv_export_registry *r, const char *id, int32_t first, int32_t n,
                                         int64_t now, uint8_t *dst) {
  return fetch_gen(r, id, 0, first, n, now, dst, NULL);
}

/* The generation of the export of id held now (a fetch of its first block). */
static uint64_t generation_of(struct kv_export_registry *r, const char *id) {
  uint8_t buf[BLOCK_BYTES];
  uint64_t g = 0;
  assert_int_equal(fetch_gen(r, id, 0, 0, 1, 0, buf, &g), LLB_KV_TRANSFER_OK);
  return g;
}

static bool ended_is(struct kv_export_registry *r, const char *id) {
  const char *const *ids;
  const int32_t n = kv_export_take_ended(r, &ids);
  return n == 1 && strcmp(ids[0], id) == 0;
}

static void test_only_the_listed_blocks_in_range_are_read(void **state) {
  (void)state;
  struct kv_export_registry *r = make(8, 64);
  const int32_t blocks[3] = {9, 2, 14};
  assert_int_equal(add(r, "a", blocks, 3, 10.0f, 0), LLB_STATUS_OK);
  uint8_t buf[3 * BLOCK_BYTES];
  reads = 0;
  assert_int_equal(fetch(r, "b", 0, 1, 0, buf), LLB_KV_TRANSFER_NOT_READY);
  assert_int_equal(fetch(r, "a", 2, 2, 0, buf), LLB_KV_TRANSFER_OUT_OF_RANGE);
  assert_int_equal(fetch(r, "a", -1, 1, 0, buf), LLB_KV_TRANSFER_OUT_OF_RANGE);
  assert_int_equal(reads, 0);
  assert_int_equal(fetch(r, "a", 1, 2, 0, buf), LLB_KV_TRANSFER_OK);
  assert_int_equal(buf[0], 2); /* export block 1 is cache block 2 */
  assert_int_equal(buf[BLOCK_BYTES], 14);
  assert_int_equal(fetch(r, "a", 1, 1, 0, buf), LLB_KV_TRANSFER_OK); /* a re-read (lost reply) is fine */
  uint64_t gen = 0;
  assert_int_equal(fetch_gen(r, "a", 0, 0, 1, 0, buf, &gen), LLB_KV_TRANSFER_OK);
  assert_int_equal(buf[0], 9);
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0); /* every block read: held still */
  assert_int_equal(kv_export_release(r, "a", gen), LLB_STATUS_OK);
  assert_true(ended_is(r, "a"));
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0); /* reported once */
  assert_int_equal(fetch(r, "a", 0, 1, 0, buf), LLB_KV_TRANSFER_UNKNOWN);
  kv_export_destroy(r);
}

static void test_limits_refuse_and_report_a_duplicate_keeps_the_first(void **state) {
  (void)state;
  struct kv_export_registry *r = make(2, 4);
  const int32_t b3[3] = {0, 1, 2}, b2[2] = {3, 4}, b1[1] = {5}, bad[1] = {CACHE_BLOCKS};
  assert_int_equal(add(r, "a", b3, 3, 10.0f, 0), LLB_STATUS_OK);
  assert_int_equal(add(r, "b", b2, 2, 10.0f, 0), LLB_STATUS_QUEUE_FULL); /* 5 blocks > 4 */
  assert_true(ended_is(r, "b"));
  assert_int_equal(add(r, "a", b1, 1, 10.0f, 0), LLB_STATUS_INVALID_ARGUMENT); /* duplicate: not reported */
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0);
  assert_int_equal(add(r, "c", bad, 1, 10.0f, 0), LLB_STATUS_INVALID_ARGUMENT); /* outside the cache */
  assert_true(ended_is(r, "c"));
  assert_int_equal(add(r, "d", b1, 1, 10.0f, 0), LLB_STATUS_OK);
  assert_int_equal(add(r, "e", b1, 1, 10.0f, 0), LLB_STATUS_QUEUE_FULL); /* 3 exports > 2 */
  assert_true(ended_is(r, "e"));
  int32_t n;
  int64_t blocks;
  kv_export_counts(r, &n, &blocks);
  assert_int_equal(n, 2);
  assert_int_equal(blocks, 4);
  kv_export_destroy(r);
}

static void test_an_export_expires_once_and_late_fetches_say_expired(void **state) {
  (void)state;
  struct kv_export_registry *r = make(8, 64);
  const int32_t blocks[2] = {1, 2};
  assert_int_equal(add(r, "x", blocks, 2, 0.5f, 1000), LLB_STATUS_OK);
  uint8_t buf[BLOCK_BYTES];
  assert_int_equal(kv_export_expire(r, 1000 + 400000000), 0);
  assert_int_equal(fetch(r, "x", 0, 1, 1000 + 400000000, buf), LLB_KV_TRANSFER_OK);
  assert_int_equal(kv_export_expire(r, 1000 + 500000000), 1);
  assert_true(ended_is(r, "x"));
  reads = 0;
  assert_int_equal(fetch(r, "x", 1, 1, 1000 + 600000000, buf), LLB_KV_TRANSFER_EXPIRED);
  assert_int_equal(reads, 0);
  const struct llb_kv_send_request nan_expiry = {.req_id = llb_str_c("y"), .block_ids = blocks, .num_block_ids = 2,
                                                 .num_tokens = 8, .expires_in_s = __builtin_nanf("")};
  assert_int_equal(kv_export_add(r, &nan_expiry, 0), LLB_STATUS_INVALID_ARGUMENT);
  kv_export_destroy(r);
}

/* Defect "a lost reply to the last fetch chunk fails the receive": serving the last chunk (and
 * every block) ends nothing, so the fetcher's resend after a lost reply gets the same blocks; a
 * decode engine whose prefix cache held the first blocks fetches only the rest and its release
 * ends the export at once (reported, so the scheduler frees the blocks), not at the expiry. */
static void test_a_repeated_last_chunk_fetch_succeeds_and_the_release_ends_it(void **state) {
  (void)state;
  struct kv_export_registry *r = make(8, 64);
  const int32_t blocks[4] = {3, 4, 5, 6};
  assert_int_equal(add(r, "a", blocks, 4, 10.0f, 0), LLB_STATUS_OK);
  uint8_t buf[2 * BLOCK_BYTES];
  uint64_t gen = 0, again = 0;
  assert_int_equal(fetch_gen(r, "a", 0, 2, 2, 0, buf, &gen), LLB_KV_TRANSFER_OK); /* blocks 0, 1: never read */
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0);
  memset(buf, 0, sizeof buf);
  assert_int_equal(fetch_gen(r, "a", gen, 2, 2, 0, buf, &again), LLB_KV_TRANSFER_OK); /* its reply was lost */
  assert_int_equal(buf[0], 5);
  assert_int_equal(buf[BLOCK_BYTES], 6);
  assert_true(again == gen);
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0);
  assert_int_equal(kv_export_release(r, "a", gen), LLB_STATUS_OK);
  assert_true(ended_is(r, "a")); /* ended now, long before its 10 s expiry */
  int32_t reqs;
  int64_t held;
  kv_export_counts(r, &reqs, &held);
  assert_int_equal(reqs, 0);
  assert_int_equal(held, 0);
  assert_int_equal(fetch(r, "a", 0, 1, 0, buf), LLB_KV_TRANSFER_UNKNOWN); /* a late fetch: released */
  assert_int_equal(kv_export_release(r, "a", gen), LLB_STATUS_NOT_FOUND); /* a duplicated release */
  kv_export_destroy(r);
}

/* A release (the fetcher failed or gave up) ends an export unread, reported so that its blocks
 * are freed; an id not held, or a release naming no generation, ends nothing. */
static void test_a_release_ends_an_export_unread(void **state) {
  (void)state;
  struct kv_export_registry *r = make(8, 64);
  const int32_t blocks[2] = {3, 4};
  assert_int_equal(add(r, "a", blocks, 2, 10.0f, 0), LLB_STATUS_OK);
  const uint64_t gen = generation_of(r, "a");
  reads = 0;
  assert_int_equal(kv_export_release(r, "a", 0), LLB_STATUS_INVALID_ARGUMENT); /* no generation */
  assert_non_null(strstr(llb_err_last(), "generation"));
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0);
  assert_int_equal(kv_export_release(r, "a", gen), LLB_STATUS_OK);
  assert_int_equal(reads, 0);
  assert_true(ended_is(r, "a"));
  assert_int_equal(kv_export_release(r, "a", gen), LLB_STATUS_NOT_FOUND);
  assert_int_equal(kv_export_release(r, "never", gen), LLB_STATUS_NOT_FOUND);
  const char *const *ids;
  assert_int_equal(kv_export_take_ended(r, &ids), 0);
  kv_export_destroy(r);
}

/* Defect "a stale release by id can end a newer export": request "a" is exported, released and
 * exported again (preempted and prefilled anew, or a retried hand-off); the first export's
 * release arriving again (late or duplicated), or a fetch naming its generation, is refused with
 * an error naming both generations and ends, reads and reports nothing: the newer export is
 * still served whole, and only its own release ends it. */
static void test_a_stale_release_or_fetch_leaves_a_newer_export_alone(void **state) {
  (void)state;
  struct kv_export_registry *r = make(8, 64);
  const int32_t first[2] = {3, 4}, second[2] = {8, 9};
  assert_int_equal(add(r, "a", first, 2, 10.0f, 0), LLB_STATUS_OK);
  const uint64_t old_gen = generation_of(r, "a");
  assert_int_equal(kv_export_release(r, "a", old_gen), LLB_STATUS_OK);
  assert_true(ended_is(r, "a"));
  assert_int_equal(add(r, "a", second, 2, 10.0f, 0), LLB_STATUS_OK);
  const uint64_t new_gen = generation_of(r, "a");
  assert_true(new_gen != old_gen && new_gen != 0);
  assert_int_equal(kv_export_release(r, "a", old_gen), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "stale"));
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0);
  uint8_t buf[2 * BLOCK_BYTES];
  uint64_t got = 0;
  reads = 0;
  assert_int_equal(fetch_gen(r, "a", old_gen, 0, 2, 0, buf, &got), LLB_KV_TRANSFER_UNKNOWN);
  assert_int_equal(reads, 0);
  assert_non_null(strstr(why, "stale"));
  assert_true(got == new_gen); /* the reply names the export held */
  int32_t reqs;
  int64_t held;
  kv_export_counts(r, &reqs, &held);
  assert_int_equal(reqs, 1);
  assert_int_equal(held, 2);
  assert_int_equal(fetch_gen(r, "a", new_gen, 0, 2, 0, buf, &got), LLB_KV_TRANSFER_OK);
  assert_int_equal(buf[0], 8);
  assert_int_equal(buf[BLOCK_BYTES], 9);
  assert_int_equal(kv_export_release(r, "a", new_gen), LLB_STATUS_OK);
  assert_true(ended_is(r, "a"));
  kv_export_destroy(r);
}

/* The scheduler's epoch changed (its kv_manager may hand the blocks to another request): every
 * export is dropped at once, none reported (the scheduler ended them itself), and a fetch of one
 * gets Expired, never the blocks' new contents. */
static void test_cancel_all_drops_every_export_unreported(void **state) {
  (void)state;
  struct kv_export_registry *r = make(8, 64);
  const int32_t a[2] = {3, 4}, b[1] = {7};
  assert_int_equal(add(r, "a", a, 2, 10.0f, 0), LLB_STATUS_OK);
  assert_int_equal(add(r, "b", b, 1, 10.0f, 0), LLB_STATUS_OK);
  uint8_t buf[2 * BLOCK_BYTES];
  assert_int_equal(fetch(r, "a", 0, 1, 0, buf), LLB_KV_TRANSFER_OK);
  assert_int_equal(kv_export_cancel_all(r), 2);
  assert_int_equal(kv_export_take_ended(r, &(const char *const *){0}), 0);
  reads = 0;
  assert_int_equal(fetch(r, "a", 1, 1, 0, buf), LLB_KV_TRANSFER_EXPIRED);
  assert_int_equal(fetch(r, "b", 0, 1, 0, buf), LLB_KV_TRANSFER_EXPIRED);
  assert_int_equal(reads, 0);
  int32_t n = -1;
  int64_t blocks = -1;
  kv_export_counts(r, &n, &blocks);
  assert_int_equal(n, 0);
  assert_int_equal(blocks, 0);
  assert_int_equal(kv_export_cancel_all(r), 0);
  kv_export_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_only_the_listed_blocks_in_range_are_read),
      cmocka_unit_test(test_limits_refuse_and_report_a_duplicate_keeps_the_first),
      cmocka_unit_test(test_an_export_expires_once_and_late_fetches_say_expired),
      cmocka_unit_test(test_cancel_all_drops_every_export_unreported),
      cmocka_unit_test(test_a_repeated_last_chunk_fetch_succeeds_and_the_release_ends_it),
      cmocka_unit_test(test_a_release_ends_an_export_unread),
      cmocka_unit_test(test_a_stale_release_or_fetch_leaves_a_newer_export_alone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
