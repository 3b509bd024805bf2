/* `llmbus perplexity --model M --file text.txt [--ctx N]`: perplexity of a text under the
 * model, with llama.cpp's llama-perplexity method (tools/perplexity/perplexity.cpp,
 * perplexity()), so that users can compare files and engines:
 *   - the whole text is tokenized once (BOS first when the vocabulary adds one);
 *   - it is cut into floor(n_tokens / ctx) chunks of ctx tokens; each chunk is evaluated
 *     from an empty cache, its first token replaced by BOS when the vocabulary adds one;
 *   - only the second half of each chunk is scored: the logits of positions
 *     [ctx/2, ctx - 1) predict tokens [ctx/2 + 1, ctx), so every scored token has at least
 *     ctx/2 tokens of context;
 *   - PPL = exp(mean negative log-likelihood), printed per chunk as llama.cpp does ("[1]x,[2]y")
 *     and at the end with its standard error (llama.cpp's estimate, from the NLL variance).
 * --numerics ggml runs llama.cpp's own CPU arithmetic (LLAMA_MATMUL_GGML and its attention
 * order), the default the engine's packed one. --json prints one JSON object at the end. No bus, one process.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/progress.h"
#include "cmd/client/commands.h"
#include "cmd/client/perplexity_kld.h"
#include "cmd/flags/flags.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/forward/session.h"
#include "model/tokenizer/tokenizer.h"

#define PPL_BATCH 512 /* rows per forward step, as llama-perplexity's default n_batch */

struct ppl_opts {
  const char *model_path, *file, *numerics, *kv_cache_dtype;
  enum backend_kv_dtype kv_dtype;
  const char *kl_base; /* --kl-divergence-base FILE */
  int32_t ctx, threads, max_chunks;
  bool json, kl, ctx_given; /* kl: compare against kl_base instead of writing it */
};

static llb_status set_positive(const struct flag *f, const char *v) {
  int64_t n;
  llb_status st = flags_parse_int64(v, 1, 1 << 20, &n);
  if (!st) *(int32_t *)f->target = (int32_t)n;
  return st;
}

static llb_status set_kl_base(const struct flag *f, const char *v) { /* --kl-base: both options */
  struct ppl_opts *o = f->target;
  o->kl_base = v;
  o->kl |= !strcmp(f->name, "kl-base");
  return LLB_STATUS_OK;
}

static llb_status set_ctx(const struct flag *f, const char *v) {
  struct ppl_opts *o = f->target;
  struct flag g = *f;
  g.target = &o->ctx;
  o->ctx_given = true;
  return set_positive(&g, v);
}

static const char ppl_usage[] =
    "usage: llmbus perplexity --model M.gguf --file TEXT [flags]\n"
    "Perplexity of TEXT with llama.cpp's llama-perplexity method: chunks of --ctx tokens (default 512),\n"
    "each from an empty cache (BOS first when the vocabulary adds one), the second half of each chunk\n"
    "scored.\n";

