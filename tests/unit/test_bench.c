/* llmbus-bench pure parts: percentiles, seeded Poisson arrivals, chunked + SSE decoding, chunk
 * parse, datasets (random with and without the real tokenizer, shared prefix, JSONL), /proc
 * memory of a process tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd/bench/bench.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

static void percentile_interpolates_like_numpy(void **state) {
  (void)state;
  const double v[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  assert_true(fabs(bench_percentile(v, 10, 50) - 5.5) < 1e-12);  /* numpy.percentile(1..10, 50) */
  assert_true(fabs(bench_percentile(v, 10, 99) - 9.91) < 1e-12); /* 9 + 0.91 * 1 */
  assert_true(fabs(bench_percentile(v, 10, 25) - 3.25) < 1e-12);
  assert_true(bench_percentile(v, 10, 0) == 1 && bench_percentile(v, 10, 100) == 10);
  const double one = 7;
  assert_true(bench_percentile(&one, 1, 99) == 7);
  assert_true(bench_percentile(v, 0, 50) == 0);
}

static void dist_sorts_and_summarizes(void **state) {
  (void)state;
  double v[] = {9, 1, 5, 3, 7};
  struct bench_dist d;
  bench_dist_of(v, 5, &d);
  assert_true(v[0] == 1 && v[4] == 9);
  assert_true(d.mean == 5 && d.median == 5 && d.n == 5);
  assert_true(fabs(d.std - sqrt(8.0)) < 1e-12);
  assert_true(fabs(d.p99 - (7 + 0.96 * 2)) < 1e-12);
}

static void poisson_arrivals_are_seeded_and_have_the_rate(void **state) {
  (void)state;
  enum { N = 20000 };
  double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
  assert_non_null(a);
  bench_poisson_arrivals(42, 4.0, N, a);
  bench_poisson_arrivals(42, 4.0, N, b);
  bench_poisson_arrivals(43, 4.0, N, c);
  assert_memory_equal(a, b, N * sizeof *a);
  assert_true(memcmp(a, c, N * sizeof *a) != 0);
  for (int i = 1; i < N; i++) assert_true(a[i] >= a[i - 1]);
  /* mean gap 1/4 s: N gaps take about N/4 s (5000 +- 3 sigma = 3 * sqrt(N) / 4 ~ 106) */
  assert_true(fabs(a[N - 1] - N / 4.0) < 110);
  /* exponential gaps: P(gap > mean) = 1/e */
  int over = a[0] > 0.25;
  for (int i = 1; i < N; i++) over += a[i] - a[i - 1] > 0.25;
  assert_true(fabs((double)over / N - exp(-1.0)) < 0.02);
  bench_poisson_arrivals(1, INFINITY, 5, c);
  for (int i = 0; i < 5; i++) assert_true(c[i] == 0);
  free(a);
  free(b);
  free(c);
}

static void rng_range_stays_in_bounds(void **state) {
  (void)state;
  struct bench_rng r;
  bench_rng_seed(&r, 7);
  int seen[5] = {0};
  for (int i = 0; i < 1000; i++) {
    int64_t x = bench_rng_range(&r, 3, 7);
    assert_true(x >= 3 && x <= 7);
    seen[x - 3]++;
  }
  for (int i = 0; i < 5; i++) assert_true(seen[i] > 100);
}

static void chunked_decoder_handles_splits_and_extensions(void **state) {
  (void)state;
  const char *wire = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\nGARBAGE";
  /* feed in every split position: the output must be the same */
  for (size_t cut = 0; cut <= strlen(wire); cut++) {
    struct bench_chunked c;
    bench_chunked_init(&c);
    char a[128], out[128];
    size_t n = 0;
    memcpy(a, wire, cut);
    n += bench_chunked_feed(&c, a, cut);
    memcpy(out, a, n);
    char b[128];
    size_t rest = strlen(wire) - cut;
    memcpy(b, wire + cut, rest);
    size_t m = bench_chunked_feed(&c, b, rest);
    memcpy(out + n, b, m);
    n += m;
    out[n] = '\0';
    assert_string_equal(out, "hello, world");
    assert_true(c.done);
    assert_false(c.error);
  }
  struct bench_chunked c;
  bench_chunked_init(&c);
  char bad[] = "zz\r\n";
  bench_chunked_feed(&c, bad, 4);
  assert_true(c.error);
}

