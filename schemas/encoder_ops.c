/* Encoder-cache accounting (vLLM v1 EncoderCacheManager semantics, our code) and the
 * encoder step op list. See encoder_ops.h.
 *
 * Entries live in one array searched linearly: an entry holds at least one embedding row,
 * so there are at most cache_size of them, and in practice a few dozen (items are tens to
 * thousands of rows). The eviction queue is a sequence number per freeable entry (oldest
 * = smallest). */
#include "schemas/encoder_ops.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

struct ec_entry {
  char *mm_hash;
  int32_t num_embeds;
  uint64_t freeable_seq;  /* > 0: freeable, queued in this order; 0: referenced */
  char **refs;            /* [num_refs] request ids (a set) */
  int32_t num_refs, cap_refs;
};

struct encoder_cache {
  int32_t cache_size, num_free_slots, num_freeable_slots;
  struct ec_entry *entries; /* [num_entries] */
  int32_t num_entries, cap_entries;
  uint64_t next_seq;
  char **freed;             /* [num_freed] evicted hashes (owned) */
  int32_t num_freed, cap_freed;
};

llb_status encoder_cache_create(int32_t cache_size, struct encoder_cache **out) {
  *out = NULL;
  if (cache_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "encoder cache size %d rows, must be >= 1", cache_size);
  struct encoder_cache *ec = calloc(1, sizeof(*ec));
  if (!ec) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache");
  ec->cache_size = ec->num_free_slots = ec->num_freeable_slots = cache_size;
  ec->next_seq = 1;
  *out = ec;
  return LLB_STATUS_OK;
}

static void entry_free(struct ec_entry *e) {
  free(e->mm_hash);
  for (int32_t i = 0; i < e->num_refs; i++) free(e->refs[i]);
  free(e->refs);
}

static void clear_freed(struct encoder_cache *ec) {
  for (int32_t i = 0; i < ec->num_freed; i++) free(ec->freed[i]);
  ec->num_freed = 0;
}

void encoder_cache_reset(struct encoder_cache *ec) {
  for (int32_t i = 0; i < ec->num_entries; i++) entry_free(&ec->entries[i]);
  ec->num_entries = 0;
  clear_freed(ec);
  ec->num_free_slots = ec->num_freeable_slots = ec->cache_size;
}

void encoder_cache_destroy(struct encoder_cache *ec) {
  if (!ec) return;
  encoder_cache_reset(ec);
  free(ec->entries);
  free(ec->freed);
  free(ec);
}

static int32_t find(const struct encoder_cache *ec, const char *mm_hash) {
  for (int32_t i = 0; i < ec->num_entries; i++)
    if (strcmp(ec->entries[i].mm_hash, mm_hash) == 0) return i;
  return -1;
}

/* Adds req_id to e's reference set; false on OOM. */
static bool add_ref(struct ec_entry *e, const char *req_id) {
  for (int32_t i = 0; i < e->num_refs; i++)
    if (strcmp(e->refs[i], req_id) == 0) return true;
  char *id = strdup(req_id);
  if (!id || llb_array_reserve32((void **)&e->refs, &e->cap_refs, e->num_refs + 1, sizeof(*e->refs)) != LLB_STATUS_OK) {
    free(id);
    return false;
  }
  e->refs[e->num_refs++] = id;
  return true;
}

llb_status encoder_cache_check_and_update(struct encoder_cache *ec, const char *req_id,
                                          const char *mm_hash, bool *hit) {
  *hit = false;
  int32_t i = find(ec, mm_hash);
  if (i < 0) return LLB_STATUS_OK;
  struct ec_entry *e = &ec->entries[i];
  if (!add_ref(e, req_id)) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache reference");
  if (e->freeable_seq > 0) { /* freeable -> referenced: no longer reclaimable */
    e->freeable_seq = 0;
    ec->num_freeable_slots -= e->num_embeds;
  }
  *hit = true;
  return LLB_STATUS_OK;
}

/* Removes entry i, moving its hash to the freed list (eviction). */
static bool evict(struct encoder_cache *ec, int32_t i) {
  struct ec_entry *e = &ec->entries[i];
  if (llb_array_reserve32((void **)&ec->freed, &ec->cap_freed, ec->num_freed + 1, sizeof(*ec->freed)) != LLB_STATUS_OK) return false;
  ec->freed[ec->num_freed++] = e->mm_hash;
  e->mm_hash = NULL;
  ec->num_free_slots += e->num_embeds;
  entry_free(e);
  ec->entries[i] = ec->entries[--ec->num_entries];
  return true;
}

bool encoder_cache_can_allocate(struct encoder_cache *ec, int32_t num_embeds,
                                int32_t encoder_compute_budget, int32_t num_embeds_to_schedule) {
  if (num_embeds > encoder_compute_budget) return false;
  int64_t need = (int64_t)num_embeds + num_embeds_to_schedule;
  if (need <= ec->num_free_slots) return true;
  if (need > ec->num_freeable_slots) return false;
  while (need > ec->num_free_slots) {
    int32_t oldest = -1;
    for (int32_t i = 0; i < ec->num_entries; i++)
      if (ec->entries[i].freeable_seq > 0 &&
          (oldest < 0 || ec->entries[i].freeable_seq < ec->entries[oldest].freeable_seq))
        oldest = i;
    if (oldest < 0 || !evict(ec, oldest)) return false;
  }
  return true;
}

