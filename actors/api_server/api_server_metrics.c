/* The api server's view of the engine in a base/metrics registry (see api_server_metrics.h). */
#include "actors/api_server/api_server_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REASON_STOP, REASON_LENGTH, REASON_ABORT, REASON_OTHER, REASON_COUNT };
static const char *const reason_names[REASON_COUNT] = {"stop", "length", "abort", "other"};

/* The per-engine families, in the order rendered; each is filled from one SchedulerStats field. */
enum {
  ENGINE_WAITING,
  ENGINE_RUNNING,
  ENGINE_KV_USAGE,
  ENGINE_PREFIX_QUERIES,
  ENGINE_PREFIX_HITS,
  ENGINE_PREEMPTIONS,
  ENGINE_ENCODER_QUERIES,
  ENGINE_ENCODER_HITS,
  ENGINE_ENCODER_INPUTS,
  ENGINE_COUNT
};

static const struct {
  const char *name, *help;
  bool counter;
} engine_families[ENGINE_COUNT] = {
    [ENGINE_WAITING] = {"llmbus:num_requests_waiting", "Requests waiting in the engine's queue.", false},
    [ENGINE_RUNNING] = {"llmbus:num_requests_running_engine", "Requests running in the engine.", false},
    [ENGINE_KV_USAGE] = {"llmbus:kv_cache_usage_perc", "KV-cache usage, 1 = full.", false},
    [ENGINE_PREFIX_QUERIES] = {"llmbus:prefix_cache_queries_total", "Prefix-cache queries (tokens).", true},
    [ENGINE_PREFIX_HITS] = {"llmbus:prefix_cache_hits_total", "Prefix-cache hits (tokens).", true},
    [ENGINE_PREEMPTIONS] = {"llmbus:num_preemptions_total", "Preemptions in the engine.", true},
    [ENGINE_ENCODER_QUERIES] = {"llmbus:encoder_cache_queries_total", "Encoder-cache queries (multimodal items).", true},
    [ENGINE_ENCODER_HITS] = {"llmbus:encoder_cache_hits_total", "Encoder-cache hits (items not encoded again).", true},
    [ENGINE_ENCODER_INPUTS] = {"llmbus:encoder_inputs_computed_total", "Multimodal items sent to the encoder.", true},
};

struct api_server_metrics {
  struct llb_metrics *registry;
  struct llb_series *running, *prompt_tokens, *generation_tokens, *ttft, *itl, *e2e;
  struct llb_series *success[REASON_COUNT];
  struct llb_metric *errors;                /* label status */
  struct llb_metric *engine[ENGINE_COUNT]; /* label engine */
};

static struct llb_series *one(struct llb_metric *m) { return llb_metric_series(m, NULL); }

static struct llb_series *histogram(struct llb_metrics *r, const char *name, const char *help,
                                    const double *(*buckets)(int *)) {
  int n;
  const double *b = buckets(&n);
  return one(llb_metrics_histogram(r, name, help, b, n, 0, NULL));
}

/* The families, in the order /metrics shows them. */
static bool register_families(struct api_server_metrics *m) {
  struct llb_metrics *r = m->registry;
  m->running = one(llb_metrics_gauge(r, "llmbus:num_requests_running", "Requests in flight in this api server.", 0, NULL));
  static const char *const reason_label[] = {"finished_reason"}, *const status_label[] = {"status"},
                           *const engine_label[] = {"engine"};
  struct llb_metric *success =
      llb_metrics_counter(r, "llmbus:request_success_total", "Finished requests by finish reason.", 1, reason_label);
  bool ok = m->running && success;
  for (int i = 0; ok && i < REASON_COUNT; i++) /* every reason renders, 0 until counted */
    ok = (m->success[i] = llb_metric_series(success, &reason_names[i])) != NULL;
  m->errors = llb_metrics_counter(r, "llmbus:request_errors_total", "Failed requests by HTTP status.", 1, status_label);
  m->prompt_tokens = one(llb_metrics_counter(r, "llmbus:prompt_tokens_total", "Prompt tokens of finished requests.", 0, NULL));
  m->generation_tokens =
      one(llb_metrics_counter(r, "llmbus:generation_tokens_total", "Generated tokens of finished requests.", 0, NULL));
  m->ttft = histogram(r, "llmbus:time_to_first_token_seconds", "Time to first token.", llb_metrics_buckets_ttft);
  m->itl = histogram(r, "llmbus:inter_token_latency_seconds", "Time per output token after the first.",
                     llb_metrics_buckets_itl);
  m->e2e = histogram(r, "llmbus:e2e_request_latency_seconds", "End-to-end request latency.",
                     llb_metrics_buckets_request_latency);
  ok = ok && m->errors && m->prompt_tokens && m->generation_tokens && m->ttft && m->itl && m->e2e;
  for (int k = 0; ok && k < ENGINE_COUNT; k++) {
    const char *name = engine_families[k].name, *help = engine_families[k].help;
    m->engine[k] = engine_families[k].counter ? llb_metrics_counter(r, name, help, 1, engine_label)
                                              : llb_metrics_gauge(r, name, help, 1, engine_label);
    ok = m->engine[k] != NULL;
  }
  return ok;
}

