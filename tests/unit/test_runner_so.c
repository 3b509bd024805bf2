/* Structured output in the worker (actors/gpu_worker/runner_so.c), without a model:
 * - the bitmask masks exactly the disallowed tokens (and every token past the mask's
 *   vocabulary), leaving the others bit for bit; sampled through the sampler, seeded draws
 *   and greedy only ever pick allowed tokens, and top logprobs list only allowed ones;
 * - requests with the same spec share one compiled grammar, a different spec gets its own;
 * - a matcher follows its outputs: new ones accepted, trimmed ones replayed from the start,
 *   one outside the grammar refused (and the state reset);
 * - with a reasoning parser, the grammar starts after the end of the reasoning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "actors/gpu_worker/runner_so.h"
#include "model/sampling/sampler.h"
#include "model/structured/structured_output.h"

enum { NV = 100, MASK_NV = 90, EOG = 89 };

/* Token i < EOG is the one byte '!' + i (printable ASCII, each once); EOG is empty. */
static struct runner_so *make_so(void) {
  static char bytes[MASK_NV];
  const char *pieces[MASK_NV];
  size_t lens[MASK_NV];
  for (int i = 0; i < MASK_NV; i++) {
    bytes[i] = (char)('!' + i);
    pieces[i] = &bytes[i];
    lens[i] = i == EOG ? 0 : 1;
  }
  const int32_t eog = EOG;
  struct so_vocab *v;
  assert_int_equal(so_vocab_create(MASK_NV, pieces, lens, &eog, 1, &v), LLB_STATUS_OK);
  struct runner_so *s;
  assert_int_equal(runner_so_create(v, &s), LLB_STATUS_OK);
  return s;
}

static uint32_t rng = 12345;
static uint32_t next_u32(void) {
  rng = rng * 1664525u + 1013904223u;
  return rng >> 8;
}

static void test_mask_sets_exactly_the_disallowed_tokens_to_minus_inf(void **state) {
  (void)state;
  for (int round = 0; round < 20; round++) {
    float logits[NV], orig[NV];
    uint32_t mask[(MASK_NV + 31) / 32];
    for (int i = 0; i < NV; i++) orig[i] = logits[i] = (float)(next_u32() % 2000) / 100.0f - 10.0f;
    for (size_t w = 0; w < sizeof mask / sizeof mask[0]; w++) mask[w] = round == 0 ? 0xffffffffu : next_u32() ^ (next_u32() << 8);
    runner_so_apply_mask(logits, NV, mask, MASK_NV);
    for (int i = 0; i < NV; i++) {
      const bool allowed = i < MASK_NV && (mask[i / 32] >> (i % 32) & 1u);
      if (allowed)
        assert_memory_equal(&logits[i], &orig[i], sizeof(float));
      else
        assert_true(isinf(logits[i]) && logits[i] < 0);
    }
  }
}

static void test_sampler_after_the_mask_draws_only_allowed_tokens(void **state) {
  (void)state;
  struct runner_so *so = make_so();
  static const char choices[] = "[\"a1\",\"b22\",\"Q\"]";
  struct runner_so_req q = {0};
  assert_int_equal(runner_so_req_init(so, &q, &(struct llb_structured_outputs){.kind = LLB_SO_CHOICE, .spec = {choices, sizeof choices - 1}}, NULL, 0),
                   LLB_STATUS_OK);
  uint32_t mask[(MASK_NV + 31) / 32];
  assert_int_equal(runner_so_fill_mask(so, &q, mask), 3); /* 'a', 'b', 'Q' */
  struct sampler *sm;
  assert_int_equal(sampler_create(NV, &sm), LLB_STATUS_OK);
  for (uint64_t seed = 1; seed <= 200; seed++) {
    float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = (float)(next_u32() % 1000) / 100.0f;
    runner_so_apply_mask(logits, NV, mask, MASK_NV);
    struct sampler_params p;
    sampler_params_init(&p);
    p.seed = seed;
    p.temperature = seed % 4 == 0 ? 0.0f : 1.5f;
    p.logprobs = 5;
    p.frequency_penalty = 0.5f;
    struct sampler_result res;
    assert_int_equal(sampler_sample(sm, &p, logits, NULL, 0, NULL, 0, 0, 0, &res), LLB_STATUS_OK);
    assert_true(mask[res.token_id / 32] >> (res.token_id % 32) & 1u);
    for (int k = 0; k < 3; k++) assert_true(mask[res.top[k].token_id / 32] >> (res.top[k].token_id % 32) & 1u);
    assert_true(isinf(res.top[3].logprob) && res.top[3].logprob < 0); /* only 3 tokens are possible */
  }
  sampler_destroy(sm);
  runner_so_req_free(so, &q);
  runner_so_destroy(so);
}

