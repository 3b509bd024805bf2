/* kv_manager, the prefix index: batched kv steps by block id (RELEASE, ALLOCATE with prefix
 * lookup, CACHE, resync), prefix cache (salted, multimodal), eviction order, every malformed
 * op refused without harm, and a long random run under invariant checks
 * (actors/kv_manager/kv_manager.h). The fixture plays the scheduler: it owns the block tables
 * and reference counts, as the real one does (docs/design.md §4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "actors/kv_manager/kv_manager.h"
#include "base/hash.h"

#define BS 4
#define MAX_REQS 32
#define MAX_BLOCKS 64

struct fx_req {
  char id[16];
  int32_t blocks[MAX_BLOCKS];
  int32_t n;
};

struct fixture {
  struct kv_manager *m;
  struct kv_step step;
  struct kv_step_result res;
  uint64_t next_step;
  int32_t num_blocks;
  int32_t refs[MAX_BLOCKS];      /* the scheduler's reference counts */
  struct fx_req reqs[MAX_REQS];
};

static void fx_begin(struct fixture *f) { kv_step_clear(&f->step, ++f->next_step); }

static void fx_apply(struct fixture *f) {
  assert_int_equal(kv_manager_apply_step(f->m, &f->step, &f->res), LLB_STATUS_OK);
}

static struct fixture *fx_new(int32_t num_blocks) {
  struct fixture *f = test_calloc(1, sizeof(*f));
  struct kv_manager_config cfg = {.num_blocks = num_blocks, .block_size = BS, .enable_prefix_caching = true};
  assert_int_equal(kv_manager_create(&cfg, &f->m), LLB_STATUS_OK);
  kv_step_init(&f->step);
  kv_step_result_init(&f->res);
  f->num_blocks = num_blocks;
  fx_begin(f); /* a new manager takes steps only after it is told what is held */
  assert_int_equal(kv_step_set_held(&f->step, NULL, 0), LLB_STATUS_OK);
  fx_apply(f);
  return f;
}

static void fx_free(struct fixture *f) {
  llb_status st = kv_manager_check(f->m);
  kv_manager_destroy(f->m);
  kv_step_free(&f->step);
  kv_step_result_free(&f->res);
  test_free(f);
  assert_int_equal(st, LLB_STATUS_OK);
}

static struct fx_req *fx_req(struct fixture *f, const char *id) {
  struct fx_req *empty = NULL;
  for (int i = 0; i < MAX_REQS; i++) {
    if (strcmp(f->reqs[i].id, id) == 0) return &f->reqs[i];
    if (!empty && !f->reqs[i].id[0]) empty = &f->reqs[i];
  }
  assert_non_null(empty);
  snprintf(empty->id, sizeof empty->id, "%s", id);
  return empty;
}

/* Takes the blocks of result i for r (the scheduler's side of an ALLOCATE). */
static void fx_take(struct fixture *f, struct fx_req *r, int32_t i) {
  const struct kv_op_result *res = &f->res.results[i];
  const int32_t *ids = kv_step_result_block_ids(&f->res, res);
  for (int32_t k = 0; res->status == LLB_STATUS_OK && k < res->num_block_ids; k++) {
    f->refs[ids[k]]++;
    r->blocks[r->n++] = ids[k];
  }
}

/* Drops r's references: the blocks reaching zero, tail first, into the step's RELEASE ids. */
static int32_t fx_drop(struct fixture *f, struct fx_req *r, int32_t *ids) {
  int32_t n = 0;
  for (int32_t k = r->n - 1; k >= 0; k--)
    if (--f->refs[r->blocks[k]] == 0) ids[n++] = r->blocks[k];
  r->n = 0;
  r->id[0] = '\0';
  return n;
}

static void assert_agrees(const struct fixture *f) {
  for (int32_t b = 0; b < f->num_blocks; b++)
    assert_int_equal(f->refs[b] == 0, kv_block_pool_is_free(kv_manager_pool(f->m), b));
}

static const struct llb_hash_key TEST_KEY = {{9, 9, 9}};

