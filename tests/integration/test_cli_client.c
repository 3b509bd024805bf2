/* The CLI client (cmd/client/client.h) over a real nats-server: against a scripted responder
 * (streaming, error outputs, timeout, no responders, JSON lines), and through the real input
 * and output processor actors with a fake engine that echoes the prompt tokens (the whole
 * front path: client → input processor → engine subjects → output processor → client).
 * Tokenizer: the GPT-2 vocab test vector (no chat template: prompts are tokenized as is). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "actors/input_processor/actor.h"
#include "actors/output_processor/actor.h"
#include "bus/bus.h"
#include "base/log.h"
#include "cmd/client/client.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"
#include "tests/integration/nats_test_server.h"

#define VOCAB LLB_TESTDATA_DIR "/tokenizer/ggml-vocab-gpt-2.gguf"
#define WAIT_MS 20000

static struct nats_test_server srv;

static struct bus *connect_or_fail(const char *name) {
  return nats_test_connect(srv.url, name, NULL);
}

/* What the scripted responder answers. */
enum script { SCRIPT_STREAM, SCRIPT_ERROR, SCRIPT_SILENT };

static void respond_output(struct bus *bus, const struct bus_msg *msg, const char *text, bool finished,
                           int32_t error_code) {
  struct llb_completion_output c = {.index = 0, .text = llb_str_c(text)};
  struct llb_request_output ro = {.request_id = llb_str_c("cli-0123"), .outputs = &c, .num_outputs = 1,
                                  .finished = finished};
  if (error_code) {
    ro.num_outputs = 0;
    ro.error = (struct llb_error_info){error_code, llb_str_c("must be >= 0, got -1"), llb_str_c("temperature"), 0};
  }
  struct llb_buf buf = {0};
  assert_int_equal(llb_request_output_encode_buf(&ro, &buf), LLB_STATUS_OK);
  assert_int_equal(bus_respond(bus, msg, buf.data, buf.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&buf);
}

static void on_scripted(struct bus *bus, const struct bus_msg *msg, void *user) {
  enum script s = *(enum script *)user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request gr;
  llb_status st = llb_generate_request_decode(msg->data, msg->len, &arena, &gr);
  if (st == LLB_STATUS_OK && s == SCRIPT_STREAM) {
    /* Echo what the client asked for, so the test sees the request was built right. */
    char first[64];
    snprintf(first, sizeof first, "[%s|%d]", gr.prompt.data, gr.sampling_params->output_kind);
    respond_output(bus, msg, first, false, 0);
    respond_output(bus, msg, " Hel", false, 0);
    respond_output(bus, msg, "lo", true, 0);
  } else if (st == LLB_STATUS_OK && s == SCRIPT_ERROR) {
    respond_output(bus, msg, "", true, LLB_STATUS_INVALID_ARGUMENT);
  }
  llb_arena_destroy(&arena);
}

/* Runs one client request with output captured in memory. */
static llb_status run_client(struct bus *client, const struct client_options *o, const char *prompt, char **printed,
                             char **answer) {
  size_t size = 0;
  FILE *out = open_memstream(printed, &size);
  assert_non_null(out);
  struct client_prompt p = {.prompt = prompt};
  llb_status st = client_generate(client, o, &p, out, NULL, NULL, answer);
  fclose(out);
  return st;
}

static struct bus_sub *subscribe_script(struct bus *server, enum script *s) {
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe(server, "llm.generate.default", "input_processor", on_scripted, s, &sub),
                   LLB_STATUS_OK);
  assert_int_equal(bus_flush(server, WAIT_MS), LLB_STATUS_OK);
  return sub;
}

static void test_client_streams_delta_text_until_finished(void **state) {
  (void)state;
  struct bus *server = connect_or_fail("scripted"), *client = connect_or_fail("client");
  enum script s = SCRIPT_STREAM;
  subscribe_script(server, &s);
  struct client_options o;
  client_options_init(&o);
  char *printed = NULL, *answer = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, &answer), LLB_STATUS_OK);
  assert_string_equal(printed, "[hi|1] Hello\n"); /* DELTA (1) requested, newline added */
  assert_string_equal(answer, "[hi|1] Hello");
  free(printed);
  free(answer);
  bus_destroy(client);
  bus_destroy(server);
}

static void test_client_json_prints_one_line_per_output(void **state) {
  (void)state;
  struct bus *server = connect_or_fail("scripted"), *client = connect_or_fail("client");
  enum script s = SCRIPT_STREAM;
  subscribe_script(server, &s);
  struct client_options o;
  client_options_init(&o);
  o.json = true;
  char *printed = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, NULL), LLB_STATUS_OK);
  int lines = 0;
  for (char *line = strtok(printed, "\n"); line; line = strtok(NULL, "\n"), lines++) {
    json_error_t err;
    json_t *j = json_loads(line, 0, &err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "request_id")), "cli-0123");
    assert_true(json_is_boolean(json_object_get(j, "finished")));
    assert_true(json_is_array(json_object_get(j, "outputs")));
    json_decref(j);
  }
  assert_int_equal(lines, 3);
  free(printed);
  bus_destroy(client);
  bus_destroy(server);
}

