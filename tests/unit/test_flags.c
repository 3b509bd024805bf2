/* cmd/flags: the one flag parser of every llmbus program (getopt_long_only over a table). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/flags/flags.h"

struct opts {
  const char *model;
  int32_t max_num_seqs;
  int64_t timeout_ms;
  double temperature;
  bool prefix_caching;
  bool verbose;
  struct flag_list names;
  struct flag_list stops;
  const char *speculative;
};

static llb_status set_upper_seqs(const struct flag *f, const char *value) {
  int64_t v;
  llb_status st = flags_parse_int64(value, 1, 1024, &v);
  if (!st) *(int32_t *)f->target = (int32_t)v;
  return st;
}

/* A command shaped like `llmbus serve`: a short flag, aliases, a greedy list, a pair of
 * switches, a setter with a range. */
static int parse(struct opts *o, struct flag_args *a, int argc, const char **argv_const) {
  *o = (struct opts){.model = "default.gguf", .max_num_seqs = 64, .timeout_ms = 1000, .temperature = 1.0,
                     .prefix_caching = true};
  const struct flag flags[] = {
      {.name = "model", .short_name = 'm', .kind = FLAG_KIND_STRING, .target = &o->model, .metavar = "PATH",
       .help = "GGUF file"},
      {.name = "max-num-seqs", .aliases = "np|parallel", .kind = FLAG_KIND_INT32, .target = &o->max_num_seqs,
       .metavar = "N", .help = "requests at once", .set = set_upper_seqs},
      {.name = "timeout-ms", .kind = FLAG_KIND_INT64, .target = &o->timeout_ms, .metavar = "MS", .help = "limit"},
      {.name = "temperature", .kind = FLAG_KIND_DOUBLE, .target = &o->temperature, .metavar = "T", .min = 0,
       .max = 2, .help = "sampling"},
      {.name = "enable-prefix-caching", .kind = FLAG_KIND_BOOL, .target = &o->prefix_caching, .help = "on"},
      {.name = "no-enable-prefix-caching", .aliases = "no-prefix-caching", .kind = FLAG_KIND_FALSE,
       .target = &o->prefix_caching, .help = "off"},
      {.name = "verbose", .short_name = 'v', .kind = FLAG_KIND_BOOL, .target = &o->verbose, .help = "talk"},
      {.name = "served-model-name", .kind = FLAG_KIND_LIST, .target = &o->names, .metavar = "NAME", .help = "names",
       .greedy = true},
      {.name = "stop", .kind = FLAG_KIND_LIST, .target = &o->stops, .metavar = "TEXT", .help = "stop strings"},
      {.name = "speculative-config", .kind = FLAG_KIND_STRING, .target = &o->speculative, .metavar = "JSON",
       .help = "spec"},
  };
  const struct flag_section sec = {"flags", flags, (int)(sizeof flags / sizeof flags[0])};
  const struct flag_command c = {.program = "test", .usage = "usage: test\n", .sections = &sec, .num_sections = 1,
                                 .config = true, .max_positional = 2};
  char *argv[64];
  argv[0] = "test";
  for (int i = 1; i < argc; i++) argv[i] = strdup(argv_const[i - 1]);
  int rc = flags_parse(&c, argc, argv, a);
  /* string values point into argv: keep copies alive until the test frees them */
  static char *keep[64];
  static int num_keep;
  for (int i = 0; i < num_keep; i++) free(keep[i]);
  num_keep = 0;
  for (int i = 1; i < argc; i++) keep[num_keep++] = argv[i];
  return rc;
}

#define PARSE(o, a, ...)                                                                         \
  parse(o, a, 1 + (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),           \
        (const char *[]){__VA_ARGS__})

static void test_value_forms_equals_space_short_and_single_dash_long(void **state) {
  (void)state;
  struct opts o;
  struct flag_args a;
  assert_int_equal(PARSE(&o, &a, "--model=x.gguf", "--timeout-ms", "5", "-np", "8", "--temperature=0.5"),
                   FLAGS_CONTINUE);
  assert_string_equal(o.model, "x.gguf");
  assert_int_equal(o.timeout_ms, 5);
  assert_int_equal(o.max_num_seqs, 8);
  assert_true(o.temperature == 0.5);
  assert_int_equal(a.num_positional, 0);
  flag_args_free(&a);
  assert_int_equal(PARSE(&o, &a, "-m", "y.gguf", "--parallel=3", "-v"), FLAGS_CONTINUE);
  assert_string_equal(o.model, "y.gguf");
  assert_int_equal(o.max_num_seqs, 3);
  assert_true(o.verbose);
  flag_args_free(&a);
  assert_int_equal(PARSE(&o, &a, "-mz.gguf", "--max_num_seqs", "2"), FLAGS_CONTINUE); /* vLLM's underscores */
  assert_string_equal(o.model, "z.gguf");
  assert_int_equal(o.max_num_seqs, 2);
  flag_args_free(&a);
}

static void test_positionals_anywhere_and_double_dash_ends_flags(void **state) {
  (void)state;
  struct opts o;
  struct flag_args a;
  assert_int_equal(PARSE(&o, &a, "MODEL", "--timeout-ms", "-1", "PROMPT"), FLAGS_CONTINUE);
  assert_int_equal(o.timeout_ms, -1); /* a negative value is a value, not a flag */
  assert_int_equal(a.num_positional, 2);
  assert_string_equal(a.positional[0], "MODEL");
  assert_string_equal(a.positional[1], "PROMPT");
  flag_args_free(&a);
  assert_int_equal(PARSE(&o, &a, "-v", "--", "-5 is a number", "--stop"), FLAGS_CONTINUE);
  assert_int_equal(a.num_positional, 2);
  assert_string_equal(a.positional[0], "-5 is a number");
  assert_string_equal(a.positional[1], "--stop");
  assert_int_equal(o.stops.num, 0);
  flag_args_free(&a);
  assert_int_equal(PARSE(&o, &a, "a", "b", "c"), 2); /* at most 2 */
  flag_args_free(&a);
}

