/* The api server's metrics: its view of the engine as a base/metrics registry (pure logic).
 *
 * Names follow vLLM's (vllm/v1/metrics/loggers.py) with the `llmbus:` prefix instead of
 * `vllm:`; every series carries model_name="<served id>" (the registry's constant label):
 *   llmbus:num_requests_running                      gauge: requests in flight here
 *   llmbus:request_success_total{finished_reason}    counter (stop, length, abort, other)
 *   llmbus:request_errors_total{status}              counter, HTTP status of failed requests
 *   llmbus:prompt_tokens_total, llmbus:generation_tokens_total   counters
 *   llmbus:time_to_first_token_seconds               histogram
 *   llmbus:inter_token_latency_seconds               histogram, one sample per token gap
 *   llmbus:e2e_request_latency_seconds               histogram
 * and, per engine (label engine="<eid>"), the latest SchedulerStats it published:
 *   llmbus:num_requests_waiting, llmbus:num_requests_running_engine, llmbus:kv_cache_usage_perc
 *   gauges; llmbus:prefix_cache_queries_total, llmbus:prefix_cache_hits_total,
 *   llmbus:num_preemptions_total, llmbus:encoder_cache_queries_total,
 *   llmbus:encoder_cache_hits_total, llmbus:encoder_inputs_computed_total counters.
 * Buckets are base/metrics' vLLM sets. This is the front door's own view, rendered on its HTTP
 * port's /metrics by base/metrics_merge.h with the process registry and every engine actor's
 * series (docs/operations.md "Metrics"); a family an actor publishes replaces the view's.
 *
 * Threading: every function is thread-safe (base/metrics' atomics).
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_METRICS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_METRICS_H

#include <stdint.h>

#include "base/metrics.h"
#include "base/status.h"
#include "schemas/control.h"

struct api_server_metrics;

/* Creates the metrics of a server serving `model_name` (copied; at most 255 bytes are kept).
 * *out: api_server_metrics_destroy. OUT_OF_MEMORY, or the registry's errors. */
llb_status api_server_metrics_create(const char *model_name, struct api_server_metrics **out);
void api_server_metrics_destroy(struct api_server_metrics *m); /* NULL ok */

/* The registry holding the view (borrowed: valid until api_server_metrics_destroy), to render. */
struct llb_metrics *api_server_metrics_registry(struct api_server_metrics *m);

/* A request was accepted (+1 running) / ended (-1 running). */
void api_server_metrics_request_started(struct api_server_metrics *m);
void api_server_metrics_request_ended(struct api_server_metrics *m);

/* A request finished with a response: its finish reason (that of its first finished choice:
 * "stop", "length", "abort"; anything else counts as "other"), its token counts and latencies
 * in seconds (< 0 = not known: not observed). */
void api_server_metrics_request_succeeded(struct api_server_metrics *m, const char *finished_reason,
                                   int64_t prompt_tokens, int64_t generation_tokens,
                                   double ttft_s, double e2e_s);

/* `count` token gaps of `gap_s` seconds each (tokens that arrived together after one gap
 * share it), into llmbus:inter_token_latency_seconds. */
void api_server_metrics_observe_itl(struct api_server_metrics *m, double gap_s, int64_t count);

/* A request failed with HTTP `status` (outside 0..599: counted as 500). */
void api_server_metrics_request_failed(struct api_server_metrics *m, int status);

/* Stores the latest stats of engine stats->engine_id (label values bounded as base/metrics':
 * past 128 engines they fold into engine="other"). */
void api_server_metrics_engine_stats(struct api_server_metrics *m, const struct llb_scheduler_stats *stats);

#endif