llb_status api_server_metrics_create(const char *model_name, struct api_server_metrics **out) {
  struct api_server_metrics *m = calloc(1, sizeof *m);
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_metrics: out of memory");
  llb_status st = llb_metrics_create(&m->registry);
  if (st == LLB_STATUS_OK) st = llb_metrics_add_const_label(m->registry, "model_name", model_name ? model_name : "");
  if (st == LLB_STATUS_OK && !register_families(m)) st = LLB_UPDATE_ERR_STACK(LLB_STATUS_OUT_OF_MEMORY);
  if (st != LLB_STATUS_OK) {
    api_server_metrics_destroy(m);
    return st;
  }
  *out = m;
  return LLB_STATUS_OK;
}

void api_server_metrics_destroy(struct api_server_metrics *m) {
  if (!m) return;
  llb_metrics_destroy(m->registry);
  free(m);
}

struct llb_metrics *api_server_metrics_registry(struct api_server_metrics *m) { return m->registry; }

void api_server_metrics_request_started(struct api_server_metrics *m) { llb_series_add(m->running, 1); }

void api_server_metrics_request_ended(struct api_server_metrics *m) { llb_series_add(m->running, -1); }

void api_server_metrics_request_succeeded(struct api_server_metrics *m, const char *finished_reason,
                                   int64_t prompt_tokens, int64_t generation_tokens,
                                   double ttft_s, double e2e_s) {
  int r = REASON_OTHER;
  for (int i = 0; finished_reason && i < REASON_OTHER; i++)
    if (strcmp(finished_reason, reason_names[i]) == 0) r = i;
  llb_series_add(m->success[r], 1);
  if (prompt_tokens > 0) llb_series_add(m->prompt_tokens, (double)prompt_tokens);
  if (generation_tokens > 0) llb_series_add(m->generation_tokens, (double)generation_tokens);
  if (ttft_s >= 0) llb_series_observe(m->ttft, ttft_s);
  if (e2e_s >= 0) llb_series_observe(m->e2e, e2e_s);
}

void api_server_metrics_observe_itl(struct api_server_metrics *m, double gap_s, int64_t count) {
  if (gap_s < 0 || count <= 0) return;
  llb_series_observe_n(m->itl, gap_s, (uint64_t)count);
}

void api_server_metrics_request_failed(struct api_server_metrics *m, int status) {
  if (status < 0 || status >= 600) status = 500;
  char value[8];
  snprintf(value, sizeof value, "%d", status);
  const char *values[] = {value};
  llb_series_add(llb_metric_series(m->errors, values), 1);
}

void api_server_metrics_engine_stats(struct api_server_metrics *m, const struct llb_scheduler_stats *s) {
  char id[64];
  snprintf(id, sizeof id, "%.*s", (int)s->engine_id.len, s->engine_id.data ? s->engine_id.data : "");
  const char *values[] = {id};
  const double v[ENGINE_COUNT] = {
      [ENGINE_WAITING] = s->num_waiting_reqs,
      [ENGINE_RUNNING] = s->num_running_reqs,
      [ENGINE_KV_USAGE] = s->kv_cache_usage,
      [ENGINE_PREFIX_QUERIES] = (double)s->prefix_cache_queries,
      [ENGINE_PREFIX_HITS] = (double)s->prefix_cache_hits,
      [ENGINE_PREEMPTIONS] = (double)s->num_preemptions,
      [ENGINE_ENCODER_QUERIES] = (double)s->encoder_cache_queries,
      [ENGINE_ENCODER_HITS] = (double)s->encoder_cache_hits,
      [ENGINE_ENCODER_INPUTS] = (double)s->encoder_inputs_computed,
  };
  for (int k = 0; k < ENGINE_COUNT; k++) llb_series_set(llb_metric_series(m->engine[k], values), v[k]);
}
