// Shared codec machinery: message kinds, the Enc/Dec contexts, encode finishing, the checks
// before verification, and the tables of common.fbs (SamplingParams, ErrorInfo,
// LogprobsLists, MultiModalFeature).
#include "schemas/codec_internal.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace {

struct kind_info {
  const char *name;
  const char *ident;
};

// Indexed by enum llb_message_kind.
const kind_info kinds[LLB_MESSAGE_KIND_COUNT] = {
    {"unknown", "????"},           {"GenerateRequest", "LGRQ"},
    {"AbortRequest", "LABR"},      {"EngineCoreRequest", "LECR"},
    {"AbortRequests", "LEAB"},     {"SchedulerOutput", "LSCO"},
    {"KVStep", "LKVS"},            {"KVStepResult", "LKVR"},
    {"EncoderStep", "LENS"},       {"EncoderStepResult", "LENR"},
    {"ModelRunnerOutput", "LMRO"}, {"EngineCoreOutputs", "LECO"},
    {"RequestOutput", "LRQO"},     {"Heartbeat", "LHBT"},
    {"SchedulerStats", "LSST"},    {"ErrorReply", "LERR"},
    {"LoRAUpdate", "LLUP"},        {"LoRAUpdateReply", "LLUR"},
    {"KVFetchRequest", "LKVF"},    {"KVTransferChunk", "LKVC"},
};

// Prints 4 identifier bytes readably: printable ASCII as is, others as \xNN.
void ident_text(const uint8_t *p, char out[17]) {
  size_t o = 0;
  for (int i = 0; i < 4; i++) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
      out[o++] = (char)p[i];
    else
      o += (size_t)snprintf(out + o, 17 - o, "\\x%02x", p[i]);
  }
  out[o] = '\0';
}

} // namespace

extern "C" {

const char *llb_message_kind_name(enum llb_message_kind kind) {
  return (unsigned)kind < LLB_MESSAGE_KIND_COUNT ? kinds[kind].name : kinds[0].name;
}

const char *llb_message_kind_identifier(enum llb_message_kind kind) {
  return (unsigned)kind < LLB_MESSAGE_KIND_COUNT ? kinds[kind].ident : kinds[0].ident;
}

enum llb_message_kind llb_message_identify(const uint8_t *buf, size_t len) {
  // Size-prefixed layout: [u32 size][u32 root offset][4-byte identifier]...
  if (!buf || len < 12)
    return LLB_MESSAGE_KIND_UNKNOWN;
  for (int k = 1; k < LLB_MESSAGE_KIND_COUNT; k++)
    if (memcmp(buf + 8, kinds[k].ident, 4) == 0)
      return (enum llb_message_kind)k;
  return LLB_MESSAGE_KIND_UNKNOWN;
}

void llb_buf_free(struct llb_buf *b) {
  if (!b)
    return;
  free(b->data);
  *b = (struct llb_buf){};
}

} // extern "C"

