/* Shared packed-weight cache file; see packed_cache.h. */
#include "model/forward/packed_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "LLBPACK1"
/* 2 (2026-11-30): the K6 (Q6_K) panels hold their quants 6 bits a byte (kernels/cpu/packed.h).
 * 3 (2026-11-30): Q4_0 / Q5_0 blocks hold no min (the zero-point form, 32 bytes a block less).
 * An older file holds other bytes: ignored and rewritten (the caller also repacks the smallest
 * weight of each type and compares, forward_pack.c). */
#define HEADER_VERSION PACKED_CACHE_VERSION

struct header {
  char magic[8];
  uint32_t version;
  int32_t num_weights;
  uint64_t source_key;
  uint64_t total;
  uint64_t sizes_hash;
  uint64_t sizes[PACKED_CACHE_MAX_WEIGHTS];
};
_Static_assert(sizeof(struct header) <= PACKED_CACHE_DATA_OFFSET, "header fits its page");

uint64_t packed_cache_hash(uint64_t h, const void *buf, size_t len) {
  return llb_fnv1a64(h, buf, len);
}

static bool layout_ok(const struct packed_cache_layout *l) {
  return l && l->num_weights > 0 && l->num_weights <= PACKED_CACHE_MAX_WEIGHTS && l->sizes && l->total > 0;
}

static void fill_header(struct header *h, const struct packed_cache_layout *l) {
  memset(h, 0, sizeof *h);
  memcpy(h->magic, MAGIC, sizeof h->magic);
  h->version = HEADER_VERSION;
  h->num_weights = l->num_weights;
  h->source_key = l->source_key;
  h->total = l->total;
  memcpy(h->sizes, l->sizes, (size_t)l->num_weights * sizeof *l->sizes);
  h->sizes_hash = packed_cache_hash(PACKED_CACHE_HASH_INIT, l->sizes, (size_t)l->num_weights * sizeof *l->sizes);
}

llb_status packed_cache_open(const char *path, const struct packed_cache_layout *layout, struct packed_cache_map *out) {
  memset(out, 0, sizeof *out);
  if (!path || !layout_ok(layout)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "packed cache: bad layout");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return LLB_ERRF(LLB_STATUS_NOT_FOUND, "packed cache %s: absent", path);
    return LLB_ERRF(LLB_STATUS_IO, "packed cache %s: %s", path, strerror(errno));
  }
  struct stat st;
  struct header want, got;
  fill_header(&want, layout);
  const size_t length = PACKED_CACHE_DATA_OFFSET + layout->total;
  llb_status rc = LLB_STATUS_OK;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size != length || pread(fd, &got, sizeof got, 0) != (ssize_t)sizeof got ||
      memcmp(&got, &want, sizeof got) != 0)
    rc = LLB_ERRF(LLB_STATUS_NOT_FOUND, "packed cache %s: another model, options or build", path);
  void *base = rc == LLB_STATUS_OK ? mmap(NULL, length, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (rc == LLB_STATUS_OK && base == MAP_FAILED) rc = LLB_ERRF(LLB_STATUS_IO, "packed cache %s: mmap: %s", path, strerror(errno));
  close(fd);
  if (rc != LLB_STATUS_OK) return rc;
  out->base = base;
  out->length = length;
  out->data = (const uint8_t *)base + PACKED_CACHE_DATA_OFFSET;
  return LLB_STATUS_OK;
}

/* mkdir -p of the directory part of path. */
static void make_parent_dirs(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return;
  *slash = '\0';
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    (void)mkdir(dir, 0755);
    *p = '/';
  }
  (void)mkdir(dir, 0755);
}

static bool write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

llb_status packed_cache_write(const char *path, const struct packed_cache_layout *layout, const void *data) {
  if (!path || !layout_ok(layout) || !data) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "packed cache: bad layout");
  make_parent_dirs(path);
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "packed cache path too long: %s", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return LLB_ERRF(LLB_STATUS_IO, "packed cache %s: %s", tmp, strerror(errno));
  static const uint8_t zero[PACKED_CACHE_DATA_OFFSET];
  struct header h;
  fill_header(&h, layout);
  bool ok = write_all(fd, &h, sizeof h) && write_all(fd, zero, PACKED_CACHE_DATA_OFFSET - sizeof h) &&
            write_all(fd, data, layout->total) && fsync(fd) == 0;
  int err = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp);
    return LLB_ERRF(LLB_STATUS_IO, "packed cache %s: %s", path, strerror(err));
  }
  return LLB_STATUS_OK;
}

void packed_cache_unmap(struct packed_cache_map *m) {
  if (m && m->base) munmap(m->base, m->length);
  if (m) memset(m, 0, sizeof *m);
}
