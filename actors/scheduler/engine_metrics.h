/* The engine's scheduler-side metrics and its periodic log line (pure logic over
 * base/metrics.h and base/log.h; the actor feeds it sched_get_stats snapshots).
 *
 * Prometheus series, vLLM v1's (vllm/v1/metrics/loggers.py) under `llmbus:`:
 *   llmbus:num_requests_running, llmbus:num_requests_waiting     gauges
 *   llmbus:kv_cache_usage_perc                                   gauge, 1 = full
 *   llmbus:prefix_cache_queries_total, llmbus:prefix_cache_hits_total   counters (tokens)
 *   llmbus:num_preemptions_total                                 counter
 *   llmbus:iteration_tokens_total        histogram: prompt + generation tokens of each step
 * Log (vLLM's LoggingStatLogger): every log_interval_ns, one line
 *   event=engine_stats prompt_throughput_tok_s=.. generation_throughput_tok_s=.. running=..
 *   waiting=.. kv_cache_usage_pct=.. prefix_cache_hit_rate_pct=.. preemptions=..
 * with throughputs and the hit rate over the interval (the hit rate of all queries so far
 * when the interval had none); at debug level when this and the previous interval were idle.
 *
 * Threading: one thread (the step thread) calls update; series are atomic for the scraper.
 */
#ifndef LLB_ACTORS_SCHEDULER_ENGINE_METRICS_H
#define LLB_ACTORS_SCHEDULER_ENGINE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/scheduler/scheduler.h"
#include "base/metrics.h"

struct sched_engine_metrics;

/* Registers the series in `r` (NULL: no series, the log line only) and logs every
 * log_interval_ns (0: never). *out: sched_engine_metrics_destroy. Errors: registration's,
 * OUT_OF_MEMORY. */
llb_status sched_engine_metrics_create(struct llb_metrics *r, int64_t log_interval_ns,
                                       struct sched_engine_metrics **out);
void sched_engine_metrics_destroy(struct sched_engine_metrics *m); /* NULL ok */

/* Takes a snapshot at now_ns (monotonic): gauges and counters follow it; the tokens computed
 * since the previous snapshot, when any, are one iteration's (call it once per applied step);
 * logs the engine_stats line when its interval has passed. Returns true when it logged. */
bool sched_engine_metrics_update(struct sched_engine_metrics *m, const struct sched_stats *s, int64_t now_ns);

#endif
