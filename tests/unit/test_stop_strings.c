/* Stop strings: matching across token boundaries, hold-back of possible starts, and the
 * output processor's STOP finish (excluded / included, earliest of several, first token). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/output_processor/detokenizer.h"
#include "actors/output_processor/stop_strings.h"
#include "test_output_common.h"

static struct tokenizer *tok;

static void set_stops(struct llb_sampling_params *sp, const char *const *stops, int n) {
  sp->num_stop = n;
  for (int i = 0; i < n; i++) snprintf(sp->stop[i], sizeof sp->stop[i], "%s", stops[i]);
}

static void test_find_matches_only_text_reaching_new_bytes(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  set_stops(&sp, (const char *const[]){"END"}, 1);
  struct stop_match m;
  const char *t = "xxENDyyEN";
  /* Everything new: found at 2. */
  assert_true(stop_strings_find(t, 9, 0, sp.stop, 1, &m));
  assert_int_equal(m.start, 2);
  assert_int_equal(m.len, 3);
  /* Only "EN" at the end is new and the earlier match ends before it: nothing. */
  assert_false(stop_strings_find(t, 9, 7, sp.stop, 1, &m));
  /* A match that straddles the old/new boundary is found. */
  assert_true(stop_strings_find("abcEND", 6, 5, sp.stop, 1, &m));
  assert_int_equal(m.start, 3);
}

static void test_find_prefers_the_earliest_of_several(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  set_stops(&sp, (const char *const[]){"world", "lo w", "o"}, 3);
  struct stop_match m;
  /* "world" at 6, "lo w" at 3, "o" at 4: list order would pick "world". */
  assert_true(stop_strings_find("hello world", 11, 0, sp.stop, 3, &m));
  assert_int_equal(m.stop_index, 1);
  assert_int_equal(m.start, 3);
  assert_int_equal(m.len, 4);
  /* Same start: the lower index wins. */
  set_stops(&sp, (const char *const[]){"lo", "lo w"}, 2);
  assert_true(stop_strings_find("hello world", 11, 0, sp.stop, 2, &m));
  assert_int_equal(m.stop_index, 0);
}

static void test_holdback_is_longest_suffix_that_starts_a_stop(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  set_stops(&sp, (const char *const[]){"</answer>", "##"}, 2);
  assert_int_equal(stop_strings_holdback("text </ans", 10, sp.stop, 2), 5);
  assert_int_equal(stop_strings_holdback("text #", 6, sp.stop, 2), 1);
  assert_int_equal(stop_strings_holdback("text <x", 7, sp.stop, 2), 0);
  assert_int_equal(stop_strings_holdback("", 0, sp.stop, 2), 0);
}

/* Runs `text` as byte tokens through a processor with `stops`, one token per step, DELTA
 * kind; returns the concatenated delta text and the final completion's facts. */
struct run {
  char text[512];
  enum output_processor_finish_reason finish;
  char stop_str[256];
  int64_t num_aborts, num_outputs, num_tokens;
  bool finished;
};

