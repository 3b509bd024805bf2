/* Input processor; see input_processor.h. */
#include "actors/input_processor/input_processor.h"

#include "schemas/embeds.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "bus/subject.h"
#include "model/tokenizer/tokenizer.h"

#define DEFAULT_MAX_N 16
#define DEFAULT_MAX_PROMPT_BYTES (1 << 20)

struct input_processor {
  const struct tokenizer *tok;
  struct input_processor_config cfg;
  int32_t vocab_size;
};

static const char *const known_roles[] = {"system", "user", "assistant", "tool"};

static uint64_t os_random_u64(void *ctx) {
  (void)ctx;
  return llb_random_u64_nonzero();
}

llb_status input_processor_create(const struct tokenizer *tok, const struct input_processor_config *cfg,
                         struct input_processor **out) {
  if (!tok || !cfg || cfg->max_model_len < 2) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "input processor needs a tokenizer and max_model_len >= 2");
  }
  if (cfg->max_logprobs < 0 || cfg->max_logprobs > LLB_MAX_LOGPROBS || cfg->max_n < 0) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "max_logprobs %d outside [0, %d] or max_n %d < 0",
                    cfg->max_logprobs, LLB_MAX_LOGPROBS, cfg->max_n);
  }
  struct input_processor *p = calloc(1, sizeof *p);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "input processor");
  p->tok = tok;
  p->cfg = *cfg;
  if (!p->cfg.max_n) p->cfg.max_n = DEFAULT_MAX_N;
  if (!p->cfg.max_logprobs) p->cfg.max_logprobs = LLB_MAX_LOGPROBS;
  if (!p->cfg.max_prompt_bytes) p->cfg.max_prompt_bytes = DEFAULT_MAX_PROMPT_BYTES;
  if (!p->cfg.random_u64) p->cfg.random_u64 = os_random_u64;
  p->vocab_size = tokenizer_vocab_size(tok);
  *out = p;
  return LLB_STATUS_OK;
}

void input_processor_destroy(struct input_processor *p) { free(p); }

static void add_error(struct input_processor_errors *errs, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_error(struct input_processor_errors *errs, const char *field, const char *fmt, ...) {
  if (errs->num_errors >= INPUT_PROCESSOR_MAX_ERRORS) {
    errs->num_dropped++;
    return;
  }
  struct input_processor_field_error *e = &errs->errors[errs->num_errors++];
  snprintf(e->field, sizeof e->field, "%s", field);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
}

/* Strict UTF-8 (no overlongs, surrogates, or values above U+10FFFF). */
static bool utf8_valid(const char *s, size_t n) {
  const uint8_t *u = (const uint8_t *)s;
  size_t i = 0;
  while (i < n) {
    uint8_t b = u[i];
    size_t need = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (need == 0 || need > n - i) return false;
    if (need > 1) {
      uint8_t lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
      uint8_t hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
      if (u[i + 1] < lo || u[i + 1] > hi) return false;
      for (size_t k = 2; k < need; k++) if ((u[i + k] & 0xC0) != 0x80) return false;
    }
    i += need;
  }
  return true;
}

static bool in_range(float v, float lo, float hi) { return isfinite(v) && v >= lo && v <= hi; }

/* OpenAI logit_bias: token ids in the vocabulary, each once, biases finite in [-100, 100]. */
static void validate_logit_bias(const struct input_processor *p, const struct llb_sampling_params *sp,
                                struct input_processor_errors *errs) {
  if (sp->num_logit_bias < 0 || sp->num_logit_bias > LLB_MAX_LOGIT_BIAS) {
    add_error(errs, "logit_bias", "at most %d entries, got %d", LLB_MAX_LOGIT_BIAS, sp->num_logit_bias);
    return;
  }
  for (int32_t i = 0; i < sp->num_logit_bias; i++) {
    const struct llb_logit_bias *b = &sp->logit_bias[i];
    char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];
    snprintf(field, sizeof field, "logit_bias[%d]", b->token_id);
    if (b->token_id < 0 || b->token_id >= p->vocab_size) {
      add_error(errs, field, "token id %d is outside the vocabulary [0, %d)", b->token_id, p->vocab_size);
    } else if (!in_range(b->bias, -LLB_MAX_LOGIT_BIAS_VALUE, LLB_MAX_LOGIT_BIAS_VALUE)) {
      add_error(errs, field, "bias must be in [-100, 100], got %g", (double)b->bias);
    }
    for (int32_t j = 0; j < i; j++) {
      if (sp->logit_bias[j].token_id == b->token_id) add_error(errs, field, "token id %d is given twice", b->token_id);
    }
  }
}

