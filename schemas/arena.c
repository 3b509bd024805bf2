/* Bump allocator; see arena.h. */
#include "schemas/arena.h"

#include <stdlib.h>

struct llb_arena_chunk {
  struct llb_arena_chunk *next;
  size_t size; /* usable bytes after the header */
  size_t used;
  uint8_t data[]; /* region_alloc aligns within it */
};

void llb_arena_init(struct llb_arena *a, void *mem, size_t size) {
  *a = (struct llb_arena){.mem = mem, .mem_size = mem ? size : 0};
}

/* Bump-allocates from a region of `cap` bytes starting at `base`, `*used` already taken. */
static void *region_alloc(uint8_t *base, size_t cap, size_t *used, size_t size, size_t align) {
  uintptr_t start = ((uintptr_t)base + *used + (align - 1)) & ~(uintptr_t)(align - 1);
  size_t off = (size_t)(start - (uintptr_t)base);
  if (off > cap || cap - off < size)
    return NULL;
  *used = off + size;
  return base + off;
}

void *llb_arena_alloc(struct llb_arena *a, size_t size, size_t align) {
  if (align == 0 || (align & (align - 1)) != 0 || align > 64 || size > SIZE_MAX / 2)
    return NULL;
  void *p = NULL;
  if (a->mem)
    p = region_alloc(a->mem, a->mem_size, &a->mem_used, size, align);
  if (!p && a->chunks)
    p = region_alloc(a->chunks->data, a->chunks->size, &a->chunks->used, size, align);
  if (!p) {
    size_t want = size + align > LLB_ARENA_CHUNK_BYTES ? size + align : LLB_ARENA_CHUNK_BYTES;
    struct llb_arena_chunk *c = malloc(sizeof *c + want);
    if (!c)
      return NULL;
    c->next = a->chunks;
    c->size = want;
    c->used = 0;
    a->chunks = c;
    p = region_alloc(c->data, c->size, &c->used, size, align);
  }
  if (p)
    a->used_bytes += size;
  return p;
}

void llb_arena_reset(struct llb_arena *a) {
  a->mem_used = 0;
  a->used_bytes = 0;
  if (!a->chunks)
    return;
  if (a->chunks->next) {
    size_t total = 0;
    for (struct llb_arena_chunk *c = a->chunks, *next; c; c = next) {
      next = c->next;
      total += c->size;
      free(c);
    }
    a->chunks = malloc(sizeof *a->chunks + total);
    if (!a->chunks)
      return; /* the next alloc mallocs again */
    a->chunks->next = NULL;
    a->chunks->size = total;
  }
  a->chunks->used = 0;
}

void llb_arena_destroy(struct llb_arena *a) {
  if (!a)
    return;
  for (struct llb_arena_chunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  a->chunks = NULL;
  a->mem_used = 0;
  a->used_bytes = 0;
}
