/* llmbus-kernel-bench --fit FILE (kernel_fit.h): the step-time model of the worker's --device sim
 * (actors/gpu_worker/runner_sim.h), fitted to this machine's real forward.
 *
 * Times llama_forward on the steps a served engine runs: prompts of 8..512 tokens, prompt
 * chunks after a context, decode batches of 1..64 sequences at contexts of 16..1024 tokens,
 * and mixed steps (a chunk beside decodes, as chunked prefill schedules them); each the least
 * of --runs rounds after one untimed warm-up (with --threads 1 the forward thread's CPU time,
 * which other work on a shared machine does not inflate). The sampler's cost per row (its CPU
 * time) is measured apart on
 * real logits, greedy and at temperature 1, and added to each step's rows as the worker pays it
 * (greedy, the benchmarks' default; random_row_s is the extra of a row sampled at a
 * temperature). The K/V cache is left as zeros: attention's time does not depend on what the
 * cache holds, so no step needs its prompt computed first. The fit (sim_cost_fit) minimizes
 * the relative error; the table of measured against modelled steps goes to stdout, the model
 * to FILE as JSON.
 */
#include "cmd/bench/kernel_fit.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/gpu_worker/runner_sim.h"
#include "base/log.h"
#include "base/status.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/sampling/sampler.h"

enum { FIT_BLOCK = 16, FIT_MAX_SEQS = 65, FIT_MAX_RUNS = 64 };

/* One step: an optional prompt chunk (chunk_len tokens from chunk_start; it samples when it
 * ends the prompt) beside `decodes` sequences of one token at position decode_ctx. */
struct fit_shape {
  int32_t chunk_len, chunk_start;
  bool chunk_samples;
  int32_t decodes, decode_ctx;
};

static const struct fit_shape fit_shapes[] = {
    /* prompts, whole */
    {8, 0, true, 0, 0}, {32, 0, true, 0, 0}, {64, 0, true, 0, 0}, {128, 0, true, 0, 0},
    {256, 0, true, 0, 0}, {512, 0, true, 0, 0},
    /* prompt chunks after a context (chunked prefill, a prefix-cache hit) */
    {256, 256, false, 0, 0}, {128, 768, true, 0, 0}, {32, 1024, true, 0, 0},
    /* decode batches */
    {0, 0, false, 1, 16}, {0, 0, false, 2, 16}, {0, 0, false, 4, 16}, {0, 0, false, 8, 16},
    {0, 0, false, 16, 16}, {0, 0, false, 32, 16}, {0, 0, false, 64, 128},
    {0, 0, false, 1, 512}, {0, 0, false, 4, 512}, {0, 0, false, 16, 512}, {0, 0, false, 32, 256},
    {0, 0, false, 8, 1024}, {0, 0, false, 1, 2048},
    /* mixed: a chunk beside decodes */
    {128, 0, true, 16, 256}, {224, 0, true, 32, 128}, {64, 512, false, 8, 512}, {32, 0, true, 31, 200},
};
#define NUM_FIT_SHAPES (int)(sizeof fit_shapes / sizeof fit_shapes[0])

struct fit_ctx {
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_forward_ctx *fc;
  struct llama_kv_cache *kv;
  int32_t vocab, max_tokens, num_blocks, max_blocks_per_seq;
  int32_t *ids, *pos, *qsl, *lens, *tables, *li; /* step arrays */
  int64_t *slots;
  float *logits; /* [FIT_MAX_SEQS, vocab] */
};

static int fail(const char *what, llb_status st) {
  fprintf(stderr, "llmbus-kernel-bench --fit: %s: %s (%s)\n", what, llb_strerror(st), llb_err_last());
  return 1;
}

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sequence s's rows [start, start + len): token ids, positions, slots in its own blocks. */
static void fill_seq(struct fit_ctx *c, int32_t s, int32_t start, int32_t len, int32_t *n) {
  const int32_t *table = c->tables + (int64_t)s * c->max_blocks_per_seq;
  for (int32_t r = 0; r < len; r++, (*n)++) {
    const int32_t p = start + r;
    c->ids[*n] = (int32_t)(((int64_t)p * 7919 + s * 31 + 13) % c->vocab);
    c->pos[*n] = p;
    c->slots[*n] = (int64_t)table[p / FIT_BLOCK] * FIT_BLOCK + p % FIT_BLOCK;
  }
  c->qsl[s + 1] = *n;
  c->lens[s] = start + len;
}