static void validate_sampling(const struct input_processor *p, const struct llb_sampling_params *sp,
                              struct input_processor_errors *errs) {
  if (sp->n < 1) add_error(errs, "n", "must be at least 1, got %d", sp->n);
  else if (sp->n > p->cfg.max_n) add_error(errs, "n", "must be at most %d, got %d", p->cfg.max_n, sp->n);
  if (!isfinite(sp->temperature) || sp->temperature < 0) {
    add_error(errs, "temperature", "must be a finite number >= 0, got %g", (double)sp->temperature);
  }
  if (!(isfinite(sp->top_p) && sp->top_p > 0 && sp->top_p <= 1)) {
    add_error(errs, "top_p", "must be in (0, 1], got %g", (double)sp->top_p);
  }
  if (sp->top_k < -1) add_error(errs, "top_k", "must be -1 or 0 (off) or at least 1, got %d", sp->top_k);
  if (!in_range(sp->min_p, 0, 1)) add_error(errs, "min_p", "must be in [0, 1], got %g", (double)sp->min_p);
  if (!in_range(sp->presence_penalty, -2, 2)) {
    add_error(errs, "presence_penalty", "must be in [-2, 2], got %g", (double)sp->presence_penalty);
  }
  if (!in_range(sp->frequency_penalty, -2, 2)) {
    add_error(errs, "frequency_penalty", "must be in [-2, 2], got %g", (double)sp->frequency_penalty);
  }
  if (!(isfinite(sp->repetition_penalty) && sp->repetition_penalty > 0 && sp->repetition_penalty <= 2)) {
    add_error(errs, "repetition_penalty", "must be in (0, 2], got %g", (double)sp->repetition_penalty);
  }
  if (sp->max_tokens != -1 && sp->max_tokens < 1) {
    add_error(errs, "max_tokens", "must be at least 1 (or -1 for up to the context length), got %d",
              sp->max_tokens);
  }
  if (sp->min_tokens < 0) {
    add_error(errs, "min_tokens", "must be at least 0, got %d", sp->min_tokens);
  } else if (sp->max_tokens >= 1 && sp->min_tokens > sp->max_tokens) {
    add_error(errs, "min_tokens", "must not exceed max_tokens (%d), got %d", sp->max_tokens, sp->min_tokens);
  }
  if (sp->num_stop < 0 || sp->num_stop > LLB_MAX_STOP_STRINGS) {
    add_error(errs, "stop", "at most %d stop strings, got %d", LLB_MAX_STOP_STRINGS, sp->num_stop);
  } else {
    for (int32_t i = 0; i < sp->num_stop; i++) {
      char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];
      snprintf(field, sizeof field, "stop[%d]", i);
      size_t len = strnlen(sp->stop[i], sizeof sp->stop[i]);
      if (len == sizeof sp->stop[i]) {
        add_error(errs, field, "is longer than %d bytes", LLB_MAX_STOP_STRING_BYTES);
      } else if (len == 0) {
        add_error(errs, field, "is empty");
      } else if (!utf8_valid(sp->stop[i], len)) {
        add_error(errs, field, "is not valid UTF-8");
      }
    }
  }
  if (sp->num_stop_token_ids < 0 || sp->num_stop_token_ids > LLB_MAX_STOP_TOKEN_IDS) {
    add_error(errs, "stop_token_ids", "at most %d stop token ids, got %d", LLB_MAX_STOP_TOKEN_IDS,
              sp->num_stop_token_ids);
  } else {
    for (int32_t i = 0; i < sp->num_stop_token_ids; i++) {
      int32_t id = sp->stop_token_ids[i];
      if (id < 0 || id >= p->vocab_size) {
        char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];
        snprintf(field, sizeof field, "stop_token_ids[%d]", i);
        add_error(errs, field, "token id %d is outside the vocabulary [0, %d)", id, p->vocab_size);
      }
    }
  }
  if (sp->logprobs < -1 || sp->logprobs > p->cfg.max_logprobs) {
    add_error(errs, "logprobs", "must be between 0 and %d (or -1 for none), got %d", p->cfg.max_logprobs,
              sp->logprobs);
  }
  if (sp->prompt_logprobs < -1 || sp->prompt_logprobs > p->cfg.max_logprobs) {
    add_error(errs, "prompt_logprobs", "must be between 0 and %d (or -1 for none), got %d", p->cfg.max_logprobs,
              sp->prompt_logprobs);
  }
  validate_logit_bias(p, sp, errs);
  if (sp->truncate_prompt_tokens < -1) {
    add_error(errs, "truncate_prompt_tokens", "must be -1 (the context length), 0 (off) or at least 1, got %d",
              sp->truncate_prompt_tokens);
  }
  if (sp->output_kind != LLB_OUTPUT_KIND_CUMULATIVE && sp->output_kind != LLB_OUTPUT_KIND_DELTA &&
      sp->output_kind != LLB_OUTPUT_KIND_FINAL_ONLY) {
    add_error(errs, "output_kind", "must be CUMULATIVE (0), DELTA (1) or FINAL_ONLY (2), got %d",
              (int)sp->output_kind);
  }
}

static bool printable_id(const char *s) {
  for (; *s; s++) if ((uint8_t)*s <= 0x20 || (uint8_t)*s >= 0x7F) return false;
  return true;
}

static void validate_text(const char *field, const char *text, int64_t *total, int64_t max_bytes,
                          struct input_processor_errors *errs) {
  size_t len = strlen(text);
  *total += (int64_t)len;
  if (!utf8_valid(text, len)) add_error(errs, field, "is not valid UTF-8");
  else if (*total > max_bytes) add_error(errs, field, "is longer than %" PRId64 " bytes", max_bytes);
}

