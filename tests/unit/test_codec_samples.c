/* Sample messages for the codec tests; see test_codec_samples.h. */
#include "tests/unit/test_codec_samples.h"

#include <stdio.h>
#include <string.h>

#include "schemas/control.h"
#include "schemas/encoder_step.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/kv_step.h"
#include "schemas/model_runner_output.h"
#include "schemas/request_output.h"
#include "schemas/scheduler_output.h"
#include "schemas/kv_transfer.h"

#define CHECK(c)                                                                  \
  do {                                                                            \
    if (!(c)) {                                                                   \
      fprintf(stderr, "%s:%d: decoded view differs: %s\n", __FILE__, __LINE__, #c); \
      return false;                                                               \
    }                                                                             \
  } while (0)
#define N(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))
#define S(lit) ((struct llb_str){(lit), sizeof(lit) - 1})

/* A decoded string must equal the sample and be NUL-terminated. */
static bool str_eq(struct llb_str got, struct llb_str want) {
  return got.data && got.len == want.len && got.data[got.len] == '\0' &&
         (want.len == 0 || memcmp(got.data, want.data, want.len) == 0);
}
static bool strs_eq(const struct llb_str *got, int32_t ngot, const struct llb_str *want,
                    int32_t nwant) {
  if (ngot != nwant)
    return false;
  for (int32_t i = 0; i < ngot; i++)
    if (!str_eq(got[i], want[i]))
      return false;
  return true;
}
static bool i32_eq(const int32_t *got, int32_t ngot, const int32_t *want, int32_t nwant) {
  return ngot == nwant && (nwant == 0 || memcmp(got, want, (size_t)nwant * sizeof *want) == 0);
}
static bool bytes_eq(const uint8_t *got, int64_t ngot, const uint8_t *want, int64_t nwant) {
  return ngot == nwant && (nwant == 0 || memcmp(got, want, (size_t)nwant) == 0);
}

/* ---- shared sample pieces ------------------------------------------------------------- */

static const int32_t prompt_ids[] = {1, 15043, 3186, 29871, 31000, 128000, 7};
static const struct llb_str ids3[] = {S("req-α"), S("req-β-2"), S("req-γ-3")};
static const struct llb_str hashes2[] = {S("mm:9f86d081"), S("mm:ぁ")};

static const struct llb_sampling_params *sample_sp(void) {
  static struct llb_sampling_params p;
  llb_sampling_params_init(&p);
  p.n = 3;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.has_seed = true;
  p.seed = 0xDEADBEEFCAFEF00DULL;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  p.repetition_penalty = 1.1f;
  p.max_tokens = 128;
  p.min_tokens = 2;
  p.num_stop = 2;
  strcpy(p.stop[0], "\n\n");
  strcpy(p.stop[1], "Ende ✓");
  p.num_stop_token_ids = 2;
  p.stop_token_ids[0] = 2;
  p.stop_token_ids[1] = 32000;
  p.ignore_eos = true;
  p.include_stop_str_in_output = true;
  p.skip_special_tokens = false;
  p.logprobs = 5;
  p.prompt_logprobs = 3;
  p.output_kind = LLB_OUTPUT_KIND_DELTA;
  p.num_logit_bias = 2;
  p.logit_bias[0] = (struct llb_logit_bias){.token_id = 42, .bias = -100.0f};
  p.logit_bias[1] = (struct llb_logit_bias){.token_id = 31999, .bias = 2.5f};
  p.truncate_prompt_tokens = 64;
  return &p;
}

static bool sp_eq(const struct llb_sampling_params *a, const struct llb_sampling_params *b) {
  CHECK(a && b);
  CHECK(a->n == b->n && a->temperature == b->temperature && a->top_k == b->top_k);
  CHECK(a->top_p == b->top_p && a->min_p == b->min_p);
  CHECK(a->has_seed == b->has_seed && a->seed == b->seed);
  CHECK(a->presence_penalty == b->presence_penalty);
  CHECK(a->frequency_penalty == b->frequency_penalty);
  CHECK(a->repetition_penalty == b->repetition_penalty);
  CHECK(a->max_tokens == b->max_tokens && a->min_tokens == b->min_tokens);
  CHECK(a->num_stop == b->num_stop);
  for (int i = 0; i < a->num_stop; i++)
    CHECK(strcmp(a->stop[i], b->stop[i]) == 0);
  CHECK(i32_eq(a->stop_token_ids, a->num_stop_token_ids, b->stop_token_ids,
               b->num_stop_token_ids));
  CHECK(a->ignore_eos == b->ignore_eos);
  CHECK(a->include_stop_str_in_output == b->include_stop_str_in_output);
  CHECK(a->skip_special_tokens == b->skip_special_tokens);
  CHECK(a->num_logit_bias == b->num_logit_bias);
  for (int i = 0; i < a->num_logit_bias; i++)
    CHECK(a->logit_bias[i].token_id == b->logit_bias[i].token_id && a->logit_bias[i].bias == b->logit_bias[i].bias);
  CHECK(a->truncate_prompt_tokens == b->truncate_prompt_tokens);
  CHECK(a->logprobs == b->logprobs && a->prompt_logprobs == b->prompt_logprobs);
  CHECK(a->output_kind == b->output_kind);
  return true;
}

/* Two rows of f16 embeddings, 4 columns (IEEE half bit patterns, little-endian). */
static const uint8_t mm_data[16] = {0x00, 0x3c, 0x00, 0x40, 0x00, 0xc2, 0x55, 0x35,
                                    0xff, 0x7b, 0x01, 0x00, 0x00, 0x80, 0x00, 0x38};
static const struct llb_mm_feature mm_features[2] = {
    {.modality = S("image"), .mm_hash = S("mm:9f86d081"), .offset = 3, .length = 2,
     .data = mm_data, .data_bytes = 16, .dtype = S("f16"), .num_cols = 4},
    {.modality = S("audio"), .mm_hash = S("mm:ぁ"), .offset = 5, .length = 1,
     .data = mm_data, .data_bytes = 8, .dtype = S("f32"), .num_cols = 2},
};

static bool mm_eq(const struct llb_mm_feature *got, int32_t n) {
  CHECK(n == N(mm_features));
  for (int32_t i = 0; i < n; i++) {
    const struct llb_mm_feature *a = &got[i], *b = &mm_features[i];
    CHECK(str_eq(a->modality, b->modality) && str_eq(a->mm_hash, b->mm_hash));
    CHECK(a->offset == b->offset && a->length == b->length && a->num_cols == b->num_cols);
    CHECK(bytes_eq(a->data, a->data_bytes, b->data, b->data_bytes));
    CHECK(((uintptr_t)a->data % 16) == 0);
    CHECK(str_eq(a->dtype, b->dtype));
  }
  return true;
}

static const struct llb_error_info sample_error = {
    .code = LLB_STATUS_QUEUE_FULL, .message = S("no free blocks — 0 of 512 left"),
    .field = S("num_tokens")};

static bool error_eq(const struct llb_error_info *a) {
  CHECK(a->code == sample_error.code);
  CHECK(str_eq(a->message, sample_error.message) && str_eq(a->field, sample_error.field));
  return true;
}

/* 3 tokens x (1 + 2) logprobs. */
static const int32_t lp_ids[9] = {11, 12, 13, 21, 22, 23, 31, 32, 33};
static const float lp_vals[9] = {-0.1f, -1.5f, -2.25f, -0.5f, -0.75f, -3.0f, -1e-3f, -4.5f, -9.f};
static const int32_t lp_ranks[3] = {1, 2, 1};
static const struct llb_logprobs_lists sample_lp = {
    .num_tokens = 3, .num_logprobs_per_token = 3, .logprob_token_ids = lp_ids,
    .logprobs = lp_vals, .sampled_token_ranks = lp_ranks};

static bool lp_eq(const struct llb_logprobs_lists *a) {
  CHECK(a->num_tokens == 3 && a->num_logprobs_per_token == 3);
  CHECK(i32_eq(a->logprob_token_ids, 9, lp_ids, 9));
  CHECK(memcmp(a->logprobs, lp_vals, sizeof lp_vals) == 0);
  CHECK(i32_eq(a->sampled_token_ranks, 3, lp_ranks, 3));
  return true;
}

/* ---- GenerateRequest / AbortRequest ---------------------------------------------------- */

static const struct llb_chat_message chat[3] = {
    {.role = S("system"), .content = S("Du bist ein hilfreicher Assistent.")},
    {.role = S("user"), .content = S("héllo wörld ✓ 日本語 🚀")},
    {.role = S("assistant"), .content = S(""), .tool_calls = S("[{\"id\":\"call_1\",\"type\":\"function\"}]"),
     .name = S("bot"), .content_is_null = true},
};
static const struct llb_mm_item mm_items[1] = {
    {.modality = S("image"), .data = mm_data, .data_bytes = 16, .dtype = S("f16"),
     .num_rows = 2, .num_cols = 4, .placeholder_offset = 4}};

static void fill_generate_request(struct llb_generate_request *m) {
  llb_generate_request_init(m);
  m->request_id = S("chatcmpl-ü-42");
  m->prompt = S("Übersetze: 日本語 🚀");
  m->messages = chat;
  m->num_messages = N(chat);
  m->prompt_token_ids = prompt_ids;
  m->num_prompt_token_ids = N(prompt_ids);
  m->chat_template = S("chatml");
  m->add_generation_prompt = false;
  m->raw = true;
  m->sampling_params = sample_sp();
  m->priority = -7;
  m->cache_salt = S("tenant-ä");
  m->mm_items = mm_items;
  m->num_mm_items = N(mm_items);
  m->structured_outputs = (struct llb_structured_outputs){.kind = LLB_SO_JSON, .spec = S("{\"type\":\"object\"}"), .reasoning = 2};
  m->tools = S("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
  m->chat_template_kwargs = S("{\"enable_thinking\":false}");
  m->continue_final_message = true;
  m->pooling_params = (struct llb_pooling_params){LLB_POOLING_MEAN, false, 0};
  m->lora_request = (struct llb_lora_request){S("org/sql-lora.v2"), 0};
}

static bool equals_generate_request(const void *v) {
  const struct llb_generate_request *a = v;
  struct llb_generate_request b;
  fill_generate_request(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION);
  CHECK(str_eq(a->request_id, b.request_id) && str_eq(a->prompt, b.prompt));
  CHECK(a->num_messages == b.num_messages);
  for (int i = 0; i < b.num_messages; i++)
    CHECK(str_eq(a->messages[i].role, b.messages[i].role) &&
          str_eq(a->messages[i].content, b.messages[i].content) &&
          str_eq(a->messages[i].tool_calls, b.messages[i].tool_calls) &&
          str_eq(a->messages[i].tool_call_id, b.messages[i].tool_call_id) &&
          str_eq(a->messages[i].name, b.messages[i].name) &&
          a->messages[i].content_is_null == b.messages[i].content_is_null);
  CHECK(a->structured_outputs.kind == LLB_SO_JSON &&
        str_eq(a->structured_outputs.spec, b.structured_outputs.spec) && a->structured_outputs.reasoning == 2);
  CHECK(str_eq(a->tools, b.tools) && str_eq(a->chat_template_kwargs, b.chat_template_kwargs));
  CHECK(a->continue_final_message);
  CHECK(a->pooling_params.pooling_type == LLB_POOLING_MEAN && !a->pooling_params.normalize &&
        a->pooling_params.dimensions == 0);
  CHECK(str_eq(a->lora_request.lora_name, b.lora_request.lora_name) && a->lora_request.lora_int_id == 0);
  CHECK(i32_eq(a->prompt_token_ids, a->num_prompt_token_ids, b.prompt_token_ids,
               b.num_prompt_token_ids));
  CHECK(str_eq(a->chat_template, b.chat_template));
  CHECK(a->add_generation_prompt == b.add_generation_prompt && a->raw == b.raw);
  CHECK(sp_eq(a->sampling_params, b.sampling_params));
  CHECK(a->priority == b.priority && str_eq(a->cache_salt, b.cache_salt));
  CHECK(a->num_mm_items == 1);
  CHECK(str_eq(a->mm_items[0].modality, mm_items[0].modality));
  CHECK(bytes_eq(a->mm_items[0].data, a->mm_items[0].data_bytes, mm_data, 16));
  CHECK(str_eq(a->mm_items[0].dtype, mm_items[0].dtype));
  CHECK(a->mm_items[0].num_rows == 2 && a->mm_items[0].num_cols == 4);
  CHECK(a->mm_items[0].placeholder_offset == 4);
  return true;
}

static void fill_abort_request(struct llb_abort_request *m) {
  *m = (struct llb_abort_request){.request_id = S("chatcmpl-ü-42")};
}

static bool equals_abort_request(const void *v) {
  const struct llb_abort_request *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->request_id, S("chatcmpl-ü-42")));
  return true;
}

