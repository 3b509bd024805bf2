/* Input processor: field validation (each bad request names the right field), templating,
 * context-length checks, seeds, ids and n > 1 fan-out. GPT-2 vocab by path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "actors/input_processor/input_processor.h"
#include "base/hash.h"
#include "schemas/kv_ops.h"
#include "test_output_common.h"

static struct tokenizer *tok;
static struct input_processor *proc;
static uint64_t rng_state;

static uint64_t test_random(void *ctx) { /* splitmix64: pinned, so ids and seeds are known */
  (void)ctx;
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

#define MAX_MODEL_LEN 256

static int setup(void **state) {
  (void)state;
  struct input_processor_config cfg = {.max_model_len = MAX_MODEL_LEN, .max_n = 8, .max_logprobs = 5,
                              .has_chat_template = true, .chat_template = CHAT_TEMPLATE_CHATML,
                              .random_u64 = test_random, .hash_key = {{42}}};
  rng_state = 42;
  return input_processor_create(tok, &cfg, &proc) == LLB_STATUS_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  input_processor_destroy(proc);
  return 0;
}

/* A raw-prompt request whose sampling params are *sp (defaults; the request borrows them). */
static struct input_processor_generate_request base_request(struct llb_sampling_params *sp) {
  llb_sampling_params_init(sp);
  struct input_processor_generate_request r = {.request_id = "req-1", .prompt = "Hello world", .raw = true,
                                      .reply_to = "_INBOX.abc", .sampling_params = sp};
  return r;
}

static const struct chat_message good_msgs[2] = {{"system", "Be brief."}, {"user", "Hi there"}};
static const struct chat_message bad_role_msgs[2] = {{"user", "a"}, {"wizard", "b"}};
static const int32_t bad_ids[3] = {10, 99999999, 11};
static const int32_t good_ids[2] = {10, 11};

static void mutate(int which, struct input_processor_generate_request *r, struct llb_sampling_params *sp) {
  switch (which) {
  case 0: sp->temperature = -0.5f; break;
  case 1: sp->temperature = NAN; break;
  case 2: sp->top_p = 0.0f; break;
  case 3: sp->top_p = 1.5f; break;
  case 4: sp->top_k = -2; break;
  case 5: sp->min_p = 1.5f; break;
  case 6: sp->presence_penalty = 2.5f; break;
  case 7: sp->frequency_penalty = -3.0f; break;
  case 8: sp->repetition_penalty = 0.0f; break;
  case 9: sp->n = 0; break;
  case 10: sp->n = 9; break;
  case 11: sp->max_tokens = 0; break;
  case 12: sp->max_tokens = 4; sp->min_tokens = 5; break;
  case 13: sp->num_stop = LLB_MAX_STOP_STRINGS + 1; break;
  case 14: sp->num_stop = 1; memset(sp->stop[0], 'x', sizeof sp->stop[0]); break;
  case 15: sp->logprobs = LLB_MAX_LOGPROBS + 1; break;
  case 16: r->prompt = ""; break;
  case 17: r->messages = good_msgs; r->num_messages = 2; r->raw = false; break;
  case 18: r->prompt = NULL; r->prompt_token_ids = bad_ids; r->num_prompt_token_ids = 3; break;
  case 19: r->chat_template = "no-such-template"; break;
  case 20: r->prompt = NULL; r->messages = bad_role_msgs; r->num_messages = 2; r->raw = false; break;
  case 21: r->request_id = ""; break;
  case 22: sp->num_stop = 1; sp->stop[0][0] = '\0'; break;
  case 23: sp->num_stop_token_ids = 1; sp->stop_token_ids[0] = -4; break;
  case 24: sp->prompt_logprobs = 6; break; /* over this model's max_logprobs (5) */
  case 25: r->prompt = NULL; break;
  case 26: r->prompt = "bad \xff utf8"; break;
  case 27: r->cache_salt = ""; break;
  case 28: sp->logprobs = 6; break; /* over this model's max_logprobs (5) */
  case 29: r->prompt = NULL; r->messages = good_msgs; r->num_messages = 2; break; /* raw + messages */
  case 30: sp->num_logit_bias = 1; sp->logit_bias[0] = (struct llb_logit_bias){99999999, 1.0f}; break;
  case 31: sp->num_logit_bias = 1; sp->logit_bias[0] = (struct llb_logit_bias){7, 100.5f}; break;
  case 32: sp->num_logit_bias = 1; sp->logit_bias[0] = (struct llb_logit_bias){7, NAN}; break;
  case 33: sp->num_logit_bias = 2; sp->logit_bias[0] = sp->logit_bias[1] = (struct llb_logit_bias){7, 1}; break;
  case 34: sp->truncate_prompt_tokens = -2; break;
  default: break;
  }
}

