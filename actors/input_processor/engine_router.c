/* Engine routing; see engine_router.h. */
#include "actors/input_processor/engine_router.h"

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hash.h"

#define DEFAULT_BLOCK_SIZE 16
#define ASSUMED_STATS_INTERVAL_MS 5000
#define MISSED_INTERVALS 3
#define LIVENESS_SLACK_MS 1000

/* Requests routed to an engine that its stats may not count yet: a FIFO of their routing times.
 * A stats snapshot counts those routed before it (less the transit to the scheduler), so they
 * leave the FIFO; the rest stay pending whatever the snapshot's age. Dropping them all at each
 * stats (as before) made an engine whose stats came during a burst look idle: 256 requests at
 * once over 32 sim engines gave some engines 2x their share (docs/scaling.md). */
#define PENDING_MAX 128                  /* older ones count as arrived */
#define PENDING_TRANSIT_NS 50000000LL    /* routed this long before a snapshot: maybe not in it yet */

/* Routers (input processors) heard on their heartbeats: each counts only its own pending sends,
 * so with K routers it weighs them K times (the others sent about as many meanwhile). Without
 * it, an engine whose stats said "idle" while a wave of requests arrived got up to 8 from each
 * of 2 routers: 12 of one wave where 8 was its share (docs/scaling.md, slow sim engines). */
#define ROUTERS_MAX 64                        /* more are not counted: a forged flood cannot grow K */
#define ROUTER_TTL_NS 10000000000LL           /* heard within this: live (heartbeats every 2 s) */

#define KV_USAGE_TIE 0.0625f /* kv_cache_usage closer than this: alike (a tie goes by the router's order) */

struct router_peer {
  char instance[BUS_TOKEN_MAX + 1];
  int64_t last_ns;
};

struct engine {
  char id[BUS_TOKEN_MAX + 1];
  char model[128];
  char instance[96];
  int64_t last_ns;
  int32_t running, waiting, pending; /* pending: entries of routed_ns */
  int64_t routed_ns[PENDING_MAX];    /* ring from pending_head, routing times (monotonic) */
  int32_t pending_head;
  int64_t snap_ns;                   /* when its last stats were taken (monotonic) */
  uint64_t order;                    /* its place on the ring of tie orders: the same in every router */
  float kv_usage;
  int32_t total_blocks, block_size, interval_ms;
  uint64_t routed;
  bool draining;
  enum engine_router_role role;
  int32_t free_blocks;
};

/* Which engines a choice is among (disaggregated prefill/decode): every live one, the prefill
 * ones, the decode ones, or those that decode (aggregated requests: not the prefill ones). */
enum role_filter { ROLES_ANY = 0, ROLES_PREFILL, ROLES_DECODE, ROLES_NOT_PREFILL };

static bool role_ok(const struct engine *e, enum role_filter f) {
  switch (f) {
  case ROLES_PREFILL: return e->role == ENGINE_ROUTER_ROLE_PREFILL;
  case ROLES_DECODE: return e->role == ENGINE_ROUTER_ROLE_DECODE;
  case ROLES_NOT_PREFILL: return e->role != ENGINE_ROUTER_ROLE_PREFILL;
  default: return true;
  }
}

struct prefix_entry {
  uint64_t hash;   /* 0 = empty */
  int32_t engine;  /* index into engines */
  int64_t used_ns;
};

struct engine_router {
  pthread_mutex_t mu;
  struct engine_router_config cfg;
  char default_id[BUS_TOKEN_MAX + 1];
  char model[128];
  struct engine *engines;
  int num_engines, cap_engines;
  struct prefix_entry *table; /* private, not base/u64map: a lossy direct-mapped cache, fixed size */
  uint64_t table_mask;
  int32_t block_size; /* of the engines' most recent stats */
  uint64_t rng;
  uint64_t rejected;
  struct router_peer peers[ROUTERS_MAX]; /* routers heard (this one included) */
  int num_peers;
  char self[BUS_TOKEN_MAX + 1]; /* this router's instance ("" = unknown) */
  int32_t routers; /* live routers at the current choice (>= 1): the weight of a pending send */
  int32_t rank;    /* this router's place among them by instance name: its tie order */
  struct llb_hash_key key; /* this router's own: its table is private, so a client cannot aim
                              prompts at one slot of it (the hashes are keyed) */
};

