/* api_server_delta: a completion output marked `resync` (its output processor restarted and repeats
 * the completion from its start) reaches the HTTP client only with what the client does not
 * have yet: text bytes, token ids and the logprobs of those tokens; so does every output of a
 * request sent again after a NATS reconnect (api_server_delta_restart); other outputs pass as they
 * are and are counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/api_server/api_server_delta.h"

static struct llb_completion_output completion(int32_t index, const char *text, const int32_t *ids, int32_t n,
                                                bool resync) {
  struct llb_completion_output c = {.index = index, .text = llb_str_c(text), .token_ids = ids,
                                    .num_token_ids = n, .resync = resync};
  return c;
}

/* Applies one output of a single completion; returns the completion as forwarded. */
static struct llb_completion_output forward(struct api_server_delta *d, struct llb_completion_output c) {
  static struct llb_completion_output scratch[1];
  struct llb_request_output ro = {.outputs = &c, .num_outputs = 1};
  api_server_delta_apply(d, &ro, scratch);
  assert_ptr_equal(ro.outputs, scratch);
  return scratch[0];
}

static void assert_text(struct llb_completion_output c, const char *want) {
  assert_int_equal(c.text.len, strlen(want));
  assert_memory_equal(c.text.data, want, c.text.len);
}

static void test_resync_output_forwards_only_what_the_client_lacks(void **state) {
  (void)state;
  struct api_server_delta d = {0};
  const int32_t ids[] = {10, 11, 12, 13};
  assert_text(forward(&d, completion(0, "He", ids, 1, false)), "He");
  assert_text(forward(&d, completion(0, "llo", ids + 1, 1, false)), "llo");
  /* The new output processor repeats everything from the start, plus one new token. */
  struct llb_completion_output c = forward(&d, completion(0, "Hello world", ids, 3, true));
  assert_text(c, " world");
  assert_int_equal(c.num_token_ids, 1);
  assert_int_equal(c.token_ids[0], 12);
  assert_false(c.resync);
  /* A second restart: again from the start. */
  c = forward(&d, completion(0, "Hello world!", ids, 4, true));
  assert_text(c, "!");
  assert_int_equal(c.num_token_ids, 1);
  assert_int_equal(c.token_ids[0], 13);
  assert_int_equal(d.num_resyncs, 2);
  assert_int_equal(d.text_bytes[0], 12);
  assert_int_equal(d.num_tokens[0], 4);
}

static void test_resync_keeps_the_logprobs_of_the_new_tokens_only(void **state) {
  (void)state;
  struct api_server_delta d = {0};
  const int32_t ids[] = {1, 2, 3};
  struct llb_token_logprobs lps[3] = {{.token_id = 1}, {.token_id = 2}, {.token_id = 3}};
  forward(&d, completion(0, "a", ids, 1, false));
  struct llb_completion_output c = completion(0, "abc", ids, 3, true);
  c.logprobs = lps;
  c.num_logprobs = 3;
  c = forward(&d, c);
  assert_int_equal(c.num_token_ids, 2);
  assert_int_equal(c.num_logprobs, 2);
  assert_int_equal(c.logprobs[0].token_id, 2);
  /* the engine sends no logprobs rows with a history: none for the new tokens either */
  c = completion(0, "abcd", ids, 3, true);
  c = forward(&d, c);
  assert_int_equal(c.num_logprobs, 0);
}

static void test_resync_shorter_than_what_was_sent_forwards_nothing(void **state) {
  (void)state;
  struct api_server_delta d = {0};
  const int32_t ids[] = {1, 2, 3};
  forward(&d, completion(1, "abc", ids, 3, false));
  struct llb_completion_output c = forward(&d, completion(1, "ab", ids, 2, true));
  assert_int_equal(c.text.len, 0);
  assert_int_equal(c.num_token_ids, 0);
  /* other completions of the request are counted apart; out-of-range indexes pass */
  assert_int_equal(d.text_bytes[0], 0);
  c = forward(&d, completion(API_SERVER_DELTA_MAX_N, "zz", ids, 2, true));
  assert_text(c, "zz");
  assert_true(c.resync);
  /* the repeated stream goes on in deltas: the token the client already has is not sent twice */
  c = forward(&d, completion(1, "c", ids + 2, 1, false));
  assert_int_equal(c.text.len, 0);
  assert_int_equal(c.num_token_ids, 0);
  c = forward(&d, completion(1, "d", ids + 2, 1, false));
  assert_text(c, "d");
}

/* A request sent again after a NATS reconnect (the same seeded request from the start, as
 * deltas): the client gets every token once, in order, across both runs. */
static void test_restarted_request_forwards_each_token_once(void **state) {
  (void)state;
  struct api_server_delta d = {0};
  const int32_t ids[] = {1, 2, 3, 4, 5};
  assert_text(forward(&d, completion(0, "The", ids, 1, false)), "The");
  assert_text(forward(&d, completion(0, " cat", ids + 1, 1, false)), " cat");
  api_server_delta_restart(&d);
  struct llb_completion_output c = forward(&d, completion(0, "The", ids, 1, false));
  assert_int_equal(c.text.len, 0);
  assert_int_equal(c.num_token_ids, 0);
  c = forward(&d, completion(0, " cat sat", ids + 1, 2, false)); /* straddles what was sent */
  assert_text(c, " sat");
  assert_int_equal(c.num_token_ids, 1);
  assert_int_equal(c.token_ids[0], 3);
  c = forward(&d, completion(0, " on", ids + 3, 1, false));
  assert_text(c, " on");
  assert_int_equal(d.num_restarts, 1);
  assert_int_equal(d.num_tokens[0], 4);
  /* an output processor restart during the second run still works */
  c = forward(&d, completion(0, "The cat sat on it", ids, 5, true));
  assert_text(c, " it");
  assert_int_equal(c.num_token_ids, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resync_output_forwards_only_what_the_client_lacks),
      cmocka_unit_test(test_resync_keeps_the_logprobs_of_the_new_tokens_only),
      cmocka_unit_test(test_resync_shorter_than_what_was_sent_forwards_nothing),
      cmocka_unit_test(test_restarted_request_forwards_each_token_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
