/* Model runner (actors/gpu_worker/model_runner.c) on a tiny random LLaMA built with the GGUF
 * writer (2 layers, E 64, 4 heads, 2 KV heads, head_dim 16, vocab 97, block size 4).
 *
 * - The flattened batch of a hand-made case: positions, slot_mapping over non-contiguous
 *   blocks, query_start_loc, seq_lens, logits_indices (a partial prefill samples nothing),
 *   block table replacement of a request resumed through CachedRequestData.
 * - Batch invariance (docs/design.md §5): two requests, one chunk-prefilled while the other
 *   decodes, the greedy one preempted and resumed as a new request with recompute on other
 *   blocks, the seeded one finished and removed: each gets exactly the tokens of a run alone
 *   with no chunking.
 * - Logprobs: rows padded to the batch's largest top-n, sampled token first, ranks.
 * - Structured output: over a one-byte-per-token vocabulary, a seeded constrained request
 *   samples only what its grammar allows and ends with EOG; preempted and resumed (its outputs
 *   replayed into a fresh matcher) it samples the same tokens; outputs that break the grammar
 *   fail the step naming the request.
 * - Errors leave the batch unchanged and are reported in the output's error field: unknown
 *   request (delta and scheduled entry), block id out of range, token budget, block size.
 * - The wire's sampling params reach the sampler field for field (mr_sampler_params).
 * - --device sim (runner_sim.h): a request's tokens are its key's at every output position,
 *   the same in any batch and after preemption; a step lasts at least its modelled time,
 *   asleep; what needs logits is refused naming the request.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/gpu_worker/model_runner.h"
#include "actors/gpu_worker/model_runner_internal.h"
#include "actors/gpu_worker/runner_sim.h"
#include "base/log.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/sampling/sampler.h"
#include "model/structured/structured_output.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 64, H = 4, HKV = 2, D = 16, F = 128, V = 97, CTX = 256, BS = 4, NB = 64, MAX_TOK = 16 };

static uint64_t rng_state = 777;
struct fixture {
  void *buf;
  struct gguf_file *f;
  struct llama_model *m;
};

static int setup(void **state) {
  struct fixture *fx = calloc(1, sizeof(*fx));
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  const struct gguf_llama_hparams hp = {L, CTX, E, F, H, HKV, D, V, 10000.0f};
  assert_int_equal(gguf_writer_add_random_llama(w, &hp, 4.0f, &rng_state), LLB_STATUS_OK);
  assert_int_equal(gguf_writer_add_tiny_vocab(w, V), LLB_STATUS_OK); /* the sim device reads it */
  size_t size;
  assert_int_equal(gguf_writer_write_memory(w, &fx->buf, &size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  assert_int_equal(gguf_open_memory(fx->buf, size, &fx->f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(fx->f, &fx->m), LLB_STATUS_OK);
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

static struct model_runner *make_runner(struct fixture *fx, int32_t threads) {
  struct model_runner_config cfg = {.num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                    .num_threads = threads};
  struct model_runner *r;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_OK);
  assert_int_equal(model_runner_kv_cache_bytes(r), (int64_t)2 * L * NB * BS * HKV * D * 2);
  return r;
}

/* ---- a scripted scheduler: requests with their blocks, building SchedulerOutput views ---- */

struct sim_req {
  const char *id;
  int32_t tokens[64]; /* prompt then outputs */
  int32_t num_prompt, num_tokens, num_computed;
  int32_t worker_prompt; /* tokens the worker holds as prompt */
  int32_t blocks[32], num_blocks, num_blocks_sent;
  bool on_worker;
  struct llb_sampling_params params;
  struct llb_structured_outputs so; /* kind NONE: unconstrained */
};

struct sim_step {
  struct llb_scheduler_output so;
  struct llb_new_request_data news[4];
  struct llb_str cached_ids[4], finished[4], preempted[4];
  bool resumed[4];
  int32_t new_block_ids[64], new_block_counts[4], computed[4], num_output[4];
  struct llb_scheduled_tokens sched[4];
};

static int32_t next_block = NB - 1; /* hands out blocks downwards: never contiguous upwards */

static void sim_begin(struct sim_step *s, uint64_t step) {
  memset(s, 0, sizeof(*s));
  s->so = (struct llb_scheduler_output){.version = 1, .step = step, .block_size = BS,
                                        .scheduled_new_reqs = s->news, .num_scheduled_tokens = s->sched,
                                        .finished_req_ids = s->finished, .preempted_req_ids = s->preempted};
  s->so.scheduled_cached_reqs = (struct llb_cached_request_data){
      .req_ids = s->cached_ids, .resumed_from_preemption = s->resumed, .new_block_ids = s->new_block_ids,
      .new_block_counts = s->new_block_counts, .num_computed_tokens = s->computed,
      .num_output_tokens = s->num_output};
}

/* Schedules n tokens of q: allocates its blocks, as new data or as a cached delta. */
static void sim_schedule(struct sim_step *s, struct sim_req *q, int32_t n) {
  while (q->num_blocks * BS < q->num_computed + n) q->blocks[q->num_blocks++] = next_block--;
  assert_true(next_block >= 0);
  if (!q->on_worker) {
    /* A resumed request comes again as new, with its outputs in output_token_ids. */
    s->news[s->so.num_scheduled_new_reqs++] = (struct llb_new_request_data){
        .req_id = llb_str_c(q->id), .prompt_token_ids = q->tokens, .num_prompt_token_ids = q->num_prompt,
        .output_token_ids = q->tokens + q->num_prompt, .num_output_token_ids = q->num_tokens - q->num_prompt,
        .sampling_params = &q->params, .block_ids = q->blocks, .num_block_ids = q->num_blocks,
        .num_computed_tokens = q->num_computed, .structured_outputs = q->so};
    q->worker_prompt = q->num_prompt;
    q->on_worker = true;
  } else {
    struct llb_cached_request_data *cd = &s->so.scheduled_cached_reqs;
    const int32_t j = cd->num_reqs++;
    s->cached_ids[j] = llb_str_c(q->id);
    s->new_block_counts[j] = q->num_blocks - q->num_blocks_sent;
    for (int32_t b = q->num_blocks_sent; b < q->num_blocks; b++) s->new_block_ids[cd->num_new_block_ids++] = q->blocks[b];
    s->computed[j] = q->num_computed;
    s->num_output[j] = q->num_tokens - q->worker_prompt;
  }
  q->num_blocks_sent = q->num_blocks;
  s->sched[s->so.num_scheduled_reqs++] = (struct llb_scheduled_tokens){.req_id = llb_str_c(q->id), .num_tokens = n};
  s->so.total_num_scheduled_tokens += n;
}

static void sim_preempt(struct sim_step *s, struct sim_req *q) {
  s->preempted[s->so.num_preempted_req_ids++] = llb_str_c(q->id);
  q->on_worker = false;
  q->num_computed = 0;
  q->num_blocks = q->num_blocks_sent = 0;
}

/* Runs the step and applies its output to the scheduled requests (in `reqs`). */
static struct llb_model_runner_output sim_run(struct model_runner *r, struct sim_step *s, struct sim_req **reqs,
                                              int nreqs) {
  struct llb_model_runner_output out;
  const llb_status st = model_runner_execute(r, &s->so, &out);
  if (st) print_error("step %llu: %s (field %s)\n", (unsigned long long)s->so.step, out.error.message.data,
                      out.error.field.data);
  assert_int_equal(st, LLB_STATUS_OK);
  assert_int_equal(out.step, s->so.step);
  assert_int_equal(out.error.code, 0);
  assert_int_equal(out.num_reqs, s->so.num_scheduled_reqs);
  int32_t off = 0;
  for (int32_t i = 0; i < out.num_reqs; i++) {
    struct sim_req *q = NULL;
    for (int k = 0; k < nreqs; k++)
      if (strlen(reqs[k]->id) == out.req_ids[i].len && memcmp(reqs[k]->id, out.req_ids[i].data, out.req_ids[i].len) == 0)
        q = reqs[k];
    assert_non_null(q);
    int32_t n = 0;
    for (int32_t k = 0; k < s->so.num_scheduled_reqs; k++)
      if (strcmp(s->sched[k].req_id.data, q->id) == 0) n = s->sched[k].num_tokens;
    q->num_computed += n;
    const bool at_end = q->num_computed == q->num_tokens;
    assert_int_equal(out.num_sampled[i], at_end ? 1 : 0); /* a partial prefill samples nothing */
    if (at_end) q->tokens[q->num_tokens++] = out.sampled_token_ids[off++];
  }
  assert_int_equal(off, out.num_sampled_token_ids);
  return out;
}

static struct sim_req make_req(const char *id, int32_t num_prompt, uint32_t salt, bool greedy) {
  struct sim_req q = {.id = id, .num_prompt = num_prompt, .num_tokens = num_prompt};
  for (int32_t t = 0; t < num_prompt; t++) q.tokens[t] = (int32_t)((t * 31u + salt * 17u + 5u) % V);
  llb_sampling_params_init(&q.params);
  q.params.temperature = greedy ? 0.0f : 0.9f;
  q.params.seed = 4242 + salt;
  q.params.has_seed = true;
  return q;
}

/* The reference: q alone on runner r (destroyed after), whole prompt in one step, then one
 * token per step. */
static void run_alone_on(struct model_runner *r, struct sim_req *q, int32_t num_outputs) {
  struct sim_step s;
  uint64_t step = 1;
  while (q->num_tokens - q->num_prompt < num_outputs) {
    sim_begin(&s, step++);
    sim_schedule(&s, q, q->num_tokens - q->num_computed);
    sim_run(r, &s, &q, 1);
  }
  model_runner_destroy(r);
}

static void run_alone(struct fixture *fx, struct sim_req *q, int32_t num_outputs) {
  run_alone_on(make_runner(fx, 1), q, num_outputs);
}

enum { NUM_OUT = 8 };

static void test_mixed_chunked_preempted_batch_matches_each_request_alone(void **state) {
  struct fixture *fx = *state;
  struct sim_req ref_a = make_req("a", 10, 1, true), ref_b = make_req("b", 13, 2, false);
  run_alone(fx, &ref_a, NUM_OUT);
  run_alone(fx, &ref_b, NUM_OUT);

  struct sim_req a = make_req("a", 10, 1, true), b = make_req("b", 13, 2, false);
  b.params.logprobs = 3;
  struct sim_req *reqs[] = {&a, &b};
  struct model_runner *r = make_runner(fx, 2);
  struct sim_step s;
  uint64_t step = 1;
  /* 1: a's whole prompt. 2: a decodes, b's first chunk (7 of 13). 3: a decodes, b's last chunk. */
  sim_begin(&s, step++);
  sim_schedule(&s, &a, 10);
  sim_run(r, &s, reqs, 2);
  sim_begin(&s, step++);
  sim_schedule(&s, &a, 1);
  sim_schedule(&s, &b, 7);
  struct llb_model_runner_output out = sim_run(r, &s, reqs, 2);
  assert_int_equal(out.num_sampled_token_ids, 1);
  assert_int_equal(out.logprobs.num_tokens, 0); /* b (logprobs) sampled nothing yet */
  sim_begin(&s, step++);
  sim_schedule(&s, &a, 1);
  sim_schedule(&s, &b, 6);
  out = sim_run(r, &s, reqs, 2);
  assert_int_equal(out.num_sampled_token_ids, 2);
  assert_int_equal(out.logprobs.num_tokens, 2); /* a's row padded to b's top-3 */
  assert_int_equal(out.logprobs.num_logprobs_per_token, 4);
  for (int32_t i = 0; i < 2; i++) {
    const int32_t *ids = out.logprobs.logprob_token_ids + i * 4;
    const float *lps = out.logprobs.logprobs + i * 4;
    assert_int_equal(ids[0], out.sampled_token_ids[i]);
    assert_true(lps[0] <= 0.0f && lps[1] >= lps[2] && lps[2] >= lps[3] && isfinite(lps[3]));
    assert_true(out.logprobs.sampled_token_ranks[i] >= 1);
    if (strcmp(out.req_ids[i].data, "a") == 0) { /* greedy: the top-1 is the sampled one */
      assert_int_equal(ids[1], ids[0]);
      assert_int_equal(out.logprobs.sampled_token_ranks[i], 1);
    }
  }
  /* 4..: both decode; at step 6 a is preempted and later resumed as new on other blocks,
   * recomputed in chunks of at most 12 tokens: its 15 known tokens take two, and the first,
   * sent as NewRequestData, already reaches past its 10 prompt tokens into its outputs. */
  while (a.num_tokens - a.num_prompt < NUM_OUT || b.num_tokens - b.num_prompt < NUM_OUT) {
    sim_begin(&s, step);
    if (step == 6) {
      sim_preempt(&s, &a);
    } else if (a.num_tokens - a.num_prompt < NUM_OUT) {
      int32_t n = a.num_tokens - a.num_computed;
      if (n > 12) n = 12;
      sim_schedule(&s, &a, n);
    }
    if (b.num_tokens - b.num_prompt < NUM_OUT) sim_schedule(&s, &b, 1);
    if (step == 6) assert_int_equal(model_runner_num_reqs(r), 2);
    sim_run(r, &s, reqs, 2);
    if (step == 6) assert_int_equal(model_runner_num_reqs(r), 1);
    step++;
  }
  assert_int_equal(a.num_tokens, ref_a.num_tokens);
  assert_memory_equal(a.tokens, ref_a.tokens, sizeof(int32_t) * (size_t)a.num_tokens);
  assert_int_equal(b.num_tokens, ref_b.num_tokens);
  assert_memory_equal(b.tokens, ref_b.tokens, sizeof(int32_t) * (size_t)b.num_tokens);
  /* The greedy tokens are not all the same token (the check would be weak otherwise). */
  bool varied = false;
  for (int32_t t = a.num_prompt + 1; t < a.num_tokens; t++) varied |= a.tokens[t] != a.tokens[a.num_prompt];
  assert_true(varied);

  /* Finished requests leave the batch. */
  sim_begin(&s, step++);
  s.finished[s.so.num_finished_req_ids++] = llb_str_c("b");
  s.finished[s.so.num_finished_req_ids++] = llb_str_c("a");
  s.finished[s.so.num_finished_req_ids++] = llb_str_c("never-seen"); /* ignored, as vLLM */
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
  assert_int_equal(out.num_reqs, 0);
  assert_int_equal(model_runner_num_reqs(r), 0);
  model_runner_destroy(r);
}

static void test_batch_has_positions_slots_and_logits_rows_of_the_scheduled_ranges(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_runner(fx, 1);
  struct llb_sampling_params p;
  llb_sampling_params_init(&p);
  p.temperature = 0.0f;
  const int32_t x_prompt[6] = {3, 14, 15, 92, 65, 35}, y_prompt[3] = {27, 18, 28};
  struct sim_step s;
  struct llb_model_runner_output out;

  /* Step 1: x's prompt on blocks {5, 2}. */
  sim_begin(&s, 1);
  s.news[0] = (struct llb_new_request_data){.req_id = llb_str_c("x"), .prompt_token_ids = x_prompt,
                                            .num_prompt_token_ids = 6, .sampling_params = &p,
                                            .block_ids = (const int32_t[]){5, 2}, .num_block_ids = 2};
  s.so.num_scheduled_new_reqs = 1;
  s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("x"), .num_tokens = 6};
  s.so.num_scheduled_reqs = 1;
  s.so.total_num_scheduled_tokens = 6;
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
  const struct llama_batch *b = model_runner_last_batch(r);
  assert_int_equal(b->num_tokens, 6);
  assert_memory_equal(b->token_ids, x_prompt, sizeof(x_prompt));
  for (int32_t t = 0; t < 6; t++) assert_int_equal(b->positions[t], t);
  const int64_t slots1[6] = {20, 21, 22, 23, 8, 9};
  assert_memory_equal(b->slot_mapping, slots1, sizeof(slots1));
  assert_int_equal(b->num_seqs, 1);
  assert_int_equal(b->query_start_loc[1], 6);
  assert_int_equal(b->seq_lens[0], 6);
  assert_int_equal(b->max_blocks_per_seq, 2);
  assert_int_equal(b->block_tables[0], 5);
  assert_int_equal(b->block_tables[1], 2);
  assert_int_equal(b->num_logits, 1);
  assert_int_equal(b->logits_indices[0], 5);
  assert_int_equal(out.num_sampled_token_ids, 1);
  const int32_t x_out0 = out.sampled_token_ids[0];

  /* Step 2: x decodes at position 6 (block 2, offset 2); y's first 2 of 3 prompt tokens on
   * block {7}: a partial prefill, no logits row. */
  sim_begin(&s, 2);
  s.cached_ids[0] = llb_str_c("x");
  s.computed[0] = 6;
  s.num_output[0] = 1;
  s.so.scheduled_cached_reqs.num_reqs = 1;
  s.news[0] = (struct llb_new_request_data){.req_id = llb_str_c("y"), .prompt_token_ids = y_prompt,
                                            .num_prompt_token_ids = 3, .sampling_params = &p,
                                            .block_ids = (const int32_t[]){7}, .num_block_ids = 1};
  s.so.num_scheduled_new_reqs = 1;
  s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("x"), .num_tokens = 1};
  s.sched[1] = (struct llb_scheduled_tokens){.req_id = llb_str_c("y"), .num_tokens = 2};
  s.so.num_scheduled_reqs = 2;
  s.so.total_num_scheduled_tokens = 3;
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
  b = model_runner_last_batch(r);
  assert_int_equal(b->num_tokens, 3);
  const int32_t tok2[3] = {x_out0, 27, 18}, pos2[3] = {6, 0, 1}, qsl2[3] = {0, 1, 3}, len2[2] = {7, 2};
  const int64_t slots2[3] = {10, 28, 29};
  assert_memory_equal(b->token_ids, tok2, sizeof(tok2));
  assert_memory_equal(b->positions, pos2, sizeof(pos2));
  assert_memory_equal(b->slot_mapping, slots2, sizeof(slots2));
  assert_memory_equal(b->query_start_loc, qsl2, sizeof(qsl2));
  assert_memory_equal(b->seq_lens, len2, sizeof(len2));
  assert_int_equal(b->max_blocks_per_seq, 2);
  assert_int_equal(b->block_tables[2], 7); /* row 1 = y, padded */
  assert_int_equal(b->num_logits, 1);
  assert_int_equal(b->logits_indices[0], 0);
  assert_int_equal(out.num_reqs, 2);
  assert_int_equal(out.num_sampled[0], 1);
  assert_int_equal(out.num_sampled[1], 0);
  const int32_t x_out1 = out.sampled_token_ids[0];

  /* Step 3: x resumed through CachedRequestData: its block table is replaced by {11, 12}
   * and its 8 known tokens are recomputed; y's last prompt token at position 2. */
  sim_begin(&s, 3);
  s.cached_ids[0] = llb_str_c("x");
  s.resumed[0] = true;
  s.new_block_counts[0] = 2;
  s.new_block_ids[0] = 11;
  s.new_block_ids[1] = 12;
  s.so.scheduled_cached_reqs.num_new_block_ids = 2;
  s.num_output[0] = 2;
  s.cached_ids[1] = llb_str_c("y");
  s.computed[1] = 2;
  s.so.scheduled_cached_reqs.num_reqs = 2;
  s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("y"), .num_tokens = 1};
  s.sched[1] = (struct llb_scheduled_tokens){.req_id = llb_str_c("x"), .num_tokens = 8};
  s.so.num_scheduled_reqs = 2;
  s.so.total_num_scheduled_tokens = 9;
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
  b = model_runner_last_batch(r);
  assert_int_equal(b->num_tokens, 9);
  const int32_t tok3[9] = {3, 14, 15, 92, 65, 35, x_out0, x_out1, 28};
  const int64_t slots3[9] = {44, 45, 46, 47, 48, 49, 50, 51, 30};
  const int32_t pos3[9] = {0, 1, 2, 3, 4, 5, 6, 7, 2};
  assert_memory_equal(b->token_ids, tok3, sizeof(tok3)); /* batch order: x's row first */
  assert_memory_equal(b->slot_mapping, slots3, sizeof(slots3));
  assert_memory_equal(b->positions, pos3, sizeof(pos3));
  assert_int_equal(b->num_logits, 2);
  assert_int_equal(b->logits_indices[0], 7);
  assert_int_equal(b->logits_indices[1], 8);
  assert_int_equal(out.num_sampled_token_ids, 2);
  model_runner_destroy(r);
}

