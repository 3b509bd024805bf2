/* Spans and the bus's tracer; see span.h. */
#include "bus/span.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "bus/bus.h"
#include "bus/bus_internal.h"
#include "bus/otlp_export.h"
#include "bus/subject.h"

void bus_span_begin(struct bus_span *s, const struct bus_trace_ctx *parent, const char *name,
                    enum bus_span_kind kind) {
  memset(s, 0, sizeof *s);
  if (parent) {
    bus_trace_child(parent, &s->ctx);
    memcpy(s->parent_span_id, parent->span_id, sizeof s->parent_span_id);
  } else {
    bus_trace_new(&s->ctx);
  }
  snprintf(s->name, sizeof s->name, "%s", name);
  s->kind = kind;
  s->start_unix_ns = llb_wall_ns();
}

void bus_span_attr_int(struct bus_span *s, const char *key, int64_t value) {
  if (s->num_attrs >= BUS_SPAN_MAX_ATTRS) return;
  struct bus_span_attr *a = &s->attrs[s->num_attrs++];
  a->key = key, a->is_int = true, a->int_value = value;
}

void bus_span_attr_str(struct bus_span *s, const char *key, const char *value) {
  if (s->num_attrs >= BUS_SPAN_MAX_ATTRS) return;
  struct bus_span_attr *a = &s->attrs[s->num_attrs++];
  a->key = key, a->is_int = false;
  snprintf(a->str_value, sizeof a->str_value, "%s", value ? value : "");
}

bool bus_tracing_enabled(const struct bus *bus) {
  return bus && atomic_load(&((struct bus *)bus)->tracer) != NULL;
}

bool bus_span_recording(const struct bus *bus, const struct bus_trace_ctx *ctx) {
  return bus && ctx && (ctx->flags & 0x01) && atomic_load(&((struct bus *)bus)->tracer) != NULL;
}

void bus_span_end(struct bus *bus, struct bus_span *s) {
  if (!s->end_unix_ns) s->end_unix_ns = llb_wall_ns();
  if (s->end_unix_ns < s->start_unix_ns) s->end_unix_ns = s->start_unix_ns;
  if (!bus_span_recording(bus, &s->ctx)) return;
  (void)otlp_exporter_enqueue(atomic_load(&bus->tracer), s);
}

void bus_tracing_options_init(struct bus_tracing_options *o) {
  memset(o, 0, sizeof *o);
  o->queue_capacity = 8192;
  o->max_batch = 512;
  o->flush_interval_ms = 200;
  o->export_timeout_ms = 2000;
}

/* Runs on the exporter thread; a failure is counted by the exporter (not published). */
static bool publish_batch(void *user, const char *json, size_t len) {
  struct bus *b = user;
  if (atomic_load(&b->trace_publish_closed)) return false;
  return bus_publish(b, b->trace_subject, json, len, NULL) == LLB_STATUS_OK;
}

llb_status bus_tracing_start(struct bus *bus, const struct bus_tracing_options *o) {
  if (!o->otlp_endpoint && !o->publish) return LLB_STATUS_OK;
  if (atomic_load(&bus->tracer)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tracing already started");
  if (!o->service_name || !bus_token_valid(o->service_name))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tracing: service name must be one subject token");
  llb_status st = bus_subject_trace(bus->prefix, o->service_name, bus->trace_subject, sizeof bus->trace_subject);
  if (st != LLB_STATUS_OK) return st;
  struct otlp_exporter_config cfg = {
      .endpoint = o->otlp_endpoint,
      .service_name = o->service_name,
      .instance = o->instance,
      .engine_id = o->engine_id,
      .queue_capacity = o->queue_capacity,
      .max_batch = o->max_batch,
      .flush_interval_ms = o->flush_interval_ms,
      .export_timeout_ms = o->export_timeout_ms,
      .publish = o->publish ? publish_batch : NULL,
      .publish_user = bus,
  };
  struct otlp_exporter *e = NULL;
  st = otlp_exporter_create(&cfg, &e);
  if (st != LLB_STATUS_OK) return st;
  atomic_store(&bus->tracer, e);
  LLB_LOG_INFO("tracing_started", "otlp_endpoint=%s publish=%s queue=%d batch=%d flush_ms=%lld",
               o->otlp_endpoint ? o->otlp_endpoint : "none", o->publish ? bus->trace_subject : "no",
               o->queue_capacity, o->max_batch, (long long)o->flush_interval_ms);
  return LLB_STATUS_OK;
}

void bus_tracing_get_stats(const struct bus *bus, struct bus_tracing_stats *out) {
  memset(out, 0, sizeof *out);
  struct otlp_exporter *e = bus ? atomic_load(&((struct bus *)bus)->tracer) : NULL;
  if (e) otlp_exporter_get_stats(e, out);
}

void bus_tracing_close_publish(struct bus *b) { atomic_store(&b->trace_publish_closed, true); }

void bus_tracing_stop(struct bus *b) {
  struct otlp_exporter *e = atomic_exchange(&b->tracer, NULL);
  if (!e) return;
  otlp_exporter_destroy(e); /* one last export of what is queued; logs its counters */
}
