/* Resending a GenerateRequest that no input processor took (see api_server_resend.h). */
#include "actors/api_server/api_server_resend.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/api_server/api_server_call.h"
#include "base/log.h"
#include "bus/subject.h"

#define API_SERVER_RESEND_FIRST_MS 50
#define API_SERVER_RESEND_MAX_MS 1000

llb_status api_server_resend_keep(struct api_server_sub *s, const char *subject, const char *reply, const void *data,
                           size_t len) {
  api_server_resend_free(s);
  struct api_server_resend *r = &s->resend;
  r->subject = strdup(subject);
  r->reply = strdup(reply);
  r->data = malloc(len ? len : 1);
  if (!r->subject || !r->reply || !r->data) {
    api_server_resend_free(s);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "copy of a %zu-byte request", len);
  }
  if (len) memcpy(r->data, data, len);
  r->len = len;
  return LLB_STATUS_OK;
}

static void on_resend(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_server_sub *s = arg;
  if (s->finished || s->call->client_gone) return;
  struct bus_out_msg m = {.subject = s->resend.subject, .reply = s->resend.reply, .data = s->resend.data,
                          .len = s->resend.len};
  llb_status st = bus_publish_msg(s->resend.bus, &m);
  if (st != LLB_STATUS_OK) /* the answer (or its absence) ends the call through the timer */
    LLB_LOG_WARN("generate_resend_failed", "seq=%llu status=%s", (unsigned long long)s->seq, llb_strerror(st));
}

bool api_server_resend_schedule(struct bus *bus, struct event_base *base, struct api_server_sub *s) {
  struct api_server_resend *r = &s->resend;
  if (!r->data || r->tries >= API_SERVER_RESEND_MAX_TRIES) return false;
  if (!r->timer && !(r->timer = evtimer_new(base, on_resend, s))) return false;
  r->bus = bus;
  int64_t ms = API_SERVER_RESEND_FIRST_MS << r->tries;
  if (ms > API_SERVER_RESEND_MAX_MS) ms = API_SERVER_RESEND_MAX_MS;
  r->tries++;
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  if (evtimer_add(r->timer, &tv) != 0) return false;
  LLB_LOG_INFO("generate_resent", "seq=%llu try=%d in_ms=%lld reason=no_responders subject=%s",
               (unsigned long long)s->seq, r->tries, (long long)ms, r->subject);
  return true;
}

/* Sends s again under a new reply subject (see api_server_resend_after_reconnect). With one
 * completion per prompt (n = 1) the resend names the engine request it replaces (header
 * Llmbus-Resume-Of): the engine hands that request's outputs to the new one and finishes it,
 * so the client's next token comes after one prefill, not after generating again what it
 * already has. Otherwise the old request is aborted: its outputs can no longer reach us. */
static bool resend_sub(const struct api_server_resend_ctx *x, struct api_server_call *c, struct api_server_sub *s, const char *reason) {
  const size_t reply_cap = strlen(x->inbox) + 24; /* ".<seq>": a uint64 has at most 20 digits */
  char *reply = malloc(reply_cap);
  const uint64_t old_seq = s->seq;
  if (!reply || api_server_sub_table_renumber(x->table, s) != LLB_STATUS_OK) {
    free(reply);
    return false; /* keep the old reply: the outputs may still come (no mapping was lost) */
  }
  char resume_of[sizeof s->engine_id];
  const bool one = c->parsed.sampling_params.n <= 1;
  snprintf(resume_of, sizeof resume_of, "%s", one ? s->engine_id : "");
  if (s->engine_id[0] && !one) api_server_sub_publish_abort(x->bus, s);
  if (bus_subject_reply(x->inbox, s->seq, reply, reply_cap) != LLB_STATUS_OK) { /* the inbox was checked at start */
    LLB_LOG_ERROR("generate_not_resent", "seq=%llu err=%s", (unsigned long long)s->seq, llb_err_last());
    free(reply);
    return false;
  }
  free(s->resend.reply);
  s->resend.reply = reply;
  s->resend.tries = 0;
  s->engine_id[0] = '\0';
  s->t_last_heard_ns = llb_now_ns();
  api_server_delta_restart(&s->delta);
  const struct bus_header h[] = {{"Llmbus-Resume-Of", resume_of}};
  struct bus_out_msg m = {.subject = s->resend.subject, .reply = s->resend.reply, .data = s->resend.data,
                          .len = s->resend.len, .trace = &c->span.ctx, .headers = h,
                          .num_headers = resume_of[0] ? 1 : 0};
  llb_status st = bus_publish_msg(x->bus, &m);
  LLB_LOG_INFO("generate_resent", "seq=%llu old_seq=%llu reason=%s status=%s subject=%s resume_of=%s",
               (unsigned long long)s->seq, (unsigned long long)old_seq, reason, llb_strerror(st), s->resend.subject,
               resume_of[0] ? resume_of : "-");
  return true;
}

