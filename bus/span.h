/* Spans of one request's trace, recorded by the actors and exported by the bus's tracer.
 *
 * A span is a plain struct on the caller's stack: bus_span_begin() gives it a new span id
 * under a parent context (same trace id and trace-flags) and a start time; the caller adds
 * attributes and passes its context (span->ctx) to the messages it sends; bus_span_end()
 * stamps the end and hands a copy to the bus's tracer, which exports it from its own thread
 * (bus/otlp_export.h). Nothing is recorded when tracing is off on the bus or when the trace's
 * sampled flag (trace-flags bit 0) is clear: W3C Trace Context §3.2.2.5, the parent decides.
 *
 * Sampling (head sampling): a trace is started where a request arrives without a valid
 * traceparent, by bus_trace_new() (also for messages that arrive without one); its sampled
 * flag is set for a fraction `ratio` of trace ids (bus_trace_set_sample_ratio, OpenTelemetry's
 * TraceIdRatioBased rule on the trace id's last 8 bytes), so every actor that later sees the
 * same trace id makes the same decision. Later actors only obey the flag.
 *
 * Names and kinds follow OpenTelemetry (SpanKind values of opentelemetry-proto trace.proto).
 * Thread-safety: a span belongs to one thread until bus_span_end(); bus_span_end() and the
 * tracing functions are thread-safe.
 */
#ifndef LLB_BUS_SPAN_H
#define LLB_BUS_SPAN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/trace.h"

struct bus;

/* opentelemetry-proto Span.SpanKind. */
enum bus_span_kind {
  BUS_SPAN_KIND_INTERNAL = 1,
  BUS_SPAN_KIND_SERVER = 2,
  BUS_SPAN_KIND_CLIENT = 3,
  BUS_SPAN_KIND_PRODUCER = 4,
  BUS_SPAN_KIND_CONSUMER = 5,
};

#define BUS_SPAN_NAME_MAX 48
#define BUS_SPAN_MAX_ATTRS 8
#define BUS_SPAN_ATTR_STR_MAX 72

/* One attribute: key is a string literal (borrowed for the process' life), value an int64
 * or a short string (truncated to BUS_SPAN_ATTR_STR_MAX - 1 bytes). */
struct bus_span_attr {
  const char *key;
  bool is_int;
  int64_t int_value;
  char str_value[BUS_SPAN_ATTR_STR_MAX];
};

/* One span. Times are wall clock, ns since the Unix epoch (OTLP's unix nanos). */
struct bus_span {
  struct bus_trace_ctx ctx;      /* this span: trace id, its own span id, trace-flags */
  char parent_span_id[17];       /* "" for a root span */
  char name[BUS_SPAN_NAME_MAX];
  enum bus_span_kind kind;
  int64_t start_unix_ns, end_unix_ns;
  bool error;                    /* Status.code ERROR when set */
  int num_attrs;
  struct bus_span_attr attrs[BUS_SPAN_MAX_ATTRS];
};

/* Starts a span named `name` under `parent` (NULL: a new root of a new trace, sampled per
 * the ratio): new span id, start = now. */
void bus_span_begin(struct bus_span *s, const struct bus_trace_ctx *parent, const char *name,
                    enum bus_span_kind kind);

/* Adds an attribute; ignored once BUS_SPAN_MAX_ATTRS are set. */
void bus_span_attr_int(struct bus_span *s, const char *key, int64_t value);
void bus_span_attr_str(struct bus_span *s, const char *key, const char *value);

/* Whether tracing is on for `bus` (bus_tracing_start made an exporter). */
bool bus_tracing_enabled(const struct bus *bus);

/* Whether spans of this context would be recorded on `bus` (tracing on, sampled flag set):
 * lets a caller skip the work of building spans nobody keeps. */
bool bus_span_recording(const struct bus *bus, const struct bus_trace_ctx *ctx);

/* Ends the span now (unless end_unix_ns was set already) and records it on `bus`'s tracer
 * when bus_span_recording(). Never blocks: a full queue drops the span and counts it. */
void bus_span_end(struct bus *bus, struct bus_span *s);

/* Tracing options of one actor. Strings are copied by bus_tracing_start. */
struct bus_tracing_options {
  const char *otlp_endpoint;   /* "http://host:port" (POST <endpoint>/v1/traces); NULL = none */
  bool publish;                /* also publish each batch on "<prefix>.trace.<service_name>" */
  const char *service_name;    /* resource service.name: the actor's name */
  const char *instance;        /* resource service.instance.id */
  const char *engine_id;       /* resource llmbus.engine_id */
  int queue_capacity;          /* spans held at most before dropping; default 8192 */
  int max_batch;               /* spans per export at most; default 512 */
  int64_t flush_interval_ms;   /* export at least this often while spans wait; default 200 */
  int64_t export_timeout_ms;   /* one HTTP POST at most; default 2000 */
};

/* Fills the defaults above (no endpoint, no publish). */
void bus_tracing_options_init(struct bus_tracing_options *o);

/* Turns tracing on for `bus`: starts the exporter thread (bus/otlp_export.h). Does nothing
 * and returns OK when there is neither an endpoint nor publish. Errors: INVALID_ARGUMENT
 * (endpoint not an http:// URL, bad sizes), OUT_OF_MEMORY, INTERNAL (thread). The tracer is
 * flushed and stopped by bus_destroy(). Call it once, before handlers record spans. */
llb_status bus_tracing_start(struct bus *bus, const struct bus_tracing_options *o);

/* Counters of the bus's exporter (all 0 when tracing is off). */
struct bus_tracing_stats {
  uint64_t recorded;     /* spans accepted into the queue */
  uint64_t dropped;      /* spans dropped: queue full */
  uint64_t exported;     /* spans the collector accepted (HTTP 2xx) */
  uint64_t export_failed;/* spans in batches the collector refused or never answered */
  uint64_t published;    /* spans published on the trace subject */
};
void bus_tracing_get_stats(const struct bus *bus, struct bus_tracing_stats *out);

#endif
