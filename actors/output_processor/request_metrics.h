/* The engine's per-request Prometheus metrics, fed by the output processor's stats hooks
 * (output_processor.h), so that a request counts the same whether it came over HTTP or NATS.
 *
 * Names and semantics are vLLM v1's (vllm/v1/metrics/loggers.py PrometheusStatLogger,
 * stats.py IterationStats / FinishedRequestStats) with the `llmbus:` prefix:
 *   llmbus:prompt_tokens_total, llmbus:generation_tokens_total       counters
 *   llmbus:request_success_total{finished_reason}                    counter: stop, length,
 *                                                                      abort, error
 *   llmbus:time_to_first_token_seconds     first tokens' arrival here - request arrival
 *   llmbus:inter_token_latency_seconds     one sample per token gap (k tokens arriving
 *                                          together after a gap g: k samples of g / k)
 *   llmbus:e2e_request_latency_seconds     finish here - arrival
 *   llmbus:request_queue_time_seconds      first scheduled - queued (engine clock)
 *   llmbus:request_prefill_time_seconds    first token - first scheduled
 *   llmbus:request_decode_time_seconds     last token - first token
 *   llmbus:request_inference_time_seconds  last token - first scheduled
 *   llmbus:request_prompt_tokens, llmbus:request_generation_tokens   histograms (tokens)
 * Timestamps are wall clock (the engine's and this process's); an interval whose ends are
 * not both known is not observed, a negative one (clock skew) counts as 0.
 *
 * Threading: the hooks may run on any thread; series are atomic (base/metrics.h).
 */
#ifndef LLB_ACTORS_OUTPUT_PROCESSOR_REQUEST_METRICS_H
#define LLB_ACTORS_OUTPUT_PROCESSOR_REQUEST_METRICS_H

#include "actors/output_processor/output_processor.h"
#include "base/metrics.h"

struct output_processor_request_metrics;

/* Registers the families above in `r` (borrowed; outlives the result). *out: freed with
 * output_processor_request_metrics_destroy. Errors: registration (LLB_ERRF), OUT_OF_MEMORY. */
llb_status output_processor_request_metrics_create(struct llb_metrics *r, struct output_processor_request_metrics **out);
void output_processor_request_metrics_destroy(struct output_processor_request_metrics *m); /* NULL ok */

/* The hooks to give output_processor_set_stats_hooks, with `m` as their user. */
const struct output_processor_stats_hooks *output_processor_request_metrics_hooks(void);

#endif
