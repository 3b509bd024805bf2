/* The output processor actor over a real nats-server: hand-made EngineCoreOutputs on
 * llm.engine.0.outputs → RequestOutputs on each request's reply subject, engine aborts on
 * llm.engine.0.abort, resync asks on llm.engine.0.resync for requests it does not know.
 * Tokenizer: the GPT-2 vocab of ../shared/testdata/tokenizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/output_processor/actor.h"
#include "bus/bus.h"
#include "base/log.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/request_output.h"
#include "tests/integration/nats_test_server.h"

#define VOCAB LLB_TESTDATA_DIR "/tokenizer/ggml-vocab-gpt-2.gguf"
#define WAIT_MS 20000

struct fixture {
  struct nats_test_server srv;
  struct bus *actor_bus, *client;
  struct output_processor_actor *actor;
  struct tokenizer *tok;
  struct bus_sub *engine_abort, *inbox_sub;
  char inbox[BUS_SUBJECT_MAX];
  struct llb_arena arena;
};

static struct bus *connect_or_fail(const char *url, const char *name) {
  return nats_test_connect(url, name, NULL);
}

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (nats_test_server_start(&f->srv, 0, false) != 0) {
    free(f);
    return -1;
  }
  f->actor_bus = connect_or_fail(f->srv.url, "outproc-actor");
  f->client = connect_or_fail(f->srv.url, "test-engine");
  struct output_processor_actor_options o = {.model_path = VOCAB};
  if (output_processor_actor_create(&o, &f->actor) != LLB_STATUS_OK) fail_msg("create: %s", llb_err_last());
  if (output_processor_actor_start(f->actor, f->actor_bus) != LLB_STATUS_OK) fail_msg("start: %s", llb_err_last());
  struct gguf_file *g = NULL;
  assert_int_equal(gguf_open(VOCAB, &g), LLB_STATUS_OK);
  assert_int_equal(tokenizer_load(g, &f->tok), LLB_STATUS_OK);
  gguf_close(g);
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
  bus_destroy(f->actor_bus);
  output_processor_actor_destroy(f->actor);
  tokenizer_destroy(f->tok);
  llb_arena_destroy(&f->arena);
  nats_test_server_stop(&f->srv);
  free(f);
  return 0;
}

/* Token ids of `text` (no special tokens); the caller frees. */
static int32_t *encode(struct fixture *f, const char *text, int64_t *n) {
  int32_t *ids = NULL;
  assert_int_equal(tokenizer_encode(f->tok, text, strlen(text), false, false, &ids, n), LLB_STATUS_OK);
  assert_true(*n > 0);
  return ids;
}

/* An output of request `id`; the first one (pos 0) carries the registration fields. */
static struct llb_engine_core_output make_output(struct fixture *f, const char *id, const int32_t *prompt,
                                                 int32_t num_prompt, const struct llb_sampling_params *sp,
                                                 const int32_t *ids, int32_t num_ids, int32_t pos) {
  struct llb_engine_core_output o;
  llb_engine_core_output_init(&o);
  o.request_id = llb_str_c(id);
  o.new_token_ids = ids;
  o.num_new_token_ids = num_ids;
  o.first_output_pos = pos;
  o.reply_to = llb_str_c(f->inbox);
  o.arrival_time = 1.7e9;
  if (pos == 0) {
    o.prompt_token_ids = prompt;
    o.num_prompt_token_ids = num_prompt;
    o.sampling_params = sp;
    o.parent_request_id = llb_str_c(id);
  }
  return o;
}

