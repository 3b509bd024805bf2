/* Waiting queue: FCFS ring deque or priority heap. See sched_queue.h. */
#include "actors/scheduler/sched_queue.h"

#include <stdlib.h>

void sched_queue_init(struct sched_queue *q, enum sched_policy policy) {
  *q = (struct sched_queue){.policy = policy};
}

void sched_queue_free(struct sched_queue *q) {
  free(q->items);
  q->items = NULL;
  q->num = q->cap = q->head = 0;
}

static llb_status reserve(struct sched_queue *q) {
  if (q->num < q->cap) return LLB_STATUS_OK;
  int32_t cap = q->cap ? q->cap * 2 : 64;
  struct sched_request **items = malloc((size_t)cap * sizeof(*items));
  if (!items) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "waiting queue of %d", cap);
  for (int32_t i = 0; i < q->num; i++) items[i] = sched_queue_at(q, i);
  free(q->items);
  q->items = items;
  q->cap = cap;
  q->head = 0;
  return LLB_STATUS_OK;
}

/* Heap order: (priority, arrival_time, arrival_seq) ascending. */
static bool before(const struct sched_request *a, const struct sched_request *b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->arrival_time != b->arrival_time) return a->arrival_time < b->arrival_time;
  return a->arrival_seq < b->arrival_seq;
}

static void heap_set(struct sched_queue *q, int32_t i, struct sched_request *r) {
  q->items[i] = r;
  r->queue_index = i;
}

static void sift_up(struct sched_queue *q, int32_t i) {
  struct sched_request *r = q->items[i];
  while (i > 0) {
    int32_t parent = (i - 1) / 2;
    if (!before(r, q->items[parent])) break;
    heap_set(q, i, q->items[parent]);
    i = parent;
  }
  heap_set(q, i, r);
}

static void sift_down(struct sched_queue *q, int32_t i) {
  struct sched_request *r = q->items[i];
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= q->num) break;
    if (c + 1 < q->num && before(q->items[c + 1], q->items[c])) c++;
    if (!before(q->items[c], r)) break;
    heap_set(q, i, q->items[c]);
    i = c;
  }
  heap_set(q, i, r);
}

llb_status sched_queue_push(struct sched_queue *q, struct sched_request *r) {
  llb_status st = reserve(q);
  if (st) return st;
  if (q->policy == SCHED_POLICY_PRIORITY) {
    q->items[q->num++] = r;
    sift_up(q, q->num - 1);
  } else {
    q->items[(q->head + q->num) % q->cap] = r;
    q->num++;
    r->queue_index = 0;
  }
  return LLB_STATUS_OK;
}

llb_status sched_queue_push_front(struct sched_queue *q, struct sched_request *r) {
  if (q->policy == SCHED_POLICY_PRIORITY) return sched_queue_push(q, r);
  llb_status st = reserve(q);
  if (st) return st;
  q->head = (q->head + q->cap - 1) % q->cap;
  q->items[q->head] = r;
  q->num++;
  r->queue_index = 0;
  return LLB_STATUS_OK;
}

struct sched_request *sched_queue_at(const struct sched_queue *q, int32_t i) {
  if (i < 0 || i >= q->num) return NULL;
  return q->policy == SCHED_POLICY_PRIORITY ? q->items[i] : q->items[(q->head + i) % q->cap];
}

struct sched_request *sched_queue_peek(const struct sched_queue *q) { return sched_queue_at(q, 0); }

static void heap_remove_at(struct sched_queue *q, int32_t i) {
  struct sched_request *gone = q->items[i];
  q->num--;
  if (i < q->num) {
    struct sched_request *moved = q->items[q->num];
    heap_set(q, i, moved);
    sift_down(q, i);
    sift_up(q, moved->queue_index);
  }
  gone->queue_index = -1;
}

struct sched_request *sched_queue_pop(struct sched_queue *q) {
  if (q->num == 0) return NULL;
  struct sched_request *r = sched_queue_at(q, 0);
  if (q->policy == SCHED_POLICY_PRIORITY) {
    heap_remove_at(q, 0);
  } else {
    q->head = (q->head + 1) % q->cap;
    q->num--;
    r->queue_index = -1;
  }
  return r;
}

bool sched_queue_remove(struct sched_queue *q, struct sched_request *r) {
  if (q->policy == SCHED_POLICY_PRIORITY) {
    int32_t i = r->queue_index;
    if (i < 0 || i >= q->num || q->items[i] != r) return false;
    heap_remove_at(q, i);
    return true;
  }
  for (int32_t i = 0; i < q->num; i++) {
    if (sched_queue_at(q, i) != r) continue;
    for (int32_t j = i; j + 1 < q->num; j++)
      q->items[(q->head + j) % q->cap] = q->items[(q->head + j + 1) % q->cap];
    q->num--;
    r->queue_index = -1;
    return true;
  }
  return false;
}
