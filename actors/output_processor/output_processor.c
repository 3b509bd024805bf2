/* Output processor; see output_processor.h. */
#include "actors/output_processor/output_processor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/output_processor/detokenizer.h"
#include "actors/output_processor/stop_strings.h"
#include "base/array.h"
#include "base/strmap.h"
#include "model/tokenizer/tokenizer.h"

#define RECENTLY_FINISHED_IDS 4096 /* finished ids remembered to drop late outputs silently */

struct parent_state;

/* One engine request (vLLM RequestState). */
struct req_state {
  char id[OUTPUT_PROCESSOR_MAX_ID_BYTES];
  struct parent_state *parent;
  int32_t index;
  struct llb_sampling_params params;
  struct detok detok;
  int32_t *token_ids;                  /* [num_tokens] every output token received */
  int64_t num_tokens, cap_tokens;
  struct output_processor_new_logprobs *lps;    /* [num_lps] positions lp_first_pos.. */
  int64_t num_lps, cap_lps, lp_first_pos;
  double cumulative_logprob;
  size_t stop_check_from;              /* text bytes already searched for stop strings */
  size_t sent_text;                    /* DELTA: text bytes delivered */
  int64_t sent_tokens;                 /* DELTA: tokens delivered */
  int64_t emitted_tokens;              /* tokens when it was last in a RequestOutput (any kind) */
  bool has_output;                     /* appeared in an output already */
  bool resync_pending;                 /* the next completion output says `resync` */
  bool finished;
  enum output_processor_finish_reason finish_reason;
  enum output_processor_stop_reason_kind stop_kind;
  int32_t stop_str_index;
  int32_t stop_token_id;
  int64_t first_scheduled_ns, first_token_ns, last_token_ns, finished_ns;
  int64_t queued_ns;                   /* the engine's, for the metrics */
  int64_t last_accepted_ns;            /* now_ns of the last accepted tokens (metrics' clock) */
  int32_t num_cached_tokens;
};

/* One client request: the n children of vLLM's ParentRequest (n == 1 included). */
struct parent_state {
  char id[OUTPUT_PROCESSOR_MAX_ID_BYTES];
  char external_id[OUTPUT_PROCESSOR_MAX_ID_BYTES];
  char reply_to[OUTPUT_PROCESSOR_MAX_REPLY_TO_BYTES];
  int32_t n, num_finished;
  struct req_state **children;         /* [n]; NULL until registered */
  int32_t *prompt_ids;                 /* [num_prompt] */
  int64_t num_prompt;
  int64_t arrival_ns;
  enum llb_output_kind kind;
  bool sent_first;
  int64_t last_sent_ns;  /* when its last RequestOutput was emitted (--stream-interval's time bound) */
  char error[OUTPUT_PROCESSOR_MAX_ERROR_BYTES];
  llb_status error_code; /* the engine's status for `error` (0: INTERNAL) */
  struct output_processor_new_logprobs *plp;    /* [num_plp] prompt logprobs (from the first child that has them) */
  int32_t *plp_ranks;                  /* [num_plp] */
  int32_t num_plp;
  bool plp_sent;
};

struct output_processor {
  const struct tokenizer *tok;
  struct llb_strmap *reqs;      /* engine id → req_state, unfinished only */
  struct llb_strmap *parents;   /* parent id → parent_state, until its final output */
  struct llb_strmap *finished;  /* recently finished engine ids (value unused) */
  struct output_processor_stats_hooks hooks; /* metrics reports; NULL entries = none */
  void *hooks_user;
  int64_t now_ns;           /* of the call in progress */
  uint64_t num_duplicates;  /* output tokens dropped: positions already delivered (replays) */
  int64_t stream_interval;  /* output_processor_set_stream_interval; 1 = every token */
  bool handing_off;         /* the output being processed is the last before a P/D hand-off */
};

void output_processor_set_stats_hooks(struct output_processor *p, const struct output_processor_stats_hooks *hooks, void *user) {
  p->hooks = hooks ? *hooks : (struct output_processor_stats_hooks){0};
  p->hooks_user = user;
}

const char *output_processor_finish_reason_name(enum output_processor_finish_reason r) {
  switch (r) {
  case OUTPUT_PROCESSOR_FINISH_REASON_STOP: return "stop";
  case OUTPUT_PROCESSOR_FINISH_REASON_LENGTH: return "length";
  case OUTPUT_PROCESSOR_FINISH_REASON_ABORT: return "abort";
  case OUTPUT_PROCESSOR_FINISH_REASON_ERROR: return "error";
  default: return NULL;
  }
}

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

/* --- results ----------------------------------------------------------------------- */

void output_processor_result_init(struct output_processor_result *r) { memset(r, 0, sizeof *r); }

static void completion_free(struct output_processor_completion *c) {
  free(c->text);
  free(c->token_ids);
  free(c->logprobs);
  free(c->logprob_arena);
}

void output_processor_result_clear(struct output_processor_result *r) {
  for (int64_t i = 0; i < r->num_outputs; i++) {
    struct output_processor_request_output *o = &r->outputs[i];
    for (int32_t j = 0; j < o->num_outputs; j++) completion_free(&o->outputs[j]);
    free(o->outputs);
    free((void *)o->prompt_token_ids);
    free(o->pooling_output);
    free(o->prompt_logprobs);
    free(o->prompt_logprob_arena);
  }
  r->num_outputs = r->num_abort = r->num_unknown = r->num_resync = 0;
}

