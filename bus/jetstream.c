/* Durable ingestion on NATS JetStream (see jetstream.h). */
#include "bus/jetstream.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "bus/bus_internal.h"

#define JS_RETRY_SLEEP_MS 100

struct bus_js_pull {
  struct bus *bus;
  jsCtx *js;
  natsSubscription *sub;
  char stream[BUS_JS_NAME_MAX], consumer[BUS_JS_NAME_MAX], subject[BUS_SUBJECT_MAX];
  int64_t ack_wait_ms;
  int32_t max_ack_pending;
};

static void sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

llb_status bus_js_requests_stream_name(const char *prefix, char *buf, size_t cap) {
  if (!prefix) prefix = BUS_DEFAULT_PREFIX;
  llb_status st = bus_prefix_check(prefix);
  if (st) return st;
  size_t n = strlen(prefix);
  if (n + sizeof "_REQUESTS" > cap || n + sizeof "_REQUESTS" > BUS_JS_NAME_MAX)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "stream name for prefix '%s' is too long", prefix);
  for (size_t i = 0; i < n; i++)
    buf[i] = prefix[i] == '.' ? '_' : (char)toupper((unsigned char)prefix[i]);
  memcpy(buf + n, "_REQUESTS", sizeof "_REQUESTS");
  return LLB_STATUS_OK;
}

/* A JetStream context on the bus' connection whose API calls wait up to timeout_ms. */
static llb_status js_ctx(struct bus *b, int64_t timeout_ms, jsCtx **out) {
  jsOptions o;
  jsOptions_Init(&o);
  o.Wait = timeout_ms;
  natsStatus s = natsConnection_JetStream(out, b->nc, &o);
  return s == NATS_OK ? LLB_STATUS_OK : BUS_NATS_ERR(s, "JetStream context");
}

static llb_status js_api_err(natsStatus s, jsErrCode jerr, const char *what) {
  if (s == NATS_NO_RESPONDERS)
    return LLB_ERRF(LLB_STATUS_NOT_FOUND,
                    "%s: JetStream does not answer (is nats-server running with -js?)", what);
  if (s == NATS_TIMEOUT) return LLB_ERRF(LLB_STATUS_TIMEOUT, "%s: JetStream did not answer", what);
  const char *e = nats_GetLastError(NULL);
  return LLB_ERRF(bus_map_nats(s) == LLB_STATUS_OK ? LLB_STATUS_CONNECTION : bus_map_nats(s),
                  "%s: %s (JetStream error %d: %s)", what, natsStatus_GetText(s), (int)jerr,
                  e ? e : "");
}

static bool stream_has_subject(const jsStreamConfig *c, const char *subject) {
  for (int i = 0; i < c->SubjectsLen; i++)
    if (strcmp(c->Subjects[i], subject) == 0) return true;
  return false;
}

