/* Scheduler-side engine metrics and the engine_stats log line (see engine_metrics.h). */
#include "actors/scheduler/engine_metrics.h"

#include <stdlib.h>

#include "base/log.h"

struct sched_engine_metrics {
  struct llb_series *running, *waiting, *kv_usage, *queries, *hits, *preemptions, *iteration_tokens;
  struct llb_series *spec_drafts, *spec_draft_tokens, *spec_accepted; /* speculative decoding */
  struct llb_series *kv_recv_tokens, *kv_recv_failures, *kv_exports;  /* disaggregated prefill/decode */
  int64_t log_interval_ns;
  bool have_prev;
  uint64_t prev_tokens; /* prompt + generation at the previous update */
  /* at the previous log line */
  int64_t log_ns;
  uint64_t log_prompt, log_generation, log_queries, log_hits, log_drafts, log_draft_tokens, log_accepted;
  bool log_idle;
};

static struct llb_series *one(struct llb_metric *f) { return llb_metric_series(f, NULL); }

llb_status sched_engine_metrics_create(struct llb_metrics *r, int64_t log_interval_ns,
                                       struct sched_engine_metrics **out) {
  *out = NULL;
  struct sched_engine_metrics *m = calloc(1, sizeof *m);
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "engine metrics");
  m->log_interval_ns = log_interval_ns;
  m->log_idle = true;
  if (r) {
    double tok[LLB_METRICS_MAX_BUCKETS];
    int nt = llb_metrics_buckets_1_2_5(1e5, tok, LLB_METRICS_MAX_BUCKETS);
    m->running = one(llb_metrics_gauge(r, "llmbus:num_requests_running", "Number of requests in model execution batches.", 0, NULL));
    m->waiting = one(llb_metrics_gauge(r, "llmbus:num_requests_waiting", "Number of requests waiting to be processed.", 0, NULL));
    m->kv_usage = one(llb_metrics_gauge(r, "llmbus:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0, NULL));
    m->queries = one(llb_metrics_counter(r, "llmbus:prefix_cache_queries_total",
                                         "Prefix cache queries, in terms of number of queried tokens.", 0, NULL));
    m->hits = one(llb_metrics_counter(r, "llmbus:prefix_cache_hits_total",
                                      "Prefix cache hits, in terms of number of cached tokens.", 0, NULL));
    m->preemptions = one(llb_metrics_counter(r, "llmbus:num_preemptions_total", "Cumulative number of preemption from the engine.", 0, NULL));
    m->iteration_tokens = one(llb_metrics_histogram(r, "llmbus:iteration_tokens_total",
                                                    "Histogram of number of tokens per engine_step.", tok, nt, 0, NULL));
    /* vLLM's SpecDecodingProm counters (vllm:spec_decode_*), with our prefix */
    m->spec_drafts = one(llb_metrics_counter(r, "llmbus:spec_decode_num_drafts_total",
                                             "Number of spec decoding drafts (request steps that verified drafts).", 0, NULL));
    m->spec_draft_tokens = one(llb_metrics_counter(r, "llmbus:spec_decode_num_draft_tokens_total",
                                                   "Number of draft tokens.", 0, NULL));
    m->spec_accepted = one(llb_metrics_counter(r, "llmbus:spec_decode_num_accepted_tokens_total",
                                               "Number of accepted tokens.", 0, NULL));
    m->kv_recv_tokens = one(llb_metrics_counter(r, "llmbus:kv_transfer_received_tokens_total",
                                                "Tokens whose KV a decode engine fetched from a prefill engine instead of "
                                                "computing it.", 0, NULL));
    m->kv_recv_failures = one(llb_metrics_counter(r, "llmbus:kv_transfer_failed_requests_total",
                                                  "KV fetches that failed (the request was recomputed).", 0, NULL));
    m->kv_exports = one(llb_metrics_counter(r, "llmbus:kv_transfer_exported_requests_total",
                                            "Requests whose KV blocks a prefill engine exported to a decode engine.", 0,
                                            NULL));
    if (!m->running || !m->waiting || !m->kv_usage || !m->queries || !m->hits || !m->preemptions ||
        !m->iteration_tokens || !m->spec_drafts || !m->spec_draft_tokens || !m->spec_accepted || !m->kv_recv_tokens ||
        !m->kv_recv_failures || !m->kv_exports) {
      free(m);
      return LLB_UPDATE_ERR_STACK(LLB_STATUS_INTERNAL);
    }
  }
  *out = m;
  return LLB_STATUS_OK;
}

void sched_engine_metrics_destroy(struct sched_engine_metrics *m) { free(m); }

static void log_line(struct sched_engine_metrics *m, const struct sched_stats *s, int64_t now_ns) {
  const double dt = (double)(now_ns - m->log_ns) / 1e9;
  const uint64_t dp = s->num_prompt_tokens - m->log_prompt, dg = s->num_generation_tokens - m->log_generation;
  const uint64_t dq = s->prefix_cache_queries - m->log_queries, dh = s->prefix_cache_hits - m->log_hits;
  const uint64_t q = dq ? dq : s->prefix_cache_queries, h = dq ? dh : s->prefix_cache_hits;
  const bool idle = dp == 0 && dg == 0 && s->num_running == 0 && s->num_waiting == 0;
  llb_log(idle && m->log_idle ? LLB_LOG_LEVEL_DEBUG : LLB_LOG_LEVEL_INFO, "engine_stats",
          "interval_s=%.1f prompt_throughput_tok_s=%.1f generation_throughput_tok_s=%.1f running=%d waiting=%d "
          "kv_cache_usage_pct=%.1f prefix_cache_hit_rate_pct=%.1f preemptions=%llu step=%llu",
          dt, dt > 0 ? (double)dp / dt : 0.0, dt > 0 ? (double)dg / dt : 0.0, s->num_running, s->num_waiting,
          100.0 * s->kv_cache_usage, q ? 100.0 * (double)h / (double)q : 0.0, (unsigned long long)s->num_preemptions,
          (unsigned long long)s->step);
  const uint64_t dd = s->spec_num_drafts - m->log_drafts, ddt = s->spec_num_draft_tokens - m->log_draft_tokens;
  const uint64_t da = s->spec_num_accepted_tokens - m->log_accepted;
  if (ddt > 0) /* vLLM's SpecDecodingLogging line */
    llb_log(LLB_LOG_LEVEL_INFO, "spec_decode_stats",
            "draft_acceptance_rate_pct=%.1f mean_acceptance_length=%.2f accepted_tokens=%llu draft_tokens=%llu drafts=%llu",
            100.0 * (double)da / (double)ddt, dd ? 1.0 + (double)da / (double)dd : 0.0, (unsigned long long)da,
            (unsigned long long)ddt, (unsigned long long)dd);
  m->log_drafts = s->spec_num_drafts, m->log_draft_tokens = s->spec_num_draft_tokens;
  m->log_accepted = s->spec_num_accepted_tokens;
  m->log_idle = idle;
  m->log_ns = now_ns;
  m->log_prompt = s->num_prompt_tokens, m->log_generation = s->num_generation_tokens;
  m->log_queries = s->prefix_cache_queries, m->log_hits = s->prefix_cache_hits;
}

bool sched_engine_metrics_update(struct sched_engine_metrics *m, const struct sched_stats *s, int64_t now_ns) {
  const uint64_t tokens = s->num_prompt_tokens + s->num_generation_tokens;
  if (m->have_prev && tokens > m->prev_tokens) llb_series_observe(m->iteration_tokens, (double)(tokens - m->prev_tokens));
  m->prev_tokens = tokens;
  llb_series_set(m->running, s->num_running);
  llb_series_set(m->waiting, s->num_waiting);
  llb_series_set(m->kv_usage, s->kv_cache_usage);
  llb_series_set(m->queries, (double)s->prefix_cache_queries);
  llb_series_set(m->hits, (double)s->prefix_cache_hits);
  llb_series_set(m->preemptions, (double)s->num_preemptions);
  llb_series_set(m->spec_drafts, (double)s->spec_num_drafts);
  llb_series_set(m->spec_draft_tokens, (double)s->spec_num_draft_tokens);
  llb_series_set(m->spec_accepted, (double)s->spec_num_accepted_tokens);
  llb_series_set(m->kv_recv_tokens, (double)s->kv_recv_tokens);
  llb_series_set(m->kv_recv_failures, (double)s->kv_recv_failures);
  llb_series_set(m->kv_exports, (double)s->kv_sends);
  if (!m->have_prev) { /* the first snapshot starts the first interval */
    m->have_prev = true;
    m->log_ns = now_ns;
    m->log_prompt = s->num_prompt_tokens, m->log_generation = s->num_generation_tokens;
    m->log_queries = s->prefix_cache_queries, m->log_hits = s->prefix_cache_hits;
    return false;
  }
  if (m->log_interval_ns <= 0 || now_ns - m->log_ns < m->log_interval_ns) return false;
  log_line(m, s, now_ns);
  return true;
}
