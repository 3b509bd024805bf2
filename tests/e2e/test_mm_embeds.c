/* Multimodal "embeds" items end to end on the real model, through the whole step of the
 * engine in one process: scheduler (with its encoder-cache mirror) -> kv_manager ->
 * encoder_cache (EncoderStep applied from its wire form) -> SchedulerOutput encoded and
 * decoded -> model runner (encoder-output cache, gather into input_embeds) -> sampler.
 * An item holding exactly the token embeddings of a piece of text must give the same greedy
 * tokens as the text inline, also when a small token budget splits the item across steps;
 * two requests sharing an item encode it once; an evicted item is dropped by the worker.
 * argv[1]: the model (skip with 77 when missing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/encoder_cache/encoder_cache.h"
#include "actors/gpu_worker/model_runner.h"
#include "actors/kv_manager/kv_manager.h"
#include "actors/scheduler/actor_wire.h"
#include "actors/scheduler/scheduler.h"
#include "base/hash.h"
#include "kernels/quant.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/kv_ops.h"

#define GEN 8
static const char *g_model;
static struct gguf_file *g_f;
static struct llama_model *g_m;
static struct tokenizer *g_tok;
static int32_t g_hidden;

struct engine {
  struct scheduler *s;
  struct kv_manager *kv;
  struct encoder_cache *ec;   /* the encoder_cache actor's manager */
  struct ecache_stats ec_stats;
  struct ecache_result ec_res;
  struct model_runner *mr;
  struct sched_output out;
  struct kv_step step;
  struct kv_step_result res;
  struct encoder_step enc;
  struct sched_engine_outputs eo;
  struct sched_wire wire;
  struct llb_buf buf;
  struct llb_arena arena;
  int32_t out_tokens[4][GEN];
  int32_t num_out[4];
  const char *ids[4];
  int32_t num_ids;
  struct llb_sampling_params sp; /* every request's: greedy, GEN tokens (the scheduler borrows it) */
};

static void engine_init(struct engine *e, int32_t budget, int32_t enc_cache) {
  memset(e, 0, sizeof(*e));
  struct sched_config c;
  sched_config_init(&c);
  c.max_num_batched_tokens = budget;
  c.encoder_cache_size = enc_cache;
  c.encoder_compute_budget = 256;
  c.num_blocks = 64;
  c.block_size = 16;
  c.max_model_len = 512;
  assert_int_equal(sched_create(&c, &e->s), LLB_STATUS_OK);
  struct kv_manager_config kc = {.num_blocks = 64, .block_size = 16, .enable_prefix_caching = true};
  assert_int_equal(kv_manager_create(&kc, &e->kv), LLB_STATUS_OK);
  assert_int_equal(encoder_cache_create(enc_cache, &e->ec), LLB_STATUS_OK);
  struct model_runner_config mc = {.num_blocks = 64, .block_size = 16, .max_num_batched_tokens = budget,
                                   .num_threads = 2};
  assert_int_equal(model_runner_create(g_m, &mc, &e->mr), LLB_STATUS_OK);
  sched_output_init(&e->out);
  kv_step_init(&e->step);
  kv_step_result_init(&e->res);
  encoder_step_init(&e->enc);
  sched_engine_outputs_init(&e->eo);
  llb_arena_init(&e->arena, NULL, 0);
}

static void engine_fini(struct engine *e) {
  sched_destroy(e->s);
  kv_manager_destroy(e->kv);
  encoder_cache_destroy(e->ec);
  ecache_result_free(&e->ec_res);
  model_runner_destroy(e->mr);
  sched_output_free(&e->out);
  kv_step_free(&e->step);
  kv_step_result_free(&e->res);
  encoder_step_free(&e->enc);
  sched_engine_outputs_free(&e->eo);
  sched_wire_free(&e->wire);
  llb_buf_free(&e->buf);
  llb_arena_destroy(&e->arena);
}

static void add(struct engine *e, const char *id, const int32_t *toks, int32_t n,
                const struct sched_mm_feature *mm, int32_t nmm) {
  struct sched_new_request nr = {.request_id = id, .prompt_token_ids = toks, .num_prompt_tokens = n,
                                 .eos_token_id = -1, .mm_features = mm, .num_mm_features = nmm};
  if (e->num_ids == 0) {
    llb_sampling_params_init(&e->sp);
    e->sp.temperature = 0.0f;
    e->sp.max_tokens = GEN;
  }
  nr.sampling_params = &e->sp;
  assert_int_equal(sched_add_request(e->s, &nr), LLB_STATUS_OK);
  e->ids[e->num_ids++] = id;
}

