/* Disaggregated prefill/decode in the scheduler actor; see handoff.h. */
#include "actors/scheduler/handoff.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "bus/jetstream.h"
#include "bus/subject.h"
#include "schemas/engine_core_request.h"

#define DEFAULT_PUBLISH_TIMEOUT_MS 5000

struct aborted_id {
  char id[256];
  int64_t at_ns;
};

struct handoff {
  struct bus *bus;
  char prefix[BUS_SUBJECT_MAX], engine_id[BUS_TOKEN_MAX + 1];
  bool durable;
  int64_t publish_timeout_ms;
  int32_t block_size, max_model_len;
  struct llb_buf buf;              /* the encoded hand-off */
  struct aborted_id *aborted;      /* [HANDOFF_ABORTED_IDS] ring of aborted unknown ids */
  int32_t aborted_next;
  struct sched_str_list due;       /* requests to hand over after this turn's publish */
  atomic_uint_fast64_t c_sent, c_send_failed, c_received, c_refused;
  struct llb_series *m_sent, *m_send_failed, *m_received, *m_refused; /* NULL = no metrics */
};

/* The fault-injection point of handoff.h (HANDOFF_FAULT_ENV): a hand-off was stored on the decode
 * engine, this engine's own output not yet sent. The first time the marker file can be created,
 * the process ends as a SIGKILL would end it (no cleanup, no stream ack). */
static void fault_after_handoff_stored(void) {
  const char *marker = getenv(HANDOFF_FAULT_ENV);
  if (!marker || !marker[0]) return;
  const int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return; /* EEXIST: it fired already (a predecessor of this process) */
  close(fd);
  LLB_LOG_WARN("fault_injected", "point=after_handoff_stored marker=%s action=exit", marker);
  _exit(137);
}

/* One event: its counter and its series. */
static void count(atomic_uint_fast64_t *c, struct llb_series *s) {
  atomic_fetch_add(c, 1);
  if (s) llb_series_add(s, 1);
}

static void register_metrics(struct handoff *h, struct llb_metrics *r) {
  static const char *const labels[] = {"event"};
  struct llb_metric *f = r ? llb_metrics_counter(r, "llmbus:pd_handoffs_total",
                                                 "Disaggregated prefill/decode hand-offs of requests between "
                                                 "engines (sent/send_failed: prefill side; received/refused: "
                                                 "decode side).", 1, labels)
                           : NULL;
  if (!f) return;
  const char *const sent[] = {"sent"}, *const failed[] = {"send_failed"}, *const recv[] = {"received"},
                    *const refused[] = {"refused"};
  h->m_sent = llb_metric_series(f, sent);
  h->m_send_failed = llb_metric_series(f, failed);
  h->m_received = llb_metric_series(f, recv);
  h->m_refused = llb_metric_series(f, refused);
}

llb_status handoff_create(const struct handoff_config *c, struct handoff **out) {
  *out = NULL;
  if (!c || !c->bus || !c->prefix || !c->engine_id || !bus_token_valid(c->engine_id))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "handoff: need bus, prefix and engine id");
  struct handoff *h = calloc(1, sizeof *h);
  if (h) h->aborted = calloc(HANDOFF_ABORTED_IDS, sizeof *h->aborted);
  if (!h || !h->aborted) {
    free(h);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "handoff");
  }
  h->bus = c->bus;
  snprintf(h->prefix, sizeof h->prefix, "%s", c->prefix);
  snprintf(h->engine_id, sizeof h->engine_id, "%s", c->engine_id);
  h->durable = c->durable;
  h->publish_timeout_ms = c->publish_timeout_ms > 0 ? c->publish_timeout_ms : DEFAULT_PUBLISH_TIMEOUT_MS;
  h->block_size = c->block_size > 0 ? c->block_size : 16;
  h->max_model_len = c->max_model_len;
  register_metrics(h, c->metrics);
  *out = h;
  return LLB_STATUS_OK;
}

void handoff_destroy(struct handoff *h) {
  if (!h) return;
  llb_buf_free(&h->buf);
  sched_str_list_free(&h->due);
  free(h->aborted);
  free(h);
}

/* The EngineCoreRequest that continues `r` (meta m) on its decode engine: everything the
 * prefill engine was given, the outputs so far, and where its KV blocks are. */
