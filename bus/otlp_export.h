/* OTLP/HTTP JSON span exporter: a bounded queue drained by one background thread.
 *
 * Spans enter with otlp_exporter_enqueue() (a copy under a mutex, never blocking: a full
 * queue drops the span and counts it). The exporter's thread takes up to max_batch spans
 * whenever that many wait or flush_interval_ms passed, encodes them as one
 * ExportTraceServiceRequest in the OTLP JSON encoding and POSTs it to <endpoint>/v1/traces
 * (libevent's evhttp client on the thread's own event base, export_timeout_ms per request;
 * a batch that fails is counted and dropped, not retried, so a slow or absent collector
 * costs the actor nothing but those spans), and/or hands the same JSON to a publish
 * callback (the bus puts it on <prefix>.trace.<actor>).
 *
 * Source followed: OpenTelemetry Protocol spec 1.x, "OTLP/HTTP" (POST /v1/traces,
 * Content-Type application/json) and "JSON Protobuf Encoding" (lowerCamelCase field names,
 * trace and span ids as hex strings, 64-bit integers as decimal strings, enums as numbers);
 * opentelemetry-proto trace/v1/trace.proto and collector/trace/v1/trace_service.proto.
 */
#ifndef LLB_BUS_OTLP_EXPORT_H
#define LLB_BUS_OTLP_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bus/span.h"

struct otlp_exporter;

/* Called on the exporter thread with one batch's JSON (valid for the call); returns whether
 * it was published (the spans count as published). */
typedef bool (*otlp_publish_fn)(void *user, const char *json, size_t len);

struct otlp_exporter_config {
  const char *endpoint;        /* "http://host[:port][/base]"; NULL = HTTP export off */
  const char *service_name;    /* resource service.name, required */
  const char *instance;        /* resource service.instance.id, may be NULL */
  const char *engine_id;       /* resource llmbus.engine_id, may be NULL */
  int queue_capacity;          /* >= 1 */
  int max_batch;               /* >= 1 */
  int64_t flush_interval_ms;   /* >= 1 */
  int64_t export_timeout_ms;   /* >= 1 */
  otlp_publish_fn publish;     /* NULL = none */
  void *publish_user;
};

/* Validates the config, allocates the queue and starts the thread. Strings are copied.
 * Errors: INVALID_ARGUMENT (endpoint not http://host..., sizes), OUT_OF_MEMORY, INTERNAL.
 * On success *out is the caller's: otlp_exporter_destroy(). */
llb_status otlp_exporter_create(const struct otlp_exporter_config *cfg, struct otlp_exporter **out);

/* Stops the thread after one last export of what is queued, logs one tracing_stopped line
 * with the counters, then frees. NULL ok. */
void otlp_exporter_destroy(struct otlp_exporter *e);

/* Copies `s` into the queue; false when it was full (the span is dropped and counted).
 * Thread-safe, never blocks on I/O. */
bool otlp_exporter_enqueue(struct otlp_exporter *e, const struct bus_span *s);

/* The exporter's counters (bus/span.h's struct); thread-safe. */
void otlp_exporter_get_stats(struct otlp_exporter *e, struct bus_tracing_stats *out);

/* Encodes spans[n] (n >= 1) as one ExportTraceServiceRequest in OTLP JSON with the resource
 * of `cfg` into a malloc'ed NUL-terminated string *json (caller frees) of *len bytes.
 * Errors: OUT_OF_MEMORY. Exposed for tests. */
llb_status otlp_encode_json(const struct otlp_exporter_config *cfg, const struct bus_span *spans, int n,
                            char **json, size_t *len);

#endif
