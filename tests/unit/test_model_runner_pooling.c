/* Model runner pooling (vLLM's embed task, actors/gpu_worker/model_runner.c + pooler.c) on a
 * tiny random LLaMA built with the GGUF writer (2 layers, E 48, vocab 61, block size 4):
 * - a pooling request's vector is LAST / MEAN / CLS of the final-norm hidden states that
 *   llama_forward computes for its prompt directly, L2-normalized (or not), within 1e-5;
 * - it is bit-identical when its prompt is cut into chunks and batched with a generation
 *   request, and that request's tokens are the ones it samples alone;
 * - nothing is sampled for it; its vector comes once, on the step that completes its prompt;
 * - a pooling request that claims computed tokens (a prefix-cache hit) is refused.
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

#include "actors/gpu_worker/model_runner.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "tests/unit/gguf_writer.h"

enum { L = 2, E = 48, H = 4, HKV = 2, D = 12, F = 96, V = 61, CTX = 128, BS = 4, NB = 48, MAX_TOK = 32, P = 11 };

static uint64_t rng_state = 99;
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
  assert_int_equal(gguf_writer_add_random_llama(w, &hp, 3.0f, &rng_state), LLB_STATUS_OK);
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

static const int32_t prompt[P] = {3, 17, 42, 5, 60, 8, 8, 21, 33, 1, 50};
static const int32_t gen_prompt[6] = {9, 4, 44, 12, 30, 2};

/* Final-norm hidden states [P, E] of `prompt`, one sequence, straight from llama_forward. */
static void reference_hidden(struct fixture *fx, float *hidden) {
  struct llama_kv_cache *kv;
  struct llama_forward_ctx *c;
  assert_int_equal(llama_kv_cache_create(fx->m, NB, BS, &kv), LLB_STATUS_OK);
  const struct llama_forward_options fo = {.max_num_tokens = MAX_TOK, .n_threads = 1};
  assert_int_equal(llama_forward_ctx_create_opts(fx->m, &fo, &c), LLB_STATUS_OK);
  int32_t pos[P], rows[P], table[NB], qsl[2] = {0, P}, len[1] = {P};
  int64_t slots[P];
  for (int32_t b = 0; b < NB; b++) table[b] = b;
  for (int32_t t = 0; t < P; t++) pos[t] = rows[t] = t, slots[t] = t;
  const struct llama_batch b = {.num_tokens = P, .token_ids = prompt, .positions = pos, .slot_mapping = slots,
                                .num_seqs = 1, .query_start_loc = qsl, .seq_lens = len, .block_tables = table,
                                .max_blocks_per_seq = NB, .num_hidden = P, .hidden_indices = rows,
                                .hidden_states = hidden};
  assert_int_equal(llama_forward(c, kv, &b, NULL), LLB_STATUS_OK);
  llama_forward_ctx_destroy(c);
  llama_kv_cache_destroy(kv);
}

/* vLLM's pooler over the reference rows, in double. */
static void reference_pool(const float *hidden, enum llb_pooling_type type, bool normalize, double *out) {
  for (int k = 0; k < E; k++) {
    double v = 0;
    if (type == LLB_POOLING_MEAN) {
      for (int t = 0; t < P; t++) v += hidden[t * E + k];
      v /= P;
    } else {
      v = hidden[(type == LLB_POOLING_LAST ? P - 1 : 0) * E + k];
    }
    out[k] = v;
  }
  double n = 0;
  for (int k = 0; k < E; k++) n += out[k] * out[k];
  for (int k = 0; normalize && k < E; k++) out[k] /= sqrt(n);
}

struct req {
  const char *id;
  const int32_t *prompt;
  int32_t num_prompt, num_computed, num_blocks;
  int32_t blocks[8];
  bool on_worker;
  struct llb_pooling_params pool;
  struct llb_sampling_params params;
  int32_t outputs[8], num_outputs;
  float vector[E];
  int32_t num_vectors;
};

static int32_t next_block;

