/* The scheduler's step: schedule, apply the kv reply, update from the worker's output.
 * See scheduler.h; semantics of vLLM v1 core/sched/scheduler.py, our own code. */
#include "actors/scheduler/scheduler.h"
#include "actors/scheduler/scheduler_internal.h"
#include "actors/scheduler/sched_fair.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"

static int32_t div_up(int64_t a, int64_t b) { return (int32_t)((a + b - 1) / b); }

void sched_config_init(struct sched_config *c) {
  *c = (struct sched_config){.max_num_batched_tokens = 2048, .max_num_seqs = 256,
                             .max_model_len = 2048, .enable_chunked_prefill = true,
                             .enable_prefix_caching = true, .policy = SCHED_POLICY_FCFS,
                             .num_blocks = 1024, .block_size = 16, .num_lookahead_tokens = 16,
                             .max_deferred_kv_ops = 64, .max_num_waiting = 1024,
                             .encoder_cache_size = 4096, .encoder_compute_budget = 0,
                             .max_encoder_bytes_per_step = 768 * 1024, .async_scheduling = true,
                             .max_loras = 1, .kv_export_expires_s = 10.0f};
  llb_hash_key_generate(&c->hash_key); /* safe alone; an engine's actors get the deployment's */
}

/* ---- growable pointer arrays ---- */

static llb_status push_ptr(void ***arr, int32_t *num, int32_t *cap, void *p, size_t elem) {
  if (*num == *cap) {
    int32_t c = *cap ? *cap * 2 : 16;
    void *a = realloc(*arr, (size_t)c * elem);
    if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler: list of %d", c);
    *arr = a;
    *cap = c;
  }
  if (elem == sizeof(void *)) (*arr)[(*num)++] = p;
  return LLB_STATUS_OK;
}

/* ---- request registry: live requests by id (base/strmap.h) ---- */

struct sched_request *sched_map_get(const struct scheduler *s, const char *id) {
  return llb_strmap_get(s->reqs, id);
}

llb_status sched_push_request(struct sched_request ***arr, int32_t *num, int32_t *cap, struct sched_request *r) {
  return push_ptr((void ***)arr, num, cap, r, sizeof(r));
}

static void map_remove(struct scheduler *s, const struct sched_request *r) {
  if (llb_strmap_get(s->reqs, r->request_id) == r) llb_strmap_remove(s->reqs, r->request_id);
}

/* A request leaves with its user: freed here unless its final output took it over. */
static void free_user(struct scheduler *s, struct sched_request *r) {
  if (r->user && s->cfg.free_user) s->cfg.free_user(r->user);
  r->user = NULL;
}

static void destroy_live_cb(void *ctx, const char *key, void *value) {
  (void)key;
  free_user(ctx, value);
  sched_request_destroy(value);
}

/* ---- lifecycle ---- */

/* A scheduler's first block-accounting epoch: random, so that a restarted scheduler's differs
 * from its predecessor's (sched_kv_new_epoch); never 0 (none). */
static uint64_t random_epoch(void) { return llb_random_u64_nonzero(); }

llb_status sched_create(const struct sched_config *cfg, struct scheduler **out) {
  if (!cfg || !out) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sched_create: NULL argument");
  *out = NULL;
  const char *bad = cfg->max_num_batched_tokens < 1 ? "max_num_batched_tokens"
                    : cfg->max_num_seqs < 1         ? "max_num_seqs"
                    : cfg->max_model_len < 2        ? "max_model_len"
                    : cfg->num_blocks < 1           ? "num_blocks"
                    : cfg->block_size < 1           ? "block_size"
                    : cfg->num_lookahead_tokens < 0 ? "num_lookahead_tokens"
                    : cfg->long_prefill_token_threshold < 0 ? "long_prefill_token_threshold"
                    : cfg->max_deferred_kv_ops < 0  ? "max_deferred_kv_ops"
                    : cfg->encoder_cache_size < 1   ? "encoder_cache_size"
                    : cfg->encoder_compute_budget < 0 ? "encoder_compute_budget"
                    : cfg->max_encoder_bytes_per_step < 0 ? "max_encoder_bytes_per_step"
                    : cfg->max_resync_blocks < 0    ? "max_resync_blocks"
                    : cfg->vocab_size < 0           ? "vocab_size"
                    : cfg->enable_lora && cfg->max_loras < 1 ? "max_loras"
                    : cfg->num_speculative_tokens < 0 || cfg->num_speculative_tokens > LLB_MAX_SPEC_TOKENS
                                                    ? "num_speculative_tokens"
                    : (cfg->policy != SCHED_POLICY_FCFS && cfg->policy != SCHED_POLICY_PRIORITY) ? "policy"
                                                    : NULL;
  if (bad) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "scheduler config: bad %s", bad);
  if (cfg->num_speculative_tokens > 0 && cfg->async_scheduling) /* vLLM v1 had the same limit at first */
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "scheduler config: speculative decoding needs async_scheduling off (--no-async-scheduling)");
  struct scheduler *s = calloc(1, sizeof(*s));
  if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "sched_create");
  s->cfg = *cfg;
  s->max_blocks_per_req = div_up(cfg->max_model_len, cfg->block_size);
  sched_queue_init(&s->waiting, cfg->policy);
  s->running = calloc((size_t)cfg->max_num_seqs, sizeof(*s->running));
  s->scheduled = calloc((size_t)cfg->max_num_seqs, sizeof(*s->scheduled));
  if (cfg->enable_lora && !(s->step_loras = calloc((size_t)cfg->max_loras, sizeof(*s->step_loras)))) goto fail;
  for (int k = 0; k < 2; k++)
    s->inflight[k].entries = calloc((size_t)cfg->max_num_seqs, sizeof(*s->inflight[k].entries));
  if (llb_strmap_create(0, &s->reqs) || !s->running || !s->scheduled || sched_blocks_init(s) ||
      !s->inflight[0].entries || !s->inflight[1].entries)
    goto fail;
  if (encoder_cache_create(cfg->encoder_cache_size, &s->ec)) goto fail;
  encoder_step_init(&s->enc_pending);
  s->enc_budget = cfg->encoder_compute_budget > 0 ? cfg->encoder_compute_budget : cfg->max_num_batched_tokens;
  s->kv_epoch = random_epoch();
  *out = s;
  return LLB_STATUS_OK;
