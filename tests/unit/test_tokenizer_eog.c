/* End of generation (tokenizer_is_eog, llama.cpp's special_eog_ids rule) on vocabularies built
 * here with the GGUF writer, and the stop it drives: the input processor adds the EOG set to
 * stop_token_ids (unless ignore_eos) and the scheduler's stop check then ends a request on
 * each EOG token, and on no other control token (<file_sep>, <|im_start|>). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/input_processor.h"
#include "actors/scheduler/sched_request.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/unit/gguf_writer.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4 };

struct vocab_tok {
  const char *text;
  int32_t type;
};

/* SPM vocabulary (unk 0, bos 1, eos 2 by default): every text llama.cpp ends generation on,
 * two control tokens that must not, a user-defined token, and two plain tokens named EOG by
 * metadata (eot_token_id, eog_token_ids). */
static const struct vocab_tok k_vocab[] = {
    {"<unk>", TT_UNKNOWN},       {"<s>", TT_CONTROL},          {"</s>", TT_CONTROL},
    {"<|im_start|>", TT_CONTROL}, {"<|im_end|>", TT_USER_DEFINED}, {"<file_sep>", TT_CONTROL},
    {"<|eot_id|>", TT_NORMAL},   {"<|endoftext|>", TT_CONTROL}, {"<end_of_turn>", TT_CONTROL},
    {"<|end|>", TT_CONTROL},     {"<EOT>", TT_NORMAL},         {"_<EOT>", TT_NORMAL},
    {"<|end_of_text|>", TT_CONTROL}, {"<end_of_utterance>", TT_NORMAL}, {"<|eom_id|>", TT_CONTROL},
    {"<|fim_pad|>", TT_NORMAL},  {"<|repo_name|>", TT_NORMAL}, {"<|file_sep|>", TT_NORMAL},
    {"<think>", TT_USER_DEFINED}, {"\xe2\x96\x81hello", TT_NORMAL}, {"stop_here", TT_NORMAL},
    {"my_eot", TT_NORMAL},
};
enum { N_VOCAB = sizeof k_vocab / sizeof k_vocab[0], ID_IM_START = 3, ID_IM_END = 4, ID_FILE_SEP = 5,
       ID_EOT_ID = 6, ID_THINK = 18, ID_HELLO = 19, ID_STOP_HERE = 20, ID_MY_EOT = 21 };
static const int32_t k_want_eog[] = {2, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 20, 21};

/* Loads a tokenizer from texts/types plus the metadata `extra` adds. */
static struct tokenizer *load(const struct vocab_tok *v, int n, void (*extra)(struct gguf_writer *),
                              void **buf, struct gguf_file **gf) {
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
  const char *texts[64];
  int32_t types[64];
  float scores[64];
  for (int i = 0; i < n; i++) texts[i] = v[i].text, types[i] = v[i].type, scores[i] = (float)-i;
  gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", texts, (uint64_t)n);
  gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_TYPE_INT32, types, (uint64_t)n);
  gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_VALUE_TYPE_FLOAT32, scores, (uint64_t)n);
  if (extra) extra(w);
  size_t size;
  assert_int_equal(gguf_writer_write_memory(w, buf, &size), LLB_STATUS_OK);
  gguf_writer_destroy(w);
  assert_int_equal(gguf_open_memory(*buf, size, gf), LLB_STATUS_OK);
  struct tokenizer *t = NULL;
  if (tokenizer_load(*gf, &t) != LLB_STATUS_OK) fail_msg("tokenizer_load: %s", llb_err_last());
  return t;
}

static void eog_metadata(struct gguf_writer *w) {
  gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", ID_MY_EOT);
  const int32_t extra[2] = {ID_STOP_HERE, 100000}; /* out of range: ignored */
  gguf_writer_add_array(w, "tokenizer.ggml.eog_token_ids", GGUF_VALUE_TYPE_INT32, extra, 2);
}

