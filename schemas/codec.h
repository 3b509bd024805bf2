/* The C API over the FlatBuffers wire messages (the .fbs files here): the only way llmbus code
 * reads or writes a message. No FlatBuffers header is needed to use it.
 *
 * Each message `X` (llb_generate_request, llb_engine_core_request, ...) has:
 *   struct llb_X                 a plain C view (strings + lengths, arrays + counts);
 *   llb_X_encode(m, buf, cap, &len)  builds the size-prefixed buffer into caller memory;
 *                                LLB_STATUS_TOO_LARGE when `cap` is short (then *len is the
 *                                size needed and the message says so); INVALID_ARGUMENT when
 *                                the view is inconsistent (negative count, NULL array with a
 *                                non-zero count, missing required field) naming the field;
 *   llb_X_encode_buf(m, &b)      the same into a growing struct llb_buf;
 *   llb_X_decode(buf, len, arena, &out)  bounds the size (LLB_MAX_MESSAGE_BYTES), runs the
 *                                FlatBuffers verifier over the size-prefixed buffer, checks the
 *                                identifier, the version, every enum value, every field we
 *                                require and every array-length relation, then copies the
 *                                content into `arena`: the view is valid until the arena is
 *                                reset or destroyed, and `buf` may be freed right away.
 *                                Errors: LLB_STATUS_MALFORMED (or TOO_LARGE for the size) with a
 *                                message naming the message and field (llb_err_last()).
 * Decoded strings are never NULL ("" when absent) and NUL-terminated. Decoded arrays with a
 * zero count may be NULL. Semantic limits (temperature range, ...) are the input processor's;
 * the codec checks what a C reader needs to be safe (counts, lengths, enum ranges).
 *
 * Wire format: FlatBuffers 2.0.8, finished with FinishSizePrefixed and a per-message 4-byte
 * identifier (byte 8..11 of the buffer; table in schemas/README.md), field `version` = 1.
 */
#ifndef LLB_SCHEMAS_CODEC_H
#define LLB_SCHEMAS_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Inside the extern "C" block: these C headers carry no C++ guards of their own, and the
 * codec itself is C++. */
#include "base/status.h"
#include "schemas/arena.h"
/* sampling_params.h has a slash-star inside its head comment, which -Wall (-Wcomment)
 * reports; silenced here for C (C++ gets -Wno-comment in schemas/CMakeLists.txt). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcomment"
#include "schemas/sampling_params.h"
#pragma GCC diagnostic pop

/* Largest message any decoder accepts and any encoder produces (NATS' own default
 * max_payload is 1 MiB: the bus checks that separately). */
#define LLB_MAX_MESSAGE_BYTES ((size_t)8 * 1024 * 1024)

/* Version every encoder writes; decoders accept >= 1 (newer peers only add fields). */
#define LLB_SCHEMA_VERSION 1

/* A string: `data` has `len` bytes; decoded strings are NUL-terminated and never NULL.
 * In a view being encoded, data may be NULL when len is 0 (absent). */
struct llb_str {
  const char *data;
  size_t len;
};

/* View of a NUL-terminated C string (NULL gives the empty string). */
static inline struct llb_str llb_str_c(const char *s) {
  return (struct llb_str){s ? s : "", s ? strlen(s) : 0};
}

/* A growable caller-owned byte buffer: zero-initialize, then encoders grow it with realloc;
 * free with llb_buf_free. `len` is the encoded size. */
struct llb_buf {
  uint8_t *data;
  size_t len, cap;
};

/* Frees b->data and zeroes `b`. NULL is accepted. */
void llb_buf_free(struct llb_buf *b);