/* Runs `so` expecting status `want` with field `field`; the batch must keep `num_reqs`. */
static void expect_error(struct model_runner *r, const struct llb_scheduler_output *so, llb_status want,
                         const char *field, int32_t num_reqs) {
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, so, &out), want);
  assert_int_equal(out.error.code, (int32_t)want);
  assert_true(out.error.message.len > 0);
  assert_string_equal(out.error.field.data, field);
  assert_int_equal(out.num_reqs, 0);
  assert_int_equal(out.num_sampled_token_ids, 0);
  assert_int_equal(model_runner_num_reqs(r), num_reqs);
}

static void test_bad_scheduler_output_is_an_error_status_and_changes_nothing(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_runner(fx, 1);
  struct sim_req q = make_req("q", 5, 3, true);
  struct sim_req *reqs[] = {&q};
  struct sim_step s;
  sim_begin(&s, 1);
  sim_schedule(&s, &q, 5);
  sim_run(r, &s, reqs, 1);

  /* A delta for a request the worker never saw. */
  sim_begin(&s, 2);
  s.cached_ids[0] = llb_str_c("ghost");
  s.so.scheduled_cached_reqs.num_reqs = 1;
  expect_error(r, &s.so, LLB_STATUS_NOT_FOUND, "scheduled_cached_reqs.req_ids[0]", 1);
  /* A scheduled entry for an unknown request. */
  sim_begin(&s, 2);
  s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("ghost"), .num_tokens = 1};
  s.so.num_scheduled_reqs = 1;
  s.so.total_num_scheduled_tokens = 1;
  expect_error(r, &s.so, LLB_STATUS_NOT_FOUND, "num_scheduled_tokens[0]", 1);
  /* A new request on a block outside the cache, beside a valid finish of q: neither applies. */
  struct llb_sampling_params p;
  llb_sampling_params_init(&p);
  sim_begin(&s, 2);
  s.news[0] = (struct llb_new_request_data){.req_id = llb_str_c("n"), .prompt_token_ids = q.tokens,
                                            .num_prompt_token_ids = 3, .sampling_params = &p,
                                            .block_ids = (const int32_t[]){1, NB}, .num_block_ids = 2};
  s.so.num_scheduled_new_reqs = 1;
  s.finished[s.so.num_finished_req_ids++] = llb_str_c("q");
  expect_error(r, &s.so, LLB_STATUS_INVALID_ARGUMENT, "scheduled_new_reqs.block_ids[0]", 1);
  /* A cached delta appending a negative block id. */
  sim_begin(&s, 2);
  sim_schedule(&s, &q, 1);
  s.new_block_counts[0] = 1;
  s.new_block_ids[0] = -3;
  s.so.scheduled_cached_reqs.num_new_block_ids = 1;
  expect_error(r, &s.so, LLB_STATUS_INVALID_ARGUMENT, "scheduled_cached_reqs.new_block_ids[0]", 1);
  /* More tokens than the worker's scratch holds. */
  struct sim_req big = make_req("big", MAX_TOK + 1, 4, true);
  sim_begin(&s, 2);
  sim_schedule(&s, &big, MAX_TOK + 1);
  expect_error(r, &s.so, LLB_STATUS_TOO_LARGE, "total_num_scheduled_tokens", 1);
  /* A range past the request's known tokens. */
  sim_begin(&s, 2);
  s.cached_ids[0] = llb_str_c("q");
  s.computed[0] = q.num_computed;
  s.num_output[0] = 1;
  s.so.scheduled_cached_reqs.num_reqs = 1;
  s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("q"), .num_tokens = 2};
  s.so.num_scheduled_reqs = 1;
  s.so.total_num_scheduled_tokens = 2;
  expect_error(r, &s.so, LLB_STATUS_INVALID_ARGUMENT, "num_scheduled_tokens[0]", 1);
  /* A block size other than the cache's. */
  sim_begin(&s, 2);
  s.so.block_size = BS * 2;
  expect_error(r, &s.so, LLB_STATUS_INVALID_ARGUMENT, "block_size", 1);

  /* The runner keeps serving: q decodes as if nothing had happened. */
  struct sim_req ref = make_req("q", 5, 3, true);
  run_alone(fx, &ref, 2);
  sim_begin(&s, 3);
  sim_schedule(&s, &q, 1);
  sim_run(r, &s, reqs, 1);
  assert_memory_equal(q.tokens, ref.tokens, sizeof(int32_t) * 7);
  model_runner_destroy(r);
}

