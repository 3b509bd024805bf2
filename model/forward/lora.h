/* LoRA adapters in llama.cpp's GGUF format, applied per sequence of a batch.
 *
 * Format (llama.cpp convert_lora_to_gguf.py, src/llama-adapter.cpp): a GGUF with
 * general.type = "adapter", adapter.type = "lora", general.architecture = the base model's,
 * adapter.lora.alpha (float; 0 or absent = no alpha/rank scaling), and for each adapted base
 * weight "<name>" (e.g. "blk.3.attn_q.weight") two tensors "<name>.lora_a" (GGUF dims
 * ne = [in_cols, rank]: rank rows of in_cols) and "<name>.lora_b" (ne = [rank, out_rows]). A
 * row x of the base matmul y = W x becomes y = W x + s * B (A x), s = alpha / rank of that pair
 * (llama.cpp's llm_build_lora_mm with adapter scale 1.0; s = 1 when alpha is 0). Targets: the projections q, k, v, o, gate, up,
 * down of any layer (output / token_embd adapters are refused as UNSUPPORTED).
 *
 * The adapter's tensors are copied at load into one allocation with huge pages (the file's pages
 * released): a step streams every adapter of its batch once from memory.
 * A batch names each sequence's adapter (struct llama_batch.seq_loras); the forward runs each
 * adapter's product over the rows of its sequences (Punica's SGMV shape: one A and one B product
 * per adapter present in the step, over the gathered rows), every row's result independent of
 * which other rows and adapters share the step (docs/design.md §5).
 */
#ifndef LLB_MODEL_FORWARD_LORA_H
#define LLB_MODEL_FORWARD_LORA_H

#include <stdint.h>

#include "base/status.h"

struct gguf_file;
struct llama_model;
struct llama_lora; /* opaque: the validated adapter's tensor views */

/* Loads the adapter in f (which must outlive it) and checks it against base: the GGUF keys
 * above, every tensor a known target of an existing layer in a pair with its partner, the
 * shapes (A's in_cols = the base weight's columns, B's out_rows = its rows, one rank per pair),
 * the types the CPU matmul reads (F32, F16, BF16, Q8_0, and the quantized types of
 * llama_model_load), alpha finite and >= 0, at least one pair. max_rank > 0 refuses a pair of
 * larger rank (vLLM's --max-lora-rank); 0 = no limit. Caller frees with llama_lora_destroy.
 * Errors: MALFORMED (keys, shapes, unpaired tensors), UNSUPPORTED (architecture, type, target),
 * TOO_LARGE (rank over max_rank), OUT_OF_MEMORY; the message names the key or tensor. */
llb_status llama_lora_load(const struct gguf_file *f, const struct llama_model *base, int32_t max_rank,
                           struct llama_lora **out);

/* NULL ok. */
void llama_lora_destroy(struct llama_lora *a);

/* The largest rank over a's pairs. */
int32_t llama_lora_rank(const struct llama_lora *a);

/* adapter.lora.alpha (0 when absent). */
float llama_lora_alpha(const struct llama_lora *a);

/* Number of adapted base weights (pairs). */
int32_t llama_lora_num_targets(const struct llama_lora *a);

#endif