/* The batch of shape sh (the chunk is sequence 0 when present); its shape for the model. */
static struct llama_batch fit_batch(struct fit_ctx *c, const struct fit_shape *sh, struct sim_step_shape *shape) {
  int32_t n = 0, s = 0, nl = 0;
  c->qsl[0] = 0;
  if (sh->chunk_len > 0) {
    fill_seq(c, s++, sh->chunk_start, sh->chunk_len, &n);
    if (sh->chunk_samples) c->li[nl++] = n - 1;
  }
  for (int32_t d = 0; d < sh->decodes; d++) {
    fill_seq(c, s++, sh->decode_ctx, 1, &n);
    c->li[nl++] = n - 1;
  }
  const struct llama_batch b = {.num_tokens = n, .token_ids = c->ids, .positions = c->pos, .slot_mapping = c->slots,
                                .num_seqs = s, .query_start_loc = c->qsl, .seq_lens = c->lens,
                                .block_tables = c->tables, .max_blocks_per_seq = c->max_blocks_per_seq,
                                .num_logits = nl, .logits_indices = c->li};
  *shape = sim_step_shape_of(&b);
  return b;
}

/* Seconds of one sampler_sample on a logits row of the model, greedy or at temperature 1: the
 * least of `runs` passes over `rows` rows (each pass samples every row once). */
static double sampler_seconds(struct fit_ctx *c, int32_t rows, bool greedy, int runs) {
  struct sampler *s = NULL;
  if (sampler_create(c->vocab, &s)) return 0.0;
  struct sampler_params p;
  sampler_params_init(&p);
  p.temperature = greedy ? 0.0f : 1.0f;
  p.seed = 7;
  float *row = malloc((size_t)c->vocab * sizeof(float));
  double v[FIT_MAX_RUNS];
  for (int r = 0; r < runs && row; r++) { /* the sampler runs on this thread: its CPU time */
    const int64_t t0 = thread_cpu_ns();
    for (int32_t i = 0; i < rows; i++) {
      memcpy(row, c->logits + (int64_t)i * c->vocab, (size_t)c->vocab * sizeof(float));
      struct sampler_result res;
      (void)sampler_sample(s, &p, row, NULL, 0, NULL, 0, 0, r, &res);
    }
    v[r] = (double)(thread_cpu_ns() - t0) * 1e-9 / rows;
  }
  free(row);
  sampler_destroy(s);
  qsort(v, (size_t)runs, sizeof(double), cmp_double);
  return v[0];
}

static llb_status fit_open(struct fit_ctx *c, const struct kernel_bench_options *o) {
  llb_status st = gguf_open(o->model, &c->f);
  if (!st) st = llama_model_load(c->f, &c->m);
  if (st) return st;
  c->vocab = llama_model_config(c->m)->vocab_size;
  int32_t longest = 0, most_blocks = 0;
  for (int i = 0; i < NUM_FIT_SHAPES; i++) {
    const struct fit_shape *sh = &fit_shapes[i];
    const int32_t chunk_end = sh->chunk_start + sh->chunk_len, dec_end = sh->decode_ctx + 1;
    longest = chunk_end > longest ? chunk_end : longest;
    longest = dec_end > longest ? dec_end : longest;
    const int32_t blocks = (chunk_end + FIT_BLOCK - 1) / FIT_BLOCK + sh->decodes * ((dec_end + FIT_BLOCK - 1) / FIT_BLOCK);
    most_blocks = blocks > most_blocks ? blocks : most_blocks;
  }
  c->max_blocks_per_seq = (longest + FIT_BLOCK - 1) / FIT_BLOCK;
  c->num_blocks = most_blocks; /* each step's sequences take blocks from 0 up: the K/V is never read back */
  c->max_tokens = 1024;
  const struct llama_forward_options fo = {.max_num_tokens = c->max_tokens, .n_threads = o->threads,
                                           .n_threads_decode = o->decode_threads,
                                           .packed_cache_dir = o->packed_cache_dir};
  if ((st = llama_kv_cache_create(c->m, c->num_blocks, FIT_BLOCK, &c->kv))) return st;
  if ((st = llama_forward_ctx_create_opts(c->m, &fo, &c->fc))) return st;
  const size_t T = (size_t)c->max_tokens;
  c->ids = malloc(T * sizeof(int32_t));
  c->pos = malloc(T * sizeof(int32_t));
  c->qsl = malloc((FIT_MAX_SEQS + 1) * sizeof(int32_t));
  c->lens = malloc(FIT_MAX_SEQS * sizeof(int32_t));
  c->li = malloc(FIT_MAX_SEQS * sizeof(int32_t));
  c->slots = malloc(T * sizeof(int64_t));
  c->tables = calloc((size_t)FIT_MAX_SEQS * c->max_blocks_per_seq, sizeof(int32_t));
  c->logits = malloc((size_t)FIT_MAX_SEQS * c->vocab * sizeof(float));
  if (!c->ids || !c->pos || !c->qsl || !c->lens || !c->li || !c->slots || !c->tables || !c->logits)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "fit buffers");
  return LLB_STATUS_OK;
}