/* The worker names the request whose own input fails the step (ModelRunnerOutput
 * failed_req_id), so the scheduler can finish it and go on with the others; a step that is
 * wrong as a whole (an unknown request: the scheduler's view, not a request's input) names
 * none. NaN sampling floats and token ids outside the vocabulary are refused before the
 * forward pass and change nothing. */
static void test_worker_names_the_request_whose_input_fails_the_step(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_runner(fx, 1);
  struct sim_req q = make_req("q", 5, 3, true);
  struct sim_req *reqs[] = {&q};
  struct sim_step s;
  sim_begin(&s, 1);
  sim_schedule(&s, &q, 5);
  sim_run(r, &s, reqs, 1);
  for (int c = 0; c < 4; c++) {
    struct llb_sampling_params p;
    llb_sampling_params_init(&p);
    int32_t toks[3] = {q.tokens[0], q.tokens[1], q.tokens[2]};
    if (c == 0) p.temperature = NAN;
    if (c == 1) p.top_p = INFINITY;
    if (c == 2) toks[1] = 1 << 30;
    if (c == 3) toks[2] = -1;
    sim_begin(&s, 2);
    s.news[0] = (struct llb_new_request_data){.req_id = llb_str_c("poison"), .prompt_token_ids = toks,
                                              .num_prompt_token_ids = 3, .sampling_params = &p,
                                              .block_ids = (const int32_t[]){1}, .num_block_ids = 1};
    s.so.num_scheduled_new_reqs = 1;
    s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("poison"), .num_tokens = 3};
    s.so.num_scheduled_reqs = 1;
    s.so.total_num_scheduled_tokens = 3;
    struct llb_model_runner_output out;
    assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_INVALID_ARGUMENT);
    assert_string_equal(out.failed_req_id.data, "poison");
    assert_int_equal(model_runner_num_reqs(r), 1);
  }
  sim_begin(&s, 2);
  s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("ghost"), .num_tokens = 1};
  s.so.num_scheduled_reqs = 1;
  s.so.total_num_scheduled_tokens = 1;
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_NOT_FOUND);
  assert_int_equal(out.failed_req_id.len, 0);
  /* q goes on as if nothing had happened */
  struct sim_req ref = make_req("q", 5, 3, true);
  run_alone(fx, &ref, 2);
  sim_begin(&s, 3);
  sim_schedule(&s, &q, 1);
  sim_run(r, &s, reqs, 1);
  assert_memory_equal(q.tokens, ref.tokens, sizeof(int32_t) * 7);
  model_runner_destroy(r);
}