struct events {
  char got[8][64];
  int n;
};

static void collect(void *user, const char *data, size_t len) {
  struct events *e = user;
  if (e->n < 8) snprintf(e->got[e->n++], 64, "%.*s", (int)len, data);
}

static void sse_parser_splits_events_at_blank_lines(void **state) {
  (void)state;
  const char *wire = ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata: lines\n\ndata: [DONE]\r\r";
  for (size_t cut = 0; cut <= strlen(wire); cut++) {
    struct events e = {0};
    struct bench_sse s;
    bench_sse_init(&s, collect, &e);
    assert_int_equal(bench_sse_feed(&s, wire, cut), LLB_STATUS_OK);
    assert_int_equal(bench_sse_feed(&s, wire + cut, strlen(wire) - cut), LLB_STATUS_OK);
    bench_sse_free(&s);
    assert_int_equal(e.n, 3);
    assert_string_equal(e.got[0], "{\"a\":1}");
    assert_string_equal(e.got[1], "two\nlines");
    assert_string_equal(e.got[2], "[DONE]");
  }
}

static void chunk_parse_reads_text_usage_and_errors(void **state) {
  (void)state;
  struct bench_chunk_info ci;
  const char *c1 = "{\"choices\":[{\"index\":0,\"text\":\"Hello\",\"finish_reason\":null}],\"usage\":null}";
  assert_int_equal(bench_parse_chunk(c1, strlen(c1), &ci), LLB_STATUS_OK);
  assert_true(ci.has_choices && ci.text_len == 5 && ci.completion_tokens == -1 && !ci.done);
  const char *c2 = "{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34,\"total_tokens\":46}}";
  assert_int_equal(bench_parse_chunk(c2, strlen(c2), &ci), LLB_STATUS_OK);
  assert_true(!ci.has_choices && ci.prompt_tokens == 12 && ci.completion_tokens == 34);
  const char *c3 = "{\"choices\":[{\"delta\":{\"content\":\"abc\"}}]}";
  assert_int_equal(bench_parse_chunk(c3, strlen(c3), &ci), LLB_STATUS_OK);
  assert_true(ci.text_len == 3);
  const char *c4 = "{\"error\":{\"message\":\"queue full\",\"code\":429}}";
  assert_int_equal(bench_parse_chunk(c4, strlen(c4), &ci), LLB_STATUS_OK);
  assert_string_equal(ci.error, "queue full");
  assert_int_equal(bench_parse_chunk("[DONE] ", 7, &ci), LLB_STATUS_OK);
  assert_true(ci.done);
  assert_int_equal(bench_parse_chunk("nope", 4, &ci), LLB_STATUS_MALFORMED);
}

static void chat_endpoint_body_sends_messages_not_prompt(void **state) {
  (void)state;
  struct bench_request_spec spec = {.model = "m", .text = "Hi there", .max_tokens = 7, .temperature = 0,
                                    .ignore_eos = true};
  char *body = bench_request_body("/v1/chat/completions", &spec);
  assert_non_null(body);
  json_error_t jerr;
  json_t *j = json_loads(body, 0, &jerr);
  assert_non_null(j);
  assert_null(json_object_get(j, "prompt"));
  json_t *m0 = json_array_get(json_object_get(j, "messages"), 0);
  assert_string_equal(json_string_value(json_object_get(m0, "role")), "user");
  assert_string_equal(json_string_value(json_object_get(m0, "content")), "Hi there");
  assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 7);
  assert_int_equal(json_integer_value(json_object_get(j, "min_tokens")), 7);
  assert_true(json_is_true(json_object_get(j, "stream")));
  json_decref(j);
  free(body);
  /* a chat request has no form for token ids */
  int32_t ids[2] = {1, 2};
  struct bench_request_spec with_ids = {.model = "m", .ids = ids, .num_ids = 2, .max_tokens = 3};
  assert_null(bench_request_body("/v1/chat/completions/", &with_ids));
}