namespace llb_codec {

bool Ctx::fail(llb_status s, const char *field, const char *fmt, ...) {
  if (st != LLB_STATUS_OK)
    return false;
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  st = LLB_ERRF(s, "%s%s%s%s: %s", msg, path, *field ? "." : "", field, why);
  return false;
}

Scope::Scope(Ctx &c, const char *field, int64_t i) : c_(c), saved_(c.path_len) {
  int n = snprintf(c.path + c.path_len, sizeof c.path - c.path_len, ".%s[%" PRId64 "]", field, i);
  if (n > 0)
    c.path_len = std::min(sizeof c.path - 1, c.path_len + (size_t)n);
}

Scope::~Scope() {
  c_.path_len = saved_;
  c_.path[saved_] = '\0';
}

bool Enc::room(size_t bytes, const char *field) {
  if (b.GetSize() + bytes + 64 > LLB_MAX_MESSAGE_BYTES)
    return fail(LLB_STATUS_TOO_LARGE, field,
                "message would exceed the limit of %zu bytes (LLB_MAX_MESSAGE_BYTES)",
                LLB_MAX_MESSAGE_BYTES);
  return true;
}

bool Enc::count(const void *p, int64_t n, const char *field) {
  if (n < 0)
    return fail(LLB_STATUS_INVALID_ARGUMENT, field, "negative count %" PRId64, n);
  if (n > 0 && !p)
    return fail(LLB_STATUS_INVALID_ARGUMENT, field, "NULL array with count %" PRId64, n);
  return true;
}

fb::Offset<fb::String> Enc::str(const llb_str &s, const char *field, bool required) {
  if (s.len > 0 && !s.data) {
    fail(LLB_STATUS_INVALID_ARGUMENT, field, "NULL data with length %zu", s.len);
    return 0;
  }
  if (s.len == 0) {
    if (required)
      fail(LLB_STATUS_INVALID_ARGUMENT, field, "required string is empty");
    return 0;
  }
  if (!room(s.len + 5, field))
    return 0;
  return b.CreateString(s.data, s.len);
}

fb::Offset<fb::Vector<uint8_t>> Enc::bools(const bool *p, int32_t n, const char *field) {
  if (!count(p, n, field) || n == 0 || !room((size_t)n, field))
    return 0;
  uint8_t *d = nullptr;
  auto v = b.CreateUninitializedVector<uint8_t>((size_t)n, &d);
  for (int32_t i = 0; i < n; i++)
    d[i] = p[i] ? 1 : 0;
  return v;
}

fb::Offset<fb::Vector<fb::Offset<fb::String>>> Enc::strs(const llb_str *p, int32_t n,
                                                         const char *field) {
  return tables<fb::String>(p, n, field, [](Enc &e, const llb_str &s) {
    fb::Offset<fb::String> o = e.str(s, "", false);
    return e.ok() && o.IsNull() ? e.b.CreateString("", 0) : o; // keep empty entries
  });
}

void *Dec::alloc_bytes(size_t bytes, size_t align, const char *field) {
  void *p = llb_arena_alloc(arena, bytes, align);
  if (!p)
    fail(LLB_STATUS_OUT_OF_MEMORY, field, "arena allocation of %zu bytes failed", bytes);
  return p;
}

bool Dec::str(const fb::String *s, llb_str *out, const char *field, bool required) {
  size_t n = s ? s->size() : 0;
  if (n == 0 && required)
    return fail(LLB_STATUS_MALFORMED, field, "required string is missing or empty");
  if (n > 0 && memchr(s->c_str(), '\0', n))
    return fail(LLB_STATUS_MALFORMED, field, "string holds a NUL byte");
  char *d = static_cast<char *>(alloc_bytes(n + 1, 1, field));
  if (!d)
    return false;
  if (n > 0)
    memcpy(d, s->c_str(), n);
  d[n] = '\0';
  *out = llb_str{d, n};
  return true;
}

bool Dec::bools(const fb::Vector<uint8_t> *v, const bool **out, int32_t *n, const char *field) {
  *out = nullptr;
  *n = 0;
  if (!v || v->size() == 0)
    return true;
  bool *d = alloc<bool>(v->size(), field);
  if (!d)
    return false;
  for (fb::uoffset_t i = 0; i < v->size(); i++)
    d[i] = v->Get(i) != 0;
  *out = d;
  *n = (int32_t)v->size();
  return true;
}

bool Dec::strs(const fb::Vector<fb::Offset<fb::String>> *v, const llb_str **out, int32_t *n,
               const char *field) {
  return tables(v, out, n, field,
                [](Dec &d, const fb::String &s, llb_str &o) { return d.str(&s, &o, "", false); });
}

bool check_len(Ctx &c, size_t have, int64_t want, const char *field, const char *want_name) {
  if ((int64_t)have != want)
    return c.fail(LLB_STATUS_MALFORMED, field, "has %zu entries, %s is %" PRId64, have,
                  want_name, want);
  return true;
}

bool sum_counts(Ctx &c, const int32_t *counts, int32_t n, const char *field, int32_t *sum) {
  int64_t s = 0;
  for (int32_t i = 0; i < n; i++) {
    if (counts[i] < 0)
      return c.fail(LLB_STATUS_MALFORMED, field, "entry %d is negative (%d)", i, counts[i]);
    s += counts[i];
  }
  if (s > INT32_MAX)
    return c.fail(LLB_STATUS_MALFORMED, field, "sum %" PRId64 " overflows", s);
  *sum = (int32_t)s;
  return true;
}

// ---- SamplingParams ----------------------------------------------------------------------

fb::Offset<llmbus::SamplingParams> enc_sampling(Enc &e, const llb_sampling_params *p,
                                                const char *field, bool required) {
  if (!p) {
    if (required)
      e.fail(LLB_STATUS_INVALID_ARGUMENT, field, "required sampling_params is NULL");
    return 0;
  }
  Scope s(e, field, 0);
  if (p->num_stop < 0 || p->num_stop > LLB_MAX_STOP_STRINGS) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_stop", "%d outside [0, %d]", p->num_stop,
           LLB_MAX_STOP_STRINGS);
    return 0;
  }
  if (p->num_stop_token_ids < 0 || p->num_stop_token_ids > LLB_MAX_STOP_TOKEN_IDS) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_stop_token_ids", "%d outside [0, %d]",
           p->num_stop_token_ids, LLB_MAX_STOP_TOKEN_IDS);
    return 0;
  }
  if ((unsigned)p->output_kind > LLB_OUTPUT_KIND_FINAL_ONLY) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "output_kind", "unknown value %d", (int)p->output_kind);
    return 0;
  }
  llb_str stops[LLB_MAX_STOP_STRINGS];
  for (int32_t i = 0; i < p->num_stop; i++)
    stops[i] = llb_str{p->stop[i], strnlen(p->stop[i], LLB_MAX_STOP_STRING_BYTES + 1)};
  for (int32_t i = 0; i < p->num_stop; i++)
    if (stops[i].len > LLB_MAX_STOP_STRING_BYTES) {
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "stop", "string %d is not NUL-terminated", i);
      return 0;
    }
  if (p->num_logit_bias < 0 || p->num_logit_bias > LLB_MAX_LOGIT_BIAS) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_logit_bias", "%d outside [0, %d]", p->num_logit_bias,
           LLB_MAX_LOGIT_BIAS);
    return 0;
  }
  auto stop = e.strs(stops, p->num_stop, "stop");
  auto stop_ids = e.vec(p->stop_token_ids, p->num_stop_token_ids, "stop_token_ids");
  fb::Offset<fb::Vector<const llmbus::LogitBias *>> bias = 0;
  if (p->num_logit_bias > 0) {
    llmbus::LogitBias tmp[LLB_MAX_LOGIT_BIAS];
    for (int32_t i = 0; i < p->num_logit_bias; i++)
      tmp[i] = llmbus::LogitBias(p->logit_bias[i].token_id, p->logit_bias[i].bias);
    bias = e.b.CreateVectorOfStructs(tmp, (size_t)p->num_logit_bias);
  }
  if (!e.ok())
    return 0;
  llmbus::SamplingParamsBuilder t(e.b);
  t.add_n(p->n);
  t.add_temperature(p->temperature);
  t.add_top_k(p->top_k);
  t.add_top_p(p->top_p);
  t.add_min_p(p->min_p);
  if (p->has_seed)
    t.add_seed(p->seed);
  t.add_presence_penalty(p->presence_penalty);
  t.add_frequency_penalty(p->frequency_penalty);
  t.add_repetition_penalty(p->repetition_penalty);
  t.add_max_tokens(p->max_tokens);
  t.add_min_tokens(p->min_tokens);
  t.add_stop(stop);
  t.add_stop_token_ids(stop_ids);
  t.add_ignore_eos(p->ignore_eos);
  t.add_include_stop_str_in_output(p->include_stop_str_in_output);
  t.add_skip_special_tokens(p->skip_special_tokens);
  t.add_logprobs(p->logprobs);
  t.add_prompt_logprobs(p->prompt_logprobs);
  t.add_output_kind(static_cast<llmbus::OutputKind>(p->output_kind));
  if (p->num_logit_bias > 0)
    t.add_logit_bias(bias);
  t.add_truncate_prompt_tokens(p->truncate_prompt_tokens);
  return t.Finish();
}

