/* Load balance of the engine router (actors/input_processor/engine_router.h) in what a closed-loop
 * client does to many engines: a whole wave of requests arrives at once, faster than any stats
 * round trip, through several input processors, each seeing only its own sends. The end of such
 * a run is set by the engine that got the most requests (docs/scaling.md, slow sim engines), so
 * what users depend on is that no engine gets more than its share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "actors/input_processor/engine_router.h"

#define MS 1000000ll
#define ENGINES 16

static struct engine_router *make_router(const char *instance, uint64_t seed) {
  struct engine_router_config c;
  engine_router_config_init(&c);
  c.model = "m.gguf";
  c.policy = ENGINE_ROUTER_LEAST_LOADED;
  c.seed = seed;
  c.instance = instance;
  struct engine_router *r = NULL;
  assert_int_equal(engine_router_create(&c, &r), LLB_STATUS_OK);
  return r;
}

static void engine_name(int i, char *buf, size_t cap) { snprintf(buf, cap, "e%d", i); }

static int engine_index(const char *id) {
  int i = -1;
  assert_int_equal(sscanf(id, "e%d", &i), 1);
  assert_true(i >= 0 && i < ENGINES);
  return i;
}

/* Engine i's stats, taken age_ms before now, with `running` requests. */
static void announce(struct engine_router *r, int i, int running, int64_t age_ms, int64_t now) {
  char id[16];
  engine_name(i, id, sizeof id);
  struct engine_router_stats s = {.engine_id = id, .model = "m.gguf", .num_running_reqs = running,
                                  .kv_cache_usage = 0.01f * (float)running, .num_total_blocks = 1000,
                                  .block_size = 16, .stats_interval_ms = 1000, .age_ns = age_ms * MS};
  assert_int_equal(engine_router_update(r, &s, now), LLB_STATUS_OK);
}

static int route(struct engine_router *r, int64_t now) {
  int32_t ids[64];
  for (int i = 0; i < 64; i++) ids[i] = (int32_t)(now / MS) * 64 + i; /* a prompt of its own */
  struct engine_router_choice c;
  engine_router_choose(r, ids, 64, NULL, now, &c);
  assert_false(c.fallback);
  return engine_index(c.engine_id);
}

static void assert_even(const int *got, int share, int slack) {
  int max = 0;
  for (int i = 0; i < ENGINES; i++) {
    if (got[i] < share - slack || got[i] > share + slack) fail_msg("engine %d got %d, share %d", i, got[i], share);
    if (got[i] > max) max = got[i];
  }
  assert_true(max * 10 <= share * 11 + slack * 10); /* max / mean <= 1.1 (or within the slack) */
}

/* 128 requests at once over 16 idle engines whose stats are half a second old: 8 each. */
static void a_burst_over_idle_engines_with_stale_stats_lands_evenly(void **state) {
  (void)state;
  struct engine_router *r = make_router("ip-a", 7);
  for (int i = 0; i < ENGINES; i++) announce(r, i, 0, 500, 1000 * MS);
  int got[ENGINES] = {0};
  for (int k = 0; k < 128; k++) got[route(r, 1000 * MS + k * 100000)]++; /* 0.1 ms apart */
  assert_even(got, 8, 0);
  engine_router_destroy(r);
}

/* Two input processors share the burst unevenly (a NATS queue group splits at random); each sees
 * only its own sends, spreads its share evenly (within 1) and walks the engines in the other
 * direction from the other (it knows the other from its heartbeats): one's extra requests land
 * where the other's come short, so each engine gets its 8 (at random tie breaks: 7 to 9). */
