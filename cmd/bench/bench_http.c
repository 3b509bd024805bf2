/* llmbus-bench HTTP client; see bench_http.h. */
#include "cmd/bench/bench_http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "cmd/bench/bench.h"

#define HEADER_MAX 16384
#define ERROR_BODY_MAX 4096

llb_status bench_target_parse(const char *base_url, struct bench_target *out) {
  memset(out, 0, sizeof *out);
  const char *p = base_url;
  if (strncmp(p, "http://", 7) != 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "base URL must start with http:// (got '%s')", base_url);
  p += 7;
  const char *end = p + strcspn(p, "/");
  const char *colon = NULL;
  for (const char *q = p; q < end; q++)
    if (*q == ':') colon = q;
  const char *host_end = colon ? colon : end;
  if (host_end == p || (size_t)(host_end - p) >= sizeof out->host)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no host in '%s'", base_url);
  memcpy(out->host, p, (size_t)(host_end - p));
  if (colon) {
    size_t pl = (size_t)(end - colon - 1);
    if (pl == 0 || pl >= sizeof out->port || strspn(colon + 1, "0123456789") < pl)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bad port in '%s'", base_url);
    memcpy(out->port, colon + 1, pl);
  } else {
    snprintf(out->port, sizeof out->port, "80");
  }
  if (*end && strcmp(end, "/") != 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "base URL takes no path ('%s'): give --endpoint", base_url);
  return LLB_STATUS_OK;
}

static llb_status dial(const struct bench_target *t, double timeout_s, int *fd_out) {
  *fd_out = -1;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int rc = getaddrinfo(t->host, t->port, &hints, &ai);
  if (rc != 0) return LLB_ERRF(LLB_STATUS_CONNECTION, "%s:%s: %s", t->host, t->port, gai_strerror(rc));
  int fd = -1, err = 0;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) return LLB_ERRF(LLB_STATUS_CONNECTION, "connect %s:%s: %s", t->host, t->port, strerror(err));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval tv = {.tv_sec = (time_t)timeout_s, .tv_usec = (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  *fd_out = fd;
  return LLB_STATUS_OK;
}

static llb_status send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return LLB_ERRF(LLB_STATUS_IO, "send: %s", strerror(errno));
    p += w;
    n -= (size_t)w;
  }
  return LLB_STATUS_OK;
}

/* The response head, read up to its blank line; leftover body bytes stay in buf. */
struct http_head {
  int status;
  bool chunked;
  int64_t content_length; /* -1 = until close */
  char buf[HEADER_MAX];
  size_t len;       /* bytes in buf */
  size_t body_at;   /* first body byte in buf */
};

static llb_status read_head(int fd, struct http_head *h) {
  h->len = 0;
  h->content_length = -1;
  for (;;) {
    if (h->len == sizeof h->buf - 1) return LLB_ERRF(LLB_STATUS_MALFORMED, "response head over %d bytes", HEADER_MAX);
    ssize_t r = recv(fd, h->buf + h->len, sizeof h->buf - 1 - h->len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return LLB_ERRF(LLB_STATUS_TIMEOUT, "no response head");
    if (r <= 0) return LLB_ERRF(LLB_STATUS_CLOSED, "connection closed before the response head");
    h->len += (size_t)r;
    h->buf[h->len] = '\0';
    char *end = strstr(h->buf, "\r\n\r\n");
    if (!end) continue;
    h->body_at = (size_t)(end - h->buf) + 4;
    break;
  }
  if (sscanf(h->buf, "HTTP/%*d.%*d %d", &h->status) != 1) return LLB_ERRF(LLB_STATUS_MALFORMED, "not an HTTP response");
  for (char *line = strstr(h->buf, "\r\n"); line && (size_t)(line - h->buf) < h->body_at - 4; line = strstr(line, "\r\n")) {
    line += 2;
    if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
      char *v = line + 18;
      char *eol = strstr(v, "\r\n");
      for (char *q = v; q + 7 <= eol; q++)
        if (strncasecmp(q, "chunked", 7) == 0) h->chunked = true;
    } else if (strncasecmp(line, "content-length:", 15) == 0) {
      h->content_length = strtoll(line + 15, NULL, 10);
    }
  }
  return LLB_STATUS_OK;
}

/* Body reader: raw bytes -> (de-chunked) payload. Returns payload bytes in buf, 0 at the end,
 * -1 on error (*st set). */