/* Async scheduling's wire form: step N+1's decode input is the token the worker sampled in
 * step N, which the scheduler has not seen: the delta carries no token, only
 * num_output_tokens counting it. The tokens equal the synchronous run's; a count beyond the
 * tokens the worker sampled is an error reply that changes nothing. */
static void test_decode_input_may_be_the_workers_own_unapplied_sample(void **state) {
  struct fixture *fx = *state;
  struct sim_req ref = make_req("q", 5, 7, true);
  run_alone(fx, &ref, 3);
  struct model_runner *r = make_runner(fx, 1);
  struct sim_req q = make_req("q", 5, 7, true);
  struct sim_step s;
  sim_begin(&s, 1);
  sim_schedule(&s, &q, 5);
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
  int32_t got[3] = {out.sampled_token_ids[0]};
  for (int32_t k = 1; k < 3; k++) { /* the scheduler knows only how many tokens were sampled */
    sim_begin(&s, (uint64_t)k + 1);
    s.cached_ids[0] = llb_str_c("q");
    s.computed[0] = 5 + k - 1;
    s.num_output[0] = k;
    s.so.scheduled_cached_reqs.num_reqs = 1;
    s.sched[0] = (struct llb_scheduled_tokens){.req_id = llb_str_c("q"), .num_tokens = 1};
    s.so.num_scheduled_reqs = 1;
    s.so.total_num_scheduled_tokens = 1;
    if (k == 2) { /* first a malformed claim: a token the worker never sampled */
      s.num_output[0] = k + 1;
      s.computed[0] = 5 + k;
      expect_error(r, &s.so, LLB_STATUS_INVALID_ARGUMENT, "scheduled_cached_reqs.req_ids[0]", 1);
      s.num_output[0] = k;
      s.computed[0] = 5 + k - 1;
    }
    assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
    assert_int_equal(out.num_sampled[0], 1);
    got[k] = out.sampled_token_ids[0];
  }
  assert_memory_equal(got, ref.tokens + 5, sizeof got);
  model_runner_destroy(r);
}