void output_processor_result_free(struct output_processor_result *r) {
  if (!r) return;
  output_processor_result_clear(r);
  free(r->outputs);
  free(r->abort_ids);
  free(r->unknown_ids);
  free(r->resync_ids);
  output_processor_result_init(r);
}

static llb_status push_id(char (**ids)[OUTPUT_PROCESSOR_MAX_ID_BYTES], int64_t *num, int64_t *cap,
                          const char *id) {
  if (llb_array_reserve((void **)ids, cap, *num + 1, sizeof **ids) != LLB_STATUS_OK) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "result id list");
  }
  copy_str((*ids)[*num], OUTPUT_PROCESSOR_MAX_ID_BYTES, id);
  (*num)++;
  return LLB_STATUS_OK;
}

/* --- processor lifetime ------------------------------------------------------------- */

static void req_free(struct req_state *r) {
  if (!r) return;
  detok_free(&r->detok);
  free(r->token_ids);
  free(r->lps);
  free(r);
}

static void parent_free(struct parent_state *ps) {
  if (!ps) return;
  for (int32_t i = 0; ps->children && i < ps->n; i++) req_free(ps->children[i]);
  free(ps->children);
  free(ps->prompt_ids);
  free(ps->plp);
  free(ps->plp_ranks);
  free(ps);
}

llb_status output_processor_create(const struct tokenizer *tok, struct output_processor **out) {
  struct output_processor *p = calloc(1, sizeof *p);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "output processor");
  p->tok = tok;
  llb_status st = llb_strmap_create(0, &p->reqs);
  if (st == LLB_STATUS_OK) st = llb_strmap_create(0, &p->parents);
  if (st == LLB_STATUS_OK) st = llb_strmap_create(RECENTLY_FINISHED_IDS, &p->finished);
  if (st != LLB_STATUS_OK) goto fail;
  *out = p;
  return LLB_STATUS_OK;
fail:
  output_processor_destroy(p);
  return st;
}

static void free_parent_cb(void *ctx, const char *key, void *value) {
  (void)ctx;
  (void)key;
  parent_free(value);
}

void output_processor_destroy(struct output_processor *p) {
  if (!p) return;
  if (p->parents) llb_strmap_foreach(p->parents, free_parent_cb, NULL);
  llb_strmap_destroy(p->parents);
  llb_strmap_destroy(p->reqs);
  llb_strmap_destroy(p->finished);
  free(p);
}

void output_processor_set_stream_interval(struct output_processor *p, int64_t n) { p->stream_interval = n > 1 ? n : 1; }

int64_t output_processor_num_unfinished(const struct output_processor *p) { return llb_strmap_size(p->reqs); }

/* --- registration ------------------------------------------------------------------- */

static llb_status check_info(const struct output_processor_request_info *info) {
  if (!info || !info->request_id || !info->request_id[0] || !info->sampling_params) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request info needs request_id and sampling_params");
  }
  if (strlen(info->request_id) >= OUTPUT_PROCESSOR_MAX_ID_BYTES) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request_id longer than %d bytes", OUTPUT_PROCESSOR_MAX_ID_BYTES - 1);
  }
  if (info->num_children < 1 || info->child_index < 0 || info->child_index >= info->num_children) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s: child_index %d outside [0, %d)",
                    info->request_id, info->child_index, info->num_children);
  }
  if (info->num_prompt_tokens < 0 || (info->num_prompt_tokens > 0 && !info->prompt_token_ids)) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s: bad prompt_token_ids", info->request_id);
  }
  return LLB_STATUS_OK;
}

static llb_status get_or_make_parent(struct output_processor *p, const struct output_processor_request_info *info,
                                     struct parent_state **out) {
  const char *pid = info->parent_request_id ? info->parent_request_id : info->request_id;
  const char *ext = info->external_request_id ? info->external_request_id : pid;
  struct parent_state *ps = llb_strmap_get(p->parents, pid);
  if (ps) {
    if (ps->n != info->num_children || strcmp(ps->external_id, ext) != 0) {
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                      "request %s: parent %s registered with n=%d external id %s, now n=%d id %s",
                      info->request_id, pid, ps->n, ps->external_id, info->num_children, ext);
    }
    *out = ps;
    return LLB_STATUS_OK;
  }
  ps = calloc(1, sizeof *ps);
  if (!ps) goto oom;
  copy_str(ps->id, sizeof ps->id, pid);
  copy_str(ps->external_id, sizeof ps->external_id, ext);
  copy_str(ps->reply_to, sizeof ps->reply_to, info->reply_to);
  ps->n = info->num_children;
  ps->children = calloc((size_t)ps->n, sizeof *ps->children);
  ps->num_prompt = info->num_prompt_tokens;
  ps->prompt_ids = malloc((size_t)(ps->num_prompt > 0 ? ps->num_prompt : 1) * sizeof(int32_t));
  if (!ps->children || !ps->prompt_ids) goto oom;
  if (ps->num_prompt > 0) memcpy(ps->prompt_ids, info->prompt_token_ids, (size_t)ps->num_prompt * sizeof(int32_t));
  ps->arrival_ns = info->arrival_time_ns;
  ps->kind = info->sampling_params->output_kind;
  if (llb_strmap_put(p->parents, pid, ps) != LLB_STATUS_OK) goto oom;
  *out = ps;
  return LLB_STATUS_OK;
oom:
  parent_free(ps);
  return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "parent state of %s", pid);
}