int api_server_resend_after_reconnect(const struct api_server_resend_ctx *x, struct api_server_call *c) {
  int sent = 0;
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_server_sub *s = &c->subs[i];
    if (!s->finished && s->resend.data && resend_sub(x, c, s, "reconnected")) sent++;
  }
  return sent;
}

bool api_server_resend_state_lost(const struct api_server_resend_ctx *x, struct api_server_call *c, struct api_server_sub *s) {
  if (s->finished || !s->resend.data || s->resend.lost_tries >= API_SERVER_RESEND_MAX_TRIES) return false;
  s->resend.lost_tries++;
  return resend_sub(x, c, s, "state_lost");
}

int api_server_resend_after_op_restart(const struct api_server_resend_ctx *x, struct api_server_call *c, int64_t restart_ns,
                                int64_t now_ns) {
  if (restart_ns == 0 || now_ns - restart_ns < API_SERVER_OP_RESTART_GRACE_STREAMING_NS) return 0;
  int sent = 0;
  for (int32_t i = 0; i < c->num_subs; i++) {
    struct api_server_sub *s = &c->subs[i];
    if (s->finished || !s->resend.data || s->t_last_heard_ns >= restart_ns || s->op_restart_handled_ns == restart_ns)
      continue;
    const bool streaming = s->engine_id[0] != '\0';
    if (!streaming && now_ns - restart_ns < API_SERVER_OP_RESTART_GRACE_NS) continue;
    s->op_restart_handled_ns = restart_ns;
    if (resend_sub(x, c, s, "output_processor_restarted")) sent++;
  }
  return sent;
}

int api_server_resend_poll(const struct api_server_resend_ctx *x, struct api_server_call *c, int64_t ip_beat_ns, int64_t op_restart_ns,
                    int64_t now_ns) {
  uint64_t reconnects = bus_num_reconnects(x->bus);
  if (reconnects != c->reconnects) { /* its replies may be lost with the server's reply mappings */
    c->reconnects = reconnects;
    /* when it happened, not when this probe noticed: an input processor that beat since
     * (actor_main_answer_after_reconnect answers our own reconnect beat) is back */
    const int64_t at = bus_last_reconnect_ns(x->bus);
    c->reconnect_seen_ns = at > 0 && at <= now_ns ? at : now_ns;
  }
  int sent = 0;
  if (c->reconnect_seen_ns &&
      (ip_beat_ns > c->reconnect_seen_ns || now_ns - c->reconnect_seen_ns > API_SERVER_RESEND_WAIT_INPUT_NS)) {
    c->reconnect_seen_ns = 0;
    sent += api_server_resend_after_reconnect(x, c);
  }
  return sent + api_server_resend_after_op_restart(x, c, op_restart_ns, now_ns);
}

void api_server_resend_free(struct api_server_sub *s) {
  struct api_server_resend *r = &s->resend;
  if (r->timer) event_free(r->timer);
  free(r->subject);
  free(r->reply);
  free(r->data);
  memset(r, 0, sizeof *r);
}
