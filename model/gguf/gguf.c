/* GGUF v2/v3 reader. Source followed: ggml docs/gguf.md (file structure, value types,
 * alignment), ggml's gguf.cpp for the limits it enforces (GGML_MAX_DIMS 4, names < 64 bytes).
 * Every read goes through `struct reader`, which checks the remaining length first; counts
 * read from the file are capped by how many of their smallest encoding the rest of the file
 * could hold before anything is allocated. */
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4u
#define GGUF_MAX_NAME 64u          /* spec: tensor names are at most 64 bytes */
#define GGUF_MAX_KEY 65535u        /* spec: keys are at most 2^16 - 1 bytes */
#define GGUF_MAX_ARRAY_DEPTH 8     /* nested arrays deeper than this are refused (stack bound) */
#define GGUF_MIN_KV_BYTES 13u      /* key length 8 + type 4 + smallest value 1 */
#define GGUF_MIN_TENSOR_BYTES 32u  /* name length 8 + n_dims 4 + one dim 8 + type 4 + offset 8 */

struct reader {
  const uint8_t *p;
  size_t size;
  size_t pos;
};

const char *gguf_value_type_name(uint32_t t) {
  static const char *const names[] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                      "int32", "float32", "bool",  "string", "array",
                                      "uint64", "int64", "float64"};
  return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Bytes of a fixed-size value type; 0 for string, array and unknown types. */
size_t gguf_value_type_size(uint32_t t) {
  switch (t) {
    case GGUF_VALUE_TYPE_UINT8: case GGUF_VALUE_TYPE_INT8: case GGUF_VALUE_TYPE_BOOL: return 1;
    case GGUF_VALUE_TYPE_UINT16: case GGUF_VALUE_TYPE_INT16: return 2;
    case GGUF_VALUE_TYPE_UINT32: case GGUF_VALUE_TYPE_INT32: case GGUF_VALUE_TYPE_FLOAT32: return 4;
    case GGUF_VALUE_TYPE_UINT64: case GGUF_VALUE_TYPE_INT64: case GGUF_VALUE_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

static size_t rd_left(const struct reader *r) { return r->size - r->pos; }

static llb_status rd_bytes(struct reader *r, uint64_t n, const uint8_t **out, const char *what) {
  if (n > rd_left(r)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED,
                    "gguf: truncated at offset %zu reading %s (%llu bytes needed, %zu left)",
                    r->pos, what, (unsigned long long)n, rd_left(r));
  }
  *out = r->p + r->pos;
  r->pos += (size_t)n;
  return LLB_STATUS_OK;
}

static llb_status rd_u32(struct reader *r, uint32_t *out, const char *what) {
  const uint8_t *b = NULL;
  llb_status st = rd_bytes(r, 4, &b, what);
  if (st == LLB_STATUS_OK) {
    *out = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  }
  return st;
}

static uint64_t load_u64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) {
    v = v << 8 | b[i];
  }
  return v;
}

static llb_status rd_u64(struct reader *r, uint64_t *out, const char *what) {
  const uint8_t *b = NULL;
  llb_status st = rd_bytes(r, 8, &b, what);
  if (st == LLB_STATUS_OK) {
    *out = load_u64(b);
  }
  return st;
}

static llb_status rd_str(struct reader *r, struct gguf_str *out, const char *what) {
  uint64_t len;
  const uint8_t *b = NULL;
  llb_status st = rd_u64(r, &len, what);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (len > rd_left(r)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED,
                    "gguf: %s at offset %zu has length %llu, past the end of the file (%zu "
                    "bytes remain)", what,
                    r->pos - 8, (unsigned long long)len, rd_left(r));
  }
  st = rd_bytes(r, len, &b, what);
  out->data = (const char *)b;
  out->len = len;
  return st;
}

/* Printable width for "%.*s" of a file string in messages. */
static int msg_len(struct gguf_str s) { return s.len > 200 ? 200 : (int)s.len; }

static int str_cmp(struct gguf_str a, struct gguf_str b) {
  size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
  int c = n ? memcmp(a.data, b.data, n) : 0;
  if (c != 0) {
    return c;
  }
  return a.len < b.len ? -1 : (a.len > b.len ? 1 : 0);
}

/* Parses one array value (after its ARRAY type tag). Element strings are indexed into a
 * malloc'd table only for the top level (want_strs); nested arrays are validated only. */
