/* Model runner with LoRA adapters (actors/gpu_worker/model_runner.c, model_runner_set_loras) on
 * the tiny random llama of tests/unit/arch_models.h and two random adapters of
 * tests/unit/lora_models.h:
 * - a request with an adapter gets other greedy tokens than the base model, and each adapter's
 *   and the base's tokens alone equal those in one batch mixing all three (every row its own
 *   adapter, docs/design.md §5);
 * - a request naming an adapter the worker does not serve fails alone (NOT_FOUND, failed_req_id
 *   names it), and the batch goes on without it;
 * - adapters are refused on a runner created without max_lora_rank room for them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/gpu_worker/lora_adapters.h"
#include "actors/gpu_worker/model_runner.h"
#include "kernels/quant.h"
#include "model/forward/forward.h"
#include "model/forward/lora.h"
#include "model/gguf/gguf.h"
#include "tests/unit/arch_models.h"
#include "tests/unit/lora_models.h"

enum { BS = 4, NB = 64, MAX_TOK = 64, G = 6, NA = 2, MAX_REQS = 4 };

struct fixture {
  void *buf, *lora_buf[NA];
  struct gguf_file *f, *lora_f[NA];
  struct llama_model *m;
  struct llama_lora *lora[NA];
};

static const struct lora_model_spec specs[NA] = {
    {.name = "a", .seed = 21, .rank = 4, .alpha = 8.0f, .type = GGML_TYPE_F32, .targets = LORA_MODEL_ALL, .b_amp = 0.5f},
    {.name = "b", .seed = 22, .rank = 8, .alpha = 0.0f, .type = GGML_TYPE_F16, .targets = LORA_MODEL_Q | LORA_MODEL_V | LORA_MODEL_DOWN,
     .b_amp = 0.5f},
};
static const int32_t ids[NA] = {1001, 2002};

static int setup(void **state) {
  struct fixture *fx = calloc(1, sizeof(*fx));
  size_t size;
  assert_int_equal(arch_model_write("llama", &fx->buf, &size), LLB_STATUS_OK);
  assert_int_equal(gguf_open_memory(fx->buf, size, &fx->f), LLB_STATUS_OK);
  assert_int_equal(llama_model_load(fx->f, &fx->m), LLB_STATUS_OK);
  for (int i = 0; i < NA; i++) {
    assert_int_equal(lora_model_write("llama", &specs[i], &fx->lora_buf[i], &size), LLB_STATUS_OK);
    assert_int_equal(gguf_open_memory(fx->lora_buf[i], size, &fx->lora_f[i]), LLB_STATUS_OK);
    assert_int_equal(llama_lora_load(fx->lora_f[i], fx->m, 16, &fx->lora[i]), LLB_STATUS_OK);
  }
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  struct fixture *fx = *state;
  for (int i = 0; i < NA; i++) {
    llama_lora_destroy(fx->lora[i]);
    gguf_close(fx->lora_f[i]);
    free(fx->lora_buf[i]);
  }
  llama_model_destroy(fx->m);
  gguf_close(fx->f);
  free(fx->buf);
  free(fx);
  return 0;
}

static const int32_t prompt[ARCH_MODEL_PROMPT] = {1, 17, 42, 5, 60, 8, 8, 21, 33, 3, 50, 11};

struct req {
  char id[16];
  int32_t lora_int_id; /* 0 = base */
  int32_t blocks[8], num_blocks;
  int32_t outputs[G], num_outputs;
  bool on_worker, failed;
  struct llb_sampling_params params;
};

static int32_t next_block;

static struct req make_req(const char *id, int32_t lora_int_id) {
  struct req q = {.lora_int_id = lora_int_id};
  snprintf(q.id, sizeof q.id, "%s", id);
  llb_sampling_params_init(&q.params);
  q.params.temperature = 0.0f;
  q.num_blocks = (ARCH_MODEL_PROMPT + G + BS - 1) / BS;
  for (int32_t b = 0; b < q.num_blocks; b++) q.blocks[b] = next_block++;
  return q;
}

/* One step over every live request: a new one's whole prompt, a running one's last token.
 * Returns the step's status; on an error the request it blames is marked failed. */
