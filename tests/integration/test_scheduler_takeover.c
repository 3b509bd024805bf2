/* A resumed request that finishes in its first step (the race make chaos found after a
 * nats-server kill, fixed in actors/scheduler/output_publisher.c fill_resync_from_meta):
 * the scheduler, kv_manager and output processor actors in process against a real
 * nats-server, the test as the worker (one token per scheduled request, its value set by the
 * output position, so every run of a request samples the same tokens) and as the clients.
 *
 * A resend (EngineCoreRequest.resume_request_id) resumes the request it replaces with the
 * outputs that one had (actors/scheduler/history_fetch.c): taken over from the scheduler when
 * the replaced request still runs there, or fetched from the output processor's history after
 * a scheduler restart. Resumed with N-1 of max_tokens = N (or with a stop token sampled next),
 * it finishes in its first step and is gone from the scheduler when its only output is built.
 * That output must still carry the whole output from position 0 (resync): before the fix it
 * went out at position N-1 and the output processor failed the request ("output tokens lost:
 * expected position 0, got N-1"). The resend's client must get the same completion as a run
 * with no fault. Tokenizer: the GPT-2 vocab of the shared test data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/kv_manager/actor.h"
#include "actors/output_processor/actor.h"
#include "actors/scheduler/actor.h"
#include "base/hash.h"
#include "base/log.h"
#include "bus/bus.h"
#include "schemas/engine_core_request.h"
#include "schemas/model_runner_output.h"
#include "schemas/request_output.h"
#include "schemas/scheduler_output.h"
#include "tests/integration/nats_test_server.h"

#define VOCAB LLB_TESTDATA_DIR "/tokenizer/ggml-vocab-gpt-2.gguf"
#define VOCAB_SIZE 50257
#define EOS 50256 /* GPT-2's <|endoftext|> */
#define EID "t9"
#define TENANT "acme"
#define SALT "4:acme" /* the input processor's "<len>:<tenant>" */
#define WAIT_MS 20000 /* generous: a loaded 2-core machine */
#define MAX_TOKENS 8
#define MAX_REQS 16
#define HASH_KEY_HEX "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static const int32_t PROMPT[] = {464, 3139, 286, 4881, 318}; /* "The capital of France is" */
#define NUM_PROMPT ((int32_t)(sizeof PROMPT / sizeof PROMPT[0]))

/* What the worker does to one step of one request. */
enum fault_kind {
  FAULT_NONE,
  FAULT_ERROR,  /* answer NOT_FOUND (a worker that lost its batch): the scheduler preempts all */
  FAULT_SILENT, /* never answer (the test restarts the scheduler) */
};

/* The fake worker: one token per scheduled request, token_at(its output position). Its fault
 * fires on every step of `fault_id` at output position `fault_pos`, so that request never gets
 * that token, whatever the timing: the first time it publishes `resend` on the engine's
 * requests subject (the resend waits in the scheduler's intake when the failed step comes
 * back), then it answers as `fault` says. Handler thread; `mu` guards what the test reads. */
struct worker {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  struct llb_arena arena;
  int32_t stop_pos; /* the token at this output position is EOS; -1 = none */
  enum fault_kind fault;
  char fault_id[160];
  int32_t fault_pos;
  struct llb_buf resend;
  int faults_fired;
  char watch_id[160];           /* a request whose first scheduling is recorded: */
  int32_t watch_resumed_outputs; /* its NewRequestData.output_token_ids count, -1 = not seen */
};

struct fixture {
  struct nats_test_server srv;
  struct bus *sched_bus, *kv_bus, *op_bus, *client;
  struct scheduler_actor *sched;
  struct kv_manager_actor *kv;
  struct output_processor_actor *op;
  struct llb_hash_key key;
  bool async_scheduling;
  struct worker w;
  struct llb_arena arena;
  unsigned next_id;
};

static int32_t token_at(const struct worker *w, int32_t pos) { return pos == w->stop_pos ? EOS : 100 + pos; }