static llb_status parse_array(struct reader *r, struct gguf_str key, int depth, bool want_strs,
                              struct gguf_array *out) {
  uint32_t type;
  uint64_t len;
  llb_status st = rd_u32(r, &type, "array element type");
  if (st == LLB_STATUS_OK) {
    st = rd_u64(r, &len, "array length");
  }
  if (st != LLB_STATUS_OK) {
    return st;
  }
  memset(out, 0, sizeof *out);
  out->type = (enum gguf_value_type)type;
  out->len = len;
  out->data = r->p + r->pos;
  size_t esz = gguf_value_type_size(type);
  if (esz != 0) {
    if (len > rd_left(r) / esz) {
      return LLB_ERRF(LLB_STATUS_MALFORMED,
                      "gguf: key '%.*s': array of %llu %s elements at offset %zu runs past the "
                      "end of the file", msg_len(key), key.data, (unsigned long long)len,
                      gguf_value_type_name(type), r->pos);
    }
    r->pos += (size_t)(len * esz);
    return LLB_STATUS_OK;
  }
  if (type == GGUF_VALUE_TYPE_STRING) {
    if (len > rd_left(r) / 8) {
      return LLB_ERRF(LLB_STATUS_MALFORMED,
                      "gguf: key '%.*s': array of %llu strings at offset %zu cannot fit in the "
                      "file", msg_len(key), key.data, (unsigned long long)len, r->pos);
    }
    struct gguf_str *strs = NULL;
    if (want_strs && len > 0) {
      strs = malloc((size_t)len * sizeof *strs);
      if (strs == NULL) {
        return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf: key '%.*s': %llu strings", msg_len(key),
                        key.data, (unsigned long long)len);
      }
    }
    for (uint64_t i = 0; i < len; i++) {
      struct gguf_str s;
      st = rd_str(r, &s, "array string");
      if (st != LLB_STATUS_OK) {
        free(strs);
        char cause[512];
        snprintf(cause, sizeof cause, "%s", llb_err_last());
        return LLB_ERRF(st, "gguf: key '%.*s': string %llu of %llu: %s", msg_len(key), key.data,
                        (unsigned long long)i, (unsigned long long)len, cause);
      }
      if (strs) {
        strs[i] = s;
      }
    }
    out->strs = strs;
    return LLB_STATUS_OK;
  }
  if (type == GGUF_VALUE_TYPE_ARRAY) {
    if (depth >= GGUF_MAX_ARRAY_DEPTH) {
      return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: key '%.*s': arrays nested deeper than %d",
                      msg_len(key), key.data, GGUF_MAX_ARRAY_DEPTH);
    }
    if (len > rd_left(r) / 12) {
      return LLB_ERRF(LLB_STATUS_MALFORMED,
                      "gguf: key '%.*s': %llu nested arrays at offset %zu cannot fit in the file",
                      msg_len(key), key.data, (unsigned long long)len, r->pos);
    }
    for (uint64_t i = 0; i < len; i++) {
      struct gguf_array inner;
      st = parse_array(r, key, depth + 1, false, &inner);
      if (st != LLB_STATUS_OK) {
        return st;
      }
    }
    return LLB_STATUS_OK;
  }
  return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: key '%.*s': unknown array element type %u",
                  msg_len(key), key.data, type);
}

static llb_status parse_kv(struct reader *r, struct kv_entry *e) {
  llb_status st = rd_str(r, &e->key, "metadata key");
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (e->key.len == 0 || e->key.len > GGUF_MAX_KEY) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: metadata key at offset %zu has length %llu "
                    "(must be 1..%u)", r->pos - (size_t)e->key.len - 8,
                    (unsigned long long)e->key.len, GGUF_MAX_KEY);
  }
  uint32_t type;
  st = rd_u32(r, &type, "metadata value type");
  if (st != LLB_STATUS_OK) {
    return st;
  }
  e->type = (enum gguf_value_type)type;
  size_t esz = gguf_value_type_size(type);
  if (esz != 0) {
    return rd_bytes(r, esz, &e->value, "metadata value");
  }
  if (type == GGUF_VALUE_TYPE_STRING) {
    return rd_str(r, &e->str, "metadata string value");
  }
  if (type == GGUF_VALUE_TYPE_ARRAY) {
    return parse_array(r, e->key, 0, true, &e->arr);
  }
  return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: key '%.*s' has unknown value type %u",
                  msg_len(e->key), e->key.data, type);
}