/* ---- EngineCoreRequest / AbortRequests ------------------------------------------------- */

static const int32_t handed_ids[] = {100, 200};

static void fill_engine_core_request(struct llb_engine_core_request *m) {
  *m = (struct llb_engine_core_request){
      .request_id = S("ecr-0001"), .external_id = S("chatcmpl-ü-42"),
      .prompt_token_ids = prompt_ids, .num_prompt_token_ids = N(prompt_ids),
      .sampling_params = sample_sp(), .eos_token_id = 2, .arrival_time = 1763802654.125,
      .priority = 3, .cache_salt = S("tenant-ä"), .mm_features = mm_features,
      .num_mm_features = N(mm_features), .reply_to = S("_INBOX.xyz.1"), .client_index = 2,
      .parent_request_id = S("ecr-parent"),
      .structured_outputs = {.kind = LLB_SO_CHOICE, .spec = S("[\"yes\",\"no\"]")},
      .pooling_params = {LLB_POOLING_LAST, true, 64},
      .lora_request = {S("sql-lora"), 0x7ffffffe}, .has_kv_transfer_params = true,
      .kv_transfer_params = {.do_remote_prefill = true, .remote_engine_id = S("prefill-0"),
                             .remote_request_id = S("ecr-0001"), .remote_num_blocks = 3, .num_tokens = 41},
      .output_token_ids = handed_ids, .num_output_token_ids = 2};
}