/* One step scheduling n[i] tokens of reqs[i] (0 = not scheduled); applies the output. */
static void step(struct model_runner *r, uint64_t no, struct req **reqs, const int32_t *n, int nreqs) {
  struct llb_new_request_data news[4];
  struct llb_scheduled_tokens sched[4];
  struct llb_str ids[4];
  int32_t computed[4], counts[4] = {0}, outs[4];
  struct llb_scheduler_output so = {.version = 1, .step = no, .block_size = BS, .scheduled_new_reqs = news,
                                    .num_scheduled_tokens = sched};
  so.scheduled_cached_reqs = (struct llb_cached_request_data){.req_ids = ids, .num_computed_tokens = computed,
                                                              .new_block_counts = counts, .num_output_tokens = outs};
  int32_t new_blocks[16];
  so.scheduled_cached_reqs.new_block_ids = new_blocks;
  for (int i = 0; i < nreqs; i++) {
    struct req *q = reqs[i];
    if (n[i] == 0) continue;
    const int32_t before = q->num_blocks;
    while (q->num_blocks * BS < q->num_computed + n[i]) q->blocks[q->num_blocks++] = next_block++;
    if (!q->on_worker) {
      news[so.num_scheduled_new_reqs++] = (struct llb_new_request_data){
          .req_id = llb_str_c(q->id), .prompt_token_ids = q->prompt, .num_prompt_token_ids = q->num_prompt,
          .sampling_params = &q->params, .block_ids = q->blocks, .num_block_ids = q->num_blocks,
          .num_computed_tokens = q->num_computed, .pooling_params = q->pool,
          .output_token_ids = q->outputs, .num_output_token_ids = q->num_outputs};
      q->on_worker = true;
    } else {
      struct llb_cached_request_data *cd = &so.scheduled_cached_reqs;
      const int32_t j = cd->num_reqs++;
      ids[j] = llb_str_c(q->id);
      computed[j] = q->num_computed;
      outs[j] = q->num_outputs;
      counts[j] = q->num_blocks - before;
      for (int32_t b = before; b < q->num_blocks; b++) new_blocks[cd->num_new_block_ids++] = q->blocks[b];
    }
    sched[so.num_scheduled_reqs++] = (struct llb_scheduled_tokens){.req_id = llb_str_c(q->id), .num_tokens = n[i]};
    so.total_num_scheduled_tokens += n[i];
  }
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, &so, &out), LLB_STATUS_OK);
  int32_t soff = 0, poff = 0;
  for (int32_t k = 0; k < out.num_reqs; k++) {
    struct req *q = NULL;
    int32_t nk = 0;
    for (int i = 0; i < nreqs; i++)
      if (strlen(reqs[i]->id) == out.req_ids[k].len && !memcmp(reqs[i]->id, out.req_ids[k].data, out.req_ids[k].len))
        q = reqs[i], nk = n[i];
    assert_non_null(q);
    q->num_computed += nk;
    const int32_t np = out.num_pooled ? out.num_pooled[k] : 0;
    if (q->pool.pooling_type != LLB_POOLING_NONE) {
      assert_int_equal(out.num_sampled[k], 0); /* never sampled */
      assert_int_equal(np, q->num_computed == q->num_prompt ? E : 0);
      if (np) memcpy(q->vector, out.pooler_output + poff, sizeof q->vector), q->num_vectors++;
    } else {
      assert_int_equal(np, 0);
      if (out.num_sampled[k]) q->outputs[q->num_outputs++] = out.sampled_token_ids[soff];
    }
    soff += out.num_sampled[k];
    poff += np;
  }
  assert_int_equal(poff, out.num_pooler_output);
}

static struct model_runner *make_runner(struct fixture *fx) {
  struct model_runner_config cfg = {.num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                    .num_threads = 2};
  struct model_runner *r;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_OK);
  next_block = 0;
  return r;
}

static struct req make_req(const char *id, enum llb_pooling_type type, bool normalize) {
  struct req q = {.id = id, .prompt = type ? prompt : gen_prompt, .num_prompt = type ? P : 6,
                  .pool = {type, normalize, 0}};
  llb_sampling_params_init(&q.params);
  q.params.temperature = 0.0f;
  return q;
}