/* One attempt: info, then create or update. */
static llb_status stream_ensure_once(jsCtx *js, const char *name, const char *subject,
                                     int64_t max_bytes) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char *subjects[] = {subject};
  cfg.Name = name;
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Retention = js_WorkQueuePolicy;
  cfg.Storage = js_FileStorage;
  cfg.MaxBytes = max_bytes > 0 ? max_bytes : -1;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetStreamInfo(&si, js, name, NULL, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) {
    /* three replicas where the server is a cluster (the stream outlives a node), else one:
     * only a single server's refusal ("replicas > 1 not supported in non-clustered mode")
     * means one. A cluster still forming (no peers for placement, JetStream not available
     * yet) is retried by stream_ensure: falling back to one replica there put the stream on
     * one node, and it died with that node (tests/cluster). */
    jerr = 0;
    cfg.Replicas = 3;
    s = js_AddStream(&si, js, &cfg, NULL, &jerr);
    if (s != NATS_OK && (jerr == JSClusterNoPeersErr || jerr == JSClusterNotAvailErr ||
                         jerr == JSInsufficientResourcesErr)) {
      jsStreamInfo_Destroy(si);
      return LLB_ERRF(LLB_STATUS_TIMEOUT, "creating the requests stream with 3 replicas: the cluster is not "
                      "ready (JetStream error %d)", (int)jerr);
    }
    if (s != NATS_OK && jerr == JSStreamReplicasNotSupportedErr) {
      jsStreamInfo_Destroy(si);
      si = NULL;
      jerr = 0;
      cfg.Replicas = 1;
      s = js_AddStream(&si, js, &cfg, NULL, &jerr);
    }
    if (s == NATS_OK) {
      LLB_LOG_INFO("js_stream_created", "stream=%s subject=%s max_bytes=%lld replicas=%lld", name, subject,
                   (long long)cfg.MaxBytes, (long long)cfg.Replicas);
    } else if (jerr == JSStreamNameExistErr) { /* someone else created it meanwhile */
      s = NATS_OK;
    }
    jsStreamInfo_Destroy(si);
    return s == NATS_OK ? LLB_STATUS_OK : js_api_err(s, jerr, "creating the requests stream");
  }
  if (s != NATS_OK) return js_api_err(s, jerr, "looking up the requests stream");
  llb_status st = LLB_STATUS_OK;
  if (si->Config->Retention != js_WorkQueuePolicy) {
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                  "stream %s exists without work-queue retention; delete it (nats stream rm %s)",
                  name, name);
  } else if (!stream_has_subject(si->Config, subject) || si->Config->MaxBytes != cfg.MaxBytes) {
    jsStreamInfo *ui = NULL;
    jerr = 0;
    cfg.Replicas = si->Config->Replicas; /* as created: one, or three on a cluster */
    s = js_UpdateStream(&ui, js, &cfg, NULL, &jerr);
    jsStreamInfo_Destroy(ui);
    if (s != NATS_OK) st = js_api_err(s, jerr, "updating the requests stream");
    else LLB_LOG_INFO("js_stream_updated", "stream=%s subject=%s", name, subject);
  }
  jsStreamInfo_Destroy(si);
  return st;
}

/* Retries while JetStream does not answer yet (a server that just started recovers its
 * store first), up to timeout_ms. */
static llb_status stream_ensure(struct bus *b, jsCtx *js, int64_t max_bytes, int64_t timeout_ms) {
  char name[BUS_JS_NAME_MAX], subject[BUS_SUBJECT_MAX];
  llb_status st = bus_js_requests_stream_name(b->prefix, name, sizeof name);
  if (st) return st;
  if (snprintf(subject, sizeof subject, "%s.engine.*.requests", b->prefix) >= (int)sizeof subject)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "requests subject of prefix '%s'", b->prefix);
  int64_t deadline = llb_now_ns() + timeout_ms * 1000000;
  for (;;) {
    st = stream_ensure_once(js, name, subject, max_bytes);
    if (st != LLB_STATUS_NOT_FOUND && st != LLB_STATUS_TIMEOUT && st != LLB_STATUS_CONNECTION) return st;
    if (llb_now_ns() + JS_RETRY_SLEEP_MS * 1000000 >= deadline) return st;
    sleep_ms(JS_RETRY_SLEEP_MS);
  }
}

llb_status bus_js_requests_stream_ensure(struct bus *b, int64_t max_bytes, int64_t timeout_ms) {
  if (!b || timeout_ms <= 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "stream ensure: NULL bus or timeout");
  jsCtx *js = NULL;
  llb_status st = js_ctx(b, timeout_ms < 2000 ? timeout_ms : 2000, &js);
  if (!st) st = stream_ensure(b, js, max_bytes, timeout_ms);
  jsCtx_Destroy(js);
  return st;
}

llb_status bus_js_publish(struct bus *b, const struct bus_out_msg *m, int64_t timeout_ms,
                          uint64_t *seq_out) {
  if (timeout_ms <= 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "durable publish: timeout");
  natsMsg *nm = NULL;
  llb_status st = bus_build_msg(b, m, NULL, &nm);
  if (st) return st;
  jsCtx *js = NULL;
  if ((st = js_ctx(b, timeout_ms, &js))) {
    natsMsg_Destroy(nm);
    return st;
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = timeout_ms;
  jsPubAck *pa = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_PublishMsg(&pa, js, nm, &po, &jerr);
  natsMsg_Destroy(nm);
  jsCtx_Destroy(js);
  if (s == NATS_OK) {
    if (seq_out) *seq_out = pa->Sequence;
    jsPubAck_Destroy(pa);
    return LLB_STATUS_OK;
  }
  if (s == NATS_NO_RESPONDERS)
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no stream stores %s (JetStream off, or the stream is "
                    "missing)", m->subject);
  if (s == NATS_TIMEOUT)
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "JetStream did not confirm %s within %lld ms", m->subject,
                    (long long)timeout_ms);
  if (jerr == JSStreamStoreFailedErr || jerr == JSStreamMessageExceedsMaximumErr)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "the stream refused %s: %s", m->subject,
                    nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "full");
  return js_api_err(s, jerr, m->subject);
}

