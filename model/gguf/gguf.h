/* GGUF v2/v3 reader over a read-only mapping (spec: ggml docs/gguf.md).
 *
 * gguf_open maps the file read-only and validates everything up front: header, every
 * metadata value (nested arrays included), tensor infos, alignment (general.alignment,
 * default 32) and the data section. Every count, length and offset is checked against the
 * file size with overflow-safe arithmetic; a truncated or lying file gives
 * LLB_STATUS_MALFORMED with a message (llb_err_last()), never an out-of-bounds read.
 * v1 files give LLB_STATUS_UNSUPPORTED. Nothing is copied: strings, arrays and tensor data
 * point into the mapping and live as long as the gguf_file. A gguf_file is immutable after
 * open, so concurrent readers need no lock.
 */
#ifndef LLB_MODEL_GGUF_H
#define LLB_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/quant.h"

/* Metadata value types, numbered as in the GGUF spec. */
enum gguf_value_type {
  GGUF_VALUE_TYPE_UINT8 = 0,
  GGUF_VALUE_TYPE_INT8 = 1,
  GGUF_VALUE_TYPE_UINT16 = 2,
  GGUF_VALUE_TYPE_INT16 = 3,
  GGUF_VALUE_TYPE_UINT32 = 4,
  GGUF_VALUE_TYPE_INT32 = 5,
  GGUF_VALUE_TYPE_FLOAT32 = 6,
  GGUF_VALUE_TYPE_BOOL = 7,
  GGUF_VALUE_TYPE_STRING = 8,
  GGUF_VALUE_TYPE_ARRAY = 9,
  GGUF_VALUE_TYPE_UINT64 = 10,
  GGUF_VALUE_TYPE_INT64 = 11,
  GGUF_VALUE_TYPE_FLOAT64 = 12
};

/* A GGUF string: points into the mapping, NOT NUL-terminated (may contain NUL bytes). */
struct gguf_str {
  const char *data;
  uint64_t len;
};

/* A metadata array. For fixed-size element types, data points at len little-endian elements
 * in the mapping (maybe unaligned: read with memcpy or the gguf_array_* helpers) and strs is
 * NULL. For STRING arrays, strs [len] is owned by the file and data points at the first
 * serialized element. For ARRAY (nested) arrays, data points at the first serialized nested
 * array and strs is NULL; nested arrays are validated but not indexed. */
struct gguf_array {
  enum gguf_value_type type;
  uint64_t len;
  const void *data;
  const struct gguf_str *strs;
};

/* One tensor info, validated: the type is known, n_dims <= 4 (0: a scalar), every ne >= 1,
 * the element count fits int64, ne[0] is a multiple of the type's block size, offset is
 * aligned, and [offset, offset + size_bytes) lies inside the data section without
 * overlapping another tensor. Known but unsupported types (q2_K, ...) are accepted here:
 * consumers check ggml_type_is_supported. */
struct gguf_tensor {
  const char *name;  /* NUL-terminated, owned by the file */
  uint32_t n_dims;
  int64_t ne[4];     /* ne[0] = row length (fastest), unused dims = 1 */
  enum ggml_type type;
  uint64_t offset;   /* from the data section start */
  const void *data;  /* [ne[3], ne[2], ne[1], row of ne[0]] in blocks of `type`, into the mapping */
  size_t size_bytes;
};

struct gguf_file; /* opaque */

/* Maps `path` read-only and validates it. On success *out is a file the caller closes with
 * gguf_close. Errors: IO (open/stat/mmap failed, message names the path and errno),
 * MALFORMED (message says what and where), UNSUPPORTED (version 1 or newer than 3),
 * OUT_OF_MEMORY. On failure *out is NULL. */
llb_status gguf_open(const char *path, struct gguf_file **out);

/* As gguf_open over the open descriptor fd (borrowed: the caller closes it, the mapping stays);
 * `path` only names the file in errors. For files opened under a confined directory
 * (base/open_beneath.h). */
llb_status gguf_open_fd(int fd, const char *path, struct gguf_file **out);

/* As gguf_open over a caller's buffer of `size` bytes; nothing is copied, so `buf` must
 * outlive the file. `buf` may be unaligned. */
llb_status gguf_open_memory(const void *buf, size_t size, struct gguf_file **out);

/* Unmaps and frees; NULL is accepted. Every pointer obtained from `f` dies with it. */
void gguf_close(struct gguf_file *f);

/* Drops the whole pages inside [p, p + n) from this process's resident memory when f maps a
 * file (gguf_open): for data a caller has copied into another layout. They fault back in from
 * the file if read again, so nothing changes for readers. Nothing happens for gguf_open_memory
 * buffers or ranges outside f. */
void gguf_release_pages(const struct gguf_file *f, const void *p, size_t n);

/* GGUF version of the file: 2 or 3. */
uint32_t gguf_version(const struct gguf_file *f);

/* A 64-bit key of the file as opened (device, inode, size, modification time): equal for
 * every process that opens the same unchanged file, different after it is replaced or
 * rewritten. 0 for gguf_open_memory. What the shared packed-weight cache is keyed by. */
uint64_t gguf_identity(const struct gguf_file *f);

/* Number of metadata key/value pairs. */
int64_t gguf_kv_count(const struct gguf_file *f);

/* Key of pair i (0 <= i < gguf_kv_count); {NULL, 0} if i is out of range. */
struct gguf_str gguf_kv_key(const struct gguf_file *f, int64_t i);

/* Value type of pair i; (enum gguf_value_type)-1 if i is out of range. */
enum gguf_value_type gguf_kv_type(const struct gguf_file *f, int64_t i);

/* Index of `key` (NUL-terminated) among the pairs; -1 if absent. Keys are unique (checked at
 * open). */
int64_t gguf_find_key(const struct gguf_file *f, const char *key);

/* Typed getters: NOT_FOUND (message names the key) if absent, MALFORMED if the stored type
 * does not fit (message names key and types). Integers of any width/sign convert to int64 when
 * representable (a UINT64 above INT64_MAX is MALFORMED); get_float accepts FLOAT32/FLOAT64.
 * get_str's result points into the mapping; get_array's strs (if any) is owned by `f`. */
llb_status gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out);
llb_status gguf_get_float(const struct gguf_file *f, const char *key, double *out);
llb_status gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
llb_status gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out);
llb_status gguf_get_array(const struct gguf_file *f, const char *key, struct gguf_array *out);

/* Element i of a FLOAT32 array (memcpy read). NaN if the array is not FLOAT32 or i >= len. */
float gguf_array_f32(const struct gguf_array *a, uint64_t i);

/* Element i of an integer array of any width/sign (BOOL reads as 0/1). 0 if the array is not
 * an integer array or i >= len; a UINT64 above INT64_MAX reads as INT64_MAX. */
int64_t gguf_array_int(const struct gguf_array *a, uint64_t i);

/* Number of tensors. */
int64_t gguf_tensor_count(const struct gguf_file *f);

/* Tensor i in file order (0 <= i < gguf_tensor_count); NULL if out of range. Owned by f. */
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, int64_t i);

/* Tensor named `name`; NULL if absent. Names are unique (checked at open). Owned by f. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* True if the GGUF string equals the NUL-terminated `cstr` byte for byte. */
bool gguf_str_eq(struct gguf_str s, const char *cstr);

#endif
