/* libFuzzer target for the input processor's whole intake of one request (actors/input_processor:
 * input_processor_wire_generate_request, then input_processor_process: validation, the default model's chat
 * template with tools, kwargs, tool calls and continue_final_message, tokenization, truncation,
 * multimodal items, n > 1 fan-out), on a GenerateRequest that went through the wire codec as
 * the actor receives it. Input: its first byte odd, the rest as the raw FlatBuffers message
 * (any bytes a client can publish); even, a fuzz_reader stream that builds a request field by
 * field (encoded, then decoded). Tokenizer and template: SmolLM2's GGUF (the GPT-2 test vocab
 * and a ChatML-like template when the model file is absent). Oracles beyond no crash, leak or
 * hang (run.sh's 1 s limit): a refusal names a field or carries a message; an accepted request
 * fits the context (prompt + max_tokens <= max_model_len), its children's ids are owned by
 * the tenant and name the engine, and each child's EngineCoreRequest encodes and decodes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/actor_wire.h"
#include "model/template/chat_render.h"
#include "actors/input_processor/input_processor.h"
#include "model/template/chat_template.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "schemas/arena.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "tests/fuzz/fuzz_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct tokenizer *tok;
static struct jinja_template *tmpl;
static struct input_processor *proc;
static const struct llb_hash_key key = {{7, 7, 7}};
#define MAX_MODEL_LEN 512
#define HIDDEN 8

static const char k_chatml[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static uint64_t fixed_random(void *ctx) {
  (void)ctx;
  static uint64_t x = 1;
  return x = x * 6364136223846793005ull + 1442695040888963407ull;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *src = getenv("LLMBUS_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
  struct gguf_file *f = NULL;
  if (gguf_open(path, &f) != LLB_STATUS_OK && gguf_open(LLB_TESTDATA_DIR "/tokenizer/ggml-vocab-gpt-2.gguf", &f))
    abort();
  if (tokenizer_load(f, &tok) != LLB_STATUS_OK) abort();
  if (chat_render_load(f, NULL, &tmpl) != LLB_STATUS_OK &&
      jinja_template_create(k_chatml, strlen(k_chatml), &tmpl) != LLB_STATUS_OK)
    abort();
  gguf_close(f);
  struct input_processor_config cfg = {.max_model_len = MAX_MODEL_LEN, .max_n = 4, .has_chat_template = true,
                              .chat_template = CHAT_TEMPLATE_CHATML, .hidden_size = HIDDEN,
                              .random_u64 = fixed_random, .jinja_template = tmpl, .bos_token = "<s>",
                              .eos_token = "</s>", .hash_key = key, .max_mm_item_bytes = 4096};
  if (input_processor_create(tok, &cfg, &proc) != LLB_STATUS_OK) abort();
  return 0;
}

static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
static const char *const dtypes[] = {"f32", "f16", "jpeg", "png", "bf16"};

/* A GenerateRequest built field by field from the reader (strings live in r). */
static void build(struct fuzz_reader *r, struct llb_generate_request *gr, struct llb_sampling_params *sp,
                  struct llb_chat_message *msgs, int32_t *ids, struct llb_mm_item *mm, uint8_t *mm_data) {
  llb_generate_request_init(gr);
  llb_sampling_params_init(sp);
  const uint8_t flags = fuzz_byte(r), src = flags % 3;
  gr->request_id = llb_str_c(fuzz_str(r));
  if (src == 0) gr->prompt = llb_str_c(fuzz_str(r));
  if (src == 1) {
    gr->num_messages = fuzz_byte(r) % 5;
    for (int32_t i = 0; i < gr->num_messages; i++) {
      const uint8_t b = fuzz_byte(r);
      msgs[i] = (struct llb_chat_message){.role = llb_str_c(roles[b % 5]), .content = llb_str_c(fuzz_str(r)),
                                          .content_is_null = b & 0x80};
      if (b & 0x08) msgs[i].tool_calls = llb_str_c(fuzz_str(r));
      if (b & 0x10) msgs[i].tool_call_id = llb_str_c(fuzz_str(r));
    }
    gr->messages = msgs;
  }
  if (src == 2) {
    gr->num_prompt_token_ids = fuzz_byte(r) % 64;
    for (int32_t i = 0; i < gr->num_prompt_token_ids; i++) ids[i] = (int32_t)fuzz_u16(r) * 2 - 1000;
    gr->prompt_token_ids = ids;
  }
  gr->raw = flags & 0x04;
  gr->add_generation_prompt = !(flags & 0x08);
  gr->continue_final_message = flags & 0x10;
  if (flags & 0x20) gr->tools = llb_str_c(fuzz_str(r));
  if (flags & 0x40) gr->chat_template_kwargs = llb_str_c(fuzz_str(r));
  if (flags & 0x80) gr->cache_salt = llb_str_c(fuzz_str(r));
  const uint8_t s = fuzz_byte(r);
  sp->n = s % 6;
  sp->temperature = (float)fuzz_byte(r) / 64.0f;
  sp->max_tokens = (int32_t)fuzz_u16(r) % 700 - 2;
  sp->min_tokens = fuzz_byte(r) % 4;
  sp->logprobs = (int32_t)(fuzz_byte(r) % 24) - 2;
  sp->truncate_prompt_tokens = (int32_t)(fuzz_byte(r) % 40) - 2;
  sp->num_stop = fuzz_byte(r) % 3;
  for (int32_t i = 0; i < sp->num_stop; i++) {
    const char *t = fuzz_str(r);
    snprintf(sp->stop[i], sizeof sp->stop[i], "%s", t ? t : "");
  }
  sp->num_logit_bias = fuzz_byte(r) % 3;
  for (int32_t i = 0; i < sp->num_logit_bias; i++)
    sp->logit_bias[i] = (struct llb_logit_bias){.token_id = (int32_t)fuzz_u16(r), .bias = (float)fuzz_byte(r) - 128};
  gr->sampling_params = sp;
  const uint8_t so = fuzz_byte(r) % 6;
  gr->structured_outputs = (struct llb_structured_outputs){.kind = (enum llb_structured_outputs_kind)so};
  if (so == LLB_SO_JSON || so == LLB_SO_CHOICE || so == LLB_SO_REGEX || so == LLB_SO_GRAMMAR)
    gr->structured_outputs.spec = llb_str_c(fuzz_str(r));
  gr->num_mm_items = fuzz_byte(r) % 3;
  for (int32_t i = 0; i < gr->num_mm_items; i++) {
    const uint8_t b = fuzz_byte(r);
    const int32_t rows = 1 + fuzz_byte(r) % 4, bytes = fuzz_byte(r) % 2 ? rows * HIDDEN * 4 : fuzz_byte(r);
    for (int32_t k = 0; k < bytes; k++) mm_data[i * 512 + k] = fuzz_byte(r);
    mm[i] = (struct llb_mm_item){.modality = llb_str_c(b & 1 ? "image" : "embeds"),
                                 .data = mm_data + i * 512, .data_bytes = bytes, .dtype = llb_str_c(dtypes[b % 5]),
                                 .num_rows = rows, .num_cols = b & 2 ? HIDDEN : HIDDEN + 1,
                                 .placeholder_offset = fuzz_byte(r) % 16};
  }
  gr->mm_items = mm;
}

