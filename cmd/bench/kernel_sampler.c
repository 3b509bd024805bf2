/* llmbus-kernel-bench --sampler (kernel_sampler.h). */
#include "cmd/bench/kernel_sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "model/forward/session.h"
#include "model/gguf/gguf.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

enum { SAMPLER_BENCH_MAX_RUNS = 64, SAMPLER_BENCH_STEP = 64 /* rows of logits a step */ };

/* Plain prose: its positions give the model's confident and its uncertain rows alike. */
static const char KERNEL_SAMPLER_TEXT[] =
    "The river rose through the night, and by morning the lower fields were under water. Farmers "
    "who had lived there all their lives said they had never seen it so high. Some of them moved "
    "their animals to the hills before dawn; others waited, hoping the rain would stop. It did not. "
    "By noon the bridge on the old road was closed, and the school sent the children home early. "
    "In the town, people filled sandbags outside the church while the radio gave the levels every "
    "hour. Nobody could say when the water would fall, but everyone agreed on one thing: next year "
    "they would build the wall higher, whatever it cost. That evening the wind turned to the north, "
    "the clouds broke, and for the first time in a week the stars came out over the flooded valley.";

static const struct sampler_bench_setting {
  const char *name;
  float temperature, top_p, min_p;
  int32_t top_k, logprobs;
} SETTINGS[] = {
    {"greedy", 0.0f, 1.0f, 0.0f, 0, -1},
    {"temperature 1", 1.0f, 1.0f, 0.0f, 0, -1},
    {"T 0.7, top_p 0.9", 0.7f, 0.9f, 0.0f, 0, -1},
    {"T 1, top_p 0.95", 1.0f, 0.95f, 0.0f, 0, -1},
    {"T 1, top_k 50", 1.0f, 1.0f, 0.0f, 50, -1},
    {"T 0.8, top_k 40, top_p 0.95", 0.8f, 0.95f, 0.0f, 40, -1},
    {"T 1, min_p 0.05", 1.0f, 1.0f, 0.05f, 0, -1},
    {"greedy, logprobs 5", 0.0f, 1.0f, 0.0f, 0, 5},
};

struct rows {
  float *data; /* [n, vocab] */
  int32_t n, vocab;
};

static llb_status keep_rows(void *user, int32_t first_index, int32_t count, const float *rows) {
  struct rows *r = user;
  memcpy(r->data + (int64_t)first_index * r->vocab, rows, (size_t)count * r->vocab * sizeof(float));
  return LLB_STATUS_OK;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The mean seconds of one sampler_sample over every row, for setting st at draw offset pass. */
static double pass_seconds(struct sampler *s, const struct sampler_bench_setting *st, const struct rows *r,
                           float *row, int pass) {
  struct sampler_params p;
  sampler_params_init(&p);
  p.temperature = st->temperature, p.top_p = st->top_p, p.min_p = st->min_p, p.top_k = st->top_k;
  p.logprobs = st->logprobs, p.seed = 7;
  double total = 0.0;
  for (int32_t i = 0; i < r->n; i++) {
    memcpy(row, r->data + (int64_t)i * r->vocab, (size_t)r->vocab * sizeof(float));
    struct sampler_result res;
    const double t0 = now_s();
    const llb_status err = sampler_sample(s, &p, row, NULL, 0, NULL, 0, 0, (int64_t)pass * r->n + i, &res);
    total += now_s() - t0;
    if (err) return -1.0;
  }
  return total / r->n;
}

/* The text's logits rows, one per token (each the prediction of the token after it). */
static llb_status text_rows(const struct kernel_bench_options *o, struct gguf_file *f, struct llama_model *m,
                            struct rows *r) {
  struct tokenizer *tok = NULL;
  struct llama_session *s = NULL;
  int32_t *ids = NULL;
  int64_t n = 0;
  llb_status st = tokenizer_load(f, &tok);
  if (!st) st = tokenizer_encode(tok, KERNEL_SAMPLER_TEXT, strlen(KERNEL_SAMPLER_TEXT), true, false, &ids, &n);
  const struct llama_session_options so = {
      .max_context = (int32_t)n, .max_seqs = 1, .max_logits = SAMPLER_BENCH_STEP,
      .forward = {.max_num_tokens = SAMPLER_BENCH_STEP, .n_threads = o->threads,
                  .packed_cache_dir = o->packed_cache_dir}};
  if (!st) st = llama_session_create(m, &so, &s);
  r->vocab = llama_model_config(m)->vocab_size;
  r->n = (int32_t)n;
  if (!st && !(r->data = malloc((size_t)n * r->vocab * sizeof(float))))
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%lld logits rows", (long long)n);
  if (!st) st = llama_session_feed(s, 0, ids, (int32_t)n, 0, (int32_t)n, keep_rows, r);
  llama_session_destroy(s);
  free(ids);
  tokenizer_destroy(tok);
  return st;
}

int kernel_sampler_run(const struct kernel_bench_options *o) {
  if (!o->model || o->threads < 1 || o->runs < 1 || o->runs > SAMPLER_BENCH_MAX_RUNS) {
    fprintf(stderr, "llmbus-kernel-bench --sampler: needs --model, --threads >= 1, --runs in [1, %d]\n",
            SAMPLER_BENCH_MAX_RUNS);
    return 2;
  }
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  struct sampler *s = NULL;
  struct rows r = {0};
  float *row = NULL;
  llb_status st = gguf_open(o->model, &f);
  if (!st) st = llama_model_load(f, &m);
  if (!st) st = text_rows(o, f, m, &r);
  if (!st) st = sampler_create(r.vocab, &s);
  if (!st && !(row = malloc((size_t)r.vocab * sizeof(float)))) st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "a logits row");
  int rc = st ? 1 : 0;
  if (st) fprintf(stderr, "llmbus-kernel-bench --sampler: %s (%s)\n", llb_strerror(st), llb_err_last());
  else printf("sampler: %d logits rows of %d (the text's positions), %d runs after a warm-up\n", r.n, r.vocab, o->runs);
  for (size_t k = 0; !rc && k < sizeof SETTINGS / sizeof SETTINGS[0]; k++) {
    double v[SAMPLER_BENCH_MAX_RUNS];
    for (int pass = 0; pass <= o->runs && !rc; pass++) {
      const double t = pass_seconds(s, &SETTINGS[k], &r, row, pass);
      if (t < 0) rc = 1, fprintf(stderr, "sampler_sample: %s\n", llb_err_last());
      if (pass > 0) v[pass - 1] = t;
    }
    if (rc) break;
    qsort(v, (size_t)o->runs, sizeof(double), cmp_double);
    printf("%-30s %9.2f us/row  (median of %d; min %.2f, max %.2f)\n", SETTINGS[k].name, v[o->runs / 2] * 1e6,
           o->runs, v[0] * 1e6, v[o->runs - 1] * 1e6);
  }
  free(row);
  free(r.data);
  sampler_destroy(s);
  llama_model_destroy(m);
  gguf_close(f);
  return rc;
}