/* Creates the state of one engine request; NULL-parent-safe cleanup on failure. */
static llb_status register_req(struct output_processor *p, const struct output_processor_request_info *info,
                               struct req_state **out) {
  llb_status st = check_info(info);
  if (st != LLB_STATUS_OK) return st;
  struct parent_state *ps = NULL;
  st = get_or_make_parent(p, info, &ps);
  if (st != LLB_STATUS_OK) return st;
  if (ps->children[info->child_index]) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s: child %d of %s already registered as %s",
                    info->request_id, info->child_index, ps->id, ps->children[info->child_index]->id);
  }
  struct req_state *r = calloc(1, sizeof *r);
  if (!r) goto oom;
  copy_str(r->id, sizeof r->id, info->request_id);
  r->parent = ps;
  r->index = info->child_index;
  r->params = *info->sampling_params;
  r->stop_token_id = -1;
  r->num_cached_tokens = -1;
  r->resync_pending = info->resync;
  st = detok_init(&r->detok, p->tok, r->params.skip_special_tokens);
  if (st != LLB_STATUS_OK) goto fail;
  st = llb_strmap_put(p->reqs, r->id, r);
  if (st != LLB_STATUS_OK) goto fail;
  ps->children[r->index] = r;
  *out = r;
  return LLB_STATUS_OK;
oom:
  st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "request state of %s", info->request_id);
fail:
  req_free(r);
  return st;
}

llb_status output_processor_register(struct output_processor *p, const struct output_processor_request_info *info) {
  if (info && info->request_id && (llb_strmap_get(p->reqs, info->request_id) ||
                                   llb_strmap_get(p->finished, info->request_id))) {
    return LLB_STATUS_OK; /* a replayed EngineCoreRequest */
  }
  struct req_state *r;
  return register_req(p, info, &r);
}

/* --- per-token state ---------------------------------------------------------------- */

/* Appends the tokens to the request's history and text; the last one's text is left out
 * when `skip_last_text` (vLLM: an EOS / stop token ends the text unless
 * include_stop_str_in_output). Moves stop_check_from past the first min_tokens tokens. */
static llb_status append_tokens(struct req_state *r, const int32_t *ids, int64_t k,
                                const struct output_processor_new_logprobs *lps, bool skip_last_text) {
  if (llb_array_reserve((void **)&r->token_ids, &r->cap_tokens, r->num_tokens + k, sizeof(int32_t)) != LLB_STATUS_OK) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token ids of %s", r->id);
  }
  bool want_lps = r->params.logprobs >= 0 && lps;
  if (want_lps && llb_array_reserve((void **)&r->lps, &r->cap_lps, r->num_lps + k, sizeof *r->lps) != LLB_STATUS_OK) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "logprobs of %s", r->id);
  }
  for (int64_t i = 0; i < k; i++) {
    if (!(skip_last_text && i == k - 1)) {
      llb_status st = detok_append_token(&r->detok, ids[i]);
      if (st != LLB_STATUS_OK) return st;
    }
    r->token_ids[r->num_tokens++] = ids[i];
    if (want_lps) {
      if (r->num_lps == 0) r->lp_first_pos = r->num_tokens - 1;
      struct output_processor_new_logprobs *e = &r->lps[r->num_lps++];
      *e = lps[i];
      if (e->num_top < 0) e->num_top = 0;
      if (e->num_top > LLB_MAX_LOGPROBS) e->num_top = LLB_MAX_LOGPROBS;
      if (e->num_top > r->params.logprobs) e->num_top = r->params.logprobs;
      r->cumulative_logprob += (double)e->logprob;
    }
    if (r->num_tokens <= r->params.min_tokens) r->stop_check_from = r->detok.len;
  }
  return LLB_STATUS_OK;
}

static void finish_req(struct output_processor *p, struct req_state *r, enum output_processor_finish_reason why,
                       int64_t t_ns) {
  if (r->finished) return;
  r->finished = true;
  r->finish_reason = why;
  r->finished_ns = t_ns;
  if (p->hooks.on_finished) {
    const struct output_processor_finished_stats fs = {
        .finish_reason = why, .arrival_ns = r->parent->arrival_ns, .queued_ns = r->queued_ns,
        .scheduled_ns = r->first_scheduled_ns, .first_token_ns = r->first_token_ns, .last_token_ns = r->last_token_ns,
        .finished_ns = p->now_ns ? p->now_ns : t_ns, .num_prompt_tokens = r->parent->num_prompt,
        .num_generation_tokens = r->num_tokens};
    p->hooks.on_finished(p->hooks_user, &fs);
  }
  detok_flush(&r->detok); /* on OOM the dangling bytes are dropped: the text stays valid */
  r->parent->num_finished++;
  llb_strmap_remove(p->reqs, r->id);
  llb_strmap_put(p->finished, r->id, r); /* the value is never dereferenced; OOM only forgets */
}

/* Text end that may be streamed now: everything once finished, else short of a suffix that
 * could still start a stop string, on a character boundary. */
static size_t emit_end(const struct req_state *r) {
  size_t len = r->detok.len;
  if (r->finished || r->params.num_stop <= 0) return len;
  size_t hold = stop_strings_holdback(r->detok.text, len, r->params.stop, r->params.num_stop);
  return detok_utf8_floor(r->detok.text, len - hold);
}

/* --- building outputs --------------------------------------------------------------- */