static llb_status encode_handoff(struct handoff *h, const struct sched_request *r, const struct req_meta *m) {
  const int32_t num_outputs = sched_request_num_output_tokens(r);
  const int32_t num_tokens = sched_request_kv_export_tokens(r); /* what sched_hand_off exports */
  struct llb_engine_core_request q = {
      .version = 1, .request_id = llb_str_c(m->id), .external_id = llb_str_c(m->external_id),
      .prompt_token_ids = r->token_ids, .num_prompt_token_ids = r->num_prompt_tokens,
      .sampling_params = &m->params, .eos_token_id = m->eos_token_id, .arrival_time = m->arrival_time,
      .priority = m->priority, .cache_salt = llb_str_c(m->cache_salt), .reply_to = llb_str_c(m->reply_to),
      .client_index = m->client_index, .parent_request_id = llb_str_c(m->parent_request_id),
      .structured_outputs = m->structured_outputs,
      .lora_request = {.lora_name = llb_str_c(m->lora_name), .lora_int_id = m->lora_int_id},
      .has_kv_transfer_params = true,
      .kv_transfer_params = {.do_remote_prefill = true, .remote_engine_id = llb_str_c(h->engine_id),
                             .remote_request_id = llb_str_c(m->id),
                             .remote_num_blocks = (num_tokens + h->block_size - 1) / h->block_size,
                             .num_tokens = num_tokens},
      .output_token_ids = r->token_ids + r->num_prompt_tokens, .num_output_token_ids = num_outputs};
  if (m->trace.on) {
    q.traceparent = llb_str_c(m->trace.traceparent);
    q.trace_parent_span_id = llb_str_c(m->trace.parent_span_id);
    q.trace_start_time_ns = m->trace.start_time_ns;
  }
  return llb_engine_core_request_encode_buf(&q, &h->buf);
}

/* Publishes the hand-off of `r` to m->decode_engine_id's requests subject (durable: stored
 * and confirmed by its stream). */
static llb_status publish_handoff(struct handoff *h, const struct sched_request *r, const struct req_meta *m) {
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_engine(h->prefix, m->decode_engine_id, "requests", subject, sizeof subject);
  if (!st) st = encode_handoff(h, r, m);
  if (st) return st;
  if (!h->durable) return bus_publish(h->bus, subject, h->buf.data, h->buf.len, m->trace.on ? &m->trace.ctx : NULL);
  /* the id deduplicates a retry the stream already stored: "<id>/handoff" */
  char msg_id[BUS_JS_MSG_ID_MAX + 1];
  snprintf(msg_id, sizeof msg_id, "%.*s/handoff", (int)(sizeof msg_id - 9), m->id);
  const struct bus_out_msg out = {.subject = subject, .data = h->buf.data, .len = h->buf.len,
                                  .trace = m->trace.on ? &m->trace.ctx : NULL};
  return bus_js_publish(h->bus, &out, msg_id, h->publish_timeout_ms, NULL);
}

void handoff_collect(struct handoff *h, const struct scheduler *sched, const struct sched_engine_outputs *eo) {
  for (int32_t i = 0; i < eo->num_outputs; i++) {
    const struct sched_engine_output *e = &eo->outputs[i];
    const struct req_meta *m = e->user;
    /* its first output from this engine (position 0, or later for a replay resumed from the
     * output processor's history) */
    if (!m || !m->decode_engine_id || e->finish_reason != SCHED_FINISH_REASON_NONE || e->num_new_tokens <= 0 ||
        m->first_sent)
      continue;
    const struct sched_request *r = sched_find_request(sched, sched_engine_outputs_req_id(eo, i));
    if (!r || r->user != m || r->num_mm_features > 0) continue;
    if (sched_str_list_add(&h->due, r->request_id) != LLB_STATUS_OK)
      LLB_LOG_WARN("handoff_skipped", "req=%s reason=out_of_memory action=decode_here", r->request_id);
  }
}

/* Hands request `id` over now, if it still runs here with a decode engine: publish, then
 * sched_hand_off (its final output into side). True when it left. */
static bool hand_off_one(struct handoff *h, struct scheduler *sched, const char *id, struct sched_engine_outputs *side) {
  const struct sched_request *r = sched_find_request(sched, id);
  struct req_meta *m = r ? r->user : NULL;
  if (!r || !m || !m->decode_engine_id || r->abort_pending) return false; /* finished or aborted since */
  const int64_t t0 = llb_now_ns();
  llb_status st = publish_handoff(h, r, m);
  const int32_t outputs = sched_request_num_output_tokens(r);
  char *decode_engine = m->decode_engine_id; /* the meta leaves with the final output */
  m->decode_engine_id = NULL;
  if (!st) {
    fault_after_handoff_stored();
    m->decode_engine_id = decode_engine;
    st = sched_hand_off(sched, id, side); /* the output (in side) owns m from here */
  } else {
    free(decode_engine);
  }
  char q[300];
  if (st) {
    count(&h->c_send_failed, h->m_send_failed);
    LLB_LOG_WARN("handoff_failed", "req=%s status=%s error=%s action=decode_here", id, llb_strerror(st),
                 llb_log_quote(q, sizeof q, llb_err_last()));
    return false;
  }
  count(&h->c_sent, h->m_sent);
  LLB_LOG_INFO("request_handed_off", "req=%s outputs=%d publish_ms=%.2f", id, outputs,
               (double)(llb_now_ns() - t0) / 1e6);
  return true;
}