/* Sequence s of a step gets blocks from `next` on, as many as its positions need. */
static void fit_tables(struct fit_ctx *c, const struct fit_shape *sh) {
  int32_t next = 0, s = 0;
  const int32_t chunk_blocks = (sh->chunk_start + sh->chunk_len + FIT_BLOCK - 1) / FIT_BLOCK;
  const int32_t dec_blocks = (sh->decode_ctx + 1 + FIT_BLOCK - 1) / FIT_BLOCK;
  for (int32_t k = 0; sh->chunk_len > 0 && k < chunk_blocks; k++) c->tables[k] = next++;
  s += sh->chunk_len > 0;
  for (int32_t d = 0; d < sh->decodes; d++, s++)
    for (int32_t k = 0; k < dec_blocks; k++) c->tables[(int64_t)s * c->max_blocks_per_seq + k] = next++;
}

static void fit_close(struct fit_ctx *c) {
  free(c->ids); free(c->pos); free(c->qsl); free(c->lens); free(c->li); free(c->slots); free(c->tables);
  free(c->logits);
  llama_forward_ctx_destroy(c->fc);
  llama_kv_cache_destroy(c->kv);
  llama_model_destroy(c->m);
  gguf_close(c->f);
}

/* "smollm2-135m-instruct.q4_1" from ".../SmolLM2-135M-Instruct.Q4_1.gguf". */
static void model_name(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(buf, cap, "%s", slash ? slash + 1 : path);
  char *dot = strstr(buf, ".gguf");
  if (dot) *dot = '\0';
  for (char *p = buf; *p; p++)
    if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
}

int kernel_fit_run(const struct kernel_bench_options *o) {
  const int runs = o->runs < FIT_MAX_RUNS ? o->runs : FIT_MAX_RUNS;
  struct fit_ctx c = {0};
  llb_status st = fit_open(&c, o);
  if (st) {
    fit_close(&c);
    return fail(o->model, st);
  }
  struct sim_fit_point pts[NUM_FIT_SHAPES];
  printf("model %s, %d threads (decode steps: %d), the least of %d rounds a step\n", o->model, o->threads,
         o->decode_threads > 0 && o->decode_threads < o->threads ? o->decode_threads : o->threads, runs);
  /* Rounds over every shape, each step's time the least of its rounds: another process taking
   * the cores only ever adds time, so the least is the machine's own (a shared machine's
   * bursts then bias no shape); round 0 warms the caches and is not counted. With one thread
   * the forward runs on this thread alone and its CPU time is the step's time on a core of its
   * own, whatever else the machine runs. */
  const bool cpu_time = o->threads == 1;
  for (int r = 0; r <= runs; r++)
    for (int i = 0; i < NUM_FIT_SHAPES; i++) {
      fit_tables(&c, &fit_shapes[i]);
      const struct llama_batch b = fit_batch(&c, &fit_shapes[i], &pts[i].shape);
      const int64_t t0 = cpu_time ? thread_cpu_ns() : llb_now_ns();
      if ((st = llama_forward(c.fc, c.kv, &b, c.logits))) {
        fit_close(&c);
        return fail("forward", st);
      }
      const double sec = (double)((cpu_time ? thread_cpu_ns() : llb_now_ns()) - t0) * 1e-9;
      if (r == 1 || (r > 1 && sec < pts[i].seconds)) pts[i].seconds = sec;
    }
  const double greedy_s = sampler_seconds(&c, 32, true, runs), random_s = sampler_seconds(&c, 32, false, runs);
  for (int i = 0; i < NUM_FIT_SHAPES; i++) pts[i].seconds += greedy_s * pts[i].shape.num_sampled; /* the worker's greedy rows */
  struct sim_cost_model m = {.random_row_s = random_s > greedy_s ? random_s - greedy_s : 0.0};
  struct sim_fit_quality q;
  char name[96];
  model_name(o->model, name, sizeof name);
  snprintf(m.name, sizeof m.name, "%s cpu %d thread%s", name, o->threads, o->threads == 1 ? "" : "s");
  time_t now = time(NULL);
  struct tm tm;
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&now, &tm));
  double load[3] = {0};
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(la);
  }
  snprintf(m.source, sizeof m.source, "llmbus-kernel-bench --fit --threads %d (%s time), %s, load average %.2f",
           o->threads, cpu_time ? "thread CPU" : "wall", date, load[0]);
  if ((st = sim_cost_fit(pts, NUM_FIT_SHAPES, &m, &q))) {
    fit_close(&c);
    return fail("fit", st);
  }
  printf("sampler per row: greedy %.1f us, temperature 1 %.1f us\n", greedy_s * 1e6, random_s * 1e6);
  printf("%-6s %-6s %-6s %12s %12s %12s %8s\n", "tokens", "seqs", "rows", "attn pairs", "measured ms", "model ms", "error");
  for (int i = 0; i < NUM_FIT_SHAPES; i++) {
    const double p = sim_cost_seconds(&m, &pts[i].shape);
    printf("%-6d %-6d %-6d %12.0f %12.3f %12.3f %+7.1f%%\n", pts[i].shape.num_tokens, pts[i].shape.num_seqs,
           pts[i].shape.num_sampled, pts[i].shape.attention_pairs, pts[i].seconds * 1e3, p * 1e3,
           100.0 * (p / pts[i].seconds - 1.0));
  }
  printf("fit: fixed %.4f ms + %.5f ms a token + %.5f ms a sampled row (+%.5f at a temperature) + %.3f ns an "
         "attended pair + %.3f ns a context token; relative error rms %.1f%%, max %.1f%% over %d steps\n",
         m.fixed_s * 1e3, m.token_s * 1e3, m.sampled_row_s * 1e3, m.random_row_s * 1e3, m.attention_s * 1e9,
         m.context_s * 1e9, 100.0 * q.rms_rel_error, 100.0 * q.max_rel_error, q.num_points);
  st = sim_cost_model_write(o->fit_path, &m, &q);
  fit_close(&c);
  if (st) return fail("write", st);
  printf("wrote %s\n", o->fit_path);
  return 0;
}