bool dec_sampling(Dec &d, const llmbus::SamplingParams *t, const llb_sampling_params **out,
                  const char *field, bool required) {
  *out = nullptr;
  if (!t && required)
    return d.fail(LLB_STATUS_MALFORMED, field, "required table is missing");
  llb_sampling_params *p = d.alloc<llb_sampling_params>(1, field);
  if (!p)
    return false;
  llb_sampling_params_init(p);
  *out = p;
  if (!t)
    return true;
  Scope s(d, field, 0);
  p->n = t->n();
  p->temperature = t->temperature();
  p->top_k = t->top_k();
  p->top_p = t->top_p();
  p->min_p = t->min_p();
  p->has_seed = t->seed().has_value();
  p->seed = t->seed().value_or(0);
  p->presence_penalty = t->presence_penalty();
  p->frequency_penalty = t->frequency_penalty();
  p->repetition_penalty = t->repetition_penalty();
  p->max_tokens = t->max_tokens();
  p->min_tokens = t->min_tokens();
  p->ignore_eos = t->ignore_eos();
  p->include_stop_str_in_output = t->include_stop_str_in_output();
  p->skip_special_tokens = t->skip_special_tokens();
  p->logprobs = t->logprobs();
  p->prompt_logprobs = t->prompt_logprobs();
  int kind = (int)t->output_kind();
  if (kind < 0 || kind > LLB_OUTPUT_KIND_FINAL_ONLY)
    return d.fail(LLB_STATUS_MALFORMED, "output_kind", "unknown value %d", kind);
  p->output_kind = (llb_output_kind)kind;
  // The C view has fixed arrays and a fixed top-logprobs array: bound them here.
  if (p->logprobs < -1 || p->logprobs > LLB_MAX_LOGPROBS)
    return d.fail(LLB_STATUS_MALFORMED, "logprobs", "%d outside [-1, %d]", p->logprobs,
                  LLB_MAX_LOGPROBS);
  if (p->prompt_logprobs < -1 || p->prompt_logprobs > LLB_MAX_LOGPROBS)
    return d.fail(LLB_STATUS_MALFORMED, "prompt_logprobs", "%d outside [-1, %d]",
                  p->prompt_logprobs, LLB_MAX_LOGPROBS);
  if (const auto *stop = t->stop()) {
    if (stop->size() > LLB_MAX_STOP_STRINGS)
      return d.fail(LLB_STATUS_MALFORMED, "stop", "%u strings, at most %d", stop->size(),
                    LLB_MAX_STOP_STRINGS);
    for (fb::uoffset_t i = 0; i < stop->size(); i++) {
      const fb::String *str = stop->Get(i);
      if (str->size() > LLB_MAX_STOP_STRING_BYTES)
        return d.fail(LLB_STATUS_MALFORMED, "stop", "string %u has %u bytes, at most %d", i,
                      str->size(), LLB_MAX_STOP_STRING_BYTES);
      if (memchr(str->c_str(), '\0', str->size()))
        return d.fail(LLB_STATUS_MALFORMED, "stop", "string %u holds a NUL byte", i);
      memcpy(p->stop[i], str->c_str(), str->size());
      p->stop[i][str->size()] = '\0';
    }
    p->num_stop = (int32_t)stop->size();
  }
  if (const auto *ids = t->stop_token_ids()) {
    if (ids->size() > LLB_MAX_STOP_TOKEN_IDS)
      return d.fail(LLB_STATUS_MALFORMED, "stop_token_ids", "%u ids, at most %d", ids->size(),
                    LLB_MAX_STOP_TOKEN_IDS);
    memcpy(p->stop_token_ids, ids->data(), ids->size() * sizeof(int32_t));
    p->num_stop_token_ids = (int32_t)ids->size();
  }
  if (const auto *bias = t->logit_bias()) {
    if (bias->size() > LLB_MAX_LOGIT_BIAS)
      return d.fail(LLB_STATUS_MALFORMED, "logit_bias", "%u entries, at most %d", bias->size(),
                    LLB_MAX_LOGIT_BIAS);
    for (fb::uoffset_t i = 0; i < bias->size(); i++) {
      const llmbus::LogitBias *b = bias->Get(i);
      p->logit_bias[i] = llb_logit_bias{b->token_id(), b->bias()};
    }
    p->num_logit_bias = (int32_t)bias->size();
  }
  p->truncate_prompt_tokens = t->truncate_prompt_tokens();
  return true;
}

