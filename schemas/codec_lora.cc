// LoRARequest (common.fbs), the Heartbeat's LoRAAdapter entries and LoRAUpdate / LoRAUpdateReply
// (control.fbs): the adapter a request names, those a worker serves (vLLM LoRARequest: lora_name,
// lora_int_id) and the run-time loading of adapters.
#include <cstring>

#include "control_generated.h"
#include "schemas/codec_internal.h"
#include "schemas/control.h"

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

bool llb_codec::token_valid(const llb_str &t, size_t max_len) {
  if (t.len == 0 || t.len > max_len)
    return false;
  for (size_t i = 0; i < t.len; i++) {
    const unsigned char c = (unsigned char)t.data[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  }
  return true;
}

namespace {

bool tenant_valid(const llb_str &t) { return llb_codec::token_valid(t, LLB_LORA_TENANT_MAX); }

// Relative, 1..LLB_LORA_PATH_MAX bytes, no NUL, no ".." component (the worker also opens it
// beneath its --lora-dir only: this keeps nonsense off the wire).
bool path_valid(const llb_str &p) {
  if (p.len == 0 || p.len > LLB_LORA_PATH_MAX || p.data[0] == '/' || memchr(p.data, '\0', p.len))
    return false;
  for (size_t i = 0; i < p.len;) {
    size_t j = i;
    while (j < p.len && p.data[j] != '/')
      j++;
    if (j - i == 2 && p.data[i] == '.' && p.data[i + 1] == '.')
      return false;
    i = j + 1;
  }
  return true;
}

}  // namespace

namespace llb_codec {

// The dynamic fields of a LoRAAdapter or a LoRAUpdate load: path and tenant as above.
bool lora_dynamic_check(Ctx &c, llb_status bad, const llb_str &path, const llb_str &tenant) {
  if (!path_valid(path))
    return c.fail(bad, "lora_path", "1..%d bytes, relative, without \"..\" or NUL", LLB_LORA_PATH_MAX);
  if (!tenant_valid(tenant))
    return c.fail(bad, "tenant", "1..%d letters, digits, '-' and '_'", LLB_LORA_TENANT_MAX);
  return true;
}

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

using namespace llb_codec;

// ---- LoRAUpdate --------------------------------------------------------------------------

static bool lora_update_check(Ctx &c, llb_status bad, const llb_lora_update &m) {
  if (m.op != LLB_LORA_UPDATE_LOAD && m.op != LLB_LORA_UPDATE_UNLOAD)
    return c.fail(bad, "op", "%d: 0 (load) or 1 (unload)", m.op);
  if (!lora_check(c, bad, m.lora_name, 1, 1, "lora_name"))
    return false;
  return m.op != LLB_LORA_UPDATE_LOAD || lora_dynamic_check(c, bad, m.lora_path, m.tenant);
}

static fb::Offset<void> build_lora_update(Enc &e, const llb_lora_update &m) {
  if (!lora_update_check(e, LLB_STATUS_INVALID_ARGUMENT, m))
    return 0;
  auto name = e.str(m.lora_name, "lora_name", true);
  auto path = e.str(m.lora_path, "lora_path");
  auto tenant = e.str(m.tenant, "tenant");
  if (!e.ok())
    return 0;
  return llmbus::CreateLoRAUpdate(e.b, LLB_SCHEMA_VERSION, m.op, name, path, tenant).Union();
}

static bool read_lora_update(Dec &d, const llmbus::LoRAUpdate &t, llb_lora_update &m) {
  m.op = t.op();
  return d.str(t.lora_name(), &m.lora_name, "lora_name", true) && d.str(t.lora_path(), &m.lora_path, "lora_path") &&
         d.str(t.tenant(), &m.tenant, "tenant") && lora_update_check(d, LLB_STATUS_MALFORMED, m);
}

LLB_CODEC_DEFINE(lora_update, LoRAUpdate, LLB_MESSAGE_KIND_LORA_UPDATE)

// ---- LoRAUpdateReply ---------------------------------------------------------------------

static fb::Offset<void> build_lora_update_reply(Enc &e, const llb_lora_update_reply &m) {
  auto engine = e.str(m.engine_id, "engine_id");
  auto err = enc_error(e, m.error, "error");
  if (!e.ok())
    return 0;
  return llmbus::CreateLoRAUpdateReply(e.b, LLB_SCHEMA_VERSION, engine, err).Union();
}

static bool read_lora_update_reply(Dec &d, const llmbus::LoRAUpdateReply &t, llb_lora_update_reply &m) {
  return d.str(t.engine_id(), &m.engine_id, "engine_id") && dec_error(d, t.error(), &m.error, "error");
}

LLB_CODEC_DEFINE(lora_update_reply, LoRAUpdateReply, LLB_MESSAGE_KIND_LORA_UPDATE_REPLY)