static void fill_token_logprob(const struct tokenizer *tok, int32_t id, float logprob, int32_t rank,
                               char *arena, size_t room, size_t *used,
                               struct output_processor_token_logprob *out) {
  out->token_id = id;
  out->logprob = logprob;
  out->rank = rank;
  char *bytes = arena + *used;
  size_t left = room - *used;
  int64_t n = tokenizer_token_to_piece(tok, id, true, bytes, left);
  if (n < 0 || (size_t)n * 4 + 1 > left) n = 0; /* piece_room reserved exactly this much */
  out->bytes = bytes;
  out->num_bytes = (uint32_t)n;
  *used += (size_t)n;
  char *text = arena + *used;
  out->text_len = (uint32_t)detok_utf8_sanitize(bytes, (size_t)n, text);
  out->text = text;
  *used += out->text_len + 1;
}

static size_t piece_room(const struct tokenizer *tok, int32_t id) {
  char probe[8];
  int64_t n = tokenizer_token_to_piece(tok, id, true, probe, sizeof probe);
  if (n < 0) n = 0;
  return (size_t)n * 4 + 1; /* raw bytes + sanitized (<= 3x) + NUL */
}

static llb_status build_logprobs(const struct tokenizer *tok, const struct req_state *r,
                                 int64_t from_pos, int64_t to_pos, struct output_processor_completion *c) {
  int64_t lo = from_pos > r->lp_first_pos ? from_pos : r->lp_first_pos;
  int64_t hi = r->lp_first_pos + r->num_lps < to_pos ? r->lp_first_pos + r->num_lps : to_pos;
  if (r->num_lps == 0 || hi <= lo) return LLB_STATUS_OK;
  size_t room = 0;
  for (int64_t pos = lo; pos < hi; pos++) {
    const struct output_processor_new_logprobs *e = &r->lps[pos - r->lp_first_pos];
    room += piece_room(tok, e->token_id);
    for (int32_t j = 0; j < e->num_top; j++) room += piece_room(tok, e->top[j].token_id);
  }
  c->logprobs = calloc((size_t)(hi - lo), sizeof *c->logprobs);
  c->logprob_arena = malloc(room);
  if (!c->logprobs || !c->logprob_arena) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "logprobs output");
  size_t used = 0;
  for (int64_t pos = lo; pos < hi; pos++) {
    const struct output_processor_new_logprobs *e = &r->lps[pos - r->lp_first_pos];
    struct output_processor_position_logprobs *o = &c->logprobs[pos - lo];
    int32_t rank = -1;
    for (int32_t j = 0; j < e->num_top; j++) {
      if (e->top[j].token_id == e->token_id) rank = j + 1;
    }
    fill_token_logprob(tok, e->token_id, e->logprob, rank, c->logprob_arena, room, &used, &o->sampled);
    o->num_top = e->num_top;
    for (int32_t j = 0; j < e->num_top; j++) {
      fill_token_logprob(tok, e->top[j].token_id, e->top[j].logprob, j + 1, c->logprob_arena, room,
                         &used, &o->top[j]);
    }
  }
  c->num_logprobs = hi - lo;
  return LLB_STATUS_OK;
}

/* The parent's prompt logprobs with their texts into o (once per request). */
static llb_status build_prompt_logprobs(const struct tokenizer *tok, struct parent_state *ps,
                                        struct output_processor_request_output *o) {
  if (ps->num_plp == 0 || ps->plp_sent) return LLB_STATUS_OK;
  size_t room = 0;
  for (int32_t i = 0; i < ps->num_plp; i++) {
    room += piece_room(tok, ps->plp[i].token_id);
    for (int32_t j = 0; j < ps->plp[i].num_top; j++) room += piece_room(tok, ps->plp[i].top[j].token_id);
  }
  o->prompt_logprobs = calloc((size_t)ps->num_plp, sizeof *o->prompt_logprobs);
  o->prompt_logprob_arena = malloc(room);
  if (!o->prompt_logprobs || !o->prompt_logprob_arena) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt logprobs");
  size_t used = 0;
  for (int32_t i = 0; i < ps->num_plp; i++) {
    const struct output_processor_new_logprobs *e = &ps->plp[i];
    struct output_processor_position_logprobs *pl = &o->prompt_logprobs[i];
    fill_token_logprob(tok, e->token_id, e->logprob, ps->plp_ranks[i], o->prompt_logprob_arena, room, &used,
                       &pl->sampled);
    pl->num_top = e->num_top;
    for (int32_t j = 0; j < e->num_top; j++)
      fill_token_logprob(tok, e->top[j].token_id, e->top[j].logprob, j + 1, o->prompt_logprob_arena, room, &used,
                         &pl->top[j]);
  }
  o->num_prompt_logprobs = ps->num_plp;
  ps->plp_sent = true;
  return LLB_STATUS_OK;
}

/* Keeps the engine's prompt logprobs for the parent (the first that come; n > 1 children each
 * score the same prompt). */
static llb_status keep_prompt_logprobs(struct parent_state *ps, const struct output_processor_engine_output *eo) {
  if (eo->num_prompt_logprobs <= 0 || !eo->prompt_logprobs || !eo->prompt_logprob_ranks || ps->num_plp > 0)
    return LLB_STATUS_OK;
  ps->plp = malloc((size_t)eo->num_prompt_logprobs * sizeof *ps->plp);
  ps->plp_ranks = malloc((size_t)eo->num_prompt_logprobs * sizeof *ps->plp_ranks);
  if (!ps->plp || !ps->plp_ranks) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt logprobs");
  memcpy(ps->plp, eo->prompt_logprobs, (size_t)eo->num_prompt_logprobs * sizeof *ps->plp);
  memcpy(ps->plp_ranks, eo->prompt_logprob_ranks, (size_t)eo->num_prompt_logprobs * sizeof *ps->plp_ranks);
  ps->num_plp = eo->num_prompt_logprobs;
  return LLB_STATUS_OK;
}