static void completions_body_sends_prompt_text_or_ids(void **state) {
  (void)state;
  int32_t ids[3] = {5, 6, 7};
  struct bench_request_spec spec = {.model = "m", .ids = ids, .num_ids = 3, .max_tokens = 4};
  char *body = bench_request_body("/v1/completions", &spec);
  assert_non_null(body);
  json_t *j = json_loads(body, 0, NULL);
  assert_non_null(j);
  assert_null(json_object_get(j, "messages"));
  json_t *p = json_object_get(j, "prompt");
  assert_int_equal(json_array_size(p), 3);
  assert_int_equal(json_integer_value(json_array_get(p, 2)), 7);
  assert_null(json_object_get(j, "ignore_eos"));
  assert_null(json_object_get(j, "response_format"));
  json_decref(j);
  free(body);
  /* --response-format: the object goes in as "response_format" */
  spec.response_format = "{\"type\":\"json_object\"}";
  body = bench_request_body("/v1/completions", &spec);
  j = json_loads(body, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "response_format"), "type")), "json_object");
  json_decref(j);
  free(body);
  spec.response_format = "{not json";
  assert_null(bench_request_body("/v1/completions", &spec));
  assert_false(bench_endpoint_is_chat("/v1/completions"));
  assert_true(bench_endpoint_is_chat("/v1/chat/completions"));
}

static void vllm_bench_serve_flags_map_to_ours(void **state) {
  (void)state;
  assert_string_equal(bench_backend_endpoint("vllm"), "/v1/completions");
  assert_string_equal(bench_backend_endpoint("openai-chat"), "/v1/chat/completions");
  assert_null(bench_backend_endpoint("tensorrt-llm"));
  char url[64];
  assert_true(bench_base_url_of(NULL, NULL, url, sizeof url));
  assert_string_equal(url, "http://127.0.0.1:8000");
  assert_true(bench_base_url_of("localhost", "9256", url, sizeof url));
  assert_string_equal(url, "http://localhost:9256");
  assert_false(bench_base_url_of("localhost", "80a", url, sizeof url));
  assert_false(bench_base_url_of("::1", "80", url, sizeof url));
  assert_false(bench_base_url_of("", "80", url, sizeof url));
  assert_false(bench_base_url_of("a-very-long-host-name-that-does-not-fit.example", "80", url, 24));
}

static void random_words_are_seeded(void **state) {
  (void)state;
  struct bench_random_spec spec = {.num_prompts = 4, .input_len = 20, .output_len = 50, .range_ratio = 0.5, .seed = 9};
  struct bench_dataset a, b;
  assert_int_equal(bench_dataset_random(NULL, &spec, &a), LLB_STATUS_OK);
  assert_int_equal(bench_dataset_random(NULL, &spec, &b), LLB_STATUS_OK);
  assert_int_equal(a.num, 4);
  bool lengths_vary = false;
  for (int i = 0; i < 4; i++) {
    assert_string_equal(a.prompts[i].text, b.prompts[i].text);
    assert_true(a.prompts[i].input_len >= 10 && a.prompts[i].input_len <= 30);
    assert_true(a.prompts[i].output_len >= 25 && a.prompts[i].output_len <= 75);
    lengths_vary |= a.prompts[i].output_len != a.prompts[0].output_len;
    int words = 1;
    for (const char *p = a.prompts[i].text; *p; p++) words += *p == ' ';
    assert_int_equal(words, a.prompts[i].input_len);
  }
  assert_true(lengths_vary);
  assert_true(strcmp(a.prompts[0].text, a.prompts[1].text) != 0);
  bench_dataset_free(&a);
  bench_dataset_free(&b);
}

static const char *model_path; /* argv[1]: the default model (LLB_DEFAULT_MODEL) */

static struct tokenizer *load_tokenizer(struct gguf_file **g) {
  const char *path = model_path;
  if (!path || access(path, R_OK) != 0) return NULL;
  struct tokenizer *t = NULL;
  if (gguf_open(path, g) != LLB_STATUS_OK || tokenizer_load(*g, &t) != LLB_STATUS_OK) return NULL;
  return t;
}

