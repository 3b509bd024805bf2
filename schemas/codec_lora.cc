// LoRARequest (common.fbs) and the Heartbeat's LoRAAdapter entries: the adapter a request names
// and those a worker serves (vLLM LoRARequest: lora_name, lora_int_id).
#include <cstring>

#include "schemas/codec_internal.h"

extern "C" bool llb_lora_name_valid(const char *name, size_t len) {
  if (!name || len == 0 || len > LLB_LORA_NAME_MAX || name[0] == '.' || name[0] == '/' || name[0] == '-')
    return false;
  for (size_t i = 0; i < len; i++) {
    const unsigned char c = (unsigned char)name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && !(c && strchr("._-/:+", c)))
      return false;
    if (c == '.' && i + 1 < len && name[i + 1] == '.')
      return false;
  }
  return true;
}

namespace llb_codec {

bool lora_check(Ctx &c, llb_status bad, const llb_str &name, int32_t id, int32_t min_id,
                       const char *field) {
  if (!llb_lora_name_valid(name.data, name.len))
    return c.fail(bad, field,
                  "lora_name: 1..%d letters, digits and \"._-/:+\", not starting with '.', '/' or '-', "
                  "without \"..\"",
                  LLB_LORA_NAME_MAX);
  if (id < min_id)
    return c.fail(bad, field, "lora_int_id %d: >= %d", id, min_id);
  return true;
}

fb::Offset<llmbus::LoRARequest> enc_lora_request(Enc &e, const llb_lora_request &r, int32_t min_id,
                                                 const char *field) {
  if (r.lora_name.len == 0 ||
      !lora_check(e, LLB_STATUS_INVALID_ARGUMENT, r.lora_name, r.lora_int_id, min_id, field))
    return 0;
  auto name = e.str(r.lora_name, "lora_name", true);
  if (!e.ok())
    return 0;
  return llmbus::CreateLoRARequest(e.b, name, r.lora_int_id);
}

bool dec_lora_request(Dec &d, const llmbus::LoRARequest *t, int32_t min_id, llb_lora_request *out,
                      const char *field) {
  *out = llb_lora_request{};
  out->lora_name = llb_str{"", 0};  // absent: "" as every absent string decodes
  if (!t)
    return true;
  llb_str name{};
  if (!d.str(t->lora_name(), &name, field, true) ||
      !lora_check(d, LLB_STATUS_MALFORMED, name, t->lora_int_id(), min_id, field))
    return false;
  out->lora_name = name;
  out->lora_int_id = t->lora_int_id();
  return true;
}

}  // namespace llb_codec
