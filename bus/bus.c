/* The actor runtime over the NATS C client and its libevent adapter (see bus.h). */
#include "bus/bus.h"
#include "bus/bus_internal.h"
#include "bus/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <nats/nats.h>

#include "base/log.h"

#define BUS_CLOSE_WAIT_MS 10000 /* bus_destroy: bound on waiting for close/handler completion */

struct bus_sub {
  struct bus *bus;
  natsSubscription *ns;
  bus_handler_fn fn; /* NULL for a synchronous subscription */
  void *user;
  bool on_loop;  /* bus_subscribe_on_loop: a NATS synchronous subscription read by the loop */
  bool complete; /* asynchronous: the last handler has returned after close */
  struct llb_series *m_receive, *m_handler; /* NULL: not recorded */
  struct bus_sub *next;
};

/* ---- connection callbacks (run on the client's internal threads) ---- */

static void log_conn_event(struct bus *b, natsConnection *nc, llb_log_level lvl, const char *ev) {
  char url[256] = "", raw[256] = "";
  if (natsConnection_GetConnectedUrl(nc, raw, sizeof raw) == NATS_OK) llb_log_redact_url(url, sizeof url, raw);
  if (!url[0]) {
    pthread_mutex_lock(&b->mu);
    snprintf(url, sizeof url, "%s", b->url);
    pthread_mutex_unlock(&b->mu);
  } else {
    pthread_mutex_lock(&b->mu);
    snprintf(b->url, sizeof b->url, "%s", url);
    pthread_mutex_unlock(&b->mu);
  }
  const char *err = NULL;
  natsStatus last = natsConnection_GetLastError(nc, &err);
  char q[300];
  llb_log(lvl, ev, "url=%s last_error=%s", url,
          llb_log_quote(q, sizeof q, last != NATS_OK && err ? err : "none"));
}

static void on_disconnected(natsConnection *nc, void *closure) {
  /* A deliberate close also reports a disconnect; its bus_closed line says enough. */
  if (natsConnection_IsClosed(nc)) return;
  log_conn_event(closure, nc, LLB_LOG_LEVEL_WARN, "bus_disconnected");
}

static void on_reconnected(natsConnection *nc, void *closure) {
  struct bus *b = closure;
  atomic_store(&b->last_reconnect_ns, llb_now_ns());
  atomic_fetch_add(&b->num_reconnects, 1);
  log_conn_event(b, nc, LLB_LOG_LEVEL_INFO, "bus_reconnected");
  /* A beat at once: whoever waits for this actor after a nats-server restart (the api server
   * resends its requests once an input processor is back) need not wait out the interval.
   * The client re-subscribed before this callback, so the beat means "listening again". */
  (void)bus_heartbeat_now(b);
}

static void on_closed(natsConnection *nc, void *closure) {
  struct bus *b = closure;
  log_conn_event(b, nc, LLB_LOG_LEVEL_INFO, "bus_closed");
  pthread_mutex_lock(&b->mu);
  b->closed = true;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* Exponential backoff with ±10% jitter; `attempts` counts rounds over all servers (>= 1). */
static int64_t reconnect_delay(natsConnection *nc, int attempts, void *closure) {
  (void)nc;
  struct bus *b = closure;
  int64_t d = b->rc_min_ms;
  for (int i = 1; i < attempts && d < b->rc_max_ms; i++) d *= 2;
  if (d > b->rc_max_ms) d = b->rc_max_ms;
  int64_t jitter = d / 10;
  if (jitter > 0) d += (int64_t)(nats_NowInNanoSeconds() % (uint64_t)(2 * jitter + 1)) - jitter;
  LLB_LOG_DEBUG("bus_reconnect_wait", "attempt=%d delay_ms=%lld", attempts, (long long)d);
  return d;
}

/* Asynchronous errors of the connection: a subscription over its pending limits drops messages
 * (NATS "slow consumer") and the server refuses publishes it may not take (permissions). One
 * line per 1000 such errors, with the subscription and how many it dropped in all. */
static void on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure) {
  (void)nc;
  struct bus *b = closure;
  uint64_t n = atomic_fetch_add(&b->num_async_errors, 1);
  if (n % 1000 != 0) return;
  int64_t dropped = 0;
  if (sub) (void)natsSubscription_GetDropped(sub, &dropped);
  LLB_LOG_WARN(err == NATS_SLOW_CONSUMER ? "bus_slow_consumer" : "bus_async_error",
               "subject=%s status=%s dropped=%lld errors=%llu", sub ? natsSubscription_GetSubject(sub) : "-",
               natsStatus_GetText(err), (long long)dropped, (unsigned long long)n + 1);
}

/* ---- stop signals: installed by bus_connect, so a SIGTERM during start-up is not lost ---- */

static volatile sig_atomic_t signal_stop_fd = -1;

