/* Per-connection policing of evhttp: read deadlines, a connection limit, a header gate with
 * held refusals (see http_guard.h). */
#include "actors/api_server/http_guard.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "base/log.h"

#define MAX_HEADER_BYTES (64 * 1024) /* evhttp_set_max_headers_size of the listener */
#define MAX_AUTH_BYTES 1024
#define MAX_PATH_BYTES 255
#define MAX_DRAIN_BYTES (256 * 1024) /* read and dropped before a held answer: below, drain */

/* One connection, from the accept until evhttp freed it (seen at a sweep). */
struct conn {
  struct conn *prev, *next;
  struct http_guard *g;
  struct bufferevent *bev;         /* a reference is held: the pointer stays valid */
  struct evhttp_connection *evcon; /* once adopted */
  struct event *adopt_ev;          /* activated: adopt, then re-wrap after each response */
  struct event *timer;             /* the read deadline */
  bufferevent_data_cb rd, wr;      /* evhttp's callbacks while ours wrap them */
  bufferevent_event_cb ev;
  void *cbarg;
  size_t scanned;                  /* header bytes searched for their end so far */
  int64_t start_ns;                /* the deadline is start + timeout */
  char *held_answer;               /* a refusal held until the timer (malloc'd), or NULL */
  int32_t ticket;                  /* the gate's, to give back; -1 = none */
  bool adopted, reading, gate_passed, closed;
};

struct http_guard {
  struct evhttp *http;
  struct event_base *base; /* from the first bufferevent callback */
  struct http_guard_options o;
  char *busy_response;
  struct conn *head;
  uint64_t num_expired, num_busy, num_refused;
};

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* evhttp frees a bufferevent through bufferevent_free, which unsets every callback first (our
 * reference keeps the memory). */
static bool bev_freed(struct bufferevent *bev) {
  bufferevent_data_cb rd, wr;
  bufferevent_event_cb ev;
  bufferevent_getcb(bev, &rd, &wr, &ev, NULL);
  return !rd && !wr && !ev;
}

/* Gives the gate back the connection's ticket, if any (once). */
static void give_back(struct conn *c) {
  if (c->ticket >= 0 && c->g->o.release) c->g->o.release(c->g->o.gate_user, c->ticket);
  c->ticket = -1;
}

static void conn_free(struct conn *c) {
  struct http_guard *g = c->g;
  give_back(c);
  free(c->held_answer);
  if (c->prev) c->prev->next = c->next;
  else g->head = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->adopt_ev) event_free(c->adopt_ev);
  if (c->timer) event_free(c->timer);
  bufferevent_decref(c->bev);
  free(c);
}

/* Forgets the adopted connections evhttp has freed. */
static void sweep(struct http_guard *g) {
  for (struct conn *c = g->head, *next; c; c = next) {
    next = c->next;
    if (c->adopted && bev_freed(c->bev)) conn_free(c);
  }
}

static int32_t count_open(struct http_guard *g) {
  sweep(g);
  int32_t n = 0;
  for (struct conn *c = g->head; c; c = c->next) n += !c->closed;
  return n;
}

/* Arms the deadline for what is left of it (0 = at once). */
static void arm(struct conn *c, int64_t left_ms) {
  if (left_ms < 0) left_ms = 0;
  struct timeval tv = {.tv_sec = (time_t)(left_ms / 1000), .tv_usec = (suseconds_t)(left_ms % 1000) * 1000};
  evtimer_add(c->timer, &tv);
}

/* Writes a whole prepared response straight to the socket (a fresh or idle connection: its
 * send buffer is empty, and a few hundred bytes fit) and closes the connection. */
static void answer_and_close(struct conn *c, const char *response) {
  evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (fd >= 0 && response) (void)send(fd, response, strlen(response), MSG_NOSIGNAL | MSG_DONTWAIT);
  c->closed = true;
  evtimer_del(c->timer);
  evhttp_connection_free(c->evcon); /* the record goes at the next sweep */
}

/* ---- the header gate ---- */

static void guard_read(struct bufferevent *bev, void *arg);
static void guard_write(struct bufferevent *bev, void *arg) {
  struct conn *c = arg;
  if (c->wr) c->wr(bev, c->cbarg);
}
static void guard_event(struct bufferevent *bev, short what, void *arg) {
  struct conn *c = arg;
  if (c->ev) c->ev(bev, what, c->cbarg);
}