/* Token i < V - 1 is the one byte ' ' + i; token V - 1 is the end of generation. */
enum { SO_EOG = V - 1 };
static struct so_vocab *byte_vocab(void) {
  static char bytes[V];
  const char *pieces[V];
  size_t lens[V];
  for (int32_t i = 0; i < V; i++) {
    bytes[i] = (char)(' ' + i);
    pieces[i] = &bytes[i];
    lens[i] = i == SO_EOG ? 0 : 1;
  }
  const int32_t eog = SO_EOG;
  struct so_vocab *v;
  assert_int_equal(so_vocab_create(V, pieces, lens, &eog, 1, &v), LLB_STATUS_OK);
  return v;
}

static const char SO_CHOICES[] = "[\"yes\",\"no\",\"maybe\",\"[]\"]";

/* Decodes q's outputs until EOG (or 8 tokens), preempting it once after `preempt_after`
 * outputs (0 = never); returns the outputs as text (EOG not included). */
static void run_constrained(struct fixture *fx, struct sim_req *q, int32_t preempt_after, char *text) {
  next_block = NB - 1; /* a fresh cache */
  struct model_runner *r = make_runner(fx, 1);
  assert_int_equal(model_runner_set_structured_vocab(r, byte_vocab()), LLB_STATUS_OK);
  struct sim_step s;
  uint64_t step = 1;
  bool preempted = false;
  while (q->num_tokens - q->num_prompt < 8 && (q->num_tokens == q->num_prompt || q->tokens[q->num_tokens - 1] != SO_EOG)) {
    sim_begin(&s, step++);
    if (!preempted && preempt_after > 0 && q->num_tokens - q->num_prompt == preempt_after) {
      sim_preempt(&s, q);
      preempted = true;
    }
    sim_schedule(&s, q, q->num_tokens - q->num_computed);
    sim_run(r, &s, &q, 1);
    double mask_s, wait_s;
    model_runner_last_mask_seconds(r, &mask_s, &wait_s);
    assert_true(mask_s >= 0 && wait_s >= 0);
  }
  int32_t n = 0;
  for (int32_t t = q->num_prompt; t < q->num_tokens && q->tokens[t] != SO_EOG; t++) text[n++] = (char)(' ' + q->tokens[t]);
  text[n] = '\0';
  model_runner_destroy(r);
}