static bool equals_engine_core_request(const void *v) {
  const struct llb_engine_core_request *a = v;
  struct llb_engine_core_request b;
  fill_engine_core_request(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION);
  CHECK(str_eq(a->request_id, b.request_id) && str_eq(a->external_id, b.external_id));
  CHECK(i32_eq(a->prompt_token_ids, a->num_prompt_token_ids, b.prompt_token_ids,
               b.num_prompt_token_ids));
  CHECK(sp_eq(a->sampling_params, b.sampling_params));
  CHECK(a->eos_token_id == 2 && a->arrival_time == b.arrival_time && a->priority == 3);
  CHECK(str_eq(a->cache_salt, b.cache_salt) && mm_eq(a->mm_features, a->num_mm_features));
  CHECK(str_eq(a->reply_to, b.reply_to) && a->client_index == 2);
  CHECK(str_eq(a->parent_request_id, b.parent_request_id));
  CHECK(a->structured_outputs.kind == LLB_SO_CHOICE &&
        str_eq(a->structured_outputs.spec, b.structured_outputs.spec));
  CHECK(a->pooling_params.pooling_type == LLB_POOLING_LAST && a->pooling_params.normalize &&
        a->pooling_params.dimensions == 64);
  CHECK(str_eq(a->lora_request.lora_name, b.lora_request.lora_name) && a->lora_request.lora_int_id == 0x7ffffffe);
  CHECK(a->has_kv_transfer_params && a->kv_transfer_params.do_remote_prefill &&
        !a->kv_transfer_params.do_remote_decode);
  CHECK(str_eq(a->kv_transfer_params.remote_engine_id, b.kv_transfer_params.remote_engine_id) &&
        str_eq(a->kv_transfer_params.remote_request_id, b.kv_transfer_params.remote_request_id));
  CHECK(a->kv_transfer_params.remote_num_blocks == 3 && a->kv_transfer_params.num_tokens == 41);
  CHECK(i32_eq(a->output_token_ids, a->num_output_token_ids, handed_ids, 2));
  return true;
}

static void fill_abort_requests(struct llb_abort_requests *m) {
  *m = (struct llb_abort_requests){.request_ids = ids3, .num_request_ids = N(ids3)};
}

static bool equals_abort_requests(const void *v) {
  const struct llb_abort_requests *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION);
  CHECK(strs_eq(a->request_ids, a->num_request_ids, ids3, N(ids3)));
  return true;
}

/* ---- SchedulerOutput ------------------------------------------------------------------- */

static const int32_t blocks_a[] = {4, 9, 17};
static const int32_t blocks_b[] = {0};
static const bool resumed[3] = {false, true, false};
static const int32_t new_tok[] = {501, 502, 503};
static const int32_t new_tok_n[3] = {1, 0, 2};
static const int32_t new_blk[] = {33, 34, 35, 36};
static const int32_t new_blk_n[3] = {2, 1, 1};
static const int32_t computed[3] = {17, 250, 31};
static const int32_t outputs_n[3] = {5, 0, 12};
static const int32_t enc_in[] = {0, 1};

static const int32_t recv_blocks[] = {40, 41};
static const int32_t send_blocks[] = {7, 8, 9};
static const struct llb_kv_recv_request kv_recv[1] = {
    {.req_id = S("req-d-ж"), .local_block_ids = recv_blocks, .num_local_block_ids = N(recv_blocks),
     .remote_engine_id = S("prefill-0"), .remote_request_id = S("req-p-1"), .remote_first_block = 1,
     .num_tokens = 40}};
static const struct llb_kv_send_request kv_send[2] = {
    {.req_id = S("req-p-ф"), .block_ids = send_blocks, .num_block_ids = 3, .num_tokens = 33, .expires_in_s = 30.5f},
    {.req_id = S("req-p-2"), .block_ids = send_blocks + 2, .num_block_ids = 1, .num_tokens = 16, .expires_in_s = 1e-3f}};

static bool kv_metadata_eq(const struct llb_kv_connector_metadata *a) {
  CHECK(a->num_reqs_to_recv == 1 && a->num_reqs_to_send == 2);
  const struct llb_kv_recv_request *r = &a->reqs_to_recv[0];
  CHECK(str_eq(r->req_id, kv_recv[0].req_id) && str_eq(r->remote_engine_id, kv_recv[0].remote_engine_id) &&
        str_eq(r->remote_request_id, kv_recv[0].remote_request_id));
  CHECK(i32_eq(r->local_block_ids, r->num_local_block_ids, recv_blocks, N(recv_blocks)));
  CHECK(r->remote_first_block == 1 && r->num_tokens == 40);
  for (int i = 0; i < 2; i++) {
    const struct llb_kv_send_request *x = &a->reqs_to_send[i], *y = &kv_send[i];
    CHECK(str_eq(x->req_id, y->req_id) && i32_eq(x->block_ids, x->num_block_ids, y->block_ids, y->num_block_ids));
    CHECK(x->num_tokens == y->num_tokens && x->expires_in_s == y->expires_in_s);
  }
  CHECK(a->epoch == 0xfedcba9876543210ull);
  return true;
}

static void fill_scheduler_output(struct llb_scheduler_output *m) {
  static struct llb_new_request_data news[2];
  static struct llb_scheduled_tokens sched[4];
  static struct llb_scheduled_encoder_input enc[1];
  news[0] = (struct llb_new_request_data){
      .req_id = S("req-новый"), .prompt_token_ids = prompt_ids,
      .num_prompt_token_ids = N(prompt_ids), .sampling_params = sample_sp(),
      .block_ids = blocks_a, .num_block_ids = N(blocks_a), .num_computed_tokens = 16,
      .mm_features = mm_features, .num_mm_features = N(mm_features)};
  news[1] = (struct llb_new_request_data){
      .req_id = S("req-2"), .prompt_token_ids = prompt_ids, .num_prompt_token_ids = 3,
      .sampling_params = sample_sp(), .block_ids = blocks_b, .num_block_ids = 1,
      .output_token_ids = new_tok, .num_output_token_ids = N(new_tok),
      .structured_outputs = {.kind = LLB_SO_JSON_OBJECT, .spec = S("")},
      .pooling_params = {LLB_POOLING_CLS, true, 0}, .lora_request = {S("a_b-c:1+x"), 7}};
  sched[0] = (struct llb_scheduled_tokens){.req_id = S("req-новый"), .num_tokens = 512};
  sched[1] = (struct llb_scheduled_tokens){.req_id = ids3[0], .num_tokens = 1};
  sched[2] = (struct llb_scheduled_tokens){.req_id = ids3[1], .num_tokens = 1};
  sched[3] = (struct llb_scheduled_tokens){.req_id = ids3[2], .num_tokens = 3};
  enc[0] = (struct llb_scheduled_encoder_input){S("req-новый"), enc_in, N(enc_in), mm_features,
                                                N(mm_features)};
  *m = (struct llb_scheduler_output){
      .step = 0x1122334455667788ULL, .scheduled_new_reqs = news, .num_scheduled_new_reqs = 2,
      .scheduled_cached_reqs = {.num_reqs = 3, .req_ids = ids3,
                                .resumed_from_preemption = resumed, .new_token_ids = new_tok,
                                .num_new_token_ids = N(new_tok), .new_token_counts = new_tok_n,
                                .new_block_ids = new_blk, .num_new_block_ids = N(new_blk),
                                .new_block_counts = new_blk_n, .num_computed_tokens = computed,
                                .num_output_tokens = outputs_n},
      .num_scheduled_tokens = sched, .num_scheduled_reqs = 4, .total_num_scheduled_tokens = 517,
      .scheduled_encoder_inputs = enc, .num_scheduled_encoder_inputs = 1,
      .finished_req_ids = ids3 + 1, .num_finished_req_ids = 2,
      .free_encoder_mm_hashes = hashes2, .num_free_encoder_mm_hashes = 2,
      .preempted_req_ids = ids3, .num_preempted_req_ids = 1, .block_size = 16,
      .kv_connector_metadata = {.reqs_to_recv = kv_recv, .num_reqs_to_recv = 1, .reqs_to_send = kv_send,
                                .num_reqs_to_send = 2, .epoch = 0xfedcba9876543210ull}};
}