static void validate_prompt(const struct input_processor *p, const struct input_processor_generate_request *req,
                            struct input_processor_errors *errs) {
  int sources = (req->prompt != NULL) + (req->messages != NULL) + (req->prompt_token_ids != NULL);
  if (sources == 0) {
    add_error(errs, "prompt", "one of prompt, messages or prompt_token_ids is required");
    return;
  }
  if (sources > 1) {
    add_error(errs, "prompt", "give only one of prompt, messages or prompt_token_ids (got %d)", sources);
    return;
  }
  int64_t total = 0;
  if (req->prompt) {
    if (!req->prompt[0]) add_error(errs, "prompt", "is empty");
    else validate_text("prompt", req->prompt, &total, p->cfg.max_prompt_bytes, errs);
  } else if (req->messages) {
    if (req->num_messages == 0) add_error(errs, "messages", "is empty");
    if (req->raw) add_error(errs, "raw", "applies to prompt text only; messages always use the chat template");
    for (size_t i = 0; i < req->num_messages; i++) {
      const struct chat_message *m = &req->messages[i];
      char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];
      snprintf(field, sizeof field, "messages[%zu].role", i);
      bool known = false;
      for (size_t r = 0; m->role && r < sizeof known_roles / sizeof *known_roles; r++) {
        known |= strcmp(m->role, known_roles[r]) == 0;
      }
      if (!m->role) add_error(errs, field, "is required");
      else if (!known) {
        add_error(errs, field, "unknown role \"%.32s\"; expected system, user, assistant or tool", m->role);
      }
      snprintf(field, sizeof field, "messages[%zu].content", i);
      if (!m->content) add_error(errs, field, "is required");
      else validate_text(field, m->content, &total, p->cfg.max_prompt_bytes, errs);
    }
  } else {
    if (req->num_prompt_token_ids <= 0) add_error(errs, "prompt_token_ids", "is empty");
    for (int64_t i = 0; i < req->num_prompt_token_ids; i++) {
      int32_t id = req->prompt_token_ids[i];
      if (id < 0 || id >= p->vocab_size) {
        char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];
        snprintf(field, sizeof field, "prompt_token_ids[%" PRId64 "]", i);
        add_error(errs, field, "token id %d is outside the vocabulary [0, %d)", id, p->vocab_size);
        break; /* one is enough to say what is wrong */
      }
    }
  }
}

llb_status input_processor_validate(const struct input_processor *p, const struct input_processor_generate_request *req,
                           struct input_processor_errors *errs) {
  memset(errs, 0, sizeof *errs);
  if (!req->request_id || !req->request_id[0]) {
    add_error(errs, "request_id", "is required");
  } else if (strlen(req->request_id) >= INPUT_PROCESSOR_MAX_EXTERNAL_ID_BYTES) {
    add_error(errs, "request_id", "is longer than %d bytes", INPUT_PROCESSOR_MAX_EXTERNAL_ID_BYTES - 1);
  } else if (!printable_id(req->request_id)) {
    add_error(errs, "request_id", "must be printable ASCII without spaces");
  }
  validate_prompt(p, req, errs);
  if (req->chat_template) {
    enum chat_template_kind k;
    if (chat_template_from_name(req->chat_template, &k) != LLB_STATUS_OK) {
      add_error(errs, "chat_template", "unknown chat template \"%.64s\"", req->chat_template);
    }
  } else if (req->messages && !p->cfg.has_chat_template && !p->cfg.jinja_template) {
    add_error(errs, "messages", "the model has no chat template; name one in chat_template");
  }
  if (!p->cfg.jinja_template || req->chat_template) {
    /* the named templates know no tools, kwargs or continuation: refuse, never ignore */
    const char *f = req->tools_json ? "tools" : req->chat_template_kwargs_json ? "chat_template_kwargs"
                  : req->continue_final_message ? "continue_final_message" : NULL;
    if (f) add_error(errs, f, "needs the model's Jinja chat template (not a named chat_template)");
  }
  validate_sampling(p, req->sampling_params, errs);
  if (req->cache_salt && !req->cache_salt[0]) add_error(errs, "cache_salt", "must not be empty");
  if (req->cache_salt && strlen(req->cache_salt) >= INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES) {
    add_error(errs, "cache_salt", "is longer than %d bytes", INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES - 1);
  }
  if (req->reply_to && strlen(req->reply_to) >= INPUT_PROCESSOR_MAX_REPLY_TO_BYTES) {
    add_error(errs, "reply_to", "is longer than %d bytes", INPUT_PROCESSOR_MAX_REPLY_TO_BYTES - 1);
  }
  return errs->num_errors ? LLB_STATUS_INVALID_ARGUMENT : LLB_STATUS_OK;
}

/* The vocabulary's BOS in front when it wants one and the template did not write it; image
 * ranges move with the prompt. */