static void on_stop_signal(int sig) {
  int saved = errno;
  unsigned char c = (unsigned char)sig;
  if (signal_stop_fd >= 0) {
    ssize_t w = write(signal_stop_fd, &c, 1);
    (void)w;
  }
  errno = saved;
}

static void signals_install(struct bus *b) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  signal_stop_fd = b->stop_pipe[1];
  sigaction(SIGTERM, &sa, &b->old_term);
  sigaction(SIGINT, &sa, &b->old_int);
  b->signals_installed = true;
}

static void signals_restore(struct bus *b) {
  if (!b->signals_installed) return;
  sigaction(SIGTERM, &b->old_term, NULL);
  sigaction(SIGINT, &b->old_int, NULL);
  signal_stop_fd = -1;
  b->signals_installed = false;
}

void bus_options_init(struct bus_options *o) {
  memset(o, 0, sizeof *o);
  o->urls = "nats://127.0.0.1:4222";
  o->name = "llmbus";
  o->prefix = BUS_DEFAULT_PREFIX;
  o->connect_timeout_ms = 2000;
  o->max_reconnect = -1;
  o->reconnect_wait_min_ms = 100;
  o->reconnect_wait_max_ms = 5000;
  o->drain_timeout_ms = 30000;
  o->install_signal_handlers = true;
}

#define BUS_MAX_SERVERS 16

/* b->urls, "URL[,URL...]", as the server list (natsOptions_SetURL takes one URL only). The
 * list is tried in the order given (no randomizing): an operator puts the node nearest to the
 * actor first; the others are where it reconnects when that one dies. */
static llb_status set_servers(struct bus *b, natsOptions *opts) {
  char copy[sizeof b->urls];
  const char *servers[BUS_MAX_SERVERS];
  int n = 0;
  snprintf(copy, sizeof copy, "%s", b->urls);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ' || *tok == '\t') tok++;
    for (char *end = tok + strlen(tok); end > tok && (end[-1] == ' ' || end[-1] == '\t');) *--end = '\0';
    if (!*tok) continue;
    if (n == BUS_MAX_SERVERS)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NATS URL list \"%s\": more than %d servers", b->urls_shown,
                      BUS_MAX_SERVERS);
    servers[n++] = tok;
  }
  if (n == 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NATS URL list \"%s\" names no server", b->urls_shown);
  natsStatus s = natsOptions_SetServers(opts, servers, n);
  if (s == NATS_OK) s = natsOptions_SetNoRandomize(opts, true);
  if (s != NATS_OK)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bad NATS URL list \"%s\": %s", b->urls_shown, natsStatus_GetText(s));
  return LLB_STATUS_OK;
}

static llb_status set_options(struct bus *b, const struct bus_options *o, natsOptions *opts) {
  natsStatus s;
  llb_status lst = set_servers(b, opts);
  if (lst != LLB_STATUS_OK) return lst;
  if ((s = natsOptions_SetName(opts, o->name ? o->name : "llmbus")) != NATS_OK)
    return BUS_NATS_ERR(s, "set client name");
  if ((s = natsOptions_SetSendAsap(opts, true)) != NATS_OK) return BUS_NATS_ERR(s, "SendAsap");
  if ((s = natsOptions_SetTimeout(opts, o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000)) != NATS_OK)
    return BUS_NATS_ERR(s, "connect timeout");
  if ((s = natsOptions_SetMaxReconnect(opts, o->max_reconnect)) != NATS_OK)
    return BUS_NATS_ERR(s, "max reconnect");
  if ((s = natsOptions_SetCustomReconnectDelay(opts, reconnect_delay, b)) != NATS_OK)
    return BUS_NATS_ERR(s, "reconnect delay");
  if ((s = natsOptions_SetDisconnectedCB(opts, on_disconnected, b)) != NATS_OK ||
      (s = natsOptions_SetReconnectedCB(opts, on_reconnected, b)) != NATS_OK ||
      (s = natsOptions_SetClosedCB(opts, on_closed, b)) != NATS_OK ||
      (s = natsOptions_SetErrorHandler(opts, on_async_error, b)) != NATS_OK)
    return BUS_NATS_ERR(s, "connection callbacks");
  if (o->creds_file) {
    if (access(o->creds_file, R_OK) != 0)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "credentials file %s: %s", o->creds_file,
                      strerror(errno));
    if ((s = natsOptions_SetUserCredentialsFromFiles(opts, o->creds_file, NULL)) != NATS_OK)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "credentials file %s: %s", o->creds_file,
                      natsStatus_GetText(s));
  }
  if ((o->user != NULL) != (o->password != NULL))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "a NATS user needs a password and a password a user (user=%s)",
                    o->user ? o->user : "none");
  if (o->user && (s = natsOptions_SetUserInfo(opts, o->user, o->password)) != NATS_OK)
    return BUS_NATS_ERR(s, "user and password");
  if (o->tls_ca_file || o->tls_cert_file || o->tls_key_file) {
    if ((s = natsOptions_SetSecure(opts, true)) != NATS_OK) return BUS_NATS_ERR(s, "TLS");
    if (o->tls_ca_file && (s = natsOptions_LoadCATrustedCertificates(opts, o->tls_ca_file)) != NATS_OK)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "TLS CA file %s: %s (%s)", o->tls_ca_file,
                      natsStatus_GetText(s), nats_GetLastError(NULL));
    if ((o->tls_cert_file != NULL) != (o->tls_key_file != NULL))
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "TLS client certificate and key must be given together (cert=%s key=%s)",
                      o->tls_cert_file ? o->tls_cert_file : "none",
                      o->tls_key_file ? o->tls_key_file : "none");
    if (o->tls_cert_file &&
        (s = natsOptions_LoadCertificatesChain(opts, o->tls_cert_file, o->tls_key_file)) != NATS_OK)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "TLS certificate %s / key %s: %s (%s)",
                      o->tls_cert_file, o->tls_key_file, natsStatus_GetText(s),
                      nats_GetLastError(NULL));
  }
  if ((s = natsOptions_SetEventLoop(opts, b, bus_ev_attach, bus_ev_read, bus_ev_write, bus_ev_detach)) != NATS_OK)
    return BUS_NATS_ERR(s, "event loop");
  return LLB_STATUS_OK;
}