static bool equals_scheduler_output(const void *v) {
  const struct llb_scheduler_output *a = v;
  struct llb_scheduler_output b;
  fill_scheduler_output(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && a->step == b.step);
  CHECK(a->num_scheduled_new_reqs == 2);
  for (int i = 0; i < 2; i++) {
    const struct llb_new_request_data *x = &a->scheduled_new_reqs[i], *y = &b.scheduled_new_reqs[i];
    CHECK(str_eq(x->req_id, y->req_id));
    CHECK(i32_eq(x->prompt_token_ids, x->num_prompt_token_ids, y->prompt_token_ids,
                 y->num_prompt_token_ids));
    CHECK(sp_eq(x->sampling_params, y->sampling_params));
    CHECK(i32_eq(x->block_ids, x->num_block_ids, y->block_ids, y->num_block_ids));
    CHECK(x->num_computed_tokens == y->num_computed_tokens);
    CHECK(i == 1 ? x->num_mm_features == 0 : mm_eq(x->mm_features, x->num_mm_features));
    CHECK(i32_eq(x->output_token_ids, x->num_output_token_ids, y->output_token_ids,
                 y->num_output_token_ids));
    CHECK(x->structured_outputs.kind == (i == 1 ? LLB_SO_JSON_OBJECT : LLB_SO_NONE));
    CHECK(x->pooling_params.pooling_type == y->pooling_params.pooling_type &&
          x->pooling_params.normalize == y->pooling_params.normalize);
    CHECK(str_eq(x->lora_request.lora_name, y->lora_request.lora_name) &&
          x->lora_request.lora_int_id == y->lora_request.lora_int_id);
  }
  const struct llb_cached_request_data *c = &a->scheduled_cached_reqs;
  CHECK(strs_eq(c->req_ids, c->num_reqs, ids3, 3));
  CHECK(memcmp(c->resumed_from_preemption, resumed, sizeof resumed) == 0);
  CHECK(i32_eq(c->new_token_ids, c->num_new_token_ids, new_tok, N(new_tok)));
  CHECK(i32_eq(c->new_token_counts, 3, new_tok_n, 3));
  CHECK(i32_eq(c->new_block_ids, c->num_new_block_ids, new_blk, N(new_blk)));
  CHECK(i32_eq(c->new_block_counts, 3, new_blk_n, 3));
  CHECK(i32_eq(c->num_computed_tokens, 3, computed, 3));
  CHECK(i32_eq(c->num_output_tokens, 3, outputs_n, 3));
  CHECK(a->num_scheduled_reqs == 4);
  for (int i = 0; i < 4; i++)
    CHECK(str_eq(a->num_scheduled_tokens[i].req_id, b.num_scheduled_tokens[i].req_id) &&
          a->num_scheduled_tokens[i].num_tokens == b.num_scheduled_tokens[i].num_tokens);
  CHECK(a->total_num_scheduled_tokens == 517);
  CHECK(a->num_scheduled_encoder_inputs == 1);
  CHECK(str_eq(a->scheduled_encoder_inputs[0].req_id, S("req-новый")));
  CHECK(i32_eq(a->scheduled_encoder_inputs[0].input_ids,
               a->scheduled_encoder_inputs[0].num_input_ids, enc_in, N(enc_in)));
  CHECK(mm_eq(a->scheduled_encoder_inputs[0].mm_features,
              a->scheduled_encoder_inputs[0].num_mm_features));
  CHECK(strs_eq(a->finished_req_ids, a->num_finished_req_ids, ids3 + 1, 2));
  CHECK(strs_eq(a->free_encoder_mm_hashes, a->num_free_encoder_mm_hashes, hashes2, 2));
  CHECK(strs_eq(a->preempted_req_ids, a->num_preempted_req_ids, ids3, 1));
  CHECK(a->block_size == 16);
  CHECK(kv_metadata_eq(&a->kv_connector_metadata));
  return true;
}

/* ---- KVStep / KVStepResult ------------------------------------------------------------- */

static const uint64_t block_hashes[] = {0xFFFFFFFFFFFFFFFFULL, 1, 0x8000000000000000ULL};

static const int32_t kv_held[] = {0, 7, 511};
static const int32_t kv_ids[] = {4, 9, 2};

static void fill_kv_step(struct llb_kv_step *m) {
  static struct llb_kv_op ops[3];
  ops[0] = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_RELEASE, .block_ids = kv_ids, .num_block_ids = N(kv_ids)};
  ops[1] = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_ALLOCATE, .req_id = ids3[1],
                              .num_tokens = 70, .block_hashes = block_hashes,
                              .num_block_hashes = N(block_hashes), .num_computed_tokens = 48,
                              .lookup = true, .num_held_blocks = 3};
  ops[2] = (struct llb_kv_op){.kind = LLB_KV_OP_KIND_CACHE, .req_id = ids3[2],
                              .block_hashes = block_hashes, .num_block_hashes = 2,
                              .block_ids = kv_ids, .num_block_ids = 2};
  *m = (struct llb_kv_step){.step = 77, .ops = ops, .num_ops = N(ops), .reset = true,
                            .held_block_ids = kv_held, .num_held_block_ids = N(kv_held), .resync = true};
}

static bool equals_kv_step(const void *v) {
  const struct llb_kv_step *a = v;
  struct llb_kv_step b;
  fill_kv_step(&b);
  CHECK(a->version == LLB_KV_STEP_VERSION && a->step == 77 && a->num_ops == b.num_ops);
  CHECK(a->reset == b.reset && a->resync == b.resync);
  CHECK(i32_eq(a->held_block_ids, a->num_held_block_ids, b.held_block_ids, b.num_held_block_ids));
  for (int i = 0; i < b.num_ops; i++) {
    const struct llb_kv_op *x = &a->ops[i], *y = &b.ops[i];
    CHECK(x->kind == y->kind && str_eq(x->req_id, y->req_id) && x->num_tokens == y->num_tokens);
    CHECK(x->num_block_hashes == y->num_block_hashes);
    CHECK(y->num_block_hashes == 0 ||
          memcmp(x->block_hashes, y->block_hashes, (size_t)y->num_block_hashes * 8) == 0);
    CHECK(x->num_computed_tokens == y->num_computed_tokens && x->lookup == y->lookup);
    CHECK(i32_eq(x->block_ids, x->num_block_ids, y->block_ids, y->num_block_ids));
    CHECK(x->num_held_blocks == y->num_held_blocks);
  }
  return true;
}