/* The output position of the token req_id samples in this step: its known outputs (and, with
 * asynchronous scheduling, the placeholders of the step before); -1 if it is not in the step. */
static int32_t output_pos(const struct llb_scheduler_output *so, const struct llb_str *id, struct worker *w) {
  for (int32_t i = 0; i < so->num_scheduled_new_reqs; i++) {
    const struct llb_new_request_data *n = &so->scheduled_new_reqs[i];
    if (strcmp(n->req_id.data, id->data) != 0) continue;
    if (strcmp(n->req_id.data, w->watch_id) == 0) w->watch_resumed_outputs = n->num_output_token_ids;
    return n->num_output_token_ids;
  }
  const struct llb_cached_request_data *c = &so->scheduled_cached_reqs;
  for (int32_t i = 0; i < c->num_reqs; i++)
    if (strcmp(c->req_ids[i].data, id->data) == 0) return c->num_output_tokens[i];
  return -1;
}

static void respond(struct bus *bus, const struct bus_msg *msg, const struct llb_model_runner_output *mo) {
  struct llb_buf b = {0};
  if (llb_model_runner_output_encode_buf(mo, &b) == LLB_STATUS_OK) (void)bus_respond(bus, msg, b.data, b.len, NULL);
  llb_buf_free(&b);
}

/* Fires the armed fault (the caller holds w->mu): the resend first (once), then the answer. */
static void fire_fault(struct bus *bus, const struct bus_msg *msg, struct worker *w, uint64_t step) {
  const enum fault_kind kind = w->fault;
  if (w->faults_fired == 0 && w->resend.len > 0) {
    (void)bus_publish(bus, "llm.engine." EID ".requests", w->resend.data, w->resend.len, NULL);
    (void)bus_flush(bus, WAIT_MS); /* at the scheduler before the answer below */
  }
  if (kind == FAULT_ERROR) {
    const struct llb_model_runner_output mo = {
        .version = LLB_SCHEMA_VERSION, .step = step,
        .error = {.code = LLB_STATUS_NOT_FOUND, .message = llb_str_c("worker lost its batch (test fault)")}};
    respond(bus, msg, &mo);
  }
  w->faults_fired++;
  pthread_cond_broadcast(&w->cond);
}

static void on_execute(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct worker *w = user;
  pthread_mutex_lock(&w->mu);
  llb_arena_reset(&w->arena);
  struct llb_scheduler_output so;
  if (llb_scheduler_output_decode(msg->data, msg->len, &w->arena, &so) != LLB_STATUS_OK) {
    pthread_mutex_unlock(&w->mu);
    return;
  }
  struct llb_str ids[MAX_REQS];
  int32_t num_sampled[MAX_REQS], tokens[MAX_REQS], n = 0;
  bool fault = false;
  for (int32_t i = 0; i < so.num_scheduled_reqs && n < MAX_REQS; i++) {
    const struct llb_str *id = &so.num_scheduled_tokens[i].req_id;
    const int32_t pos = output_pos(&so, id, w);
    if (pos < 0) continue;
    fault = fault || (w->fault != FAULT_NONE && strcmp(id->data, w->fault_id) == 0 && pos == w->fault_pos);
    ids[n] = *id;
    num_sampled[n] = 1;
    tokens[n++] = token_at(w, pos);
  }
  if (fault) {
    fire_fault(bus, msg, w, so.step);
  } else {
    const struct llb_model_runner_output mo = {.version = LLB_SCHEMA_VERSION, .step = so.step, .req_ids = ids,
                                               .num_reqs = n, .sampled_token_ids = tokens,
                                               .num_sampled_token_ids = n, .num_sampled = num_sampled};
    respond(bus, msg, &mo);
  }
  pthread_mutex_unlock(&w->mu);
}

static struct bus *connect_or_fail(const char *url, const char *name) {
  return nats_test_connect(url, name, NULL);
}

