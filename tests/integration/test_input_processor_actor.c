/* The input processor actor over a real nats-server: GenerateRequest in on
 * llm.generate.<tenant>, EngineCoreRequests out on llm.engine.0.requests (read by the test),
 * errors back on the client's reply subject, aborts forwarded to llm.engine.0.abort.
 * Tokenizer: the GPT-2 vocab of ../shared/testdata/tokenizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/input_processor/actor.h"
#include "actors/input_processor/input_processor.h"
#include "bus/bus.h"
#include "base/log.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"
#include "tests/integration/nats_test_server.h"

#define VOCAB LLB_TESTDATA_DIR "/tokenizer/ggml-vocab-gpt-2.gguf"
#define WAIT_MS 20000

struct fixture {
  struct nats_test_server srv;
  struct bus *actor_bus, *client;
  struct input_processor_actor *actor;
  struct bus_sub *engine_requests, *engine_abort, *inbox_sub;
  char inbox[BUS_SUBJECT_MAX];
  struct llb_arena arena;
};

static struct bus *connect_or_fail(const char *url, const char *name) {
  return nats_test_connect(url, name, NULL);
}

static const struct llb_hash_key TEST_KEY = {{5, 4, 3, 2, 1}}; /* the deployment's, as serve hands it */

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (nats_test_server_start(&f->srv, 0, false) != 0) {
    free(f);
    return -1;
  }
  f->actor_bus = connect_or_fail(f->srv.url, "inproc-actor");
  f->client = connect_or_fail(f->srv.url, "test-client");
  struct input_processor_actor_options o = {.model_path = VOCAB, .max_model_len = 64, .hash_key = &TEST_KEY};
  if (input_processor_actor_create(&o, &f->actor) != LLB_STATUS_OK) fail_msg("create: %s", llb_err_last());
  if (input_processor_actor_start(f->actor, f->actor_bus) != LLB_STATUS_OK) fail_msg("start: %s", llb_err_last());
  assert_int_equal(bus_subscribe_sync(f->client, "llm.engine.0.requests", &f->engine_requests), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(f->client, "llm.engine.0.abort", &f->engine_abort), LLB_STATUS_OK);
  assert_int_equal(bus_new_inbox(f->client, f->inbox, sizeof f->inbox), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe_sync(f->client, f->inbox, &f->inbox_sub), LLB_STATUS_OK);
  assert_int_equal(bus_flush(f->actor_bus, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_flush(f->client, WAIT_MS), LLB_STATUS_OK);
  llb_arena_init(&f->arena, NULL, 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  bus_destroy(f->client);
  input_processor_actor_stop(f->actor); /* its intake workers, before their bus goes */
  bus_destroy(f->actor_bus);
  input_processor_actor_destroy(f->actor);
  llb_arena_destroy(&f->arena);
  nats_test_server_stop(&f->srv);
  free(f);
  return 0;
}

/* Publishes `len` bytes to llm.generate.default with the inbox as reply subject (or none). */
static void send_raw(struct fixture *f, const void *data, size_t len, bool with_reply,
                     const struct bus_trace_ctx *trace) {
  struct bus_out_msg m = {.subject = "llm.generate.default", .reply = with_reply ? f->inbox : NULL,
                          .data = data, .len = len, .trace = trace};
  assert_int_equal(bus_publish_msg(f->client, &m), LLB_STATUS_OK);
}

static void send_request(struct fixture *f, const struct llb_generate_request *gr, const struct bus_trace_ctx *trace) {
  struct llb_buf buf = {0};
  assert_int_equal(llb_generate_request_encode_buf(gr, &buf), LLB_STATUS_OK);
  send_raw(f, buf.data, buf.len, true, trace);
  llb_buf_free(&buf);
}

/* Next RequestOutput on the inbox (decoded into f->arena). */
static void next_output(struct fixture *f, struct llb_request_output *ro) {
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(f->inbox_sub, WAIT_MS, &m), LLB_STATUS_OK);
  assert_int_equal(llb_request_output_decode(m->data, m->len, &f->arena, ro), LLB_STATUS_OK);
  bus_msg_destroy(m);
}

/* Next EngineCoreRequest on llm.engine.0.requests; *msg_out (optional) keeps the message. */
static void next_engine_request(struct fixture *f, struct llb_engine_core_request *r, struct bus_msg **msg_out) {
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(f->engine_requests, WAIT_MS, &m), LLB_STATUS_OK);
  assert_int_equal(llb_engine_core_request_decode(m->data, m->len, &f->arena, r), LLB_STATUS_OK);
  if (msg_out) *msg_out = m;
  else bus_msg_destroy(m);
}

