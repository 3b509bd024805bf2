/* A bump allocator for decoded messages: decoding copies every string and array it returns
 * into an arena, so a decoded view needs no per-field free and outlives the wire buffer.
 *
 * Memory comes first from an optional caller-supplied region, then from malloc'd chunks
 * (at least LLB_ARENA_CHUNK_BYTES each). llb_arena_reset() rewinds without returning memory
 * (several chunks are merged into one), so a loop that decodes one message per step and
 * resets reaches a steady state with no allocation. Not thread-safe: one arena per thread.
 */
#ifndef LLB_SCHEMAS_ARENA_H
#define LLB_SCHEMAS_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define LLB_ARENA_CHUNK_BYTES ((size_t)64 * 1024)

struct llb_arena_chunk; /* private to arena.c */

struct llb_arena {
  uint8_t *mem;       /* caller memory, or NULL; never freed by the arena */
  size_t mem_size;
  size_t mem_used;
  struct llb_arena_chunk *chunks; /* malloc'd, newest first */
  size_t used_bytes;  /* bytes handed out since the last reset (statistics) */
};

/* Initializes `a` over `mem` (`size` bytes, caller-owned, may be NULL/0: malloc only).
 * `mem` must outlive the arena. Never fails. */
void llb_arena_init(struct llb_arena *a, void *mem, size_t size);

/* Returns `size` bytes aligned to `align` (a power of two <= 64), or NULL when malloc fails
 * or the request overflows. The memory is valid until llb_arena_reset/llb_arena_destroy.
 * `size` 0 returns a valid non-NULL pointer. */
void *llb_arena_alloc(struct llb_arena *a, size_t size, size_t align);

/* Forgets every allocation; keeps the memory (malloc'd chunks merged into one). */
void llb_arena_reset(struct llb_arena *a);

/* Frees the malloc'd chunks; the arena may be initialized again. NULL is accepted. */
void llb_arena_destroy(struct llb_arena *a);

#endif
