/* Engine routing for the input processor (docs/design.md §9): which engine gets a new request.
 *
 * Membership comes from the engines' own SchedulerStats on <prefix>.engine.<eid>.stats
 * (engine_router_update): an engine is live while its stats keep coming (silent for more
 * than 3 of its announced stats intervals + 1 s: gone, no new requests go there); a
 * scheduler that stops says so at once (`draining`). Engines
 * serving another model are never chosen. Until some engine has announced itself, or when
 * none is live, requests go to the default engine (the input processor's --engine-id), so a
 * single-engine stack needs no stats at all.
 *
 * Policies:
 *   ENGINE_ROUTER_RANDOM        uniform over live engines (the baseline of the benchmarks);
 *   ENGINE_ROUTER_LEAST_LOADED  lowest load, where load = running + waiting + K x pending (the
 *                               requests this router sent that the engine's last stats cannot
 *                               count yet: routed after the snapshot was taken, or less than
 *                               50 ms before it, in transit; so a burst does not all go to the
 *                               engine that was idle a second ago — vLLM's DP load balancer
 *                               counts the same way). K is the number of routers (input
 *                               processors) heard on their heartbeats (engine_router_router_seen):
 *                               each sees only its own sends, and the others sent about as many
 *                               meanwhile (an input processor that gets little of the traffic,
 *                               e.g. one of another tenant, counts too: the busy ones then
 *                               overrate their pending sends). Ties go to fewer pending, then the lower
 *                               kv_cache_usage (by more than 1/16), then in an order of each
 *                               router's own (its rank among the routers' instance names: two
 *                               routers walk the engines in opposite directions, so the extra
 *                               requests of one land where the other's come short);
 *   ENGINE_ROUTER_CACHE_AWARE   SGLang router's cache_aware policy: when the loads are
 *                               imbalanced (max - min > balance_abs_threshold and
 *                               max > min x balance_rel_threshold) least loaded; otherwise the
 *                               engine holding the longest prefix of the prompt, if that
 *                               prefix is more than cache_threshold of the prompt's blocks;
 *                               otherwise least loaded. The default.
 * Prefix ownership is approximate and local to this router (as NVIDIA Dynamo's and SGLang's
 * routers keep it): each full block of a routed prompt is hashed with all blocks before it
 * and the cache salt (tenants never share), and the hash is remembered for the engine that
 * got the prompt, in a fixed-size table (older entries are overwritten; entries older than
 * prefix_ttl_ms are ignored, the engine may have evicted them).
 *
 * Disaggregated prefill/decode (docs/scaling.md; NVIDIA Dynamo's conditional disaggregation):
 * engines announce a role (SchedulerStats.role). engine_router_choose_pd, for a request that may
 * be disaggregated (the caller says: n = 1, text only, not pooling) while a prefill engine and a
 * decode engine are live, first picks the decode engine that would continue it: by the same
 * cache_aware rule among the decode engines, over a second namespace of the prefix table (the
 * decode engines that received a prompt's KV hold its prefix: a decode engine that holds it
 * fetches only the rest), least loaded ties to the one with more free KV blocks. Then
 * pd_decision.h decides: the prompt less the prefix that engine holds (received or computed
 * there) against disagg_min_prompt_tokens, the least loaded prefill engine's requests against
 * max_prefill_queue_size, and the KV transfer's time against recomputing on the decode engine.
 * Disaggregated: the prefill engine is chosen by the policy among the prefill engines (load and
 * prefix affinity, as above). Otherwise the request is aggregated: a short one, or one that
 * found the prefill engines saturated, on that decode engine (it holds the prefix the rule took
 * off); one whose transfer was found costlier than recomputing (which the rates decide for every
 * prompt alike) on any live engine by the policy: a prefill engine serves whole requests as well
 * as any. Without a live prefill and decode engine (or for a request that may not be split), on
 * an engine that decodes (role both or decode) when one is live, else on any live engine.
 *
 * Thread safety: every function may be called from any thread (one mutex).
 */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_ENGINE_ROUTER_H
#define LLB_ACTORS_INPUT_PROCESSOR_ENGINE_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/input_processor/pd_decision.h"
#include "base/status.h"
#include "bus/subject.h"