static void two_routers_seeing_only_their_own_sends_land_evenly(void **state) {
  (void)state;
  const int splits[] = {64, 71, 57, 80, 49};
  for (size_t t = 0; t < sizeof splits / sizeof splits[0]; t++) {
    struct engine_router *a = make_router("ip-a", 11 + t), *b = make_router("ip-b", 23 + t);
    for (int k = 0; k < 2; k++) { /* both hear both heartbeats */
      engine_router_router_seen(k ? b : a, "ip-a", 900 * MS);
      engine_router_router_seen(k ? b : a, "ip-b", 900 * MS);
    }
    assert_int_equal(engine_router_routers(a, 1000 * MS), 2);
    for (int i = 0; i < ENGINES; i++) {
      announce(a, i, 0, 300, 1000 * MS);
      announce(b, i, 0, 300, 1000 * MS);
    }
    int got[ENGINES] = {0}, to_a = splits[t], to_b = 128 - splits[t];
    uint64_t x = 0x9e3779b97f4a7c15ull * (t + 1);
    for (int k = 0; k < 128; k++) { /* interleaved at random, as the queue group delivers them */
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const bool via_a = to_b == 0 || (to_a > 0 && x % 128 < (uint64_t)splits[t]);
      got[route(via_a ? a : b, 1000 * MS + k * 100000)]++;
      if (via_a) to_a--;
      else to_b--;
    }
    assert_even(got, 8, 0);
    engine_router_destroy(a);
    engine_router_destroy(b);
  }
}

/* Every engine runs 8; one finishes its 8 and says so; 8 requests replace them, half through
 * each router, and 8 more replace requests of an engine whose stats have not come yet. The
 * finished engine gets its 8 back, not 8 from each router (16: what an engine whose stats said
 * "idle" while a wave arrived got before the routers weighed each other's sends). */
static void an_engine_that_finished_gets_its_share_not_each_routers(void **state) {
  (void)state;
  struct engine_router *a = make_router("ip-a", 5), *b = make_router("ip-b", 9);
  for (int k = 0; k < 2; k++) {
    engine_router_router_seen(k ? b : a, "ip-a", 900 * MS);
    engine_router_router_seen(k ? b : a, "ip-b", 900 * MS);
  }
  for (int i = 0; i < ENGINES; i++) {
    announce(a, i, 8, 100, 1000 * MS);
    announce(b, i, 8, 100, 1000 * MS);
  }
  announce(a, 3, 0, 1, 2000 * MS);
  announce(b, 3, 0, 1, 2000 * MS);
  int got[ENGINES] = {0};
  for (int k = 0; k < 16; k++) got[route(k % 2 ? b : a, 2005 * MS + k * MS)]++;
  assert_int_equal(got[3], 8);
  for (int i = 0; i < ENGINES; i++)
    if (i != 3) assert_true(got[i] <= 1);
  engine_router_destroy(a);
  engine_router_destroy(b);
}

/* Routers are counted from heartbeats for 10 s; a forged instance is ignored; this router counts
 * itself before its own heartbeat comes back. */
static void routers_are_counted_from_recent_heartbeats(void **state) {
  (void)state;
  struct engine_router *r = make_router("ip-a", 3);
  assert_int_equal(engine_router_routers(r, 0), 1);
  engine_router_router_seen(r, "ip-b", 1000 * MS);
  assert_int_equal(engine_router_routers(r, 1000 * MS), 2);
  engine_router_router_seen(r, "ip-a", 1000 * MS); /* its own: counted once */
  engine_router_router_seen(r, "bad.token", 1000 * MS);
  engine_router_router_seen(r, "", 1000 * MS);
  engine_router_router_seen(r, NULL, 1000 * MS);
  assert_int_equal(engine_router_routers(r, 1000 * MS), 2);
  assert_int_equal(engine_router_routers(r, 12000 * MS), 1); /* ip-b silent for 11 s */
  for (int i = 0; i < 200; i++) { /* a flood of names: at most 64 counted */
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    engine_router_router_seen(r, name, 13000 * MS);
  }
  const int32_t n = engine_router_routers(r, 13000 * MS);
  assert_true(n >= 2 && n <= 65);
  engine_router_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_burst_over_idle_engines_with_stale_stats_lands_evenly),
      cmocka_unit_test(two_routers_seeing_only_their_own_sends_land_evenly),
      cmocka_unit_test(an_engine_that_finished_gets_its_share_not_each_routers),
      cmocka_unit_test(routers_are_counted_from_recent_heartbeats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