/* Fills `c` from `r`: everything so far, or (delta) what was not delivered yet. */
static llb_status build_completion(const struct tokenizer *tok, struct req_state *r, bool delta,
                                   struct output_processor_completion *c) {
  memset(c, 0, sizeof *c);
  c->index = r->index;
  size_t to = emit_end(r);
  size_t from = delta ? r->sent_text : 0;
  if (from > to) from = to;
  int64_t tfrom = delta ? r->sent_tokens : 0;
  int64_t tto = r->num_tokens;
  c->text = malloc(to - from + 1);
  c->token_ids = malloc((size_t)(tto - tfrom + 1) * sizeof(int32_t));
  if (!c->text || !c->token_ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "completion output");
  memcpy(c->text, r->detok.text + from, to - from);
  c->text[to - from] = '\0';
  c->text_len = to - from;
  if (tto > tfrom) memcpy(c->token_ids, r->token_ids + tfrom, (size_t)(tto - tfrom) * sizeof(int32_t));
  c->num_token_ids = tto - tfrom;
  c->has_logprobs = r->params.logprobs >= 0;
  c->cumulative_logprob = r->cumulative_logprob;
  if (c->has_logprobs) {
    llb_status st = build_logprobs(tok, r, tfrom, tto, c);
    if (st != LLB_STATUS_OK) return st;
  }
  c->finish_reason = r->finished ? r->finish_reason : OUTPUT_PROCESSOR_FINISH_REASON_NONE;
  c->stop_reason_kind = r->finished ? r->stop_kind : OUTPUT_PROCESSOR_STOP_REASON_KIND_NONE;
  if (c->stop_reason_kind == OUTPUT_PROCESSOR_STOP_REASON_KIND_STRING) {
    copy_str(c->stop_str, sizeof c->stop_str, r->params.stop[r->stop_str_index]);
  }
  c->stop_token_id = c->stop_reason_kind == OUTPUT_PROCESSOR_STOP_REASON_KIND_TOKEN ? r->stop_token_id : -1;
  c->resync = r->resync_pending;
  r->resync_pending = false;
  r->emitted_tokens = tto;
  if (delta) {
    r->sent_text = to;
    r->sent_tokens = tto;
  }
  r->has_output = true;
  return LLB_STATUS_OK;
}

static void parent_metrics(const struct parent_state *ps, struct output_processor_metrics *m) {
  memset(m, 0, sizeof *m);
  m->arrival_time_ns = ps->arrival_ns;
  m->num_prompt_tokens = ps->num_prompt;
  m->num_cached_tokens = -1;
  bool all_finished = ps->num_finished == ps->n;
  for (int32_t i = 0; i < ps->n; i++) {
    const struct req_state *r = ps->children[i];
    if (!r) continue;
#define EARLIEST(dst, v) if ((v) && (!(dst) || (v) < (dst))) (dst) = (v)
#define LATEST(dst, v) if ((v) > (dst)) (dst) = (v)
    EARLIEST(m->first_scheduled_time_ns, r->first_scheduled_ns);
    EARLIEST(m->first_token_time_ns, r->first_token_ns);
    LATEST(m->last_token_time_ns, r->last_token_ns);
    LATEST(m->finished_time_ns, r->finished_ns);
#undef EARLIEST
#undef LATEST
    if (r->num_cached_tokens > m->num_cached_tokens) m->num_cached_tokens = r->num_cached_tokens;
    m->num_generation_tokens += r->num_tokens;
  }
  if (!all_finished) m->finished_time_ns = 0;
}

/* --stream-interval (vLLM's): a streamed output waits until one of the children that moved has
 * `stream_interval` tokens not yet in a RequestOutput; a child's first output, a finished parent,
 * an error, an output the engine hands off after (P/D: what is held would be lost) and an output
 * OUTPUT_PROCESSOR_STREAM_HOLD_MAX_NS or more after the parent's last one go out at once (so a
 * healthy stream is heard from as often as at interval 1 when steps are slow: the api server
 * takes a stream silent past its grace for one whose output processor restarted). */
static bool held(const struct output_processor *p, const struct parent_state *ps, struct req_state *const *changed,
                 int32_t num_changed, bool finished, bool handing_off) {
  if (p->stream_interval <= 1 || finished || handing_off || ps->error[0]) return false;
  if (p->now_ns - ps->last_sent_ns >= OUTPUT_PROCESSOR_STREAM_HOLD_MAX_NS) return false;
  for (int32_t i = 0; i < num_changed; i++)
    if (!changed[i]->has_output || changed[i]->finished ||
        changed[i]->num_tokens - changed[i]->emitted_tokens >= p->stream_interval)
      return false;
  return true;
}

/* Appends the RequestOutput for `ps` after `changed[0, num_changed)` moved, per output kind
 * (vLLM ParentRequest.get_outputs; CUMULATIVE with n > 1 streams a snapshot of every child
 * with output so far, where vLLM waits for all). Frees the parent after its final output. */