static void test_structured_request_samples_only_its_grammar_and_resumes_the_same(void **state) {
  struct fixture *fx = *state;
  for (uint32_t salt = 1; salt <= 6; salt++) {
    struct sim_req a = make_req("c", 6, salt, false), b = make_req("c", 6, salt, false);
    a.params.temperature = b.params.temperature = 1.0f;
    a.so = b.so = (struct llb_structured_outputs){.kind = LLB_SO_CHOICE, .spec = {SO_CHOICES, sizeof SO_CHOICES - 1}};
    char ta[16], tb[16];
    run_constrained(fx, &a, 0, ta);
    assert_int_equal(a.tokens[a.num_tokens - 1], SO_EOG);
    assert_true(!strcmp(ta, "yes") || !strcmp(ta, "no") || !strcmp(ta, "maybe") || !strcmp(ta, "[]"));
    run_constrained(fx, &b, 2, tb);
    assert_string_equal(ta, tb);
  }
}

static void test_outputs_that_break_the_grammar_fail_the_step_naming_the_request(void **state) {
  struct fixture *fx = *state;
  next_block = NB - 1;
  struct model_runner *r = make_runner(fx, 1);
  assert_int_equal(model_runner_set_structured_vocab(r, byte_vocab()), LLB_STATUS_OK);
  struct sim_req q = make_req("bad", 4, 3, true);
  q.so = (struct llb_structured_outputs){.kind = LLB_SO_CHOICE, .spec = {SO_CHOICES, sizeof SO_CHOICES - 1}};
  q.tokens[q.num_tokens++] = 'x' - ' '; /* a resumed request whose output no choice starts with */
  struct sim_step s;
  sim_begin(&s, 1);
  sim_schedule(&s, &q, q.num_tokens);
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(out.failed_req_id.data, "bad");
  assert_string_equal(out.error.field.data, "structured_outputs");
  /* a spec the engine cannot compile fails the check phase, changing nothing */
  struct sim_req u = make_req("u", 4, 4, true);
  static const char schema[] = "{\"type\":\"string\",\"format\":\"hostname\"}";
  u.so = (struct llb_structured_outputs){.kind = LLB_SO_JSON, .spec = {schema, sizeof schema - 1}};
  sim_begin(&s, 2);
  sim_schedule(&s, &u, 4);
  const int32_t before = model_runner_num_reqs(r);
  assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_UNSUPPORTED);
  assert_string_equal(out.failed_req_id.data, "u");
  assert_int_equal(model_runner_num_reqs(r), before);
  model_runner_destroy(r);
}

/* Speculative decoding (runner_spec.c): drafts scheduled as extra rows of a greedy decode
 * (some right, some wrong) are verified in one forward; the tokens are exactly those of plain
 * decoding, num_sampled = accepted + 1, and a logprobs request in the same batch still gets one
 * logprobs row per sampled token. */
static void test_drafts_verified_in_one_forward_give_the_tokens_of_plain_decoding(void **state) {
  struct fixture *fx = *state;
  enum { OUT = 14, K = 3 };
  struct sim_req ref = make_req("spec", 7, 3, true);
  run_alone(fx, &ref, OUT + K + 1);
  struct model_runner_config cfg = {.num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                    .num_threads = 1, .spec = {.num_speculative_tokens = K, .prompt_lookup_min = 1,
                                                               .prompt_lookup_max = 2}};
  struct model_runner *r;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_OK);
  struct sim_req q = make_req("spec", 7, 3, true), lp = make_req("lp", 5, 9, true);
  lp.params.logprobs = 2;
  q.params.logprobs = 1; /* rows for its accepted tokens only, padded to the batch's top-2 */
  struct sim_step s;
  int32_t drafts_total = 0, accepted_total = 0;
  for (uint64_t step = 1; q.num_tokens - q.num_prompt < OUT; step++) {
    sim_begin(&s, step);
    int32_t d = 0, spec[K];
    if (q.num_computed > 0) /* decoding: drafts from the reference, every 5th position wrong */
      for (; d < K; d++) {
        const int32_t pos = q.num_tokens + d;
        spec[d] = pos % 5 == 2 ? (ref.tokens[pos] + 1) % V : ref.tokens[pos];
      }
    const int32_t n = q.num_tokens - q.num_computed + d;
    sim_schedule(&s, &q, n);
    s.sched[s.so.num_scheduled_reqs - 1].spec_token_ids = spec;
    s.sched[s.so.num_scheduled_reqs - 1].num_spec_token_ids = d;
    sim_schedule(&s, &lp, lp.num_tokens - lp.num_computed);
    struct llb_model_runner_output out;
    assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_OK);
    assert_int_equal(out.num_reqs, 2);
    assert_int_equal(out.logprobs.num_tokens, out.num_sampled_token_ids); /* one row per sampled token */
    for (int32_t row = 0; row < out.logprobs.num_tokens; row++) { /* column 0 is the sampled token */
      assert_int_equal(out.logprobs.logprob_token_ids[row * out.logprobs.num_logprobs_per_token],
                       out.sampled_token_ids[row]);
      assert_int_equal(out.logprobs.sampled_token_ranks[row], 1); /* greedy: the argmax */
    }
    int32_t off = 0;
    for (int32_t i = 0; i < out.num_reqs; i++) {
      struct sim_req *t = out.req_ids[i].data[0] == 's' ? &q : &lp;
      const int32_t ns = out.num_sampled[i];
      if (t == &q) {
        int32_t want = 1; /* accepted drafts + 1 */
        while (want <= d && spec[want - 1] == ref.tokens[q.num_tokens + want - 1]) want++;
        assert_int_equal(ns, want);
        drafts_total += d;
        accepted_total += ns - 1;
        q.num_computed += n - (d + 1 - ns); /* the scheduler's roll-back */
        if (out.num_spec_tokens) /* the proposer's drafts (none without an n-gram repeat) */
          assert_true(out.num_spec_tokens[i] >= 0 && out.num_spec_tokens[i] <= K);
      } else {
        assert_int_equal(ns, 1);
        lp.num_computed = lp.num_tokens;
      }
      for (int32_t k = 0; k < ns; k++) t->tokens[t->num_tokens++] = out.sampled_token_ids[off++];
    }
  }
  for (int32_t t = q.num_prompt; t < q.num_tokens; t++) assert_int_equal(q.tokens[t], ref.tokens[t]);
  if (!(accepted_total > 0 && accepted_total < drafts_total)) fail_msg("accepted %d of %d drafts", accepted_total, drafts_total);
  model_runner_destroy(r);
  /* a CUDA runner refuses drafts at creation; a bad config is refused on any device */
  cfg.spec.prompt_lookup_min = 3;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_INVALID_ARGUMENT);
}


