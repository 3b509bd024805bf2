/* A few sequences through llama_forward (session.h). */
#include "model/forward/session.h"

#include <stdlib.h>

#include "model/gguf/config.h"

#define SESSION_BLOCK_SIZE 16

struct llama_session {
  struct llama_forward_ctx *fwd;
  struct llama_kv_cache *kv;
  int32_t max_context, max_seqs, max_logits, step_tokens, vocab, blocks_per_seq;
  int64_t seq_stride;   /* slots of one sequence: blocks_per_seq * SESSION_BLOCK_SIZE */
  int32_t *lengths;     /* [max_seqs] tokens each sequence holds */
  const struct llama_lora **loras; /* [max_seqs] each sequence's adapter, NULL = the base model */
  int32_t *positions;   /* [max_context] p = p */
  int32_t *block_table; /* [max_seqs, blocks_per_seq] identity */
  int64_t *seq_slots;   /* [max_seqs, seq_stride] identity: sequence q's position p at q * seq_stride + p */
  /* a batch decode's rows, [max_logits] each (qsl: + 1) */
  int32_t *pos, *qsl, *lens, *logits_idx;
  int64_t *slots;
  float *logits; /* [max_logits, vocab] */
};

static llb_status alloc_buffers(struct llama_session *s) {
  const size_t L = (size_t)s->max_logits;
  s->lengths = calloc((size_t)s->max_seqs, sizeof *s->lengths);
  s->loras = calloc((size_t)s->max_seqs, sizeof *s->loras);
  s->positions = malloc((size_t)s->max_context * sizeof *s->positions);
  s->block_table = malloc((size_t)s->max_seqs * (size_t)s->blocks_per_seq * sizeof *s->block_table);
  s->seq_slots = malloc((size_t)s->max_seqs * (size_t)s->seq_stride * sizeof *s->seq_slots);
  s->pos = malloc(L * sizeof *s->pos);
  s->qsl = malloc((L + 1) * sizeof *s->qsl);
  s->lens = malloc(L * sizeof *s->lens);
  s->logits_idx = malloc(L * sizeof *s->logits_idx);
  s->slots = malloc(L * sizeof *s->slots);
  s->logits = malloc(L * (size_t)s->vocab * sizeof *s->logits);
  if (!s->lengths || !s->loras || !s->positions || !s->block_table || !s->seq_slots || !s->pos || !s->qsl || !s->lens ||
      !s->logits_idx || !s->slots || !s->logits)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "session buffers for %d tokens, %d logits rows", s->max_context,
                    s->max_logits);
  for (int32_t i = 0; i < s->max_context; i++) s->positions[i] = i;
  for (int64_t b = 0; b < (int64_t)s->max_seqs * s->blocks_per_seq; b++) s->block_table[b] = (int32_t)b;
  for (int64_t i = 0; i < (int64_t)s->max_seqs * s->seq_stride; i++) s->seq_slots[i] = i;
  return LLB_STATUS_OK;
}

llb_status llama_session_create(const struct llama_model *m, const struct llama_session_options *o,
                                struct llama_session **out) {
  *out = NULL;
  if (o->max_context < 1 || o->max_seqs < 0 || o->max_logits < 0 || o->forward.max_num_tokens < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "session: max_context %d, max_seqs %d, max_logits %d, "
                    "max_num_tokens %d", o->max_context, o->max_seqs, o->max_logits, o->forward.max_num_tokens);
  const int32_t seqs = o->max_seqs > 0 ? o->max_seqs : 1;
  const int32_t blocks_per_seq = (o->max_context + SESSION_BLOCK_SIZE - 1) / SESSION_BLOCK_SIZE;
  if ((int64_t)seqs * blocks_per_seq > INT32_MAX)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "session: %d sequences of %d tokens", seqs, o->max_context);
  struct llama_session *s = calloc(1, sizeof *s);
  if (!s) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "session");
  *s = (struct llama_session){.max_context = o->max_context, .max_seqs = seqs,
                              .max_logits = o->max_logits > 0 ? o->max_logits : 1,
                              .step_tokens = o->forward.max_num_tokens,
                              .vocab = llama_model_config(m)->vocab_size, .blocks_per_seq = blocks_per_seq,
                              .seq_stride = (int64_t)blocks_per_seq * SESSION_BLOCK_SIZE};
  llb_status st = llama_forward_ctx_create_opts(m, &o->forward, &s->fwd);
  if (!st)
    st = llama_kv_cache_create_dtype_for(s->fwd, seqs * blocks_per_seq, SESSION_BLOCK_SIZE, o->kv_dtype, &s->kv);
  if (!st) st = alloc_buffers(s);
  if (st) {
    llama_session_destroy(s);
    return st;
  }
  *out = s;
  return LLB_STATUS_OK;
}

void llama_session_destroy(struct llama_session *s) {
  if (!s) return;
  free(s->lengths), free(s->loras), free(s->positions), free(s->block_table), free(s->seq_slots);
  free(s->pos), free(s->qsl), free(s->lens), free(s->logits_idx), free(s->slots), free(s->logits);
  llama_kv_cache_destroy(s->kv);
  llama_forward_ctx_destroy(s->fwd);
  free(s);
}

const struct llama_forward_ctx *llama_session_forward(const struct llama_session *s) { return s->fwd; }

int32_t llama_session_length(const struct llama_session *s, int32_t seq) {
  return seq >= 0 && seq < s->max_seqs ? s->lengths[seq] : 0;
}

int32_t llama_session_vocab_size(const struct llama_session *s) { return s->vocab; }

