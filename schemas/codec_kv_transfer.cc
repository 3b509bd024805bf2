// Codecs of disaggregated prefill/decode (issue 36): KVConnectorMetadata (in SchedulerOutput),
// KVConnectorOutput (in ModelRunnerOutput), and kv_transfer.fbs's KVFetchRequest and
// KVTransferChunk with its CRC-32 (zlib).
#include <zlib.h>

#include <cmath>

#include "kv_transfer_generated.h"
#include "schemas/codec_internal.h"
#include "schemas/kv_transfer.h"

using namespace llb_codec;

namespace {

int32_t blocks_for(int32_t num_tokens, int32_t block_size) {
  return (int32_t)(((int64_t)num_tokens + block_size - 1) / block_size);
}

// A request id of a transfer: 1..LLB_KV_REQ_ID_MAX bytes (the Dec/Enc str refuses NUL and empty).
bool id_len_ok(Ctx &c, llb_status bad, const llb_str &s, const char *field) {
  if (s.len > LLB_KV_REQ_ID_MAX)
    return c.fail(bad, field, "%zu bytes, at most %d", s.len, LLB_KV_REQ_ID_MAX);
  return true;
}

// Block ids (cache indices) are >= 0 and there are 1..LLB_KV_MAX_BLOCKS_PER_REQ of them.
bool block_ids_ok(Ctx &c, llb_status bad, const int32_t *ids, int32_t n, const char *field) {
  if (n < 1 || n > LLB_KV_MAX_BLOCKS_PER_REQ)
    return c.fail(bad, field, "%d blocks, must be 1..%d", n, LLB_KV_MAX_BLOCKS_PER_REQ);
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0)
      return c.fail(bad, field, "[%d] = %d, a block id is >= 0", i, ids[i]);
  return true;
}

bool recv_ok(Ctx &c, llb_status bad, const llb_kv_recv_request &r, int32_t block_size) {
  if (!id_len_ok(c, bad, r.req_id, "req_id") || !id_len_ok(c, bad, r.remote_request_id, "remote_request_id") ||
      !block_ids_ok(c, bad, r.local_block_ids, r.num_local_block_ids, "local_block_ids"))
    return false;
  if (!token_valid(r.remote_engine_id, 64))
    return c.fail(bad, "remote_engine_id", "must be 1..64 letters, digits, '-' and '_'");
  if (r.num_tokens < 1)
    return c.fail(bad, "num_tokens", "%d, must be >= 1", r.num_tokens);
  if (r.remote_first_block < 0 ||
      (int64_t)r.remote_first_block + r.num_local_block_ids != blocks_for(r.num_tokens, block_size))
    return c.fail(bad, "remote_first_block",
                  "%d + %d local blocks, but %d tokens fill %d blocks of %d", r.remote_first_block,
                  r.num_local_block_ids, r.num_tokens, blocks_for(r.num_tokens, block_size), block_size);
  return true;
}

bool send_ok(Ctx &c, llb_status bad, const llb_kv_send_request &r, int32_t block_size) {
  if (!id_len_ok(c, bad, r.req_id, "req_id") ||
      !block_ids_ok(c, bad, r.block_ids, r.num_block_ids, "block_ids"))
    return false;
  if (r.num_tokens < 1 || r.num_block_ids != blocks_for(r.num_tokens, block_size))
    return c.fail(bad, "num_tokens", "%d tokens in %d blocks of %d (must fill them: ceil)",
                  r.num_tokens, r.num_block_ids, block_size);
  if (!std::isfinite(r.expires_in_s) || r.expires_in_s <= 0.0f || r.expires_in_s > LLB_KV_MAX_EXPIRES_S)
    return c.fail(bad, "expires_in_s", "%g, must be finite in (0, %g]", (double)r.expires_in_s,
                  (double)LLB_KV_MAX_EXPIRES_S);
  return true;
}