void engine_router_config_init(struct engine_router_config *c) {
  memset(c, 0, sizeof *c);
  c->default_engine_id = "0";
  c->policy = ENGINE_ROUTER_CACHE_AWARE;
  c->balance_abs_threshold = 32;
  c->balance_rel_threshold = 1.5;
  c->cache_threshold = 0.5;
  c->max_prefix_blocks = 64;
  c->table_entries = 16384;
  c->prefix_ttl_ms = 600000;
  c->disagg_min_prompt_tokens = ENGINE_ROUTER_DEFAULT_DISAGG_MIN_PROMPT_TOKENS;
  c->max_prefill_queue_size = ENGINE_ROUTER_DEFAULT_MAX_PREFILL_QUEUE_SIZE;
}

llb_status engine_router_create(const struct engine_router_config *c, struct engine_router **out) {
  *out = NULL;
  if (!c || !c->default_engine_id || !bus_token_valid(c->default_engine_id))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine router: default engine id is not one subject token");
  if (c->balance_abs_threshold < 0 || !(c->balance_rel_threshold >= 1.0) || !(c->cache_threshold >= 0.0) ||
      c->cache_threshold > 1.0 || c->max_prefix_blocks < 1 || c->max_prefix_blocks > 4096 ||
      c->table_entries < 1 || c->table_entries > (1 << 24) || c->prefix_ttl_ms < 0 || c->disagg_min_prompt_tokens < 0 ||
      c->max_prefill_queue_size < 0 || c->kv_bytes_per_token < 0 || !(c->transfer_bytes_per_s >= 0.0) ||
      !isfinite(c->transfer_bytes_per_s) || !(c->prefill_tokens_per_s >= 0.0) || !isfinite(c->prefill_tokens_per_s) ||
      (unsigned)c->policy > ENGINE_ROUTER_RANDOM)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine router: a threshold or size is out of range");
  struct engine_router *r = calloc(1, sizeof *r);
  if (!r) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "engine router");
  r->cfg = *c;
  snprintf(r->default_id, sizeof r->default_id, "%s", c->default_engine_id);
  snprintf(r->model, sizeof r->model, "%s", c->model ? c->model : "");
  if (c->instance && bus_token_valid(c->instance)) snprintf(r->self, sizeof r->self, "%s", c->instance);
  uint64_t entries = 1;
  while (entries < (uint64_t)c->table_entries) entries <<= 1;
  r->table = calloc(entries, sizeof *r->table);
  if (!r->table) {
    free(r);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "engine router: prefix table of %llu entries",
                    (unsigned long long)entries);
  }
  r->table_mask = entries - 1;
  r->block_size = DEFAULT_BLOCK_SIZE;
  r->routers = 1;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->rng = c->seed ? c->seed : (uint64_t)ts.tv_nsec * LLB_SPLITMIX64_GAMMA ^ (uint64_t)ts.tv_sec;
  llb_hash_key_generate(&r->key);
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return LLB_STATUS_OK;
}

void engine_router_destroy(struct engine_router *r) {
  if (!r) return;
  pthread_mutex_destroy(&r->mu);
  free(r->engines);
  free(r->table);
  free(r);
}

/* One splitmix64 step from x: the random tie breaks. */
static uint64_t mix64(uint64_t x) { return llb_mix64(x + LLB_SPLITMIX64_GAMMA); }

static uint64_t next_random(struct engine_router *r) {
  r->rng = mix64(r->rng);
  return r->rng;
}

static int find_engine(const struct engine_router *r, const char *id) {
  for (int i = 0; i < r->num_engines; i++)
    if (strcmp(r->engines[i].id, id) == 0) return i;
  return -1;
}

static bool stats_valid(const struct engine_router_stats *s) {
  if (s->age_ns < 0 || s->age_ns > 3600000000000LL) return false;
  return s->engine_id && bus_token_valid(s->engine_id) && s->num_running_reqs >= 0 && s->num_waiting_reqs >= 0 &&
         isfinite(s->kv_cache_usage) && s->kv_cache_usage >= 0.0f && s->kv_cache_usage <= 1.0f &&
         s->num_free_blocks >= 0 && s->num_total_blocks >= 0 && s->block_size >= 0 && s->block_size <= 65536 &&
         s->stats_interval_ms >= 0 && s->stats_interval_ms <= 3600000 &&
         (unsigned)s->role <= ENGINE_ROUTER_ROLE_DECODE;
}

