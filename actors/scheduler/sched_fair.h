/* Tenant-fair admission from the scheduler's waiting queue (FCFS policy): the next request to
 * admit is the first waiting one whose tenant has the fewest requests running, so that a
 * tenant with requests already running does not keep another tenant's new request waiting
 * behind its own queued prefills. One tenant (or requests without a tenant) = FCFS unchanged;
 * the PRIORITY policy is left as it is (priority first, vLLM). The order changes when a request
 * starts, never what it computes.
 *
 * The tenant: the input processor composes every request's cache salt as "<len>:<tenant>" then
 * the client's salt (input_processor_cache_salt_compose); the key is a keyed hash of that
 * prefix (base/hash.h), 0 for a request without one. Follows SGLang's and Dynamo's per-tenant
 * fairness in spirit (fewest running first); vLLM has only fcfs and priority.
 * Pure: reads the queue and the running array; not thread-safe. */
#ifndef LLB_ACTORS_SCHEDULER_SCHED_FAIR_H
#define LLB_ACTORS_SCHEDULER_SCHED_FAIR_H

#include <stdint.h>

#include "actors/scheduler/sched_queue.h"

#define SCHED_FAIR_WINDOW 64 /* waiting requests looked at per pick (from the head) */

struct llb_hash_key;

/* The tenant key of a cache salt "<len>:<tenant>..." under key; 0 when salt is NULL or not of
 * that form. */
uint64_t sched_fair_tenant_key(const struct llb_hash_key *key, const char *cache_salt);

/* The next request of q to admit: among its first SCHED_FAIR_WINDOW, the first whose
 * tenant_key has the fewest requests in running[0..num_running); q's head when q is PRIORITY.
 * NULL when q is empty. */
struct sched_request *sched_fair_peek(const struct sched_queue *q, struct sched_request *const *running,
                                      int32_t num_running);

/* Takes r (from sched_fair_peek, in q) out of q. */
void sched_fair_take(struct sched_queue *q, struct sched_request *r);

#endif
