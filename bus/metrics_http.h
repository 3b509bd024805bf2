/* The metrics endpoint of an actor: GET /metrics on HOST:PORT answers the Prometheus text
 * exposition (format 0.0.4) of one registry (base/metrics.h).
 *
 * A libevent evhttp server on its own event_base and its own thread, so a scrape never waits
 * on (or delays) the bus loop or a handler. Anything else than GET /metrics gets 404 (405
 * for another method on /metrics); headers are bounded (8 KiB), bodies refused (0 bytes
 * allowed), idle connections closed after 10 s: a scrape port is as hostile as any other.
 *
 * Threading: start/stop/destroy from one thread (the actor main); rendering runs on the
 * server's thread and reads the registry's atomics.
 */
#ifndef LLB_BUS_METRICS_HTTP_H
#define LLB_BUS_METRICS_HTTP_H

#include "base/metrics.h"
#include "base/status.h"

struct bus_metrics_http; /* opaque */

/* Binds host:port (port 0: the kernel picks one, see bus_metrics_http_port) and starts the
 * server thread serving `r` (borrowed: must outlive the server). *out: bus_metrics_http_stop.
 * Errors: INVALID_ARGUMENT (port outside 0..65535, NULL host/registry), IO naming host:port
 * when it cannot be bound (in use, no such address), OUT_OF_MEMORY. */
llb_status bus_metrics_http_start(const char *host, int port, struct llb_metrics *r,
                                  struct bus_metrics_http **out);

/* The bound TCP port. */
int bus_metrics_http_port(const struct bus_metrics_http *h);

/* Stops the thread, closes the socket and frees. NULL ok. */
void bus_metrics_http_stop(struct bus_metrics_http *h);

#endif
