/* KV blocks moved between two workers over a real bus (issue 36; actors/gpu_worker/kv_transfer.h).
 *
 * Three model runners on one tiny random LLaMA (2 layers, E 128, 4 heads, 2 KV heads, head_dim
 * 32, vocab 97, blocks of 4 tokens): P prefills a prompt and samples the first token, its blocks
 * are exported (reqs_to_send) and fetched by Q's connector through a nats-server into other block
 * ids of Q's cache (reqs_to_recv); Q then decodes from the received KV. Its tokens must equal
 * those of R, which ran the whole request itself: greedy and seeded at temperature 0.8. Also:
 * a partial fetch (remote_first_block > 0) onto blocks whose prefix Q computed itself, whose
 * release ends P's export at once (finished_sending, not at its expiry); a chunk whose byte was
 * flipped in transit, or whose replies never come, fails the receive (failed_recving) and Q's
 * recompute still gives R's tokens, and Q releases P's export when a reply told it the export's
 * generation (a release naming it ends an export at once); a lost reply, of the last chunk too,
 * is resent and the transfer completes; a receive started before P's export completes once it
 * comes, also behind a step on P longer than not_ready_timeout_ms, and fails after that timeout
 * of NotReady with P idle when it never comes, at once when the exporting worker restarted
 * (another incarnation answers) or began two more steps without it; a stale release (an earlier export of the same id) ends
 * nothing and the newer export is received whole; an expired export is reported finished_sending and a later fetch gets
 * Expired; fetches for blocks the export does not list get errors, never data; every CPU KV cache
 * dtype (fp16, q8_0, fp8) arrives bit-exactly; --device sim moves zero bytes of the real size.
 * The token identity again on every other architecture the CPU forward runs (the tiny random
 * models of tests/unit/arch_models.h: llama3, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3).
 * Last, the same through two worker actors (gpu_worker_actor_options.kv_transfer): SchedulerOutputs
 * on their execute subjects, the ended transfers in their ModelRunnerOutputs; a worker without
 * kv_transfer ends the export and fails the receive at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/gpu_worker/actor.h"
#include "actors/gpu_worker/kv_transfer.h"
#include "actors/gpu_worker/model_runner.h"
#include "base/log.h"
#include "base/metrics.h"
#include "bus/bus.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "schemas/kv_transfer.h"
#include "tests/integration/nats_test_server.h"
#include "tests/unit/arch_models.h"
#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 128, H = 4, HKV = 2, D = 32, F = 256, V = 97, CTX = 256, BS = 4, NB = 64, MAX_TOK = 32 };
enum { N = 13, G = 8 }; /* prompt tokens, tokens generated */

static struct nats_test_server srv;
static void *model_buf;
static size_t model_size;
static struct gguf_file *model_file;
static struct llama_model *model;
static struct bus *bus_p, *bus_q;
static struct gpu_worker_actor *workers[3]; /* destroyed after the buses */

/* ids below ARCH_MODEL_VOCAB, so that every architecture's tiny model takes the same prompt */
static const int32_t prompt[N] = {5, 17, 42, 3, 48, 61, 9, 23, 50, 14, 2, 55, 31};

static struct bus *connect_bus(const char *name) {
  struct bus_options o;
  bus_options_init(&o);
  o.urls = srv.url;
  o.name = name;
  o.install_signal_handlers = false;
  struct bus *b = NULL;
  assert_int_equal(bus_connect(&o, &b), LLB_STATUS_OK);
  return b;
}

