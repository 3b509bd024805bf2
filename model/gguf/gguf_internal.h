/* Private to model/: the parsed-file layout shared by gguf.c (parser) and gguf_get.c
 * (typed metadata getters). Not part of the public API; include model/gguf/gguf.h instead. */
#ifndef LLB_MODEL_GGUF_INTERNAL_H
#define LLB_MODEL_GGUF_INTERNAL_H

#include "model/gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>

struct kv_entry {
  struct gguf_str key;
  enum gguf_value_type type;
  const uint8_t *value;  /* scalar: its bytes in the mapping */
  struct gguf_str str;   /* STRING */
  struct gguf_array arr; /* ARRAY; arr.strs malloc'd for string arrays */
};

struct gguf_file {
  const uint8_t *base;      /* [size] the whole file */
  size_t size;
  void *map;                /* mmap'd region (gguf_open) or NULL (gguf_open_memory) */
  uint64_t identity;        /* gguf_identity: device, inode, size, mtime of the file (0: memory) */
  uint32_t version;
  uint32_t alignment;
  uint64_t data_offset;     /* start of the data section, from base */
  int64_t n_kv;
  struct kv_entry *kv;      /* [n_kv] file order */
  struct kv_entry **kv_by_key; /* [n_kv] sorted by key */
  int64_t n_tensors;
  struct gguf_tensor *tensors;       /* [n_tensors] file order */
  struct gguf_tensor **tensor_by_name; /* [n_tensors] sorted by name */
  char *names;              /* NUL-terminated tensor names, back to back */
};

/* Name of a value type for messages; "unknown" for types outside the spec. */
const char *gguf_value_type_name(uint32_t t);

/* Bytes of a fixed-size value type; 0 for string, array and unknown types. */
size_t gguf_value_type_size(uint32_t t);

#endif
