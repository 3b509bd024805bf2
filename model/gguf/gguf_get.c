/* GGUF typed metadata getters (gguf_get_*, gguf_array_*), split from gguf.c. Values are read
 * from the entries gguf.c parsed; scalars are decoded little-endian from the mapping. */
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static llb_status find_entry(const struct gguf_file *f, const char *key,
                             const struct kv_entry **out) {
  int64_t i = gguf_find_key(f, key);
  if (i < 0) {
    return LLB_ERRF(LLB_STATUS_NOT_FOUND, "gguf: key '%s' not found", key ? key : "(null)");
  }
  *out = &f->kv[i];
  return LLB_STATUS_OK;
}

static llb_status type_mismatch(const char *key, enum gguf_value_type got, const char *want) {
  return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: key '%s' has type %s, expected %s", key,
                  gguf_value_type_name(got), want);
}

/* Reads an integer element of type t at p; false if t is not an integer type. A UINT64 above
 * INT64_MAX sets *overflow. */
static bool load_int(enum gguf_value_type t, const uint8_t *p, int64_t *out, bool *overflow) {
  uint64_t u = 0;
  size_t n = gguf_value_type_size(t);
  for (size_t i = n; i-- > 0;) {
    u = u << 8 | p[i];
  }
  *overflow = false;
  switch (t) {
    case GGUF_VALUE_TYPE_UINT8: case GGUF_VALUE_TYPE_UINT16: case GGUF_VALUE_TYPE_UINT32:
      *out = (int64_t)u;
      return true;
    case GGUF_VALUE_TYPE_UINT64:
      *overflow = u > (uint64_t)INT64_MAX;
      *out = *overflow ? INT64_MAX : (int64_t)u;
      return true;
    case GGUF_VALUE_TYPE_INT8: *out = (int8_t)(uint8_t)u; return true;
    case GGUF_VALUE_TYPE_INT16: *out = (int16_t)(uint16_t)u; return true;
    case GGUF_VALUE_TYPE_INT32: *out = (int32_t)(uint32_t)u; return true;
    case GGUF_VALUE_TYPE_INT64: memcpy(out, &u, 8); return true;
    default: return false;
  }
}

llb_status gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out) {
  const struct kv_entry *e = NULL;
  llb_status st = find_entry(f, key, &e);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  int64_t v;
  bool overflow;
  if (!load_int(e->type, e->value, &v, &overflow)) {
    return type_mismatch(key, e->type, "an integer");
  }
  if (overflow) {
    return LLB_ERRF(LLB_STATUS_MALFORMED, "gguf: key '%s' (uint64) does not fit in int64", key);
  }
  *out = v;
  return LLB_STATUS_OK;
}

llb_status gguf_get_float(const struct gguf_file *f, const char *key, double *out) {
  const struct kv_entry *e = NULL;
  llb_status st = find_entry(f, key, &e);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (e->type == GGUF_VALUE_TYPE_FLOAT32) {
    float v;
    memcpy(&v, e->value, 4);
    *out = v;
  } else if (e->type == GGUF_VALUE_TYPE_FLOAT64) {
    memcpy(out, e->value, 8);
  } else {
    return type_mismatch(key, e->type, "float32 or float64");
  }
  return LLB_STATUS_OK;
}

llb_status gguf_get_bool(const struct gguf_file *f, const char *key, bool *out) {
  const struct kv_entry *e = NULL;
  llb_status st = find_entry(f, key, &e);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (e->type != GGUF_VALUE_TYPE_BOOL) {
    return type_mismatch(key, e->type, "bool");
  }
  *out = e->value[0] != 0;
  return LLB_STATUS_OK;
}

llb_status gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out) {
  const struct kv_entry *e = NULL;
  llb_status st = find_entry(f, key, &e);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (e->type != GGUF_VALUE_TYPE_STRING) {
    return type_mismatch(key, e->type, "string");
  }
  *out = e->str;
  return LLB_STATUS_OK;
}

llb_status gguf_get_array(const struct gguf_file *f, const char *key, struct gguf_array *out) {
  const struct kv_entry *e = NULL;
  llb_status st = find_entry(f, key, &e);
  if (st != LLB_STATUS_OK) {
    return st;
  }
  if (e->type != GGUF_VALUE_TYPE_ARRAY) {
    return type_mismatch(key, e->type, "array");
  }
  *out = e->arr;
  return LLB_STATUS_OK;
}

float gguf_array_f32(const struct gguf_array *a, uint64_t i) {
  if (a == NULL || a->type != GGUF_VALUE_TYPE_FLOAT32 || i >= a->len) {
    return NAN;
  }
  float v;
  memcpy(&v, (const uint8_t *)a->data + i * 4, 4);
  return v;
}

int64_t gguf_array_int(const struct gguf_array *a, uint64_t i) {
  if (a == NULL || i >= a->len) {
    return 0;
  }
  size_t esz = gguf_value_type_size(a->type);
  if (a->type == GGUF_VALUE_TYPE_BOOL) {
    return ((const uint8_t *)a->data)[i] != 0;
  }
  int64_t v;
  bool overflow;
  if (esz == 0 || !load_int(a->type, (const uint8_t *)a->data + i * esz, &v, &overflow)) {
    return 0;
  }
  return v;
}