struct body_reader {
  int fd;
  struct http_head *h;
  struct bench_chunked ch;
  int64_t consumed; /* raw body bytes so far */
  bool first;
};

static ssize_t body_read(struct body_reader *b, char *buf, size_t cap, llb_status *st) {
  for (;;) {
    if (b->h->chunked && b->ch.done) return 0;
    if (!b->h->chunked && b->h->content_length >= 0 && b->consumed >= b->h->content_length) return 0;
    size_t n;
    if (b->first) { /* the body bytes read with the head, over as many calls as cap needs */
      n = b->h->len - b->h->body_at;
      if (n > cap) n = cap;
      memcpy(buf, b->h->buf + b->h->body_at, n);
      b->h->body_at += n;
      b->first = b->h->body_at < b->h->len;
      if (n == 0) continue;
    } else {
      ssize_t r = recv(b->fd, buf, cap, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        *st = LLB_ERRF(errno == EAGAIN || errno == EWOULDBLOCK ? LLB_STATUS_TIMEOUT : LLB_STATUS_IO, "read: %s",
                       errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
        return -1;
      }
      if (r == 0) {
        if (b->h->chunked || b->h->content_length >= 0) {
          *st = LLB_ERRF(LLB_STATUS_CLOSED, "connection closed inside the body");
          return -1;
        }
        return 0;
      }
      n = (size_t)r;
    }
    b->consumed += (int64_t)n;
    if (!b->h->chunked) return (ssize_t)n;
    size_t out = bench_chunked_feed(&b->ch, buf, n);
    if (b->ch.error) {
      *st = LLB_ERRF(LLB_STATUS_MALFORMED, "bad chunked encoding");
      return -1;
    }
    if (out > 0) return (ssize_t)out;
  }
}

static llb_status request(const struct bench_target *t, const char *method, const char *path, const char *body,
                          size_t body_len, const char *accept, double timeout_s, int *fd_out, struct http_head *h) {
  int fd = -1;
  llb_status st = dial(t, timeout_s, &fd);
  if (st != LLB_STATUS_OK) return st;
  char head[1536];
  int hl = snprintf(head, sizeof head,
                    "%s %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: llmbus-bench\r\nAccept: %s\r\n"
                    "Connection: close\r\n%s%s%s%s%s",
                    method, path, t->host, t->port, accept, t->api_key[0] ? "Authorization: Bearer " : "",
                    t->api_key, t->api_key[0] ? "\r\n" : "", body ? "Content-Type: application/json\r\n" : "",
                    body ? "" : "\r\n");
  if (body) hl += snprintf(head + hl, sizeof head - (size_t)hl, "Content-Length: %zu\r\n\r\n", body_len);
  st = send_all(fd, head, (size_t)hl);
  if (st == LLB_STATUS_OK && body) st = send_all(fd, body, body_len);
  if (st == LLB_STATUS_OK) st = read_head(fd, h);
  if (st != LLB_STATUS_OK) {
    close(fd);
    return st;
  }
  *fd_out = fd;
  return LLB_STATUS_OK;
}

llb_status bench_http_get(const struct bench_target *t, const char *path, double timeout_s, int *status_out,
                          char **body_out) {
  *body_out = NULL;
  struct http_head *h = calloc(1, sizeof *h);
  if (!h) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "response head");
  int fd;
  llb_status st = request(t, "GET", path, NULL, 0, "application/json", timeout_s, &fd, h);
  if (st != LLB_STATUS_OK) {
    free(h);
    return st;
  }
  struct body_reader b = {.fd = fd, .h = h, .first = true};
  bench_chunked_init(&b.ch);
  size_t len = 0, cap = 4096;
  char *out = malloc(cap);
  ssize_t n = 0;
  while (out && (n = body_read(&b, out + len, cap - len - 1, &st)) > 0) {
    len += (size_t)n;
    if (cap - len < 1024) {
      char *q = realloc(out, cap * 2);
      if (!q) {
        free(out);
        out = NULL;
        break;
      }
      out = q;
      cap *= 2;
    }
  }
  close(fd);
  *status_out = h->status;
  free(h);
  if (!out) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "response body");
  if (n < 0) {
    free(out);
    return st;
  }
  out[len] = '\0';
  *body_out = out;
  return LLB_STATUS_OK;
}

/* --- streamed completion ------------------------------------------------------------ */

struct stream_ctx {
  struct bench_result *r;
  int64_t t0, last;
  bool done, failed;
};

