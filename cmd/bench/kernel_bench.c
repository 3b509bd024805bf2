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
 * batch, plus the sequence's K/V), also run by run against reads taken right beside each run,
 * prefill against the int8 multiply-adds of its matmuls (and AMX's tile peak where the CPU has it).
 * --op-times adds each decode batch's op-by-op split of a step (kernel_optimes.h).
 * The forward runs in one model/forward/session.h session holding a sequence per batch row; each
 * sequence's prompt is computed alone (the cache's values are those of any batching).
 */
#include "cmd/bench/kernel_bench.h"
#include "cmd/bench/kernel_fit.h"
#include "cmd/bench/kernel_lora.h"
#include "cmd/bench/kernel_sampler.h"
#include "cmd/bench/kernel_stream.h"
#include "cmd/bench/kernel_optimes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/status.h"
#include "kernels/cpu/bench/roofline.h"
#include "kernels/cpu/vec_dot.h"
#include "model/template/chat_template.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/forward/session.h"
#include "model/tokenizer/tokenizer.h"

enum { BENCH_MAX_BATCH = KERNEL_BENCH_MAX_BATCH, BENCH_MAX_RUNS = 64,
       BENCH_PROMPT_STEP_TOKENS = 1024 /* the most tokens of one step that computes a prompt */ };

struct bench {
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_session *s; /* one sequence per decode batch row, each in its own blocks */
  int32_t vocab;
};

