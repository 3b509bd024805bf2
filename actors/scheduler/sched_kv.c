/* KV transfer of disaggregated prefill/decode, the scheduler's side (vLLM v1
 * core/sched/scheduler.py with a KV connector: delay_free_blocks on the prefill side,
 * RequestStatus.WAITING_FOR_REMOTE_KVS and _update_waiting_for_remote_kv on the decode side;
 * our code). The worker moves the blocks (actors/gpu_worker/kv_transfer.h); this file says which,
 * and applies what it reports (sched_model_output's finished_sending / finished_recving /
 * failed_recving).
 *
 * Prefill side: a request handed off (sched_hand_off) keeps its blocks, out of the registry, in
 * kv_senders; the next step exports them (sched_output.kv_sends: the blocks holding its first
 * sched_request_kv_export_tokens tokens); finished_sending (or the deadline, sched_kv_tick)
 * releases them, to the prefix cache like any finished request's.
 * Decode side: a hand-off admitted with kv_remote_num_tokens is scheduled, when it reaches the
 * head of the waiting queue, for an ALLOCATE of blocks for that many tokens with a prefix lookup
 * but no compute; when the kv_manager answers (sched_kv_start_recv) it waits in
 * WAITING_FOR_REMOTE_KVS, its receive in that step (sched_output.kv_recvs: the blocks from the
 * first one its prefix cache did not hold). finished_recving marks those tokens computed (its full
 * blocks then go to the prefix cache as computed ones do) and it is scheduled as a new request
 * for the rest (the last known token, which samples); failed_recving leaves it at its prefix hit,
 * so it computes the rest itself: the recompute. Preempting or finishing a receiving request
 * names it to the worker (preempted / finished ids), which cancels its fetch before the blocks
 * can go to anyone else. */
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"
#include "base/log.h"

static int32_t div_up(int64_t a, int64_t b) { return (int32_t)((a + b - 1) / b); }

llb_status sched_kv_hold(struct scheduler *s, struct sched_request *r) {
  if (sched_request_kv_export_tokens(r) < 1) return sched_release_blocks(s, r); /* nothing to fetch */
  llb_status st = sched_push_request(&s->kv_senders, &s->num_kv_senders, &s->cap_kv_senders, r);
  if (st) return sched_release_blocks(s, r);
  st = sched_push_request(&s->kv_new_sends, &s->num_kv_new_sends, &s->cap_kv_new_sends, r);
  if (st) { /* never exported: nobody fetches it */
    s->num_kv_senders--;
    return sched_release_blocks(s, r);
  }
  r->kv_sending = true;
  r->kv_send_deadline_s = s->kv_now_s + 2.0 * (double)s->cfg.kv_export_expires_s;
  s->stats.kv_sends++;
  return LLB_STATUS_OK;
}

llb_status sched_kv_start_recv(struct scheduler *s, struct sched_request *r, struct sched_output *out) {
  const int32_t bs = s->cfg.block_size;
  const int32_t first = r->num_computed_tokens / bs, end = div_up(r->kv_remote_num_tokens, bs);
  sched_remove_scheduled(s, r); /* nothing to compute: it waits for the transfer */
  if (first >= end || end > r->num_block_ids) { /* its prefix cache held it all (or no room): compute */
    r->kv_recv = SCHED_KV_RECV_NONE;
    return LLB_STATUS_OK;
  }
  if (out->num_kv_recvs == out->cap_kv_recvs) {
    int32_t cap = out->cap_kv_recvs ? out->cap_kv_recvs * 2 : 8;
    void *a = realloc(out->kv_recvs, (size_t)cap * sizeof(*out->kv_recvs));
    if (!a) {
      r->kv_recv = SCHED_KV_RECV_NONE; /* computed here instead */
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv receives");
    }
    out->kv_recvs = a;
    out->cap_kv_recvs = cap;
  }
  r->kv_recv = SCHED_KV_RECV_RECVING;
  r->kv_remote_first_block = first;
  r->status = SCHED_REQUEST_STATUS_WAITING_FOR_REMOTE_KVS;
  s->num_kv_recving++;
  s->planned_kv = true;
  out->kv_recvs[out->num_kv_recvs++] = (struct sched_kv_recv){
      .req_id = r->request_id, .local_block_ids = r->block_ids + first, .num_local_block_ids = end - first,
      .remote_engine_id = r->kv_remote_engine_id, .remote_request_id = r->kv_remote_request_id,
      .remote_first_block = first, .num_tokens = r->kv_remote_num_tokens};
  return LLB_STATUS_OK;
}

void sched_kv_recv_dropped(struct scheduler *s, struct sched_request *r) {
  if (r->kv_recv != SCHED_KV_RECV_RECVING) return;
  r->kv_recv = SCHED_KV_RECV_NONE;
  s->num_kv_recving--;
}