static void publish_outputs(struct fixture *f, const struct llb_engine_core_output *outs, int32_t n, uint64_t step) {
  struct llb_engine_core_outputs m = {.engine_id = llb_str_c("0"), .step = step, .timestamp = 1.7e9,
                                      .outputs = outs, .num_outputs = n};
  struct llb_buf buf = {0};
  assert_int_equal(llb_engine_core_outputs_encode_buf(&m, &buf), LLB_STATUS_OK);
  assert_int_equal(bus_publish(f->client, "llm.engine.0.outputs", buf.data, buf.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&buf);
}

static void next_output(struct fixture *f, struct llb_request_output *ro) {
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(f->inbox_sub, WAIT_MS, &m), LLB_STATUS_OK);
  assert_int_equal(llb_request_output_decode(m->data, m->len, &f->arena, ro), LLB_STATUS_OK);
  bus_msg_destroy(m);
}

static void delta_params(struct llb_sampling_params *sp) {
  llb_sampling_params_init(sp);
  sp->output_kind = LLB_OUTPUT_KIND_DELTA;
  sp->max_tokens = 32;
}

static bool two_request_outputs(void *arg) {
  struct output_processor_actor_stats s;
  output_processor_actor_stats(arg, &s);
  return s.request_outputs == 2;
}

static void test_outputs_stream_text_to_reply_subject_and_finish(void **state) {
  struct fixture *f = *state;
  struct llb_sampling_params sp;
  delta_params(&sp);
  int64_t np, n1, n2;
  int32_t *prompt = encode(f, "The capital of France is", &np);
  int32_t *a = encode(f, " Paris, a city", &n1);
  int32_t *b = encode(f, " of lights.", &n2);
  struct llb_engine_core_output o = make_output(f, "r1-0011", prompt, (int32_t)np, &sp, a, (int32_t)n1, 0);
  publish_outputs(f, &o, 1, 1);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_string_equal(ro.request_id.data, "r1-0011");
  assert_false(ro.finished);
  assert_int_equal(ro.error.code, 0);
  assert_int_equal(ro.num_outputs, 1);
  assert_string_equal(ro.outputs[0].text.data, " Paris, a city");
  assert_int_equal(ro.outputs[0].num_token_ids, n1);
  assert_int_equal(ro.num_prompt_token_ids, np);

  o = make_output(f, "r1-0011", NULL, 0, NULL, b, (int32_t)n2, (int32_t)n1);
  o.finish_reason = LLB_FINISH_REASON_LENGTH;
  publish_outputs(f, &o, 1, 2);
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_string_equal(ro.outputs[0].text.data, " of lights."); /* DELTA: only the new text */
  assert_int_equal(ro.outputs[0].finish_reason, LLB_FINISH_REASON_LENGTH);
  assert_int_equal(ro.metrics.num_generation_tokens, n1 + n2);
  assert_true(nats_test_wait_until(two_request_outputs, f->actor, WAIT_MS)); /* counted after the send */
  struct output_processor_actor_stats s;
  output_processor_actor_stats(f->actor, &s);
  assert_int_equal(s.unknown, 0);
  free(prompt);
  free(a);
  free(b);
}

static bool one_malformed(void *arg) {
  struct output_processor_actor_stats s;
  output_processor_actor_stats(arg, &s);
  return s.malformed >= 1;
}

static void test_garbage_is_counted_and_next_valid_output_served(void **state) {
  struct fixture *f = *state;
  static const char garbage[] = "\x20\0\0\0LECOgarbage garbage garbage";
  assert_int_equal(bus_publish(f->client, "llm.engine.0.outputs", garbage, sizeof garbage, NULL), LLB_STATUS_OK);
  assert_true(nats_test_wait_until(one_malformed, f->actor, WAIT_MS));
  struct llb_sampling_params sp;
  delta_params(&sp);
  int64_t np, n1;
  int32_t *prompt = encode(f, "Hi", &np);
  int32_t *a = encode(f, " there", &n1);
  struct llb_engine_core_output o = make_output(f, "r2-0022", prompt, (int32_t)np, &sp, a, (int32_t)n1, 0);
  o.finish_reason = LLB_FINISH_REASON_LENGTH; /* STOP would drop the last (EOS) token's text */
  publish_outputs(f, &o, 1, 1);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_string_equal(ro.outputs[0].text.data, " there");
  free(prompt);
  free(a);
}

