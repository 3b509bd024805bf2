/* Input processor: a client's GenerateRequest → validated EngineCoreRequest(s) (pure logic).
 *
 * Validates every field with an OpenAI-style parameter name and a clear message (vLLM
 * vllm/sampling_params.py _verify_args and vllm/entrypoints/openai/protocol.py), applies
 * the chat template (model/template/chat_template.h) unless `raw`, tokenizes (model/tokenizer/tokenizer.h),
 * resolves max_tokens = -1 to what fits in the context, draws a seed when none is given
 * (so that a replay is deterministic), names the request (external id + "-" + random
 * suffix, as vLLM's AsyncLLM) and fans n > 1 out into n child requests with ids
 * "<i>_<parent id>" (vLLM ParentRequest), the same prompt and seed, and stream index i
 * (the sampler keys its draws by (seed, stream, position)). Stateless per request: the
 * preprocessor only holds the tokenizer, template and limits, so calls may run on many
 * threads at once.
 */
#ifndef LLB_INPUT_PROCESSOR_H
#define LLB_INPUT_PROCESSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "actors/input_processor/mm_items.h"
#include "actors/input_processor/mm_images.h"
#include "model/template/chat_render.h"
#include "model/template/chat_template.h"
#include "schemas/codec.h"
#include "schemas/sampling_params.h"

struct tokenizer;

#define INPUT_PROCESSOR_MAX_ID_BYTES 256        /* internal ids, NUL included */
#define INPUT_PROCESSOR_MAX_EXTERNAL_ID_BYTES 128 /* client request ids: at most 127 bytes */
#define INPUT_PROCESSOR_MAX_REPLY_TO_BYTES 256
#define INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES 256
#define INPUT_PROCESSOR_MAX_ERRORS 32
#define INPUT_PROCESSOR_MAX_FIELD_BYTES 48
#define INPUT_PROCESSOR_MAX_MESSAGE_BYTES 256
/* (prompt tokens - 1) * (prompt_logprobs + 1): prompt logprobs go to the client in one
 * RequestOutput (about 45 bytes an entry with its text), under NATS's 1 MiB message */
#define INPUT_PROCESSOR_MAX_PROMPT_LOGPROB_ENTRIES 16384

/* The client's GenerateRequest as plain data (the wire form is schemas/; the codec fills
 * this). Exactly one of prompt, messages, prompt_token_ids. All pointers are borrowed. */
struct input_processor_generate_request {
  const char *request_id;              /* the client's id (external); required */
  const char *prompt;                  /* UTF-8 text, or NULL */
  const struct chat_message *messages; /* [num_messages], or NULL */
  size_t num_messages;
  const int32_t *prompt_token_ids;     /* [num_prompt_token_ids], or NULL */
  int64_t num_prompt_token_ids;
  const char *chat_template;           /* template name ("chatml", ...); NULL = the model's */
  bool raw;                            /* prompt text is tokenized as is, no chat template */
  bool no_generation_prompt;           /* chat template without the assistant header
                                          (GenerateRequest.add_generation_prompt = false) */
  const struct llb_sampling_params *sampling_params; /* borrowed (the decoded GenerateRequest's);
                                          non-NULL; copied once, into input_processor_processed */
  int32_t priority;                    /* lower runs first (vLLM priority scheduling) */
  const char *cache_salt;              /* prefix-cache salt (tenant); NULL = none */
  const char *tenant;                  /* the tenant it arrived for; tagged into its ids */
  const char *reply_to;                /* subject for the RequestOutputs; NULL = "" */
  int64_t arrival_time_ns;             /* wall clock; 0 = now */
  const struct input_processor_mm_item *mm_items; /* [num_mm_items] multimodal items (mm_items.h) */
  int32_t num_mm_items;
  struct llb_structured_outputs structured_outputs; /* kind NONE = unconstrained; spec borrowed */
  struct llb_lora_request lora_request; /* the adapter, resolved (lora_int_id >= 1); name "" = the base */
  /* For the model's Jinja template (chat_render.h); ignored by the named templates. */
  const struct chat_message_extra *message_extras; /* [num_messages] or NULL */
  const char *tools_json;                /* JSON array of OpenAI tools; NULL = none */
  const char *chat_template_kwargs_json; /* JSON object; NULL = none */
  bool continue_final_message;           /* vLLM's; needs no_generation_prompt */
};

/* One rejected field. */
struct input_processor_field_error {
  char field[INPUT_PROCESSOR_MAX_FIELD_BYTES];     /* OpenAI-style name: "temperature", "messages[1].role" */
  char message[INPUT_PROCESSOR_MAX_MESSAGE_BYTES]; /* what is wrong, with the numbers involved */
};

/* All problems found in one request (the first INPUT_PROCESSOR_MAX_ERRORS; `num_dropped` counts more). */
struct input_processor_errors {
  int32_t num_errors;
  int32_t num_dropped;
  struct input_processor_field_error errors[INPUT_PROCESSOR_MAX_ERRORS];
};

