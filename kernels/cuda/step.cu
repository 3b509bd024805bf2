/* Steps of the CUDA backend (the step hooks of backend_ops): the batch metadata staged in
 * pinned memory and copied up in one cudaMemcpyAsync; a decode step (every sequence one query
 * row, logits for every row in order) padded to a batch-size bucket, captured as a CUDA graph
 * on first use (the metadata copy from the pinned staging is the graph's first node) and
 * replayed afterwards; the logits copied down when the step ends. */
#include "kernels/cuda/backend_cuda.cuh"

#include <string.h>

static const int32_t graph_buckets[CUDA_GRAPH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

struct cuda_step_layout cuda_step_layout_for(const struct backend_ctx_params *p) {
  struct cuda_step_layout l;
  size_t o = 0;
  const size_t T = (size_t)p->max_num_tokens, S = (size_t)p->max_num_seqs;
  l.ids = o, o = align_up(o + T * 4);
  l.pos = o, o = align_up(o + T * 4);
  l.slots = o, o = align_up(o + T * 8);
  l.qsl = o, o = align_up(o + (S + 1) * 4);
  l.seq_lens = o, o = align_up(o + S * 4);
  l.row_seq = o, o = align_up(o + T * 4);
  l.tables = o, o = align_up(o + S * (size_t)p->max_blocks_per_seq * 4);
  l.logits_idx = o, o = align_up(o + (size_t)p->max_num_logits * 4);
  l.total = o;
  return l;
}

/* Decode step that a graph may replay: one row per sequence, logits row i = row i, nothing
 * uploaded during the step. */
static bool is_plain_decode(const struct backend_step *s) {
  if (!s->replayable || s->num_tokens != s->num_seqs || s->num_logits != s->num_tokens) return false;
  for (int32_t i = 0; i < s->num_seqs; i++)
    if (s->query_start_loc[i] != i || s->logits_indices[i] != i) return false;
  return true;
}

/* Writes in's arrays into the pinned staging, block tables at the context's width, plus the
 * row -> sequence map attention reads; padded to n_rows rows and sequences when n_rows >
 * in->num_tokens (a decode bucket: pad row i is sequence i, one token at block 0, no KV
 * write, its own logits row). */
static void stage(struct backend_ctx *c, const struct backend_step *in, int32_t n_rows) {
  const struct cuda_step_layout *l = &c->ml;
  uint8_t *h = c->meta_h;
  int32_t *ids = (int32_t *)(h + l->ids), *pos = (int32_t *)(h + l->pos);
  int64_t *slots = (int64_t *)(h + l->slots);
  int32_t *qsl = (int32_t *)(h + l->qsl), *lens = (int32_t *)(h + l->seq_lens);
  int32_t *row_seq = (int32_t *)(h + l->row_seq), *tables = (int32_t *)(h + l->tables);
  int32_t *lidx = (int32_t *)(h + l->logits_idx);
  const int32_t MB = c->p.max_blocks_per_seq;
  memcpy(ids, in->token_ids, (size_t)in->num_tokens * 4);
  memcpy(pos, in->positions, (size_t)in->num_tokens * 4);
  memcpy(slots, in->slot_mapping, (size_t)in->num_tokens * 8);
  memcpy(qsl, in->query_start_loc, (size_t)(in->num_seqs + 1) * 4);
  memcpy(lens, in->seq_lens, (size_t)in->num_seqs * 4);
  for (int32_t s = 0; s < in->num_seqs; s++) {
    memcpy(tables + (size_t)s * MB, in->block_tables + (size_t)s * in->max_blocks_per_seq,
           (size_t)in->max_blocks_per_seq * 4);
    for (int32_t r = in->query_start_loc[s]; r < in->query_start_loc[s + 1]; r++) row_seq[r] = s;
  }
  if (in->num_logits > 0) memcpy(lidx, in->logits_indices, (size_t)in->num_logits * 4);
  for (int32_t i = in->num_tokens; i < n_rows; i++) {
    ids[i] = 0, pos[i] = 0, slots[i] = -1, lens[i] = 1, row_seq[i] = i, qsl[i + 1] = i + 1, lidx[i] = i;
    memset(tables + (size_t)i * MB, 0, (size_t)MB * 4);
  }
}

/* The bucket of a decode step of n sequences, or -1 (no bucket holds it within the context). */
static int bucket_for(const struct backend_ctx *c, int32_t n) {
  for (int i = 0; i < CUDA_GRAPH_BUCKETS; i++)
    if (graph_buckets[i] >= n && graph_buckets[i] <= c->p.max_num_seqs && graph_buckets[i] <= c->p.max_num_logits)
      return i;
  return -1;
}

llb_status cuda_backend_step_begin(struct backend_ctx *c, const struct backend_step *in, struct backend_step *run,
                                   bool *replayed) {
  *replayed = false;
  const struct backend_ctx_params *p = &c->p;
  if (c->in_step) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda step_begin: the previous step did not end");
  if (in->num_tokens < 1 || in->num_tokens > p->max_num_tokens)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_tokens %d (max %d)", in->num_tokens, p->max_num_tokens);
  if (in->num_seqs < 1 || in->num_seqs > in->num_tokens || in->num_seqs > p->max_num_seqs)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_seqs %d (max %d)", in->num_seqs, p->max_num_seqs);
  if (in->num_logits < 0 || in->num_logits > p->max_num_logits)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "num_logits %d (max %d)", in->num_logits, p->max_num_logits);
  if (in->max_blocks_per_seq < 1 || in->max_blocks_per_seq > p->max_blocks_per_seq)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "max_blocks_per_seq %d (ctx %d)", in->max_blocks_per_seq,
                    p->max_blocks_per_seq);
  const int bucket = is_plain_decode(in) ? bucket_for(c, in->num_seqs) : -1;
  const int32_t n = bucket >= 0 ? graph_buckets[bucket] : in->num_tokens;
  stage(c, in, n);
  int32_t max_len = 1;
  for (int32_t s = 0; s < in->num_seqs; s++) max_len = in->seq_lens[s] > max_len ? in->seq_lens[s] : max_len;
  /* a graph serves every context length: its attention grid covers the longest allowed one
   * (blocks past a row's context return at once) */
  c->step_max_seq_len = bucket >= 0 ? p->max_context_len : max_len;
  const uint8_t *d = c->meta_d;
  const struct cuda_step_layout *l = &c->ml;
  *run = (struct backend_step){
      .num_tokens = n, .num_seqs = bucket >= 0 ? n : in->num_seqs, .num_logits = bucket >= 0 ? n : in->num_logits,
      .max_blocks_per_seq = p->max_blocks_per_seq, .token_ids = (const int32_t *)(d + l->ids),
      .positions = (const int32_t *)(d + l->pos), .slot_mapping = (const int64_t *)(d + l->slots),
      .query_start_loc = (const int32_t *)(d + l->qsl), .seq_lens = (const int32_t *)(d + l->seq_lens),
      .block_tables = (const int32_t *)(d + l->tables), .logits_indices = (const int32_t *)(d + l->logits_idx),
      .replayable = in->replayable};
  cudaStream_t s = c->cc->stream;
  if (bucket >= 0 && c->graphs[bucket]) { /* the graph copies the staging up itself */
    CUDA_TRY(cudaGraphLaunch(c->graphs[bucket], s));
    c->in_step = true;
    *replayed = true;
    return LLB_STATUS_OK;
  }
  if (bucket >= 0) {
    CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    c->capturing = bucket;
  }
  const cudaError_t e = cudaMemcpyAsync(c->meta_d, c->meta_h, l->total, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) {
    if (c->capturing >= 0) {
      cudaGraph_t g = NULL;
      if (cudaStreamEndCapture(s, &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
      c->capturing = -1;
    }
    return cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaMemcpyAsync(step metadata)");
  }
  c->in_step = true;
  return LLB_STATUS_OK;
}

/* Ends the capture of bucket c->capturing: discarded when st failed, else instantiated and
 * launched (the capture ran nothing). */
static llb_status end_capture(struct backend_ctx *c, llb_status st) {
  const int b = c->capturing;
  c->capturing = -1;
  cudaGraph_t g = NULL;
  const cudaError_t e = cudaStreamEndCapture(c->cc->stream, &g);
  if (st != LLB_STATUS_OK || e != cudaSuccess) {
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    return st != LLB_STATUS_OK ? st : cuda_status_from(e, __FILE__, __func__, __LINE__, "cudaStreamEndCapture");
  }
  const cudaError_t ei = cudaGraphInstantiate(&c->graphs[b], g, 0);
  (void)cudaGraphDestroy(g);
  if (ei != cudaSuccess) {
    c->graphs[b] = NULL;
    return cuda_status_from(ei, __FILE__, __func__, __LINE__, "cudaGraphInstantiate");
  }
  c->num_graphs++;
  CUDA_TRY(cudaGraphLaunch(c->graphs[b], c->cc->stream));
  return LLB_STATUS_OK;
}

llb_status cuda_backend_step_end(struct backend_ctx *c, llb_status st, void *out_dst, const void *out_src,
                                 size_t out_bytes) {
  if (!c->in_step)
    return st != LLB_STATUS_OK ? st : LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "cuda step_end without step_begin");
  c->in_step = false;
  if (c->capturing >= 0) st = end_capture(c, st);
  if (st != LLB_STATUS_OK) { /* let what was queued finish before the caller reuses buffers */
    (void)cudaStreamSynchronize(c->cc->stream);
    return st;
  }
  if (out_bytes > 0)
    CUDA_TRY(cudaMemcpyAsync(out_dst, out_src, out_bytes, cudaMemcpyDeviceToHost, c->cc->stream));
  return cuda_ctx_sync(c->cc);
}

int32_t backend_cuda_num_graphs(const struct backend_ctx *c) { return c ? c->num_graphs : 0; }