static int setup(void **state) {
  (void)state;
  if (nats_test_server_start(&srv, 0, false) != 0) return -1;
  struct gguf_writer *w;
  uint64_t rng = 4242;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  const struct gguf_llama_hparams hp = {L, CTX, E, F, H, HKV, D, V, 10000.0f};
  assert_int_equal(gguf_writer_add_random_llama(w, &hp, 4.0f, &rng), LLB_STATUS_OK);
  assert_int_equal(gguf_writer_add_tiny_vocab(w, V), LLB_STATUS_OK); /* the sim device reads it */
  assert_int_equal(gguf_writer_write_memory(w, &model_buf, &model_size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  assert_int_equal(gguf_open_memory(model_buf, model_size, &model_file), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(model_file, &model), LLB_STATUS_OK);
  bus_p = connect_bus("kv_transfer_p");
  bus_q = connect_bus("kv_transfer_q");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  bus_destroy(bus_p);
  bus_destroy(bus_q);
  for (int i = 0; i < 3; i++) gpu_worker_actor_destroy(workers[i]);
  llama_model_destroy(model);
  gguf_close(model_file);
  free(model_buf);
  nats_test_server_stop(&srv);
  return 0;
}

static struct model_runner *make_runner(enum model_runner_device dev, enum backend_kv_dtype dtype) {
  const struct model_runner_config cfg = {.num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                          .num_threads = 1, .device = dev, .kv_cache_dtype = dtype,
                                          .gguf = model_file};
  struct model_runner *r = NULL;
  assert_int_equal(model_runner_create(dev == MODEL_RUNNER_DEVICE_SIM ? NULL : model, &cfg, &r), LLB_STATUS_OK);
  return r;
}

/* A connector on `bus` (NULL: not started) with chunks of two blocks, so that a prompt's blocks
 * take several requests, short timeouts, NotReady answered for at most not_ready_ms in a row
 * (0: the default) and max_attempts sends of a chunk's request without a reply (0: 3). */
static struct kv_connector *make_connector_nr(const char *eid, struct model_runner *r, struct bus *bus,
                                              int64_t not_ready_ms, int32_t max_attempts) {
  struct model_runner_kv_geometry g;
  model_runner_kv_geometry(r, &g);
  const struct kv_connector_config cfg = {.engine_id = eid, .fetch_timeout_ms = 1000, .transfer_timeout_ms = 10000,
                                          .not_ready_timeout_ms = not_ready_ms,
                                          .max_attempts = max_attempts ? max_attempts : 3, .retry_ms = 5,
                                          .max_chunk_bytes = 2 * g.block_bytes};
  struct kv_connector *c = NULL;
  assert_int_equal(kv_connector_create(&cfg, r, &c), LLB_STATUS_OK);
  if (bus) assert_int_equal(kv_connector_start(c, bus), LLB_STATUS_OK);
  return c;
}

static struct kv_connector *make_connector(const char *eid, struct model_runner *r, struct bus *bus) {
  return make_connector_nr(eid, r, bus, 0, 0);
}

/* ---- a scripted scheduler for one request ------------------------------------------------ */

struct req {
  const char *id;
  struct llb_sampling_params params;
  int32_t tokens[N + G]; /* prompt then outputs */
  int32_t num_tokens;
  int32_t blocks[(N + G + BS - 1) / BS];
  int32_t num_blocks;
};

static void req_init(struct req *q, const char *id, bool greedy, int32_t first_block) {
  memset(q, 0, sizeof *q);
  q->id = id;
  llb_sampling_params_init(&q->params);
  q->params.temperature = greedy ? 0.0f : 0.8f;
  q->params.has_seed = !greedy;
  q->params.seed = 1234;
  memcpy(q->tokens, prompt, sizeof prompt);
  q->num_tokens = N;
  q->num_blocks = (N + G + BS - 1) / BS;
  for (int32_t i = 0; i < q->num_blocks; i++) q->blocks[i] = first_block + i;
}

/* Runs one step; appends the sampled token (if any) to q. */
static void step(struct model_runner *r, struct llb_scheduler_output *so, struct req *q) {
  struct llb_model_runner_output out;
  llb_status st = model_runner_execute(r, so, &out);
  if (st) fail_msg("step %llu: %s (%s)", (unsigned long long)so->step, out.error.message.data, out.error.field.data);
  if (q && out.num_sampled_token_ids == 1) q->tokens[q->num_tokens++] = out.sampled_token_ids[0];
}

/* Schedules q as a new request whose first `computed` tokens are in its blocks already; `n`
 * tokens computed in this step. */
static void schedule_new(struct model_runner *r, struct req *q, int32_t computed, int32_t n, uint64_t stepno) {
  const struct llb_new_request_data nr = {
      .req_id = llb_str_c(q->id), .prompt_token_ids = q->tokens, .num_prompt_token_ids = N,
      .output_token_ids = q->tokens + N, .num_output_token_ids = q->num_tokens - N, .sampling_params = &q->params,
      .block_ids = q->blocks, .num_block_ids = q->num_blocks, .num_computed_tokens = computed};
  const struct llb_scheduled_tokens sched = {.req_id = llb_str_c(q->id), .num_tokens = n};
  struct llb_scheduler_output so = {.version = 1, .step = stepno, .block_size = BS, .scheduled_new_reqs = &nr,
                                    .num_scheduled_new_reqs = 1, .num_scheduled_tokens = &sched,
                                    .num_scheduled_reqs = 1, .total_num_scheduled_tokens = n};
  step(r, &so, q);
}

/* One decode step of q (already on the runner). */
static void schedule_decode(struct model_runner *r, struct req *q, uint64_t stepno) {
  const struct llb_str id = llb_str_c(q->id);
  const bool resumed = false;
  const int32_t computed = q->num_tokens - 1, outputs = q->num_tokens - N;
  const struct llb_scheduled_tokens sched = {.req_id = id, .num_tokens = 1};
  struct llb_scheduler_output so = {
      .version = 1, .step = stepno, .block_size = BS, .num_scheduled_tokens = &sched, .num_scheduled_reqs = 1,
      .total_num_scheduled_tokens = 1,
      .scheduled_cached_reqs = {.num_reqs = 1, .req_ids = &id, .resumed_from_preemption = &resumed,
                                .num_computed_tokens = &computed, .num_output_tokens = &outputs}};
  step(r, &so, q);
}

/* Decodes q until it holds N + G tokens. */
static void decode_rest(struct model_runner *r, struct req *q) {
  for (uint64_t s = 100; q->num_tokens < N + G; s++) schedule_decode(r, q, s);
}

/* A step with nothing scheduled, only `finished` ids leaving (may be NULL). */
static void step_finish(struct model_runner *r, const char *finished) {
  const struct llb_str id = llb_str_c(finished);
  struct llb_scheduler_output so = {.version = 1, .step = 50, .block_size = BS, .finished_req_ids = &id,
                                    .num_finished_req_ids = finished ? 1 : 0};
  step(r, &so, NULL);
}

/* R: the whole request on one runner. */
static void run_alone(struct req *q) {
  struct model_runner *r = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  schedule_new(r, q, 0, N, 1);
  decode_rest(r, q);
  model_runner_destroy(r);
}

/* ---- the connector's lists ---------------------------------------------------------------- */

static bool has(const struct llb_str *ids, int32_t n, const char *id) {
  for (int32_t i = 0; i < n; i++)
    if (strcmp(ids[i].data, id) == 0) return true;
  return false;
}

enum ended { ENDED_SENDING, ENDED_RECVING, ENDED_FAILED };

/* Polls c's after_step (the worker's empty steps) until `id` is in the list `which`, up to 10 s;
 * fails the test if it lands in another list. */
static void wait_ended(struct kv_connector *c, const char *id, enum ended which) {
  for (int i = 0; i < 2000; i++) {
    struct llb_kv_connector_output o;
    kv_connector_after_step(c, &o);
    const bool s = has(o.finished_sending, o.num_finished_sending, id),
               r = has(o.finished_recving, o.num_finished_recving, id),
               f = has(o.failed_recving, o.num_failed_recving, id);
    if ((s && which != ENDED_SENDING) || (r && which != ENDED_RECVING) || (f && which != ENDED_FAILED))
      fail_msg("%s ended in the wrong list (sending %d, recving %d, failed %d)", id, s, r, f);
    if (s || r || f) return;
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
  fail_msg("%s did not end", id);
}

static void export_blocks(struct kv_connector *c, const char *id, const int32_t *blocks, int32_t n, int32_t tokens,
                          float expires_s) {
  const struct llb_kv_send_request s = {.req_id = llb_str_c(id), .block_ids = blocks, .num_block_ids = n,
                                        .num_tokens = tokens, .expires_in_s = expires_s};
  const struct llb_kv_connector_metadata m = {.reqs_to_send = &s, .num_reqs_to_send = 1};
  assert_int_equal(kv_connector_before_step(c, &m, NULL, 0), LLB_STATUS_OK);
}

static void receive_blocks(struct kv_connector *c, const char *id, const char *remote_eid, const char *remote_id,
                           const int32_t *blocks, int32_t first, int32_t tokens) {
  const struct llb_kv_recv_request r = {.req_id = llb_str_c(id), .local_block_ids = blocks,
                                        .num_local_block_ids = (tokens + BS - 1) / BS - first,
                                        .remote_engine_id = llb_str_c(remote_eid),
                                        .remote_request_id = llb_str_c(remote_id), .remote_first_block = first,
                                        .num_tokens = tokens};
  const struct llb_kv_connector_metadata m = {.reqs_to_recv = &r, .num_reqs_to_recv = 1};
  assert_int_equal(kv_connector_before_step(c, &m, NULL, 0), LLB_STATUS_OK);
}

/* P prefills `p` (blocks from 0) and samples its first token; the request leaves P's batch and
 * its blocks holding the N prompt tokens' KV are exported under its id. */
static void prefill_and_export(struct model_runner *rp, struct kv_connector *cp, struct req *p, float expires_s) {
  schedule_new(rp, p, 0, N, 1);
  step_finish(rp, p->id);
  export_blocks(cp, p->id, p->blocks, (N + BS - 1) / BS, N, expires_s);
}

/* Q takes the request with P's first token (its KV received: num_computed N) and decodes. */
static void decode_received(struct model_runner *rq, struct req *q, const struct req *p) {
  q->tokens[N] = p->tokens[N];
  q->num_tokens = N + 1;
  schedule_new(rq, q, N, 1, 10);
  decode_rest(rq, q);
}

static void test_decode_from_fetched_blocks_equals_the_request_run_alone(void **state) {
  (void)state;
  for (int greedy = 1; greedy >= 0; greedy--) {
    struct req alone, p, q;
    req_init(&alone, "alone", greedy, 0);
    run_alone(&alone);
    struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                        *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
    struct kv_connector *cp = make_connector("P", rp, bus_p), *cq = make_connector("Q", rq, bus_q);
    req_init(&p, greedy ? "p-greedy" : "p-seeded", greedy, 0);
    prefill_and_export(rp, cp, &p, 30.0f);
    assert_int_equal(p.tokens[N], alone.tokens[N]); /* the first token comes from P */
    req_init(&q, "q-1", greedy, 37);                 /* other block ids than P's */
    receive_blocks(cq, q.id, "P", p.id, q.blocks, 0, N);
    wait_ended(cq, q.id, ENDED_RECVING);
    wait_ended(cp, p.id, ENDED_SENDING); /* Q's release after its last block: P frees them */
    decode_received(rq, &q, &p);
    assert_memory_equal(q.tokens, alone.tokens, sizeof alone.tokens);
    struct kv_connector_stats sp, sq;
    kv_connector_stats(cp, &sp);
    kv_connector_stats(cq, &sq);
    struct model_runner_kv_geometry g;
    model_runner_kv_geometry(rq, &g);
    assert_int_equal(sq.bytes_received, (uint64_t)((N + BS - 1) / BS) * g.block_bytes);
    assert_int_equal(sp.bytes_sent, sq.bytes_received);
    assert_true(sp.fetches_served >= 2); /* chunks of 2 blocks */
    kv_connector_destroy(cp);
    kv_connector_destroy(cq);
    model_runner_destroy(rp);
    model_runner_destroy(rq);
  }
}

/* Every other architecture the CPU forward runs: its KV, moved to other blocks of another
 * runner, continues into the tokens of the request run alone (greedy). The model globals are
 * switched to the architecture's tiny random model for the test and restored after it. */
static void test_decode_from_fetched_blocks_equals_alone_on_every_architecture(void **state) {
  (void)state;
  static const char *const archs[] = {"llama3", "mistral", "qwen2", "qwen3", "phi3",
                                      "gemma",  "gemma2",  "gemma3"};
  struct gguf_file *const llama_file = model_file;
  struct llama_model *const llama = model;
  for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
    void *buf = NULL;
    size_t size = 0;
    assert_int_equal(arch_model_write(archs[a], &buf, &size), LLB_STATUS_OK);
    assert_int_equal(gguf_open_memory(buf, size, &model_file), LLB_STATUS_OK);
    assert_int_equal(llama_model_load(model_file, &model), LLB_STATUS_OK);
    struct req alone, p, q;
    req_init(&alone, "alone", true, 0);
    run_alone(&alone);
    struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                        *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
    struct kv_connector *cp = make_connector("P", rp, bus_p), *cq = make_connector("Q", rq, bus_q);
    req_init(&p, "p-arch", true, 0);
    prefill_and_export(rp, cp, &p, 30.0f);
    req_init(&q, "q-arch", true, 37);
    receive_blocks(cq, q.id, "P", p.id, q.blocks, 0, N);
    wait_ended(cq, q.id, ENDED_RECVING);
    decode_received(rq, &q, &p);
    if (memcmp(q.tokens, alone.tokens, sizeof alone.tokens) != 0) fail_msg("%s: the tokens differ", archs[a]);
    kv_connector_destroy(cp);
    kv_connector_destroy(cq);
    model_runner_destroy(rp);
    model_runner_destroy(rq);
    llama_model_destroy(model);
    gguf_close(model_file);
    free(buf);
  }
  model_file = llama_file;
  model = llama;
}

static void test_partial_fetch_onto_a_prefix_q_holds_equals_the_request_run_alone(void **state) {
  (void)state;
  struct req alone, p, q, pre;
  req_init(&alone, "alone", true, 0);
  run_alone(&alone);
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P2", rp, bus_p), *cq = make_connector("Q2", rq, bus_q);
  req_init(&p, "p-partial", true, 0);
  prefill_and_export(rp, cp, &p, 30.0f);
  /* Q computes the first 2 blocks itself (a prefix-cache hit would hold them) */
  const int32_t k = 2;
  req_init(&q, "q-partial", true, 20);
  req_init(&pre, "q-prefix", true, 20);
  schedule_new(rq, &pre, 0, k * BS, 1);
  step_finish(rq, pre.id);
  receive_blocks(cq, q.id, "P2", p.id, q.blocks + k, k, N);
  wait_ended(cq, q.id, ENDED_RECVING);
  decode_received(rq, &q, &p);
  assert_memory_equal(q.tokens, alone.tokens, sizeof alone.tokens);
  struct kv_connector_stats sq;
  kv_connector_stats(cq, &sq);
  struct model_runner_kv_geometry g;
  model_runner_kv_geometry(rq, &g);
  assert_int_equal(sq.bytes_received, (uint64_t)((N + BS - 1) / BS - k) * g.block_bytes); /* only the missing */
  /* Q's release ended P's export though its first k blocks were never read: P reports it
   * finished_sending (its blocks freed) now, not at its 30 s expiry (wait_ended gives up at 10 s) */
  wait_ended(cp, p.id, ENDED_SENDING);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* A stand-in for P's service: answers fetches through P's (unstarted) connector and damages the
 * replies as told. */
struct faulty {
  struct kv_connector *c;
  atomic_int replies;
  atomic_int releases; /* releases (no blocks, last) the fetcher published: applied to c, not answered */
  int drop_first;  /* replies to drop before answering */
  bool drop_all;
  bool drop_last_once; /* drop the reply to the first fetch of the receive's last chunk (after serving it) */
  int flip_from;   /* flip a byte of the data of every reply from this one on (0 = none) */
  int want_releases; /* releases the fetcher must publish; with 1 P's export ends at once */
};

static void on_faulty_fetch(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct faulty *fx = user;
  struct llb_arena a;
  llb_arena_init(&a, NULL, 0);
  struct llb_kv_fetch_request q;
  const bool decoded = llb_kv_fetch_request_decode(msg->data, msg->len, &a, &q) == LLB_STATUS_OK;
  const bool last_chunk = decoded && q.last && q.num_blocks > 0;
  llb_arena_destroy(&a);
  if (kv_connector_release(fx->c, msg->data, msg->len)) {
    atomic_fetch_add(&fx->releases, 1);
    return;
  }
  const int n = atomic_fetch_add(&fx->replies, 1);
  if (fx->drop_all || n < fx->drop_first) return;
  struct llb_buf b = {0};
  assert_int_equal(kv_connector_serve(fx->c, msg->data, msg->len, &b), LLB_STATUS_OK);
  if (fx->drop_last_once && last_chunk) { /* served (before generations that ended the export), reply lost */
    fx->drop_last_once = false;
    llb_buf_free(&b);
    return;
  }
  if (fx->flip_from && n >= fx->flip_from) b.data[b.len - 200] ^= 0x01; /* inside the data (2 blocks of 2 KiB) */
  (void)bus_respond(bus, msg, b.data, b.len, NULL);
  llb_buf_free(&b);
}

/* P's blocks served by the faulty service as engine `eid`; Q fetches them; returns what ended. */
static void fetch_through_faults(struct faulty *fx, const char *eid, enum ended want) {
  struct req alone, p, q;
  req_init(&alone, "alone", true, 0);
  run_alone(&alone);
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  fx->c = make_connector(eid, rp, NULL);
  struct kv_connector *cq = make_connector("Qf", rq, bus_q);
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_kv_fetch(bus_prefix(bus_p), eid, subject, sizeof subject), LLB_STATUS_OK);
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe(bus_p, subject, NULL, on_faulty_fetch, fx, &sub), LLB_STATUS_OK);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  req_init(&p, "p-faulty", true, 0);
  prefill_and_export(rp, fx->c, &p, 30.0f);
  req_init(&q, "q-faulty", true, 40);
  receive_blocks(cq, q.id, eid, p.id, q.blocks, 0, N);
  wait_ended(cq, q.id, want);
  if (want == ENDED_RECVING) {
    decode_received(rq, &q, &p);
  } else { /* the scheduler recomputes the request locally: the same tokens */
    q.num_tokens = N + 1;
    q.tokens[N] = p.tokens[N];
    schedule_new(rq, &q, 0, N + 1, 10);
    decode_rest(rq, &q);
  }
  assert_memory_equal(q.tokens, alone.tokens, sizeof alone.tokens);
  /* the ended receive released P's export (it knew the generation from a reply): P frees it now,
   * not at its 30 s expiry (wait_ended gives up at 10 s); else P still holds it */
  for (int i = 0; i < 500 && atomic_load(&fx->releases) < fx->want_releases; i++)
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  nanosleep(&(struct timespec){0, 20000000}, NULL);
  assert_int_equal(atomic_load(&fx->releases), fx->want_releases);
  if (fx->want_releases) wait_ended(fx->c, p.id, ENDED_SENDING);
  assert_int_equal(kv_connector_busy(fx->c), fx->want_releases == 0);
  (void)bus_unsubscribe(sub);
  kv_connector_destroy(fx->c);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* The second chunk's byte flipped: the receive fails, and its release (naming the generation the
 * first chunk gave) ends P's export at once. */
static void test_a_flipped_byte_in_transit_fails_the_receive_and_recompute_gives_the_same_tokens(void **state) {
  (void)state;
  struct faulty fx = {.flip_from = 1, .want_releases = 1};
  fetch_through_faults(&fx, "Pflip", ENDED_FAILED);
}

static void test_a_lost_reply_is_fetched_again_and_the_transfer_completes(void **state) {
  (void)state;
  struct faulty fx = {.drop_first = 1, .want_releases = 1};
  fetch_through_faults(&fx, "Plost1", ENDED_RECVING);
  assert_true(atomic_load(&fx.replies) >= 3); /* the dropped one, its resend, the second chunk */
}

/* Defect "a lost reply to the last fetch chunk fails the receive": P served the last chunk but its
 * reply was lost; the fetcher asks again and gets it (serving ends nothing: before generations P
 * had ended the export, the resend got Unknown and the receive failed), the transfer completes
 * and its release ends P's export at once. */
static void test_a_lost_reply_to_the_last_chunk_is_fetched_again(void **state) {
  (void)state;
  struct faulty fx = {.drop_last_once = true, .want_releases = 1};
  fetch_through_faults(&fx, "Plostlast", ENDED_RECVING);
  assert_int_equal(atomic_load(&fx.replies), 3); /* chunk 1, chunk 2 (reply lost), chunk 2 again */
}

/* No reply at all: the fetcher never learnt the export's generation, so it publishes no release
 * (one naming none would be refused) and P holds the export to its expiry. */
static void test_replies_that_never_come_fail_the_receive(void **state) {
  (void)state;
  struct faulty fx = {.drop_all = true};
  fetch_through_faults(&fx, "Plost", ENDED_FAILED);
  /* max_attempts requests, no more (the last may still be on its way to the handler) */
  for (int i = 0; i < 500 && atomic_load(&fx.replies) < 3; i++) nanosleep(&(struct timespec){0, 10000000}, NULL);
  nanosleep(&(struct timespec){0, 50000000}, NULL);
  assert_int_equal(atomic_load(&fx.replies), 3);
}

static int32_t fetch_direct(struct kv_connector *c, const char *id, int32_t first, int32_t n, size_t *bytes);
static int32_t fetch_gen(struct kv_connector *c, const char *id, uint64_t gen, int32_t first, int32_t n, size_t *bytes,
                         uint64_t *got);

/* Publishes a release of export `id` of generation gen to engine eid, as a fetcher does. */
static void publish_release(const char *eid, const char *id, uint64_t gen) {
  const struct llb_kv_fetch_request q = {.request_id = llb_str_c(id), .num_blocks = 0, .last = true,
                                         .generation = gen};
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_fetch_request_encode_buf(&q, &b), LLB_STATUS_OK);
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_kv_fetch(bus_prefix(bus_q), eid, subject, sizeof subject), LLB_STATUS_OK);
  assert_int_equal(bus_publish(bus_q, subject, b.data, b.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&b);
}