static void fill_kv_step_result(struct llb_kv_step_result *m) {
  static struct llb_kv_op_result res[2];
  res[0] = (struct llb_kv_op_result){.req_id = ids3[1], .status = LLB_STATUS_OK,
                                     .num_cached_tokens = 32, .block_ids = blocks_a,
                                     .num_block_ids = N(blocks_a)};
  res[1] = (struct llb_kv_op_result){.req_id = ids3[2], .status = LLB_STATUS_QUEUE_FULL};
  *m = (struct llb_kv_step_result){
      .step = 77, .results = res, .num_results = 2, .num_free_blocks = 12,
      .num_total_blocks = 512, .prefix_cache_queries = 1ULL << 40,
      .prefix_cache_hits = (1ULL << 39) + 5, .error = sample_error};
}

static bool equals_kv_step_result(const void *v) {
  const struct llb_kv_step_result *a = v;
  struct llb_kv_step_result b;
  fill_kv_step_result(&b);
  CHECK(a->version == LLB_KV_STEP_VERSION && a->step == 77 && a->num_results == 2);
  for (int i = 0; i < 2; i++) {
    const struct llb_kv_op_result *x = &a->results[i], *y = &b.results[i];
    CHECK(str_eq(x->req_id, y->req_id) && x->status == y->status);
    CHECK(x->num_cached_tokens == y->num_cached_tokens);
    CHECK(i32_eq(x->block_ids, x->num_block_ids, y->block_ids, y->num_block_ids));
  }
  CHECK(a->num_free_blocks == 12 && a->num_total_blocks == 512);
  CHECK(a->prefix_cache_queries == b.prefix_cache_queries);
  CHECK(a->prefix_cache_hits == b.prefix_cache_hits && error_eq(&a->error));
  return true;
}

/* ---- EncoderStep / EncoderStepResult --------------------------------------------------- */

static void fill_encoder_step(struct llb_encoder_step *m) {
  static struct llb_encoder_op ops[4];
  ops[0] = (struct llb_encoder_op){LLB_ENCODER_OP_KIND_CHECK_AND_UPDATE, ids3[0], hashes2[0],
                                   0, 256, 0, 0};
  ops[1] = (struct llb_encoder_op){LLB_ENCODER_OP_KIND_CAN_ALLOCATE, ids3[0], hashes2[1], 1,
                                   64, 2048, 256};
  ops[2] = (struct llb_encoder_op){LLB_ENCODER_OP_KIND_ALLOCATE, ids3[0], hashes2[1], 1, 64,
                                   0, 0};
  ops[3] = (struct llb_encoder_op){.kind = LLB_ENCODER_OP_KIND_FREE_REQUEST, .req_id = ids3[2]};
  *m = (struct llb_encoder_step){.step = 9, .ops = ops, .num_ops = N(ops), .reset = true};
}

static bool equals_encoder_step(const void *v) {
  const struct llb_encoder_step *a = v;
  struct llb_encoder_step b;
  fill_encoder_step(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && a->step == 9 && a->num_ops == 4 && a->reset);
  for (int i = 0; i < 4; i++) {
    const struct llb_encoder_op *x = &a->ops[i], *y = &b.ops[i];
    CHECK(x->kind == y->kind && str_eq(x->req_id, y->req_id) && str_eq(x->mm_hash, y->mm_hash));
    CHECK(x->input_id == y->input_id && x->num_embeds == y->num_embeds);
    CHECK(x->encoder_compute_budget == y->encoder_compute_budget);
    CHECK(x->num_embeds_to_schedule == y->num_embeds_to_schedule);
  }
  return true;
}

static const bool enc_results[4] = {true, false, true, true};

static void fill_encoder_step_result(struct llb_encoder_step_result *m) {
  *m = (struct llb_encoder_step_result){
      .step = 9, .results = enc_results, .num_results = 4, .freed_mm_hashes = hashes2,
      .num_freed_mm_hashes = 2, .num_free_slots = 1024, .error = sample_error};
}

static bool equals_encoder_step_result(const void *v) {
  const struct llb_encoder_step_result *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION && a->step == 9 && a->num_results == 4);
  CHECK(memcmp(a->results, enc_results, sizeof enc_results) == 0);
  CHECK(strs_eq(a->freed_mm_hashes, a->num_freed_mm_hashes, hashes2, 2));
  CHECK(a->num_free_slots == 1024 && error_eq(&a->error));
  return true;
}

/* ---- ModelRunnerOutput ----------------------------------------------------------------- */

static const int32_t sampled[] = {100, 200, 201};
static const int32_t num_sampled[3] = {1, 2, 0};
static const float pooled[] = {0.6f, -0.8f, 0.0f, 1e-3f, -2.5f};
static const int32_t num_pooled[3] = {0, 2, 3};
static const int32_t num_prompt_lp[3] = {2, 0, 1}, prompt_lp_start[3] = {1, 1, 17};

static void fill_model_runner_output(struct llb_model_runner_output *m) {
  *m = (struct llb_model_runner_output){
      .step = 0x1122334455667788ULL, .req_ids = ids3, .num_reqs = 3,
      .sampled_token_ids = sampled, .num_sampled_token_ids = N(sampled),
      .num_sampled = num_sampled, .logprobs = sample_lp, .error = sample_error,
      .failed_req_id = {"req-poison", 10}, .pooler_output = pooled,
      .num_pooler_output = N(pooled), .num_pooled = num_pooled,
      .prompt_logprobs = sample_lp, .num_prompt_logprobs = num_prompt_lp,
      .prompt_logprobs_start = prompt_lp_start,
      .kv_connector_output = {.finished_sending = ids3, .num_finished_sending = 1, .finished_recving = ids3 + 1,
                              .num_finished_recving = 2, .failed_recving = hashes2, .num_failed_recving = 2}};
}

static bool equals_model_runner_output(const void *v) {
  const struct llb_model_runner_output *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION && a->step == 0x1122334455667788ULL);
  CHECK(strs_eq(a->req_ids, a->num_reqs, ids3, 3));
  CHECK(i32_eq(a->sampled_token_ids, a->num_sampled_token_ids, sampled, N(sampled)));
  CHECK(i32_eq(a->num_sampled, a->num_reqs, num_sampled, 3));
  CHECK(lp_eq(&a->logprobs) && error_eq(&a->error));
  CHECK(a->failed_req_id.len == 10 && memcmp(a->failed_req_id.data, "req-poison", 10) == 0);
  CHECK(i32_eq(a->num_pooled, a->num_reqs, num_pooled, 3));
  CHECK(a->num_pooler_output == N(pooled) &&
        memcmp(a->pooler_output, pooled, sizeof(pooled)) == 0);
  CHECK(lp_eq(&a->prompt_logprobs));
  CHECK(i32_eq(a->num_prompt_logprobs, a->num_reqs, num_prompt_lp, 3));
  CHECK(i32_eq(a->prompt_logprobs_start, a->num_reqs, prompt_lp_start, 3));
  const struct llb_kv_connector_output *k = &a->kv_connector_output;
  CHECK(strs_eq(k->finished_sending, k->num_finished_sending, ids3, 1));
  CHECK(strs_eq(k->finished_recving, k->num_finished_recving, ids3 + 1, 2));
  CHECK(strs_eq(k->failed_recving, k->num_failed_recving, hashes2, 2));
  return true;
}

/* ---- EngineCoreOutputs ----------------------------------------------------------------- */