fail:
  sched_destroy(s);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "sched_create: %d blocks", cfg->num_blocks);
}

void sched_destroy(struct scheduler *s) {
  if (!s) return;
  if (s->inflight[0].entries && s->inflight[1].entries) sched_drop_inflight_steps(s);
  sched_kv_release_senders(s);
  if (s->reqs) llb_strmap_foreach(s->reqs, destroy_live_cb, s);
  llb_strmap_destroy(s->reqs);
  sched_destroy_retired(s);
  free(s->running);
  free(s->scheduled);
  free(s->op_refs);
  sched_blocks_free(s);
  free(s->step_loras);
  free(s->lora_skipped);
  free(s->kv_senders);
  free(s->kv_new_sends);
  free(s->inflight[0].entries);
  free(s->inflight[1].entries);
  sched_queue_free(&s->waiting);
  sched_str_list_free(&s->finished_ids);
  sched_str_list_free(&s->preempted_ids);
  encoder_cache_destroy(s->ec);
  encoder_step_free(&s->enc_pending);
  free(s);
}

llb_status sched_add_request(struct scheduler *s, const struct sched_new_request *nr) {
  if (!s || !nr || !nr->request_id) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sched_add_request: NULL");
  if (sched_map_get(s, nr->request_id))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s already exists", nr->request_id);
  llb_status vst = sched_new_request_validate(nr, s->cfg.vocab_size);
  if (vst) return vst;
  if (nr->lora_int_id && !s->cfg.enable_lora)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s: adapter %s: LoRA is not enabled (--enable-lora)",
                    nr->request_id, nr->lora_name);
  if (s->cfg.max_num_waiting > 0 && s->waiting.num >= s->cfg.max_num_waiting)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "request %s: %d requests are already waiting (max_num_waiting)",
                    nr->request_id, s->waiting.num);
  if (div_up((int64_t)nr->num_prompt_tokens + 1, s->cfg.block_size) > s->cfg.num_blocks)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "request %s: %d prompt tokens exceed the KV cache (%d blocks of %d)",
                    nr->request_id, nr->num_prompt_tokens, s->cfg.num_blocks, s->cfg.block_size);
  int32_t prev_end = 0;
  for (int32_t k = 0; k < nr->num_mm_features && nr->mm_features; k++) {
    const struct sched_mm_feature *f = &nr->mm_features[k];
    if (f->offset < prev_end || f->length < 1 || f->offset + (int64_t)f->length > nr->num_prompt_tokens)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "request %s: mm_features[%d] covers [%d, %lld): outside the %d-token prompt, "
                      "empty, or overlapping/unsorted", nr->request_id, k, f->offset,
                      (long long)f->offset + f->length, nr->num_prompt_tokens);
    int32_t rows = f->length; /* encoder rows: the positions is_embed marks */
    if (f->is_embed) {
      rows = 0;
      for (int32_t i = 0; i < f->length; i++) rows += f->is_embed[i] != 0;
    }
    if (f->hash && f->hash[0] && (rows > s->cfg.encoder_cache_size || rows > s->enc_budget))
      return LLB_ERRF(LLB_STATUS_TOO_LARGE,
                      "request %s: mm_features[%d] has %d embedding rows; the encoder cache holds %d "
                      "and the encoder budget per step is %d", nr->request_id, k, rows,
                      s->cfg.encoder_cache_size, s->enc_budget);
    prev_end = f->offset + f->length;
  }
  struct sched_request *r = NULL;
  llb_status st = sched_request_create(nr, s->cfg.max_model_len, s->cfg.block_size, &s->cfg.hash_key,
                                       s->next_arrival_seq++, &r);
  if (st) return st;
  st = llb_strmap_put(s->reqs, r->request_id, r);
  if (!st) {
    st = sched_queue_push(&s->waiting, r);
    if (st) map_remove(s, r);
  }
  if (st) {
    r->user = NULL; /* not admitted: the caller keeps its user */
    sched_request_destroy(r);
  }
  return st;
}

/* ---- block plan (the block state itself: sched_blocks.c) ---- */

/* Blocks r needs for n more tokens: false when even the minimum does not fit. */
static bool plan_blocks(struct scheduler *s, struct sched_request *r, int32_t n) {
  int32_t held = r->num_block_ids;
  int64_t end = (int64_t)r->num_computed_tokens + n;
  int32_t need = div_up(end, s->cfg.block_size) - held;
  r->planned_new_blocks = 0;
  r->num_lookahead_tokens = 0;
  if (need <= 0) return true;
  int32_t want = div_up(end + s->cfg.num_lookahead_tokens, s->cfg.block_size);
  if (want > s->max_blocks_per_req) want = s->max_blocks_per_req;
  want -= held;
  if (want < need) want = need;
  if (want <= s->num_free) r->planned_new_blocks = want;
  else if (need <= s->num_free) r->planned_new_blocks = need;
  else return false;
  s->num_free -= r->planned_new_blocks;
  return true;
}