/* ---- --fit-steps: the model of a real worker's served steps (--step-log) ---- */

/* A step of the log and its shape class: same tokens, sequences, sampled and random rows,
 * context in the same 256-token bucket, first step after idle or not. */
struct logged_step {
  struct sim_fit_point p;
  int64_t class_key;
};

static int64_t class_key_of(const struct sim_step_shape *s) {
  return (((int64_t)s->num_tokens * 4099 + s->num_seqs) * 4099 + s->num_sampled) * 4099 + s->num_random +
         (int64_t)(s->context_tokens / 256) * 1000003 + (int64_t)s->first * 1000000007;
}

static int cmp_class(const void *a, const void *b) {
  const int64_t x = ((const struct logged_step *)a)->class_key, y = ((const struct logged_step *)b)->class_key;
  return x < y ? -1 : x > y;
}

/* One --step-log line (gpu_worker's log_step) into *s and *sec: the seven fields, then "}" (a
 * log written before "first", read as 0) or ,"first":0} / ,"first":1}, then the end of the
 * line. False for anything else, or a step without tokens or time. */
static bool step_line_parse(const char *line, struct sim_step_shape *s, double *sec) {
  int end = -1;
  if (sscanf(line, "{\"tokens\":%d,\"seqs\":%d,\"sampled\":%d,\"random\":%d,\"attention_pairs\":%lf,"
                   "\"context_tokens\":%lf,\"seconds\":%lf%n",
             &s->num_tokens, &s->num_seqs, &s->num_sampled, &s->num_random, &s->attention_pairs,
             &s->context_tokens, sec, &end) != 7 || end < 0)
    return false;
  const char *rest = line + end;
  if (strncmp(rest, ",\"first\":0}", 11) == 0 || strncmp(rest, ",\"first\":1}", 11) == 0) {
    s->first = rest[9] - '0';
    rest += 11;
  } else if (*rest == '}') {
    s->first = 0;
    rest += 1;
  } else {
    return false;
  }
  if (*rest == '\r') rest++;
  if (*rest == '\n') rest++;
  return *rest == '\0' && *sec > 0 && isfinite(*sec) && s->num_tokens >= 1 && s->num_seqs >= 0 &&
         s->num_sampled >= 0 && s->num_random >= 0 && isfinite(s->attention_pairs) && s->attention_pairs >= 0 &&
         isfinite(s->context_tokens) && s->context_tokens >= 0;
}

