/* Durable ingestion on NATS JetStream (see jetstream.h). */
#include "bus/jetstream.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "bus/bus_internal.h"
#include "bus/subject.h"

#define JS_RETRY_SLEEP_MS 100
#define JS_RETRY_SLEEP_MAX_MS 500
#define JS_PUBLISH_ATTEMPT_MS 2000 /* one publish's wait for its confirmation */
#define JS_PUBLISH_ATTEMPT_MIN_MS 100 /* the last attempt's wait, even at the deadline */

struct bus_js_pull {
  struct bus *bus;
  jsCtx *js;
  natsSubscription *sub;
  char stream[BUS_JS_NAME_MAX], consumer[BUS_JS_NAME_MAX], subject[BUS_SUBJECT_MAX];
  int64_t ack_wait_ms;
  int32_t max_ack_pending, replicas;
  uint64_t num_fetched;  /* messages fetched so far */
  int64_t deaf_after;    /* BUS_JS_FAULT_DEAF_ENV: unsubscribe after this many fetched; -1 = never */
};

static atomic_bool deaf_fault_taken; /* the fault hook goes to a process's first pull only */

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

/* Creates the stream with `replicas` (cfg holds everything else). A single server refuses
 * replicas > 1 ("replicas > 1 not supported in non-clustered mode"): the stream is then created
 * with one and that is logged, not failed. A cluster still forming (no peers for placement,
 * JetStream not available yet) is retried by stream_ensure: one replica there would put the
 * stream on one node, to die with it (tests/cluster). */
static llb_status stream_create(jsCtx *js, jsStreamConfig *cfg, int64_t replicas) {
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  cfg->Replicas = replicas;
  natsStatus s = js_AddStream(&si, js, cfg, NULL, &jerr);
  if (s != NATS_OK && (jerr == JSClusterNoPeersErr || jerr == JSClusterNotAvailErr ||
                       jerr == JSInsufficientResourcesErr)) {
    jsStreamInfo_Destroy(si);
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "creating the requests stream with %lld replicas: the cluster is "
                    "not ready (JetStream error %d)", (long long)replicas, (int)jerr);
  }
  if (s != NATS_OK && jerr == JSStreamReplicasNotSupportedErr && replicas > 1) {
    LLB_LOG_WARN("js_stream_replicas_unsupported", "stream=%s replicas=%lld using=1 reason=single_server",
                 cfg->Name, (long long)replicas);
    jsStreamInfo_Destroy(si);
    si = NULL;
    jerr = 0;
    cfg->Replicas = 1;
    s = js_AddStream(&si, js, cfg, NULL, &jerr);
  }
  if (s == NATS_OK) {
    LLB_LOG_INFO("js_stream_created", "stream=%s subject=%s max_bytes=%lld replicas=%lld", cfg->Name,
                 cfg->Subjects[0], (long long)cfg->MaxBytes, (long long)cfg->Replicas);
  } else if (jerr == JSStreamNameExistErr) { /* someone else created it meanwhile */
    s = NATS_OK;
  }
  jsStreamInfo_Destroy(si);
  return s == NATS_OK ? LLB_STATUS_OK : js_api_err(s, jerr, "creating the requests stream");
}

/* The stream exists as `have`: brings it to cfg where JetStream can. Replicas only grow (a
 * stream made before the cluster did gets its replicas; an actor started with the default 1
 * never shrinks a replicated stream). A change JetStream refuses is logged and the stream used
 * as it is, unless it lacks our subject. */
static llb_status stream_update(jsCtx *js, jsStreamConfig *cfg, const jsStreamConfig *have, int64_t replicas) {
  const bool has_subject = stream_has_subject(have, cfg->Subjects[0]);
  const int64_t want_replicas = replicas > have->Replicas ? replicas : have->Replicas;
  if (has_subject && have->MaxBytes == cfg->MaxBytes && have->Replicas == want_replicas) return LLB_STATUS_OK;
  cfg->Replicas = want_replicas;
  jsStreamInfo *ui = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_UpdateStream(&ui, js, cfg, NULL, &jerr);
  if (s == NATS_OK) { /* a single server answers OK and keeps one replica */
    const int64_t now_replicas = ui && ui->Config ? ui->Config->Replicas : want_replicas;
    LLB_LOG_INFO("js_stream_updated", "stream=%s subject=%s max_bytes=%lld replicas=%lld from_replicas=%lld "
                 "wanted_replicas=%lld", cfg->Name, cfg->Subjects[0], (long long)cfg->MaxBytes,
                 (long long)now_replicas, (long long)have->Replicas, (long long)want_replicas);
    jsStreamInfo_Destroy(ui);
    return LLB_STATUS_OK;
  }
  jsStreamInfo_Destroy(ui);
  llb_status st = js_api_err(s, jerr, "updating the requests stream");
  if (!has_subject || st == LLB_STATUS_TIMEOUT) return st;
  char q[300];
  LLB_LOG_WARN("js_stream_settings_kept", "stream=%s replicas=%lld wanted_replicas=%lld max_bytes=%lld "
               "wanted_max_bytes=%lld error=%s", cfg->Name, (long long)have->Replicas, (long long)want_replicas,
               (long long)have->MaxBytes, (long long)cfg->MaxBytes, llb_log_quote(q, sizeof q, llb_err_last()));
  return LLB_STATUS_OK;
}

