/* model/gguf: files made with tests/unit/gguf_writer.c (every value type, nested arrays,
 * alignment 32 and 64, v2 and v3), each corruption class rejected as MALFORMED with a
 * message, and, with `--model PATH`, the default model's metadata (exit 77 if absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf/gguf.h"
#include "tests/unit/gguf_writer.h"

static const char *model_path;

struct blob {
  uint8_t *p;
  size_t size;
};

static struct blob write_blob(struct gguf_writer *w) {
  struct blob b;
  void *p;
  assert_int_equal(gguf_writer_write_memory(w, &p, &b.size), LLB_STATUS_OK);
  b.p = p;
  return b;
}

/* Opens a copy of [0, size) of b so ASan sees any read past the end. */
static llb_status open_prefix(const struct blob *b, size_t size, struct gguf_file **f) {
  uint8_t *copy = malloc(size ? size : 1);
  memcpy(copy, b->p, size);
  llb_status st = gguf_open_memory(copy, size, f);
  gguf_close(*f);
  *f = NULL;
  free(copy);
  return st;
}

static void expect_malformed(const struct blob *b, const char *needle) {
  struct gguf_file *f = (struct gguf_file *)1;
  assert_int_equal(open_prefix(b, b->size, &f), LLB_STATUS_MALFORMED);
  if (strstr(llb_err_last(), needle) == NULL) {
    fail_msg("message '%s' does not mention '%s'", llb_err_last(), needle);
  }
}

/* Position just past the serialized name of tensor info `name` (unique in these files). */
static size_t tensor_info_pos(const struct blob *b, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 8; i + n <= b->size; i++) {
    uint64_t len;
    memcpy(&len, b->p + i - 8, 8);
    if (len == n && memcmp(b->p + i, name, n) == 0) {
      return i + n;
    }
  }
  fail_msg("tensor info %s not found", name);
  return 0;
}

static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static float test_data[4 * 64];

static void fill_test_data(void) {
  for (int i = 0; i < 4 * 64; i++) {
    test_data[i] = (float)(i % 17) * 0.25f - 1.5f;
  }
}

/* A file with two F32 tensors "a" [64, 2] and "b" [64] and a Q8_0 tensor "q" [64]. */
static struct gguf_writer *two_tensor_writer(uint32_t version, uint32_t alignment) {
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(version, &w), LLB_STATUS_OK);
  gguf_writer_add_str(w, "general.architecture", "llama");
  if (alignment != 0) {
    gguf_writer_add_u32(w, "general.alignment", alignment);
  }
  gguf_writer_add_tensor_f32(w, "a", 2, (int64_t[]){64, 2}, test_data);
  gguf_writer_add_tensor_f32(w, "b", 1, (int64_t[]){64}, test_data + 128);
  block_q8_0 q[2];
  for (int i = 0; i < 2; i++) {
    q[i].d = llb_fp32_to_fp16(0.125f);
    for (int j = 0; j < 32; j++) {
      q[i].qs[j] = (int8_t)(j - 16 + i);
    }
  }
  gguf_writer_add_tensor(w, "q", GGML_TYPE_Q8_0, 1, (int64_t[]){64}, q, sizeof q);
  return w;
}

