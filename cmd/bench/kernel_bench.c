/* llmbus-kernel-bench (kernel_bench.h): speed of the CPU forward pass on a real GGUF model (a
 * benchmark of its own: it loads whole models, which kernels/ may not know).
 *
 * Prints prefill tok/s (one step of --prefill tokens, logits for the last one), decode tok/s
 * at each batch size (--decode steps of one token per sequence, every sequence after a
 * --context-token prompt (default 16), logits for every row), as the median (and min/max) of --runs runs, and the
 * thread count. --check runs the ChatML prompt "What is the capital of France?" greedily and
 * fails unless the answer names Paris. Shapes follow llama-bench's pp512 / tg runs.
 * --roofline first measures this machine's DRAM read bandwidth and int8 dot-product peak with
 * the same threads (kernels/cpu/bench/roofline.h) and prints each rate as a fraction of its
 * bound: decode against the bytes a token must read (every matrix once per step, shared by the
 * batch, plus the sequence's K/V), prefill against the int8 multiply-adds of its matmuls.
 */
#include "cmd/bench/kernel_bench.h"
#include "cmd/bench/kernel_fit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/cpu/bench/roofline.h"
#include "model/chat_template.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

enum { BENCH_BLOCK_SIZE = 16, BENCH_MAX_BATCH = KERNEL_BENCH_MAX_BATCH, BENCH_MAX_RUNS = 64,
       BENCH_PROMPT_STEP_TOKENS = 1024 /* the most tokens of one step that computes the prompts */ };

struct bench {
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_forward_ctx *fc;
  struct llama_kv_cache *kv;
  int32_t vocab, max_tokens, num_blocks, max_blocks_per_seq;
  /* step buffers, [max_tokens] each unless noted */
  int32_t *ids, *pos, *qsl /* [max_tokens + 1] */, *lens, *tables /* [largest batch, max_blocks_per_seq] */,
      *li;
  int64_t *slots;
  float *logits; /* [BENCH_MAX_BATCH, vocab] */
};