/* One attempt: info, then create or update. */
static llb_status stream_ensure_once(jsCtx *js, const char *name, const char *subject,
                                     int64_t max_bytes, int64_t replicas) {
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
  if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) return stream_create(js, &cfg, replicas);
  if (s != NATS_OK) return js_api_err(s, jerr, "looking up the requests stream");
  llb_status st;
  if (si->Config->Retention != js_WorkQueuePolicy) {
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                  "stream %s exists without work-queue retention; delete it (nats stream rm %s)",
                  name, name);
  } else {
    st = stream_update(js, &cfg, si->Config, replicas);
  }
  jsStreamInfo_Destroy(si);
  return st;
}

/* Retries while JetStream does not answer yet (a server that just started recovers its
 * store first), up to timeout_ms. */
static llb_status stream_ensure(struct bus *b, jsCtx *js, int64_t max_bytes, int64_t replicas, int64_t timeout_ms) {
  char name[BUS_JS_NAME_MAX], subject[BUS_SUBJECT_MAX];
  llb_status st = bus_js_requests_stream_name(b->prefix, name, sizeof name);
  if (st) return st;
  if ((st = bus_pattern_engines(b->prefix, "requests", subject, sizeof subject)) != LLB_STATUS_OK) return st;
  int64_t deadline = llb_now_ns() + timeout_ms * 1000000;
  for (;;) {
    st = stream_ensure_once(js, name, subject, max_bytes, replicas);
    if (st != LLB_STATUS_NOT_FOUND && st != LLB_STATUS_TIMEOUT && st != LLB_STATUS_CONNECTION) return st;
    if (llb_now_ns() + JS_RETRY_SLEEP_MS * 1000000 >= deadline) return st;
    sleep_ms(JS_RETRY_SLEEP_MS);
  }
}

llb_status bus_js_requests_stream_ensure(struct bus *b, int64_t max_bytes, int32_t replicas, int64_t timeout_ms) {
  if (!b || timeout_ms <= 0 || replicas < 1 || replicas > BUS_JS_MAX_REPLICAS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "stream ensure: NULL bus, timeout or replicas %d (1..%d)",
                    (int)replicas, BUS_JS_MAX_REPLICAS);
  bus_uncork(b); /* every JetStream call below waits for an answer */
  jsCtx *js = NULL;
  llb_status st = js_ctx(b, timeout_ms < 2000 ? timeout_ms : 2000, &js);
  if (!st) st = stream_ensure(b, js, max_bytes, replicas, timeout_ms);
  jsCtx_Destroy(js);
  return st;
}

/* Whether a failed publish may succeed if sent again: nobody answered (the stream has no
 * leader while its replicas elect one: only the leader subscribes to the stream's subjects),
 * no confirmation in time (the leader died after storing, or the connection is reconnecting),
 * or JetStream says it is between leaders. */
static bool publish_retryable(natsStatus s, jsErrCode jerr) {
  return s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT || s == NATS_CONNECTION_DISCONNECTED ||
         jerr == JSClusterNotAvailErr || jerr == JSClusterNotLeaderErr || jerr == JSStreamOfflineErr;
}

static llb_status publish_err(natsStatus s, jsErrCode jerr, const char *subject, int64_t timeout_ms,
                              int32_t attempts) {
  if (s == NATS_NO_RESPONDERS)
    return LLB_ERRF(LLB_STATUS_NO_SERVER, "no stream leader took %s in %lld ms (%d attempts): a leader "
                    "election that lasts, JetStream off, or the stream missing", subject, (long long)timeout_ms,
                    (int)attempts);
  if (s == NATS_TIMEOUT || publish_retryable(s, jerr))
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "JetStream did not confirm %s within %lld ms (%d attempts)", subject,
                    (long long)timeout_ms, (int)attempts);
  if (jerr == JSStreamStoreFailedErr || jerr == JSStreamMessageExceedsMaximumErr)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "the stream refused %s: %s", subject,
                    nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "full");
  return js_api_err(s, jerr, subject);
}