llb_status bus_connect(const struct bus_options *o, struct bus **out) {
  llb_status st = LLB_STATUS_OK;
  natsOptions *opts = NULL;
  struct bus *b = NULL;
  if (!o || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bus_connect: NULL argument");
  *out = NULL;
  const char *prefix = o->prefix ? o->prefix : BUS_DEFAULT_PREFIX;
  if ((st = bus_prefix_check(prefix)) != LLB_STATUS_OK) return st;
  const char *urls = o->urls && *o->urls ? o->urls : "nats://127.0.0.1:4222";
  if (strlen(urls) >= sizeof b->urls)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "NATS URL list longer than %zu bytes",
                    sizeof b->urls - 1);

  bus_libevent_init(); /* before event_base_new (bus/README.md) */
  b = calloc(1, sizeof *b);
  if (!b) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "bus_connect: no memory");
  b->stop_pipe[0] = b->stop_pipe[1] = -1;
  pthread_mutex_init(&b->mu, NULL);
  pthread_mutex_init(&b->grave_mu, NULL);
  pthread_mutex_init(&b->ev_mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  snprintf(b->prefix, sizeof b->prefix, "%s", prefix);
  snprintf(b->urls, sizeof b->urls, "%s", urls);
  llb_log_redact_url(b->urls_shown, sizeof b->urls_shown, urls);
  b->rc_min_ms = o->reconnect_wait_min_ms > 0 ? o->reconnect_wait_min_ms : 100;
  b->rc_max_ms = o->reconnect_wait_max_ms >= b->rc_min_ms ? o->reconnect_wait_max_ms : b->rc_min_ms;
  b->drain_timeout_ms = o->drain_timeout_ms > 0 ? o->drain_timeout_ms : 30000;
  b->install_signals = o->install_signal_handlers;
  bus_metrics_init(b, o->metrics);
  if (pipe2(b->stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    st = LLB_ERRF(LLB_STATUS_IO, "bus_connect: pipe: %s", strerror(errno));
    goto fail;
  }
  if (b->install_signals) signals_install(b);
  b->base = event_base_new();
  if (!b->base) {
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "bus_connect: event_base_new failed");
    goto fail;
  }
  b->loop_stop_ev = event_new(b->base, -1, 0, bus_loop_on_stop, b->base);
  b->deliver_ev = event_new(b->base, -1, 0, bus_loop_deliver, b);
  b->drain_ev = event_new(b->base, -1, EV_PERSIST, bus_loop_deliver, b);
  if (!b->loop_stop_ev || !b->deliver_ev || !b->drain_ev) {
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "bus_connect: event_new failed");
    goto fail;
  }
  /* The loop must run before the first flush, or nothing is read (bus/README.md). */
  if (pthread_create(&b->loop_thread, NULL, bus_loop_main, b) != 0) {
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "bus_connect: cannot start the loop thread");
    goto fail;
  }
  b->loop_started = true;

  natsStatus s = natsOptions_Create(&opts);
  if (s != NATS_OK) {
    st = BUS_NATS_ERR(s, "natsOptions_Create");
    goto fail;
  }
  if ((st = set_options(b, o, opts)) != LLB_STATUS_OK) goto fail;
  s = natsConnection_Connect(&b->nc, opts);
  if (s == NATS_NO_SERVER || s == NATS_TIMEOUT || s == NATS_IO_ERROR) {
    st = LLB_ERRF(LLB_STATUS_NO_SERVER, "no NATS server answered at %s (%s; connect timeout %lld ms)",
                  b->urls_shown, nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(s),
                  (long long)(o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000));
    b->nc = NULL;
    goto fail;
  }
  if (s != NATS_OK) {
    st = LLB_ERRF(bus_map_nats(s) == LLB_STATUS_OK ? LLB_STATUS_CONNECTION : bus_map_nats(s),
                  "connecting to %s: %s (%s)", b->urls_shown, natsStatus_GetText(s),
                  nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "");
    b->nc = NULL;
    goto fail;
  }
  natsOptions_Destroy(opts);
  char raw[256] = "";
  natsConnection_GetConnectedUrl(b->nc, raw, sizeof raw);
  llb_log_redact_url(b->url, sizeof b->url, raw);
  LLB_LOG_INFO("bus_connected", "url=%s max_payload=%lld prefix=%s", b->url,
               (long long)natsConnection_GetMaxPayload(b->nc), b->prefix);
  *out = b;
  return LLB_STATUS_OK;

