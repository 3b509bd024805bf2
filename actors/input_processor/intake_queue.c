/* Per-tenant intake queues served in deficit round robin (intake_queue.h). */
#include "actors/input_processor/intake_queue.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strmap.h"

struct node {
  struct node *next;
  void *item;
  int64_t cost;
};

struct tenant {
  char name[INTAKE_QUEUE_NAME_MAX]; /* "" = a free slot */
  struct node *head, *tail;
  int32_t items, in_service;
  int64_t bytes, deficit;
  int ring_next, ring_prev; /* -1 when not in the ring of tenants with queued items */
};

struct intake_queue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct intake_queue_config cfg;
  struct tenant *slots; /* [INTAKE_QUEUE_MAX_TENANTS] */
  struct llb_strmap *by_name; /* name -> slot + 1 */
  int cursor;         /* the ring's tenant being visited, -1 when the ring is empty */
  bool cursor_fresh;  /* its quantum was added on this visit */
  int ring_size;
  int32_t total_items;
  int64_t total_bytes;
  bool closed;
};

void intake_queue_config_init(struct intake_queue_config *c) {
  *c = (struct intake_queue_config){.max_items_per_tenant = 256, .max_bytes_per_tenant = 32 << 20,
                                    .max_bytes_total = 256 << 20, .quantum = 8 << 10,
                                    .max_in_service_per_tenant = 1};
}

llb_status intake_queue_create(const struct intake_queue_config *cfg, struct intake_queue **out) {
  *out = NULL;
  struct intake_queue_config d;
  intake_queue_config_init(&d);
  struct intake_queue *q = calloc(1, sizeof *q);
  if (!q || !(q->slots = calloc(INTAKE_QUEUE_MAX_TENANTS, sizeof *q->slots)) ||
      llb_strmap_create(0, &q->by_name) != LLB_STATUS_OK) {
    if (q) free(q->slots);
    free(q);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "intake queue");
  }
  q->cfg = *cfg;
  if (q->cfg.max_items_per_tenant <= 0) q->cfg.max_items_per_tenant = d.max_items_per_tenant;
  if (q->cfg.max_bytes_per_tenant <= 0) q->cfg.max_bytes_per_tenant = d.max_bytes_per_tenant;
  if (q->cfg.max_bytes_total <= 0) q->cfg.max_bytes_total = d.max_bytes_total;
  if (q->cfg.quantum <= 0) q->cfg.quantum = d.quantum;
  if (q->cfg.max_in_service_per_tenant <= 0) q->cfg.max_in_service_per_tenant = d.max_in_service_per_tenant;
  for (int i = 0; i < INTAKE_QUEUE_MAX_TENANTS; i++) q->slots[i].ring_next = q->slots[i].ring_prev = -1;
  q->cursor = -1;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  *out = q;
  return LLB_STATUS_OK;
}

void intake_queue_destroy(struct intake_queue *q) {
  if (!q) return;
  for (int i = 0; i < INTAKE_QUEUE_MAX_TENANTS; i++)
    for (struct node *n = q->slots[i].head, *next; n; n = next) {
      next = n->next;
      free(n);
    }
  llb_strmap_destroy(q->by_name);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  free(q->slots);
  free(q);
}

/* The slot of `name`, taking a free one when absent (-1: all taken); mu held. */
static int slot_of(struct intake_queue *q, const char *name, bool create) {
  void *v = llb_strmap_get(q->by_name, name);
  if (v) return (int)((intptr_t)v - 1);
  if (!create) return -1;
  for (int i = 0; i < INTAKE_QUEUE_MAX_TENANTS; i++) {
    if (q->slots[i].name[0]) continue;
    snprintf(q->slots[i].name, sizeof q->slots[i].name, "%s", name);
    if (llb_strmap_put(q->by_name, q->slots[i].name, (void *)(intptr_t)(i + 1)) != LLB_STATUS_OK) {
      q->slots[i].name[0] = '\0';
      return -1;
    }
    return i;
  }
  return -1;
}

/* A tenant with nothing queued and nothing in service gives its slot back; mu held. */
static void maybe_free_slot(struct intake_queue *q, int i) {
  struct tenant *t = &q->slots[i];
  if (t->items || t->in_service || !t->name[0]) return;
  llb_strmap_remove(q->by_name, t->name);
  t->name[0] = '\0';
  t->deficit = 0;
}

static void ring_insert(struct intake_queue *q, int i) {
  struct tenant *t = &q->slots[i];
  if (q->cursor < 0) {
    t->ring_next = t->ring_prev = i;
    q->cursor = i;
    q->cursor_fresh = false;
  } else { /* just before the cursor: the end of the current round */
    struct tenant *c = &q->slots[q->cursor];
    t->ring_next = q->cursor;
    t->ring_prev = c->ring_prev;
    q->slots[c->ring_prev].ring_next = i;
    c->ring_prev = i;
  }
  q->ring_size++;
}

static void ring_remove(struct intake_queue *q, int i) {
  struct tenant *t = &q->slots[i];
  if (q->ring_size == 1) {
    q->cursor = -1;
  } else {
    q->slots[t->ring_prev].ring_next = t->ring_next;
    q->slots[t->ring_next].ring_prev = t->ring_prev;
    if (q->cursor == i) {
      q->cursor = t->ring_next;
      q->cursor_fresh = false;
    }
  }
  t->ring_next = t->ring_prev = -1;
  q->ring_size--;
}

