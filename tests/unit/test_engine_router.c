/* Engine routing (actors/input_processor/engine_router.h) and the engine named in request ids
 * (input_processor_processed_set_engine / input_processor_engine_of_id): what an operator running several
 * engines behind one subject depends on — load spreads, a shared prefix sticks to the engine
 * that holds it, a silent engine gets nothing new, an abort finds the engine of its id. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "actors/input_processor/engine_router.h"
#include "actors/input_processor/input_processor.h"

#define MS 1000000ll

static struct engine_router *make_pd_router(enum engine_router_policy policy, int32_t disagg_min_prompt_tokens) {
  struct engine_router_config c;
  engine_router_config_init(&c);
  c.default_engine_id = "local";
  c.model = "m.gguf";
  c.policy = policy;
  c.seed = 42;
  c.disagg_min_prompt_tokens = disagg_min_prompt_tokens;
  struct engine_router *r = NULL;
  assert_int_equal(engine_router_create(&c, &r), LLB_STATUS_OK);
  return r;
}

static struct engine_router *make_router(enum engine_router_policy policy) {
  return make_pd_router(policy, ENGINE_ROUTER_DEFAULT_DISAGG_MIN_PROMPT_TOKENS);
}

static void announce(struct engine_router *r, const char *eid, int running, int waiting, int64_t now) {
  struct engine_router_stats s = {.engine_id = eid, .model = "m.gguf", .num_running_reqs = running,
                                  .num_waiting_reqs = waiting, .kv_cache_usage = 0.1f,
                                  .num_total_blocks = 100, .block_size = 4, .stats_interval_ms = 1000};
  assert_int_equal(engine_router_update(r, &s, now), LLB_STATUS_OK);
}

static void announce_role(struct engine_router *r, const char *eid, enum engine_router_role role, int running,
                          int free_blocks, int64_t now) {
  struct engine_router_stats s = {.engine_id = eid, .model = "m.gguf", .num_running_reqs = running,
                                  .kv_cache_usage = 1.0f - (float)free_blocks / 100.0f, .num_free_blocks = free_blocks,
                                  .num_total_blocks = 100, .block_size = 4, .stats_interval_ms = 1000, .role = role};
  assert_int_equal(engine_router_update(r, &s, now), LLB_STATUS_OK);
}

static void prompt(int32_t *ids, int n, int32_t base) {
  for (int i = 0; i < n; i++) ids[i] = base + i;
}

static void before_any_stats_the_default_engine_gets_everything(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_CACHE_AWARE);
  int32_t ids[8];
  prompt(ids, 8, 1);
  struct engine_router_choice c;
  engine_router_choose(r, ids, 8, NULL, 0, &c);
  assert_string_equal(c.engine_id, "local");
  assert_true(c.fallback);
  engine_router_destroy(r);
}

static void least_loaded_spreads_a_burst_between_stats(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  announce(r, "a", 0, 0, 0);
  announce(r, "b", 0, 0, 0);
  int on_a = 0;
  for (int i = 0; i < 32; i++) { /* no new stats in between: the router counts what it sent */
    int32_t ids[8];
    prompt(ids, 8, 1000 * i);
    struct engine_router_choice c;
    engine_router_choose(r, ids, 8, NULL, 10 * MS, &c);
    assert_false(c.fallback);
    on_a += strcmp(c.engine_id, "a") == 0;
  }
  assert_int_equal(on_a, 16);
  engine_router_destroy(r);
}

/* Stats that were taken before a burst do not count the burst's requests: they stay pending
 * and the next requests go to the other engines. Once stats taken after them come, they are in
 * its counts and leave. (Dropping all pending at any stats gave an engine whose stats arrived
 * mid-burst twice its share: docs/scaling.md.) */