fail:
  natsOptions_Destroy(opts);
  bus_destroy(b);
  return st;
}

static bool deadline_wait(struct bus *b, const struct timespec *dl) {
  return pthread_cond_timedwait(&b->cv, &b->mu, dl) != ETIMEDOUT;
}

static struct timespec deadline_in(int64_t timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  return dl;
}

/* Waits until *flag is true, up to timeout_ms; returns *flag. */
static bool wait_flag(struct bus *b, const bool *flag, int64_t timeout_ms) {
  const struct timespec dl = deadline_in(timeout_ms);
  pthread_mutex_lock(&b->mu);
  while (!*flag)
    if (!deadline_wait(b, &dl)) break;
  bool v = *flag;
  pthread_mutex_unlock(&b->mu);
  return v;
}

/* Waits until the connection is closed (when need_closed) AND the client has detached from
 * the loop (the closed callback comes first, see bus_ev_detach), up to timeout_ms; true if so. */
static bool wait_closed(struct bus *b, bool need_closed, int64_t timeout_ms) {
  const struct timespec dl = deadline_in(timeout_ms);
  pthread_mutex_lock(&b->mu);
  while ((need_closed && !b->closed) || b->ev_attached)
    if (!deadline_wait(b, &dl)) break;
  bool done = (!need_closed || b->closed) && !b->ev_attached;
  pthread_mutex_unlock(&b->mu);
  return done;
}

static void heartbeat_stop(struct bus *b) {
  if (!b->hb_ev) return;
  event_del(b->hb_ev); /* libevent 2.1: waits for a callback running on the loop thread */
  event_free(b->hb_ev);
  pthread_mutex_lock(&b->mu); /* bus_heartbeat_now reads the callback under mu */
  b->hb_ev = NULL;
  b->hb_fn = NULL;
  b->hb_also_subject[0] = '\0';
  pthread_mutex_unlock(&b->mu);
  free(b->hb_buf);
  b->hb_buf = NULL;
}

void bus_destroy(struct bus *b) {
  if (!b) return;
  bus_uncork(b); /* this thread's cork (bus_cork) must not outlive the bus */
  signals_restore(b);
  heartbeat_stop(b);
  bus_metrics_publish_stop(b);
  bool detached;
  if (!b->nc) {
    detached = wait_closed(b, false, BUS_CLOSE_WAIT_MS); /* a failed connect: normally at once */
  } else {
    /* Returns at once when a drain already closed (or is closing) it on the drain thread. */
    natsConnection_Close(b->nc);
    detached = wait_closed(b, true, BUS_CLOSE_WAIT_MS);
    /* No handler may run after we return: wait for each asynchronous subscription's last. */
    for (struct bus_sub *s = b->subs; s; s = s->next)
      if (s->fn) wait_flag(b, &s->complete, BUS_CLOSE_WAIT_MS);
  }
  /* nor one on the loop thread (bus_subscribe_on_loop): no read activates the deliver event any
   * more, and event_del waits for a delivery the loop thread is running (a threaded base) */
  atomic_store(&b->num_loop_subs, 0);
  if (b->deliver_ev) event_del(b->deliver_ev);
  if (b->drain_ev) event_del(b->drain_ev);
  bus_tracing_close_publish(b);
  while (b->subs) {
    struct bus_sub *s = b->subs;
    b->subs = s->next;
    natsSubscription_Destroy(s->ns);
    free(s);
  }
  natsConnection_Destroy(b->nc);
  b->nc = NULL;
  if (b->loop_started) {
    event_active(b->loop_stop_ev, EV_READ, 0);
    pthread_join(b->loop_thread, NULL);
  }
  bus_tracing_stop(b); /* no handler and no loop callback records a span any more */
  bus_msg_release_flush(b);
  for (int i = 0; i < 2; i++)
    if (b->stop_pipe[i] >= 0) close(b->stop_pipe[i]);
  if (!detached) {
    /* The client still holds events of b->base and will free them and signal b->cv when it
     * detaches: freeing now would corrupt the heap. Leak the base and the bus instead. */
    LLB_LOG_ERROR("bus_destroy_leak", "reason=client_not_detached wait_ms=%d", BUS_CLOSE_WAIT_MS);
    return;
  }
  if (b->loop_stop_ev) event_free(b->loop_stop_ev);
  if (b->deliver_ev) event_free(b->deliver_ev);
  if (b->drain_ev) event_free(b->drain_ev);
  if (b->base) event_base_free(b->base);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  pthread_mutex_destroy(&b->grave_mu);
  pthread_mutex_destroy(&b->ev_mu);
  free(b);
}

