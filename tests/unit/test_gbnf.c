/* GBNF grammars (model/structured/so_gbnf.c, the matcher's GBNF frames): what compiles, what is refused
 * with which line and column, and that the matcher accepts exactly the grammar's language
 * (every string up to a length over a small alphabet, against POSIX regexes for regular
 * grammars and counting for balanced parentheses), UTF-8 classes byte by byte, and the mask. */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/status.h"
#include "model/structured/structured_output.h"

static struct so_grammar *compile_ok(const char *text) {
  struct so_grammar *g = NULL;
  llb_status st = so_grammar_compile_gbnf(text, strlen(text), &g);
  if (st != LLB_STATUS_OK) fail_msg("grammar %s: %s", text, llb_err_last());
  return g;
}

static bool accepts(const struct so_grammar *g, const char *s, size_t n) {
  struct so_matcher *m = NULL;
  assert_int_equal(so_matcher_create(g, &m), LLB_STATUS_OK);
  bool ok = so_matcher_accept_bytes(m, (const uint8_t *)s, n) && so_matcher_is_complete(m);
  so_matcher_destroy(m);
  return ok;
}

static void test_grammars_in_both_dialects_compile(void **state) {
  (void)state;
  static const char *const good[] = {
      "root ::= \"a\"",
      "root  ::= (expr \"=\" ws term \"\\n\")+\nexpr  ::= term ([-+*/] term)*\n"
      "term  ::= ident | num | \"(\" ws expr \")\" ws\nident ::= [a-z] [a-z0-9_]* ws\n"
      "num   ::= [0-9]+ ws\nws    ::= [ \\t\\n]*\n",
      "# a comment\nroot ::= item+ # trailing\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n",
      "root ::=\n  \"x\" |\n  \"y\"\n", /* newline after ::= and after | (llama.cpp) */
      "root ::= a_b\na_b ::= \"q\"{2,5} \"r\"{3} \"s\"{1,} \"t\"{0,2}", /* underscores (xgrammar) */
      "root ::= [ぁ-ゟ]+ \"\\U0001F600\"? .",
      "root ::= ws | \"a\"\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}", /* empty alternatives */
      "root ::= \"\" \"a\"* ()",
      "root ::= [!\"#$%&'()*+,-./:;<=>?@[\\\\\\]^_`{|}~]", /* english.gbnf's punctuation class */
      "root ::= x\nx ::= \"(\" x \")\" | \"\"",  /* recursion that reads first is fine */
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) so_grammar_destroy(compile_ok(good[i]));
}

