// PoolingParams (common.fbs) and the pooled vectors that ModelRunnerOutput, EngineCoreOutput
// and RequestOutput carry (vLLM pooling_params / pooler_output / pooling_output).
#include <cmath>
#include <cstring>

#include "schemas/codec_internal.h"

namespace llb_codec {

static bool pooling_check(Ctx &c, llb_status bad, int type, int32_t dimensions,
                          const char *field) {
  if (type < LLB_POOLING_NONE || type > LLB_POOLING_CLS)
    return c.fail(bad, field, "pooling_type %d is not a PoolingType", type);
  if (dimensions < 0 || dimensions > LLB_MAX_POOLED_DIMS)
    return c.fail(bad, field, "dimensions %d not in [0, %d]", dimensions, LLB_MAX_POOLED_DIMS);
  return true;
}

fb::Offset<llmbus::PoolingParams> enc_pooling_params(Enc &e, const llb_pooling_params &p,
                                                     const char *field) {
  // A C caller may store any int in the enum; reading it as the C++ enum would be UB.
  static_assert(sizeof(llb_pooling_type) == sizeof(int), "C enum is an int");
  int type;
  memcpy(&type, &p.pooling_type, sizeof type);
  if (!pooling_check(e, LLB_STATUS_INVALID_ARGUMENT, type, p.dimensions, field) || type == LLB_POOLING_NONE)
    return 0;
  return llmbus::CreatePoolingParams(e.b, (llmbus::PoolingType)p.pooling_type, p.normalize,
                                     p.dimensions);
}

bool dec_pooling_params(Dec &d, const llmbus::PoolingParams *t, llb_pooling_params *out,
                        const char *field) {
  *out = llb_pooling_params{};
  if (!t)
    return true;
  if (t->pooling_type() == llmbus::PoolingType_None)
    return d.fail(LLB_STATUS_MALFORMED, field, "present with pooling_type None");
  if (!pooling_check(d, LLB_STATUS_MALFORMED, (int)t->pooling_type(), t->dimensions(), field))
    return false;
  out->pooling_type = (llb_pooling_type)t->pooling_type();
  out->normalize = t->normalize();
  out->dimensions = t->dimensions();
  return true;
}

static bool pooled_check(Ctx &c, llb_status bad, const float *p, int64_t n, const char *field) {
  if (n > LLB_MAX_POOLED_DIMS)
    return c.fail(bad, field, "%lld floats, at most %d", (long long)n, LLB_MAX_POOLED_DIMS);
  for (int64_t i = 0; i < n; i++)
    if (!std::isfinite(p[i]))
      return c.fail(bad, field, "element %lld is not finite", (long long)i);
  return true;
}

fb::Offset<fb::Vector<float>> enc_pooled(Enc &e, const float *p, int32_t n, const char *field) {
  if (!e.count(p, n, field) || !pooled_check(e, LLB_STATUS_INVALID_ARGUMENT, p, n, field))
    return 0;
  return e.vec(p, n, field);
}

bool dec_pooled(Dec &d, const fb::Vector<float> *v, const float **out, int32_t *n,
                const char *field) {
  if (v && !pooled_check(d, LLB_STATUS_MALFORMED, v->data(), v->size(), field))
    return false;
  return d.vec(v, out, n, field);
}

}  // namespace llb_codec
