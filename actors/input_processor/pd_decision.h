/* Whether one request is served disaggregated (prefill engine, then decode engine) or aggregated
 * (one engine prefills and decodes it; engine_router.h says which): NVIDIA Dynamo's conditional disaggregation
 * (DisaggregatedRouter.prefill_remote: remote when prefill_length - prefix_hit_length >
 * max_local_prefill_length and queue_size < max_prefill_queue_size), with the KV transfer's cost
 * weighed against computing it on the decode engine. docs/scaling.md "Disaggregated
 * prefill/decode". A pure function over its arguments: no bus, no clock, no state.
 *
 * The rule, first match wins:
 *   1. the uncached prompt (prompt_tokens less the prefix the decode engine holds) is shorter
 *      than min_uncached_tokens:   PD_DECISION_SHORT (its prefill hardly delays the decodes);
 *   2. the prefill engines are saturated, prefill_queue >= max_prefill_queue_size (when > 0):
 *                                  PD_DECISION_PREFILL_SATURATED (it would wait behind them);
 *   3. moving the uncached tokens' KV (x kv_bytes_per_token / transfer_bytes_per_s) takes longer
 *      than computing them on the decode engine (/ prefill_tokens_per_s), when all three are
 *      > 0:                        PD_DECISION_TRANSFER_COSTLIER;
 *   otherwise                      PD_DECISION_DISAGGREGATE.
 */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_PD_DECISION_H
#define LLB_ACTORS_INPUT_PROCESSOR_PD_DECISION_H

#include <stdint.h>

enum pd_decision {
  PD_DECISION_DISAGGREGATE = 0,
  PD_DECISION_SHORT,
  PD_DECISION_PREFILL_SATURATED,
  PD_DECISION_TRANSFER_COSTLIER,
};

struct pd_decision_config {
  int32_t min_uncached_tokens;    /* --disagg-min-prompt-tokens (Dynamo's max_local_prefill_length) */
  int32_t max_prefill_queue_size; /* --max-prefill-queue-size (Dynamo's): requests; 0 = no limit */
  int64_t kv_bytes_per_token;     /* bytes of KV one token moves (all layers, K and V); 0 = unknown */
  double transfer_bytes_per_s;    /* --disagg-transfer-bytes-per-s: the bus's rate; 0 = not weighed */
  double prefill_tokens_per_s;    /* --disagg-prefill-tokens-per-s: a decode engine's prefill rate;
                                     0 = not weighed */
};

struct pd_decision_input {
  int64_t prompt_tokens;  /* >= 0 */
  int64_t cached_tokens;  /* the prefix the decode engine is believed to hold (clamped to the prompt) */
  int32_t prefill_queue;  /* requests at the least loaded live prefill engine (running + waiting +
                             routed there since its stats) */
};

/* What was weighed, for logs and tests. */
struct pd_decision_costs {
  int64_t uncached_tokens;
  double transfer_s;  /* the uncached tokens' KV over the bus; 0 when not weighed */
  double recompute_s; /* the same tokens prefilled on the decode engine; 0 when not weighed */
};

/* Decides by the rule above; costs may be NULL. Non-finite or negative rates count as 0 (not
 * weighed). */
enum pd_decision pd_decide(const struct pd_decision_config *c, const struct pd_decision_input *in,
                           struct pd_decision_costs *costs);

/* "disaggregate", "short", "prefill_saturated", "transfer_costlier" (log and metric label). */
const char *pd_decision_name(enum pd_decision d);

/* Bytes of KV a token takes in an fp16 cache: 2 (K and V) x layers x kv heads x head dim x 2
 * bytes (model/gguf/config.h's names); 0 if any is not positive. */
int64_t pd_kv_bytes_per_token_fp16(int32_t block_count, int32_t head_count_kv, int32_t head_dim);

#endif