static int kv_ptr_cmp(const void *a, const void *b) {
  return str_cmp((*(struct kv_entry *const *)a)->key, (*(struct kv_entry *const *)b)->key);
}

static int tensor_name_cmp(const void *a, const void *b) {
  return strcmp((*(struct gguf_tensor *const *)a)->name, (*(struct gguf_tensor *const *)b)->name);
}

static int tensor_offset_cmp(const void *a, const void *b) {
  uint64_t x = (*(struct gguf_tensor *const *)a)->offset;
  uint64_t y = (*(struct gguf_tensor *const *)b)->offset;
  return x < y ? -1 : (x > y ? 1 : 0);
}

static llb_status parse_alignment(struct gguf_file *f) {
  f->alignment = GGUF_DEFAULT_ALIGNMENT;
  int64_t i = gguf_find_key(f, "general.alignment");
  if (i < 0) {
    return LLB_STATUS_OK;
  }
  const struct kv_entry *e = &f->kv[i];
  if (e->type != GGUF_VALUE_TYPE_UINT32) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: general.alignment has type %s, expected uint32",
                    gguf_value_type_name(e->type));
  }
  uint32_t a = (uint32_t)e->value[0] | (uint32_t)e->value[1] << 8 |
               (uint32_t)e->value[2] << 16 | (uint32_t)e->value[3] << 24;
  if (a == 0 || (a & (a - 1)) != 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: general.alignment %u is not a power of two", a);
  }
  f->alignment = a;
  return LLB_STATUS_OK;
}

static llb_status parse_tensor_info(struct reader *r, const struct gguf_file *f,
                                    struct gguf_tensor *t, struct gguf_str *name, int64_t idx) {
  llb_status st = rd_str(r, name, "tensor name");
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (name->len == 0 || name->len > GGUF_MAX_NAME || memchr(name->data, 0, name->len) != NULL) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensor %lld: name of length %llu is empty, "
                    "longer than %u bytes or contains NUL", (long long)idx,
                    (unsigned long long)name->len, GGUF_MAX_NAME);
  }
  int nl = msg_len(*name);
  st = rd_u32(r, &t->n_dims, "tensor n_dims");
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (t->n_dims > GGUF_MAX_DIMS) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensor '%.*s' has %u dimensions (max %u)", nl,
                    name->data, t->n_dims, GGUF_MAX_DIMS);
  }
  int64_t n_elems = 1;
  for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
    uint64_t ne = 1;
    if (d < t->n_dims && (st = rd_u64(r, &ne, "tensor dimension")) != LLB_STATUS_OK) {
      return st;
    }
    if (ne == 0 || ne > (uint64_t)INT64_MAX || (int64_t)ne > INT64_MAX / n_elems) {
      return LLB_ERRF(LLB_STATUS_MALFORMED,
                      "gguf: tensor '%.*s' dimension %u is %llu (zero, or the element count "
                      "overflows int64)", nl, name->data, d, (unsigned long long)ne);
    }
    t->ne[d] = (int64_t)ne;
    n_elems *= (int64_t)ne;
  }
  uint32_t type;
  if ((st = rd_u32(r, &type, "tensor type")) != LLB_STATUS_OK ||
      (st = rd_u64(r, &t->offset, "tensor offset")) != LLB_STATUS_OK) {
    return st;
  }
  t->type = (enum ggml_type)type;
  int64_t blk = ggml_type_block_elems(t->type);
  if (blk == 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensor '%.*s' has unknown type %u", nl,
                    name->data, type);
  }
  size_t row;
  if (t->ne[0] % blk != 0 || ggml_row_bytes(t->type, t->ne[0], &row) != LLB_STATUS_OK) {
    return LLB_ERRF(LLB_STATUS_MALFORMED,
                    "gguf: tensor '%.*s' row length %lld is not a multiple of the %s block (%lld)",
                    nl, name->data, (long long)t->ne[0], ggml_type_name(t->type), (long long)blk);
  }
  uint64_t n_rows = (uint64_t)(n_elems / t->ne[0]);
  if (row != 0 && n_rows > (uint64_t)(f->size / row)) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensor '%.*s' needs more bytes than the file "
                    "holds (%llu rows of %zu bytes)", nl, name->data,
                    (unsigned long long)n_rows, row);
  }
  t->size_bytes = (size_t)n_rows * row;
  if (t->offset % f->alignment != 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensor '%.*s' offset %llu is not a multiple of "
                    "the alignment %u", nl, name->data, (unsigned long long)t->offset,
                    f->alignment);
  }
  return LLB_STATUS_OK;
}