static void test_vector_is_the_pooled_final_norm_hidden_state(void **state) {
  struct fixture *fx = *state;
  float hidden[P * E];
  reference_hidden(fx, hidden);
  for (int type = LLB_POOLING_LAST; type <= LLB_POOLING_CLS; type++)
    for (int normalize = 0; normalize < 2; normalize++) {
      struct model_runner *r = make_runner(fx);
      struct req q = make_req("emb", (enum llb_pooling_type)type, normalize);
      struct req *rs[1] = {&q};
      step(r, 1, rs, (int32_t[]){P}, 1);
      assert_int_equal(q.num_vectors, 1);
      double want[E], norm = 0;
      reference_pool(hidden, (enum llb_pooling_type)type, normalize, want);
      for (int k = 0; k < E; k++) {
        assert_true(fabs((double)q.vector[k] - want[k]) <= 1e-5 * (1 + fabs(want[k])));
        norm += (double)q.vector[k] * q.vector[k];
      }
      if (normalize) assert_true(fabs(sqrt(norm) - 1.0) < 1e-6);
      model_runner_destroy(r);
    }
}

static void test_chunked_and_batched_vector_is_bit_identical_and_generation_unchanged(void **state) {
  struct fixture *fx = *state;
  for (int type = LLB_POOLING_LAST; type <= LLB_POOLING_CLS; type++) {
    struct model_runner *r = make_runner(fx);
    struct req alone = make_req("emb", (enum llb_pooling_type)type, true), gen_alone = make_req("gen", 0, true);
    struct req *rs[2] = {&alone, &gen_alone};
    step(r, 1, rs, (int32_t[]){P, 0}, 2);
    uint64_t no = 2;
    step(r, no++, rs, (int32_t[]){0, 6}, 2);
    while (gen_alone.num_outputs < 5) step(r, no++, rs, (int32_t[]){0, 1}, 2);
    model_runner_destroy(r);

    r = make_runner(fx);
    struct req chunked = make_req("emb", (enum llb_pooling_type)type, true), gen = make_req("gen", 0, true);
    struct req *bs[2] = {&chunked, &gen};
    step(r, 1, bs, (int32_t[]){4, 6}, 2); /* 4 of the prompt beside the other's prefill */
    step(r, 2, bs, (int32_t[]){3, 1}, 2); /* 3 more beside a decode */
    assert_int_equal(chunked.num_vectors, 0);
    step(r, 3, bs, (int32_t[]){4, 1}, 2); /* the last 4 */
    no = 4;
    while (gen.num_outputs < 5) step(r, no++, bs, (int32_t[]){0, 1}, 2);
    assert_int_equal(chunked.num_vectors, 1);
    assert_memory_equal(chunked.vector, alone.vector, sizeof alone.vector);
    assert_memory_equal(gen.outputs, gen_alone.outputs, 5 * sizeof(int32_t));
    model_runner_destroy(r);
  }
}

static void test_pooling_request_with_computed_tokens_is_refused(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_runner(fx);
  struct req q = make_req("emb", LLB_POOLING_MEAN, true);
  q.num_computed = 4; /* as if the prefix cache had served 4 rows: MEAN needs them */
  q.blocks[0] = next_block++;
  q.num_blocks = 1;
  struct llb_new_request_data nr = {.req_id = llb_str_c(q.id), .prompt_token_ids = q.prompt,
                                    .num_prompt_token_ids = P, .sampling_params = &q.params, .block_ids = q.blocks,
                                    .num_block_ids = 3, .num_computed_tokens = 4, .pooling_params = q.pool};
  q.blocks[1] = 1, q.blocks[2] = 2;
  struct llb_scheduled_tokens sched = {.req_id = llb_str_c(q.id), .num_tokens = P - 4};
  struct llb_scheduler_output so = {.version = 1, .step = 1, .block_size = BS, .scheduled_new_reqs = &nr,
                                    .num_scheduled_new_reqs = 1, .num_scheduled_tokens = &sched,
                                    .num_scheduled_reqs = 1, .total_num_scheduled_tokens = P - 4};
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, &so, &out), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(out.failed_req_id.len, 3); /* the request is blamed: the others go on */
  assert_int_equal(model_runner_num_reqs(r), 0);
  model_runner_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_is_the_pooled_final_norm_hidden_state),
      cmocka_unit_test(test_chunked_and_batched_vector_is_bit_identical_and_generation_unchanged),
      cmocka_unit_test(test_pooling_request_with_computed_tokens_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