bool ids_ok(Ctx &c, llb_status bad, const llb_str *ids, int32_t n, const char *field) {
  for (int32_t i = 0; i < n; i++) {
    Scope s(c, field, i);
    if (ids[i].len == 0 || !id_len_ok(c, bad, ids[i], "req_id"))
      return ids[i].len == 0 ? c.fail(bad, "req_id", "required string is empty") : false;
  }
  return true;
}

} // namespace

fb::Offset<llmbus::KVConnectorMetadata> llb_codec::enc_kv_metadata(Enc &e, const llb_kv_connector_metadata &m,
                                                                   int32_t block_size, const char *field) {
  if (m.num_reqs_to_recv == 0 && m.num_reqs_to_send == 0 && m.epoch == 0)
    return 0;
  Scope s(e, field, 0);
  auto recv = e.tables<llmbus::KVRecvRequest>(
      m.reqs_to_recv, m.num_reqs_to_recv, "reqs_to_recv", [block_size](Enc &e, const llb_kv_recv_request &r) {
        auto id = e.str(r.req_id, "req_id", true);
        auto blocks = e.vec(r.local_block_ids, r.num_local_block_ids, "local_block_ids");
        auto eid = e.str(r.remote_engine_id, "remote_engine_id", true);
        auto rid = e.str(r.remote_request_id, "remote_request_id", true);
        if (!e.ok() || !recv_ok(e, LLB_STATUS_INVALID_ARGUMENT, r, block_size))
          return fb::Offset<llmbus::KVRecvRequest>(0);
        return llmbus::CreateKVRecvRequest(e.b, id, blocks, eid, rid, r.remote_first_block, r.num_tokens);
      });
  auto send = e.tables<llmbus::KVSendRequest>(
      m.reqs_to_send, m.num_reqs_to_send, "reqs_to_send", [block_size](Enc &e, const llb_kv_send_request &r) {
        auto id = e.str(r.req_id, "req_id", true);
        auto blocks = e.vec(r.block_ids, r.num_block_ids, "block_ids");
        if (!e.ok() || !send_ok(e, LLB_STATUS_INVALID_ARGUMENT, r, block_size))
          return fb::Offset<llmbus::KVSendRequest>(0);
        return llmbus::CreateKVSendRequest(e.b, id, blocks, r.num_tokens, r.expires_in_s);
      });
  if (!e.ok())
    return 0;
  return llmbus::CreateKVConnectorMetadata(e.b, recv, send, m.epoch);
}

bool llb_codec::dec_kv_metadata(Dec &d, const llmbus::KVConnectorMetadata *t, int32_t block_size,
                                llb_kv_connector_metadata *out, const char *field) {
  *out = llb_kv_connector_metadata{};
  if (!t)
    return true;
  Scope s(d, field, 0);
  out->epoch = t->epoch();
  return d.tables(t->reqs_to_recv(), &out->reqs_to_recv, &out->num_reqs_to_recv, "reqs_to_recv",
                  [block_size](Dec &d, const llmbus::KVRecvRequest &r, llb_kv_recv_request &o) {
                    o.remote_first_block = r.remote_first_block();
                    o.num_tokens = r.num_tokens();
                    return d.str(r.req_id(), &o.req_id, "req_id", true) &&
                           d.vec(r.local_block_ids(), &o.local_block_ids, &o.num_local_block_ids,
                                 "local_block_ids") &&
                           d.str(r.remote_engine_id(), &o.remote_engine_id, "remote_engine_id", true) &&
                           d.str(r.remote_request_id(), &o.remote_request_id, "remote_request_id", true) &&
                           recv_ok(d, LLB_STATUS_MALFORMED, o, block_size);
                  }) &&
         d.tables(t->reqs_to_send(), &out->reqs_to_send, &out->num_reqs_to_send, "reqs_to_send",
                  [block_size](Dec &d, const llmbus::KVSendRequest &r, llb_kv_send_request &o) {
                    o.num_tokens = r.num_tokens();
                    o.expires_in_s = r.expires_in_s();
                    return d.str(r.req_id(), &o.req_id, "req_id", true) &&
                           d.vec(r.block_ids(), &o.block_ids, &o.num_block_ids, "block_ids") &&
                           send_ok(d, LLB_STATUS_MALFORMED, o, block_size);
                  });
}