llb_status bus_js_publish(struct bus *b, const struct bus_out_msg *m, const char *msg_id, int64_t timeout_ms,
                          uint64_t *seq_out) {
  if (timeout_ms <= 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "durable publish: timeout");
  if (msg_id && (!*msg_id || strlen(msg_id) > BUS_JS_MSG_ID_MAX))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "durable publish: message id of %zu bytes (1..%d)",
                    strlen(msg_id), BUS_JS_MSG_ID_MAX);
  bus_uncork(b); /* it waits for the stream's confirmation */
  natsMsg *nm = NULL;
  llb_status st = bus_build_msg(b, m, NULL, &nm);
  if (st) return st;
  jsCtx *js = NULL;
  if ((st = js_ctx(b, timeout_ms, &js))) {
    natsMsg_Destroy(nm);
    return st;
  }
  const int64_t start_ns = llb_now_ns(), deadline_ns = start_ns + timeout_ms * 1000000;
  int64_t backoff_ms = JS_RETRY_SLEEP_MS;
  int32_t attempts = 0;
  natsStatus s, refused = NATS_OK;
  jsErrCode jerr, refused_jerr = 0;
  jsPubAck *pa = NULL;
  for (;;) {
    const int64_t left_ms = (deadline_ns - llb_now_ns()) / 1000000;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = left_ms < JS_PUBLISH_ATTEMPT_MS ? (left_ms > JS_PUBLISH_ATTEMPT_MIN_MS ? left_ms
                                                                                       : JS_PUBLISH_ATTEMPT_MIN_MS)
                                                 : JS_PUBLISH_ATTEMPT_MS;
    po.MsgId = msg_id; /* the same id on every attempt: the stream keeps one copy (dedup window) */
    jerr = 0;
    attempts++;
    s = js_PublishMsg(&pa, js, nm, &po, &jerr);
    if (s == NATS_OK || !publish_retryable(s, jerr)) break;
    if (s != NATS_TIMEOUT) { /* refused at once: give the election time, to the deadline */
      refused = s;
      refused_jerr = jerr;
      const int64_t wait_ms = (deadline_ns - llb_now_ns()) / 1000000;
      if (wait_ms <= 0) break;
      sleep_ms(backoff_ms < wait_ms ? backoff_ms : wait_ms);
      backoff_ms = backoff_ms * 2 < JS_RETRY_SLEEP_MAX_MS ? backoff_ms * 2 : JS_RETRY_SLEEP_MAX_MS;
    } else if (llb_now_ns() >= deadline_ns) {
      break;
    }
  }
  natsMsg_Destroy(nm);
  jsCtx_Destroy(js);
  if (s == NATS_TIMEOUT && refused != NATS_OK && attempts > 1) { /* a loaded host's last short wait */
    s = refused;                                                  /* says less than the refusals did */
    jerr = refused_jerr;
  }
  if (s != NATS_OK) return publish_err(s, jerr, m->subject, timeout_ms, attempts);
  if (attempts > 1)
    LLB_LOG_INFO("js_publish_retried", "subject=%s attempts=%d waited_ms=%lld duplicate=%d stream_seq=%llu",
                 m->subject, (int)attempts, (long long)((llb_now_ns() - start_ns) / 1000000), pa->Duplicate ? 1 : 0,
                 (unsigned long long)pa->Sequence);
  if (seq_out) *seq_out = pa->Sequence;
  jsPubAck_Destroy(pa);
  return LLB_STATUS_OK;
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

static llb_status subscribe(struct bus_js_pull *p) {
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = p->stream;
  so.Consumer = p->consumer;
  jsErrCode jerr = 0;
  natsStatus s = js_PullSubscribe(&p->sub, p->js, p->subject, p->consumer, NULL, &so, &jerr);
  return s == NATS_OK ? LLB_STATUS_OK : js_api_err(s, jerr, "subscribing to the engine's consumer");
}

static void unsubscribe(struct bus_js_pull *p) {
  if (!p->sub) return;
  natsSubscription_Unsubscribe(p->sub);
  natsSubscription_Destroy(p->sub);
  p->sub = NULL;
}

llb_status bus_js_pull_resubscribe(struct bus_js_pull *p) {
  if (!p) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "resubscribe: NULL pull");
  bus_uncork(p->bus);
  unsubscribe(p);
  llb_status st = consumer_ensure(p);
  return st ? st : subscribe(p);
}

llb_status bus_js_pull_state(struct bus_js_pull *p, struct bus_js_pull_state *out) {
  *out = (struct bus_js_pull_state){0};
  bus_uncork(p->bus);
  jsConsumerInfo *ci = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetConsumerInfo(&ci, p->js, p->stream, p->consumer, NULL, &jerr);
  if (s != NATS_OK) return js_api_err(s, jerr, "looking up the engine's consumer");
  *out = (struct bus_js_pull_state){
      .num_pending = ci->NumPending, .num_ack_pending = ci->NumAckPending, .num_waiting = ci->NumWaiting,
      .num_redelivered = ci->NumRedelivered, .delivered_stream_seq = ci->Delivered.Stream,
      .ack_floor_stream_seq = ci->AckFloor.Stream,
      .max_ack_pending = ci->Config ? ci->Config->MaxAckPending : p->max_ack_pending};
  jsConsumerInfo_Destroy(ci);
  return LLB_STATUS_OK;
}

