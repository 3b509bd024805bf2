/* Dropping what a client already has from a resync output (see api_delta.h). */
#include "actors/api_server/api_delta.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void trim(const struct api_delta *d, struct llb_completion_output *c) {
  const int64_t skip_text = min64(d->text_bytes[c->index], (int64_t)c->text.len);
  c->text.data += skip_text;
  c->text.len -= (size_t)skip_text;
  const int64_t skip_tokens = min64(d->num_tokens[c->index], c->num_token_ids);
  const int32_t left = c->num_token_ids - (int32_t)skip_tokens;
  if (c->token_ids) c->token_ids += skip_tokens;
  c->num_token_ids = left;
  const int32_t keep = c->num_logprobs < left ? c->num_logprobs : left; /* the tail */
  if (c->logprobs) c->logprobs += c->num_logprobs - keep;
  c->num_logprobs = keep;
}

void api_delta_apply(struct api_delta *d, struct llb_request_output *ro, struct llb_completion_output *scratch) {
  for (int32_t i = 0; i < ro->num_outputs; i++) {
    struct llb_completion_output *c = &scratch[i];
    *c = ro->outputs[i];
    if (c->index < 0 || c->index >= API_DELTA_MAX_N) continue;
    if (c->resync) {
      d->num_resyncs++;
      trim(d, c);
      c->resync = false;
    }
    d->text_bytes[c->index] += (int64_t)c->text.len;
    d->num_tokens[c->index] += c->num_token_ids;
  }
  ro->outputs = scratch;
}