llb_status sched_kv_fill_output(struct scheduler *s, struct sched_output *out) {
  out->num_kv_recvs = out->num_kv_sends = 0;
  out->kv_poll = false;
  if (s->num_kv_new_sends > out->cap_kv_sends) {
    void *a = realloc(out->kv_sends, (size_t)s->num_kv_new_sends * sizeof(*out->kv_sends));
    if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv exports");
    out->kv_sends = a;
    out->cap_kv_sends = s->num_kv_new_sends;
  }
  for (int32_t i = 0; i < s->num_kv_new_sends; i++) {
    const struct sched_request *r = s->kv_new_sends[i];
    const int32_t tokens = sched_request_kv_export_tokens(r);
    out->kv_sends[out->num_kv_sends++] = (struct sched_kv_send){
        .req_id = r->request_id, .block_ids = r->block_ids, .num_block_ids = div_up(tokens, s->cfg.block_size),
        .num_tokens = tokens, .expires_in_s = s->cfg.kv_export_expires_s};
  }
  s->num_kv_new_sends = 0;
  out->kv_poll = s->kv_poll_allowed && sched_kv_pending(s) && s->total_scheduled == 0;
  s->planned_kv = out->num_kv_sends > 0 || out->kv_poll;
  return LLB_STATUS_OK;
}

/* Ends export i of kv_senders: its blocks are released (FREE with the next kv step). */
static void end_export(struct scheduler *s, int32_t i) {
  struct sched_request *r = s->kv_senders[i];
  s->kv_senders[i] = s->kv_senders[--s->num_kv_senders];
  for (int32_t k = 0; k < s->num_kv_new_sends; k++)
    if (s->kv_new_sends[k] == r) s->kv_new_sends[k] = s->kv_new_sends[--s->num_kv_new_sends];
  r->kv_sending = false;
  (void)sched_release_blocks(s, r); /* on OOM the FREE is lost: the kv_manager's reset recovers it */
  if (sched_can_destroy(r)) sched_request_destroy(r);
}

static int32_t find_sender(const struct scheduler *s, const char *id) {
  for (int32_t i = 0; i < s->num_kv_senders; i++)
    if (strcmp(s->kv_senders[i]->request_id, id) == 0) return i;
  return -1;
}

void sched_kv_apply_output(struct scheduler *s, const struct sched_model_output *mo) {
  for (int32_t i = 0; i < mo->num_finished_sending && mo->finished_sending; i++) {
    const int32_t k = mo->finished_sending[i] ? find_sender(s, mo->finished_sending[i]) : -1;
    if (k >= 0) end_export(s, k);
  }
  for (int32_t pass = 0; pass < 2; pass++) { /* finished, then failed */
    const char *const *ids = pass ? mo->failed_recving : mo->finished_recving;
    const int32_t n = pass ? mo->num_failed_recving : mo->num_finished_recving;
    for (int32_t i = 0; i < n && ids; i++) {
      struct sched_request *r = ids[i] ? sched_map_get(s, ids[i]) : NULL;
      if (!r || r->kv_recv != SCHED_KV_RECV_RECVING) continue; /* preempted or finished since */
      sched_kv_recv_dropped(s, r);
      r->status = SCHED_REQUEST_STATUS_RUNNING;
      if (pass) { /* the rest is computed here, from its prefix hit */
        s->stats.kv_recv_failures++;
        LLB_LOG_WARN("kv_recv_failed", "req=%s remote_engine=%s action=recompute from=%d", r->request_id,
                     r->kv_remote_engine_id, r->num_computed_tokens);
        continue;
      }
      s->stats.kv_recv_tokens += (uint64_t)(r->kv_remote_num_tokens - r->num_computed_tokens);
      LLB_LOG_INFO("kv_received", "req=%s remote_engine=%s tokens=%d prefix_hit=%d", r->request_id,
                   r->kv_remote_engine_id, r->kv_remote_num_tokens - r->num_computed_tokens, r->num_computed_tokens);
      r->num_computed_tokens = r->kv_remote_num_tokens;
    }
  }
}

void sched_kv_release_senders(struct scheduler *s) {
  for (int32_t i = 0; i < s->num_kv_senders; i++) {
    struct sched_request *r = s->kv_senders[i];
    r->kv_sending = false;
    r->num_block_ids = 0;
    if (sched_can_destroy(r)) sched_request_destroy(r);
  }
  s->num_kv_senders = s->num_kv_new_sends = 0;
}

void sched_kv_tick(struct scheduler *s, bool poll, double now_s) {
  s->kv_poll_allowed = poll;
  s->kv_now_s = now_s;
  for (int32_t i = 0; i < s->num_kv_senders;) {
    if (s->kv_senders[i]->kv_send_deadline_s > now_s) {
      i++;
      continue;
    }
    end_export(s, i); /* the last one moved to i */
  }
}

bool sched_kv_pending(const struct scheduler *s) { return s->num_kv_recving > 0 || s->num_kv_senders > 0; }