/* The steps of a --step-log file into *out (grown); how many, or -1 (printed). */
static int64_t read_step_log(const char *path, struct logged_step **out) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "llmbus-kernel-bench --fit-steps: %s: cannot open\n", path);
    return -1;
  }
  char line[512];
  int64_t n = 0, cap = 0, refused = 0;
  while (fgets(line, sizeof line, f)) {
    struct sim_step_shape s = {0};
    double sec = 0;
    if (!step_line_parse(line, &s, &sec)) {
      refused += strncmp(line, "{\"tokens\":", 10) == 0; /* a step line, malformed */
      continue;
    }
    if (n == cap) {
      struct logged_step *q = realloc(*out, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof *q);
      if (!q) {
        fclose(f);
        fprintf(stderr, "llmbus-kernel-bench --fit-steps: out of memory\n");
        return -1;
      }
      *out = q;
    }
    (*out)[n++] = (struct logged_step){.p = {.shape = s, .seconds = sec}, .class_key = class_key_of(&s)};
  }
  fclose(f);
  if (refused)
    fprintf(stderr, "llmbus-kernel-bench --fit-steps: %s: %" PRId64 " malformed step lines left out\n", path, refused);
  return n;
}

/* Each step's weight: 1 / the mean time of its shape class. The fit then minimizes the steps'
 * errors relative to their class's time, every step counted: the many decodes and the long
 * prefills both weigh by what they cost the served run, and a slow step on a shared machine
 * (the run spent that time too) is not discounted as a relative error per step would. */
static int32_t weigh_by_class(struct logged_step *st, int64_t n) {
  qsort(st, (size_t)n, sizeof *st, cmp_class);
  int32_t classes = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    double sum = 0;
    for (; j < n && st[j].class_key == st[i].class_key; j++) sum += st[j].p.seconds;
    for (int64_t k = i; k < j; k++) st[k].p.weight = (double)(j - i) / sum;
    classes++;
    i = j;
  }
  return classes;
}

int kernel_fit_steps_run(const struct kernel_bench_options *o) {
  struct logged_step *st = NULL;
  const int64_t n = read_step_log(o->fit_steps_path, &st);
  struct sim_fit_point *pts = n > 0 ? malloc((size_t)n * sizeof *pts) : NULL;
  int rc = 1;
  if (n <= 0 || !pts) {
    if (n == 0) fprintf(stderr, "llmbus-kernel-bench --fit-steps: no step in %s\n", o->fit_steps_path);
    goto done;
  }
  const int32_t classes = weigh_by_class(st, n);
  double total = 0, modelled = 0;
  for (int64_t i = 0; i < n; i++) pts[i] = st[i].p, total += st[i].p.seconds;
  struct sim_cost_model m = {0};
  struct sim_fit_quality q;
  snprintf(m.name, sizeof m.name, "served steps of %s", o->fit_steps_path);
  snprintf(m.source, sizeof m.source, "llmbus-kernel-bench --fit-steps: %lld steps in %d shape classes, each "
           "weighted by 1 / its class's mean time, scaled to their total time", (long long)n, classes);
  llb_status fst = n > INT32_MAX ? LLB_ERRF(LLB_STATUS_TOO_LARGE, "%lld steps", (long long)n)
                                 : sim_cost_fit(pts, (int32_t)n, &m, &q);
  if (fst) {
    fail("fit", fst);
    goto done;
  }
  for (int64_t i = 0; i < n; i++) modelled += sim_cost_seconds(&m, &pts[i].shape);
  /* then scaled so that the served steps' total time is the measured one: the run's throughput */
  const double k = modelled > 0 ? total / modelled : 1.0;
  m.fixed_s *= k, m.token_s *= k, m.sampled_row_s *= k, m.attention_s *= k, m.context_s *= k, m.first_step_s *= k;
  printf("%lld steps, %d shape classes; fit: fixed %.4f ms + %.5f ms a token + %.5f ms a sampled row + %.3f ns an "
         "attended pair + %.3f ns a context token + %.4f ms a first step after idle (scaled by %.3f to the steps' "
         "total time); a step's relative error rms %.1f%%\n", (long long)n, classes, m.fixed_s * 1e3, m.token_s * 1e3,
         m.sampled_row_s * 1e3, m.attention_s * 1e9, m.context_s * 1e9, m.first_step_s * 1e3, k,
         100.0 * q.rms_rel_error);
  if ((fst = sim_cost_model_write(o->fit_path, &m, &q))) {
    fail("write", fst);
    goto done;
  }
  printf("wrote %s\n", o->fit_path);
  rc = 0;
done:
  free(st);
  free(pts);
  return rc;
}
