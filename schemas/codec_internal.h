// Private to schemas/: the C++ helpers shared by the codec_*.cc files. Encoders build into a
// thread-local FlatBufferBuilder through an Enc context; decoders copy into the arena through
// a Dec context. Both record the first error with the path of the field ("SchedulerOutput.
// scheduled_new_reqs[2].req_id: ..."), so a message-specific codec is a list of field reads
// and writes with no error plumbing of its own.
#ifndef LLB_SCHEMAS_CODEC_INTERNAL_H
#define LLB_SCHEMAS_CODEC_INTERNAL_H

#include <flatbuffers/flatbuffers.h>

#include <vector>

#include "common_generated.h"
#include "model_runner_output_generated.h"
#include "scheduler_output_generated.h"
#include "schemas/codec.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

namespace llb_codec {
namespace fb = flatbuffers;

static_assert(FLATBUFFERS_LITTLEENDIAN, "decoders memcpy little-endian vectors");

// Path and first-error bookkeeping shared by Enc and Dec.
struct Ctx {
  const char *msg;            // message name, "SchedulerOutput"
  llb_status st = LLB_STATUS_OK;
  char path[192] = "";        // ".scheduled_new_reqs[2]" while inside an element
  size_t path_len = 0;

  explicit Ctx(const char *m) : msg(m) {}
  bool ok() const { return st == LLB_STATUS_OK; }
  // Records `s` with "<msg><path>.<field>: <why>" unless an error is already recorded.
  // Returns false, so that `return c.fail(...)` reads as one statement.
  bool fail(llb_status s, const char *field, const char *fmt, ...)
      __attribute__((format(printf, 4, 5)));
};

// Appends ".field[i]" to the context's path for its lifetime.
class Scope {
 public:
  Scope(Ctx &c, const char *field, int64_t i);
  ~Scope();
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

 private:
  Ctx &c_;
  size_t saved_;
};

struct Enc : Ctx {
  fb::FlatBufferBuilder &b;

  Enc(fb::FlatBufferBuilder &builder, const char *m) : Ctx(m), b(builder) {}
  // Checks that `bytes` more keep the message within LLB_MAX_MESSAGE_BYTES.
  bool room(size_t bytes, const char *field);
  bool count(const void *p, int64_t n, const char *field); // n >= 0, p != NULL when n > 0

  // Absent (0) when empty unless `required`, which makes an empty string an error.
  fb::Offset<fb::String> str(const llb_str &s, const char *field, bool required = false);

  template <class T>
  fb::Offset<fb::Vector<T>> vec(const T *p, int32_t n, const char *field) {
    if (!count(p, n, field) || n == 0 || !room((size_t)n * sizeof(T), field))
      return 0;
    return b.CreateVector(p, (size_t)n);
  }
  fb::Offset<fb::Vector<uint8_t>> bools(const bool *p, int32_t n, const char *field);
  fb::Offset<fb::Vector<fb::Offset<fb::String>>> strs(const llb_str *p, int32_t n,
                                                      const char *field);

  // Builds a vector of tables: `one(Enc &, const T &)` returns each element's offset.
  template <class FbT, class T, class F>
  fb::Offset<fb::Vector<fb::Offset<FbT>>> tables(const T *p, int32_t n, const char *field,
                                                 F one) {
    if (!count(p, n, field) || n == 0)
      return 0;
    std::vector<fb::Offset<FbT>> offs((size_t)n);
    for (int32_t i = 0; i < n && ok(); i++) {
      Scope s(*this, field, i);
      offs[(size_t)i] = one(*this, p[i]);
    }
    if (!ok() || !room((size_t)n * 4, field))
      return 0;
    return b.CreateVector(offs);
  }
};

struct Dec : Ctx {
  llb_arena *arena;

  Dec(llb_arena *a, const char *m) : Ctx(m), arena(a) {}
  void *alloc_bytes(size_t bytes, size_t align, const char *field);
  template <class T> T *alloc(size_t n, const char *field) {
    return static_cast<T *>(alloc_bytes(n * sizeof(T), alignof(T) < 16 ? 16 : alignof(T), field));
  }

  // Copies into the arena, NUL-terminated; absent gives "". A string with a NUL byte inside
  // is refused (C readers would see it cut short); `required` refuses the empty string.
  bool str(const fb::String *s, llb_str *out, const char *field, bool required = false);

  template <class T>
  bool vec(const fb::Vector<T> *v, const T **out, int32_t *n, const char *field) {
    *out = nullptr;
    *n = 0;
    if (!v || v->size() == 0)
      return true;
    T *d = alloc<T>(v->size(), field);
    if (!d)
      return false;
    memcpy(d, v->data(), (size_t)v->size() * sizeof(T));
    *out = d;
    *n = (int32_t)v->size();
    return true;
  }
  bool bools(const fb::Vector<uint8_t> *v, const bool **out, int32_t *n, const char *field);
  bool strs(const fb::Vector<fb::Offset<fb::String>> *v, const llb_str **out, int32_t *n,
            const char *field);