llb_status bus_shutdown(int64_t timeout_ms) {
  if (timeout_ms <= 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bus_shutdown: timeout_ms %lld must be > 0",
                    (long long)timeout_ms);
  natsStatus s = nats_CloseAndWait(timeout_ms);
  if (s == NATS_TIMEOUT)
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "NATS client threads still running after %lld ms",
                    (long long)timeout_ms);
  if (s == NATS_ILLEGAL_STATE)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "bus_shutdown called from a NATS client thread");
  if (s != NATS_OK) return BUS_NATS_ERR(s, "bus_shutdown");
  return LLB_STATUS_OK;
}

const char *bus_prefix(const struct bus *b) { return b->prefix; }

uint64_t bus_num_reconnects(struct bus *b) { return b ? atomic_load(&b->num_reconnects) : 0; }
int64_t bus_last_reconnect_ns(struct bus *b) { return b ? atomic_load(&b->last_reconnect_ns) : 0; }

int64_t bus_max_payload(struct bus *b) {
  return natsConnection_IsClosed(b->nc) ? 0 : natsConnection_GetMaxPayload(b->nc);
}

void bus_connected_url(struct bus *b, char *buf, size_t cap) {
  if (!cap) return;
  buf[0] = '\0';
  char raw[sizeof ((struct bus *)0)->urls];
  if (natsConnection_GetConnectedUrl(b->nc, raw, sizeof raw) == NATS_OK) llb_log_redact_url(buf, (unsigned)cap, raw);
}

struct event_base *bus_event_base(struct bus *b) { return b->base; }

/* ---- subscriptions ---- */

/* Hands m to s's handler (delivery thread, or the loop thread for s->on_loop), then frees it
 * unless the handler kept it. */
static void deliver(struct bus_sub *s, natsMsg *m) {
  struct bus_msg bm;
  bus_fill_msg(&bm, m);
  bus_metrics_observe_receive(s->m_receive, m);
  const int64_t t0 = s->m_handler ? llb_now_ns() : 0;
  s->fn(s->bus, &bm, s->user);
  if (s->m_handler) llb_series_observe(s->m_handler, (double)(llb_now_ns() - t0) / 1e9);
  if (bm.impl) bus_msg_release(s->bus, m); /* NULL: the handler kept it (bus_msg_keep) */
}

static void on_msg(natsConnection *nc, natsSubscription *ns, natsMsg *m, void *closure) {
  (void)nc;
  (void)ns;
  deliver(closure, m);
}

/* The subscriptions made by bus_subscribe_on_loop into subs[BUS_LOOP_SUBS_MAX]; their count.
 * They live until bus_destroy, which first removes the deliver and drain events (waiting for a
 * delivery the loop thread is running) and then frees them. */
static int loop_subs(struct bus *b, struct bus_sub **subs) {
  int n = 0;
  pthread_mutex_lock(&b->mu);
  for (struct bus_sub *s = b->subs; s && n < BUS_LOOP_SUBS_MAX; s = s->next)
    if (s->on_loop) subs[n++] = s;
  pthread_mutex_unlock(&b->mu);
  return n;
}

/* Delivers every message waiting on s (a subscription read by the loop), each NextMsg waiting
 * up to timeout_ms. A slow-consumer report (messages were dropped: on_async_error logs it) is
 * passed over; anything else but a message ends it. */
static void take_all(struct bus_sub *s, int64_t timeout_ms) {
  for (;;) {
    natsMsg *m = NULL;
    const natsStatus st = natsSubscription_NextMsg(&m, s->ns, timeout_ms);
    if (st == NATS_SLOW_CONSUMER) continue;
    if (st != NATS_OK) return;
    deliver(s, m);
  }
}

/* While the connection drains: a subscription that is draining and has nothing left is
 * removed by a NextMsg with a timeout (not by one without: libnats), which returns at once
 * then; one whose drain has not started yet waits up to 1 ms here (a drain only). Returns
 * whether s is still valid. */