llb_status engine_router_update(struct engine_router *r, const struct engine_router_stats *s, int64_t now_ns) {
  if (!stats_valid(s)) {
    pthread_mutex_lock(&r->mu);
    r->rejected++;
    pthread_mutex_unlock(&r->mu);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "SchedulerStats out of range (engine id, counts or kv usage)");
  }
  llb_status st = LLB_STATUS_OK;
  pthread_mutex_lock(&r->mu);
  int i = find_engine(r, s->engine_id);
  if (i < 0 && r->num_engines >= ENGINE_ROUTER_MAX_ENGINES) {
    r->rejected++;
    st = LLB_ERRF(LLB_STATUS_QUEUE_FULL, "more than %d engines announced themselves", ENGINE_ROUTER_MAX_ENGINES);
    goto out;
  }
  if (i < 0 && r->num_engines == r->cap_engines) {
    int cap = r->cap_engines ? r->cap_engines * 2 : 8;
    struct engine *e = realloc(r->engines, (size_t)cap * sizeof *e);
    if (!e) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "engine router: %d engines", cap);
      goto out;
    }
    r->engines = e;
    r->cap_engines = cap;
  }
  if (i < 0) {
    i = r->num_engines++;
    memset(&r->engines[i], 0, sizeof r->engines[i]);
    snprintf(r->engines[i].id, sizeof r->engines[i].id, "%s", s->engine_id);
    r->engines[i].order = llb_mix64(llb_fnv1a64_str(s->engine_id));
  }
  struct engine *e = &r->engines[i];
  snprintf(e->model, sizeof e->model, "%s", s->model ? s->model : "");
  snprintf(e->instance, sizeof e->instance, "%s", s->instance ? s->instance : "");
  e->last_ns = now_ns;
  e->running = s->num_running_reqs;
  e->waiting = s->num_waiting_reqs;
  /* what the snapshot counts: the requests routed before it was taken, less the transit */
  e->snap_ns = now_ns - s->age_ns;
  const int64_t counted_until = e->snap_ns - PENDING_TRANSIT_NS;
  while (e->pending > 0 && e->routed_ns[e->pending_head] <= counted_until) {
    e->pending_head = (e->pending_head + 1) % PENDING_MAX;
    e->pending--;
  }
  e->kv_usage = s->kv_cache_usage;
  e->total_blocks = s->num_total_blocks;
  e->block_size = s->block_size;
  e->interval_ms = s->stats_interval_ms ? s->stats_interval_ms : ASSUMED_STATS_INTERVAL_MS;
  e->draining = s->draining;
  e->role = s->role;
  e->free_blocks = s->num_free_blocks;
  if (s->block_size > 0) r->block_size = s->block_size;
out:
  pthread_mutex_unlock(&r->mu);
  return st;
}

static bool engine_live(const struct engine_router *r, const struct engine *e, int64_t now_ns) {
  if (e->draining || (r->model[0] && e->model[0] && strcmp(r->model, e->model) != 0)) return false;
  int64_t limit_ms = (int64_t)MISSED_INTERVALS * e->interval_ms + LIVENESS_SLACK_MS;
  return now_ns - e->last_ns <= limit_ms * 1000000;
}

/* Live routers heard, this one counted whether or not its own heartbeat came back yet; *rank =
 * how many of them have a name before this one's. */
static int32_t live_routers(const struct engine_router *r, int64_t now_ns, int32_t *rank) {
  int32_t n = 1;
  *rank = 0;
  for (int i = 0; i < r->num_peers; i++) {
    if (now_ns - r->peers[i].last_ns > ROUTER_TTL_NS || strcmp(r->peers[i].instance, r->self) == 0) continue;
    n++;
    *rank += strcmp(r->peers[i].instance, r->self) < 0;
  }
  return n;
}

/* Ties between engines the routers see alike (a burst over idle engines) go in an order of this
 * router's own, so that K routers, each spreading its share evenly, do not all put their extra
 * requests on the same engines: one ring of engines (by id hash, the same everywhere), router
 * rank 2j walks it up from j/ceil(K/2) of the way round, rank 2j+1 walks it down from there.
 * With 2 routers one's extras land where the other's come short: a burst of a multiple of the
 * engines lands evenly, any other within 1 (independent orders: within 2). Negative: a before b. */
static int tie_order(const struct engine_router *r, const struct engine *a, const struct engine *b) {
  const uint64_t start = (uint64_t)(r->rank / 2) * (UINT64_MAX / (uint64_t)((r->routers + 1) / 2));
  const uint64_t pa = a->order - start, pb = b->order - start;
  const int up = pa < pb ? -1 : pa > pb;
  return r->rank % 2 ? -up : up;
}

