/* Helpers shared by the output-processor tests: the GPT-2 vocab (by path), byte tokens,
 * and a driver that feeds token ids one engine step at a time. */
#ifndef LLB_TEST_OUTPUT_COMMON_H
#define LLB_TEST_OUTPUT_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/output_processor/output_processor.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

/* Loads the vocab named by LLMBUS_TEST_VOCAB, else the GPT-2 vocab of the shared test
 * vectors (LLB_TESTDATA_DIR); exits 77 (skipped) when no file is there. */
static inline struct tokenizer *test_load_tokenizer(void) {
  const char *cands[2] = {getenv("LLMBUS_TEST_VOCAB"), LLB_TESTDATA_DIR "/tokenizer/ggml-vocab-gpt-2.gguf"};
  for (int i = 0; i < 2; i++) {
    FILE *probe = cands[i] ? fopen(cands[i], "rb") : NULL;
    if (!probe) continue;
    fclose(probe);
    struct gguf_file *f = NULL;
    struct tokenizer *t = NULL;
    if (gguf_open(cands[i], &f) != LLB_STATUS_OK) break;
    llb_status st = tokenizer_load(f, &t);
    gguf_close(f);
    if (st != LLB_STATUS_OK) break;
    return t;
  }
  fprintf(stderr, "no tokenizer vocab found (set LLMBUS_TEST_VOCAB); skipping\n");
  exit(77);
}

/* The id of a non-control token whose bytes are exactly the one byte `b`; -1 if none. */
static inline int32_t test_byte_token(const struct tokenizer *t, unsigned char b) {
  static int32_t cache[256];
  static const struct tokenizer *cached_for;
  if (cached_for != t) {
    for (int i = 0; i < 256; i++) cache[i] = -1;
    char piece[8];
    for (int32_t id = 0; id < tokenizer_vocab_size(t); id++) {
      if (tokenizer_is_control(t, id)) continue;
      if (tokenizer_token_to_piece(t, id, false, piece, sizeof piece) == 1 &&
          cache[(unsigned char)piece[0]] < 0) {
        cache[(unsigned char)piece[0]] = id;
      }
    }
    cached_for = t;
  }
  return cache[b];
}

/* Token ids of `text`, one token per byte. Caller frees. */
static inline int32_t *test_byte_tokens(const struct tokenizer *t, const char *text, int64_t *n) {
  size_t len = strlen(text);
  int32_t *ids = malloc((len + 1) * sizeof *ids);
  for (size_t i = 0; i < len; i++) ids[i] = test_byte_token(t, (unsigned char)text[i]);
  *n = (int64_t)len;
  return ids;
}

/* Token ids of `text` as the tokenizer encodes it (no BOS). Caller frees. */
static inline int32_t *test_encode(const struct tokenizer *t, const char *text, int64_t *n) {
  int32_t *ids = NULL;
  if (tokenizer_encode(t, text, strlen(text), false, false, &ids, n) != LLB_STATUS_OK) return NULL;
  return ids;
}

/* A request info over static storage: prompt = 3 fixed tokens. */
static inline struct output_processor_request_info test_info(const char *id, const struct llb_sampling_params *sp) {
  static const int32_t prompt[3] = {464, 3290, 318};
  return (struct output_processor_request_info){
      .request_id = id, .parent_request_id = id, .external_request_id = "client-1",
      .reply_to = "_INBOX.test", .child_index = 0, .num_children = 1,
      .prompt_token_ids = prompt, .num_prompt_tokens = 3, .sampling_params = sp,
      .arrival_time_ns = 1000};
}

/* One engine step: tokens ids[pos, pos + k) for `id`, finishing with `why` (NONE = running). */
static inline llb_status test_step(struct output_processor *p, const char *id, const int32_t *ids, int64_t pos,
                            int32_t k, enum output_processor_finish_reason why, struct output_processor_result *res) {
  struct output_processor_engine_output eo = {.request_id = id, .new_token_ids = ids + pos,
                                     .num_new_tokens = k, .first_output_pos = pos,
                                     .finish_reason = why, .stop_token_id = -1,
                                     .num_cached_tokens = -1};
  return output_processor_process(p, &eo, 2000 + pos, res);
}

#endif
