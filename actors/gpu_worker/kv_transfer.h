/* The worker's KV connector (disaggregated prefill/decode, issue 36): moves a request's KV blocks
 * from a prefill engine's worker to a decode engine's worker over the bus. vLLM v1's KV connector
 * (vllm/distributed/kv_transfer/kv_connector/v1/base.py; nixl_connector.py): a PULL design, the
 * decode side's worker reads the blocks the prefill side's worker exports.
 *
 * Per step (the actor's on_execute, on the execute thread):
 *   kv_connector_before_step(c, &so->kv_connector_metadata, finished ids)  before model_runner_execute:
 *     reqs_to_send: each becomes an export (kv_export.h) of a new generation: its blocks are
 *       served to fetches naming its req_id (and, once the fetcher learnt it from a reply, its
 *       generation) until the fetcher releases it or expires_in_s passed;
 *     reqs_to_recv: each becomes a fetch job of the background fetcher (kv_fetcher.h), whose
 *       threads (fetch_threads) each take one job at a time and ask
 *       <prefix>.engine.<remote_engine_id>.kv_fetch for blocks remote_first_block.. in chunks
 *       under the bus's max_payload, writing them into local_block_ids of this runner's cache;
 *     epoch: when it differs from the last step's, every export held is dropped first, unreported
 *       (the scheduler restarted, or its kv_manager may have lost its state: those blocks are no
 *       longer held and may be reallocated in this step);
 *     finished_req_ids / preempted_req_ids: a fetch still running for one of them is cancelled
 *       before the step (its blocks may be handed to another request) and reported failed.
 *   kv_connector_after_step(c, &out->kv_connector_output)  after it, also after a failed step:
 *     the ids whose transfer ended since the last call: finished_sending (released or expired:
 *     the scheduler frees the blocks), finished_recving (every block written: the tokens are
 *     computed), failed_recving (the scheduler recomputes the request).
 * The service: <prefix>.engine.<eid>.kv_fetch (bus_subject_kv_fetch), one subscription whose
 * handler answers each KVFetchRequest with one KVTransferChunk (kv_connector_serve). Only blocks
 * listed in a reqs_to_send of that request id are ever served (never arbitrary blocks: they hold
 * other tenants' KV); anything else gets a chunk with an error status (Unknown, NotReady,
 * OutOfRange, Expired, Error), never data.
 *
 * Every reply the fetcher receives is checked before a byte is written: the codec (verifier,
 * bounds, CRC-32 over header and data), then the request id, block range and token count asked
 * for, and a geometry (block size, layers, KV heads, head_dim, cache dtype, block bytes) equal to
 * this runner's. A NotReady reply is retried every retry_ms until the transfer's deadline, unless
 * the export can no longer come: it was there before, the exporting worker restarted (another
 * KVTransferChunk.incarnation), began two more steps since the first NotReady (the step carrying
 * an export is at most the second after the hand-off), or idled not_ready_timeout_ms; a
 * request with no reply (a lost chunk) is sent again up to max_attempts times; a bad checksum, a
 * geometry mismatch, an unknown or expired export fail the transfer at once (failed_recving).
 * Every chunk names its export's generation; the fetcher names it in its later requests and in
 * its release (a KVFetchRequest of no blocks, last), published when the receive ends, finished or
 * failed (not cancelled). An export ends only on a release naming its generation, or at its
 * expiry: a lost reply, of the last chunk too, is fetched again; a stale or duplicated release
 * of an earlier export of the same id (the request was exported again) is refused (logged
 * kv_release_refused) and ends nothing; a fetch naming another generation gets Unknown.
 *
 * Devices: the CPU runner's cache is read and written in place (model_runner_kv_block_read /
 * _write); the sim runner has no KV memory and moves zero bytes of the real size (so the wire
 * cost is the real one); the CUDA runner refuses: kv_connector_create returns UNSUPPORTED.
 *
 * Threads: before_step / after_step / destroy on the execute thread; the service handler on its
 * subscription's delivery thread; the fetcher on threads of its own. Exported blocks are read
 * and received blocks written while steps run: the scheduler guarantees that no step touches
 * them (an export's blocks stay allocated until finished_sending; a receiving request is not
 * scheduled until finished_recving).
 */
#ifndef LLB_GPU_WORKER_KV_TRANSFER_H
#define LLB_GPU_WORKER_KV_TRANSFER_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/gpu_worker/model_runner.h"
#include "base/status.h"
#include "bus/bus.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

struct kv_connector_config {
  const char *engine_id;          /* this engine's id (a subject token); required */
  int32_t max_export_reqs;        /* requests exported at once; 0 = 4096 */
  int64_t max_export_blocks;      /* blocks exported at once, all requests; 0 = the cache's blocks */
  int64_t fetch_timeout_ms;       /* one KVFetchRequest's wait for its reply; 0 = 5000 */
  int64_t transfer_timeout_ms;    /* a whole transfer's deadline (NotReady retries included); 0 = 60000 */
  int64_t not_ready_timeout_ms;   /* NotReady answers in a row for this long while the exporting
                                     worker runs no step end the receive (failed: the scheduler
                                     recomputes); 0 = 10000. The clock stops while a step executes
                                     there (the export may be queued behind it); an export missing
                                     after that worker began two more steps fails at once
                                     (kv_fetcher.c) */
  int32_t max_attempts;           /* sends of one chunk's request that got no reply; 0 = 3 */
  int64_t retry_ms;               /* wait before asking again after NotReady; 0 = 10 */
  int32_t fetch_threads;          /* receives run at once (kv_fetcher.h); 0 = 2 */
  size_t max_chunk_bytes;         /* data bytes of one chunk at most; 0 = the bus's max_payload less
                                     16 KiB for the header (and <= LLB_KV_MAX_CHUNK_DATA_BYTES) */
};

