/* POST /v1/embeddings (OpenAI Embeddings API; vLLM serving_embedding.py for the response and
 * its pooling extras): request parsing, the GenerateRequest of each input, collecting the
 * pooled vectors from the RequestOutputs and rendering the response. Pure logic: no network.
 *
 * Request: {model, input: string | [string] | [int] | [[int]], encoding_format: "float"
 * (default) | "base64", dimensions, user} and the extras `normalize` (vLLM's; default true)
 * and `pooling_type` ("LAST" default, "MEAN", "CLS": llmbus' per-request form of vLLM's
 * --pooler-config pooling_type). `input` is checked exactly as a completions `prompt` (up
 * to API_SERVER_MAX_PROMPTS inputs; token ids as given; text tokenized without a chat template).
 * `dimensions` must be a positive integer here; the input processor then refuses it (no
 * model here supports Matryoshka truncation), so it answers 400 as vLLM does.
 *
 * Response: {"id": "embd-...", "object": "list", "created", "model", "data": [{"object":
 * "embedding", "index": i, "embedding": [floats] | "<base64 of little-endian float32>"}],
 * "usage": {"prompt_tokens", "total_tokens"}}.
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_EMBEDDINGS_H
#define LLB_ACTORS_API_SERVER_API_SERVER_EMBEDDINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/api_server/api_server_request.h"
#include "schemas/request_output.h"

struct api_server_embeddings {
  struct api_server_request req;             /* the inputs as completions prompts (req.prompts) */
  bool base64;                        /* encoding_format "base64" */
  struct llb_pooling_params pooling;  /* what each input's GenerateRequest asks for */
  float **vectors;                    /* [req.num_prompts] each [dims[i]], NULL until its output */
  int32_t *dims;                      /* [req.num_prompts] */
  int64_t *prompt_tokens;             /* [req.num_prompts] */
  int32_t num_done;
};

/* Parses body[len]. OK and *out filled (caller frees with api_server_embeddings_free), or
 * INVALID_ARGUMENT with err set (400; 404 for an unknown model), or OUT_OF_MEMORY (500). */
llb_status api_server_embeddings_parse(const char *body, size_t len, const struct api_server_parse_options *o,
                                struct api_server_embeddings *out, struct api_server_error *err);

/* Frees what api_server_embeddings_parse and _add_output allocated; zeroes e. NULL ok. */
void api_server_embeddings_free(struct api_server_embeddings *e);

/* The GenerateRequest of input i: its prompt (raw text or token ids), pooling_params, and
 * e->req's sampling params by pointer (api_server_embeddings_parse set n 1, max_tokens 1 and
 * output_kind FINAL_ONLY: one RequestOutput per input). Borrows from e and request_id. */
void api_server_embeddings_to_generate(const struct api_server_embeddings *e, int32_t i, const char *request_id,
                                struct llb_generate_request *out);

/* Takes the RequestOutput ro of input i: a finished output must carry the pooled vector
 * (copied). OK (also for an unfinished one, which carries nothing), INTERNAL (finished without
 * a vector, or input i answered twice), OUT_OF_MEMORY. */
llb_status api_server_embeddings_add_output(struct api_server_embeddings *e, int32_t i, const struct llb_request_output *ro);

/* Every input has its vector. */
static inline bool api_server_embeddings_done(const struct api_server_embeddings *e) {
  return e->num_done == e->req.num_prompts;
}

/* The response JSON (appended to out). OUT_OF_MEMORY. */
llb_status api_server_embeddings_render(const struct api_server_embeddings *e, const char *id, int64_t created,
                                 struct api_server_buf *out);

#endif
