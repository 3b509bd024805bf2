/* The CUDA backend's execution context (private to backend_cuda.cu and step.cu): the op
 * context of cuda_backend.h plus what the op table adds over it: the fp16 staging of matmul
 * inputs, the step metadata (pinned staging, one device copy) and the decode graphs. */
#ifndef LLB_KERNELS_CUDA_BACKEND_CUDA_CUH
#define LLB_KERNELS_CUDA_BACKEND_CUDA_CUH

#include "kernels/cuda/cuda_common.cuh"

/* Decode batch sizes replayed from graphs; a decode step is padded to the first that holds it. */
#define CUDA_GRAPH_BUCKETS 9

/* Byte offsets of the step metadata inside the pinned staging and device buffers. */
struct cuda_step_layout {
  size_t ids, pos, slots, qsl, seq_lens, row_seq, tables, logits_idx, total;
};

struct backend_ctx {
  struct backend_ctx_params p; /* defaults resolved (max_num_seqs, max_num_logits, max_blocks_per_seq) */
  struct cuda_ctx *cc;
  uint16_t *x16;               /* device [max_num_tokens, max_row_elems] fp16 copy of a matmul input */
  struct cuda_step_layout ml;
  uint8_t *meta_h;             /* pinned [ml.total]: the step's metadata, staged */
  uint8_t *meta_d;             /* device [ml.total]: its copy, what the step's ops read */
  cudaGraphExec_t graphs[CUDA_GRAPH_BUCKETS];
  int32_t num_graphs;
  bool in_step;                /* between step_begin and step_end */
  int capturing;               /* bucket whose graph is being captured, or -1 */
  int32_t step_max_seq_len;    /* attention grid extent of the step (max_context_len in graphs) */
};

/* The step hooks of the table (step.cu). */
llb_status cuda_backend_step_begin(struct backend_ctx *c, const struct backend_step *in, struct backend_step *run,
                                   bool *replayed);
llb_status cuda_backend_step_end(struct backend_ctx *c, llb_status st, void *out_dst, const void *out_src,
                                 size_t out_bytes);
/* The layout of the metadata for c's sizes. */
struct cuda_step_layout cuda_step_layout_for(const struct backend_ctx_params *p);

#endif
