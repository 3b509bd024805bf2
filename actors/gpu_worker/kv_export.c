/* The export registry of the KV connector (kv_export.h). A few thousand exports at most: an
 * array searched linearly (a fetch costs far more in copying than in finding its entry). */
#include "actors/gpu_worker/kv_export.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kv_export {
  char id[LLB_KV_REQ_ID_MAX + 1];
  int32_t *block_ids; /* [num_blocks] cache block ids, in order */
  int32_t num_blocks, num_tokens;
  uint64_t generation; /* unique per export of an id, never 0 */
  int64_t deadline_ns;
};

struct tombstone {
  char id[LLB_KV_REQ_ID_MAX + 1];
  enum llb_kv_transfer_status status; /* UNKNOWN (released) or EXPIRED */
};

struct kv_export_registry {
  pthread_mutex_t mu;
  struct kv_export_limits lim;
  struct kv_export *exports; /* [num] live, capacity lim.max_reqs */
  int32_t num;
  int64_t num_blocks;
  uint64_t next_generation; /* of the next export; starts at the wall clock (ns) at creation */
  struct tombstone *tomb; /* ring [KV_EXPORT_TOMBSTONES] */
  int32_t tomb_next;
  char **ended;           /* [num_ended] ids not yet taken */
  int32_t num_ended, ended_cap;
  char **taken;           /* [num_taken] what the last take_ended returned */
  int32_t num_taken;
};

llb_status kv_export_create(const struct kv_export_limits *lim, struct kv_export_registry **out) {
  if (!lim || lim->num_cache_blocks < 1 || lim->max_reqs < 1 || lim->max_blocks < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv export limits must be >= 1");
  struct kv_export_registry *r = calloc(1, sizeof *r);
  if (!r) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv export registry");
  r->lim = *lim;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->next_generation = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 1; /* never 0 */
  r->exports = calloc((size_t)lim->max_reqs, sizeof *r->exports);
  r->tomb = calloc(KV_EXPORT_TOMBSTONES, sizeof *r->tomb);
  if (!r->exports || !r->tomb) {
    free(r->exports);
    free(r->tomb);
    free(r);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv export registry of %d exports", lim->max_reqs);
  }
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return LLB_STATUS_OK;
}

static void free_ids(char **ids, int32_t n) {
  for (int32_t i = 0; i < n; i++) free(ids[i]);
}

void kv_export_destroy(struct kv_export_registry *r) {
  if (!r) return;
  for (int32_t i = 0; i < r->num; i++) free(r->exports[i].block_ids);
  free_ids(r->ended, r->num_ended);
  free_ids(r->taken, r->num_taken);
  free(r->ended);
  free(r->taken);
  free(r->exports);
  free(r->tomb);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Appends a copy of id to the ended list (under the lock). */
static llb_status push_ended(struct kv_export_registry *r, const char *id) {
  if (r->num_ended == r->ended_cap) {
    const int32_t cap = r->ended_cap ? 2 * r->ended_cap : 16;
    char **p = realloc(r->ended, (size_t)cap * sizeof *p);
    if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv export ended list");
    r->ended = p;
    r->ended_cap = cap;
  }
  char *copy = strdup(id);
  if (!copy) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv export ended id");
  r->ended[r->num_ended++] = copy;
  return LLB_STATUS_OK;
}

static struct kv_export *find(struct kv_export_registry *r, const char *id) {
  for (int32_t i = 0; i < r->num; i++)
    if (strcmp(r->exports[i].id, id) == 0) return &r->exports[i];
  return NULL;
}

/* Removes export e (under the lock), remembering why, and reports its id when `report`. */
static void remove_export(struct kv_export_registry *r, struct kv_export *e, enum llb_kv_transfer_status why,
                          bool report) {
  struct tombstone *t = &r->tomb[r->tomb_next];
  r->tomb_next = (r->tomb_next + 1) % KV_EXPORT_TOMBSTONES;
  snprintf(t->id, sizeof t->id, "%s", e->id);
  t->status = why;
  if (report && push_ended(r, e->id)) /* out of memory: the id is lost and its blocks leak until a restart */
    fprintf(stderr, "kv_export: cannot report %s ended: out of memory\n", e->id);
  r->num_blocks -= e->num_blocks;
  free(e->block_ids);
  *e = r->exports[--r->num];
}

static void end_export(struct kv_export_registry *r, struct kv_export *e, enum llb_kv_transfer_status why) {
  remove_export(r, e, why, true);
}

static llb_status check_request(const struct kv_export_registry *r, const struct llb_kv_send_request *q,
                                const char *id) {
  if (q->req_id.len == 0 || q->req_id.len > LLB_KV_REQ_ID_MAX)
    return LLB_ERRF(LLB_STATUS_TOO_LARGE, "export id of %zu bytes (1..%d)", q->req_id.len, LLB_KV_REQ_ID_MAX);
  if (q->num_block_ids < 1 || q->num_block_ids > LLB_KV_MAX_BLOCKS_PER_REQ || q->num_tokens < 1 ||
      !isfinite(q->expires_in_s) || q->expires_in_s <= 0.0f || q->expires_in_s > LLB_KV_MAX_EXPIRES_S)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "export %s: %d blocks, %d tokens, expiry %g s", id,
                    q->num_block_ids, q->num_tokens, (double)q->expires_in_s);
  for (int32_t i = 0; i < q->num_block_ids; i++) {
    if (q->block_ids[i] < 0 || q->block_ids[i] >= r->lim.num_cache_blocks)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "export %s: block_ids[%d] = %d outside the cache's [0, %d)",
                      id, i, q->block_ids[i], r->lim.num_cache_blocks);
  }
  if (r->num >= r->lim.max_reqs || r->num_blocks + q->num_block_ids > r->lim.max_blocks)
    return LLB_ERRF(LLB_STATUS_QUEUE_FULL, "export %s: %d exports of %lld blocks held (at most %d, %lld blocks)",
                    id, r->num, (long long)r->num_blocks, r->lim.max_reqs, (long long)r->lim.max_blocks);
  return LLB_STATUS_OK;
}

