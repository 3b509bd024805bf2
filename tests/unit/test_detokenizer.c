/* Incremental detokenizer: streamed text never splits a UTF-8 character and its pieces add
 * up to the whole text (GPT-2 byte-level BPE vocab). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "actors/output_processor/detokenizer.h"
#include "test_output_common.h"

static struct tokenizer *tok;

/* Feeds ids one by one; after each, the committed text must be valid UTF-8 and extend the
 * previous text; returns the concatenation of the deltas (caller frees). */
static char *stream(const int32_t *ids, int64_t n, bool skip_special) {
  struct detok d;
  assert_int_equal(detok_init(&d, tok, skip_special), LLB_STATUS_OK);
  char *joined = calloc(1, 4096);
  size_t sent = 0;
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(detok_append_token(&d, ids[i]), LLB_STATUS_OK);
    assert_true(d.len >= sent);
    assert_true(detok_utf8_valid(d.text, d.len));
    assert_true(detok_utf8_valid(d.text + sent, d.len - sent)); /* the delta itself */
    strncat(joined, d.text + sent, d.len - sent);
    sent = d.len;
  }
  assert_int_equal(detok_flush(&d), LLB_STATUS_OK);
  strncat(joined, d.text + sent, d.len - sent);
  assert_string_equal(joined, d.text);
  detok_free(&d);
  return joined;
}

static void test_multibyte_chars_split_over_byte_tokens_stream_whole(void **state) {
  (void)state;
  const char *text = "caf\xc3\xa9 \xf0\x9f\x8e\x89 \xe4\xb8\x96\xe7\x95\x8c!"; /* café 🎉 世界! */
  int64_t n;
  int32_t *ids = test_byte_tokens(tok, text, &n);
  for (int64_t i = 0; i < n; i++) assert_true(ids[i] >= 0);
  /* The character is withheld until its last byte arrives. */
  struct detok d;
  assert_int_equal(detok_init(&d, tok, true), LLB_STATUS_OK);
  for (int64_t i = 0; i < 4; i++) assert_int_equal(detok_append_token(&d, ids[i]), LLB_STATUS_OK);
  assert_int_equal(d.len, 3); /* "caf" + the 0xC3 of "é" pending */
  assert_int_equal(detok_append_token(&d, ids[4]), LLB_STATUS_OK);
  assert_string_equal(d.text, "caf\xc3\xa9");
  detok_free(&d);
  char *joined = stream(ids, n, true);
  assert_string_equal(joined, text);
  free(joined);
  free(ids);
}

static void test_encoded_text_round_trips_through_deltas(void **state) {
  (void)state;
  const char *texts[] = {"h\xc3\xa9llo w\xc3\xb6rld", " this is \xf0\x9f\xa6\x99.cpp",
                         "\xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x8e\x89\xf0\x9f\x8e\x89",
                         "tabs\tand\nnewlines  "};
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
    int64_t n;
    int32_t *ids = test_encode(tok, texts[i], &n);
    assert_non_null(ids);
    char *joined = stream(ids, n, true);
    /* The pieces, byte for byte: the text itself (GPT-2), or with the space an SPM vocab
     * puts in front (generated tokens follow a prompt, so that space is real). */
    char pieces[512];
    size_t len = 0;
    for (int64_t j = 0; j < n; j++) {
      len += (size_t)tokenizer_token_to_piece(tok, ids[j], false, pieces + len, sizeof pieces - len);
    }
    pieces[len] = '\0';
    assert_string_equal(joined, pieces);
    assert_true(len >= strlen(texts[i]));
    assert_string_equal(joined + (len - strlen(texts[i])), texts[i]);
    free(joined);
    free(ids);
  }
}

