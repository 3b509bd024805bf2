/* Messages of the actor runtime (bus.h): wrapping received natsMsgs, building, publishing,
 * requesting and responding, with the trace context and headers each carries. */
#include "bus/bus.h"
#include "bus/bus_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "base/log.h"

/* ---- messages ---- */

static void destroy_all(natsMsg **ms, int n) {
  for (int i = 0; i < n; i++) natsMsg_Destroy(ms[i]);
}

void bus_msg_release(struct bus *b, natsMsg *m) {
  if (!m) return;
  if (natsMsg_GetDataLength(m) > BUS_GRAVE_MSG_BYTES) {
    natsMsg_Destroy(m);
    return;
  }
  natsMsg *full[BUS_GRAVE_MAX];
  int n = 0;
  pthread_mutex_lock(&b->grave_mu);
  b->grave[b->num_grave++] = m;
  if (b->num_grave == BUS_GRAVE_MAX) {
    n = b->num_grave;
    memcpy(full, b->grave, sizeof full);
    b->num_grave = 0;
  }
  pthread_mutex_unlock(&b->grave_mu);
  destroy_all(full, n);
}

void bus_msg_release_flush(struct bus *b) {
  pthread_mutex_lock(&b->grave_mu);
  destroy_all(b->grave, b->num_grave);
  b->num_grave = 0;
  pthread_mutex_unlock(&b->grave_mu);
}

void bus_fill_msg(struct bus_msg *bm, natsMsg *m) {
  memset(bm, 0, sizeof *bm);
  bm->subject = natsMsg_GetSubject(m);
  const char *reply = natsMsg_GetReply(m);
  bm->reply = reply && *reply ? reply : NULL;
  bm->data = (const uint8_t *)natsMsg_GetData(m);
  bm->len = (size_t)natsMsg_GetDataLength(m);
  bm->impl = m;
  const char *tp = NULL;
  if (natsMsgHeader_Get(m, BUS_TRACEPARENT_HEADER, &tp) == NATS_OK &&
      bus_traceparent_parse(tp, &bm->trace) == LLB_STATUS_OK) {
    bm->trace_received = true;
  } else {
    llb_err_clear();
    bus_trace_new(&bm->trace);
  }
}

const char *bus_msg_header(const struct bus_msg *msg, const char *key) {
  const char *v = NULL;
  if (!msg || !msg->impl || !key) return NULL;
  if (natsMsgHeader_Get((natsMsg *)msg->impl, key, &v) != NATS_OK) return NULL;
  return v;
}

void bus_msg_destroy(struct bus_msg *msg) {
  if (!msg) return;
  natsMsg_Destroy((natsMsg *)msg->impl);
  free(msg);
}

struct bus_msg *bus_msg_keep(const struct bus_msg *msg) {
  if (!msg || !msg->impl) return NULL;
  struct bus_msg *k = malloc(sizeof *k);
  if (!k) return NULL;
  *k = *msg;
  ((struct bus_msg *)msg)->impl = NULL; /* the delivery wrapper (bus.c on_msg) no longer frees it */
  return k;
}

llb_status bus_wrap_owned_msg(natsMsg *m, struct bus_msg **out) {
  struct bus_msg *bm = malloc(sizeof *bm);
  if (!bm) {
    natsMsg_Destroy(m);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "no memory for a message");
  }
  bus_fill_msg(bm, m);
  *out = bm;
  return LLB_STATUS_OK;
}