llb_status bus_js_pull_create(struct bus *b, const struct bus_js_pull_config *cfg,
                              struct bus_js_pull **out) {
  if (!b || !cfg || !out || cfg->ack_wait_ms <= 0 || cfg->max_ack_pending <= 0 || !cfg->engine_id ||
      cfg->replicas < 0 || cfg->replicas > BUS_JS_MAX_REPLICAS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "pull consumer: need engine id, ack_wait, max_ack_pending, "
                    "replicas 0..%d", BUS_JS_MAX_REPLICAS);
  *out = NULL;
  bus_uncork(b);
  if (!bus_token_valid(cfg->engine_id) ||
      strlen(cfg->engine_id) + sizeof "engine_" > BUS_JS_NAME_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id '%s' cannot name a consumer", cfg->engine_id);
  struct bus_js_pull *p = calloc(1, sizeof *p);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pull consumer");
  p->bus = b;
  p->ack_wait_ms = cfg->ack_wait_ms;
  p->max_ack_pending = cfg->max_ack_pending;
  p->replicas = cfg->replicas > 0 ? cfg->replicas : 1;
  snprintf(p->consumer, sizeof p->consumer, "engine_%s", cfg->engine_id);
  for (char *c = p->consumer; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '-') *c = '_';
  llb_status st = bus_js_requests_stream_name(b->prefix, p->stream, sizeof p->stream);
  if (!st) st = bus_subject_engine(b->prefix, cfg->engine_id, "requests", p->subject, sizeof p->subject);
  if (!st) st = js_ctx(b, 2000, &p->js);
  if (!st) st = stream_ensure(b, p->js, 0, p->replicas, 10000);
  if (!st) st = consumer_ensure(p);
  if (!st) st = subscribe(p);
  if (st) goto fail;
  p->deaf_after = -1;
  const char *deaf = getenv(BUS_JS_FAULT_DEAF_ENV);
  if (deaf && *deaf && !atomic_exchange(&deaf_fault_taken, true)) p->deaf_after = strtoll(deaf, NULL, 10);
  *out = p;
  return LLB_STATUS_OK;
fail:
  bus_js_pull_destroy(p);
  return st;
}

void bus_js_pull_destroy(struct bus_js_pull *p) {
  if (!p) return;
  unsubscribe(p);
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
  bus_uncork(p->bus);
  if (!p->sub) { /* a resubscribe failed: again first */
    llb_status st = bus_js_pull_resubscribe(p);
    if (st) return st;
  }
  natsMsgList list = {0};
  jsErrCode jerr = 0;
  natsStatus s = natsSubscription_Fetch(&list, p->sub, cap, timeout_ms, &jerr);
  if (s == NATS_TIMEOUT) return LLB_STATUS_OK;
  if (s == NATS_NOT_FOUND || s == NATS_NO_RESPONDERS || jerr == JSConsumerNotFoundErr) {
    /* Nobody serves the consumer: its replicas elect a leader (a cluster node died), or it is
     * gone with the whole store (a nats-server restarted without it). Looked up, created again
     * if missing; either way the next fetch goes to whoever leads it then. */
    llb_status st = stream_ensure(p->bus, p->js, 0, p->replicas, timeout_ms);
    if (!st) st = consumer_ensure(p);
    if (!st) return LLB_ERRF(LLB_STATUS_CONNECTION, "consumer %s did not answer a fetch (%s): it exists now",
                             p->consumer, natsStatus_GetText(s));
    return st;
  }
  if (s != NATS_OK) return js_api_err(s, jerr, "fetching requests");
  llb_status st = LLB_STATUS_OK;
  for (int i = 0; i < list.Count; i++) {
    if (!st && (st = copy_msg(list.Msgs[i], &out[*num])) == LLB_STATUS_OK) (*num)++;
  }
  natsMsgList_Destroy(&list);
  p->num_fetched += (uint64_t)*num;
  if (p->deaf_after >= 0 && p->num_fetched >= (uint64_t)p->deaf_after) {
    LLB_LOG_WARN("fault_js_pull_deaf", "consumer=%s fetched=%llu env=%s", p->consumer,
                 (unsigned long long)p->num_fetched, BUS_JS_FAULT_DEAF_ENV);
    natsSubscription_Unsubscribe(p->sub); /* the object stays: its fetches fail */
    p->deaf_after = -1;
  }
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