static int die(const char *what, llb_status st) {
  fprintf(stderr, "%s: %s (%s)\n", what, llb_strerror(st), llb_err_last());
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One step of sequences [first, first + n_seqs), each computing len tokens from position
 * start; sequence s owns blocks [s * max_blocks_per_seq, ...). Logits of the last row of each
 * sequence. */
static llb_status bench_step_of(struct bench *b, int32_t first, int32_t n_seqs, int32_t start, int32_t len,
                                const int32_t *const *seq_ids) {
  int32_t n = 0;
  b->qsl[0] = 0;
  seq_ids += first;
  const int32_t *tables = b->tables + (int64_t)first * b->max_blocks_per_seq;
  for (int32_t s = 0; s < n_seqs; s++) {
    for (int32_t r = 0; r < len; r++, n++) {
      const int32_t p = start + r;
      b->ids[n] = seq_ids[s][p];
      b->pos[n] = p;
      b->slots[n] = (int64_t)tables[(int64_t)s * b->max_blocks_per_seq + p / BENCH_BLOCK_SIZE] *
                        BENCH_BLOCK_SIZE + p % BENCH_BLOCK_SIZE;
    }
    b->qsl[s + 1] = n;
    b->lens[s] = start + len;
    b->li[s] = n - 1;
  }
  const struct llama_batch batch = {.num_tokens = n, .token_ids = b->ids, .positions = b->pos,
                                    .slot_mapping = b->slots, .num_seqs = n_seqs, .query_start_loc = b->qsl,
                                    .seq_lens = b->lens, .block_tables = tables,
                                    .max_blocks_per_seq = b->max_blocks_per_seq, .num_logits = n_seqs,
                                    .logits_indices = b->li};
  return llama_forward(b->fc, b->kv, &batch, b->logits);
}

static llb_status bench_step(struct bench *b, int32_t n_seqs, int32_t start, int32_t len,
                             const int32_t *const *seq_ids) {
  return bench_step_of(b, 0, n_seqs, start, len, seq_ids);
}

/* The first `context` tokens of sequences [0, n_seqs), in steps of at most
 * BENCH_PROMPT_STEP_TOKENS tokens (whole sequences, or one sequence in chunks). */
static llb_status bench_prompts(struct bench *b, int32_t n_seqs, int32_t context, const int32_t *const *seq_ids) {
  if (context > BENCH_PROMPT_STEP_TOKENS) {
    for (int32_t s = 0; s < n_seqs; s++)
      for (int32_t p = 0; p < context; p += BENCH_PROMPT_STEP_TOKENS) {
        const int32_t len = context - p < BENCH_PROMPT_STEP_TOKENS ? context - p : BENCH_PROMPT_STEP_TOKENS;
        llb_status st = bench_step_of(b, s, 1, p, len, seq_ids);
        if (st) return st;
      }
    return LLB_STATUS_OK;
  }
  const int32_t group = BENCH_PROMPT_STEP_TOKENS / context;
  for (int32_t s = 0; s < n_seqs; s += group) {
    llb_status st = bench_step_of(b, s, n_seqs - s < group ? n_seqs - s : group, 0, context, seq_ids);
    if (st) return st;
  }
  return LLB_STATUS_OK;
}

static int32_t argmax(const float *x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static int run_check(struct bench *b) {
  struct tokenizer *tok = NULL;
  llb_status st = tokenizer_load(b->f, &tok);
  if (st != LLB_STATUS_OK) return die("tokenizer_load", st);
  const struct chat_message msg = {"user", "What is the capital of France?"};
  char *text = NULL;
  int32_t *prompt = NULL;
  int64_t n_prompt = 0;
  int rc = 1;
  if ((st = chat_template_apply(CHAT_TEMPLATE_CHATML, &msg, 1, true, &text)) != LLB_STATUS_OK ||
      (st = tokenizer_encode(tok, text, strlen(text), true, true, &prompt, &n_prompt)) != LLB_STATUS_OK) {
    die("prompt", st);
    goto done;
  }
  enum { GEN = 24 };
  int32_t seq[512];
  if (n_prompt + GEN > (int64_t)(sizeof(seq) / sizeof(seq[0])) || n_prompt > b->max_tokens) goto done;
  memcpy(seq, prompt, (size_t)n_prompt * sizeof(int32_t));
  const int32_t *ids[1] = {seq};
  char out[1024] = "";
  size_t out_len = 0;
  int32_t n = (int32_t)n_prompt;
  if ((st = bench_step(b, 1, 0, n, ids)) != LLB_STATUS_OK) {
    die("prefill", st);
    goto done;
  }
  for (int g = 0; g < GEN; g++) {
    const int32_t next = argmax(b->logits, b->vocab);
    if (tokenizer_is_eog(tok, next)) break;
    const int64_t pl = tokenizer_token_to_piece(tok, next, false, out + out_len, sizeof(out) - 1 - out_len);
    if (pl > 0 && out_len + (size_t)pl < sizeof(out)) out_len += (size_t)pl;
    out[out_len] = '\0';
    seq[n] = next;
    if ((st = bench_step(b, 1, n, 1, ids)) != LLB_STATUS_OK) {
      die("decode", st);
      goto done;
    }
    n++;
  }
  printf("check: \"%s\"\n", out);
  rc = strstr(out, "Paris") ? 0 : 1;
  printf("check: %s\n", rc == 0 ? "ok" : "FAILED (no \"Paris\")");
done:
  free(text);
  free(prompt);
  tokenizer_destroy(tok);
  return rc;
}

/* What one token costs the machine: the matrices a step reads (all tensors of 2 or more dims;
 * token_embd only when it is also the output, tied), the int8 multiply-adds of the matmuls,
 * and the K/V bytes of one context position (K and V of every layer in the cache's dtype). */
struct token_cost {
  double weight_bytes, matmul_macs, kv_bytes_per_pos;
};

static struct token_cost token_cost_of(const struct gguf_file *f, const struct llama_config *c,
                                        enum backend_kv_dtype kv_dtype) {
  struct token_cost tc = {0};
  const bool tied = gguf_find_tensor(f, "output.weight") == NULL;
  for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
    const struct gguf_tensor *t = gguf_tensor_at(f, i);
    if (t->n_dims < 2 || (!tied && strcmp(t->name, "token_embd.weight") == 0)) continue;
    tc.weight_bytes += (double)t->size_bytes;
    tc.matmul_macs += (double)t->ne[0] * (double)t->ne[1];
  }
  tc.kv_bytes_per_pos = 2.0 * c->block_count * c->head_count_kv * (double)backend_kv_row_bytes(kv_dtype, c->head_dim);
  return tc;
}

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* v: wall tok/s per run; c: process CPU ms per token per run (all threads, spinning included:
 * on a loaded machine the CPU time is the steadier measure of work done). */
static void report(const char *what, double *v, double *c, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  qsort(c, (size_t)n, sizeof(double), cmp_double);
  printf("%-14s %9.2f tok/s  (median of %d; min %.2f, max %.2f)  cpu %.3f ms/tok\n", what, v[n / 2], n,
         v[0], v[n - 1], c[n / 2]);
}

int kernel_bench_run(const struct kernel_bench_options *o) {
  if (o->fit_path && o->fit_steps_path) return kernel_fit_steps_run(o);
  if (o->fit_path) return o->model && o->threads >= 1 && o->runs >= 1 ? kernel_fit_run(o) : 2;
  const char *model = o->model, *packed_cache_dir = o->packed_cache_dir;
  const int threads = o->threads, runs = o->runs, n_prefill = o->n_prefill, n_decode = o->n_decode;
  const int context = o->decode_context;
  const bool check = o->check, roofline = o->roofline;
  const int32_t *batches = o->batches;
  const int n_batches = o->n_batches;
  if (!model || threads < 1 || o->decode_threads < 0 || runs < 1 || runs > BENCH_MAX_RUNS || n_prefill < 0 || n_decode < 1 ||
      context < 1 || context > KERNEL_BENCH_MAX_CONTEXT || n_batches < 0 || n_batches > KERNEL_BENCH_MAX_BATCHES) {
    fprintf(stderr,
            "llmbus-kernel-bench: needs --model, --threads >= 1, --decode-threads >= 0, --runs in [1, %d], "
            "--prefill >= 0, --decode >= 1, --context in [1, %d] and at most %d batch sizes\n",
            BENCH_MAX_RUNS, KERNEL_BENCH_MAX_CONTEXT, KERNEL_BENCH_MAX_BATCHES);
    return 2;
  }
  for (int i = 0; i < n_batches; i++)
    if (batches[i] < 1 || batches[i] > BENCH_MAX_BATCH) {
      fprintf(stderr, "llmbus-kernel-bench: batch size %d is outside [1, %d]\n", batches[i], BENCH_MAX_BATCH);
      return 2;
    }

  struct bench b = {0};
  llb_status st;
  if ((st = gguf_open(model, &b.f)) != LLB_STATUS_OK) return die(model, st);
  if ((st = llama_model_load(b.f, &b.m)) != LLB_STATUS_OK) return die("llama_model_load", st);
  const struct llama_config *cfg = llama_model_config(b.m);
  b.vocab = cfg->vocab_size;
  int32_t longest = context + n_decode;
  if (n_prefill > longest) longest = n_prefill;
  if (longest < 512) longest = 512;
  b.max_blocks_per_seq = (longest + BENCH_BLOCK_SIZE - 1) / BENCH_BLOCK_SIZE;
  int32_t max_batch = 1; /* KV blocks for the largest batch run, not for every size allowed */
  for (int i = 0; i < n_batches; i++)
    if (batches[i] > max_batch) max_batch = batches[i];
  b.num_blocks = b.max_blocks_per_seq * max_batch;
  b.max_tokens = BENCH_PROMPT_STEP_TOKENS > longest ? BENCH_PROMPT_STEP_TOKENS : longest;
  enum backend_kv_dtype kv_dtype = BACKEND_KV_DTYPE_F16;
  if (o->kv_cache_dtype && (st = llama_kv_dtype_parse(o->kv_cache_dtype, &kv_dtype)) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-kernel-bench: %s\n", llb_err_last());
    return 2;
  }
  const struct llama_forward_options fo = {.max_num_tokens = b.max_tokens, .n_threads = threads,
                                           .n_threads_decode = o->decode_threads,
                                           .packed_cache_dir = packed_cache_dir};
  if ((st = llama_forward_ctx_create_opts(b.m, &fo, &b.fc)) != LLB_STATUS_OK) return die("forward ctx", st);
  if ((st = llama_kv_cache_create_dtype_for(b.fc, b.num_blocks, BENCH_BLOCK_SIZE, kv_dtype, &b.kv)) != LLB_STATUS_OK)
    return die("kv cache", st);
  if (kv_dtype != BACKEND_KV_DTYPE_F16) printf("kv cache: %s\n", llama_kv_dtype_name(kv_dtype));
  if (packed_cache_dir) printf("packed weights: %s\n", llama_forward_ctx_packed_shared(b.fc) ? "shared cache file" : "private");
  const size_t T = (size_t)b.max_tokens;
  b.ids = malloc(T * sizeof(int32_t));
  b.pos = malloc(T * sizeof(int32_t));
  b.qsl = malloc((T + 1) * sizeof(int32_t));
  b.lens = malloc(T * sizeof(int32_t));
  b.li = malloc(T * sizeof(int32_t));
  b.slots = malloc(T * sizeof(int64_t));
  b.tables = malloc((size_t)b.num_blocks * sizeof(int32_t));
  b.logits = malloc((size_t)BENCH_MAX_BATCH * (size_t)b.vocab * sizeof(float));
  int32_t *tokens = malloc((size_t)BENCH_MAX_BATCH * (size_t)longest * sizeof(int32_t));
  const int32_t **seq_ids = malloc(BENCH_MAX_BATCH * sizeof(*seq_ids));
  if (!b.ids || !b.pos || !b.qsl || !b.lens || !b.li || !b.slots || !b.tables || !b.logits || !tokens || !seq_ids)
    return die("bench buffers", LLB_STATUS_OUT_OF_MEMORY);
  for (int32_t i = 0; i < b.num_blocks; i++) b.tables[i] = i;
  for (int64_t i = 0; i < (int64_t)BENCH_MAX_BATCH * longest; i++) tokens[i] = (int32_t)((i * 7919 + 13) % b.vocab);
  for (int s = 0; s < BENCH_MAX_BATCH; s++) seq_ids[s] = tokens + (int64_t)s * longest;

  printf("model %s\nthreads %d (decode steps of <= %d rows: %d), runs %d\n", model, threads, LLAMA_DECODE_MAX_TOKENS,
         o->decode_threads > 0 && o->decode_threads < threads ? o->decode_threads : threads, runs);
  struct roofline rl = {0};
  const struct token_cost tcost = token_cost_of(b.f, cfg, kv_dtype);
  if (roofline) {
    if ((st = roofline_measure(threads, &rl)) != LLB_STATUS_OK) return die("roofline", st);
    printf("roofline: DRAM read %.1f GB/s, int8 peak %.1f GOPS (%s), %d threads; a token reads %.1f MB of "
           "matrices and does %.1f M int8 multiply-adds\n", rl.read_bytes_per_s / 1e9, rl.int8_ops_per_s / 1e9,
           rl.int8_path, threads, tcost.weight_bytes / 1e6, tcost.matmul_macs / 1e6);
  }
  int rc = 0;
  if (check) rc = run_check(&b);

  double v[BENCH_MAX_RUNS], c[BENCH_MAX_RUNS];
  if (n_prefill > 0) {
    for (int r = 0; r <= runs; r++) { /* run 0 warms caches and is not counted */
      const int64_t t0 = llb_now_ns(), c0 = cpu_ns();
      if ((st = bench_step(&b, 1, 0, n_prefill, seq_ids)) != LLB_STATUS_OK) return die("prefill", st);
      const double s = (double)(llb_now_ns() - t0) * 1e-9;
      if (r > 0) v[r - 1] = n_prefill / s, c[r - 1] = (double)(cpu_ns() - c0) * 1e-6 / n_prefill;
    }
    char what[32];
    snprintf(what, sizeof(what), "prefill %d", n_prefill);
    report(what, v, c, runs);
    if (roofline)
      printf("%-14s %9.2f of the int8 peak (%.1f M int ops a token; attention in float not counted)\n", "", 
             roofline_fraction(v[runs / 2], 2.0 * tcost.matmul_macs, rl.int8_ops_per_s), 2.0 * tcost.matmul_macs / 1e6);
  }
  for (int bi = 0; bi < n_batches; bi++) {
    const int32_t B = batches[bi];
    /* the prompts once: each run decodes from position `context` again, over the same slots,
     * so the prompts' K/V stay as they were (long contexts at batch 16 cost minutes to fill) */
    if ((st = bench_prompts(&b, B, context, seq_ids)) != LLB_STATUS_OK) return die("prompt", st);
    for (int r = 0; r <= runs; r++) {
      const int64_t t0 = llb_now_ns(), c0 = cpu_ns();
      for (int i = 0; i < n_decode; i++)
        if ((st = bench_step(&b, B, context + i, 1, seq_ids)) != LLB_STATUS_OK) return die("decode", st);
      const double s = (double)(llb_now_ns() - t0) * 1e-9;
      if (r > 0) v[r - 1] = (double)B * n_decode / s, c[r - 1] = (double)(cpu_ns() - c0) * 1e-6 / ((double)B * n_decode);
    }
    char what[32];
    if (context == 16) snprintf(what, sizeof(what), "decode b%d", B);
    else snprintf(what, sizeof(what), "decode b%d c%d", B, context);
    report(what, v, c, runs);
    if (roofline) {
      const double bytes = tcost.weight_bytes / B + tcost.kv_bytes_per_pos * (context + n_decode / 2.0);
      printf("%-14s %9.2f of the DRAM read bound (%.2f MB a token: matrices / %d + K/V)\n", "",
             roofline_fraction(v[runs / 2], bytes, rl.read_bytes_per_s), bytes / 1e6, B);
    }
  }

  free(tokens);
  free(seq_ids);
  free(b.ids); free(b.pos); free(b.qsl); free(b.lens); free(b.li); free(b.slots); free(b.tables);
  free(b.logits);
  llama_forward_ctx_destroy(b.fc);
  llama_kv_cache_destroy(b.kv);
  llama_model_destroy(b.m);
  gguf_close(b.f);
  return rc;
}