static void fill_engine_core_outputs(struct llb_engine_core_outputs *m) {
  static struct llb_engine_core_output outs[2];
  llb_engine_core_output_init(&outs[0]);
  outs[0].request_id = ids3[0];
  outs[0].new_token_ids = sampled;
  outs[0].num_new_token_ids = 3;
  outs[0].first_output_pos = 41;
  outs[0].finish_reason = LLB_FINISH_REASON_STOP;
  outs[0].stop_reason = S("Ende ✓");
  outs[0].stop_token_id = 32000;
  outs[0].new_logprobs = sample_lp;
  outs[0].num_cached_tokens = 16;
  outs[0].reply_to = S("_INBOX.xyz.1");
  outs[0].external_id = S("chatcmpl-ü-42");
  outs[0].arrival_time = 1763802654.125;
  outs[0].queued_time_ns = 1763802654125000001LL;
  outs[0].scheduled_time_ns = 1763802654126000002LL;
  outs[0].first_token_time_ns = 1763802654190000003LL;
  outs[0].num_preemptions = 1;
  outs[0].prompt_token_ids = prompt_ids;
  outs[0].num_prompt_token_ids = N(prompt_ids);
  outs[0].sampling_params = sample_sp();
  outs[0].parent_request_id = S("ecr-parent");
  outs[0].index = 2;
  outs[0].error = sample_error;
  outs[0].resync = true;
  outs[0].pooling_output = pooled;
  outs[0].num_pooling_output = N(pooled);
  outs[0].prompt_logprobs = sample_lp;
  outs[0].handed_off_to = S("decode-1");
  outs[0].handed_off_token_ids = sampled;
  outs[0].num_handed_off_token_ids = 2;
  llb_engine_core_output_init(&outs[1]);
  outs[1].request_id = ids3[1];
  outs[1].new_token_ids = sampled;
  outs[1].num_new_token_ids = 1;
  outs[1].first_output_pos = 0;
  *m = (struct llb_engine_core_outputs){.engine_id = S("engine-ø"), .step = 5,
                                        .timestamp = 1763802655.5, .outputs = outs,
                                        .num_outputs = 2};
}

static bool equals_engine_core_outputs(const void *v) {
  const struct llb_engine_core_outputs *a = v;
  struct llb_engine_core_outputs b;
  fill_engine_core_outputs(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->engine_id, b.engine_id));
  CHECK(a->step == 5 && a->timestamp == b.timestamp && a->num_outputs == 2);
  const struct llb_engine_core_output *x = &a->outputs[0], *y = &b.outputs[0];
  CHECK(str_eq(x->request_id, y->request_id));
  CHECK(i32_eq(x->new_token_ids, x->num_new_token_ids, y->new_token_ids, y->num_new_token_ids));
  CHECK(x->first_output_pos == 41 && x->finish_reason == LLB_FINISH_REASON_STOP);
  CHECK(str_eq(x->stop_reason, y->stop_reason) && x->stop_token_id == 32000);
  CHECK(lp_eq(&x->new_logprobs) && x->num_cached_tokens == 16 && lp_eq(&x->prompt_logprobs));
  CHECK(str_eq(x->reply_to, y->reply_to) && str_eq(x->external_id, y->external_id));
  CHECK(x->arrival_time == y->arrival_time && x->queued_time_ns == y->queued_time_ns);
  CHECK(x->scheduled_time_ns == y->scheduled_time_ns);
  CHECK(x->first_token_time_ns == y->first_token_time_ns && x->num_preemptions == 1);
  CHECK(i32_eq(x->prompt_token_ids, x->num_prompt_token_ids, prompt_ids, N(prompt_ids)));
  CHECK(sp_eq(x->sampling_params, y->sampling_params));
  CHECK(str_eq(x->parent_request_id, y->parent_request_id) && x->index == 2);
  CHECK(error_eq(&x->error) && x->resync);
  CHECK(x->num_pooling_output == N(pooled) &&
        memcmp(x->pooling_output, pooled, sizeof(pooled)) == 0);
  CHECK(str_eq(x->handed_off_to, S("decode-1")) &&
        i32_eq(x->handed_off_token_ids, x->num_handed_off_token_ids, sampled, 2));
  x = &a->outputs[1];
  CHECK(str_eq(x->request_id, ids3[1]) && x->num_new_token_ids == 1 && x->new_token_ids[0] == 100);
  CHECK(x->stop_token_id == -1 && x->sampling_params == NULL && x->new_logprobs.num_tokens == 0);
  CHECK(x->finish_reason == LLB_FINISH_REASON_NONE && x->error.code == 0);
  CHECK(x->num_pooling_output == 0 && x->pooling_output == NULL);
  CHECK(str_eq(x->stop_reason, S("")) && str_eq(x->error.message, S("")));
  CHECK(x->handed_off_to.len == 0 && x->num_handed_off_token_ids == 0);
  return true;
}

/* ---- RequestOutput --------------------------------------------------------------------- */

static void fill_request_output(struct llb_request_output *m) {
  static struct llb_top_logprob top[2] = {{100, -0.1f, {"Hé", 3}}, {7, -2.5f, {"✓", 3}}};
  static struct llb_token_logprobs lps[3];
  static struct llb_completion_output outs[2];
  lps[0] = (struct llb_token_logprobs){100, -0.1f, 1, {"Hé", 3}, top, 2};
  lps[1] = (struct llb_token_logprobs){200, -1.25f, 3, {" 日本", 7}, top, 1};
  lps[2] = (struct llb_token_logprobs){201, -0.5f, 2, {"🚀", 4}, NULL, 0};
  outs[0] = (struct llb_completion_output){
      .index = 0, .text = S("Hé 日本🚀"), .token_ids = sampled, .num_token_ids = 3,
      .cumulative_logprob = -1.85, .logprobs = lps, .num_logprobs = 3,
      .finish_reason = LLB_FINISH_REASON_LENGTH, .stop_reason = S("")};
  outs[1] = (struct llb_completion_output){
      .index = 1, .text = S("Ende"), .token_ids = sampled, .num_token_ids = 1,
      .cumulative_logprob = -0.1, .finish_reason = LLB_FINISH_REASON_STOP,
      .stop_reason = S("Ende ✓"), .resync = true};
  *m = (struct llb_request_output){
      .request_id = S("chatcmpl-ü-42"), .prompt_token_ids = prompt_ids,
      .num_prompt_token_ids = N(prompt_ids), .prompt = S("Übersetze: 日本語 🚀"),
      .outputs = outs, .num_outputs = 2, .finished = true,
      .metrics = {1763802654.125, 1763802654.126, 1763802654.19, 1763802655.0, 1763802655.01,
                  16, 7, 4},
      .error = sample_error, .max_model_len = 2048, .pooling_output = pooled,
      .num_pooling_output = N(pooled), .prompt_logprobs = lps + 1,
      .num_prompt_logprobs = 2};
}