static void unplan_blocks(struct scheduler *s, struct sched_request *r) {
  s->num_free += r->planned_new_blocks;
  r->planned_new_blocks = 0;
}

/* ---- KV transfer of disaggregated prefill/decode (the flow: sched_kv.c's head comment) ---- */

llb_status sched_kv_hold(struct scheduler *s, struct sched_request *r) {
  if (sched_request_kv_export_tokens(r) < 1) { /* nothing to fetch */
    sched_release_blocks(s, r);
    return LLB_STATUS_OK;
  }
  llb_status st = sched_push_request(&s->kv_senders, &s->num_kv_senders, &s->cap_kv_senders, r);
  if (st) {
    sched_release_blocks(s, r);
    return st;
  }
  st = sched_push_request(&s->kv_new_sends, &s->num_kv_new_sends, &s->cap_kv_new_sends, r);
  if (st) { /* never exported: nobody fetches it */
    s->num_kv_senders--;
    sched_release_blocks(s, r);
    return st;
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
  out->kv_epoch = s->cfg.kv_transfer ? s->kv_epoch : 0;
  s->planned_kv = out->num_kv_sends > 0 || out->kv_poll;
  return LLB_STATUS_OK;
}

void sched_kv_release_senders(struct scheduler *s) {
  for (int32_t i = 0; i < s->num_kv_senders; i++) {
    struct sched_request *r = s->kv_senders[i];
    r->kv_sending = false;
    r->num_block_ids = 0;
    sched_retire(s, r);
  }
  s->num_kv_senders = s->num_kv_new_sends = 0;
}

bool sched_kv_pending(const struct scheduler *s) { return s->num_kv_recving > 0 || s->num_kv_senders > 0; }

/* ---- scheduling helpers ---- */

void sched_remove_scheduled(struct scheduler *s, struct sched_request *r) {
  for (int32_t i = 0; i < s->num_scheduled; i++) {
    if (s->scheduled[i] != r) continue;
    memmove(s->scheduled + i, s->scheduled + i + 1, (size_t)(s->num_scheduled - i - 1) * sizeof(*s->scheduled));
    s->num_scheduled--;
    s->total_scheduled -= r->num_scheduled_tokens;
    break;
  }
  unplan_blocks(s, r);
  r->num_scheduled_tokens = 0;
  r->num_scheduled_spec_tokens = 0;
  r->lookup = false;
}

static void remove_running(struct scheduler *s, const struct sched_request *r) {
  for (int32_t i = 0; i < s->num_running; i++) {
    if (s->running[i] != r) continue;
    memmove(s->running + i, s->running + i + 1, (size_t)(s->num_running - i - 1) * sizeof(*s->running));
    s->num_running--;
    return;
  }
}

/* vLLM encoder_cache_manager.free(request): the mirror now, the actor with the next encoder
 * step (a FREE_REQUEST op ahead of that step's own). */
static llb_status encoder_release(struct scheduler *s, struct sched_request *r) {
  if (!sched_has_encoder_inputs(r)) return LLB_STATUS_OK;
  encoder_cache_free_request(s->ec, r->request_id);
  struct encoder_op op = {.kind = ENCODER_OP_KIND_FREE_REQUEST, .expected = true};
  return encoder_step_add(&s->enc_pending, &op, r->request_id, "");
}

/* Preemption by recompute (vLLM _preempt_request): blocks freed, progress reset, back to
 * the front of the waiting queue; outputs are kept and recomputed with the prompt. */
static llb_status preempt(struct scheduler *s, struct sched_request *r) {
  sched_remove_scheduled(s, r);
  remove_running(s, r);
  const bool recving = r->kv_recv == SCHED_KV_RECV_RECVING; /* its fetch is cancelled below */
  sched_kv_recv_dropped(s, r);
  sched_release_blocks(s, r);
  llb_status st = LLB_STATUS_OK;
  r->num_computed_tokens = 0;
  r->num_spec_tokens = 0; /* drafts follow the worker's state, which it drops */
  r->status = SCHED_REQUEST_STATUS_PREEMPTED;
  r->num_preemptions++;
  llb_status ste = encoder_release(s, r);
  s->stats.num_preemptions++;
  if ((r->on_worker || recving) && !st) st = sched_str_list_add(&s->preempted_ids, r->request_id);
  r->on_worker = false;
  llb_status st2 = sched_queue_push_front(&s->waiting, r);
  return st ? st : st2 ? st2 : ste;
}

/* FCFS: the last admitted; PRIORITY: the largest (priority, arrival) (vLLM). */
static struct sched_request *pick_victim(const struct scheduler *s) {
  struct sched_request *v = s->running[s->num_running - 1];
  if (s->cfg.policy == SCHED_POLICY_PRIORITY) {
    for (int32_t i = 0; i < s->num_running; i++) {
      struct sched_request *r = s->running[i];
      if (r->priority > v->priority ||
          (r->priority == v->priority && (r->arrival_time > v->arrival_time ||
                                          (r->arrival_time == v->arrival_time && r->arrival_seq > v->arrival_seq))))
        v = r;
    }
  }
  return v;
}

/* A pending resync lists every held block, and its KVStep must fit the bus: while more than
 * max_resync_blocks are held, running requests are preempted (pick_victim's order) until it
 * fits. Exports and waiting requests' blocks cannot be: when the blocks running requests hold
 * (an over-count where they share cached blocks) could not bring it under the limit, none is
 * preempted and the round trip still fails (logged here). Sets *preempted when it preempted
 * any (no admission this step). */
static llb_status fit_resync(struct scheduler *s, bool *preempted) {
  const int32_t max = s->cfg.max_resync_blocks, before = s->cfg.num_blocks - s->num_free;
  if (!s->kv_resync_pending || max <= 0 || before <= max) return LLB_STATUS_OK;
  int64_t running_held = 0;
  for (int32_t i = 0; i < s->num_running; i++) running_held += s->running[i]->num_block_ids;
  llb_status st = LLB_STATUS_OK;
  int32_t n = 0;
  if (before - running_held <= max)
    for (; !st && s->num_running > 0 && s->cfg.num_blocks - s->num_free > max; n++) st = preempt(s, pick_victim(s));
  const int32_t held = s->cfg.num_blocks - s->num_free;
  if (held > max)
    LLB_LOG_ERROR("kv_resync_too_large", "step=%llu held=%d max_resync_blocks=%d preempted=%d exports=%d",
                  (unsigned long long)s->step, held, max, n, s->num_kv_senders);
  else
    LLB_LOG_WARN("kv_resync_trimmed", "step=%llu held_before=%d held=%d max_resync_blocks=%d preempted=%d",
                 (unsigned long long)s->step, before, held, max, n);
  *preempted = *preempted || n > 0;
  return st;
}

/* Tokens r may compute this step under the budget. */
static int32_t tokens_to_schedule(const struct scheduler *s, const struct sched_request *r, int32_t budget) {
  int32_t n = r->num_tokens + r->num_output_placeholders - r->num_computed_tokens;
  if (s->cfg.long_prefill_token_threshold > 0 && n > s->cfg.long_prefill_token_threshold)
    n = s->cfg.long_prefill_token_threshold;
  return n < budget ? n : budget;
}

static void mark_scheduled(struct scheduler *s, struct sched_request *r, int32_t n, bool as_new) {
  r->num_scheduled_tokens = n;
  r->scheduled_as_new = as_new;
  r->step_blocks_begin = as_new ? 0 : r->num_block_ids;
  s->scheduled[s->num_scheduled++] = r;
  s->total_scheduled += n;
}

/* ---- kv step emission ---- */

static llb_status add_op_ref(struct scheduler *s, struct sched_request *r, enum kv_op_kind kind) {
  if (s->num_op_refs == s->cap_op_refs) {
    int32_t c = s->cap_op_refs ? s->cap_op_refs * 2 : 64;
    struct op_ref *a = realloc(s->op_refs, (size_t)c * sizeof(*a));
    if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "scheduler: %d kv ops", c);
    s->op_refs = a;
    s->cap_op_refs = c;
  }
  s->op_refs[s->num_op_refs++] = (struct op_ref){.req = r, .kind = kind};
  return LLB_STATUS_OK;
}