/* Puts our callbacks around evhttp's, for the next request's headers. */
static void wrap(struct conn *c) {
  bufferevent_data_cb rd, wr;
  bufferevent_event_cb ev;
  void *arg = NULL;
  bufferevent_getcb(c->bev, &rd, &wr, &ev, &arg);
  if (!rd || rd == guard_read || arg != c->evcon) return; /* no read callback: evhttp is writing */
  c->rd = rd, c->wr = wr, c->ev = ev, c->cbarg = arg;
  c->gate_passed = false;
  c->scanned = 0;
  bufferevent_setcb(c->bev, guard_read, guard_write, guard_event, c);
}

/* Where the header block of the input ends (after its empty line), searching only the bytes
 * not searched before (a client trickling its headers costs one pass); 0 while incomplete. */
static size_t header_end(struct conn *c, struct evbuffer *in) {
  const size_t len = evbuffer_get_length(in);
  struct evbuffer_ptr p;
  if (evbuffer_ptr_set(in, &p, c->scanned, EVBUFFER_PTR_SET) != 0) return 0;
  for (;;) {
    p = evbuffer_search(in, "\n", 1, &p);
    if (p.pos < 0) break;
    char next[3] = {0};
    ev_ssize_t got = evbuffer_copyout_from(in, &p, next, sizeof next);
    if (got >= 2 && next[1] == '\n') return (size_t)p.pos + 2;
    if (got >= 3 && next[1] == '\r' && next[2] == '\n') return (size_t)p.pos + 3;
    if (got < 3) { /* the end may still come: search this newline again next time */
      c->scanned = (size_t)p.pos;
      return 0;
    }
    if (evbuffer_ptr_set(in, &p, 1, EVBUFFER_PTR_ADD) != 0) break;
  }
  c->scanned = len;
  return 0;
}

/* The request line's target before any '?' into path[MAX_PATH_BYTES + 1] ("" when longer), as
 * evhttp routes it: an absolute-form target ("http://host/v1/...", RFC 9112 3.2.2) by its path,
 * percent-escapes decoded (evhttp matches the decoded path against its callbacks). */
static void request_path(const char *h, size_t n, char *path) {
  path[0] = '\0';
  const char *sp = memchr(h, ' ', n < 16 ? n : 16);
  if (!sp) return;
  const char *p = sp + 1, *end = h + n;
  size_t len = 0;
  while (p + len < end && p[len] != ' ' && p[len] != '?' && p[len] != '\r' && p[len] != '\n') len++;
  const size_t scheme = len >= 7 && strncasecmp(p, "http://", 7) == 0 ? 7 : len >= 8 && strncasecmp(p, "https://", 8) == 0 ? 8 : 0;
  if (scheme) { /* skip the authority */
    size_t k = scheme;
    while (k < len && p[k] != '/') k++;
    p += k, len -= k;
  }
  if (len > MAX_PATH_BYTES) return;
  char raw[MAX_PATH_BYTES + 1];
  memcpy(raw, p, len);
  raw[len] = '\0';
  size_t dn = 0;
  char *decoded = evhttp_uridecode(raw, 0, &dn);
  if (decoded && dn <= MAX_PATH_BYTES) memcpy(path, decoded, dn + 1);
  free(decoded);
}

/* The gate's verdict on the header block h[0..n) (the method, the path, the first
 * Authorization value). */
static void gate_verdict(const struct http_guard *g, const char *h, size_t n, struct http_gate_verdict *v) {
  char path[MAX_PATH_BYTES + 1];
  request_path(h, n, path);
  struct http_gate_request r = {.is_options = n >= 8 && memcmp(h, "OPTIONS ", 8) == 0,
                                .is_post = n >= 5 && memcmp(h, "POST ", 5) == 0, .path = path};
  char auth[MAX_AUTH_BYTES + 1];
  bool have_auth = false;
  const char *line = memchr(h, '\n', n);
  while (line && !have_auth) {
    line++;
    const char *end = memchr(line, '\n', n - (size_t)(line - h));
    if (!end) break;
    const size_t ll = (size_t)(end - line);
    if (ll > 14 && strncasecmp(line, "Authorization:", 14) == 0) {
      const char *v = line + 14, *ve = end;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      const size_t vl = (size_t)(ve - v) < MAX_AUTH_BYTES ? (size_t)(ve - v) : MAX_AUTH_BYTES;
      memcpy(auth, v, vl);
      auth[vl] = '\0';
      have_auth = strlen(auth) == vl; /* a NUL inside: no key of ours */
    }
    line = end;
  }
  r.authorization = have_auth ? auth : NULL;
  *v = (struct http_gate_verdict){.ticket = -1};
  g->o.gate(g->o.gate_user, &r, v);
}