// ---- ErrorInfo ---------------------------------------------------------------------------

fb::Offset<llmbus::ErrorInfo> enc_error(Enc &e, const llb_error_info &err, const char *field) {
  if (err.code == 0)
    return 0;
  if (err.code < 0 || err.code >= LLB_STATUS_COUNT) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, field, "code %d is not an llb_status", err.code);
    return 0;
  }
  Scope s(e, field, 0);
  auto message = e.str(err.message, "message");
  auto fld = e.str(err.field, "field");
  if (!e.ok())
    return 0;
  if (err.retry_after_ms < 0) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, field, "retry_after_ms %lld < 0", (long long)err.retry_after_ms);
    return 0;
  }
  return llmbus::CreateErrorInfo(e.b, err.code, message, fld, err.retry_after_ms);
}

bool dec_error(Dec &d, const llmbus::ErrorInfo *t, llb_error_info *out, const char *field) {
  *out = llb_error_info{0, {"", 0}, {"", 0}, 0};
  if (!t)
    return true;
  Scope s(d, field, 0);
  if (t->code() < 0 || t->code() >= LLB_STATUS_COUNT)
    return d.fail(LLB_STATUS_MALFORMED, "code", "%d is not an llb_status", t->code());
  out->code = t->code();
  if (t->retry_after_ms() < 0)
    return d.fail(LLB_STATUS_MALFORMED, "retry_after_ms", "%lld < 0", (long long)t->retry_after_ms());
  out->retry_after_ms = t->retry_after_ms();
  return d.str(t->message(), &out->message, "message") && d.str(t->field(), &out->field, "field");
}

