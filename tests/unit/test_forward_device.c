/* model/forward/forward.c's device path (a backend whose memory is not the host's: weights, norms
 * and batch arrays uploaded, steps begun and ended, decode steps padded to a bucket) over a
 * device backend emulated here in host memory on top of the CPU ops: the path the CUDA
 * backend takes, checked on machines without a GPU.
 *
 * The emulated device copies every weight's GGUF bytes at weight_upload (its matmul and embed
 * read only those copies), stages each step's arrays in its own buffers (its ops get only
 * those), pads plain decode steps to the next power of two as CUDA's graph buckets do, and
 * counts steps. The model file the device context was made from is overwritten with NaNs once
 * the context exists, so any read of it by the forward would show in the logits. Referee: the
 * CPU forward on an untouched copy in GGML mode (the same dots on the GGUF layout), so
 * logits must be bit-identical. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/quant.h"
#include "model/forward/forward.h"
#include "model/forward/lora.h"
#include "model/gguf/gguf.h"
#include "tests/unit/gguf_writer.h"
#include "tests/unit/lora_models.h"

enum { L = 2, E = 32, H = 4, HKV = 2, D = 8, F = 64, V = 61, CTX = 64, BS = 4, NB = 40, MB = 16, T = 24, S = 8 };

/* ---- the emulated device ---- */

struct dev_ctx {
  struct backend_ctx *cpu;
  struct backend_ctx_params p;
  int32_t *ids, *pos, *qsl, *lens, *tables, *lidx; /* staged step arrays */
  int64_t *slots;
  bool in_step;
  int steps, padded_steps;
};
static const struct backend_ops *cpu;
#define DEV(c) ((struct dev_ctx *)(void *)(c))

static void dev_ctx_destroy(struct backend_ctx *c) {
  struct dev_ctx *d = DEV(c);
  if (!d) return;
  cpu->ctx_destroy(d->cpu);
  free(d->ids), free(d->pos), free(d->qsl), free(d->lens), free(d->tables), free(d->lidx), free(d->slots);
  free(d);
}

static llb_status dev_ctx_create(const struct backend_ctx_params *p, struct backend_ctx **out) {
  struct dev_ctx *d = calloc(1, sizeof(*d));
  d->p = *p;
  const size_t t = (size_t)p->max_num_tokens, s = (size_t)p->max_num_seqs;
  d->ids = malloc(t * 4), d->pos = malloc(t * 4), d->slots = malloc(t * 8), d->qsl = malloc((s + 1) * 4);
  d->lens = malloc(s * 4), d->tables = malloc(s * (size_t)p->max_blocks_per_seq * 4);
  d->lidx = malloc((size_t)p->max_num_logits * 4);
  llb_status st = cpu->ctx_create(p, &d->cpu);
  if (st) dev_ctx_destroy((struct backend_ctx *)(void *)d);
  *out = st ? NULL : (struct backend_ctx *)(void *)d;
  return st;
}

/* The device copy of w as a weight the CPU ops read in the GGUF layout. */
static struct backend_weight on_device(const struct backend_weight *w) {
  assert_non_null(w->packed);
  struct backend_weight d = *w;
  d.data = w->packed;
  d.packed = NULL;
  return d;
}

