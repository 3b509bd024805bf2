/* Output processor: output kinds, n > 1 aggregation, de-duplication by output position,
 * rebuilding after a restart, logprobs, metrics, abort and lost-token errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "actors/output_processor/detokenizer.h"
#include "test_output_common.h"

static struct tokenizer *tok;
static const char *const sample_text = "Bonjour \xc3\xa0 tous \xf0\x9f\x8e\x89 ok";

/* Runs sample_text as byte tokens (2 per step, LENGTH at the end) in `kind`; returns the
 * outputs in `res` (caller frees). */
static void run_kind(enum llb_output_kind kind, struct output_processor_result *res) {
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = kind;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, sample_text, &n);
  output_processor_result_init(res);
  for (int64_t pos = 0; pos < n; pos += 2) {
    int32_t k = pos + 2 <= n ? 2 : (int32_t)(n - pos);
    enum output_processor_finish_reason why = pos + k == n ? OUTPUT_PROCESSOR_FINISH_REASON_LENGTH : OUTPUT_PROCESSOR_FINISH_REASON_NONE;
    assert_int_equal(test_step(p, "r1", ids, pos, k, why, res), LLB_STATUS_OK);
  }
  assert_int_equal(output_processor_num_unfinished(p), 0);
  free(ids);
  output_processor_destroy(p);
}

static void test_delta_outputs_concatenate_to_the_cumulative_last(void **state) {
  (void)state;
  struct output_processor_result cum, del;
  run_kind(LLB_OUTPUT_KIND_CUMULATIVE, &cum);
  run_kind(LLB_OUTPUT_KIND_DELTA, &del);
  assert_int_equal(cum.num_outputs, del.num_outputs);
  const struct output_processor_request_output *last = &cum.outputs[cum.num_outputs - 1];
  assert_true(last->finished);
  assert_string_equal(last->outputs[0].text, sample_text);
  assert_int_equal(last->outputs[0].finish_reason, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH);
  char joined[256] = "";
  int64_t tokens = 0;
  for (int64_t i = 0; i < del.num_outputs; i++) {
    const struct output_processor_completion *c = &del.outputs[i].outputs[0];
    assert_true(detok_utf8_valid(c->text, c->text_len));
    assert_int_equal(del.outputs[i].finished, i == del.num_outputs - 1);
    assert_int_equal(cum.outputs[i].finished, i == cum.num_outputs - 1);
    /* Each cumulative output is the running concatenation of the deltas. */
    strcat(joined, c->text);
    assert_string_equal(cum.outputs[i].outputs[0].text, joined);
    tokens += c->num_token_ids;
    assert_int_equal(cum.outputs[i].outputs[0].num_token_ids, tokens);
    /* DELTA sends the prompt only in its first output. */
    assert_true((del.outputs[i].prompt_token_ids != NULL) == (i == 0));
    assert_string_equal(del.outputs[i].request_id, "client-1");
    assert_string_equal(del.outputs[i].reply_to, "_INBOX.test");
  }
  assert_string_equal(joined, sample_text);
  assert_int_equal(tokens, (int64_t)strlen(sample_text));
  output_processor_result_free(&cum);
  output_processor_result_free(&del);
}

/* --stream-interval 4, one token a step: the first output at once, then one per 4 tokens, and
 * the final one with the rest; DELTA and CUMULATIVE alike, the deltas adding up to the text. */
