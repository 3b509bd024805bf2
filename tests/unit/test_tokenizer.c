/* Tokenizer against llama.cpp's vocab test vectors (each produced from the model's HF
 * tokenizer) and the default model. Args: [1] directory of ggml-vocab-*.gguf{,.inp,.out},
 * [2] path of the default model (tests that need it skip when it is absent). */
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
static const char *g_model;

static char *read_file(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(fp);
  if (buf) buf[n] = '\0', *len = (size_t)n;
  return buf;
}

static struct tokenizer *load_vocab(const char *name, struct gguf_file **gf) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", g_dir, name);
  assert_int_equal(gguf_open(path, gf), LLB_STATUS_OK);
  struct tokenizer *t = NULL;
  llb_status st = tokenizer_load(*gf, &t);
  if (st != LLB_STATUS_OK) fail_msg("tokenizer_load(%s): %s", name, llb_err_last());
  return t;
}

/* Runs every .inp/.out pair of one vocab: encode (add_special false, parse_special false, as
 * llama.cpp's test-tokenizer-0) must give exactly the ids; decode must give the input back. */
static void run_vectors(const char *name) {
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab(name, &gf);
  char path[1024];
  size_t inp_len, out_len;
  snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf.inp", g_dir, name);
  char *inp = read_file(path, &inp_len);
  snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf.out", g_dir, name);
  char *out = read_file(path, &out_len);
  assert_non_null(inp);
  assert_non_null(out);
  const char *sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0, n_tests = 0, n_fail = 0, n_roundtrip_fail = 0;
  char *line = out;
  while (pos < inp_len) {
    char *next = strstr(inp + pos, sep);
    size_t slen = next ? (size_t)(next - (inp + pos)) : inp_len - pos;
    const char *s = inp + pos;
    char *eol = strchr(line, '\n');
    assert_non_null(eol);
    *eol = '\0';
    int32_t expect[4096];
    int64_t n_expect = 0;
    for (char *p = line; *p;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      expect[n_expect++] = (int32_t)v;
      p = end;
    }
    int32_t *ids;
    int64_t n;
    assert_int_equal(tokenizer_encode(t, s, slen, false, false, &ids, &n), LLB_STATUS_OK);
    bool ok = n == n_expect && (n == 0 || memcmp(ids, expect, (size_t)n * sizeof(int32_t)) == 0) &&
              tokenizer_min_tokens(t, s, slen) <= n; /* the lower bound the input processor refuses on */
    if (!ok) {
      n_fail++;
      printf("[%s] test %zu '%.*s'\n  expected:", name, n_tests, (int)slen, s);
      for (int64_t i = 0; i < n_expect; i++) printf(" %d", expect[i]);
      printf("\n  got:     ");
      for (int64_t i = 0; i < n; i++) printf(" %d", ids[i]);
      printf("\n");
    }
    char *text;
    size_t tlen;
    assert_int_equal(tokenizer_decode(t, ids, n, false, &text, &tlen), LLB_STATUS_OK);
    if (tlen != slen || memcmp(text, s, slen) != 0) {
      n_roundtrip_fail++;
      printf("[%s] round trip of test %zu: '%.*s' came back as '%s'\n", name, n_tests, (int)slen, s, text);
    }
    free(text);
    free(ids);
    n_tests++;
    line = eol + 1;
    pos += slen + (next ? strlen(sep) : 0);
  }
  printf("[%s] %zu vectors, %zu mismatches, %zu round-trip failures\n", name, n_tests, n_fail, n_roundtrip_fail);
  assert_true(n_tests >= 40);
  assert_int_equal(n_fail, 0);
  assert_int_equal(n_roundtrip_fail, 0);
  free(inp);
  free(out);
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_gpt2_vectors_match_hf(void **state) { (void)state; run_vectors("gpt-2"); }
static void test_starcoder_vectors_match_hf(void **state) { (void)state; run_vectors("starcoder"); }
static void test_falcon_vectors_match_hf(void **state) { (void)state; run_vectors("falcon"); }
static void test_deepseek_coder_vectors_match_hf(void **state) { (void)state; run_vectors("deepseek-coder"); }
static void test_llama_spm_vectors_match_hf(void **state) { (void)state; run_vectors("llama-spm"); }

static void test_spm_special_tokens_parsed_only_when_asked(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("llama-spm", &gf);
  int32_t *ids;
  int64_t n;
  const char *s = "<s>Hi</s>";
  assert_int_equal(tokenizer_encode(t, s, strlen(s), true, true, &ids, &n), LLB_STATUS_OK);
  /* BOS from add_special, then <s> parsed, then "▁Hi" (prefix space after a special), </s> */
  assert_true(n >= 4);
  assert_int_equal(ids[0], 1);
  assert_int_equal(ids[1], 1);
  assert_int_equal(ids[n - 1], 2);
  free(ids);
  assert_int_equal(tokenizer_encode(t, s, strlen(s), false, false, &ids, &n), LLB_STATUS_OK);
  for (int64_t i = 0; i < n; i++) assert_true(ids[i] != 1 && ids[i] != 2);
  char *text;
  assert_int_equal(tokenizer_decode(t, ids, n, false, &text, NULL), LLB_STATUS_OK);
  assert_string_equal(text, s);
  free(text);
  free(ids);
  char piece[16];
  assert_int_equal(tokenizer_token_to_piece(t, 1, false, piece, sizeof(piece)), 0);
  assert_int_equal(tokenizer_token_to_piece(t, 1, true, piece, sizeof(piece)), 3);
  assert_memory_equal(piece, "<s>", 3);
  assert_int_equal(tokenizer_token_to_piece(t, 32000, true, piece, sizeof(piece)), -1);
  assert_true(tokenizer_is_control(t, 1));
  assert_true(tokenizer_add_bos(t));
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_spm_byte_fallback_round_trips_unknown_characters(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("llama-spm", &gf);
  const char *s = "\xF0\x9F\xA6\x99 \xE2\x80\x8B x\x01";
  int32_t *ids;
  int64_t n;
  assert_int_equal(tokenizer_encode(t, s, strlen(s), false, false, &ids, &n), LLB_STATUS_OK);
  int32_t llama_byte_f0 = tokenizer_find_token(t, "<0xF0>", 6);
  assert_true(llama_byte_f0 >= 0);
  bool has_byte = false;
  for (int64_t i = 0; i < n; i++) has_byte |= ids[i] == llama_byte_f0;
  assert_true(has_byte);
  char *text;
  assert_int_equal(tokenizer_decode(t, ids, n, false, &text, NULL), LLB_STATUS_OK);
  assert_string_equal(text, s);
  free(text);
  free(ids);
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_bpe_long_input_without_spaces_is_fast_and_exact(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("gpt-2", &gf);
  size_t len = 200000;
  char *s = malloc(len + 1);
  for (size_t i = 0; i < len; i++) s[i] = (char)('a' + (i * 7 + i / 13) % 26);
  s[len] = '\0';
  int32_t *ids;
  int64_t n;
  assert_int_equal(tokenizer_encode(t, s, len, false, false, &ids, &n), LLB_STATUS_OK);
  assert_true(n > 1000 && n < (int64_t)len);
  char *text;
  size_t tlen;
  assert_int_equal(tokenizer_decode(t, ids, n, false, &text, &tlen), LLB_STATUS_OK);
  assert_int_equal(tlen, len);
  assert_memory_equal(text, s, len);
  free(text);
  free(ids);
  free(s);
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_bpe_invalid_utf8_round_trips(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("starcoder", &gf);
  /* truncated and stray UTF-8 (bytes the byte-level vocab has; 0xC0, 0xC1, 0xF5..0xFF have no
   * token in this vocab and are dropped, as in llama.cpp and HF) */
  const char s[] = "ok\xC3 \x80z\xE2\x82";
  int32_t *ids;
  int64_t n;
  assert_int_equal(tokenizer_encode(t, s, sizeof(s) - 1, false, false, &ids, &n), LLB_STATUS_OK);
  char *text;
  size_t tlen;
  assert_int_equal(tokenizer_decode(t, ids, n, false, &text, &tlen), LLB_STATUS_OK);
  assert_int_equal(tlen, sizeof(s) - 1);
  assert_memory_equal(text, s, tlen);
  free(text);
  free(ids);
  tokenizer_destroy(t);
  gguf_close(gf);
}

/* SmolLM2: ids checked against HF tokenizers (tokenizer rebuilt from the GGUF vocab and merges
 * with SmolLM2's pre-tokenizer: Split(\p{N}, isolated) + ByteLevel), see model/tokenizer/README.md. */
static void test_smollm2_encodes_chat_text_like_hf(void **state) {
  (void)state;
  struct gguf_file *gf;
  if (gguf_open(g_model, &gf) != LLB_STATUS_OK) {
    printf("SKIP: default model %s absent (ops/fetch-model.sh)\n", g_model);
    skip();
  }
  struct tokenizer *t;
  assert_int_equal(tokenizer_load(gf, &t), LLB_STATUS_OK);
  assert_int_equal(tokenizer_vocab_size(t), 49152);
  assert_int_equal(tokenizer_bos_id(t), 1);
  assert_int_equal(tokenizer_eos_id(t), 2);
  assert_false(tokenizer_add_bos(t));
  static const struct {
    const char *text;
    int32_t ids[40];
    int n;
  } cases[] = {
#include "test_tokenizer_smollm2.inc"
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    int32_t *ids;
    int64_t n;
    assert_int_equal(tokenizer_encode(t, cases[c].text, strlen(cases[c].text), false, true, &ids, &n), LLB_STATUS_OK);
    if (n != cases[c].n || memcmp(ids, cases[c].ids, (size_t)n * sizeof(int32_t)) != 0) {
      printf("mismatch for '%s':", cases[c].text);
      for (int64_t i = 0; i < n; i++) printf(" %d", ids[i]);
      printf("\n");
      fail();
    }
    char *text;
    assert_int_equal(tokenizer_decode(t, ids, n, true, &text, NULL), LLB_STATUS_OK);
    assert_string_equal(text, cases[c].text);
    free(text);
    free(ids);
  }
  tokenizer_destroy(t);
  gguf_close(gf);
}

/* Completion prompts and chat templates alike: the text of a control token in a prompt is that
 * token (vLLM, llama.cpp); ordinary text tokenizes the same either way. */
static void test_special_token_text_in_a_prompt_becomes_the_special_token(void **state) {
  (void)state;
  struct gguf_file *gf;
  if (gguf_open(g_model, &gf) != LLB_STATUS_OK) {
    printf("SKIP: default model %s absent (ops/fetch-model.sh)\n", g_model);
    skip();
  }
  struct tokenizer *t;
  assert_int_equal(tokenizer_load(gf, &t), LLB_STATUS_OK);
  int32_t im_start = tokenizer_find_token(t, "<|im_start|>", 12);
  assert_true(im_start >= 0 && tokenizer_is_control(t, im_start));
  int32_t *ids, *plain, *user;
  int64_t n, n_plain, n_user;
  const char *s = "<|im_start|>user";
  assert_int_equal(tokenizer_encode(t, s, strlen(s), true, true, &ids, &n), LLB_STATUS_OK);
  assert_int_equal(tokenizer_encode(t, "user", 4, false, false, &user, &n_user), LLB_STATUS_OK);
  assert_int_equal(n, 1 + n_user);
  assert_int_equal(ids[0], im_start);
  assert_memory_equal(ids + 1, user, (size_t)n_user * sizeof(int32_t));
  free(ids);
  /* without parse_special the same text is ordinary characters */
  assert_int_equal(tokenizer_encode(t, s, strlen(s), false, false, &plain, &n_plain), LLB_STATUS_OK);
  assert_true(n_plain > 2);
  for (int64_t i = 0; i < n_plain; i++) assert_int_not_equal(plain[i], im_start);
  free(plain);
  const char *text = "Hello world, <|im_start not a token|> 123";
  assert_int_equal(tokenizer_encode(t, text, strlen(text), false, true, &ids, &n), LLB_STATUS_OK);
  assert_int_equal(tokenizer_encode(t, text, strlen(text), false, false, &plain, &n_plain), LLB_STATUS_OK);
  assert_int_equal(n, n_plain);
  assert_memory_equal(ids, plain, (size_t)n * sizeof(int32_t));
  free(ids);
  free(plain);
  free(user);
  tokenizer_destroy(t);
  gguf_close(gf);
}

static void test_unknown_pre_tokenizer_is_unsupported_and_named(void **state) {
  (void)state;
  /* a minimal GGUF v3 in memory: tokenizer.ggml.model = gpt2, tokenizer.ggml.pre = "zz-new" */
  unsigned char buf[512];
  size_t o = 0;
#define PUT(p, n) (memcpy(buf + o, (p), (n)), o += (n))
#define PUT64(v) do { uint64_t v_ = (v); PUT(&v_, 8); } while (0)
#define PUT32(v) do { uint32_t v_ = (v); PUT(&v_, 4); } while (0)
#define PUTSTR(s) do { PUT64(strlen(s)); PUT((s), strlen(s)); } while (0)
  PUT("GGUF", 4);
  PUT32(3);
  PUT64(0);
  PUT64(4);
  PUTSTR("tokenizer.ggml.model"); PUT32(8); PUTSTR("gpt2");
  PUTSTR("tokenizer.ggml.pre"); PUT32(8); PUTSTR("zz-new");
  PUTSTR("tokenizer.ggml.tokens"); PUT32(9); PUT32(8); PUT64(2); PUTSTR("a"); PUTSTR("b");
  PUTSTR("tokenizer.ggml.merges"); PUT32(9); PUT32(8); PUT64(1); PUTSTR("a b");
  while (o % 32) buf[o++] = 0;
  struct gguf_file *gf;
  assert_int_equal(gguf_open_memory(buf, o, &gf), LLB_STATUS_OK);
  struct tokenizer *t = (struct tokenizer *)1;
  assert_int_equal(tokenizer_load(gf, &t), LLB_STATUS_UNSUPPORTED);
  assert_null(t);
  assert_non_null(strstr(llb_err_last(), "zz-new"));
  gguf_close(gf);
}

/* Texts built to make few tokens: long runs of one character, of spaces and newlines (the longest
 * tokens of byte-level vocabularies), special-token texts back to back, a word repeated, and
 * bytes some vocabularies have no token for (dropped), alone and between letters. */
#define FEW_TOKEN_KINDS 10
static char *few_token_text(int kind, size_t len) {
  static const char *const units[FEW_TOKEN_KINDS] = {"a", " ", "\n ", "<|endoftext|>", "<s></s>", " the", "----",
                                                     "\t\t", "\x04", "\x04\x13" "a\xff"};
  const char *u = units[kind];
  char *s = malloc(len + 1);
  for (size_t i = 0; i < len; i++) s[i] = u[i % strlen(u)];
  s[len] = '\0';
  return s;
}

/* tokenizer_min_tokens is what the input processor refuses a prompt on without tokenizing it: it
 * must never exceed the real count, whatever the text (the vectors, and texts built to make few
 * tokens), with and without special tokens parsed. */
static void check_min_tokens_bounds(struct tokenizer *t, const char *name) {
  int64_t checked = 0;
  for (int kind = 0; kind < FEW_TOKEN_KINDS; kind++) {
    for (size_t len = 1; len <= 5000; len = len * 3 + 1) {
      char *s = few_token_text(kind, len);
      for (int special = 0; special < 2; special++) {
        int32_t *ids;
        int64_t n;
        assert_int_equal(tokenizer_encode(t, s, len, false, special, &ids, &n), LLB_STATUS_OK);
        if (tokenizer_min_tokens(t, s, len) > n)
          fail_msg("[%s] %zu bytes of kind %d make %lld tokens, bound %lld", name, len, kind, (long long)n,
                   (long long)tokenizer_min_tokens(t, s, len));
        /* stopped only when the real count is over, and then with a count that is proven */
        int32_t *got;
        int64_t m;
        const llb_status st = tokenizer_encode_at_most(t, s, len, false, special, n > 1 ? n - 1 : 1, &got, &m);
        assert_int_equal(st, n > 1 ? LLB_STATUS_TOO_LARGE : LLB_STATUS_OK);
        if (st == LLB_STATUS_TOO_LARGE) assert_true(m >= n - 1 && m <= n);
        llb_err_clear();
        free(got);
        free(ids);
        checked++;
      }
      free(s);
    }
  }
  char *a = few_token_text(0, 1000);
  printf("[%s] bound held on %lld texts; 1000 letters make at least %lld tokens\n", name, (long long)checked,
         (long long)tokenizer_min_tokens(t, a, 1000));
  free(a);
}

static void test_min_tokens_never_exceeds_the_count_of_any_text(void **state) {
  (void)state;
  static const char *const vocabs[] = {"gpt-2", "falcon", "deepseek-coder", "llama-spm", "starcoder"};
  for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
    struct gguf_file *gf;
    struct tokenizer *t = load_vocab(vocabs[v], &gf);
    check_min_tokens_bounds(t, vocabs[v]);
    tokenizer_destroy(t);
    gguf_close(gf);
  }
  struct gguf_file *gf;
  if (gguf_open(g_model, &gf) != LLB_STATUS_OK) return;
  struct tokenizer *t;
  assert_int_equal(tokenizer_load(gf, &t), LLB_STATUS_OK);
  check_min_tokens_bounds(t, "smollm2");
  /* its longest token stands for 81 bytes (a newline and 80 spaces): 800 KB of text is over its
   * 8192-token context; bytes it has no token for count nothing */
  char *s = few_token_text(0, 800000);
  assert_int_equal(tokenizer_min_tokens(t, s, 81), 1);
  assert_int_equal(tokenizer_min_tokens(t, s, 82), 2);
  assert_true(tokenizer_min_tokens(t, s, 800000) > 8192);
  memset(s, 0x04, 81);
  assert_int_equal(tokenizer_min_tokens(t, s, 82), 1);
  free(s);
  tokenizer_destroy(t);
  gguf_close(gf);
}

/* tokenizer_encode_at_most: the same ids as tokenizer_encode up to the bound; over it TOO_LARGE
 * with a count that is proven (above the bound, never above the real count), also for a text
 * that is one 200 KB pre-token, where it stops before any BPE work. */
static void test_encode_at_most_stops_over_the_bound_with_a_proven_count(void **state) {
  (void)state;
  struct gguf_file *gf;
  struct tokenizer *t = load_vocab("gpt-2", &gf);
  const char *text = "The quick brown fox jumps over the lazy dog, again and again <|endoftext|> and again.";
  int32_t *ids, *got;
  int64_t n, m;
  assert_int_equal(tokenizer_encode(t, text, strlen(text), false, true, &ids, &n), LLB_STATUS_OK);
  assert_int_equal(tokenizer_encode_at_most(t, text, strlen(text), false, true, n, &got, &m), LLB_STATUS_OK);
  assert_int_equal(m, n);
  assert_memory_equal(got, ids, (size_t)n * sizeof *ids);
  free(got);
  for (int64_t max = 1; max < n; max++) {
    assert_int_equal(tokenizer_encode_at_most(t, text, strlen(text), false, true, max, &got, &m), LLB_STATUS_TOO_LARGE);
    assert_null(got);
    assert_true(m > max && m <= n);
    assert_non_null(strstr(llb_err_last(), "more than"));
    llb_err_clear();
  }
  free(ids);
  const size_t len = 200000;
  char *s = few_token_text(0, len); /* one word of 200,000 'a's */
  assert_int_equal(tokenizer_encode(t, s, len, false, false, &ids, &n), LLB_STATUS_OK);
  assert_int_equal(tokenizer_encode_at_most(t, s, len, false, false, 1000, &got, &m), LLB_STATUS_TOO_LARGE);
  assert_int_equal(m, tokenizer_min_tokens(t, s, len)); /* the bound alone: nothing was encoded */
  assert_true(m > 1000 && m <= n);
  llb_err_clear();
  free(ids);
  free(s);
  tokenizer_destroy(t);
  gguf_close(gf);
}

int main(int argc, char **argv) {
  g_dir = argc > 1 ? argv[1] : LLB_TESTDATA_DIR "/tokenizer";
  g_model = argc > 2 ? argv[2] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  char probe[1024];
  snprintf(probe, sizeof(probe), "%s/ggml-vocab-gpt-2.gguf", g_dir);
  if (access(probe, R_OK) != 0) {
    printf("SKIP: tokenizer test vectors not found under %s\n", g_dir);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpt2_vectors_match_hf),
      cmocka_unit_test(test_starcoder_vectors_match_hf),
      cmocka_unit_test(test_falcon_vectors_match_hf),
      cmocka_unit_test(test_deepseek_coder_vectors_match_hf),
      cmocka_unit_test(test_llama_spm_vectors_match_hf),
      cmocka_unit_test(test_spm_special_tokens_parsed_only_when_asked),
      cmocka_unit_test(test_spm_byte_fallback_round_trips_unknown_characters),
      cmocka_unit_test(test_bpe_long_input_without_spaces_is_fast_and_exact),
      cmocka_unit_test(test_bpe_invalid_utf8_round_trips),
      cmocka_unit_test(test_smollm2_encodes_chat_text_like_hf),
      cmocka_unit_test(test_special_token_text_in_a_prompt_becomes_the_special_token),
      cmocka_unit_test(test_unknown_pre_tokenizer_is_unsupported_and_named),
      cmocka_unit_test(test_min_tokens_never_exceeds_the_count_of_any_text),
      cmocka_unit_test(test_encode_at_most_stops_over_the_bound_with_a_proven_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