static void random_tokens_encode_to_the_asked_length(void **state) {
  (void)state;
  struct gguf_file *g = NULL;
  struct tokenizer *tok = load_tokenizer(&g);
  if (!tok) {
    gguf_close(g);
    skip();
  }
  struct bench_random_spec spec = {.num_prompts = 8, .input_len = 100, .output_len = 16, .seed = 3};
  struct bench_dataset d;
  assert_int_equal(bench_dataset_random(tok, &spec, &d), LLB_STATUS_OK);
  int exact = 0;
  for (int i = 0; i < 8; i++) {
    const struct bench_prompt *p = &d.prompts[i];
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(tokenizer_encode(tok, p->text, strlen(p->text), false, false, &ids, &n), LLB_STATUS_OK);
    assert_int_equal(n, p->num_ids); /* ids are the text's encoding */
    assert_memory_equal(ids, p->ids, (size_t)n * sizeof *ids);
    exact += n == 100;
    assert_true(n >= 95 && n <= 105);
    free(ids);
  }
  assert_true(exact >= 7);
  bench_dataset_free(&d);
  /* shared prefix: every prompt starts with the same 64-token text */
  spec.prefix_len = 64;
  spec.input_len = 32;
  assert_int_equal(bench_dataset_random(tok, &spec, &d), LLB_STATUS_OK);
  size_t common = strlen(d.prompts[0].text);
  for (int i = 1; i < 8; i++) {
    size_t k = 0;
    while (d.prompts[0].text[k] && d.prompts[0].text[k] == d.prompts[i].text[k]) k++;
    if (k < common) common = k;
    assert_true(d.prompts[i].input_len >= 90 && d.prompts[i].input_len <= 102);
  }
  int32_t *ids = NULL;
  int64_t n = 0;
  assert_int_equal(tokenizer_encode(tok, d.prompts[0].text, common, false, false, &ids, &n), LLB_STATUS_OK);
  assert_true(n >= 60); /* the common part is the whole prefix (give or take a merged token) */
  free(ids);
  bench_dataset_free(&d);
  tokenizer_destroy(tok);
  gguf_close(g);
}

static void jsonl_dataset_reads_prompts_and_lengths(void **state) {
  (void)state;
  char path[] = "/tmp/test_bench_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *text = "{\"prompt\": \"one two three\", \"output_len\": 7}\n\n{\"text\": \"four\"}\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  struct bench_dataset d;
  assert_int_equal(bench_dataset_jsonl(path, NULL, 99, 0, &d), LLB_STATUS_OK);
  assert_int_equal(d.num, 2);
  assert_string_equal(d.prompts[0].text, "one two three");
  assert_int_equal(d.prompts[0].output_len, 7);
  assert_int_equal(d.prompts[0].input_len, 3);
  assert_int_equal(d.prompts[1].output_len, 99);
  bench_dataset_free(&d);
  assert_int_equal(bench_dataset_jsonl(path, NULL, 99, 1, &d), LLB_STATUS_OK);
  assert_int_equal(d.num, 1);
  bench_dataset_free(&d);
  FILE *f = fopen(path, "w");
  fputs("{\"prompt\": 5}\n", f);
  fclose(f);
  assert_int_equal(bench_dataset_jsonl(path, NULL, 99, 0, &d), LLB_STATUS_MALFORMED);
  unlink(path);
  assert_int_equal(bench_dataset_jsonl(path, NULL, 99, 0, &d), LLB_STATUS_IO);
}

static void tree_memory_counts_self_and_children(void **state) {
  (void)state;
  struct bench_mem alone, with_child;
  assert_int_equal(bench_tree_memory(getpid(), &alone), LLB_STATUS_OK);
  assert_true(alone.rss_bytes > 0 && alone.pss_bytes > 0);
  assert_true(alone.unique_bytes > 0 && alone.unique_bytes <= alone.rss_bytes);
  assert_true(alone.num_procs >= 1);
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  assert_true(child > 0);
  usleep(50000);
  assert_int_equal(bench_tree_memory(getpid(), &with_child), LLB_STATUS_OK);
  assert_int_equal(with_child.num_procs, alone.num_procs + 1);
  assert_true(with_child.rss_bytes > alone.rss_bytes);
  /* the forked child shares most pages: counted once, they add far less than its RSS */
  assert_true(with_child.unique_bytes - alone.unique_bytes < with_child.rss_bytes - alone.rss_bytes);
  assert_true(bench_stack_root(child, "test_bench") == getpid()); /* climbs while comm matches */
  assert_true(bench_stack_root(child, "nomatch") == child);
  kill(child, 9);
  waitpid(child, NULL, 0);
  assert_int_equal(bench_tree_memory(child, &alone), LLB_STATUS_NOT_FOUND);
}

static void tree_cpu_counts_a_busy_child(void **state) {
  (void)state;
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) { /* burn 0.4 s of CPU, then wait to be killed */
    struct timespec t0, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    volatile double x = 1;
    do {
      for (int i = 0; i < 100000; i++) x = x * 1.0000001 + 1e-9;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < 0.4);
    char c = 1;
    (void)!write(go[1], &c, 1);
    pause();
    _exit(0);
  }
  assert_true(child > 0);
  char c;
  assert_int_equal(read(go[0], &c, 1), 1);
  double child_cpu = bench_tree_cpu_seconds(child);
  double tree_cpu = bench_tree_cpu_seconds(getpid());
  assert_true(child_cpu >= 0.35 && child_cpu < 5);
  assert_true(tree_cpu >= child_cpu);
  kill(child, 9);
  waitpid(child, NULL, 0);
  close(go[0]);
  close(go[1]);
  assert_true(bench_tree_cpu_seconds(child) < 0);
  assert_true(bench_loadavg() >= 0);
}