static void test_client_reports_engine_error_with_field(void **state) {
  (void)state;
  struct bus *server = connect_or_fail("scripted"), *client = connect_or_fail("client");
  enum script s = SCRIPT_ERROR;
  subscribe_script(server, &s);
  struct client_options o;
  client_options_init(&o);
  char *printed = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, NULL), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(llb_err_last(), "temperature: must be >= 0, got -1");
  free(printed);
  bus_destroy(client);
  bus_destroy(server);
}

/* A responder whose first answer loses its end (an output processor that restarted after the
 * engine finished: final STATE_LOST) and whose second answers in full. */
struct lost_once {
  int requests;
  uint64_t seeds[4];
  bool seeded[4];
};

static void respond_lost_error(struct bus *bus, const struct bus_msg *msg) {
  struct llb_request_output ro = {.request_id = llb_str_c("cli-0123"), .finished = true};
  ro.error = (struct llb_error_info){LLB_STATUS_STATE_LOST, llb_str_c("its outputs were lost"), llb_str_c(""), 0};
  struct llb_buf buf = {0};
  assert_int_equal(llb_request_output_encode_buf(&ro, &buf), LLB_STATUS_OK);
  assert_int_equal(bus_respond(bus, msg, buf.data, buf.len, NULL), LLB_STATUS_OK);
  llb_buf_free(&buf);
}

static void on_lost_once(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct lost_once *l = user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request gr;
  if (llb_generate_request_decode(msg->data, msg->len, &arena, &gr) == LLB_STATUS_OK && l->requests < 4) {
    l->seeds[l->requests] = gr.sampling_params->seed;
    l->seeded[l->requests] = gr.sampling_params->has_seed;
    respond_output(bus, msg, "Hel", false, 0);
    if (l->requests++ == 0) respond_lost_error(bus, msg);
    else respond_output(bus, msg, "lo", true, 0);
  }
  llb_arena_destroy(&arena);
}

static void test_client_resends_a_request_whose_end_was_lost_without_repeating_text(void **state) {
  (void)state;
  struct bus *server = connect_or_fail("scripted"), *client = connect_or_fail("client");
  struct lost_once l = {0};
  struct bus_sub *sub = NULL;
  assert_int_equal(bus_subscribe(server, "llm.generate.default", "input_processor", on_lost_once, &l, &sub),
                   LLB_STATUS_OK);
  assert_int_equal(bus_flush(server, WAIT_MS), LLB_STATUS_OK);
  struct client_options o;
  client_options_init(&o); /* no --seed: the client draws one, so the resend repeats itself */
  char *printed = NULL, *answer = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, &answer), LLB_STATUS_OK);
  assert_int_equal(l.requests, 2);
  assert_true(l.seeded[0] && l.seeded[1]);
  assert_true(l.seeds[0] == l.seeds[1]);
  assert_string_equal(printed, "Hello\n"); /* the repeated "Hel" printed once */
  assert_string_equal(answer, "Hello");
  free(printed);
  free(answer);
  bus_destroy(client);
  bus_destroy(server);
}

static void test_client_times_out_with_clear_message(void **state) {
  (void)state;
  struct bus *server = connect_or_fail("scripted"), *client = connect_or_fail("client");
  enum script s = SCRIPT_SILENT;
  subscribe_script(server, &s);
  struct client_options o;
  client_options_init(&o);
  o.timeout_s = 1;
  char *printed = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, NULL), LLB_STATUS_TIMEOUT);
  assert_string_equal(llb_err_last(), "no answer from the engine within 1 s");
  free(printed);
  bus_destroy(client);
  bus_destroy(server);
}

static void test_client_without_input_processor_says_nobody_listens(void **state) {
  (void)state;
  struct bus *client = connect_or_fail("client");
  struct client_options o;
  client_options_init(&o);
  o.tenant = "nobody";
  char *printed = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, NULL), LLB_STATUS_NOT_FOUND);
  if (!strstr(llb_err_last(), "llm.generate.nobody")) fail_msg("got: %s", llb_err_last());
  free(printed);
  bus_destroy(client);
}

/* An input processor that comes up 300 ms after the request was sent (a restart gap). */
static void *late_input_processor(void *arg) {
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  static enum script s = SCRIPT_STREAM;
  subscribe_script(arg, &s);
  return NULL;
}