static void test_errors_name_the_line_and_column(void **state) {
  (void)state;
  static const struct {
    const char *text;
    llb_status status;
    const char *want;
  } bad[] = {
      {"root ::= \"a\" foo", LLB_STATUS_MALFORMED, "line 1 column 14: undefined rule 'foo'"},
      {"root ::= \"a\"\nroot ::= \"b\"", LLB_STATUS_MALFORMED, "line 2 column 1: rule 'root' defined twice"},
      {"start ::= \"a\"", LLB_STATUS_MALFORMED, "no rule named 'root'"},
      {"root ::= \"abc", LLB_STATUS_MALFORMED, "line 1 column 10: unterminated string literal"},
      {"root ::= [a-", LLB_STATUS_MALFORMED, "line 1 column 10: unterminated character class"},
      {"root ::=\n  (\"a\" | \"b\"", LLB_STATUS_MALFORMED, "line 2 column 3: unclosed '('"},
      {"root ::= \"a\")", LLB_STATUS_MALFORMED, "line 1 column 13: unbalanced ')'"},
      {"root ::= * \"a\"", LLB_STATUS_MALFORMED, "line 1 column 10: '*' repeats nothing"},
      {"root ::= \"a\"{3,2}", LLB_STATUS_MALFORMED, "maximum below minimum"},
      {"root ::= \"a\"{5000}", LLB_STATUS_TOO_LARGE, "repetition count above 1000"},
      {"root ::= [z-a]", LLB_STATUS_MALFORMED, "line 1 column 12: character range out of order"},
      {"root ::= \"\\q\"", LLB_STATUS_MALFORMED, "line 1 column 11: unknown escape '\\q'"},
      {"root ::= \"\\u12\"", LLB_STATUS_MALFORMED, "expecting 4 hex digits"},
      {"root ::= \"\\uD800\"", LLB_STATUS_MALFORMED, "U+D800 is not a Unicode scalar value"},
      {"root ::= [^\\x00-\\U0010FFFF]", LLB_STATUS_MALFORMED, "character class matches no character"},
      {"root ::= [^] []", LLB_STATUS_MALFORMED, "line 1 column 14: character class matches no character"},
      {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", LLB_STATUS_MALFORMED,
       "line 2 column 1: rule 'expr' is left-recursive"},
      {"root ::= x\nx ::= y x | \"z\"\ny ::= \" \"?", LLB_STATUS_MALFORMED, "rule 'x' is left-recursive"},
      {"root ::= (\"\"?)*", LLB_STATUS_MALFORMED, "rule 'root' is left-recursive"},
      {"root ::= \"a\" | loop\nloop ::= \"b\" loop", LLB_STATUS_MALFORMED,
       "line 2 column 1: rule 'loop' can never finish"},
      {"root ::= <think> \"a\"", LLB_STATUS_UNSUPPORTED, "line 1 column 10: token references"},
      {"start: \"a\" | \"b\"", LLB_STATUS_UNSUPPORTED, "Lark syntax is not supported"},
      {"root: \"a\"\nx ::= \"b\"", LLB_STATUS_UNSUPPORTED, "line 1 column 5: expecting '::='"},
      {"root ::= 'a'", LLB_STATUS_MALFORMED, "line 1 column 10: string literals are written in double quotes"},
      {"root ::= \"a\" @", LLB_STATUS_MALFORMED, "line 1 column 14: unexpected '@'"},
      {"root ::= \"\xc3\x28\"", LLB_STATUS_MALFORMED, "line 1 column 11: invalid UTF-8"},
      {"   \n# only a comment\n", LLB_STATUS_MALFORMED, "grammar is empty"},
      {"::= \"a\"", LLB_STATUS_MALFORMED, "line 1 column 1: expecting a rule name"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct so_grammar *g = NULL;
    llb_status st = so_grammar_compile_gbnf(bad[i].text, strlen(bad[i].text), &g);
    assert_null(g);
    if (st != bad[i].status || !strstr(llb_err_last(), bad[i].want))
      fail_msg("grammar %s: got %s \"%s\", want %s \"%s\"", bad[i].text, llb_strerror(st), llb_err_last(),
               llb_strerror(bad[i].status), bad[i].want);
  }
}

static void test_size_bounds_are_refused(void **state) {
  (void)state;
  struct so_grammar *g = NULL;
  char *deep = malloc(400);
  strcpy(deep, "root ::= ");
  for (int i = 0; i < 70; i++) strcat(deep, "(");
  strcat(deep, "\"a\"");
  for (int i = 0; i < 70; i++) strcat(deep, ")");
  assert_int_equal(so_grammar_compile_gbnf(deep, strlen(deep), &g), LLB_STATUS_TOO_LARGE);
  assert_non_null(strstr(llb_err_last(), "nested more than 64"));
  free(deep);
  char *wide = malloc(2048);
  strcpy(wide, "root ::= ");
  for (int i = 0; i < 70; i++) strcat(wide, "[a-z]{1000} "); /* 70,000 elements */
  assert_int_equal(so_grammar_compile_gbnf(wide, strlen(wide), &g), LLB_STATUS_TOO_LARGE);
  assert_non_null(strstr(llb_err_last(), "more than 65536 elements"));
  assert_null(g);
  free(wide);
  char *big = malloc(SO_MAX_SPEC_BYTES + 16);
  memset(big, ' ', SO_MAX_SPEC_BYTES + 15);
  memcpy(big, "root ::= \"a\"", 12);
  assert_int_equal(so_grammar_compile_gbnf(big, SO_MAX_SPEC_BYTES + 15, &g), LLB_STATUS_TOO_LARGE);
  free(big);
}

/* Every string over alphabet of length <= max_len: the matcher agrees with want(). */
static void enumerate(const struct so_grammar *g, const char *alphabet, int max_len,
                      bool (*want)(const char *s, size_t n, const void *arg), const void *arg) {
  size_t k = strlen(alphabet);
  char s[16];
  int idx[16];
  for (int len = 0; len <= max_len; len++) {
    for (int i = 0; i < len; i++) idx[i] = 0;
    for (;;) {
      for (int i = 0; i < len; i++) s[i] = alphabet[idx[i]];
      bool got = accepts(g, s, (size_t)len), exp = want(s, (size_t)len, arg);
      if (got != exp) fail_msg("\"%.*s\": matcher %d, expected %d", len, s, got, exp);
      int i = len - 1;
      while (i >= 0 && ++idx[i] == (int)k) idx[i--] = 0;
      if (i < 0) break;
    }
  }
}

static bool regex_full_match(const char *s, size_t n, const void *arg) {
  char buf[32];
  memcpy(buf, s, n);
  buf[n] = '\0';
  return regexec((const regex_t *)arg, buf, 0, NULL, 0) == 0;
}

static void test_regular_grammars_accept_exactly_their_language(void **state) {
  (void)state;
  static const struct {
    const char *gbnf, *ere, *alphabet;
    int max_len;
  } cases[] = {
      {"root ::= \"a\"{2,3} \"b\"?", "^a{2,3}b?$", "ab", 6},
      {"root ::= (\"ab\" | \"a\")* \"c\"", "^(ab|a)*c$", "abc", 7},
      {"root ::= [a-c]+ (\"-\" [^a-b])?", "^[a-c]+(-[^ab])?$", "abc-", 6},
      {"root ::= x x x\nx ::= \"a\"?", "^a{0,3}$", "ab", 5},
      {"root ::= ws (\"x\" ws)*\nws ::= | \" \" | \"  \"", "^ {0,2}(x {0,2})*$", "x ", 7},
      {"root ::= \"ab\"{1,2} | \"b\"+ \"a\"", "^((ab){1,2}|b+a)$", "ab", 7},
      {"root ::= [^b]{2,}", "^[^b]{2,}$", "abc", 5},
      {"root ::= [^] \"a\"", "^.a$", "ab", 4}, /* an empty negated class: any character */
      {"root ::= \"\"", "^$", "ab", 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    regex_t re;
    assert_int_equal(regcomp(&re, cases[i].ere, REG_EXTENDED | REG_NOSUB), 0);
    struct so_grammar *g = compile_ok(cases[i].gbnf);
    enumerate(g, cases[i].alphabet, cases[i].max_len, regex_full_match, &re);
    so_grammar_destroy(g);
    regfree(&re);
  }
}

static bool balanced(const char *s, size_t n, const void *arg) {
  (void)arg;
  int d = 0;
  for (size_t i = 0; i < n; i++) {
    d += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 100;
    if (d < 0 || d >= 100) return false;
  }
  return d == 0;
}

static void test_nested_parentheses_are_counted(void **state) {
  (void)state;
  struct so_grammar *g = compile_ok("root ::= (\"(\" root \")\")*");
  enumerate(g, "()x", 10, balanced, NULL);
  so_grammar_destroy(g);
}

static void test_utf8_classes_byte_by_byte(void **state) {
  (void)state;
  struct so_grammar *g = compile_ok("root ::= [é-ë] \"€\" | [^a] \"!\"");
  assert_true(accepts(g, "é€", strlen("é€")));
  assert_true(accepts(g, "ë€", strlen("ë€")));
  assert_false(accepts(g, "è€", strlen("è€"))); /* U+00E8: below the range */
  assert_true(accepts(g, "è!", strlen("è!")));
  assert_true(accepts(g, "\xf0\x9f\x98\x80!", 5));
  assert_false(accepts(g, "a!", 2));
  assert_false(accepts(g, "\xc0\x80!", 3));     /* overlong */
  assert_false(accepts(g, "\xed\xa0\x80!", 4)); /* a surrogate */
  so_grammar_destroy(g);
  /* every byte of a character must leave one in the class possible */
  g = compile_ok("root ::= [\\u4e00-\\u4e01]");
  struct so_matcher *m = NULL;
  assert_int_equal(so_matcher_create(g, &m), LLB_STATUS_OK);
  assert_false(so_matcher_accept_bytes(m, (const uint8_t *)"\xe5", 1)); /* U+5xxx */
  assert_true(so_matcher_accept_bytes(m, (const uint8_t *)"\xe4", 1));
  assert_false(so_matcher_accept_bytes(m, (const uint8_t *)"\xb9", 1)); /* U+4E4x */
  assert_true(so_matcher_accept_bytes(m, (const uint8_t *)"\xb8", 1));
  assert_false(so_matcher_is_complete(m));
  assert_false(so_matcher_accept_bytes(m, (const uint8_t *)"\x82", 1)); /* U+4E02 */
  assert_true(so_matcher_accept_bytes(m, (const uint8_t *)"\x81", 1));
  assert_true(so_matcher_is_complete(m));
  assert_true(so_matcher_is_terminated(m));
  so_matcher_destroy(m);
  so_grammar_destroy(g);
}

static void test_mask_allows_the_tokens_that_keep_the_output_in_the_language(void **state) {
  (void)state;
  static const char *const pieces[] = {"a", "ab", "b", "ac", "abc", "c", "", "\xe2", "\xe2\x82\xac"};
  size_t lens[9];
  for (int i = 0; i < 9; i++) lens[i] = strlen(pieces[i]);
  const int32_t eos = 6;
  struct so_vocab *v = NULL;
  assert_int_equal(so_vocab_create(9, pieces, lens, &eos, 1, &v), LLB_STATUS_OK);
  struct so_grammar *g = compile_ok("root ::= (\"ab\" | \"ac\") \"€\"?");
  struct so_matcher *m = NULL;
  assert_int_equal(so_matcher_create(g, &m), LLB_STATUS_OK);
  uint32_t mask[1];
  assert_int_equal(so_vocab_fill_mask(v, m, mask), 3);
  assert_int_equal(mask[0], (1u << 0) | (1u << 1) | (1u << 3)); /* a, ab, ac */
  assert_true(so_matcher_accept_token(m, v, 1));
  assert_int_equal(so_vocab_fill_mask(v, m, mask), 3);
  assert_int_equal(mask[0], (1u << 6) | (1u << 7) | (1u << 8)); /* EOS, a lead byte of €, € */
  assert_true(so_matcher_accept_token(m, v, 7));
  assert_int_equal(so_vocab_fill_mask(v, m, mask), 0); /* "\x82\xac" is no token here */
  so_matcher_destroy(m);
  so_grammar_destroy(g);
  so_vocab_destroy(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grammars_in_both_dialects_compile),
      cmocka_unit_test(test_errors_name_the_line_and_column),
      cmocka_unit_test(test_size_bounds_are_refused),
      cmocka_unit_test(test_regular_grammars_accept_exactly_their_language),
      cmocka_unit_test(test_nested_parentheses_are_counted),
      cmocka_unit_test(test_utf8_classes_byte_by_byte),
      cmocka_unit_test(test_mask_allows_the_tokens_that_keep_the_output_in_the_language),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