enum engine_router_policy {
  ENGINE_ROUTER_CACHE_AWARE = 0,
  ENGINE_ROUTER_LEAST_LOADED,
  ENGINE_ROUTER_RANDOM,
};

#define ENGINE_ROUTER_MAX_ENGINES 1024 /* stats from more engines are ignored (and counted) */
/* Prompts shorter than this are not disaggregated: their prefill costs less than a handful of
 * decode steps of a batch (so it hardly delays the engine's decodes) while the hand-off adds a
 * durable publish and, with KV transfer, the fetch of their blocks. docs/scaling.md. */
#define ENGINE_ROUTER_DEFAULT_DISAGG_MIN_PROMPT_TOKENS 256
/* A prefill engine this many requests deep (running, waiting, or routed there since its last
 * stats) is saturated: a new prompt would queue behind them, so its decode engine prefills it. */
#define ENGINE_ROUTER_DEFAULT_MAX_PREFILL_QUEUE_SIZE 16

/* What an engine serves (the values of schemas/control.h llb_engine_role). */
enum engine_router_role {
  ENGINE_ROUTER_ROLE_BOTH = 0,
  ENGINE_ROUTER_ROLE_PREFILL = 1,
  ENGINE_ROUTER_ROLE_DECODE = 2,
};

struct engine_router_config {
  const char *default_engine_id; /* required; copied */
  const char *model;             /* file name engines must announce; NULL/"" = any model */
  enum engine_router_policy policy;
  int32_t balance_abs_threshold; /* default 32 (SGLang's) */
  double balance_rel_threshold;  /* default 1.5 */
  double cache_threshold;        /* default 0.5: fraction of the prompt's blocks matched */
  int32_t max_prefix_blocks;     /* blocks of a prompt hashed at most (default 64) */
  int32_t table_entries;         /* prefix table size, rounded up to a power of two (default 16384) */
  int64_t prefix_ttl_ms;         /* default 600000 */
  uint64_t seed;                 /* random tie breaks (0: from the clock) */
  const char *instance;          /* this router's instance (its heartbeat subject's last token; copied):
                                    its tie order among the routers; NULL = rank 0 */
  int32_t disagg_min_prompt_tokens; /* shortest uncached prompt disaggregated (default
                                     ENGINE_ROUTER_DEFAULT_DISAGG_MIN_PROMPT_TOKENS; 0 = every one) */
  int32_t max_prefill_queue_size;   /* prefill engines this loaded are saturated (default
                                     ENGINE_ROUTER_DEFAULT_MAX_PREFILL_QUEUE_SIZE; 0 = no limit) */
  int64_t kv_bytes_per_token;       /* the KV a token moves (0: transfer not weighed) */
  double transfer_bytes_per_s;      /* the bus's rate for KV (0: transfer not weighed) */
  double prefill_tokens_per_s;      /* a decode engine's prefill rate (0: transfer not weighed) */
};

/* One engine's announcement, already verified by the caller (the decoded SchedulerStats with
 * engine_id equal to the subject's <eid>). Strings are borrowed for the call. */
struct engine_router_stats {
  const char *engine_id;
  const char *model;
  const char *instance;
  int32_t num_running_reqs, num_waiting_reqs;
  float kv_cache_usage;      /* [0, 1] */
  int32_t num_free_blocks, num_total_blocks;
  int32_t block_size;        /* 0 = unknown */
  int32_t max_num_seqs, max_model_len;
  int32_t stats_interval_ms; /* 0 = unknown: 5000 assumed */
  uint64_t prefix_cache_queries, prefix_cache_hits, generation_tokens_total;
  bool draining;             /* its scheduler is stopping: not live until stats say otherwise */
  int64_t age_ns;            /* how long ago the snapshot was taken (the caller's wall clock less
                                SchedulerStats.timestamp, clamped to [0, the stats interval]);
                                0 = just now. Requests routed before then are in its counts */
  enum engine_router_role role; /* what it serves */
};