static void stats_taken_before_a_burst_leave_its_requests_pending(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  announce(r, "a", 0, 0, 0);
  announce(r, "b", 0, 0, 0);
  struct engine_router_choice c;
  int32_t ids[4] = {1, 2, 3, 4};
  for (int i = 0; i < 8; i++) engine_router_choose(r, ids, 4, NULL, 1000 * MS, &c); /* 4 each */
  /* a's stats arrive at 1.2 s, taken at 0.9 s (before the burst): its 4 stay pending */
  struct engine_router_stats s = {.engine_id = "a", .model = "m.gguf", .kv_cache_usage = 0.1f,
                                  .num_total_blocks = 100, .block_size = 4, .stats_interval_ms = 1000,
                                  .age_ns = 300 * MS};
  assert_int_equal(engine_router_update(r, &s, 1200 * MS), LLB_STATUS_OK);
  int on_a = 0;
  for (int i = 0; i < 4; i++) {
    engine_router_choose(r, ids, 4, NULL, 1300 * MS, &c);
    on_a += strcmp(c.engine_id, "a") == 0;
  }
  assert_int_equal(on_a, 2); /* a and b both at 4 + 2: even, not 4 more to a */
  /* stats taken at 1.4 s with a's 6 running: nothing pending there any more */
  s.num_running_reqs = 6;
  s.age_ns = 0;
  assert_int_equal(engine_router_update(r, &s, 1400 * MS), LLB_STATUS_OK);
  struct engine_router_engine rows[2];
  assert_int_equal(engine_router_list(r, 1400 * MS, rows, 2), 2);
  const struct engine_router_engine *a = strcmp(rows[0].engine_id, "a") == 0 ? &rows[0] : &rows[1];
  assert_int_equal(a->pending, 0);
  assert_int_equal(a->running, 6);
  s.age_ns = -1; /* a snapshot from the future: refused */
  assert_int_equal(engine_router_update(r, &s, 1500 * MS), LLB_STATUS_INVALID_ARGUMENT);
  engine_router_destroy(r);
}

static void least_loaded_prefers_the_idle_engine(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  announce(r, "busy", 20, 5, 0);
  announce(r, "idle", 2, 0, 0);
  int32_t ids[4] = {1, 2, 3, 4};
  struct engine_router_choice c;
  engine_router_choose(r, ids, 4, NULL, MS, &c);
  assert_string_equal(c.engine_id, "idle");
  engine_router_destroy(r);
}

static void cache_aware_sends_a_shared_prefix_to_the_engine_that_holds_it(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_CACHE_AWARE);
  announce(r, "a", 3, 0, 0);
  announce(r, "b", 3, 0, 0);
  int32_t system[64]; /* 16 blocks of 4 shared by every request, then a 4-token question */
  prompt(system, 64, 7);
  struct engine_router_choice first;
  int32_t ids[68];
  memcpy(ids, system, sizeof system);
  prompt(ids + 64, 4, 5000);
  engine_router_choose(r, ids, 68, "tenant-x", MS, &first);
  assert_false(first.by_prefix);
  for (int q = 1; q < 10; q++) {
    prompt(ids + 64, 4, 5000 + 10 * q);
    struct engine_router_choice c;
    engine_router_choose(r, ids, 68, "tenant-x", (1 + q) * MS, &c);
    assert_string_equal(c.engine_id, first.engine_id);
    assert_true(c.by_prefix);
    assert_int_equal(c.matched_blocks, 16);
    assert_int_equal(c.prompt_blocks, 17);
  }
  /* another tenant's salt shares nothing: chosen by load, no prefix credit */
  struct engine_router_choice other;
  engine_router_choose(r, ids, 68, "tenant-y", 20 * MS, &other);
  assert_false(other.by_prefix);
  assert_int_equal(other.matched_blocks, 0);
  engine_router_destroy(r);
}

static void cache_aware_balances_when_the_prefix_owner_is_overloaded(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_CACHE_AWARE);
  announce(r, "a", 0, 0, 0);
  announce(r, "b", 0, 0, 0);
  int32_t ids[64];
  prompt(ids, 64, 3);
  struct engine_router_choice first;
  engine_router_choose(r, ids, 64, NULL, MS, &first);
  const char *other = strcmp(first.engine_id, "a") == 0 ? "b" : "a";
  announce(r, first.engine_id, 60, 20, 2 * MS); /* 80 vs 1: beyond 32 and 1.5x */
  announce(r, other, 1, 0, 2 * MS);
  struct engine_router_choice c;
  engine_router_choose(r, ids, 64, NULL, 3 * MS, &c);
  assert_string_equal(c.engine_id, other);
  assert_false(c.by_prefix);
  engine_router_destroy(r);
}