fb::Offset<llmbus::KVConnectorOutput> llb_codec::enc_kv_output(Enc &e, const llb_kv_connector_output &o,
                                                               const char *field) {
  if (o.num_finished_sending == 0 && o.num_finished_recving == 0 && o.num_failed_recving == 0)
    return 0;
  Scope s(e, field, 0);
  if (!ids_ok(e, LLB_STATUS_INVALID_ARGUMENT, o.finished_sending, o.num_finished_sending, "finished_sending") ||
      !ids_ok(e, LLB_STATUS_INVALID_ARGUMENT, o.finished_recving, o.num_finished_recving, "finished_recving") ||
      !ids_ok(e, LLB_STATUS_INVALID_ARGUMENT, o.failed_recving, o.num_failed_recving, "failed_recving"))
    return 0;
  auto sending = e.strs(o.finished_sending, o.num_finished_sending, "finished_sending");
  auto recving = e.strs(o.finished_recving, o.num_finished_recving, "finished_recving");
  auto failed = e.strs(o.failed_recving, o.num_failed_recving, "failed_recving");
  if (!e.ok())
    return 0;
  return llmbus::CreateKVConnectorOutput(e.b, sending, recving, failed);
}

bool llb_codec::dec_kv_output(Dec &d, const llmbus::KVConnectorOutput *t, llb_kv_connector_output *out,
                              const char *field) {
  *out = llb_kv_connector_output{};
  if (!t)
    return true;
  Scope s(d, field, 0);
  return d.strs(t->finished_sending(), &out->finished_sending, &out->num_finished_sending, "finished_sending") &&
         d.strs(t->finished_recving(), &out->finished_recving, &out->num_finished_recving, "finished_recving") &&
         d.strs(t->failed_recving(), &out->failed_recving, &out->num_failed_recving, "failed_recving") &&
         ids_ok(d, LLB_STATUS_MALFORMED, out->finished_sending, out->num_finished_sending, "finished_sending") &&
         ids_ok(d, LLB_STATUS_MALFORMED, out->finished_recving, out->num_finished_recving, "finished_recving") &&
         ids_ok(d, LLB_STATUS_MALFORMED, out->failed_recving, out->num_failed_recving, "failed_recving");
}

// ---- KVFetchRequest ------------------------------------------------------------------------

namespace {

bool fetch_ok(Ctx &c, llb_status bad, const llb_kv_fetch_request &m) {
  if (!id_len_ok(c, bad, m.request_id, "request_id"))
    return false;
  if (m.first_block < 0 || m.num_blocks < (m.last ? 0 : 1) || m.num_blocks > LLB_KV_MAX_BLOCKS_PER_REQ ||
      (int64_t)m.first_block + m.num_blocks > LLB_KV_MAX_BLOCKS_PER_REQ)
    return c.fail(bad, "num_blocks", "blocks [%d, +%d): first >= 0, 1..%d blocks, below %d", m.first_block,
                  m.num_blocks, LLB_KV_MAX_BLOCKS_PER_REQ, LLB_KV_MAX_BLOCKS_PER_REQ);
  return true;
}

} // namespace

static fb::Offset<void> build_kv_fetch_request(Enc &e, const llb_kv_fetch_request &m) {
  auto id = e.str(m.request_id, "request_id", true);
  if (!e.ok() || !fetch_ok(e, LLB_STATUS_INVALID_ARGUMENT, m))
    return 0;
  return llmbus::CreateKVFetchRequest(e.b, LLB_SCHEMA_VERSION, id, m.first_block, m.num_blocks, m.last, m.generation)
      .Union();
}

