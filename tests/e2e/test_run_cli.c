/* `llmbus run` (what `make run` does): the embedded stack starts, answers one greedy prompt
 * through every actor, and shuts down cleanly: exit 0, an answer on stdout, and every actor
 * leaves on SIGTERM by itself — the supervisor logs `child_killed` when one has to be
 * SIGKILLed after its grace period (a scheduler stuck waiting for the reply of a step still in
 * flight at shutdown did exactly that, after 35 s). No error-level log line either: a step
 * abandoned at shutdown is not an error.
 *
 * Usage: test_run_cli MODEL.gguf (ctest passes LLB_DEFAULT_MODEL; LLMBUS_BUILD_DIR locates
 * cmd/llmbus). A missing model skips (77) locally and fails under CI=true. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/e2e/stack.h"

static const char *g_model;

/* Runs argv, stdout and stderr into out [cap]; returns the wait status. */
static int run_capture(char *const argv[], char *out, size_t cap) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  for (;;) {
    const ssize_t got = read(fds[0], out + len, cap - 1 - len);
    if (got <= 0) break;
    len += (size_t)got;
    if (len == cap - 1) { /* keep draining so the child never blocks on a full pipe */
      char sink[4096];
      while (read(fds[0], sink, sizeof sink) > 0) {
      }
      break;
    }
  }
  out[len] = '\0';
  close(fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static void test_run_answers_and_every_actor_exits_on_sigterm(void **state) {
  (void)state;
  char bin[PATH_MAX];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", getenv("LLMBUS_BUILD_DIR"));
  char *const argv[] = {bin, "run", "--model", (char *)g_model, "--temperature", "0", "--max-tokens", "24",
                        "Name three primary colors.", NULL};
  static char out[1 << 20];
  const int status = run_capture(argv, out, sizeof out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || strstr(out, "child_killed") ||
      strstr(out, "level=error"))
    fprintf(stderr, "llmbus run output:\n%s\n", out);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_null(strstr(out, "child_killed"));
  assert_null(strstr(out, "level=error"));
  /* the greedy answer names the colours (the model says "Red, Blue, Yellow" in some form) */
  assert_non_null(strstr(out, "Red"));
}

int main(int argc, char **argv) {
  g_model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_answers_and_every_actor_exits_on_sigterm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