/* What engine_router_choose decided, for logs and tests. */
struct engine_router_choice {
  char engine_id[BUS_TOKEN_MAX + 1];
  int32_t matched_blocks; /* prefix blocks the chosen engine is believed to hold */
  int32_t prompt_blocks;  /* full blocks of the prompt considered */
  bool by_prefix;         /* chosen for its prefix (cache_aware), not its load */
  bool fallback;          /* no live engine known: the default engine */
  bool disaggregated;     /* engine_id is a prefill engine; decode_engine_id continues it */
  char decode_engine_id[BUS_TOKEN_MAX + 1]; /* "" unless disaggregated */
  int32_t decode_matched_blocks; /* prefix blocks the decode engine is believed to hold */
  bool pd_considered;     /* a prefill and a decode engine were live for a request that may be
                             split: pd_decision says what the rule decided */
  enum pd_decision pd_decision;
};

/* A row of engine_router_list. */
struct engine_router_engine {
  char engine_id[BUS_TOKEN_MAX + 1];
  char model[128];
  char instance[96];
  bool live;
  int64_t age_ms;         /* since its last stats */
  int32_t running, waiting, pending;
  float kv_cache_usage;
  int32_t num_total_blocks, block_size;
  uint64_t routed;        /* requests this router sent there */
  enum engine_router_role role;
};

struct engine_router;

/* Fills the defaults above (default_engine_id "0"). */
void engine_router_config_init(struct engine_router_config *c);
/* Errors: INVALID_ARGUMENT (default engine id not one subject token, thresholds out of range),
 * OUT_OF_MEMORY. Free with engine_router_destroy. */
llb_status engine_router_create(const struct engine_router_config *c, struct engine_router **out);
void engine_router_destroy(struct engine_router *r);

/* Records an engine's stats at now_ns (monotonic). Its pending requests routed before the
 * snapshot (now_ns - s->age_ns, less 50 ms of transit) are counted by it and leave. Returns
 * INVALID_ARGUMENT for values out of range (negative counts, usage not in [0, 1], bad id),
 * QUEUE_FULL past ENGINE_ROUTER_MAX_ENGINES; the table is unchanged then. */
llb_status engine_router_update(struct engine_router *r, const struct engine_router_stats *s, int64_t now_ns);

/* Chooses the engine for a prompt (token ids, n of them; salt = the request's cache salt, may
 * be NULL) and remembers the prompt's blocks for it; counts one pending request there.
 * Never fails: with no live engine it answers the default engine (choice->fallback). */
void engine_router_choose(struct engine_router *r, const int32_t *ids, int64_t n, const char *salt,
                          int64_t now_ns, struct engine_router_choice *choice);

/* As engine_router_choose, deciding between aggregated and disaggregated serving (see the head
 * comment); may_disaggregate false = engine_router_choose. A disaggregated choice counts a
 * pending request on both engines. */
void engine_router_choose_pd(struct engine_router *r, const int32_t *ids, int64_t n, const char *salt,
                             bool may_disaggregate, int64_t now_ns, struct engine_router_choice *choice);

/* The decode engines this router knows (live or not): up to max ids into ids; returns how many
 * there are. Aborts of a disaggregated request go to them too (it may have been handed over). */
int engine_router_decode_engines(struct engine_router *r, char (*ids)[BUS_TOKEN_MAX + 1], int max);

/* Whether `engine_id` is an engine this router knows (live or not) or the default engine. */
bool engine_router_known(struct engine_router *r, const char *engine_id);

/* Copies up to max engines (live and not, in first-seen order) into rows; returns how many
 * there are in all. */
int engine_router_list(struct engine_router *r, int64_t now_ns, struct engine_router_engine *rows, int max);

/* Records a router (an input processor: `instance` is the last token of its heartbeat's subject,
 * <prefix>.health.input_processor.<instance>) heard at now_ns (monotonic). Those heard within
 * the last 10 s, and this one (config.instance) weigh the pending sends and give this router its
 * tie order (the head comment); at most 64 are counted. An instance that is not one subject
 * token is ignored. */
void engine_router_router_seen(struct engine_router *r, const char *instance, int64_t now_ns);

/* How many routers weigh the pending sends at now_ns (>= 1). */
int32_t engine_router_routers(struct engine_router *r, int64_t now_ns);

/* Counters: stats rejected by engine_router_update. */
uint64_t engine_router_rejected_stats(struct engine_router *r);

#endif