static llb_status dev_embed(struct backend_ctx *c, const struct backend_weight *t, const int32_t *ids, int32_t n,
                            float *out) {
  const struct backend_weight d = on_device(t);
  return cpu->embed(DEV(c)->cpu, &d, ids, n, out);
}
static llb_status dev_rms_norm(struct backend_ctx *c, const float *x, const float *w, int32_t n, int32_t dim,
                               float eps, float *out) {
  return cpu->rms_norm(DEV(c)->cpu, x, w, n, dim, eps, out);
}
static llb_status dev_matmul(struct backend_ctx *c, const float *x, int32_t n, const struct backend_weight *const *w,
                             float *const *out, int32_t n_w) {
  struct backend_weight d[8];
  const struct backend_weight *pd[8];
  assert_true(n_w <= 8);
  for (int32_t j = 0; j < n_w; j++) d[j] = on_device(w[j]), pd[j] = &d[j];
  return cpu->matmul(DEV(c)->cpu, x, n, pd, out, n_w);
}
static llb_status dev_rope(struct backend_ctx *c, float *x, const int32_t *pos, int32_t n, int32_t nh, int32_t hd,
                           const struct backend_rope_params *p) {
  assert_ptr_equal(pos, DEV(c)->pos); /* the staged copy, never the caller's array */
  return cpu->rope(DEV(c)->cpu, x, pos, n, nh, hd, p);
}
static llb_status dev_kv_write(struct backend_ctx *c, const struct backend_kv_layer *kv, const float *k,
                               const float *v, const int64_t *slots, int32_t n) {
  assert_ptr_equal(slots, DEV(c)->slots);
  return cpu->kv_write(DEV(c)->cpu, kv, k, v, slots, n);
}
static llb_status dev_attention(struct backend_ctx *c, const struct backend_attn_params *p) {
  assert_ptr_equal(p->block_tables, DEV(c)->tables);
  return cpu->attention(DEV(c)->cpu, p);
}
static llb_status dev_swiglu(struct backend_ctx *c, const float *g, const float *u, int64_t n, float *out) {
  return cpu->swiglu(DEV(c)->cpu, g, u, n, out);
}
static llb_status dev_add(struct backend_ctx *c, float *x, const float *y, int64_t n) {
  return cpu->add(DEV(c)->cpu, x, y, n);
}
static llb_status dev_upload(struct backend_ctx *c, void *dst, const void *src, size_t n) {
  (void)c;
  memcpy(dst, src, n);
  return LLB_STATUS_OK;
}
static llb_status dev_clear(struct backend_ctx *c, void *dst, size_t n) {
  (void)c;
  memset(dst, 0, n);
  return LLB_STATUS_OK;
}
static size_t dev_weight_bytes(const struct backend_weight *w) { return w->row_bytes * (size_t)w->rows; }
static llb_status dev_weight_upload(struct backend_ctx *c, const struct backend_weight *w, void *dst) {
  return dev_upload(c, dst, w->data, dev_weight_bytes(w));
}
static llb_status dev_get_rows(struct backend_ctx *c, const float *x, int32_t dim, const int32_t *rows, int32_t n,
                               float *out) {
  assert_ptr_equal(rows, DEV(c)->lidx);
  for (int32_t i = 0; i < n; i++) memcpy(out + (size_t)i * dim, x + (size_t)rows[i] * dim, (size_t)dim * 4);
  return LLB_STATUS_OK;
}

static bool plain_decode(const struct backend_step *s) {
  if (!s->replayable || s->num_tokens != s->num_seqs || s->num_logits != s->num_tokens) return false;
  for (int32_t i = 0; i < s->num_seqs; i++)
    if (s->query_start_loc[i] != i || s->logits_indices[i] != i) return false;
  return true;
}

/* Stages in's arrays; plain decode steps padded to the next power of two (CUDA's buckets). */
static llb_status dev_step_begin(struct backend_ctx *c, const struct backend_step *in, struct backend_step *run,
                                 bool *replayed) {
  struct dev_ctx *d = DEV(c);
  assert_false(d->in_step);
  *replayed = false;
  int32_t n = in->num_tokens;
  if (plain_decode(in)) {
    int32_t b = 1;
    while (b < in->num_seqs) b *= 2;
    if (b <= d->p.max_num_seqs && b <= d->p.max_num_logits) n = b;
  }
  const int32_t mb = d->p.max_blocks_per_seq;
  memcpy(d->ids, in->token_ids, (size_t)in->num_tokens * 4);
  memcpy(d->pos, in->positions, (size_t)in->num_tokens * 4);
  memcpy(d->slots, in->slot_mapping, (size_t)in->num_tokens * 8);
  memcpy(d->qsl, in->query_start_loc, (size_t)(in->num_seqs + 1) * 4);
  memcpy(d->lens, in->seq_lens, (size_t)in->num_seqs * 4);
  for (int32_t s = 0; s < in->num_seqs; s++)
    memcpy(d->tables + (size_t)s * mb, in->block_tables + (size_t)s * in->max_blocks_per_seq,
           (size_t)in->max_blocks_per_seq * 4);
  memcpy(d->lidx, in->logits_indices, (size_t)in->num_logits * 4);
  for (int32_t i = in->num_tokens; i < n; i++) {
    d->ids[i] = 0, d->pos[i] = 0, d->slots[i] = -1, d->lens[i] = 1, d->qsl[i + 1] = i + 1, d->lidx[i] = i;
    memset(d->tables + (size_t)i * mb, 0, (size_t)mb * 4);
  }
  const bool padded = n > in->num_tokens;
  *run = (struct backend_step){.num_tokens = n, .num_seqs = padded ? n : in->num_seqs,
                               .num_logits = padded ? n : in->num_logits, .max_blocks_per_seq = mb,
                               .token_ids = d->ids, .positions = d->pos, .slot_mapping = d->slots,
                               .query_start_loc = d->qsl, .seq_lens = d->lens, .block_tables = d->tables,
                               .logits_indices = d->lidx, .replayable = in->replayable};
  d->in_step = true;
  d->steps++;
  d->padded_steps += padded;
  return LLB_STATUS_OK;
}