/* The engine's load as the routers together made it: its stats' count and the pending sends of
 * this router. Those routed after the snapshot weigh r->routers (set at each choice): the other
 * routers sent about as many meanwhile; those in transit at the snapshot (routed less than
 * PENDING_TRANSIT_NS before it) weigh 1: the snapshot likely counted them and the others' too. */
static int32_t engine_load(const struct engine_router *r, const struct engine *e) {
  int32_t after = 0;
  for (int32_t k = e->pending - 1; k >= 0 && e->routed_ns[(e->pending_head + k) % PENDING_MAX] > e->snap_ns; k--)
    after++;
  return e->running + e->waiting + e->pending + after * (r->routers - 1);
}

/* The hash of each full block of the prompt chained with all before it and the salt, as the
 * scheduler chains them (base/hash.h, under this router's key): hashes[0..return). */
static int32_t block_hashes(const struct engine_router *r, const int32_t *ids, int64_t n, const char *salt,
                            uint64_t *hashes) {
  const char *s = salt ? salt : "";
  const struct llb_block_extra_keys extra = {.has_cache_salt = s[0] != '\0',
                                             .cache_salt_hash = llb_hash_bytes(&r->key, s, strlen(s))};
  int32_t bs = r->block_size > 0 ? r->block_size : DEFAULT_BLOCK_SIZE;
  int64_t blocks = n / bs;
  if (blocks > r->cfg.max_prefix_blocks) blocks = r->cfg.max_prefix_blocks;
  uint64_t h = LLB_BLOCK_HASH_ROOT;
  for (int64_t b = 0; b < blocks; b++) {
    h = llb_block_hash(&r->key, h, ids + b * bs, bs, b == 0 ? &extra : NULL);
    hashes[b] = h ? h : 1; /* 0 marks an empty slot */
  }
  return (int32_t)blocks;
}

/* The prefix table has two namespaces: the engine that computed a prompt (ns 0) and, for a
 * disaggregated one, the decode engine its KV went to (DECODE_NS), which holds the prefix too. */
#define DECODE_NS 0x9e3779b97f4a7c15ull

static uint64_t ns_hash(uint64_t h, uint64_t ns) { return (h ^ ns) ? h ^ ns : 1; }

/* Longest believed prefix per engine: matched[i] = blocks engine i holds. */
static void prefix_matches(const struct engine_router *r, const uint64_t *hashes, int32_t blocks,
                           int64_t now_ns, uint64_t ns, int32_t *matched) {
  int64_t ttl_ns = r->cfg.prefix_ttl_ms * 1000000;
  for (int32_t b = 0; b < blocks; b++) {
    const uint64_t h = ns_hash(hashes[b], ns);
    const struct prefix_entry *p = &r->table[h & r->table_mask];
    if (p->hash != h || now_ns - p->used_ns > ttl_ns) continue;
    if (p->engine >= 0 && p->engine < r->num_engines) matched[p->engine] = b + 1;
  }
}

static void remember_prefix(struct engine_router *r, const uint64_t *hashes, int32_t blocks, int engine,
                            int64_t now_ns, uint64_t ns) {
  for (int32_t b = 0; b < blocks; b++) {
    const uint64_t h = ns_hash(hashes[b], ns);
    r->table[h & r->table_mask] = (struct prefix_entry){h, engine, now_ns};
  }
}

/* Least loaded live engine (ties: fewer pending, lower kv usage, this router's order, then
 * random); -1 if none is live. With `matched` set, among the engines whose matched blocks equal
 * best_match. */
