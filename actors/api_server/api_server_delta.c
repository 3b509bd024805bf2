/* Dropping what a client already has from a repeated output (see api_server_delta.h). */
#include "actors/api_server/api_server_delta.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Drops the first skip_text bytes and skip_tokens token ids of c (logprobs stay aligned with
 * the tail of the token ids). */
static void trim(struct llb_completion_output *c, int64_t skip_text, int64_t skip_tokens) {
  skip_text = min64(skip_text, (int64_t)c->text.len);
  c->text.data += skip_text;
  c->text.len -= (size_t)skip_text;
  skip_tokens = min64(skip_tokens, c->num_token_ids);
  const int32_t left = c->num_token_ids - (int32_t)skip_tokens;
  if (c->token_ids) c->token_ids += skip_tokens;
  c->num_token_ids = left;
  const int32_t keep = c->num_logprobs < left ? c->num_logprobs : left; /* the tail */
  if (c->logprobs) c->logprobs += c->num_logprobs - keep;
  c->num_logprobs = keep;
}

void api_server_delta_restart(struct api_server_delta *d) {
  for (int i = 0; i < API_SERVER_DELTA_MAX_N; i++) d->recv_text_bytes[i] = d->recv_tokens[i] = 0;
  d->num_restarts++;
}

void api_server_delta_apply(struct api_server_delta *d, struct llb_request_output *ro, struct llb_completion_output *scratch) {
  for (int32_t i = 0; i < ro->num_outputs; i++) {
    struct llb_completion_output *c = &scratch[i];
    *c = ro->outputs[i];
    if (c->index < 0 || c->index >= API_SERVER_DELTA_MAX_N) continue;
    const int k = c->index;
    if (c->resync) { /* this stream starts again from the completion's beginning */
      d->num_resyncs++;
      d->recv_text_bytes[k] = d->recv_tokens[k] = 0;
      c->resync = false;
    }
    const int64_t text_len = (int64_t)c->text.len, tokens = c->num_token_ids;
    trim(c, max64(0, d->text_bytes[k] - d->recv_text_bytes[k]), max64(0, d->num_tokens[k] - d->recv_tokens[k]));
    d->recv_text_bytes[k] += text_len;
    d->recv_tokens[k] += tokens;
    d->text_bytes[k] = max64(d->text_bytes[k], d->recv_text_bytes[k]);
    d->num_tokens[k] = max64(d->num_tokens[k], d->recv_tokens[k]);
  }
  ro->outputs = scratch;
}