static llb_status step(struct model_runner *r, uint64_t no, struct req *reqs, int n) {
  struct llb_new_request_data news[MAX_REQS];
  struct llb_scheduled_tokens sched[MAX_REQS];
  struct llb_str cids[MAX_REQS];
  int32_t computed[MAX_REQS], outs[MAX_REQS];
  struct llb_scheduler_output so = {.version = 1, .step = no, .block_size = BS, .scheduled_new_reqs = news,
                                    .num_scheduled_tokens = sched};
  so.scheduled_cached_reqs = (struct llb_cached_request_data){.req_ids = cids, .num_computed_tokens = computed,
                                                              .num_output_tokens = outs};
  char name[16];
  for (int i = 0; i < n; i++) {
    struct req *q = &reqs[i];
    if (q->failed || q->num_outputs == G) continue;
    int32_t tokens = 1;
    if (!q->on_worker) {
      snprintf(name, sizeof name, "lora-%d", q->lora_int_id);
      news[so.num_scheduled_new_reqs++] = (struct llb_new_request_data){
          .req_id = llb_str_c(q->id), .prompt_token_ids = prompt, .num_prompt_token_ids = ARCH_MODEL_PROMPT,
          .sampling_params = &q->params, .block_ids = q->blocks, .num_block_ids = q->num_blocks,
          .lora_request = {q->lora_int_id ? llb_str_c(name) : llb_str_c(""), q->lora_int_id}};
      tokens = ARCH_MODEL_PROMPT;
    } else {
      const int32_t j = so.scheduled_cached_reqs.num_reqs++;
      cids[j] = llb_str_c(q->id);
      computed[j] = ARCH_MODEL_PROMPT + q->num_outputs - 1;
      outs[j] = q->num_outputs;
    }
    sched[so.num_scheduled_reqs++] = (struct llb_scheduled_tokens){.req_id = llb_str_c(q->id), .num_tokens = tokens};
    so.total_num_scheduled_tokens += tokens;
  }
  struct llb_model_runner_output out;
  llb_status st = model_runner_execute(r, &so, &out);
  if (st) {
    for (int i = 0; i < n; i++)
      if (out.failed_req_id.len && strcmp(reqs[i].id, out.failed_req_id.data) == 0) reqs[i].failed = true;
    return st;
  }
  for (int i = 0; i < n; i++)
    if (!reqs[i].failed) reqs[i].on_worker = true;
  int32_t soff = 0;
  for (int32_t k = 0; k < out.num_reqs; k++) {
    for (int i = 0; i < n; i++)
      if (strcmp(reqs[i].id, out.req_ids[k].data) == 0 && out.num_sampled[k])
        reqs[i].outputs[reqs[i].num_outputs++] = out.sampled_token_ids[soff];
    soff += out.num_sampled[k];
  }
  return LLB_STATUS_OK;
}

static struct model_runner *make_runner(struct fixture *fx, int32_t max_lora_rank) {
  struct model_runner_config cfg = {.num_blocks = NB, .block_size = BS, .max_num_batched_tokens = MAX_TOK,
                                    .num_threads = 2, .max_lora_rank = max_lora_rank};
  struct model_runner *r;
  assert_int_equal(model_runner_create(fx->m, &cfg, &r), LLB_STATUS_OK);
  next_block = 0;
  return r;
}

static void set_loras(struct fixture *fx, struct model_runner *r) {
  const struct llama_lora *ads[NA] = {fx->lora[0], fx->lora[1]};
  assert_int_equal(model_runner_set_loras(r, ids, ads, NA), LLB_STATUS_OK);
}

/* Greedy tokens of one request alone. */
static void run_alone(struct fixture *fx, int32_t lora_int_id, int32_t *tokens) {
  struct model_runner *r = make_runner(fx, 16);
  set_loras(fx, r);
  struct req q = make_req("alone", lora_int_id);
  for (uint64_t s = 1; q.num_outputs < G; s++) assert_int_equal(step(r, s, &q, 1), LLB_STATUS_OK);
  memcpy(tokens, q.outputs, sizeof q.outputs);
  model_runner_destroy(r);
}