/* Message kinds, one per wire identifier. */
enum llb_message_kind {
  LLB_MESSAGE_KIND_UNKNOWN = 0,
  LLB_MESSAGE_KIND_GENERATE_REQUEST,    /* "LGRQ" */
  LLB_MESSAGE_KIND_ABORT_REQUEST,       /* "LABR" */
  LLB_MESSAGE_KIND_ENGINE_CORE_REQUEST, /* "LECR" */
  LLB_MESSAGE_KIND_ABORT_REQUESTS,      /* "LEAB" */
  LLB_MESSAGE_KIND_SCHEDULER_OUTPUT,    /* "LSCO" */
  LLB_MESSAGE_KIND_KV_STEP,             /* "LKVS" */
  LLB_MESSAGE_KIND_KV_STEP_RESULT,      /* "LKVR" */
  LLB_MESSAGE_KIND_ENCODER_STEP,        /* "LENS" */
  LLB_MESSAGE_KIND_ENCODER_STEP_RESULT, /* "LENR" */
  LLB_MESSAGE_KIND_MODEL_RUNNER_OUTPUT, /* "LMRO" */
  LLB_MESSAGE_KIND_ENGINE_CORE_OUTPUTS, /* "LECO" */
  LLB_MESSAGE_KIND_REQUEST_OUTPUT,      /* "LRQO" */
  LLB_MESSAGE_KIND_HEARTBEAT,           /* "LHBT" */
  LLB_MESSAGE_KIND_SCHEDULER_STATS,     /* "LSST" */
  LLB_MESSAGE_KIND_ERROR_REPLY,         /* "LERR" */
  LLB_MESSAGE_KIND_LORA_UPDATE,         /* "LLUP" */
  LLB_MESSAGE_KIND_LORA_UPDATE_REPLY,   /* "LLUR" */
  LLB_MESSAGE_KIND_KV_FETCH_REQUEST,    /* "LKVF" */
  LLB_MESSAGE_KIND_KV_TRANSFER_CHUNK,   /* "LKVC" */
  LLB_MESSAGE_KIND_COUNT
};

/* Peeks the kind of a size-prefixed buffer from its identifier, without verifying the rest
 * (decode still must). Returns LLB_MESSAGE_KIND_UNKNOWN when `len` < 12 or the identifier is
 * not ours. Lets a subscriber that accepts several messages (an ErrorReply instead of the
 * expected reply) dispatch. */
enum llb_message_kind llb_message_identify(const uint8_t *buf, size_t len);

/* Message name ("SchedulerOutput") and 4-byte identifier ("LSCO") of a kind; "unknown" and
 * "????" for anything else. Static strings. */
const char *llb_message_kind_name(enum llb_message_kind kind);
const char *llb_message_kind_identifier(enum llb_message_kind kind);

/* An error carried in a message: `code` is an llb_status (0 = no error, then the table is
 * absent on the wire). */
struct llb_error_info {
  int32_t code;
  struct llb_str message;
  struct llb_str field; /* the offending field, or "" */
  int64_t retry_after_ms; /* QUEUE_FULL of a per-tenant limit: ms until a retry can succeed; 0 = unknown */
};

/* What a request's output is constrained to (vLLM StructuredOutputsParams; common.fbs). */
enum llb_structured_outputs_kind {
  LLB_SO_NONE = 0,        /* unconstrained; spec empty */
  LLB_SO_JSON = 1,        /* spec: a JSON Schema */
  LLB_SO_JSON_OBJECT = 2, /* any JSON object; spec empty */
  LLB_SO_CHOICE = 3,      /* spec: JSON array of strings */
  LLB_SO_REGEX = 4,       /* spec: a regular expression */
  LLB_SO_GRAMMAR = 5,     /* spec: a grammar text */
};

#define LLB_SO_MAX_SPEC_BYTES (64 * 1024)

/* kind NONE = absent on the wire. The codec checks the kind's range, that spec is present
 * exactly for the kinds that need one, and its size (<= LLB_SO_MAX_SPEC_BYTES), and the range
 * of reasoning; it does not parse the spec. */
struct llb_structured_outputs {
  enum llb_structured_outputs_kind kind;
  struct llb_str spec;
  uint8_t reasoning; /* enum reasoning_parser (model/reasoning/reasoning.h), <= LLB_SO_MAX_REASONING; 0 = none:
                      * the grammar starts once the model's reasoning has ended */
};

#define LLB_SO_MAX_REASONING 4

/* How a pooling request pools its prompt's final-norm hidden states (vLLM PoolingType;
 * common.fbs). NONE = not a pooling request (the table is absent on the wire). */