static llb_status add_locked(struct kv_export_registry *r, const struct llb_kv_send_request *q, int64_t now_ns) {
  char id[LLB_KV_REQ_ID_MAX + 1];
  snprintf(id, sizeof id, "%.*s", (int)(q->req_id.len < sizeof id ? q->req_id.len : sizeof id - 1),
           q->req_id.data ? q->req_id.data : "");
  if (find(r, id)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "export %s is already held", id);
  llb_status st = check_request(r, q, id);
  if (st) {
    if (push_ended(r, id)) return LLB_STATUS_OUT_OF_MEMORY;
    return st;
  }
  struct kv_export e = {.num_blocks = q->num_block_ids, .num_tokens = q->num_tokens,
                        .deadline_ns = now_ns + (int64_t)((double)q->expires_in_s * 1e9)};
  memcpy(e.id, id, sizeof id);
  e.block_ids = malloc((size_t)e.num_blocks * sizeof *e.block_ids);
  if (!e.block_ids) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "export %s of %d blocks", id, e.num_blocks);
  memcpy(e.block_ids, q->block_ids, (size_t)e.num_blocks * sizeof *e.block_ids);
  e.generation = r->next_generation++;
  if (!r->next_generation) r->next_generation = 1; /* 0 names no export */
  r->exports[r->num++] = e;
  r->num_blocks += e.num_blocks;
  return LLB_STATUS_OK;
}

llb_status kv_export_add(struct kv_export_registry *r, const struct llb_kv_send_request *req, int64_t now_ns) {
  pthread_mutex_lock(&r->mu);
  llb_status st = add_locked(r, req, now_ns);
  pthread_mutex_unlock(&r->mu);
  return st;
}

static int32_t expire_locked(struct kv_export_registry *r, int64_t now_ns) {
  int32_t n = 0;
  for (int32_t i = r->num - 1; i >= 0; i--)
    if (r->exports[i].deadline_ns <= now_ns) {
      end_export(r, &r->exports[i], LLB_KV_TRANSFER_EXPIRED);
      n++;
    }
  return n;
}

int32_t kv_export_cancel_all(struct kv_export_registry *r) {
  pthread_mutex_lock(&r->mu);
  const int32_t n = r->num;
  while (r->num > 0) remove_export(r, &r->exports[r->num - 1], LLB_KV_TRANSFER_EXPIRED, false);
  pthread_mutex_unlock(&r->mu);
  return n;
}

