/* Prometheus metrics: a registry of counters, gauges and fixed-bucket histograms with labels,
 * rendered in the Prometheus text exposition format 0.0.4.
 *
 * A registry (llb_metrics) holds families; a family (llb_metric) has a name, a help line, a
 * type and up to LLB_METRICS_MAX_LABELS label names; a series (llb_series) is one family
 * child for one tuple of label values. Hot paths look a series up once and keep the pointer:
 * series live as long as the registry. A family holds at most LLB_METRICS_MAX_SERIES series;
 * label values beyond that (hostile input, an unbounded subject) fold into one series whose
 * values are all "other", so cardinality stays bounded.
 *
 * Values are C11 atomics (doubles stored as their bits, updated by compare-and-swap):
 * inc/set/observe are lock-free and callable from any thread. Family and series creation
 * take the registry's mutex. Rendering reads each atomic once; a histogram's buckets, sum and
 * count may be caught mid-update (as in client_golang), never torn.
 *
 * Format followed: https://prometheus.io/docs/instrumenting/exposition_formats/ (text 0.0.4:
 * "# HELP name text", "# TYPE name type", name{label="value"} value; histograms as cumulative
 * name_bucket{le="..."} ending with le="+Inf", then name_sum and name_count; label values
 * escape \\, \" and \n; help escapes \\ and \n).
 */
#ifndef LLB_BASE_METRICS_H
#define LLB_BASE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLB_METRICS_MAX_LABELS 4
#define LLB_METRICS_MAX_SERIES 128
#define LLB_METRICS_MAX_BUCKETS 32
#define LLB_METRICS_MAX_CONST_LABELS 4

enum llb_metric_type {
  LLB_METRIC_TYPE_COUNTER,
  LLB_METRIC_TYPE_GAUGE,
  LLB_METRIC_TYPE_HISTOGRAM,
};

struct llb_metrics; /* a registry */
struct llb_metric;  /* a family */
struct llb_series;  /* one labelled child of a family */

/* Called by llb_metrics_render before anything is written: refreshes gauges computed on
 * demand (process metrics, a queue length). Runs on the rendering thread. */
typedef void (*llb_metrics_collect_fn)(struct llb_metrics *r, void *user);

/* Creates an empty registry. *out: llb_metrics_destroy. OUT_OF_MEMORY. */
llb_status llb_metrics_create(struct llb_metrics **out);

/* Frees the registry, its families and series. NULL ok. No other call may run concurrently. */
void llb_metrics_destroy(struct llb_metrics *r);

/* Adds a label written on every series of the registry (engine="0", model_name="<served id>"),
 * before the family's own. `name` and `value` are copied (at most 255 bytes each, longer ones
 * cut). INVALID_ARGUMENT: bad name, more than
 * LLB_METRICS_MAX_CONST_LABELS, or a family already registered. */
llb_status llb_metrics_add_const_label(struct llb_metrics *r, const char *name, const char *value);

/* Adds a collect hook (at most 8); `user` must outlive the registry. */
llb_status llb_metrics_on_collect(struct llb_metrics *r, llb_metrics_collect_fn fn, void *user);

/* Registers a family, or returns the one of that name when its type, labels and buckets
 * match (so two modules may share a family). `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*,
 * labels [a-zA-Z_][a-zA-Z0-9_]* (not "le"); `label_names` [num_labels]; histogram `bounds`
 * [num_bounds] strictly ascending, finite (the +Inf bucket is implicit). Strings are copied.
 * A family without labels has its one series from the start (it renders 0 until updated).
 * Returns NULL with an error recorded (LLB_ERRF) when invalid or out of memory. */
struct llb_metric *llb_metrics_counter(struct llb_metrics *r, const char *name, const char *help,
                                       int num_labels, const char *const *label_names);
struct llb_metric *llb_metrics_gauge(struct llb_metrics *r, const char *name, const char *help,
                                     int num_labels, const char *const *label_names);
struct llb_metric *llb_metrics_histogram(struct llb_metrics *r, const char *name, const char *help,
                                         const double *bounds, int num_bounds, int num_labels,
                                         const char *const *label_names);

/* The series of `m` for label_values [m's num_labels] (NULL when it has none), created on
 * first use; values are copied (at most 127 bytes each, longer ones cut). Past
 * LLB_METRICS_MAX_SERIES it returns the overflow series (every value "other"). NULL only when
 * m is NULL or memory runs out. */
struct llb_series *llb_metric_series(struct llb_metric *m, const char *const *label_values);

/* Counter: adds v (>= 0; negative and NaN ignored). Gauge: adds v (any sign). */
void llb_series_add(struct llb_series *s, double v);
/* Gauge: sets v. Counter: sets v when it mirrors a monotonic source (a cumulative count kept
 * elsewhere); a smaller value is ignored. */
void llb_series_set(struct llb_series *s, double v);
/* Histogram: counts v in the first bucket whose upper bound is >= v (le), adds it to the sum. */
void llb_series_observe(struct llb_series *s, double v);
/* Histogram: n observations of the same v at once (n tokens that arrived after one gap share
 * it): n into v's bucket and the count, n * v into the sum. n = 0 or NaN: nothing. */
void llb_series_observe_n(struct llb_series *s, double v, uint64_t n);
/* Current value (counter or gauge) or count (histogram). NULL: 0. */
double llb_series_value(const struct llb_series *s);

/* Writes the whole exposition (collect hooks first) into a malloc'd NUL-terminated buffer:
 * *text (caller frees), *len bytes without the NUL. OUT_OF_MEMORY. */
llb_status llb_metrics_render(struct llb_metrics *r, char **text, size_t *len);

/* Bucket bounds shared by the engine's histograms (seconds / tokens), as vLLM's
 * vllm/v1/metrics/loggers.py: [*num] entries each. */
const double *llb_metrics_buckets_ttft(int *num);
const double *llb_metrics_buckets_itl(int *num);
const double *llb_metrics_buckets_request_latency(int *num);
/* Powers 1, 2, 5 times 10^k up to max (vLLM build_1_2_5_buckets), into out[cap]; returns the count. */
int llb_metrics_buckets_1_2_5(double max, double *out, int cap);

/* Process metrics as client_golang's process collector: process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_start_time_seconds,
 * process_open_fds, process_max_fds, read from /proc/self at each render (Linux; elsewhere the
 * series stay 0). One registry per process: the series it refreshes are kept in one static
 * set (a second call moves the refresh to the new registry). Errors: those of family
 * registration. */
llb_status llb_metrics_register_process(struct llb_metrics *r);

#ifdef __cplusplus
}
#endif

#endif
