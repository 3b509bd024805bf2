/* A file of packed weights shared by every process of a host (issue: memory; docs/design.md §9).
 *
 * The CPU backend repacks a model's matmul weights into its own layout at context creation
 * (llama_forward, LLAMA_MATMUL_PACKED): about the size of the weights, private to the
 * process. With several engines on a host (`llmbus serve --engines N`) or a worker restarted
 * after a crash, that is N copies and a repack each time. The cache writes the packed bytes
 * once to a file and maps it read-only and shared (MAP_SHARED): every worker of the host reads
 * the same page-cache pages, and a restarted worker maps instead of repacking.
 *
 * File: a 4 KiB header (magic "LLBPACK1", header version, the caller's source key, the number
 * of weights, each one's packed size, the total) then the bytes at offset 4096. A file whose
 * header does not match what the caller expects is ignored (and replaced by the writer).
 * Written to "<path>.tmp.<pid>" then renamed: readers never see a partial file, and two
 * writers racing produce the same bytes.
 *
 * The source key names the inputs (the caller hashes the model file's identity and the
 * matmul mode); that the packing code itself is the same is checked by the caller, which
 * repacks one weight and compares it with the file's copy before trusting the file
 * (model/forward/forward.c).
 */
#ifndef LLB_MODEL_PACKED_CACHE_H
#define LLB_MODEL_PACKED_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"
#include "base/status.h"

#define PACKED_CACHE_DATA_OFFSET 4096
/* The layout version of a cache file's packed bytes (packed_cache.c's header says what each
 * changed); the caller puts it in the file's key too, so that builds of two versions sharing a
 * cache directory keep a file each instead of rewriting one at every start. */
#define PACKED_CACHE_VERSION 3u
#define PACKED_CACHE_MAX_WEIGHTS 480 /* fits the 4 KiB header: 8 bytes each after 48 */

/* What a cache file must hold to be used. */
struct packed_cache_layout {
  uint64_t source_key;     /* the caller's key of model file + options */
  const uint64_t *sizes;   /* [num_weights] packed bytes of each weight, in order */
  int32_t num_weights;     /* <= PACKED_CACHE_MAX_WEIGHTS */
  uint64_t total;          /* bytes of data (sizes with their alignment) */
};

/* A mapping of a cache file's data; release with packed_cache_unmap. */
struct packed_cache_map {
  void *base;       /* the mmap (header included) */
  size_t length;
  const uint8_t *data; /* base + PACKED_CACHE_DATA_OFFSET, total bytes */
};

/* Maps `path` read-only and shared when its header matches `layout`. NOT_FOUND when the file
 * is absent or does not match (a stale or foreign file); IO for other failures (message names
 * the path). */
llb_status packed_cache_open(const char *path, const struct packed_cache_layout *layout, struct packed_cache_map *out);

/* Writes data [layout->total] as the cache file `path` (temporary file + rename; the
 * directory is created if missing, mode 0755; the file 0644). IO errors name the path. */
llb_status packed_cache_write(const char *path, const struct packed_cache_layout *layout, const void *data);

/* Unmaps (accepts a zeroed map). */
void packed_cache_unmap(struct packed_cache_map *m);

/* 64-bit FNV-1a over buf[len], continuing from h (start with PACKED_CACHE_HASH_INIT): what
 * callers build source keys with. */
#define PACKED_CACHE_HASH_INIT LLB_FNV1A64_INIT
uint64_t packed_cache_hash(uint64_t h, const void *buf, size_t len);

#endif
