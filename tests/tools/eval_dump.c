/* eval_dump: llmbus's forward over one prompt with llama.cpp's CPU numerics (--numerics ggml:
 * LLAMA_MATMUL_GGML, LLAMA_ATTENTION_ORDER_LLAMACPP), printing every op's output as
 * llama-eval-callback prints llama.cpp's: "<name>-<il> sum = %f" (the float sum in memory
 * order, as llama.cpp's common debug callback sums) and its first values. Compare the two logs
 * with tests/tools/eval_compare.py to find the first op whose output differs.
 *
 *   eval_dump MODEL.gguf "prompt"        (BOS as the file says, no chat template)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

/* The prompt's token count: each op's output is [T rows][n / T]. */
static int32_t n_tokens = 1;

static void print_op(void *user, const char *name, int32_t il, const float *data, int64_t n) {
  (void)user;
  float sum = 0.0f, last = 0.0f; /* last: the last row's sum (llama.cpp keeps only the output row
                                    from the last layer's attention output on) */
  /* FNV-1a rounds over the float bits as 32-bit words, in memory order, from this start (not
   * FNV's basis): the values a patched llama.cpp prints for eval_compare.py */
  uint64_t hash = UINT64_C(1469598103934665603);
  for (int64_t i = 0; i < n; i++) {
    sum += data[i];
    uint32_t b;
    memcpy(&b, &data[i], 4);
    hash = llb_fnv1a64_word(hash, b);
  }
  const int64_t row = n % n_tokens == 0 ? n / n_tokens : n;
  for (int64_t i = n - row; i < n; i++) last += data[i];
  if (il >= 0) printf("%s-%d", name, il);
  else printf("%s", name);
  printf(" n=%lld first=[%.4f, %.4f, %.4f] hash = %016llx last_row_sum = %f sum = %f\n", (long long)n,
         n > 0 ? data[0] : 0.0, n > 1 ? data[1] : 0.0, n > 2 ? data[2] : 0.0, (unsigned long long)hash, last, sum);
  /* EVAL_DUMP_ROWS=1: the first and last 3 values of the first and last 3 rows, as
   * llama-eval-callback prints them */
  const char *rows = getenv("EVAL_DUMP_ROWS");
  if (rows && *rows == '1' && n % n_tokens == 0 && row >= 6)
    for (int32_t r = 0; r < n_tokens; r++) {
      if (r == 3 && n_tokens > 6) r = n_tokens - 3;
      const float *x = data + (int64_t)r * row;
      printf("    [%12.4f, %12.4f, %12.4f, ..., %12.4f, %12.4f, %12.4f]\n", x[0], x[1], x[2], x[row - 3], x[row - 2],
             x[row - 1]);
    }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]);
    return 2;
  }
  struct gguf_file *f = NULL;
  struct tokenizer *tok = NULL;
  struct llama_model *m = NULL;
  struct llama_forward_ctx *fc = NULL;
  struct llama_kv_cache *kv = NULL;
  int32_t *ids = NULL;
  int64_t n = 0;
  llb_status st = gguf_open(argv[1], &f);
  if (!st) st = tokenizer_load(f, &tok);
  if (!st) st = llama_model_load(f, &m);
  if (!st) st = tokenizer_encode(tok, argv[2], strlen(argv[2]), true, false, &ids, &n);
  if (st || n < 1 || n > 4096) {
    fprintf(stderr, "eval_dump: %s\n", st ? llb_err_last() : "prompt of 1..4096 tokens");
    return 1;
  }
  n_tokens = (int32_t)n;
  const int32_t T = (int32_t)n, bs = 16, nb = (T + bs - 1) / bs, V = llama_model_config(m)->vocab_size;
  const struct llama_forward_options fo = {.max_num_tokens = T, .n_threads = 2, .matmul = LLAMA_MATMUL_GGML,
                                           .attention_order = LLAMA_ATTENTION_ORDER_LLAMACPP, .eval_cb = print_op};
  if ((st = llama_forward_ctx_create_opts(m, &fo, &fc)) || (st = llama_kv_cache_create_for(fc, nb, bs, &kv))) {
    fprintf(stderr, "eval_dump: %s\n", llb_err_last());
    return 1;
  }
  int32_t *pos = malloc((size_t)T * sizeof *pos), *table = malloc((size_t)nb * sizeof *table);
  int64_t *slots = malloc((size_t)T * sizeof *slots);
  float *logits = malloc((size_t)V * sizeof *logits);
  for (int32_t i = 0; i < T; i++) pos[i] = i, slots[i] = i;
  for (int32_t b = 0; b < nb; b++) table[b] = b;
  printf("tokens:");
  for (int32_t i = 0; i < T; i++) printf(" %d", ids[i]);
  printf("\n");
  const int32_t qsl[2] = {0, T}, lens[1] = {T}, last = T - 1;
  const struct llama_batch b = {.num_tokens = T, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                .num_seqs = 1, .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                                .max_blocks_per_seq = nb, .num_logits = 1, .logits_indices = &last};
  st = llama_forward(fc, kv, &b, logits);
  if (st) fprintf(stderr, "eval_dump: %s\n", llb_err_last());
  free(pos), free(table), free(slots), free(logits), free(ids);
  llama_kv_cache_destroy(kv);
  llama_forward_ctx_destroy(fc);
  llama_model_destroy(m);
  tokenizer_destroy(tok);
  gguf_close(f);
  return st ? 1 : 0;
}
