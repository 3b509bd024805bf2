/* cmd/supervisor/run_dir: the private directories of a serve run (credentials, hash key, the
 * JetStream store) are 0700 with an owner stamp; the next serve removes those of a run whose
 * process is gone (a SIGKILLed serve removes nothing itself) and nothing else: not a live run's,
 * not one without a stamp, not a link, not another kind; --state-dir is made 0700. Runs with
 * TMPDIR set to a directory of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd/supervisor/run_dir.h"

static char tmp[PATH_MAX];

static bool exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* A run directory made by a child process that then dies (as a SIGKILLed serve), with a file in
 * it like the NATS passwords; its path into out. */
static void dead_runs_dir(const char *kind, char *out, size_t cap) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char path[PATH_MAX];
    if (run_dir_create(kind, path, sizeof path) != LLB_STATUS_OK) _exit(1);
    char secret[PATH_MAX + 32];
    snprintf(secret, sizeof secret, "%s/tenant-a.password", path);
    FILE *f = fopen(secret, "w");
    if (f) fputs("0123456789abcdef\n", f), fclose(f);
    if (write(p[1], path, strlen(path) + 1) < 0) _exit(1);
    _exit(0);
  }
  close(p[1]);
  ssize_t n = read(p[0], out, cap - 1);
  close(p[0]);
  assert_true(n > 0);
  out[n] = '\0';
  int status = 0;
  waitpid(pid, &status, 0);
}

static void test_run_dirs_are_private_and_stamped(void **state) {
  (void)state;
  char path[PATH_MAX];
  assert_int_equal(run_dir_create("serve", path, sizeof path), LLB_STATUS_OK);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  char stamp[PATH_MAX + 16];
  snprintf(stamp, sizeof stamp, "%s/" RUN_DIR_OWNER_FILE, path);
  FILE *f = fopen(stamp, "r");
  assert_non_null(f);
  int pid = 0;
  unsigned long long start = 0;
  assert_int_equal(fscanf(f, "%d %llu", &pid, &start), 2);
  fclose(f);
  assert_int_equal(pid, (int)getpid());
  assert_true(run_dir_owner_alive(pid, start));
  assert_false(run_dir_owner_alive(pid, start + 1)); /* a reused pid is another process */
  run_dir_remove(path);
  assert_false(exists(path));
}

static void test_the_next_serve_removes_the_dirs_of_dead_runs_only(void **state) {
  (void)state;
  char dead_serve[PATH_MAX], dead_auth[PATH_MAX], dead_other[PATH_MAX], live[PATH_MAX], unstamped[PATH_MAX + 32],
      link[PATH_MAX + 32];
  dead_runs_dir("serve", dead_serve, sizeof dead_serve);
  dead_runs_dir("nats-auth", dead_auth, sizeof dead_auth);
  dead_runs_dir("other", dead_other, sizeof dead_other);
  assert_int_equal(run_dir_create("hash-key", live, sizeof live), LLB_STATUS_OK);
  snprintf(unstamped, sizeof unstamped, "%s/llmbus-serve-nostamp", tmp);
  assert_int_equal(mkdir(unstamped, 0700), 0);
  snprintf(link, sizeof link, "%s/llmbus-serve-link", tmp);
  assert_int_equal(symlink(dead_other, link), 0);
  assert_true(exists(dead_serve) && exists(dead_auth));
  assert_int_equal(run_dir_sweep_all_stale(), 2);
  assert_false(exists(dead_serve));
  assert_false(exists(dead_auth));
  assert_true(exists(dead_other)); /* a kind serve does not make */
  assert_true(exists(live));       /* this process runs */
  assert_true(exists(unstamped));  /* no stamp: not ours to judge */
  assert_true(exists(link));       /* a link is never followed */
  run_dir_remove(live);
  run_dir_remove(dead_other);
  rmdir(unstamped);
  unlink(link);
}

static void test_state_dir_is_made_private(void **state) {
  (void)state;
  char dir[PATH_MAX + 16], link[PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/state", tmp);
  assert_int_equal(run_dir_prepare_private(dir), LLB_STATUS_OK); /* created */
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  assert_int_equal(chmod(dir, 0755), 0); /* an existing one, open to others: tightened */
  assert_int_equal(run_dir_prepare_private(dir), LLB_STATUS_OK);
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  snprintf(link, sizeof link, "%s/state-link", tmp);
  assert_int_equal(symlink(dir, link), 0);
  assert_int_equal(run_dir_prepare_private(link), LLB_STATUS_IO); /* a link is refused */
  unlink(link);
  rmdir(dir);
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/llmbus-test-run-dir-XXXXXX");
  if (!mkdtemp(tmp)) return 1;
  setenv("TMPDIR", tmp, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_dirs_are_private_and_stamped),
      cmocka_unit_test(test_the_next_serve_removes_the_dirs_of_dead_runs_only),
      cmocka_unit_test(test_state_dir_is_made_private),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rmdir(tmp);
  return rc;
}