static void test_bad_requests_name_the_offending_field(void **state) {
  (void)state;
  static const char *const want[] = {
      "temperature", "temperature", "top_p", "top_p", "top_k", "min_p", "presence_penalty",
      "frequency_penalty", "repetition_penalty", "n", "n", "max_tokens", "min_tokens", "stop",
      "stop[0]", "logprobs", "prompt", "prompt", "prompt_token_ids[1]", "chat_template",
      "messages[1].role", "request_id", "stop[0]", "stop_token_ids[0]", "prompt_logprobs",
      "prompt", "prompt", "cache_salt", "logprobs", "raw", "logit_bias[99999999]", "logit_bias[7]",
      "logit_bias[7]", "logit_bias[7]", "truncate_prompt_tokens"};
  for (int i = 0; i < (int)(sizeof want / sizeof *want); i++) {
    struct llb_sampling_params sp;
    struct input_processor_generate_request r = base_request(&sp);
    mutate(i, &r, &sp);
    struct input_processor_errors errs;
    struct input_processor_processed out;
    llb_status st = input_processor_process(proc, &r, &out, &errs);
    if (st != LLB_STATUS_INVALID_ARGUMENT || errs.num_errors != 1 ||
        strcmp(errs.errors[0].field, want[i]) != 0) {
      char buf[1024];
      input_processor_errors_format(&errs, buf, sizeof buf);
      fail_msg("case %d: want one error on %s, got status %d: %s", i, want[i], st, buf);
    }
    assert_true(strlen(errs.errors[0].message) > 4);
    input_processor_processed_free(&out);
  }
}