/* Returns FLAGS_CONTINUE, 0 after --help, 2 on a usage error; `args` keeps the values. */
static int ppl_parse(int argc, char **argv, struct ppl_opts *o, struct flag_args *args) {
  *o = (struct ppl_opts){.ctx = 512, .threads = 2, .numerics = "packed", .kv_cache_dtype = "auto"};
  const struct flag t[] = {
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &o->model_path, .metavar = "M.gguf",
       .help = "the model (required)"},
      {.name = "file", .short_name = 'f', .kind = FLAG_KIND_STRING, .target = &o->file, .metavar = "TEXT",
       .help = "the text file (required but with --kl-divergence)"},
      {.name = "ctx", .aliases = "ctx-size", .short_name = 'c', .kind = FLAG_KIND_INT32, .target = o, .metavar = "N",
       .set = set_ctx, .help = "tokens per chunk (default 512, at least 4)"},
      {.name = "chunks", .kind = FLAG_KIND_INT32, .target = &o->max_chunks, .metavar = "N", .set = set_positive,
       .help = "score the first N chunks only (default: all)"},
      {.name = "threads", .short_name = 't', .kind = FLAG_KIND_INT32, .target = &o->threads, .metavar = "N",
       .set = set_positive, .help = "forward-pass threads (default 2)"},
      {.name = "numerics", .kind = FLAG_KIND_STRING, .target = &o->numerics, .metavar = "packed|ggml",
       .help = "packed (the engine's) or ggml (llama.cpp's CPU arithmetic)"},
      {.name = "kv-cache-dtype", .kind = FLAG_KIND_STRING, .target = &o->kv_cache_dtype, .metavar = "auto|fp16|fp8|q8_0",
       .help = "the KV cache's element type (the worker's flag): what a quantized cache costs in perplexity"},
      {.name = "json", .kind = FLAG_KIND_BOOL, .target = &o->json,
       .help = "one JSON object at the end: ppl, its standard error, chunks, tokens"},
      {.name = "kl-divergence-base", .kind = FLAG_KIND_STRING, .target = o, .metavar = "FILE", .set = set_kl_base,
       .help = "save every scored row's log-probabilities to FILE in llama-perplexity's format (the base of a "
               "later comparison)"},
      {.name = "kl-divergence", .kind = FLAG_KIND_BOOL, .target = &o->kl,
       .help = "compare with the base FILE instead (its tokens and --ctx; --file is not needed): PPL of both, KL "
               "divergence, same top token, delta p"},
      {.name = "kl-base", .kind = FLAG_KIND_STRING, .target = o, .metavar = "FILE", .set = set_kl_base,
       .help = "both of the above; either engine may have written FILE"},
  };
  const struct flag_section sec = {"flags", t, (int)(sizeof t / sizeof t[0])};
  const struct flag_command cmd = {.program = "llmbus perplexity", .usage = ppl_usage, .sections = &sec,
                                   .num_sections = 1, .max_positional = 0};
  int rc = flags_parse(&cmd, argc, argv, args);
  if (rc != FLAGS_CONTINUE) return rc;
  if (o->kl && !o->kl_base) return flags_usage_error(&cmd, "--kl-divergence needs --kl-divergence-base FILE");
  if (!o->model_path || (!o->file && !o->kl)) return flags_usage_error(&cmd, "--model and --file are required");
  if (llama_kv_dtype_parse(o->kv_cache_dtype, &o->kv_dtype) != LLB_STATUS_OK)
    return flags_usage_error(&cmd, "%s", llb_err_last());
  if (strcmp(o->numerics, "packed") && strcmp(o->numerics, "ggml"))
    return flags_usage_error(&cmd, "--numerics %s: packed or ggml", o->numerics);
  if (o->ctx < 4) return flags_usage_error(&cmd, "--ctx %d: at least 4", o->ctx);
  return FLAGS_CONTINUE;
}

/* The whole file into a malloc'd buffer (*len bytes). */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 65536 > cap) {
      char *nb = realloc(buf, cap = cap * 2 + 65536);
      if (!nb) break;
      buf = nb;
    }
    const size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  fclose(f);
  *len = n;
  return buf;
}

struct ppl_run {
  struct gguf_file *gguf;
  struct tokenizer *tok;
  struct llama_model *model;
  struct llama_session *session; /* one chunk of ctx tokens, logits of up to PPL_BATCH rows a step */
  int32_t vocab;
};

/* log softmax(row)[target], in double (row [vocab]). */
static double log_prob(const float *row, int32_t vocab, int32_t target) {
  float mx = row[0];
  for (int32_t i = 1; i < vocab; i++) mx = row[i] > mx ? row[i] : mx;
  double sum = 0;
  for (int32_t i = 0; i < vocab; i++) sum += exp((double)row[i] - mx);
  return (double)row[target] - mx - log(sum);
}

/* Where each scored row also goes: the KL-divergence base file being written (out), or the
 * one being compared with (in, stats); neither when plain perplexity. */