/* The step's kv step: the deferred block ops (and a pending resync), then one ALLOCATE per
 * request that needs blocks; op_refs map the ALLOCATE results back to their requests. */
static llb_status emit_kv_step(struct scheduler *s, struct kv_step *kv) {
  llb_status st = sched_blocks_emit(s, kv, &s->num_block_ops);
  for (int32_t i = 0; i < s->num_scheduled && !st; i++) {
    struct sched_request *r = s->scheduled[i];
    if (r->planned_new_blocks == 0) continue;
    int32_t num_hashes = 0;
    if (r->lookup) {
      num_hashes = (r->num_scheduled_tokens - 1) / s->cfg.block_size;
      if (num_hashes > r->num_block_hashes) num_hashes = r->num_block_hashes;
    }
    int32_t slots = (r->num_block_ids + r->planned_new_blocks) * s->cfg.block_size;
    st = kv_step_add_allocate(kv, r->request_id, slots, r->num_block_ids, r->num_computed_tokens, r->lookup,
                              r->block_hashes, num_hashes);
    if (!st) st = add_op_ref(s, r, KV_OP_KIND_ALLOCATE);
  }
  return st;
}

/* Fills `out` from the scheduled list; `final` marks new requests as sent to the worker. */
llb_status sched_assemble_output(struct scheduler *s, struct sched_output *out, bool final) {
  out->step = s->step;
  out->block_size = s->cfg.block_size;
  out->num_new_reqs = out->num_cached_reqs = 0;
  out->total_num_scheduled_tokens = 0;
  if (out->cap_new_reqs < s->num_scheduled || out->cap_cached_reqs < s->num_scheduled) {
    int32_t cap = s->cfg.max_num_seqs;
    void *a = realloc(out->new_reqs, (size_t)cap * sizeof(*out->new_reqs));
    if (a) out->new_reqs = a;
    void *b = realloc(out->cached_reqs, (size_t)cap * sizeof(*out->cached_reqs));
    if (b) out->cached_reqs = b;
    if (!a || !b) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "sched_output of %d requests", cap);
    out->cap_new_reqs = out->cap_cached_reqs = cap;
  }
  for (int32_t i = 0; i < s->num_scheduled; i++) {
    struct sched_request *r = s->scheduled[i];
    out->total_num_scheduled_tokens += r->num_scheduled_tokens;
    if (r->scheduled_as_new) {
      out->new_reqs[out->num_new_reqs++] = (struct sched_new_req_data){
          .req_id = r->request_id, .prompt_token_ids = r->token_ids,
          .num_prompt_tokens = r->num_prompt_tokens,
          .output_token_ids = r->token_ids + r->num_prompt_tokens,
          .num_output_tokens = sched_request_num_output_tokens(r),
          .sampling_params = r->sampling_params, .block_ids = r->block_ids,
          .num_block_ids = r->num_block_ids, .num_computed_tokens = r->num_computed_tokens,
          .num_scheduled_tokens = r->num_scheduled_tokens,
          .resumed_from_preemption = r->num_preemptions > 0, .mm_features = r->mm_features,
          .num_mm_features = r->num_mm_features, .structured_outputs = &r->structured_outputs,
          .pooling_params = r->pooling_params, .lora_name = r->lora_name, .lora_int_id = r->lora_int_id};
      if (final) r->on_worker = true;
    } else {
      out->cached_reqs[out->num_cached_reqs++] = (struct sched_cached_req_data){
          .req_id = r->request_id, .new_block_ids = r->block_ids + r->step_blocks_begin,
          .num_new_block_ids = r->num_block_ids - r->step_blocks_begin,
          .num_computed_tokens = r->num_computed_tokens,
          /* with the tokens the worker sampled in steps not applied yet: it feeds them */
          .num_output_tokens = sched_request_num_output_tokens(r) + r->num_output_placeholders,
          .num_scheduled_tokens = r->num_scheduled_tokens, .spec_token_ids = r->spec_token_ids,
          .num_spec_tokens = r->num_scheduled_spec_tokens};
    }
  }
  return LLB_STATUS_OK;
}