/* Chained hashes of the full blocks of tokens[n], as a scheduler holding TEST_KEY makes them. */
static int32_t hashes_of(const int32_t *tokens, int32_t n, const char *salt, const uint64_t *mm,
                         int32_t num_mm, uint64_t *out) {
  uint64_t parent = LLB_BLOCK_HASH_ROOT;
  for (int32_t b = 0; b < n / BS; b++) {
    struct llb_block_extra_keys ex = {.has_cache_salt = salt && b == 0,
                                     .cache_salt_hash = salt ? llb_hash_bytes(&TEST_KEY, salt, strlen(salt)) : 0,
                                     .num_mm_hashes = b == 0 ? num_mm : 0, .mm_hashes = mm};
    out[b] = parent = llb_block_hash(&TEST_KEY, parent, tokens + b * BS, BS, &ex);
  }
  return n / BS;
}

/* One ALLOCATE-with-lookup step for a new request; returns the op's result. */
static struct kv_op_result alloc_new(struct fixture *f, const char *id, const int32_t *tokens, int32_t n,
                                     const char *salt, const uint64_t *mm, int32_t num_mm) {
  uint64_t h[64];
  int32_t nh = hashes_of(tokens, n, salt, mm, num_mm, h);
  fx_begin(f);
  assert_int_equal(kv_step_add_allocate(&f->step, id, n, 0, 0, true, h, nh), LLB_STATUS_OK);
  fx_apply(f);
  assert_int_equal(f->res.num_results, 1);
  fx_take(f, fx_req(f, id), 0);
  assert_agrees(f);
  return f->res.results[0];
}

/* Registers every full block of a request (as the scheduler does once they are computed). */
static void cache_all(struct fixture *f, const char *id, const int32_t *tokens, int32_t n,
                      const char *salt, const uint64_t *mm, int32_t num_mm) {
  uint64_t h[64];
  int32_t nh = hashes_of(tokens, n, salt, mm, num_mm, h);
  fx_begin(f);
  assert_int_equal(kv_step_add_cache(&f->step, id, fx_req(f, id)->blocks, h, nh), LLB_STATUS_OK);
  fx_apply(f);
  assert_int_equal(f->res.results[0].status, LLB_STATUS_OK);
}

static void free_req(struct fixture *f, const char *id) {
  int32_t ids[MAX_BLOCKS];
  const int32_t n = fx_drop(f, fx_req(f, id), ids);
  fx_begin(f);
  assert_int_equal(kv_step_add_release(&f->step, id, ids, n), LLB_STATUS_OK);
  fx_apply(f);
  assert_int_equal(f->res.results[0].status, LLB_STATUS_OK);
  assert_agrees(f);
}

static const int32_t PROMPT[13] = {11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41};

static void test_same_prompt_hits_prefix_of_full_blocks(void **state) {
  (void)state;
  struct fixture *f = fx_new(16);
  struct kv_op_result r = alloc_new(f, "a", PROMPT, 13, NULL, NULL, 0);
  assert_int_equal(r.status, LLB_STATUS_OK);
  assert_int_equal(r.num_cached_tokens, 0);
  assert_int_equal(r.num_block_ids, 4);
  int32_t a_blocks[4];
  memcpy(a_blocks, kv_step_result_block_ids(&f->res, &f->res.results[0]), sizeof(a_blocks));
  cache_all(f, "a", PROMPT, 13, NULL, NULL, 0);
  r = alloc_new(f, "b", PROMPT, 13, NULL, NULL, 0);
  assert_int_equal(r.status, LLB_STATUS_OK);
  assert_int_equal(r.num_cached_tokens, 12); /* three full blocks; the 13th token is computed */
  const int32_t *b_blocks = kv_step_result_block_ids(&f->res, &f->res.results[0]);
  assert_int_equal(r.num_block_ids, 4);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(b_blocks[i], a_blocks[i]);
    assert_int_equal(f->refs[a_blocks[i]], 2); /* shared: in use there, counted here */
  }
  assert_int_not_equal(b_blocks[3], a_blocks[3]);
  assert_int_equal(f->res.num_free_blocks, 16 - 5);
  assert_int_equal(f->res.prefix_cache_hits, 12);
  fx_free(f);
}

static void test_never_serves_the_whole_prompt_from_cache(void **state) {
  (void)state;
  struct fixture *f = fx_new(16);
  assert_int_equal(alloc_new(f, "a", PROMPT, 12, NULL, NULL, 0).status, LLB_STATUS_OK);
  cache_all(f, "a", PROMPT, 12, NULL, NULL, 0);
  struct kv_op_result r = alloc_new(f, "b", PROMPT, 12, NULL, NULL, 0); /* 12 = 3 full blocks */
  assert_int_equal(r.num_cached_tokens, 8); /* the last block is recomputed */
  assert_int_equal(r.num_block_ids, 3);
  fx_free(f);
}