static bool equals_request_output(const void *v) {
  const struct llb_request_output *a = v;
  struct llb_request_output b;
  fill_request_output(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->request_id, b.request_id));
  CHECK(i32_eq(a->prompt_token_ids, a->num_prompt_token_ids, prompt_ids, N(prompt_ids)));
  CHECK(str_eq(a->prompt, b.prompt) && a->num_outputs == 2 && a->finished);
  CHECK(a->max_model_len == b.max_model_len);
  CHECK(a->num_pooling_output == N(pooled) &&
        memcmp(a->pooling_output, pooled, sizeof(pooled)) == 0);
  CHECK(a->max_model_len == b.max_model_len && a->num_prompt_logprobs == 2);
  for (int j = 0; j < 2; j++) {
    const struct llb_token_logprobs *p = &a->prompt_logprobs[j], *q = &b.prompt_logprobs[j];
    CHECK(p->token_id == q->token_id && p->logprob == q->logprob && p->rank == q->rank);
    CHECK(str_eq(p->decoded, q->decoded) && p->num_top == q->num_top);
  }
  for (int i = 0; i < 2; i++) {
    const struct llb_completion_output *x = &a->outputs[i], *y = &b.outputs[i];
    CHECK(x->index == y->index && str_eq(x->text, y->text) && x->resync == y->resync);
    CHECK(i32_eq(x->token_ids, x->num_token_ids, y->token_ids, y->num_token_ids));
    CHECK(x->cumulative_logprob == y->cumulative_logprob && x->num_logprobs == y->num_logprobs);
    for (int j = 0; j < y->num_logprobs; j++) {
      const struct llb_token_logprobs *p = &x->logprobs[j], *q = &y->logprobs[j];
      CHECK(p->token_id == q->token_id && p->logprob == q->logprob && p->rank == q->rank);
      CHECK(str_eq(p->decoded, q->decoded) && p->num_top == q->num_top);
      for (int k = 0; k < q->num_top; k++)
        CHECK(p->top[k].token_id == q->top[k].token_id &&
              p->top[k].logprob == q->top[k].logprob &&
              str_eq(p->top[k].decoded, q->top[k].decoded));
    }
    CHECK(x->finish_reason == y->finish_reason && str_eq(x->stop_reason, y->stop_reason));
  }
  const struct llb_request_metrics *x = &a->metrics, *y = &b.metrics;
  CHECK(x->arrival_time == y->arrival_time && x->first_scheduled_time == y->first_scheduled_time);
  CHECK(x->first_token_time == y->first_token_time && x->last_token_time == y->last_token_time);
  CHECK(x->finished_time == y->finished_time && x->num_cached_tokens == y->num_cached_tokens);
  CHECK(x->num_prompt_tokens == y->num_prompt_tokens);
  CHECK(x->num_generation_tokens == y->num_generation_tokens);
  CHECK(error_eq(&a->error));
  return true;
}

/* ---- Heartbeat / SchedulerStats / ErrorReply ------------------------------------------- */

static const struct llb_lora_adapter hb_loras[2] = {
    {S("sql-lora"), 12345, 16, false, {0}, {0}}, {S("org/chat-lora"), 1, 8, true, S("t1/chat.gguf"), S("tenant_1")}};

static void fill_heartbeat(struct llb_heartbeat *m) {
  *m = (struct llb_heartbeat){.lora_adapters = hb_loras, .num_lora_adapters = 2, .actor = S("gpu_worker"), .instance = S("w-ø-0"),
                              .host = S("host-1"), .pid = 4242, .uptime_s = 12.5,
                              .seq = 1ULL << 33, .timestamp = 1763802655.5, .ready = true,
                              .inflight = 3, .engine_id = S("e-7"), .num_gpu_blocks = 123456,
                              .block_size = 32};
}

static bool equals_heartbeat(const void *v) {
  const struct llb_heartbeat *a = v;
  struct llb_heartbeat b;
  fill_heartbeat(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->actor, b.actor));
  CHECK(str_eq(a->instance, b.instance) && str_eq(a->host, b.host) && a->pid == 4242);
  CHECK(a->uptime_s == 12.5 && a->seq == b.seq && a->timestamp == b.timestamp);
  CHECK(a->ready && a->inflight == 3);
  CHECK(str_eq(a->engine_id, b.engine_id) && a->num_gpu_blocks == 123456 && a->block_size == 32);
  CHECK(a->num_lora_adapters == 2);
  for (int i = 0; i < 2; i++)
    CHECK(str_eq(a->lora_adapters[i].lora_name, hb_loras[i].lora_name) &&
          a->lora_adapters[i].lora_int_id == hb_loras[i].lora_int_id && a->lora_adapters[i].rank == hb_loras[i].rank &&
          a->lora_adapters[i].dynamic == hb_loras[i].dynamic);
  CHECK(a->lora_adapters[0].lora_path.len == 0 && a->lora_adapters[0].tenant.len == 0);
  CHECK(str_eq(a->lora_adapters[1].lora_path, hb_loras[1].lora_path) &&
        str_eq(a->lora_adapters[1].tenant, hb_loras[1].tenant));
  return true;
}

static void fill_scheduler_stats(struct llb_scheduler_stats *m) {
  *m = (struct llb_scheduler_stats){
      .engine_id = S("engine-ø"), .step = 123456789, .timestamp = 1763802655.5,
      .num_running_reqs = 17, .num_waiting_reqs = 4, .kv_cache_usage = 0.625f,
      .num_free_blocks = 192, .num_total_blocks = 512, .prefix_cache_queries = 1000000,
      .prefix_cache_hits = 250000, .num_preemptions = 3, .prompt_tokens_total = 987654,
      .generation_tokens_total = 123456, .encoder_cache_queries = 40, .encoder_cache_hits = 30,
      .encoder_inputs_computed = 12, .encoder_embeds_computed = 3456, .role = LLB_ENGINE_ROLE_DECODE};
}

static bool equals_scheduler_stats(const void *v) {
  const struct llb_scheduler_stats *a = v;
  struct llb_scheduler_stats b;
  fill_scheduler_stats(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->engine_id, b.engine_id));
  CHECK(a->step == b.step && a->timestamp == b.timestamp);
  CHECK(a->num_running_reqs == 17 && a->num_waiting_reqs == 4 && a->kv_cache_usage == 0.625f);
  CHECK(a->num_free_blocks == 192 && a->num_total_blocks == 512);
  CHECK(a->prefix_cache_queries == 1000000 && a->prefix_cache_hits == 250000);
  CHECK(a->num_preemptions == 3 && a->prompt_tokens_total == 987654);
  CHECK(a->generation_tokens_total == 123456 && a->encoder_cache_queries == 40);
  CHECK(a->encoder_cache_hits == 30 && a->encoder_inputs_computed == 12);
  CHECK(a->encoder_embeds_computed == 3456 && a->role == LLB_ENGINE_ROLE_DECODE);
  return true;
}

static void fill_error_reply(struct llb_error_reply *m) {
  *m = (struct llb_error_reply){.error = sample_error, .request_id = S("chatcmpl-ü-42")};
}

static bool equals_error_reply(const void *v) {
  const struct llb_error_reply *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION && error_eq(&a->error));
  CHECK(str_eq(a->request_id, S("chatcmpl-ü-42")));
  return true;
}

/* ---- LoRAUpdate / LoRAUpdateReply ----------------------------------------------------- */

static void fill_lora_update(struct llb_lora_update *m) {
  *m = (struct llb_lora_update){.op = LLB_LORA_UPDATE_LOAD, .lora_name = S("org/sql-lora.v2"),
                                .lora_path = S("tenant-a/sql..v2/adapter.gguf"), .tenant = S("tenant-a")};
}