static int least_loaded(struct engine_router *r, int64_t now_ns, const int32_t *matched, int32_t best_match,
                        enum role_filter f) {
  int best = -1, ties = 0;
  for (int i = 0; i < r->num_engines; i++) {
    const struct engine *e = &r->engines[i];
    if (!engine_live(r, e, now_ns) || !role_ok(e, f) || (matched && matched[i] != best_match)) continue;
    int cmp = best < 0 ? -1 : engine_load(r, e) - engine_load(r, &r->engines[best]);
    if (cmp == 0 && f == ROLES_DECODE) /* a decode engine holds the request's KV: more free blocks first */
      cmp = e->free_blocks > r->engines[best].free_blocks ? -1 : e->free_blocks < r->engines[best].free_blocks;
    /* fewer sends its stats do not count yet: those stats (their kv usage too) are older news */
    if (cmp == 0) cmp = e->pending - r->engines[best].pending;
    if (cmp == 0 && fabsf(e->kv_usage - r->engines[best].kv_usage) > KV_USAGE_TIE) /* more free KV */
      cmp = e->kv_usage < r->engines[best].kv_usage ? -1 : 1;
    if (cmp == 0) cmp = tie_order(r, e, &r->engines[best]);
    if (cmp < 0) {
      best = i;
      ties = 1;
    } else if (cmp == 0 && next_random(r) % (uint64_t)++ties == 0) {
      best = i; /* reservoir sampling: each tied engine equally likely */
    }
  }
  return best;
}

static int random_live(struct engine_router *r, int64_t now_ns, enum role_filter f) {
  int pick = -1, seen = 0;
  for (int i = 0; i < r->num_engines; i++)
    if (engine_live(r, &r->engines[i], now_ns) && role_ok(&r->engines[i], f) && next_random(r) % (uint64_t)++seen == 0)
      pick = i;
  return pick;
}

/* SGLang's cache_aware decision over live engines; see the header. */
static int cache_aware(struct engine_router *r, int64_t now_ns, const int32_t *matched, int32_t blocks,
                       enum role_filter f, bool *by_prefix) {
  int32_t min_load = INT32_MAX, max_load = -1, best_match = 0;
  for (int i = 0; i < r->num_engines; i++) {
    if (!engine_live(r, &r->engines[i], now_ns) || !role_ok(&r->engines[i], f)) continue;
    int32_t l = engine_load(r, &r->engines[i]);
    if (l < min_load) min_load = l;
    if (l > max_load) max_load = l;
    if (matched[i] > best_match) best_match = matched[i];
  }
  if (max_load < 0) return -1;
  bool imbalanced = max_load - min_load > r->cfg.balance_abs_threshold &&
                    (double)max_load > (double)min_load * r->cfg.balance_rel_threshold;
  if (!imbalanced && blocks > 0 && best_match > 0 && (double)best_match / blocks > r->cfg.cache_threshold) {
    *by_prefix = true;
    return least_loaded(r, now_ns, matched, best_match, f);
  }
  return least_loaded(r, now_ns, NULL, 0, f);
}

/* Whether some live engine passes f. */
static bool any_live(const struct engine_router *r, int64_t now_ns, enum role_filter f) {
  for (int i = 0; i < r->num_engines; i++)
    if (engine_live(r, &r->engines[i], now_ns) && role_ok(&r->engines[i], f)) return true;
  return false;
}

/* Counts one request routed to engine i now (pending until its stats count it). */
static void count_routed(struct engine *e, int64_t now_ns) {
  if (e->pending == PENDING_MAX) { /* the oldest has surely arrived */
    e->pending_head = (e->pending_head + 1) % PENDING_MAX;
    e->pending--;
  }
  e->routed_ns[(e->pending_head + e->pending++) % PENDING_MAX] = now_ns;
  e->routed++;
}

void engine_router_choose(struct engine_router *r, const int32_t *ids, int64_t n, const char *salt,
                          int64_t now_ns, struct engine_router_choice *choice) {
  engine_router_choose_pd(r, ids, n, salt, false, now_ns, choice);
}

/* Requests at the least loaded live prefill engine (its load, as least_loaded counts it). */
static int32_t prefill_queue(const struct engine_router *r, int64_t now_ns) {
  int32_t best = INT32_MAX;
  for (int i = 0; i < r->num_engines; i++) {
    const struct engine *e = &r->engines[i];
    if (engine_live(r, e, now_ns) && role_ok(e, ROLES_PREFILL) && engine_load(r, e) < best) best = engine_load(r, e);
  }
  return best;
}

/* The decode engine that would continue a disaggregated request (prefix affinity unless loads
 * are imbalanced: it then fetches only the missing blocks, issue 36 item 5), or -1. matched has
 * 2 x num_engines entries: [0, n) the engines that computed the prompt's blocks, [n, 2n) those
 * that received them by hand-off; both are filled here for the cache-aware policy. */
