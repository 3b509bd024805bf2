/* llmbus-bench serve against a tiny fake OpenAI server in this process (loopback, a thread per
 * connection): the streamed client's TTFT / ITL / usage, HTTP errors, and the binary's JSON
 * result under a concurrency cap. Bounded: a few dozen short streams. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cmd/bench/bench_http.h"

#define TOKEN_GAP_MS 3

static int listen_fd = -1;
static int port;
static atomic_int in_flight, max_in_flight;
static atomic_int completions[101]; /* finished streams by max_tokens */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void send_str(int fd, const char *s) { (void)!send(fd, s, strlen(s), MSG_NOSIGNAL); }

/* One SSE event as one HTTP chunk. */
static void send_event(int fd, const char *json) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "data: %s\n\n", json);
  char head[32];
  snprintf(head, sizeof head, "%x\r\n", n);
  send_str(fd, head);
  send_str(fd, buf);
  send_str(fd, "\r\n");
}

static void *conn_thread(void *arg) {
  int fd = (int)(intptr_t)arg;
  char req[65536];
  size_t len = 0;
  char *body = NULL;
  long clen = 0;
  while (len < sizeof req - 1) {
    ssize_t r = recv(fd, req + len, sizeof req - 1 - len, 0);
    if (r <= 0) break;
    len += (size_t)r;
    req[len] = '\0';
    char *end = strstr(req, "\r\n\r\n");
    if (!end) continue;
    char *cl = strcasestr(req, "content-length:");
    clen = cl ? strtol(cl + 15, NULL, 10) : 0;
    if (len >= (size_t)(end + 4 - req) + (size_t)clen) {
      body = end + 4;
      break;
    }
  }
  if (!body) goto out;
  if (strncmp(req, "GET /v1/models ", 15) == 0) {
    const char *j = "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"object\":\"model\"}]}";
    char head[256];
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             strlen(j));
    send_str(fd, head);
    send_str(fd, j);
    goto out;
  }
  json_error_t jerr;
  json_t *b = json_loadb(body, (size_t)clen, 0, &jerr);
  json_int_t max_tokens = json_integer_value(json_object_get(b, "max_tokens"));
  const char *model = json_string_value(json_object_get(b, "model"));
  bool good = strncmp(req, "POST /v1/completions ", 21) == 0 && json_is_true(json_object_get(b, "stream")) &&
              json_is_true(json_object_get(json_object_get(b, "stream_options"), "include_usage")) &&
              model && !strcmp(model, "fake") && max_tokens >= 1 &&
              max_tokens <= 100;
  json_decref(b);
  if (!good) {
    const char *j = "{\"error\":{\"message\":\"bad request\",\"code\":400}}";
    char head[256];
    snprintf(head, sizeof head, "HTTP/1.1 400 Bad Request\r\nContent-Length: %zu\r\n\r\n", strlen(j));
    send_str(fd, head);
    send_str(fd, j);
    goto out;
  }
  int now = atomic_fetch_add(&in_flight, 1) + 1;
  for (int m = atomic_load(&max_in_flight); now > m && !atomic_compare_exchange_weak(&max_in_flight, &m, now);) {}
  send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (json_int_t k = 0; k < max_tokens; k++) {
    sleep_ms(TOKEN_GAP_MS);
    send_event(fd, "{\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\"}],\"usage\":null}");
  }
  send_event(fd, "{\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":99}}");
  /* Counted out before [DONE]: the client frees its slot only after reading it. */
  atomic_fetch_sub(&in_flight, 1);
  atomic_fetch_add(&completions[max_tokens], 1);
  send_event(fd, "[DONE]");
  send_str(fd, "0\r\n\r\n");
out:
  close(fd);
  return NULL;
}

static void *accept_thread(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept(listen_fd, NULL, NULL);
    if (fd < 0) return NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, conn_thread, (void *)(intptr_t)fd) == 0) pthread_detach(t);
    else close(fd);
  }
}

static int setup(void **state) {
  (void)state;
  listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(listen_fd, 64) != 0 ||
      getsockname(listen_fd, (struct sockaddr *)&a, &al) != 0)
    return -1;
  port = ntohs(a.sin_port);
  pthread_t t;
  if (pthread_create(&t, NULL, accept_thread, NULL) != 0) return -1;
  pthread_detach(t);
  return 0;
}

