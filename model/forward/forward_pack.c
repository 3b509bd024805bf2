/* Packed weights of a forward context (forward_internal.h): one private allocation with huge
 * pages, or the host's shared cache file (model/forward/packed_cache.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/progress.h"
#include "model/forward/forward_internal.h"

#define PACK_ALIGN 64
#define HUGE_PAGE ((size_t)2 << 20)

int32_t llama_forward_matmul_weights(struct llama_forward_ctx *c, struct backend_weight **out) {
  int32_t n = 0;
  for (int32_t i = 0; i < c->m->cfg.block_count; i++) {
    struct llama_layer *l = &c->layers[i];
    struct backend_weight *ws[7] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
    for (int j = 0; j < 7; j++) out[n++] = ws[j];
  }
  out[n++] = &c->output;
  return n;
}

/* Packed bytes of each weight the backend has a layout for (0: none), their aligned total. */
static size_t pack_sizes(const struct backend_ops *ops, struct backend_weight **ws, int32_t n, uint64_t *sizes) {
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) {
    sizes[i] = ops->pack_bytes(ws[i]);
    total += (sizes[i] + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
  }
  return total;
}

/* Points every weight with a layout at its bytes in `data`, and releases the file pages those
 * layouts replace. */
static void use_packed(struct llama_forward_ctx *c, struct backend_weight **ws, int32_t n, const uint64_t *sizes,
                       const uint8_t *data) {
  for (int32_t i = 0; i < n; i++) {
    if (sizes[i] == 0) continue;
    ws[i]->packed = data;
    data += (sizes[i] + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
  }
  for (int32_t i = 0; i < n; i++)
    if (ws[i]->packed) gguf_release_pages(c->m->gguf, ws[i]->data, ws[i]->row_bytes * (size_t)ws[i]->rows);
}

/* Packs into one private allocation: 2 MiB aligned with huge pages where the kernel gives
 * them (decode streams every packed byte once per step; prefetchers stop at 4 KiB pages). */
static llb_status pack_private(struct llama_forward_ctx *c, struct backend_weight **ws, int32_t n,
                               const uint64_t *sizes, size_t total) {
  const size_t alloc = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  c->packed = aligned_alloc(HUGE_PAGE, alloc);
  if (!c->packed) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "packed weights (%zu bytes)", total);
#ifdef MADV_HUGEPAGE
  (void)madvise(c->packed, alloc, MADV_HUGEPAGE);
#endif
  uint8_t *p = c->packed;
  struct llb_progress progress; /* a large model takes a while: say so on a terminal */
  llb_progress_begin(&progress, "packing weights", (double)total / (1 << 20), "MiB");
  llb_status st = LLB_STATUS_OK;
  for (int32_t i = 0; i < n && st == LLB_STATUS_OK; i++) {
    if (sizes[i] == 0) continue;
    st = c->ops->pack(ws[i], p);
    p += (sizes[i] + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
    llb_progress_update(&progress, (double)(p - (uint8_t *)c->packed) / (1 << 20));
  }
  llb_progress_end(&progress);
  return st;
}

/* Whether w's bytes in the cache file (at data, size bytes) equal its packing by this build. */
static bool cache_weight_matches(const struct llama_forward_ctx *c, const struct backend_weight *w, uint64_t size,
                                 const uint8_t *data) {
  uint8_t *probe = malloc(size);
  bool same = probe && c->ops->pack(w, probe) == LLB_STATUS_OK && memcmp(probe, data, size) == 0;
  free(probe);
  return same;
}

/* Whether the cache file's bytes were made by this build's packing: the smallest packed weight
 * of each GGML type, repacked now, must equal its copy in the file. One probe per type catches a
 * layout change of any one type's panels whatever type the file starts with; the smallest keeps
 * a worker's start cheap (a type whose only weight is a large output matrix is not repacked
 * whole when a layer's weight of that type exists). */
static bool cache_matches_packing(const struct llama_forward_ctx *c, struct backend_weight **ws, int32_t n,
                                  const uint64_t *sizes, const uint8_t *data) {
  int32_t pick[GGML_TYPE_COUNT];
  uint64_t at[GGML_TYPE_COUNT], off = 0;
  for (int t = 0; t < GGML_TYPE_COUNT; t++) pick[t] = -1;
  for (int32_t i = 0; i < n; off += (sizes[i] + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN, i++) {
    const unsigned t = (unsigned)ws[i]->type;
    if (sizes[i] == 0) continue;
    if (t >= GGML_TYPE_COUNT) return false; /* the backend packed a type this check cannot name */
    if (pick[t] < 0 || sizes[i] < sizes[pick[t]]) pick[t] = i, at[t] = off;
  }
  for (int t = 0; t < GGML_TYPE_COUNT; t++)
    if (pick[t] >= 0 && !cache_weight_matches(c, ws[pick[t]], sizes[pick[t]], data + at[t])) return false;
  return true;
}

/* Maps the host's cache file of these packed weights if it holds them, else packs privately
 * and writes the file for the next process (then maps it, so that memory is shared too).
 * Falls back to the private copy when the cache cannot be used (logged). */
static llb_status pack_via_cache(struct llama_forward_ctx *c, const char *dir, struct backend_weight **ws,
                                 int32_t n, const uint64_t *sizes, size_t total, enum llama_matmul_mode mode) {
  uint64_t key = packed_cache_hash(PACKED_CACHE_HASH_INIT, &(uint64_t){gguf_identity(c->m->gguf)}, sizeof(uint64_t));
  key = packed_cache_hash(key, &(int32_t){(int32_t)mode}, sizeof(int32_t));
  key = packed_cache_hash(key, &(uint32_t){PACKED_CACHE_VERSION}, sizeof(uint32_t));
  char path[4096];
  snprintf(path, sizeof path, "%s/packed-%016llx.llbpack", dir, (unsigned long long)key);
  const struct packed_cache_layout layout = {.source_key = key, .sizes = sizes, .num_weights = n, .total = total};
  llb_status st = packed_cache_open(path, &layout, &c->packed_map);
  if (st == LLB_STATUS_OK && cache_matches_packing(c, ws, n, sizes, c->packed_map.data)) {
    use_packed(c, ws, n, sizes, c->packed_map.data);
    return LLB_STATUS_OK;
  }
  packed_cache_unmap(&c->packed_map);
  if ((st = pack_private(c, ws, n, sizes, total)) != LLB_STATUS_OK) return st;
  if (packed_cache_write(path, &layout, c->packed) == LLB_STATUS_OK &&
      packed_cache_open(path, &layout, &c->packed_map) == LLB_STATUS_OK) {
    free(c->packed);
    c->packed = NULL;
    use_packed(c, ws, n, sizes, c->packed_map.data);
    return LLB_STATUS_OK;
  }
  fprintf(stderr, "llmbus: packed-weight cache %s not usable (%s); packed weights stay private\n", path,
          llb_err_last());
  use_packed(c, ws, n, sizes, c->packed);
  return LLB_STATUS_OK;
}

llb_status llama_forward_pack_weights(struct llama_forward_ctx *c, const struct llama_forward_options *o) {
  const struct backend_ops *ops = c->ops;
  if (!ops->pack_bytes || !ops->pack) return LLB_STATUS_OK;
  const int32_t max_n = c->m->cfg.block_count * 7 + 1;
  struct backend_weight **ws = malloc((size_t)max_n * sizeof(*ws));
  uint64_t *sizes = malloc((size_t)max_n * sizeof(*sizes));
  llb_status st = LLB_STATUS_OK;
  if (!ws || !sizes) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "weight list");
    goto done;
  }
  const int32_t n = llama_forward_matmul_weights(c, ws);
  const size_t total = pack_sizes(ops, ws, n, sizes);
  if (total == 0) goto done;
  if (o->packed_cache_dir && o->packed_cache_dir[0] && gguf_identity(c->m->gguf) != 0 && n <= PACKED_CACHE_MAX_WEIGHTS) {
    st = pack_via_cache(c, o->packed_cache_dir, ws, n, sizes, total, o->matmul);
  } else if ((st = pack_private(c, ws, n, sizes, total)) == LLB_STATUS_OK) {
    use_packed(c, ws, n, sizes, c->packed);
  }
done:
  free(ws);
  free(sizes);
  return st;
}