static bool read_kv_fetch_request(Dec &d, const llmbus::KVFetchRequest &t, llb_kv_fetch_request &m) {
  m.first_block = t.first_block();
  m.num_blocks = t.num_blocks();
  m.last = t.last();
  m.generation = t.generation();
  return d.str(t.request_id(), &m.request_id, "request_id", true) && fetch_ok(d, LLB_STATUS_MALFORMED, m);
}

LLB_CODEC_DEFINE(kv_fetch_request, KVFetchRequest, LLB_MESSAGE_KIND_KV_FETCH_REQUEST)

// ---- KVTransferChunk -----------------------------------------------------------------------

extern "C" const char *llb_kv_transfer_status_name(int32_t s) {
  static const char *const names[] = {"Ok", "NotReady", "Unknown", "OutOfRange", "Expired", "Error"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

extern "C" uint32_t llb_kv_transfer_chunk_checksum(const struct llb_kv_transfer_chunk *m) {
  const uint32_t head[10] = {(uint32_t)m->first_block,  (uint32_t)m->num_blocks, (uint32_t)m->block_size,
                             (uint32_t)m->num_layers,   (uint32_t)m->num_kv_heads, (uint32_t)m->head_dim,
                             (uint32_t)m->kv_cache_dtype, m->block_bytes,        (uint32_t)m->num_tokens,
                             (uint32_t)m->status};
  uLong crc = crc32_z(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef *>(head), sizeof head); // little endian (codec_internal.h)
  if (m->request_id.len)
    crc = crc32_z(crc, reinterpret_cast<const Bytef *>(m->request_id.data), m->request_id.len);
  if (m->data_len)
    crc = crc32_z(crc, m->data, m->data_len);
  return (uint32_t)crc;
}

namespace {

// The chunk's meaning: an OK chunk carries a geometry in bounds and exactly its blocks' bytes;
// any other carries no data and an error.
bool chunk_ok(Ctx &c, llb_status bad, const llb_kv_transfer_chunk &m) {
  if (!id_len_ok(c, bad, m.request_id, "request_id"))
    return false;
  if ((unsigned)m.status > LLB_KV_TRANSFER_ERROR)
    return c.fail(bad, "status", "unknown value %d", (int)m.status);
  if (m.first_block < 0 || m.num_tokens < 0)
    return c.fail(bad, "first_block", "first_block %d, num_tokens %d: both >= 0", m.first_block, m.num_tokens);
  if (m.status == LLB_KV_TRANSFER_NOT_READY && m.generation != 0)
    return c.fail(bad, "generation", "%llu with status NotReady (no export found: 0)",
                  (unsigned long long)m.generation);
  if (m.data_len > LLB_KV_MAX_CHUNK_DATA_BYTES)
    return c.fail(bad, "data", "%zu bytes, at most %zu", m.data_len, LLB_KV_MAX_CHUNK_DATA_BYTES);
  if (m.status != LLB_KV_TRANSFER_OK) {
    if (m.num_blocks != 0 || m.data_len != 0)
      return c.fail(bad, "data", "status %s carries %d blocks, %zu bytes (none allowed)",
                    llb_kv_transfer_status_name(m.status), m.num_blocks, m.data_len);
    if (m.error.code == 0)
      return c.fail(bad, "error", "status %s needs an error", llb_kv_transfer_status_name(m.status));
    return true;
  }
  if (m.num_blocks < 1 || m.num_blocks > LLB_KV_MAX_BLOCKS_PER_REQ || m.block_size < 1 ||
      m.block_size > LLB_KV_MAX_BLOCK_SIZE || m.num_layers < 1 || m.num_layers > LLB_KV_MAX_LAYERS ||
      m.num_kv_heads < 1 || m.num_kv_heads > LLB_KV_MAX_HEADS || m.head_dim < 1 || m.head_dim > LLB_KV_MAX_HEAD_DIM ||
      m.block_bytes < 1)
    return c.fail(bad, "num_blocks",
                  "geometry out of range: %d blocks of %d tokens, %d layers, %d kv heads, head_dim %d, %u bytes",
                  m.num_blocks, m.block_size, m.num_layers, m.num_kv_heads, m.head_dim, m.block_bytes);
  if ((uint64_t)m.num_blocks * m.block_bytes != m.data_len)
    return c.fail(bad, "data", "%zu bytes for %d blocks of %u", m.data_len, m.num_blocks, m.block_bytes);
  return true;
}

} // namespace

static fb::Offset<void> build_kv_transfer_chunk(Enc &e, const llb_kv_transfer_chunk &m) {
  auto id = e.str(m.request_id, "request_id", true);
  if (!e.ok() || !chunk_ok(e, LLB_STATUS_INVALID_ARGUMENT, m) || !e.count(m.data, (int64_t)m.data_len, "data") ||
      !e.room(m.data_len, "data"))
    return 0;
  auto data = m.data_len ? e.b.CreateVector(m.data, m.data_len) : 0;
  auto err = enc_error(e, m.error, "error");
  if (!e.ok())
    return 0;
  llmbus::KVTransferChunkBuilder t(e.b);
  t.add_version(LLB_SCHEMA_VERSION);
  t.add_request_id(id);
  t.add_first_block(m.first_block);
  t.add_num_blocks(m.num_blocks);
  t.add_block_size(m.block_size);
  t.add_num_layers(m.num_layers);
  t.add_num_kv_heads(m.num_kv_heads);
  t.add_head_dim(m.head_dim);
  t.add_kv_cache_dtype(m.kv_cache_dtype);
  t.add_block_bytes(m.block_bytes);
  t.add_num_tokens(m.num_tokens);
  t.add_data(data);
  t.add_checksum(llb_kv_transfer_chunk_checksum(&m));
  t.add_status(static_cast<llmbus::KVTransferStatus>(m.status));
  t.add_error(err);
  t.add_generation(m.generation);
  t.add_incarnation(m.incarnation);
  t.add_worker_steps(m.worker_steps);
  t.add_worker_busy(m.worker_busy);
  return t.Finish().Union();
}

static bool read_kv_transfer_chunk(Dec &d, const llmbus::KVTransferChunk &t, llb_kv_transfer_chunk &m) {
  m.first_block = t.first_block();
  m.num_blocks = t.num_blocks();
  m.block_size = t.block_size();
  m.num_layers = t.num_layers();
  m.num_kv_heads = t.num_kv_heads();
  m.head_dim = t.head_dim();
  m.kv_cache_dtype = t.kv_cache_dtype();
  m.block_bytes = t.block_bytes();
  m.num_tokens = t.num_tokens();
  m.checksum = t.checksum();
  m.status = (int32_t)t.status();
  m.generation = t.generation();
  m.incarnation = t.incarnation();
  m.worker_steps = t.worker_steps();
  m.worker_busy = t.worker_busy();
  int32_t n = 0;
  if (!d.str(t.request_id(), &m.request_id, "request_id", true) || !d.vec(t.data(), &m.data, &n, "data") ||
      !dec_error(d, t.error(), &m.error, "error"))
    return false;
  m.data_len = (size_t)n;
  if (!chunk_ok(d, LLB_STATUS_MALFORMED, m))
    return false;
  const uint32_t want = llb_kv_transfer_chunk_checksum(&m);
  if (want != m.checksum)
    return d.fail(LLB_STATUS_MALFORMED, "checksum", "0x%08x, the header and %zu data bytes give 0x%08x: corrupted",
                  m.checksum, m.data_len, want);
  return true;
}

LLB_CODEC_DEFINE(kv_transfer_chunk, KVTransferChunk, LLB_MESSAGE_KIND_KV_TRANSFER_CHUNK)