struct fixture {
  void *buf;
  struct gguf_file *gf;
  struct tokenizer *tok;
};

static int setup(void **state) {
  struct fixture *fx = calloc(1, sizeof *fx);
  fx->tok = load(k_vocab, N_VOCAB, eog_metadata, &fx->buf, &fx->gf);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  struct fixture *fx = *state;
  tokenizer_destroy(fx->tok);
  gguf_close(fx->gf);
  free(fx->buf);
  free(fx);
  return 0;
}

static void test_eog_set_is_eos_eot_fim_and_llamacpp_texts(void **state) {
  struct fixture *fx = *state;
  const int32_t *ids;
  const int32_t n = tokenizer_eog_ids(fx->tok, &ids);
  const int32_t n_want = (int32_t)(sizeof k_want_eog / sizeof k_want_eog[0]);
  assert_int_equal(n, n_want);
  assert_memory_equal(ids, k_want_eog, sizeof k_want_eog);
  for (int32_t i = 0; i < n_want; i++) assert_true(tokenizer_is_eog(fx->tok, k_want_eog[i]));
  assert_false(tokenizer_is_eog(fx->tok, -1));
  assert_false(tokenizer_is_eog(fx->tok, N_VOCAB));
  /* tokens llama.cpp finds by text become control: hidden unless render_special */
  char piece[32];
  assert_true(tokenizer_is_control(fx->tok, ID_IM_END));
  assert_true(tokenizer_is_control(fx->tok, ID_EOT_ID));
  assert_int_equal(tokenizer_token_to_piece(fx->tok, ID_EOT_ID, false, piece, sizeof piece), 0);
}

static void test_control_token_outside_the_set_is_not_eog(void **state) {
  struct fixture *fx = *state;
  assert_true(tokenizer_is_control(fx->tok, ID_FILE_SEP));
  assert_false(tokenizer_is_eog(fx->tok, ID_FILE_SEP));
  assert_true(tokenizer_is_control(fx->tok, ID_IM_START));
  assert_false(tokenizer_is_eog(fx->tok, ID_IM_START));
  assert_false(tokenizer_is_eog(fx->tok, ID_HELLO));
}

static void test_user_defined_token_keeps_its_text_and_does_not_end_generation(void **state) {
  struct fixture *fx = *state;
  char piece[32];
  assert_false(tokenizer_is_eog(fx->tok, ID_THINK));
  assert_false(tokenizer_is_control(fx->tok, ID_THINK));
  assert_int_equal(tokenizer_token_to_piece(fx->tok, ID_THINK, false, piece, sizeof piece), 7);
  assert_memory_equal(piece, "<think>", 7);
}

static void test_harmony_end_is_not_eog_when_return_and_call_are(void **state) {
  (void)state;
  const struct vocab_tok v[] = {{"<unk>", TT_UNKNOWN}, {"<s>", TT_CONTROL}, {"</s>", TT_CONTROL},
                                {"<|return|>", TT_CONTROL}, {"<|call|>", TT_CONTROL}, {"<|end|>", TT_CONTROL}};
  void *buf;
  struct gguf_file *gf;
  struct tokenizer *t = load(v, 6, NULL, &buf, &gf);
  assert_true(tokenizer_is_eog(t, 3));
  assert_true(tokenizer_is_eog(t, 4));
  assert_false(tokenizer_is_eog(t, 5));
  char piece[16];
  assert_int_equal(tokenizer_token_to_piece(t, 5, false, piece, sizeof piece), 7); /* rendered as text */
  tokenizer_destroy(t);
  gguf_close(gf);
  free(buf);
}

static uint64_t fixed_random(void *ctx) {
  (void)ctx;
  return 7;
}

