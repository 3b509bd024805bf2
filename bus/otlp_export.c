/* OTLP/HTTP JSON span exporter; see otlp_export.h. */
#include "bus/otlp_export.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

struct otlp_exporter {
  struct otlp_exporter_config cfg; /* strings point at the copies below */
  char *endpoint, *service_name, *instance, *engine_id;
  char host[256], path[512];
  int port;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct bus_span *ring; /* [cfg.queue_capacity], under mu */
  int head, count;       /* under mu */
  bool stop;             /* under mu */
  pthread_t thread;

  /* exporter thread only */
  struct bus_span *batch; /* [cfg.max_batch] */
  struct event_base *base;
  struct evhttp_connection *conn;
  uint64_t last_failure_log_ns;

  atomic_uint_fast64_t recorded, dropped, exported, export_failed, published;
};

/* ---- JSON encoding (OTLP "JSON Protobuf Encoding") ---- */

struct jbuf {
  char *data;
  size_t len, cap;
  bool oom;
};

static void jb_reserve(struct jbuf *b, size_t more) {
  if (b->oom || b->len + more + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more + 1) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) {
    b->oom = true;
    return;
  }
  b->data = p, b->cap = cap;
}

static void jb_raw(struct jbuf *b, const char *s, size_t n) {
  jb_reserve(b, n);
  if (b->oom) return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void jb_puts(struct jbuf *b, const char *s) { jb_raw(b, s, strlen(s)); }

static void jb_printf(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_printf(struct jbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) jb_raw(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string: quotes, '\\', control characters escaped; bytes >= 0x80 pass through
 * (our strings are ASCII or UTF-8 from our own code). */
static void jb_str(struct jbuf *b, const char *s) {
  jb_raw(b, "\"", 1);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      jb_raw(b, e, 2);
    } else if (c < 0x20) {
      jb_printf(b, "\\u%04x", c);
    } else {
      jb_raw(b, (const char *)&c, 1);
    }
  }
  jb_raw(b, "\"", 1);
}

static void jb_kv_str(struct jbuf *b, const char *key, const char *value, bool comma) {
  jb_puts(b, comma ? ",{\"key\":" : "{\"key\":");
  jb_str(b, key);
  jb_puts(b, ",\"value\":{\"stringValue\":");
  jb_str(b, value ? value : "");
  jb_puts(b, "}}");
}

static void encode_span(struct jbuf *b, const struct bus_span *s) {
  jb_puts(b, "{\"traceId\":");
  jb_str(b, s->ctx.trace_id);
  jb_puts(b, ",\"spanId\":");
  jb_str(b, s->ctx.span_id);
  if (s->parent_span_id[0]) {
    jb_puts(b, ",\"parentSpanId\":");
    jb_str(b, s->parent_span_id);
  }
  jb_printf(b, ",\"flags\":%u,\"name\":", (unsigned)s->ctx.flags);
  jb_str(b, s->name);
  jb_printf(b, ",\"kind\":%d,\"startTimeUnixNano\":\"%" PRId64 "\",\"endTimeUnixNano\":\"%" PRId64 "\"",
            (int)s->kind, s->start_unix_ns, s->end_unix_ns);
  jb_puts(b, ",\"attributes\":[");
  for (int i = 0; i < s->num_attrs; i++) {
    const struct bus_span_attr *a = &s->attrs[i];
    if (a->is_int) {
      jb_puts(b, i ? ",{\"key\":" : "{\"key\":");
      jb_str(b, a->key);
      jb_printf(b, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", a->int_value);
    } else {
      jb_kv_str(b, a->key, a->str_value, i > 0);
    }
  }
  jb_puts(b, "]");
  /* Status.code: 1 OK is left unset (UNSET), 2 ERROR */
  if (s->error) jb_puts(b, ",\"status\":{\"code\":2}");
  jb_puts(b, "}");
}

llb_status otlp_encode_json(const struct otlp_exporter_config *cfg, const struct bus_span *spans, int n,
                            char **json, size_t *len) {
  struct jbuf b = {0};
  jb_puts(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
  jb_kv_str(&b, "service.name", cfg->service_name, false);
  if (cfg->instance) jb_kv_str(&b, "service.instance.id", cfg->instance, true);
  if (cfg->engine_id) jb_kv_str(&b, "llmbus.engine_id", cfg->engine_id, true);
  jb_puts(&b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"llmbus\"},\"spans\":[");
  for (int i = 0; i < n; i++) {
    if (i) jb_raw(&b, ",", 1);
    encode_span(&b, &spans[i]);
  }
  jb_puts(&b, "]}]}]}");
  if (b.oom) {
    free(b.data);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "otlp: encoding %d spans", n);
  }
  *json = b.data;
  *len = b.len;
  return LLB_STATUS_OK;
}

/* ---- HTTP POST on the exporter thread ---- */

struct post_result {
  struct event_base *base;
  int code;  /* HTTP status; 0 = no response (refused, reset, timeout) */
  int error; /* enum evhttp_request_error when code is 0, -1 none */
};

static void on_post_done(struct evhttp_request *req, void *arg) {
  struct post_result *r = arg;
  r->code = req ? evhttp_request_get_response_code(req) : 0;
  event_base_loopbreak(r->base);
}

static void on_post_error(enum evhttp_request_error err, void *arg) {
  struct post_result *r = arg;
  r->error = (int)err;
}

/* POSTs json[len] once; returns the HTTP status (0: none, *err says why). The connection is
 * kept for the next batch and rebuilt after a failure. */
static int http_post_once(struct otlp_exporter *e, const char *json, size_t len, int *err) {
  if (!e->conn) {
    e->conn = evhttp_connection_base_new(e->base, NULL, e->host, (unsigned short)e->port);
    if (!e->conn) return 0;
    struct timeval tv = {.tv_sec = e->cfg.export_timeout_ms / 1000,
                         .tv_usec = (e->cfg.export_timeout_ms % 1000) * 1000};
    evhttp_connection_set_timeout_tv(e->conn, &tv);
  }
  struct post_result r = {.base = e->base, .code = 0, .error = -1};
  struct evhttp_request *req = evhttp_request_new(on_post_done, &r);
  if (!req) return 0;
  evhttp_request_set_error_cb(req, on_post_error);
  struct evkeyvalq *h = evhttp_request_get_output_headers(req);
  char host[300];
  snprintf(host, sizeof host, "%s:%d", e->host, e->port);
  evhttp_add_header(h, "Host", host);
  evhttp_add_header(h, "Content-Type", "application/json");
  evbuffer_add(evhttp_request_get_output_buffer(req), json, len);
  if (evhttp_make_request(e->conn, req, EVHTTP_REQ_POST, e->path) != 0) {
    /* the request was freed by libevent */
    evhttp_connection_free(e->conn);
    e->conn = NULL;
    return 0;
  }
  event_base_dispatch(e->base);
  if (r.code == 0) {
    evhttp_connection_free(e->conn);
    e->conn = NULL;
  }
  *err = r.error;
  return r.code;
}

/* A kept connection the collector closed in the meantime fails at once (EOF): one more try
 * on a new connection (a collector that is down costs two refused connects, a slow one two
 * timeouts, on this thread only). Returns the HTTP status, 0 none. */
static int http_post(struct otlp_exporter *e, const char *json, size_t len, int *err) {
  int code = http_post_once(e, json, len, err);
  if (code == 0) code = http_post_once(e, json, len, err);
  return code;
}

static void export_batch(struct otlp_exporter *e, int n) {
  char *json = NULL;
  size_t len = 0;
  if (otlp_encode_json(&e->cfg, e->batch, n, &json, &len) != LLB_STATUS_OK) {
    atomic_fetch_add(&e->export_failed, (uint64_t)n);
    return;
  }
  if (e->cfg.publish && e->cfg.publish(e->cfg.publish_user, json, len)) atomic_fetch_add(&e->published, (uint64_t)n);
  if (e->endpoint) {
    int err = -1;
    int code = http_post(e, json, len, &err);
    if (code >= 200 && code < 300) {
      atomic_fetch_add(&e->exported, (uint64_t)n);
    } else {
      atomic_fetch_add(&e->export_failed, (uint64_t)n);
      uint64_t now = (uint64_t)llb_now_ns();
      if (now - e->last_failure_log_ns > 10ull * 1000000000ull) { /* one line per 10 s at most */
        e->last_failure_log_ns = now;
        LLB_LOG_WARN("trace_export_failed", "endpoint=%s status=%d evhttp_error=%d spans=%d failed_total=%" PRIu64
                     " dropped_total=%" PRIu64, e->endpoint, code, err, n,
                     (uint64_t)atomic_load(&e->export_failed), (uint64_t)atomic_load(&e->dropped));
      }
    }
  }
  free(json);
}

static struct timespec deadline_after_ms(int64_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
  return t;
}

/* Takes up to max_batch spans off the ring into e->batch; under mu. */
static int take_batch_locked(struct otlp_exporter *e) {
  int n = e->count < e->cfg.max_batch ? e->count : e->cfg.max_batch;
  for (int i = 0; i < n; i++) e->batch[i] = e->ring[(e->head + i) % e->cfg.queue_capacity];
  e->head = (e->head + n) % e->cfg.queue_capacity;
  e->count -= n;
  return n;
}

static void *exporter_main(void *arg) {
  struct otlp_exporter *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    if (e->count < e->cfg.max_batch && !e->stop) {
      struct timespec dl = deadline_after_ms(e->cfg.flush_interval_ms);
      while (e->count < e->cfg.max_batch && !e->stop)
        if (pthread_cond_timedwait(&e->cv, &e->mu, &dl) == ETIMEDOUT) break;
    }
    int n = take_batch_locked(e);
    bool stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    if (n > 0) export_batch(e, n);
    pthread_mutex_lock(&e->mu);
    if (stop && e->count == 0) break;
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* ---- lifecycle ---- */

static llb_status parse_endpoint(struct otlp_exporter *e, const char *url) {
  struct evhttp_uri *u = evhttp_uri_parse(url);
  const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
  const char *host = u ? evhttp_uri_get_host(u) : NULL;
  llb_status st = LLB_STATUS_OK;
  if (!u || !scheme || strcmp(scheme, "http") != 0 || !host || !*host || strlen(host) >= sizeof e->host) {
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--otlp-endpoint '%s': expected http://host[:port][/path]", url);
  } else {
    snprintf(e->host, sizeof e->host, "%s", host);
    e->port = evhttp_uri_get_port(u) > 0 ? evhttp_uri_get_port(u) : 80;
    const char *path = evhttp_uri_get_path(u);
    size_t pl = path ? strlen(path) : 0;
    while (pl > 0 && path[pl - 1] == '/') pl--; /* "<endpoint>/v1/traces", one slash */
    if (pl + sizeof "/v1/traces" > sizeof e->path)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--otlp-endpoint: path longer than %zu bytes", sizeof e->path);
    else
      snprintf(e->path, sizeof e->path, "%.*s/v1/traces", (int)pl, path ? path : "");
  }
  if (u) evhttp_uri_free(u);
  return st;
}

static char *dup_or_null(const char *s, bool *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = true;
  return d;
}

llb_status otlp_exporter_create(const struct otlp_exporter_config *cfg, struct otlp_exporter **out) {
  *out = NULL;
  if (!cfg || !cfg->service_name || cfg->queue_capacity < 1 || cfg->max_batch < 1 ||
      cfg->flush_interval_ms < 1 || cfg->export_timeout_ms < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "otlp exporter: service name and positive sizes required");
  struct otlp_exporter *e = calloc(1, sizeof *e);
  if (!e) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "otlp exporter");
  llb_status st = LLB_STATUS_OK;
  if (cfg->endpoint) st = parse_endpoint(e, cfg->endpoint);
  if (st != LLB_STATUS_OK) {
    free(e);
    return st;
  }
  bool oom = false;
  e->cfg = *cfg;
  e->cfg.endpoint = e->endpoint = dup_or_null(cfg->endpoint, &oom);
  e->cfg.service_name = e->service_name = dup_or_null(cfg->service_name, &oom);
  e->cfg.instance = e->instance = dup_or_null(cfg->instance, &oom);
  e->cfg.engine_id = e->engine_id = dup_or_null(cfg->engine_id, &oom);
  e->ring = calloc((size_t)cfg->queue_capacity, sizeof *e->ring);
  e->batch = calloc((size_t)cfg->max_batch, sizeof *e->batch);
  e->base = cfg->endpoint ? event_base_new() : NULL;
  if (oom || !e->ring || !e->batch || (cfg->endpoint && !e->base)) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "otlp exporter: queue of %d spans", cfg->queue_capacity);
    goto fail;
  }
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  if (pthread_create(&e->thread, NULL, exporter_main, e) != 0) {
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "otlp exporter: cannot start its thread");
    goto fail;
  }
  *out = e;
  return LLB_STATUS_OK;
