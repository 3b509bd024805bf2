/* llmbus_kv_transfer_bench: the wire cost of disaggregated prefill/decode (issue 36, item 6) on
 * this machine. Two CPU model runners on a real GGUF model (default: the default model), each with
 * its KV connector (actors/gpu_worker/kv_transfer.h) on its own bus connection to one nats-server
 * (an embedded one unless --nats URL): runner P prefills a prompt of --tokens random token ids
 * (timed: the recompute a transfer saves), its blocks are exported and runner Q's connector
 * fetches them over loopback NATS into other blocks (timed from the receive's submission to its
 * finished_recving), --runs times each. Prints the bytes per token and per prompt, the median
 * prefill and transfer times, the transfer's rate and the ratio recompute / transfer.
 *
 *   llmbus_kv_transfer_bench [--model GGUF] [--tokens 1024] [--runs 3] [--threads 2]
 *                            [--block-size 16] [--kv-cache-dtype fp16] [--chunk-bytes N] [--nats URL]
 *
 * Not a test (nothing here runs under ctest); build the Release tree for meaningful numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/gpu_worker/kv_transfer.h"
#include "actors/gpu_worker/model_runner.h"
#include "base/hash.h"
#include "base/log.h"
#include "bus/bus.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "tests/integration/nats_test_server.h"

#ifndef LLB_DEFAULT_MODEL
#define LLB_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

enum { MAX_RUNS = 32 };

struct opts {
  const char *model, *nats, *dtype;
  int32_t tokens, runs, threads, block_size;
  size_t chunk_bytes;
};

static int die(const char *what) {
  fprintf(stderr, "kv_transfer_bench: %s: %s\n", what, llb_err_last());
  return 1;
}

static int parse(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.model = LLB_DEFAULT_MODEL, .dtype = "fp16", .tokens = 1024, .runs = 3, .threads = 2,
                     .block_size = 16};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (!strcmp(a, "--model")) o->model = v;
    else if (!strcmp(a, "--nats")) o->nats = v;
    else if (!strcmp(a, "--kv-cache-dtype")) o->dtype = v;
    else if (!strcmp(a, "--tokens")) o->tokens = atoi(v);
    else if (!strcmp(a, "--runs")) o->runs = atoi(v);
    else if (!strcmp(a, "--threads")) o->threads = atoi(v);
    else if (!strcmp(a, "--block-size")) o->block_size = atoi(v);
    else if (!strcmp(a, "--chunk-bytes")) o->chunk_bytes = (size_t)atoll(v);
    else goto usage;
    i++;
  }
  if (o->tokens >= 1 && o->runs >= 1 && o->runs <= MAX_RUNS && o->threads >= 1 && o->block_size >= 1) return 0;
usage:
  fprintf(stderr, "usage: %s [--model GGUF] [--tokens N] [--runs 1..%d] [--threads N] [--block-size N] "
                  "[--kv-cache-dtype fp16|q8_0|fp8] [--chunk-bytes N] [--nats URL]\n", argv[0], MAX_RUNS);
  return 2;
}

static double now_s(void) { return (double)llb_now_ns() * 1e-9; }

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct side {
  struct bus *bus;
  struct model_runner *runner;
  struct kv_connector *conn;
};

static llb_status side_open(struct side *s, const struct opts *o, struct llama_model *m, const char *url,
                            const char *eid, enum backend_kv_dtype dtype) {
  struct bus_options bo;
  bus_options_init(&bo);
  bo.urls = url;
  bo.name = eid;
  bo.install_signal_handlers = false;
  const int32_t blocks = (o->tokens + o->block_size - 1) / o->block_size;
  const struct model_runner_config rc = {.num_blocks = blocks + 1, .block_size = o->block_size,
                                         .max_num_batched_tokens = o->tokens, .num_threads = o->threads,
                                         .kv_cache_dtype = dtype};
  const struct kv_connector_config kc = {.engine_id = eid, .max_chunk_bytes = o->chunk_bytes};
  llb_status st = bus_connect(&bo, &s->bus);
  if (!st) st = model_runner_create(m, &rc, &s->runner);
  if (!st) st = kv_connector_create(&kc, s->runner, &s->conn);
  if (!st) st = kv_connector_start(s->conn, s->bus);
  return st;
}

static void side_close(struct side *s) {
  kv_connector_stop(s->conn);
  bus_destroy(s->bus);
  kv_connector_destroy(s->conn);
  model_runner_destroy(s->runner);
}

/* Prefills request `id` of prompt[n] on blocks 0.. of r; returns the seconds the step took. */
static double prefill(struct model_runner *r, int32_t block_size, const char *id, const int32_t *prompt, int32_t n,
                      const int32_t *blocks, int32_t num_blocks) {
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.temperature = 0.0f;
  const struct llb_new_request_data nr = {.req_id = llb_str_c(id), .prompt_token_ids = prompt,
                                          .num_prompt_token_ids = n, .sampling_params = &sp, .block_ids = blocks,
                                          .num_block_ids = num_blocks};
  const struct llb_scheduled_tokens sched = {.req_id = llb_str_c(id), .num_tokens = n};
  const struct llb_str gone = llb_str_c(id);
  struct llb_scheduler_output so = {.version = 1, .step = 1, .block_size = block_size,
                                    .scheduled_new_reqs = &nr, .num_scheduled_new_reqs = 1,
                                    .num_scheduled_tokens = &sched, .num_scheduled_reqs = 1,
                                    .total_num_scheduled_tokens = n};
  struct llb_model_runner_output out;
  const double t0 = now_s();
  llb_status st = model_runner_execute(r, &so, &out);
  const double t = now_s() - t0;
  if (st) return -1;
  so = (struct llb_scheduler_output){.version = 1, .step = 2, .block_size = block_size,
                                     .finished_req_ids = &gone, .num_finished_req_ids = 1};
  return model_runner_execute(r, &so, &out) ? -1 : t;
}