static bool drain_step(struct bus_sub *s) {
  take_all(s, 1);
  return natsSubscription_IsValid(s->ns);
}

void bus_loop_deliver(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  struct bus *b = arg;
  struct bus_sub *subs[BUS_LOOP_SUBS_MAX];
  const int n = loop_subs(b, subs);
  for (int i = 0; i < n; i++) take_all(subs[i], 0);
  /* the drain's steps from the drain timer only: a step may wait 1 ms a subscription, which on
   * every read would hold the loop (and the reads the drain waits for) */
  if (!(what & EV_TIMEOUT) || !atomic_load(&b->draining)) return;
  int valid = 0;
  for (int i = 0; i < n; i++) valid += drain_step(subs[i]);
  if (valid == 0) event_del(b->drain_ev); /* every one drained: the timer's job is done */
}

static void on_sub_complete(void *closure) {
  struct bus_sub *s = closure;
  pthread_mutex_lock(&s->bus->mu);
  s->complete = true;
  pthread_cond_broadcast(&s->bus->cv);
  pthread_mutex_unlock(&s->bus->mu);
}

/* The NATS subscription of s: asynchronous (a delivery thread calls on_msg), or synchronous
 * (no handler; or s->on_loop: read by the loop thread). */
static natsStatus nats_subscribe(struct bus_sub *s, const char *subject, const char *queue) {
  natsConnection *nc = s->bus->nc;
  if (!s->fn || s->on_loop)
    return queue ? natsConnection_QueueSubscribeSync(&s->ns, nc, subject, queue)
                 : natsConnection_SubscribeSync(&s->ns, nc, subject);
  return queue ? natsConnection_QueueSubscribe(&s->ns, nc, subject, queue, on_msg, s)
               : natsConnection_Subscribe(&s->ns, nc, subject, on_msg, s);
}

static llb_status subscribe(struct bus *b, const char *subject, const char *queue, bus_handler_fn fn,
                            bool on_loop, void *user, struct bus_sub **out) {
  if (out) *out = NULL;
  if (!b || !subject || !*subject)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subscribe: NULL bus or subject");
  if (queue && !bus_token_valid(queue))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "queue group \"%s\" is not a valid token", queue);
  struct bus_sub *s = calloc(1, sizeof *s);
  if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "subscribe: no memory");
  s->bus = b;
  s->fn = fn;
  s->user = user;
  s->on_loop = on_loop;
  s->complete = on_loop; /* no delivery thread: bus_destroy removes the deliver event instead */
  if (fn) {
    s->m_receive = bus_metrics_series(b->m_receive, subject);
    s->m_handler = bus_metrics_series(b->m_handler, subject);
  }
  if (on_loop && atomic_fetch_add(&b->num_loop_subs, 1) >= BUS_LOOP_SUBS_MAX) {
    atomic_fetch_sub(&b->num_loop_subs, 1);
    free(s);
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subscribe %s: at most %d subscriptions on the loop", subject,
                    BUS_LOOP_SUBS_MAX);
  }
  const natsStatus ns = nats_subscribe(s, subject, queue);
  if (ns != NATS_OK) {
    if (on_loop) atomic_fetch_sub(&b->num_loop_subs, 1);
    free(s);
    return BUS_NATS_ERR(ns, subject);
  }
  if (fn && !on_loop && natsSubscription_SetOnCompleteCB(s->ns, on_sub_complete, s) != NATS_OK)
    s->complete = true; /* already closed: no handler will run */
  pthread_mutex_lock(&b->mu);
  s->next = b->subs;
  b->subs = s;
  pthread_mutex_unlock(&b->mu);
  /* a message that arrived between the subscribe and the list: handled now, not at the next read */
  if (on_loop) event_active(b->deliver_ev, EV_READ, 0);
  if (out) *out = s;
  return LLB_STATUS_OK;
}

llb_status bus_subscribe(struct bus *b, const char *subject, const char *queue,
                         bus_handler_fn fn, void *user, struct bus_sub **out) {
  if (!fn) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subscribe %s: NULL handler", subject);
  return subscribe(b, subject, queue, fn, false, user, out);
}

llb_status bus_subscribe_on_loop(struct bus *b, const char *subject, const char *queue, bus_handler_fn fn,
                                 void *user, struct bus_sub **out) {
  if (!fn) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subscribe %s: NULL handler", subject);
  return subscribe(b, subject, queue, fn, true, user, out);
}

llb_status bus_subscribe_sync(struct bus *b, const char *subject, struct bus_sub **out) {
  if (!out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "subscribe_sync: NULL out");
  return subscribe(b, subject, NULL, NULL, false, NULL, out);
}