struct ppl_sink {
  FILE *out, *in;
  uint16_t *row; /* [kld_row_values] */
  struct kld_stats *stats;
};

/* The scored row `logits` (predicting `tok`) into the sink. IO / MALFORMED on file errors. */
static llb_status sink_row(struct ppl_sink *k, const float *logits, int32_t vocab, int32_t tok) {
  const size_t nv = (size_t)kld_row_values(vocab);
  if (k->out) {
    kld_quantize_row(logits, vocab, k->row);
    if (fwrite(k->row, sizeof *k->row, nv, k->out) != nv) return LLB_ERRF(LLB_STATUS_IO, "writing the base file");
  } else if (k->in) {
    if (fread(k->row, sizeof *k->row, nv, k->in) != nv) return LLB_ERRF(LLB_STATUS_MALFORMED, "base file truncated");
    kld_add_row(k->stats, logits, vocab, k->row, tok);
  }
  return LLB_STATUS_OK;
}

/* The scoring of one chunk: its ids, the running sums and the sink. */
struct ppl_chunk {
  const int32_t *ids;
  int32_t vocab;
  double *nll, *nll2;
  int64_t *count;
  struct ppl_sink *sink;
};

/* llama_session_logits_fn: rows [count, vocab] predict ids[first + 1 ..]. */
static llb_status score_rows(void *user, int32_t first, int32_t count, const float *rows) {
  struct ppl_chunk *c = user;
  for (int32_t l = 0; l < count; l++) {
    const int32_t pos = first + l;
    const float *row = rows + (int64_t)l * c->vocab;
    const double v = -log_prob(row, c->vocab, c->ids[pos + 1]);
    *c->nll += v, *c->nll2 += v * v, (*c->count)++;
    llb_status st = sink_row(c->sink, row, c->vocab, c->ids[pos + 1]);
    if (st) return st;
  }
  return LLB_STATUS_OK;
}

/* Evaluates one chunk (ids [ctx], its first token already BOS when wanted) from an empty cache
 * in steps of PPL_BATCH rows and adds the NLL of tokens [ctx/2 + 1, ctx) to *nll and *nll2
 * (squares), *count: the rows of positions [ctx/2, ctx - 1) predict them. Each scored row also
 * goes to the sink. */
static llb_status eval_chunk(struct ppl_run *r, const int32_t *ids, int32_t ctx, double *nll, double *nll2,
                             int64_t *count, struct ppl_sink *sink) {
  struct ppl_chunk c = {ids, r->vocab, nll, nll2, count, sink};
  llb_status st = llama_session_truncate(r->session, 0, 0);
  return st ? st : llama_session_feed(r->session, 0, ids, ctx, ctx / 2, ctx - 1, score_rows, &c);
}

static void run_free(struct ppl_run *r) {
  llama_session_destroy(r->session);
  llama_model_destroy(r->model);
  tokenizer_destroy(r->tok);
  gguf_close(r->gguf);
}

static llb_status run_setup(struct ppl_run *r, const struct ppl_opts *o) {
  llb_status st = gguf_open(o->model_path, &r->gguf);
  if (!st) st = tokenizer_load(r->gguf, &r->tok);
  if (!st) st = llama_model_load(r->gguf, &r->model);
  if (st) return st;
  r->vocab = llama_model_config(r->model)->vocab_size;
  const int32_t step = o->ctx < PPL_BATCH ? o->ctx : PPL_BATCH;
  const bool ggml = strcmp(o->numerics, "ggml") == 0;
  const struct llama_session_options so = {
      .max_context = o->ctx, .max_logits = step, .kv_dtype = o->kv_dtype,
      .forward = {.max_num_tokens = step, .n_threads = o->threads,
                  .max_model_len = o->ctx, /* llama-perplexity's n_ctx: picks phi3 LongRoPE's factor set */
                  .matmul = ggml ? LLAMA_MATMUL_GGML : LLAMA_MATMUL_PACKED,
                  /* ggml: llama.cpp's attention order too (one sequence: batch invariance is moot here) */
                  .attention_order = ggml ? LLAMA_ATTENTION_ORDER_LLAMACPP : LLAMA_ATTENTION_ORDER_BATCH_INVARIANT}};
  return llama_session_create(r->model, &so, &r->session);
}