/* One EngineCoreRequest (vLLM v1 vllm/v1/engine/__init__.py) for one child. */
struct input_processor_engine_request {
  char request_id[INPUT_PROCESSOR_MAX_ID_BYTES];         /* engine id: "<i>_<parent>" when n > 1, else the parent id */
  char parent_request_id[INPUT_PROCESSOR_MAX_ID_BYTES];  /* "<external>-<24 hex>" (random, tenant tag) */
  char external_request_id[INPUT_PROCESSOR_MAX_EXTERNAL_ID_BYTES];
  const int32_t *prompt_token_ids;              /* [num_prompt_tokens], shared by the children */
  int64_t num_prompt_tokens;
  const struct llb_sampling_params *sampling_params; /* the processed request's (borrowed):
                                                      n = 1, seed set, max_tokens resolved */
  int32_t eos_token_id;                         /* -1 if the model has none */
  int64_t arrival_time_ns;
  int32_t priority;
  char cache_salt[INPUT_PROCESSOR_MAX_CACHE_SALT_BYTES]; /* "" = none */
  int32_t child_index;                          /* 0..num_children-1; the sampler's stream */
  int32_t num_children;                         /* the client's n */
  char reply_to[INPUT_PROCESSOR_MAX_REPLY_TO_BYTES];
};

/* The result of preprocessing one request; free with input_processor_processed_free. */
struct input_processor_processed {
  struct llb_sampling_params sampling_params; /* the children's, once (each points here): n = 1,
                                                 seed set, max_tokens resolved */
  int32_t *prompt_token_ids;               /* [num_prompt_tokens] owned */
  int64_t num_prompt_tokens;
  struct input_processor_engine_request *requests;  /* [num_requests] = n children */
  int32_t num_requests;
  struct input_processor_mm_feature *mm_features;   /* [num_mm_features] owned, sorted by offset;
                                              shared by the children */
  int32_t num_mm_features;
};

/* Limits and defaults of one model. */
struct input_processor_config {
  int32_t max_model_len;           /* context length in tokens: prompt + output */
  int32_t max_n;                   /* largest n (default 16 when 0) */
  int32_t max_logprobs;            /* largest logprobs (<= LLB_MAX_LOGPROBS; 0 = that) */
  int64_t max_prompt_bytes;        /* longest prompt text / message content total (0 = 1 MiB) */
  bool has_chat_template;          /* the model's own template, from GGUF */
  enum chat_template_kind chat_template;
  /* Random source for seeds and id suffixes; NULL = getrandom(2). Tests pin it. */
  int32_t hidden_size;             /* the model's embedding_length: columns of "embeds" items
                                      (0 = multimodal items refused) */
  int64_t max_mm_item_bytes;       /* largest item (the bus' max_payload minus room for the
                                      rest of the message; 0 = 768 KiB) */
  uint64_t (*random_u64)(void *ctx);
  void *random_ctx;
  /* The model's Jinja chat template (GGUF tokenizer.chat_template or --chat-template FILE),
   * borrowed, outlives the preprocessor; NULL = the named kind above. Used unless the request
   * names a template. bos_token / eos_token: their texts for the template. */
  const struct jinja_template *jinja_template;
  const char *bos_token, *eos_token;
  struct input_processor_image_config image; /* "image" items in chat messages (mm_images.h); plan
                                       NULL = refused */
  struct llb_hash_key hash_key;    /* the deployment's key: multimodal item hashes and the tenant
                                      tags of request ids (every replica must hold the same) */
};

struct input_processor;

/* Creates a preprocessor over `tok` (borrowed; outlives it). Errors: INVALID_ARGUMENT
 * (max_model_len < 2, max_logprobs > LLB_MAX_LOGPROBS), OUT_OF_MEMORY. */
llb_status input_processor_create(const struct tokenizer *tok, const struct input_processor_config *cfg,
                         struct input_processor **out);

/* Sets max_mm_item_bytes (the actor learns the bus' max_payload after creation). */
void input_processor_set_max_mm_item_bytes(struct input_processor *p, int64_t n);

/* Frees the preprocessor. Accepts NULL. */
void input_processor_destroy(struct input_processor *p);

/* Checks everything that needs no tokenization (ids, prompt shape, roles, sampling
 * params); appends each problem to `errs` (which it clears first). Returns OK when none,
 * else INVALID_ARGUMENT. */
llb_status input_processor_validate(const struct input_processor *p, const struct input_processor_generate_request *req,
                           struct input_processor_errors *errs);

/* Multimodal items are checked after tokenization: modality "embeds", dtype f16/f32,
 * num_cols = hidden_size, num_rows >= 1, data_bytes = rows x cols x element size and at most
 * max_mm_item_bytes (the message names the limit), placeholders inside the prompt and not
 * overlapping (fields "mm_items[i].<name>"); accepted ones get their mm_hash. */