/* Drops what the client has sent and we have not read (up to MAX_DRAIN_BYTES): closing a
 * socket with unread input sends a reset, which can destroy the answer before the client reads
 * it (a held refusal's client has sent its body meanwhile). */
static void drain(struct conn *c) {
  evutil_socket_t fd = bufferevent_getfd(c->bev);
  char buf[16384];
  for (size_t n = 0; fd >= 0 && n < MAX_DRAIN_BYTES;) {
    ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (got <= 0) break;
    n += (size_t)got;
  }
}

/* Holds the refusal for hold_ms (the tarpit): nothing more is read; the timer answers. */
static void hold(struct conn *c, const char *refusal, int64_t hold_ms) {
  c->held_answer = strdup(refusal);
  if (!c->held_answer) { /* out of memory: answered at once */
    answer_and_close(c, refusal);
    give_back(c);
    return;
  }
  c->reading = false;
  bufferevent_disable(c->bev, EV_READ);
  evtimer_del(c->timer);
  arm(c, hold_ms);
}

/* The hold is over: the refusal goes out, the connection is closed, the ticket given back. */
static void send_held(struct conn *c) {
  drain(c);
  answer_and_close(c, c->held_answer);
  free(c->held_answer);
  c->held_answer = NULL;
  give_back(c);
}

static void guard_read(struct bufferevent *bev, void *arg) {
  struct conn *c = arg;
  struct http_guard *g = c->g;
  if (!c->gate_passed) {
    struct evbuffer *in = bufferevent_get_input(bev);
    const size_t end = header_end(c, in);
    if (!end && evbuffer_get_length(in) <= MAX_HEADER_BYTES) return; /* the rest of the headers first */
    if (end) {
      const char *h = (const char *)evbuffer_pullup(in, (ev_ssize_t)end);
      struct http_gate_verdict v = {.ticket = -1};
      sweep(g); /* the tickets of connections evhttp freed come back before the gate counts */
      if (h) gate_verdict(g, h, end, &v);
      give_back(c); /* none is left here (on_complete gave it back): kept balanced all the same */
      c->ticket = v.ticket;
      if (v.refusal) {
        if (g->num_refused++ % 100 == 0)
          LLB_LOG_WARN("http_refused_on_headers", "count=%llu", (unsigned long long)g->num_refused);
        if (v.hold_ms > 0) {
          hold(c, v.refusal, v.hold_ms);
        } else {
          answer_and_close(c, v.refusal);
          give_back(c);
        }
        return;
      }
    } /* headers over the limit: evhttp answers that */
    c->gate_passed = true;
  }
  if (c->rd) c->rd(bev, c->cbarg);
}

/* ---- adoption, deadlines ---- */

static void expire(struct conn *c) {
  char *host = NULL;
  ev_uint16_t port = 0;
  evhttp_connection_get_peer(c->evcon, &host, &port);
  LLB_LOG_WARN("http_read_timeout", "peer=%s:%u timeout_ms=%lld: no complete request in time, closed",
               host ? host : "?", (unsigned)port, (long long)c->g->o.read_timeout_ms);
  c->g->num_expired++;
  c->closed = true;
  evhttp_connection_free(c->evcon);
  conn_free(c);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct conn *c = arg;
  if (bev_freed(c->bev)) conn_free(c);
  else if (c->held_answer) send_held(c);
  else if (c->reading && !c->closed) expire(c);
}

/* Right after the accept (before any read of the connection), then after each response. */
static void on_adopt(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct conn *c = arg;
  struct http_guard *g = c->g;
  if (bev_freed(c->bev)) { /* evhttp gave up on it (or closed it after a response) */
    conn_free(c);
    return;
  }
  if (!c->adopted) {
    void *cbarg = NULL;
    bufferevent_getcb(c->bev, NULL, NULL, NULL, &cbarg);
    c->evcon = cbarg;
    c->adopted = true;
    if (g->o.max_connections > 0 && count_open(g) > g->o.max_connections) {
      if (g->num_busy++ % 100 == 0)
        LLB_LOG_WARN("http_connection_refused", "open=%d max_connections=%d count=%llu", g->o.max_connections + 1,
                     g->o.max_connections, (unsigned long long)g->num_busy);
      answer_and_close(c, g->busy_response);
      return;
    }
    c->reading = true;
    arm(c, g->o.read_timeout_ms - (mono_ns() - c->start_ns) / 1000000);
  }
  if (g->o.gate && c->reading && !c->closed) wrap(c);
}

