/* Per-request Prometheus metrics of the engine (see request_metrics.h). */
#include "actors/output_processor/request_metrics.h"

#include <stdlib.h>

enum { QUEUE, PREFILL, DECODE, INFERENCE, NUM_PHASES };

struct output_processor_request_metrics {
  struct llb_series *prompt_tokens, *generation_tokens;
  struct llb_series *success[4]; /* by output_processor_finish_reason - 1: stop, length, abort, error */
  struct llb_series *ttft, *itl, *e2e, *phase[NUM_PHASES], *req_prompt, *req_generation;
};

static struct llb_series *plain_hist(struct llb_metrics *r, const char *name, const char *help, const double *b,
                                     int nb) {
  return llb_metric_series(llb_metrics_histogram(r, name, help, b, nb, 0, NULL), NULL);
}

llb_status output_processor_request_metrics_create(struct llb_metrics *r, struct output_processor_request_metrics **out) {
  *out = NULL;
  struct output_processor_request_metrics *m = calloc(1, sizeof *m);
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "request metrics");
  m->prompt_tokens = llb_metric_series(
      llb_metrics_counter(r, "llmbus:prompt_tokens_total", "Number of prefill tokens processed.", 0, NULL), NULL);
  m->generation_tokens = llb_metric_series(
      llb_metrics_counter(r, "llmbus:generation_tokens_total", "Number of generation tokens processed.", 0, NULL), NULL);
  const char *reason_label[] = {"finished_reason"};
  struct llb_metric *succ = llb_metrics_counter(r, "llmbus:request_success_total",
                                                "Count of successfully processed requests.", 1, reason_label);
  static const char *const reasons[4] = {"stop", "length", "abort", "error"};
  for (int i = 0; i < 4; i++) m->success[i] = llb_metric_series(succ, &reasons[i]);
  int n;
  const double *b = llb_metrics_buckets_ttft(&n);
  m->ttft = plain_hist(r, "llmbus:time_to_first_token_seconds", "Histogram of time to first token in seconds.", b, n);
  b = llb_metrics_buckets_itl(&n);
  m->itl = plain_hist(r, "llmbus:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", b, n);
  b = llb_metrics_buckets_request_latency(&n);
  m->e2e = plain_hist(r, "llmbus:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", b, n);
  m->phase[QUEUE] = plain_hist(r, "llmbus:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", b, n);
  m->phase[PREFILL] = plain_hist(r, "llmbus:request_prefill_time_seconds",
                                 "Histogram of time spent in PREFILL phase for request.", b, n);
  m->phase[DECODE] = plain_hist(r, "llmbus:request_decode_time_seconds",
                                "Histogram of time spent in DECODE phase for request.", b, n);
  m->phase[INFERENCE] = plain_hist(r, "llmbus:request_inference_time_seconds",
                                   "Histogram of time spent in RUNNING phase for request.", b, n);
  double tok[LLB_METRICS_MAX_BUCKETS];
  int nt = llb_metrics_buckets_1_2_5(1e6, tok, LLB_METRICS_MAX_BUCKETS);
  m->req_prompt = plain_hist(r, "llmbus:request_prompt_tokens", "Number of prefill tokens processed.", tok, nt);
  m->req_generation =
      plain_hist(r, "llmbus:request_generation_tokens", "Number of generation tokens processed.", tok, nt);
  bool ok = m->prompt_tokens && m->generation_tokens && m->ttft && m->itl && m->e2e && m->req_prompt &&
            m->req_generation;
  for (int i = 0; i < NUM_PHASES; i++) ok = ok && m->phase[i];
  for (int i = 0; i < 4; i++) ok = ok && m->success[i];
  if (!ok) {
    free(m);
    return LLB_UPDATE_ERR_STACK(LLB_STATUS_INTERNAL);
  }
  *out = m;
  return LLB_STATUS_OK;
}

void output_processor_request_metrics_destroy(struct output_processor_request_metrics *m) { free(m); }

/* b - a in seconds when both are known; negative (skew) as 0. */
static void observe_interval(struct llb_series *s, int64_t a_ns, int64_t b_ns) {
  if (a_ns <= 0 || b_ns <= 0) return;
  llb_series_observe(s, b_ns > a_ns ? (double)(b_ns - a_ns) / 1e9 : 0.0);
}

static void on_tokens(void *user, int64_t k, int64_t prev_ns, int64_t now_ns, int64_t num_prompt, int64_t arrival_ns) {
  struct output_processor_request_metrics *m = user;
  llb_series_add(m->generation_tokens, (double)k);
  if (prev_ns == 0) { /* the first tokens: the prefill is done */
    llb_series_add(m->prompt_tokens, (double)num_prompt);
    observe_interval(m->ttft, arrival_ns, now_ns);
    for (int64_t i = 1; i < k; i++) llb_series_observe(m->itl, 0.0); /* arrived with the first */
    return;
  }
  const double gap = now_ns > prev_ns ? (double)(now_ns - prev_ns) / 1e9 / (double)k : 0.0;
  for (int64_t i = 0; i < k; i++) llb_series_observe(m->itl, gap);
}

static void on_finished(void *user, const struct output_processor_finished_stats *s) {
  struct output_processor_request_metrics *m = user;
  const int r = (int)s->finish_reason - (int)OUTPUT_PROCESSOR_FINISH_REASON_STOP;
  if (r >= 0 && r < 4) llb_series_add(m->success[r], 1);
  observe_interval(m->e2e, s->arrival_ns, s->finished_ns);
  observe_interval(m->phase[QUEUE], s->queued_ns, s->scheduled_ns);
  observe_interval(m->phase[PREFILL], s->scheduled_ns, s->first_token_ns);
  observe_interval(m->phase[DECODE], s->first_token_ns, s->last_token_ns);
  observe_interval(m->phase[INFERENCE], s->scheduled_ns, s->last_token_ns);
  llb_series_observe(m->req_prompt, (double)s->num_prompt_tokens);
  llb_series_observe(m->req_generation, (double)s->num_generation_tokens);
}

static const struct output_processor_stats_hooks hooks = {.on_tokens = on_tokens, .on_finished = on_finished};

const struct output_processor_stats_hooks *output_processor_request_metrics_hooks(void) { return &hooks; }
