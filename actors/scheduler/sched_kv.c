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
 * can go to anyone else.
 * This file applies what the worker reports and ends exports at their deadline; the steps of the
 * flow inside the schedule (holding, receiving, the step's lists) are scheduler.c's, which this
 * file calls and never the other way round. */
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"
#include "base/log.h"

/* Ends export i of kv_senders: its blocks are released (RELEASE with the next kv step). */
static void end_export(struct scheduler *s, int32_t i) {
  struct sched_request *r = s->kv_senders[i];
  s->kv_senders[i] = s->kv_senders[--s->num_kv_senders];
  for (int32_t k = 0; k < s->num_kv_new_sends; k++)
    if (s->kv_new_sends[k] == r) s->kv_new_sends[k] = s->kv_new_sends[--s->num_kv_new_sends];
  r->kv_sending = false;
  sched_release_blocks(s, r);
  sched_retire(s, r);
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

void sched_kv_sends_unsent(struct scheduler *s, const struct sched_output *out) {
  for (int32_t i = 0; i < out->num_kv_sends; i++) {
    const int32_t k = out->kv_sends[i].req_id ? find_sender(s, out->kv_sends[i].req_id) : -1;
    if (k < 0) continue; /* ended since */
    struct sched_request *r = s->kv_senders[k];
    bool queued = false;
    for (int32_t j = 0; j < s->num_kv_new_sends && !queued; j++) queued = s->kv_new_sends[j] == r;
    if (!queued && sched_push_request(&s->kv_new_sends, &s->num_kv_new_sends, &s->cap_kv_new_sends, r))
      LLB_LOG_ERROR("kv_send_lost", "req=%s reason=out_of_memory: its export waits for its deadline", r->request_id);
  }
}

void sched_kv_new_epoch(struct scheduler *s) {
  const int32_t n = s->num_kv_senders;
  while (s->num_kv_senders > 0) end_export(s, s->num_kv_senders - 1);
  s->kv_epoch = s->kv_epoch + 1 ? s->kv_epoch + 1 : 1;
  if (n > 0) LLB_LOG_WARN("kv_exports_ended", "exports=%d epoch=%llu reason=kv_contents_unknown", n,
                          (unsigned long long)s->kv_epoch);
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