static llb_status dev_step_end(struct backend_ctx *c, llb_status st, void *dst, const void *src, size_t n) {
  assert_true(DEV(c)->in_step);
  DEV(c)->in_step = false;
  if (st == LLB_STATUS_OK && n) memcpy(dst, src, n);
  return st;
}

static struct backend_ops dev_ops;

static void dev_ops_init(void) {
  cpu = backend_cpu_ops();
  dev_ops = (struct backend_ops){
      .name = "emulated-device", .ctx_create = dev_ctx_create, .ctx_destroy = dev_ctx_destroy,
      .embed = dev_embed, .rms_norm = dev_rms_norm, .matmul = dev_matmul, .rope = dev_rope,
      .kv_write = dev_kv_write, .attention = dev_attention, .swiglu = dev_swiglu, .add = dev_add,
      .host_memory = false, .buffer_alloc = cpu->buffer_alloc, .buffer_free = cpu->buffer_free,
      .buffer_upload = dev_upload, .buffer_download = dev_upload, .buffer_clear = dev_clear,
      .weight_bytes = dev_weight_bytes, .weight_upload = dev_weight_upload, .get_rows = dev_get_rows,
      .step_begin = dev_step_begin, .step_end = dev_step_end};
}

/* ---- fixture: the same model twice (the device's copy is poisoned after upload) ---- */

struct fixture {
  void *buf_host, *buf_dev;
  size_t size;
  struct gguf_file *f_host, *f_dev;
  struct llama_model *m_host, *m_dev;
  struct llama_forward_ctx *host, *dev;
  struct llama_kv_cache *kv_host, *kv_dev;
};

static int setup(void **state) {
  dev_ops_init();
  struct fixture *fx = calloc(1, sizeof(*fx));
  struct gguf_writer *w;
  uint64_t rng = 77;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  const struct gguf_llama_hparams hp = {L, CTX, E, F, H, HKV, D, V, 10000.0f};
  assert_int_equal(gguf_writer_add_random_llama(w, &hp, 4.0f, &rng), LLB_STATUS_OK);
  assert_int_equal(gguf_writer_write_memory(w, &fx->buf_host, &fx->size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  fx->buf_dev = malloc(fx->size);
  memcpy(fx->buf_dev, fx->buf_host, fx->size);
  assert_int_equal(gguf_open_memory(fx->buf_host, fx->size, &fx->f_host), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(fx->buf_dev, fx->size, &fx->f_dev), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(fx->f_host, &fx->m_host), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(fx->f_dev, &fx->m_dev), LLB_STATUS_OK);
  const struct llama_forward_options oh = {.max_num_tokens = T, .n_threads = 1, .matmul = LLAMA_MATMUL_GGML};
  const struct llama_forward_options od = {.max_num_tokens = T, .n_threads = 1, .ops = &dev_ops,
                                           .max_num_seqs = S, .max_num_logits = S, .max_blocks_per_seq = MB};
  assert_int_equal(llama_forward_ctx_create_opts(fx->m_host, &oh, &fx->host), LLB_STATUS_OK);
  assert_int_equal(llama_forward_ctx_create_opts(fx->m_dev, &od, &fx->dev), LLB_STATUS_OK);
  assert_int_equal(llama_kv_cache_create_for(fx->host, NB, BS, &fx->kv_host), LLB_STATUS_OK);
  assert_int_equal(llama_kv_cache_create_for(fx->dev, NB, BS, &fx->kv_dev), LLB_STATUS_OK);
  memset(fx->buf_dev, 0xff, fx->size); /* NaN everywhere: the device context must not read it again */
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  struct fixture *fx = *state;
  llama_kv_cache_destroy(fx->kv_host), llama_kv_cache_destroy(fx->kv_dev);
  llama_forward_ctx_destroy(fx->host), llama_forward_ctx_destroy(fx->dev);
  llama_model_destroy(fx->m_host), llama_model_destroy(fx->m_dev);
  gguf_close(fx->f_host), gguf_close(fx->f_dev);
  free(fx->buf_host), free(fx->buf_dev);
  free(fx);
  return 0;
}

/* Sequences s (3 of them) own blocks s*MB .. s*MB + MB - 1 (tables of width MB). */
static int32_t tables[3 * MB];

static void run_both(struct fixture *fx, const struct llama_batch *b) {
  float lh[S * V], ld[S * V];
  memset(ld, 0, sizeof ld);
  assert_int_equal(llama_forward(fx->host, fx->kv_host, b, lh), LLB_STATUS_OK);
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, b, ld), LLB_STATUS_OK);
  assert_memory_equal(lh, ld, (size_t)b->num_logits * V * sizeof(float));
}