static void test_stream_interval_sends_one_output_per_n_tokens(void **state) {
  (void)state;
  for (int kind = 0; kind < 2; kind++) {
    struct llb_sampling_params sp;
    llb_sampling_params_init(&sp);
    sp.output_kind = kind ? LLB_OUTPUT_KIND_CUMULATIVE : LLB_OUTPUT_KIND_DELTA;
    struct output_processor *p;
    assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
    output_processor_set_stream_interval(p, 4);
    struct output_processor_request_info info = test_info("r1", &sp);
    assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
    int64_t n;
    int32_t *ids = test_byte_tokens(tok, "0123456789", &n); /* 10 tokens */
    struct output_processor_result res;
    output_processor_result_init(&res);
    for (int64_t pos = 0; pos < n; pos++) {
      enum output_processor_finish_reason why = pos + 1 == n ? OUTPUT_PROCESSOR_FINISH_REASON_LENGTH : OUTPUT_PROCESSOR_FINISH_REASON_NONE;
      assert_int_equal(test_step(p, "r1", ids, pos, 1, why, &res), LLB_STATUS_OK);
    }
    /* after tokens 1, 5, 9 and the final 10th */
    assert_int_equal(res.num_outputs, 4);
    static const char *const delta_text[4] = {"0", "1234", "5678", "9"};
    static const char *const cum_text[4] = {"0", "01234", "012345678", "0123456789"};
    for (int64_t i = 0; i < res.num_outputs; i++) {
      assert_int_equal(res.outputs[i].finished, i == 3);
      assert_string_equal(res.outputs[i].outputs[0].text, kind ? cum_text[i] : delta_text[i]);
    }
    assert_int_equal(res.outputs[3].outputs[0].finish_reason, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH);
    output_processor_result_free(&res);
    free(ids);
    output_processor_destroy(p);
  }
}

/* --stream-interval 4 holds nothing longer than OUTPUT_PROCESSOR_STREAM_HOLD_MAX_NS after the
 * request's last output (slow steps: every token goes out, so the api server, which takes a
 * stream silent past its grace for an orphan, hears it as at interval 1), nor the output the
 * engine hands off after (P/D: the decode side takes those tokens as delivered). */