static void test_stop_string_finishes_and_aborts_engine_request(void **state) {
  struct fixture *f = *state;
  struct llb_sampling_params sp;
  delta_params(&sp);
  sp.num_stop = 1;
  snprintf(sp.stop[0], sizeof sp.stop[0], "%s", "STOP");
  int64_t np, n1;
  int32_t *prompt = encode(f, "Say it", &np);
  int32_t *a = encode(f, " go go STOP more text", &n1);
  struct llb_engine_core_output o = make_output(f, "r3-0033", prompt, (int32_t)np, &sp, a, (int32_t)n1, 0);
  publish_outputs(f, &o, 1, 1);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_string_equal(ro.outputs[0].text.data, " go go ");
  assert_int_equal(ro.outputs[0].finish_reason, LLB_FINISH_REASON_STOP);
  assert_string_equal(ro.outputs[0].stop_reason.data, "STOP");
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(f->engine_abort, WAIT_MS, &m), LLB_STATUS_OK);
  struct llb_abort_requests ab;
  assert_int_equal(llb_abort_requests_decode(m->data, m->len, &f->arena, &ab), LLB_STATUS_OK);
  bus_msg_destroy(m);
  assert_int_equal(ab.num_request_ids, 1);
  assert_string_equal(ab.request_ids[0].data, "r3-0033");
  free(prompt);
  free(a);
}

static void test_n2_children_aggregate_into_one_parent_stream(void **state) {
  struct fixture *f = *state;
  struct llb_sampling_params sp;
  delta_params(&sp);
  sp.n = 2; /* as the input processor writes it on each child */
  int64_t np, n1, n2;
  int32_t *prompt = encode(f, "Pick", &np);
  int32_t *a = encode(f, " red", &n1);
  int32_t *b = encode(f, " blue", &n2);
  struct llb_engine_core_output o[2];
  o[0] = make_output(f, "0_r4-0044", prompt, (int32_t)np, &sp, a, (int32_t)n1, 0);
  o[1] = make_output(f, "1_r4-0044", prompt, (int32_t)np, &sp, b, (int32_t)n2, 0);
  for (int i = 0; i < 2; i++) {
    o[i].parent_request_id = llb_str_c("r4-0044");
    o[i].index = i;
    o[i].finish_reason = LLB_FINISH_REASON_LENGTH;
  }
  publish_outputs(f, o, 2, 1);
  bool seen[2] = {false, false};
  bool finished = false;
  for (int k = 0; k < 2 && !finished; k++) {
    struct llb_request_output ro;
    next_output(f, &ro);
    assert_string_equal(ro.request_id.data, "r4-0044");
    for (int32_t j = 0; j < ro.num_outputs; j++) {
      int32_t idx = ro.outputs[j].index;
      assert_true(idx == 0 || idx == 1);
      assert_string_equal(ro.outputs[j].text.data, idx == 0 ? " red" : " blue");
      seen[idx] = true;
    }
    finished = ro.finished;
  }
  assert_true(finished);
  assert_true(seen[0] && seen[1]);
  free(prompt);
  free(a);
  free(b);
}

/* An output of a request this instance does not know (it restarted) while the engine still
 * runs it: nothing reaches the client; the scheduler is asked for the whole history on
 * llm.engine.0.resync (once, however many outputs follow), and the history output (resync,
 * from position 0, with the first-output fields) rebuilds the request: the client gets the
 * completion from its start marked `resync` (it trims what it already has), then deltas. */