static void test_every_value_type_reads_back(void **state) {
  (void)state;
  struct gguf_writer *w;
  assert_int_equal(gguf_writer_create(3, &w), LLB_STATUS_OK);
  gguf_writer_add_u8(w, "t.u8", 200);
  gguf_writer_add_i8(w, "t.i8", -100);
  gguf_writer_add_u16(w, "t.u16", 60000);
  gguf_writer_add_i16(w, "t.i16", -30000);
  gguf_writer_add_u32(w, "t.u32", 4000000000u);
  gguf_writer_add_i32(w, "t.i32", -2000000000);
  gguf_writer_add_f32(w, "t.f32", 1.5f);
  gguf_writer_add_bool(w, "t.bool", true);
  gguf_writer_add_str_n(w, "t.str", "a\0b", 3);
  gguf_writer_add_u64(w, "t.u64", 1ull << 40);
  gguf_writer_add_u64(w, "t.u64big", UINT64_MAX);
  gguf_writer_add_i64(w, "t.i64", -(1ll << 50));
  gguf_writer_add_f64(w, "t.f64", -2.25);
  int32_t ints[3] = {-1, 7, 1 << 30};
  gguf_writer_add_array(w, "t.arr_i32", GGUF_VALUE_TYPE_INT32, ints, 3);
  float fl[2] = {0.5f, -3.0f};
  gguf_writer_add_array(w, "t.arr_f32", GGUF_VALUE_TYPE_FLOAT32, fl, 2);
  uint16_t u16s[2] = {1, 65535};
  gguf_writer_add_array(w, "t.arr_u16", GGUF_VALUE_TYPE_UINT16, u16s, 2);
  uint8_t bools[2] = {0, 1};
  gguf_writer_add_array(w, "t.arr_bool", GGUF_VALUE_TYPE_BOOL, bools, 2);
  gguf_writer_add_array(w, "t.arr_empty", GGUF_VALUE_TYPE_INT64, NULL, 0);
  const char *strs[3] = {"x", "", "hello"};
  gguf_writer_add_str_array(w, "t.arr_str", strs, 3);
  int16_t r0[2] = {1, 2}, r1[1] = {-3};
  gguf_writer_add_nested_array(w, "t.nested", GGUF_VALUE_TYPE_INT16,
                               (const void *const[]){r0, r1}, (uint64_t[]){2, 1}, 2);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);

  struct gguf_file *f;
  assert_int_equal(gguf_open_memory(b.p, b.size, &f), LLB_STATUS_OK);
  assert_int_equal(gguf_version(f), 3);
  assert_int_equal(gguf_kv_count(f), 20);
  assert_int_equal(gguf_tensor_count(f), 0);
  assert_true(gguf_str_eq(gguf_kv_key(f, 0), "t.u8"));
  assert_int_equal(gguf_kv_type(f, 6), GGUF_VALUE_TYPE_FLOAT32);
  assert_int_equal((int)gguf_kv_type(f, 20), -1);
  assert_null(gguf_kv_key(f, -1).data);
  assert_int_equal(gguf_find_key(f, "t.f64"), 12);
  assert_int_equal(gguf_find_key(f, "t.f6"), -1);

  int64_t v;
  const struct { const char *key; int64_t want; } ints_want[] = {
      {"t.u8", 200}, {"t.i8", -100}, {"t.u16", 60000}, {"t.i16", -30000},
      {"t.u32", 4000000000ll}, {"t.i32", -2000000000}, {"t.u64", 1ll << 40},
      {"t.i64", -(1ll << 50)}};
  for (size_t i = 0; i < sizeof ints_want / sizeof ints_want[0]; i++) {
    assert_int_equal(gguf_get_int(f, ints_want[i].key, &v), LLB_STATUS_OK);
    assert_true(v == ints_want[i].want);
  }
  assert_int_equal(gguf_get_int(f, "t.u64big", &v), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "t.u64big"));
  assert_int_equal(gguf_get_int(f, "t.f32", &v), LLB_STATUS_MALFORMED);
  assert_non_null(strstr(llb_err_last(), "t.f32"));
  assert_non_null(strstr(llb_err_last(), "float32"));
  assert_int_equal(gguf_get_int(f, "t.missing", &v), LLB_STATUS_NOT_FOUND);
  assert_non_null(strstr(llb_err_last(), "t.missing"));

  double d;
  assert_int_equal(gguf_get_float(f, "t.f32", &d), LLB_STATUS_OK);
  assert_true(d == 1.5);
  assert_int_equal(gguf_get_float(f, "t.f64", &d), LLB_STATUS_OK);
  assert_true(d == -2.25);
  assert_int_equal(gguf_get_float(f, "t.i32", &d), LLB_STATUS_MALFORMED);
  bool bv = false;
  assert_int_equal(gguf_get_bool(f, "t.bool", &bv), LLB_STATUS_OK);
  assert_true(bv);
  assert_int_equal(gguf_get_bool(f, "t.u8", &bv), LLB_STATUS_MALFORMED);
  struct gguf_str s;
  assert_int_equal(gguf_get_str(f, "t.str", &s), LLB_STATUS_OK);
  assert_int_equal(s.len, 3);
  assert_memory_equal(s.data, "a\0b", 3);
  assert_false(gguf_str_eq(s, "a"));
  assert_int_equal(gguf_get_str(f, "t.arr_str", &s), LLB_STATUS_MALFORMED);

  struct gguf_array a;
  assert_int_equal(gguf_get_array(f, "t.arr_i32", &a), LLB_STATUS_OK);
  assert_int_equal(a.type, GGUF_VALUE_TYPE_INT32);
  assert_int_equal(a.len, 3);
  assert_true(gguf_array_int(&a, 0) == -1 && gguf_array_int(&a, 2) == 1 << 30);
  assert_true(gguf_array_int(&a, 3) == 0);
  assert_true(isnan(gguf_array_f32(&a, 0)));
  assert_int_equal(gguf_get_array(f, "t.arr_f32", &a), LLB_STATUS_OK);
  assert_true(gguf_array_f32(&a, 1) == -3.0f);
  assert_true(isnan(gguf_array_f32(&a, 2)));
  assert_int_equal(gguf_get_array(f, "t.arr_u16", &a), LLB_STATUS_OK);
  assert_true(gguf_array_int(&a, 1) == 65535);
  assert_int_equal(gguf_get_array(f, "t.arr_bool", &a), LLB_STATUS_OK);
  assert_true(gguf_array_int(&a, 1) == 1);
  assert_int_equal(gguf_get_array(f, "t.arr_empty", &a), LLB_STATUS_OK);
  assert_int_equal(a.len, 0);
  assert_int_equal(gguf_get_array(f, "t.arr_str", &a), LLB_STATUS_OK);
  assert_int_equal(a.type, GGUF_VALUE_TYPE_STRING);
  assert_int_equal(a.len, 3);
  assert_true(gguf_str_eq(a.strs[0], "x") && gguf_str_eq(a.strs[1], "") &&
              gguf_str_eq(a.strs[2], "hello"));
  assert_int_equal(gguf_get_array(f, "t.nested", &a), LLB_STATUS_OK);
  assert_int_equal(a.type, GGUF_VALUE_TYPE_ARRAY);
  assert_int_equal(a.len, 2);
  assert_null(a.strs);
  assert_int_equal(gguf_get_array(f, "t.u8", &a), LLB_STATUS_MALFORMED);
  gguf_close(f);
  free(b.p);
}