static void test_invalid_and_truncated_bytes_become_replacement_chars(void **state) {
  (void)state;
  struct detok d;
  assert_int_equal(detok_init(&d, tok, true), LLB_STATUS_OK);
  /* 0xFF never starts a sequence; 0x80 alone is a stray continuation; "\xe4\xb8" then 'x'
   * is a truncated sequence; a final "\xf0\x9f" is still pending at the end. */
  const char bad[] = "a\xff" "b\x80" "c\xe4\xb8" "x\xf0\x9f";
  assert_int_equal(detok_append_bytes(&d, bad, sizeof bad - 1), LLB_STATUS_OK);
  assert_string_equal(d.text, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd" "x");
  assert_int_equal(detok_flush(&d), LLB_STATUS_OK);
  assert_string_equal(d.text, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd" "x\xef\xbf\xbd");
  assert_true(detok_utf8_valid(d.text, d.len));
  detok_free(&d);
  /* A NUL byte (byte-level BPE's token for 0x00, "Ā") is not text either: the RequestOutput
   * text is a C string on the wire, and one NUL made the api server refuse the whole output. */
  assert_int_equal(detok_init(&d, tok, true), LLB_STATUS_OK);
  assert_int_equal(detok_append_bytes(&d, "a\0b", 3), LLB_STATUS_OK);
  assert_int_equal(d.len, 5);
  assert_memory_equal(d.text, "a\xef\xbf\xbd" "b", 5);
  detok_free(&d);
  char clean[16];
  assert_int_equal(detok_utf8_sanitize("x\0", 2, clean), 4);
  assert_string_equal(clean, "x\xef\xbf\xbd");
  /* Overlong and surrogate encodings are rejected too. */
  assert_false(detok_utf8_valid("\xc0\xaf", 2));
  assert_false(detok_utf8_valid("\xed\xa0\x80", 3));
  assert_true(detok_utf8_valid("\xef\xbf\xbd\xf4\x8f\xbf\xbf", 7));
}

static void test_skip_special_tokens_drops_control_token_text(void **state) {
  (void)state;
  int32_t eos = tokenizer_eos_id(tok);
  assert_true(eos >= 0);
  int32_t ids[3] = {test_byte_token(tok, 'o'), eos, test_byte_token(tok, 'k')};
  char *skipped = stream(ids, 3, true);
  assert_string_equal(skipped, "ok");
  free(skipped);
  char piece[64];
  int64_t n = tokenizer_token_to_piece(tok, eos, true, piece, sizeof piece);
  assert_true(n > 0 && n < (int64_t)sizeof piece);
  char want[80];
  snprintf(want, sizeof want, "o%.*sk", (int)n, piece);
  char *rendered = stream(ids, 3, false);
  assert_string_equal(rendered, want);
  free(rendered);
}

static void test_bad_token_id_is_an_error_and_leaves_text(void **state) {
  (void)state;
  struct detok d;
  assert_int_equal(detok_init(&d, tok, true), LLB_STATUS_OK);
  assert_int_equal(detok_append_token(&d, test_byte_token(tok, 'a')), LLB_STATUS_OK);
  assert_int_equal(detok_append_token(&d, tokenizer_vocab_size(tok) + 5), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(d.text, "a");
  detok_free(&d);
}

static void test_utf8_floor_and_sanitize(void **state) {
  (void)state;
  const char *s = "a\xe4\xb8\x96z"; /* a 世 z */
  assert_int_equal(detok_utf8_floor(s, 1), 1);
  assert_int_equal(detok_utf8_floor(s, 2), 1);
  assert_int_equal(detok_utf8_floor(s, 3), 1);
  assert_int_equal(detok_utf8_floor(s, 4), 4);
  char out[16];
  assert_int_equal(detok_utf8_sanitize("\xe4\xb8", 2, out), 3);
  assert_string_equal(out, "\xef\xbf\xbd");
  assert_int_equal(detok_utf8_sanitize("ok", 2, out), 2);
  assert_string_equal(out, "ok");
}

int main(void) {
  tok = test_load_tokenizer();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_multibyte_chars_split_over_byte_tokens_stream_whole),
      cmocka_unit_test(test_encoded_text_round_trips_through_deltas),
      cmocka_unit_test(test_invalid_and_truncated_bytes_become_replacement_chars),
      cmocka_unit_test(test_skip_special_tokens_drops_control_token_text),
      cmocka_unit_test(test_bad_token_id_is_an_error_and_leaves_text),
      cmocka_unit_test(test_utf8_floor_and_sanitize),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tokenizer_destroy(tok);
  return rc;
}