fail:
  if (e->base) event_base_free(e->base);
  free(e->ring), free(e->batch);
  free(e->endpoint), free(e->service_name), free(e->instance), free(e->engine_id);
  free(e);
  return st;
}

void otlp_exporter_destroy(struct otlp_exporter *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  e->stop = true;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  pthread_join(e->thread, NULL);
  struct bus_tracing_stats st;
  otlp_exporter_get_stats(e, &st);
  LLB_LOG_INFO("tracing_stopped", "recorded=%" PRIu64 " exported=%" PRIu64 " export_failed=%" PRIu64
               " dropped=%" PRIu64 " published=%" PRIu64, st.recorded, st.exported, st.export_failed,
               st.dropped, st.published);
  if (e->conn) evhttp_connection_free(e->conn);
  if (e->base) event_base_free(e->base);
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  free(e->ring), free(e->batch);
  free(e->endpoint), free(e->service_name), free(e->instance), free(e->engine_id);
  free(e);
}

bool otlp_exporter_enqueue(struct otlp_exporter *e, const struct bus_span *s) {
  pthread_mutex_lock(&e->mu);
  if (e->count == e->cfg.queue_capacity || e->stop) {
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_add(&e->dropped, 1);
    return false;
  }
  e->ring[(e->head + e->count) % e->cfg.queue_capacity] = *s;
  e->count++;
  if (e->count == e->cfg.max_batch) pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  atomic_fetch_add(&e->recorded, 1);
  return true;
}

void otlp_exporter_get_stats(struct otlp_exporter *e, struct bus_tracing_stats *out) {
  out->recorded = atomic_load(&e->recorded);
  out->dropped = atomic_load(&e->dropped);
  out->exported = atomic_load(&e->exported);
  out->export_failed = atomic_load(&e->export_failed);
  out->published = atomic_load(&e->published);
}
