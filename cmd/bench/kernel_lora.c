/* llmbus-kernel-bench --lora-adapters N (kernel_lora.h): what LoRA adapters cost the CPU forward.
 *
 * N random adapters of rank R over all seven projections of every layer of the loaded model
 * (F16, alpha 2R, written as llama.cpp's GGUF LoRA files in memory and loaded by
 * llama_lora_load, so the loader and the forward's batched product are what is measured).
 * Decode: each batch size's B sequences (sequence q runs adapter q % N: round-robin) step
 * --decode tokens after a --context-token prompt, the same steps with every sequence on the base
 * model; prefill: one step of --prefill tokens of one sequence with adapter 0, and on the base.
 * Base and adapter runs alternate (so that the machine's load drifts into both alike); printed
 * as the median step time of --runs runs of each, side by side, their ratio, and the median of
 * the ratios of each adapter run to the base run just before it ("paired"). */
#include "cmd/bench/kernel_lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/quant.h"
#include "model/forward/forward.h"
#include "model/forward/lora.h"
#include "model/forward/session.h"
#include "model/gguf/gguf.h"

enum { LORA_BENCH_MAX_ADAPTERS = 64, LORA_BENCH_MAX_RUNS = 64, LORA_BENCH_ALIGN = 32 };

static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }
static void put_str(FILE *f, const char *s) {
  put_u64(f, strlen(s));
  put(f, s, strlen(s));
}
static void put_kv_str(FILE *f, const char *k, const char *v) {
  put_str(f, k);
  put_u32(f, 8); /* GGUF_TYPE_STRING */
  put_str(f, v);
}

/* One adapter tensor: name, ne [cols, rows], F16. */
struct lora_tensor {
  char name[96];
  int64_t cols, rows;
};

/* The pairs of every projection of c (phi3's fused ones as llama.cpp names them): 2 per target. */
static int lora_tensors(const struct llama_config *c, int32_t rank, struct lora_tensor *t) {
  const int64_t E = c->embedding_length, F = c->feed_forward_length;
  const int64_t HD = (int64_t)c->head_count * c->head_dim, KD = (int64_t)c->head_count_kv * c->head_dim;
  const struct {
    const char *name;
    int64_t cols, rows;
    bool on;
  } p[] = {{"attn_q", E, HD, !c->fused_qkv},      {"attn_k", E, KD, !c->fused_qkv},
           {"attn_v", E, KD, !c->fused_qkv},      {"attn_qkv", E, HD + 2 * KD, c->fused_qkv},
           {"attn_output", HD, E, true},          {"ffn_gate", E, F, !c->fused_gate_up},
           {"ffn_up", E, c->fused_gate_up ? 2 * F : F, true}, {"ffn_down", F, E, true}};
  int n = 0;
  for (int32_t il = 0; il < c->block_count; il++)
    for (size_t j = 0; j < sizeof(p) / sizeof(p[0]); j++) {
      if (!p[j].on) continue;
      snprintf(t[n].name, sizeof(t[n].name), "blk.%d.%s.weight.lora_a", il, p[j].name);
      t[n].cols = p[j].cols, t[n].rows = rank, n++;
      snprintf(t[n].name, sizeof(t[n].name), "blk.%d.%s.weight.lora_b", il, p[j].name);
      t[n].cols = rank, t[n].rows = p[j].rows, n++;
    }
  return n;
}

/* A random adapter of rank `rank` for c as GGUF bytes (*buf [*size], malloc'd by
 * open_memstream); values uniform in +-0.05 as fp16. */
static llb_status lora_gguf(const struct llama_config *c, int32_t rank, uint64_t seed, char **buf, size_t *size) {
  struct lora_tensor *t = malloc((size_t)c->block_count * 16 * sizeof(*t));
  FILE *f = open_memstream(buf, size);
  if (!t || !f) {
    free(t);
    if (f) fclose(f);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "LoRA adapter file");
  }
  const int n = lora_tensors(c, rank, t);
  put(f, "GGUF", 4);
  put_u32(f, 3);
  put_u64(f, (uint64_t)n);
  put_u64(f, 4);
  put_kv_str(f, "general.type", "adapter");
  put_kv_str(f, "general.architecture", c->architecture);
  put_kv_str(f, "adapter.type", "lora");
  put_str(f, "adapter.lora.alpha");
  put_u32(f, 6); /* GGUF_TYPE_FLOAT32 */
  const float alpha = 2.0f * (float)rank;
  put(f, &alpha, 4);
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    put_str(f, t[i].name);
    put_u32(f, 2);
    put_u64(f, (uint64_t)t[i].cols);
    put_u64(f, (uint64_t)t[i].rows);
    put_u32(f, GGML_TYPE_F16);
    put_u64(f, off);
    off += ((uint64_t)(t[i].cols * t[i].rows) * 2 + LORA_BENCH_ALIGN - 1) / LORA_BENCH_ALIGN * LORA_BENCH_ALIGN;
  }
  static const uint8_t zero[LORA_BENCH_ALIGN];
  put(f, zero, (LORA_BENCH_ALIGN - (size_t)ftell(f) % LORA_BENCH_ALIGN) % LORA_BENCH_ALIGN);
  for (int i = 0; i < n; i++) {
    const int64_t m = t[i].cols * t[i].rows;
    for (int64_t k = 0; k < m; k++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint16_t h = llb_fp32_to_fp16(0.05f * ((float)(seed >> 40) / 8388608.0f - 1.0f));
      put(f, &h, 2);
    }
    put(f, zero, (LORA_BENCH_ALIGN - (size_t)(m * 2) % LORA_BENCH_ALIGN) % LORA_BENCH_ALIGN);
  }
  free(t);
  if (fclose(f) != 0) return LLB_ERRF(LLB_STATUS_IO, "LoRA adapter file in memory");
  return LLB_STATUS_OK;
}

