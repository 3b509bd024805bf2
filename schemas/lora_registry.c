#include "schemas/lora_registry.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKER_MAX_LORAS 32 /* a worker serves at most 32 (actors/gpu_worker LORA_MODULES_MAX) */

/* What one worker instance announced last. */
struct worker_entry {
  char instance[96];
  int64_t seen_ns;
  int32_t num;
  char names[WORKER_MAX_LORAS][LLB_LORA_NAME_MAX + 1];
  int32_t ids[WORKER_MAX_LORAS];
  char owners[WORKER_MAX_LORAS][LLB_LORA_TENANT_MAX + 1]; /* a dynamic adapter's tenant; "" = --lora-modules */
  char paths[WORKER_MAX_LORAS][LLB_LORA_PATH_MAX + 1];    /* a dynamic adapter's lora_path */
};

struct restriction {
  char lora[LLB_LORA_NAME_MAX + 1];
  char tenant[64];
};

struct lora_registry {
  pthread_mutex_t mu;
  int64_t ttl_ns;
  struct worker_entry workers[LORA_REGISTRY_MAX_WORKERS];
  int32_t num_workers;
  struct restriction *restrictions; /* [num_restrictions] of LORA_REGISTRY_MAX_RESTRICTIONS */
  int32_t num_restrictions;
};

llb_status lora_registry_create(int64_t ttl_ns, struct lora_registry **out) {
  *out = NULL;
  if (ttl_ns <= 0) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "lora registry: ttl %lld ns", (long long)ttl_ns);
  struct lora_registry *r = calloc(1, sizeof *r);
  if (r) r->restrictions = calloc(LORA_REGISTRY_MAX_RESTRICTIONS, sizeof *r->restrictions);
  if (!r || !r->restrictions) {
    free(r);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "lora registry");
  }
  pthread_mutex_init(&r->mu, NULL);
  r->ttl_ns = ttl_ns;
  *out = r;
  return LLB_STATUS_OK;
}

void lora_registry_destroy(struct lora_registry *r) {
  if (!r) return;
  pthread_mutex_destroy(&r->mu);
  free(r->restrictions);
  free(r);
}