static void test_same_spec_shares_a_grammar_and_matchers_follow_their_outputs(void **state) {
  (void)state;
  struct runner_so *so = make_so();
  static const char c1[] = "[\"a1\",\"b22\"]", c2[] = "[\"a1\"]";
  const struct llb_structured_outputs s1 = {.kind = LLB_SO_CHOICE, .spec = {c1, sizeof c1 - 1}},
                                      s2 = {.kind = LLB_SO_CHOICE, .spec = {c2, sizeof c2 - 1}};
  struct runner_so_req a = {0}, b = {0}, c = {0};
  assert_int_equal(runner_so_req_init(so, &a, &s1, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(runner_so_req_init(so, &b, &s1, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(runner_so_req_init(so, &c, &s2, NULL, 0), LLB_STATUS_OK);
  assert_ptr_equal(a.grammar, b.grammar);
  assert_ptr_not_equal(a.grammar, c.grammar);
  /* token of byte x: x - '!' */
  const int32_t b22[] = {'b' - '!', '2' - '!', '2' - '!', EOG};
  uint32_t mask[(MASK_NV + 31) / 32];
  assert_int_equal(runner_so_req_sync(so, &a, b22, 2), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &a, mask), 1); /* only '2' */
  assert_true(mask[('2' - '!') / 32] >> (('2' - '!') % 32) & 1u);
  assert_int_equal(runner_so_req_sync(so, &a, b22, 4), LLB_STATUS_OK);
  assert_int_equal(a.num_accepted, 4);
  assert_int_equal(runner_so_req_sync(so, &a, b22, 1), LLB_STATUS_OK); /* trimmed: replayed */
  assert_int_equal(a.num_accepted, 1);
  assert_int_equal(runner_so_fill_mask(so, &a, mask), 1);
  const int32_t a1[] = {'a' - '!', '1' - '!'};
  /* outputs replaced under it ("b" then "a1"): '1' after 'b' is refused, the state reset... */
  assert_int_equal(runner_so_req_sync(so, &a, a1, 2), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(a.num_accepted, -1);
  assert_int_equal(runner_so_req_sync(so, &a, a1, 2), LLB_STATUS_OK); /* ...and the next sync replays */
  assert_int_equal(a.num_accepted, 2);
  assert_int_equal(runner_so_fill_mask(so, &a, mask), 1);              /* "a1" is complete: EOG only */
  assert_true(mask[EOG / 32] >> (EOG % 32) & 1u);
  assert_int_equal(runner_so_req_sync(so, &c, b22, 1), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(c.num_accepted, -1);
  runner_so_req_free(so, &a);
  runner_so_req_free(so, &b);
  runner_so_req_free(so, &c);
  static const char ebnf[] = "root ::= \"a\" [0-9]?"; /* a GBNF grammar: "a", then maybe a digit */
  const struct llb_structured_outputs gr = {.kind = LLB_SO_GRAMMAR, .spec = {ebnf, sizeof ebnf - 1}};
  assert_int_equal(runner_so_req_init(so, &a, &gr, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &a, mask), 1);
  const int32_t a_tok[] = {'a' - '!'};
  assert_int_equal(runner_so_req_sync(so, &a, a_tok, 1), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &a, mask), 11); /* ten digits and EOG */
  assert_true(mask[EOG / 32] >> (EOG % 32) & 1u);
  runner_so_req_free(so, &a);
  static const char bad_ebnf[] = "root ::= undefined";
  const struct llb_structured_outputs bad = {.kind = LLB_SO_GRAMMAR, .spec = {bad_ebnf, sizeof bad_ebnf - 1}};
  assert_int_equal(runner_so_req_init(so, &a, &bad, NULL, 0), LLB_STATUS_MALFORMED);
  assert_null(a.grammar);
  const struct llb_structured_outputs rx = {.kind = LLB_SO_REGEX, .spec = {"[a-c]{2}", 8}}; /* a regex: two of a, b, c */
  assert_int_equal(runner_so_req_init(so, &a, &rx, NULL, 0), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &a, mask), 3);
  runner_so_req_free(so, &a);
  runner_so_destroy(so);
}

#define T(c) ((int32_t)((c) - '!'))

/* With a reasoning parser the grammar waits for the end of the reasoning (vLLM's rule): no
 * mask while the model reasons, the grammar from just past the end marker (found even when it
 * straddles two syncs), from output 0 when the prompt already closed the reasoning. */
static void test_grammar_starts_after_the_end_of_reasoning(void **state) {
  (void)state;
  struct runner_so *so = make_so();
  static const char choice[] = "[\"ab\"]";
  const struct llb_structured_outputs spec = {LLB_SO_CHOICE, {choice, sizeof choice - 1}, REASONING_QWEN3};
  struct runner_so_req q = {0};
  const int32_t none[] = {T('x')};
  assert_int_equal(runner_so_req_init(so, &q, &spec, none, 1), LLB_STATUS_UNSUPPORTED); /* no markers known yet */
  struct reasoning_marker_ids m = {.num_start = 1, .num_end = 1, .start_len = {1}, .end_len = {2}};
  m.start[0][0] = T('%');
  m.end[0][0] = T('#'), m.end[0][1] = T('$');
  runner_so_set_reasoning_markers(so, REASONING_QWEN3, &m);
  uint32_t mask[(MASK_NV + 31) / 32];
  /* a prompt with no marker: the output starts inside the reasoning */
  assert_int_equal(runner_so_req_init(so, &q, &spec, none, 1), LLB_STATUS_OK);
  const int32_t out[] = {T('z'), T('#'), T('$'), T('a'), T('b'), EOG};
  assert_int_equal(runner_so_req_sync(so, &q, out, 2), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &q, mask), -1); /* "z#": still reasoning, no mask */
  assert_int_equal(runner_so_req_sync(so, &q, out, 3), LLB_STATUS_OK); /* "#$" across two syncs */
  assert_int_equal(q.grammar_start, 3);
  assert_int_equal(runner_so_fill_mask(so, &q, mask), 1); /* only 'a' */
  assert_true(mask[T('a') / 32] >> (T('a') % 32) & 1u);
  assert_int_equal(runner_so_req_sync(so, &q, out, 6), LLB_STATUS_OK);
  const int32_t bad[] = {T('#'), T('$'), T('q')};
  assert_int_equal(runner_so_req_sync(so, &q, bad, 3), LLB_STATUS_INVALID_ARGUMENT); /* replayed, 'q' refused */
  runner_so_req_free(so, &q);
  /* the prompt ends the reasoning ("%...#$"): the grammar from output 0 */
  const int32_t closed[] = {T('%'), T('y'), T('#'), T('$')};
  assert_int_equal(runner_so_req_init(so, &q, &spec, closed, 4), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &q, mask), 1);
  assert_int_equal(runner_so_req_sync(so, &q, out + 3, 2), LLB_STATUS_OK);
  runner_so_req_free(so, &q);
  /* ...and opened again after it: the last marker decides */
  const int32_t reopened[] = {T('#'), T('$'), T('%')};
  assert_int_equal(runner_so_req_init(so, &q, &spec, reopened, 3), LLB_STATUS_OK);
  assert_int_equal(runner_so_fill_mask(so, &q, mask), -1);
  runner_so_req_free(so, &q);
  runner_so_destroy(so);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mask_sets_exactly_the_disallowed_tokens_to_minus_inf),
      cmocka_unit_test(test_sampler_after_the_mask_draws_only_allowed_tokens),
      cmocka_unit_test(test_same_spec_shares_a_grammar_and_matchers_follow_their_outputs),
      cmocka_unit_test(test_grammar_starts_after_the_end_of_reasoning),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
