/* `llmbus run` (what `make run` does): the embedded stack starts, answers one greedy prompt
 * through every actor, and shuts down cleanly: exit 0, an answer on stdout, and every actor
 * leaves on SIGTERM by itself — the supervisor logs `child_killed` when one has to be
 * SIGKILLed after its grace period (a scheduler stuck waiting for the reply of a step still in
 * flight at shutdown did exactly that, after 35 s). No error-level log line either: a step
 * abandoned at shutdown is not an error.
 *
 * `llmbus generate --inproc --json` (the model in this process, no bus) prints one JSON line
 * shaped like the bus path's RequestOutput: prompt and output token ids, the text, which is
 * the decode of the output ids, finish_reason and stop_reason; and the same greedy run
 * without --json streams that very text.
 *
 * `llmbus run --numerics ggml` (every actor, llama.cpp's arithmetic in the worker) answers
 * greedily with exactly the text of `llmbus generate --inproc --numerics ggml`, and the default
 * packed numerics likewise match between the two paths.
 *
 * `llmbus perplexity` scores exactly llama-perplexity's tokens (the second half of each chunk:
 * chunks x (ctx - 1 - ctx/2)), gives the same number twice, ranks an English text far below
 * shuffled words of the same text, and refuses a text shorter than two chunks.
 *
 * Usage: test_run_cli MODEL.gguf (ctest passes LLB_DEFAULT_MODEL; LLMBUS_BUILD_DIR locates
 * cmd/llmbus). A missing model skips (77) locally and fails under CI=true. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/e2e/stack.h"

static const char *g_model;

/* Runs argv with its stdout (and its stderr when with_stderr) into out [cap]; returns the wait
 * status. Output past cap is drained, so the child never blocks on a full pipe. */
static int run_output(char *const argv[], bool with_stderr, char *out, size_t cap) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    if (with_stderr) dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  char sink[4096];
  for (;;) {
    const ssize_t got = len < cap - 1 ? read(fds[0], out + len, cap - 1 - len) : read(fds[0], sink, sizeof sink);
    if (got <= 0) break;
    if (len < cap - 1) len += (size_t)got;
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
  const int status = run_output(argv, true, out, sizeof out);
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

/* Runs `llmbus generate --inproc` greedily on a chat prompt, with --json or without; stdout
 * only into out (the timing line goes to stderr). Returns the wait status. */
static int run_inproc(bool json, char *out, size_t cap) {
  char bin[PATH_MAX];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", getenv("LLMBUS_BUILD_DIR"));
  char *argv[16] = {bin, "generate", "--inproc", "--model", (char *)g_model, "--temperature", "0",
                    "--max-tokens", "16", "--threads", "1"};
  int n = 11;
  if (json) argv[n++] = "--json";
  argv[n++] = "What is the capital of France?";
  argv[n] = NULL;
  return run_output(argv, false, out, cap);
}

static void test_generate_inproc_json_prints_ids_and_text_of_the_streamed_answer(void **state) {
  (void)state;
  static char line[1 << 16], streamed[1 << 16];
  int status = run_inproc(true, line, sizeof line);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = run_inproc(false, streamed, sizeof streamed);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_non_null(strchr(line, '\n'));
  assert_null(strchr(strchr(line, '\n') + 1, '\n')); /* exactly one line */
  json_error_t err;
  json_t *j = json_loads(line, 0, &err);
  if (!j) fail_msg("not JSON (%s): %s", err.text, line);
  const json_t *prompt = json_object_get(j, "prompt_token_ids");
  assert_true(json_is_array(prompt) && json_array_size(prompt) > 5);
  assert_true(json_is_true(json_object_get(j, "finished")));
  const json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
  assert_non_null(o);
  const json_t *ids = json_object_get(o, "token_ids");
  assert_true(json_is_array(ids) && json_array_size(ids) >= 1 && json_array_size(ids) <= 16);
  for (size_t i = 0; i < json_array_size(ids); i++) assert_true(json_is_integer(json_array_get(ids, i)));
  const char *fr = json_string_value(json_object_get(o, "finish_reason"));
  assert_non_null(fr);
  assert_true(strcmp(fr, "stop") == 0 || strcmp(fr, "length") == 0);
  if (strcmp(fr, "length") == 0) assert_int_equal(json_array_size(ids), 16);
  assert_true(json_is_null(json_object_get(o, "stop_reason")) || json_is_integer(json_object_get(o, "stop_reason")));
  /* the text is what the streamed run printed (plus its final newline) */
  const char *text = json_string_value(json_object_get(o, "text"));
  assert_non_null(text);
  assert_true(strlen(text) > 0);
  assert_int_equal(strlen(streamed), strlen(text) + 1);
  assert_memory_equal(streamed, text, strlen(text));
  json_decref(j);
}

/* Greedy answer to the France prompt, 20 tokens, stdout only: `llmbus run` or `generate --inproc`. */
static void greedy_answer(bool inproc, const char *numerics, char *out, size_t cap) {
  char bin[PATH_MAX];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", getenv("LLMBUS_BUILD_DIR"));
  char *const run_argv[] = {bin, "run", "--model", (char *)g_model, "--numerics", (char *)numerics, "--temperature",
                            "0", "--max-tokens", "20", "--threads", "2", "What is the capital of France?", NULL};
  char *const gen_argv[] = {bin, "generate", "--inproc", "--model", (char *)g_model, "--numerics", (char *)numerics,
                            "--temperature", "0", "--max-tokens", "20", "--threads", "2", "What is the capital of France?",
                            NULL};
  const int status = run_output(inproc ? gen_argv : run_argv, false, out, cap);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  size_t len = strlen(out);
  while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == ' ')) out[--len] = '\0';
}

