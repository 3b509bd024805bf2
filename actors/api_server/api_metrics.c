/* Api server metrics and Prometheus text (see api_metrics.h). */
#include "actors/api_server/api_metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bucket bounds in seconds, as vLLM's v1 loggers. */
static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                      0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0,
                                      160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double e2e_buckets[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0, 15.0, 20.0,
                                     30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define HIST_MAX_BUCKETS 24

struct histogram {
  const double *bounds; /* [num_bounds] upper bounds, ascending */
  int num_bounds;
  uint64_t counts[HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
  double sum;
  uint64_t count;
};

static void hist_observe(struct histogram *h, double v) {
  int i = 0;
  while (i < h->num_bounds && v > h->bounds[i]) i++;
  h->counts[i]++;
  h->sum += v;
  h->count++;
}

enum { REASON_STOP, REASON_LENGTH, REASON_ABORT, REASON_OTHER, REASON_COUNT };
static const char *reason_names[REASON_COUNT] = {"stop", "length", "abort", "other"};

struct engine_slot {
  bool used;
  char id[64];
  struct llb_scheduler_stats s; /* strings not kept: engine_id copied into id */
};

struct api_metrics {
  pthread_mutex_t mu;
  char model_label[2 * API_MAX_MODEL_BYTES];
  int64_t running;
  uint64_t success[REASON_COUNT];
  uint64_t errors[600]; /* by HTTP status */
  uint64_t prompt_tokens, generation_tokens;
  struct histogram ttft, itl, e2e;
  struct engine_slot engines[API_METRICS_MAX_ENGINES];
};

/* Prometheus label value escaping: backslash, double quote, newline. */
static void escape_label(const char *s, char *out, size_t cap) {
  size_t j = 0;
  for (; *s && j + 3 < cap; s++) {
    if (*s == '\\' || *s == '"') {
      out[j++] = '\\';
      out[j++] = *s;
    } else if (*s == '\n') {
      out[j++] = '\\';
      out[j++] = 'n';
    } else {
      out[j++] = *s;
    }
  }
  out[j] = '\0';
}

llb_status api_metrics_create(const char *model_name, struct api_metrics **out) {
  struct api_metrics *m = calloc(1, sizeof *m);
  if (!m) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_metrics: out of memory");
  pthread_mutex_init(&m->mu, NULL);
  escape_label(model_name ? model_name : "", m->model_label, sizeof m->model_label);
  m->ttft = (struct histogram){.bounds = ttft_buckets, .num_bounds = (int)(sizeof ttft_buckets / sizeof(double))};
  m->itl = (struct histogram){.bounds = itl_buckets, .num_bounds = (int)(sizeof itl_buckets / sizeof(double))};
  m->e2e = (struct histogram){.bounds = e2e_buckets, .num_bounds = (int)(sizeof e2e_buckets / sizeof(double))};
  *out = m;
  return LLB_STATUS_OK;
}

void api_metrics_destroy(struct api_metrics *m) {
  if (!m) return;
  pthread_mutex_destroy(&m->mu);
  free(m);
}

void api_metrics_request_started(struct api_metrics *m) {
  pthread_mutex_lock(&m->mu);
  m->running++;
  pthread_mutex_unlock(&m->mu);
}

void api_metrics_request_ended(struct api_metrics *m) {
  pthread_mutex_lock(&m->mu);
  if (m->running > 0) m->running--;
  pthread_mutex_unlock(&m->mu);
}

int64_t api_metrics_running(struct api_metrics *m) {
  pthread_mutex_lock(&m->mu);
  int64_t r = m->running;
  pthread_mutex_unlock(&m->mu);
  return r;
}

void api_metrics_request_succeeded(struct api_metrics *m, const char *finished_reason,
                                   int64_t prompt_tokens, int64_t generation_tokens,
                                   double ttft_s, double e2e_s) {
  int r = REASON_OTHER;
  for (int i = 0; finished_reason && i < REASON_OTHER; i++)
    if (strcmp(finished_reason, reason_names[i]) == 0) r = i;
  pthread_mutex_lock(&m->mu);
  m->success[r]++;
  if (prompt_tokens > 0) m->prompt_tokens += (uint64_t)prompt_tokens;
  if (generation_tokens > 0) m->generation_tokens += (uint64_t)generation_tokens;
  if (ttft_s >= 0) hist_observe(&m->ttft, ttft_s);
  if (e2e_s >= 0) hist_observe(&m->e2e, e2e_s);
  pthread_mutex_unlock(&m->mu);
}

void api_metrics_observe_itl(struct api_metrics *m, double gap_s, int64_t count) {
  if (gap_s < 0 || count <= 0) return;
  pthread_mutex_lock(&m->mu);
  for (int64_t i = 0; i < count; i++) hist_observe(&m->itl, gap_s);
  pthread_mutex_unlock(&m->mu);
}

void api_metrics_request_failed(struct api_metrics *m, int status) {
  if (status < 0 || status >= 600) status = 500;
  pthread_mutex_lock(&m->mu);
  m->errors[status]++;
  pthread_mutex_unlock(&m->mu);
}

void api_metrics_engine_stats(struct api_metrics *m, const struct llb_scheduler_stats *s) {
  char id[64];
  snprintf(id, sizeof id, "%.*s", (int)s->engine_id.len, s->engine_id.data ? s->engine_id.data : "");
  pthread_mutex_lock(&m->mu);
  struct engine_slot *slot = NULL;
  for (int i = 0; i < API_METRICS_MAX_ENGINES && !slot; i++)
    if (m->engines[i].used && strcmp(m->engines[i].id, id) == 0) slot = &m->engines[i];
  for (int i = 0; i < API_METRICS_MAX_ENGINES && !slot; i++)
    if (!m->engines[i].used) slot = &m->engines[i];
  if (slot) {
    slot->used = true;
    memcpy(slot->id, id, sizeof id);
    slot->s = *s;
    slot->s.engine_id = (struct llb_str){0};
  }
  pthread_mutex_unlock(&m->mu);
}

static bool head(struct api_buf *o, const char *name, const char *type, const char *help) {
  return api_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static bool render_hist(struct api_buf *o, const char *name, const char *help,
                        const struct histogram *h, const char *label) {
  bool ok = head(o, name, "histogram", help);
  uint64_t cum = 0;
  for (int i = 0; ok && i <= h->num_bounds; i++) {
    cum += h->counts[i];
    if (i < h->num_bounds)
      ok = api_buf_printf(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, label, h->bounds[i], (unsigned long long)cum);
    else
      ok = api_buf_printf(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label, (unsigned long long)cum);
  }
  return ok && api_buf_printf(o, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, label, h->sum, name, label,
                              (unsigned long long)h->count);
}

bool api_metrics_render(struct api_metrics *m, struct api_buf *o) {
  pthread_mutex_lock(&m->mu);
  char label[sizeof m->model_label + 16];
  snprintf(label, sizeof label, "model_name=\"%s\"", m->model_label);
  bool ok = head(o, "llmbus:num_requests_running", "gauge", "Requests in flight in this api server.") &&
            api_buf_printf(o, "llmbus:num_requests_running{%s} %lld\n", label, (long long)m->running);
  ok = ok && head(o, "llmbus:request_success_total", "counter", "Finished requests by finish reason.");
  for (int i = 0; ok && i < REASON_COUNT; i++)
    ok = api_buf_printf(o, "llmbus:request_success_total{%s,finished_reason=\"%s\"} %llu\n", label,
                        reason_names[i], (unsigned long long)m->success[i]);
  ok = ok && head(o, "llmbus:request_errors_total", "counter", "Failed requests by HTTP status.");
  for (int i = 0; ok && i < 600; i++)
    if (m->errors[i])
      ok = api_buf_printf(o, "llmbus:request_errors_total{%s,status=\"%d\"} %llu\n", label, i,
                          (unsigned long long)m->errors[i]);
  ok = ok && head(o, "llmbus:prompt_tokens_total", "counter", "Prompt tokens of finished requests.") &&
       api_buf_printf(o, "llmbus:prompt_tokens_total{%s} %llu\n", label, (unsigned long long)m->prompt_tokens) &&
       head(o, "llmbus:generation_tokens_total", "counter", "Generated tokens of finished requests.") &&
       api_buf_printf(o, "llmbus:generation_tokens_total{%s} %llu\n", label,
                      (unsigned long long)m->generation_tokens) &&
       render_hist(o, "llmbus:time_to_first_token_seconds", "Time to first token.", &m->ttft, label) &&
       render_hist(o, "llmbus:inter_token_latency_seconds", "Time per output token after the first.", &m->itl,
                   label) &&
       render_hist(o, "llmbus:e2e_request_latency_seconds", "End-to-end request latency.", &m->e2e, label);
  struct {
    const char *name, *type, *help;
  } eg[] = {
      {"llmbus:num_requests_waiting", "gauge", "Requests waiting in the engine's queue."},
      {"llmbus:num_requests_running_engine", "gauge", "Requests running in the engine."},
      {"llmbus:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = full."},
      {"llmbus:prefix_cache_queries_total", "counter", "Prefix-cache queries (tokens)."},
      {"llmbus:prefix_cache_hits_total", "counter", "Prefix-cache hits (tokens)."},
      {"llmbus:num_preemptions_total", "counter", "Preemptions in the engine."},
      {"llmbus:encoder_cache_queries_total", "counter", "Encoder-cache queries (multimodal items)."},
      {"llmbus:encoder_cache_hits_total", "counter", "Encoder-cache hits (items not encoded again)."},
      {"llmbus:encoder_inputs_computed_total", "counter", "Multimodal items sent to the encoder."},
  };
  for (size_t k = 0; ok && k < sizeof eg / sizeof eg[0]; k++) {
    ok = head(o, eg[k].name, eg[k].type, eg[k].help);
    for (int i = 0; ok && i < API_METRICS_MAX_ENGINES; i++) {
      const struct engine_slot *e = &m->engines[i];
      if (!e->used) continue;
      char eid[160];
      escape_label(e->id, eid, sizeof eid);
      double v = k == 0   ? e->s.num_waiting_reqs
                 : k == 1 ? e->s.num_running_reqs
                 : k == 2 ? e->s.kv_cache_usage
                 : k == 3 ? (double)e->s.prefix_cache_queries
                 : k == 4 ? (double)e->s.prefix_cache_hits
                 : k == 5 ? (double)e->s.num_preemptions
                 : k == 6 ? (double)e->s.encoder_cache_queries
                 : k == 7 ? (double)e->s.encoder_cache_hits
                          : (double)e->s.encoder_inputs_computed;
      ok = api_buf_printf(o, "%s{%s,engine=\"%s\"} %.17g\n", eg[k].name, label, eid, v);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return ok;
}