/* The input processor's engine request for a 2-token prompt, ignore_eos as given. */
static void process(const struct tokenizer *tok, bool ignore_eos, struct input_processor_processed *out) {
  struct input_processor_config cfg = {.max_model_len = 64, .random_u64 = fixed_random};
  struct input_processor *p;
  assert_int_equal(input_processor_create(tok, &cfg, &p), LLB_STATUS_OK);
  static const int32_t prompt[2] = {ID_HELLO, ID_HELLO};
  struct llb_sampling_params sp;
  llb_sampling_params_init(&sp);
  sp.max_tokens = 8;
  sp.ignore_eos = ignore_eos;
  struct input_processor_generate_request r = {.request_id = "eog", .prompt_token_ids = prompt, .num_prompt_token_ids = 2,
                                      .reply_to = "_INBOX.x", .sampling_params = &sp};
  struct input_processor_errors errs;
  assert_int_equal(input_processor_process(p, &r, out, &errs), LLB_STATUS_OK);
  input_processor_destroy(p);
}

/* What the scheduler's stop check says when `token` is sampled first for that request. */
static enum sched_finish_reason first_token_finish(const struct input_processor_engine_request *e, int32_t token) {
  struct sched_new_request nr = {.request_id = e->request_id, .prompt_token_ids = e->prompt_token_ids,
                                 .num_prompt_tokens = (int32_t)e->num_prompt_tokens,
                                 .sampling_params = e->sampling_params, .eos_token_id = e->eos_token_id};
  struct sched_request *r = NULL;
  assert_int_equal(sched_request_create(&nr, 64, 16, &(struct llb_hash_key){{1}}, 0, &r), LLB_STATUS_OK);
  const enum sched_finish_reason fr = sched_request_append_token(r, token, 64);
  sched_request_destroy(r);
  return fr;
}

static void test_each_eog_token_stops_a_request_and_other_control_tokens_do_not(void **state) {
  struct fixture *fx = *state;
  struct input_processor_processed out;
  process(fx->tok, false, &out);
  const struct input_processor_engine_request *e = &out.requests[0];
  assert_int_equal(e->eos_token_id, 2);
  assert_int_equal(e->sampling_params->num_stop_token_ids, (int32_t)(sizeof k_want_eog / sizeof k_want_eog[0]) - 1);
  for (size_t i = 0; i < sizeof k_want_eog / sizeof k_want_eog[0]; i++)
    if (first_token_finish(e, k_want_eog[i]) != SCHED_FINISH_REASON_STOP)
      fail_msg("EOG token %d did not stop the request", k_want_eog[i]);
  assert_int_equal(first_token_finish(e, ID_FILE_SEP), SCHED_FINISH_REASON_NONE);
  assert_int_equal(first_token_finish(e, ID_IM_START), SCHED_FINISH_REASON_NONE);
  assert_int_equal(first_token_finish(e, ID_THINK), SCHED_FINISH_REASON_NONE);
  input_processor_processed_free(&out);
}

static void test_ignore_eos_adds_no_eog_stop_ids(void **state) {
  struct fixture *fx = *state;
  struct input_processor_processed out;
  process(fx->tok, true, &out);
  assert_int_equal(out.requests[0].sampling_params->num_stop_token_ids, 0);
  assert_int_equal(first_token_finish(&out.requests[0], ID_IM_END), SCHED_FINISH_REASON_NONE);
  input_processor_processed_free(&out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eog_set_is_eos_eot_fim_and_llamacpp_texts),
      cmocka_unit_test(test_control_token_outside_the_set_is_not_eog),
      cmocka_unit_test(test_user_defined_token_keeps_its_text_and_does_not_end_generation),
      cmocka_unit_test(test_each_eog_token_stops_a_request_and_other_control_tokens_do_not),
      cmocka_unit_test(test_ignore_eos_adds_no_eog_stop_ids),
  };
  const struct CMUnitTest alone[] = {
      cmocka_unit_test(test_harmony_end_is_not_eog_when_return_and_call_are),
  };
  return cmocka_run_group_tests(tests, setup, teardown) | cmocka_run_group_tests(alone, NULL, NULL);
}
