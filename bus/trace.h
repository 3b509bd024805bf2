/* W3C Trace Context (`traceparent`) for bus messages.
 *
 * Every message the bus publishes carries a `traceparent` header:
 *
 *   00-<trace-id: 32 lowercase hex>-<parent-id: 16 lowercase hex>-<trace-flags: 2 hex>
 *
 * Source followed: W3C Trace Context, Level 1 (https://www.w3.org/TR/trace-context/), §3.2.
 * Validation follows the spec: version 00 only is parsed strictly (exactly 55 characters);
 * a higher version is accepted when its first four fields have the version-00 shape; version
 * ff, an all-zero trace-id or parent-id, upper-case or non-hex characters make it invalid.
 * An invalid or missing header starts a new trace (random ids, version 00, flags 01).
 *
 * Model: a `struct bus_trace_ctx` is "the span that sends". A handler receives the sender's
 * context (msg->trace), derives its own span with bus_trace_child() (same trace-id, new
 * span-id) and passes that to the calls it makes; the bus puts it on the wire unchanged.
 *
 * Thread-safety: all functions are reentrant; random ids come from a per-thread xoshiro256**
 * generator seeded by getrandom(2).
 */
#ifndef LLB_BUS_TRACE_H
#define LLB_BUS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Header name, lower case as the W3C spec writes it. */
#define BUS_TRACEPARENT_HEADER "traceparent"
/* Length of a version-00 traceparent without the terminating NUL. */
#define BUS_TRACEPARENT_LEN 55

/* One span's identity in a trace. Ids are lowercase hex strings, NUL-terminated. */
struct bus_trace_ctx {
  char trace_id[33]; /* 32 hex digits, never all zero */
  char span_id[17];  /* 16 hex digits, never all zero */
  uint8_t flags;     /* trace-flags; bit 0 = sampled */
};

/* Fills `out` with a new trace: random trace-id and span-id, flags 01 (sampled) when the
 * trace id falls in the process' sample ratio (bus_trace_set_sample_ratio; default 1.0:
 * always), else 00. */
void bus_trace_new(struct bus_trace_ctx *out);

/* Head sampling for the traces this process starts, ratio in [0, 1]; values outside are
 * clamped. OpenTelemetry's TraceIdRatioBased rule: sampled when the trace id's last 8 bytes,
 * as a big-endian number, are below ratio * 2^64, so every process decides a trace id alike.
 * Thread-safe (atomic). */
void bus_trace_set_sample_ratio(double ratio);

/* Whether trace id `trace_id` (32 hex digits) is sampled at `ratio` by the rule above. */
bool bus_trace_id_sampled(const char *trace_id, double ratio);

/* Derives a child span of `parent`: same trace-id and flags, a new random span-id.
 * `child` may alias `parent`. */
void bus_trace_child(const struct bus_trace_ctx *parent, struct bus_trace_ctx *child);

/* Parses a traceparent header value into `out`. Returns LLB_STATUS_MALFORMED (with the
 * reason) when `s` is NULL or not a valid traceparent per the spec; `out` is untouched then. */
llb_status bus_traceparent_parse(const char *s, struct bus_trace_ctx *out);

/* Writes the version-00 header value of `t` into `buf` (at least BUS_TRACEPARENT_LEN + 1
 * bytes): "00-<trace-id>-<span-id>-<flags>". Returns `buf`. */
char *bus_traceparent_format(const struct bus_trace_ctx *t, char *buf, size_t cap);

#endif