static int choose_decode(struct engine_router *r, const uint64_t *hashes, int32_t blocks, int64_t now_ns,
                         int32_t *matched, bool *by_prefix) {
  if (r->cfg.policy != ENGINE_ROUTER_CACHE_AWARE || !matched) return least_loaded(r, now_ns, NULL, 0, ROLES_DECODE);
  prefix_matches(r, hashes, blocks, now_ns, DECODE_NS, matched + r->num_engines);
  return cache_aware(r, now_ns, matched + r->num_engines, blocks, ROLES_DECODE, by_prefix);
}

/* Dynamo's conditional disaggregation (pd_decision.h) for a request whose decode engine would be
 * `decode`: the prefix that engine holds (computed there or received) is not moved or computed. */
static enum pd_decision decide(const struct engine_router *r, int decode, const int32_t *matched, int64_t n,
                               int64_t now_ns) {
  int32_t held = 0;
  if (matched) {
    held = matched[r->num_engines + decode];
    if (matched[decode] > held) held = matched[decode];
  }
  const struct pd_decision_config c = {.min_uncached_tokens = r->cfg.disagg_min_prompt_tokens,
                                       .max_prefill_queue_size = r->cfg.max_prefill_queue_size,
                                       .kv_bytes_per_token = r->cfg.kv_bytes_per_token,
                                       .transfer_bytes_per_s = r->cfg.transfer_bytes_per_s,
                                       .prefill_tokens_per_s = r->cfg.prefill_tokens_per_s};
  const struct pd_decision_input in = {.prompt_tokens = n,
                                       .cached_tokens = (int64_t)held * (r->block_size > 0 ? r->block_size : DEFAULT_BLOCK_SIZE),
                                       .prefill_queue = prefill_queue(r, now_ns)};
  return pd_decide(&c, &in, NULL);
}

