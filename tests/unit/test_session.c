/* The in-process session runner (model/forward/session.h) on a tiny random LLaMA built with the GGUF
 * writer (2 layers, E 64, 4 heads, 2 KV heads, head_dim 16, vocab 97):
 * - a prompt fed in one step, in steps of 7 rows (one feed cut by the session), and in
 *   several feeds of uneven sizes gives bit-identical logits for every row;
 * - llama_session_eval (prefill, then greedy decode steps) after a reset, and after a
 *   truncate to the middle of the sequence, gives bit-identical logits and tokens;
 * - three sequences decoded in one batch get each one's logits alone, bit for bit;
 * - refusals: a KV dtype the model's head_dim cannot hold, past max_context, a logits range
 *   outside the feed, more logits rows in a step than max_logits, truncating past the length,
 *   a token outside the vocabulary (the length then unchanged).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/forward/session.h"
#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 64, H = 4, HKV = 2, D = 16, F = 128, V = 97, CTX = 256, N = 40, GEN = 12 };

struct fixture {
  void *buf;
  struct gguf_file *f;
  struct llama_model *m;
  int32_t prompt[N];
};

static int setup(void **state) {
  struct fixture *fx = calloc(1, sizeof(*fx));
  uint64_t rng = 4242;
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  const struct gguf_llama_hparams hp = {L, CTX, E, F, H, HKV, D, V, 10000.0f};
  assert_int_equal(gguf_writer_add_random_llama(w, &hp, 4.0f, &rng), LLB_STATUS_OK);
  size_t size;
  assert_int_equal(gguf_writer_write_memory(w, &fx->buf, &size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  assert_int_equal(gguf_open_memory(fx->buf, size, &fx->f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(fx->f, &fx->m), LLB_STATUS_OK);
  for (int32_t i = 0; i < N; i++) fx->prompt[i] = (i * 37 + 11) % V;
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  struct fixture *fx = *state;
  llama_model_destroy(fx->m);
  gguf_close(fx->f);
  free(fx->buf);
  free(fx);
  return 0;
}

static struct llama_session *make_seqs(const struct fixture *fx, int32_t max_context, int32_t seqs, int32_t step,
                                       int32_t max_logits) {
  const struct llama_session_options o = {.max_context = max_context, .max_seqs = seqs, .max_logits = max_logits,
                                          .forward = {.max_num_tokens = step, .n_threads = 1}};
  struct llama_session *s = NULL;
  assert_int_equal(llama_session_create(fx->m, &o, &s), LLB_STATUS_OK);
  return s;
}

static struct llama_session *make(const struct fixture *fx, int32_t max_context, int32_t step, int32_t max_logits) {
  return make_seqs(fx, max_context, 1, step, max_logits);
}

/* Collects logits rows into out[(base + index) * V], counting the rows handed out. */
struct rows {
  float *out;
  int32_t base, count;
};

static llb_status collect(void *user, int32_t first, int32_t count, const float *rows) {
  struct rows *r = user;
  memcpy(r->out + (int64_t)(r->base + first) * V, rows, (size_t)count * V * sizeof *rows);
  r->count += count;
  return LLB_STATUS_OK;
}