// ---- LogprobsLists -----------------------------------------------------------------------

fb::Offset<llmbus::LogprobsLists> enc_logprobs(Enc &e, const llb_logprobs_lists &l,
                                               const char *field) {
  if (l.num_tokens == 0)
    return 0;
  Scope s(e, field, 0);
  if (l.num_tokens < 0 || l.num_logprobs_per_token < 1 ||
      l.num_logprobs_per_token > LLB_MAX_LOGPROBS + 1) {
    e.fail(LLB_STATUS_INVALID_ARGUMENT, "num_logprobs_per_token",
           "%d rows of %d columns: need rows >= 0 and columns in [1, %d]", l.num_tokens,
           l.num_logprobs_per_token, LLB_MAX_LOGPROBS + 1);
    return 0;
  }
  int64_t cells = (int64_t)l.num_tokens * l.num_logprobs_per_token;
  if (cells > INT32_MAX) {
    e.fail(LLB_STATUS_TOO_LARGE, "logprobs", "%" PRId64 " entries", cells);
    return 0;
  }
  auto ids = e.vec(l.logprob_token_ids, (int32_t)cells, "logprob_token_ids");
  auto lps = e.vec(l.logprobs, (int32_t)cells, "logprobs");
  auto ranks = e.vec(l.sampled_token_ranks, l.num_tokens, "sampled_token_ranks");
  if (!e.ok())
    return 0;
  return llmbus::CreateLogprobsLists(e.b, ids, lps, ranks, l.num_logprobs_per_token);
}

bool dec_logprobs(Dec &d, const llmbus::LogprobsLists *t, llb_logprobs_lists *out,
                  const char *field) {
  *out = llb_logprobs_lists{};
  if (!t)
    return true;
  Scope s(d, field, 0);
  size_t rows = t->sampled_token_ranks() ? t->sampled_token_ranks()->size() : 0;
  size_t ids = t->logprob_token_ids() ? t->logprob_token_ids()->size() : 0;
  size_t lps = t->logprobs() ? t->logprobs()->size() : 0;
  int32_t cols = t->num_logprobs_per_token();
  if (rows == 0 && ids == 0 && lps == 0)
    return true;
  if (cols < 1 || cols > LLB_MAX_LOGPROBS + 1)
    return d.fail(LLB_STATUS_MALFORMED, "num_logprobs_per_token", "%d outside [1, %d]", cols,
                  LLB_MAX_LOGPROBS + 1);
  int64_t cells = (int64_t)rows * cols;
  if (!check_len(d, ids, cells, "logprob_token_ids", "rows * num_logprobs_per_token") ||
      !check_len(d, lps, cells, "logprobs", "rows * num_logprobs_per_token"))
    return false;
  int32_t n = 0;
  out->num_logprobs_per_token = cols;
  return d.vec(t->logprob_token_ids(), &out->logprob_token_ids, &n, "logprob_token_ids") &&
         d.vec(t->logprobs(), &out->logprobs, &n, "logprobs") &&
         d.vec(t->sampled_token_ranks(), &out->sampled_token_ranks, &out->num_tokens,
               "sampled_token_ranks");
}