/* --spec-metrics-url reads counters out of a /metrics page. */
static void prometheus_value_reads_a_counter_and_sums_labels(void **state) {
  (void)state;
  const char *text = "# HELP llmbus:spec_decode_num_drafts_total Number.\n"
                     "# TYPE llmbus:spec_decode_num_drafts_total counter\n"
                     "llmbus:spec_decode_num_drafts_total 12\n"
                     "llmbus:spec_decode_num_drafts_total_other 99\n"
                     "llmbus:spec_decode_num_accepted_tokens_total{engine=\"0\"} 30\n"
                     "llmbus:spec_decode_num_accepted_tokens_total{engine=\"1\"} 4.5\n";
  double v = 0;
  assert_true(bench_prom_value(text, "llmbus:spec_decode_num_drafts_total", &v));
  assert_true(v == 12.0);
  assert_true(bench_prom_value(text, "llmbus:spec_decode_num_accepted_tokens_total", &v));
  assert_true(v == 34.5);
  assert_false(bench_prom_value(text, "llmbus:spec_decode_num_draft_tokens_total", &v));
}

int main(int argc, char **argv) {
  model_path = argc > 1 ? argv[1] : NULL;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(percentile_interpolates_like_numpy),
      cmocka_unit_test(dist_sorts_and_summarizes),
      cmocka_unit_test(poisson_arrivals_are_seeded_and_have_the_rate),
      cmocka_unit_test(rng_range_stays_in_bounds),
      cmocka_unit_test(chunked_decoder_handles_splits_and_extensions),
      cmocka_unit_test(sse_parser_splits_events_at_blank_lines),
      cmocka_unit_test(chunk_parse_reads_text_usage_and_errors),
      cmocka_unit_test(chat_endpoint_body_sends_messages_not_prompt),
      cmocka_unit_test(completions_body_sends_prompt_text_or_ids),
      cmocka_unit_test(vllm_bench_serve_flags_map_to_ours),
      cmocka_unit_test(random_words_are_seeded),
      cmocka_unit_test(random_tokens_encode_to_the_asked_length),
      cmocka_unit_test(jsonl_dataset_reads_prompts_and_lengths),
      cmocka_unit_test(tree_memory_counts_self_and_children),
      cmocka_unit_test(tree_cpu_counts_a_busy_child),
      cmocka_unit_test(prometheus_value_reads_a_counter_and_sums_labels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