void engine_router_choose_pd(struct engine_router *r, const int32_t *ids, int64_t n, const char *salt,
                             bool may_disaggregate, int64_t now_ns, struct engine_router_choice *choice) {
  memset(choice, 0, sizeof *choice);
  pthread_mutex_lock(&r->mu);
  r->routers = live_routers(r, now_ns, &r->rank);
  /* disaggregated when a prefill and a decode engine are alive and the rule says so; otherwise
   * aggregated, on an engine that decodes when there is one */
  enum role_filter f = ROLES_ANY;
  uint64_t hashes_small[64];
  uint64_t *hashes = r->cfg.max_prefix_blocks <= 64 ? hashes_small : malloc((size_t)r->cfg.max_prefix_blocks * sizeof *hashes);
  int32_t *matched = r->num_engines ? calloc((size_t)r->num_engines * 2, sizeof *matched) : NULL;
  int32_t blocks = hashes && ids && n > 0 ? block_hashes(r, ids, n, salt, hashes) : 0;
  if (matched && r->cfg.policy == ENGINE_ROUTER_CACHE_AWARE) prefix_matches(r, hashes, blocks, now_ns, 0, matched);
  int decode = -1;
  bool decode_by_prefix = false;
  if (may_disaggregate && any_live(r, now_ns, ROLES_PREFILL) && any_live(r, now_ns, ROLES_DECODE)) {
    decode = choose_decode(r, hashes, blocks, now_ns, matched, &decode_by_prefix);
    if (decode >= 0) {
      choice->pd_considered = true;
      choice->pd_decision = decide(r, decode, matched, n, now_ns);
      if (choice->pd_decision == PD_DECISION_DISAGGREGATE) f = ROLES_PREFILL;
    }
  }
  /* aggregated: short or the prefill engines saturated, on the decode engine that would have
   * continued it (it holds the prefix the rule took off); the transfer the costlier, on any
   * engine (the rates say so for every prompt: no engine gains from its role, a prefill engine
   * serves whole requests as well as any); else on an engine that decodes when one is live */
  const bool any_engine = choice->pd_considered && choice->pd_decision == PD_DECISION_TRANSFER_COSTLIER;
  const bool on_decode = choice->pd_considered && f == ROLES_ANY && !any_engine;
  if (f == ROLES_ANY && !any_engine && any_live(r, now_ns, ROLES_NOT_PREFILL)) f = ROLES_NOT_PREFILL;
  int pick = -1;
  if (on_decode) {
    pick = decode;
    choice->by_prefix = decode_by_prefix;
  } else if (r->cfg.policy == ENGINE_ROUTER_RANDOM) {
    pick = random_live(r, now_ns, f);
  } else if (r->cfg.policy == ENGINE_ROUTER_CACHE_AWARE && matched) {
    pick = cache_aware(r, now_ns, matched, blocks, f, &choice->by_prefix);
  } else {
    pick = least_loaded(r, now_ns, NULL, 0, f);
  }
  choice->prompt_blocks = blocks;
  if (pick < 0) {
    choice->fallback = true;
    snprintf(choice->engine_id, sizeof choice->engine_id, "%s", r->default_id);
  } else {
    struct engine *e = &r->engines[pick];
    snprintf(choice->engine_id, sizeof choice->engine_id, "%s", e->id);
    choice->matched_blocks = matched ? matched[pick] : 0;
    count_routed(e, now_ns);
    remember_prefix(r, hashes, blocks, pick, now_ns, 0);
    if (f == ROLES_PREFILL) { /* the decode engine gets it after its first token */
      choice->disaggregated = true;
      choice->decode_matched_blocks = matched ? matched[r->num_engines + decode] : 0;
      snprintf(choice->decode_engine_id, sizeof choice->decode_engine_id, "%s", r->engines[decode].id);
      count_routed(&r->engines[decode], now_ns);
      remember_prefix(r, hashes, blocks, decode, now_ns, DECODE_NS);
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (hashes != hashes_small) free(hashes);
  free(matched);
}

int engine_router_decode_engines(struct engine_router *r, char (*ids)[BUS_TOKEN_MAX + 1], int max) {
  pthread_mutex_lock(&r->mu);
  int n = 0;
  for (int i = 0; i < r->num_engines; i++)
    if (r->engines[i].role == ENGINE_ROUTER_ROLE_DECODE) {
      if (n < max) snprintf(ids[n], BUS_TOKEN_MAX + 1, "%s", r->engines[i].id);
      n++;
    }
  pthread_mutex_unlock(&r->mu);
  return n;
}

bool engine_router_known(struct engine_router *r, const char *engine_id) {
  pthread_mutex_lock(&r->mu);
  bool known = strcmp(engine_id, r->default_id) == 0 || find_engine(r, engine_id) >= 0;
  pthread_mutex_unlock(&r->mu);
  return known;
}

int engine_router_list(struct engine_router *r, int64_t now_ns, struct engine_router_engine *rows, int max) {
  pthread_mutex_lock(&r->mu);
  int n = r->num_engines;
  for (int i = 0; i < n && i < max; i++) {
    const struct engine *e = &r->engines[i];
    struct engine_router_engine *w = &rows[i];
    memset(w, 0, sizeof *w);
    snprintf(w->engine_id, sizeof w->engine_id, "%s", e->id);
    snprintf(w->model, sizeof w->model, "%s", e->model);
    snprintf(w->instance, sizeof w->instance, "%s", e->instance);
    w->live = engine_live(r, e, now_ns);
    w->age_ms = (now_ns - e->last_ns) / 1000000;
    w->running = e->running;
    w->waiting = e->waiting;
    w->pending = e->pending;
    w->kv_cache_usage = e->kv_usage;
    w->num_total_blocks = e->total_blocks;
    w->block_size = e->block_size;
    w->routed = e->routed;
    w->role = e->role;
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}

void engine_router_router_seen(struct engine_router *r, const char *instance, int64_t now_ns) {
  if (!instance || !bus_token_valid(instance)) return;
  pthread_mutex_lock(&r->mu);
  int slot = -1;
  for (int i = 0; i < r->num_peers && slot < 0; i++)
    if (strcmp(r->peers[i].instance, instance) == 0) slot = i;
  for (int i = 0; i < r->num_peers && slot < 0; i++) /* a router gone: its slot is free */
    if (now_ns - r->peers[i].last_ns > ROUTER_TTL_NS) slot = i;
  if (slot < 0 && r->num_peers < ROUTERS_MAX) slot = r->num_peers++;
  if (slot >= 0) {
    snprintf(r->peers[slot].instance, sizeof r->peers[slot].instance, "%s", instance);
    r->peers[slot].last_ns = now_ns;
  }
  pthread_mutex_unlock(&r->mu);
}

int32_t engine_router_routers(struct engine_router *r, int64_t now_ns) {
  pthread_mutex_lock(&r->mu);
  int32_t rank;
  const int32_t n = live_routers(r, now_ns, &rank);
  pthread_mutex_unlock(&r->mu);
  return n;
}

uint64_t engine_router_rejected_stats(struct engine_router *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t n = r->rejected;
  pthread_mutex_unlock(&r->mu);
  return n;
}