static bool equals_lora_update(const void *v) {
  const struct llb_lora_update *a = v;
  struct llb_lora_update b;
  fill_lora_update(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && a->op == LLB_LORA_UPDATE_LOAD);
  CHECK(str_eq(a->lora_name, b.lora_name) && str_eq(a->lora_path, b.lora_path) && str_eq(a->tenant, b.tenant));
  return true;
}

static void fill_lora_update_reply(struct llb_lora_update_reply *m) {
  *m = (struct llb_lora_update_reply){.engine_id = S("e-ø-1"), .error = sample_error};
}

static bool equals_lora_update_reply(const void *v) {
  const struct llb_lora_update_reply *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->engine_id, S("e-ø-1")) && error_eq(&a->error));
  return true;
}

/* ---- KVFetchRequest / KVTransferChunk (issue 36) ---------------------------------------- */

static void fill_kv_fetch_request(struct llb_kv_fetch_request *m) {
  *m = (struct llb_kv_fetch_request){.request_id = S("req-p-ф"), .first_block = 2, .num_blocks = 5,
                                     .generation = 0x1122334455667788ull};
}

static bool equals_kv_fetch_request(const void *v) {
  const struct llb_kv_fetch_request *a = v;
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->request_id, S("req-p-ф")));
  CHECK(a->first_block == 2 && a->num_blocks == 5 && a->generation == 0x1122334455667788ull);
  return true;
}

/* 2 blocks of 2 tokens, 3 layers, 1 KV head, head_dim 4, fp16: 2 * 3 * 2 * 1 * 4 * 2 = 96 bytes a block. */
static uint8_t chunk_data[192];

static void fill_kv_transfer_chunk(struct llb_kv_transfer_chunk *m) {
  for (size_t i = 0; i < sizeof chunk_data; i++) chunk_data[i] = (uint8_t)(i * 37 + 11);
  *m = (struct llb_kv_transfer_chunk){
      .request_id = S("req-p-ф"), .first_block = 2, .num_blocks = 2, .block_size = 2, .num_layers = 3,
      .num_kv_heads = 1, .head_dim = 4, .kv_cache_dtype = 0, .block_bytes = 96, .num_tokens = 9,
      .data = chunk_data, .data_len = sizeof chunk_data, .status = LLB_KV_TRANSFER_OK, .generation = 0x99AABBCCDDEEFF01ull};
}

static bool equals_kv_transfer_chunk(const void *v) {
  const struct llb_kv_transfer_chunk *a = v;
  struct llb_kv_transfer_chunk b;
  fill_kv_transfer_chunk(&b);
  CHECK(a->version == LLB_SCHEMA_VERSION && str_eq(a->request_id, b.request_id));
  CHECK(a->first_block == 2 && a->num_blocks == 2 && a->block_size == 2 && a->num_layers == 3);
  CHECK(a->num_kv_heads == 1 && a->head_dim == 4 && a->kv_cache_dtype == 0 && a->block_bytes == 96);
  CHECK(a->num_tokens == 9 && a->status == LLB_KV_TRANSFER_OK && a->error.code == 0);
  CHECK(a->generation == 0x99AABBCCDDEEFF01ull);
  CHECK(bytes_eq(a->data, (int64_t)a->data_len, chunk_data, (int64_t)sizeof chunk_data));
  CHECK(a->checksum == llb_kv_transfer_chunk_checksum(&b));
  return true;
}

/* ---- the case table -------------------------------------------------------------------- */

#define CODEC_CASE(name, KIND)                                                             \
  static llb_status sample_##name(struct llb_buf *out) {                                   \
    struct llb_##name m;                                                                   \
    fill_##name(&m);                                                                       \
    return llb_##name##_encode_buf(&m, out);                                               \
  }                                                                                        \
  static llb_status sample_into_##name(uint8_t *buf, size_t cap, size_t *len_out) {        \
    struct llb_##name m;                                                                   \
    fill_##name(&m);                                                                       \
    return llb_##name##_encode(&m, buf, cap, len_out);                                     \
  }                                                                                        \
  static llb_status decode_##name(const uint8_t *buf, size_t len, struct llb_arena *a,     \
                                  void *view) {                                            \
    return llb_##name##_decode(buf, len, a, view);                                         \
  }                                                                                        \
  static llb_status encode_view_##name(const void *view, struct llb_buf *out) {            \
    return llb_##name##_encode_buf(view, out);                                             \
  }                                                                                        \
  _Static_assert(sizeof(struct llb_##name) <= CODEC_MAX_VIEW_BYTES, "view too big");
#define CODEC_ENTRY(name, KIND)                                                            \
  {#name, KIND, sizeof(struct llb_##name), sample_##name, sample_into_##name,             \
   decode_##name, encode_view_##name, equals_##name}

#define CODEC_ALL(X)                                                      \
  X(generate_request, LLB_MESSAGE_KIND_GENERATE_REQUEST)                  \
  X(abort_request, LLB_MESSAGE_KIND_ABORT_REQUEST)                        \
  X(engine_core_request, LLB_MESSAGE_KIND_ENGINE_CORE_REQUEST)            \
  X(abort_requests, LLB_MESSAGE_KIND_ABORT_REQUESTS)                      \
  X(scheduler_output, LLB_MESSAGE_KIND_SCHEDULER_OUTPUT)                  \
  X(kv_step, LLB_MESSAGE_KIND_KV_STEP)                                    \
  X(kv_step_result, LLB_MESSAGE_KIND_KV_STEP_RESULT)                      \
  X(encoder_step, LLB_MESSAGE_KIND_ENCODER_STEP)                          \
  X(encoder_step_result, LLB_MESSAGE_KIND_ENCODER_STEP_RESULT)            \
  X(model_runner_output, LLB_MESSAGE_KIND_MODEL_RUNNER_OUTPUT)            \
  X(engine_core_outputs, LLB_MESSAGE_KIND_ENGINE_CORE_OUTPUTS)            \
  X(request_output, LLB_MESSAGE_KIND_REQUEST_OUTPUT)                      \
  X(heartbeat, LLB_MESSAGE_KIND_HEARTBEAT)                                \
  X(scheduler_stats, LLB_MESSAGE_KIND_SCHEDULER_STATS)                    \
  X(error_reply, LLB_MESSAGE_KIND_ERROR_REPLY)                            \
  X(lora_update, LLB_MESSAGE_KIND_LORA_UPDATE)                            \
  X(lora_update_reply, LLB_MESSAGE_KIND_LORA_UPDATE_REPLY)              \
  X(kv_fetch_request, LLB_MESSAGE_KIND_KV_FETCH_REQUEST)                  \
  X(kv_transfer_chunk, LLB_MESSAGE_KIND_KV_TRANSFER_CHUNK)

CODEC_ALL(CODEC_CASE)

#define CODEC_COMMA_ENTRY(name, KIND) CODEC_ENTRY(name, KIND),
static const struct codec_case cases[] = {CODEC_ALL(CODEC_COMMA_ENTRY)};

int codec_num_cases(void) { return N(cases); }

const struct codec_case *codec_case_at(int i) {
  return i >= 0 && i < N(cases) ? &cases[i] : NULL;
}

const struct codec_case *codec_case_of(enum llb_message_kind kind) {
  for (int i = 0; i < N(cases); i++)
    if (cases[i].kind == kind)
      return &cases[i];
  return NULL;
}