  // Decodes a vector of tables: `one(Dec &, const FbT &, T &)` fills each (zeroed) element.
  template <class T, class FbT, class F>
  bool tables(const fb::Vector<fb::Offset<FbT>> *v, const T **out, int32_t *n,
              const char *field, F one) {
    *out = nullptr;
    *n = 0;
    if (!v || v->size() == 0)
      return true;
    T *d = alloc<T>(v->size(), field);
    if (!d)
      return false;
    for (fb::uoffset_t i = 0; i < v->size(); i++) {
      Scope s(*this, field, i);
      d[i] = T{};
      if (!one(*this, *v->Get(i), d[i]))
        return false;
    }
    *out = d;
    *n = (int32_t)v->size();
    return true;
  }
};

// A vector that must have exactly `want` entries (absent counts as 0 entries).
bool check_len(Ctx &c, size_t have, int64_t want, const char *field, const char *want_name);
// Sums `n` non-negative counts into *sum (int32 range), naming the field on error.
bool sum_counts(Ctx &c, const int32_t *counts, int32_t n, const char *field, int32_t *sum);

// A subject token (bus/subject.h's rule, which schemas/ cannot include): 1..max_len bytes of
// ASCII letters, digits, '-' and '_' (codec_lora.cc).
bool token_valid(const llb_str &t, size_t max_len);

// KVConnectorMetadata of a SchedulerOutput and KVConnectorOutput of a ModelRunnerOutput
// (issue 36; codec_kv_transfer.cc). block_size: the SchedulerOutput's, for the block-count
// relations. Absent when every list is empty.
fb::Offset<llmbus::KVConnectorMetadata> enc_kv_metadata(Enc &e, const llb_kv_connector_metadata &m,
                                                        int32_t block_size, const char *field);
bool dec_kv_metadata(Dec &d, const llmbus::KVConnectorMetadata *t, int32_t block_size,
                     llb_kv_connector_metadata *out, const char *field);
fb::Offset<llmbus::KVConnectorOutput> enc_kv_output(Enc &e, const llb_kv_connector_output &o,
                                                    const char *field);
bool dec_kv_output(Dec &d, const llmbus::KVConnectorOutput *t, llb_kv_connector_output *out,
                   const char *field);

// Shared tables of common.fbs.
fb::Offset<llmbus::SamplingParams> enc_sampling(Enc &e, const llb_sampling_params *p,
                                                const char *field, bool required);
bool dec_sampling(Dec &d, const llmbus::SamplingParams *t, const llb_sampling_params **out,
                  const char *field, bool required);
fb::Offset<llmbus::ErrorInfo> enc_error(Enc &e, const llb_error_info &err, const char *field);
bool dec_error(Dec &d, const llmbus::ErrorInfo *t, llb_error_info *out, const char *field);
fb::Offset<llmbus::LogprobsLists> enc_logprobs(Enc &e, const llb_logprobs_lists &l,
                                               const char *field);
bool dec_logprobs(Dec &d, const llmbus::LogprobsLists *t, llb_logprobs_lists *out,
                  const char *field);
fb::Offset<fb::Vector<fb::Offset<llmbus::MultiModalFeature>>>
enc_mm_features(Enc &e, const llb_mm_feature *p, int32_t n, const char *field);
bool dec_mm_features(Dec &d, const fb::Vector<fb::Offset<llmbus::MultiModalFeature>> *v,
                     const llb_mm_feature **out, int32_t *n, const char *field);
// Embedding data: dtype "f16"/"f32", rows and cols >= 0, bytes == rows * cols * size.
// `bad` is the status to record: INVALID_ARGUMENT when encoding, MALFORMED when decoding.
// StructuredOutputs (common.fbs) <-> llb_structured_outputs; kind NONE is absent on the wire.
// Checks the kind's range, the spec's presence for the kinds that need one and its size.
fb::Offset<llmbus::StructuredOutputs> enc_structured_outputs(Enc &e,
                                                             const llb_structured_outputs &so,
                                                             const char *field);
bool dec_structured_outputs(Dec &d, const llmbus::StructuredOutputs *t, llb_structured_outputs *out,
                            const char *field);
// LoRARequest (common.fbs) <-> llb_lora_request; an empty name is absent on the wire. min_id: the
// smallest lora_int_id accepted (0 for a client's GenerateRequest, 1 once resolved) (codec_lora.cc).
// Checks a lora_name (llb_lora_name_valid) and lora_int_id >= min_id, recording `bad`.
bool lora_check(Ctx &c, llb_status bad, const llb_str &name, int32_t id, int32_t min_id,
                const char *field);
// Checks a dynamic adapter's lora_path and tenant (schemas/control.h llb_lora_update's rules).
bool lora_dynamic_check(Ctx &c, llb_status bad, const llb_str &path, const llb_str &tenant);
fb::Offset<llmbus::LoRARequest> enc_lora_request(Enc &e, const llb_lora_request &r, int32_t min_id,
                                                 const char *field);
bool dec_lora_request(Dec &d, const llmbus::LoRARequest *t, int32_t min_id, llb_lora_request *out,
                      const char *field);

// PoolingParams (common.fbs) <-> llb_pooling_params; type NONE is absent on the wire (present
// with None is MALFORMED). Checks the type's range and dimensions (codec_pooling.cc).
fb::Offset<llmbus::PoolingParams> enc_pooling_params(Enc &e, const llb_pooling_params &p,
                                                     const char *field);
bool dec_pooling_params(Dec &d, const llmbus::PoolingParams *t, llb_pooling_params *out,
                        const char *field);
// A pooled vector: at most LLB_MAX_POOLED_DIMS floats, every one finite; absent when empty.
fb::Offset<fb::Vector<float>> enc_pooled(Enc &e, const float *p, int32_t n, const char *field);
bool dec_pooled(Dec &d, const fb::Vector<float> *v, const float **out, int32_t *n,
                const char *field);

bool check_mm_data(Ctx &c, llb_status bad, const llb_str &dtype, int32_t rows, int32_t cols,
                   int64_t bytes, const char *field);

// Encoding: builds with `build` into a thread-local builder, finishes size-prefixed with the
// kind's identifier and copies out into (buf, cap) or grows `grow`.
struct Sink {
  uint8_t *buf;
  size_t cap;
  size_t *len_out;
  llb_buf *grow;
};
fb::FlatBufferBuilder &thread_builder();
llb_status finish(Enc &e, fb::Offset<void> root, llb_message_kind kind, const Sink &out);

template <class View>
llb_status encode(llb_message_kind kind, const View *m, fb::Offset<void> (*build)(Enc &, const View &),
                  const Sink &out) {
  if (!m)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: NULL message", llb_message_kind_name(kind));
  fb::FlatBufferBuilder &b = thread_builder();
  b.Clear();
  Enc e(b, llb_message_kind_name(kind));
  fb::Offset<void> root = build(e, *m);
  return finish(e, root, kind, out);
}

// Decoding, before the verifier: size bound, identifier, alignment (a misaligned buffer is
// copied into the arena). Returns the buffer to verify, or NULL with the error recorded.
const uint8_t *pre_verify(llb_message_kind kind, const uint8_t *buf, size_t len,
                          llb_arena *arena, llb_status *st);
llb_status verify_failed(llb_message_kind kind, size_t len);
llb_status bad_version(llb_message_kind kind);

template <class FbT, class View>
llb_status decode(llb_message_kind kind, const uint8_t *buf, size_t len, llb_arena *arena,
                  View *out, bool (*read)(Dec &, const FbT &, View &)) {
  if (!out)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: NULL output", llb_message_kind_name(kind));
  *out = View{};
  llb_status st = LLB_STATUS_OK;
  const uint8_t *p = pre_verify(kind, buf, len, arena, &st);
  if (!p)
    return st;
  fb::Verifier v(p, len, 64, 1000000);
  if (!v.VerifySizePrefixedBuffer<FbT>(llb_message_kind_identifier(kind)))
    return verify_failed(kind, len);
  const FbT *t = fb::GetSizePrefixedRoot<FbT>(p);
  if (t->version() == 0)
    return bad_version(kind);
  Dec d(arena, llb_message_kind_name(kind));
  out->version = t->version();
  if (!read(d, *t, *out)) {
    *out = View{};
    return d.st;
  }
  return LLB_STATUS_OK;
}

} // namespace llb_codec

// Defines the three public functions of message `name` (llb_<name>_encode, _encode_buf,
// _decode) over build_<name> and read_<name>, which the including file provides.
#define LLB_CODEC_DEFINE(name, FbType, KIND)                                                  \
  extern "C" llb_status llb_##name##_encode(const struct llb_##name *m, uint8_t *buf,       \
                                            size_t cap, size_t *len_out) {                  \
    return llb_codec::encode(KIND, m, build_##name, llb_codec::Sink{buf, cap, len_out, nullptr}); \
  }                                                                                         \
  extern "C" llb_status llb_##name##_encode_buf(const struct llb_##name *m,                 \
                                                struct llb_buf *out) {                      \
    return llb_codec::encode(KIND, m, build_##name, llb_codec::Sink{nullptr, 0, nullptr, out}); \
  }                                                                                         \
  extern "C" llb_status llb_##name##_decode(const uint8_t *buf, size_t len,                 \
                                            struct llb_arena *arena, struct llb_##name *out) { \
    return llb_codec::decode<llmbus::FbType>(KIND, buf, len, arena, out, read_##name);      \
  }

#endif