static void test_stream_interval_holds_neither_slow_steps_nor_a_hand_off(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  output_processor_set_stream_interval(p, 4);
  struct output_processor_request_info a = test_info("slow", &sp), b = test_info("handed", &sp);
  assert_int_equal(output_processor_register(p, &a), LLB_STATUS_OK);
  assert_int_equal(output_processor_register(p, &b), LLB_STATUS_OK);
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, "012345", &n);
  struct output_processor_result res;
  output_processor_result_init(&res);
  for (int64_t pos = 0; pos < 3; pos++) { /* one token every 300 ms */
    struct output_processor_engine_output eo = {.request_id = "slow", .new_token_ids = ids + pos, .num_new_tokens = 1,
                                                .first_output_pos = pos, .stop_token_id = -1, .num_cached_tokens = -1};
    assert_int_equal(output_processor_process(p, &eo, 1000000000LL + pos * 300000000LL, &res), LLB_STATUS_OK);
  }
  assert_int_equal(res.num_outputs, 3);
  struct output_processor_engine_output first = {.request_id = "handed", .new_token_ids = ids, .num_new_tokens = 1,
                                                 .first_output_pos = 0, .stop_token_id = -1, .num_cached_tokens = -1};
  assert_int_equal(output_processor_process(p, &first, 2000000000LL, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 4);
  struct output_processor_engine_output last = {.request_id = "handed", .new_token_ids = ids + 1, .num_new_tokens = 2,
                                                .first_output_pos = 1, .stop_token_id = -1, .num_cached_tokens = -1,
                                                .handed_off = true};
  assert_int_equal(output_processor_process(p, &last, 2000000001LL, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 5);
  assert_string_equal(res.outputs[4].outputs[0].text, "12");
  /* without the hand-off, the same two tokens 1 ns later are held */
  struct output_processor_engine_output more = {.request_id = "handed", .new_token_ids = ids + 3, .num_new_tokens = 2,
                                                .first_output_pos = 3, .stop_token_id = -1, .num_cached_tokens = -1};
  assert_int_equal(output_processor_process(p, &more, 2000000002LL, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 5);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

static void test_final_only_yields_exactly_one_output(void **state) {
  (void)state;
  struct output_processor_result res;
  run_kind(LLB_OUTPUT_KIND_FINAL_ONLY, &res);
  assert_int_equal(res.num_outputs, 1);
  assert_true(res.outputs[0].finished);
  assert_string_equal(res.outputs[0].outputs[0].text, sample_text);
  const struct output_processor_metrics *m = &res.outputs[0].metrics;
  assert_int_equal(m->arrival_time_ns, 1000);
  assert_int_equal(m->first_token_time_ns, 2000);
  assert_true(m->last_token_time_ns > m->first_token_time_ns);
  assert_int_equal(m->finished_time_ns, m->last_token_time_ns);
  assert_int_equal(m->num_prompt_tokens, 3);
  assert_int_equal(m->num_generation_tokens, (int64_t)strlen(sample_text));
  output_processor_result_free(&res);
}

/* n = 3 children of one parent, interleaved; child 1 finishes first. */
static void run_parent(enum llb_output_kind kind, struct output_processor_result *res) {
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = kind;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  const char *ids[3] = {"0_par", "1_par", "2_par"};
  const char *texts[3] = {"alpha", "be", "gamma!"};
  for (int i = 0; i < 3; i++) {
    struct output_processor_request_info info = test_info(ids[i], &sp);
    info.parent_request_id = "par";
    info.child_index = i;
    info.num_children = 3;
    assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  }
  output_processor_result_init(res);
  int32_t *toks[3];
  int64_t lens[3];
  for (int i = 0; i < 3; i++) toks[i] = test_byte_tokens(tok, texts[i], &lens[i]);
  for (int64_t pos = 0; pos < 6; pos++) {
    for (int i = 0; i < 3; i++) {
      if (pos >= lens[i]) continue;
      enum output_processor_finish_reason why = pos + 1 == lens[i] ? OUTPUT_PROCESSOR_FINISH_REASON_STOP : OUTPUT_PROCESSOR_FINISH_REASON_NONE;
      assert_int_equal(test_step(p, ids[i], toks[i], pos, 1, why, res), LLB_STATUS_OK);
    }
  }
  assert_int_equal(output_processor_num_unfinished(p), 0);
  for (int i = 0; i < 3; i++) free(toks[i]);
  output_processor_destroy(p);
}

static void test_n_children_aggregate_into_one_parent(void **state) {
  (void)state;
  /* FINAL_ONLY: one output holding all three, by index. The engine STOP (EOS-like) leaves
   * the last token's text out, as vLLM does. */
  struct output_processor_result res;
  run_parent(LLB_OUTPUT_KIND_FINAL_ONLY, &res);
  assert_int_equal(res.num_outputs, 1);
  const struct output_processor_request_output *o = &res.outputs[0];
  assert_true(o->finished);
  assert_int_equal(o->num_outputs, 3);
  assert_string_equal(o->outputs[0].text, "alph");
  assert_string_equal(o->outputs[1].text, "b");
  assert_string_equal(o->outputs[2].text, "gamma");
  for (int i = 0; i < 3; i++) assert_int_equal(o->outputs[i].index, i);
  assert_int_equal(o->metrics.num_generation_tokens, 5 + 2 + 6);
  output_processor_result_free(&res);

  /* DELTA: each child's pieces as they come; only the very last output is finished. */
  run_parent(LLB_OUTPUT_KIND_DELTA, &res);
  char joined[3][32] = {"", "", ""};
  for (int64_t i = 0; i < res.num_outputs; i++) {
    assert_int_equal(res.outputs[i].num_outputs, 1);
    const struct output_processor_completion *c = &res.outputs[i].outputs[0];
    strcat(joined[c->index], c->text);
    assert_int_equal(res.outputs[i].finished, i == res.num_outputs - 1);
  }
  assert_int_equal(res.num_outputs, 5 + 2 + 6);
  assert_string_equal(joined[0], "alph");
  assert_string_equal(joined[1], "b");
  assert_string_equal(joined[2], "gamma");
  output_processor_result_free(&res);

  /* CUMULATIVE: a snapshot of every child so far; the last one has all three, finished. */
  run_parent(LLB_OUTPUT_KIND_CUMULATIVE, &res);
  const struct output_processor_request_output *last = &res.outputs[res.num_outputs - 1];
  assert_true(last->finished);
  assert_int_equal(last->num_outputs, 3);
  assert_string_equal(last->outputs[1].text, "b");
  assert_int_equal(last->outputs[1].finish_reason, OUTPUT_PROCESSOR_FINISH_REASON_STOP);
  for (int64_t i = 0; i + 1 < res.num_outputs; i++) assert_false(res.outputs[i].finished);
  output_processor_result_free(&res);
}

static void test_replayed_positions_are_not_sent_twice(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK); /* replayed request: no-op */
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, "abcdef", &n);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(test_step(p, "r1", ids, 0, 3, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  /* The scheduler restarts and replays from the prompt: positions 0..1 again, then 0..4. */
  assert_int_equal(test_step(p, "r1", ids, 0, 2, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(test_step(p, "r1", ids, 0, 5, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(test_step(p, "r1", ids, 5, 1, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 3);
  assert_string_equal(res.outputs[0].outputs[0].text, "abc");
  assert_string_equal(res.outputs[1].outputs[0].text, "de");
  assert_int_equal(res.outputs[1].outputs[0].num_token_ids, 2);
  assert_string_equal(res.outputs[2].outputs[0].text, "f");
  assert_true(res.outputs[2].finished);
  output_processor_result_clear(&res);
  /* A late output of the finished request is dropped silently, not reported unknown. */
  assert_int_equal(test_step(p, "r1", ids, 5, 1, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs + res.num_unknown, 0);
  /* An output for a request never seen is reported for rebuilding. */
  assert_int_equal(test_step(p, "other", ids, 2, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_unknown, 1);
  assert_string_equal(res.unknown_ids[0], "other");
  assert_int_equal(output_processor_num_duplicates(p), 5); /* 2 + 3 replayed positions dropped */
  /* a finished request has no history to give a restarted scheduler */
  const int32_t *hist = NULL;
  int64_t nh = -1;
  assert_int_equal(output_processor_history(p, "r1", &hist, &nh), LLB_STATUS_NOT_FOUND);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

static void test_restarted_processor_resumes_from_engine_history(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  sp.num_stop = 1;
  snprintf(sp.stop[0], sizeof sp.stop[0], "STOP");
  int64_t n;
  const char *text = "x\xc3\xa9yST|STOP";
  int32_t *ids = test_byte_tokens(tok, text, &n);
  /* The old processor streamed the first 6 tokens: "xéyST" minus the held-back "ST". */
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register_resume(p, &info, ids, 6), LLB_STATUS_OK);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(test_step(p, "r1", ids, 4, 4, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  /* what a restarted scheduler gets back for its replay: every token received, from 0 */
  const int32_t *hist = NULL;
  int64_t nh = 0;
  assert_int_equal(output_processor_history(p, "r1", &hist, &nh), LLB_STATUS_OK);
  assert_int_equal(nh, 8);
  for (int64_t i = 0; i < nh; i++) assert_int_equal(hist[i], ids[i]);
  assert_int_equal(output_processor_history(p, "nobody", &hist, &nh), LLB_STATUS_NOT_FOUND);
  assert_int_equal(res.num_outputs, 1);
  assert_string_equal(res.outputs[0].outputs[0].text, "ST|");
  assert_int_equal(res.outputs[0].outputs[0].num_token_ids, 2);
  assert_null(res.outputs[0].prompt_token_ids); /* the old processor sent it */
  assert_int_equal(test_step(p, "r1", ids, 8, (int32_t)n - 8, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_true(res.outputs[1].finished);
  assert_string_equal(res.outputs[1].outputs[0].text, "");
  assert_string_equal(res.outputs[1].outputs[0].stop_str, "STOP");
  assert_int_equal(res.num_abort, 1);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

/* Disaggregated prefill/decode: the prefill engine's processor delivers the first token and
 * forgets the request (no final output; its late outputs are dropped), the decode engine's
 * registers it with that token as delivered and continues: the client's deltas concatenate to
 * exactly the text of one processor, with one final output. */
static void test_a_handed_off_stream_continues_on_the_decode_side(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  int64_t n;
  const char *text = "x\xc3\xa9y and more";
  int32_t *ids = test_byte_tokens(tok, text, &n);
  struct output_processor *pp, *dp;
  assert_int_equal(output_processor_create(tok, &pp), LLB_STATUS_OK);
  assert_int_equal(output_processor_create(tok, &dp), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(output_processor_register(pp, &info), LLB_STATUS_OK);
  assert_int_equal(test_step(pp, "r1", ids, 0, 2, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(output_processor_hand_off(pp, "r1"), LLB_STATUS_OK);
  assert_int_equal(output_processor_num_unfinished(pp), 0);
  assert_int_equal(test_step(pp, "r1", ids, 2, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_unknown, 0); /* a late output of the prefill engine: dropped silently */
  assert_int_equal(output_processor_register_handed_off(dp, &info, ids, 2, &res), LLB_STATUS_OK);
  assert_int_equal(output_processor_register_handed_off(dp, &info, ids, 2, &res), LLB_STATUS_OK); /* replayed */
  assert_int_equal(test_step(dp, "r1", ids, 2, 3, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(test_step(dp, "r1", ids, 5, (int32_t)n - 5, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, &res),
                   LLB_STATUS_OK);
  char all[64] = "";
  int finished = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < res.num_outputs; i++) {
    strcat(all, res.outputs[i].outputs[0].text);
    tokens += res.outputs[i].outputs[0].num_token_ids;
    finished += res.outputs[i].finished;
  }
  assert_string_equal(all, text);
  assert_int_equal(tokens, n);
  assert_int_equal(finished, 1);
  assert_true(res.outputs[res.num_outputs - 1].finished);
  assert_int_equal(res.num_abort, 0);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(pp);
  output_processor_destroy(dp);
}

/* A stop string in the first token's text: the prefill side ends the client's stream (STOP);
 * the decode side, registering the same token, stops the engine (an abort id) and sends
 * nothing, so the client sees exactly one end. */
static void test_a_stop_string_in_the_handed_off_tokens_ends_the_stream_once(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  sp.num_stop = 1;
  snprintf(sp.stop[0], sizeof sp.stop[0], "y");
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, "xyz", &n);
  struct output_processor *pp, *dp;
  assert_int_equal(output_processor_create(tok, &pp), LLB_STATUS_OK);
  assert_int_equal(output_processor_create(tok, &dp), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(output_processor_register(pp, &info), LLB_STATUS_OK);
  assert_int_equal(test_step(pp, "r1", ids, 0, 2, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 1);
  assert_true(res.outputs[0].finished);
  assert_string_equal(res.outputs[0].outputs[0].text, "x");
  assert_int_equal(output_processor_hand_off(pp, "r1"), LLB_STATUS_NOT_FOUND); /* finished already */
  assert_int_equal(output_processor_register_handed_off(dp, &info, ids, 2, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 1);
  assert_int_equal(res.num_abort, 2); /* the prefill engine's and the decode engine's */
  assert_int_equal(output_processor_num_unfinished(dp), 0);
  assert_int_equal(test_step(dp, "r1", ids, 2, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 1);
  assert_int_equal(res.num_unknown, 0);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(pp);
  output_processor_destroy(dp);
}

/* After a restart the scheduler sends a lost request whole (resync): the request is
 * registered from it, and its first completion output says `resync` (it repeats the text from
 * the start, which the client trims); later outputs are plain deltas. */
static void test_request_rebuilt_from_a_resync_marks_its_first_output(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  info.resync = true;
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, "abcdef", &n);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(test_step(p, "r1", ids, 0, 4, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(test_step(p, "r1", ids, 4, 2, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 2);
  assert_string_equal(res.outputs[0].outputs[0].text, "abcd");
  assert_true(res.outputs[0].outputs[0].resync);
  assert_string_equal(res.outputs[1].outputs[0].text, "ef");
  assert_false(res.outputs[1].outputs[0].resync);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

static void test_logprobs_carry_decoded_text_and_cumulative_sum(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.logprobs = 2;
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  int32_t a = test_byte_token(tok, 'a'), b = test_byte_token(tok, 'b'), c3 = test_byte_token(tok, 0xC3);
  int32_t ids[2] = {a, c3};
  struct output_processor_new_logprobs lps[2] = {
      {.token_id = a, .logprob = -0.25f, .num_top = 3, .top = {{a, -0.25f}, {b, -1.5f}, {c3, -3.0f}}},
      {.token_id = c3, .logprob = -2.0f, .num_top = 2, .top = {{a, -0.5f}, {b, -1.0f}}}};
  struct output_processor_engine_output eo = {.request_id = "r1", .new_token_ids = ids, .num_new_tokens = 2,
                                     .first_output_pos = 0, .new_logprobs = lps, .stop_token_id = -1,
                                     .num_cached_tokens = 2, .scheduled_time_ns = 1500};
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(output_processor_process(p, &eo, 3000, &res), LLB_STATUS_OK);
  const struct output_processor_completion *c = &res.outputs[0].outputs[0];
  assert_true(c->has_logprobs);
  assert_int_equal(c->num_logprobs, 2);
  assert_true(fabs(c->cumulative_logprob - (-2.25)) < 1e-9);
  assert_int_equal(c->logprobs[0].sampled.rank, 1);
  assert_int_equal(c->logprobs[0].num_top, 2); /* trimmed to the request's logprobs */
  assert_string_equal(c->logprobs[0].top[1].text, "b");
  assert_int_equal(c->logprobs[0].top[1].rank, 2);
  assert_int_equal(c->logprobs[1].sampled.rank, -1); /* outside the top 2 */
  assert_int_equal(c->logprobs[1].sampled.num_bytes, 1);
  assert_int_equal((uint8_t)c->logprobs[1].sampled.bytes[0], 0xC3);
  assert_string_equal(c->logprobs[1].sampled.text, "\xef\xbf\xbd"); /* a lone lead byte */
  assert_string_equal(c->text, "a");
  assert_int_equal(res.outputs[0].metrics.num_cached_tokens, 2);
  assert_int_equal(res.outputs[0].metrics.first_scheduled_time_ns, 1500);
  assert_int_equal(res.outputs[0].metrics.first_token_time_ns, 3000);
  output_processor_result_free(&res);
  output_processor_destroy(p);
}

static void test_engine_failure_keeps_its_status_for_the_client(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("q1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  struct output_processor_result res;
  output_processor_result_init(&res);
  /* the scheduler refused it (queue full): the client must see QUEUE_FULL (429), not INTERNAL */
  assert_int_equal(output_processor_fail(p, "q1", LLB_STATUS_QUEUE_FULL, "1 requests are already waiting", 10, &res),
                   LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 1);
  assert_true(res.outputs[0].finished);
  assert_int_equal(res.outputs[0].error_code, LLB_STATUS_QUEUE_FULL);
  assert_string_equal(res.outputs[0].error, "1 requests are already waiting");
  output_processor_result_free(&res);
  output_processor_destroy(p);
}

static void test_abort_and_lost_tokens_finish_with_a_reason(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  sp.num_stop = 1;
  snprintf(sp.stop[0], sizeof sp.stop[0], "zz");
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  info = test_info("r2", &sp);
  info.external_request_id = "client-2";
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, "hiz", &n);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(test_step(p, "r1", ids, 0, 3, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_string_equal(res.outputs[0].outputs[0].text, "hi"); /* "z" held back */
  /* Abort releases the held-back text. */
  assert_int_equal(output_processor_abort(p, "r1", 5000, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 2);
  assert_true(res.outputs[1].finished);
  assert_string_equal(res.outputs[1].outputs[0].text, "z");
  assert_int_equal(res.outputs[1].outputs[0].finish_reason, OUTPUT_PROCESSOR_FINISH_REASON_ABORT);
  assert_int_equal(output_processor_abort(p, "r1", 5000, &res), LLB_STATUS_NOT_FOUND);
  /* r2 skips positions 0..1 while the engine still runs it: to be rebuilt (resync), nothing
   * is sent meanwhile. */
  assert_int_equal(test_step(p, "r2", ids, 2, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 2);
  assert_int_equal(res.num_resync, 1);
  assert_string_equal(res.resync_ids[0], "r2");
  /* Its last output skips them too: tokens were lost for good, the client gets an error. */
  assert_int_equal(test_step(p, "r2", ids, 2, 1, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, &res), LLB_STATUS_MALFORMED);
  assert_int_equal(res.num_outputs, 3);
  assert_true(res.outputs[2].finished);
  assert_int_equal(res.outputs[2].outputs[0].finish_reason, OUTPUT_PROCESSOR_FINISH_REASON_ERROR);
  assert_non_null(strstr(res.outputs[2].error, "expected position 0, got 2"));
  assert_int_equal(res.num_abort, 0); /* the engine had finished it */
  assert_int_equal(output_processor_num_unfinished(p), 0);
  assert_string_equal(output_processor_finish_reason_name(OUTPUT_PROCESSOR_FINISH_REASON_LENGTH), "length");
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

/* Several tokens in one engine output (speculative decoding): a stop string completed by a
 * token in the middle ends the request there; the tokens after it are dropped. */
static void test_stop_string_inside_several_new_tokens_drops_the_rest(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  sp.num_stop = 1;
  snprintf(sp.stop[0], sizeof sp.stop[0], "STOP");
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, "ab|STOPxyz", &n);
  struct output_processor_result res;
  output_processor_result_init(&res);
  assert_int_equal(test_step(p, "r1", ids, 0, (int32_t)n, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
  assert_int_equal(res.num_outputs, 1);
  assert_true(res.outputs[0].finished);
  assert_string_equal(res.outputs[0].outputs[0].text, "ab|");
  assert_int_equal(res.outputs[0].outputs[0].num_token_ids, 7); /* up to the P that completes STOP */
  assert_string_equal(res.outputs[0].outputs[0].stop_str, "STOP");
  assert_int_equal(res.num_abort, 1); /* the engine still runs it */
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

int main(void) {
  tok = test_load_tokenizer();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_delta_outputs_concatenate_to_the_cumulative_last),
      cmocka_unit_test(test_stop_string_inside_several_new_tokens_drops_the_rest),
      cmocka_unit_test(test_final_only_yields_exactly_one_output),
      cmocka_unit_test(test_stream_interval_sends_one_output_per_n_tokens),
      cmocka_unit_test(test_stream_interval_holds_neither_slow_steps_nor_a_hand_off),
      cmocka_unit_test(test_n_children_aggregate_into_one_parent),
      cmocka_unit_test(test_replayed_positions_are_not_sent_twice),
      cmocka_unit_test(test_restarted_processor_resumes_from_engine_history),
      cmocka_unit_test(test_a_handed_off_stream_continues_on_the_decode_side),
      cmocka_unit_test(test_a_stop_string_in_the_handed_off_tokens_ends_the_stream_once),
      cmocka_unit_test(test_request_rebuilt_from_a_resync_marks_its_first_output),
      cmocka_unit_test(test_logprobs_carry_decoded_text_and_cumulative_sum),
      cmocka_unit_test(test_abort_and_lost_tokens_finish_with_a_reason),
      cmocka_unit_test(test_engine_failure_keeps_its_status_for_the_client),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tokenizer_destroy(tok);
  return rc;
}