static void a_silent_engine_gets_no_new_requests(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_RANDOM);
  announce(r, "a", 0, 0, 0);
  announce(r, "b", 0, 0, 0);
  /* 3 intervals (1 s each) + 1 s slack later, only b has spoken again */
  announce(r, "b", 0, 0, 4000 * MS);
  for (int i = 0; i < 20; i++) {
    int32_t ids[4] = {i, i + 1, i + 2, i + 3};
    struct engine_router_choice c;
    engine_router_choose(r, ids, 4, NULL, 4500 * MS, &c);
    assert_string_equal(c.engine_id, "b");
  }
  /* and when every engine fell silent: the default engine */
  struct engine_router_choice c;
  engine_router_choose(r, NULL, 0, NULL, 60000 * MS, &c);
  assert_true(c.fallback);
  assert_string_equal(c.engine_id, "local");
  struct engine_router_engine rows[4];
  assert_int_equal(engine_router_list(r, 60000 * MS, rows, 4), 2);
  assert_false(rows[0].live);
  engine_router_destroy(r);
}

static void a_draining_engine_gets_nothing_new_until_it_is_back(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  announce(r, "a", 0, 0, 0);
  announce(r, "b", 40, 40, 0);
  struct engine_router_stats bye = {.engine_id = "a", .model = "m.gguf", .draining = true};
  assert_int_equal(engine_router_update(r, &bye, MS), LLB_STATUS_OK);
  struct engine_router_choice c;
  engine_router_choose(r, NULL, 0, NULL, 2 * MS, &c);
  assert_string_equal(c.engine_id, "b"); /* though a was idle a moment ago */
  announce(r, "a", 0, 0, 3 * MS);        /* restarted: announces itself again */
  engine_router_choose(r, NULL, 0, NULL, 4 * MS, &c);
  assert_string_equal(c.engine_id, "a");
  engine_router_destroy(r);
}

static void an_engine_serving_another_model_is_never_chosen(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  struct engine_router_stats s = {.engine_id = "other", .model = "bigger.gguf", .stats_interval_ms = 1000};
  assert_int_equal(engine_router_update(r, &s, 0), LLB_STATUS_OK);
  announce(r, "same", 50, 50, 0);
  struct engine_router_choice c;
  engine_router_choose(r, NULL, 0, NULL, MS, &c);
  assert_string_equal(c.engine_id, "same");
  engine_router_destroy(r);
}