static llb_status seq_check(const struct llama_session *s, int32_t seq) {
  if (seq < 0 || seq >= s->max_seqs)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sequence %d of %d", seq, s->max_seqs);
  return LLB_STATUS_OK;
}

llb_status llama_session_set_lora(struct llama_session *s, int32_t seq, const struct llama_lora *a) {
  if (seq_check(s, seq)) return LLB_STATUS_INVALID_ARGUMENT;
  s->loras[seq] = a;
  return LLB_STATUS_OK;
}

llb_status llama_session_truncate(struct llama_session *s, int32_t seq, int32_t n) {
  if (seq_check(s, seq)) return LLB_STATUS_INVALID_ARGUMENT;
  if (n < 0 || n > s->lengths[seq])
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "truncate to %d: sequence %d holds %d tokens", n, seq,
                    s->lengths[seq]);
  s->lengths[seq] = n;
  return LLB_STATUS_OK;
}

/* Logits rows of the step over feed indices [start, start + m) for the range [lf, le). */
static int32_t step_logits(int32_t start, int32_t m, int32_t lf, int32_t le) {
  const int32_t a = lf > start ? lf : start, b = le < start + m ? le : start + m;
  return b > a ? b - a : 0;
}

static llb_status feed_check(const struct llama_session *s, int32_t seq, int32_t n, int32_t lf, int32_t le) {
  if (seq_check(s, seq)) return LLB_STATUS_INVALID_ARGUMENT;
  if (n < 1 || n > s->max_context - s->lengths[seq])
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%d tokens after %d: a sequence holds %d", n, s->lengths[seq],
                    s->max_context);
  if (lf < 0 || lf > le || le > n)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "logits rows [%d, %d) of %d tokens", lf, le, n);
  const int32_t T = s->step_tokens;
  for (int32_t start = 0; start < n; start += T)
    if (step_logits(start, n - start < T ? n - start : T, lf, le) > s->max_logits)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "more than max_logits (%d) logits rows in a step", s->max_logits);
  return LLB_STATUS_OK;
}

llb_status llama_session_feed(struct llama_session *s, int32_t seq, const int32_t *tokens, int32_t n,
                              int32_t logits_first, int32_t logits_end, llama_session_logits_fn fn, void *user) {
  llb_status st = feed_check(s, seq, n, logits_first, logits_end);
  if (st) return st;
  const int32_t T = s->step_tokens;
  const int32_t *table = s->block_table + (int64_t)seq * s->blocks_per_seq;
  for (int32_t start = 0; start < n; start += T) {
    const int32_t m = n - start < T ? n - start : T, p = s->lengths[seq];
    const int32_t nl = step_logits(start, m, logits_first, logits_end);
    const int32_t first = logits_first > start ? logits_first : start;
    for (int32_t l = 0; l < nl; l++) s->logits_idx[l] = first - start + l;
    const int32_t qsl[2] = {0, m}, seq_len = p + m;
    const struct llama_batch b = {.num_tokens = m, .token_ids = tokens + start, .positions = s->positions + p,
                                  .slot_mapping = s->seq_slots + seq * s->seq_stride + p, .num_seqs = 1,
                                  .query_start_loc = qsl, .seq_lens = &seq_len, .block_tables = table,
                                  .max_blocks_per_seq = s->blocks_per_seq, .num_logits = nl,
                                  .logits_indices = s->logits_idx, .seq_loras = s->loras + seq};
    if ((st = llama_forward(s->fwd, s->kv, &b, s->logits))) return st;
    s->lengths[seq] = seq_len;
    if (nl > 0 && fn && (st = fn(user, first, nl, s->logits))) return st;
  }
  return LLB_STATUS_OK;
}

llb_status llama_session_eval(struct llama_session *s, int32_t seq, const int32_t *tokens, int32_t n, float **logits) {
  llb_status st = llama_session_feed(s, seq, tokens, n, n - 1, n, NULL, NULL);
  *logits = st ? NULL : s->logits;
  return st;
}

llb_status llama_session_decode_batch(struct llama_session *s, int32_t first_seq, int32_t n_seqs,
                                      const int32_t *tokens, float **logits) {
  *logits = NULL;
  if (first_seq < 0 || n_seqs < 1 || n_seqs > s->max_seqs - first_seq || n_seqs > s->max_logits ||
      n_seqs > s->step_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sequences [%d, %d) of %d, at most %d logits rows and %d a step",
                    first_seq, first_seq + n_seqs, s->max_seqs, s->max_logits, s->step_tokens);
  s->qsl[0] = 0;
  for (int32_t i = 0; i < n_seqs; i++) {
    const int32_t q = first_seq + i, p = s->lengths[q];
    if (p >= s->max_context)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "sequence %d holds %d tokens already", q, p);
    s->pos[i] = p;
    s->slots[i] = q * s->seq_stride + p;
    s->qsl[i + 1] = i + 1;
    s->lens[i] = p + 1;
    s->logits_idx[i] = i;
  }
  const struct llama_batch b = {.num_tokens = n_seqs, .token_ids = tokens, .positions = s->pos,
                                .slot_mapping = s->slots, .num_seqs = n_seqs, .query_start_loc = s->qsl,
                                .seq_lens = s->lens,
                                .block_tables = s->block_table + (int64_t)first_seq * s->blocks_per_seq,
                                .max_blocks_per_seq = s->blocks_per_seq, .num_logits = n_seqs,
                                .logits_indices = s->logits_idx, .seq_loras = s->loras + first_seq};
  llb_status st = llama_forward(s->fwd, s->kv, &b, s->logits);
  if (st) return st;
  for (int32_t i = 0; i < n_seqs; i++) s->lengths[first_seq + i]++;
  *logits = s->logits;
  return LLB_STATUS_OK;
}
