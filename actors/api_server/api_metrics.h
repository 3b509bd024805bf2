/* The api server's metrics and their Prometheus text rendering (pure logic).
 *
 * Names follow vLLM's (vllm/v1/metrics/loggers.py) with the `llmbus:` prefix instead of
 * `vllm:`, labelled model_name="<served id>":
 *   llmbus:request_success_total{finished_reason}    counter (stop, length, abort)
 *   llmbus:request_errors_total{status}              counter, HTTP status of failed requests
 *   llmbus:prompt_tokens_total, llmbus:generation_tokens_total   counters
 *   llmbus:num_requests_running                      gauge: requests in flight here
 *   llmbus:time_to_first_token_seconds               histogram
 *   llmbus:inter_token_latency_seconds               histogram, one sample per token gap
 *   llmbus:e2e_request_latency_seconds               histogram
 * and, per engine (label engine="<eid>"), the latest SchedulerStats it published:
 *   llmbus:num_requests_waiting, llmbus:num_requests_running_engine, llmbus:kv_cache_usage_perc
 *   gauges; llmbus:prefix_cache_queries_total, llmbus:prefix_cache_hits_total,
 *   llmbus:num_preemptions_total, llmbus:encoder_cache_queries_total,
 *   llmbus:encoder_cache_hits_total, llmbus:encoder_inputs_computed_total counters.
 * This is the front door's own view, served on its HTTP port as vLLM serves /metrics; the
 * engine-wide series (every request, NATS ones included) come from the actors' metrics ports
 * (docs/operations.md "Metrics"), which Prometheus scrapes.
 * Format: Prometheus text exposition format 0.0.4 (# HELP / # TYPE, cumulative `le` buckets
 * ending in +Inf, _sum and _count).
 *
 * Threading: every function is thread-safe (one mutex inside).
 */
#ifndef LLB_ACTORS_API_SERVER_API_METRICS_H
#define LLB_ACTORS_API_SERVER_API_METRICS_H

#include <stdint.h>

#include "actors/api_server/api_request.h"
#include "base/status.h"
#include "schemas/control.h"

#define API_METRICS_MAX_ENGINES 16

struct api_metrics;

/* Creates the metrics of a server serving `model_name` (copied). *out: api_metrics_destroy. */
llb_status api_metrics_create(const char *model_name, struct api_metrics **out);
void api_metrics_destroy(struct api_metrics *m); /* NULL ok */

/* A request was accepted (+1 running) / ended (-1 running). */
void api_metrics_request_started(struct api_metrics *m);
void api_metrics_request_ended(struct api_metrics *m);

/* A request finished with a response: its finish reason (that of its first finished choice:
 * "stop", "length", "abort"), its token counts and latencies in seconds (< 0 = not known:
 * not observed). */
void api_metrics_request_succeeded(struct api_metrics *m, const char *finished_reason,
                                   int64_t prompt_tokens, int64_t generation_tokens,
                                   double ttft_s, double e2e_s);

/* `count` token gaps of `gap_s` seconds each (tokens that arrived together after one gap
 * share it), into llmbus:inter_token_latency_seconds. */
void api_metrics_observe_itl(struct api_metrics *m, double gap_s, int64_t count);

/* A request failed with HTTP `status`. */
void api_metrics_request_failed(struct api_metrics *m, int status);

/* Stores the latest stats of engine stats->engine_id (at most API_METRICS_MAX_ENGINES
 * engines; later ones are ignored). */
void api_metrics_engine_stats(struct api_metrics *m, const struct llb_scheduler_stats *stats);

/* Running requests now. */
int64_t api_metrics_running(struct api_metrics *m);

/* Appends the whole exposition to `out`. False when out of memory. */
bool api_metrics_render(struct api_metrics *m, struct api_buf *out);

#endif