// ---- StructuredOutputs -------------------------------------------------------------------

static bool so_check(Ctx &c, llb_status bad, int kind, size_t spec_len, int reasoning, const char *field) {
  if (kind < LLB_SO_NONE || kind > LLB_SO_GRAMMAR)
    return c.fail(bad, field, "kind %d is not a StructuredOutputsKind", kind);
  if (reasoning < 0 || reasoning > LLB_SO_MAX_REASONING)
    return c.fail(bad, field, "reasoning %d is not a reasoning parser (0..%d)", reasoning, LLB_SO_MAX_REASONING);
  bool wants_spec = kind != LLB_SO_NONE && kind != LLB_SO_JSON_OBJECT;
  if (wants_spec && spec_len == 0)
    return c.fail(bad, field, "kind %d needs a spec", kind);
  if (!wants_spec && spec_len > 0)
    return c.fail(bad, field, "kind %d takes no spec", kind);
  if (spec_len > LLB_SO_MAX_SPEC_BYTES)
    return c.fail(bad, field, "spec of %zu bytes is over %d", spec_len, LLB_SO_MAX_SPEC_BYTES);
  return true;
}

fb::Offset<llmbus::StructuredOutputs> enc_structured_outputs(Enc &e,
                                                             const llb_structured_outputs &so,
                                                             const char *field) {
  if (!so_check(e, LLB_STATUS_INVALID_ARGUMENT, (int)so.kind, so.spec.len, (int)so.reasoning, field) ||
      so.kind == LLB_SO_NONE)
    return 0;
  auto spec = e.str(so.spec, "spec");
  if (!e.ok())
    return 0;
  return llmbus::CreateStructuredOutputs(e.b, (llmbus::StructuredOutputsKind)so.kind, spec, so.reasoning);
}

bool dec_structured_outputs(Dec &d, const llmbus::StructuredOutputs *t, llb_structured_outputs *out,
                            const char *field) {
  *out = llb_structured_outputs{};
  out->spec = llb_str{"", 0};
  if (!t)
    return true;
  size_t len = t->spec() ? t->spec()->size() : 0;
  if (!so_check(d, LLB_STATUS_MALFORMED, (int)t->kind(), len, (int)t->reasoning(), field))
    return false;
  out->kind = (llb_structured_outputs_kind)t->kind();
  out->reasoning = t->reasoning();
  return d.str(t->spec(), &out->spec, "spec");
}

// ---- MultiModalFeature -------------------------------------------------------------------

extern "C" bool llb_mm_dtype_is_encoded(struct llb_str dtype) {
  return (dtype.len == 4 && memcmp(dtype.data, "jpeg", 4) == 0) ||
         (dtype.len == 3 && memcmp(dtype.data, "png", 3) == 0);
}

extern "C" int32_t llb_mm_feature_num_embeds(const struct llb_mm_feature *f) {
  if (f->num_is_embed == 0 || !f->is_embed)
    return f->length;
  int32_t n = 0;
  for (int32_t i = 0; i < f->num_is_embed; i++)
    n += f->is_embed[i] != 0;
  return n;
}

