/* The C side of the cross-language test: an actor on llm.generate.default that decodes a
 * GenerateRequest (schemas/ C API) and answers with a stream of RequestOutput messages whose
 * content is derived from the request, so the Python client can tell that every field it
 * sent was read:
 *   for i in 0 .. min(max_tokens, 8) - 1, one RequestOutput:
 *     request_id         = the request's
 *     prompt             = the request's prompt
 *     prompt_token_ids   = the request's
 *     outputs[0].text    = "ECHO:" + prompt
 *     outputs[0].token_ids = [t + 1 for t in prompt_token_ids][:i + 1]
 *     outputs[0].cumulative_logprob = -temperature
 *     outputs[0].stop_reason = the first stop string ("" if none)
 *     finished           = (last one); finish_reason LENGTH on the last
 *     metrics.num_prompt_tokens = len(prompt_token_ids), num_generation_tokens = i + 1
 * A message that does not decode gets one RequestOutput with finished = true and
 * error = {code: the llb_status, message: the decoder's message}.
 * It publishes a heartbeat on llm.health.cross-responder.0 so the client knows it is up.
 *
 * usage: cross_responder --nats URL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "base/log.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

#define MAX_STREAM 8
#define MAX_IDS 256

static void reply_error(struct bus *b, const struct bus_msg *m, llb_status st, const char *why) {
  struct llb_request_output out;
  memset(&out, 0, sizeof out);
  out.request_id = llb_str_c("unknown");
  out.finished = true;
  out.error.code = (int32_t)st;
  out.error.message = llb_str_c(why);
  struct llb_buf buf = {0};
  if (llb_request_output_encode_buf(&out, &buf) == LLB_STATUS_OK)
    bus_respond(b, m, buf.data, buf.len, NULL);
  llb_buf_free(&buf);
}

static void on_generate(struct bus *b, const struct bus_msg *m, void *user) {
  (void)user;
  if (!m->reply) return;
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_generate_request req;
  llb_status st = llb_generate_request_decode(m->data, m->len, &arena, &req);
  if (st != LLB_STATUS_OK) {
    char why[600];
    snprintf(why, sizeof why, "%s", llb_err_last());
    LLB_LOG_WARN("bad_request", "status=%s", llb_strerror(st));
    reply_error(b, m, st, why);
    llb_arena_destroy(&arena);
    return;
  }
  char text[1024];
  snprintf(text, sizeof text, "ECHO:%.*s", (int)req.prompt.len, req.prompt.data);
  int32_t n_ids = req.num_prompt_token_ids < MAX_IDS ? req.num_prompt_token_ids : MAX_IDS;
  int32_t ids[MAX_IDS];
  for (int32_t i = 0; i < n_ids; i++) ids[i] = req.prompt_token_ids[i] + 1;
  int32_t steps = req.sampling_params->max_tokens;
  if (steps < 1) steps = 1;
  if (steps > MAX_STREAM) steps = MAX_STREAM;
  struct bus_trace_ctx span;
  bus_trace_child(&m->trace, &span); /* one span for the whole answer */
  struct llb_buf buf = {0};
  for (int32_t i = 0; i < steps; i++) {
    bool last = i == steps - 1;
    struct llb_completion_output co;
    memset(&co, 0, sizeof co);
    co.index = 0;
    co.text = llb_str_c(text);
    co.token_ids = ids;
    co.num_token_ids = i + 1 < n_ids ? i + 1 : n_ids;
    co.cumulative_logprob = -(double)req.sampling_params->temperature;
    co.finish_reason = last ? LLB_FINISH_REASON_LENGTH : LLB_FINISH_REASON_NONE;
    co.stop_reason = llb_str_c(req.sampling_params->num_stop > 0 ? req.sampling_params->stop[0] : "");
    struct llb_request_output out;
    memset(&out, 0, sizeof out);
    out.request_id = req.request_id;
    out.prompt = req.prompt;
    out.prompt_token_ids = req.prompt_token_ids;
    out.num_prompt_token_ids = req.num_prompt_token_ids;
    out.outputs = &co;
    out.num_outputs = 1;
    out.finished = last;
    out.metrics.num_prompt_tokens = req.num_prompt_token_ids;
    out.metrics.num_generation_tokens = i + 1;
    st = llb_request_output_encode_buf(&out, &buf);
    if (st == LLB_STATUS_OK) st = bus_respond(b, m, buf.data, buf.len, &span);
    if (st != LLB_STATUS_OK) {
      LLB_LOG_ERROR("reply_failed", "status=%s", llb_strerror(st));
      break;
    }
  }
  llb_buf_free(&buf);
  llb_arena_destroy(&arena);
}

static llb_status beat(void *user, uint8_t *buf, size_t cap, size_t *len) {
  (void)user;
  int n = snprintf((char *)buf, cap, "up");
  *len = (size_t)n;
  return LLB_STATUS_OK;
}

int main(int argc, char **argv) {
  if (argc != 3 || strcmp(argv[1], "--nats") != 0) {
    fprintf(stderr, "usage: %s --nats URL\n", argv[0]);
    return 2;
  }
  llb_log_set_actor("cross-responder");
  struct bus_options o;
  bus_options_init(&o);
  o.urls = argv[2];
  o.name = "cross-responder";
  struct bus *b = NULL;
  if (bus_connect(&o, &b) != LLB_STATUS_OK) {
    fprintf(stderr, "cross_responder: %s\n", llb_err_last());
    return 1;
  }
  char subject[BUS_SUBJECT_MAX];
  llb_status st = bus_subject_generate(bus_prefix(b), BUS_DEFAULT_TENANT, subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = bus_subscribe(b, subject, "input_processor", on_generate, NULL, NULL);
  if (st == LLB_STATUS_OK) st = bus_heartbeat_start(b, "cross-responder", "0", 100, 64, beat, NULL);
  if (st == LLB_STATUS_OK) st = bus_actor_run(b);
  if (st != LLB_STATUS_OK) fprintf(stderr, "cross_responder: %s\n", llb_err_last());
  bus_destroy(b);
  return st == LLB_STATUS_OK ? 0 : 1;
}