static void test_one_step_and_chunks_give_identical_logits(void **state) {
  const struct fixture *fx = *state;
  float *one = calloc((size_t)N * V, sizeof(float)), *cut = calloc((size_t)N * V, sizeof(float)),
        *feeds = calloc((size_t)N * V, sizeof(float));
  struct llama_session *a = make(fx, CTX, N, N);
  struct rows ra = {one, 0, 0};
  assert_int_equal(llama_session_feed(a, 0, fx->prompt, N, 0, N, collect, &ra), LLB_STATUS_OK);
  assert_int_equal(ra.count, N);
  assert_int_equal(llama_session_length(a, 0), N);

  struct llama_session *b = make(fx, CTX, 7, 7); /* 6 steps of <= 7 rows */
  struct rows rb = {cut, 0, 0};
  assert_int_equal(llama_session_feed(b, 0, fx->prompt, N, 0, N, collect, &rb), LLB_STATUS_OK);
  assert_int_equal(rb.count, N);
  assert_memory_equal(one, cut, (size_t)N * V * sizeof(float));

  assert_int_equal(llama_session_truncate(b, 0, 0), LLB_STATUS_OK); /* several feeds, uneven */
  const int32_t sizes[] = {1, 12, 5, 15, 7};
  struct rows rc = {feeds, 0, 0};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    assert_int_equal(llama_session_feed(b, 0, fx->prompt + rc.base, sizes[i], 0, sizes[i], collect, &rc),
                     LLB_STATUS_OK);
    rc.base += sizes[i];
  }
  assert_int_equal(rc.base, N);
  assert_memory_equal(one, feeds, (size_t)N * V * sizeof(float));

  float *last = NULL; /* eval's row is the feed's last */
  assert_int_equal(llama_session_truncate(b, 0, 0), LLB_STATUS_OK);
  assert_int_equal(llama_session_eval(b, 0, fx->prompt, N, &last), LLB_STATUS_OK);
  assert_memory_equal(one + (int64_t)(N - 1) * V, last, V * sizeof(float));
  llama_session_destroy(a);
  llama_session_destroy(b);
  free(one), free(cut), free(feeds);
}

static int32_t argmax(const float *x);

/* Three sequences decoded together (each after its own prompt, of lengths 9, 16 and 23, fed in
 * steps of 5) get the logits and the greedy tokens each gets alone in a session of its own. */