static void test_all_field_errors_are_reported_together(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  sp.temperature = -1;
  sp.top_p = 2;
  sp.n = 0;
  struct input_processor_errors errs;
  assert_int_equal(input_processor_validate(proc, &r, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_int_equal(errs.num_errors, 3);
  char buf[512];
  input_processor_errors_format(&errs, buf, sizeof buf);
  assert_non_null(strstr(buf, "temperature: must be a finite number >= 0, got -1"));
  assert_non_null(strstr(buf, "; top_p: "));
}

static void test_prompt_too_long_for_the_context_names_both_lengths(void **state) {
  (void)state;
  int32_t ids[MAX_MODEL_LEN];
  for (int i = 0; i < MAX_MODEL_LEN; i++) ids[i] = 100 + i;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.prompt = NULL;
  r.prompt_token_ids = ids;
  r.num_prompt_token_ids = MAX_MODEL_LEN;
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(errs.errors[0].field, "prompt_token_ids");
  assert_non_null(strstr(errs.errors[0].message, "has 256 tokens but the context length is 256"));
  input_processor_processed_free(&out);
  /* Fits alone, but not with max_tokens: the message gives both numbers and the limit. */
  r.num_prompt_token_ids = 250;
  sp.max_tokens = 10;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(errs.errors[0].field, "max_tokens");
  assert_non_null(strstr(errs.errors[0].message, "250 tokens and max_tokens is 10"));
  assert_non_null(strstr(errs.errors[0].message, "context length of 256"));
  input_processor_processed_free(&out);
}

/* A text prompt that cannot fit is refused without tokenizing it all: far over the context
 * (more bytes than max_model_len tokens can stand for), from its length alone; nearer, once the
 * count passes the limit. The message names the limit and says the count is a lower bound; with
 * truncate_prompt_tokens the same prompt is admissible and is tokenized whole. */
static void test_prompt_over_the_context_is_refused_before_it_is_tokenized(void **state) {
  (void)state;
  size_t len = 1 << 20; /* the prompt limit: 1 MiB */
  char *text = malloc(len + 1);
  for (size_t i = 0; i < len; i++) text[i] = "ab cd"[i % 5];
  text[len] = '\0';
  while (tokenizer_min_tokens(tok, text, len / 2) > 2 * MAX_MODEL_LEN) len /= 2; /* the shortest power of 2 */
  text[len] = '\0';
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.prompt = text;
  struct input_processor_errors errs;
  struct input_processor_processed out;
  char want[128];
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(errs.errors[0].field, "prompt");
  snprintf(want, sizeof want, "has at least %lld tokens (counting stopped there) but the context length is 256",
           (long long)tokenizer_min_tokens(tok, text, len)); /* the bound alone: nothing was tokenized */
  assert_non_null(strstr(errs.errors[0].message, want));
  input_processor_processed_free(&out);
  /* as a chat message: the rendered text, field messages */
  struct chat_message m = {"user", text};
  r.prompt = NULL, r.raw = false, r.messages = &m, r.num_messages = 1;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(errs.errors[0].field, "messages");
  assert_non_null(strstr(errs.errors[0].message, "at least"));
  input_processor_processed_free(&out);
  /* truncation keeps the last 8 tokens: admissible, tokenized whole */
  sp.truncate_prompt_tokens = 8;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.num_prompt_tokens, 8);
  input_processor_processed_free(&out);
  /* 200 words fit the context alone but not with max_tokens = 100: the count stops past 156 */
  sp.truncate_prompt_tokens = 0;
  text[5 * 200] = '\0'; /* "ab cd" x 200: 400 words */
  r.messages = NULL, r.num_messages = 0, r.prompt = text, r.raw = true;
  sp.max_tokens = 100;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_INVALID_ARGUMENT);
  assert_string_equal(errs.errors[0].field, "max_tokens");
  assert_non_null(strstr(errs.errors[0].message, "at least"));
  assert_non_null(strstr(errs.errors[0].message, "max_tokens is 100"));
  assert_non_null(strstr(errs.errors[0].message, "context length of 256"));
  input_processor_processed_free(&out);
  free(text);
}

static void test_max_tokens_minus_one_fills_the_context(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.prompt = NULL;
  r.prompt_token_ids = good_ids;
  r.num_prompt_token_ids = 2;
  sp.max_tokens = -1;
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.requests[0].sampling_params->max_tokens, MAX_MODEL_LEN - 2);
  assert_int_equal(out.requests[0].num_prompt_tokens, 2);
  assert_int_equal(out.requests[0].prompt_token_ids[1], 11);
  input_processor_processed_free(&out);
}

static void test_raw_prompt_is_tokenized_as_is(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  int32_t *want = NULL;
  int64_t n_want = 0;
  assert_int_equal(tokenizer_encode(tok, r.prompt, strlen(r.prompt), true, true, &want, &n_want), LLB_STATUS_OK);
  assert_int_equal(out.num_prompt_tokens, n_want);
  assert_memory_equal(out.prompt_token_ids, want, (size_t)n_want * sizeof(int32_t));
  assert_int_equal(out.requests[0].eos_token_id, tokenizer_eos_id(tok));
  free(want);
  input_processor_processed_free(&out);
}