/* Validates, templates, tokenizes and fans out `req` into `out` (zeroed first; free with
 * input_processor_processed_free, also after a failure). Errors: INVALID_ARGUMENT with `errs`
 * filled (field errors, including the prompt and max_tokens against max_model_len),
 * OUT_OF_MEMORY, or the tokenizer's own error. */
llb_status input_processor_process(const struct input_processor *p, const struct input_processor_generate_request *req,
                          struct input_processor_processed *out, struct input_processor_errors *errs);

/* Tokenizes `req` exactly as input_processor_process would (validation, chat template, BOS,
 * truncate_prompt_tokens) without the context-length checks or fan-out: vLLM's /tokenize.
 * *ids_out is malloc'd ([*n_out], may be NULL when 0), the caller frees it. Errors:
 * INVALID_ARGUMENT with `errs` filled, OUT_OF_MEMORY, the tokenizer's. */
llb_status input_processor_tokenize(const struct input_processor *p, const struct input_processor_generate_request *req,
                           int32_t **ids_out, int64_t *n_out, struct input_processor_errors *errs);

/* Decodes ids[n] to text with special tokens rendered (vLLM's /detokenize: HF decode).
 * *text_out is malloc'd and NUL-terminated (length in *len_out), the caller frees it.
 * Errors: INVALID_ARGUMENT with `errs` naming the first id outside the vocabulary
 * ("prompt_token_ids[i]"), OUT_OF_MEMORY. */
llb_status input_processor_detokenize(const struct input_processor *p, const int32_t *ids, int64_t n, char **text_out,
                             size_t *len_out, struct input_processor_errors *errs);

/* The context length requests are checked against. */
int32_t input_processor_max_model_len(const struct input_processor *p);

/* Frees what `out` owns and zeroes it. Accepts NULL. */
void input_processor_processed_free(struct input_processor_processed *out);

/* Names the engine that will run the request in its ids (docs/design.md §9): the parent id
 * becomes "<external>-<24 hex>@<eid>" (8 random hex, then the 16 of the tenant tag) and each child's "<i>_<that>", so that any input
 * processor replica can send an abort for the id to the engine that owns it
 * (input_processor_engine_of_id). Call once, after input_processor_process succeeded. INVALID_ARGUMENT when
 * `engine_id` is not one subject token or the ids would not fit INPUT_PROCESSOR_MAX_ID_BYTES. */
llb_status input_processor_processed_set_engine(struct input_processor_processed *out, const char *engine_id);

/* Hex digits of the tenant tag in request ids. */
#define INPUT_PROCESSOR_TENANT_TAG_HEX LLB_REQUEST_TAG_HEX

/* The tenant tag of a parent id: a 64-bit keyed MAC (base/hash.h, the deployment's key) of
 * (tenant, base) where base[0..len) is "<external>-<8 random hex>", as 16 lowercase hex digits
 * and a NUL into out. Without the key nobody can make a tag, nor tell a tenant from its tags. */
void input_processor_tenant_tag(const struct llb_hash_key *key, const char *tenant, const char *base, size_t len,
                       char out[INPUT_PROCESSOR_TENANT_TAG_HEX + 1]);

/* True when internal request id[0..len) (a parent or child id, with or without "@<eid>") was
 * made for `tenant` under key: it ends (before "@<eid>") in "-<8 hex><16 hex>" and the 16 are
 * input_processor_tenant_tag of what precedes them (a child's "<i>_" left out). An abort arriving on
 * tenant B's subject for an id of tenant A is refused with this (issue 14: no tenant may abort
 * another's request), and so is an id nobody issued. */
bool input_processor_id_owned_by(const struct llb_hash_key *key, const char *id, size_t len, const char *tenant);

/* The engine named in an internal request id by input_processor_processed_set_engine (what follows its
 * last '@'), copied into out[cap]. False when the id names none or it is not one subject token. */
bool input_processor_engine_of_id(const char *id, size_t len, char *out, size_t cap);

/* The prefix-cache salt of a request of `tenant` with the client's `salt` (NULL or "" = none)
 * into out[size]: "<len>:<tenant>" then, with a salt, "<len>:<salt>" (decimal byte lengths).
 * Each field is length-prefixed so that the pair is recovered from the string: tenant "b/x"
 * with no salt and tenant "b" with salt "x" give different salts, so different block hashes
 * (docs/design.md §7; a plain "tenant/salt" join made them equal). Returns the length written, or
 * a value >= size when out is too small (as snprintf). */
size_t input_processor_cache_salt_compose(const char *tenant, const char *salt, size_t salt_len, char *out,
                                 size_t size);

/* Writes "field: message; field: message" into buf (truncated to size), for error replies. */
void input_processor_errors_format(const struct input_processor_errors *errs, char *buf, size_t size);

#endif