static void run_stops(const char *text, const char *const *stops, int n, bool include,
                      int32_t min_tokens, struct run *out) {
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  set_stops(&sp, stops, n);
  sp.include_stop_str_in_output = include;
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  sp.min_tokens = min_tokens;
  struct output_processor *p;
  assert_int_equal(output_processor_create(tok, &p), LLB_STATUS_OK);
  struct output_processor_request_info info = test_info("r1", &sp);
  assert_int_equal(output_processor_register(p, &info), LLB_STATUS_OK);
  int64_t num;
  int32_t *ids = test_byte_tokens(tok, text, &num);
  struct output_processor_result res;
  output_processor_result_init(&res);
  memset(out, 0, sizeof *out);
  for (int64_t i = 0; i < num && !out->finished; i++) {
    assert_int_equal(test_step(p, "r1", ids, i, 1, OUTPUT_PROCESSOR_FINISH_REASON_NONE, &res), LLB_STATUS_OK);
    for (int64_t j = 0; j < res.num_outputs; j++) {
      const struct output_processor_request_output *o = &res.outputs[j];
      assert_int_equal(o->num_outputs, 1);
      assert_true(detok_utf8_valid(o->outputs[0].text, o->outputs[0].text_len));
      strcat(out->text, o->outputs[0].text);
      out->num_tokens += o->outputs[0].num_token_ids;
      out->finished = o->finished;
      out->finish = o->outputs[0].finish_reason;
      snprintf(out->stop_str, sizeof out->stop_str, "%s", o->outputs[0].stop_str);
    }
    out->num_outputs += res.num_outputs;
    out->num_aborts += res.num_abort;
    if (res.num_abort) assert_string_equal(res.abort_ids[0], "r1");
    output_processor_result_clear(&res);
  }
  if (!out->finished) {
    assert_int_equal(test_step(p, "r1", ids, num, 0, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH, &res), LLB_STATUS_OK);
    assert_int_equal(res.num_outputs, 1);
    strcat(out->text, res.outputs[0].outputs[0].text);
    out->finished = res.outputs[0].finished;
    out->finish = res.outputs[0].outputs[0].finish_reason;
  }
  assert_int_equal(output_processor_num_unfinished(p), 0);
  output_processor_result_free(&res);
  free(ids);
  output_processor_destroy(p);
}

/* The hold-back as the longest suffix that is a proper prefix of a stop, computed in O(stop)
 * (a KMP automaton; issue 38: every suffix length compared was O(stop^2) per streamed piece),
 * against the plain definition on texts and stops of a two-letter alphabet (where borders are
 * many), and on the costly case: 16 stops of 255 bytes. */
static void test_holdback_agrees_with_its_definition(void **state) {
  (void)state;
  static char stops[LLB_MAX_STOP_STRINGS][LLB_MAX_STOP_STRING_BYTES + 1];
  char text[64];
  uint64_t x = 12345;
  for (int round = 0; round < 4000; round++) {
    const int32_t n = 1 + (int32_t)(x % 3);
    for (int32_t k = 0; k < n; k++) {
      const size_t l = 1 + (x >> (8 + k)) % 12;
      for (size_t j = 0; j < l; j++) stops[k][j] = "ab"[(x >> (j % 60)) & 1], x = x * 6364136223846793005ull + 1;
      stops[k][l] = '\0';
    }
    const size_t len = (size_t)(x >> 33) % sizeof text;
    for (size_t j = 0; j < len; j++) text[j] = "ab"[(x >> (j % 60)) & 1], x = x * 6364136223846793005ull + 1;
    size_t want = 0;
    for (int32_t k = 0; k < n; k++)
      for (size_t p = strlen(stops[k]) - 1; p > want; p--)
        if (p <= len && memcmp(text + len - p, stops[k], p) == 0) want = p;
    assert_int_equal(stop_strings_holdback(text, len, (const char(*)[LLB_MAX_STOP_STRING_BYTES + 1])stops, n), want);
  }
  for (int32_t k = 0; k < LLB_MAX_STOP_STRINGS; k++) {
    memset(stops[k], 'a', LLB_MAX_STOP_STRING_BYTES);
    stops[k][LLB_MAX_STOP_STRING_BYTES - 1] = 'b';
    stops[k][LLB_MAX_STOP_STRING_BYTES] = '\0';
  }
  char long_text[4096];
  memset(long_text, 'a', sizeof long_text);
  assert_int_equal(stop_strings_holdback(long_text, sizeof long_text, (const char(*)[LLB_MAX_STOP_STRING_BYTES + 1])stops,
                                         LLB_MAX_STOP_STRINGS),
                   LLB_MAX_STOP_STRING_BYTES - 1);
}