llb_status bus_build_msg(struct bus *b, const struct bus_out_msg *m, const char *reply,
                            natsMsg **out) {
  if (!b || !m || !m->subject || !*m->subject || (m->len && !m->data))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "publish: NULL bus, subject or data");
  struct bus_trace_ctx fresh;
  const struct bus_trace_ctx *t = m->trace;
  if (!t) {
    bus_trace_new(&fresh);
    t = &fresh;
  }
  char tp[BUS_TRACEPARENT_LEN + 1];
  bus_traceparent_format(t, tp, sizeof tp);
  /* Headers count against max_payload: "NATS/1.0\r\n" + "k: v\r\n"... + "\r\n". */
  char sent[24];
  snprintf(sent, sizeof sent, "%lld", (long long)llb_wall_ns());
  size_t hdr = 10 + sizeof BUS_TRACEPARENT_HEADER - 1 + 4 + BUS_TRACEPARENT_LEN + 2 +
               sizeof BUS_SENT_HEADER - 1 + 4 + strlen(sent);
  for (int i = 0; i < m->num_headers; i++)
    hdr += strlen(m->headers[i].key) + strlen(m->headers[i].value) + 4;
  int64_t maxp = natsConnection_GetMaxPayload(b->nc);
  if (maxp > 0 && (int64_t)(m->len + hdr) > maxp)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE,
                    "message on %s is %zu bytes (payload %zu + headers %zu), over the server's "
                    "max_payload of %lld bytes",
                    m->subject, m->len + hdr, m->len, hdr, (long long)maxp);
  if (m->len > (size_t)INT32_MAX)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "message on %s is %zu bytes", m->subject, m->len);
  /* libnats keeps what the socket cannot take yet in a buffer with no bound: a stalled server
   * (stopped, or a link slower than the publishes) grew a flooding process to ~2 GB before
   * libnats ran out of memory. Past BUS_MAX_BUFFERED bytes not yet written, refuse. */
  const int buffered = natsConnection_Buffered(b->nc);
  if (buffered > 0 && (int64_t)buffered + (int64_t)(m->len + hdr) > BUS_MAX_BUFFERED)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL,
                    "message on %s refused: %d bytes are not yet written to the server (at most "
                    "%d held; is the server stalled?)",
                    m->subject, buffered, BUS_MAX_BUFFERED);
  natsMsg *nm = NULL;
  natsStatus s = natsMsg_Create(&nm, m->subject, reply, (const char *)m->data, (int)m->len);
  if (s != NATS_OK) return BUS_NATS_ERR(s, m->subject);
  for (int i = 0; s == NATS_OK && i < m->num_headers; i++)
    if (strcmp(m->headers[i].key, BUS_TRACEPARENT_HEADER) != 0)
      s = natsMsgHeader_Add(nm, m->headers[i].key, m->headers[i].value);
  if (s == NATS_OK) s = natsMsgHeader_Set(nm, BUS_TRACEPARENT_HEADER, tp);
  if (s == NATS_OK) s = natsMsgHeader_Set(nm, BUS_SENT_HEADER, sent);
  if (s != NATS_OK) {
    natsMsg_Destroy(nm);
    return BUS_NATS_ERR(s, "message headers");
  }
  *out = nm;
  return LLB_STATUS_OK;
}

llb_status bus_publish_msg(struct bus *b, const struct bus_out_msg *m) {
  natsMsg *nm = NULL;
  llb_status st = bus_build_msg(b, m, m ? m->reply : NULL, &nm);
  if (st != LLB_STATUS_OK) return st;
  natsStatus s = natsConnection_PublishMsg(b->nc, nm);
  bus_msg_release(b, nm);
  if (s != NATS_OK) return BUS_NATS_ERR(s, m->subject);
  return LLB_STATUS_OK;
}

llb_status bus_publish(struct bus *b, const char *subject, const void *data, size_t len,
                       const struct bus_trace_ctx *trace) {
  struct bus_out_msg m = {.subject = subject, .data = data, .len = len, .trace = trace};
  return bus_publish_msg(b, &m);
}

llb_status bus_request_msg(struct bus *b, const struct bus_out_msg *m, int64_t timeout_ms,
                           struct bus_msg **reply) {
  if (!reply) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bus_request: NULL reply");
  *reply = NULL;
  bus_uncork(b); /* the request and what the thread held back go out now: it waits */
  natsMsg *nm = NULL;
  llb_status st = bus_build_msg(b, m, NULL, &nm);
  if (st != LLB_STATUS_OK) return st;
  natsMsg *rm = NULL;
  const int64_t t0 = b->m_request ? llb_now_ns() : 0;
  natsStatus s = natsConnection_RequestMsg(&rm, b->nc, nm, timeout_ms);
  bus_msg_release(b, nm);
  if (s == NATS_OK && b->m_request)
    llb_series_observe(bus_metrics_series(b->m_request, m->subject), (double)(llb_now_ns() - t0) / 1e9);
  if (s == NATS_TIMEOUT)
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "no reply on %s within %lld ms", m->subject,
                    (long long)timeout_ms);
  if (s == NATS_NO_RESPONDERS)
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no responders on %s", m->subject);
  if (s != NATS_OK) return BUS_NATS_ERR(s, m->subject);
  return bus_wrap_owned_msg(rm, reply);
}

llb_status bus_request(struct bus *b, const char *subject, const void *data, size_t len,
                       const struct bus_trace_ctx *trace, int64_t timeout_ms,
                       struct bus_msg **reply) {
  struct bus_out_msg m = {.subject = subject, .data = data, .len = len, .trace = trace};
  return bus_request_msg(b, &m, timeout_ms, reply);
}

llb_status bus_respond(struct bus *b, const struct bus_msg *msg, const void *data, size_t len,
                       const struct bus_trace_ctx *trace) {
  if (!msg || !msg->reply)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "respond: message on %s has no reply subject",
                    msg && msg->subject ? msg->subject : "(null)");
  struct bus_trace_ctx child;
  if (!trace) {
    bus_trace_child(&msg->trace, &child);
    trace = &child;
  }
  struct bus_out_msg m = {.subject = msg->reply, .data = data, .len = len, .trace = trace};
  return bus_publish_msg(b, &m);
}