static void device_path_gives_the_host_forwards_logits_bit_for_bit(void **state) {
  struct fixture *fx = *state;
  const struct dev_ctx *d = DEV(llama_forward_ctx_backend(fx->dev));
  for (int s = 0; s < 3; s++)
    for (int k = 0; k < MB; k++) tables[s * MB + k] = (s * MB + k) % NB;
  /* a mixed prefill: 3 sequences of 5, 9 and 7 tokens, logits of each last row */
  const int32_t lens0[3] = {5, 9, 7};
  int32_t ids[T], pos[T], qsl[4] = {0}, lens[3], lidx[3];
  int64_t slots[T];
  int32_t n = 0;
  for (int s = 0; s < 3; s++) {
    for (int i = 0; i < lens0[s]; i++, n++) {
      ids[n] = (n * 13 + s) % V, pos[n] = i;
      slots[n] = (int64_t)tables[s * MB + i / BS] * BS + i % BS;
    }
    qsl[s + 1] = n, lens[s] = lens0[s], lidx[s] = n - 1;
  }
  struct llama_batch b = {n, ids, pos, slots, 3, qsl, lens, tables, MB, NULL, NULL, 3, lidx, 0, NULL, NULL, NULL};
  run_both(fx, &b);
  assert_int_equal(d->padded_steps, 0);
  /* 6 decode steps of the 3 sequences: padded to 4 rows on the device */
  for (int step = 0; step < 6; step++) {
    for (int s = 0; s < 3; s++) {
      const int32_t p = lens[s];
      ids[s] = (p * 7 + s) % V, pos[s] = p, slots[s] = (int64_t)tables[s * MB + p / BS] * BS + p % BS;
      qsl[s + 1] = s + 1, lidx[s] = s, lens[s] = p + 1;
    }
    b.num_tokens = 3;
    run_both(fx, &b);
  }
  assert_int_equal(d->steps, 7);
  assert_int_equal(d->padded_steps, 6);
  assert_false(d->in_step);
}

static void device_path_checks_every_index_before_the_step_begins(void **state) {
  struct fixture *fx = *state;
  const struct dev_ctx *d = DEV(llama_forward_ctx_backend(fx->dev));
  const int steps = d->steps;
  int32_t ids[1] = {V}, pos[1] = {0}, qsl[2] = {0, 1}, lens[1] = {1}, lidx[1] = {0}, table[MB] = {0};
  int64_t slots[1] = {0};
  float logits[V];
  struct llama_batch b = {1, ids, pos, slots, 1, qsl, lens, table, MB, NULL, NULL, 1, lidx, 0, NULL, NULL, NULL};
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_INVALID_ARGUMENT); /* token id */
  ids[0] = 1, slots[0] = (int64_t)NB * BS;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_INVALID_ARGUMENT); /* slot */
  slots[0] = 0, table[0] = NB;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_INVALID_ARGUMENT); /* block id */
  table[0] = 0, lens[0] = CTX + 1;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_INVALID_ARGUMENT); /* seq_len */
  assert_int_equal(d->steps, steps); /* nothing reached the device */
  lens[0] = 1;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_OK);
  assert_int_equal(d->steps, steps + 1);
}