/* --kv-cache-memory-bytes with --kv-cache-dtype: the cache is sized in bytes, so its block count
 * (what the worker announces to the scheduler and kv_manager) follows the dtype: fp8 holds twice
 * fp16's blocks in the same memory; a dtype that cannot hold the rows (q8_0 needs head_dim a
 * multiple of 32; here 16) is refused naming it; too little memory for one block is refused. */
static void test_kv_cache_memory_sizes_the_block_count_by_dtype(void **state) {
  struct fixture *fx = *state;
  const int64_t fp16_block = (int64_t)2 * L * BS * HKV * D * 2;
  struct model_runner_config cfg = {.num_blocks = 0, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                    .num_threads = 1, .kv_cache_memory_bytes = NB * fp16_block + fp16_block / 2};
  struct model_runner *r;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_OK);
  assert_int_equal(model_runner_num_blocks(r), NB);
  assert_int_equal(model_runner_kv_cache_bytes(r), NB * fp16_block);
  model_runner_destroy(r);
  cfg.kv_cache_dtype = BACKEND_KV_DTYPE_FP8_E4M3;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_OK);
  assert_int_equal(model_runner_num_blocks(r), 2 * NB + 1);
  assert_int_equal(model_runner_kv_cache_bytes(r), (2 * NB + 1) * (fp16_block / 2));
  model_runner_destroy(r);
  cfg.kv_cache_dtype = BACKEND_KV_DTYPE_Q8_0;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_UNSUPPORTED);
  assert_non_null(strstr(llb_err_last(), "q8_0"));
  cfg.kv_cache_dtype = BACKEND_KV_DTYPE_F16;
  cfg.kv_cache_memory_bytes = fp16_block - 1;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_INVALID_ARGUMENT);
  cfg.kv_cache_memory_bytes = 0; /* and no block count either */
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_INVALID_ARGUMENT);
}

/* ---- --device sim (runner_sim.h): everything but the forward ---- */

static struct model_runner *make_sim_runner(struct fixture *fx, const struct sim_cost_model *cost) {
  struct model_runner_config cfg = {.num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                    .num_threads = 1, .device = MODEL_RUNNER_DEVICE_SIM, .gguf = fx->f,
                                    .sim_cost = cost};
  struct model_runner *r;
  assert_int_equal(model_runner_create(NULL, &cfg, &r), LLB_STATUS_OK);
  return r;
}

/* A free step: the tests of tokens do not wait. */
static const struct sim_cost_model free_steps = {.name = "free"};

/* A sim request's tokens are the generator's at each output position (the key of its prompt,
 * and of its seed unless greedy), never a control or end-of-generation id, and the same alone
 * or chunked beside another request, preempted and resumed as new on other blocks. */
static void test_sim_device_gives_a_request_the_same_tokens_in_any_batch(void **state) {
  struct fixture *fx = *state;
  struct sim_req ref_a = make_req("a", 10, 1, true), ref_b = make_req("b", 13, 2, false);
  run_alone_on(make_sim_runner(fx, &free_steps), &ref_a, NUM_OUT);
  run_alone_on(make_sim_runner(fx, &free_steps), &ref_b, NUM_OUT);
  struct tokenizer *tok;
  struct sim_vocab v;
  assert_int_equal(tokenizer_load(fx->f, &tok), LLB_STATUS_OK);
  assert_int_equal(sim_vocab_from_tokenizer(tok, &v), LLB_STATUS_OK);
  tokenizer_destroy(tok);
  assert_int_equal(v.num_ids, V - 3);
  const uint64_t key_a = sim_request_key(&ref_a.params, ref_a.tokens, ref_a.num_prompt);
  for (int32_t i = 0; i < NUM_OUT; i++) {
    assert_int_equal(ref_a.tokens[ref_a.num_prompt + i], sim_token(&v, key_a, i));
    assert_true(ref_b.tokens[ref_b.num_prompt + i] > 2); /* no <unk>, <s>, </s> */
  }
  sim_vocab_free(&v);
  /* b again with another seed: other tokens (a seeded request's key takes its seed) */
  struct sim_req c = make_req("b", 13, 2, false);
  c.params.seed += 1;
  run_alone_on(make_sim_runner(fx, &free_steps), &c, NUM_OUT);
  assert_memory_not_equal(c.tokens + c.num_prompt, ref_b.tokens + ref_b.num_prompt, sizeof(int32_t) * NUM_OUT);

  struct sim_req a = make_req("a", 10, 1, true), b = make_req("b", 13, 2, false);
  struct sim_req *reqs[] = {&a, &b};
  struct model_runner *r = make_sim_runner(fx, &free_steps);
  struct sim_step s;
  for (uint64_t step = 1; a.num_tokens - a.num_prompt < NUM_OUT || b.num_tokens - b.num_prompt < NUM_OUT; step++) {
    sim_begin(&s, step);
    if (step == 4) {
      sim_preempt(&s, &a);
    } else if (a.num_tokens - a.num_prompt < NUM_OUT) {
      const int32_t n = a.num_tokens - a.num_computed;
      sim_schedule(&s, &a, n > 12 ? 12 : n);
    }
    if (b.num_tokens - b.num_prompt < NUM_OUT) {
      const int32_t n = b.num_tokens - b.num_computed; /* the prompt in chunks of 5 */
      sim_schedule(&s, &b, n > 5 ? 5 : n);
    }
    sim_run(r, &s, reqs, 2);
  }
  assert_memory_equal(a.tokens, ref_a.tokens, sizeof(int32_t) * (size_t)ref_a.num_tokens);
  assert_memory_equal(b.tokens, ref_b.tokens, sizeof(int32_t) * (size_t)ref_b.num_tokens);
  assert_true(model_runner_last_batch(r)->num_tokens > 0);
  model_runner_destroy(r);
}

/* A step is the first after idle (sim_step_shape.first, what first_step_s prices and --step-log
 * records) when every sequence it schedules starts in it: a request that ran a step before
 * makes it not; one resumed after preemption starts again. */
