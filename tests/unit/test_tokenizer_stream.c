/* Streaming detokenizer: complete UTF-8 only, held-back partial sequences, U+FFFD for the
 * impossible, concatenation == whole decode. Arg [1]: directory of the ggml-vocab files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

static const char *g_dir;

static struct tokenizer *load_vocab(const char *name, struct gguf_file **gf) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", g_dir, name);
  assert_int_equal(gguf_open(path, gf), LLB_STATUS_OK);
  struct tokenizer *t = NULL;
  assert_int_equal(tokenizer_load(*gf, &t), LLB_STATUS_OK);
  return t;
}

/* True if s[0..n) is complete, valid UTF-8. */
static bool valid_utf8(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t l = s[i] < 0x80 ? 1 : s[i] >= 0xF0 ? 4 : s[i] >= 0xE0 ? 3 : s[i] >= 0xC2 ? 2 : 0;
    if (!l || i + l > n) return false;
    for (size_t k = 1; k < l; k++)
      if ((s[i + k] & 0xC0) != 0x80) return false;
    i += l;
  }
  return true;
}

static void stream_round_trip(const char *vocab, const char *text, bool strip) {
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab(vocab, &gf);
  int32_t *ids;
  int64_t n;
  assert_int_equal(tokenizer_encode(t, text, strlen(text), false, false, &ids, &n), LLB_STATUS_OK);
  char *whole;
  assert_int_equal(tokenizer_decode(t, ids, n, false, &whole, NULL), LLB_STATUS_OK);
  struct detok_stream s;
  assert_int_equal(detok_stream_init(&s, t, false, strip), LLB_STATUS_OK);
  char acc[1024];
  size_t acc_len = 0, n_held = 0;
  for (int64_t i = 0; i < n; i++) {
    const char *out;
    size_t len;
    assert_int_equal(detok_stream_push(&s, ids[i], &out, &len), LLB_STATUS_OK);
    assert_true(valid_utf8((const unsigned char *)out, len));
    if (len == 0) n_held++;
    memcpy(acc + acc_len, out, len);
    acc_len += len;
  }
  const char *out;
  size_t len;
  detok_stream_flush(&s, &out, &len);
  assert_int_equal(len, 0);
  acc[acc_len] = '\0';
  assert_string_equal(acc, whole);
  assert_string_equal(acc, text);
  assert_true(n_held > 0); /* some character really was split over tokens */
  detok_stream_free(&s);
  free(whole);
  free(ids);
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_spm_byte_fallback_emoji_and_cjk_come_out_whole(void **state) {
  (void)state;
  stream_round_trip("llama-spm", "Hi \xF0\x9F\xA6\x99 \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F \xE1\x9E\x80\xE1\x9E\xB6", true);
}

static void test_bpe_split_characters_come_out_whole(void **state) {
  (void)state;
  stream_round_trip("gpt-2", " this is \xF0\x9F\xA6\x99.cpp \xE4\xBD\xA0\xE5\xA5\xBD \xE2\x9C\x85", false);
}

static void test_spm_leading_space_kept_after_a_prompt(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("llama-spm", &gf);
  int32_t id = tokenizer_find_token(t, "\xE2\x96\x81Hello", 8);
  assert_true(id >= 0);
  struct detok_stream s;
  const char *out;
  size_t len;
  assert_int_equal(detok_stream_init(&s, t, false, false), LLB_STATUS_OK);
  assert_int_equal(detok_stream_push(&s, id, &out, &len), LLB_STATUS_OK);
  assert_int_equal(len, 6);
  assert_memory_equal(out, " Hello", 6);
  detok_stream_free(&s);
  assert_int_equal(detok_stream_init(&s, t, false, true), LLB_STATUS_OK);
  assert_int_equal(detok_stream_push(&s, 1, &out, &len), LLB_STATUS_OK); /* hidden BOS */
  assert_int_equal(len, 0);
  assert_int_equal(detok_stream_push(&s, id, &out, &len), LLB_STATUS_OK);
  assert_int_equal(len, 5);
  assert_memory_equal(out, "Hello", 5);
  assert_int_equal(detok_stream_push(&s, id, &out, &len), LLB_STATUS_OK);
  assert_int_equal(len, 6);
  assert_int_equal(detok_stream_push(&s, 32000, &out, &len), LLB_STATUS_INVALID_ARGUMENT);
  detok_stream_free(&s);
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_impossible_bytes_become_replacement_characters(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("llama-spm", &gf);
  int32_t f0 = tokenizer_find_token(t, "<0xF0>", 6), x9f = tokenizer_find_token(t, "<0x9F>", 6);
  int32_t c3 = tokenizer_find_token(t, "<0xC3>", 6), a = tokenizer_find_token(t, "A", 1);
  assert_true(f0 >= 0 && x9f >= 0 && c3 >= 0 && a >= 0);
  struct detok_stream s;
  const char *out;
  size_t len;
  assert_int_equal(detok_stream_init(&s, t, false, false), LLB_STATUS_OK);
  assert_int_equal(detok_stream_push(&s, c3, &out, &len), LLB_STATUS_OK);
  assert_int_equal(len, 0);
  assert_int_equal(detok_stream_push(&s, a, &out, &len), LLB_STATUS_OK);
  assert_int_equal(len, 4);
  assert_memory_equal(out, "\xEF\xBF\xBD" "A", 4);
  assert_int_equal(detok_stream_push(&s, f0, &out, &len), LLB_STATUS_OK);
  assert_int_equal(detok_stream_push(&s, x9f, &out, &len), LLB_STATUS_OK);
  assert_int_equal(len, 0);
  detok_stream_flush(&s, &out, &len); /* F0 9F is one maximal invalid subpart */
  assert_int_equal(len, 3);
  assert_memory_equal(out, "\xEF\xBF\xBD", 3);
  detok_stream_free(&s);
  detok_stream_free(&s);
  tokenizer_destroy(t);
  gguf_close(gf);
}

int main(int argc, char **argv) {
  g_dir = argc > 1 ? argv[1] : LLB_TESTDATA_DIR "/tokenizer";
  char probe[1024];
  snprintf(probe, sizeof(probe), "%s/ggml-vocab-gpt-2.gguf", g_dir);
  if (access(probe, R_OK) != 0) {
    printf("SKIP: tokenizer test vectors not found under %s\n", g_dir);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spm_byte_fallback_emoji_and_cjk_come_out_whole),
      cmocka_unit_test(test_bpe_split_characters_come_out_whole),
      cmocka_unit_test(test_spm_leading_space_kept_after_a_prompt),
      cmocka_unit_test(test_impossible_bytes_become_replacement_characters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