static void start_scheduler(struct fixture *f) {
  struct scheduler_actor_options o;
  scheduler_actor_options_init(&o);
  o.engine_id = EID;
  o.sched.num_blocks = 64;
  o.sched.block_size = 4;
  o.sched.num_lookahead_tokens = 4;
  o.sched.max_model_len = 64;
  o.sched.vocab_size = VOCAB_SIZE;
  o.sched.async_scheduling = f->async_scheduling;
  o.sched.hash_key = f->key; /* the deployment's: it checks the resend's tenant tags */
  o.execute_timeout_ms = 2000;
  o.log_stats_interval_ms = 0;
  f->sched_bus = connect_or_fail(f->srv.url, "scheduler");
  assert_int_equal(scheduler_actor_create(&o, &f->sched), LLB_STATUS_OK);
  assert_int_equal(scheduler_actor_start(f->sched, f->sched_bus), LLB_STATUS_OK);
  assert_int_equal(bus_flush(f->sched_bus, WAIT_MS), LLB_STATUS_OK);
}

static void stop_scheduler(struct fixture *f) {
  scheduler_actor_stop(f->sched);
  bus_destroy(f->sched_bus);
  scheduler_actor_destroy(f->sched);
  f->sched = NULL;
  f->sched_bus = NULL;
}

static int setup(void **state, bool async_scheduling) {
  struct fixture *f = calloc(1, sizeof *f);
  if (!f || nats_test_server_start(&f->srv, 0, false) != 0) {
    free(f);
    return -1;
  }
  f->async_scheduling = async_scheduling;
  if (llb_hash_key_from_hex(HASH_KEY_HEX, &f->key) != LLB_STATUS_OK) return -1;
  pthread_mutex_init(&f->w.mu, NULL);
  pthread_cond_init(&f->w.cond, NULL);
  llb_arena_init(&f->w.arena, NULL, 0);
  llb_arena_init(&f->arena, NULL, 0);
  f->w.stop_pos = -1;
  f->w.watch_resumed_outputs = -1;
  f->client = connect_or_fail(f->srv.url, "test-worker-and-clients");
  if (bus_subscribe(f->client, "llm.engine." EID ".execute", NULL, on_execute, &f->w, NULL) ||
      bus_flush(f->client, WAIT_MS))
    return -1;
  f->kv_bus = connect_or_fail(f->srv.url, "kv_manager");
  const struct kv_manager_actor_options ko = {.engine_id = EID,
                                              .kv = {.num_blocks = 64, .block_size = 4, .enable_prefix_caching = true}};
  if (kv_manager_actor_create(&ko, &f->kv) || kv_manager_actor_start(f->kv, f->kv_bus)) return -1;
  f->op_bus = connect_or_fail(f->srv.url, "output_processor");
  const struct output_processor_actor_options oo = {.model_path = VOCAB, .engine_id = EID};
  if (output_processor_actor_create(&oo, &f->op) || output_processor_actor_start(f->op, f->op_bus)) return -1;
  if (bus_flush(f->kv_bus, WAIT_MS) || bus_flush(f->op_bus, WAIT_MS)) return -1;
  start_scheduler(f);
  *state = f;
  return 0;
}

static int setup_sync(void **state) { return setup(state, false); }
static int setup_async(void **state) { return setup(state, true); }

static int teardown(void **state) {
  struct fixture *f = *state;
  stop_scheduler(f);
  kv_manager_actor_stop(f->kv);
  output_processor_actor_stop(f->op);
  bus_destroy(f->client); /* no worker handler runs after this */
  bus_destroy(f->kv_bus);
  bus_destroy(f->op_bus);
  kv_manager_actor_destroy(f->kv);
  output_processor_actor_destroy(f->op);
  llb_buf_free(&f->w.resend);
  llb_arena_destroy(&f->w.arena);
  llb_arena_destroy(&f->arena);
  pthread_cond_destroy(&f->w.cond);
  pthread_mutex_destroy(&f->w.mu);
  nats_test_server_stop(&f->srv);
  free(f);
  return 0;
}