static void test_batch_decode_equals_each_sequence_alone(void **state) {
  const struct fixture *fx = *state;
  enum { S = 3 };
  const int32_t plen[S] = {9, 16, 23};
  struct llama_session *all = make_seqs(fx, 32, S, 5, S);
  float *lg = NULL, batch[S][GEN / 2][V];
  int32_t next[S];
  for (int32_t q = 0; q < S; q++) {
    assert_int_equal(llama_session_eval(all, q, fx->prompt + q, plen[q], &lg), LLB_STATUS_OK);
    next[q] = argmax(lg);
  }
  for (int32_t g = 0; g < GEN / 2; g++) {
    assert_int_equal(llama_session_decode_batch(all, 0, S, next, &lg), LLB_STATUS_OK);
    for (int32_t q = 0; q < S; q++) {
      memcpy(batch[q][g], lg + (int64_t)q * V, sizeof batch[q][g]);
      next[q] = argmax(lg + (int64_t)q * V);
    }
  }
  for (int32_t q = 0; q < S; q++) assert_int_equal(llama_session_length(all, q), plen[q] + GEN / 2);
  assert_int_equal(llama_session_decode_batch(all, 1, S, next, &lg), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(lg);
  for (int32_t q = 0; q < S; q++) {
    struct llama_session *one = make(fx, 32, 32, 1);
    assert_int_equal(llama_session_eval(one, 0, fx->prompt + q, plen[q], &lg), LLB_STATUS_OK);
    for (int32_t g = 0; g < GEN / 2; g++) {
      const int32_t t = argmax(lg);
      assert_int_equal(llama_session_eval(one, 0, &t, 1, &lg), LLB_STATUS_OK);
      assert_memory_equal(batch[q][g], lg, V * sizeof(float));
    }
    llama_session_destroy(one);
  }
  llama_session_destroy(all);
}

static int32_t argmax(const float *x) {
  int32_t best = 0;
  for (int32_t i = 1; i < V; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* Prefill prompt[n_prompt] (in the session's steps), then GEN greedy decode steps; every
 * decode step's logits into out[GEN + 1, V], the tokens into toks[GEN]. */
static void greedy(struct llama_session *s, const int32_t *prompt, int32_t n_prompt, float *out, int32_t *toks) {
  float *lg = NULL;
  assert_int_equal(llama_session_eval(s, 0, prompt, n_prompt, &lg), LLB_STATUS_OK);
  memcpy(out, lg, V * sizeof(float));
  for (int32_t g = 0; g < GEN; g++) {
    toks[g] = argmax(lg);
    assert_int_equal(llama_session_eval(s, 0, &toks[g], 1, &lg), LLB_STATUS_OK);
    memcpy(out + (int64_t)(g + 1) * V, lg, V * sizeof(float));
  }
  assert_int_equal(llama_session_length(s, 0), n_prompt + GEN);
}

static void test_reset_and_truncate_then_refeed_give_identical_logits(void **state) {
  const struct fixture *fx = *state;
  const size_t bytes = (size_t)(GEN + 1) * V * sizeof(float);
  float *first = malloc(bytes), *again = malloc(bytes);
  int32_t t1[GEN], t2[GEN];
  struct llama_session *s = make(fx, N + GEN, 16, 1);
  greedy(s, fx->prompt, N, first, t1);
  assert_int_equal(llama_session_truncate(s, 0, 0), LLB_STATUS_OK); /* reset */
  assert_int_equal(llama_session_length(s, 0), 0);
  greedy(s, fx->prompt, N, again, t2);
  assert_memory_equal(first, again, bytes);
  assert_memory_equal(t1, t2, sizeof t1);

  /* truncate to the middle of the prompt and feed its rest: the cache before stays valid */
  assert_int_equal(llama_session_truncate(s, 0, N / 2), LLB_STATUS_OK);
  float *lg = NULL;
  assert_int_equal(llama_session_eval(s, 0, fx->prompt + N / 2, N - N / 2, &lg), LLB_STATUS_OK);
  assert_memory_equal(first, lg, V * sizeof(float));
  llama_session_destroy(s);
  free(first), free(again);
}

static void test_kv_dtype_the_model_cannot_hold_is_refused(void **state) {
  const struct fixture *fx = *state;
  const struct llama_session_options o = {.max_context = 16, .kv_dtype = BACKEND_KV_DTYPE_Q8_0,
                                          .forward = {.max_num_tokens = 8, .n_threads = 1}};
  struct llama_session *s = NULL; /* head_dim 16 is no multiple of q8_0's 32 */
  assert_int_equal(llama_session_create(fx->m, &o, &s), LLB_STATUS_UNSUPPORTED);
  assert_null(s);
}

static void test_refusals_leave_the_session_usable(void **state) {
  const struct fixture *fx = *state;
  struct llama_session *s = make(fx, 16, 8, 2);
  const struct llama_session_options bad = {.max_context = 0, .forward = {.max_num_tokens = 1, .n_threads = 1}};
  struct llama_session *t = NULL;
  assert_int_equal(llama_session_create(fx->m, &bad, &t), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(t);
  assert_int_equal(llama_session_feed(s, 0, fx->prompt, 17, 0, 0, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llama_session_feed(s, 0, fx->prompt, 0, 0, 0, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llama_session_feed(s, 0, fx->prompt, 4, 3, 5, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llama_session_feed(s, 0, fx->prompt, 4, 2, 1, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llama_session_feed(s, 0, fx->prompt, 4, 0, 3, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT); /* 3 > 2 */
  assert_int_equal(llama_session_length(s, 0), 0); /* refused before any step */
  assert_int_equal(llama_session_truncate(s, 0, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(llama_session_truncate(s, 1, 0), LLB_STATUS_INVALID_ARGUMENT); /* one sequence */
  assert_int_equal(llama_session_feed(s, 1, fx->prompt, 1, 0, 0, NULL, NULL), LLB_STATUS_INVALID_ARGUMENT);
  const int32_t bad_tok[2] = {3, V};
  float *lg = NULL;
  assert_int_equal(llama_session_eval(s, 0, bad_tok, 2, &lg), LLB_STATUS_INVALID_ARGUMENT);
  assert_null(lg);
  assert_int_equal(llama_session_length(s, 0), 0);
  assert_int_equal(llama_session_eval(s, 0, fx->prompt, 16, &lg), LLB_STATUS_OK); /* fills the context exactly */
  assert_non_null(lg);
  assert_int_equal(llama_session_length(s, 0), 16);
  assert_int_equal(llama_session_vocab_size(s), V);
  assert_int_equal(llama_session_eval(s, 0, fx->prompt, 1, &lg), LLB_STATUS_INVALID_ARGUMENT);
  llama_session_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_step_and_chunks_give_identical_logits),
      cmocka_unit_test(test_reset_and_truncate_then_refeed_give_identical_logits),
      cmocka_unit_test(test_batch_decode_equals_each_sequence_alone),
      cmocka_unit_test(test_kv_dtype_the_model_cannot_hold_is_refused),
      cmocka_unit_test(test_refusals_leave_the_session_usable),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