static llb_status emit(struct output_processor *p, struct parent_state *ps, struct req_state **changed,
                       int32_t num_changed, struct output_processor_result *res) {
  bool finished = ps->num_finished == ps->n;
  struct req_state *pick[ps->n];
  int32_t num_pick = 0;
  bool delta = ps->kind == LLB_OUTPUT_KIND_DELTA;
  if (ps->kind == LLB_OUTPUT_KIND_FINAL_ONLY) {
    if (!finished) return LLB_STATUS_OK;
    for (int32_t i = 0; i < ps->n; i++) if (ps->children[i]) pick[num_pick++] = ps->children[i];
  } else if (held(p, ps, changed, num_changed, finished, p->handing_off)) {
    return LLB_STATUS_OK;
  } else if (delta) {
    for (int32_t i = 0; i < num_changed; i++) pick[num_pick++] = changed[i];
  } else {
    for (int32_t i = 0; i < ps->n; i++) {
      struct req_state *r = ps->children[i];
      bool moved = false;
      for (int32_t j = 0; j < num_changed; j++) moved |= changed[j] == r;
      if (r && (moved || r->has_output)) pick[num_pick++] = r;
    }
  }
  llb_status st = LLB_STATUS_OK;
  if (llb_array_reserve((void **)&res->outputs, &res->cap_outputs, res->num_outputs + 1, sizeof *res->outputs) != LLB_STATUS_OK) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "result outputs");
  }
  struct output_processor_request_output *o = &res->outputs[res->num_outputs];
  memset(o, 0, sizeof *o);
  res->num_outputs++; /* counted now so that output_processor_result_clear frees a partial one */
  copy_str(o->request_id, sizeof o->request_id, ps->external_id);
  copy_str(o->reply_to, sizeof o->reply_to, ps->reply_to);
  copy_str(o->error, sizeof o->error, ps->error);
  o->error_code = ps->error_code;
  if (!delta || !ps->sent_first) {
    int32_t *ids = malloc((size_t)(ps->num_prompt + 1) * sizeof(int32_t));
    if (!ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt ids output");
    if (ps->num_prompt > 0) memcpy(ids, ps->prompt_ids, (size_t)ps->num_prompt * sizeof(int32_t));
    o->prompt_token_ids = ids;
    o->num_prompt_tokens = ps->num_prompt;
  }
  ps->sent_first = true;
  ps->last_sent_ns = p->now_ns;
  if ((st = build_prompt_logprobs(p->tok, ps, o)) != LLB_STATUS_OK) return st;
  o->outputs = calloc((size_t)(num_pick > 0 ? num_pick : 1), sizeof *o->outputs);
  if (!o->outputs) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "completion outputs");
  for (int32_t i = 0; i < num_pick && st == LLB_STATUS_OK; i++) {
    st = build_completion(p->tok, pick[i], delta, &o->outputs[i]);
    o->num_outputs = i + 1;
  }
  o->finished = finished;
  parent_metrics(ps, &o->metrics);
  if (finished) {
    llb_strmap_remove(p->parents, ps->id);
    parent_free(ps);
  }
  return st;
}

/* --- processing --------------------------------------------------------------------- */

/* Finishes `r` with ERROR (engine abort too when the engine still runs it) and emits. */
static llb_status fail_req(struct output_processor *p, struct req_state *r, bool engine_running,
                           const char *message, int64_t t_ns, struct output_processor_result *res) {
  copy_str(r->parent->error, sizeof r->parent->error, message);
  if (engine_running) {
    llb_status st = push_id(&res->abort_ids, &res->num_abort, &res->cap_abort, r->id);
    if (st != LLB_STATUS_OK) return st;
  }
  finish_req(p, r, OUTPUT_PROCESSOR_FINISH_REASON_ERROR, t_ns);
  return emit(p, r->parent, &r, 1, res);
}

/* Searches the new text for stop strings; on a match cuts the text and finishes STOP. */
static bool check_stop_strings(struct output_processor *p, struct req_state *r, int64_t t_ns) {
  if (r->params.num_stop <= 0 || r->num_tokens <= r->params.min_tokens) return false;
  struct stop_match m;
  bool hit = stop_strings_find(r->detok.text, r->detok.len, r->stop_check_from, r->params.stop,
                               r->params.num_stop, &m);
  r->stop_check_from = r->detok.len;
  if (!hit) return false;
  detok_truncate(&r->detok, r->params.include_stop_str_in_output ? m.start + m.len : m.start);
  r->stop_kind = OUTPUT_PROCESSOR_STOP_REASON_KIND_STRING;
  r->stop_str_index = m.stop_index;
  finish_req(p, r, OUTPUT_PROCESSOR_FINISH_REASON_STOP, t_ns);
  return true;
}

/* A pooling request's vector (vLLM PoolingRequestOutput.outputs.data) on its final output. */
static llb_status attach_pooled(struct output_processor_request_output *o, const struct output_processor_engine_output *eo) {
  o->pooling_output = malloc((size_t)eo->num_pooling_output * sizeof(float));
  if (!o->pooling_output) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "pooling output");
  memcpy(o->pooling_output, eo->pooling_output, (size_t)eo->num_pooling_output * sizeof(float));
  o->num_pooling_output = eo->num_pooling_output;
  return LLB_STATUS_OK;
}

