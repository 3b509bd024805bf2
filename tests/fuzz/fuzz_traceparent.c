/* libFuzzer target for bus/trace.h's W3C traceparent parser (a header every NATS message may
 * carry, written by any client). Oracle: an accepted header formats back to a header that
 * parses to the same trace, span and flags; a child span keeps the trace id. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char s[512];
  const size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
  memcpy(s, data, n);
  s[n] = '\0';
  struct bus_trace_ctx t, back, child;
  if (bus_traceparent_parse(s, &t) != LLB_STATUS_OK) return 0;
  char out[BUS_TRACEPARENT_LEN + 1];
  bus_traceparent_format(&t, out, sizeof out);
  if (bus_traceparent_parse(out, &back) != LLB_STATUS_OK || strcmp(back.trace_id, t.trace_id) != 0 ||
      strcmp(back.span_id, t.span_id) != 0 || back.flags != t.flags) {
    fprintf(stderr, "accepted traceparent does not round-trip: %s -> %s\n", s, out);
    abort();
  }
  bus_trace_child(&t, &child);
  if (strcmp(child.trace_id, t.trace_id) != 0) abort();
  return 0;
}
