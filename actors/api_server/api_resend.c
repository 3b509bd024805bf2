/* Resending a GenerateRequest that no input processor took (see api_resend.h). */
#include "actors/api_server/api_resend.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/actor_internal.h"
#include "base/log.h"

#define API_RESEND_FIRST_MS 50
#define API_RESEND_MAX_MS 1000

llb_status api_resend_keep(struct api_sub *s, const char *subject, const char *reply, const void *data,
                           size_t len) {
  api_resend_free(s);
  struct api_resend *r = &s->resend;
  r->subject = strdup(subject);
  r->reply = strdup(reply);
  r->data = malloc(len ? len : 1);
  if (!r->subject || !r->reply || !r->data) {
    api_resend_free(s);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "copy of a %zu-byte request", len);
  }
  if (len) memcpy(r->data, data, len);
  r->len = len;
  return LLB_STATUS_OK;
}

static void on_resend(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_sub *s = arg;
  if (s->finished || s->call->client_gone) return;
  struct bus_out_msg m = {.subject = s->resend.subject, .reply = s->resend.reply, .data = s->resend.data,
                          .len = s->resend.len};
  llb_status st = bus_publish_msg(s->call->a->bus, &m);
  if (st != LLB_STATUS_OK) /* the answer (or its absence) ends the call through the timer */
    LLB_LOG_WARN("generate_resend_failed", "seq=%llu status=%s", (unsigned long long)s->seq, llb_strerror(st));
}

bool api_resend_schedule(struct api_actor *a, struct api_sub *s) {
  struct api_resend *r = &s->resend;
  if (!r->data || r->tries >= API_RESEND_MAX_TRIES) return false;
  if (!r->timer && !(r->timer = evtimer_new(a->base, on_resend, s))) return false;
  int64_t ms = API_RESEND_FIRST_MS << r->tries;
  if (ms > API_RESEND_MAX_MS) ms = API_RESEND_MAX_MS;
  r->tries++;
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  if (evtimer_add(r->timer, &tv) != 0) return false;
  LLB_LOG_INFO("generate_resent", "seq=%llu try=%d in_ms=%lld reason=no_responders subject=%s",
               (unsigned long long)s->seq, r->tries, (long long)ms, r->subject);
  return true;
}

void api_resend_free(struct api_sub *s) {
  struct api_resend *r = &s->resend;
  if (r->timer) event_free(r->timer);
  free(r->subject);
  free(r->reply);
  free(r->data);
  memset(r, 0, sizeof *r);
}