static void test_truncate_prompt_tokens_keeps_the_last_n_tokens(void **state) {
  (void)state;
  int32_t ids[10];
  for (int i = 0; i < 10; i++) ids[i] = 100 + i;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.prompt = NULL;
  r.prompt_token_ids = ids;
  r.num_prompt_token_ids = 10;
  sp.truncate_prompt_tokens = 4;
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.requests[0].num_prompt_tokens, 4);
  assert_int_equal(out.requests[0].prompt_token_ids[0], 106);
  assert_int_equal(out.requests[0].prompt_token_ids[3], 109);
  input_processor_processed_free(&out);
  /* a prompt shorter than N is kept whole; a text prompt is truncated after tokenization */
  sp.truncate_prompt_tokens = 50;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.num_prompt_tokens, 10);
  input_processor_processed_free(&out);
  struct llb_sampling_params tsp;
  struct input_processor_generate_request t = base_request(&tsp);
  tsp.truncate_prompt_tokens = 1;
  assert_int_equal(input_processor_process(proc, &t, &out, &errs), LLB_STATUS_OK);
  int32_t *all = NULL;
  int64_t n_all = 0;
  assert_int_equal(tokenizer_encode(tok, t.prompt, strlen(t.prompt), true, true, &all, &n_all), LLB_STATUS_OK);
  assert_true(n_all > 1);
  assert_int_equal(out.num_prompt_tokens, 1);
  assert_int_equal(out.prompt_token_ids[0], all[n_all - 1]);
  free(all);
  input_processor_processed_free(&out);
}

static void test_logit_bias_and_priority_reach_the_engine_request(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.priority = -3;
  sp.num_logit_bias = 1;
  sp.logit_bias[0] = (struct llb_logit_bias){.token_id = 7, .bias = -100.0f};
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.requests[0].priority, -3);
  assert_int_equal(out.requests[0].sampling_params->num_logit_bias, 1);
  assert_int_equal(out.requests[0].sampling_params->logit_bias[0].token_id, 7);
  assert_true(out.requests[0].sampling_params->logit_bias[0].bias == -100.0f);
  input_processor_processed_free(&out);
}

static void test_special_token_text_in_a_raw_prompt_is_the_special_token(void **state) {
  (void)state;
  int32_t eot = tokenizer_find_token(tok, "<|endoftext|>", 13);
  assert_true(eot >= 0);
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.prompt = "<|endoftext|>Hi";
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  int64_t at = tokenizer_add_bos(tok) ? 1 : 0;
  assert_int_equal(out.prompt_token_ids[at], eot);
  assert_int_equal(out.num_prompt_tokens, at + 2); /* the special token, then "Hi" */
  input_processor_processed_free(&out);
}

static void test_messages_go_through_the_chat_template(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.prompt = NULL;
  r.raw = false;
  r.messages = good_msgs;
  r.num_messages = 2;
  r.chat_template = "chatml";
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  char *text = NULL;
  assert_int_equal(chat_template_apply(CHAT_TEMPLATE_CHATML, good_msgs, 2, true, &text), LLB_STATUS_OK);
  assert_non_null(strstr(text, "Be brief."));
  int32_t *want = NULL;
  int64_t n_want = 0;
  assert_int_equal(tokenizer_encode(tok, text, strlen(text), false, true, &want, &n_want), LLB_STATUS_OK);
  int64_t off = out.num_prompt_tokens - n_want; /* 1 when the vocab adds a BOS */
  assert_true(off == 0 || off == 1);
  assert_memory_equal(out.prompt_token_ids + off, want, (size_t)n_want * sizeof(int32_t));
  free(want);
  free(text);
  input_processor_processed_free(&out);
}

static void test_seed_is_drawn_when_missing_and_kept_when_given(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  struct input_processor_errors errs;
  struct input_processor_processed a, b;
  assert_int_equal(input_processor_process(proc, &r, &a, &errs), LLB_STATUS_OK);
  assert_true(a.requests[0].sampling_params->has_seed);
  assert_int_equal(input_processor_process(proc, &r, &b, &errs), LLB_STATUS_OK);
  assert_true(a.requests[0].sampling_params->seed != b.requests[0].sampling_params->seed);
  /* Ids: external id, '-', 24 hex digits (8 random, a 64-bit tenant tag); different each time. */
  assert_int_equal(strncmp(a.requests[0].request_id, "req-1-", 6), 0);
  assert_int_equal(strlen(a.requests[0].request_id), 6 + 24);
  assert_string_not_equal(a.requests[0].request_id, b.requests[0].request_id);
  input_processor_processed_free(&a);
  input_processor_processed_free(&b);
  sp.has_seed = true;
  sp.seed = 1234;
  assert_int_equal(input_processor_process(proc, &r, &a, &errs), LLB_STATUS_OK);
  assert_int_equal(a.requests[0].sampling_params->seed, 1234);
  input_processor_processed_free(&a);
}

