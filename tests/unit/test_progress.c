/* base/progress.h: the progress line's text (percent, counts, elapsed, ETA from the rate so
 * far), and that nothing is drawn when stderr is not a terminal (ctest's is a pipe). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "base/progress.h"

static void test_progress_line_shows_percent_counts_elapsed_and_eta(void **state) {
  (void)state;
  struct llb_progress p = {.label = "perplexity", .unit = "chunks", .total = 14};
  char line[256];
  llb_progress_format(&p, 4, 20000000000LL, line, sizeof line); /* 4 of 14 in 20 s: 50 s to go */
  assert_string_equal(line, "perplexity  29%  4/14 chunks  elapsed 0:20  ETA 0:50");
  llb_progress_format(&p, 0, 1000000000LL, line, sizeof line); /* no rate yet: no ETA */
  assert_string_equal(line, "perplexity   0%  0/14 chunks  elapsed 0:01  ETA ?");
  struct llb_progress big = {.label = "packing weights", .unit = "MiB", .total = 4000};
  llb_progress_format(&big, 1000, 1200000000000LL, line, sizeof line); /* 20 min for a quarter */
  assert_string_equal(line, "packing weights  25%  1000/4000 MiB  elapsed 20:00  ETA 1:00:00");
  llb_progress_format(&big, 5000, 1000000000LL, line, sizeof line); /* past the total: 100% */
  assert_non_null(strstr(line, "100%"));
}

static void test_progress_draws_nothing_when_stderr_is_not_a_terminal(void **state) {
  (void)state;
  struct llb_progress p;
  llb_progress_begin(&p, "work", 10, "items");
  assert_false(p.tty); /* ctest hands stderr a pipe */
  p.start_ns -= 2 * p.quiet_ns + 1; /* as if long under way */
  llb_progress_update(&p, 5);
  assert_false(p.drawn);
  llb_progress_end(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_progress_line_shows_percent_counts_elapsed_and_eta),
      cmocka_unit_test(test_progress_draws_nothing_when_stderr_is_not_a_terminal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