static void init_request(struct llb_generate_request *gr, struct llb_sampling_params *sp, const char *prompt) {
  llb_generate_request_init(gr);
  llb_sampling_params_init(sp);
  gr->request_id = llb_str_c("t1");
  gr->prompt = llb_str_c(prompt);
  gr->sampling_params = sp;
}

static bool no_more(struct bus_sub *sub) {
  struct bus_msg *m = NULL;
  llb_status st = bus_sub_next_msg(sub, 200, &m);
  bus_msg_destroy(m);
  return st == LLB_STATUS_TIMEOUT;
}

static void test_malformed_request_gets_final_error_output(void **state) {
  struct fixture *f = *state;
  static const char garbage[] = "this is not a flatbuffer at all";
  send_raw(f, garbage, sizeof garbage, true, NULL);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_int_equal(ro.error.code, LLB_STATUS_MALFORMED);
  assert_non_null(strstr(ro.error.message.data, "GenerateRequest"));
  assert_int_equal(ro.num_outputs, 0);
  assert_true(no_more(f->engine_requests));
  struct input_processor_actor_stats s;
  input_processor_actor_stats(f->actor, &s);
  assert_int_equal(s.malformed, 1);
  assert_int_equal(s.engine_requests, 0);
}

static bool two_malformed(void *arg) {
  struct input_processor_actor_stats s;
  input_processor_actor_stats(arg, &s);
  return s.malformed >= 2 && s.no_reply >= 1;
}

static void test_malformed_without_reply_is_counted_and_actor_keeps_serving(void **state) {
  struct fixture *f = *state;
  static const uint8_t junk[] = {0x10, 0, 0, 0, 'L', 'G', 'R', 'Q', 1, 2, 3};
  send_raw(f, junk, sizeof junk, false, NULL);
  send_raw(f, junk, 3, false, NULL);
  assert_true(nats_test_wait_until(two_malformed, f->actor, WAIT_MS));
  struct llb_generate_request gr;
  struct llb_sampling_params sp;
  init_request(&gr, &sp, "Hello world");
  send_request(f, &gr, NULL);
  struct llb_engine_core_request r;
  next_engine_request(f, &r, NULL);
  assert_string_equal(r.external_id.data, "t1");
}

