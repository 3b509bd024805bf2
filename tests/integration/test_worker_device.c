/* llmbus-gpu-worker --device: runs the real binary (argv[1]) against an embedded nats-server.
 *   - --device cuda without a usable CUDA device (or in a build without CUDA) exits 1 with
 *     exactly one start_failed log line that names the CUDA error, and no crash;
 *   - --device tpu and --gpu-memory-utilization outside (0, 1] are usage errors (exit 2);
 *   - --device cpu of this build starts on this machine and drains on SIGTERM (exit 0), i.e.
 *     it touches no CUDA, and maps no CUDA library while it runs (a CUDA build loads its
 *     runner module, and with it cudart and cuBLAS, only for --device cuda).
 * Exits 77 (skipped) when a CUDA device is present (the cuda worker would then start) or no
 * nats-server binary is installed. The cpu case is skipped without the default model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/nats_test_server.h"
#ifdef LLB_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

static const char *g_worker;             /* path of llmbus-gpu-worker */
static struct nats_test_server g_srv;    /* started in main */

/* What one worker run printed and how it ended. */
struct run_result {
  char out[65536]; /* stdout + stderr, NUL-terminated (truncated past the size) */
  size_t len;
  int status;      /* waitpid status */
  bool timed_out;  /* killed after the deadline */
  bool mapped_cuda; /* when stop_after appeared: a CUDA library was in its /proc/PID/maps */
};

/* Whether process pid maps a CUDA runtime or cuBLAS library. */
static bool maps_cuda(pid_t pid) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    found = strstr(line, "libcudart") || strstr(line, "libcublas") || strstr(line, "libllmbus_runner_cuda");
  fclose(f);
  return found;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the worker with args (NULL-terminated, without argv[0]). When stop_after is not NULL,
 * sends SIGTERM once that text appeared in the output. Gives up (SIGKILL) after timeout_ms. */