/* Returns once engine eid's kv_fetch subscription has handled every message bus_q published to
 * it before: a request on the same subject from the same connection is delivered after them
 * (one publisher's order holds on one subscription, handled one at a time) and its reply
 * comes once it ran. */
static void kv_fetch_barrier(const char *eid) {
  const struct llb_kv_fetch_request q = {.request_id = llb_str_c("barrier"), .num_blocks = 1};
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_fetch_request_encode_buf(&q, &b), LLB_STATUS_OK);
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_kv_fetch(bus_prefix(bus_q), eid, subject, sizeof subject), LLB_STATUS_OK);
  struct bus_msg *reply = NULL;
  assert_int_equal(bus_request(bus_q, subject, b.data, b.len, NULL, 10000, &reply), LLB_STATUS_OK);
  bus_msg_destroy(reply);
  llb_buf_free(&b);
}

/* A release (the fetcher finished, failed or gave up: a KVFetchRequest of no blocks, last,
 * published without a reply subject) naming the export's generation ends P's export at once:
 * finished_sending, long before its 30 s expiry (wait_ended gives up at 10 s); a later fetch
 * finds it ended. One naming no generation ends nothing. */
static void test_a_release_ends_the_export_at_once(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P7", rp, bus_p);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK); /* its kv_fetch subscription is in place */
  const int32_t blocks[3] = {1, 2, 3};
  export_blocks(cp, "p-released", blocks, 3, 12, 30.0f);
  size_t bytes = 0;
  uint64_t gen = 0;
  assert_int_equal(fetch_gen(cp, "p-released", 0, 0, 1, &bytes, &gen), LLB_KV_TRANSFER_OK);
  assert_true(gen != 0);
  publish_release("P7", "p-released", 0);
  kv_fetch_barrier("P7");
  assert_true(kv_connector_busy(cp)); /* no generation: refused */
  publish_release("P7", "p-released", gen);
  wait_ended(cp, "p-released", ENDED_SENDING);
  assert_int_equal(fetch_direct(cp, "p-released", 0, 1, &bytes), LLB_KV_TRANSFER_UNKNOWN);
  kv_connector_destroy(cp);
  model_runner_destroy(rp);
}