bool check_mm_data(Ctx &c, llb_status bad, const llb_str &dtype, int32_t rows, int32_t cols,
                   int64_t bytes, const char *field) {
  if (rows < 0 || cols < 0)
    return c.fail(bad, field, "negative shape [%d, %d]", rows, cols);
  if (bytes == 0 || llb_mm_dtype_is_encoded(dtype))
    return true;
  int64_t esize = 0;
  if (dtype.len == 3 && memcmp(dtype.data, "f16", 3) == 0)
    esize = 2;
  else if (dtype.len == 3 && memcmp(dtype.data, "f32", 3) == 0)
    esize = 4;
  else
    return c.fail(bad, "dtype", "'%.*s' is not f16 or f32", (int)dtype.len,
                  dtype.data ? dtype.data : "");
  if ((int64_t)rows * cols * esize != bytes)
    return c.fail(bad, field, "%" PRId64 " bytes do not hold [%d, %d] of %.*s", bytes, rows, cols,
                  (int)dtype.len, dtype.data);
  return true;
}

fb::Offset<fb::Vector<fb::Offset<llmbus::MultiModalFeature>>>
enc_mm_features(Enc &e, const llb_mm_feature *p, int32_t n, const char *field) {
  return e.tables<llmbus::MultiModalFeature>(p, n, field, [](Enc &e, const llb_mm_feature &f) {
    fb::Offset<llmbus::MultiModalFeature> none = 0;
    if (f.data_bytes < 0 || f.data_bytes > INT32_MAX) {
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "data_bytes", "%" PRId64 " out of range", f.data_bytes);
      return none;
    }
    if (f.num_is_embed != 0 && f.num_is_embed != f.length) {
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "is_embed", "%d entries for %d positions", f.num_is_embed,
             f.length);
      return none;
    }
    if (!check_mm_data(e, LLB_STATUS_INVALID_ARGUMENT, f.dtype, llb_mm_feature_num_embeds(&f),
                       f.num_cols, f.data_bytes, "data"))
      return none;
    auto modality = e.str(f.modality, "modality", true);
    auto hash = e.str(f.mm_hash, "mm_hash");
    auto data = e.vec(f.data, (int32_t)f.data_bytes, "data");
    auto dtype = e.str(f.dtype, "dtype");
    auto is_embed = e.vec(f.is_embed, f.num_is_embed, "is_embed");
    if (f.offset < 0)
      e.fail(LLB_STATUS_INVALID_ARGUMENT, "offset", "negative (%d)", f.offset);
    if (!e.ok())
      return none;
    llmbus::MultiModalFeatureBuilder t(e.b);
    t.add_modality(modality);
    t.add_mm_hash(hash);
    t.add_offset(f.offset);
    t.add_length(f.length);
    t.add_data(data);
    t.add_dtype(dtype);
    t.add_num_cols(f.num_cols);
    t.add_is_embed(is_embed);
    return t.Finish();
  });
}

bool dec_mm_features(Dec &d, const fb::Vector<fb::Offset<llmbus::MultiModalFeature>> *v,
                     const llb_mm_feature **out, int32_t *n, const char *field) {
  return d.tables(v, out, n, field,
                  [](Dec &d, const llmbus::MultiModalFeature &t, llb_mm_feature &f) {
                    int32_t bytes = 0;
                    if (!d.str(t.modality(), &f.modality, "modality", true) ||
                        !d.str(t.mm_hash(), &f.mm_hash, "mm_hash") ||
                        !d.str(t.dtype(), &f.dtype, "dtype") ||
                        !d.vec(t.data(), &f.data, &bytes, "data") ||
                        !d.vec(t.is_embed(), &f.is_embed, &f.num_is_embed, "is_embed"))
                      return false;
                    f.offset = t.offset();
                    f.length = t.length();
                    f.num_cols = t.num_cols();
                    f.data_bytes = bytes;
                    if (f.offset < 0)
                      return d.fail(LLB_STATUS_MALFORMED, "offset", "negative (%d)", f.offset);
                    if (f.num_is_embed != 0 && f.num_is_embed != f.length)
                      return d.fail(LLB_STATUS_MALFORMED, "is_embed", "%d entries for %d positions",
                                    f.num_is_embed, f.length);
                    return check_mm_data(d, LLB_STATUS_MALFORMED, f.dtype,
                                         llb_mm_feature_num_embeds(&f), f.num_cols,
                                         f.data_bytes, "data");
                  });
}