/* Issue 14: an id carries its tenant's tag, so an abort on tenant b's subject for an id of
 * tenant a (learned somehow) is recognised as not b's. */
static void test_ids_are_owned_by_their_tenant_only(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  r.tenant = "alpha";
  sp.n = 2;
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(input_processor_processed_set_engine(&out, "e1"), LLB_STATUS_OK);
  const char *parent = out.requests[0].parent_request_id, *child = out.requests[1].request_id;
  const struct llb_hash_key key = {{42}};
  assert_true(input_processor_id_owned_by(&key, parent, strlen(parent), "alpha"));
  assert_true(input_processor_id_owned_by(&key, child, strlen(child), "alpha"));
  assert_false(input_processor_id_owned_by(&key, parent, strlen(parent), "beta"));
  assert_false(input_processor_id_owned_by(&key, parent, strlen(parent), NULL));
  /* without the engine suffix, as before routing */
  char bare[INPUT_PROCESSOR_MAX_ID_BYTES];
  snprintf(bare, sizeof bare, "%s", parent);
  *strrchr(bare, '@') = '\0';
  assert_true(input_processor_id_owned_by(&key, bare, strlen(bare), "alpha"));
  assert_false(input_processor_id_owned_by(&key, bare, strlen(bare), "beta"));
  /* ids that are not ours: too short, not hex, upper-case hex, no '-' */
  assert_false(input_processor_id_owned_by(&key, "x", 1, "alpha"));
  assert_false(input_processor_id_owned_by(&key, "req-0123456789abcdef0123456g@e1", 31, "alpha"));
  char lower[64], tag[INPUT_PROCESSOR_TENANT_TAG_HEX + 1];
  input_processor_tenant_tag(&key, "alpha", "req_00000000", 12, tag);
  snprintf(lower, sizeof lower, "req_00000000%s", tag); /* no '-' before the 24 hex */
  assert_false(input_processor_id_owned_by(&key, lower, strlen(lower), "alpha"));
  /* the tag is a MAC of the id under the key: another key, or the tag moved onto another id
   * (a forged id), does not pass; 16 hex digits = 64 bits */
  struct llb_hash_key other = key;
  other.bytes[3] ^= 1;
  assert_false(input_processor_id_owned_by(&other, parent, strlen(parent), "alpha"));
  char forged[INPUT_PROCESSOR_MAX_ID_BYTES];
  snprintf(forged, sizeof forged, "%s", bare);
  char *digit = &forged[strlen(forged) - INPUT_PROCESSOR_TENANT_TAG_HEX - 1]; /* one random hex digit changed */
  *digit = *digit == '0' ? '1' : '0';
  assert_false(input_processor_id_owned_by(&key, forged, strlen(forged), "alpha"));
  assert_int_equal(strlen(bare) - strlen("req-1-"), 8 + INPUT_PROCESSOR_TENANT_TAG_HEX);
  input_processor_processed_free(&out);
}