static void on_event(void *user, const char *data, size_t len) {
  struct stream_ctx *c = user;
  struct bench_result *r = c->r;
  if (c->done || c->failed) return;
  int64_t now = llb_now_ns();
  struct bench_chunk_info ci;
  if (bench_parse_chunk(data, len, &ci) != LLB_STATUS_OK) {
    snprintf(r->error, sizeof r->error, "bad SSE data: %.120s", data);
    c->failed = true;
    return;
  }
  if (ci.error[0]) {
    snprintf(r->error, sizeof r->error, "error event: %s", ci.error);
    c->failed = true;
    return;
  }
  if (ci.done) {
    c->done = true;
    r->latency = (double)(now - c->t0) / 1e9;
    return;
  }
  if (ci.prompt_tokens >= 0) r->prompt_tokens = ci.prompt_tokens;
  if (ci.completion_tokens >= 0) r->output_tokens = ci.completion_tokens;
  if (ci.has_choices && ci.text_len > 0) {
    if (r->text_chunks == 0) {
      r->ttft = (double)(now - c->t0) / 1e9;
    } else {
      if (r->num_itl == r->cap_itl) {
        size_t cap = r->cap_itl ? r->cap_itl * 2 : 256;
        double *p = realloc(r->itl, cap * sizeof *p);
        if (!p) {
          snprintf(r->error, sizeof r->error, "out of memory");
          c->failed = true;
          return;
        }
        r->itl = p;
        r->cap_itl = cap;
      }
      r->itl[r->num_itl++] = (double)(now - c->last) / 1e9;
    }
    c->last = now;
    r->text_chunks++;
  }
  r->latency = (double)(now - c->t0) / 1e9;
}

void bench_result_free(struct bench_result *r) {
  if (!r) return;
  free(r->itl);
  r->itl = NULL;
  r->num_itl = r->cap_itl = 0;
}

void bench_http_stream(const struct bench_target *t, const char *path, const char *body, size_t body_len,
                       double timeout_s, struct bench_result *r) {
  memset(r, 0, sizeof *r);
  r->prompt_tokens = r->output_tokens = -1;
  struct stream_ctx c = {.r = r, .t0 = llb_now_ns()};
  struct http_head *h = calloc(1, sizeof *h);
  char *buf = malloc(65536);
  int fd = -1;
  llb_status st = LLB_STATUS_OK;
  if (!h || !buf) {
    snprintf(r->error, sizeof r->error, "out of memory");
    goto done;
  }
  st = request(t, "POST", path, body, body_len, "text/event-stream", timeout_s, &fd, h);
  if (st != LLB_STATUS_OK) {
    snprintf(r->error, sizeof r->error, "%s", llb_err_last());
    goto done;
  }
  struct body_reader b = {.fd = fd, .h = h, .first = true};
  bench_chunked_init(&b.ch);
  if (h->status != 200) {
    size_t len = 0;
    ssize_t n;
    while (len < ERROR_BODY_MAX && (n = body_read(&b, buf + len, ERROR_BODY_MAX - len, &st)) > 0) len += (size_t)n;
    buf[len] = '\0';
    snprintf(r->error, sizeof r->error, "HTTP %d: %.200s", h->status, buf);
    goto done;
  }
  struct bench_sse sse;
  bench_sse_init(&sse, on_event, &c);
  ssize_t n = 0;
  while (!c.done && !c.failed && (n = body_read(&b, buf, 65536, &st)) > 0) {
    if (bench_sse_feed(&sse, buf, (size_t)n) != LLB_STATUS_OK) {
      snprintf(r->error, sizeof r->error, "%s", llb_err_last());
      c.failed = true;
    }
  }
  /* A stream that ends without [DONE] still counts if it ended cleanly after text. */
  bench_sse_feed(&sse, "\n\n", 2);
  bench_sse_free(&sse);
  if (c.failed) goto done;
  if (n < 0 && !c.done) {
    snprintf(r->error, sizeof r->error, "%s", llb_err_last());
    goto done;
  }
  if (r->text_chunks == 0 && r->output_tokens <= 0) {
    snprintf(r->error, sizeof r->error, "the stream carried no text");
    goto done;
  }
  if (r->output_tokens < 0) r->output_tokens = r->text_chunks;
  r->ok = true;
done:
  if (fd >= 0) close(fd);
  free(h);
  free(buf);
}