static void test_step_shape_marks_the_first_step_after_idle(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_sim_runner(fx, &free_steps);
  struct sim_req a = make_req("a", 10, 1, true), b = make_req("b", 13, 2, false);
  struct sim_req *reqs[] = {&a, &b};
  struct sim_step s;
  sim_begin(&s, 1);
  sim_schedule(&s, &a, 10); /* a alone, new: the engine had nothing running */
  sim_run(r, &s, reqs, 2);
  assert_int_equal(model_runner_last_step_shape(r).first, 1);
  sim_begin(&s, 2);
  sim_schedule(&s, &a, 1); /* a decodes beside b's first chunk: a ran before */
  sim_schedule(&s, &b, 5);
  sim_run(r, &s, reqs, 2);
  assert_int_equal(model_runner_last_step_shape(r).first, 0);
  sim_begin(&s, 3);
  sim_preempt(&s, &a);
  sim_schedule(&s, &b, 5); /* b's next chunk alone: b ran before */
  sim_run(r, &s, reqs, 2);
  assert_int_equal(model_runner_last_step_shape(r).first, 0);
  sim_begin(&s, 4);
  sim_preempt(&s, &b);
  sim_schedule(&s, &a, a.num_tokens); /* a resumed, alone: it starts again */
  sim_run(r, &s, reqs, 2);
  assert_int_equal(model_runner_last_step_shape(r).first, 1);
  model_runner_destroy(r);
}

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A sim step lasts at least its modelled time (here 60 ms for the 6-token prompt: 30 fixed +
 * 5 a token) and spends it asleep: the thread's CPU time stays a fraction of it. A lower
 * bound only: a loaded machine can make a step longer, never shorter. */
static void test_sim_step_waits_its_modelled_time_asleep(void **state) {
  struct fixture *fx = *state;
  const struct sim_cost_model cost = {.name = "slow", .fixed_s = 0.030, .token_s = 0.005};
  struct model_runner *r = make_sim_runner(fx, &cost);
  struct sim_req q = make_req("q", 6, 5, true);
  struct sim_req *reqs[] = {&q};
  struct sim_step s;
  sim_begin(&s, 1);
  sim_schedule(&s, &q, 6);
  const int64_t t0 = llb_now_ns(), c0 = thread_cpu_ns();
  sim_run(r, &s, reqs, 1);
  const int64_t wall = llb_now_ns() - t0, cpu = thread_cpu_ns() - c0;
  assert_true(wall >= 60000000);
  assert_true(cpu < wall / 4);
  model_runner_destroy(r);
}

/* The sim computes no logits: a request asking for logprobs, prompt logprobs or structured
 * output fails its step with UNSUPPORTED naming it (never made-up values), and the runner
 * serves the others. */
static void test_sim_device_refuses_what_needs_logits_naming_the_request(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_sim_runner(fx, &free_steps);
  for (int c = 0; c < 3; c++) {
    struct sim_req q = make_req("wants-logits", 4, 6, false);
    if (c == 0) q.params.logprobs = 2;
    if (c == 1) q.params.prompt_logprobs = 0;
    if (c == 2) q.so = (struct llb_structured_outputs){.kind = LLB_SO_JSON_OBJECT};
    struct sim_step s;
    sim_begin(&s, 1);
    sim_schedule(&s, &q, 4);
    struct llb_model_runner_output out;
    assert_int_equal(model_runner_execute(r, &s.so, &out), LLB_STATUS_UNSUPPORTED);
    assert_string_equal(out.failed_req_id.data, "wants-logits");
    assert_non_null(strstr(out.error.message.data, "sim"));
    assert_int_equal(model_runner_num_reqs(r), 0);
  }
  struct sim_req ok = make_req("ok", 4, 6, false);
  run_alone_on(r, &ok, 2);
}

/* The worker's one conversion (mr_sampler_params) hands the sampler every field it reads, with
 * the request's values, and logit_bias entry for entry; a count out of range stays out of range
 * so that the sampler refuses the row instead of sampling without it. */
static void test_wire_sampling_params_reach_the_sampler_field_for_field(void **state) {
  (void)state;
  struct llb_sampling_params w;
  llb_sampling_params_init(&w);
  w.temperature = 0.7f, w.top_k = 11, w.top_p = 0.8f, w.min_p = 0.05f, w.seed = 0x123456789abcdefull;
  w.presence_penalty = 0.25f, w.frequency_penalty = -0.5f, w.repetition_penalty = 1.3f, w.logprobs = 4;
  w.num_logit_bias = 2;
  w.logit_bias[0] = (struct llb_logit_bias){.token_id = 7, .bias = -100.0f};
  w.logit_bias[1] = (struct llb_logit_bias){.token_id = 96, .bias = 2.5f};
  struct sampler_params p;
  mr_sampler_params(&w, &p);
  assert_true(p.temperature == 0.7f && p.top_k == 11 && p.top_p == 0.8f && p.min_p == 0.05f);
  assert_true(p.seed == 0x123456789abcdefull && p.logprobs == 4);
  assert_true(p.presence_penalty == 0.25f && p.frequency_penalty == -0.5f && p.repetition_penalty == 1.3f);
  assert_int_equal(p.num_logit_bias, 2);
  assert_true(p.logit_bias[0].token_id == 7 && p.logit_bias[0].bias == -100.0f);
  assert_true(p.logit_bias[1].token_id == 96 && p.logit_bias[1].bias == 2.5f);

  w.num_logit_bias = -1;
  mr_sampler_params(&w, &p);
  struct sampler *s = NULL;
  assert_int_equal(sampler_create(V, &s), LLB_STATUS_OK);
  float logits[V] = {0};
  struct sampler_result res;
  assert_int_equal(sampler_sample(s, &p, logits, NULL, 0, NULL, 0, 0, 0, &res), LLB_STATUS_INVALID_ARGUMENT);
  sampler_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wire_sampling_params_reach_the_sampler_field_for_field),
      cmocka_unit_test(test_batch_has_positions_slots_and_logits_rows_of_the_scheduled_ranges),
      cmocka_unit_test(test_mixed_chunked_preempted_batch_matches_each_request_alone),
      cmocka_unit_test(test_bad_scheduler_output_is_an_error_status_and_changes_nothing),
      cmocka_unit_test(test_worker_names_the_request_whose_input_fails_the_step),
      cmocka_unit_test(test_decode_input_may_be_the_workers_own_unapplied_sample),
      cmocka_unit_test(test_structured_request_samples_only_its_grammar_and_resumes_the_same),
      cmocka_unit_test(test_outputs_that_break_the_grammar_fail_the_step_naming_the_request),
      cmocka_unit_test(test_drafts_verified_in_one_forward_give_the_tokens_of_plain_decoding),
      cmocka_unit_test(test_kv_cache_memory_sizes_the_block_count_by_dtype),
      cmocka_unit_test(test_sim_device_gives_a_request_the_same_tokens_in_any_batch),
      cmocka_unit_test(test_step_shape_marks_the_first_step_after_idle),
      cmocka_unit_test(test_sim_step_waits_its_modelled_time_asleep),
      cmocka_unit_test(test_sim_device_refuses_what_needs_logits_naming_the_request),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