llb_status bus_sub_next_msg(struct bus_sub *sub, int64_t timeout_ms, struct bus_msg **msg) {
  if (!sub || !msg || sub->fn)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "next_msg: not a synchronous subscription");
  *msg = NULL;
  bus_uncork(sub->bus); /* it may wait for an answer to what the thread published */
  natsMsg *m = NULL;
  natsStatus s = natsSubscription_NextMsg(&m, sub->ns, timeout_ms);
  if (s == NATS_TIMEOUT)
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "no message within %lld ms", (long long)timeout_ms);
  if (s != NATS_OK) return BUS_NATS_ERR(s, "next message");
  return bus_wrap_owned_msg(m, msg);
}

int64_t bus_sub_pending(const struct bus_sub *sub) {
  int msgs = 0, bytes = 0;
  if (!sub || natsSubscription_GetPending(sub->ns, &msgs, &bytes) != NATS_OK) return -1;
  return msgs;
}

llb_status bus_unsubscribe(struct bus_sub *sub) {
  if (!sub) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "unsubscribe: NULL");
  natsStatus s = natsSubscription_Unsubscribe(sub->ns);
  if (s != NATS_OK) return BUS_NATS_ERR(s, "unsubscribe");
  return LLB_STATUS_OK;
}

llb_status bus_new_inbox(struct bus *b, char *buf, size_t cap) {
  (void)b;
  natsInbox *inbox = NULL;
  natsStatus s = natsInbox_Create(&inbox);
  if (s != NATS_OK) return BUS_NATS_ERR(s, "inbox");
  int n = snprintf(buf, cap, "%s", (const char *)inbox);
  natsInbox_Destroy(inbox);
  if (n < 0 || (size_t)n >= cap) return LLB_ERRF(LLB_STATUS_TOO_LARGE, "inbox needs %d bytes", n + 1);
  return LLB_STATUS_OK;
}

llb_status bus_flush(struct bus *b, int64_t timeout_ms) {
  bus_uncork(b); /* the PING must go out */
  natsStatus s = natsConnection_FlushTimeout(b->nc, timeout_ms);
  if (s != NATS_OK) return BUS_NATS_ERR(s, "flush");
  return LLB_STATUS_OK;
}

/* ---- heartbeat ---- */

/* One beat on the health subject and, when set, the engine's (bus_heartbeat_also). */
static llb_status publish_beat(struct bus *b, const uint8_t *buf, size_t len) {
  char subject[BUS_SUBJECT_MAX], also[BUS_SUBJECT_MAX];
  pthread_mutex_lock(&b->mu);
  memcpy(subject, b->hb_subject, sizeof subject);
  memcpy(also, b->hb_also_subject, sizeof also);
  pthread_mutex_unlock(&b->mu);
  llb_status st = bus_publish(b, subject, buf, len, NULL);
  if (st == LLB_STATUS_OK && also[0]) st = bus_publish(b, also, buf, len, NULL);
  return st;
}

static void heartbeat_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct bus *b = arg;
  size_t len = 0;
  llb_status st = b->hb_fn(b->hb_user, b->hb_buf, b->hb_cap, &len);
  if (st == LLB_STATUS_OK && len > b->hb_cap)
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "heartbeat callback wrote %zu bytes into %zu", len, b->hb_cap);
  if (st == LLB_STATUS_OK) st = publish_beat(b, b->hb_buf, len);
  if (st != LLB_STATUS_OK) {
    char q[600];
    LLB_LOG_WARN("bus_heartbeat_failed", "subject=%s status=%s err=%s", b->hb_subject,
                 llb_strerror(st), llb_log_quote(q, sizeof q, llb_err_last()));
  }
}

llb_status bus_heartbeat_start(struct bus *b, const char *actor, const char *instance,
                               int64_t interval_ms, size_t cap, bus_heartbeat_fn fn, void *user) {
  if (!b || !fn || interval_ms <= 0 || cap == 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "heartbeat: need a callback, interval_ms > 0 and cap > 0");
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_health(b->prefix, actor, instance, subject, sizeof subject);
  if (st != LLB_STATUS_OK) return st;
  heartbeat_stop(b);
  b->hb_buf = malloc(cap);
  if (!b->hb_buf) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "heartbeat: %zu bytes", cap);
  struct event *ev = event_new(b->base, -1, EV_PERSIST, heartbeat_tick, b);
  if (!ev) {
    free(b->hb_buf);
    b->hb_buf = NULL;
    return LLB_ERRF(LLB_STATUS_INTERNAL, "heartbeat: event_new failed");
  }
  pthread_mutex_lock(&b->mu);
  b->hb_cap = cap;
  b->hb_fn = fn;
  b->hb_user = user;
  memcpy(b->hb_subject, subject, sizeof subject);
  b->hb_ev = ev;
  pthread_mutex_unlock(&b->mu);
  struct timeval tv = {.tv_sec = interval_ms / 1000, .tv_usec = (interval_ms % 1000) * 1000};
  event_add(b->hb_ev, &tv);
  event_active(b->hb_ev, EV_TIMEOUT, 0); /* the first beat right away */
  return LLB_STATUS_OK;
}