static llb_status copy_strs(struct sched_str_list *dst, const struct sched_str_list *src) {
  sched_str_list_clear(dst);
  for (int32_t i = 0; i < src->num; i++) {
    llb_status st = sched_str_list_add(dst, sched_str_list_get(src, i));
    if (st) return st;
  }
  return LLB_STATUS_OK;
}

/* ---- commit ---- */


/* True when r's tokens in flight already take it to max_tokens or max_model_len: it will
 * finish by length when they are applied, so it gets no further step (vLLM async). */
static bool length_reached_in_flight(const struct scheduler *s, const struct sched_request *r) {
  if (r->num_output_placeholders == 0) return false;
  return sched_request_num_output_tokens(r) + r->num_output_placeholders >= r->max_tokens ||
         r->num_tokens + r->num_output_placeholders >= s->cfg.max_model_len;
}

/* ---- schedule ---- */

/* ---- max_loras (vLLM v1 scheduler.py: scheduled_loras) ---- */

/* True if an adapter id (0 = the base) may run in this step: it is one of step_loras, or they
 * number fewer than max_loras (it is added then). */
static bool lora_admit(struct scheduler *s, int32_t id) {
  if (id == 0) return true;
  for (int32_t i = 0; i < s->num_step_loras; i++)
    if (s->step_loras[i] == id) return true;
  if (s->num_step_loras >= s->cfg.max_loras) return false;
  s->step_loras[s->num_step_loras++] = id;
  return true;
}

/* step_loras from every running request, scheduled this step or not: vLLM counts those it
 * scheduled; counting all keeps each later step within max_loras too. */
static void lora_collect_running(struct scheduler *s) {
  s->num_step_loras = 0;
  for (int32_t i = 0; i < s->num_running && s->cfg.enable_lora; i++) (void)lora_admit(s, s->running[i]->lora_int_id);
}

/* The waiting requests passed over for max_loras go back to the front, in their order. */
static llb_status lora_requeue_skipped(struct scheduler *s) {
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = s->num_lora_skipped - 1; i >= 0 && !st; i--) st = sched_queue_push_front(&s->waiting, s->lora_skipped[i]);
  s->num_lora_skipped = 0;
  return st;
}