llb_status output_processor_process(struct output_processor *p, const struct output_processor_engine_output *eo,
                           int64_t now_ns, struct output_processor_result *res) {
  if (!eo || !eo->request_id || eo->num_new_tokens < 0 || eo->first_output_pos < 0 ||
      (eo->num_new_tokens > 0 && !eo->new_token_ids)) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine output without request id or tokens");
  }
  struct req_state *r = llb_strmap_get(p->reqs, eo->request_id);
  if (!r) {
    if (llb_strmap_get(p->finished, eo->request_id)) return LLB_STATUS_OK; /* late, already done */
    return push_id(&res->unknown_ids, &res->num_unknown, &res->cap_unknown, eo->request_id);
  }
  int64_t t_ns = eo->timestamp_ns ? eo->timestamp_ns : now_ns;
  p->now_ns = now_ns;
  p->handing_off = eo->handed_off;
  bool engine_finished = eo->finish_reason != OUTPUT_PROCESSOR_FINISH_REASON_NONE;
  if (eo->first_output_pos > r->num_tokens && !engine_finished) {
    /* Outputs were lost (a nats-server restart, a scheduler replay racing its predecessor):
     * the engine still runs it, so ask for its whole history instead of failing it. */
    return push_id(&res->resync_ids, &res->num_resync, &res->cap_resync, eo->request_id);
  }
  if (eo->first_output_pos > r->num_tokens) {
    char msg[OUTPUT_PROCESSOR_MAX_ERROR_BYTES];
    snprintf(msg, sizeof msg, "output tokens lost: expected position %lld, got %lld",
             (long long)r->num_tokens, (long long)eo->first_output_pos);
    fail_req(p, r, !engine_finished, msg, t_ns, res);
    return LLB_ERRF(LLB_STATUS_MALFORMED, "request %s: %s", eo->request_id, msg);
  }
  int64_t skip = r->num_tokens - eo->first_output_pos; /* duplicates of delivered positions */
  int64_t k = eo->num_new_tokens > skip ? eo->num_new_tokens - skip : 0;
  p->num_duplicates += (uint64_t)(eo->num_new_tokens - k);
  llb_status kst = keep_prompt_logprobs(r->parent, eo);
  if (kst != LLB_STATUS_OK) return kst;
  if (k == 0 && !engine_finished) return LLB_STATUS_OK;
  if (eo->scheduled_time_ns && !r->first_scheduled_ns) r->first_scheduled_ns = eo->scheduled_time_ns;
  if (eo->queued_time_ns && !r->queued_ns) r->queued_ns = eo->queued_time_ns;
  if (eo->num_cached_tokens >= 0) r->num_cached_tokens = eo->num_cached_tokens;
  if (k > 0) {
    if (p->hooks.on_tokens)
      p->hooks.on_tokens(p->hooks_user, k, r->last_accepted_ns, now_ns, r->parent->num_prompt, r->parent->arrival_ns);
    r->last_accepted_ns = now_ns;
    if (!r->first_token_ns) r->first_token_ns = t_ns;
    r->last_token_ns = t_ns;
  }
  bool stop_terminated = eo->finish_reason == OUTPUT_PROCESSOR_FINISH_REASON_STOP;
  const int32_t *ids = eo->new_token_ids + (k ? skip : 0);
  const struct output_processor_new_logprobs *lps = eo->new_logprobs ? eo->new_logprobs + (k ? skip : 0) : NULL;
  const bool skip_last = stop_terminated && k > 0 && !r->params.include_stop_str_in_output;
  llb_status st = LLB_STATUS_OK;
  bool stopped = false; /* a stop string before the last of several new tokens */
  if (r->params.num_stop > 0 && k > 1) {
    /* several tokens in one output (speculative decoding): stop strings are checked after each,
     * as vLLM's detokenizer does, so the tokens after a match are dropped */
    for (int64_t t = 0; t < k && st == LLB_STATUS_OK && !stopped; t++) {
      st = append_tokens(r, ids + t, 1, lps ? lps + t : NULL, skip_last && t == k - 1);
      if (st == LLB_STATUS_OK && t < k - 1) stopped = check_stop_strings(p, r, t_ns);
    }
  } else {
    st = append_tokens(r, ids, k, lps, skip_last);
  }
  if (st != LLB_STATUS_OK) {
    char msg[OUTPUT_PROCESSOR_MAX_ERROR_BYTES];
    snprintf(msg, sizeof msg, "detokenization failed: %s", llb_err_last());
    fail_req(p, r, !engine_finished, msg, t_ns, res);
    return st;
  }
  if (engine_finished && !stopped) detok_flush(&r->detok);
  if (stopped || check_stop_strings(p, r, t_ns)) {
    if (!engine_finished) {
      st = push_id(&res->abort_ids, &res->num_abort, &res->cap_abort, r->id);
      if (st != LLB_STATUS_OK) return st;
    }
  } else if (engine_finished) {
    if (stop_terminated && eo->stop_token_id >= 0) {
      r->stop_kind = OUTPUT_PROCESSOR_STOP_REASON_KIND_TOKEN;
      r->stop_token_id = eo->stop_token_id;
    }
    finish_req(p, r, eo->finish_reason, t_ns);
  }
  const int64_t before = res->num_outputs;
  st = emit(p, r->parent, &r, 1, res);
  if (st == LLB_STATUS_OK && engine_finished && eo->num_pooling_output > 0 && eo->pooling_output &&
      res->num_outputs > before && res->outputs[res->num_outputs - 1].finished)
    st = attach_pooled(&res->outputs[res->num_outputs - 1], eo);
  return st;
}

