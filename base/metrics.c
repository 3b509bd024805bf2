/* Prometheus registry and text exposition (see metrics.h). */
#include "base/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics_text.h"

#define METRICS_MAX_FAMILIES 256
#define METRICS_MAX_HOOKS 8
#define METRICS_VALUE_MAX 128
#define METRICS_CONST_VALUE_MAX 256 /* a served model's name (model_name) fits */

struct llb_series {
  struct llb_metric *family;
  char values[LLB_METRICS_MAX_LABELS][METRICS_VALUE_MAX];
  _Atomic uint64_t value_bits; /* counter / gauge: a double's bits */
  _Atomic uint64_t sum_bits;   /* histogram: a double's bits */
  _Atomic uint64_t count;      /* histogram */
  _Atomic uint64_t buckets[LLB_METRICS_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last +Inf */
};

struct llb_metric {
  struct llb_metrics *registry;
  enum llb_metric_type type;
  char *name, *help;
  int num_labels;
  char *labels[LLB_METRICS_MAX_LABELS];
  double bounds[LLB_METRICS_MAX_BUCKETS];
  int num_bounds;
  struct llb_series *series[LLB_METRICS_MAX_SERIES + 1]; /* the last slot: the overflow series */
  int num_series;                                         /* under the registry's mutex */
};

struct llb_metrics {
  pthread_mutex_t mu;
  struct llb_metric *families[METRICS_MAX_FAMILIES];
  int num_families;
  char const_labels[LLB_METRICS_MAX_CONST_LABELS][2][METRICS_CONST_VALUE_MAX];
  int num_const_labels;
  struct {
    llb_metrics_collect_fn fn;
    void *user;
  } hooks[METRICS_MAX_HOOKS];
  int num_hooks;
};

static double bits_to_double(uint64_t b) {
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

static uint64_t double_to_bits(double d) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
}

static void atomic_add_double(_Atomic uint64_t *a, double v) {
  uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
  while (!atomic_compare_exchange_weak(a, &old, double_to_bits(bits_to_double(old) + v))) {
  }
}

llb_status llb_metrics_create(struct llb_metrics **out) {
  struct llb_metrics *r = calloc(1, sizeof *r);
  if (!r) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics registry: out of memory");
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return LLB_STATUS_OK;
}

static void family_free(struct llb_metric *m) {
  if (!m) return;
  for (int i = 0; i <= LLB_METRICS_MAX_SERIES; i++) free(m->series[i]);
  for (int i = 0; i < m->num_labels; i++) free(m->labels[i]);
  free(m->name);
  free(m->help);
  free(m);
}

void llb_metrics_destroy(struct llb_metrics *r) {
  if (!r) return;
  for (int i = 0; i < r->num_families; i++) family_free(r->families[i]);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static bool name_valid(const char *s, bool colon) {
  if (!s || !*s) return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
    if (!alpha && !(p != s && c >= '0' && c <= '9')) return false;
  }
  return true;
}

llb_status llb_metrics_add_const_label(struct llb_metrics *r, const char *name, const char *value) {
  pthread_mutex_lock(&r->mu);
  llb_status st = LLB_STATUS_OK;
  if (!name_valid(name, false) || !value)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: bad constant label '%s'", name ? name : "(null)");
  else if (r->num_const_labels >= LLB_METRICS_MAX_CONST_LABELS || r->num_families > 0)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: constant label '%s' too late or too many", name);
  if (st == LLB_STATUS_OK) {
    snprintf(r->const_labels[r->num_const_labels][0], METRICS_CONST_VALUE_MAX, "%s", name);
    snprintf(r->const_labels[r->num_const_labels][1], METRICS_CONST_VALUE_MAX, "%s", value);
    r->num_const_labels++;
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

llb_status llb_metrics_on_collect(struct llb_metrics *r, llb_metrics_collect_fn fn, void *user) {
  pthread_mutex_lock(&r->mu);
  llb_status st = LLB_STATUS_OK;
  if (!fn || r->num_hooks >= METRICS_MAX_HOOKS)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: at most %d collect hooks", METRICS_MAX_HOOKS);
  else
    r->hooks[r->num_hooks].fn = fn, r->hooks[r->num_hooks++].user = user;
  pthread_mutex_unlock(&r->mu);
  return st;
}

static bool same_shape(const struct llb_metric *m, enum llb_metric_type type, const double *bounds,
                       int num_bounds, int num_labels, const char *const *labels) {
  if (m->type != type || m->num_labels != num_labels || m->num_bounds != num_bounds) return false;
  for (int i = 0; i < num_labels; i++)
    if (strcmp(m->labels[i], labels[i]) != 0) return false;
  for (int i = 0; i < num_bounds; i++)
    if (m->bounds[i] != bounds[i]) return false;
  return true;
}

static llb_status check_family(const char *name, const double *bounds, int num_bounds, int num_labels,
                               const char *const *labels) {
  if (!name_valid(name, true)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: bad name '%s'", name ? name : "");
  if (num_labels < 0 || num_labels > LLB_METRICS_MAX_LABELS || (num_labels && !labels))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: %s: 0..%d labels", name, LLB_METRICS_MAX_LABELS);
  for (int i = 0; i < num_labels; i++)
    if (!name_valid(labels[i], false) || strcmp(labels[i], "le") == 0)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: %s: bad label name", name);
  if (num_bounds < 0 || num_bounds > LLB_METRICS_MAX_BUCKETS || (num_bounds && !bounds))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: %s: 0..%d buckets", name, LLB_METRICS_MAX_BUCKETS);
  for (int i = 0; i < num_bounds; i++)
    if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: %s: bucket bounds must ascend, finite", name);
  return LLB_STATUS_OK;
}

static struct llb_series *series_new(struct llb_metric *m, const char *const *values);

static struct llb_metric *family_new(enum llb_metric_type type, const char *name, const char *help,
                                     const double *bounds, int num_bounds, int num_labels,
                                     const char *const *labels) {
  struct llb_metric *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->type = type;
  m->name = strdup(name);
  m->help = strdup(help ? help : "");
  bool ok = m->name && m->help;
  m->num_labels = num_labels;
  for (int i = 0; i < num_labels; i++) ok = (m->labels[i] = strdup(labels[i])) && ok;
  m->num_bounds = num_bounds;
  if (num_bounds) memcpy(m->bounds, bounds, (size_t)num_bounds * sizeof *bounds);
  if (!ok) {
    family_free(m);
    return NULL;
  }
  return m;
}

static struct llb_metric *family_get(struct llb_metrics *r, enum llb_metric_type type, const char *name,
                                     const char *help, const double *bounds, int num_bounds, int num_labels,
                                     const char *const *labels) {
  if (!r || check_family(name, bounds, num_bounds, num_labels, labels) != LLB_STATUS_OK) return NULL;
  pthread_mutex_lock(&r->mu);
  struct llb_metric *m = NULL;
  for (int i = 0; i < r->num_families && !m; i++)
    if (strcmp(r->families[i]->name, name) == 0) m = r->families[i];
  if (m && !same_shape(m, type, bounds, num_bounds, num_labels, labels)) {
    LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics: %s registered twice with different shapes", name);
    m = NULL;
  } else if (!m && r->num_families >= METRICS_MAX_FAMILIES) {
    LLB_ERRF(LLB_STATUS_QUEUE_FULL, "metrics: more than %d families", METRICS_MAX_FAMILIES);
  } else if (!m) {
    m = family_new(type, name, help, bounds, num_bounds, num_labels, labels);
    /* an unlabelled family has its one series from the start: it renders 0, not nothing */
    if (m && num_labels == 0 && !(m->series[m->num_series++] = series_new(m, NULL))) {
      family_free(m);
      m = NULL;
    }
    if (m) {
      m->registry = r;
      r->families[r->num_families++] = m;
    } else {
      LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics: %s: out of memory", name);
    }
  }
  pthread_mutex_unlock(&r->mu);
  return m;
}

struct llb_metric *llb_metrics_counter(struct llb_metrics *r, const char *name, const char *help,
                                       int num_labels, const char *const *label_names) {
  return family_get(r, LLB_METRIC_TYPE_COUNTER, name, help, NULL, 0, num_labels, label_names);
}

struct llb_metric *llb_metrics_gauge(struct llb_metrics *r, const char *name, const char *help,
                                     int num_labels, const char *const *label_names) {
  return family_get(r, LLB_METRIC_TYPE_GAUGE, name, help, NULL, 0, num_labels, label_names);
}

struct llb_metric *llb_metrics_histogram(struct llb_metrics *r, const char *name, const char *help,
                                         const double *bounds, int num_bounds, int num_labels,
                                         const char *const *label_names) {
  return family_get(r, LLB_METRIC_TYPE_HISTOGRAM, name, help, bounds, num_bounds, num_labels, label_names);
}

static bool series_matches(const struct llb_series *s, int n, const char *const *values) {
  for (int i = 0; i < n; i++)
    if (strncmp(s->values[i], values[i] ? values[i] : "", METRICS_VALUE_MAX - 1) != 0) return false;
  return true;
}

static struct llb_series *series_new(struct llb_metric *m, const char *const *values) {
  struct llb_series *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->family = m;
  for (int i = 0; i < m->num_labels; i++)
    snprintf(s->values[i], METRICS_VALUE_MAX, "%s", values ? (values[i] ? values[i] : "") : "other");
  return s;
}

struct llb_series *llb_metric_series(struct llb_metric *m, const char *const *label_values) {
  if (!m) return NULL;
  if (m->num_labels > 0 && !label_values) return NULL;
  struct llb_metrics *r = m->registry;
  pthread_mutex_lock(&r->mu);
  struct llb_series *s = NULL;
  for (int i = 0; i < m->num_series && !s; i++)
    if (series_matches(m->series[i], m->num_labels, label_values)) s = m->series[i];
  if (!s && m->num_series < LLB_METRICS_MAX_SERIES) {
    s = series_new(m, label_values);
    if (s) m->series[m->num_series++] = s;
  } else if (!s) { /* full: fold into the overflow series */
    if (!m->series[LLB_METRICS_MAX_SERIES]) m->series[LLB_METRICS_MAX_SERIES] = series_new(m, NULL);
    s = m->series[LLB_METRICS_MAX_SERIES];
  }
  pthread_mutex_unlock(&r->mu);
  return s;
}

void llb_series_add(struct llb_series *s, double v) {
  if (!s || isnan(v)) return;
  if (s->family->type == LLB_METRIC_TYPE_COUNTER && v < 0) return;
  if (s->family->type == LLB_METRIC_TYPE_HISTOGRAM) return;
  atomic_add_double(&s->value_bits, v);
}

void llb_series_set(struct llb_series *s, double v) {
  if (!s || s->family->type == LLB_METRIC_TYPE_HISTOGRAM) return;
  if (s->family->type == LLB_METRIC_TYPE_GAUGE) {
    atomic_store(&s->value_bits, double_to_bits(v));
    return;
  }
  uint64_t old = atomic_load(&s->value_bits);
  while (!isnan(v) && v > bits_to_double(old) &&
         !atomic_compare_exchange_weak(&s->value_bits, &old, double_to_bits(v))) {
  }
}

void llb_series_observe_n(struct llb_series *s, double v, uint64_t n) {
  if (!s || isnan(v) || n == 0 || s->family->type != LLB_METRIC_TYPE_HISTOGRAM) return;
  const struct llb_metric *m = s->family;
  int i = 0;
  while (i < m->num_bounds && v > m->bounds[i]) i++;
  atomic_fetch_add(&s->buckets[i], n);
  atomic_add_double(&s->sum_bits, v * (double)n);
  atomic_fetch_add(&s->count, n);
}

void llb_series_observe(struct llb_series *s, double v) { llb_series_observe_n(s, v, 1); }

double llb_series_value(const struct llb_series *s) {
  if (!s) return 0;
  if (s->family->type == LLB_METRIC_TYPE_HISTOGRAM) return (double)atomic_load(&s->count);
  return bits_to_double(atomic_load(&((struct llb_series *)s)->value_bits));
}

/* ---- rendering ---- */

static void text_value(struct llb_text *t, double v) {
  if (isnan(v)) llb_text_printf(t, "NaN");
  else if (isinf(v)) llb_text_printf(t, v > 0 ? "+Inf" : "-Inf");
  else llb_text_printf(t, "%.17g", v);
}

/* {const labels, family labels[, le="..."]}; nothing when there is no label at all. */
static void text_labels(struct llb_text *t, const struct llb_metrics *r, const struct llb_series *s, const char *le) {
  const struct llb_metric *m = s->family;
  if (r->num_const_labels + m->num_labels == 0 && !le) return;
  llb_text_printf(t, "{");
  const char *sep = "";
  for (int i = 0; i < r->num_const_labels; i++, sep = ",") {
    llb_text_printf(t, "%s%s=\"", sep, r->const_labels[i][0]);
    llb_text_escaped(t, r->const_labels[i][1], false);
    llb_text_printf(t, "\"");
  }
  for (int i = 0; i < m->num_labels; i++, sep = ",") {
    llb_text_printf(t, "%s%s=\"", sep, m->labels[i]);
    llb_text_escaped(t, s->values[i], false);
    llb_text_printf(t, "\"");
  }
  if (le) llb_text_printf(t, "%sle=\"%s\"", sep, le);
  llb_text_printf(t, "}");
}

static void render_series(struct llb_text *t, const struct llb_metrics *r, struct llb_series *s) {
  const struct llb_metric *m = s->family;
  if (m->type != LLB_METRIC_TYPE_HISTOGRAM) {
    llb_text_printf(t, "%s", m->name);
    text_labels(t, r, s, NULL);
    llb_text_printf(t, " ");
    text_value(t, bits_to_double(atomic_load(&s->value_bits)));
    llb_text_printf(t, "\n");
    return;
  }
  uint64_t cum = 0;
  for (int i = 0; i <= m->num_bounds; i++) {
    char le[40];
    if (i < m->num_bounds) snprintf(le, sizeof le, "%.15g", m->bounds[i]);
    else snprintf(le, sizeof le, "+Inf");
    cum += atomic_load(&s->buckets[i]);
    llb_text_printf(t, "%s_bucket", m->name);
    text_labels(t, r, s, le);
    llb_text_printf(t, " %llu\n", (unsigned long long)cum);
  }
  llb_text_printf(t, "%s_sum", m->name);
  text_labels(t, r, s, NULL);
  llb_text_printf(t, " ");
  text_value(t, bits_to_double(atomic_load(&s->sum_bits)));
  /* the count is the +Inf bucket, so the two always agree in one exposition */
  llb_text_printf(t, "\n%s_count", m->name);
  text_labels(t, r, s, NULL);
  llb_text_printf(t, " %llu\n", (unsigned long long)cum);
}

static const char *type_name(enum llb_metric_type t) {
  return t == LLB_METRIC_TYPE_COUNTER ? "counter" : t == LLB_METRIC_TYPE_GAUGE ? "gauge" : "histogram";
}

llb_status llb_metrics_render(struct llb_metrics *r, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  pthread_mutex_lock(&r->mu);
  int num_hooks = r->num_hooks;
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < num_hooks; i++) r->hooks[i].fn(r, r->hooks[i].user);
  struct llb_text t = {0};
  llb_text_append(&t, "", 0); /* an empty registry renders as "" */
  pthread_mutex_lock(&r->mu);
  for (int f = 0; f < r->num_families; f++) {
    struct llb_metric *m = r->families[f];
    llb_text_printf(&t, "# HELP %s ", m->name);
    llb_text_escaped(&t, m->help, true);
    llb_text_printf(&t, "\n# TYPE %s %s\n", m->name, type_name(m->type));
    for (int i = 0; i < m->num_series; i++) render_series(&t, r, m->series[i]);
    if (m->series[LLB_METRICS_MAX_SERIES]) render_series(&t, r, m->series[LLB_METRICS_MAX_SERIES]);
  }
  pthread_mutex_unlock(&r->mu);
  if (t.oom) {
    free(t.data);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "metrics: out of memory rendering");
  }
  *text = t.data;
  *len = t.len;
  return LLB_STATUS_OK;
}

/* ---- buckets (vLLM vllm/v1/metrics/loggers.py) ---- */

static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,   0.25,  0.5,    0.75,
                                      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double latency_buckets[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

const double *llb_metrics_buckets_ttft(int *num) {
  *num = (int)(sizeof ttft_buckets / sizeof ttft_buckets[0]);
  return ttft_buckets;
}

const double *llb_metrics_buckets_itl(int *num) {
  *num = (int)(sizeof itl_buckets / sizeof itl_buckets[0]);
  return itl_buckets;
}

const double *llb_metrics_buckets_request_latency(int *num) {
  *num = (int)(sizeof latency_buckets / sizeof latency_buckets[0]);
  return latency_buckets;
}

int llb_metrics_buckets_1_2_5(double max, double *out, int cap) {
  int n = 0;
  for (double e = 1; n < cap; e *= 10)
    for (int k = 0; k < 3 && n < cap; k++) {
      double v = e * (k == 0 ? 1 : k == 1 ? 2 : 5);
      if (v > max) return n;
      out[n++] = v;
    }
  return n;
}
