/* The reply inbox's queue in front of the loop's handler; see inbox.h. */
#include "actors/api_server/inbox.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct inbox_item {
  struct inbox_item *next;
  uint64_t seq;
  bool no_responders;
  size_t len;
  uint8_t data[]; /* [len] */
};

struct api_server_inbox {
  api_server_inbox_fn fn;
  void *user;
  pthread_mutex_t mu; /* guards head, tail and wake */
  struct inbox_item *head, *tail;
  struct event *wake; /* NULL before bind and after unbind */
};

llb_status api_server_inbox_create(api_server_inbox_fn fn, void *user, struct api_server_inbox **out) {
  struct api_server_inbox *q = calloc(1, sizeof *q);
  if (!q) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: out of memory");
  q->fn = fn;
  q->user = user;
  pthread_mutex_init(&q->mu, NULL);
  *out = q;
  return LLB_STATUS_OK;
}

static void free_items(struct inbox_item *it) {
  while (it) {
    struct inbox_item *next = it->next;
    free(it);
    it = next;
  }
}

void api_server_inbox_drain(struct api_server_inbox *q) {
  pthread_mutex_lock(&q->mu);
  struct inbox_item *it = q->head;
  q->head = q->tail = NULL;
  pthread_mutex_unlock(&q->mu);
  while (it) {
    struct inbox_item *next = it->next;
    const struct api_server_inbox_item view = {.seq = it->seq, .no_responders = it->no_responders, .len = it->len,
                                        .data = it->data};
    q->fn(&view, q->user);
    free(it);
    it = next;
  }
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  api_server_inbox_drain(arg);
}

llb_status api_server_inbox_bind(struct api_server_inbox *q, struct event_base *base) {
  struct event *wake = event_new(base, -1, EV_PERSIST | EV_READ, on_wake, q);
  if (!wake) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: event_new failed");
  event_add(wake, NULL);
  pthread_mutex_lock(&q->mu);
  q->wake = wake;
  pthread_mutex_unlock(&q->mu);
  return LLB_STATUS_OK;
}

void api_server_inbox_unbind(struct api_server_inbox *q) {
  pthread_mutex_lock(&q->mu);
  if (q->wake) event_free(q->wake);
  q->wake = NULL;
  pthread_mutex_unlock(&q->mu);
}

void api_server_inbox_on_msg(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct api_server_inbox *q = user;
  const char *dot = strrchr(msg->subject, '.');
  char *end = NULL;
  uint64_t seq = dot ? strtoull(dot + 1, &end, 10) : 0;
  if (!dot || !end || *end) return;
  const char *status = bus_msg_header(msg, "Status");
  struct inbox_item *it = malloc(sizeof *it + msg->len);
  if (!it) return;
  it->next = NULL;
  it->seq = seq;
  it->no_responders = msg->len == 0 && status && strncmp(status, "503", 3) == 0;
  it->len = msg->len;
  if (msg->len) memcpy(it->data, msg->data, msg->len);
  pthread_mutex_lock(&q->mu);
  if (q->tail) q->tail->next = it;
  else q->head = it;
  q->tail = it;
  if (q->wake) event_active(q->wake, EV_READ, 0);
  pthread_mutex_unlock(&q->mu);
}

void api_server_inbox_destroy(struct api_server_inbox *q) {
  if (!q) return;
  free_items(q->head);
  pthread_mutex_destroy(&q->mu);
  free(q);
}