int32_t kv_export_expire(struct kv_export_registry *r, int64_t now_ns) {
  pthread_mutex_lock(&r->mu);
  int32_t n = expire_locked(r, now_ns);
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* An id with no live export: what became of it, if it is remembered. */
static enum llb_kv_transfer_status gone_status(const struct kv_export_registry *r, const char *id, char *why,
                                               size_t why_cap) {
  for (int32_t i = 0; i < KV_EXPORT_TOMBSTONES; i++) {
    const struct tombstone *t = &r->tomb[i];
    if (t->id[0] && strcmp(t->id, id) == 0) {
      snprintf(why, why_cap, t->status == LLB_KV_TRANSFER_EXPIRED ? "export %s expired"
                                                                  : "export %s ended: its fetcher released it",
               id);
      return t->status;
    }
  }
  snprintf(why, why_cap, "no export %s here (yet)", id);
  return LLB_KV_TRANSFER_NOT_READY;
}

static enum llb_kv_transfer_status fetch_locked(struct kv_export_registry *r, const char *id, uint64_t gen,
                                                int32_t first, int32_t n, kv_export_read_fn read, void *user,
                                                uint8_t *dst, size_t block_bytes, int32_t *num_tokens,
                                                uint64_t *generation, char *why, size_t why_cap) {
  struct kv_export *e = find(r, id);
  *generation = e ? e->generation : 0;
  if (!e) return gone_status(r, id, why, why_cap);
  if (gen != 0 && gen != e->generation) {
    snprintf(why, why_cap, "export %s of generation %llu is not held here (generation %llu is): a stale fetch", id,
             (unsigned long long)gen, (unsigned long long)e->generation);
    return LLB_KV_TRANSFER_UNKNOWN;
  }
  if (first < 0 || n < 1 || (int64_t)first + n > e->num_blocks) {
    snprintf(why, why_cap, "blocks [%d, +%d) of export %s, which has %d", first, n, id, e->num_blocks);
    return LLB_KV_TRANSFER_OUT_OF_RANGE;
  }
  for (int32_t i = 0; i < n; i++) {
    llb_status st = read(user, e->block_ids[first + i], dst + (size_t)i * block_bytes);
    if (st) {
      snprintf(why, why_cap, "reading block %d of export %s: %s", first + i, id, llb_err_last());
      return LLB_KV_TRANSFER_ERROR;
    }
  }
  *num_tokens = e->num_tokens;
  return LLB_KV_TRANSFER_OK;
}

enum llb_kv_transfer_status kv_export_fetch(struct kv_export_registry *r, const char *id, uint64_t gen, int32_t first,
                                            int32_t n, int64_t now_ns, kv_export_read_fn read, void *user,
                                            uint8_t *dst, size_t block_bytes, int32_t *num_tokens,
                                            uint64_t *generation, char *why, size_t why_cap) {
  pthread_mutex_lock(&r->mu);
  expire_locked(r, now_ns);
  enum llb_kv_transfer_status s =
      fetch_locked(r, id, gen, first, n, read, user, dst, block_bytes, num_tokens, generation, why, why_cap);
  pthread_mutex_unlock(&r->mu);
  return s;
}

llb_status kv_export_release(struct kv_export_registry *r, const char *id, uint64_t gen) {
  pthread_mutex_lock(&r->mu);
  struct kv_export *e = find(r, id);
  const uint64_t held = e ? e->generation : 0;
  if (e && gen == held) end_export(r, e, LLB_KV_TRANSFER_UNKNOWN);
  pthread_mutex_unlock(&r->mu);
  if (!e) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "release of export %s: none held", id);
  if (gen != held)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "release of export %s of generation %llu refused: generation %llu is held (a release names the "
                    "generation of its export; a stale one ends nothing)", id, (unsigned long long)gen, (unsigned long long)held);
  return LLB_STATUS_OK;
}

int32_t kv_export_take_ended(struct kv_export_registry *r, const char *const **ids) {
  pthread_mutex_lock(&r->mu);
  free_ids(r->taken, r->num_taken);
  free(r->taken);
  r->taken = r->ended;
  r->num_taken = r->num_ended;
  r->ended = NULL;
  r->num_ended = r->ended_cap = 0;
  const int32_t n = r->num_taken;
  *ids = (const char *const *)r->taken;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void kv_export_counts(struct kv_export_registry *r, int32_t *num_reqs, int64_t *num_blocks) {
  pthread_mutex_lock(&r->mu);
  *num_reqs = r->num;
  *num_blocks = r->num_blocks;
  pthread_mutex_unlock(&r->mu);
}
