/* llmbus-input-processor: GenerateRequest → EngineCoreRequest(s) on the bus
 * (actors/input_processor/actor.h). Flags: the common actor flags (cmd/actor/actor_main.h) plus
 * --max-model-len, --tenant, --router, --tenant-limits, --tenant-limit-ttl-ms, --durable,
 * --stream-replicas and --chat-template. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "actors/input_processor/actor.h"
#include "actors/input_processor/engine_router.h"
#include "cmd/actor/actor_main.h"

struct input_processor_main {
  int32_t max_model_len;
  const char *tenant;
  const char *router;
  const char *tenant_limits;
  int64_t tenant_limit_ttl_ms;
  bool durable;
  int32_t stream_replicas;
  const char *chat_template;
  const char *mmproj;
  int32_t intake_threads;
  int32_t disagg_min_prompt_tokens;
  int32_t max_prefill_queue_size;
  int64_t disagg_kv_bytes_per_token;
  double disagg_transfer_bytes_per_s, disagg_prefill_tokens_per_s;
  struct input_processor_actor *actor;
};

static llb_status input_processor_main_start(struct actor_main *am, void *user) {
  struct input_processor_main *m = user;
  struct input_processor_actor_options o = {
      .model_path = am->common.model_path,
      .max_model_len = m->max_model_len,
      .tenant = m->tenant,
      .engine_id = am->common.engine_id,
      .router = m->router,
      .tenant_limits_file = m->tenant_limits,
      .tenant_limit_ttl_ms = m->tenant_limit_ttl_ms,
      .durable = m->durable,
      .chat_template_file = m->chat_template,
      .mmproj_path = m->mmproj,
      .stream_replicas = m->stream_replicas,
      .hash_key = &am->hash_key,
      .instance = am->common.instance,
      .intake_threads = m->intake_threads,
      .disagg_min_prompt_tokens = m->disagg_min_prompt_tokens,
      .max_prefill_queue_size = m->max_prefill_queue_size,
      .disagg_kv_bytes_per_token = m->disagg_kv_bytes_per_token,
      .disagg_transfer_bytes_per_s = m->disagg_transfer_bytes_per_s,
      .disagg_prefill_tokens_per_s = m->disagg_prefill_tokens_per_s,
  };
  llb_status st = input_processor_actor_create(&o, &m->actor);
  if (st != LLB_STATUS_OK) return st;
  st = input_processor_actor_start(m->actor, am->bus);
  /* the api server resends its requests after a nats-server restart once we beat */
  return st ? st : actor_main_answer_after_reconnect(am, "api_server");
}

static void input_processor_main_stop(struct actor_main *am, void *user) {
  (void)am;
  struct input_processor_main *m = user;
  input_processor_actor_stop(m->actor); /* the workers, before the bus goes */
}

static void input_processor_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct input_processor_main *m = user;
  input_processor_actor_destroy(m->actor);
  m->actor = NULL;
}

