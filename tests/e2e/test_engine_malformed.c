/* A malformed message on any engine subject (llm.generate.default, llm.engine.0.requests,
 * .abort, .kv, .execute, .outputs) — garbage bytes, a valid message of that subject cut in
 * half, an empty message — never stops an actor: sent with a reply subject to a subject that
 * answers requests it gets an error reply (RequestOutput.error, ErrorReply, or the reply
 * message's error field; on .requests, which the durable engine's JetStream stream captures,
 * JetStream's PubAck: the scheduler drops it when it fetches it), sent without one it is
 * dropped (counted by the actor); afterwards a
 * normal request gives the same tokens as before and no actor was restarted (heartbeat pids
 * unchanged, every actor still beating). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/subject.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/kv_step.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"
#include "tests/e2e/stack.h"

#define REPLY_WAIT_MS 20000

static const char *model;
static struct e2e_stack s;

enum subject_kind {
  SUBJECT_KIND_GENERATE,
  SUBJECT_KIND_REQUESTS,
  SUBJECT_KIND_ABORT,
  SUBJECT_KIND_KV,
  SUBJECT_KIND_EXECUTE,
  SUBJECT_KIND_OUTPUTS,
  SUBJECT_KIND_COUNT
};

static const struct {
  const char *subject;
  bool answers; /* a request/reply subject: a message with a reply subject gets an answer */
  bool durable; /* captured by the JetStream requests stream (serve runs the engine durable):
                   the answer is JetStream's PubAck (stored), and the scheduler, which fetches
                   it later, logs, counts and acknowledges it (never delivered again) */
} subjects[SUBJECT_KIND_COUNT] = {
    [SUBJECT_KIND_GENERATE] = {"llm.generate.default", true, false},
    [SUBJECT_KIND_REQUESTS] = {"llm.engine.0.requests", true, true},
    [SUBJECT_KIND_ABORT] = {"llm.engine.0.abort", false},
    [SUBJECT_KIND_KV] = {"llm.engine.0.kv", true},
    [SUBJECT_KIND_EXECUTE] = {"llm.engine.0.execute", true},
    [SUBJECT_KIND_OUTPUTS] = {"llm.engine.0.outputs", false},
};

/* A valid message of the kind `subject` carries, into *b. */
static void encode_valid(enum subject_kind k, struct llb_buf *b) {
  static const int32_t prompt[] = {19556, 905, 28, 1073, 3358};
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.max_tokens = 4;
  sp.has_seed = true;
  struct llb_str ids[] = {llb_str_c("nobody-0123456789abcdef")};
  llb_status st = LLB_STATUS_INTERNAL;
  switch (k) {
    case SUBJECT_KIND_GENERATE: {
      struct llb_generate_request g;
      llb_generate_request_init(&g);
      g.request_id = llb_str_c("malformed");
      g.prompt = llb_str_c("Hello there, how are you today?");
      g.sampling_params = &sp;
      st = llb_generate_request_encode_buf(&g, b);
      break;
    }
    case SUBJECT_KIND_REQUESTS: {
      struct llb_engine_core_request m = {.request_id = ids[0], .prompt_token_ids = prompt,
                                          .num_prompt_token_ids = 5, .sampling_params = &sp,
                                          .eos_token_id = 2, .arrival_time = 1.0,
                                          .reply_to = llb_str_c("_INBOX.nobody")};
      st = llb_engine_core_request_encode_buf(&m, b);
      break;
    }
    case SUBJECT_KIND_ABORT: {
      struct llb_abort_requests m = {.request_ids = ids, .num_request_ids = 1};
      st = llb_abort_requests_encode_buf(&m, b);
      break;
    }
    case SUBJECT_KIND_KV: {
      static const uint64_t hashes[] = {0x1234567890abcdefULL};
      struct llb_kv_op op = {.kind = LLB_KV_OP_KIND_ALLOCATE, .req_id = ids[0], .num_tokens = 20,
                             .block_hashes = hashes, .num_block_hashes = 1, .lookup = true};
      struct llb_kv_step m = {.step = 1000000, .ops = &op, .num_ops = 1};
      st = llb_kv_step_encode_buf(&m, b);
      break;
    }
    case SUBJECT_KIND_EXECUTE: {
      struct llb_scheduler_output m = {.step = 1000000, .block_size = 16, .finished_req_ids = ids,
                                       .num_finished_req_ids = 1};
      st = llb_scheduler_output_encode_buf(&m, b);
      break;
    }
    case SUBJECT_KIND_OUTPUTS: {
      struct llb_engine_core_output o;
      llb_engine_core_output_init(&o);
      o.request_id = ids[0];
      o.new_token_ids = prompt;
      o.num_new_token_ids = 1;
      o.reply_to = llb_str_c("_INBOX.nobody");
      struct llb_engine_core_outputs m = {.engine_id = llb_str_c("0"), .step = 1000000, .outputs = &o,
                                          .num_outputs = 1};
      st = llb_engine_core_outputs_encode_buf(&m, b);
      break;
    }
    case SUBJECT_KIND_COUNT: break;
  }
  if (st != LLB_STATUS_OK) fail_msg("encoding a valid message for %s: %s", subjects[k].subject, llb_err_last());
}

enum payload_kind { PAYLOAD_KIND_GARBAGE, PAYLOAD_KIND_TRUNCATED, PAYLOAD_KIND_EMPTY, PAYLOAD_KIND_COUNT };
static const char *const payload_names[PAYLOAD_KIND_COUNT] = {"garbage", "truncated", "empty"};