static void test_n_fans_out_into_children_with_distinct_ids_and_streams(void **state) {
  (void)state;
  struct llb_sampling_params sp;
  struct input_processor_generate_request r = base_request(&sp);
  sp.n = 4;
  r.priority = -3;
  r.cache_salt = "tenant-a";
  r.arrival_time_ns = 777;
  struct input_processor_errors errs;
  struct input_processor_processed out;
  assert_int_equal(input_processor_process(proc, &r, &out, &errs), LLB_STATUS_OK);
  assert_int_equal(out.num_requests, 4);
  uint64_t seed = out.requests[0].sampling_params->seed;
  for (int i = 0; i < 4; i++) {
    const struct input_processor_engine_request *e = &out.requests[i];
    char want[INPUT_PROCESSOR_MAX_ID_BYTES + 16];
    snprintf(want, sizeof want, "%d_%s", i, e->parent_request_id);
    assert_string_equal(e->request_id, want);
    assert_string_equal(e->external_request_id, "req-1");
    assert_int_equal(e->child_index, i);
    assert_int_equal(e->num_children, 4);
    assert_int_equal(e->sampling_params->n, 1);
    assert_int_equal(e->sampling_params->seed, seed); /* same seed, the stream index differs */
    assert_ptr_equal(e->prompt_token_ids, out.prompt_token_ids);
    assert_int_equal(e->priority, -3);
    assert_string_equal(e->cache_salt, "tenant-a");
    assert_string_equal(e->reply_to, "_INBOX.abc");
    assert_int_equal(e->arrival_time_ns, 777);
    for (int j = 0; j < i; j++) assert_string_not_equal(e->request_id, out.requests[j].request_id);
  }
  input_processor_processed_free(&out);
}

/* Tenant "b/x" without a salt and tenant "b" with salt "x" were both salted "b/x", so the
 * first could hit the second's prefix-cache blocks and encoder-cache items. */
static void test_tenant_and_salt_cannot_be_confused_for_another_pair(void **state) {
  (void)state;
  static const struct {
    const char *tenant, *salt;
  } pairs[] = {{"b/x", NULL}, {"b", "x"}, {"b", "/x"}, {"b/", "x"}, {"1:b", NULL}, {"b1:x", NULL},
               {"b", "1:x"}, {"b", NULL}, {"b", ""}, {"b:", "x"}};
  enum { N = sizeof pairs / sizeof pairs[0] };
  char salts[N][64];
  uint64_t block_hash[N];
  char mm_hash[N][INPUT_PROCESSOR_MM_HASH_BYTES];
  const int32_t tokens[4] = {504, 3444, 282, 1837};
  float rows[4] = {0.5f, 1, 2, 3};
  struct input_processor_mm_item item = {.modality = "embeds", .data = (const uint8_t *)rows, .data_bytes = sizeof rows,
                                .dtype = "f32", .num_rows = 1, .num_cols = 4};
  const struct llb_hash_key key = {{7}};
  for (int i = 0; i < N; i++) {
    size_t salt_len = pairs[i].salt ? strlen(pairs[i].salt) : 0;
    assert_true(input_processor_cache_salt_compose(pairs[i].tenant, pairs[i].salt, salt_len, salts[i], sizeof salts[i]) <
                sizeof salts[i]);
    struct llb_block_extra_keys extra = {.has_cache_salt = true,
                                        .cache_salt_hash = llb_hash_bytes(&key, salts[i], strlen(salts[i]))};
    block_hash[i] = llb_block_hash(&key, LLB_BLOCK_HASH_ROOT, tokens, 4, &extra);
    input_processor_mm_hash(&key, salts[i], &item, mm_hash[i]);
  }
  assert_string_equal(salts[0], "3:b/x");
  assert_string_equal(salts[1], "1:b1:x");
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < i; j++) {
      bool same_pair = !strcmp(pairs[i].tenant, pairs[j].tenant) &&
                       !strcmp(pairs[i].salt ? pairs[i].salt : "", pairs[j].salt ? pairs[j].salt : "");
      if (same_pair) { /* no salt and an empty salt are the same request */
        assert_string_equal(salts[i], salts[j]);
        continue;
      }
      if (!strcmp(salts[i], salts[j]) || block_hash[i] == block_hash[j] || !strcmp(mm_hash[i], mm_hash[j])) {
        fprintf(stderr, "pairs %d and %d collide: \"%s\"\n", i, j, salts[i]);
        fail();
      }
    }
  }
  char small[4];
  assert_true(input_processor_cache_salt_compose("tenant", "x", 1, small, sizeof small) >= sizeof small);
}