int32_t handoff_run(struct handoff *h, struct scheduler *sched, struct sched_engine_outputs *side) {
  int32_t n = 0;
  for (int32_t i = 0; i < h->due.num; i++) n += hand_off_one(h, sched, sched_str_list_get(&h->due, i), side);
  sched_str_list_clear(&h->due);
  return n;
}

bool handoff_replayed(struct handoff *h, struct scheduler *sched, const struct req_meta *m,
                      struct sched_engine_outputs *side) {
  if (!m->decode_engine_id || m->stream_seq == 0 || !m->resync) return false;
  const struct sched_request *r = sched_find_request(sched, m->id);
  if (!r || sched_request_num_output_tokens(r) < 1) return false; /* no history: it samples here first */
  LLB_LOG_INFO("handoff_replayed", "req=%s outputs=%d action=hand_off_now", m->id, sched_request_num_output_tokens(r));
  return hand_off_one(h, sched, m->id, side);
}

/* A hand-off's fields against what a prefill engine can have sent. NULL = sound. */
static const char *handoff_malformed(const struct handoff *h, const struct req_meta *m) {
  if (!bus_token_valid(m->prefill_engine_id)) return "hand-off: remote_engine_id is not an engine id";
  if (!m->remote_request_id || strcmp(m->remote_request_id, m->id) != 0)
    return "hand-off: remote_request_id differs from request_id";
  if (m->num_handed < 1) return "hand-off: no output_token_ids (the prefill engine's first token)";
  if (m->params.max_tokens > 0 && m->num_handed >= m->params.max_tokens)
    return "hand-off: output_token_ids reach max_tokens";
  const int64_t total = (int64_t)m->num_prompt + m->num_handed;
  if (h->max_model_len > 0 && total >= h->max_model_len) return "hand-off: prompt + outputs reach max_model_len";
  if (m->remote_num_tokens < 0 || m->remote_num_tokens > total) return "hand-off: num_tokens outside [0, prompt + outputs]";
  if (m->remote_num_blocks < 0 || (int64_t)m->remote_num_blocks * h->block_size > total + h->block_size)
    return "hand-off: remote_num_blocks more than num_tokens fill";
  if (m->num_mm > 0 || m->pooling_params.pooling_type != LLB_POOLING_NONE)
    return "hand-off: multimodal and pooling requests are not handed off";
  return NULL;
}

static bool take_aborted(struct handoff *h, const char *id) {
  const int64_t now = llb_now_ns();
  for (int32_t i = 0; i < HANDOFF_ABORTED_IDS; i++) {
    struct aborted_id *a = &h->aborted[i];
    if (a->at_ns && now - a->at_ns < HANDOFF_ABORTED_TTL_NS && strcmp(a->id, id) == 0) {
      a->at_ns = 0;
      return true;
    }
  }
  return false;
}

const char *handoff_admit_check(struct handoff *h, const struct req_meta *m) {
  if (!m->prefill_engine_id) return NULL;
  const char *why = handoff_malformed(h, m);
  if (!why && take_aborted(h, m->id)) why = "hand-off: the request was aborted before it arrived";
  if (why) {
    count(&h->c_refused, h->m_refused);
    LLB_LOG_WARN("handoff_refused", "req=%s prefill_engine=%s reason=\"%s\"", m->id, m->prefill_engine_id, why);
    return why;
  }
  count(&h->c_received, h->m_received);
  LLB_LOG_INFO("handoff_received", "req=%s prefill_engine=%s outputs=%d num_tokens=%d", m->id, m->prefill_engine_id,
               m->num_handed, m->remote_num_tokens);
  return NULL;
}

void handoff_note_abort(struct handoff *h, const char *id) {
  if (!id || strlen(id) >= sizeof h->aborted[0].id) return;
  struct aborted_id *a = &h->aborted[h->aborted_next];
  snprintf(a->id, sizeof a->id, "%s", id);
  a->at_ns = llb_now_ns();
  if (a->at_ns == 0) a->at_ns = 1;
  h->aborted_next = (h->aborted_next + 1) % HANDOFF_ABORTED_IDS;
}

void handoff_get_stats(const struct handoff *h, struct handoff_stats *out) {
  memset(out, 0, sizeof *out);
  if (!h) return;
  out->num_sent = atomic_load(&h->c_sent);
  out->num_send_failed = atomic_load(&h->c_send_failed);
  out->num_received = atomic_load(&h->c_received);
  out->num_refused = atomic_load(&h->c_refused);
}