/* One engine step with every boundary crossed in its wire form where it carries data. */
static void step(struct engine *e) {
  assert_int_equal(sched_schedule(e->s, &e->out, &e->step), LLB_STATUS_OK);
  if (!kv_step_empty(&e->step)) {
    assert_int_equal(kv_manager_apply_step(e->kv, &e->step, &e->res), LLB_STATUS_OK);
    assert_int_equal(sched_apply_kv_result(e->s, &e->res, &e->out), LLB_STATUS_OK);
  }
  assert_int_equal(sched_schedule_encoder(e->s, &e->out, &e->enc), LLB_STATUS_OK);
  if (e->enc.num_ops > 0 || e->enc.reset) {
    struct llb_encoder_step es, dec;
    struct llb_encoder_step_result r;
    assert_int_equal(sched_wire_encoder_step(&e->wire, &e->enc, &es), LLB_STATUS_OK);
    assert_int_equal(llb_encoder_step_encode_buf(&es, &e->buf), LLB_STATUS_OK);
    llb_arena_reset(&e->arena);
    assert_int_equal(llb_encoder_step_decode(e->buf.data, e->buf.len, &e->arena, &dec), LLB_STATUS_OK);
    assert_int_equal(ecache_apply(e->ec, &dec, &e->ec_res, &e->ec_stats, &r), LLB_STATUS_OK);
    sched_apply_encoder_result(e->s, &e->enc, r.results, r.num_results, r.num_free_slots);
  }
  if (e->out.total_num_scheduled_tokens == 0) return;
  struct llb_scheduler_output so, sd;
  assert_int_equal(sched_wire_scheduler_output(&e->wire, &e->out, NULL, NULL, NULL, &so), LLB_STATUS_OK);
  assert_int_equal(llb_scheduler_output_encode_buf(&so, &e->buf), LLB_STATUS_OK);
  llb_arena_reset(&e->arena);
  assert_int_equal(llb_scheduler_output_decode(e->buf.data, e->buf.len, &e->arena, &sd), LLB_STATUS_OK);
  struct llb_model_runner_output mro;
  llb_status st = model_runner_execute(e->mr, &sd, &mro);
  if (st) fprintf(stderr, "execute: %s\n", llb_err_last());
  assert_int_equal(st, LLB_STATUS_OK);
  struct sched_model_output mo;
  assert_int_equal(sched_wire_model_output(&e->wire, &mro, &mo), LLB_STATUS_OK);
  assert_int_equal(sched_update_from_output(e->s, &mo, &e->eo), LLB_STATUS_OK);
  for (int32_t i = 0; i < e->eo.num_outputs; i++) {
    const char *id = sched_engine_outputs_req_id(&e->eo, i);
    const int32_t *t = sched_engine_outputs_tokens(&e->eo, i);
    for (int32_t k = 0; k < e->num_ids; k++)
      if (strcmp(e->ids[k], id) == 0)
        for (int32_t j = 0; j < e->eo.outputs[i].num_new_tokens && e->num_out[k] < GEN; j++)
          e->out_tokens[k][e->num_out[k]++] = t[j];
  }
}

static void run(struct engine *e) {
  for (int i = 0; i < 200 && sched_num_unfinished(e->s) > 0; i++) step(e);
  assert_int_equal(sched_num_unfinished(e->s), 0);
}

static int32_t tokenize(const char *text, int32_t *out, int32_t cap) {
  int32_t *ids = NULL;
  int64_t n = 0;
  assert_int_equal(tokenizer_encode(g_tok, text, strlen(text), false, false, &ids, &n), LLB_STATUS_OK);
  assert_true(n > 0 && n <= cap);
  memcpy(out, ids, (size_t)n * sizeof(int32_t));
  free(ids);
  return (int32_t)n;
}

/* Rows of token_embd.weight for ids, as f32 [n, hidden]; scale != 1 makes a different item. */
static float *embed_rows(const int32_t *ids, int32_t n, float scale) {
  const struct gguf_tensor *t = gguf_find_tensor(g_f, "token_embd.weight");
  assert_non_null(t);
  size_t row_bytes = 0;
  assert_int_equal(ggml_row_bytes(t->type, t->ne[0], &row_bytes), LLB_STATUS_OK);
  float *rows = malloc((size_t)n * (size_t)g_hidden * sizeof(float));
  for (int32_t i = 0; i < n; i++) {
    assert_int_equal(ggml_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)ids[i] * row_bytes,
                                         rows + (size_t)i * g_hidden, g_hidden), LLB_STATUS_OK);
    for (int32_t c = 0; c < g_hidden; c++) rows[(size_t)i * g_hidden + c] *= scale;
  }
  return rows;
}

