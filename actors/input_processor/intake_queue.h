/* Fair intake (docs/design.md §7): a request waits in its tenant's own queue, and the intake workers
 * take the queues in deficit round robin by cost (Shreedhar and Varghese, "Efficient fair
 * queueing using deficit round robin", SIGCOMM 1995), so one tenant's flood — however costly its
 * requests — delays another tenant's request by at most the work already in progress.
 *
 * - Each tenant has a FIFO bounded in items and bytes (a push over either is refused at once:
 *   the delivery thread answers 429 without any work), and all queues together are bounded in
 *   bytes.
 * - Pop visits the tenants with queued work in turn; each visit adds `quantum` to the tenant's
 *   deficit, and it is served while its head item's cost fits the deficit (a tenant of large
 *   items waits more turns: its share of the workers is by cost, not by count). A queue that
 *   empties loses its deficit.
 * - At most max_in_service_per_tenant items of one tenant are being worked on at once; with
 *   W workers and a cap of W - 1, a tenant's flood can never occupy every worker.
 * - Pure logic: items are opaque pointers, costs any unit (the input processor: request bytes).
 *
 * Thread-safe: push from delivery threads, pop/done from workers (intake_workers.h), close from
 * anyone.
 */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_INTAKE_QUEUE_H
#define LLB_ACTORS_INPUT_PROCESSOR_INTAKE_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define INTAKE_QUEUE_MAX_TENANTS 1024 /* tenants with queued or in-service work at once */
#define INTAKE_QUEUE_NAME_MAX 65

struct intake_queue_config {
  int32_t max_items_per_tenant;      /* default 256 */
  int64_t max_bytes_per_tenant;      /* sum of the costs of a tenant's queued items; default 32 MiB */
  int64_t max_bytes_total;           /* over every tenant; default 256 MiB */
  int64_t quantum;                   /* deficit added per visit; default 8 KiB (a typical request:
                                        one per turn, larger ones wait turns by their size) */
  int32_t max_in_service_per_tenant; /* default 1 */
};

/* Fills c with the defaults above. */
void intake_queue_config_init(struct intake_queue_config *c);

struct intake_queue;

/* Creates a queue for cfg (values <= 0 take their defaults). *out: intake_queue_destroy.
 * Errors: OUT_OF_MEMORY. */
llb_status intake_queue_create(const struct intake_queue_config *cfg, struct intake_queue **out);

/* Frees the queue; items still queued are not freed (close and pop them first). NULL ok. */
void intake_queue_destroy(struct intake_queue *q);

/* Appends item (opaque, non-NULL) of cost >= 1 to tenant's queue (name copied, at most
 * INTAKE_QUEUE_NAME_MAX - 1 bytes). Never blocks. Errors: QUEUE_FULL naming the tenant and the
 * bound (its items, its bytes, all bytes, or too many tenants), ABORTED once closed,
 * INVALID_ARGUMENT. On error the caller keeps the item. */
llb_status intake_queue_push(struct intake_queue *q, const char *tenant, void *item, int64_t cost);

/* Takes the next item in deficit round robin order, waiting while none may be taken; *item and
 * *slot (give it to intake_queue_done) are set. False once the queue is closed and nothing is
 * left to take. */
bool intake_queue_pop(struct intake_queue *q, void **item, int *slot);

/* The work on an item popped with `slot` is over: its tenant may be served again. */
void intake_queue_done(struct intake_queue *q, int slot);

/* No more pushes (ABORTED); poppers take what is queued, then get false. */
void intake_queue_close(struct intake_queue *q);

/* Items queued for `tenant` (0 when unknown) and in all. */
int32_t intake_queue_pending(struct intake_queue *q, const char *tenant, int32_t *total);

#endif