int main(int argc, char **argv) {
  struct input_processor_main m = {.max_model_len = 0, .tenant = "*", .router = "cache-aware",
                         .tenant_limit_ttl_ms = 30 * 60 * 1000, .intake_threads = 2,
                         .disagg_min_prompt_tokens = ENGINE_ROUTER_DEFAULT_DISAGG_MIN_PROMPT_TOKENS,
                         .max_prefill_queue_size = ENGINE_ROUTER_DEFAULT_MAX_PREFILL_QUEUE_SIZE};
  const struct flag flags[] = {
      {.name = "max-model-len", .kind = FLAG_KIND_INT32, .target = &m.max_model_len,
       .help = "context length in tokens (prompt + output); 0 = min(model context, 4096)"},
      {.name = "tenant", .kind = FLAG_KIND_STRING, .target = &m.tenant,
       .help = "serve <prefix>.generate.<tenant> and .abort.<tenant>; * = every tenant"},
      {.name = "router", .kind = FLAG_KIND_STRING, .target = &m.router,
       .help = "engine choice among the engines announcing themselves on <prefix>.engine.*.stats: "
               "cache-aware (prefix affinity unless loads are imbalanced) | least-loaded | random; "
               "--engine-id is the engine used while none is known"},
      {.name = "tenant-limits", .kind = FLAG_KIND_STRING, .target = &m.tenant_limits,
       .help = "tenants file with per-tenant limits (max_concurrent=, max_queued=, tokens_per_s=, burst_tokens=): "
               "429 with Retry-After over them"},
      {.name = "tenant-limit-ttl-ms", .kind = FLAG_KIND_INT64, .target = &m.tenant_limit_ttl_ms,
       .help = "forget a request counted against its tenant after this long (a lost request)"},
      {.name = "durable", .kind = FLAG_KIND_BOOL, .target = &m.durable,
       .help = "publish EngineCoreRequests into the JetStream requests stream (nats-server -js), each "
               "confirmed stored; the engine's scheduler must run with --durable too"},
      {.name = "stream-replicas", .kind = FLAG_KIND_INT32, .target = &m.stream_replicas,
       .help = "durable: replicas of the requests stream when this actor creates it (default 1; 3 on a "
               "3-node NATS cluster, so the stream outlives a node)"},
      {.name = "chat-template", .kind = FLAG_KIND_STRING, .target = &m.chat_template,
       .help = "chat template instead of the GGUF's tokenizer.chat_template: a Jinja file, the Jinja text itself "
               "(vLLM's), or a built-in name (chatml, smollm2, llama3, mistral, gemma, phi3, ...; llama-server's)"},
      {.name = "intake-threads", .kind = FLAG_KIND_INT32, .target = &m.intake_threads,
       .help = "threads that template, tokenize and decode requests, taken from per-tenant queues in deficit "
               "round robin; one tenant holds at most all but one"},
      {.name = "disagg-min-prompt-tokens", .kind = FLAG_KIND_INT32, .target = &m.disagg_min_prompt_tokens, .min = 0,
       .max = 1 << 30,
       .help = "disaggregated prefill/decode (Dynamo's max_local_prefill_length): prompts of at least this many "
               "tokens not cached on the decode engine go to a prefill engine and on to a decode engine (when both "
               "are live; engines' --role), shorter ones are served aggregated (default 256; 0 = every prompt)"},
      {.name = "max-prefill-queue-size", .kind = FLAG_KIND_INT32, .target = &m.max_prefill_queue_size, .min = 0,
       .max = 1 << 30,
       .help = "disaggregated prefill/decode (Dynamo's): when the least loaded prefill engine holds this many "
               "requests, new prompts are served aggregated on a decode engine (default 16; 0 = no limit)"},
      {.name = "disagg-transfer-bytes-per-s", .kind = FLAG_KIND_DOUBLE, .target = &m.disagg_transfer_bytes_per_s,
       .min = 0, .max = 1e15, .metavar = "B",
       .help = "with --disagg-prefill-tokens-per-s: the bus's rate for KV blocks; a prompt whose KV takes longer "
               "to move than the decode engine takes to compute it is served aggregated (0 = not weighed)"},
      {.name = "disagg-prefill-tokens-per-s", .kind = FLAG_KIND_DOUBLE, .target = &m.disagg_prefill_tokens_per_s,
       .min = 0, .max = 1e12,
       .help = "a decode engine's prefill rate, for --disagg-transfer-bytes-per-s (0 = not weighed)"},
      {.name = "disagg-kv-bytes-per-token", .kind = FLAG_KIND_INT64, .target = &m.disagg_kv_bytes_per_token, .min = 0,
       .max = 1e12, .metavar = "B",
       .help = "the KV one token moves in a hand-off (default 0 = the model's fp16 cache; halve it for the "
               "workers' --kv-cache-dtype fp8 or q8_0)"},
      {.name = "mmproj", .kind = FLAG_KIND_STRING, .target = &m.mmproj,
       .help = "GGUF mmproj of the model (the workers' --mmproj): image_url parts are expanded with its "
               "plan; without it images are refused"},
  };
  const struct actor_main_spec spec = {
      .actor = "input_processor",
      .program = "llmbus-input-processor",
      .summary = "validates, templates and tokenizes GenerateRequests into EngineCoreRequests",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .start = input_processor_main_start,
      .stop = input_processor_main_stop,
      .destroy = input_processor_main_destroy,
      .user = &m,
  };
  return actor_main_exec(&spec, argc, argv);
}