static void check_two_tensor_file(struct gguf_file *f, uint32_t version, uint32_t alignment) {
  assert_int_equal(gguf_version(f), version);
  assert_int_equal(gguf_tensor_count(f), 3);
  const struct gguf_tensor *a = gguf_find_tensor(f, "a");
  const struct gguf_tensor *bt = gguf_find_tensor(f, "b");
  const struct gguf_tensor *q = gguf_find_tensor(f, "q");
  assert_non_null(a);
  assert_non_null(bt);
  assert_non_null(q);
  assert_null(gguf_find_tensor(f, "c"));
  assert_ptr_equal(gguf_tensor_at(f, 0), a);
  assert_null(gguf_tensor_at(f, 3));
  assert_int_equal(a->n_dims, 2);
  assert_true(a->ne[0] == 64 && a->ne[1] == 2 && a->ne[2] == 1 && a->ne[3] == 1);
  assert_int_equal(a->type, GGML_TYPE_F32);
  assert_int_equal(a->size_bytes, 512);
  assert_int_equal(bt->offset % alignment, 0);
  assert_int_equal(q->offset % alignment, 0);
  assert_true(bt->offset >= 512);
  assert_memory_equal(a->data, test_data, 512);
  assert_memory_equal(bt->data, test_data + 128, 256);
  assert_int_equal(q->type, GGML_TYPE_Q8_0);
  assert_int_equal(q->size_bytes, 68);
  float y[64];
  assert_int_equal(ggml_dequantize_row(q->type, q->data, y, 64), LLB_STATUS_OK);
  assert_true(y[0] == -2.0f && y[33] == 0.125f * -14.0f);
  /* the data section is aligned in the file: data pointers follow the (page-aligned) mapping */
  assert_int_equal(((const uint8_t *)bt->data - (const uint8_t *)a->data) % alignment, 0);
}