enum llb_pooling_type {
  LLB_POOLING_NONE = 0,
  LLB_POOLING_LAST = 1, /* the last prompt token (vLLM's default for decoder LMs) */
  LLB_POOLING_MEAN = 2, /* the mean over every prompt token */
  LLB_POOLING_CLS = 3,  /* the first prompt token */
};

/* Most floats one pooled vector may have on the wire (hidden sizes are far below). */
#define LLB_MAX_POOLED_DIMS 65536
/* Draft tokens per request and step at most (speculative decoding: num_speculative_tokens). */
#define LLB_MAX_SPEC_TOKENS 64

/* vLLM PoolingParams. Zero value = not pooling; set normalize = true for vLLM's default.
 * The codec checks the type's range and 0 <= dimensions <= LLB_MAX_POOLED_DIMS. */
struct llb_pooling_params {
  enum llb_pooling_type pooling_type;
  bool normalize;     /* L2-normalize the pooled vector */
  int32_t dimensions; /* Matryoshka truncation; 0 = the full hidden size */
};

/* Longest LoRA adapter name (bus/subject.h BUS_MODEL_NAME_MAX: an adapter is a served model). */
#define LLB_LORA_NAME_MAX 128
/* Adapters one Heartbeat may announce at most. */
#define LLB_MAX_LORA_ADAPTERS 1024

/* vLLM LoRARequest: the adapter a request runs with. lora_name "" = the base model (absent on
 * the wire). The codec checks the name as a model name (1..LLB_LORA_NAME_MAX bytes of letters,
 * digits and "._-/:+", not starting with '.', '/' or '-', no "..") and lora_int_id: >= 0 in a
 * GenerateRequest (a client's id is ignored), >= 1 in EngineCoreRequest and NewRequestData. */
struct llb_lora_request {
  struct llb_str lora_name;
  int32_t lora_int_id;
};

/* True if name[0..len) is a valid lora_name (the rule above). */
bool llb_lora_name_valid(const char *name, size_t len);

/* vLLM v1 LogprobsLists, row-major. num_tokens 0 = absent. */
struct llb_logprobs_lists {
  int32_t num_tokens;                 /* rows */
  int32_t num_logprobs_per_token;     /* columns: sampled token + top-k */
  const int32_t *logprob_token_ids;   /* [num_tokens, num_logprobs_per_token] */
  const float *logprobs;              /* [num_tokens, num_logprobs_per_token] */
  const int32_t *sampled_token_ranks; /* [num_tokens] */
};

/* One processed multimodal input (vLLM MultiModalFeatureSpec). */
struct llb_mm_feature {
  struct llb_str modality;  /* "image" */
  struct llb_str mm_hash;   /* encoder-cache key */
  int32_t offset;           /* first placeholder token position, >= 0 */
  int32_t length;           /* placeholder tokens = embedding rows, >= 0 */
  const uint8_t *data;      /* [num_embeds, num_cols] of dtype, little-endian, 16-byte aligned
                               when decoded; may be NULL (data_bytes 0); or an image file
                               (dtype "jpeg" / "png") */
  int64_t data_bytes;       /* num_embeds * num_cols * element size, or 0; the file's size */
  struct llb_str dtype;     /* "f16" or "f32"; required with data */
  int32_t num_cols;
  const uint8_t *is_embed;  /* [num_is_embed]: 1 = the position takes the next row, 0 = it keeps
                               its token's embedding (vLLM PlaceholderRange.is_embed); NULL (0)
                               = every position does. num_embeds = its 1s, or length */
  int32_t num_is_embed;     /* 0 or length */
};

/* True for the dtypes of encoded images ("jpeg", "png"): data is the file, not a
 * [rows, cols] tensor, so no shape checks apply to it. */
bool llb_mm_dtype_is_encoded(struct llb_str dtype);

/* The embedding rows of a feature: the 1s of is_embed, or length without a mask. */
int32_t llb_mm_feature_num_embeds(const struct llb_mm_feature *f);

#ifdef __cplusplus
}
#endif

#endif