static void test_unknown_request_is_rebuilt_from_the_engines_history(void **state) {
  struct fixture *f = *state;
  struct bus_sub *resync = NULL;
  assert_int_equal(bus_subscribe_sync(f->client, "llm.engine.0.resync", &resync), LLB_STATUS_OK);
  assert_int_equal(bus_flush(f->client, WAIT_MS), LLB_STATUS_OK);
  struct llb_sampling_params sp;
  delta_params(&sp);
  int64_t np, n1, n2;
  int32_t *prompt = encode(f, "Say", &np);
  int32_t *a = encode(f, " lost and", &n1);
  int32_t *b = encode(f, " found", &n2);
  struct llb_engine_core_output o = make_output(f, "r5-0055", NULL, 0, NULL, b, (int32_t)n2, (int32_t)n1);
  publish_outputs(f, &o, 1, 9);
  publish_outputs(f, &o, 1, 10); /* asked once, not per output */
  struct bus_msg *m = NULL;
  assert_int_equal(bus_sub_next_msg(resync, WAIT_MS, &m), LLB_STATUS_OK);
  struct llb_abort_requests ids;
  assert_int_equal(llb_abort_requests_decode(m->data, m->len, &f->arena, &ids), LLB_STATUS_OK);
  assert_int_equal(ids.num_request_ids, 1);
  assert_string_equal(ids.request_ids[0].data, "r5-0055");
  bus_msg_destroy(m);
  /* the history: every output token from position 0 */
  int32_t all[64];
  assert_true(n1 + n2 <= 64);
  memcpy(all, a, (size_t)n1 * sizeof *all);
  memcpy(all + n1, b, (size_t)n2 * sizeof *all);
  o = make_output(f, "r5-0055", prompt, (int32_t)np, &sp, all, (int32_t)(n1 + n2), 0);
  o.resync = true;
  publish_outputs(f, &o, 1, 11);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_int_equal(ro.error.code, 0);
  assert_false(ro.finished);
  assert_string_equal(ro.outputs[0].text.data, " lost and found");
  assert_true(ro.outputs[0].resync);
  int32_t dot[1] = {a[0]};
  o = make_output(f, "r5-0055", NULL, 0, NULL, dot, 1, (int32_t)(n1 + n2));
  o.finish_reason = LLB_FINISH_REASON_LENGTH;
  publish_outputs(f, &o, 1, 12);
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_false(ro.outputs[0].resync);
  assert_int_equal(bus_sub_next_msg(resync, 300, &m), LLB_STATUS_TIMEOUT); /* no second ask */
  struct output_processor_actor_stats s;
  output_processor_actor_stats(f->actor, &s);
  assert_int_equal(s.unknown, 2);
  assert_int_equal(s.resyncs_asked, 1);
  assert_int_equal(s.resyncs, 1);
  free(prompt);
  free(a);
  free(b);
}

/* The last output of a request this instance does not know cannot be rebuilt any more (the
 * engine forgot it): the api server gets a final STATE_LOST naming the request, on which it
 * sends the request again (a 503 over HTTP only when it cannot). */
static void test_unknown_finished_request_gets_an_error(void **state) {
  struct fixture *f = *state;
  int64_t n1;
  int32_t *a = encode(f, " lost", &n1);
  struct llb_engine_core_output o = make_output(f, "r6-0066", NULL, 0, NULL, a, (int32_t)n1, 3);
  o.finish_reason = LLB_FINISH_REASON_LENGTH;
  publish_outputs(f, &o, 1, 9);
  struct llb_request_output ro;
  next_output(f, &ro);
  assert_true(ro.finished);
  assert_int_equal(ro.error.code, LLB_STATUS_STATE_LOST);
  assert_non_null(strstr(ro.error.message.data, "r6-0066"));
  free(a);
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
  llb_log_set_level(LLB_LOG_LEVEL_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_outputs_stream_text_to_reply_subject_and_finish, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage_is_counted_and_next_valid_output_served, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stop_string_finishes_and_aborts_engine_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_n2_children_aggregate_into_one_parent_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_request_is_rebuilt_from_the_engines_history, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_finished_request_gets_an_error, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
