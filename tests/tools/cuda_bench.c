/* CUDA forward benchmark: model/forward/forward.c's llama_forward over backend_cuda_ops(): decode
 * tokens/s at batch 1, 8, 32, 128 (context 512 per sequence, CUDA graphs, logits copied back
 * to the host as the worker does) and prefill tokens/s at 512 and 2048 prompt tokens, for
 * random-weight models
 * of SmolLM2-135M's and a 1B LLaMA's shape, each next to its floor as a fraction:
 *   floor time = max(bytes / copy bandwidth, FLOPs / cuBLAS fp16 rate), both measured here;
 *   bytes = fp16 weights read once + KV read (decode) or written (prefill);
 *   FLOPs = 2 x matmul weights x tokens + attention (4 x layers x heads x head_dim x keys).
 * Prints a markdown table (ops/bench/cuda-bench.sh runs it). Usage: llmbus_cuda_bench
 * [--shape smollm2|llama1b] (default both) [--decode-only B | --prefill-only 512|2048] (one
 * row of the table, no ceilings: the run to put under a profiler such as ncu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/forward/forward.h"
#include "model/gguf/gguf.h"
#include "tests/unit/random_llama.h"

#define BS 16
#define DECODE_CTX 512
#define REPS 20

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define TRY(call)                                                                   \
  do {                                                                              \
    llb_status st_ = (call);                                                        \
    if (st_ != LLB_STATUS_OK) {                                                     \
      fprintf(stderr, "%s: %s\n", #call, llb_err_last_where());                     \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

struct ceilings { double bw, flops; };

static int g_decode_only;  /* --decode-only B: 0 = the whole table */
static int g_prefill_only; /* --prefill-only P: only the prefill of P tokens */

/* Prefills DECODE_CTX tokens of each of n_seqs sequences (tables [n_seqs, mb]), 4 a step, so
 * that decode reads real K/V rather than the zeroed cache. */
static llb_status fill_contexts(struct llama_forward_ctx *c, struct llama_kv_cache *kv, int32_t vocab, int32_t n_seqs,
                                const int32_t *tables, int32_t mb, float *logits) {
  enum { PER_STEP = 4, T = PER_STEP * DECODE_CTX };
  static int32_t ids[T], pos[T], qsl[PER_STEP + 1], lens[PER_STEP], lidx[PER_STEP];
  static int64_t slots[T];
  for (int32_t s0 = 0; s0 < n_seqs; s0 += PER_STEP) {
    for (int32_t j = 0; j < PER_STEP; j++) {
      const int32_t s = (s0 + j) % n_seqs;
      for (int32_t i = 0; i < DECODE_CTX; i++) {
        const int32_t r = j * DECODE_CTX + i;
        ids[r] = (int32_t)(((int64_t)r * 7919 + s) % vocab), pos[r] = i;
        slots[r] = (int64_t)tables[(size_t)s * mb + i / BS] * BS + i % BS;
      }
      qsl[j] = j * DECODE_CTX, lens[j] = DECODE_CTX, lidx[j] = (j + 1) * DECODE_CTX - 1;
    }
    qsl[PER_STEP] = T;
    /* sequence j's block table is row (s0 + j) of tables */
    const struct llama_batch b = {T, ids, pos, slots, PER_STEP, qsl, lens, tables + (size_t)s0 * mb, mb,
                                  NULL, NULL, PER_STEP, lidx, 0, NULL, NULL, NULL};
    if (s0 + PER_STEP > n_seqs) break; /* n_seqs is a multiple of PER_STEP here */
    llb_status st = llama_forward(c, kv, &b, logits);
    if (st != LLB_STATUS_OK) return st;
  }
  return LLB_STATUS_OK;
}