static void print_result(const struct ppl_opts *o, int32_t chunks, int64_t count, double nll, double nll2,
                         int64_t n_tokens) {
  const double mean = nll / (double)count, ppl = exp(mean);
  /* llama.cpp: the standard error of the mean NLL, carried to PPL by its derivative */
  const double var = nll2 / (double)count - mean * mean;
  const double err = count > 1 && var > 0 ? ppl * sqrt(var / (double)(count - 1)) : 0.0;
  if (o->json) {
    json_t *j = json_pack("{s:f, s:f, s:i, s:I, s:I, s:i, s:s, s:s, s:s}", "ppl", ppl, "ppl_stderr", err, "chunks",
                          chunks, "tokens_scored", (json_int_t)count, "tokens", (json_int_t)n_tokens, "ctx", o->ctx,
                          "numerics", o->numerics, "kv_cache_dtype", llama_kv_dtype_name(o->kv_dtype), "model",
                          o->model_path);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
  } else {
    printf("\nFinal estimate: PPL = %.4f +/- %.5f (%d chunks of %d tokens, %lld scored, numerics %s, kv cache %s)\n",
           ppl, err, chunks, o->ctx, (long long)count, o->numerics, llama_kv_dtype_name(o->kv_dtype));
  }
}

/* The tokens to score: the text's (tokenized), or with --kl-divergence the base file's, whose
 * header also fixes --ctx (it is read before the model is set up). *ids is malloc'd. */
static llb_status load_tokens(struct ppl_opts *o, const struct ppl_run *r, FILE *base_in, int32_t **ids, int64_t *n,
                              int32_t *file_vocab) {
  if (base_in) {
    int32_t ctx, chunks;
    llb_status st = kld_read_header(base_in, &ctx, file_vocab, &chunks, ids);
    if (st) return st;
    if (o->ctx_given && o->ctx != ctx) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--ctx %d, but the base file was made with %d", o->ctx, ctx);
    o->ctx = ctx;
    *n = (int64_t)chunks * ctx;
    return LLB_STATUS_OK;
  }
  size_t len = 0;
  char *text = read_file(o->file, &len);
  if (!text) return LLB_ERRF(LLB_STATUS_IO, "cannot read %s", o->file);
  llb_status st = tokenizer_encode(r->tok, text, len, true, false, ids, n);
  free(text);
  if (!st && *n < 2 * (int64_t)o->ctx) /* llama-perplexity's own minimum */
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%lld tokens: at least 2 x --ctx (%d) are needed", (long long)*n, o->ctx);
  return st;
}

/* Scores `chunks` chunks of ids into nll / nll2 / count (and the sink), printing the running
 * PPL per chunk unless --json. */
static llb_status score(struct ppl_run *r, const struct ppl_opts *o, int32_t *ids, int32_t chunks, struct ppl_sink *sink,
                        double *nll, double *nll2, int64_t *count) {
  const bool add_bos = tokenizer_add_bos(r->tok) && tokenizer_bos_id(r->tok) >= 0;
  llb_status st = LLB_STATUS_OK;
  struct llb_progress progress; /* on stderr when it is a terminal (base/progress.h) */
  llb_progress_begin(&progress, "perplexity", chunks, "chunks");
  for (int32_t c = 0; c < chunks && !st; c++) {
    int32_t *chunk = ids + (int64_t)c * o->ctx;
    const int32_t saved = chunk[0];
    if (add_bos) chunk[0] = tokenizer_bos_id(r->tok); /* llama.cpp: BOS replaces the chunk's first token */
    st = eval_chunk(r, chunk, o->ctx, nll, nll2, count, sink);
    chunk[0] = saved;
    const bool values_on_terminal = !o->json && isatty(STDOUT_FILENO);
    if (c == 0 && values_on_terminal && progress.tty && chunks > 1) { /* llama-perplexity's ETA line */
      const double s = (double)(llb_now_ns() - progress.start_ns) / 1e9;
      fprintf(stderr, "perplexity: %.2f seconds per chunk - ETA %.2f minutes\n", s, s * (chunks - 1) / 60.0);
    }
    if (!o->json && !st) {
      printf("[%d]%.4f,", c + 1, exp(*nll / (double)*count));
      fflush(stdout);
    }
    if (!values_on_terminal) llb_progress_update(&progress, c + 1); /* a line of its own: stdout is elsewhere */
  }
  llb_progress_end(&progress);
  return st;
}