llb_status output_processor_register_resume(struct output_processor *p, const struct output_processor_request_info *info,
                                   const int32_t *history, int64_t num_history) {
  if (info && info->request_id && llb_strmap_get(p->reqs, info->request_id)) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request %s is already registered", info->request_id);
  }
  if (num_history < 0 || (num_history > 0 && !history)) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "bad token history");
  }
  struct req_state *r;
  llb_status st = register_req(p, info, &r);
  if (st != LLB_STATUS_OK) return st;
  st = append_tokens(r, history, num_history, NULL, false);
  if (st != LLB_STATUS_OK) {
    struct parent_state *ps = r->parent;
    ps->children[r->index] = NULL;
    llb_strmap_remove(p->reqs, r->id);
    req_free(r);
    return st;
  }
  /* As if the old processor had sent an output after the last history token. */
  r->stop_check_from = r->detok.len;
  r->sent_text = emit_end(r);
  r->sent_tokens = r->num_tokens;
  r->has_output = num_history > 0;
  r->parent->sent_first = r->parent->sent_first || num_history > 0;
  return LLB_STATUS_OK;
}

/* Removes r without an output: it finished or left elsewhere; frees its parent once every
 * child did (no final output: another processor sends it, or already did). */
static void drop_silently(struct output_processor *p, struct req_state *r) {
  struct parent_state *ps = r->parent;
  if (!r->finished) {
    r->finished = true;
    ps->num_finished++;
    llb_strmap_remove(p->reqs, r->id);
    llb_strmap_put(p->finished, r->id, r); /* never dereferenced; OOM only forgets */
  }
  if (ps->num_finished == ps->n) {
    llb_strmap_remove(p->parents, ps->id);
    parent_free(ps);
  }
}

llb_status output_processor_hand_off(struct output_processor *p, const char *request_id) {
  struct req_state *r = request_id ? llb_strmap_get(p->reqs, request_id) : NULL;
  if (!r) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no unfinished request %s", request_id ? request_id : "");
  drop_silently(p, r);
  return LLB_STATUS_OK;
}

llb_status output_processor_register_handed_off(struct output_processor *p,
                                                const struct output_processor_request_info *info,
                                                const int32_t *history, int64_t num_history,
                                                struct output_processor_result *res) {
  if (info && info->request_id && (llb_strmap_get(p->reqs, info->request_id) ||
                                   llb_strmap_get(p->finished, info->request_id)))
    return LLB_STATUS_OK;
  llb_status st = output_processor_register_resume(p, info, history, num_history);
  if (st != LLB_STATUS_OK) return st;
  struct req_state *r = llb_strmap_get(p->reqs, info->request_id);
  if (!r || r->params.num_stop <= 0) return LLB_STATUS_OK;
  r->stop_check_from = 0; /* the prefill side searched this text too, with the same rule */
  struct stop_match m;
  if (r->num_tokens <= r->params.min_tokens ||
      !stop_strings_find(r->detok.text, r->detok.len, 0, r->params.stop, r->params.num_stop, &m)) {
    r->stop_check_from = r->detok.len;
    return LLB_STATUS_OK;
  }
  st = push_id(&res->abort_ids, &res->num_abort, &res->cap_abort, r->id);
  drop_silently(p, r);
  return st;
}

static llb_status finish_by_id(struct output_processor *p, const char *request_id,
                               enum output_processor_finish_reason why, llb_status code, const char *message,
                               int64_t now_ns, struct output_processor_result *res) {
  p->now_ns = now_ns;
  p->handing_off = false;
  struct req_state *r = llb_strmap_get(p->reqs, request_id);
  struct parent_state *ps = r ? r->parent : llb_strmap_get(p->parents, request_id);
  if (!ps) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no unfinished request %s", request_id);
  if (message) {
    copy_str(ps->error, sizeof ps->error, message);
    ps->error_code = code;
  }
  struct req_state *changed[ps->n];
  int32_t num_changed = 0;
  for (int32_t i = 0; i < ps->n; i++) {
    struct req_state *c = ps->children[i];
    if (!c || c->finished || (r && c != r)) continue;
    finish_req(p, c, why, now_ns);
    changed[num_changed++] = c;
  }
  if (num_changed == 0) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "no unfinished request %s", request_id);
  /* Children never registered cannot finish: count them so the parent completes. */
  if (!r) {
    for (int32_t i = 0; i < ps->n; i++) if (!ps->children[i]) ps->num_finished++;
  }
  return emit(p, ps, changed, num_changed, res);
}

llb_status output_processor_abort(struct output_processor *p, const char *request_id, int64_t now_ns,
                         struct output_processor_result *res) {
  return finish_by_id(p, request_id, OUTPUT_PROCESSOR_FINISH_REASON_ABORT, LLB_STATUS_OK, NULL, now_ns, res);
}

llb_status output_processor_fail(struct output_processor *p, const char *request_id, llb_status code, const char *message,
                        int64_t now_ns, struct output_processor_result *res) {
  return finish_by_id(p, request_id, OUTPUT_PROCESSOR_FINISH_REASON_ERROR, code, message ? message : "failed",
                      now_ns, res);
}

uint64_t output_processor_num_duplicates(const struct output_processor *p) { return p ? p->num_duplicates : 0; }

llb_status output_processor_history(const struct output_processor *p, const char *request_id, const int32_t **ids, int64_t *n) {
  const struct req_state *r = p && request_id ? llb_strmap_get(p->reqs, request_id) : NULL;
  if (!r || r->finished) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "request %s: not running here", request_id ? request_id : "");
  *ids = r->token_ids;
  *n = r->num_tokens;
  return LLB_STATUS_OK;
}
