/* The prefill side's export registry of the KV connector (kv_transfer.h, issue 36): which cache
 * blocks may be served to which request id, until when. Pure logic (no bus, no FlatBuffers),
 * thread-safe (one mutex): the execute thread adds and expires exports, the kv_fetch handler
 * reads them.
 *
 * An export is a scheduler's KVSendRequest (vLLM delay_free_blocks: the blocks stay allocated
 * until the worker reports the request in finished_sending). Only the blocks listed there are
 * ever read, and only for a fetch naming that request id and a range inside its list: nothing
 * else of the cache can be reached (it holds other tenants' KV).
 *
 * Each export gets a generation, unique per export of an id (a counter started from the wall
 * clock at creation, so a restarted worker does not reuse its predecessor's): a fetch names it
 * once it learnt it (0 before: any export of the id), and a release must name it, so that a late
 * or duplicated release of an earlier export of the same id (the request was exported again)
 * ends nothing. An export ends on its fetcher's release or at its expiry, never on serving a
 * block: a fetch whose reply was lost, the last one included, can be served again. Either way
 * its id is reported once through kv_export_take_ended. A block read is in progress under the
 * registry's lock, so an export never ends (and its blocks are never freed) while it is being
 * read. The ids of the last KV_EXPORT_TOMBSTONES ended exports are remembered so that a late
 * fetch gets a clear answer (Expired, or Unknown "released") instead of NotReady.
 */
#ifndef LLB_GPU_WORKER_KV_EXPORT_H
#define LLB_GPU_WORKER_KV_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "schemas/kv_transfer.h"
#include "schemas/scheduler_output.h"

#define KV_EXPORT_TOMBSTONES 1024

struct kv_export_limits {
  int32_t num_cache_blocks; /* block ids must be in [0, num_cache_blocks); >= 1 */
  int32_t max_reqs;         /* exports held at once; >= 1 */
  int64_t max_blocks;       /* blocks of all exports held at once; >= 1 */
};

struct kv_export_registry; /* opaque */

/* Errors: INVALID_ARGUMENT (limits < 1), OUT_OF_MEMORY. *out: kv_export_destroy. */
llb_status kv_export_create(const struct kv_export_limits *lim, struct kv_export_registry **out);

/* NULL ok. */
void kv_export_destroy(struct kv_export_registry *r);

/* Exports req's blocks (copied) until now_ns + expires_in_s. Refusals (nothing is held):
 * INVALID_ARGUMENT (a block id outside the cache, a bad count or expiry),
 * QUEUE_FULL (over max_reqs or max_blocks), TOO_LARGE (an id over LLB_KV_REQ_ID_MAX bytes);
 * a refused export (not a duplicate) is reported ended like any other, so that its blocks are
 * freed; a duplicate of an id held now is refused with INVALID_ARGUMENT and NOT reported (the
 * held export goes on). OUT_OF_MEMORY (nothing held, nothing reported). */
llb_status kv_export_add(struct kv_export_registry *r, const struct llb_kv_send_request *req, int64_t now_ns);

/* Reads one block into dst (block_bytes of it); the registry's caller supplies the cache. */
typedef llb_status (*kv_export_read_fn)(void *user, int32_t block_id, uint8_t *dst);

/* A fetch of blocks [first, first + n) of export `id` (n >= 1) of generation `gen` (0: whichever
 * export of id is held): when the export holds them, reads each with read(user, cache block id,
 * dst + i * block_bytes) under the lock and returns LLB_KV_TRANSFER_OK with *num_tokens and
 * *generation the export's (nothing ends: a repeated fetch gets the same blocks); else no block
 * is read and the status says why, with a message in why[why_cap]: NOT_READY (no such export
 * yet: the scheduler may list it a step after the peer learnt of it; *generation 0), UNKNOWN (it
 * was released, or the export held has another generation than gen: nothing of it is read),
 * EXPIRED, OUT_OF_RANGE, ERROR (a read failed). *generation is the held export's whenever one
 * was found. Expiry is checked against now_ns first. */
enum llb_kv_transfer_status kv_export_fetch(struct kv_export_registry *r, const char *id, uint64_t gen, int32_t first,
                                            int32_t n, int64_t now_ns, kv_export_read_fn read, void *user,
                                            uint8_t *dst, size_t block_bytes, int32_t *num_tokens,
                                            uint64_t *generation, char *why, size_t why_cap);

/* A release of export `id` of generation `gen` (its fetcher has all it needs, or failed or gave
 * up): it ends now, reported like an expired one so that its blocks are freed; nothing is read.
 * Refusals end nothing: NOT_FOUND (no export of id held), INVALID_ARGUMENT (gen 0, which names no
 * export, or another generation than the held export's: a stale or duplicated release). */
llb_status kv_export_release(struct kv_export_registry *r, const char *id, uint64_t gen);

/* Drops every export at once, unreported (the scheduler no longer holds their blocks: they may
 * be handed to another request next); a later fetch of one gets Expired. Waits for a block read
 * in progress (the registry's lock), so when this returns no fetch reads those blocks any more.
 * Returns how many there were. */
int32_t kv_export_cancel_all(struct kv_export_registry *r);

/* Ends the exports whose expiry passed by now_ns (their ids go to the ended list); returns how
 * many. */
int32_t kv_export_expire(struct kv_export_registry *r, int64_t now_ns);

/* The ids of exports that ended (released, expired, refused) since the last call, each
 * once: *ids [return value] points to NUL-terminated strings owned by the registry, valid until
 * the next call or kv_export_destroy. */
int32_t kv_export_take_ended(struct kv_export_registry *r, const char *const **ids);

/* Exports held now, and their blocks. */
void kv_export_counts(struct kv_export_registry *r, int32_t *num_reqs, int64_t *num_blocks);

#endif