static void test_client_resends_a_request_nobody_took_until_an_input_processor_is_back(void **state) {
  (void)state;
  struct bus *server = connect_or_fail("scripted"), *client = connect_or_fail("client");
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, late_input_processor, server), 0);
  struct client_options o;
  client_options_init(&o);
  char *printed = NULL, *answer = NULL;
  assert_int_equal(run_client(client, &o, "hi", &printed, &answer), LLB_STATUS_OK);
  assert_string_equal(answer, "[hi|1] Hello");
  pthread_join(t, NULL);
  free(printed);
  free(answer);
  bus_destroy(client);
  bus_destroy(server);
}

/* A fake engine: answers each EngineCoreRequest with one output echoing its prompt tokens. */
static void on_engine_request(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)user;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_engine_core_request r;
  if (llb_engine_core_request_decode(msg->data, msg->len, &arena, &r) == LLB_STATUS_OK) {
    struct llb_engine_core_output o;
    llb_engine_core_output_init(&o);
    o.request_id = r.request_id;
    o.new_token_ids = r.prompt_token_ids;
    o.num_new_token_ids = r.num_prompt_token_ids;
    o.finish_reason = LLB_FINISH_REASON_LENGTH;
    o.reply_to = r.reply_to;
    o.external_id = r.external_id;
    o.arrival_time = r.arrival_time;
    o.prompt_token_ids = r.prompt_token_ids;
    o.num_prompt_token_ids = r.num_prompt_token_ids;
    o.sampling_params = r.sampling_params;
    o.parent_request_id = r.parent_request_id;
    o.index = r.client_index;
    struct llb_engine_core_outputs outs = {.engine_id = llb_str_c("0"), .step = 1, .outputs = &o, .num_outputs = 1};
    struct llb_buf buf = {0};
    if (llb_engine_core_outputs_encode_buf(&outs, &buf) == LLB_STATUS_OK)
      (void)bus_publish(bus, "llm.engine.0.outputs", buf.data, buf.len, &msg->trace);
    llb_buf_free(&buf);
  }
  llb_arena_destroy(&arena);
}

static void test_front_path_echo_through_both_processors(void **state) {
  (void)state;
  struct bus *ip_bus = connect_or_fail("input-processor"), *op_bus = connect_or_fail("output-processor");
  struct bus *engine = connect_or_fail("fake-engine"), *client = connect_or_fail("client");
  struct input_processor_actor *ip = NULL;
  struct output_processor_actor *op = NULL;
  struct input_processor_actor_options ipo = {.model_path = VOCAB};
  struct output_processor_actor_options opo = {.model_path = VOCAB};
  assert_int_equal(input_processor_actor_create(&ipo, &ip), LLB_STATUS_OK);
  assert_int_equal(output_processor_actor_create(&opo, &op), LLB_STATUS_OK);
  assert_int_equal(input_processor_actor_start(ip, ip_bus), LLB_STATUS_OK);
  assert_int_equal(output_processor_actor_start(op, op_bus), LLB_STATUS_OK);
  assert_int_equal(bus_subscribe(engine, "llm.engine.0.requests", NULL, on_engine_request, NULL, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(ip_bus, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_flush(op_bus, WAIT_MS), LLB_STATUS_OK);
  assert_int_equal(bus_flush(engine, WAIT_MS), LLB_STATUS_OK);

  struct client_options o;
  client_options_init(&o);
  o.raw = true;
  char *printed = NULL, *answer = NULL;
  assert_int_equal(run_client(client, &o, "Hello world, echo me!", &printed, &answer), LLB_STATUS_OK);
  assert_string_equal(answer, "Hello world, echo me!");
  assert_string_equal(printed, "Hello world, echo me!\n");
  free(printed);
  free(answer);

  /* n = 2: both children come back and are printed per completion. */
  o.sp.n = 2;
  printed = NULL;
  assert_int_equal(run_client(client, &o, "twice", &printed, NULL), LLB_STATUS_OK);
  assert_string_equal(printed, "--- completion 0 ---\ntwice\n--- completion 1 ---\ntwice\n");
  free(printed);

  bus_destroy(client);
  bus_destroy(engine);
  input_processor_actor_stop(ip);
  bus_destroy(ip_bus);
  bus_destroy(op_bus);
  input_processor_actor_destroy(ip);
  output_processor_actor_destroy(op);
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
  if (nats_test_server_start(&srv, 0, false) != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_client_streams_delta_text_until_finished),
      cmocka_unit_test(test_client_json_prints_one_line_per_output),
      cmocka_unit_test(test_client_reports_engine_error_with_field),
      cmocka_unit_test(test_client_resends_a_request_whose_end_was_lost_without_repeating_text),
      cmocka_unit_test(test_client_times_out_with_clear_message),
      cmocka_unit_test(test_client_without_input_processor_says_nobody_listens),
      cmocka_unit_test(test_client_resends_a_request_nobody_took_until_an_input_processor_is_back),
      cmocka_unit_test(test_front_path_echo_through_both_processors),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  nats_test_server_stop(&srv);
  return rc;
}