// ---- Finishing and pre-verification ------------------------------------------------------

fb::FlatBufferBuilder &thread_builder() {
  static thread_local fb::FlatBufferBuilder b(4096);
  return b;
}

llb_status finish(Enc &e, fb::Offset<void> root, llb_message_kind kind, const Sink &out) {
  if (!e.ok())
    return e.st;
  if (!e.room(16, "(root)"))
    return e.st;
  e.b.FinishSizePrefixed(root, llb_message_kind_identifier(kind));
  size_t n = e.b.GetSize();
  if (n > LLB_MAX_MESSAGE_BYTES)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "%s: %zu bytes exceed the limit of %zu bytes "
                    "(LLB_MAX_MESSAGE_BYTES)", e.msg, n, LLB_MAX_MESSAGE_BYTES);
  if (out.grow) {
    if (out.grow->cap < n) {
      size_t cap = out.grow->cap ? out.grow->cap : 256;
      while (cap < n)
        cap *= 2;
      uint8_t *d = static_cast<uint8_t *>(realloc(out.grow->data, cap));
      if (!d)
        return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%s: growing the buffer to %zu bytes", e.msg,
                        cap);
      out.grow->data = d;
      out.grow->cap = cap;
    }
    memcpy(out.grow->data, e.b.GetBufferPointer(), n);
    out.grow->len = n;
    return LLB_STATUS_OK;
  }
  if (out.len_out)
    *out.len_out = n;
  if (!out.buf || out.cap < n)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "%s: needs %zu bytes, the buffer holds %zu", e.msg, n,
                    out.cap);
  memcpy(out.buf, e.b.GetBufferPointer(), n);
  return LLB_STATUS_OK;
}

const uint8_t *pre_verify(llb_message_kind kind, const uint8_t *buf, size_t len,
                          llb_arena *arena, llb_status *st) {
  const char *name = llb_message_kind_name(kind);
  if (!buf || !arena) {
    *st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s: NULL %s", name, buf ? "arena" : "buffer");
    return nullptr;
  }
  if (len > LLB_MAX_MESSAGE_BYTES) {
    *st = LLB_ERRF(LLB_STATUS_TOO_LARGE, "%s: %zu bytes exceed the limit of %zu bytes "
                   "(LLB_MAX_MESSAGE_BYTES)", name, len, LLB_MAX_MESSAGE_BYTES);
    return nullptr;
  }
  if (len < 12) {
    *st = LLB_ERRF(LLB_STATUS_MALFORMED, "%s: %zu bytes is shorter than any message (12)", name,
                   len);
    return nullptr;
  }
  if (memcmp(buf + 8, llb_message_kind_identifier(kind), 4) != 0) {
    char got[17];
    ident_text(buf + 8, got);
    enum llb_message_kind other = llb_message_identify(buf, len);
    *st = LLB_ERRF(LLB_STATUS_MALFORMED, "%s: expected identifier %s, got '%s' (%s)", name,
                   llb_message_kind_identifier(kind), got,
                   other ? llb_message_kind_name(other) : "not an llmbus message");
    return nullptr;
  }
  // FlatBuffers reads scalars in place: a buffer that is not 8-byte aligned (a NATS payload
  // can sit anywhere) is copied first.
  if ((uintptr_t)buf % 8 != 0) {
    void *copy = llb_arena_alloc(arena, len, 16);
    if (!copy) {
      *st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "%s: aligning %zu bytes", name, len);
      return nullptr;
    }
    memcpy(copy, buf, len);
    return static_cast<const uint8_t *>(copy);
  }
  return buf;
}

llb_status verify_failed(llb_message_kind kind, size_t len) {
  return LLB_ERRF(LLB_STATUS_MALFORMED, "%s: FlatBuffers verification failed (%zu bytes: "
                  "truncated, corrupt or not this message)", llb_message_kind_name(kind), len);
}

llb_status bad_version(llb_message_kind kind) {
  return LLB_ERRF(LLB_STATUS_MALFORMED, "%s.version: missing (0); senders write %d",
                  llb_message_kind_name(kind), LLB_SCHEMA_VERSION);
}

} // namespace llb_codec
