/* Resending a GenerateRequest that no input processor took (see api_resend.h). */
#include "actors/api_server/api_resend.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "actors/api_server/actor_internal.h"
#include "base/hash.h"
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

uint64_t api_random_seed(struct api_actor *a) {
  uint64_t seed;
  if (getrandom(&seed, sizeof seed, 0) == (ssize_t)sizeof seed) return seed;
  return llb_mix64(a->id_salt + LLB_SPLITMIX64_GAMMA * ++a->id_counter); /* splitmix64 */
}

/* Sends s again under a new reply subject (see api_resend_after_reconnect). With one
 * completion per prompt (n = 1) the resend names the engine request it replaces (header
 * Llmbus-Resume-Of): the engine hands that request's outputs to the new one and finishes it,
 * so the client's next token comes after one prefill, not after generating again what it
 * already has. Otherwise the old request is aborted: its outputs can no longer reach us. */
static bool resend_sub(struct api_actor *a, struct api_call *c, struct api_sub *s, const char *reason) {
  char reply[192], resume_of[sizeof s->engine_id];
  uint64_t old_seq = s->seq;
  const bool one = c->parsed.sampling_params.n <= 1;
  snprintf(resume_of, sizeof resume_of, "%s", one ? s->engine_id : "");
  if (s->engine_id[0] && !one) api_publish_abort(a, s);
  api_table_remove(a, s);
  s->seq = ++a->next_seq;
  api_table_add(a, s);
  snprintf(reply, sizeof reply, "%s.%llu", a->inbox, (unsigned long long)s->seq);
  char *r = strdup(reply);
  if (!r) { /* keep the old reply: the outputs may still come (no mapping was lost) */
    api_table_remove(a, s);
    s->seq = old_seq;
    api_table_add(a, s);
    return false;
  }
  free(s->resend.reply);
  s->resend.reply = r;
  s->resend.tries = 0;
  s->engine_id[0] = '\0';
  s->t_last_heard_ns = llb_now_ns();
  api_delta_restart(&s->delta);
  const struct bus_header h[] = {{"Llmbus-Resume-Of", resume_of}};
  struct bus_out_msg m = {.subject = s->resend.subject, .reply = s->resend.reply, .data = s->resend.data,
                          .len = s->resend.len, .trace = &c->span.ctx, .headers = h,
                          .num_headers = resume_of[0] ? 1 : 0};
  llb_status st = bus_publish_msg(a->bus, &m);
  LLB_LOG_INFO("generate_resent", "seq=%llu old_seq=%llu reason=%s status=%s subject=%s resume_of=%s",
               (unsigned long long)s->seq, (unsigned long long)old_seq, reason, llb_strerror(st), s->resend.subject,
               resume_of[0] ? resume_of : "-");
  return true;
}

int api_resend_after_reconnect(struct api_actor *a, struct api_call *c) {
  int sent = 0;
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_sub *s = &c->subs[i];
    if (!s->finished && s->resend.data && resend_sub(a, c, s, "reconnected")) sent++;
  }
  return sent;
}

bool api_resend_state_lost(struct api_actor *a, struct api_call *c, struct api_sub *s) {
  if (s->finished || !s->resend.data || s->resend.lost_tries >= API_RESEND_MAX_TRIES) return false;
  s->resend.lost_tries++;
  return resend_sub(a, c, s, "state_lost");
}

int api_resend_after_op_restart(struct api_actor *a, struct api_call *c, int64_t restart_ns, int64_t now_ns) {
  if (restart_ns == 0 || now_ns - restart_ns < API_OP_RESTART_GRACE_STREAMING_NS) return 0;
  int sent = 0;
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_sub *s = &c->subs[i];
    if (s->finished || !s->resend.data || s->t_last_heard_ns >= restart_ns || s->op_restart_handled_ns == restart_ns)
      continue;
    const bool streaming = s->engine_id[0] != '\0';
    if (!streaming && now_ns - restart_ns < API_OP_RESTART_GRACE_NS) continue;
    s->op_restart_handled_ns = restart_ns;
    if (resend_sub(a, c, s, "output_processor_restarted")) sent++;
  }
  return sent;
}

void api_resend_free(struct api_sub *s) {
  struct api_resend *r = &s->resend;
  if (r->timer) event_free(r->timer);
  free(r->subject);
  free(r->reply);
  free(r->data);
  memset(r, 0, sizeof *r);
}