static void run_layout(uint32_t version, uint32_t alignment) {
  struct gguf_writer *w = two_tensor_writer(version, alignment == 32 ? 0 : alignment);
  char path[] = "/tmp/llb_test_gguf_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(gguf_writer_write_file(w, path), LLB_STATUS_OK);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);

  struct gguf_file *f;
  assert_int_equal(gguf_open(path, &f), LLB_STATUS_OK);
  check_two_tensor_file(f, version, alignment);
  assert_int_equal((uintptr_t)gguf_tensor_at(f, 0)->data % alignment, 0);
  gguf_close(f);
  unlink(path);
  assert_int_equal(gguf_open_memory(b.p, b.size, &f), LLB_STATUS_OK);
  check_two_tensor_file(f, version, alignment);
  gguf_close(f);
  free(b.p);
}

static void test_v3_default_alignment_32(void **state) { (void)state; run_layout(3, 32); }
static void test_v3_alignment_64(void **state) { (void)state; run_layout(3, 64); }
static void test_v2_alignment_32(void **state) { (void)state; run_layout(2, 32); }
static void test_v2_alignment_64(void **state) { (void)state; run_layout(2, 64); }

static void test_open_missing_path_is_io_error(void **state) {
  (void)state;
  struct gguf_file *f;
  assert_int_equal(gguf_open("/nonexistent/x.gguf", &f), LLB_STATUS_IO);
  assert_non_null(strstr(llb_err_last(), "/nonexistent/x.gguf"));
  assert_null(f);
  gguf_close(NULL);
}

static void test_every_truncation_is_malformed(void **state) {
  (void)state;
  struct gguf_writer *w = two_tensor_writer(3, 0);
  gguf_writer_add_str_array(w, "s", (const char *[]){"one", "two"}, 2);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  for (size_t n = 0; n < b.size; n++) {
    struct gguf_file *f;
    llb_status st = open_prefix(&b, n, &f);
    if (st != LLB_STATUS_MALFORMED) {
      fail_msg("prefix of %zu/%zu bytes gave %s", n, b.size, llb_strerror(st));
    }
    assert_true(strlen(llb_err_last()) > 0);
  }
  struct gguf_file *f;
  assert_int_equal(open_prefix(&b, b.size, &f), LLB_STATUS_OK);
  free(b.p);
}

static void test_version_1_and_unknown_versions_are_unsupported(void **state) {
  (void)state;
  const uint32_t versions[] = {1, 4, 0x03000000u};
  for (size_t i = 0; i < 3; i++) {
    struct gguf_writer *w;
    gguf_writer_create(versions[i], &w);
    gguf_writer_add_u32(w, "k", 1);
    struct blob b = write_blob(w);
    gguf_writer_destroy(w);
    struct gguf_file *f;
    assert_int_equal(open_prefix(&b, b.size, &f), LLB_STATUS_UNSUPPORTED);
    assert_non_null(strstr(llb_err_last(), i == 2 ? "big-endian" : "version"));
    free(b.p);
  }
}

static void test_bad_magic_is_malformed(void **state) {
  (void)state;
  struct gguf_writer *w = two_tensor_writer(3, 0);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  b.p[0] = 'X';
  expect_malformed(&b, "magic");
  free(b.p);
}