static void test_greedy_list_takes_words_until_the_next_flag(void **state) {
  (void)state;
  struct opts o;
  struct flag_args a;
  assert_int_equal(PARSE(&o, &a, "MODEL", "--served-model-name", "a", "b", "-v", "P", "--stop", "x", "--stop=y"),
                   FLAGS_CONTINUE);
  assert_int_equal(o.names.num, 2);
  assert_string_equal(o.names.items[0], "a");
  assert_string_equal(o.names.items[1], "b");
  assert_int_equal(a.num_positional, 2); /* P is no name: -v came between */
  assert_string_equal(a.positional[1], "P");
  assert_int_equal(o.stops.num, 2);
  assert_string_equal(o.stops.items[1], "y");
  flag_args_free(&a);
}

static void test_switch_pairs_last_one_wins(void **state) {
  (void)state;
  struct opts o;
  struct flag_args a;
  assert_int_equal(PARSE(&o, &a, "--no-enable-prefix-caching"), FLAGS_CONTINUE);
  assert_false(o.prefix_caching);
  flag_args_free(&a);
  assert_int_equal(PARSE(&o, &a, "--no-prefix-caching", "--enable-prefix-caching"), FLAGS_CONTINUE);
  assert_true(o.prefix_caching);
  flag_args_free(&a);
}

static void test_usage_errors_exit_2(void **state) {
  (void)state;
  struct opts o;
  struct flag_args a;
  const int rcs[] = {
      PARSE(&o, &a, "--bogus"),
      (flag_args_free(&a), PARSE(&o, &a, "--timeout-ms")),            /* no value */
      (flag_args_free(&a), PARSE(&o, &a, "--timeout-ms=x")),          /* not a number */
      (flag_args_free(&a), PARSE(&o, &a, "--verbose=yes")),           /* a switch takes none */
      (flag_args_free(&a), PARSE(&o, &a, "--max-num-seqs", "2000")),  /* the setter's range */
      (flag_args_free(&a), PARSE(&o, &a, "--temperature", "2.5")),    /* the table's range */
      (flag_args_free(&a), PARSE(&o, &a, "-x")),                      /* unknown short */
      (flag_args_free(&a), PARSE(&o, &a, "--config", "/nonexistent/x.yaml")),
  };
  flag_args_free(&a);
  for (size_t i = 0; i < sizeof rcs / sizeof rcs[0]; i++) assert_int_equal(rcs[i], 2);
}

static void test_help_exits_0(void **state) {
  (void)state;
  struct opts o;
  struct flag_args a;
  FILE *saved = stdout;
  stdout = fopen("/dev/null", "w");
  int rc = PARSE(&o, &a, "--timeout-ms", "3", "--help", "--bogus");
  fclose(stdout);
  stdout = saved;
  assert_int_equal(rc, 0);
  flag_args_free(&a);
}

static char *write_config(const char *text) {
  char *path = strdup("/tmp/llmbus-test-flags-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

static void test_yaml_config_gives_flags_and_the_command_line_overrides(void **state) {
  (void)state;
  char *path = write_config("model: from-config.gguf\n"
                            "max_num_seqs: 16\n"
                            "timeout-ms: 7\n"
                            "enable-prefix-caching: false\n"
                            "verbose: true\n"
                            "served-model-name: [a, b]\n"
                            "speculative-config: {method: ngram, num_speculative_tokens: 3}\n");
  struct opts o;
  struct flag_args a;
  assert_int_equal(PARSE(&o, &a, "--config", path, "--timeout-ms", "9"), FLAGS_CONTINUE);
  assert_string_equal(o.model, "from-config.gguf");
  assert_int_equal(o.max_num_seqs, 16);
  assert_int_equal(o.timeout_ms, 9); /* the command line wins */
  assert_false(o.prefix_caching);
  assert_true(o.verbose);
  assert_int_equal(o.names.num, 2);
  assert_string_equal(o.names.items[1], "b");
  assert_string_equal(o.speculative, "{\"method\":\"ngram\",\"num_speculative_tokens\":3}");
  flag_args_free(&a);
  unlink(path);
  free(path);
}

static void test_yaml_config_unknown_key_or_bad_shape_is_a_usage_error(void **state) {
  (void)state;
  const char *bad[] = {"no-such-flag: 1\n", "- a list\n- not a mapping\n", "verbose: maybe\n",
                       "timeout-ms: [1, 2]\n", "model: [unclosed\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *path = write_config(bad[i]);
    struct opts o;
    struct flag_args a;
    assert_int_equal(PARSE(&o, &a, "--config=x", "--config", path), 2);
    flag_args_free(&a);
    unlink(path);
    free(path);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_value_forms_equals_space_short_and_single_dash_long),
      cmocka_unit_test(test_positionals_anywhere_and_double_dash_ends_flags),
      cmocka_unit_test(test_greedy_list_takes_words_until_the_next_flag),
      cmocka_unit_test(test_switch_pairs_last_one_wins),
      cmocka_unit_test(test_usage_errors_exit_2),
      cmocka_unit_test(test_help_exits_0),
      cmocka_unit_test(test_yaml_config_gives_flags_and_the_command_line_overrides),
      cmocka_unit_test(test_yaml_config_unknown_key_or_bad_shape_is_a_usage_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