/* A request id as the input processor makes one: "<external>-<8 hex><tenant tag>@<eid>". */
static void make_id(struct fixture *f, const char *external, char *out, size_t cap) {
  char base[96], tag[LLB_REQUEST_TAG_HEX + 1];
  const int len = snprintf(base, sizeof base, "%s-%08x", external, 0x5eed0000u + f->next_id++);
  llb_request_tag(&f->key, TENANT, base, (size_t)len, tag);
  snprintf(out, cap, "%s%s@" EID, base, tag);
}

/* The EngineCoreRequest of `id` (FINAL_ONLY: its client gets one RequestOutput) into out;
 * resume_of names the request a resend replaces (NULL: a new request). */
static void encode_request(const char *id, const char *reply_to, const char *resume_of, int32_t max_tokens,
                           int32_t eos, struct llb_buf *out) {
  struct llb_sampling_params p;
  llb_sampling_params_init(&p);
  p.max_tokens = max_tokens;
  p.temperature = 0;
  p.output_kind = LLB_OUTPUT_KIND_FINAL_ONLY;
  const struct llb_engine_core_request r = {
      .version = LLB_SCHEMA_VERSION, .request_id = llb_str_c(id), .external_id = llb_str_c(id),
      .prompt_token_ids = PROMPT, .num_prompt_token_ids = NUM_PROMPT, .sampling_params = &p,
      .eos_token_id = eos, .arrival_time = 1.7e9, .reply_to = llb_str_c(reply_to),
      .cache_salt = llb_str_c(SALT), .resume_request_id = llb_str_c(resume_of ? resume_of : "")};
  assert_int_equal(llb_engine_core_request_encode_buf(&r, out), LLB_STATUS_OK);
}

/* A client: an inbox its request's RequestOutputs come to. */
static struct bus_sub *client_inbox(struct fixture *f, char *inbox, size_t cap) {
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_new_inbox(f->client, inbox, cap), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(f->client, inbox, &sub), LLB_STATUS_OK);
  assert_int_equal(bus_flush(f->client, WAIT_MS), LLB_STATUS_OK);
  return sub;
}

static void send_request(struct fixture *f, const char *id, const char *reply_to, int32_t max_tokens, int32_t eos) {
  struct llb_buf b = {0};
  encode_request(id, reply_to, NULL, max_tokens, eos, &b);
  assert_int_equal(bus_publish(f->client, "llm.engine." EID ".requests", b.data, b.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&b);
}

/* The client's one RequestOutput (FINAL_ONLY), decoded into f->arena. */
static void final_output(struct fixture *f, struct bus_sub *inbox, struct llb_request_output *ro) {
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(inbox, WAIT_MS, &m), LLB_STATUS_OK);
  assert_int_equal(llb_request_output_decode(m->data, m->len, &f->arena, ro), LLB_STATUS_OK);
  bus_msg_destroy(m);
  if (ro->error.code != 0) fail_msg("request %s failed: %s", ro->request_id.data, ro->error.message.data);
  assert_true(ro->finished);
  assert_int_equal(ro->num_outputs, 1);
}

/* The completion of a request with no fault: what every resumed run must give its client. */
struct completion {
  int32_t token_ids[64];
  int32_t num_token_ids;
  char text[512];
  enum llb_finish_reason finish_reason;
};

static void reference_run(struct fixture *f, int32_t max_tokens, int32_t eos, struct completion *c) {
  char inbox[BUS_SUBJECT_MAX], id[160];
  struct bus_sub *sub = client_inbox(f, inbox, sizeof inbox);
  make_id(f, "ref", id, sizeof id);
  send_request(f, id, inbox, max_tokens, eos);
  struct llb_request_output ro;
  final_output(f, sub, &ro);
  const struct llb_completion_output *o = &ro.outputs[0];
  assert_true(o->num_token_ids <= 64);
  memcpy(c->token_ids, o->token_ids, (size_t)o->num_token_ids * sizeof *c->token_ids);
  c->num_token_ids = o->num_token_ids;
  snprintf(c->text, sizeof c->text, "%s", o->text.data);
  c->finish_reason = o->finish_reason;
  (void)bus_unsubscribe(sub);
}