static void test_lying_counts_are_malformed(void **state) {
  (void)state;
  struct gguf_writer *w = two_tensor_writer(3, 0);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  put64(b.p + 8, UINT64_MAX / 2); /* tensor count */
  expect_malformed(&b, "tensor infos cannot fit");
  put64(b.p + 8, 3);
  put64(b.p + 16, 1ull << 40); /* kv count */
  expect_malformed(&b, "metadata pairs cannot fit");
  put64(b.p + 16, 2);
  put64(b.p + 24, UINT64_MAX); /* length of the first key */
  expect_malformed(&b, "length");
  free(b.p);
}

static void test_string_and_array_lengths_past_eof_are_malformed(void **state) {
  (void)state;
  struct gguf_writer *w;
  gguf_writer_create(3, &w);
  gguf_writer_add_str(w, "k.str", "value");
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  /* header 24 + key (8 + 5) + type 4: the value's length */
  put64(b.p + 24 + 13 + 4, 1000);
  expect_malformed(&b, "past");
  free(b.p);

  gguf_writer_create(3, &w);
  int32_t x[2] = {1, 2};
  gguf_writer_add_array(w, "k.arr", GGUF_VALUE_TYPE_INT32, x, 2);
  b = write_blob(w);
  gguf_writer_destroy(w);
  put64(b.p + 24 + 13 + 4 + 4, 1ull << 62); /* array length */
  expect_malformed(&b, "k.arr");
  put64(b.p + 24 + 13 + 4 + 4, 2);
  put32(b.p + 24 + 13 + 4, 13); /* element type */
  expect_malformed(&b, "unknown array element type");
  free(b.p);

  gguf_writer_create(3, &w);
  gguf_writer_add_str_array(w, "k.strs", (const char *[]){"a", "b"}, 2);
  b = write_blob(w);
  gguf_writer_destroy(w);
  put64(b.p + 24 + 14 + 4 + 4 + 8, 1ull << 60); /* first element's length */
  expect_malformed(&b, "k.strs");
  free(b.p);
}

static void test_unknown_value_type_is_malformed(void **state) {
  (void)state;
  struct gguf_writer *w;
  gguf_writer_create(3, &w);
  gguf_writer_add_raw(w, "k.odd", 13, "\0\0\0\0", 4);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  expect_malformed(&b, "unknown value type 13");
  free(b.p);
}

static void test_deeply_nested_arrays_are_malformed(void **state) {
  (void)state;
  uint8_t raw[64 * 12];
  size_t n = 0;
  for (int i = 0; i < 63; i++) { /* ARRAY of 1 ARRAY of 1 ... */
    put32(raw + n, GGUF_VALUE_TYPE_ARRAY);
    put64(raw + n + 4, 1);
    n += 12;
  }
  put32(raw + n, GGUF_VALUE_TYPE_UINT8);
  put64(raw + n + 4, 0);
  n += 12;
  struct gguf_writer *w;
  gguf_writer_create(3, &w);
  gguf_writer_add_raw(w, "k.deep", GGUF_VALUE_TYPE_ARRAY, raw, n);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  expect_malformed(&b, "nested deeper");
  free(b.p);
}

static void test_duplicate_keys_and_tensor_names_are_malformed(void **state) {
  (void)state;
  struct gguf_writer *w = two_tensor_writer(3, 0);
  gguf_writer_add_u32(w, "general.architecture", 1);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  expect_malformed(&b, "duplicate metadata key 'general.architecture'");
  free(b.p);

  w = two_tensor_writer(3, 0);
  gguf_writer_add_tensor_f32(w, "b", 1, (int64_t[]){8}, test_data);
  b = write_blob(w);
  gguf_writer_destroy(w);
  expect_malformed(&b, "duplicate tensor name 'b'");
  free(b.p);
}

