/* Multimodal items of a request (vLLM v1 processor.py _validate_mm / MultiModalFeatureSpec):
 * shape checks and the content hash that keys the encoder cache and the prefix cache.
 *
 * Placeholders: an item of num_rows rows replaces the prompt tokens
 * [placeholder_offset, placeholder_offset + num_rows) of the tokenized prompt (after the
 * chat template, when one applies). The tokens there can be any valid ids: the engine never
 * embeds them (their KV comes from the item's rows); with prompt_token_ids the client picks
 * them, with text it must know where the tokenizer puts them.
 *
 * mm_hash: 128 bits as 32 hex digits, the keyed BLAKE2b (base/hash.h, libsodium) of (cache
 * salt, modality, dtype, shape, bytes), each field length-prefixed, under the deployment's key.
 * Without the key nobody can construct an item whose hash equals another item's, so a tenant
 * can neither plant encoder outputs nor KV blocks that another request will reuse; 128 bits make
 * an accidental collision negligible at any cache size; the salt (the tenant) keeps even equal
 * items of two tenants apart.
 */
#ifndef LLB_INPUT_PROCESSOR_MM_ITEMS_H
#define LLB_INPUT_PROCESSOR_MM_ITEMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

#define INPUT_PROCESSOR_MM_HASH_BYTES 33 /* 32 hex digits + NUL */
#define INPUT_PROCESSOR_MAX_MM_ITEMS 64

/* One item as the client sent it (borrowed). */
struct input_processor_mm_item {
  const char *modality;        /* "embeds" (precomputed embeddings) or "image" (mm_images.h) */
  const uint8_t *data;         /* [num_rows, num_cols] of dtype, little-endian; or the file */
  int64_t data_bytes;
  const char *dtype;           /* "f16" or "f32"; "jpeg" or "png" for an image */
  int32_t num_rows, num_cols;
  int32_t placeholder_offset;  /* first replaced prompt token */
};

/* What goes into EngineCoreRequest.mm_features for item `item` of the request. */
struct input_processor_mm_feature {
  char mm_hash[INPUT_PROCESSOR_MM_HASH_BYTES];
  int32_t item;                /* index into the request's mm_items */
  int32_t offset, length;
  uint8_t *is_embed;           /* [length] owned, or NULL = every position takes a row */
  int32_t num_embeds;          /* rows: the 1s of is_embed, or length */
};

/* The 128-bit keyed content hash as 32 hex digits into out[INPUT_PROCESSOR_MM_HASH_BYTES]. */
void input_processor_mm_hash(const struct llb_hash_key *key, const char *salt, const struct input_processor_mm_item *it, char *out);

#endif