static void test_no_hit_across_cache_salt_or_mm_hash(void **state) {
  (void)state;
  struct fixture *f = fx_new(32);
  uint64_t mm1 = llb_hash_bytes(&TEST_KEY, "img-1", 5), mm2 = llb_hash_bytes(&TEST_KEY, "img-2", 5);
  assert_int_equal(alloc_new(f, "a", PROMPT, 13, "tenant-a", &mm1, 1).status, LLB_STATUS_OK);
  cache_all(f, "a", PROMPT, 13, "tenant-a", &mm1, 1);
  assert_int_equal(alloc_new(f, "b", PROMPT, 13, "tenant-b", &mm1, 1).num_cached_tokens, 0);
  assert_int_equal(alloc_new(f, "c", PROMPT, 13, NULL, &mm1, 1).num_cached_tokens, 0);
  assert_int_equal(alloc_new(f, "d", PROMPT, 13, "tenant-a", &mm2, 1).num_cached_tokens, 0);
  assert_int_equal(alloc_new(f, "e", PROMPT, 13, "tenant-a", NULL, 0).num_cached_tokens, 0);
  assert_int_equal(alloc_new(f, "g", PROMPT, 13, "tenant-a", &mm1, 1).num_cached_tokens, 12);
  fx_free(f);
}

static void test_prefix_hit_survives_eviction_of_other_blocks(void **state) {
  (void)state;
  struct fixture *f = fx_new(8);
  int32_t other[8] = {91, 92, 93, 94, 95, 96, 97, 98};
  assert_int_equal(alloc_new(f, "old", other, 8, NULL, NULL, 0).status, LLB_STATUS_OK);
  cache_all(f, "old", other, 8, NULL, NULL, 0);
  free_req(f, "old");                                   /* queue: 2..7, 1, 0 */
  assert_int_equal(alloc_new(f, "a", PROMPT, 9, NULL, NULL, 0).status, LLB_STATUS_OK); /* 2, 3, 4 */
  cache_all(f, "a", PROMPT, 9, NULL, NULL, 0);
  free_req(f, "a");                                     /* queue: 5, 6, 7, 1, 0, 4, 3, 2 */
  /* 5 fresh blocks: pops 5, 6, 7, 1, 0 — the old request's cached blocks are evicted */
  int32_t filler[20] = {0};
  for (int i = 0; i < 20; i++) filler[i] = 500 + i;
  assert_int_equal(alloc_new(f, "x", filler, 20, NULL, NULL, 0).status, LLB_STATUS_OK);
  uint64_t old_h[2];
  hashes_of(other, 8, NULL, NULL, 0, old_h);
  assert_int_equal(kv_block_pool_get_cached_block(kv_manager_pool(f->m), old_h[0]), -1);
  assert_int_equal(kv_block_pool_get_cached_block(kv_manager_pool(f->m), old_h[1]), -1);
  struct kv_op_result r = alloc_new(f, "b", PROMPT, 9, NULL, NULL, 0);
  assert_int_equal(r.status, LLB_STATUS_OK);
  assert_int_equal(r.num_cached_tokens, 8);
  fx_free(f);
}

static void test_free_evicts_the_tail_of_a_sequence_first(void **state) {
  (void)state;
  struct fixture *f = fx_new(4);
  assert_int_equal(alloc_new(f, "a", PROMPT, 13, NULL, NULL, 0).status, LLB_STATUS_OK);
  cache_all(f, "a", PROMPT, 13, NULL, NULL, 0);
  free_req(f, "a");
  int32_t q[4];
  assert_int_equal(kv_block_pool_free_queue_ids(kv_manager_pool(f->m), q, 4), 4);
  assert_int_equal(q[0], 3);
  assert_int_equal(q[3], 0);
  /* one fresh block evicts the last one; a same-prompt lookup still hits the first three */
  int32_t t[2] = {7, 8};
  assert_int_equal(alloc_new(f, "x", t, 2, NULL, NULL, 0).status, LLB_STATUS_OK);
  struct kv_op_result r = alloc_new(f, "b", PROMPT, 13, NULL, NULL, 0);
  assert_int_equal(r.status, LLB_STATUS_QUEUE_FULL); /* 3 hits + 1 fresh > 3 free */
  free_req(f, "x");
  r = alloc_new(f, "b", PROMPT, 13, NULL, NULL, 0);
  assert_int_equal(r.num_cached_tokens, 12);
  fx_free(f);
}