static void test_bad_alignment_is_malformed(void **state) {
  (void)state;
  struct gguf_writer *w = two_tensor_writer(3, 0);
  gguf_writer_add_u32(w, "general.alignment", 48);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  expect_malformed(&b, "power of two");
  free(b.p);
  w = two_tensor_writer(3, 0);
  gguf_writer_add_u64(w, "general.alignment", 64);
  b = write_blob(w);
  gguf_writer_destroy(w);
  expect_malformed(&b, "general.alignment has type uint64");
  free(b.p);
}

static void test_bad_tensor_infos_are_malformed(void **state) {
  (void)state;
  struct gguf_writer *w = two_tensor_writer(3, 64);
  struct blob b = write_blob(w);
  gguf_writer_destroy(w);
  uint8_t *orig = malloc(b.size);
  memcpy(orig, b.p, b.size);
  size_t pa = tensor_info_pos(&b, "a"); /* n_dims 4, ne 8+8, type 4, offset 8 */
  size_t pb = tensor_info_pos(&b, "b"); /* n_dims 4, ne 8, type 4, offset 8 */

  put32(b.p + pa, 5);
  expect_malformed(&b, "5 dimensions");
  memcpy(b.p, orig, b.size);

  put64(b.p + pa + 4, 1ull << 40);
  put64(b.p + pa + 12, 1ull << 40);
  expect_malformed(&b, "overflows");
  memcpy(b.p, orig, b.size);

  put64(b.p + pa + 12, 0);
  expect_malformed(&b, "dimension 1 is 0");
  memcpy(b.p, orig, b.size);

  put32(b.p + pa + 20, 4); /* removed type Q4_2 */
  expect_malformed(&b, "unknown type 4");
  put32(b.p + pa + 20, 1000);
  expect_malformed(&b, "unknown type 1000");
  memcpy(b.p, orig, b.size);

  put32(b.p + pa + 20, GGML_TYPE_Q4_K); /* 64 is not a multiple of 256 */
  expect_malformed(&b, "multiple");
  memcpy(b.p, orig, b.size);

  put64(b.p + pb + 16, 4); /* misaligned */
  expect_malformed(&b, "alignment");
  put64(b.p + pb + 16, 0); /* overlaps "a" */
  expect_malformed(&b, "overlap");
  put64(b.p + pb + 16, 1ull << 40); /* past EOF */
  expect_malformed(&b, "past the end");
  put64(b.p + pb + 16, UINT64_MAX - 63); /* aligned, offset + size overflows */
  expect_malformed(&b, "past the end");
  memcpy(b.p, orig, b.size);

  put64(b.p + pb + 4, 1ull << 50); /* more data than the file holds */
  expect_malformed(&b, "more bytes than the file");
  memcpy(b.p, orig, b.size);

  put64(b.p + pa - 1 - 8, 65); /* name length runs into the following fields */
  expect_malformed(&b, "tensor");
  memcpy(b.p, orig, b.size);
  b.p[pa - 1] = '\0'; /* NUL inside a name */
  expect_malformed(&b, "NUL");

  struct gguf_file *f;
  assert_int_equal(open_prefix(&(struct blob){orig, b.size}, b.size, &f), LLB_STATUS_OK);
  free(orig);
  free(b.p);
}