/* ---- the pull consumer ---- */

static llb_status consumer_ensure(struct bus_js_pull *p) {
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = p->consumer;
  cc.DeliverPolicy = js_DeliverAll;
  cc.AckPolicy = js_AckExplicit;
  cc.AckWait = p->ack_wait_ms * 1000000; /* ns */
  cc.MaxDeliver = -1;
  cc.FilterSubject = p->subject;
  cc.MaxAckPending = p->max_ack_pending;
  jsConsumerInfo *ci = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetConsumerInfo(&ci, p->js, p->stream, p->consumer, NULL, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr) {
    jerr = 0;
    s = js_AddConsumer(&ci, p->js, p->stream, &cc, NULL, &jerr);
    if (s == NATS_OK)
      LLB_LOG_INFO("js_consumer_created", "stream=%s consumer=%s filter=%s ack_wait_ms=%lld",
                   p->stream, p->consumer, p->subject, (long long)p->ack_wait_ms);
    else if (jerr == JSConsumerNameExistErr)
      s = NATS_OK;
    jsConsumerInfo_Destroy(ci);
    return s == NATS_OK ? LLB_STATUS_OK : js_api_err(s, jerr, "creating the engine's consumer");
  }
  if (s != NATS_OK) return js_api_err(s, jerr, "looking up the engine's consumer");
  const jsConsumerConfig *have = ci->Config;
  bool same = have->AckWait == cc.AckWait && have->MaxAckPending == cc.MaxAckPending &&
              have->FilterSubject && strcmp(have->FilterSubject, cc.FilterSubject) == 0 &&
              have->AckPolicy == js_AckExplicit;
  jsConsumerInfo_Destroy(ci);
  if (same) return LLB_STATUS_OK;
  ci = NULL;
  jerr = 0;
  s = js_UpdateConsumer(&ci, p->js, p->stream, &cc, NULL, &jerr);
  jsConsumerInfo_Destroy(ci);
  if (s != NATS_OK) return js_api_err(s, jerr, "updating the engine's consumer");
  LLB_LOG_INFO("js_consumer_updated", "stream=%s consumer=%s ack_wait_ms=%lld", p->stream,
               p->consumer, (long long)p->ack_wait_ms);
  return LLB_STATUS_OK;
}