/* The accepted request's children, as the actor sends them. */
static void check_accepted(struct input_processor_processed *pr, const struct input_processor_generate_request *req,
                           const struct llb_pooling_params *pool) {
  if (input_processor_processed_set_engine(pr, "e0") != LLB_STATUS_OK) abort();
  struct llb_mm_feature mm[INPUT_PROCESSOR_MAX_MM_ITEMS];
  const int32_t num_mm = input_processor_wire_mm_features(pr, req, HIDDEN, mm);
  for (int32_t i = 0; i < pr->num_requests; i++) {
    const struct input_processor_engine_request *e = &pr->requests[i];
    char eid[BUS_TOKEN_MAX + 1];
    if (!input_processor_id_owned_by(&key, e->request_id, strlen(e->request_id), "t") ||
        !input_processor_engine_of_id(e->request_id, strlen(e->request_id), eid, sizeof eid) || strcmp(eid, "e0") != 0) {
      fprintf(stderr, "child id %s not the tenant's or not naming e0\n", e->request_id);
      abort();
    }
    if (e->num_prompt_tokens + e->sampling_params->max_tokens > MAX_MODEL_LEN) abort();
    struct llb_engine_core_request m = input_processor_wire_engine_request(e, req, e->sampling_params, mm, num_mm, pool);
    struct llb_buf buf = {0};
    if (llb_engine_core_request_encode_buf(&m, &buf) == LLB_STATUS_OK) {
      struct llb_arena a;
      llb_arena_init(&a, NULL, 0);
      struct llb_engine_core_request back;
      if (llb_engine_core_request_decode(buf.data, buf.len, &a, &back) != LLB_STATUS_OK) abort();
      llb_arena_destroy(&a);
    }
    llb_buf_free(&buf);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static char strings[1 << 17];
  static uint8_t mm_data[3 * 512];
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request gr;
  struct llb_buf buf = {0};
  const uint8_t *msg = data + 1;
  size_t len = size - 1;
  if (!(data[0] & 1)) { /* built, then through the codec */
    struct fuzz_reader r = {.p = data + 1, .n = size - 1, .strings = strings, .cap = sizeof strings};
    struct llb_sampling_params sp;
    struct llb_chat_message msgs[5];
    int32_t ids[64];
    struct llb_mm_item mm[3];
    build(&r, &gr, &sp, msgs, ids, mm, mm_data);
    if (llb_generate_request_encode_buf(&gr, &buf) != LLB_STATUS_OK) goto done;
    msg = buf.data;
    len = buf.len;
  }
  if (llb_generate_request_decode(msg, len, &arena, &gr) != LLB_STATUS_OK) goto done;
  struct input_processor_generate_request req;
  if (input_processor_wire_generate_request(&gr, "t", "_INBOX.fuzz", &arena, &req)) goto done;
  struct input_processor_errors errs;
  struct input_processor_processed pr;
  llb_status st = input_processor_process(proc, &req, &pr, &errs);
  if (st == LLB_STATUS_OK) check_accepted(&pr, &req, &gr.pooling_params);
  else if (errs.num_errors > 0 ? !errs.errors[0].field[0] : !llb_err_last()[0]) abort(); /* unexplained */
  input_processor_processed_free(&pr);
done:
  llb_buf_free(&buf);
  llb_arena_destroy(&arena);
  return 0;
}