/* Arms the worker: on `victim`'s step at output position pos, publish a resend of it (id
 * resend_id, to resend_inbox) and answer as `kind` says. */
static void arm_fault(struct fixture *f, const char *victim, int32_t pos, enum fault_kind kind, const char *resend_id,
                      const char *resend_inbox, int32_t max_tokens, int32_t eos) {
  pthread_mutex_lock(&f->w.mu);
  f->w.fault = kind;
  f->w.fault_pos = pos;
  snprintf(f->w.fault_id, sizeof f->w.fault_id, "%s", victim);
  snprintf(f->w.watch_id, sizeof f->w.watch_id, "%s", resend_id);
  f->w.watch_resumed_outputs = -1;
  llb_buf_free(&f->w.resend);
  if (kind == FAULT_ERROR) encode_request(resend_id, resend_inbox, victim, max_tokens, eos, &f->w.resend);
  pthread_mutex_unlock(&f->w.mu);
}

static void wait_fault_fired(struct fixture *f) {
  pthread_mutex_lock(&f->w.mu);
  const int64_t end = llb_now_ns() + (int64_t)WAIT_MS * 1000000;
  while (f->w.faults_fired == 0 && llb_now_ns() < end) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&f->w.cond, &f->w.mu, &ts);
  }
  const int fired = f->w.faults_fired;
  pthread_mutex_unlock(&f->w.mu);
  assert_true(fired >= 1);
}

/* The resend's client got the fault-free completion, and the resend did resume: it reached the
 * worker once, with the victim's pos outputs as its own (not recomputed from its prompt). */
static void check_resumed(struct fixture *f, struct bus_sub *inbox, const struct completion *want, int32_t pos) {
  struct llb_request_output ro;
  final_output(f, inbox, &ro);
  const struct llb_completion_output *o = &ro.outputs[0];
  assert_int_equal(o->finish_reason, want->finish_reason);
  assert_int_equal(o->num_token_ids, want->num_token_ids);
  assert_memory_equal(o->token_ids, want->token_ids, (size_t)want->num_token_ids * sizeof(int32_t));
  assert_string_equal(o->text.data, want->text);
  pthread_mutex_lock(&f->w.mu);
  const int32_t resumed = f->w.watch_resumed_outputs;
  pthread_mutex_unlock(&f->w.mu);
  assert_int_equal(resumed, pos);
  struct scheduler_actor_stats s;
  scheduler_actor_stats(f->sched, &s);
  assert_int_equal(s.num_history_resumed, 1);
}

/* A resend taken over from the request it replaces, which still runs in the scheduler with
 * pos outputs (the worker lost the step that would have sampled the next one). */
static void takeover_finishing_in_its_first_step(struct fixture *f, int32_t max_tokens, int32_t eos, int32_t pos) {
  struct completion want;
  reference_run(f, max_tokens, eos, &want);
  char inbox_a[BUS_SUBJECT_MAX], inbox_b[BUS_SUBJECT_MAX], a[160], b[160];
  struct bus_sub *sub_a = client_inbox(f, inbox_a, sizeof inbox_a);
  struct bus_sub *sub_b = client_inbox(f, inbox_b, sizeof inbox_b);
  make_id(f, "victim", a, sizeof a);
  make_id(f, "resend", b, sizeof b);
  arm_fault(f, a, pos, FAULT_ERROR, b, inbox_b, max_tokens, eos);
  send_request(f, a, inbox_a, max_tokens, eos);
  wait_fault_fired(f);
  check_resumed(f, sub_b, &want, pos);
  struct llb_request_output ro; /* the replaced request ends (aborted) */
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(sub_a, WAIT_MS, &m), LLB_STATUS_OK);
  assert_int_equal(llb_request_output_decode(m->data, m->len, &f->arena, &ro), LLB_STATUS_OK);
  assert_true(ro.finished);
  bus_msg_destroy(m);
  (void)bus_unsubscribe(sub_a);
  (void)bus_unsubscribe(sub_b);
}

