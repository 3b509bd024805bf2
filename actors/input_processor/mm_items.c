/* Content hash of multimodal items. See mm_items.h. */
#include "actors/input_processor/mm_items.h"

#include <stdio.h>
#include <string.h>

void input_processor_mm_hash(const struct llb_hash_key *key, const char *salt, const struct input_processor_mm_item *it, char *out) {
  const char *strs[3] = {salt ? salt : "", it->modality ? it->modality : "", it->dtype ? it->dtype : ""};
  const uint32_t shape[2] = {(uint32_t)it->num_rows, (uint32_t)it->num_cols};
  const struct llb_hash_part parts[5] = {
      {strs[0], strlen(strs[0])}, {strs[1], strlen(strs[1])}, {strs[2], strlen(strs[2])},
      {shape, sizeof shape}, {it->data, it->data_bytes > 0 ? (size_t)it->data_bytes : 0}};
  uint8_t h[16];
  llb_keyed_hash128_parts(key, "llmbus-mm-item", parts, 5, h);
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}