/* Embedding rows holding NaN or ±Inf (f32 or f16) would turn every logit of the request into
 * NaN and fail the worker's step: they are refused here, naming the item's data. */
static void test_non_finite_embeds_are_refused_naming_the_item(void **state) {
  (void)state;
  struct input_processor_config cfg = {.max_model_len = MAX_MODEL_LEN, .max_n = 8, .max_logprobs = 5,
                              .random_u64 = test_random, .hidden_size = 4};
  struct input_processor *p = NULL;
  assert_int_equal(input_processor_create(tok, &cfg, &p), LLB_STATUS_OK);
  static const int32_t ids[4] = {10, 0, 0, 11};
  for (int c = 0; c < 4; c++) {
    float f32[8] = {0.5f, 1, 2, 3, 4, 5, 6, 7};
    uint16_t f16[8] = {0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00}; /* 1.0 */
    if (c == 1) f32[6] = NAN;
    if (c == 2) f32[0] = -INFINITY;
    if (c == 3) f16[5] = 0x7c00; /* +Inf */
    struct input_processor_mm_item item = {.modality = "embeds", .dtype = c == 3 ? "f16" : "f32",
                                  .data = c == 3 ? (const uint8_t *)f16 : (const uint8_t *)f32,
                                  .data_bytes = c == 3 ? (int64_t)sizeof f16 : (int64_t)sizeof f32,
                                  .num_rows = 2, .num_cols = 4, .placeholder_offset = 1};
    struct llb_sampling_params sp;
    struct input_processor_generate_request r = base_request(&sp);
    r.prompt = NULL;
    r.prompt_token_ids = ids;
    r.num_prompt_token_ids = 4;
    r.mm_items = &item;
    r.num_mm_items = 1;
    struct input_processor_errors errs;
    struct input_processor_processed out;
    llb_status st = input_processor_process(p, &r, &out, &errs);
    input_processor_processed_free(&out); /* also after a failure */
    if (c == 0) {
      assert_int_equal(st, LLB_STATUS_OK);
      continue;
    }
    assert_int_equal(st, LLB_STATUS_INVALID_ARGUMENT);
    assert_int_equal(errs.num_errors, 1);
    assert_string_equal(errs.errors[0].field, "mm_items[0].data");
    assert_non_null(strstr(errs.errors[0].message, "non-finite"));
    assert_non_null(strstr(errs.errors[0].message, c == 1 ? "row 1, column 2" : c == 2 ? "row 0, column 0"
                                                                                      : "row 1, column 1"));
  }
  input_processor_destroy(p);
}

int main(void) {
  tok = test_load_tokenizer();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_requests_name_the_offending_field),
      cmocka_unit_test(test_all_field_errors_are_reported_together),
      cmocka_unit_test(test_prompt_too_long_for_the_context_names_both_lengths),
      cmocka_unit_test(test_max_tokens_minus_one_fills_the_context),
      cmocka_unit_test(test_raw_prompt_is_tokenized_as_is),
      cmocka_unit_test(test_truncate_prompt_tokens_keeps_the_last_n_tokens),
      cmocka_unit_test(test_prompt_over_the_context_is_refused_before_it_is_tokenized),
      cmocka_unit_test(test_logit_bias_and_priority_reach_the_engine_request),
      cmocka_unit_test(test_special_token_text_in_a_raw_prompt_is_the_special_token),
      cmocka_unit_test(test_messages_go_through_the_chat_template),
      cmocka_unit_test(test_seed_is_drawn_when_missing_and_kept_when_given),
      cmocka_unit_test(test_ids_are_owned_by_their_tenant_only),
      cmocka_unit_test(test_n_fans_out_into_children_with_distinct_ids_and_streams),
      cmocka_unit_test(test_tenant_and_salt_cannot_be_confused_for_another_pair),
      cmocka_unit_test(test_non_finite_embeds_are_refused_naming_the_item),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  tokenizer_destroy(tok);
  return rc;
}