/* max_tokens = N, taken over with N-1 outputs: the resend's first step samples the last one
 * (finish_reason "length"). */
static void test_takeover_with_all_but_the_last_token_finishes_whole(void **state) {
  struct fixture *f = *state;
  takeover_finishing_in_its_first_step(f, MAX_TOKENS, -1, MAX_TOKENS - 1);
}

/* Taken over with 5 outputs, the resend's first step samples EOS (finish_reason "stop"). */
static void test_takeover_sampling_eos_in_its_first_step_finishes_whole(void **state) {
  struct fixture *f = *state;
  f->w.stop_pos = 5;
  takeover_finishing_in_its_first_step(f, 32, EOS, 5);
}

struct outputs_seen {
  struct output_processor_actor *op;
  uint64_t at_least;
};

static bool output_processor_saw(void *arg) {
  const struct outputs_seen *w = arg;
  struct output_processor_actor_stats s;
  output_processor_actor_stats(w->op, &s);
  return s.engine_outputs >= w->at_least;
}

/* The scheduler restarted with the request at N-1 outputs (its step never answered): the
 * resend's history comes from the output processor (<prefix>.engine.<eid>.history). */
static void test_resend_after_a_scheduler_restart_finishes_whole(void **state) {
  struct fixture *f = *state;
  const int32_t pos = MAX_TOKENS - 1;
  struct completion want;
  reference_run(f, MAX_TOKENS, -1, &want);
  char inbox_a[BUS_SUBJECT_MAX], inbox_b[BUS_SUBJECT_MAX], a[160], b[160];
  struct bus_sub *sub_a = client_inbox(f, inbox_a, sizeof inbox_a);
  struct bus_sub *sub_b = client_inbox(f, inbox_b, sizeof inbox_b);
  make_id(f, "victim", a, sizeof a);
  make_id(f, "resend", b, sizeof b);
  arm_fault(f, a, pos, FAULT_SILENT, b, inbox_b, MAX_TOKENS, -1);
  struct output_processor_actor_stats before;
  output_processor_actor_stats(f->op, &before);
  send_request(f, a, inbox_a, MAX_TOKENS, -1);
  wait_fault_fired(f);
  /* its pos outputs (one a step) are in the output processor's history */
  struct outputs_seen seen = {.op = f->op, .at_least = before.engine_outputs + (uint64_t)pos};
  assert_true(nats_test_wait_until(output_processor_saw, &seen, WAIT_MS));
  stop_scheduler(f); /* its step in flight ends with the execute timeout */
  start_scheduler(f);
  struct llb_buf resend = {0};
  encode_request(b, inbox_b, a, MAX_TOKENS, -1, &resend);
  assert_int_equal(bus_publish(f->client, "llm.engine." EID ".requests", resend.data, resend.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&resend);
  check_resumed(f, sub_b, &want, pos);
  (void)bus_unsubscribe(sub_a);
  (void)bus_unsubscribe(sub_b);
}

int main(void) {
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skipped: no nats-server binary (ops/install-deps.sh installs it)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_takeover_with_all_but_the_last_token_finishes_whole, setup_sync, teardown),
      cmocka_unit_test_setup_teardown(test_takeover_with_all_but_the_last_token_finishes_whole, setup_async, teardown),
      cmocka_unit_test_setup_teardown(test_takeover_sampling_eos_in_its_first_step_finishes_whole, setup_sync, teardown),
      cmocka_unit_test_setup_teardown(test_takeover_sampling_eos_in_its_first_step_finishes_whole, setup_async, teardown),
      cmocka_unit_test_setup_teardown(test_resend_after_a_scheduler_restart_finishes_whole, setup_sync, teardown),
      cmocka_unit_test_setup_teardown(test_resend_after_a_scheduler_restart_finishes_whole, setup_async, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