/* Validates tensor data bounds against the data section and that no two tensors overlap. */
static llb_status check_tensor_data(struct gguf_file *f) {
  if (f->n_tensors == 0) {
    return LLB_STATUS_OK;
  }
  if (f->data_offset > f->size) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: data section starts at %llu, past the end of "
                    "the file (%zu bytes)", (unsigned long long)f->data_offset, f->size);
  }
  uint64_t avail = f->size - f->data_offset;
  for (int64_t i = 0; i < f->n_tensors; i++) {
    struct gguf_tensor *t = &f->tensors[i];
    if (t->offset > avail || t->size_bytes > avail - t->offset) {
      return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensor '%s' data [%llu, +%zu) runs past the "
                      "end of the data section (%llu bytes)", t->name,
                      (unsigned long long)t->offset, t->size_bytes, (unsigned long long)avail);
    }
    t->data = f->base + f->data_offset + t->offset;
  }
  /* tensor_by_name is reused as scratch for the offset order, then re-sorted by name */
  qsort(f->tensor_by_name, (size_t)f->n_tensors, sizeof *f->tensor_by_name, tensor_offset_cmp);
  for (int64_t i = 1; i < f->n_tensors; i++) {
    const struct gguf_tensor *a = f->tensor_by_name[i - 1], *b = f->tensor_by_name[i];
    if (a->offset + a->size_bytes > b->offset) {
      return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: tensors '%s' [%llu, +%zu) and '%s' at %llu "
                      "overlap", a->name, (unsigned long long)a->offset, a->size_bytes, b->name,
                      (unsigned long long)b->offset);
    }
  }
  qsort(f->tensor_by_name, (size_t)f->n_tensors, sizeof *f->tensor_by_name, tensor_name_cmp);
  return LLB_STATUS_OK;
}

static llb_status parse_header(struct gguf_file *f, struct reader *r, uint64_t *n_kv,
                               uint64_t *n_tensors) {
  const uint8_t *magic = NULL;
  llb_status st = rd_bytes(r, 4, &magic, "magic");
  if (st != LLB_STATUS_OK || memcmp(magic, GGUF_MAGIC, 4) != 0) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: not a GGUF file (bad magic, %zu bytes)", f->size);
  }
  if ((st = rd_u32(r, &f->version, "version")) != LLB_STATUS_OK) {
    return st;
  }
  if (f->version == 1) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "gguf: version 1 files are not supported (only 2 "
                    "and 3); convert the model again with a current llama.cpp");
  }
  if ((f->version & 0xffffu) == 0 && (f->version >> 24) >= 1 && (f->version >> 24) <= 3) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "gguf: big-endian GGUF files are not supported");
  }
  if (f->version != 2 && f->version != 3) {
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "gguf: version %u is not supported (only 2 and 3)",
                    f->version);
  }
  if ((st = rd_u64(r, n_tensors, "tensor count")) != LLB_STATUS_OK ||
      (st = rd_u64(r, n_kv, "metadata count")) != LLB_STATUS_OK) {
    return st;
  }
  if (*n_kv > rd_left(r) / GGUF_MIN_KV_BYTES) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: %llu metadata pairs cannot fit in %zu bytes",
                    (unsigned long long)*n_kv, rd_left(r));
  }
  if (*n_tensors > rd_left(r) / GGUF_MIN_TENSOR_BYTES) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: %llu tensor infos cannot fit in %zu bytes",
                    (unsigned long long)*n_tensors, rd_left(r));
  }
  return LLB_STATUS_OK;
}