static int die(const char *what, llb_status st) {
  fprintf(stderr, "%s: %s (%s)\n", what, llb_strerror(st), llb_err_last());
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The first `context` tokens of sequences [0, n_seqs), each from an empty cache in steps of
 * at most BENCH_PROMPT_STEP_TOKENS tokens. */
static llb_status bench_prompts(struct bench *b, int32_t n_seqs, int32_t context, const int32_t *const *seq_ids) {
  for (int32_t q = 0; q < n_seqs; q++) {
    llb_status st = llama_session_truncate(b->s, q, 0);
    for (int32_t p = 0; p < context && !st; p += BENCH_PROMPT_STEP_TOKENS) {
      const int32_t len = context - p < BENCH_PROMPT_STEP_TOKENS ? context - p : BENCH_PROMPT_STEP_TOKENS;
      st = llama_session_feed(b->s, q, seq_ids[q] + p, len, 0, 0, NULL, NULL);
    }
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
  if (n_prompt + GEN > (int64_t)(sizeof(seq) / sizeof(seq[0]))) goto done;
  memcpy(seq, prompt, (size_t)n_prompt * sizeof(int32_t));
  char out[1024] = "";
  size_t out_len = 0;
  int32_t n = (int32_t)n_prompt;
  float *logits = NULL;
  if ((st = llama_session_truncate(b->s, 0, 0)) != LLB_STATUS_OK ||
      (st = llama_session_eval(b->s, 0, seq, n, &logits)) != LLB_STATUS_OK) {
    die("prefill", st);
    goto done;
  }
  for (int g = 0; g < GEN; g++) {
    const int32_t next = argmax(logits, b->vocab);
    if (tokenizer_is_eog(tok, next)) break;
    const int64_t pl = tokenizer_token_to_piece(tok, next, false, out + out_len, sizeof(out) - 1 - out_len);
    if (pl > 0 && out_len + (size_t)pl < sizeof(out)) out_len += (size_t)pl;
    out[out_len] = '\0';
    seq[n] = next;
    if ((st = llama_session_eval(b->s, 0, seq + n, 1, &logits)) != LLB_STATUS_OK) {
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
 * token_embd only when it is also the output, tied), the int8 multiply-adds of the matmuls
 * (output_macs of them the output matrix's), and the K/V bytes of one context position (K and
 * V of every layer in the cache's dtype). */
struct token_cost {
  double weight_bytes, matmul_macs, output_macs, kv_bytes_per_pos;
};

static struct token_cost token_cost_of(const struct gguf_file *f, const struct llama_config *c,
                                        enum backend_kv_dtype kv_dtype) {
  struct token_cost tc = {0};
  const bool tied = gguf_find_tensor(f, "output.weight") == NULL;
  for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
    const struct gguf_tensor *t = gguf_tensor_at(f, i);
    if (t->n_dims < 2 || (!tied && strcmp(t->name, "token_embd.weight") == 0)) continue;
    const double macs = (double)t->ne[0] * (double)t->ne[1];
    tc.weight_bytes += (double)t->size_bytes;
    tc.matmul_macs += macs;
    if (strcmp(t->name, tied ? "token_embd.weight" : "output.weight") == 0) tc.output_macs = macs;
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

/* --roofline's bound for each decode run, read in the DRAM state it ran in: the fastest of this
 * many read runs of the same threads taken right before the run, and right after the last. */
#define BENCH_PAIRED_READS 3

/* The fastest of BENCH_PAIRED_READS read runs, bytes/s (0 if none ran). Sleeps 3 ms first so
 * that the forward pool's idle worker (which spins up to 2 ms after a step) is off the core
 * the read's threads need. */
static double paired_read(struct roofline_reader *rd) {
  const struct timespec pause = {0, 3000000};
  nanosleep(&pause, NULL);
  double best = 0;
  for (int i = 0; i < BENCH_PAIRED_READS; i++) {
    const double r = roofline_reader_run(rd, NULL);
    if (r > best) best = r;
  }
  return best;
}

/* Prints the decode runs' median fraction of their paired reads: run r (rates v[0, runs)) against
 * the faster of reads[r] (before it) and reads[r + 1] (after it), `bytes` a token. */
static void report_paired(const double *v, const double *reads, int runs, double bytes) {
  double f[BENCH_MAX_RUNS], lo = 0, hi = 0;
  for (int r = 0; r < runs; r++) {
    const double bound = reads[r] > reads[r + 1] ? reads[r] : reads[r + 1];
    f[r] = roofline_fraction(v[r], bytes, bound);
    lo = r == 0 || bound < lo ? bound : lo;
    hi = bound > hi ? bound : hi;
  }
  qsort(f, (size_t)runs, sizeof(double), cmp_double);
  printf("%-14s %9.2f of the DRAM read rate beside it (median of %d runs, each against the fastest of %d reads "
         "before and %d after it: %.1f-%.1f GB/s)\n", "", f[runs / 2], runs, BENCH_PAIRED_READS, BENCH_PAIRED_READS,
         lo / 1e9, hi / 1e9);
}

int kernel_bench_run(const struct kernel_bench_options *o) {
  if (o->kernel_only.type)
    return o->kernel_only.stream ? kernel_stream_run(&o->kernel_only, o->threads) : kernel_only_run(&o->kernel_only);
  if (o->fit_path && o->fit_steps_path) return kernel_fit_steps_run(o);
  if (o->fit_path) return o->model && o->threads >= 1 && o->runs >= 1 ? kernel_fit_run(o) : 2;
  if (o->lora_adapters > 0) return kernel_lora_run(o);
  if (o->sampler) return kernel_sampler_run(o);
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
  int32_t max_batch = 1; /* KV blocks for the largest batch run, not for every size allowed */
  for (int i = 0; i < n_batches; i++)
    if (batches[i] > max_batch) max_batch = batches[i];
  enum backend_kv_dtype kv_dtype = BACKEND_KV_DTYPE_F16;
  if (o->kv_cache_dtype && (st = llama_kv_dtype_parse(o->kv_cache_dtype, &kv_dtype)) != LLB_STATUS_OK) {
    fprintf(stderr, "llmbus-kernel-bench: %s\n", llb_err_last());
    return 2;
  }
  struct llama_session_options so = {
      .max_context = longest, .max_seqs = max_batch, .max_logits = max_batch, .kv_dtype = kv_dtype,
      .forward = {.max_num_tokens = BENCH_PROMPT_STEP_TOKENS > longest ? BENCH_PROMPT_STEP_TOKENS : longest,
                  .n_threads = threads, .n_threads_decode = o->decode_threads,
                  .packed_cache_dir = packed_cache_dir}};
  static struct kernel_optimes optimes; /* --op-times: the forward's eval callback times into it */
  if (o->op_times) {
    if ((st = kernel_optimes_init(&optimes, runs * n_decode)) != LLB_STATUS_OK) return die("op times", st);
    so.forward.eval_cb = kernel_optimes_cb, so.forward.eval_user = &optimes;
  }
  if ((st = llama_session_create(b.m, &so, &b.s)) != LLB_STATUS_OK) return die("session", st);
  if (kv_dtype != BACKEND_KV_DTYPE_F16) printf("kv cache: %s\n", llama_kv_dtype_name(kv_dtype));
  if (packed_cache_dir)
    printf("packed weights: %s\n", llama_forward_ctx_packed_shared(llama_session_forward(b.s)) ? "shared cache file"
                                                                                               : "private");
  int32_t *tokens = malloc((size_t)BENCH_MAX_BATCH * (size_t)longest * sizeof(int32_t));
  const int32_t **seq_ids = malloc(BENCH_MAX_BATCH * sizeof(*seq_ids));
  /* [n_decode, max_batch]: decode step i's token of each sequence, gathered before the timing */
  int32_t *step_tokens = malloc((size_t)n_decode * (size_t)max_batch * sizeof(int32_t));
  if (!tokens || !seq_ids || !step_tokens) return die("bench buffers", LLB_STATUS_OUT_OF_MEMORY);
  for (int64_t i = 0; i < (int64_t)BENCH_MAX_BATCH * longest; i++) tokens[i] = (int32_t)((i * 7919 + 13) % b.vocab);
  for (int s = 0; s < BENCH_MAX_BATCH; s++) seq_ids[s] = tokens + (int64_t)s * longest;

  printf("model %s\nthreads %d (decode steps of <= %d rows: %d), runs %d, decode prefetch %d bytes ahead\n", model,
         threads, LLAMA_DECODE_MAX_TOKENS, o->decode_threads > 0 && o->decode_threads < threads ? o->decode_threads : threads,
         runs, cpu_decode_prefetch_bytes());
  struct roofline rl = {0};
  const struct token_cost tcost = token_cost_of(b.f, cfg, kv_dtype);
  if (roofline) {
    if ((st = roofline_measure(threads, &rl)) != LLB_STATUS_OK) return die("roofline", st);
    printf("roofline: DRAM read %.1f GB/s, int8 peak %.1f GOPS (%s), %d threads; a token reads %.1f MB of "
           "matrices and does %.1f M int8 multiply-adds\n", rl.read_bytes_per_s / 1e9, rl.int8_ops_per_s / 1e9,
           rl.int8_path, threads, tcost.weight_bytes / 1e6, tcost.matmul_macs / 1e6);
    printf("roofline: DRAM read runs: fastest %.1f (the bound), median %.1f, slowest %.1f GB/s of %d runs of %.0f MiB\n",
           rl.read_bytes_per_s / 1e9, rl.read_median_bytes_per_s / 1e9, rl.read_worst_bytes_per_s / 1e9, rl.read_runs,
           (double)rl.read_buffer_bytes / (1 << 20));
    printf("roofline: how the bound was taken: the threads ran together (each on a vCPU >= 95%% of the run) in %d of "
           "%d runs, fastest of those %.1f GB/s; 1 thread alone (runs interleaved) fastest %.1f GB/s; host steal %.1f%% "
           "of the vCPUs' time\n", rl.read_together_runs, rl.read_runs, rl.read_together_bytes_per_s / 1e9,
           rl.read_one_thread_bytes_per_s / 1e9, rl.read_steal_share * 100);
    if (rl.int8_widened_ops_per_s > 0)
      printf("roofline: avx2 int8 widened at every step (vpmaddubsw + vpmaddwd + vpaddd, ggml's AVX2 dot): "
             "%.1f GOPS\n", rl.int8_widened_ops_per_s / 1e9);
    if (rl.int8_amx_ops_per_s > 0)
      printf("roofline: amx int8 tiles (tdpbusd): %.1f GOPS, %.1fx the int8 peak above; llmbus's kernels do not "
             "use AMX\n", rl.int8_amx_ops_per_s / 1e9, rl.int8_amx_ops_per_s / rl.int8_ops_per_s);
  }
  struct roofline_reader *rd = NULL; /* reads paired with the decode runs */
  if (roofline && n_batches > 0 && (st = roofline_reader_open(threads, &rd)) != LLB_STATUS_OK)
    return die("roofline reader", st);
  int rc = 0;
  if (check) rc = run_check(&b);

  double v[BENCH_MAX_RUNS], c[BENCH_MAX_RUNS];
  if (n_prefill > 0) {
    for (int r = 0; r <= runs; r++) { /* run 0 warms caches and is not counted */
      float *logits = NULL; /* one step of n_prefill rows (<= the step size), the last row's logits */
      if ((st = llama_session_truncate(b.s, 0, 0)) != LLB_STATUS_OK) return die("prefill", st);
      const int64_t t0 = llb_now_ns(), c0 = cpu_ns();
      if ((st = llama_session_eval(b.s, 0, seq_ids[0], n_prefill, &logits)) != LLB_STATUS_OK)
        return die("prefill", st);
      const double s = (double)(llb_now_ns() - t0) * 1e-9;
      if (r > 0) v[r - 1] = n_prefill / s, c[r - 1] = (double)(cpu_ns() - c0) * 1e-6 / n_prefill;
    }
    char what[32];
    snprintf(what, sizeof(what), "prefill %d", n_prefill);
    report(what, v, c, runs);
    if (roofline) {
      /* the CPU-time figure holds on a loaded machine: the peak per thread over CPU s a token.
       * A prefill step computes the logits of its last row only (as llama-bench's pp): the
       * output matrix's multiply-adds count once a step, not once a token */
      const double ops = 2.0 * (tcost.matmul_macs - tcost.output_macs + tcost.output_macs / n_prefill),
                   per_thread = rl.int8_ops_per_s / threads;
      printf("%-14s %9.2f of the int8 peak (%.1f M int ops a token: the layers' matmuls, the output's for the "
             "last row only; attention in float not counted; %.2f by CPU time)\n", "",
             roofline_fraction(v[runs / 2], ops, rl.int8_ops_per_s), ops / 1e6,
             roofline_fraction(1e3 / c[runs / 2], ops, per_thread));
      if (rl.int8_widened_ops_per_s > 0)
        printf("%-14s %9.2f of the widened-step int8 rate\n", "",
               roofline_fraction(v[runs / 2], ops, rl.int8_widened_ops_per_s));
      if (rl.int8_amx_ops_per_s > 0)
        printf("%-14s %9.2f of the AMX int8 peak\n", "", roofline_fraction(v[runs / 2], ops, rl.int8_amx_ops_per_s));
    }
  }
  for (int bi = 0; bi < n_batches; bi++) {
    const int32_t B = batches[bi];
    /* the prompts once: each run decodes from position `context` again, over the same slots,
     * so the prompts' K/V stay as they were (long contexts at batch 16 cost minutes to fill) */
    if ((st = bench_prompts(&b, B, context, seq_ids)) != LLB_STATUS_OK) return die("prompt", st);
    for (int i = 0; i < n_decode; i++)
      for (int32_t q = 0; q < B; q++) step_tokens[(int64_t)i * B + q] = seq_ids[q][context + i];
    kernel_optimes_reset(&optimes);
    double reads[BENCH_MAX_RUNS + 1]; /* reads[r - 1]: before run r; reads[runs]: after the last */
    for (int r = 0; r <= runs; r++) {
      if (rd && r > 0) reads[r - 1] = paired_read(rd);
      for (int32_t q = 0; q < B; q++)
        if ((st = llama_session_truncate(b.s, q, context)) != LLB_STATUS_OK) return die("decode", st);
      float *logits = NULL;
      const int64_t t0 = llb_now_ns(), c0 = cpu_ns();
      for (int i = 0; i < n_decode; i++) {
        if (o->op_times && r > 0) kernel_optimes_step_begin(&optimes);
        if ((st = llama_session_decode_batch(b.s, 0, B, step_tokens + (int64_t)i * B, &logits)) != LLB_STATUS_OK)
          return die("decode", st);
        if (o->op_times && r > 0) kernel_optimes_step_end(&optimes);
      }
      const double s = (double)(llb_now_ns() - t0) * 1e-9;
      if (r > 0) v[r - 1] = (double)B * n_decode / s, c[r - 1] = (double)(cpu_ns() - c0) * 1e-6 / ((double)B * n_decode);
    }
    if (rd) reads[runs] = paired_read(rd);
    const double bytes = tcost.weight_bytes / B + tcost.kv_bytes_per_pos * (context + n_decode / 2.0);
    double unsorted[BENCH_MAX_RUNS];
    memcpy(unsorted, v, (size_t)runs * sizeof(double));
    char what[32];
    if (context == 16) snprintf(what, sizeof(what), "decode b%d", B);
    else snprintf(what, sizeof(what), "decode b%d c%d", B, context);
    report(what, v, c, runs);
    if (roofline) {
      printf("%-14s %9.2f of the DRAM read bound (%.2f MB a token: matrices / %d + K/V)\n", "",
             roofline_fraction(v[runs / 2], bytes, rl.read_bytes_per_s), bytes / 1e6, B);
      report_paired(unsorted, reads, runs, bytes);
    }
    if (o->op_times) kernel_optimes_print(&optimes, B);
  }

  kernel_optimes_free(&optimes);
  roofline_reader_close(rd);
  free(tokens);
  free(seq_ids);
  free(step_tokens);
  llama_session_destroy(b.s);
  llama_model_destroy(b.m);
  gguf_close(b.f);
  return rc;
}
