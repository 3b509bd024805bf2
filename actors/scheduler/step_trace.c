/* The scheduler's spans (docs/design.md §8): per traced request a "scheduler.queue" span (arrival
 * at the scheduler → first scheduled) and, for every step the request is part of, one
 * "scheduler.step" span (planned → its outputs published) with the step number, the batch
 * size and the phase, holding a "scheduler.kv" span (the step's one KV round trip, when it
 * made one) and a "scheduler.execute" span (the worker round trip as the scheduler saw it).
 * A step serves many requests; each gets its own copy of the step's spans, so every
 * request's trace is whole. The step span's context travels to the worker in
 * ScheduledTokens.traceparent (the worker's "gpu_worker.execute" is its child).
 *
 * Everything runs on the step thread; nothing is built when tracing is off on the bus or the
 * request is not sampled. Spans are handed to the bus's exporter (a copy under a mutex). */
#include "actors/scheduler/step_trace.h"

#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/req_meta.h"
#include "actors/scheduler/scheduler.h"
#include "base/log.h"
#include "bus/span.h"

/* One step's spans, kept from planning until its outputs are published. */
struct sched_step_trace {
  uint64_t step;
  bool used;
  int64_t plan_ns, kv_start_ns, kv_end_ns, exec_send_ns, exec_recv_ns;
  int32_t num, cap;
  struct bus_span *spans; /* [cap]: one scheduler.step span per traced request */
  char (*traceparents)[BUS_TRACEPARENT_LEN + 1]; /* [cap]: their contexts, for the wire */
  const char **req_ids;   /* [cap]: borrowed from the scheduler's output, valid until encoded */
};

struct step_trace {
  struct bus *bus;
  struct sched_step_trace *steps[SCHED_TRACE_STEPS]; /* allocated on first use */
};

llb_status step_trace_create(struct bus *bus, struct step_trace **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "step trace");
  (*out)->bus = bus;
  return LLB_STATUS_OK;
}

void step_trace_request_init(struct sched_req_trace *t, const struct llb_engine_core_request *r) {
  memset(t, 0, sizeof *t);
  if (!r->traceparent.len || r->traceparent.len > BUS_TRACEPARENT_LEN) return;
  struct bus_trace_ctx ctx;
  if (bus_traceparent_parse(r->traceparent.data, &ctx) != LLB_STATUS_OK) {
    llb_err_clear(); /* hostile or broken: the request runs untraced */
    return;
  }
  if (!(ctx.flags & 0x01)) return;
  bool parent_ok = r->trace_parent_span_id.len == 16;
  for (size_t i = 0; parent_ok && i < 16; i++) {
    char c = r->trace_parent_span_id.data[i];
    parent_ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  }
  t->on = true;
  t->ctx = ctx;
  memcpy(t->traceparent, r->traceparent.data, r->traceparent.len);
  t->traceparent[r->traceparent.len] = '\0';
  if (parent_ok) memcpy(t->parent_span_id, r->trace_parent_span_id.data, 16);
  t->start_time_ns = r->trace_start_time_ns;
}

void step_trace_fill_output(const struct sched_req_trace *t, struct llb_engine_core_output *o) {
  if (!t->on) return;
  o->traceparent = llb_str_c(t->traceparent);
  o->trace_parent_span_id = llb_str_c(t->parent_span_id);
  o->trace_start_time_ns = t->start_time_ns;
}

static struct sched_step_trace *record_for(struct step_trace *t, uint64_t step) {
  for (int i = 0; i < SCHED_TRACE_STEPS; i++)
    if (t->steps[i] && t->steps[i]->used && t->steps[i]->step == step) return t->steps[i];
  return NULL;
}

/* A free record (allocated on first use); NULL when all are busy or memory is short. */
static struct sched_step_trace *free_record(struct step_trace *t) {
  for (int i = 0; i < SCHED_TRACE_STEPS; i++) {
    if (!t->steps[i]) t->steps[i] = calloc(1, sizeof *t->steps[i]);
    if (t->steps[i] && !t->steps[i]->used) return t->steps[i];
  }
  return NULL;
}

static bool record_reserve(struct sched_step_trace *r, int32_t n) {
  if (n <= r->cap) return true;
  struct bus_span *s = realloc(r->spans, (size_t)n * sizeof *s);
  if (s) r->spans = s;
  char(*t)[BUS_TRACEPARENT_LEN + 1] = realloc(r->traceparents, (size_t)n * sizeof *t);
  if (t) r->traceparents = t;
  const char **ids = realloc(r->req_ids, (size_t)n * sizeof *ids);
  if (ids) r->req_ids = ids;
  if (!s || !t || !ids) return false;
  r->cap = n;
  return true;
}

/* Opens request `id`'s step span in `r` (and records its queue span on first scheduling). */
static void open_step_span(struct step_trace *t, const struct scheduler *sched, struct sched_step_trace *r, const char *id,
                           int32_t num_tokens, int32_t num_computed, int32_t batch_size) {
  struct req_meta *m = req_meta_find(sched, id);
  if (!m || !m->trace.on || r->num >= r->cap) return;
  if (!m->trace.queue_recorded) {
    m->trace.queue_recorded = true;
    struct bus_span q;
    bus_span_begin(&q, &m->trace.ctx, "scheduler.queue", BUS_SPAN_KIND_INTERNAL);
    q.start_unix_ns = m->queued_time_ns;
    q.end_unix_ns = r->plan_ns;
    bus_span_attr_str(&q, "llmbus.request_id", id);
    bus_span_end(t->bus, &q);
  }
  struct bus_span *s = &r->spans[r->num];
  bus_span_begin(s, &m->trace.ctx, "scheduler.step", BUS_SPAN_KIND_INTERNAL);
  s->start_unix_ns = r->plan_ns;
  bus_span_attr_int(s, "llmbus.step", (int64_t)r->step);
  bus_span_attr_int(s, "llmbus.batch_size", batch_size);
  bus_span_attr_int(s, "llmbus.num_scheduled_tokens", num_tokens);
  bus_span_attr_str(s, "llmbus.phase", num_computed < m->num_prompt ? "prefill" : "decode");
  bus_span_attr_str(s, "llmbus.request_id", id);
  bus_traceparent_format(&s->ctx, r->traceparents[r->num], sizeof r->traceparents[r->num]);
  r->req_ids[r->num] = id;
  r->num++;
}