static llb_status parse_tensors(struct gguf_file *f, struct reader *r) {
  struct gguf_str *names = NULL;
  size_t names_bytes = 0;
  llb_status st = LLB_STATUS_OK;
  if (f->n_tensors > 0) {
    f->tensors = calloc((size_t)f->n_tensors, sizeof *f->tensors);
    f->tensor_by_name = calloc((size_t)f->n_tensors, sizeof *f->tensor_by_name);
    names = calloc((size_t)f->n_tensors, sizeof *names);
    if (f->tensors == NULL || f->tensor_by_name == NULL || names == NULL) {
      st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf: %lld tensor infos", (long long)f->n_tensors);
      goto done;
    }
  }
  for (int64_t i = 0; i < f->n_tensors; i++) {
    if ((st = parse_tensor_info(r, f, &f->tensors[i], &names[i], i)) != LLB_STATUS_OK) {
      goto done;
    }
    names_bytes += (size_t)names[i].len + 1;
  }
  f->names = malloc(names_bytes ? names_bytes : 1);
  if (f->names == NULL) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf: tensor names (%zu bytes)", names_bytes);
    goto done;
  }
  char *p = f->names;
  for (int64_t i = 0; i < f->n_tensors; i++) {
    memcpy(p, names[i].data, (size_t)names[i].len);
    p[names[i].len] = '\0';
    f->tensors[i].name = p;
    f->tensor_by_name[i] = &f->tensors[i];
    p += names[i].len + 1;
  }
  if (f->n_tensors > 0) {
    qsort(f->tensor_by_name, (size_t)f->n_tensors, sizeof *f->tensor_by_name, tensor_name_cmp);
  }
  for (int64_t i = 1; i < f->n_tensors; i++) {
    if (strcmp(f->tensor_by_name[i - 1]->name, f->tensor_by_name[i]->name) == 0) {
      st = LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: duplicate tensor name '%s'",
                    f->tensor_by_name[i]->name);
      goto done;
    }
  }
  uint64_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
  f->data_offset = (uint64_t)r->pos + pad;
  st = check_tensor_data(f);
done:
  free(names);
  return st;
}

static llb_status parse_file(struct gguf_file *f) {
  struct reader r = {.p = f->base, .size = f->size, .pos = 0};
  uint64_t n_kv = 0, n_tensors = 0;
  llb_status st = parse_header(f, &r, &n_kv, &n_tensors);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (n_kv > 0) {
    f->kv = calloc((size_t)n_kv, sizeof *f->kv);
    f->kv_by_key = calloc((size_t)n_kv, sizeof *f->kv_by_key);
    if (f->kv == NULL || f->kv_by_key == NULL) {
      return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf: %llu metadata pairs",
                      (unsigned long long)n_kv);
    }
  }
  for (uint64_t i = 0; i < n_kv; i++) {
    f->n_kv = (int64_t)i + 1; /* so gguf_close frees the string table of a partial entry */
    if ((st = parse_kv(&r, &f->kv[i])) != LLB_STATUS_OK) {
      char cause[512];
      snprintf(cause, sizeof cause, "%s", llb_err_last());
      return LLB_ERRF(st, "gguf: metadata pair %llu: %s", (unsigned long long)i, cause);
    }
    f->kv_by_key[i] = &f->kv[i];
  }
  f->n_kv = (int64_t)n_kv;
  if (n_kv > 0) {
    qsort(f->kv_by_key, (size_t)n_kv, sizeof *f->kv_by_key, kv_ptr_cmp);
  }
  for (uint64_t i = 1; i < n_kv; i++) {
    if (str_cmp(f->kv_by_key[i - 1]->key, f->kv_by_key[i]->key) == 0) {
      struct gguf_str k = f->kv_by_key[i]->key;
      return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: duplicate metadata key '%.*s'", msg_len(k),
                      k.data);
    }
  }
  if ((st = parse_alignment(f)) != LLB_STATUS_OK) {
    return st;
  }
  f->n_tensors = (int64_t)n_tensors;
  return parse_tensors(f, &r);
}

llb_status gguf_open_memory(const void *buf, size_t size, struct gguf_file **out) {
  if (out == NULL || (buf == NULL && size > 0)) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gguf_open_memory: NULL argument");
  }
  *out = NULL;
  struct gguf_file *f = calloc(1, sizeof *f);
  if (f == NULL) {
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf: file handle");
  }
  f->base = buf;
  f->size = size;
  llb_status st = parse_file(f);
  if (st != LLB_STATUS_OK) {
    goto fail;
  }
  *out = f;
  return LLB_STATUS_OK;
fail:
  gguf_close(f);
  return st;
}

llb_status gguf_open(const char *path, struct gguf_file **out) {
  if (path == NULL || out == NULL) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gguf_open: NULL argument");
  }
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return LLB_ERRF(LLB_STATUS_IO, "gguf: cannot open %s: %s", path, strerror(errno));
  }
  llb_status st = gguf_open_fd(fd, path, out);
  close(fd);
  return st;
}

