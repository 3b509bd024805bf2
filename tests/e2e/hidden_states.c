/* llmbus-test-hidden-states MODEL ID... : the final-norm hidden states that the CPU forward
 * (model/forward/forward.c, the engine's default numerics: packed matmuls, batch-invariant attention)
 * computes for one sequence of token ids in one step, printed one row per line (E floats,
 * %.9g, space-separated). The reference of tests/e2e/test_openai_embeddings.py: the
 * engine's /v1/embeddings vectors are these rows pooled (LAST / MEAN / CLS) and normalized.
 * Exit 0, or 1 with the reason on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "model/forward/forward.h"
#include "model/gguf/gguf.h"

enum { BLOCK = 16 };

static int fail(const char *what) {
  fprintf(stderr, "llmbus-test-hidden-states: %s: %s\n", what, llb_err_last());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.gguf TOKEN_ID...\n", argv[0]);
    return 2;
  }
  const int32_t n = argc - 2, nb = (n + BLOCK - 1) / BLOCK;
  struct gguf_file *f = NULL;
  struct llama_model *m = NULL;
  struct llama_kv_cache *kv = NULL;
  struct llama_forward_ctx *c = NULL;
  int32_t *ids = calloc((size_t)n, sizeof *ids), *pos = calloc((size_t)n, sizeof *pos);
  int32_t *table = calloc((size_t)nb, sizeof *table);
  int64_t *slots = calloc((size_t)n, sizeof *slots);
  float *hidden = NULL;
  int rc = 1;
  if (!ids || !pos || !table || !slots) return fail("allocation");
  for (int32_t i = 0; i < n; i++) {
    ids[i] = atoi(argv[2 + i]);
    pos[i] = i;
    slots[i] = i;
  }
  for (int32_t b = 0; b < nb; b++) table[b] = b;
  if (gguf_open(argv[1], &f)) { rc = fail("open model"); goto done; }
  if (llama_model_load(f, &m)) { rc = fail("load model"); goto done; }
  const int32_t E = llama_model_config(m)->embedding_length;
  const struct llama_forward_options fo = {.max_num_tokens = n, .n_threads = 2};
  if (llama_kv_cache_create(m, nb, BLOCK, &kv) || llama_forward_ctx_create_opts(m, &fo, &c)) {
    rc = fail("forward context");
    goto done;
  }
  hidden = malloc((size_t)n * (size_t)E * sizeof *hidden);
  int32_t qsl[2] = {0, n}, len[1] = {n};
  const struct llama_batch batch = {.num_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                                    .num_seqs = 1, .query_start_loc = qsl, .seq_lens = len, .block_tables = table,
                                    .max_blocks_per_seq = nb, .num_hidden = n, .hidden_indices = pos,
                                    .hidden_states = hidden};
  if (!hidden || llama_forward(c, kv, &batch, NULL)) { rc = fail("forward"); goto done; }
  for (int32_t t = 0; t < n; t++)
    for (int32_t k = 0; k < E; k++) printf("%.9g%c", (double)hidden[(size_t)t * E + k], k + 1 < E ? ' ' : '\n');
  rc = 0;
done:
  free(hidden);
  llama_forward_ctx_destroy(c);
  llama_kv_cache_destroy(kv);
  llama_model_destroy(m);
  gguf_close(f);
  free(ids), free(pos), free(table), free(slots);
  return rc;
}