static void test_adapter_rows_match_alone_in_a_batch_mixing_adapters_and_the_base(void **state) {
  struct fixture *fx = *state;
  int32_t alone[3][G];
  run_alone(fx, 0, alone[0]);
  run_alone(fx, ids[0], alone[1]);
  run_alone(fx, ids[1], alone[2]);
  assert_memory_not_equal(alone[0], alone[1], sizeof alone[0]); /* the adapters change the output */
  assert_memory_not_equal(alone[0], alone[2], sizeof alone[0]);
  struct model_runner *r = make_runner(fx, 16);
  set_loras(fx, r);
  struct req reqs[3] = {make_req("b", ids[1]), make_req("base", 0), make_req("a", ids[0])};
  for (uint64_t s = 1; reqs[0].num_outputs < G; s++) assert_int_equal(step(r, s, reqs, 3), LLB_STATUS_OK);
  assert_memory_equal(reqs[1].outputs, alone[0], sizeof alone[0]);
  assert_memory_equal(reqs[2].outputs, alone[1], sizeof alone[1]);
  assert_memory_equal(reqs[0].outputs, alone[2], sizeof alone[2]);
  model_runner_destroy(r);
}

static void test_unknown_adapter_fails_only_its_request(void **state) {
  struct fixture *fx = *state;
  int32_t base_alone[G];
  run_alone(fx, 0, base_alone);
  struct model_runner *r = make_runner(fx, 16);
  set_loras(fx, r);
  struct req reqs[2] = {make_req("base", 0), make_req("ghost", 777)};
  assert_int_equal(step(r, 1, reqs, 2), LLB_STATUS_NOT_FOUND);
  assert_true(reqs[1].failed && !reqs[0].failed); /* blamed on it: the scheduler finishes it */
  assert_non_null(strstr(llb_err_last(), "not served by this worker"));
  assert_int_equal(model_runner_num_reqs(r), 0); /* the batch was left as it was */
  for (uint64_t s = 2; reqs[0].num_outputs < G; s++) assert_int_equal(step(r, s, reqs, 2), LLB_STATUS_OK);
  assert_memory_equal(reqs[0].outputs, base_alone, sizeof base_alone);
  model_runner_destroy(r);
}

static void test_adapters_need_room_in_max_lora_rank(void **state) {
  struct fixture *fx = *state;
  struct model_runner *r = make_runner(fx, 4); /* adapter b has rank 8 */
  const struct llama_lora *ads[NA] = {fx->lora[0], fx->lora[1]};
  assert_int_equal(model_runner_set_loras(r, ids, ads, NA), LLB_STATUS_INVALID_ARGUMENT);
  const int32_t dup[NA] = {5, 5};
  assert_int_equal(model_runner_set_loras(r, dup, ads, 1), LLB_STATUS_OK);
  assert_int_equal(model_runner_set_loras(r, dup, ads, NA), LLB_STATUS_INVALID_ARGUMENT);
  model_runner_destroy(r);
}

/* The runner's rows drop request `id` (the scheduler's finished_req_ids), in an empty step. */
static void finish(struct model_runner *r, uint64_t no, const char *id) {
  const struct llb_str fin[1] = {llb_str_c(id)};
  const struct llb_scheduler_output so = {.version = 1, .step = no, .block_size = BS, .finished_req_ids = fin,
                                          .num_finished_req_ids = 1};
  struct llb_model_runner_output out;
  assert_int_equal(model_runner_execute(r, &so, &out), LLB_STATUS_OK);
}

static bool runner_holds(void *r, const struct llama_lora *adapter) { return model_runner_lora_in_use(r, adapter); }

/* An adapter loaded at run time (lora_adapters_add, from a file beneath a directory) answers as
 * the same file loaded at start; unloaded while a request runs with it (lora_adapters_remove, the
 * runner given the smaller set), that request finishes with it and the same tokens, a new request
 * naming it fails alone, and the adapter is freed once no request holds it (lora_adapters_reap).
 * Loading a name twice, a path outside the directory, and unloading a --lora-modules adapter are
 * refused. */