static llb_status add_bos(const struct input_processor *p, struct input_processor_processed *out) {
  int32_t bos = tokenizer_bos_id(p->tok);
  if (tokenizer_add_bos(p->tok) && bos >= 0 &&
      (out->num_prompt_tokens == 0 || out->prompt_token_ids[0] != bos)) {
    int32_t *ids = realloc(out->prompt_token_ids, (size_t)(out->num_prompt_tokens + 1) * sizeof(int32_t));
    if (!ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt with BOS");
    memmove(ids + 1, ids, (size_t)out->num_prompt_tokens * sizeof(int32_t));
    ids[0] = bos;
    out->prompt_token_ids = ids;
    out->num_prompt_tokens++;
    for (int32_t i = 0; i < out->num_mm_features; i++) out->mm_features[i].offset++;
  }
  return LLB_STATUS_OK;
}

static int32_t count_images(const struct input_processor_generate_request *req) {
  int32_t n = 0;
  for (int32_t i = 0; i < req->num_mm_items; i++)
    n += req->mm_items[i].modality && strcmp(req->mm_items[i].modality, "image") == 0;
  return n;
}

/* mm_hash of an image: the item's bytes and dtype under (cache salt, mmproj identity), so
 * another projector never shares encoder outputs or KV blocks. */
static void hash_image(const struct input_processor *p, const struct input_processor_generate_request *req,
                       const struct input_processor_mm_item *it, char *out) {
  char salt[INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES + 256];
  const char *id = p->cfg.image.mmproj_id ? p->cfg.image.mmproj_id : "";
  snprintf(salt, sizeof salt, "%s\x1f%zu:%.200s", req->cache_salt ? req->cache_salt : "", strlen(id), id);
  struct input_processor_mm_item h = *it;
  h.num_rows = h.num_cols = 0;
  h.placeholder_offset = 0;
  input_processor_mm_hash(&p->cfg.hash_key, salt, &h, out);
}

/* Chat messages with image items (mm_images.h): the prompt and one feature per image. */
static llb_status tokenize_images(const struct input_processor *p, const struct input_processor_generate_request *req,
                                  int32_t num_images, struct input_processor_processed *out, struct input_processor_errors *errs) {
  if (num_images != req->num_mm_items || !req->messages) {
    add_error(errs, "mm_items", "images go in chat messages (image_url parts) and cannot be mixed with embeds");
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  if (num_images > INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST) {
    add_error(errs, "mm_items", "at most %d images per request, got %d", INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST, num_images);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  int64_t total = 0, max_bytes = p->cfg.max_mm_item_bytes > 0 ? p->cfg.max_mm_item_bytes : 768 * 1024;
  for (int32_t i = 0; i < num_images; i++) total += req->mm_items[i].data_bytes;
  if (total > max_bytes) {
    add_error(errs, "mm_items", "%" PRId64 " bytes of images in one request exceed the limit of %" PRId64
              " bytes (bus_max_payload of the NATS server, minus room for the rest of the message)", total, max_bytes);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  struct input_processor_image imgs[INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST];
  int32_t index[INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST];
  for (int32_t i = 0; i < num_images; i++) {
    imgs[i] = (struct input_processor_image){req->mm_items[i].data, req->mm_items[i].data_bytes, req->mm_items[i].dtype};
    index[i] = i;
  }
  struct input_processor_image_request ir = {
      .tmpl = req->chat_template ? NULL : p->cfg.jinja_template, .images = imgs, .num_images = num_images,
      .item_index = index,
      .render = {.messages = req->messages, .extras = req->message_extras, .num_messages = req->num_messages,
                 .add_generation_prompt = !req->no_generation_prompt,
                 .continue_final_message = req->continue_final_message, .tools_json = req->tools_json,
                 .chat_template_kwargs_json = req->chat_template_kwargs_json, .bos_token = p->cfg.bos_token,
                 .eos_token = p->cfg.eos_token}};
  struct input_processor_image_range ranges[INPUT_PROCESSOR_MAX_IMAGES_PER_REQUEST];
  char field[INPUT_PROCESSOR_MAX_FIELD_BYTES], msg[INPUT_PROCESSOR_MAX_MESSAGE_BYTES];
  llb_status st = input_processor_images_tokenize(p->tok, &p->cfg.image, &ir, &out->prompt_token_ids, &out->num_prompt_tokens,
                                         ranges, field, sizeof field, msg, sizeof msg);
  if (st != LLB_STATUS_OK) {
    if (!field[0]) return st;
    add_error(errs, field, "%s", msg);
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  out->mm_features = calloc((size_t)num_images, sizeof *out->mm_features);
  if (!out->mm_features) {
    input_processor_image_ranges_free(ranges, num_images);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%d image features", num_images);
  }
  for (int32_t i = 0; i < num_images; i++) {
    struct input_processor_mm_feature *f = &out->mm_features[out->num_mm_features++];
    *f = (struct input_processor_mm_feature){.item = i, .offset = ranges[i].offset, .length = ranges[i].length,
                                    .is_embed = ranges[i].is_embed, .num_embeds = ranges[i].num_embeds};
    hash_image(p, req, &req->mm_items[i], f->mm_hash);
  }
  return LLB_STATUS_OK;
}

/* The most prompt tokens `req` could be admitted with: under max_model_len with room for
 * max_tokens (at least one). 0 = no bound: with truncate_prompt_tokens any length may fit. */
static int64_t admissible_prompt_tokens(const struct input_processor *p, const struct input_processor_generate_request *req) {
  const struct llb_sampling_params *sp = req->sampling_params;
  if (sp->truncate_prompt_tokens != 0) return 0;
  const int64_t most = (int64_t)p->cfg.max_model_len - (sp->max_tokens > 1 ? sp->max_tokens : 1);
  return most > 1 ? most : 1;
}

/* The tokenizer stopped: text[len] makes at least `at_least` tokens, more than can be admitted.
 * The error names the limit and says the count is a lower bound (vLLM and llama-server report the
 * exact count after tokenizing everything; this stops at the limit). */
static llb_status refuse_long_prompt(const struct input_processor *p, const struct input_processor_generate_request *req,
                                     int64_t at_least, struct input_processor_errors *errs) {
  const char *src = req->prompt && !req->messages ? "prompt" : "messages";
  const int32_t max_len = p->cfg.max_model_len, mt = req->sampling_params->max_tokens;
  llb_err_clear();
  if (at_least >= max_len || mt < 1)
    add_error(errs, src, "has at least %" PRId64 " tokens (counting stopped there) but the context length is %d "
              "tokens, leaving no room for output", at_least, max_len);
  else
    add_error(errs, "max_tokens", "the prompt has at least %" PRId64 " tokens (counting stopped there) and max_tokens "
              "is %d: at least %" PRId64 " in total exceeds the context length of %d tokens", at_least, mt,
              at_least + mt, max_len);
  return LLB_STATUS_INVALID_ARGUMENT;
}

/* tokenizer_encode_at_most into out, a stop at `bound` refused as refuse_long_prompt says. */
static llb_status encode_bounded(const struct input_processor *p, const struct input_processor_generate_request *req,
                                 const char *text, bool add_special, int64_t bound, struct input_processor_processed *out,
                                 struct input_processor_errors *errs) {
  llb_status st = tokenizer_encode_at_most(p->tok, text, strlen(text), add_special, true, bound, &out->prompt_token_ids,
                                           &out->num_prompt_tokens);
  if (st != LLB_STATUS_TOO_LARGE || bound <= 0) return st;
  const int64_t at_least = out->num_prompt_tokens;
  out->num_prompt_tokens = 0;
  return refuse_long_prompt(p, req, at_least, errs);
}

/* Tokenizes the prompt into out->prompt_token_ids (and, for images, out->mm_features), giving up
 * once it provably makes more than `bound` tokens (0 = no bound; encode_bounded). */
static llb_status tokenize_prompt(const struct input_processor *p, const struct input_processor_generate_request *req,
                                  int64_t bound, struct input_processor_processed *out, struct input_processor_errors *errs) {
  const int32_t num_images = count_images(req);
  if (req->prompt_token_ids) {
    int64_t n = req->num_prompt_token_ids;
    out->prompt_token_ids = malloc((size_t)n * sizeof(int32_t));
    if (!out->prompt_token_ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "prompt of %" PRId64 " tokens", n);
    memcpy(out->prompt_token_ids, req->prompt_token_ids, (size_t)n * sizeof(int32_t));
    out->num_prompt_tokens = n;
    return LLB_STATUS_OK;
  }
  bool templated = req->messages ||
                   (!req->raw && (req->chat_template || p->cfg.has_chat_template || p->cfg.jinja_template));
  if (!templated) return encode_bounded(p, req, req->prompt, true, bound, out, errs);
  enum chat_template_kind kind = p->cfg.chat_template;
  if (req->chat_template) {
    llb_status st = chat_template_from_name(req->chat_template, &kind);
    if (st != LLB_STATUS_OK) return st;
  }
  struct chat_message single = {.role = "user", .content = req->prompt};
  const struct chat_message *msgs = req->messages ? req->messages : &single;
  size_t num = req->messages ? req->num_messages : 1;
  char *text = NULL;
  llb_status st;
  if (num_images > 0) {
    st = tokenize_images(p, req, num_images, out, errs);
    if (st != LLB_STATUS_OK) return st;
    return add_bos(p, out);
  }
  if (p->cfg.jinja_template && !req->chat_template) {
    struct chat_render_input in = {
        .messages = msgs, .extras = req->messages ? req->message_extras : NULL, .num_messages = num,
        .add_generation_prompt = !req->no_generation_prompt, .continue_final_message = req->continue_final_message,
        .tools_json = req->tools_json, .chat_template_kwargs_json = req->chat_template_kwargs_json,
        .bos_token = p->cfg.bos_token, .eos_token = p->cfg.eos_token};
    st = chat_render_jinja(p->cfg.jinja_template, &in, &text);
  } else {
    st = chat_template_apply(kind, msgs, num, !req->no_generation_prompt, &text);
  }
  if (st != LLB_STATUS_OK) return st;
  /* The template writes its own special tokens (vLLM: add_special_tokens=False for chat). */
  st = encode_bounded(p, req, text, false, bound, out, errs);
  free(text);
  if (st != LLB_STATUS_OK) return st;
  return add_bos(p, out);
}

void input_processor_set_max_mm_item_bytes(struct input_processor *p, int64_t n) { p->cfg.max_mm_item_bytes = n; }

/* truncate_prompt_tokens (vLLM): keep the last N prompt tokens (-1: N = max_model_len). Refused
 * with multimodal items, whose placeholder offsets count from the untruncated prompt. */
static llb_status truncate_prompt(const struct input_processor *p, const struct input_processor_generate_request *req,
                                  struct input_processor_processed *out, struct input_processor_errors *errs) {
  int64_t keep = req->sampling_params->truncate_prompt_tokens;
  if (keep == -1) keep = p->cfg.max_model_len;
  if (keep <= 0 || out->num_prompt_tokens <= keep) return LLB_STATUS_OK;
  if (req->num_mm_items > 0) {
    add_error(errs, "truncate_prompt_tokens", "cannot be combined with multimodal items (prompt_embeds)");
    return LLB_STATUS_INVALID_ARGUMENT;
  }
  memmove(out->prompt_token_ids, out->prompt_token_ids + (out->num_prompt_tokens - keep),
          (size_t)keep * sizeof(int32_t));
  out->num_prompt_tokens = keep;
  return LLB_STATUS_OK;
}

/* Checks the multimodal items against the tokenized prompt and hashes them (mm_items.h). */
static llb_status process_mm(const struct input_processor *p, const struct input_processor_generate_request *req,
                             int64_t num_prompt, struct input_processor_processed *out, struct input_processor_errors *errs) {
  int32_t n = req->num_mm_items;
  if (n > INPUT_PROCESSOR_MAX_MM_ITEMS) {
    add_error(errs, "mm_items", "at most %d items per request, got %d", INPUT_PROCESSOR_MAX_MM_ITEMS, n);
    return LLB_STATUS_OK;
  }
  if (p->cfg.hidden_size < 1) {
    add_error(errs, "mm_items", "this model server does not accept multimodal items");
    return LLB_STATUS_OK;
  }
  int64_t max_bytes = p->cfg.max_mm_item_bytes > 0 ? p->cfg.max_mm_item_bytes : 768 * 1024;
  out->mm_features = calloc((size_t)n, sizeof *out->mm_features);
  if (!out->mm_features) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%d mm features", n);
  for (int32_t i = 0; i < n; i++) {
    const struct input_processor_mm_item *it = &req->mm_items[i];
    char f[INPUT_PROCESSOR_MAX_FIELD_BYTES];
    int64_t esize = it->dtype && strcmp(it->dtype, "f32") == 0 ? 4 : it->dtype && strcmp(it->dtype, "f16") == 0 ? 2 : 0;
    int errs_before = errs->num_errors;
    snprintf(f, sizeof f, "mm_items[%d].modality", i);
    if (!it->modality || strcmp(it->modality, "embeds") != 0)
      add_error(errs, f, "'%s' is not supported (supported: embeds)", it->modality ? it->modality : "");
    snprintf(f, sizeof f, "mm_items[%d].dtype", i);
    if (!esize) add_error(errs, f, "must be f16 or f32, got '%s'", it->dtype ? it->dtype : "");
    snprintf(f, sizeof f, "mm_items[%d].num_cols", i);
    if (it->num_cols != p->cfg.hidden_size)
      add_error(errs, f, "must equal the model's hidden size %d, got %d", p->cfg.hidden_size, it->num_cols);
    snprintf(f, sizeof f, "mm_items[%d].num_rows", i);
    if (it->num_rows < 1) add_error(errs, f, "must be at least 1, got %d", it->num_rows);
    snprintf(f, sizeof f, "mm_items[%d].data", i);
    if (it->data_bytes > max_bytes)
      add_error(errs, f, "%" PRId64 " bytes exceed the per-item limit of %" PRId64 " bytes (bus_max_payload "
                "of the NATS server, minus room for the rest of the message); send fewer rows per item",
                it->data_bytes, max_bytes);
    else if (esize && it->num_rows > 0 && it->data_bytes != (int64_t)it->num_rows * it->num_cols * esize)
      add_error(errs, f, "has %" PRId64 " bytes; [%d, %d] of %s needs %" PRId64, it->data_bytes, it->num_rows,
                it->num_cols, it->dtype, (int64_t)it->num_rows * it->num_cols * esize);
    else if (esize && it->num_cols > 0) {
      /* NaN / Inf rows make every logit of the request NaN: refuse them here, as a client error */
      int64_t bad = llb_embeds_first_nonfinite(it->data, it->data_bytes, it->dtype);
      if (bad >= 0)
        add_error(errs, f, "holds a non-finite value (NaN or Inf) at row %" PRId64 ", column %" PRId64
                  "; embeddings must be finite", bad / it->num_cols, bad % it->num_cols);
    }
    snprintf(f, sizeof f, "mm_items[%d].placeholder_offset", i);
    if (it->placeholder_offset < 0 || (int64_t)it->placeholder_offset + it->num_rows > num_prompt)
      add_error(errs, f, "placeholders [%d, %" PRId64 ") must lie inside the %" PRId64 "-token prompt",
                it->placeholder_offset, (int64_t)it->placeholder_offset + it->num_rows, num_prompt);
    if (errs->num_errors != errs_before) continue;
    struct input_processor_mm_feature *mf = &out->mm_features[out->num_mm_features++];
    mf->item = i;
    mf->offset = it->placeholder_offset;
    mf->length = it->num_rows;
    mf->num_embeds = it->num_rows;
    input_processor_mm_hash(&p->cfg.hash_key, req->cache_salt, it, mf->mm_hash);
  }
  int64_t total = 0;
  for (int32_t i = 0; i < n; i++) total += req->mm_items[i].data_bytes;
  if (!errs->num_errors && total > max_bytes)
    add_error(errs, "mm_items", "%" PRId64 " bytes of item data in one request exceed the limit of %" PRId64
              " bytes (bus_max_payload of the NATS server, minus room for the rest of the message)",
              total, max_bytes);
  if (errs->num_errors) return LLB_STATUS_OK;
  /* sort by offset (insertion; n <= 64), then no two may overlap */
  for (int32_t i = 1; i < out->num_mm_features; i++)
    for (int32_t j = i; j > 0 && out->mm_features[j].offset < out->mm_features[j - 1].offset; j--) {
      struct input_processor_mm_feature t = out->mm_features[j];
      out->mm_features[j] = out->mm_features[j - 1];
      out->mm_features[j - 1] = t;
    }
  for (int32_t i = 1; i < out->num_mm_features; i++) {
    const struct input_processor_mm_feature *a = &out->mm_features[i - 1], *b = &out->mm_features[i];
    if (b->offset < a->offset + a->length) {
      char f[INPUT_PROCESSOR_MAX_FIELD_BYTES];
      snprintf(f, sizeof f, "mm_items[%d].placeholder_offset", b->item);
      add_error(errs, f, "placeholders [%d, %d) overlap those of mm_items[%d] [%d, %d)", b->offset,
                b->offset + b->length, a->item, a->offset, a->offset + a->length);
    }
  }
  return LLB_STATUS_OK;
}

llb_status input_processor_process(const struct input_processor *p, const struct input_processor_generate_request *req,
                          struct input_processor_processed *out, struct input_processor_errors *errs) {
  memset(out, 0, sizeof *out);
  llb_status st = input_processor_validate(p, req, errs);
  if (st != LLB_STATUS_OK) return st;
  st = tokenize_prompt(p, req, admissible_prompt_tokens(p, req), out, errs);
  if (st != LLB_STATUS_OK) return st;
  st = truncate_prompt(p, req, out, errs);
  if (st != LLB_STATUS_OK) return st;

  const char *src = req->prompt ? "prompt" : req->messages ? "messages" : "prompt_token_ids";
  int64_t num_prompt = out->num_prompt_tokens;
  int32_t max_len = p->cfg.max_model_len;
  struct llb_sampling_params *sp = &out->sampling_params; /* the children point here */
  *sp = *req->sampling_params;
  if (num_prompt == 0) {
    add_error(errs, src, "tokenizes to no tokens");
  } else if (num_prompt >= max_len) {
    add_error(errs, src, "has %" PRId64 " tokens but the context length is %d tokens, leaving no room "
              "for output", num_prompt, max_len);
  } else if (sp->max_tokens == -1) {
    sp->max_tokens = (int32_t)(max_len - num_prompt);
    if (sp->min_tokens > sp->max_tokens) {
      add_error(errs, "min_tokens", "must not exceed the %d tokens left in the context, got %d",
                sp->max_tokens, sp->min_tokens);
    }
  } else if (num_prompt + sp->max_tokens > max_len) {
    add_error(errs, "max_tokens", "the prompt has %" PRId64 " tokens and max_tokens is %d: %" PRId64
              " in total exceeds the context length of %d tokens", num_prompt, sp->max_tokens,
              num_prompt + sp->max_tokens, max_len);
  }
  /* prompt logprobs travel in one message (EngineCoreOutput, RequestOutput): bounded */
  const int64_t plp_entries = sp->prompt_logprobs >= 0 ? (num_prompt - 1) * (sp->prompt_logprobs + 1) : 0;
  if (plp_entries > INPUT_PROCESSOR_MAX_PROMPT_LOGPROB_ENTRIES) {
    add_error(errs, "prompt_logprobs", "%d for a prompt of %" PRId64 " tokens is %" PRId64 " entries, at most %d "
              "(prompt tokens - 1) * (prompt_logprobs + 1): use fewer or a shorter prompt", sp->prompt_logprobs,
              num_prompt, plp_entries, INPUT_PROCESSOR_MAX_PROMPT_LOGPROB_ENTRIES);
  }
  if (!errs->num_errors && req->num_mm_items > 0 && out->num_mm_features == 0) {
    st = process_mm(p, req, num_prompt, out, errs);
    if (st != LLB_STATUS_OK) return st;
  }
  /* vLLM's SamplingParams.update_from_generation_config: the model's other end-of-generation
   * tokens (tokenizer_is_eog: <|im_end|>, <|eot_id|>, ... beside EOS) join stop_token_ids
   * unless ignore_eos; EOS itself stays eos_token_id. */
  if (!sp->ignore_eos) {
    const int32_t *eog;
    const int32_t n_eog = tokenizer_eog_ids(p->tok, &eog), eos = tokenizer_eos_id(p->tok);
    for (int32_t i = 0; i < n_eog; i++) {
      bool have = eog[i] == eos;
      for (int32_t j = 0; !have && j < sp->num_stop_token_ids; j++) have = sp->stop_token_ids[j] == eog[i];
      if (have) continue;
      if (sp->num_stop_token_ids == LLB_MAX_STOP_TOKEN_IDS) {
        add_error(errs, "stop_token_ids", "at most %d stop token ids including the model's %d "
                  "end-of-generation tokens", LLB_MAX_STOP_TOKEN_IDS, n_eog);
        break;
      }
      sp->stop_token_ids[sp->num_stop_token_ids++] = eog[i];
    }
  }
  if (errs->num_errors) return LLB_STATUS_INVALID_ARGUMENT;

  if (!sp->has_seed) {
    sp->seed = p->cfg.random_u64(p->cfg.random_ctx);
    sp->has_seed = true;
  }
  int32_t n = sp->n;
  sp->n = 1;
  char parent[INPUT_PROCESSOR_MAX_ID_BYTES], tag[INPUT_PROCESSOR_TENANT_TAG_HEX + 1];
  int base_len = snprintf(parent, sizeof parent, "%s-%08" PRIx32, req->request_id,
                          (uint32_t)p->cfg.random_u64(p->cfg.random_ctx));
  input_processor_tenant_tag(&p->cfg.hash_key, req->tenant, parent, (size_t)base_len, tag);
  memcpy(parent + base_len, tag, sizeof tag);
  out->requests = calloc((size_t)n, sizeof *out->requests);
  if (!out->requests) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%d engine requests", n);
  out->num_requests = n;
  int64_t arrival = req->arrival_time_ns ? req->arrival_time_ns : llb_wall_ns();
  for (int32_t i = 0; i < n; i++) {
    struct input_processor_engine_request *e = &out->requests[i];
    if (n == 1) snprintf(e->request_id, sizeof e->request_id, "%s", parent);
    else snprintf(e->request_id, sizeof e->request_id, "%d_%.200s", i, parent);
    snprintf(e->parent_request_id, sizeof e->parent_request_id, "%s", parent);
    snprintf(e->external_request_id, sizeof e->external_request_id, "%s", req->request_id);
    e->prompt_token_ids = out->prompt_token_ids;
    e->num_prompt_tokens = num_prompt;
    e->sampling_params = sp;
    e->eos_token_id = tokenizer_eos_id(p->tok);
    e->arrival_time_ns = arrival;
    e->priority = req->priority;
    snprintf(e->cache_salt, sizeof e->cache_salt, "%s", req->cache_salt ? req->cache_salt : "");
    e->child_index = i;
    e->num_children = n;
    snprintf(e->reply_to, sizeof e->reply_to, "%s", req->reply_to ? req->reply_to : "");
  }
  return LLB_STATUS_OK;
}

llb_status input_processor_tokenize(const struct input_processor *p, const struct input_processor_generate_request *req,
                           int32_t **ids_out, int64_t *n_out, struct input_processor_errors *errs) {
  *ids_out = NULL;
  *n_out = 0;
  struct input_processor_processed out = {0};
  llb_status st = input_processor_validate(p, req, errs);
  if (st == LLB_STATUS_OK) st = tokenize_prompt(p, req, 0, &out, errs); /* /tokenize: no context check */
  if (st == LLB_STATUS_OK) st = truncate_prompt(p, req, &out, errs);
  if (st == LLB_STATUS_OK) {
    *ids_out = out.prompt_token_ids;
    *n_out = out.num_prompt_tokens;
    out.prompt_token_ids = NULL;
  }
  input_processor_processed_free(&out);
  return st;
}

llb_status input_processor_detokenize(const struct input_processor *p, const int32_t *ids, int64_t n, char **text_out,
                             size_t *len_out, struct input_processor_errors *errs) {
  memset(errs, 0, sizeof *errs);
  *text_out = NULL;
  *len_out = 0;
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= p->vocab_size) {
      char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];
      snprintf(field, sizeof field, "prompt_token_ids[%" PRId64 "]", i);
      add_error(errs, field, "token id %d is outside the vocabulary [0, %d)", ids[i], p->vocab_size);
      return LLB_STATUS_INVALID_ARGUMENT;
    }
  }
  return tokenizer_decode(p->tok, ids, n, true, text_out, len_out);
}

int32_t input_processor_max_model_len(const struct input_processor *p) { return p->cfg.max_model_len; }

void input_processor_processed_free(struct input_processor_processed *out) {
  if (!out) return;
  free(out->prompt_token_ids);
  free(out->requests);
  for (int32_t i = 0; out->mm_features && i < out->num_mm_features; i++) free(out->mm_features[i].is_embed);
  free(out->mm_features);
  memset(out, 0, sizeof *out);
}

/* An engine id as it may appear after '@': one subject token (bus/subject.h's one name rule,
 * which has no '@'). */
static bool engine_token_ok(const char *s, size_t n) {
  char tok[BUS_TOKEN_MAX + 1];
  if (!s || n == 0 || n > BUS_TOKEN_MAX) return false;
  memcpy(tok, s, n);
  tok[n] = '\0';
  return strlen(tok) == n && bus_token_valid(tok);
}

llb_status input_processor_processed_set_engine(struct input_processor_processed *out, const char *engine_id) {
  size_t eid_len = engine_id ? strlen(engine_id) : 0;
  if (!engine_token_ok(engine_id, eid_len))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" cannot name an engine in a request id",
                    engine_id ? engine_id : "");
  for (int32_t i = 0; i < out->num_requests; i++) {
    struct input_processor_engine_request *e = &out->requests[i];
    char parent[INPUT_PROCESSOR_MAX_ID_BYTES];
    int len = snprintf(parent, sizeof parent, "%s@%s", e->parent_request_id, engine_id);
    if (len < 0 || (size_t)len + 4 >= sizeof parent) /* room for the child prefix "15_" */
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "request id \"%s\" too long to name engine \"%s\"",
                      e->parent_request_id, engine_id);
    memcpy(e->parent_request_id, parent, (size_t)len + 1);
    if (out->num_requests == 1) {
      memcpy(e->request_id, parent, (size_t)len + 1);
    } else { /* "<i>_<parent>": fits, checked above (i < 100) */
      int pre = snprintf(e->request_id, 4, "%d_", e->child_index % 100);
      memcpy(e->request_id + pre, parent, (size_t)len + 1);
    }
  }
  return LLB_STATUS_OK;
}