/* Exports P's blocks as `pid`, has Q receive them as `qid`; returns the seconds until Q's
 * finished_recving (-1: failed). */
static double transfer(struct side *p, struct side *q, const char *pid, const char *qid, const int32_t *blocks,
                       const int32_t *local, int32_t num_blocks, int32_t tokens) {
  const struct llb_kv_send_request s = {.req_id = llb_str_c(pid), .block_ids = blocks, .num_block_ids = num_blocks,
                                        .num_tokens = tokens, .expires_in_s = 60.0f};
  const struct llb_kv_connector_metadata ms = {.reqs_to_send = &s, .num_reqs_to_send = 1};
  if (kv_connector_before_step(p->conn, &ms, NULL, 0)) return -1;
  const struct llb_kv_recv_request r = {.req_id = llb_str_c(qid), .local_block_ids = local,
                                        .num_local_block_ids = num_blocks, .remote_engine_id = llb_str_c("P"),
                                        .remote_request_id = llb_str_c(pid), .num_tokens = tokens};
  const struct llb_kv_connector_metadata mr = {.reqs_to_recv = &r, .num_reqs_to_recv = 1};
  const double t0 = now_s();
  if (kv_connector_before_step(q->conn, &mr, NULL, 0)) return -1;
  for (;;) {
    struct llb_kv_connector_output o;
    kv_connector_after_step(q->conn, &o);
    if (o.num_finished_recving) return now_s() - t0;
    if (o.num_failed_recving) return -1;
    nanosleep(&(struct timespec){0, 100000}, NULL);
  }
}

int main(int argc, char **argv) {
  struct opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  enum backend_kv_dtype dtype;
  if (llama_kv_dtype_parse(o.dtype, &dtype)) return die("--kv-cache-dtype");
  struct nats_test_server srv = {0};
  const char *url = o.nats;
  if (!url) {
    if (nats_test_server_start(&srv, 0, false) != 0) return 1;
    url = srv.url;
  }
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  if (gguf_open(o.model, &f) || llama_model_load(f, &m)) return die(o.model);
  struct side p = {0}, q = {0};
  if (side_open(&p, &o, m, url, "P", dtype) || side_open(&q, &o, m, url, "Q", dtype)) return die("set-up");
  const int32_t nb = (o.tokens + o.block_size - 1) / o.block_size;
  int32_t *prompt = malloc((size_t)o.tokens * sizeof *prompt), *blocks = malloc((size_t)nb * sizeof *blocks),
          *local = malloc((size_t)nb * sizeof *local);
  uint64_t seed = 12345;
  const int32_t vocab = llama_model_config(m)->vocab_size;
  for (int32_t i = 0; i < o.tokens; i++) prompt[i] = (int32_t)(llb_splitmix64_next(&seed) % (uint64_t)vocab);
  for (int32_t i = 0; i < nb; i++) {
    blocks[i] = i;
    local[i] = nb - i; /* other block ids, in another order */
  }
  double pre[MAX_RUNS], xfer[MAX_RUNS];
  for (int run = 0; run < o.runs; run++) {
    char pid[32], qid[32];
    snprintf(pid, sizeof pid, "p-%d", run);
    snprintf(qid, sizeof qid, "q-%d", run);
    if ((pre[run] = prefill(p.runner, o.block_size, pid, prompt, o.tokens, blocks, nb)) < 0) return die("prefill");
    if ((xfer[run] = transfer(&p, &q, pid, qid, blocks, local, nb, o.tokens)) < 0) return die("transfer");
  }
  struct model_runner_kv_geometry g;
  model_runner_kv_geometry(p.runner, &g);
  struct kv_connector_stats st;
  kv_connector_stats(p.conn, &st);
  const double bytes = (double)nb * (double)g.block_bytes, t_pre = median(pre, o.runs), t_x = median(xfer, o.runs);
  printf("model=%s tokens=%d kv_cache_dtype=%s block_size=%d block_bytes=%zu bytes_per_token=%.0f\n", o.model,
         o.tokens, o.dtype, g.block_size, g.block_bytes, (double)g.block_bytes / g.block_size);
  printf("bytes_per_prompt=%.0f chunks_per_prompt=%.1f threads=%d runs=%d\n", bytes,
         (double)st.fetches_served / o.runs, o.threads, o.runs);
  printf("prefill_ms_median=%.1f transfer_ms_median=%.1f transfer_MBps=%.0f recompute_over_transfer=%.1f\n",
         t_pre * 1e3, t_x * 1e3, bytes / t_x / 1e6, t_pre / t_x);
  free(prompt);
  free(blocks);
  free(local);
  side_close(&p);
  side_close(&q);
  llama_model_destroy(m);
  gguf_close(f);
  if (!o.nats) nats_test_server_stop(&srv);
  return 0;
}
