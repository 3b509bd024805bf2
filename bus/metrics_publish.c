/* Every actor's metrics on the bus, for one scrape of the whole stack; see bus.h
 * (bus_metrics_publish_start). A timer on the loop thread renders the registry and publishes
 * the text; the loop thread is the one the heartbeat uses, so a publish never races a drain. */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "bus/bus.h"
#include "bus/bus_internal.h"
#include "bus/subject.h"

static void metrics_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct bus *b = arg;
  char *text = NULL;
  size_t len = 0;
  llb_status st = llb_metrics_render(b->mp_metrics, &text, &len);
  if (st == LLB_STATUS_OK) st = bus_publish(b, b->mp_subject, text, len, NULL);
  free(text);
  if (st != LLB_STATUS_OK && !b->mp_failed_logged) { /* e.g. over max_payload: once, not every tick */
    char q[600];
    LLB_LOG_WARN("bus_metrics_publish_failed", "subject=%s bytes=%zu status=%s err=%s", b->mp_subject, len,
                 llb_strerror(st), llb_log_quote(q, sizeof q, llb_err_last()));
    b->mp_failed_logged = true;
  }
}

void bus_metrics_publish_stop(struct bus *b) {
  if (!b->mp_ev) return;
  event_del(b->mp_ev); /* libevent 2.1: waits for a callback running on the loop thread */
  event_free(b->mp_ev);
  b->mp_ev = NULL;
}

llb_status bus_metrics_publish_start(struct bus *b, const char *actor, const char *instance, int64_t interval_ms,
                                     struct llb_metrics *metrics) {
  if (!b || !metrics || interval_ms <= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "metrics publish: need a registry and interval_ms > 0");
  char subject[sizeof b->mp_subject];
  llb_status st = bus_subject_health_metrics(b->prefix, actor, instance, subject, sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  bus_metrics_publish_stop(b);
  struct event *ev = event_new(b->base, -1, EV_PERSIST, metrics_tick, b);
  if (!ev) return LLB_ERRF(LLB_STATUS_INTERNAL, "metrics publish: event_new failed");
  memcpy(b->mp_subject, subject, sizeof subject);
  b->mp_metrics = metrics;
  b->mp_failed_logged = false;
  b->mp_ev = ev;
  struct timeval tv = {.tv_sec = interval_ms / 1000, .tv_usec = (interval_ms % 1000) * 1000};
  event_add(ev, &tv);
  event_active(ev, EV_TIMEOUT, 0); /* the first right away: a scrape soon after start sees the actor */
  return LLB_STATUS_OK;
}
