/* The LoRA adapters a front door (input processor, api server) resolves a request's `model`
 * against: those the workers announce in their heartbeats (Heartbeat.lora_adapters: name,
 * lora_int_id, rank), each visible to the tenants allowed to use it (docs/design.md §7: an
 * adapter listed for some tenants in the tenants file, `loras=a,b`, belongs to those only; an
 * adapter listed for none is every tenant's; one loaded at run time, /v1/load_lora_adapter,
 * belongs to the tenant that loaded it, unless that is LORA_REGISTRY_OPEN_TENANT).
 *
 * A worker's list replaces its previous one (keyed by its instance); a worker silent for ttl_ns
 * no longer counts, so a stopped worker's adapters go away. Plain C over the contract (no bus):
 * both front doors run it on the heartbeats they hear. Thread-safe (one mutex): heartbeats
 * arrive on delivery threads, lookups come from request threads.
 */
#ifndef LLB_SCHEMAS_LORA_REGISTRY_H
#define LLB_SCHEMAS_LORA_REGISTRY_H

#include <stdint.h>

#include "base/status.h"
#include "schemas/control.h"

#define LORA_REGISTRY_MAX_WORKERS 64
#define LORA_REGISTRY_MAX_RESTRICTIONS 1024
#define LORA_REGISTRY_MAX_LIST 256 /* what a listing (/v1/models) shows at most */
#define LORA_REGISTRY_OPEN_TENANT "default" /* an adapter loaded at run time by it is every tenant's
                                               (bus/subject.h BUS_DEFAULT_TENANT: no tenants) */

struct lora_registry;

/* ttl_ns > 0: how long a worker's announcement counts. *out: lora_registry_destroy. Errors:
 * INVALID_ARGUMENT, OUT_OF_MEMORY. */
llb_status lora_registry_create(int64_t ttl_ns, struct lora_registry **out);

/* NULL ok. */
void lora_registry_destroy(struct lora_registry *r);

/* Adapter `lora` belongs to `tenant` (among the tenants it is listed for). Call before the
 * lookups (at start, from the tenants file). Errors: INVALID_ARGUMENT (a name llb_lora_name_valid
 * refuses, an empty tenant), QUEUE_FULL past LORA_REGISTRY_MAX_RESTRICTIONS. */
llb_status lora_registry_restrict(struct lora_registry *r, const char *lora, const char *tenant);

/* A heartbeat (decoded, so its names are checked): a gpu_worker's replaces that instance's
 * adapters (none: it serves none now), at now_ns (monotonic); others are ignored. More than
 * LORA_REGISTRY_MAX_WORKERS workers: the one heard longest ago is forgotten. */
void lora_registry_on_heartbeat(struct lora_registry *r, const struct llb_heartbeat *hb, int64_t now_ns);

/* The lora_int_id of adapter `name` as `tenant` may use it (a live worker announces it and the
 * tenant is allowed), else 0: unknown and another tenant's adapter look the same. */
int32_t lora_registry_lookup(struct lora_registry *r, const char *name, const char *tenant, int64_t now_ns);

/* The adapters `tenant` may use, sorted by name, each once: names[0..min(count, cap)), copied.
 * Returns the count. */
int32_t lora_registry_list(struct lora_registry *r, const char *tenant, int64_t now_ns,
                           char (*names)[LLB_LORA_NAME_MAX + 1], int32_t cap);

/* gpu_worker instances heard within window_ns (every worker beats, adapters or not; 0 or more
 * than the ttl: the ttl). */
int32_t lora_registry_num_workers(struct lora_registry *r, int64_t now_ns, int64_t window_ns);

/* One adapter loaded at run time (Heartbeat LoRAAdapter.dynamic) as a live worker announces it. */
struct lora_registry_dynamic {
  char name[LLB_LORA_NAME_MAX + 1];
  char path[LLB_LORA_PATH_MAX + 1];      /* relative to the workers' --lora-dir */
  char tenant[LLB_LORA_TENANT_MAX + 1];  /* its owner */
};

/* The adapters loaded at run time that live workers announce, each once (the first worker's
 * path and owner): out[0..min(count, cap)). Returns the count. */
int32_t lora_registry_dynamic(struct lora_registry *r, int64_t now_ns, struct lora_registry_dynamic *out, int32_t cap);

/* How many live workers announce adapter `name`; owner[cap] gets the first one's owner ("" for
 * a --lora-modules adapter). */
int32_t lora_registry_served_by(struct lora_registry *r, const char *name, int64_t now_ns, char *owner, size_t cap);

#endif
