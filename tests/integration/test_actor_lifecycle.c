/* The actors' common lifecycle (actors/README.md) over a real nats-server, for the two
 * actors that run in process without a model: create checks the options and touches no bus,
 * start subscribes under the bus's prefix and the engine id of the options, stop ends the
 * subscription (a scheduler then gets "no responders", not a timeout) and is idempotent,
 * stats counts what was served. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>

#include "actors/encoder_cache/actor.h"
#include "actors/kv_manager/actor.h"
#include "bus/bus.h"
#include "schemas/encoder_step.h"
#include "schemas/kv_step.h"
#include "tests/integration/nats_test_server.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core machine under sanitizers */

struct fixture {
  struct nats_test_server srv;
  struct bus *actor_bus, *client;
  struct llb_arena arena;
};

static struct bus *connect_or_fail(const char *url, const char *name) {
  return nats_test_connect(url, name, "acme.llm");
}

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (nats_test_server_start(&f->srv, 0, false) != 0) {
    free(f);
    return -1;
  }
  f->actor_bus = connect_or_fail(f->srv.url, "lifecycle-actor");
  f->client = connect_or_fail(f->srv.url, "lifecycle-client");
  llb_arena_init(&f->arena, NULL, 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  bus_destroy(f->client);
  bus_destroy(f->actor_bus);
  nats_test_server_stop(&f->srv);
  llb_arena_destroy(&f->arena);
  free(f);
  return 0;
}

/* Sends `payload` as a request on `subject`; the reply's bytes go to *reply (caller frees). */
static llb_status ask(struct fixture *f, const char *subject, const struct llb_buf *payload,
                      struct bus_msg **reply) {
  assert_int_equal(bus_flush(f->actor_bus, WAIT_MS), LLB_STATUS_OK);
  return bus_request(f->client, subject, payload->data, payload->len, NULL, WAIT_MS, reply);
}

static void test_kv_manager_answers_under_its_engine_until_stopped(void **state) {
  struct fixture *f = *state;
  struct kv_manager_actor *a = NULL;
  const struct kv_manager_actor_options bad = {.engine_id = "e 1", .kv = {.num_blocks = 8, .block_size = 4}};
  assert_int_equal(kv_manager_actor_create(&bad, &a), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(a);
  const struct kv_manager_actor_options o = {.engine_id = "e1", .kv = {.num_blocks = 8, .block_size = 4}};
  assert_int_equal(kv_manager_actor_create(&o, &a), LLB_STATUS_OK);
  assert_int_equal(kv_manager_actor_start(a, f->actor_bus), LLB_STATUS_OK);

  const struct llb_kv_op op = {.kind = LLB_KV_OP_KIND_ALLOCATE, .req_id = llb_str_c("r1"), .num_tokens = 5};
  const struct llb_kv_step step = {.step = 1, .ops = &op, .num_ops = 1, .resync = true}; /* held: none */
  struct llb_buf b = {0};
  assert_int_equal(llb_kv_step_encode_buf(&step, &b), LLB_STATUS_OK);
  struct bus_msg *reply = NULL;
  assert_int_equal(ask(f, "acme.llm.engine.e1.kv", &b, &reply), LLB_STATUS_OK);
  struct llb_kv_step_result r;
  assert_int_equal(llb_kv_step_result_decode(reply->data, reply->len, &f->arena, &r), LLB_STATUS_OK);
  bus_msg_destroy(reply);
  assert_int_equal(r.error.code, 0);
  assert_int_equal(r.num_results, 1);
  assert_int_equal(r.results[0].num_block_ids, 2); /* 5 tokens in blocks of 4 */
  struct kv_manager_actor_stats s;
  kv_manager_actor_stats(a, &s);
  assert_int_equal(s.num_steps, 1);

  kv_manager_actor_stop(a);
  kv_manager_actor_stop(a); /* idempotent */
  reply = NULL;
  assert_int_equal(ask(f, "acme.llm.engine.e1.kv", &b, &reply), LLB_STATUS_NOT_FOUND);
  assert_null(reply);
  llb_buf_free(&b);
  kv_manager_actor_destroy(a);
}

static void test_encoder_cache_answers_under_its_engine_until_stopped(void **state) {
  struct fixture *f = *state;
  struct encoder_cache_actor *a = NULL;
  const struct encoder_cache_actor_options bad = {.engine_id = "a.b", .cache_size = 16};
  assert_int_equal(encoder_cache_actor_create(&bad, &a), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(a);
  const struct encoder_cache_actor_options o = {.engine_id = "e2", .cache_size = 16};
  assert_int_equal(encoder_cache_actor_create(&o, &a), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_actor_start(a, f->actor_bus), LLB_STATUS_OK);

  const struct llb_encoder_step step = {.version = LLB_SCHEMA_VERSION, .step = 1};
  struct llb_buf b = {0};
  assert_int_equal(llb_encoder_step_encode_buf(&step, &b), LLB_STATUS_OK);
  struct bus_msg *reply = NULL;
  assert_int_equal(ask(f, "acme.llm.engine.e2.encoder", &b, &reply), LLB_STATUS_OK);
  struct llb_encoder_step_result r;
  assert_int_equal(llb_encoder_step_result_decode(reply->data, reply->len, &f->arena, &r), LLB_STATUS_OK);
  bus_msg_destroy(reply);
  assert_int_equal(r.error.code, 0);
  assert_int_equal(r.num_free_slots, 16);
  struct encoder_cache_actor_stats s;
  encoder_cache_actor_stats(a, &s);
  assert_int_equal(s.stats.num_steps, 1);

  encoder_cache_actor_stop(a);
  encoder_cache_actor_stop(a);
  reply = NULL;
  assert_int_equal(ask(f, "acme.llm.engine.e2.encoder", &b, &reply), LLB_STATUS_NOT_FOUND);
  assert_null(reply);
  llb_buf_free(&b);
  encoder_cache_actor_destroy(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_kv_manager_answers_under_its_engine_until_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_encoder_cache_answers_under_its_engine_until_stopped, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
