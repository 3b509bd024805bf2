/* Tenant-fair pick of the next waiting request (sched_fair.h). */
#include "actors/scheduler/sched_fair.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

uint64_t sched_fair_tenant_key(const struct llb_hash_key *key, const char *cache_salt) {
  if (!cache_salt || cache_salt[0] < '0' || cache_salt[0] > '9') return 0;
  char *end = NULL;
  const unsigned long n = strtoul(cache_salt, &end, 10);
  if (*end != ':' || n == 0 || n > 4096 || strnlen(end + 1, n) < n) return 0;
  const size_t len = (size_t)(end + 1 - cache_salt) + n;
  const uint64_t h = llb_hash_bytes(key, cache_salt, len);
  return h ? h : 1; /* 0 means "none" */
}

static int32_t num_running_of(uint64_t tenant_key, struct sched_request *const *running, int32_t num_running) {
  int32_t n = 0;
  for (int32_t i = 0; i < num_running; i++) n += running[i]->tenant_key == tenant_key;
  return n;
}

struct sched_request *sched_fair_peek(const struct sched_queue *q, struct sched_request *const *running,
                                      int32_t num_running) {
  struct sched_request *best = sched_queue_peek(q);
  if (!best || q->policy != SCHED_POLICY_FCFS) return best;
  int32_t best_n = num_running_of(best->tenant_key, running, num_running);
  const int32_t window = q->num < SCHED_FAIR_WINDOW ? q->num : SCHED_FAIR_WINDOW;
  for (int32_t i = 1; i < window && best_n > 0; i++) {
    struct sched_request *r = sched_queue_at(q, i);
    bool seen = r->tenant_key == best->tenant_key; /* only a tenant's first waiting request counts */
    for (int32_t j = 0; j < i && !seen; j++) seen = sched_queue_at(q, j)->tenant_key == r->tenant_key;
    if (seen) continue;
    const int32_t n = num_running_of(r->tenant_key, running, num_running);
    if (n < best_n) best = r, best_n = n;
  }
  return best;
}

void sched_fair_take(struct sched_queue *q, struct sched_request *r) {
  if (sched_queue_peek(q) == r) (void)sched_queue_pop(q);
  else (void)sched_queue_remove(q, r);
}