llb_status lora_registry_restrict(struct lora_registry *r, const char *lora, const char *tenant) {
  if (!lora || !llb_lora_name_valid(lora, strlen(lora)) || !tenant || !tenant[0] ||
      strlen(tenant) >= sizeof r->restrictions[0].tenant)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "LoRA adapter \"%s\" of tenant \"%s\": a model name and a tenant name",
                    lora ? lora : "", tenant ? tenant : "");
  pthread_mutex_lock(&r->mu);
  llb_status st = LLB_STATUS_OK;
  if (r->num_restrictions >= LORA_REGISTRY_MAX_RESTRICTIONS) {
    st = LLB_ERRF(LLB_STATUS_QUEUE_FULL, "LoRA adapters of tenants: at most %d entries", LORA_REGISTRY_MAX_RESTRICTIONS);
  } else {
    struct restriction *x = &r->restrictions[r->num_restrictions++];
    snprintf(x->lora, sizeof x->lora, "%s", lora);
    snprintf(x->tenant, sizeof x->tenant, "%s", tenant);
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

void lora_registry_on_heartbeat(struct lora_registry *r, const struct llb_heartbeat *hb, int64_t now_ns) {
  if (hb->actor.len != 10 || memcmp(hb->actor.data, "gpu_worker", 10) != 0) return;
  char inst[96];
  snprintf(inst, sizeof inst, "%.*s", (int)hb->instance.len, hb->instance.data ? hb->instance.data : "");
  pthread_mutex_lock(&r->mu);
  struct worker_entry *w = NULL;
  for (int32_t i = 0; i < r->num_workers && !w; i++)
    if (strcmp(r->workers[i].instance, inst) == 0) w = &r->workers[i];
  if (!w && r->num_workers < LORA_REGISTRY_MAX_WORKERS) w = &r->workers[r->num_workers++];
  for (int32_t i = 0; !w && i < r->num_workers; i++) /* full: replace the one heard longest ago */
    if (i == 0 || r->workers[i].seen_ns < w->seen_ns) w = &r->workers[i];
  snprintf(w->instance, sizeof w->instance, "%s", inst);
  w->seen_ns = now_ns;
  w->num = 0;
  for (int32_t i = 0; i < hb->num_lora_adapters && w->num < WORKER_MAX_LORAS; i++) {
    const struct llb_lora_adapter *a = &hb->lora_adapters[i];
    snprintf(w->names[w->num], sizeof w->names[0], "%.*s", (int)a->lora_name.len, a->lora_name.data);
    snprintf(w->owners[w->num], sizeof w->owners[0], "%.*s", a->dynamic ? (int)a->tenant.len : 0,
             a->dynamic ? a->tenant.data : "");
    snprintf(w->paths[w->num], sizeof w->paths[0], "%.*s", a->dynamic ? (int)a->lora_path.len : 0,
             a->dynamic ? a->lora_path.data : "");
    w->ids[w->num++] = a->lora_int_id;
  }
  pthread_mutex_unlock(&r->mu);
}

/* Under r->mu: may `tenant` use adapter `name` of owner `owner` ("" = --lora-modules)? Loaded at
 * run time by a tenant other than the default one: that tenant only. Else listed for no tenant in
 * the tenants file, or listed for it. */
static bool allowed(const struct lora_registry *r, const char *name, const char *owner, const char *tenant) {
  if (owner[0] && strcmp(owner, LORA_REGISTRY_OPEN_TENANT) != 0) return tenant && strcmp(owner, tenant) == 0;
  bool listed = false;
  for (int32_t i = 0; i < r->num_restrictions; i++) {
    if (strcmp(r->restrictions[i].lora, name) != 0) continue;
    if (tenant && strcmp(r->restrictions[i].tenant, tenant) == 0) return true;
    listed = true;
  }
  return !listed;
}

int32_t lora_registry_lookup(struct lora_registry *r, const char *name, const char *tenant, int64_t now_ns) {
  int32_t id = 0;
  pthread_mutex_lock(&r->mu);
  for (int32_t i = 0; i < r->num_workers && !id; i++) {
    const struct worker_entry *w = &r->workers[i];
    if (now_ns - w->seen_ns > r->ttl_ns) continue;
    for (int32_t k = 0; k < w->num && !id; k++)
      if (strcmp(w->names[k], name) == 0) id = allowed(r, name, w->owners[k], tenant) ? w->ids[k] : -1;
  }
  if (id < 0) id = 0;
  pthread_mutex_unlock(&r->mu);
  return id;
}

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

int32_t lora_registry_list(struct lora_registry *r, const char *tenant, int64_t now_ns,
                           char (*names)[LLB_LORA_NAME_MAX + 1], int32_t cap) {
  int32_t n = 0;
  pthread_mutex_lock(&r->mu);
  for (int32_t i = 0; i < r->num_workers; i++) {
    const struct worker_entry *w = &r->workers[i];
    if (now_ns - w->seen_ns > r->ttl_ns) continue;
    for (int32_t k = 0; k < w->num && n < cap; k++) {
      bool dup = false;
      for (int32_t j = 0; j < n && !dup; j++) dup = strcmp(names[j], w->names[k]) == 0;
      if (!dup && allowed(r, w->names[k], w->owners[k], tenant)) snprintf(names[n++], sizeof names[0], "%s", w->names[k]);
    }
  }
  pthread_mutex_unlock(&r->mu);
  qsort(names, (size_t)n, sizeof names[0], by_name);
  return n;
}

int32_t lora_registry_num_workers(struct lora_registry *r, int64_t now_ns, int64_t window_ns) {
  int32_t n = 0;
  pthread_mutex_lock(&r->mu);
  const int64_t w = window_ns > 0 && window_ns < r->ttl_ns ? window_ns : r->ttl_ns;
  for (int32_t i = 0; i < r->num_workers; i++) n += now_ns - r->workers[i].seen_ns <= w;
  pthread_mutex_unlock(&r->mu);
  return n;
}

int32_t lora_registry_dynamic(struct lora_registry *r, int64_t now_ns, struct lora_registry_dynamic *out, int32_t cap) {
  int32_t n = 0;
  pthread_mutex_lock(&r->mu);
  for (int32_t i = 0; i < r->num_workers; i++) {
    const struct worker_entry *w = &r->workers[i];
    if (now_ns - w->seen_ns > r->ttl_ns) continue;
    for (int32_t k = 0; k < w->num && n < cap; k++) {
      if (!w->owners[k][0]) continue;
      bool dup = false;
      for (int32_t j = 0; j < n && !dup; j++) dup = strcmp(out[j].name, w->names[k]) == 0;
      if (dup) continue;
      snprintf(out[n].name, sizeof out[n].name, "%s", w->names[k]);
      snprintf(out[n].path, sizeof out[n].path, "%s", w->paths[k]);
      snprintf(out[n].tenant, sizeof out[n].tenant, "%s", w->owners[k]);
      n++;
    }
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}

int32_t lora_registry_served_by(struct lora_registry *r, const char *name, int64_t now_ns, char *owner, size_t cap) {
  int32_t n = 0;
  if (cap) owner[0] = '\0';
  pthread_mutex_lock(&r->mu);
  for (int32_t i = 0; i < r->num_workers; i++) {
    const struct worker_entry *w = &r->workers[i];
    if (now_ns - w->seen_ns > r->ttl_ns) continue;
    for (int32_t k = 0; k < w->num; k++)
      if (strcmp(w->names[k], name) == 0) {
        if (!n && cap) snprintf(owner, cap, "%s", w->owners[k]);
        n++;
      }
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}