/* Counters since creation (monotonic). */
struct kv_connector_stats {
  uint64_t exports;          /* reqs_to_send accepted */
  uint64_t exports_refused;  /* reqs_to_send refused (bad block ids, limits, duplicate): reported finished_sending */
  uint64_t fetches_served;   /* KVFetchRequests answered with data */
  uint64_t fetches_refused;  /* answered with an error status (or undecodable) */
  uint64_t bytes_sent;       /* data bytes served */
  uint64_t recvs_finished;   /* transfers completed (finished_recving) */
  uint64_t recvs_failed;     /* transfers failed or cancelled (failed_recving) */
  uint64_t bytes_received;   /* data bytes written into the cache */
  uint64_t chunks_retried;   /* chunk requests sent again (no reply, or NotReady) */
};

struct kv_connector; /* opaque */

/* Creates the connector of `runner` (borrowed; outlives the connector). Reads the runner's KV
 * geometry (model_runner_kv_geometry). Errors: INVALID_ARGUMENT (config), UNSUPPORTED (a CUDA
 * runner: "KV transfer needs the CPU cache"), OUT_OF_MEMORY. *out: kv_connector_destroy. */
llb_status kv_connector_create(const struct kv_connector_config *cfg, struct model_runner *runner,
                               struct kv_connector **out);

/* Subscribes the kv_fetch service on `bus` (borrowed: call kv_connector_stop before bus_destroy)
 * and starts the fetcher thread, which sends its requests on the same bus.
 * Errors: those of bus_subject_kv_fetch and bus_subscribe, INTERNAL (thread). */
llb_status kv_connector_start(struct kv_connector *c, struct bus *bus);

/* Stops the fetcher (jobs still queued or running are reported failed at the next after_step)
 * and unsubscribes the service; a fetch being answered still gets its reply. Call before
 * bus_destroy. Idempotent; NULL ok. */
void kv_connector_stop(struct kv_connector *c);

/* Before a step: takes m's reqs_to_send (exports) and reqs_to_recv (fetch jobs), and cancels
 * the fetch of any of the `num_finished` ids in `finished` (the SchedulerOutput's
 * finished_req_ids and preempted_req_ids; may be NULL when 0): when this returns, the fetcher
 * writes nothing more into that request's blocks. A bad entry never fails the step: an export
 * whose blocks lie outside the cache, over the limits or already exported under that id is
 * refused (logged; reported finished_sending so the blocks are freed, except for the duplicate,
 * whose first export goes on); a receive whose local blocks lie outside the cache, or whose id
 * is already being received, is reported failed_recving. m may be NULL (nothing to take). Also
 * drops expired exports. Errors: OUT_OF_MEMORY only (then nothing of m was taken). */
llb_status kv_connector_before_step(struct kv_connector *c, const struct llb_kv_connector_metadata *m,
                                    const struct llb_str *finished, int32_t num_finished);

/* After a step (or a failed one, or a step with nothing scheduled: the scheduler polls with
 * those while it only waits for transfers): fills *out with the ids whose transfer ended since
 * the last call, each once. The arrays and strings belong to the connector and stay valid until
 * the next call or kv_connector_destroy. */
void kv_connector_after_step(struct kv_connector *c, struct llb_kv_connector_output *out);

/* The service's work, without the bus (the handler calls it; tests may too): decodes a
 * KVFetchRequest from req[len] and encodes the KVTransferChunk answering it into *reply
 * (grown; caller-owned). Never fails for the request's content: an undecodable request, an
 * unknown, not-ready, expired, out-of-range or stale (another generation) one get a chunk with
 * that status and error; serving ends nothing (a release does: finished_sending).
 * Thread-safe. Errors: OUT_OF_MEMORY / the encoder's (nothing to send). */
llb_status kv_connector_serve(struct kv_connector *c, const uint8_t *req, size_t len, struct llb_buf *reply);

/* The service's release, without the bus (the handler calls it first; tests may too): when
 * msg[len] is a release (a KVFetchRequest of no blocks, last: no reply), ends the export it
 * names if it also names that export's generation (finished_sending follows), else logs the
 * refusal (kv_release_refused: none held, no generation, or a stale one) and ends nothing.
 * Returns whether msg was a release (false: a fetch, or undecodable: kv_connector_serve answers
 * it). Thread-safe. */
bool kv_connector_release(struct kv_connector *c, const uint8_t *msg, size_t len);

/* Whether any export is held or any fetch queued or running (a worker that only waits for
 * transfers). */
bool kv_connector_busy(struct kv_connector *c);

/* Counters, read atomically one by one. */
void kv_connector_stats(const struct kv_connector *c, struct kv_connector_stats *out);

/* Stops it (kv_connector_stop) and frees it. NULL ok. */
void kv_connector_destroy(struct kv_connector *c);

#endif