/* Runs argv with stdout into out[cap] and stderr into err[cap] (each NUL-terminated, read
 * together so that neither pipe fills); returns the wait status. */
static int run_split(char *const argv[], char *out, char *err, size_t cap) {
  int o[2], e[2];
  assert_int_equal(pipe(o), 0);
  assert_int_equal(pipe(e), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(o[1], STDOUT_FILENO);
    dup2(e[1], STDERR_FILENO);
    close(o[0]), close(o[1]), close(e[0]), close(e[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(o[1]);
  close(e[1]);
  struct pollfd fds[2] = {{.fd = o[0], .events = POLLIN}, {.fd = e[0], .events = POLLIN}};
  char *bufs[2] = {out, err};
  size_t lens[2] = {0, 0};
  for (int open_fds = 2; open_fds > 0;) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char sink[4096];
      const ssize_t got = lens[i] < cap - 1 ? read(fds[i].fd, bufs[i] + lens[i], cap - 1 - lens[i])
                                            : read(fds[i].fd, sink, sizeof sink);
      if (got <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      } else if (lens[i] < cap - 1) {
        lens[i] += (size_t)got;
      }
    }
  }
  out[lens[0]] = err[lens[1]] = '\0';
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

/* A user who runs `llmbus run ... > answer.txt` gets exactly the answer in the file: stdout holds
 * the text the model gives in this process (`generate --inproc`, the same greedy run) and nothing
 * else, and a fresh start writes no warning to stderr (it did: the kv_manager's kv_reset, a
 * starting scheduler's routine reset, landed after the first word of the answer). */
static void test_run_prints_only_the_answer_on_stdout_and_no_warning_on_a_fresh_start(void **state) {
  (void)state;
  char bin[PATH_MAX];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", getenv("LLMBUS_BUILD_DIR"));
  char *const argv[] = {bin, "run", "--model", (char *)g_model, "--temperature", "0", "--max-tokens", "20",
                        "--threads", "2", "What is the capital of France?", NULL};
  static char out[1 << 16], err[1 << 16], local[4096];
  const int status = run_split(argv, out, err, sizeof out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || strstr(err, "level=")) fprintf(stderr, "stderr:\n%s\n", err);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_null(strstr(err, "level=warn"));
  assert_null(strstr(err, "level=error"));
  assert_null(strstr(out, "level=")); /* no log line among the answer */
  greedy_answer(true, "packed", local, sizeof local);
  size_t n = strlen(out);
  assert_true(n > 0 && out[n - 1] == '\n'); /* the answer, then one line end */
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0'; /* as greedy_answer trims */
  assert_string_equal(out, local);
}

static void test_numerics_flag_gives_the_same_answer_through_the_bus_and_in_process(void **state) {
  (void)state;
  static char bus[4096], local[4096];
  static const char *const modes[] = {"ggml", "packed"};
  for (int m = 0; m < 2; m++) {
    greedy_answer(false, modes[m], bus, sizeof bus);
    greedy_answer(true, modes[m], local, sizeof local);
    fprintf(stderr, "numerics %s: run \"%s\" / inproc \"%s\"\n", modes[m], bus, local);
    assert_true(strlen(bus) > 0);
    assert_string_equal(bus, local);
  }
}

/* The test text: Genesis 1-3 of the King James Version (public domain) as Debian's bible-kjv
 * prints it (ops/install-deps.sh installs it), else plain sentences repeated. Returns how many
 * bytes were written to buf (NUL-terminated). */
static size_t english_text(char *buf, size_t cap) {
  size_t n = 0;
  FILE *p = access("/usr/bin/bible", X_OK) == 0 ? popen("/usr/bin/bible gen1:1-3:24 2>/dev/null", "r") : NULL;
  if (p) {
    n = fread(buf, 1, cap - 1, p);
    if (pclose(p) != 0) n = 0;
  }
  if (n > 4000) {
    buf[n] = '\0';
    fprintf(stderr, "perplexity text: KJV Genesis 1-3 (Debian bible-kjv), %zu bytes\n", n);
    return n;
  }
  static const char *const sentences[] = {
      "The river rose slowly through the night, and by morning the low fields near the village were under water.",
      "Farmers moved their animals to the hills, while children carried bread and blankets to the old church.",
      "When the rain stopped, the people walked down to the bridge to see how far the water had come.",
      "Nobody could remember a flood like it, although the oldest man in the village said his father had seen one.",
      "In the afternoon the sun came out, and the water began to fall back into the river.",
      "By the end of the week the roads were open again, and the market returned to the square.",
  };
  const size_t ns = sizeof sentences / sizeof *sentences;
  n = 0;
  for (size_t rep = 0; rep < 24; rep++)
    for (size_t i = 0; i < ns; i++)
      n += (size_t)snprintf(buf + n, cap - n, "%s ", sentences[(i + rep) % ns]);
  fprintf(stderr, "perplexity text: plain sentences (no /usr/bin/bible: ops/install-deps.sh installs bible-kjv)\n");
  return n;
}

/* The English text and its words shuffled (a fixed LCG), into two files. */
static void write_texts(const char *english_path, const char *shuffled_path) {
  static char text[1 << 15];
  english_text(text, sizeof text);
  FILE *e = fopen(english_path, "w"), *sh = fopen(shuffled_path, "w");
  assert_non_null(e);
  assert_non_null(sh);
  fputs(text, e);
  static char words[8192][24];
  int nw = 0;
  for (char *w = strtok(text, " \n\t"); w && nw < 8192; w = strtok(NULL, " \n\t")) snprintf(words[nw++], 24, "%s", w);
  uint64_t x = 12345;
  for (int i = nw - 1; i > 0; i--) { /* Fisher-Yates with a fixed LCG */
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int j = (int)((x >> 33) % (uint64_t)(i + 1));
    char t[24];
    memcpy(t, words[i], 24), memcpy(words[i], words[j], 24), memcpy(words[j], t, 24);
  }
  for (int i = 0; i < nw; i++) fprintf(sh, "%s ", words[i]);
  fclose(e);
  fclose(sh);
}

/* `llmbus perplexity ... --json` on path; returns the exit status, *j the parsed line (or NULL). */
static int run_perplexity(const char *path, const char *ctx, json_t **j) {
  char bin[PATH_MAX];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", getenv("LLMBUS_BUILD_DIR"));
  char *const argv[] = {bin, "perplexity", "--model", (char *)g_model, "--file", (char *)path, "--ctx", (char *)ctx,
                        "--threads", "2", "--json", NULL};
  static char out[1 << 16];
  const int status = run_output(argv, true, out, sizeof out);
  const char *brace = strchr(out, '{');
  *j = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
  if (!*j) fprintf(stderr, "llmbus perplexity output:\n%s\n", out);
  return status;
}

static void test_perplexity_scores_llama_cpps_tokens_and_ranks_english_first(void **state) {
  (void)state;
  char english[] = "/tmp/llmbus-ppl-en-XXXXXX", shuffled[] = "/tmp/llmbus-ppl-sh-XXXXXX";
  close(mkstemp(english)), close(mkstemp(shuffled));
  write_texts(english, shuffled);
  json_t *a, *b, *c;
  assert_int_equal(run_perplexity(english, "128", &a), 0);
  assert_int_equal(run_perplexity(english, "128", &b), 0);
  assert_int_equal(run_perplexity(shuffled, "128", &c), 0);
  assert_true(a && b && c);
  const json_int_t chunks = json_integer_value(json_object_get(a, "chunks"));
  const json_int_t tokens = json_integer_value(json_object_get(a, "tokens"));
  assert_int_equal(chunks, tokens / 128);
  assert_true(chunks >= 2);
  assert_int_equal(json_integer_value(json_object_get(a, "tokens_scored")), chunks * (128 - 1 - 64));
  const double pa = json_real_value(json_object_get(a, "ppl")), pc = json_real_value(json_object_get(c, "ppl"));
  fprintf(stderr, "perplexity: English %.3f, shuffled %.3f (%lld chunks)\n", pa, pc, (long long)chunks);
  assert_true(pa > 1.0 && isfinite(pa));
  assert_true(pa == json_real_value(json_object_get(b, "ppl"))); /* deterministic */
  assert_true(pc > 3.0 * pa);                                      /* word order matters to the model */
  json_decref(a), json_decref(b), json_decref(c);
  /* a text shorter than two chunks is refused, as llama-perplexity does */
  json_t *d = NULL;
  const int st = run_perplexity(english, "65536", &d);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  json_decref(d);
  unlink(english), unlink(shuffled);
}

/* `llmbus perplexity` with extra arguments (NULL-terminated `extra`, at most 8), --json. */
static int run_perplexity_args(const char *const *extra, json_t **j) {
  char bin[PATH_MAX];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", getenv("LLMBUS_BUILD_DIR"));
  char *argv[16] = {bin, "perplexity", "--model", (char *)g_model, "--threads", "2", "--json"};
  int n = 7;
  for (int i = 0; extra[i] && n < 15; i++) argv[n++] = (char *)extra[i];
  argv[n] = NULL;
  static char out[1 << 16];
  const int status = run_output(argv, true, out, sizeof out);
  const char *brace = strchr(out, '{');
  *j = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
  return status;
}

/* KL divergence in llama-perplexity's format: a base written by one run, compared by another.
 * The same numerics give ~0 divergence and the same top token everywhere; llama.cpp's ggml
 * arithmetic against the engine's packed one differs only by Q8-activation noise; a truncated
 * base file is refused with an error, not scored. */
static void test_kl_divergence_against_a_saved_base(void **state) {
  (void)state;
  char english[] = "/tmp/llmbus-kl-en-XXXXXX", shuffled[] = "/tmp/llmbus-kl-sh-XXXXXX";
  char base[] = "/tmp/llmbus-kl-base-XXXXXX";
  close(mkstemp(english)), close(mkstemp(shuffled)), close(mkstemp(base));
  write_texts(english, shuffled);
  json_t *w = NULL, *same = NULL, *ggml = NULL, *bad = NULL;
  const char *save[] = {"--file", english, "--ctx", "64", "--chunks", "2", "--kl-divergence-base", base, NULL};
  assert_int_equal(run_perplexity_args(save, &w), 0);
  const char *cmp[] = {"--kl-base", base, NULL};
  assert_int_equal(run_perplexity_args(cmp, &same), 0);
  const char *cmp_ggml[] = {"--kl-base", base, "--numerics", "ggml", NULL};
  assert_int_equal(run_perplexity_args(cmp_ggml, &ggml), 0);
  assert_true(w && same && ggml);
  const double kl_same = json_real_value(json_object_get(same, "kld_mean"));
  const double kl_ggml = json_real_value(json_object_get(ggml, "kld_mean"));
  fprintf(stderr, "KL: packed vs packed %.3g, ggml vs packed %.3g (same top %.3f)\n", kl_same, kl_ggml,
          json_real_value(json_object_get(ggml, "same_top_p")));
  assert_int_equal(json_integer_value(json_object_get(same, "tokens_scored")), 2 * (64 - 1 - 32));
  assert_true(fabs(kl_same) < 1e-4);
  assert_true(json_real_value(json_object_get(same, "same_top_p")) == 1.0);
  assert_true(fabs(json_real_value(json_object_get(same, "ppl")) - json_real_value(json_object_get(w, "ppl"))) < 1e-9);
  assert_true(kl_ggml > kl_same && kl_ggml < 0.05); /* different arithmetic, same model */
  assert_true(json_real_value(json_object_get(ggml, "same_top_p")) > 0.8);
  /* a base cut short: an error, no figures */
  assert_int_equal(truncate(base, 4096), 0);
  const int st = run_perplexity_args(cmp, &bad);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  assert_null(bad);
  json_decref(w), json_decref(same), json_decref(ggml);
  unlink(english), unlink(shuffled), unlink(base);
}

int main(int argc, char **argv) {
  g_model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_answers_and_every_actor_exits_on_sigterm),
      cmocka_unit_test(test_run_prints_only_the_answer_on_stdout_and_no_warning_on_a_fresh_start),
      cmocka_unit_test(test_generate_inproc_json_prints_ids_and_text_of_the_streamed_answer),
      cmocka_unit_test(test_perplexity_scores_llama_cpps_tokens_and_ranks_english_first),
      cmocka_unit_test(test_kl_divergence_against_a_saved_base),
      cmocka_unit_test(test_numerics_flag_gives_the_same_answer_through_the_bus_and_in_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
