/* Conditional disaggregation; see pd_decision.h. */
#include "actors/input_processor/pd_decision.h"

#include <math.h>

static double rate_or_zero(double r) { return isfinite(r) && r > 0.0 ? r : 0.0; }

enum pd_decision pd_decide(const struct pd_decision_config *c, const struct pd_decision_input *in,
                           struct pd_decision_costs *costs) {
  struct pd_decision_costs k = {0};
  int64_t cached = in->cached_tokens < 0 ? 0 : in->cached_tokens;
  if (cached > in->prompt_tokens) cached = in->prompt_tokens;
  k.uncached_tokens = in->prompt_tokens > 0 ? in->prompt_tokens - cached : 0;
  const double bus = rate_or_zero(c->transfer_bytes_per_s), prefill = rate_or_zero(c->prefill_tokens_per_s);
  if (bus > 0.0 && prefill > 0.0 && c->kv_bytes_per_token > 0) {
    k.transfer_s = (double)k.uncached_tokens * (double)c->kv_bytes_per_token / bus;
    k.recompute_s = (double)k.uncached_tokens / prefill;
  }
  if (costs) *costs = k;
  if (k.uncached_tokens < c->min_uncached_tokens) return PD_DECISION_SHORT;
  if (c->max_prefill_queue_size > 0 && in->prefill_queue >= c->max_prefill_queue_size)
    return PD_DECISION_PREFILL_SATURATED;
  if (k.transfer_s > k.recompute_s) return PD_DECISION_TRANSFER_COSTLIER;
  return PD_DECISION_DISAGGREGATE;
}

const char *pd_decision_name(enum pd_decision d) {
  switch (d) {
  case PD_DECISION_DISAGGREGATE: return "disaggregate";
  case PD_DECISION_SHORT: return "short";
  case PD_DECISION_PREFILL_SATURATED: return "prefill_saturated";
  case PD_DECISION_TRANSFER_COSTLIER: return "transfer_costlier";
  }
  return "unknown";
}

int64_t pd_kv_bytes_per_token_fp16(int32_t block_count, int32_t head_count_kv, int32_t head_dim) {
  if (block_count <= 0 || head_count_kv <= 0 || head_dim <= 0) return 0;
  return 2 * (int64_t)block_count * head_count_kv * head_dim * 2;
}