static void test_default_model_metadata(void **state) {
  (void)state;
  struct gguf_file *f;
  assert_int_equal(gguf_open(model_path, &f), LLB_STATUS_OK);
  assert_int_equal(gguf_version(f), 3);
  struct gguf_str s;
  assert_int_equal(gguf_get_str(f, "general.architecture", &s), LLB_STATUS_OK);
  assert_true(gguf_str_eq(s, "llama"));
  int64_t v;
  const struct { const char *key; int64_t want; } ints[] = {
      {"llama.block_count", 30}, {"llama.embedding_length", 576},
      {"llama.feed_forward_length", 1536}, {"llama.attention.head_count", 9},
      {"llama.attention.head_count_kv", 3}, {"llama.context_length", 8192},
      {"llama.rope.dimension_count", 64}, {"tokenizer.ggml.bos_token_id", 1},
      {"tokenizer.ggml.eos_token_id", 2}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    assert_int_equal(gguf_get_int(f, ints[i].key, &v), LLB_STATUS_OK);
    assert_int_equal(v, ints[i].want);
  }
  double d;
  assert_int_equal(gguf_get_float(f, "llama.rope.freq_base", &d), LLB_STATUS_OK);
  assert_true(d == 100000.0);
  assert_int_equal(gguf_get_str(f, "tokenizer.ggml.model", &s), LLB_STATUS_OK);
  assert_true(gguf_str_eq(s, "gpt2"));
  assert_int_equal(gguf_get_str(f, "tokenizer.ggml.pre", &s), LLB_STATUS_OK);
  assert_true(gguf_str_eq(s, "smollm"));
  struct gguf_array a;
  assert_int_equal(gguf_get_array(f, "tokenizer.ggml.tokens", &a), LLB_STATUS_OK);
  assert_int_equal(a.len, 49152);
  assert_true(gguf_str_eq(a.strs[1], "<|im_start|>"));
  assert_int_equal(gguf_get_array(f, "tokenizer.ggml.merges", &a), LLB_STATUS_OK);
  assert_int_equal(a.len, 48900);
  assert_int_equal(gguf_tensor_count(f), 272);
  const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
  assert_non_null(t);
  assert_int_equal(t->type, GGML_TYPE_Q8_0);
  assert_true(t->ne[0] == 576 && t->ne[1] == 49152);
  t = gguf_find_tensor(f, "blk.29.ffn_down.weight");
  assert_non_null(t);
  assert_int_equal(t->type, GGML_TYPE_Q4_1);
  assert_true(t->ne[0] == 1536 && t->ne[1] == 576);
  assert_null(gguf_find_tensor(f, "output.weight"));
  /* a real row dequantizes to finite, non-zero values */
  float row[1536];
  assert_int_equal(ggml_dequantize_row(t->type, t->data, row, 1536), LLB_STATUS_OK);
  int nonzero = 0;
  for (int i = 0; i < 1536; i++) {
    assert_true(isfinite(row[i]));
    nonzero += row[i] != 0.0f;
  }
  assert_true(nonzero > 1000);
  gguf_close(f);
}

int main(int argc, char **argv) {
  fill_test_data();
  if (argc > 2 && strcmp(argv[1], "--model") == 0) {
    model_path = argv[2];
    if (access(model_path, R_OK) != 0) {
      printf("SKIP: default model %s is absent (run ops/fetch-model.sh)\n", model_path);
      return 77;
    }
    const struct CMUnitTest model_tests[] = {cmocka_unit_test(test_default_model_metadata)};
    return cmocka_run_group_tests(model_tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_value_type_reads_back),
      cmocka_unit_test(test_v3_default_alignment_32),
      cmocka_unit_test(test_v3_alignment_64),
      cmocka_unit_test(test_v2_alignment_32),
      cmocka_unit_test(test_v2_alignment_64),
      cmocka_unit_test(test_open_missing_path_is_io_error),
      cmocka_unit_test(test_every_truncation_is_malformed),
      cmocka_unit_test(test_version_1_and_unknown_versions_are_unsupported),
      cmocka_unit_test(test_bad_magic_is_malformed),
      cmocka_unit_test(test_lying_counts_are_malformed),
      cmocka_unit_test(test_string_and_array_lengths_past_eof_are_malformed),
      cmocka_unit_test(test_unknown_value_type_is_malformed),
      cmocka_unit_test(test_deeply_nested_arrays_are_malformed),
      cmocka_unit_test(test_duplicate_keys_and_tensor_names_are_malformed),
      cmocka_unit_test(test_bad_alignment_is_malformed),
      cmocka_unit_test(test_bad_tensor_infos_are_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
