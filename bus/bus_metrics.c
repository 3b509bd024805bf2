/* The bus histograms (bus_options.metrics; see bus.h and bus_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "bus/bus_internal.h"

/* Loopback NATS hops are 0.05-0.5 ms; a step's round trip to the worker up to seconds. */
static const double bus_buckets[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                     0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,
                                     10.0,    30.0,   60.0};

void bus_metrics_init(struct bus *b, struct llb_metrics *r) {
  if (!r) return;
  const char *labels[] = {"subject"};
  const int nb = (int)(sizeof bus_buckets / sizeof bus_buckets[0]);
  b->m_request = llb_metrics_histogram(r, "llmbus:bus_request_latency_seconds",
                                       "NATS request to its (first) reply, by request subject.", bus_buckets, nb, 1,
                                       labels);
  b->m_receive = llb_metrics_histogram(r, "llmbus:bus_receive_latency_seconds",
                                       "Publish to delivery to the handler (sender's wall clock), by subscription.",
                                       bus_buckets, nb, 1, labels);
  b->m_handler = llb_metrics_histogram(r, "llmbus:bus_handler_seconds", "Time in the message handler, by subscription.",
                                       bus_buckets, nb, 1, labels);
  if (!b->m_request || !b->m_receive || !b->m_handler)
    LLB_LOG_WARN("bus_metrics_disabled", "error=\"%s\"", llb_err_last());
}

struct llb_series *bus_metrics_series(struct llb_metric *m, const char *subject) {
  if (!m || !subject) return NULL;
  /* an inbox is one per client or per request: one label value for all of them */
  const char *v = strncmp(subject, "_INBOX.", 7) == 0 ? "_INBOX" : subject;
  return llb_metric_series(m, &v);
}

void bus_metrics_observe_receive(struct llb_series *s, natsMsg *m) {
  const char *sent = NULL;
  if (!s || natsMsgHeader_Get(m, BUS_SENT_HEADER, &sent) != NATS_OK || !sent) return;
  char *end = NULL;
  long long ns = strtoll(sent, &end, 10);
  if (end == sent || *end != '\0') return;
  const double dt = (double)(llb_wall_ns() - ns) / 1e9;
  if (dt >= -3600 && dt <= 3600) llb_series_observe(s, dt < 0 ? 0 : dt);
}

void bus_record_request_latency(struct bus *b, const char *subject, double seconds) {
  if (b && b->m_request && seconds >= 0) llb_series_observe(bus_metrics_series(b->m_request, subject), seconds);
}