void input_processor_tenant_tag(const struct llb_hash_key *key, const char *tenant, const char *base, size_t len,
                       char out[INPUT_PROCESSOR_TENANT_TAG_HEX + 1]) {
  llb_request_tag(key, tenant, base, len, out);
}

bool input_processor_id_owned_by(const struct llb_hash_key *key, const char *id, size_t len, const char *tenant) {
  return llb_request_id_owned_by(key, id, len, tenant);
}

bool input_processor_engine_of_id(const char *id, size_t len, char *out, size_t cap) {
  if (!id || cap == 0) return false;
  size_t at = len;
  while (at > 0 && id[at - 1] != '@') at--;
  if (at == 0 || len - at + 1 > cap || !engine_token_ok(id + at, len - at)) return false;
  memcpy(out, id + at, len - at);
  out[len - at] = '\0';
  return true;
}

void input_processor_errors_format(const struct input_processor_errors *errs, char *buf, size_t size) {
  if (!size) return;
  buf[0] = '\0';
  size_t used = 0;
  for (int32_t i = 0; i < errs->num_errors && used < size; i++) {
    int w = snprintf(buf + used, size - used, "%s%s: %s", i ? "; " : "", errs->errors[i].field,
                     errs->errors[i].message);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (errs->num_dropped && used < size) {
    snprintf(buf + used, size - used, "; and %d more", errs->num_dropped);
  }
}

size_t input_processor_cache_salt_compose(const char *tenant, const char *salt, size_t salt_len, char *out,
                                 size_t size) {
  size_t tenant_len = strlen(tenant);
  /* the salt is a C string downstream: its length is what precedes a NUL, if any */
  salt_len = salt ? strnlen(salt, salt_len) : 0;
  int n = salt && salt_len ? snprintf(out, size, "%zu:%s%zu:%.*s", tenant_len, tenant, salt_len, (int)salt_len, salt)
                           : snprintf(out, size, "%zu:%s", tenant_len, tenant);
  return n < 0 ? size : (size_t)n;
}