/* evhttp's hook for a new connection's bufferevent: the kind evhttp makes itself, a record
 * with a reference to it, and the adoption activated now, so it runs once this accept callback
 * returns, before the connection's first read (an activated event comes before the next
 * poll for I/O). */
static struct bufferevent *on_new_bufferevent(struct event_base *base, void *arg) {
  struct http_guard *g = arg;
  g->base = base;
  struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (!bev) return NULL;
  struct conn *c = calloc(1, sizeof *c);
  if (c) {
    c->adopt_ev = event_new(base, -1, 0, on_adopt, c);
    c->timer = evtimer_new(base, on_timer, c);
  }
  if (!c || !c->adopt_ev || !c->timer) {
    if (c && c->adopt_ev) event_free(c->adopt_ev);
    if (c && c->timer) event_free(c->timer);
    free(c);
    LLB_LOG_ERROR("http_guard_dropped", "reason=out_of_memory: this connection is not policed");
    return bev;
  }
  c->g = g;
  c->bev = bev;
  c->ticket = -1;
  bufferevent_incref(bev);
  c->start_ns = mono_ns();
  c->next = g->head;
  if (g->head) g->head->prev = c;
  g->head = c;
  event_active(c->adopt_ev, 0, 1);
  return bev;
}

static struct conn *find(struct http_guard *g, struct evhttp_connection *evcon) {
  for (struct conn *c = g->head; c; c = c->next)
    if (c->adopted && c->evcon == evcon && !c->closed && !bev_freed(c->bev)) return c;
  return NULL;
}

/* The answer was written: the next request on this kept-alive connection gets a deadline, and
 * its headers the gate (once evhttp has set its callbacks for it: the activated event). */
static void on_complete(struct evhttp_request *req, void *arg) {
  struct http_guard *g = arg;
  struct evhttp_connection *evcon = evhttp_request_get_connection(req);
  struct conn *c = evcon ? find(g, evcon) : NULL;
  if (!c) return;
  give_back(c); /* the request's ticket: its answer is written */
  c->reading = true;
  c->start_ns = mono_ns();
  arm(c, g->o.read_timeout_ms);
  if (g->o.gate) event_active(c->adopt_ev, 0, 1);
}

llb_status http_guard_create(struct evhttp *http, const struct http_guard_options *o, struct http_guard **out) {
  *out = NULL;
  if (!http || !o || o->read_timeout_ms <= 0 || o->max_connections < 0 || (o->gate && !o->release))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "http guard: no server, a timeout <= 0 or a gate without release");
  struct http_guard *g = calloc(1, sizeof *g);
  if (!g) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "http guard");
  g->http = http;
  g->o = *o;
  g->busy_response = strdup(o->busy_response ? o->busy_response : "HTTP/1.1 503 Service Unavailable\r\n"
                                                                   "Content-Length: 0\r\nConnection: close\r\n\r\n");
  if (!g->busy_response) {
    http_guard_destroy(g);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "http guard");
  }
  g->o.busy_response = g->busy_response;
  evhttp_set_bevcb(http, on_new_bufferevent, g);
  *out = g;
  return LLB_STATUS_OK;
}

void http_guard_request_read(struct http_guard *g, struct evhttp_request *req) {
  struct evhttp_connection *evcon = evhttp_request_get_connection(req);
  if (!g || !evcon) return;
  struct conn *c = find(g, evcon);
  if (c) {
    c->reading = false;
    evtimer_del(c->timer);
  }
  evhttp_request_set_on_complete_cb(req, on_complete, g);
}

uint64_t http_guard_num_expired(const struct http_guard *g) { return g ? g->num_expired : 0; }
uint64_t http_guard_num_busy(const struct http_guard *g) { return g ? g->num_busy : 0; }
uint64_t http_guard_num_refused(const struct http_guard *g) { return g ? g->num_refused : 0; }
int32_t http_guard_num_open(struct http_guard *g) { return g ? count_open(g) : 0; }

void http_guard_destroy(struct http_guard *g) {
  if (!g) return;
  g->o.release = NULL; /* the gate may be gone already: its counts end with it */
  while (g->head) conn_free(g->head); /* evhttp_free closed every connection */
  free(g->busy_response);
  free(g);
}