static void test_negative_temperature_is_rejected_naming_the_field(void **state) {
  struct fixture *f = *state;
  struct llb_generate_request gr;
  struct llb_sampling_params sp;
  init_request(&gr, &sp, "Hello world");
  sp.temperature = -1.0f;
  send_request(f, &gr, NULL);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_int_equal(ro.error.code, LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(ro.error.field.data, "temperature");
  assert_non_null(strstr(ro.error.message.data, "temperature"));
  assert_string_equal(ro.request_id.data, "t1");
  assert_true(no_more(f->engine_requests));
  struct input_processor_actor_stats s;
  input_processor_actor_stats(f->actor, &s);
  assert_int_equal(s.rejected, 1);
}

static void test_prompt_too_long_for_max_model_len_is_rejected(void **state) {
  struct fixture *f = *state;
  struct llb_generate_request gr;
  struct llb_sampling_params sp;
  init_request(&gr, &sp, "Hello world");
  sp.max_tokens = 100; /* the actor runs with max_model_len 64 */
  send_request(f, &gr, NULL);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_string_equal(ro.error.field.data, "max_tokens");
  assert_non_null(strstr(ro.error.message.data, "64"));
}

static void test_good_request_reaches_engine_with_prompt_tokens_and_trace(void **state) {
  struct fixture *f = *state;
  const char *text = "Hello world, how are you?";
  struct gguf_file *g = NULL;
  struct tokenizer *tok = NULL;
  assert_int_equal(gguf_open(VOCAB, &g), LLB_STATUS_OK);
  assert_int_equal(tokenizer_load(g, &tok), LLB_STATUS_OK);
  gguf_close(g);
  int32_t *want = NULL;
  int64_t num_want = 0;
  assert_int_equal(tokenizer_encode(tok, text, strlen(text), true, true, &want, &num_want), LLB_STATUS_OK);
  assert_true(num_want >= 5);

  struct llb_generate_request gr;
  struct llb_sampling_params sp;
  init_request(&gr, &sp, text);
  sp.temperature = 0.5f;
  sp.max_tokens = 8;
  sp.has_seed = true;
  sp.seed = 7;
  struct bus_trace_ctx trace;
  bus_trace_new(&trace);
  send_request(f, &gr, &trace);
  struct llb_engine_core_request r;
  struct bus_msg *m = NULL;
  next_engine_request(f, &r, &m);
  assert_int_equal(r.num_prompt_token_ids, num_want);
  assert_memory_equal(r.prompt_token_ids, want, (size_t)num_want * sizeof(int32_t));
  assert_string_equal(r.reply_to.data, f->inbox);
  assert_string_equal(r.external_id.data, "t1");
  assert_true(strncmp(r.request_id.data, "t1-", 3) == 0);
  assert_string_equal(r.parent_request_id.data, r.request_id.data);
  assert_int_equal(r.client_index, 0);
  assert_int_equal(r.sampling_params->n, 1);
  assert_int_equal(r.sampling_params->max_tokens, 8);
  assert_true(r.sampling_params->has_seed);
  assert_int_equal(r.sampling_params->seed, 7);
  assert_int_equal(r.eos_token_id, tokenizer_eos_id(tok));
  assert_string_equal(r.cache_salt.data, "7:default"); /* salted by tenant */
  assert_true(r.arrival_time > 1.6e9);
  /* The trace continues: same trace id, a new span. */
  assert_true(m->trace_received);
  assert_string_equal(m->trace.trace_id, trace.trace_id);
  assert_string_not_equal(m->trace.span_id, trace.span_id);
  bus_msg_destroy(m);
  assert_true(no_more(f->inbox_sub)); /* success sends nothing to the client here */
  free(want);
  tokenizer_destroy(tok);
}

static void test_n2_fans_out_two_children_with_seeds_s_and_s_plus_1(void **state) {
  struct fixture *f = *state;
  struct llb_generate_request gr;
  struct llb_sampling_params sp;
  init_request(&gr, &sp, "Once upon a time");
  gr.cache_salt = llb_str_c("mine");
  sp.n = 2;
  sp.has_seed = true;
  sp.seed = 1234;
  send_request(f, &gr, NULL);
  struct llb_engine_core_request c[2];
  next_engine_request(f, &c[0], NULL);
  next_engine_request(f, &c[1], NULL);
  if (c[0].client_index == 1) {
    struct llb_engine_core_request t = c[0];
    c[0] = c[1];
    c[1] = t;
  }
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c[i].client_index, i);
    assert_int_equal(c[i].sampling_params->seed, 1234 + i);
    assert_int_equal(c[i].sampling_params->n, 2); /* the client's n, for the output processor */
    char want[300];
    snprintf(want, sizeof want, "%d_%s", i, c[i].parent_request_id.data);
    assert_string_equal(c[i].request_id.data, want);
    assert_string_equal(c[i].cache_salt.data, "7:default4:mine");
  }
  assert_string_equal(c[0].parent_request_id.data, c[1].parent_request_id.data);
  assert_true(no_more(f->engine_requests));
}

/* A request/reply on llm.tokenize.default; the reply decoded into f->arena. */
static void tokenize_request(struct fixture *f, const struct llb_generate_request *gr, struct llb_request_output *ro) {
  struct llb_buf buf = {0};
  assert_int_equal(llb_generate_request_encode_buf(gr, &buf), LLB_STATUS_OK);
  struct bus_msg *reply = NULL;
  assert_int_equal(bus_request(f->client, "llm.tokenize.default", buf.data, buf.len, NULL, WAIT_MS, &reply),
                   LLB_STATUS_OK);
  llb_buf_free(&buf);
  assert_int_equal(llb_request_output_decode(reply->data, reply->len, &f->arena, ro), LLB_STATUS_OK);
  bus_msg_destroy(reply);
}