llb_status intake_queue_push(struct intake_queue *q, const char *tenant, void *item, int64_t cost) {
  if (!q || !tenant || !tenant[0] || strlen(tenant) >= INTAKE_QUEUE_NAME_MAX || !item || cost < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "intake_queue_push: bad arguments");
  struct node *n = malloc(sizeof *n);
  if (!n) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "intake queue node");
  *n = (struct node){.item = item, .cost = cost};
  llb_status st = LLB_STATUS_OK;
  pthread_mutex_lock(&q->mu);
  int i = q->closed ? -1 : slot_of(q, tenant, true);
  struct tenant *t = i >= 0 ? &q->slots[i] : NULL;
  if (q->closed)
    st = LLB_ERRF(LLB_STATUS_ABORTED, "the input processor is stopping");
  else if (!t)
    st = LLB_ERRF(LLB_STATUS_QUEUE_FULL, "more than %d tenants are waiting for intake", INTAKE_QUEUE_MAX_TENANTS);
  else if (t->items >= q->cfg.max_items_per_tenant || t->bytes + cost > q->cfg.max_bytes_per_tenant)
    st = LLB_ERRF(LLB_STATUS_QUEUE_FULL, "tenant %s has %d requests (%lld bytes) waiting for intake; its queue "
                  "holds %d (%lld bytes)", tenant, t->items, (long long)t->bytes, q->cfg.max_items_per_tenant,
                  (long long)q->cfg.max_bytes_per_tenant);
  else if (q->total_bytes + cost > q->cfg.max_bytes_total)
    st = LLB_ERRF(LLB_STATUS_QUEUE_FULL, "%lld bytes of requests are waiting for intake; at most %lld",
                  (long long)q->total_bytes, (long long)q->cfg.max_bytes_total);
  if (st == LLB_STATUS_OK) {
    if (t->tail) t->tail->next = n;
    else t->head = n;
    t->tail = n;
    t->items++;
    t->bytes += cost;
    q->total_items++;
    q->total_bytes += cost;
    if (t->ring_next < 0) ring_insert(q, i);
    pthread_cond_signal(&q->cv);
  } else if (i >= 0) {
    maybe_free_slot(q, i);
  }
  pthread_mutex_unlock(&q->mu);
  if (st != LLB_STATUS_OK) free(n);
  return st;
}

/* Takes the head item of the ring's next tenant that may be served (deficit round robin);
 * -1 when none may be served now; mu held. */
static int pick(struct intake_queue *q, void **item) {
  int64_t max_visits = (int64_t)q->ring_size * 2 + 1, eligible_in_round = 0;
  for (int64_t visits = 0; q->cursor >= 0 && visits < max_visits; visits++) {
    const int i = q->cursor;
    struct tenant *t = &q->slots[i];
    if (visits > 0 && visits % q->ring_size == 0) {
      if (!eligible_in_round) return -1; /* a whole round and every tenant at its cap */
      eligible_in_round = 0;
      max_visits += q->ring_size; /* deficits grow each round: a costly head item fits eventually */
    }
    if (t->in_service >= q->cfg.max_in_service_per_tenant) {
      q->cursor = t->ring_next;
      q->cursor_fresh = false;
      continue;
    }
    eligible_in_round++;
    if (!q->cursor_fresh) {
      t->deficit += q->cfg.quantum;
      q->cursor_fresh = true;
    }
    struct node *n = t->head;
    if (n->cost > t->deficit && q->ring_size > 1) {
      q->cursor = t->ring_next;
      q->cursor_fresh = false;
      continue;
    }
    t->deficit = n->cost > t->deficit ? 0 : t->deficit - n->cost; /* alone: no one to be fair to */
    t->head = n->next;
    if (!t->head) t->tail = NULL;
    t->items--;
    t->bytes -= n->cost;
    t->in_service++;
    q->total_items--;
    q->total_bytes -= n->cost;
    *item = n->item;
    free(n);
    if (!t->items) {
      t->deficit = 0;
      ring_remove(q, i);
    }
    return i;
  }
  return -1;
}

bool intake_queue_pop(struct intake_queue *q, void **item, int *slot) {
  pthread_mutex_lock(&q->mu);
  for (;;) {
    int i = pick(q, item);
    if (i >= 0) {
      *slot = i;
      pthread_mutex_unlock(&q->mu);
      return true;
    }
    if (q->closed && q->total_items == 0) break;
    pthread_cond_wait(&q->cv, &q->mu);
  }
  pthread_mutex_unlock(&q->mu);
  return false;
}

void intake_queue_done(struct intake_queue *q, int slot) {
  if (!q || slot < 0 || slot >= INTAKE_QUEUE_MAX_TENANTS) return;
  pthread_mutex_lock(&q->mu);
  if (q->slots[slot].in_service > 0) q->slots[slot].in_service--;
  maybe_free_slot(q, slot);
  pthread_cond_broadcast(&q->cv); /* that tenant may be served again */
  pthread_mutex_unlock(&q->mu);
}

void intake_queue_close(struct intake_queue *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

int32_t intake_queue_pending(struct intake_queue *q, const char *tenant, int32_t *total) {
  pthread_mutex_lock(&q->mu);
  int i = tenant ? slot_of(q, tenant, false) : -1;
  int32_t n = i >= 0 ? q->slots[i].items : 0;
  if (total) *total = q->total_items;
  pthread_mutex_unlock(&q->mu);
  return n;
}