void step_trace_planned(struct step_trace *t, const struct scheduler *sched, const struct sched_output *o,
                        int64_t plan_ns, int64_t kv_start_ns, int64_t kv_end_ns) {
  if (!bus_tracing_enabled(t->bus)) return;
  const int32_t batch = o->num_new_reqs + o->num_cached_reqs;
  bool any = false;
  for (int32_t i = 0; i < o->num_new_reqs && !any; i++) {
    const struct req_meta *m = req_meta_find(sched, o->new_reqs[i].req_id);
    any = m && m->trace.on;
  }
  for (int32_t i = 0; i < o->num_cached_reqs && !any; i++) {
    const struct req_meta *m = req_meta_find(sched, o->cached_reqs[i].req_id);
    any = m && m->trace.on;
  }
  if (!any) return;
  struct sched_step_trace *r = free_record(t);
  if (!r || !record_reserve(r, batch)) return;
  r->used = true, r->step = o->step, r->num = 0;
  r->plan_ns = plan_ns, r->kv_start_ns = kv_start_ns, r->kv_end_ns = kv_end_ns;
  r->exec_send_ns = r->exec_recv_ns = 0;
  for (int32_t i = 0; i < o->num_new_reqs; i++)
    open_step_span(t, sched, r, o->new_reqs[i].req_id, o->new_reqs[i].num_scheduled_tokens,
                   o->new_reqs[i].num_computed_tokens, batch);
  for (int32_t i = 0; i < o->num_cached_reqs; i++)
    open_step_span(t, sched, r, o->cached_reqs[i].req_id, o->cached_reqs[i].num_scheduled_tokens,
                   o->cached_reqs[i].num_computed_tokens, batch);
}

void step_trace_fill_wire(struct step_trace *t, uint64_t step, struct llb_scheduled_tokens *tokens, int32_t n) {
  struct sched_step_trace *r = record_for(t, step);
  if (!r) return;
  /* both lists are in the scheduler's order (new requests, then cached): walk them together */
  int32_t k = 0;
  for (int32_t i = 0; i < n && k < r->num; i++) {
    if (tokens[i].req_id.data != r->req_ids[k] && strcmp(tokens[i].req_id.data, r->req_ids[k]) != 0) continue;
    tokens[i].traceparent = llb_str_c(r->traceparents[k++]);
  }
}

void step_trace_exec_sent(struct step_trace *t, uint64_t step) {
  struct sched_step_trace *r = record_for(t, step);
  if (r) r->exec_send_ns = llb_wall_ns();
}

void step_trace_exec_received(struct step_trace *t, uint64_t step) {
  struct sched_step_trace *r = record_for(t, step);
  if (r) r->exec_recv_ns = llb_wall_ns();
}

/* Records a child of `parent` over [start, end]. */
static void child_span(struct bus *bus, const struct bus_span *parent, const char *name,
                       enum bus_span_kind kind, int64_t start_ns, int64_t end_ns) {
  struct bus_span c;
  bus_span_begin(&c, &parent->ctx, name, kind);
  c.start_unix_ns = start_ns;
  c.end_unix_ns = end_ns;
  c.error = parent->error;
  bus_span_end(bus, &c);
}

void step_trace_steps_done(struct step_trace *t, uint64_t step, bool with_step, int64_t end_ns) {
  if (!with_step) return;
  const int64_t now = end_ns;
  for (int i = 0; i < SCHED_TRACE_STEPS; i++) {
    struct sched_step_trace *r = t->steps[i];
    if (!r || !r->used || r->step > step) continue;
    /* an older step never applied was forgotten after a failure: its spans end in error */
    const bool failed = r->step < step || r->exec_recv_ns == 0;
    for (int32_t k = 0; k < r->num; k++) {
      struct bus_span *s = &r->spans[k];
      s->error = failed;
      if (r->kv_start_ns) child_span(t->bus, s, "scheduler.kv", BUS_SPAN_KIND_CLIENT, r->kv_start_ns, r->kv_end_ns);
      if (r->exec_send_ns)
        child_span(t->bus, s, "scheduler.execute", BUS_SPAN_KIND_CLIENT, r->exec_send_ns,
                   r->exec_recv_ns ? r->exec_recv_ns : now);
      s->end_unix_ns = now;
      bus_span_end(t->bus, s);
    }
    r->used = false;
  }
}

void step_trace_destroy(struct step_trace *t) {
  if (!t) return;
  for (int i = 0; i < SCHED_TRACE_STEPS; i++) {
    struct sched_step_trace *r = t->steps[i];
    if (!r) continue;
    free(r->spans), free(r->traceparents), free(r->req_ids);
    free(r);
    t->steps[i] = NULL;
  }
  free(t);
}