static void test_tokenize_subject_tokenizes_detokenizes_and_reports_max_model_len(void **state) {
  struct fixture *f = *state;
  struct llb_generate_request gr;
  struct llb_sampling_params sp;
  init_request(&gr, &sp, "Hello world");
  gr.raw = true;
  struct llb_request_output ro;
  tokenize_request(f, &gr, &ro);
  assert_int_equal(ro.error.code, 0);
  assert_true(ro.finished);
  assert_int_equal(ro.max_model_len, 64);
  int32_t *want = NULL;
  int64_t n_want = 0;
  struct gguf_file *g = NULL;
  struct tokenizer *tok = NULL;
  assert_int_equal(gguf_open(VOCAB, &g), LLB_STATUS_OK);
  assert_int_equal(tokenizer_load(g, &tok), LLB_STATUS_OK);
  assert_int_equal(tokenizer_encode(tok, "Hello world", 11, true, true, &want, &n_want), LLB_STATUS_OK);
  assert_int_equal(ro.num_prompt_token_ids, n_want);
  assert_memory_equal(ro.prompt_token_ids, want, (size_t)n_want * sizeof(int32_t));
  /* detokenize: the ids back to the text */
  init_request(&gr, &sp, "");
  gr.prompt = (struct llb_str){0};
  gr.prompt_token_ids = want;
  gr.num_prompt_token_ids = (int32_t)n_want;
  tokenize_request(f, &gr, &ro);
  assert_int_equal(ro.error.code, 0);
  assert_int_equal(ro.prompt.len, 11);
  assert_memory_equal(ro.prompt.data, "Hello world", 11);
  /* an id outside the vocabulary is a field error */
  int32_t bad[2] = {1, 1 << 30};
  gr.prompt_token_ids = bad;
  gr.num_prompt_token_ids = 2;
  tokenize_request(f, &gr, &ro);
  assert_int_equal(ro.error.code, LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(ro.error.field.data, "prompt_token_ids[1]");
  /* no input: only the context length */
  gr.prompt_token_ids = NULL;
  gr.num_prompt_token_ids = 0;
  tokenize_request(f, &gr, &ro);
  assert_int_equal(ro.error.code, 0);
  assert_int_equal(ro.num_prompt_token_ids, 0);
  assert_int_equal(ro.max_model_len, 64);
  assert_true(no_more(f->engine_requests)); /* nothing reaches the engine */
  free(want);
  tokenizer_destroy(tok);
  gguf_close(g);
}

static void publish_abort(struct fixture *f, const char *subject, const char *id) {
  struct llb_abort_request ar = {.request_id = llb_str_c(id)};
  struct llb_buf buf = {0};
  assert_int_equal(llb_abort_request_encode_buf(&ar, &buf), LLB_STATUS_OK);
  assert_int_equal(bus_publish(f->client, subject, buf.data, buf.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&buf);
}

static void test_abort_is_forwarded_with_child_ids(void **state) {
  struct fixture *f = *state;
  char id[64], other[64], tag[INPUT_PROCESSOR_TENANT_TAG_HEX + 1], other_tag[INPUT_PROCESSOR_TENANT_TAG_HEX + 1];
  input_processor_tenant_tag(&TEST_KEY, "default", "t1-00112233", 11, tag);
  input_processor_tenant_tag(&TEST_KEY, "someone-else", "t1-00112233", 11, other_tag);
  snprintf(id, sizeof id, "t1-00112233%s", tag);
  snprintf(other, sizeof other, "t1-00112233%s", other_tag);
  /* an id of another tenant on this tenant's abort subject is refused (issue 14) */
  publish_abort(f, "llm.abort.default", other);
  publish_abort(f, "llm.abort.default", id);
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(f->engine_abort, WAIT_MS, &m), LLB_STATUS_OK);
  struct llb_abort_requests ab;
  assert_int_equal(llb_abort_requests_decode(m->data, m->len, &f->arena, &ab), LLB_STATUS_OK);
  bus_msg_destroy(m);
  assert_int_equal(ab.num_request_ids, INPUT_PROCESSOR_ACTOR_MAX_N + 1);
  char child[80];
  assert_string_equal(ab.request_ids[0].data, id);
  snprintf(child, sizeof child, "0_%s", id);
  assert_string_equal(ab.request_ids[1].data, child);
  snprintf(child, sizeof child, "1_%s", id);
  assert_string_equal(ab.request_ids[2].data, child);
  assert_true(no_more(f->engine_abort));
}

int main(void) {
  if (!nats_test_server_bin()) {
    fprintf(stderr, "skip: no nats-server\n");
    return 77;
  }
  if (access(VOCAB, R_OK) != 0) {
    fprintf(stderr, "skip: %s missing\n", VOCAB);
    return 77;
  }
  llb_log_set_level(LLB_LOG_LEVEL_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_malformed_request_gets_final_error_output, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malformed_without_reply_is_counted_and_actor_keeps_serving, setup, teardown),
      cmocka_unit_test_setup_teardown(test_negative_temperature_is_rejected_naming_the_field, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prompt_too_long_for_max_model_len_is_rejected, setup, teardown),
      cmocka_unit_test_setup_teardown(test_good_request_reaches_engine_with_prompt_tokens_and_trace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_n2_fans_out_two_children_with_seeds_s_and_s_plus_1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_abort_is_forwarded_with_child_ids, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tokenize_subject_tokenizes_detokenizes_and_reports_max_model_len, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
