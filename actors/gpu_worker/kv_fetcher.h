/* The decode side's background fetcher of the KV connector (kv_transfer.h, issue 36): num_threads
 * threads that take the queued receives in order, each run as a series of KVFetchRequests to
 * <prefix>.engine.<remote_engine_id>.kv_fetch (bus_request), writing the blocks of each checked
 * KVTransferChunk into the local blocks through a caller-given write function.
 *
 * A chunk holds as many whole blocks as fit in max_chunk_bytes (the bus's max_payload less room
 * for the header, when 0). Every reply is checked before a byte is written: the codec (verifier,
 * bounds, CRC-32), then the id, the block range and token count asked for, and the geometry
 * against the local cache's. NotReady is asked again every retry_ms while the export may still
 * come (see not_ready_timeout_ms; a changed incarnation, two more steps begun by the exporting
 * worker, or a NotReady after blocks came fail the receive); a request without a reply
 * (lost, or no responder yet) is sent again, up to max_attempts times in a row; anything else
 * (a bad checksum, another geometry, Unknown, Expired, OutOfRange, Error, the transfer's
 * deadline) fails the receive. Ended receives are collected for kv_fetcher_take_done. The first
 * reply naming the export's generation pins it: every later request names it (the exporter
 * refuses it for another export of the same id) and a chunk of another generation fails the
 * receive. A receive that ends, finished or failed (not one cancelled: its request may fetch
 * again), publishes a release naming that generation (no blocks, last): the exporting worker
 * ends the export then, not on serving a chunk, so a lost reply of the last chunk is fetched
 * again. The last request says so (KVFetchRequest.last) for exporters older than generations.
 *
 * Threads: submit, cancel, take_done, pending from one thread (the worker's execute thread); the
 * fetch threads write blocks under the fetcher's lock, so that after kv_fetcher_cancel returns
 * nothing more is written for that request. Several threads keep one long transfer from holding
 * up the others (and overlap one's copying with another's round trip).
 */
#ifndef LLB_GPU_WORKER_KV_FETCHER_H
#define LLB_GPU_WORKER_KV_FETCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/gpu_worker/model_runner.h"
#include "base/status.h"
#include "bus/bus.h"
#include "schemas/scheduler_output.h"

#define KV_FETCHER_MAX_THREADS 16

struct kv_fetcher_config {
  int32_t num_threads;         /* receives run at once, 1..KV_FETCHER_MAX_THREADS */
  struct model_runner_kv_geometry geometry; /* the local cache's: what every chunk must match */
  int64_t fetch_timeout_ms;    /* one request's wait for its reply, >= 1 */
  int64_t transfer_timeout_ms; /* a receive's deadline from its submission, >= 1 */
  int64_t not_ready_timeout_ms; /* how long the exporter may answer NotReady in a row while its
                                   worker runs no step, >= 1: an export not there by then never
                                   comes (its scheduler died before the step carrying it) */
  int32_t max_attempts;        /* sends of one chunk's request in a row without a reply, >= 1 */
  int64_t retry_ms;            /* wait after NotReady (or no responder), >= 1 */
  size_t max_chunk_bytes;      /* data bytes a chunk may hold; 0 = the bus's max_payload - 16 KiB */
};

/* Writes src (geometry.block_bytes bytes) into local block block_id. */
typedef llb_status (*kv_fetcher_write_fn)(void *user, int32_t block_id, const uint8_t *src);

/* Counters since creation. */
struct kv_fetcher_stats {
  uint64_t finished, failed, bytes_received, chunks_retried;
};

struct kv_fetcher; /* opaque */

/* Creates the fetcher (no thread yet). write(user, ...) is called on the fetch threads, one at a
 * time. Errors:
 * INVALID_ARGUMENT (config), OUT_OF_MEMORY. *out: kv_fetcher_destroy. */
llb_status kv_fetcher_create(const struct kv_fetcher_config *cfg, kv_fetcher_write_fn write, void *user,
                             struct kv_fetcher **out);

/* Starts the fetch threads over `bus` (borrowed: kv_fetcher_stop before bus_destroy). The
 * prefix of the subjects is the bus's. Errors: INTERNAL (thread). */
llb_status kv_fetcher_start(struct kv_fetcher *f, struct bus *bus);

/* Queues the receive of r (copied); its deadline starts now. A receive that cannot run is
 * reported failed at once (and the status says why): INVALID_ARGUMENT (a local block outside
 * the cache, an id already being received: then the running one goes on and nothing is
 * reported for the second), OUT_OF_MEMORY. */
llb_status kv_fetcher_submit(struct kv_fetcher *f, const struct llb_kv_recv_request *r);

/* Cancels the receive of `id` (queued or running): when this returns no block is written for it
 * any more; it is reported failed. Nothing happens for an id not being received. */
void kv_fetcher_cancel(struct kv_fetcher *f, const char *id, size_t id_len);

/* The ids of receives that ended since the last call, each once: *finished [*num_finished]
 * (every block written) and *failed [*num_failed]. NUL-terminated strings owned by the fetcher,
 * valid until the next call or kv_fetcher_destroy. */
void kv_fetcher_take_done(struct kv_fetcher *f, const char *const **finished, int32_t *num_finished,
                          const char *const **failed, int32_t *num_failed);

/* Receives queued or running. */
int32_t kv_fetcher_pending(struct kv_fetcher *f);

void kv_fetcher_stats(struct kv_fetcher *f, struct kv_fetcher_stats *out);

/* Stops the threads (a request in flight is waited for, at most fetch_timeout_ms); the receives
 * still queued or running are reported failed. Idempotent; NULL ok. */
void kv_fetcher_stop(struct kv_fetcher *f);

/* Stops and frees. NULL ok. */
void kv_fetcher_destroy(struct kv_fetcher *f);

#endif