llb_status bus_heartbeat_now(struct bus *b) {
  if (!b) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "heartbeat: no bus");
  pthread_mutex_lock(&b->mu);
  bus_heartbeat_fn fn = b->hb_fn;
  void *user = b->hb_user;
  size_t cap = b->hb_cap;
  pthread_mutex_unlock(&b->mu);
  if (!fn) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "heartbeat: not started");
  uint8_t *buf = malloc(cap);
  if (!buf) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "heartbeat: %zu bytes", cap);
  size_t len = 0;
  llb_status st = fn(user, buf, cap, &len);
  if (st == LLB_STATUS_OK && len > cap)
    st = LLB_ERRF(LLB_STATUS_INTERNAL, "heartbeat callback wrote %zu bytes into %zu", len, cap);
  if (st == LLB_STATUS_OK) st = publish_beat(b, buf, len);
  free(buf);
  return st;
}

llb_status bus_heartbeat_also(struct bus *b, const char *subject) {
  if (!b || !subject || strlen(subject) >= BUS_SUBJECT_MAX)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "heartbeat: no bus, or subject too long");
  pthread_mutex_lock(&b->mu);
  const bool started = b->hb_fn != NULL;
  if (started) snprintf(b->hb_also_subject, sizeof b->hb_also_subject, "%s", subject);
  pthread_mutex_unlock(&b->mu);
  return started ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "heartbeat: not started");
}

/* ---- stop, drain, run ---- */

void bus_stop(struct bus *b) {
  if (!b) return;
  unsigned char c = 0;
  ssize_t w = write(b->stop_pipe[1], &c, 1);
  (void)w;
}

bool bus_stop_requested(struct bus *b) {
  if (!b) return false;
  struct pollfd p = {.fd = b->stop_pipe[0], .events = POLLIN};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN); /* peeked, not read: bus_actor_run sees it too */
}

llb_status bus_drain(struct bus *b, int64_t timeout_ms) {
  heartbeat_stop(b);
  bus_metrics_publish_stop(b);
  int64_t t0 = llb_now_ns();
  atomic_store(&b->draining, true);
  if (atomic_load(&b->num_loop_subs) > 0) { /* their drain completes from the loop (bus_loop_deliver) */
    const struct timeval every = {.tv_sec = 0, .tv_usec = 5000};
    event_add(b->drain_ev, &every);
  }
  natsStatus s = natsConnection_DrainTimeout(b->nc, timeout_ms);
  if (s != NATS_OK) {
    /* Not connected (or already closed): nothing can be delivered; close. */
    LLB_LOG_WARN("bus_drain_skipped", "reason=%s", natsStatus_GetText(s));
    natsConnection_Close(b->nc);
  }
  /* Closed and detached from the loop: the client's drain thread is done with the bus. */
  bool closed = wait_closed(b, true, timeout_ms + 2000);
  event_del(b->drain_ev); /* waits for a tick the loop thread is running */
  int64_t ms = (llb_now_ns() - t0) / 1000000;
  const char *err = NULL;
  /* The client closes the connection when its drain timer fires without a distinct status
   * in every version, so a drain that lasted the whole timeout counts as cut short. */
  if (!closed || natsConnection_GetLastError(b->nc, &err) == NATS_TIMEOUT || ms >= timeout_ms) {
    LLB_LOG_WARN("bus_drain_timeout", "timeout_ms=%lld", (long long)timeout_ms);
    return LLB_ERRF(LLB_STATUS_TIMEOUT, "drain did not finish within %lld ms",
                    (long long)timeout_ms);
  }
  LLB_LOG_INFO("bus_drained", "duration_ms=%lld", (long long)ms);
  return LLB_STATUS_OK;
}

void bus_set_before_drain(struct bus *b, void (*fn)(void *user), void *user) {
  if (!b) return;
  b->before_drain = fn;
  b->before_drain_user = user;
}

llb_status bus_actor_run(struct bus *b) {
  if (!b) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bus_actor_run: NULL bus");
  LLB_LOG_INFO("bus_running", "prefix=%s", b->prefix);
  unsigned char why = 0;
  for (;;) {
    struct pollfd p = {.fd = b->stop_pipe[0], .events = POLLIN};
    int r = poll(&p, 1, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && read(b->stop_pipe[0], &why, 1) == 1) break;
    if (r < 0) break;
  }
  LLB_LOG_INFO("bus_stopping", "reason=%s drain_timeout_ms=%lld",
               why == SIGTERM ? "SIGTERM" : why == SIGINT ? "SIGINT" : "stop",
               (long long)b->drain_timeout_ms);
  if (b->before_drain) b->before_drain(b->before_drain_user);
  return bus_drain(b, b->drain_timeout_ms);
}