struct prompts {
  int32_t inline_ids[128], mm_ids[128];
  int32_t n, off, len;
  float *rows;
};

/* "<prefix> <text> <suffix>": the item covers <text>; its placeholders hold token 0. */
static void make_prompts(struct prompts *p) {
  int32_t a[64], b[64], c[64];
  int32_t na = tokenize("The city of light,", a, 64);
  int32_t nb = tokenize(" Paris, is the capital of a country called", b, 64);
  int32_t nc = tokenize(" France. Its most famous tower is the", c, 64);
  p->n = 0;
  memcpy(p->inline_ids, a, (size_t)na * 4);
  memcpy(p->inline_ids + na, b, (size_t)nb * 4);
  memcpy(p->inline_ids + na + nb, c, (size_t)nc * 4);
  p->n = na + nb + nc;
  p->off = na;
  p->len = nb;
  memcpy(p->mm_ids, p->inline_ids, (size_t)p->n * 4);
  for (int32_t i = 0; i < nb; i++) p->mm_ids[na + i] = 0;
  p->rows = embed_rows(b, nb, 1.0f);
}

static struct sched_mm_feature feature(const struct prompts *p, const float *rows, const char *hash) {
  return (struct sched_mm_feature){.offset = p->off, .length = p->len, .hash = hash, .modality = "embeds",
                                   .dtype = "f32", .num_cols = g_hidden, .data = (const uint8_t *)rows,
                                   .data_bytes = (int64_t)p->len * g_hidden * 4}; /* mm_hash: the scheduler's */
}

static void test_embeds_item_matches_inline_text(void **state) {
  (void)state;
  struct prompts p;
  make_prompts(&p);
  struct sched_mm_feature f = feature(&p, p.rows, "item-paris");
  int32_t ref[GEN];
  {
    struct engine e;
    engine_init(&e, 256, 256);
    add(&e, "inline", p.inline_ids, p.n, NULL, 0);
    run(&e);
    assert_int_equal(e.num_out[0], GEN);
    memcpy(ref, e.out_tokens[0], sizeof ref);
    engine_fini(&e);
  }
  {
    struct engine e;
    engine_init(&e, 256, 256);
    add(&e, "mm", p.mm_ids, p.n, &f, 1);
    run(&e);
    assert_int_equal(e.num_out[0], GEN);
    assert_memory_equal(e.out_tokens[0], ref, sizeof ref);
    assert_int_equal(model_runner_num_encoded(e.mr), 1);
    engine_fini(&e);
  }
  {
    /* 4 tokens per step: the item (its placeholders start mid-chunk) is split over steps */
    struct engine e;
    engine_init(&e, 4, 256);
    add(&e, "mm-chunked", p.mm_ids, p.n, &f, 1);
    run(&e);
    assert_int_equal(e.num_out[0], GEN);
    assert_memory_equal(e.out_tokens[0], ref, sizeof ref);
    struct sched_stats st;
    sched_get_stats(e.s, &st);
    assert_int_equal(st.encoder_inputs_computed, 1);
    assert_true(st.encoder_cache_hits >= 2); /* later chunks read the cached output */
    assert_int_equal(model_runner_num_encoded(e.mr), 1);
    engine_fini(&e);
  }
  /* the placeholders alone (no item) give other tokens: the item is what matters */
  {
    struct engine e;
    engine_init(&e, 256, 256);
    add(&e, "placeholders-only", p.mm_ids, p.n, NULL, 0);
    run(&e);
    assert_memory_not_equal(e.out_tokens[0], ref, sizeof ref);
    engine_fini(&e);
  }
  free(p.rows);
}

/* An item whose placeholder range holds positions that keep their own tokens (is_embed 0, as
 * an image's tile markers do): rows go to the marked positions only, in order, so text whose
 * every third token stays inline and the others come as rows gives the inline text's tokens,
 * also when 4-token chunks split the range. */