llb_status bus_js_pull_create(struct bus *b, const struct bus_js_pull_config *cfg,
                              struct bus_js_pull **out) {
  if (!b || !cfg || !out || cfg->ack_wait_ms <= 0 || cfg->max_ack_pending <= 0 || !cfg->engine_id)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pull consumer: need engine id, ack_wait, max_ack_pending");
  *out = NULL;
  if (!bus_token_valid(cfg->engine_id) ||
      strlen(cfg->engine_id) + sizeof "engine_" > BUS_JS_NAME_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id '%s' cannot name a consumer", cfg->engine_id);
  struct bus_js_pull *p = calloc(1, sizeof *p);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pull consumer");
  p->bus = b;
  p->ack_wait_ms = cfg->ack_wait_ms;
  p->max_ack_pending = cfg->max_ack_pending;
  snprintf(p->consumer, sizeof p->consumer, "engine_%s", cfg->engine_id);
  for (char *c = p->consumer; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '-') *c = '_';
  llb_status st = bus_js_requests_stream_name(b->prefix, p->stream, sizeof p->stream);
  if (!st) st = bus_subject_engine(b->prefix, cfg->engine_id, "requests", p->subject, sizeof p->subject);
  if (!st) st = js_ctx(b, 2000, &p->js);
  if (!st) st = stream_ensure(b, p->js, 0, 10000);
  if (!st) st = consumer_ensure(p);
  if (st) goto fail;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = p->stream;
  so.Consumer = p->consumer;
  jsErrCode jerr = 0;
  natsStatus s = js_PullSubscribe(&p->sub, p->js, p->subject, p->consumer, NULL, &so, &jerr);
  if (s != NATS_OK) {
    st = js_api_err(s, jerr, "subscribing to the engine's consumer");
    goto fail;
  }
  *out = p;
  return LLB_STATUS_OK;
fail:
  bus_js_pull_destroy(p);
  return st;
}

void bus_js_pull_destroy(struct bus_js_pull *p) {
  if (!p) return;
  if (p->sub) {
    natsSubscription_Unsubscribe(p->sub);
    natsSubscription_Destroy(p->sub);
  }
  jsCtx_Destroy(p->js);
  free(p);
}

/* A self-contained copy of a delivered message: subject, ack subject and payload inline. */
static llb_status copy_msg(natsMsg *nm, struct bus_js_msg **out) {
  jsMsgMetaData *meta = NULL;
  natsStatus s = natsMsg_GetMetaData(&meta, nm);
  if (s != NATS_OK) return BUS_NATS_ERR(s, "JetStream message metadata");
  struct bus_msg view;
  bus_fill_msg(&view, nm);
  size_t ns = strlen(view.subject) + 1, nr = view.reply ? strlen(view.reply) + 1 : 0;
  struct bus_js_msg *m = malloc(sizeof *m + ns + nr + view.len);
  if (!m) {
    jsMsgMetaData_Destroy(meta);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "JetStream message of %zu bytes", view.len);
  }
  char *tail = (char *)(m + 1);
  m->msg = view;
  m->msg.impl = NULL;
  memcpy(tail, view.subject, ns);
  m->msg.subject = tail;
  if (nr) {
    memcpy(tail + ns, view.reply, nr);
    m->msg.reply = tail + ns;
  }
  if (view.len) memcpy(tail + ns + nr, view.data, view.len);
  m->msg.data = (const uint8_t *)(tail + ns + nr);
  m->stream_seq = meta->Sequence.Stream;
  m->num_delivered = meta->NumDelivered;
  jsMsgMetaData_Destroy(meta);
  *out = m;
  return LLB_STATUS_OK;
}

llb_status bus_js_pull_fetch(struct bus_js_pull *p, int32_t cap, int64_t timeout_ms,
                             struct bus_js_msg **out, int32_t *num) {
  *num = 0;
  if (!p || cap <= 0 || timeout_ms <= 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "fetch arguments");
  natsMsgList list = {0};
  jsErrCode jerr = 0;
  natsStatus s = natsSubscription_Fetch(&list, p->sub, cap, timeout_ms, &jerr);
  if (s == NATS_TIMEOUT) return LLB_STATUS_OK;
  if (s == NATS_NOT_FOUND || s == NATS_NO_RESPONDERS || jerr == JSConsumerNotFoundErr) {
    /* The consumer (or the whole store) is gone: a nats-server restarted without it. */
    llb_status st = stream_ensure(p->bus, p->js, 0, timeout_ms);
    if (!st) st = consumer_ensure(p);
    if (!st) return LLB_ERRF(LLB_STATUS_CONNECTION, "the engine's consumer was missing: created again");
    return st;
  }
  if (s != NATS_OK) return js_api_err(s, jerr, "fetching requests");
  llb_status st = LLB_STATUS_OK;
  for (int i = 0; i < list.Count; i++) {
    if (!st && (st = copy_msg(list.Msgs[i], &out[*num])) == LLB_STATUS_OK) (*num)++;
  }
  natsMsgList_Destroy(&list);
  return st;
}

static llb_status ack_with(struct bus *b, const struct bus_js_msg *m, const char *what) {
  if (!b || !m || !m->msg.reply)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "acknowledging a message without an ack subject");
  natsStatus s = natsConnection_PublishString(b->nc, m->msg.reply, what);
  return s == NATS_OK ? LLB_STATUS_OK : BUS_NATS_ERR(s, "JetStream acknowledgement");
}

llb_status bus_js_ack(struct bus *b, const struct bus_js_msg *m) { return ack_with(b, m, "+ACK"); }
llb_status bus_js_in_progress(struct bus *b, const struct bus_js_msg *m) { return ack_with(b, m, "+WPI"); }
llb_status bus_js_nak(struct bus *b, const struct bus_js_msg *m) { return ack_with(b, m, "-NAK"); }
llb_status bus_js_term(struct bus *b, const struct bus_js_msg *m) { return ack_with(b, m, "+TERM"); }

void bus_js_msg_destroy(struct bus_js_msg *m) { free(m); }