static void forged_stats_are_refused(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  struct engine_router_stats bad[] = {
      {.engine_id = "x", .num_running_reqs = -1},
      {.engine_id = "x", .kv_cache_usage = __builtin_nanf("")},
      {.engine_id = "x", .kv_cache_usage = 2.0f},
      {.engine_id = "a.b"},
      {.engine_id = NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(engine_router_update(r, &bad[i], 0), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(engine_router_rejected_stats(r), 5);
  struct engine_router_engine rows[1];
  assert_int_equal(engine_router_list(r, 0, rows, 1), 0);
  engine_router_destroy(r);
}

static void ids_name_their_engine(void **state) {
  (void)state;
  struct input_processor_engine_request reqs[3] = {0};
  struct input_processor_processed pr = {.requests = reqs, .num_requests = 3};
  for (int i = 0; i < 3; i++) {
    snprintf(reqs[i].parent_request_id, sizeof reqs[i].parent_request_id, "chat@home-00000000000000ab");
    reqs[i].child_index = i;
  }
  assert_int_equal(input_processor_processed_set_engine(&pr, "e7"), LLB_STATUS_OK);
  assert_string_equal(reqs[0].parent_request_id, "chat@home-00000000000000ab@e7");
  assert_string_equal(reqs[2].request_id, "2_chat@home-00000000000000ab@e7");
  char eid[65];
  assert_true(input_processor_engine_of_id(reqs[2].request_id, strlen(reqs[2].request_id), eid, sizeof eid));
  assert_string_equal(eid, "e7");
  assert_false(input_processor_engine_of_id("plain-0123", 10, eid, sizeof eid));
  assert_false(input_processor_engine_of_id("x@a.b", 5, eid, sizeof eid));
  assert_false(input_processor_engine_of_id("x@", 2, eid, sizeof eid));
  assert_int_equal(input_processor_processed_set_engine(&pr, "bad.id"), LLB_STATUS_INVALID_ARGUMENT);
}

/* Dynamo's conditional disaggregation: a long prompt goes to the prefill engine and names a
 * decode engine; a short one, or one that may not be split (n > 1, images), is served
 * aggregated by an engine that decodes, never by the prefill engine. */
static void long_prompts_are_disaggregated_short_ones_aggregated(void **state) {
  (void)state;
  struct engine_router *r = make_pd_router(ENGINE_ROUTER_CACHE_AWARE, 16);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 0);
  announce_role(r, "d", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  int32_t ids[32];
  prompt(ids, 32, 1);
  struct engine_router_choice c;
  engine_router_choose_pd(r, ids, 32, NULL, true, 10 * MS, &c);
  assert_true(c.disaggregated);
  assert_string_equal(c.engine_id, "p");
  assert_string_equal(c.decode_engine_id, "d");
  for (int k = 0; k < 8; k++) { /* short, or not splittable: the decode engine, aggregated */
    engine_router_choose_pd(r, ids, k < 4 ? 8 : 32, NULL, k < 4, 10 * MS, &c);
    assert_false(c.disaggregated);
    assert_string_equal(c.engine_id, "d");
    assert_string_equal(c.decode_engine_id, "");
  }
  engine_router_choose(r, ids, 32, NULL, 10 * MS, &c); /* the plain choice never splits */
  assert_false(c.disaggregated);
  assert_string_equal(c.engine_id, "d");
  engine_router_destroy(r);
}

/* Without a live decode engine nothing is disaggregated: the prefill engine serves it whole
 * (it is a full engine); the decode engine is chosen by load, ties by free blocks. */
static void disaggregation_needs_a_live_decode_engine_and_picks_the_freest(void **state) {
  (void)state;
  struct engine_router *r = make_pd_router(ENGINE_ROUTER_LEAST_LOADED, 0);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 0);
  int32_t ids[32];
  prompt(ids, 32, 1);
  struct engine_router_choice c;
  engine_router_choose_pd(r, ids, 32, NULL, true, 10 * MS, &c);
  assert_false(c.disaggregated);
  assert_string_equal(c.engine_id, "p");
  announce_role(r, "d1", ENGINE_ROUTER_ROLE_DECODE, 2, 90, 20 * MS);
  announce_role(r, "d2", ENGINE_ROUTER_ROLE_DECODE, 2, 10, 20 * MS);
  announce_role(r, "d3", ENGINE_ROUTER_ROLE_DECODE, 5, 100, 20 * MS);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 20 * MS);
  engine_router_choose_pd(r, ids, 32, NULL, true, 30 * MS, &c);
  assert_true(c.disaggregated);
  assert_string_equal(c.engine_id, "p");
  assert_string_equal(c.decode_engine_id, "d1"); /* d1 and d2 equally loaded: d1 has more free blocks */
  char decode[4][BUS_TOKEN_MAX + 1];
  assert_int_equal(engine_router_decode_engines(r, decode, 4), 3);
  /* the decode engines fall silent: aggregated on the prefill engine again */
  engine_router_choose_pd(r, ids, 32, NULL, true, 10000 * MS, &c);
  assert_false(c.disaggregated);
  engine_router_destroy(r);
}

/* Issue 36 item 5: a prompt whose prefix a decode engine already received goes on to that
 * decode engine (it then fetches only the missing blocks), as long as loads are balanced. */
static void the_decode_engine_holding_the_prefix_continues_it(void **state) {
  (void)state;
  struct engine_router *r = make_pd_router(ENGINE_ROUTER_CACHE_AWARE, 0);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 0);
  announce_role(r, "d1", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  announce_role(r, "d2", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  int32_t ids[32];
  prompt(ids, 32, 1);
  struct engine_router_choice first, c;
  engine_router_choose_pd(r, ids, 32, "tenant-a", true, 10 * MS, &first);
  assert_true(first.disaggregated);
  assert_int_equal(first.decode_matched_blocks, 0);
  for (int k = 0; k < 4; k++) { /* same prefix, another ending: the same decode engine */
    ids[31] = 5000 + k;
    engine_router_choose_pd(r, ids, 32, "tenant-a", true, 20 * MS, &c);
    assert_true(c.disaggregated);
    assert_string_equal(c.decode_engine_id, first.decode_engine_id);
    assert_true(c.decode_matched_blocks >= 7);
  }
  engine_router_choose_pd(r, ids, 32, "tenant-b", true, 20 * MS, &c); /* another tenant's salt: no match */
  assert_int_equal(c.decode_matched_blocks, 0);
  engine_router_destroy(r);
}

/* Dynamo's conditional disaggregation, load side: once the prefill engine holds
 * max_prefill_queue_size requests (those its stats count and those routed there since), long
 * prompts are served aggregated by the decode engine instead of queueing behind them. */
static void a_saturated_prefill_engine_sends_long_prompts_to_the_decode_engine(void **state) {
  (void)state;
  struct engine_router_config cfg;
  engine_router_config_init(&cfg);
  cfg.default_engine_id = "local";
  cfg.model = "m.gguf";
  cfg.seed = 42;
  cfg.disagg_min_prompt_tokens = 16;
  cfg.max_prefill_queue_size = 3;
  struct engine_router *r = NULL;
  assert_int_equal(engine_router_create(&cfg, &r), LLB_STATUS_OK);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 1, 100, 0);
  announce_role(r, "d", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  int32_t ids[32];
  struct engine_router_choice c;
  for (int k = 0; k < 2; k++) { /* 1 running + 2 routed: the third fills it */
    prompt(ids, 32, 1 + 100 * k);
    engine_router_choose_pd(r, ids, 32, NULL, true, 10 * MS, &c);
    assert_true(c.disaggregated);
    assert_int_equal(c.pd_decision, PD_DECISION_DISAGGREGATE);
  }
  prompt(ids, 32, 1000);
  engine_router_choose_pd(r, ids, 32, NULL, true, 10 * MS, &c);
  assert_false(c.disaggregated);
  assert_true(c.pd_considered);
  assert_int_equal(c.pd_decision, PD_DECISION_PREFILL_SATURATED);
  assert_string_equal(c.engine_id, "d");
  /* its stats say it drained: disaggregated again (another prompt: d holds that one now) */
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 200 * MS);
  prompt(ids, 32, 2000);
  engine_router_choose_pd(r, ids, 32, NULL, true, 210 * MS, &c);
  assert_true(c.disaggregated);
  engine_router_destroy(r);
}

/* Dynamo's prefill_length - prefix_hit_length: a prompt whose prefix a decode engine already
 * received is short once that prefix is taken off, so that decode engine (not another) prefills
 * the rest. */
static void a_prompt_mostly_held_by_the_decode_engine_is_prefilled_there(void **state) {
  (void)state;
  struct engine_router *r = make_pd_router(ENGINE_ROUTER_CACHE_AWARE, 16);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 0);
  announce_role(r, "d1", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  announce_role(r, "d2", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  int32_t ids[40];
  prompt(ids, 40, 1);
  struct engine_router_choice first, c;
  engine_router_choose_pd(r, ids, 32, "t", true, 10 * MS, &first); /* 8 blocks of 4 move to d1 or d2 */
  assert_true(first.disaggregated);
  for (int k = 0; k < 4; k++) {
    engine_router_choose_pd(r, ids, 40, "t", true, 20 * MS, &c); /* 8 new tokens: < 16 */
    assert_false(c.disaggregated);
    assert_int_equal(c.pd_decision, PD_DECISION_SHORT);
    assert_string_equal(c.engine_id, first.decode_engine_id);
  }
  engine_router_choose_pd(r, ids, 40, "other", true, 20 * MS, &c); /* another tenant holds nothing */
  assert_true(c.disaggregated);
  engine_router_destroy(r);
}

/* Transfer against recompute: 23,040 bytes a token at 250 MB/s is slower than a 40,000 tokens/s
 * prefill, so the request is served whole, by any engine (the prefill engine too: no engine gains
 * from its role then), the least loaded; at 400 tokens/s (a CPU) the transfer pays. */
static void a_transfer_slower_than_the_decode_engines_prefill_is_not_made(void **state) {
  (void)state;
  struct engine_router_config cfg;
  engine_router_config_init(&cfg);
  cfg.default_engine_id = "local";
  cfg.model = "m.gguf";
  cfg.seed = 42;
  cfg.disagg_min_prompt_tokens = 16;
  cfg.kv_bytes_per_token = 23040;
  cfg.transfer_bytes_per_s = 250e6;
  cfg.prefill_tokens_per_s = 40000.0;
  struct engine_router *r = NULL;
  assert_int_equal(engine_router_create(&cfg, &r), LLB_STATUS_OK);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 0);
  announce_role(r, "d", ENGINE_ROUTER_ROLE_DECODE, 2, 100, 0);
  int32_t ids[32];
  prompt(ids, 32, 1);
  struct engine_router_choice c;
  engine_router_choose_pd(r, ids, 32, NULL, true, 10 * MS, &c);
  assert_false(c.disaggregated);
  assert_int_equal(c.pd_decision, PD_DECISION_TRANSFER_COSTLIER);
  assert_string_equal(c.engine_id, "p");
  engine_router_choose_pd(r, ids, 8, NULL, true, 10 * MS, &c); /* short: where it decodes */
  assert_int_equal(c.pd_decision, PD_DECISION_SHORT);
  assert_string_equal(c.engine_id, "d");
  engine_router_destroy(r);
  cfg.prefill_tokens_per_s = 400.0;
  assert_int_equal(engine_router_create(&cfg, &r), LLB_STATUS_OK);
  announce_role(r, "p", ENGINE_ROUTER_ROLE_PREFILL, 0, 100, 0);
  announce_role(r, "d", ENGINE_ROUTER_ROLE_DECODE, 0, 100, 0);
  engine_router_choose_pd(r, ids, 32, NULL, true, 10 * MS, &c);
  assert_true(c.disaggregated);
  cfg.transfer_bytes_per_s = NAN; /* a rate must be a number */
  struct engine_router *bad = NULL;
  assert_int_equal(engine_router_create(&cfg, &bad), LLB_STATUS_INVALID_ARGUMENT);
  engine_router_destroy(r);
}

static void a_forged_role_is_refused(void **state) {
  (void)state;
  struct engine_router *r = make_router(ENGINE_ROUTER_LEAST_LOADED);
  struct engine_router_stats s = {.engine_id = "x", .model = "m.gguf", .num_total_blocks = 100, .block_size = 4,
                                  .stats_interval_ms = 1000, .role = (enum engine_router_role)7};
  assert_int_equal(engine_router_update(r, &s, 0), LLB_STATUS_INVALID_ARGUMENT);
  engine_router_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(before_any_stats_the_default_engine_gets_everything),
      cmocka_unit_test(least_loaded_spreads_a_burst_between_stats),
      cmocka_unit_test(stats_taken_before_a_burst_leave_its_requests_pending),
      cmocka_unit_test(least_loaded_prefers_the_idle_engine),
      cmocka_unit_test(cache_aware_sends_a_shared_prefix_to_the_engine_that_holds_it),
      cmocka_unit_test(cache_aware_balances_when_the_prefix_owner_is_overloaded),
      cmocka_unit_test(a_silent_engine_gets_no_new_requests),
      cmocka_unit_test(a_draining_engine_gets_nothing_new_until_it_is_back),
      cmocka_unit_test(an_engine_serving_another_model_is_never_chosen),
      cmocka_unit_test(forged_stats_are_refused),
      cmocka_unit_test(ids_name_their_engine),
      cmocka_unit_test(long_prompts_are_disaggregated_short_ones_aggregated),
      cmocka_unit_test(disaggregation_needs_a_live_decode_engine_and_picks_the_freest),
      cmocka_unit_test(the_decode_engine_holding_the_prefix_continues_it),
      cmocka_unit_test(a_saturated_prefill_engine_sends_long_prompts_to_the_decode_engine),
      cmocka_unit_test(a_prompt_mostly_held_by_the_decode_engine_is_prefilled_there),
      cmocka_unit_test(a_transfer_slower_than_the_decode_engines_prefill_is_not_made),
      cmocka_unit_test(a_forged_role_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