int cmd_perplexity(int argc, char **argv) {
  struct ppl_opts o;
  struct flag_args args;
  int rc = ppl_parse(argc, argv, &o, &args);
  if (rc != FLAGS_CONTINUE) {
    flag_args_free(&args);
    return rc;
  }
  struct ppl_run r = {0};
  struct ppl_sink sink = {0};
  struct kld_stats stats = {0};
  int32_t *ids = NULL, file_vocab = 0;
  int64_t n = 0;
  rc = 1;
  llb_status st = LLB_STATUS_OK;
  if (o.kl && !(sink.in = fopen(o.kl_base, "rb"))) st = LLB_ERRF(LLB_STATUS_IO, "cannot open %s", o.kl_base);
  if (!st && sink.in) st = load_tokens(&o, &r, sink.in, &ids, &n, &file_vocab); /* fixes o.ctx first */
  if (!st) st = run_setup(&r, &o);
  if (!st && !sink.in) st = load_tokens(&o, &r, NULL, &ids, &n, &file_vocab);
  if (!st && sink.in && file_vocab != r.vocab)
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "the base file has %d vocabulary entries, the model %d", file_vocab, r.vocab);
  int32_t chunks = (int32_t)(n / (o.ctx ? o.ctx : 1));
  if (o.max_chunks > 0 && chunks > o.max_chunks) chunks = o.max_chunks;
  if (!st && o.kl_base && !o.kl) {
    if (!(sink.out = fopen(o.kl_base, "wb"))) st = LLB_ERRF(LLB_STATUS_IO, "cannot create %s", o.kl_base);
    else st = kld_write_header(sink.out, o.ctx, r.vocab, chunks, ids);
  }
  if (!st && o.kl_base) {
    sink.row = malloc((size_t)kld_row_values(r.vocab) * sizeof *sink.row);
    stats.capacity = (int64_t)chunks * (o.ctx - 1 - o.ctx / 2);
    stats.kld_values = malloc((size_t)(stats.capacity > 0 ? stats.capacity : 1) * sizeof *stats.kld_values);
    sink.stats = &stats;
    if (!sink.row || !stats.kld_values) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "KL-divergence buffers");
  }
  if (st) {
    fprintf(stderr, "llmbus perplexity: %s\n", llb_err_last_where());
    goto done;
  }
  if (!o.json) fprintf(stderr, "perplexity: %lld tokens, %d chunks of %d, numerics %s\n", (long long)n, chunks, o.ctx, o.numerics);
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  if ((st = score(&r, &o, ids, chunks, &sink, &nll, &nll2, &count))) {
    fprintf(stderr, "llmbus perplexity: %s\n", llb_err_last_where());
    goto done;
  }
  if (sink.in) kld_print(&stats, o.json);
  else print_result(&o, chunks, count, nll, nll2, n);
  rc = 0;
done:
  if (sink.out && fclose(sink.out) != 0 && rc == 0) {
    fprintf(stderr, "llmbus perplexity: writing %s failed\n", o.kl_base);
    rc = 1;
  }
  if (sink.in) fclose(sink.in);
  free(sink.row);
  free(stats.kld_values);
  free(ids);
  run_free(&r);
  flag_args_free(&args);
  return rc;
}