llb_status sched_schedule(struct scheduler *s, struct sched_output *out, struct kv_step *kv) {
  if (s->kv_in_flight)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "step %llu: kv step unanswered", (unsigned long long)s->step);
  sched_commit_step(s);
  sched_destroy_retired(s); /* the caller is done with the last outputs */
  if (s->num_inflight > (s->cfg.async_scheduling ? 1 : 0))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "step %llu still in flight (%d unanswered)",
                    (unsigned long long)s->inflight[s->inflight_head].step, s->num_inflight);
  s->step++;
  kv_step_clear(kv, s->step);
  /* preempted_ids may hold ids from sched_preempt_all since the last step: they go out now */
  s->num_scheduled = 0;
  s->total_scheduled = 0;
  s->num_op_refs = s->num_block_ops = 0;
  out->num_encoder_inputs = 0;
  sched_str_list_clear(&out->free_encoder_mm_hashes);
  llb_status st = LLB_STATUS_OK;
  int32_t budget = s->cfg.max_num_batched_tokens;
  bool preempted = false;
  st = fit_resync(s, &preempted);

  /* Running requests first (decodes and unfinished prefills). */
  for (int32_t i = 0; i < s->num_running && budget > 0 && !st;) {
    struct sched_request *r = s->running[i];
    int32_t n = r->abort_pending || length_reached_in_flight(s, r) || r->kv_recv == SCHED_KV_RECV_RECVING
                    ? 0
                    : tokens_to_schedule(s, r, budget);
    if (n <= 0) {
      i++;
      continue;
    }
    const int32_t drafts = sched_spec_num_drafts(s, r, n, budget); /* verified with the decode */
    n += drafts;
    bool ok = true;
    while (!plan_blocks(s, r, n)) {
      struct sched_request *v = pick_victim(s);
      int32_t vi = 0;
      while (s->running[vi] != v) vi++;
      if (v->num_scheduled_tokens > 0) budget += v->num_scheduled_tokens;
      st = preempt(s, v);
      preempted = true;
      if (v == r || st) {
        ok = false;
        break;
      }
      if (vi < i) i--;
    }
    if (!ok) break; /* r preempted itself: no room for it, none for the rest (vLLM) */
    r->lookup = false;
    mark_scheduled(s, r, n, !r->on_worker); /* a request held back by its encoder inputs */
    r->num_scheduled_spec_tokens = drafts;
    budget -= n;
    i++;
  }

  /* Then waiting ones, unless this step had to preempt (vLLM). One whose adapter would exceed
   * max_loras is passed over: it keeps its place and the next one is tried (vLLM). */
  lora_collect_running(s);
  while (!preempted && !st && budget > 0 && s->num_running < s->cfg.max_num_seqs) {
    struct sched_request *r = sched_fair_peek(&s->waiting, s->running, s->num_running); /* sched_fair.h */
    if (!r || r->num_output_placeholders > 0) break; /* preempted with a step in flight: after it */
    if (r->num_failed_steps > 0 && sched_suspect_in_flight(s)) break; /* one suspect at a time */
    if (r->abort_pending) { /* aborted while preempted, its step forgotten (sched_preempt_all) */
      st = sched_finish(s, r, r->abort_reason, NULL, 0, 0);
      continue;
    }
    const int32_t num_loras = s->num_step_loras;
    if (!lora_admit(s, r->lora_int_id)) {
      sched_fair_take(&s->waiting, r);
      st = push_ptr((void ***)&s->lora_skipped, &s->num_lora_skipped, &s->cap_lora_skipped, r, sizeof r);
      if (st) (void)sched_queue_push_front(&s->waiting, r);
      continue;
    }
    /* a hand-off whose KV comes from its prefill engine: blocks for that KV now (a prefix hit
     * shortens the fetch), no compute and no budget: it waits for the transfer (sched_kv.c) */
    const bool wants_kv = r->kv_recv == SCHED_KV_RECV_WANTED && s->cfg.kv_transfer;
    int32_t n = wants_kv ? r->kv_remote_num_tokens : tokens_to_schedule(s, r, budget);
    if ((!wants_kv && !s->cfg.enable_chunked_prefill && n < r->num_tokens - r->num_computed_tokens) ||
        !plan_blocks(s, r, n)) {
      s->num_step_loras = num_loras; /* r's adapter, if new, was not admitted after all */
      break;
    }
    sched_fair_take(&s->waiting, r);
    s->running[s->num_running++] = r;
    r->status = SCHED_REQUEST_STATUS_RUNNING;
    /* a pooling request needs the hidden state of each row it pools, and a request scoring its
     * prompt computes every position: no prefix-cache hit for either (vLLM skips the prefix
     * cache for both); nor for one that still holds blocks (sent back to the queue after a
     * refused allocation while its encoder inputs waited): the kv_manager refuses a lookup with
     * held blocks, and a hit from its first admission would count twice */
    r->lookup = s->cfg.enable_prefix_caching && !sched_request_is_pooling(r) &&
                r->sampling_params->prompt_logprobs < 0 && r->num_block_ids == 0 && r->num_computed_tokens == 0;
    mark_scheduled(s, r, n, true);
    if (!wants_kv) budget -= n;
  }
  if (s->num_lora_skipped) {
    llb_status rst = lora_requeue_skipped(s);
    if (!st) st = rst;
  }

  bool allocates = false;
  for (int32_t i = 0; i < s->num_scheduled; i++) allocates |= s->scheduled[i]->planned_new_blocks > 0;
  int32_t deferred = sched_blocks_num_deferred(s);
  if (!st && (allocates || (deferred > 0 && (s->num_scheduled == 0 || deferred >= s->cfg.max_deferred_kv_ops)))) {
    st = emit_kv_step(s, kv);
    s->kv_in_flight = !kv_step_empty(kv);
    if (s->kv_in_flight) s->stats.num_kv_round_trips++;
  }
  if (!st) st = sched_kv_fill_output(s, out);
  if (!st) st = copy_strs(&out->finished_req_ids, &s->finished_ids);
  if (!st) st = copy_strs(&out->preempted_req_ids, &s->preempted_ids);
  if (!st) st = sched_assemble_output(s, out, kv_step_empty(kv));
  if (!st) sched_str_list_clear(&s->finished_ids);
  if (!st) sched_str_list_clear(&s->preempted_ids);
  s->planned = true;
  return st;
}

/* ---- kv reply ---- */


/* A refused allocation: this step goes on without r. */
static llb_status unschedule(struct scheduler *s, struct sched_request *r) {
  bool as_new = r->scheduled_as_new;
  sched_remove_scheduled(s, r);
  if (r->abort_pending) return sched_finish(s, r, r->abort_reason, NULL, 0, 0);
  if (!as_new) return LLB_STATUS_OK;
  remove_running(s, r);
  r->status = r->num_preemptions > 0 ? SCHED_REQUEST_STATUS_PREEMPTED : SCHED_REQUEST_STATUS_WAITING;
  return sched_queue_push_front(&s->waiting, r);
}

/* A reply that disagrees with the block state: counted, logged, and the next kv step resyncs. */
static void protocol_fault(struct scheduler *s, const char *what, const char *req_id, int32_t a, int32_t b) {
  s->stats.num_kv_protocol_faults++;
  LLB_LOG_WARN("kv_protocol_fault", "step=%llu what=%s req=%s ours=%d kv=%d action=resync",
               (unsigned long long)s->step, what, req_id ? req_id : "-", a, b);
  sched_kv_resync(s);
}