llb_status encoder_cache_evict_all(struct encoder_cache *ec) {
  while (ec->num_entries > 0) {
    if (!evict(ec, ec->num_entries - 1)) {
      for (int32_t i = 0; i < ec->num_entries; i++) entry_free(&ec->entries[i]);
      ec->num_entries = 0;
      ec->num_free_slots = ec->num_freeable_slots = ec->cache_size;
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache: freed list");
    }
  }
  ec->num_free_slots = ec->num_freeable_slots = ec->cache_size;
  return LLB_STATUS_OK;
}

llb_status encoder_cache_allocate(struct encoder_cache *ec, const char *req_id,
                                  const char *mm_hash, int32_t num_embeds) {
  if (num_embeds < 1 || find(ec, mm_hash) >= 0 || num_embeds > ec->num_free_slots ||
      num_embeds > ec->num_freeable_slots)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "encoder cache: cannot allocate %d rows for %s (%s; %d free)", num_embeds,
                    mm_hash, find(ec, mm_hash) >= 0 ? "already cached" : "no room", ec->num_free_slots);
  if (llb_array_reserve32((void **)&ec->entries, &ec->cap_entries, ec->num_entries + 1, sizeof(*ec->entries)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache entry");
  struct ec_entry e = {.mm_hash = strdup(mm_hash), .num_embeds = num_embeds};
  if (!e.mm_hash || !add_ref(&e, req_id)) {
    entry_free(&e);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder cache entry");
  }
  ec->entries[ec->num_entries++] = e;
  ec->num_free_slots -= num_embeds;
  ec->num_freeable_slots -= num_embeds;
  return LLB_STATUS_OK;
}

void encoder_cache_free_request(struct encoder_cache *ec, const char *req_id) {
  for (int32_t i = 0; i < ec->num_entries; i++) {
    struct ec_entry *e = &ec->entries[i];
    for (int32_t r = 0; r < e->num_refs; r++) {
      if (strcmp(e->refs[r], req_id) != 0) continue;
      free(e->refs[r]);
      e->refs[r] = e->refs[--e->num_refs];
      if (e->num_refs == 0) {
        e->freeable_seq = ec->next_seq++;
        ec->num_freeable_slots += e->num_embeds;
      }
      break;
    }
  }
}

int32_t encoder_cache_num_freed(const struct encoder_cache *ec) { return ec->num_freed; }
const char *encoder_cache_freed(const struct encoder_cache *ec, int32_t i) {
  return i >= 0 && i < ec->num_freed ? ec->freed[i] : NULL;
}
void encoder_cache_clear_freed(struct encoder_cache *ec) { clear_freed(ec); }
int32_t encoder_cache_size(const struct encoder_cache *ec) { return ec->cache_size; }
int32_t encoder_cache_num_free_slots(const struct encoder_cache *ec) { return ec->num_free_slots; }
int32_t encoder_cache_num_freeable_slots(const struct encoder_cache *ec) { return ec->num_freeable_slots; }
int32_t encoder_cache_num_entries(const struct encoder_cache *ec) { return ec->num_entries; }

int32_t encoder_cache_num_refs(const struct encoder_cache *ec, const char *mm_hash) {
  int32_t i = find(ec, mm_hash);
  return i < 0 ? -1 : ec->entries[i].num_refs;
}

/* ---- op list ---- */

void encoder_step_init(struct encoder_step *s) { memset(s, 0, sizeof(*s)); }

void encoder_step_free(struct encoder_step *s) {
  if (!s) return;
  free(s->ops);
  free(s->chars);
  encoder_step_init(s);
}

void encoder_step_clear(struct encoder_step *s, uint64_t step) {
  s->step = step;
  s->reset = false;
  s->num_ops = 0;
  s->num_chars = 0;
}

static bool push_str(struct encoder_step *s, const char *str, int64_t *off) {
  size_t n = strlen(str ? str : "") + 1;
  if (s->num_chars + (int64_t)n > s->cap_chars) {
    int64_t c = s->cap_chars > 0 ? s->cap_chars * 2 : 256;
    while (c < s->num_chars + (int64_t)n) c *= 2;
    char *p = realloc(s->chars, (size_t)c);
    if (!p) return false;
    s->chars = p;
    s->cap_chars = c;
  }
  memcpy(s->chars + s->num_chars, str ? str : "", n);
  *off = s->num_chars;
  s->num_chars += (int64_t)n;
  return true;
}

llb_status encoder_step_add(struct encoder_step *s, const struct encoder_op *op, const char *req_id,
                            const char *mm_hash) {
  if (llb_array_reserve32((void **)&s->ops, &s->cap_ops, s->num_ops + 1, sizeof(*s->ops)) != LLB_STATUS_OK)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder step of %d ops", s->num_ops + 1);
  struct encoder_op o = *op;
  if (!push_str(s, req_id, &o.req_id_off) || !push_str(s, mm_hash, &o.mm_hash_off))
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "encoder step strings");
  s->ops[s->num_ops++] = o;
  return LLB_STATUS_OK;
}

const char *encoder_step_req_id(const struct encoder_step *s, const struct encoder_op *op) {
  return s->chars + op->req_id_off;
}

const char *encoder_step_mm_hash(const struct encoder_step *s, const struct encoder_op *op) {
  return s->chars + op->mm_hash_off;
}
