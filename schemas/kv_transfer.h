/* KV blocks moved between workers (disaggregated prefill/decode, issue 36;
 * schemas/kv_transfer.fbs): KVFetchRequest (identifier LKVF) and KVTransferChunk (LKVC), request
 * and reply on <prefix>.engine.<eid>.kv_fetch (bus/subject.h bus_subject_kv_fetch), served by
 * engine <eid>'s worker (actors/gpu_worker/kv_transfer.h). Also the limits the step messages'
 * KVConnectorMetadata / KVConnectorOutput (scheduler_output.h, model_runner_output.h) are
 * checked against. Conventions: codec.h. */
#ifndef LLB_SCHEMAS_KV_TRANSFER_H
#define LLB_SCHEMAS_KV_TRANSFER_H

#include "schemas/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLB_KV_REQ_ID_MAX 255                  /* bytes of a request id in a KV transfer */
#define LLB_KV_MAX_BLOCKS_PER_REQ (1 << 17)    /* blocks of one request's transfer */
#define LLB_KV_MAX_EXPIRES_S 3600.0f           /* KVSendRequest.expires_in_s upper bound */
#define LLB_KV_MAX_LAYERS 1024                 /* KVTransferChunk geometry bounds */
#define LLB_KV_MAX_HEADS 1024
#define LLB_KV_MAX_HEAD_DIM 4096
#define LLB_KV_MAX_BLOCK_SIZE 4096
/* Largest KVTransferChunk.data: the rest of a message's room for the header. The sender sizes
 * its chunks under the bus's max_payload too (1 MiB by default). */
#define LLB_KV_MAX_CHUNK_DATA_BYTES (LLB_MAX_MESSAGE_BYTES - (size_t)64 * 1024)

/* Blocks [first_block, first_block + num_blocks) of the export of request_id: indices into that
 * export's KVSendRequest.block_ids, never cache block ids. Checked both ways: request_id 1..
 * LLB_KV_REQ_ID_MAX bytes, first_block >= 0, num_blocks in [1, LLB_KV_MAX_BLOCKS_PER_REQ] (0 only
 * with last: a release, the fetcher failed or gave up and needs nothing of the export),
 * first_block + num_blocks <= LLB_KV_MAX_BLOCKS_PER_REQ. generation: any value (0 = not known;
 * absent on old messages: 0); the exporter checks it against its export's. */
struct llb_kv_fetch_request {
  uint16_t version;
  struct llb_str request_id;
  int32_t first_block;
  int32_t num_blocks;
  bool last;           /* the fetcher's last request of this export (the export ends on a release) */
  uint64_t generation; /* the export's, from an earlier reply; 0 = not known yet: any export of the id */
};

/* kv_transfer.fbs KVTransferStatus. */
enum llb_kv_transfer_status {
  LLB_KV_TRANSFER_OK = 0,           /* data holds the blocks */
  LLB_KV_TRANSFER_NOT_READY = 1,    /* no export of that id yet: the fetcher retries until its deadline */
  LLB_KV_TRANSFER_UNKNOWN = 2,      /* not exported here (never, or finished) */
  LLB_KV_TRANSFER_OUT_OF_RANGE = 3, /* blocks beyond the export's */
  LLB_KV_TRANSFER_EXPIRED = 4,      /* the export expired before this fetch */
  LLB_KV_TRANSFER_ERROR = 5,        /* anything else; error says what */
};

/* The reply to a KVFetchRequest. With status OK: data holds num_blocks blocks in order, each block
 * its layers in order, each layer its K rows then its V rows ([block_size, num_kv_heads] rows of
 * backend_kv_row_bytes(kv_cache_dtype, head_dim) bytes): num_blocks * block_bytes bytes, the
 * geometry in [1, LLB_KV_MAX_*], block_bytes >= 1; the receiver compares the geometry with its
 * own cache's. Otherwise num_blocks 0, no data, and error.code != 0 says why.
 * checksum: CRC-32 (zlib crc32_z) over the little-endian header fields (first_block, num_blocks,
 * block_size, num_layers, num_kv_heads, head_dim, kv_cache_dtype as 4 bytes, block_bytes,
 * num_tokens, status as 4 bytes), the request_id bytes, then data. The encoder computes it (the
 * view's value is ignored); the decoder recomputes it and refuses a mismatch (MALFORMED naming
 * KVTransferChunk.checksum), and fills the view's with the wire value. generation is outside the
 * checksum (so that old peers' chunks still check); NotReady (no export found) carries 0, checked
 * both ways. */
struct llb_kv_transfer_chunk {
  uint16_t version;
  struct llb_str request_id;         /* required: as fetched */
  int32_t first_block;               /* >= 0 */
  int32_t num_blocks;                /* OK: >= 1; else 0 */
  int32_t block_size;
  int32_t num_layers;
  int32_t num_kv_heads;
  int32_t head_dim;
  uint8_t kv_cache_dtype;            /* kernels/backend.h enum backend_kv_dtype */
  uint32_t block_bytes;
  int32_t num_tokens;                /* the export's KVSendRequest.num_tokens (>= 0) */
  const uint8_t *data;               /* [data_len] */
  size_t data_len;                   /* OK: num_blocks * block_bytes, <= LLB_KV_MAX_CHUNK_DATA_BYTES */
  uint32_t checksum;
  int32_t status;                    /* enum llb_kv_transfer_status (checked in range) */
  struct llb_error_info error;       /* status != OK: code != 0 */
  uint64_t generation;               /* the export's (never 0 from this exporter); 0: none found, or an
                                        exporter older than the field */
  uint64_t incarnation;              /* the exporting worker's, drawn at its start, on every reply
                                        (any status, never 0 from this exporter; 0: an exporter
                                        older than the field); outside the checksum */
  uint64_t worker_steps;             /* steps that worker has begun, exports registered (0: none, or
                                        an older exporter); outside the checksum */
  bool worker_busy;                  /* a step executes on that worker now; outside the checksum */
};

/* CRC-32 of a chunk's header fields and data as defined above (what encode writes). */
uint32_t llb_kv_transfer_chunk_checksum(const struct llb_kv_transfer_chunk *m);

/* "Ok", "NotReady", "Unknown", "OutOfRange", "Expired", "Error"; "?" otherwise. */
const char *llb_kv_transfer_status_name(int32_t s);

llb_status llb_kv_fetch_request_encode(const struct llb_kv_fetch_request *m, uint8_t *buf, size_t cap,
                                       size_t *len_out);
llb_status llb_kv_fetch_request_encode_buf(const struct llb_kv_fetch_request *m, struct llb_buf *out);
llb_status llb_kv_fetch_request_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                       struct llb_kv_fetch_request *out);

/* Encoding copies data into the message (into buf / out). Decoding copies data into the arena
 * (like every array): a chunk of blocks costs its size twice while both live. */
llb_status llb_kv_transfer_chunk_encode(const struct llb_kv_transfer_chunk *m, uint8_t *buf, size_t cap,
                                        size_t *len_out);
llb_status llb_kv_transfer_chunk_encode_buf(const struct llb_kv_transfer_chunk *m, struct llb_buf *out);
llb_status llb_kv_transfer_chunk_decode(const uint8_t *buf, size_t len, struct llb_arena *arena,
                                        struct llb_kv_transfer_chunk *out);

#ifdef __cplusplus
}
#endif

#endif