static void stream_times_tokens_and_reads_usage(void **state) {
  (void)state;
  struct bench_target t;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
  assert_int_equal(bench_target_parse(url, &t), LLB_STATUS_OK);
  const char *body = "{\"model\":\"fake\",\"prompt\":\"hi\",\"max_tokens\":5,\"stream\":true,"
                     "\"stream_options\":{\"include_usage\":true}}";
  struct bench_result r;
  bench_http_stream(&t, "/v1/completions", body, strlen(body), 10, &r);
  assert_true(r.ok);
  assert_int_equal(r.text_chunks, 5);
  assert_int_equal(r.output_tokens, 99); /* usage wins over the chunk count */
  assert_int_equal(r.prompt_tokens, 11);
  assert_int_equal(r.num_itl, 4);
  /* The server sleeps before each token: the stream lasts at least 5 gaps (a loaded machine
   * may deliver two events in one read, so single gaps have no lower bound). */
  double sum = 0;
  for (size_t i = 0; i < r.num_itl; i++) sum += r.itl[i];
  assert_true(r.ttft >= TOKEN_GAP_MS * 0.99e-3);
  assert_true(r.latency >= 5 * TOKEN_GAP_MS * 0.99e-3);
  assert_true(fabs(r.ttft + sum - r.latency) < 0.05); /* the last event after the last text is [DONE]/usage */
  bench_result_free(&r);
}

static void http_error_is_reported_with_status(void **state) {
  (void)state;
  struct bench_target t;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  assert_int_equal(bench_target_parse(url, &t), LLB_STATUS_OK);
  const char *body = "{\"model\":\"other\",\"prompt\":\"hi\",\"max_tokens\":5,\"stream\":true}";
  struct bench_result r;
  bench_http_stream(&t, "/v1/completions", body, strlen(body), 10, &r);
  assert_false(r.ok);
  assert_non_null(strstr(r.error, "HTTP 400"));
  bench_result_free(&r);
  assert_int_equal(bench_target_parse("https://x:1", &t), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(bench_target_parse("http://x:1/v1", &t), LLB_STATUS_INVALID_ARGUMENT);
}

static void binary_reports_json_under_a_concurrency_cap(void **state) {
  (void)state;
  const char *dir = getenv("LLMBUS_BUILD_DIR");
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "%s/cmd/llmbus-bench serve --base-url http://127.0.0.1:%d --num-prompts 12 --max-concurrency 3 "
           "--input-len 10 --output-len 6 --seed 1 --warmup 1 --no-progress --json",
           dir ? dir : ".", port);
  atomic_store(&max_in_flight, 0);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[8192];
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  json_error_t jerr;
  json_t *j = json_loads(out, 0, &jerr);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "completed")), 12);
  assert_int_equal(json_integer_value(json_object_get(j, "failed")), 0);
  assert_int_equal(json_integer_value(json_object_get(j, "total_output_tokens")), 12 * 99);
  assert_int_equal(json_integer_value(json_object_get(j, "total_input_tokens")), 12 * 11);
  assert_string_equal(json_string_value(json_object_get(j, "model_id")), "fake");
  assert_true(json_real_value(json_object_get(j, "mean_e2el_ms")) >= 6 * TOKEN_GAP_MS * 0.99);
  assert_true(json_real_value(json_object_get(j, "mean_itl_ms")) > 0);
  assert_true(json_real_value(json_object_get(j, "median_ttft_ms")) > 0);
  /* the client's own CPU and wake-ups over the run: each request's thread blocked in recv
   * between tokens 3 ms apart (at least one wake-up a request) */
  assert_true(json_is_real(json_object_get(j, "client_cpu_s")));
  assert_true(json_real_value(json_object_get(j, "client_cpu_s")) >= 0);
  assert_true(json_integer_value(json_object_get(j, "client_voluntary_ctxt_switches")) >= 12);
  /* this process is the server: its tree's memory is reported */
  assert_true(json_integer_value(json_object_get(j, "stack_procs")) >= 1);
  assert_true(json_real_value(json_object_get(j, "stack_peak_pss_mib")) > 0);
  assert_true(json_real_value(json_object_get(j, "stack_peak_mib")) > 0);
  json_decref(j);
  assert_int_equal(atomic_load(&completions[6]), 12);
  assert_int_equal(atomic_load(&completions[8]), 1); /* the warm-up: a prompt of its own, 8 tokens */
  assert_true(atomic_load(&max_in_flight) <= 3);
  assert_true(atomic_load(&max_in_flight) >= 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(stream_times_tokens_and_reads_usage),
      cmocka_unit_test(http_error_is_reported_with_status),
      cmocka_unit_test(binary_reports_json_under_a_concurrency_cap),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