struct lora_bench {
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_session *s;
  int n;
  char *bufs[LORA_BENCH_MAX_ADAPTERS];
  struct gguf_file *files[LORA_BENCH_MAX_ADAPTERS];
  struct llama_lora *loras[LORA_BENCH_MAX_ADAPTERS];
};

static void lora_bench_free(struct lora_bench *b) {
  for (int i = 0; i < b->n; i++) {
    llama_lora_destroy(b->loras[i]);
    gguf_close(b->files[i]);
    free(b->bufs[i]);
  }
  llama_session_destroy(b->s);
  llama_model_destroy(b->m);
  gguf_close(b->f);
}

/* Sequences [0, n_seqs) on the adapters round-robin (with) or on the base model. */
static llb_status assign(struct lora_bench *b, int32_t n_seqs, bool with) {
  for (int32_t q = 0; q < n_seqs; q++) {
    llb_status st = llama_session_set_lora(b->s, q, with ? b->loras[q % b->n] : NULL);
    if (st) return st;
  }
  return LLB_STATUS_OK;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

/* The medians, their ratio, and the median of each run's ratio to the base run next to it (the
 * steadier figure when the machine's load drifts). */
static void print_row(const char *what, double *base, double *lora, int runs) {
  double paired[LORA_BENCH_MAX_RUNS];
  for (int r = 0; r < runs; r++) paired[r] = lora[r] / base[r];
  const double mp = median(paired, runs), mb = median(base, runs), ml = median(lora, runs);
  printf("%-14s %10.3f ms %10.3f ms %8.3fx %8.3fx\n", what, mb, ml, ml / mb, mp);
}

/* ms of --decode steps of batch B from position `context`, base then adapters, per run. */
static llb_status time_decode(struct lora_bench *b, const struct kernel_bench_options *o, int32_t B,
                              const int32_t *tokens, double *base, double *lora) {
  llb_status st = assign(b, B, false);
  for (int32_t q = 0; q < B && !st; q++) {
    if (!(st = llama_session_truncate(b->s, q, 0)))
      st = llama_session_feed(b->s, q, tokens + q * o->decode_context, o->decode_context, 0, 0, NULL, NULL);
  }
  for (int r = 0; r <= o->runs && !st; r++)
    for (int with = 0; with < 2 && !st; with++) {
      if ((st = assign(b, B, with))) break;
      for (int32_t q = 0; q < B && !st; q++) st = llama_session_truncate(b->s, q, o->decode_context);
      float *logits;
      const int64_t t0 = llb_now_ns();
      for (int i = 0; i < o->n_decode && !st; i++)
        st = llama_session_decode_batch(b->s, 0, B, tokens + (int64_t)i * B, &logits);
      const double ms = (double)(llb_now_ns() - t0) * 1e-6 / o->n_decode;
      if (r > 0) (with ? lora : base)[r - 1] = ms; /* run 0 warms up */
    }
  return st;
}

static llb_status time_prefill(struct lora_bench *b, const struct kernel_bench_options *o, const int32_t *tokens,
                               double *base, double *lora) {
  llb_status st = LLB_STATUS_OK;
  for (int r = 0; r <= o->runs && !st; r++)
    for (int with = 0; with < 2 && !st; with++) {
      float *logits;
      if ((st = assign(b, 1, with)) || (st = llama_session_truncate(b->s, 0, 0))) break;
      const int64_t t0 = llb_now_ns();
      st = llama_session_eval(b->s, 0, tokens, o->n_prefill, &logits);
      if (r > 0) (with ? lora : base)[r - 1] = (double)(llb_now_ns() - t0) * 1e-6;
    }
  return st;
}

static int fail(const char *what, llb_status st) {
  fprintf(stderr, "llmbus-kernel-bench: %s: %s (%s)\n", what, llb_strerror(st), llb_err_last());
  return 1;
}

static int lora_measure(struct lora_bench *b, const struct kernel_bench_options *o, int32_t max_batch,
                        int32_t longest) {
  int32_t *tokens = malloc((size_t)max_batch * (size_t)longest * sizeof(int32_t));
  if (!tokens) return fail("tokens", LLB_STATUS_OUT_OF_MEMORY);
  const int32_t vocab = llama_model_config(b->m)->vocab_size;
  for (int64_t i = 0; i < (int64_t)max_batch * longest; i++) tokens[i] = (int32_t)((i * 7919 + 13) % vocab);
  double base[LORA_BENCH_MAX_RUNS], lora[LORA_BENCH_MAX_RUNS];
  printf("%-14s %13s %13s %9s %9s\n", "step (median)", "base", "adapters", "ratio", "paired");
  llb_status st = LLB_STATUS_OK;
  for (int bi = 0; bi < o->n_batches && !st; bi++) {
    if ((st = time_decode(b, o, o->batches[bi], tokens, base, lora))) break;
    char what[32];
    snprintf(what, sizeof(what), "decode b%d", o->batches[bi]);
    print_row(what, base, lora, o->runs);
  }
  if (!st && o->n_prefill > 0 && !(st = time_prefill(b, o, tokens, base, lora))) {
    char what[32];
    snprintf(what, sizeof(what), "prefill %d", o->n_prefill);
    print_row(what, base, lora, o->runs);
  }
  free(tokens);
  return st ? fail("step", st) : 0;
}

int kernel_lora_run(const struct kernel_bench_options *o) {
  if (!o->model || o->lora_adapters < 1 || o->lora_adapters > LORA_BENCH_MAX_ADAPTERS || o->lora_rank < 1 ||
      o->threads < 1 || o->runs < 1 || o->runs > LORA_BENCH_MAX_RUNS || o->n_decode < 1 || o->decode_context < 1 ||
      o->decode_context > KERNEL_BENCH_MAX_CONTEXT || o->n_prefill < 0) {
    fprintf(stderr, "llmbus-kernel-bench: --lora-adapters in [1, %d], --lora-rank >= 1, --runs in [1, %d]\n",
            LORA_BENCH_MAX_ADAPTERS, LORA_BENCH_MAX_RUNS);
    return 2;
  }
  int32_t max_batch = 1;
  for (int i = 0; i < o->n_batches; i++) {
    if (o->batches[i] < 1 || o->batches[i] > KERNEL_BENCH_MAX_BATCH) return 2;
    if (o->batches[i] > max_batch) max_batch = o->batches[i];
  }
  int32_t longest = o->decode_context + o->n_decode > o->n_prefill ? o->decode_context + o->n_decode : o->n_prefill;
  struct lora_bench b = {0};
  llb_status st;
  if ((st = gguf_open(o->model, &b.f)) || (st = llama_model_load(b.f, &b.m))) return fail(o->model, st);
  const struct llama_config *c = llama_model_config(b.m);
  const struct llama_session_options so = {
      .max_context = longest, .max_seqs = max_batch, .max_logits = max_batch,
      .forward = {.max_num_tokens = longest > max_batch ? longest : max_batch, .n_threads = o->threads,
                  .n_threads_decode = o->decode_threads, .packed_cache_dir = o->packed_cache_dir,
                  .max_lora_rank = o->lora_rank}};
  if ((st = llama_session_create(b.m, &so, &b.s))) {
    lora_bench_free(&b);
    return fail("session", st);
  }
  for (; b.n < o->lora_adapters; b.n++) {
    size_t size = 0;
    if ((st = lora_gguf(c, o->lora_rank, 1000 + (uint64_t)b.n, &b.bufs[b.n], &size)) ||
        (st = gguf_open_memory(b.bufs[b.n], size, &b.files[b.n])) ||
        (st = llama_lora_load(b.files[b.n], b.m, o->lora_rank, &b.loras[b.n]))) {
      b.n++;
      lora_bench_free(&b);
      return fail("adapter", st);
    }
  }
  printf("model %s\nthreads %d, runs %d; %d LoRA adapters of rank %d (F16, %d pairs each: q, k, v, o, gate, up, "
         "down of every layer), sequences round-robin over them\n", o->model, o->threads, o->runs, b.n, o->lora_rank,
         llama_lora_num_targets(b.loras[0]));
  const int rc = lora_measure(&b, o, max_batch, longest);
  lora_bench_free(&b);
  return rc;
}