/* Defect "a stale release by id can end a newer export": P exports request p-again, which is
 * released and exported again (preempted and prefilled anew, or a retried hand-off); the first
 * export's release published again (late or duplicated) is refused and ends nothing, a fetch
 * naming its generation gets Unknown and no data, and Q's receive of the new export over the bus
 * completes; Q's own release then ends it. Before generations the stale release ended the new
 * export and Q's receive failed (Unknown). */
static void test_a_stale_release_does_not_end_a_newer_export(void **state) {
  (void)state;
  struct req alone, p, q;
  req_init(&alone, "alone", true, 0);
  run_alone(&alone);
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P8", rp, bus_p), *cq = make_connector("Q8", rq, bus_q);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  req_init(&p, "p-again", true, 0);
  prefill_and_export(rp, cp, &p, 30.0f);
  size_t bytes = 0;
  uint64_t old_gen = 0, new_gen = 0;
  assert_int_equal(fetch_gen(cp, p.id, 0, 0, 1, &bytes, &old_gen), LLB_KV_TRANSFER_OK);
  publish_release("P8", p.id, old_gen);
  wait_ended(cp, p.id, ENDED_SENDING);
  export_blocks(cp, p.id, p.blocks, (N + BS - 1) / BS, N, 30.0f); /* exported again */
  assert_int_equal(fetch_gen(cp, p.id, 0, 0, 1, &bytes, &new_gen), LLB_KV_TRANSFER_OK);
  assert_true(new_gen != old_gen);
  publish_release("P8", p.id, old_gen); /* the stale one, again */
  assert_int_equal(bus_flush(bus_q, 2000), LLB_STATUS_OK);
  assert_int_equal(fetch_gen(cp, p.id, old_gen, 0, 1, &bytes, NULL), LLB_KV_TRANSFER_UNKNOWN);
  assert_int_equal(bytes, 0);
  kv_fetch_barrier("P8"); /* the stale release has been handled */
  struct llb_kv_connector_output out;
  kv_connector_after_step(cp, &out);
  assert_false(has(out.finished_sending, out.num_finished_sending, p.id));
  req_init(&q, "q-again", true, 40);
  receive_blocks(cq, q.id, "P8", p.id, q.blocks, 0, N);
  wait_ended(cq, q.id, ENDED_RECVING);
  decode_received(rq, &q, &p);
  assert_memory_equal(q.tokens, alone.tokens, sizeof alone.tokens);
  wait_ended(cp, p.id, ENDED_SENDING); /* Q's release named the new generation */
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* Serves one KVFetchRequest naming generation gen through c directly; returns the chunk's status
 * (data in *bytes, the chunk's generation in *got, may be NULL). */
static int32_t fetch_gen(struct kv_connector *c, const char *id, uint64_t gen, int32_t first, int32_t n, size_t *bytes,
                         uint64_t *got) {
  const struct llb_kv_fetch_request q = {.request_id = llb_str_c(id), .first_block = first, .num_blocks = n,
                                         .generation = gen};
  struct llb_buf req = {0}, rep = {0};
  assert_int_equal(llb_kv_fetch_request_encode_buf(&q, &req), LLB_STATUS_OK);
  assert_int_equal(kv_connector_serve(c, req.data, req.len, &rep), LLB_STATUS_OK);
  struct llb_arena a;
  llb_arena_init(&a, NULL, 0);
  struct llb_kv_transfer_chunk ch;
  assert_int_equal(llb_kv_transfer_chunk_decode(rep.data, rep.len, &a, &ch), LLB_STATUS_OK);
  *bytes = ch.data_len;
  if (got) *got = ch.generation;
  if (ch.status != LLB_KV_TRANSFER_OK) assert_true(ch.error.code != 0 && ch.error.message.len > 0);
  llb_arena_destroy(&a);
  llb_buf_free(&req);
  llb_buf_free(&rep);
  return ch.status;
}

/* Serves one KVFetchRequest (no generation: any export of id) through c directly. */
static int32_t fetch_direct(struct kv_connector *c, const char *id, int32_t first, int32_t n, size_t *bytes) {
  return fetch_gen(c, id, 0, first, n, bytes, NULL);
}

static void test_only_listed_blocks_are_served_and_an_expired_export_says_so(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P3", rp, NULL);
  const int32_t blocks[3] = {5, 6, 7};
  export_blocks(cp, "p-listed", blocks, 3, 10, 30.0f);
  size_t bytes = 0;
  assert_int_equal(fetch_direct(cp, "p-other", 0, 1, &bytes), LLB_KV_TRANSFER_NOT_READY);
  assert_int_equal(bytes, 0);
  assert_int_equal(fetch_direct(cp, "p-listed", 2, 2, &bytes), LLB_KV_TRANSFER_OUT_OF_RANGE);
  assert_int_equal(fetch_direct(cp, "p-listed", 3, 1, &bytes), LLB_KV_TRANSFER_OUT_OF_RANGE);
  assert_int_equal(bytes, 0);
  /* an export of blocks outside the cache is refused and reported ended (its blocks freed) */
  const int32_t outside[1] = {NB};
  export_blocks(cp, "p-outside", outside, 1, 4, 30.0f);
  wait_ended(cp, "p-outside", ENDED_SENDING);
  assert_int_equal(fetch_direct(cp, "p-outside", 0, 1, &bytes), LLB_KV_TRANSFER_NOT_READY);
  /* more blocks than a chunk carries (2 here): an error naming the most, no data */
  assert_int_equal(fetch_direct(cp, "p-listed", 0, 3, &bytes), LLB_KV_TRANSFER_ERROR);
  assert_int_equal(bytes, 0);
  /* fetching every block ends nothing (a lost reply may be fetched again); a fetch naming another
   * generation gets Unknown and no data; the release ends it and a late fetch gets Unknown */
  uint64_t gen = 0;
  assert_int_equal(fetch_gen(cp, "p-listed", 0, 0, 2, &bytes, &gen), LLB_KV_TRANSFER_OK);
  assert_int_equal(bytes, 2 * (size_t)(2 * L * BS * HKV * D * 2));
  assert_int_equal(fetch_gen(cp, "p-listed", gen, 2, 1, &bytes, NULL), LLB_KV_TRANSFER_OK);
  assert_int_equal(fetch_gen(cp, "p-listed", gen, 2, 1, &bytes, NULL), LLB_KV_TRANSFER_OK);
  uint64_t named = 0;
  assert_int_equal(fetch_gen(cp, "p-listed", gen + 1, 0, 1, &bytes, &named), LLB_KV_TRANSFER_UNKNOWN);
  assert_int_equal(bytes, 0);
  assert_true(named == gen);
  struct llb_kv_connector_output held;
  kv_connector_after_step(cp, &held);
  assert_false(has(held.finished_sending, held.num_finished_sending, "p-listed"));
  const struct llb_kv_fetch_request rel = {.request_id = llb_str_c("p-listed"), .last = true, .generation = gen};
  struct llb_buf rb = {0};
  assert_int_equal(llb_kv_fetch_request_encode_buf(&rel, &rb), LLB_STATUS_OK);
  assert_true(kv_connector_release(cp, rb.data, rb.len));
  llb_buf_free(&rb);
  wait_ended(cp, "p-listed", ENDED_SENDING);
  assert_int_equal(fetch_direct(cp, "p-listed", 0, 1, &bytes), LLB_KV_TRANSFER_UNKNOWN);
  /* an undecodable request gets an Error chunk naming the codec's complaint, never data */
  const uint8_t garbage[24] = {20, 0, 0, 0, 'x', 'y'};
  struct llb_buf rep = {0};
  assert_int_equal(kv_connector_serve(cp, garbage, sizeof garbage, &rep), LLB_STATUS_OK);
  struct llb_arena ga;
  llb_arena_init(&ga, NULL, 0);
  struct llb_kv_transfer_chunk gch;
  assert_int_equal(llb_kv_transfer_chunk_decode(rep.data, rep.len, &ga, &gch), LLB_STATUS_OK);
  assert_int_equal(gch.status, LLB_KV_TRANSFER_ERROR);
  assert_int_equal(gch.error.code, LLB_STATUS_MALFORMED);
  assert_int_equal(gch.data_len, 0);
  llb_arena_destroy(&ga);
  llb_buf_free(&rep);
  /* an expired export: reported finished_sending, then fetches get Expired */
  export_blocks(cp, "p-expiring", blocks, 3, 12, 0.05f);
  nanosleep(&(struct timespec){0, 100000000}, NULL);
  wait_ended(cp, "p-expiring", ENDED_SENDING);
  assert_int_equal(fetch_direct(cp, "p-expiring", 0, 1, &bytes), LLB_KV_TRANSFER_EXPIRED);
  assert_int_equal(bytes, 0);
  kv_connector_destroy(cp);
  model_runner_destroy(rp);
}

/* The scheduler's epoch changes (it restarted, or its kv_manager may have lost its state: the
 * blocks may go to another request in this very step): before that step every export is dropped,
 * unreported, and a fetch gets Expired, never the blocks' new contents; the same epoch again
 * drops nothing. */
static void test_a_new_scheduler_epoch_drops_every_export_before_the_step(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P4", rp, NULL);
  const int32_t blocks[3] = {5, 6, 7};
  const struct llb_kv_connector_metadata e1 = {.epoch = 11};
  assert_int_equal(kv_connector_before_step(cp, &e1, NULL, 0), LLB_STATUS_OK);
  export_blocks(cp, "p-old", blocks, 3, 10, 30.0f); /* no epoch on this one: none, nothing dropped */
  size_t bytes = 0;
  assert_int_equal(fetch_direct(cp, "p-old", 0, 1, &bytes), LLB_KV_TRANSFER_OK);
  assert_int_equal(kv_connector_before_step(cp, &e1, NULL, 0), LLB_STATUS_OK); /* the same epoch */
  assert_int_equal(fetch_direct(cp, "p-old", 1, 1, &bytes), LLB_KV_TRANSFER_OK);
  const struct llb_kv_connector_metadata e2 = {.epoch = 12};
  assert_int_equal(kv_connector_before_step(cp, &e2, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(fetch_direct(cp, "p-old", 2, 1, &bytes), LLB_KV_TRANSFER_EXPIRED);
  assert_int_equal(bytes, 0);
  struct llb_kv_connector_output out;
  kv_connector_after_step(cp, &out);
  assert_int_equal(out.num_finished_sending, 0); /* the scheduler ended them itself */
  assert_false(kv_connector_busy(cp));
  kv_connector_destroy(cp);
  model_runner_destroy(rp);
}

static void test_a_receive_of_an_expired_export_fails(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P4", rp, bus_p), *cq = make_connector("Q4", rq, bus_q);
  const int32_t blocks[4] = {1, 2, 3, 4}, local[4] = {9, 10, 11, 12};
  export_blocks(cp, "p-gone", blocks, 4, N, 0.02f);
  nanosleep(&(struct timespec){0, 60000000}, NULL);
  wait_ended(cp, "p-gone", ENDED_SENDING);
  receive_blocks(cq, "q-gone", "P4", "p-gone", local, 0, N);
  wait_ended(cq, "q-gone", ENDED_FAILED);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* Returns once c's fetcher asked again after a reply (NotReady here: P runs, no reply is lost). */
static void wait_retried(struct kv_connector *c) {
  struct kv_connector_stats st = {0};
  for (int i = 0; i < 2000 && st.chunks_retried == 0; i++) {
    nanosleep(&(struct timespec){0, 5000000}, NULL);
    kv_connector_stats(c, &st);
  }
  assert_true(st.chunks_retried > 0);
}

/* A step on worker c with nothing to transfer: before_step (metadata, no exports), after_step. */
static void empty_step(struct kv_connector *c, bool end) {
  const struct llb_kv_connector_metadata m = {0};
  assert_int_equal(kv_connector_before_step(c, &m, NULL, 0), LLB_STATUS_OK);
  struct llb_kv_connector_output o;
  if (end) kv_connector_after_step(c, &o);
}

/* P's worker is in a step longer than not_ready_timeout_ms (300 ms here; a CPU prefill of
 * thousands of tokens on a large model) with the step carrying the export queued behind it: Q's
 * NotReady clock stops while P reports a step executing, and the receive completes once P
 * exports. Before, the 300 ms of NotReady failed it and Q recomputed the whole prompt. */
static void test_a_long_step_on_the_exporter_does_not_fail_a_receive_queued_behind_it(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P12", rp, bus_p), *cq = make_connector_nr("Q12", rq, bus_q, 300, 0);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  const int32_t blocks[4] = {1, 2, 3, 4}, local[4] = {9, 10, 11, 12};
  empty_step(cp, false); /* the long step begins */
  receive_blocks(cq, "q-behind", "P12", "p-behind", local, 0, N);
  for (int i = 0; i < 12; i++) { /* 1.2 s of it, 4x Q's NotReady timeout */
    nanosleep(&(struct timespec){0, 100000000}, NULL);
    struct llb_kv_connector_output o;
    kv_connector_after_step(cq, &o);
    assert_int_equal(o.num_failed_recving, 0);
  }
  struct llb_kv_connector_output o;
  kv_connector_after_step(cp, &o); /* it ends; the next step registers the export */
  export_blocks(cp, "p-behind", blocks, 4, N, 30.0f);
  wait_ended(cq, "q-behind", ENDED_RECVING);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* P's scheduler died after the hand-off and its successor runs steps without the export (or a
 * step carrying it was dropped): once P's worker has begun two more steps since Q's first
 * NotReady, the export cannot come and the receive fails, long before Q's NotReady timeout
 * (8 s here; wait_ended gives up at 10 s). */
static void test_an_export_missing_two_steps_later_fails_the_receive_at_once(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P13", rp, bus_p), *cq = make_connector_nr("Q13", rq, bus_q, 8000, 0);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  const int32_t local[4] = {9, 10, 11, 12};
  empty_step(cp, true); /* P has run a step: its replies name worker_steps 1 */
  receive_blocks(cq, "q-never", "P13", "p-never", local, 0, N);
  wait_retried(cq);
  empty_step(cp, true);
  nanosleep(&(struct timespec){0, 100000000}, NULL);
  struct llb_kv_connector_output o;
  kv_connector_after_step(cq, &o);
  assert_int_equal(o.num_failed_recving, 0); /* one step later the export may still come */
  const int64_t t0 = llb_now_ns();
  empty_step(cp, true);
  wait_ended(cq, "q-never", ENDED_FAILED);
  assert_true((double)(llb_now_ns() - t0) / 1e9 < 4.0);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* The hand-off reaches the decode engine before the exporting worker runs the step that registers
 * the export: Q's first fetches get NotReady and the receive completes once P exports. */
static void test_a_receive_started_before_its_export_completes(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P9", rp, bus_p), *cq = make_connector_nr("Q9", rq, bus_q, 3000, 0);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  const int32_t blocks[4] = {1, 2, 3, 4}, local[4] = {9, 10, 11, 12};
  receive_blocks(cq, "q-early", "P9", "p-late", local, 0, N);
  wait_retried(cq); /* Q asked, P answered NotReady */
  export_blocks(cp, "p-late", blocks, 4, N, 30.0f);
  wait_ended(cq, "q-early", ENDED_RECVING);
  wait_ended(cp, "p-late", ENDED_SENDING); /* Q's release */
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* Defect "a receive waits a minute for an export lost with its worker" (chaos_pd_short: the
 * prefill engine's scheduler and worker killed between the hand-off and the step carrying the
 * export; the new worker answered NotReady until the 60 s transfer deadline and the request sent
 * nothing for 60 s): NotReady in a row for not_ready_timeout_ms (here 300 ms) fails the receive,
 * long before its 10 s transfer deadline (wait_ended's own limit), and the scheduler recomputes. */
static void test_an_export_that_never_comes_fails_the_receive_at_the_not_ready_timeout(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P10", rp, bus_p), *cq = make_connector_nr("Q10", rq, bus_q, 300, 0);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  const int32_t local[4] = {9, 10, 11, 12};
  const int64_t t0 = llb_now_ns();
  receive_blocks(cq, "q-lost", "P10", "p-lost", local, 0, N);
  wait_ended(cq, "q-lost", ENDED_FAILED);
  const double s = (double)(llb_now_ns() - t0) / 1e9;
  assert_true(s >= 0.3);
  assert_true(s < 8.0);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

/* The prefill engine's worker restarts while Q waits for an export it has not registered yet: its
 * successor (same engine id, another incarnation) answers NotReady, and Q's receive fails at that
 * answer, not after not_ready_timeout_ms (here 8 s; wait_ended gives up at 10 s), so the scheduler
 * recomputes at once. Q resends unanswered requests without limit here, so that the moment with no
 * worker subscribed cannot end the receive first. */
static void test_a_restarted_exporter_fails_the_receive_at_its_first_answer(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P11", rp, bus_p), *cq = make_connector_nr("Q11", rq, bus_q, 8000, 1000000);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  const int32_t local[4] = {9, 10, 11, 12};
  receive_blocks(cq, "q-orphan", "P11", "p-orphan", local, 0, N);
  wait_retried(cq); /* the first worker answered NotReady */
  kv_connector_destroy(cp); /* the worker dies; its successor subscribes */
  cp = make_connector("P11", rp, bus_p);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  const int64_t t0 = llb_now_ns();
  wait_ended(cq, "q-orphan", ENDED_FAILED);
  assert_true((double)(llb_now_ns() - t0) / 1e9 < 4.0);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

static void test_every_cpu_kv_dtype_arrives_bit_exactly(void **state) {
  (void)state;
  const enum backend_kv_dtype dtypes[] = {BACKEND_KV_DTYPE_F16, BACKEND_KV_DTYPE_Q8_0, BACKEND_KV_DTYPE_FP8_E4M3};
  for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
    struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, dtypes[t]),
                        *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, dtypes[t]);
    char ep[16], eq[16];
    snprintf(ep, sizeof ep, "Pd%zu", t);
    snprintf(eq, sizeof eq, "Qd%zu", t);
    struct kv_connector *cp = make_connector(ep, rp, bus_p), *cq = make_connector(eq, rq, bus_q);
    struct req p, q;
    req_init(&p, "p-dtype", true, 0);
    prefill_and_export(rp, cp, &p, 30.0f);
    req_init(&q, "q-dtype", true, 30);
    receive_blocks(cq, q.id, ep, p.id, q.blocks, 0, N);
    wait_ended(cq, q.id, ENDED_RECVING);
    struct model_runner_kv_geometry g;
    model_runner_kv_geometry(rp, &g);
    assert_int_equal(g.dtype, dtypes[t]);
    uint8_t *a = malloc(g.block_bytes), *b = malloc(g.block_bytes);
    for (int32_t i = 0; i < (N + BS - 1) / BS; i++) {
      assert_int_equal(model_runner_kv_block_read(rp, p.blocks[i], a, g.block_bytes), LLB_STATUS_OK);
      assert_int_equal(model_runner_kv_block_read(rq, q.blocks[i], b, g.block_bytes), LLB_STATUS_OK);
      assert_memory_equal(a, b, g.block_bytes);
    }
    bool nonzero = false; /* the prompt's KV is there, not an empty cache on both sides */
    for (size_t i = 0; i < g.block_bytes && !nonzero; i++) nonzero = a[i] != 0;
    assert_true(nonzero);
    free(a);
    free(b);
    kv_connector_destroy(cp);
    kv_connector_destroy(cq);
    model_runner_destroy(rp);
    model_runner_destroy(rq);
  }
}

static void test_concurrent_receives_each_get_their_own_blocks(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("P7", rp, bus_p), *cq = make_connector("Q7", rq, bus_q);
  struct req p1, p2;
  req_init(&p1, "p-one", true, 0);
  req_init(&p2, "p-two", true, 8);
  p2.tokens[0] = 60; /* another prompt: other KV */
  prefill_and_export(rp, cp, &p1, 30.0f);
  prefill_and_export(rp, cp, &p2, 30.0f);
  const int32_t l1[4] = {40, 41, 42, 43}, l2[4] = {50, 51, 52, 53};
  const struct llb_kv_recv_request r[2] = {
      {.req_id = llb_str_c("q-one"), .local_block_ids = l1, .num_local_block_ids = 4,
       .remote_engine_id = llb_str_c("P7"), .remote_request_id = llb_str_c("p-one"), .num_tokens = N},
      {.req_id = llb_str_c("q-two"), .local_block_ids = l2, .num_local_block_ids = 4,
       .remote_engine_id = llb_str_c("P7"), .remote_request_id = llb_str_c("p-two"), .num_tokens = N}};
  const struct llb_kv_connector_metadata m = {.reqs_to_recv = r, .num_reqs_to_recv = 2};
  assert_int_equal(kv_connector_before_step(cq, &m, NULL, 0), LLB_STATUS_OK);
  int done = 0;
  for (int i = 0; i < 2000 && done < 2; i++) {
    struct llb_kv_connector_output o;
    kv_connector_after_step(cq, &o);
    assert_int_equal(o.num_failed_recving, 0);
    done += o.num_finished_recving;
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
  assert_int_equal(done, 2);
  struct model_runner_kv_geometry g;
  model_runner_kv_geometry(rp, &g);
  uint8_t *a = malloc(g.block_bytes), *b = malloc(g.block_bytes);
  for (int32_t i = 0; i < 4; i++) {
    assert_int_equal(model_runner_kv_block_read(rp, p1.blocks[i], a, g.block_bytes), LLB_STATUS_OK);
    assert_int_equal(model_runner_kv_block_read(rq, l1[i], b, g.block_bytes), LLB_STATUS_OK);
    assert_memory_equal(a, b, g.block_bytes);
    assert_int_equal(model_runner_kv_block_read(rp, p2.blocks[i], a, g.block_bytes), LLB_STATUS_OK);
    assert_int_equal(model_runner_kv_block_read(rq, l2[i], b, g.block_bytes), LLB_STATUS_OK);
    assert_memory_equal(a, b, g.block_bytes);
  }
  free(a);
  free(b);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

static void test_a_mismatched_geometry_fails_the_receive(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_Q8_0);
  struct kv_connector *cp = make_connector("P5", rp, bus_p), *cq = make_connector("Q5", rq, bus_q);
  const int32_t blocks[4] = {1, 2, 3, 4}, local[4] = {9, 10, 11, 12};
  export_blocks(cp, "p-fp16", blocks, 4, N, 30.0f);
  receive_blocks(cq, "q-q8", "P5", "p-fp16", local, 0, N);
  wait_ended(cq, "q-q8", ENDED_FAILED);
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

static void test_sim_workers_move_bytes_of_the_real_size(void **state) {
  (void)state;
  struct model_runner *rp = make_runner(MODEL_RUNNER_DEVICE_SIM, BACKEND_KV_DTYPE_F16),
                      *rq = make_runner(MODEL_RUNNER_DEVICE_SIM, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cp = make_connector("Psim", rp, bus_p), *cq = make_connector("Qsim", rq, bus_q);
  const int32_t blocks[4] = {1, 2, 3, 4}, local[4] = {9, 10, 11, 12};
  export_blocks(cp, "p-sim", blocks, 4, N, 30.0f);
  receive_blocks(cq, "q-sim", "Psim", "p-sim", local, 0, N);
  wait_ended(cq, "q-sim", ENDED_RECVING);
  struct kv_connector_stats sq;
  kv_connector_stats(cq, &sq);
  assert_int_equal(sq.bytes_received, 4 * (uint64_t)(2 * L * BS * HKV * D * 2)); /* fp16 blocks */
  kv_connector_destroy(cp);
  kv_connector_destroy(cq);
  model_runner_destroy(rp);
  model_runner_destroy(rq);
}

static void test_a_receive_cancelled_by_finished_req_ids_is_reported_failed(void **state) {
  (void)state;
  struct model_runner *rq = make_runner(MODEL_RUNNER_DEVICE_CPU, BACKEND_KV_DTYPE_F16);
  struct kv_connector *cq = make_connector("Q6", rq, bus_q);
  const int32_t local[4] = {9, 10, 11, 12};
  receive_blocks(cq, "q-aborted", "Pnobody", "p-none", local, 0, N); /* NotReady until cancelled */
  const struct llb_str id = llb_str_c("q-aborted");
  assert_int_equal(kv_connector_before_step(cq, NULL, &id, 1), LLB_STATUS_OK);
  wait_ended(cq, "q-aborted", ENDED_FAILED);
  kv_connector_destroy(cq);
  model_runner_destroy(rq);
}

/* ---- through the worker actor: the lists travel in ModelRunnerOutput ------------------------ */

/* Sends so to engine eid's worker and decodes its reply into *out (arena a). */
static void exec_step(const char *eid, const struct llb_scheduler_output *so, struct llb_arena *a,
                      struct llb_model_runner_output *out) {
  char subject[BUS_SUBJECT_MAX];
  assert_int_equal(bus_subject_engine(bus_prefix(bus_p), eid, "execute", subject, sizeof subject), LLB_STATUS_OK);
  struct llb_buf b = {0};
  assert_int_equal(llb_scheduler_output_encode_buf(so, &b), LLB_STATUS_OK);
  struct bus_msg *reply = NULL;
  assert_int_equal(bus_request(bus_p, subject, b.data, b.len, NULL, 10000, &reply), LLB_STATUS_OK);
  llb_arena_reset(a);
  assert_int_equal(llb_model_runner_output_decode(reply->data, reply->len, a, out), LLB_STATUS_OK);
  if (out->error.code) fail_msg("step %llu: %s", (unsigned long long)so->step, out->error.message.data);
  bus_msg_destroy(reply);
  llb_buf_free(&b);
}

/* Empty steps of eid's worker until `id` is in the list `which` of a reply (10 s at most). */
static void exec_until(const char *eid, const char *id, enum ended which) {
  struct llb_arena a;
  llb_arena_init(&a, NULL, 0);
  const struct llb_scheduler_output empty = {.version = 1, .step = 60, .block_size = BS};
  for (int i = 0; i < 2000; i++) {
    struct llb_model_runner_output out;
    exec_step(eid, &empty, &a, &out);
    const struct llb_kv_connector_output *o = &out.kv_connector_output;
    const bool hit = which == ENDED_SENDING   ? has(o->finished_sending, o->num_finished_sending, id)
                     : which == ENDED_RECVING ? has(o->finished_recving, o->num_finished_recving, id)
                                              : has(o->failed_recving, o->num_failed_recving, id);
    if (hit) {
      llb_arena_destroy(&a);
      return;
    }
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
  fail_msg("%s did not end on %s", id, eid);
}

static struct gpu_worker_actor *start_worker(const char *path, const char *eid, bool kv, struct bus *bus) {
  const struct gpu_worker_actor_options o = {
      .model_path = path, .engine_id = eid, .num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
      .num_threads = 1, .kv_transfer = kv, .kv_config = {.fetch_timeout_ms = 1000, .retry_ms = 5}};
  struct gpu_worker_actor *w = NULL;
  assert_int_equal(gpu_worker_actor_create(&o, &w), LLB_STATUS_OK);
  assert_int_equal(gpu_worker_actor_start(w, bus), LLB_STATUS_OK);
  assert_int_equal(bus_flush(bus, 2000), LLB_STATUS_OK);
  return w;
}

static void test_workers_report_the_transfer_in_their_model_runner_outputs(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/tiny.gguf", srv.dir);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(model_buf, 1, model_size, fp), model_size);
  fclose(fp);
  struct gpu_worker_actor *wp = start_worker(path, "AP", true, bus_p), *wq = start_worker(path, "AQ", true, bus_q),
                          *wn = start_worker(path, "AN", false, bus_q);
  struct req alone, p, q;
  req_init(&alone, "alone", true, 0);
  run_alone(&alone);
  req_init(&p, "p-actor", true, 0);
  req_init(&q, "q-actor", true, 24);
  struct llb_arena a;
  llb_arena_init(&a, NULL, 0);
  struct llb_model_runner_output out;
  /* P: prefill, sample the first token */
  const struct llb_new_request_data nr = {.req_id = llb_str_c(p.id), .prompt_token_ids = p.tokens,
                                          .num_prompt_token_ids = N, .sampling_params = &p.params,
                                          .block_ids = p.blocks, .num_block_ids = p.num_blocks};
  const struct llb_scheduled_tokens sched = {.req_id = llb_str_c(p.id), .num_tokens = N};
  const struct llb_scheduler_output s1 = {.version = 1, .step = 1, .block_size = BS, .scheduled_new_reqs = &nr,
                                          .num_scheduled_new_reqs = 1, .num_scheduled_tokens = &sched,
                                          .num_scheduled_reqs = 1, .total_num_scheduled_tokens = N};
  exec_step("AP", &s1, &a, &out);
  assert_int_equal(out.num_sampled_token_ids, 1);
  p.tokens[N] = out.sampled_token_ids[0];
  assert_int_equal(p.tokens[N], alone.tokens[N]);
  /* P: the request leaves the batch, its blocks are exported */
  const struct llb_str pid = llb_str_c(p.id);
  const struct llb_kv_send_request send = {.req_id = pid, .block_ids = p.blocks, .num_block_ids = (N + BS - 1) / BS,
                                           .num_tokens = N, .expires_in_s = 30.0f};
  const struct llb_scheduler_output s2 = {.version = 1, .step = 2, .block_size = BS, .finished_req_ids = &pid,
                                          .num_finished_req_ids = 1,
                                          .kv_connector_metadata = {.reqs_to_send = &send, .num_reqs_to_send = 1}};
  exec_step("AP", &s2, &a, &out);
  /* Q: receive, then decode from the received KV */
  const struct llb_kv_recv_request recv = {.req_id = llb_str_c(q.id), .local_block_ids = q.blocks,
                                           .num_local_block_ids = (N + BS - 1) / BS, .remote_engine_id = llb_str_c("AP"),
                                           .remote_request_id = pid, .num_tokens = N};
  const struct llb_scheduler_output s3 = {.version = 1, .step = 1, .block_size = BS,
                                          .kv_connector_metadata = {.reqs_to_recv = &recv, .num_reqs_to_recv = 1}};
  exec_step("AQ", &s3, &a, &out);
  exec_until("AQ", q.id, ENDED_RECVING);
  exec_until("AP", p.id, ENDED_SENDING);
  q.tokens[N] = p.tokens[N];
  q.num_tokens = N + 1;
  const struct llb_new_request_data nq = {.req_id = llb_str_c(q.id), .prompt_token_ids = q.tokens,
                                          .num_prompt_token_ids = N, .output_token_ids = q.tokens + N,
                                          .num_output_token_ids = 1, .sampling_params = &q.params,
                                          .block_ids = q.blocks, .num_block_ids = q.num_blocks,
                                          .num_computed_tokens = N};
  const struct llb_scheduled_tokens sq = {.req_id = llb_str_c(q.id), .num_tokens = 1};
  const struct llb_scheduler_output s4 = {.version = 1, .step = 2, .block_size = BS, .scheduled_new_reqs = &nq,
                                          .num_scheduled_new_reqs = 1, .num_scheduled_tokens = &sq,
                                          .num_scheduled_reqs = 1, .total_num_scheduled_tokens = 1};
  exec_step("AQ", &s4, &a, &out);
  assert_int_equal(out.num_sampled_token_ids, 1);
  assert_int_equal(out.sampled_token_ids[0], alone.tokens[N + 1]);
  /* the worker's /metrics counts what moved */
  struct llb_metrics *reg = NULL;
  assert_int_equal(llb_metrics_create(&reg), LLB_STATUS_OK);
  assert_int_equal(gpu_worker_actor_register_metrics(wq, reg), LLB_STATUS_OK);
  char *text = NULL, want[128];
  size_t text_len = 0;
  assert_int_equal(llb_metrics_render(reg, &text, &text_len), LLB_STATUS_OK);
  const size_t block_bytes = (size_t)2 * L * BS * HKV * D * 2; /* fp16 */
  snprintf(want, sizeof want, "llmbus:kv_transfer_received_bytes_total %zu\n", (size_t)((N + BS - 1) / BS) * block_bytes);
  if (!strstr(text, want)) fail_msg("no '%s' in:\n%s", want, text);
  assert_non_null(strstr(text, "llmbus:kv_transfer_receives_total{result=\"finished\"} 1\n"));
  free(text);
  llb_metrics_destroy(reg);
  /* a worker without --kv-transfer: the export ends and the receive fails at once */
  const struct llb_scheduler_output s5 = {.version = 1, .step = 1, .block_size = BS,
                                          .kv_connector_metadata = {.reqs_to_recv = &recv, .num_reqs_to_recv = 1,
                                                                    .reqs_to_send = &send, .num_reqs_to_send = 1}};
  exec_step("AN", &s5, &a, &out);
  assert_true(has(out.kv_connector_output.finished_sending, out.kv_connector_output.num_finished_sending, p.id));
  assert_true(has(out.kv_connector_output.failed_recving, out.kv_connector_output.num_failed_recving, q.id));
  llb_arena_destroy(&a);
  gpu_worker_actor_stop(wp);
  gpu_worker_actor_stop(wq);
  gpu_worker_actor_stop(wn);
  assert_int_equal(bus_flush(bus_p, 2000), LLB_STATUS_OK);
  assert_int_equal(bus_flush(bus_q, 2000), LLB_STATUS_OK);
  /* the actors are destroyed with the buses (teardown): a handler may still hold them until then */
  workers[0] = wp;
  workers[1] = wq;
  workers[2] = wn;
}

int main(void) {
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary\n");
    return 77;
  }
  llb_log_set_level(LLB_LOG_LEVEL_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_from_fetched_blocks_equals_the_request_run_alone),
      cmocka_unit_test(test_decode_from_fetched_blocks_equals_alone_on_every_architecture),
      cmocka_unit_test(test_partial_fetch_onto_a_prefix_q_holds_equals_the_request_run_alone),
      cmocka_unit_test(test_a_flipped_byte_in_transit_fails_the_receive_and_recompute_gives_the_same_tokens),
      cmocka_unit_test(test_a_lost_reply_is_fetched_again_and_the_transfer_completes),
      cmocka_unit_test(test_a_lost_reply_to_the_last_chunk_is_fetched_again),
      cmocka_unit_test(test_a_stale_release_does_not_end_a_newer_export),
      cmocka_unit_test(test_replies_that_never_come_fail_the_receive),
      cmocka_unit_test(test_a_release_ends_the_export_at_once),
      cmocka_unit_test(test_only_listed_blocks_are_served_and_an_expired_export_says_so),
      cmocka_unit_test(test_a_new_scheduler_epoch_drops_every_export_before_the_step),
      cmocka_unit_test(test_a_receive_of_an_expired_export_fails),
      cmocka_unit_test(test_a_receive_started_before_its_export_completes),
      cmocka_unit_test(test_an_export_that_never_comes_fails_the_receive_at_the_not_ready_timeout),
      cmocka_unit_test(test_a_restarted_exporter_fails_the_receive_at_its_first_answer),
      cmocka_unit_test(test_a_long_step_on_the_exporter_does_not_fail_a_receive_queued_behind_it),
      cmocka_unit_test(test_an_export_missing_two_steps_later_fails_the_receive_at_once),
      cmocka_unit_test(test_every_cpu_kv_dtype_arrives_bit_exactly),
      cmocka_unit_test(test_concurrent_receives_each_get_their_own_blocks),
      cmocka_unit_test(test_a_mismatched_geometry_fails_the_receive),
      cmocka_unit_test(test_sim_workers_move_bytes_of_the_real_size),
      cmocka_unit_test(test_a_receive_cancelled_by_finished_req_ids_is_reported_failed),
      cmocka_unit_test(test_workers_report_the_transfer_in_their_model_runner_outputs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