static void run_worker(const char *const *args, const char *stop_after, int timeout_ms, struct run_result *r) {
  memset(r, 0, sizeof(*r));
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    const char *argv[32] = {g_worker};
    int n = 1;
    for (const char *const *a = args; *a && n < 31; a++) argv[n++] = *a;
    argv[n] = NULL;
    execv(g_worker, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  const int64_t deadline = now_ms() + timeout_ms;
  bool stopped = false;
  for (;;) {
    const int64_t left = deadline - now_ms();
    if (left <= 0) {
      kill(pid, SIGKILL);
      r->timed_out = true;
      break;
    }
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    const int pr = poll(&p, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    char buf[4096];
    const ssize_t got = read(fds[0], buf, sizeof buf);
    if (got <= 0) break; /* EOF: the worker (and every holder of the pipe) is gone */
    const size_t room = sizeof(r->out) - 1 - r->len;
    const size_t take = (size_t)got < room ? (size_t)got : room;
    memcpy(r->out + r->len, buf, take);
    r->len += take;
    r->out[r->len] = '\0';
    if (stop_after && !stopped && strstr(r->out, stop_after)) {
      r->mapped_cuda = maps_cuda(pid);
      kill(pid, SIGTERM);
      stopped = true;
    }
  }
  close(fds[0]);
  assert_int_equal(waitpid(pid, &r->status, 0), pid);
  if (r->timed_out || !WIFEXITED(r->status)) fprintf(stderr, "worker output:\n%s\n", r->out);
}

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static void cuda_without_a_device_exits_1_with_one_line_naming_the_cuda_error(void **state) {
  (void)state;
  const char *args[] = {"--device", "cuda", "--nats", g_srv.url, "--model", LLB_DEFAULT_MODEL, NULL};
  struct run_result r;
  run_worker(args, NULL, 60000, &r);
  assert_false(r.timed_out);
  assert_true(WIFEXITED(r.status));
  if (WEXITSTATUS(r.status) != 1) fprintf(stderr, "worker output:\n%s\n", r.out);
  assert_int_equal(WEXITSTATUS(r.status), 1);
  assert_int_equal(count_lines_with(r.out, "start_failed"), 1);
#ifdef LLB_HAVE_CUDA
  /* cuda_device_probe's reason: "cudaGetDeviceCount: ..." or "0 devices" */
  assert_non_null(strstr(r.out, "no usable CUDA device"));
#else
  assert_non_null(strstr(r.out, "built without CUDA"));
#endif
  assert_null(strstr(r.out, "AddressSanitizer"));
  assert_null(strstr(r.out, "runtime error"));
  assert_null(strstr(r.out, "gpu_worker_ready")); /* nothing was loaded */
}

static void an_unknown_device_is_a_usage_error(void **state) {
  (void)state;
  const char *args[] = {"--device", "tpu", "--nats", g_srv.url, NULL};
  struct run_result r;
  run_worker(args, NULL, 30000, &r);
  assert_true(WIFEXITED(r.status));
  assert_int_equal(WEXITSTATUS(r.status), 2);
  assert_non_null(strstr(r.out, "--device tpu"));
}

static void gpu_memory_utilization_outside_0_1_is_a_usage_error(void **state) {
  (void)state;
  const char *bad[] = {"0", "1.5", "-0.2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *args[] = {"--device", "cuda", "--gpu-memory-utilization", bad[i], "--nats", g_srv.url, NULL};
    struct run_result r;
    run_worker(args, NULL, 30000, &r);
    assert_true(WIFEXITED(r.status));
    assert_int_equal(WEXITSTATUS(r.status), 2);
    assert_non_null(strstr(r.out, "--gpu-memory-utilization"));
  }
}

static void num_blocks_0_is_a_usage_error_on_the_cpu(void **state) {
  (void)state;
  const char *args[] = {"--device", "cpu", "--num-blocks", "0", "--nats", g_srv.url, NULL};
  struct run_result r;
  run_worker(args, NULL, 30000, &r);
  assert_true(WIFEXITED(r.status));
  assert_int_equal(WEXITSTATUS(r.status), 2);
  assert_non_null(strstr(r.out, "--num-blocks 0"));
}

static void a_cpu_worker_starts_and_drains_without_a_gpu(void **state) {
  (void)state;
  if (access(LLB_DEFAULT_MODEL, R_OK) != 0) {
    fprintf(stderr, "no default model %s (ops/fetch-model.sh)\n", LLB_DEFAULT_MODEL);
    skip();
  }
  const char *args[] = {"--device", "cpu", "--nats", g_srv.url, "--num-blocks", "64", "--threads", "1",
                        "--max-num-batched-tokens", "64", NULL};
  struct run_result r;
  run_worker(args, "gpu_worker_subscribed", 90000, &r);
  assert_false(r.timed_out);
  assert_non_null(strstr(r.out, "device=cpu"));
  assert_false(r.mapped_cuda); /* the CUDA runner module is for --device cuda only */
  assert_true(WIFEXITED(r.status));
  if (WEXITSTATUS(r.status) != 0) fprintf(stderr, "worker output:\n%s\n", r.out);
  assert_int_equal(WEXITSTATUS(r.status), 0);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH/llmbus-gpu-worker\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
#ifdef LLB_HAVE_CUDA
  char reason[256];
  if (cuda_device_probe(reason, sizeof reason) == LLB_STATUS_OK) {
    fprintf(stderr, "a CUDA device is present: --device cuda would start; skipped\n");
    return 77;
  }
#endif
  if (!nats_test_server_bin()) {
    fprintf(stderr, "no nats-server binary; skipped\n");
    return 77;
  }
  if (nats_test_server_start(&g_srv, 0, false) != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cuda_without_a_device_exits_1_with_one_line_naming_the_cuda_error),
      cmocka_unit_test(an_unknown_device_is_a_usage_error),
      cmocka_unit_test(gpu_memory_utilization_outside_0_1_is_a_usage_error),
      cmocka_unit_test(num_blocks_0_is_a_usage_error_on_the_cpu),
      cmocka_unit_test(a_cpu_worker_starts_and_drains_without_a_gpu),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  nats_test_server_stop(&g_srv);
  return failed == 0 ? 0 : 1;
}
