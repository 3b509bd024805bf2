/* The input processor's multimodal content hash (actors/input_processor/mm_items.h): stable,
 * 32 hex digits, keyed, and different for any change of key, salt, modality, dtype, shape or one
 * byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "actors/input_processor/mm_items.h"

static void test_hash_is_stable_and_sensitive_to_every_field(void **state) {
  (void)state;
  uint8_t data[64];
  for (int i = 0; i < 64; i++) data[i] = (uint8_t)(i * 7 + 1);
  struct input_processor_mm_item it = {.modality = "embeds", .data = data, .data_bytes = 64, .dtype = "f32",
                              .num_rows = 2, .num_cols = 8};
  char h[INPUT_PROCESSOR_MM_HASH_BYTES], h2[INPUT_PROCESSOR_MM_HASH_BYTES];
  struct llb_hash_key key = {{1, 2, 3}};
  input_processor_mm_hash(&key, "default", &it, h);
  input_processor_mm_hash(&key, "default", &it, h2);
  assert_string_equal(h, h2);
  assert_int_equal(strlen(h), 32);
  input_processor_mm_hash(&key, "tenant-b", &it, h2);
  assert_string_not_equal(h, h2);
  struct input_processor_mm_item v = it;
  v.num_rows = 4, v.num_cols = 4;
  input_processor_mm_hash(&key, "default", &v, h2);
  assert_string_not_equal(h, h2);
  v = it;
  v.dtype = "f16";
  input_processor_mm_hash(&key, "default", &v, h2);
  assert_string_not_equal(h, h2);
  for (int i = 0; i < 64; i += 9) {
    data[i] ^= 1;
    input_processor_mm_hash(&key, "default", &it, h2);
    assert_string_not_equal(h, h2);
    data[i] ^= 1;
  }
  /* another deployment's key: every hash differs (nobody without the key can aim one) */
  struct llb_hash_key other = key;
  other.bytes[0] ^= 0x80;
  input_processor_mm_hash(&other, "default", &it, h2);
  assert_string_not_equal(h, h2);
  /* the salt and the modality are length-prefixed: ("ab", "c") is not ("a", "bc") */
  struct input_processor_mm_item m = it;
  m.modality = "cembeds";
  input_processor_mm_hash(&key, "defaul", &it, h);
  input_processor_mm_hash(&key, "default", &m, h2);
  m.modality = "tembeds";
  input_processor_mm_hash(&key, "defaul", &m, h);
  assert_string_not_equal(h, h2);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_hash_is_stable_and_sensitive_to_every_field)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