static void device_context_refuses_a_host_cache_a_second_cache_and_pooling(void **state) {
  struct fixture *fx = *state;
  int32_t ids[1] = {1}, pos[1] = {0}, qsl[2] = {0, 1}, lens[1] = {1}, lidx[1] = {0}, table[MB] = {0};
  int64_t slots[1] = {0};
  float logits[V], hidden[E];
  struct llama_batch b = {1, ids, pos, slots, 1, qsl, lens, table, MB, NULL, NULL, 1, lidx, 0, NULL, NULL, NULL};
  struct llama_kv_cache *host_kv_of_dev_model = NULL;
  assert_int_equal(llama_kv_cache_create(fx->m_dev, NB, BS, &host_kv_of_dev_model), LLB_STATUS_OK);
  assert_int_equal(llama_forward(fx->dev, host_kv_of_dev_model, &b, logits), LLB_STATUS_INVALID_ARGUMENT);
  llama_kv_cache_destroy(host_kv_of_dev_model);
  /* one cache per device context: its recorded steps hold the cache's addresses */
  struct llama_kv_cache *second = NULL;
  assert_int_equal(llama_kv_cache_create_for(fx->dev, NB, BS, &second), LLB_STATUS_OK);
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_OK);
  assert_int_equal(llama_forward(fx->dev, second, &b, logits), LLB_STATUS_INVALID_ARGUMENT);
  llama_kv_cache_destroy(second);
  b.num_hidden = 1, b.hidden_indices = lidx, b.hidden_states = hidden;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_UNSUPPORTED);
}

/* LoRA adapters run on the host backends only: a batch naming one is refused, naming the
 * backend, before anything reaches the device; the same batch without it runs. */
static void device_path_refuses_lora_adapters_naming_the_backend(void **state) {
  struct fixture *fx = *state;
  const struct dev_ctx *d = DEV(llama_forward_ctx_backend(fx->dev));
  struct gguf_writer *w;
  uint64_t rng = 5;
  void *buf;
  size_t size;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  assert_int_equal(lora_model_add_keys(w, "llama", 8.0f), LLB_STATUS_OK);
  assert_int_equal(lora_model_add_pair(w, &rng, "blk.0.attn_q.weight", E, 4, H * D, GGML_TYPE_F32, 0.1f),
                   LLB_STATUS_OK);
  assert_int_equal(gguf_writer_write_memory(w, &buf, &size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  struct gguf_file *f;
  struct llama_lora *a;
  assert_int_equal(gguf_open_memory(buf, size, &f), LLB_STATUS_OK);
  assert_int_equal(llama_lora_load(f, fx->m_dev, 0, &a), LLB_STATUS_OK);
  int32_t ids[1] = {1}, pos[1] = {0}, qsl[2] = {0, 1}, lens[1] = {1}, lidx[1] = {0}, table[MB] = {0};
  int64_t slots[1] = {0};
  float logits[V];
  const struct llama_lora *loras[1] = {a};
  struct llama_batch b = {1, ids, pos, slots, 1, qsl, lens, table, MB, NULL, NULL, 1, lidx, 0, NULL, NULL, loras};
  const int steps = d->steps;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "LoRA adapters on backend"));
  assert_int_equal(d->steps, steps);
  loras[0] = NULL;
  assert_int_equal(llama_forward(fx->dev, fx->kv_dev, &b, logits), LLB_STATUS_OK);
  llama_lora_destroy(a);
  gguf_close(f);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(device_path_gives_the_host_forwards_logits_bit_for_bit),
      cmocka_unit_test(device_path_checks_every_index_before_the_step_begins),
      cmocka_unit_test(device_context_refuses_a_host_cache_a_second_cache_and_pooling),
      cmocka_unit_test(device_path_refuses_lora_adapters_naming_the_backend),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