static void test_adapter_unloaded_mid_request_serves_it_to_the_end(void **state) {
  struct fixture *fx = *state;
  char dir[] = "/tmp/llmbus-lora-XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/a.gguf", dir);
  void *buf;
  size_t size;
  assert_int_equal(lora_model_write("llama", &specs[0], &buf, &size), LLB_STATUS_OK);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, size, f), size);
  fclose(f);
  free(buf);
  struct lora_adapters la = {0};
  assert_int_equal(lora_adapters_add(&la, "dyn", dir, "a.gguf", "t", fx->m, 16), LLB_STATUS_OK);
  assert_int_equal(lora_adapters_add(&la, "dyn", dir, "a.gguf", "t", fx->m, 16), LLB_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(llb_err_last(), "has already been loaded"));
  assert_int_equal(lora_adapters_add(&la, "out", dir, "../a.gguf", "t", fx->m, 16), LLB_STATUS_NOT_FOUND);
  assert_int_equal(lora_adapters_add(&la, "out", dir, path, "t", fx->m, 16), LLB_STATUS_NOT_FOUND);
  assert_int_equal(la.num, 1);
  assert_true(la.beat[0].dynamic);
  assert_int_equal(la.ids[0], lora_module_int_id("dyn"));
  int32_t alone[G];
  run_alone(fx, ids[0], alone); /* the same adapter loaded at start */
  struct model_runner *r = make_runner(fx, 16);
  assert_int_equal(model_runner_set_loras(r, la.ids, (const struct llama_lora *const *)la.adapters, la.num),
                   LLB_STATUS_OK);
  struct req q[2] = {make_req("q", la.ids[0]), make_req("late", la.ids[0])};
  uint64_t s = 1;
  assert_int_equal(step(r, s++, q, 1), LLB_STATUS_OK); /* admitted with the adapter */
  assert_int_equal(lora_adapters_remove(&la, "dyn"), LLB_STATUS_OK);
  assert_int_equal(lora_adapters_remove(&la, "dyn"), LLB_STATUS_NOT_FOUND);
  assert_int_equal(la.num, 0);
  assert_int_equal(model_runner_set_loras(r, la.ids, (const struct llama_lora *const *)la.adapters, la.num),
                   LLB_STATUS_OK);
  lora_adapters_reap(&la, runner_holds, r);
  assert_int_equal(la.num_retired, 1); /* q still runs with it */
  assert_int_equal(step(r, s++, q, 2), LLB_STATUS_NOT_FOUND);
  assert_true(q[1].failed && !q[0].failed);
  while (q[0].num_outputs < G) assert_int_equal(step(r, s++, q, 1), LLB_STATUS_OK);
  assert_memory_equal(q[0].outputs, alone, sizeof alone);
  finish(r, s++, "q");
  lora_adapters_reap(&la, runner_holds, r);
  assert_int_equal(la.num_retired, 0);
  model_runner_destroy(r);
  lora_adapters_free(&la);
  unlink(path);
  rmdir(dir);
}

static void test_lora_modules_adapters_cannot_be_unloaded(void **state) {
  struct fixture *fx = *state;
  char dir[] = "/tmp/llmbus-lora-XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/b.gguf", dir);
  void *buf;
  size_t size;
  assert_int_equal(lora_model_write("llama", &specs[1], &buf, &size), LLB_STATUS_OK);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, size, f), size);
  fclose(f);
  free(buf);
  char value[96];
  snprintf(value, sizeof value, "fixed=%s", path);
  const char *values[1] = {value};
  struct lora_modules m;
  assert_int_equal(lora_modules_parse(values, 1, &m), LLB_STATUS_OK);
  struct lora_adapters la;
  assert_int_equal(lora_adapters_load(&m, fx->m, 16, &la), LLB_STATUS_OK);
  assert_false(la.beat[0].dynamic);
  assert_int_equal(lora_adapters_remove(&la, "fixed"), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(lora_adapters_add(&la, "fixed", dir, "b.gguf", "t", fx->m, 16), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(la.num, 1);
  lora_adapters_free(&la);
  lora_modules_free(&m);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapter_unloaded_mid_request_serves_it_to_the_end),
      cmocka_unit_test(test_lora_modules_adapters_cannot_be_unloaded),
      cmocka_unit_test(test_adapter_rows_match_alone_in_a_batch_mixing_adapters_and_the_base),
      cmocka_unit_test(test_unknown_adapter_fails_only_its_request),
      cmocka_unit_test(test_adapters_need_room_in_max_lora_rank),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