static void test_is_embed_mask_places_rows_at_marked_positions_only(void **state) {
  (void)state;
  struct prompts p;
  make_prompts(&p);
  int32_t ref[GEN];
  {
    struct engine e;
    engine_init(&e, 256, 256);
    add(&e, "inline", p.inline_ids, p.n, NULL, 0);
    run(&e);
    memcpy(ref, e.out_tokens[0], sizeof ref);
    engine_fini(&e);
  }
  uint8_t mask[64];
  int32_t ids[128], embed_ids[64], ne = 0;
  memcpy(ids, p.inline_ids, (size_t)p.n * 4);
  for (int32_t i = 0; i < p.len; i++) {
    mask[i] = i % 3 != 1;
    if (!mask[i]) continue;
    embed_ids[ne++] = p.inline_ids[p.off + i];
    ids[p.off + i] = 0;
  }
  float *rows = embed_rows(embed_ids, ne, 1.0f);
  struct sched_mm_feature f = feature(&p, rows, "item-masked");
  f.is_embed = mask;
  f.data_bytes = (int64_t)ne * g_hidden * 4;
  for (int32_t budget = 256; budget >= 4; budget /= 64) {
    struct engine e;
    engine_init(&e, budget, 256);
    add(&e, "masked", ids, p.n, &f, 1);
    run(&e);
    assert_int_equal(e.num_out[0], GEN);
    assert_memory_equal(e.out_tokens[0], ref, sizeof ref);
    assert_int_equal(model_runner_num_encoded(e.mr), 1);
    engine_fini(&e);
  }
  free(rows);
  free(p.rows);
}

static void test_shared_item_computed_once_and_evicted_item_dropped(void **state) {
  (void)state;
  struct prompts p;
  make_prompts(&p);
  float *other = embed_rows(p.inline_ids + p.off, p.len, 0.5f);
  struct sched_mm_feature fa = feature(&p, p.rows, "item-a"), fb = feature(&p, other, "item-b");
  struct engine e;
  engine_init(&e, 256, p.len); /* room for one item */
  add(&e, "r1", p.mm_ids, p.n, &fa, 1);
  add(&e, "r2", p.mm_ids, p.n, &fa, 1);
  run(&e);
  assert_memory_equal(e.out_tokens[0], e.out_tokens[1], sizeof e.out_tokens[0]);
  struct sched_stats st;
  sched_get_stats(e.s, &st);
  assert_int_equal(st.encoder_inputs_computed, 1);
  assert_int_equal(model_runner_num_encoded(e.mr), 1);
  assert_int_equal(e.ec_stats.num_allocated, 1); /* the encoder_cache actor agrees */
  assert_int_equal(st.num_encoder_mismatches, 0);
  assert_int_equal(model_runner_num_encoder_outputs(e.mr), 1);
  add(&e, "r3", p.mm_ids, p.n, &fb, 1); /* needs the room of item-a, now freeable */
  run(&e);
  sched_get_stats(e.s, &st);
  assert_int_equal(st.encoder_inputs_computed, 2);
  assert_int_equal(model_runner_num_encoded(e.mr), 2);
  assert_int_equal(model_runner_num_encoder_outputs(e.mr), 1); /* item-a was dropped */
  assert_int_equal(e.ec_stats.num_evicted, 1);
  assert_int_equal(st.num_encoder_mismatches, 0);
  engine_fini(&e);
  free(other);
  free(p.rows);
}

int main(int argc, char **argv) {
  g_model = getenv("LLMBUS_MODEL") ? getenv("LLMBUS_MODEL") : argc > 1 ? argv[1] : NULL;
  if (!g_model || access(g_model, R_OK) != 0) {
    fprintf(stderr, "skipped: model %s not found\n", g_model ? g_model : "(none)");
    return getenv("CI") && strcmp(getenv("CI"), "true") == 0 ? 1 : 77;
  }
  if (gguf_open(g_model, &g_f) || llama_model_load(g_f, &g_m) || tokenizer_load(g_f, &g_tok)) {
    fprintf(stderr, "cannot load %s: %s\n", g_model, llb_err_last());
    return 1;
  }
  g_hidden = llama_model_config(g_m)->embedding_length;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embeds_item_matches_inline_text),
      cmocka_unit_test(test_shared_item_computed_once_and_evicted_item_dropped),
      cmocka_unit_test(test_is_embed_mask_places_rows_at_marked_positions_only),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tokenizer_destroy(g_tok);
  llama_model_destroy(g_m);
  gguf_close(g_f);
  return rc;
}