/* One ALLOCATE's answer for r: its blocks and prefix hit taken, or r unscheduled. */
static llb_status apply_allocation(struct scheduler *s, struct sched_request *r, const struct kv_step_result *res,
                                   const struct kv_op_result *kr, struct sched_output *out) {
  const int32_t bs = s->cfg.block_size;
  const int32_t *ids = kr ? kv_step_result_block_ids(res, kr) : NULL;
  const int32_t n_ids = kr && ids ? kr->num_block_ids : 0;
  const bool given = kr && kr->status == LLB_STATUS_OK;
  const int32_t planned = r->planned_new_blocks;
  const bool ok = given && n_ids == planned && r->num_block_ids + n_ids <= r->cap_blocks && kr->num_cached_tokens >= 0 &&
                  kr->num_cached_tokens < r->num_scheduled_tokens && kr->num_cached_tokens % bs == 0 &&
                  (r->lookup || kr->num_cached_tokens == 0) && kr->num_cached_tokens / bs <= n_ids &&
                  sched_blocks_reply_ok(s, ids, n_ids, kr->num_cached_tokens / bs);
  unplan_blocks(s, r);
  if (!ok) {
    s->stats.num_kv_alloc_failures++;
    LLB_LOG_WARN("kv_alloc_refused", "req=%s step=%llu status=%d", r->request_id, (unsigned long long)s->step,
                 kr ? (int)kr->status : -1);
    /* blocks given but not taken are the kv_manager's error: the resync frees them there */
    if (kr && kr->status != LLB_STATUS_QUEUE_FULL) protocol_fault(s, "allocate", r->request_id, planned, n_ids);
    return unschedule(s, r);
  }
  sched_take_blocks(s, r, ids, n_ids);
  if (r->lookup) {
    int32_t c = kr->num_cached_tokens;
    s->stats.prefix_cache_queries += (uint64_t)r->num_tokens;
    s->stats.prefix_cache_hits += (uint64_t)c;
    r->num_computed_tokens += c;
    r->num_scheduled_tokens -= c;
    r->num_cached_blocks = c / bs; /* hit blocks carry their hash already */
    if (r->num_cached_tokens < 0) r->num_cached_tokens = c;
    r->lookup = false;
  }
  if (r->kv_recv == SCHED_KV_RECV_WANTED && s->cfg.kv_transfer) return sched_kv_start_recv(s, r, out);
  return LLB_STATUS_OK;
}

llb_status sched_apply_kv_result(struct scheduler *s, const struct kv_step_result *res,
                                 struct sched_output *out) {
  if (!s->kv_in_flight) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "no kv step in flight");
  s->kv_in_flight = false;
  llb_status st = LLB_STATUS_OK;
  const int32_t nb = s->num_block_ops;
  /* a kv_manager of another pool size (a mismatched --num-blocks) cannot be resynced into
   * agreement: its replies are refused, each naming both sizes */
  const bool same_pool = res->num_total_blocks == s->cfg.num_blocks;
  const bool valid = same_pool && res->step == s->step && res->num_results == nb + s->num_op_refs;
  if (valid) sched_blocks_synced(s); /* before the checks below: a fault asks for a resync again */
  for (int32_t i = 0; valid && i < nb; i++)
    if (res->results[i].status != LLB_STATUS_OK)
      protocol_fault(s, "release_or_cache_status", NULL, LLB_STATUS_OK, res->results[i].status);
  for (int32_t i = 0; i < s->num_op_refs; i++) {
    llb_status st2 = apply_allocation(s, s->op_refs[i].req, res, valid ? &res->results[nb + i] : NULL, out);
    if (!st) st = st2;
  }
  s->total_scheduled = 0;
  for (int32_t i = 0; i < s->num_scheduled; i++) s->total_scheduled += s->scheduled[i]->num_scheduled_tokens;
  if (!valid) {
    LLB_LOG_ERROR("kv_result_mismatch", "step=%llu result_step=%llu ops=%d results=%d",
                  (unsigned long long)s->step, (unsigned long long)res->step, nb + s->num_op_refs, res->num_results);
    sched_kv_resync(s);
  } else if (res->num_free_blocks != s->num_free) {
    protocol_fault(s, "num_free_blocks", NULL, s->num_free, res->num_free_blocks);
  }
  s->num_op_refs = s->num_block_ops = 0;
  llb_status st2 = sched_assemble_output(s, out, true);
  if (st) return st;
  if (st2) return st2;
  if (!same_pool)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "the kv_manager's pool has %d blocks, this scheduler's %d "
                    "(--num-blocks of both must agree)", res->num_total_blocks, s->cfg.num_blocks);
  return valid ? LLB_STATUS_OK
               : LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv result does not answer step %llu",
                          (unsigned long long)s->step);
}

/* ---- update ---- */