static void test_stop_string_over_three_tokens_is_cut_and_excluded(void **state) {
  (void)state;
  struct run r;
  run_stops("The answer</a>ignored", (const char *const[]){"</a>"}, 1, false, 0, &r);
  assert_string_equal(r.text, "The answer");
  assert_int_equal(r.finish, OUTPUT_PROCESSOR_FINISH_REASON_STOP);
  assert_string_equal(r.stop_str, "</a>");
  assert_int_equal(r.num_aborts, 1); /* the engine still runs it: abort there */
  assert_int_equal(r.num_tokens, 14);  /* every token the engine made is reported */
}

static void test_stop_string_included_when_asked(void **state) {
  (void)state;
  struct run r;
  run_stops("The answer</a>ignored", (const char *const[]){"</a>"}, 1, true, 0, &r);
  assert_string_equal(r.text, "The answer</a>");
  assert_int_equal(r.finish, OUTPUT_PROCESSOR_FINISH_REASON_STOP);
}

static void test_earliest_of_several_stop_strings_wins(void **state) {
  (void)state;
  struct run r;
  run_stops("one two three", (const char *const[]){"three", "two", "o t"}, 3, false, 0, &r);
  /* "two" (bytes 4-6) completes before "o t" (6-8) and "three"; the text stops before it. */
  assert_string_equal(r.text, "one ");
  assert_string_equal(r.stop_str, "two");
}

static void test_stop_at_the_very_first_token(void **state) {
  (void)state;
  struct run r;
  run_stops("Xrest", (const char *const[]){"X"}, 1, false, 0, &r);
  assert_string_equal(r.text, "");
  assert_int_equal(r.finish, OUTPUT_PROCESSOR_FINISH_REASON_STOP);
  assert_int_equal(r.num_outputs, 1);
}

static void test_partial_stop_is_held_back_then_released(void **state) {
  (void)state;
  struct run r;
  /* "</" looks like the start of "</a>" and is held back, then released as plain text. */
  run_stops("x</b> done", (const char *const[]){"</a>"}, 1, false, 0, &r);
  assert_string_equal(r.text, "x</b> done");
  assert_int_equal(r.finish, OUTPUT_PROCESSOR_FINISH_REASON_LENGTH);
  assert_int_equal(r.num_aborts, 0);
}

static void test_stop_strings_ignored_within_min_tokens(void **state) {
  (void)state;
  struct run r;
  run_stops("ab;cd;ef", (const char *const[]){";"}, 1, false, 4, &r);
  assert_string_equal(r.text, "ab;cd");
}

static void test_stop_after_multibyte_char_never_splits_it(void **state) {
  (void)state;
  struct run r;
  /* The stop string starts with the same lead byte as "é": held-back text stays whole chars. */
  run_stops("caf\xc3\xa9\xc3\xa8", (const char *const[]){"\xc3\xa8"}, 1, false, 0, &r);
  assert_string_equal(r.text, "caf\xc3\xa9");
}

int main(void) {
  tok = test_load_tokenizer();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_find_matches_only_text_reaching_new_bytes),
      cmocka_unit_test(test_find_prefers_the_earliest_of_several),
      cmocka_unit_test(test_holdback_agrees_with_its_definition),
      cmocka_unit_test(test_holdback_is_longest_suffix_that_starts_a_stop),
      cmocka_unit_test(test_stop_string_over_three_tokens_is_cut_and_excluded),
      cmocka_unit_test(test_stop_string_included_when_asked),
      cmocka_unit_test(test_earliest_of_several_stop_strings_wins),
      cmocka_unit_test(test_stop_at_the_very_first_token),
      cmocka_unit_test(test_partial_stop_is_held_back_then_released),
      cmocka_unit_test(test_stop_strings_ignored_within_min_tokens),
      cmocka_unit_test(test_stop_after_multibyte_char_never_splits_it),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tokenizer_destroy(tok);
  return rc;
}