llb_status gguf_open_fd(int fd, const char *path, struct gguf_file **out) {
  if (fd < 0 || path == NULL || out == NULL) {
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gguf_open_fd: no file");
  }
  *out = NULL;
  struct gguf_file *f = NULL;
  void *map = MAP_FAILED;
  struct stat sb;
  llb_status st;
  if (fstat(fd, &sb) != 0) {
    st = LLB_ERRF(LLB_STATUS_IO, "gguf: cannot stat %s: %s", path, strerror(errno));
    goto fail;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = LLB_ERRF(LLB_STATUS_IO, "gguf: %s is not a regular file", path);
    goto fail;
  }
  if (sb.st_size < 8) {
    st = LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: %s is too short (%lld bytes) to be a GGUF file",
                  path, (long long)sb.st_size);
    goto fail;
  }
  map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    st = LLB_ERRF(LLB_STATUS_IO, "gguf: cannot map %s: %s", path, strerror(errno));
    goto fail;
  }
  f = calloc(1, sizeof *f);
  if (f == NULL) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gguf: file handle");
    goto fail;
  }
  f->map = map;
  f->base = map;
  f->size = (size_t)sb.st_size;
  const uint64_t id_parts[5] = {(uint64_t)sb.st_dev, (uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                                (uint64_t)sb.st_mtim.tv_sec, (uint64_t)sb.st_mtim.tv_nsec};
  f->identity = llb_fnv1a64(LLB_FNV1A64_INIT, id_parts, sizeof id_parts);
  map = MAP_FAILED; /* owned by f now */
  if ((st = parse_file(f)) != LLB_STATUS_OK) {
    char cause[512];
    snprintf(cause, sizeof cause, "%s", llb_err_last());
    st = LLB_ERRF(st, "%s: %s", path, cause);
    goto fail;
  }
  *out = f;
  return LLB_STATUS_OK;
fail:
  if (map != MAP_FAILED) {
    munmap(map, (size_t)sb.st_size);
  }
  gguf_close(f);
  return st;
}

void gguf_release_pages(const struct gguf_file *f, const void *p, size_t n) {
  if (f == NULL || f->map == NULL || p == NULL) {
    return;
  }
  const uintptr_t lo = (uintptr_t)p, hi = lo + n, base = (uintptr_t)f->base;
  if (lo < base || hi > base + f->size || hi < lo) {
    return;
  }
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
  if (b > a) {
    /* a read-only private file mapping never written: the pages fault back in from the file */
    (void)madvise((void *)a, b - a, MADV_DONTNEED);
  }
}

void gguf_close(struct gguf_file *f) {
  if (f == NULL) {
    return;
  }
  for (int64_t i = 0; i < f->n_kv; i++) {
    free((void *)f->kv[i].arr.strs);
  }
  free(f->kv);
  free(f->kv_by_key);
  free(f->tensors);
  free(f->tensor_by_name);
  free(f->names);
  if (f->map != NULL) {
    munmap(f->map, f->size);
  }
  free(f);
}

uint64_t gguf_identity(const struct gguf_file *f) { return f ? f->identity : 0; }

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }

int64_t gguf_kv_count(const struct gguf_file *f) { return f->n_kv; }

struct gguf_str gguf_kv_key(const struct gguf_file *f, int64_t i) {
  if (i < 0 || i >= f->n_kv) {
    return (struct gguf_str){NULL, 0};
  }
  return f->kv[i].key;
}

enum gguf_value_type gguf_kv_type(const struct gguf_file *f, int64_t i) {
  if (i < 0 || i >= f->n_kv) {
    return (enum gguf_value_type)-1;
  }
  return f->kv[i].type;
}

int64_t gguf_find_key(const struct gguf_file *f, const char *key) {
  if (f == NULL || key == NULL) {
    return -1;
  }
  struct gguf_str k = {key, strlen(key)};
  int64_t lo = 0, hi = f->n_kv;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = str_cmp(f->kv_by_key[mid]->key, k);
    if (c == 0) {
      return f->kv_by_key[mid] - f->kv;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return -1;
}

int64_t gguf_tensor_count(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, int64_t i) {
  if (i < 0 || i >= f->n_tensors) {
    return NULL;
  }
  return &f->tensors[i];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
  if (f == NULL || name == NULL) {
    return NULL;
  }
  int64_t lo = 0, hi = f->n_tensors;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->tensor_by_name[mid]->name, name);
    if (c == 0) {
      return f->tensor_by_name[mid];
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return NULL;
}

bool gguf_str_eq(struct gguf_str s, const char *cstr) {
  size_t n = strlen(cstr);
  return s.len == n && (n == 0 || memcmp(s.data, cstr, n) == 0);
}