/* The bad payload into *b (b->len may be 0). */
static void make_payload(enum subject_kind k, enum payload_kind pk, struct llb_buf *b) {
  llb_buf_free(b);
  if (pk == PAYLOAD_KIND_EMPTY) return;
  encode_valid(k, b);
  if (pk == PAYLOAD_KIND_TRUNCATED) {
    b->len /= 2;
    return;
  }
  /* Garbage of the valid message's size: an xorshift stream, never all zeros. */
  uint32_t x = 0x9e3779b9u ^ (uint32_t)k;
  for (size_t i = 0; i < b->len; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b->data[i] = (uint8_t)x;
  }
}

/* True when `reply` tells of an error in any of the forms an engine subject answers with. */
static bool is_error_reply(const struct bus_msg *reply, char *why, size_t cap) {
  struct llb_arena a;
  llb_arena_init(&a, NULL, 0);
  bool err = false;
  enum llb_message_kind kind = llb_message_identify(reply->data, reply->len);
  switch (kind) {
    case LLB_MESSAGE_KIND_ERROR_REPLY: {
      struct llb_error_reply m;
      err = llb_error_reply_decode(reply->data, reply->len, &a, &m) == LLB_STATUS_OK && m.error.code != 0;
      if (err) snprintf(why, cap, "ErrorReply %d '%s'", m.error.code, m.error.message.data);
      break;
    }
    case LLB_MESSAGE_KIND_REQUEST_OUTPUT: {
      struct llb_request_output m;
      err = llb_request_output_decode(reply->data, reply->len, &a, &m) == LLB_STATUS_OK && m.error.code != 0 &&
            m.finished;
      if (err) snprintf(why, cap, "RequestOutput error %d '%s'", m.error.code, m.error.message.data);
      break;
    }
    case LLB_MESSAGE_KIND_KV_STEP_RESULT: {
      struct llb_kv_step_result m;
      err = llb_kv_step_result_decode(reply->data, reply->len, &a, &m) == LLB_STATUS_OK && m.error.code != 0;
      if (err) snprintf(why, cap, "KVStepResult error %d '%s'", m.error.code, m.error.message.data);
      break;
    }
    case LLB_MESSAGE_KIND_MODEL_RUNNER_OUTPUT: {
      struct llb_model_runner_output m;
      err = llb_model_runner_output_decode(reply->data, reply->len, &a, &m) == LLB_STATUS_OK && m.error.code != 0;
      if (err) snprintf(why, cap, "ModelRunnerOutput error %d '%s'", m.error.code, m.error.message.data);
      break;
    }
    default: snprintf(why, cap, "a %s of %zu bytes", llb_message_kind_name(kind), reply->len); break;
  }
  llb_arena_destroy(&a);
  return err;
}

static struct e2e_request normal_request(void) {
  struct e2e_request r = {.request_id = "normal", .prompt = "Name three rivers."};
  llb_sampling_params_init(&r.sp);
  r.sp.temperature = 0.0f;
  r.sp.max_tokens = 8;
  return r;
}

static void test_malformed_messages_on_every_subject_leave_every_actor_serving(void **state) {
  (void)state;
  assert_int_equal(e2e_stack_start(&s, model, NULL), 0);
  double t0 = e2e_now_s();
  struct e2e_result before, after;
  struct e2e_request nr = normal_request();
  assert_int_equal(e2e_generate(&s, &nr, &before), 0);
  assert_int_equal(before.error_code, 0);
  assert_true(before.num_tokens >= 1);

  struct llb_buf b = {0};
  int unanswered = 0;
  for (int k = 0; k < SUBJECT_KIND_COUNT; k++) {
    for (int pk = 0; pk < PAYLOAD_KIND_COUNT; pk++) {
      make_payload((enum subject_kind)k, (enum payload_kind)pk, &b);
      /* Without a reply subject: dropped and counted. */
      assert_int_equal(bus_publish(s.bus, subjects[k].subject, b.data, b.len, NULL), LLB_STATUS_OK);
      if (!subjects[k].answers) continue;
      /* With one: an error reply. */
      struct bus_msg *reply = NULL;
      llb_status st = bus_request(s.bus, subjects[k].subject, b.data, b.len, NULL, REPLY_WAIT_MS, &reply);
      char why[512] = "";
      if (st != LLB_STATUS_OK) {
        fprintf(stderr, "e2e: %s %s: no reply: %s\n", subjects[k].subject, payload_names[pk], llb_err_last());
        unanswered++;
      } else if (subjects[k].durable) {
        const bool stored = reply->len < sizeof why && memmem(reply->data, reply->len, "\"stream\":\"LLM_REQUESTS\"", 23);
        fprintf(stderr, "e2e: %s %s: %s\n", subjects[k].subject, payload_names[pk],
                stored ? "stored by JetStream (the scheduler drops it)" : "no PubAck of the requests stream");
        unanswered += !stored;
      } else if (!is_error_reply(reply, why, sizeof why)) {
        fprintf(stderr, "e2e: %s %s: the reply is not an error: %s\n", subjects[k].subject, payload_names[pk], why);
        unanswered++;
      } else {
        fprintf(stderr, "e2e: %s %s: %s\n", subjects[k].subject, payload_names[pk], why);
      }
      bus_msg_destroy(reply);
    }
  }
  llb_buf_free(&b);
  assert_int_equal(bus_flush(s.bus, 5000), LLB_STATUS_OK);

  assert_int_equal(e2e_generate(&s, &nr, &after), 0);
  assert_int_equal(after.error_code, 0);
  assert_true(e2e_same_tokens("normal request before vs after the malformed messages", &before, &after));
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);
  assert_int_equal(unanswered, 0);
  fprintf(stderr, "e2e: malformed scenario in %.1f s\n", e2e_now_s() - t0);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_malformed_messages_on_every_subject_leave_every_actor_serving, NULL, e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