static void test_shared_blocks_return_to_the_queue_after_the_last_holder(void **state) {
  (void)state;
  struct fixture *f = fx_new(8);
  assert_int_equal(alloc_new(f, "a", PROMPT, 13, NULL, NULL, 0).status, LLB_STATUS_OK);
  cache_all(f, "a", PROMPT, 13, NULL, NULL, 0);
  assert_int_equal(alloc_new(f, "b", PROMPT, 13, NULL, NULL, 0).num_cached_tokens, 12);
  assert_int_equal(f->res.num_free_blocks, 3);
  const int32_t b_first = fx_req(f, "b")->blocks[0];
  free_req(f, "a");
  assert_int_equal(f->res.num_free_blocks, 4); /* only a's private last block */
  free_req(f, "b");
  assert_int_equal(f->res.num_free_blocks, 8);
  fx_begin(f); /* a second RELEASE of a free block is refused: no double free */
  assert_int_equal(kv_step_add_release(&f->step, "b", &b_first, 1), LLB_STATUS_OK);
  fx_apply(f);
  assert_int_equal(f->res.results[0].status, LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(f->res.num_free_blocks, 8);
  fx_free(f);
}

/* One step: RELEASE, then ALLOCATEs in order; a request grows by num_held_blocks; an
 * allocation that does not fit is QUEUE_FULL and changes nothing. */
static void test_one_step_applies_ops_in_order_and_grows_a_request(void **state) {
  (void)state;
  struct fixture *f = fx_new(6);
  assert_int_equal(alloc_new(f, "a", PROMPT, 5, NULL, NULL, 0).num_block_ids, 2);
  int32_t rel[MAX_BLOCKS];
  const int32_t n_rel = fx_drop(f, fx_req(f, "a"), rel);
  fx_begin(f);
  assert_int_equal(kv_step_add_release(&f->step, NULL, rel, n_rel), LLB_STATUS_OK);
  assert_int_equal(kv_step_add_allocate(&f->step, "b", 9, 0, 0, false, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(kv_step_add_allocate(&f->step, "b", 24, 3, 9, false, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(kv_step_add_allocate(&f->step, "b", 25, 6, 24, false, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(kv_step_add_allocate(&f->step, "b", 20, 6, 24, false, NULL, 0), LLB_STATUS_OK); /* holds enough */
  fx_apply(f);
  assert_int_equal(f->res.step, f->next_step);
  assert_int_equal(f->res.num_results, 5);
  assert_int_equal(f->res.results[0].status, LLB_STATUS_OK);
  assert_int_equal(f->res.results[1].num_block_ids, 3);
  assert_int_equal(f->res.results[2].num_block_ids, 3);
  assert_int_equal(f->res.results[3].status, LLB_STATUS_QUEUE_FULL);
  assert_int_equal(f->res.results[3].num_block_ids, 0);
  assert_int_equal(f->res.results[4].status, LLB_STATUS_OK);
  assert_int_equal(f->res.results[4].num_block_ids, 0);
  assert_int_equal(f->res.num_free_blocks, 0);
  for (int i = 1; i <= 2; i++) fx_take(f, fx_req(f, "b"), i);
  assert_int_equal(fx_req(f, "b")->n, 6);
  assert_agrees(f);
  fx_free(f);
}

/* Whatever arrives is checked: each bad op is refused in its result and changes nothing, the
 * ops around it still apply; a bad held list refuses the whole step; a step that does not
 * follow a resync on a new manager, or goes back in step number, is STATE_LOST. */
static void test_malformed_ops_are_refused_and_change_nothing(void **state) {
  (void)state;
  struct fixture *f = fx_new(8);
  assert_int_equal(alloc_new(f, "a", PROMPT, 13, NULL, NULL, 0).status, LLB_STATUS_OK); /* 0..3 */
  cache_all(f, "a", PROMPT, 13, NULL, NULL, 0);
  uint64_t h[4];
  hashes_of(PROMPT, 13, NULL, NULL, 0, h);
  const uint64_t repeated[3] = {h[0], h[0], h[1]};
  fx_begin(f);
  assert_int_equal(kv_step_add_release(&f->step, NULL, (int32_t[]){3, 9}, 2), LLB_STATUS_OK);     /* range */
  assert_int_equal(kv_step_add_release(&f->step, NULL, (int32_t[]){3, 3}, 2), LLB_STATUS_OK);     /* twice */
  assert_int_equal(kv_step_add_release(&f->step, NULL, (int32_t[]){3, 5}, 2), LLB_STATUS_OK);     /* 5 free */
  assert_int_equal(kv_step_add_allocate(&f->step, "x", 8, 1, 0, true, h, 1), LLB_STATUS_OK);      /* lookup + held */
  assert_int_equal(kv_step_add_allocate(&f->step, "x", 0, 0, 0, false, NULL, 0), LLB_STATUS_OK);  /* no tokens */
  assert_int_equal(kv_step_add_allocate(&f->step, "x", 1 << 30, 0, 0, false, NULL, 0), LLB_STATUS_OK); /* too many */
  assert_int_equal(kv_step_add_cache(&f->step, NULL, (int32_t[]){4, 8}, h, 2), LLB_STATUS_OK);    /* range */
  assert_int_equal(kv_step_add_allocate(&f->step, "y", 13, 0, 0, true, repeated, 3), LLB_STATUS_OK);
  fx_apply(f);
  for (int i = 0; i < 4; i++) assert_int_equal(f->res.results[i].status, LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(f->res.results[4].status, LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(f->res.results[5].status, LLB_STATUS_QUEUE_FULL);
  assert_int_equal(f->res.results[6].status, LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(f->res.results[7].status, LLB_STATUS_OK); /* the hit run stops at the repeat */
  assert_int_equal(f->res.results[7].num_cached_tokens, BS);
  fx_take(f, fx_req(f, "y"), 7);
  assert_agrees(f);
  assert_int_equal(kv_manager_check(f->m), LLB_STATUS_OK);
  /* a bad held list refuses the whole step, the ops with it too */
  fx_begin(f);
  assert_int_equal(kv_step_set_held(&f->step, (int32_t[]){0, 0}, 2), LLB_STATUS_OK);
  assert_int_equal(kv_step_add_allocate(&f->step, "z", 4, 0, 0, false, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(kv_manager_apply_step(f->m, &f->step, &f->res), LLB_STATUS_INVALID_ARGUMENT);
  assert_agrees(f);
  kv_step_clear(&f->step, 1); /* a step number from before */
  assert_int_equal(kv_manager_apply_step(f->m, &f->step, &f->res), LLB_STATUS_STATE_LOST);
  fx_free(f);
  /* a new manager knows nothing of what is held */
  struct kv_manager *m;
  struct kv_manager_config cfg = {.num_blocks = 4, .block_size = BS, .enable_prefix_caching = true};
  assert_int_equal(kv_manager_create(&cfg, &m), LLB_STATUS_OK);
  struct kv_step st;
  struct kv_step_result res;
  kv_step_init(&st);
  kv_step_result_init(&res);
  kv_step_clear(&st, 5);
  assert_int_equal(kv_step_add_allocate(&st, "a", 4, 0, 0, false, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(kv_manager_apply_step(m, &st, &res), LLB_STATUS_STATE_LOST);
  assert_int_equal(kv_block_pool_num_free(kv_manager_pool(m)), 4);
  assert_int_equal(kv_step_set_held(&st, (int32_t[]){2}, 1), LLB_STATUS_OK); /* the resync goes first */
  assert_int_equal(kv_manager_apply_step(m, &st, &res), LLB_STATUS_OK);
  assert_int_equal(res.results[0].num_block_ids, 1);
  assert_int_not_equal(kv_step_result_block_ids(&res, &res.results[0])[0], 2);
  assert_int_equal(res.num_free_blocks, 2);
  kv_step_free(&st);
  kv_step_result_free(&res);
  kv_manager_destroy(m);
}

/* xorshift64*: seeded, reproducible. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

static void test_random_ops_never_lose_or_double_free_a_block(void **state) {
  (void)state;
  enum { NUM_REQS = 24, OPS = 100000 };
  struct fixture *f = fx_new(64);
  uint64_t rng = 42;
  char ids[NUM_REQS][16];
  int32_t toks[NUM_REQS], cached[NUM_REQS];
  int32_t base[4][64]; /* four shared prompts so lookups hit */
  for (int p = 0; p < 4; p++)
    for (int i = 0; i < 64; i++) base[p][i] = p * 1000 + i;
  int32_t which[NUM_REQS];
  for (int i = 0; i < NUM_REQS; i++) {
    snprintf(ids[i], sizeof(ids[i]), "r%d", i);
    toks[i] = 0;
    cached[i] = 0;
  }
  int64_t hits = 0;
  for (int op = 0; op < OPS; op++) {
    int i = (int)(rng_next(&rng) % NUM_REQS);
    uint64_t kind = rng_next(&rng) % 10;
    fx_begin(f);
    uint64_t h[16];
    struct fx_req *r = fx_req(f, ids[i]);
    if (toks[i] == 0) {                      /* new: allocate with lookup */
      which[i] = (int)(rng_next(&rng) % 4);
      int32_t n = 1 + (int32_t)(rng_next(&rng) % 40);
      int32_t nh = hashes_of(base[which[i]], n, NULL, NULL, 0, h);
      assert_int_equal(kv_step_add_allocate(&f->step, ids[i], n, 0, 0, true, h, nh), LLB_STATUS_OK);
      fx_apply(f);
      if (f->res.results[0].status == LLB_STATUS_OK) {
        fx_take(f, r, 0);
        toks[i] = n;
        cached[i] = f->res.results[0].num_cached_tokens / BS;
        hits += f->res.results[0].num_cached_tokens;
        assert_true(f->res.results[0].num_cached_tokens < n);
      } else {
        assert_int_equal(f->res.results[0].status, LLB_STATUS_QUEUE_FULL);
        r->id[0] = '\0';
      }
    } else if (kind < 3) {                   /* finish */
      int32_t rel[MAX_BLOCKS];
      const int32_t n_rel = fx_drop(f, r, rel);
      assert_int_equal(kv_step_add_release(&f->step, ids[i], rel, n_rel), LLB_STATUS_OK);
      fx_apply(f);
      assert_int_equal(f->res.results[0].status, LLB_STATUS_OK);
      toks[i] = 0;
    } else if (kind < 7) {                   /* register computed full blocks */
      int32_t full = toks[i] / BS;
      if (full > 16) full = 16;
      if (full > cached[i]) {
        hashes_of(base[which[i]], full * BS, NULL, NULL, 0, h);
        assert_int_equal(kv_step_add_cache(&f->step, ids[i], r->blocks + cached[i], h + cached[i], full - cached[i]),
                         LLB_STATUS_OK);
        fx_apply(f);
        assert_int_equal(f->res.results[0].status, LLB_STATUS_OK);
        cached[i] = full;
      }
    } else if (toks[i] < 64) {               /* grow (decode / next chunk) */
      int32_t n = toks[i] + 1 + (int32_t)(rng_next(&rng) % 8);
      if (n > 64) n = 64;
      assert_int_equal(kv_step_add_allocate(&f->step, ids[i], n, r->n, toks[i], false, NULL, 0), LLB_STATUS_OK);
      fx_apply(f);
      if (f->res.results[0].status == LLB_STATUS_OK) {
        fx_take(f, r, 0);
        toks[i] = n;
      }
    }
    if (op % 97 == 0 || op == OPS - 1) {
      assert_int_equal(kv_manager_check(f->m), LLB_STATUS_OK);
      assert_agrees(f);
    }
  }
  assert_true(hits > 0);
  for (int i = 0; i < NUM_REQS; i++)
    if (toks[i] > 0) free_req(f, ids[i]);
  struct kv_manager_stats st;
  kv_manager_get_stats(f->m, &st);
  assert_int_equal(st.num_free_blocks, 64);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_prompt_hits_prefix_of_full_blocks),
      cmocka_unit_test(test_never_serves_the_whole_prompt_from_cache),
      cmocka_unit_test(test_no_hit_across_cache_salt_or_mm_hash),
      cmocka_unit_test(test_prefix_hit_survives_eviction_of_other_blocks),
      cmocka_unit_test(test_free_evicts_the_tail_of_a_sequence_first),
      cmocka_unit_test(test_shared_blocks_return_to_the_queue_after_the_last_holder),
      cmocka_unit_test(test_one_step_applies_ops_in_order_and_grows_a_request),
      cmocka_unit_test(test_malformed_ops_are_refused_and_change_nothing),
      cmocka_unit_test(test_random_ops_never_lose_or_double_free_a_block),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