static int bench_shape(const struct random_llama_shape *sh, const struct ceilings *ce) {
  void *buf;
  size_t size;
  struct gguf_file *f;
  struct llama_model *m;
  struct llama_forward_ctx *c;
  struct llama_kv_cache *kv;
  TRY(random_llama_gguf(sh, 1, &buf, &size));
  TRY(gguf_open_memory(buf, size, &f));
  TRY(llama_model_load(f, &m));
  const int32_t max_tokens = 2048, max_seqs = 128, MB = (2048 + 64) / BS + 1;
  const struct llama_forward_options fo = {.max_num_tokens = max_tokens, .n_threads = 1, .ops = backend_cuda_ops(),
                                           .max_num_seqs = max_seqs, .max_num_logits = max_seqs,
                                           .max_blocks_per_seq = MB};
  TRY(llama_forward_ctx_create_opts(m, &fo, &c)); /* uploads the weights: the file is not read after */
  const int32_t blocks_per_seq = DECODE_CTX / BS + 1, NB = max_seqs * blocks_per_seq > MB ? max_seqs * blocks_per_seq : MB;
  TRY(llama_kv_cache_create_for(c, NB, BS, &kv));
  const double L = sh->n_layers, E = sh->embd, H = sh->n_heads, HKV = sh->n_kv_heads, D = sh->head_dim, F = sh->ffn,
               V = sh->vocab;
  const double layer_w = E * (H * D + 2 * HKV * D) + H * D * E + 3 * E * F;
  const double wbytes = (double)llama_forward_ctx_weight_bytes(c);
  const double kv_tok = L * 2 * HKV * D * 2; /* bytes of one token's K and V */
  int32_t *ids = malloc(max_tokens * 4), *pos = malloc(max_tokens * 4), *qsl = malloc((max_seqs + 1) * 4);
  int32_t *lens = malloc(max_seqs * 4), *tables = malloc((size_t)max_seqs * MB * 4), *lidx = malloc(max_tokens * 4);
  int64_t *slots = malloc(max_tokens * 8);
  float *logits = malloc((size_t)max_seqs * (size_t)sh->vocab * 4);
  double t[REPS];
  for (int s = 0; s < max_seqs; s++)
    for (int k = 0; k < MB; k++) tables[s * MB + k] = (s * blocks_per_seq + k) % NB;
  if (!g_prefill_only) TRY(fill_contexts(c, kv, sh->vocab, max_seqs, tables, MB, logits));
  const int batches[] = {1, 8, 32, 128};
  for (int bi = 0; bi < 4; bi++) {
    const int B = batches[bi];
    if ((g_decode_only && B != g_decode_only) || g_prefill_only) continue;
    for (int s = 0; s < B; s++) {
      ids[s] = (s * 7919) % sh->vocab, pos[s] = DECODE_CTX - 1, qsl[s] = s, lidx[s] = s, lens[s] = DECODE_CTX;
      slots[s] = (int64_t)tables[s * MB + (DECODE_CTX - 1) / BS] * BS + (DECODE_CTX - 1) % BS;
    }
    qsl[B] = B;
    const struct llama_batch b = {B, ids, pos, slots, B, qsl, lens, tables, MB, NULL, NULL, B, lidx, 0, NULL, NULL, NULL};
    for (int r = 0; r < 3; r++) TRY(llama_forward(c, kv, &b, logits));
    for (int r = 0; r < REPS; r++) {
      const double t0 = now_s();
      TRY(llama_forward(c, kv, &b, logits));
      t[r] = now_s() - t0;
    }
    qsort(t, REPS, sizeof(double), cmp_d);
    const double tps = B / t[REPS / 2];
    const double bytes = wbytes + B * DECODE_CTX * kv_tok;
    const double flops = 2 * B * (L * layer_w + E * V) + 4.0 * B * L * H * D * DECODE_CTX;
    const double floor_t = fmax(bytes / ce->bw, flops / ce->flops);
    printf("| %s | decode | batch %d, ctx %d | %.0f | %.0f | %.2f | %s |\n", sh->name, B, DECODE_CTX, tps, B / floor_t,
           tps * floor_t / B, bytes / ce->bw >= flops / ce->flops ? "bytes" : "flops");
    fflush(stdout);
  }
  const int prompts[] = {512, 2048};
  for (int pi = 0; pi < (g_decode_only ? 0 : 2); pi++) {
    const int P = prompts[pi];
    if (g_prefill_only && P != g_prefill_only) continue;
    for (int i = 0; i < P; i++) {
      ids[i] = (i * 31) % sh->vocab, pos[i] = i;
      slots[i] = (int64_t)i; /* blocks 0.. of sequence 0 */
    }
    for (int k = 0; k < MB; k++) tables[k] = k % NB;
    qsl[0] = 0, qsl[1] = P, lens[0] = P, lidx[0] = P - 1;
    const struct llama_batch b = {P, ids, pos, slots, 1, qsl, lens, tables, MB, NULL, NULL, 1, lidx, 0, NULL, NULL, NULL};
    for (int r = 0; r < 2; r++) TRY(llama_forward(c, kv, &b, logits));
    for (int r = 0; r < 5; r++) {
      const double t0 = now_s();
      TRY(llama_forward(c, kv, &b, logits));
      t[r] = now_s() - t0;
    }
    qsort(t, 5, sizeof(double), cmp_d);
    const double tps = P / t[2];
    const double bytes = wbytes + P * kv_tok;
    const double flops = 2.0 * P * L * layer_w + 2 * E * V + 4.0 * L * H * D * (double)P * (P + 1) / 2;
    const double floor_t = fmax(bytes / ce->bw, flops / ce->flops);
    printf("| %s | prefill | %d tokens | %.0f | %.0f | %.2f | %s |\n", sh->name, P, tps, P / floor_t,
           tps * floor_t / P, bytes / ce->bw >= flops / ce->flops ? "bytes" : "flops");
    fflush(stdout);
  }
  llama_kv_cache_destroy(kv);
  llama_forward_ctx_destroy(c);
  llama_model_destroy(m);
  gguf_close(f);
  free(buf);
  free(ids), free(pos), free(qsl), free(lens), free(tables), free(lidx), free(slots), free(logits);
  return 0;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--shape") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--decode-only") && i + 1 < argc) g_decode_only = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--prefill-only") && i + 1 < argc) g_prefill_only = atoi(argv[++i]);
  char reason[256], desc[256];
  if (cuda_device_probe(reason, sizeof(reason)) != LLB_STATUS_OK) {
    printf("no CUDA device: %s\n", reason);
    return 77;
  }
  TRY(cuda_device_describe(desc, sizeof(desc)));
  struct cuda_ctx *cc;
  const struct cuda_ctx_params cp = {1, 1, 64, 1, 0, 0, 0};
  TRY(cuda_ctx_create(&cp, &cc));
  struct ceilings ce = {3e12, 7e14}; /* --decode-only / --prefill-only: nominal, not measured */
  if (!g_decode_only && !g_prefill_only) {
    TRY(cuda_measure_copy_bandwidth(cc, (size_t)1 << 31, &ce.bw));
    TRY(cuda_measure_gemm_rate(cc, 8192, &ce.flops));
  }
  cuda_ctx_destroy(cc);
  const time_t now = time(NULL);
  char date[32];
  strftime(date, sizeof(date), "%Y-%m-%d", gmtime(&now));
  printf("\n%s, %s: copy %.0f GB/s (read + write), cuBLAS fp16 %.0f TFLOP/s (8192^3)\n\n", date, desc, ce.bw / 1e9,
         ce.flops / 1e12);
  printf("| model (random weights) | phase | shape | tokens/s | floor tokens/s | fraction | bound |\n");
  printf("|---|---|---|---|---|---|---|\n");
  if (!only || !strcmp(only, "smollm2"))
    if (bench_shape(&random_llama_smollm2_135m, &ce)) return 1;
  if (!only || !strcmp(only, "llama1b"))
    if (bench_shape(&random_llama_1b, &ce)) return 1;
  return 0;
}