/* Ends r: output, leaves running/waiting and the map; blocks freed with the next kv step. */
llb_status sched_finish(struct scheduler *s, struct sched_request *r, enum sched_finish_reason reason,
                         struct sched_engine_outputs *eo, int32_t first_pos, int32_t n_new) {
  llb_status st = LLB_STATUS_OK;
  r->finish_reason = reason;
  switch (reason) {
  case SCHED_FINISH_REASON_STOP: r->status = SCHED_REQUEST_STATUS_FINISHED_STOPPED; break;
  case SCHED_FINISH_REASON_LENGTH: r->status = SCHED_REQUEST_STATUS_FINISHED_LENGTH_CAPPED; break;
  case SCHED_FINISH_REASON_ERROR: r->status = SCHED_REQUEST_STATUS_FINISHED_ERROR; break;
  case SCHED_FINISH_REASON_HANDED_OFF: r->status = SCHED_REQUEST_STATUS_FINISHED_HANDED_OFF; break;
  default: r->status = SCHED_REQUEST_STATUS_FINISHED_ABORTED; r->finish_reason = SCHED_FINISH_REASON_ABORT; break;
  }
  if (eo) st = sched_engine_outputs_add(eo, r, first_pos, n_new);
  if (r->queue_index >= 0) sched_queue_remove(&s->waiting, r);
  remove_running(s, r);
  const bool recving = r->kv_recv == SCHED_KV_RECV_RECVING; /* the worker cancels its fetch */
  sched_kv_recv_dropped(s, r);
  if (r->on_worker || recving) {
    llb_status st2 = sched_str_list_add(&s->finished_ids, r->request_id);
    if (!st) st = st2;
    r->on_worker = false;
  }
  /* a hand-off's blocks stay for the decode engine's fetch (vLLM delay_free_blocks) */
  const bool hold = reason == SCHED_FINISH_REASON_HANDED_OFF && s->cfg.kv_transfer && r->num_block_ids > 0;
  llb_status st3 = LLB_STATUS_OK;
  if (hold) st3 = sched_kv_hold(s, r);
  else sched_release_blocks(s, r);
  if (!st) st = st3;
  st3 = encoder_release(s, r);
  if (!st) st = st3;
  map_remove(s, r);
  free_user(s, r); /* no final output took it (none asked for, or out of memory) */
  sched_retire(s, r);
  return st;
}

llb_status sched_hand_off(struct scheduler *s, const char *req_id, struct sched_engine_outputs *eo) {
  struct sched_request *r = req_id ? sched_map_get(s, req_id) : NULL;
  if (!r || r->abort_pending || sched_request_is_finished(r) || sched_request_is_pooling(r) ||
      sched_request_num_output_tokens(r) < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "hand-off of %s: not a running request with an output",
                    req_id ? req_id : "(null)");
  return sched_finish(s, r, SCHED_FINISH_REASON_HANDED_OFF, eo, sched_request_num_output_tokens(r), 0);
}

llb_status sched_abort_requests(struct scheduler *s, const char *const *req_ids, int32_t n,
                                enum sched_finish_reason reason, struct sched_engine_outputs *eo) {
  if (reason != SCHED_FINISH_REASON_ERROR) reason = SCHED_FINISH_REASON_ABORT;
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < n && !st; i++) {
    struct sched_request *r = req_ids[i] ? sched_map_get(s, req_ids[i]) : NULL;
    if (!r) continue;
    if (r->abort_pending) continue;
    if (r->num_scheduled_tokens > 0 || r->num_inflight_steps > 0) {
      /* Its step is in flight (kv or worker): tell the client now, clean up with the step. */
      r->abort_pending = true;
      r->abort_reason = reason;
      r->finish_reason = reason;
      st = sched_engine_outputs_add(eo, r, sched_request_num_output_tokens(r), 0);
      continue;
    }
    st = sched_finish(s, r, reason, eo, sched_request_num_output_tokens(r), 0);
  }
  return st;
}

void sched_preempt_all(struct scheduler *s) {
  while (s->num_scheduled > 0) sched_remove_scheduled(s, s->scheduled[s->num_scheduled - 1]);
  if (s->kv_in_flight) sched_kv_resync(s); /* its answer never comes: what it did is unknown */
  s->planned = s->kv_in_flight = false;
  s->num_op_refs = s->num_block_ops = 0;
  sched_drop_inflight_steps(s);
  while (s->num_running > 0) {
    struct sched_request *r = s->running[s->num_running - 1];
    if (r->abort_pending) (void)sched_finish(s, r, r->abort_reason, NULL, 0, 0);
    else (void)preempt(s, r);
  }
  /* The worker's encoder outputs may be gone too: start the accounting again (the hashes go
   * to the worker's next free_encoder_mm_hashes, in case it is still alive). */
  (void)encoder_cache_evict_all(s->ec);
  encoder_step_clear(&s->enc_pending, s->step);
  s->enc_reset_pending = true;
  /* Exports stay held: a worker that is alive may still serve them (its finished_sending, or
   * their deadline, ends them: sched_kv_tick); a kv_manager that lost its state gets their
   * blocks back with the resync. */
}

void sched_get_stats(const struct scheduler *s, struct sched_stats *out) {
  *out = s->stats;
  out->step = s->step;
  out->num_running = s->num_running;
  out->num_waiting = s->waiting.num;
  out->num_free_blocks = s->num_free;
  out->kv_cache_usage = 1.0 - (double)s->num_free / (double)s->cfg.num_blocks;
  out->num_waiting_for_remote_kvs = s->num_kv_recving;
}

int32_t sched_num_unfinished(const struct scheduler *s) { return s->num_running + s->waiting.num; }

const struct llb_hash_key *sched_hash_key(const struct scheduler *s) { return &s->cfg.hash_key; }

void sched_set_max_resync_blocks(struct scheduler *s, int32_t n) { s->cfg.max_resync_blocks = n > 0 ? n : 0; }

const struct sched_request *sched_find_request(const struct scheduler *s, const char *req_id) {
  return sched_map_get(s, req_id);
}
