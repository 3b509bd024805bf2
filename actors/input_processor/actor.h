/* The input processor actor: binds the pure logic of input_processor.h to the bus.
 *
 * Subscribes, in queue group "input_processor":
 *   <prefix>.generate.<tenant>  GenerateRequest (reply subject = where the client reads its
 *                               RequestOutputs) → one EngineCoreRequest per child on
 *                               <prefix>.engine.<eid>.requests of the engine the router chose
 *                               (engine_router.h; the id names it: "...@<eid>"), reply_to = the client's reply
 *                               subject; any problem → a RequestOutput with error + finished
 *                               to the client's reply subject (or counted and logged when the
 *                               message has none).
 *   <prefix>.abort.<tenant>     AbortRequest{request_id = the internal id the client got in
 *                               RequestOutput.request_id} → AbortRequests{[id, 0_id, ...,
 *                               (max_n-1)_id]} on <prefix>.engine.<eid>.abort of the engine
 *                               the id names (any replica can: the processor keeps no
 *                               per-request state); an id naming no known engine goes to
 *                               every known engine (they ignore ids they do not run).
 * Not in the queue group:
 *   <prefix>.engine.*.stats     SchedulerStats: engine membership and load for the router.
 *   <prefix>.tokenize.<tenant>  GenerateRequest (request/reply; only the input fields and
 *                               sampling_params.truncate_prompt_tokens are read) → one
 *                               RequestOutput (finished, max_model_len = the context length):
 *                               prompt or messages → prompt_token_ids as a generate request
 *                               would get them (vLLM /tokenize); prompt_token_ids alone →
 *                               `prompt` = their text, special tokens rendered (/detokenize);
 *                               no input → only max_model_len (what a model is served with).
 *                               Errors as on generate (RequestOutput.error).
 * <tenant> is "*" (every tenant) by default. The tenant salts the prefix cache
 * (docs/design.md §7): cache_salt = input_processor_cache_salt_compose(tenant, client salt):
 * "<len>:<tenant>" or "<len>:<tenant><len>:<client salt>", length-prefixed so no pair
 * of (tenant, salt) reads as another.
 *
 * n > 1: the engine samples each child with stream 0, so child i gets seed + i (vLLM
 * vllm/v1/engine/parent_req.py); its wire sampling_params.n carries the client's n so the
 * output processor can group the children (the engine runs one sequence per
 * EngineCoreRequest whatever n says).
 *
 * Threading: handlers run on the bus delivery threads (one per subscription); the logic is
 * stateless per request, the counters are atomic.
 */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_ACTOR_H
#define LLB_ACTORS_INPUT_PROCESSOR_ACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "bus/bus.h"
#include "base/status.h"

#define INPUT_PROCESSOR_ACTOR_QUEUE_GROUP "input_processor"
#define INPUT_PROCESSOR_ACTOR_MAX_N 16 /* largest n accepted; also the abort fan-out width */

struct input_processor_actor_options {
  const char *model_path;  /* GGUF holding the tokenizer (and chat template); required */
  int32_t max_model_len;   /* tokens; 0 = min(the model's context length, 4096) */
  const char *tenant;      /* subject token or "*" (every tenant); NULL = "*" */
  const char *engine_id;   /* the default engine <eid> (until engines announce themselves, or
                              when none is live); NULL = "0" */
  const char *router;      /* "cache-aware" (NULL), "least-loaded" or "random" (engine_router.h) */
  const char *tenant_limits_file; /* per-tenant limits (tenant_limits.h); NULL = none. With
                                     limits the actor also reads <prefix>.engine.*.outputs */
  int64_t tenant_limit_ttl_ms;   /* forget an admitted request after this long; 0 = 30 min */
  bool durable;            /* EngineCoreRequests go into the JetStream requests stream, each
                              confirmed stored before the client's request counts as taken
                              (bus/jetstream.h); false: plain publish */
  const char *chat_template_file; /* --chat-template: a Jinja file, the Jinja text itself, or a
                                     built-in name (chatml, llama3, ...: chat_template.h); NULL =
                                     the GGUF's tokenizer.chat_template (chat_render.h) */
  const char *mmproj_path; /* GGUF mmproj (model/vision/clip.h, the worker's --mmproj): image_url parts
                              are planned with it (mm_images.h); NULL/"" = images refused */
  int32_t stream_replicas; /* durable: replicas of the requests stream if this actor creates it
                              (1..5; 0 = 1; 3 on a 3-node NATS cluster: bus/jetstream.h) */
  int32_t intake_threads;  /* intake workers (0 = 2); one tenant takes at most all but one */
  int32_t disagg_min_prompt_tokens; /* disaggregated prefill/decode (engine_router.h): shortest
                              prompt sent to a prefill engine and handed to a decode engine, when
                              both are live; 0 = every prompt; < 0 = the default
                              (ENGINE_ROUTER_DEFAULT_DISAGG_MIN_PROMPT_TOKENS) */
  const char *instance;   /* this actor's instance (its heartbeat subject's token): the router's
                             tie order among the input processors (engine_router.h); NULL ok */
  int32_t max_prefill_queue_size; /* the prefill engines are saturated at this many requests each:
                              prompts are then served aggregated; 0 = no limit; < 0 = the default
                              (ENGINE_ROUTER_DEFAULT_MAX_PREFILL_QUEUE_SIZE) */
  int64_t disagg_kv_bytes_per_token; /* the KV a token moves in a hand-off; 0 = the model's fp16 cache */
  double disagg_transfer_bytes_per_s; /* with disagg_prefill_tokens_per_s: a prompt whose KV takes
                              longer to move than to recompute on the decode engine is served
                              aggregated (pd_decision.h); 0 = not weighed */
  double disagg_prefill_tokens_per_s;
  const struct llb_hash_key *hash_key; /* the deployment's key (base/hash.h: item hashes, the
                              tenant tags of request ids; every replica must hold the same);
                              copied; NULL = a random key of this process */
};

/* Counters since start (monotonic). */
struct input_processor_actor_stats {
  uint64_t requests;        /* GenerateRequests accepted and forwarded */
  uint64_t engine_requests; /* EngineCoreRequests published (children) */
  uint64_t rejected;        /* well-formed requests refused with a field error */
  uint64_t malformed;       /* undecodable messages (generate or abort) */
  uint64_t no_reply;        /* errors that could not be answered: no reply subject */
  uint64_t aborts;          /* AbortRequests forwarded */
  uint64_t aborts_refused;  /* AbortRequests for an id of another tenant (or no id of ours) */
  uint64_t publish_errors;  /* failed publishes (each logged) */
  uint64_t tokenize;        /* tokenize / detokenize requests answered without error */
  uint64_t stats_malformed; /* SchedulerStats refused (undecodable, id mismatch, out of range) */
  uint64_t routed_by_prefix;/* requests sent to the engine holding their prefix */
  uint64_t routed_fallback; /* requests sent to the default engine: no live engine known */
  uint64_t routed_disaggregated; /* requests sent to a prefill engine, to go on on a decode engine */
  uint64_t limited;         /* requests refused by a per-tenant limit (429 / 400), a full intake
                               queue included */
  uint64_t intake_full;     /* requests refused because their tenant's intake queue was full */
  uint64_t grammars_compiled; /* structured-output specs compiled (not answered from the cache) */
};

struct input_processor_actor;

/* Loads the tokenizer and chat template of o->model_path and creates the preprocessor.
 * Errors: INVALID_ARGUMENT (bad tenant / engine id / max_model_len), the GGUF reader's or
 * tokenizer's error naming the file, OUT_OF_MEMORY. *out: input_processor_actor_destroy(). */
llb_status input_processor_actor_create(const struct input_processor_actor_options *o,
                                        struct input_processor_actor **out);

/* Starts the intake workers and subscribes the generate, tokenize and abort handlers on `bus`
 * (borrowed; it must outlive the subscriptions and the workers: input_processor_actor_stop, then destroy
 * the bus before the actor). Generate and tokenize requests wait in their tenant's intake queue
 * (intake_queue.h; a full one is answered 429 at once) and are processed by the workers in
 * deficit round robin. Errors: those of bus_subscribe, the subject builders, the threads. */
llb_status input_processor_actor_start(struct input_processor_actor *a, struct bus *bus);

/* The actor's engine router (owned by the actor), for `llmbus status`-like views and tests. */
struct engine_router *input_processor_actor_router(struct input_processor_actor *a);

/* The effective max_model_len (after the default was resolved). */
int32_t input_processor_actor_max_model_len(const struct input_processor_actor *a);

/* Counters, read atomically one by one. */
void input_processor_actor_stats(const struct input_processor_actor *a,
                                 struct input_processor_actor_stats *out);

/* Stops intake: the requests still queued are processed (their answers sent), then the workers
 * are joined; later deliveries are processed on their delivery threads. Runs by itself before
 * the bus drains (bus_set_before_drain); call it before bus_destroy() when the bus is destroyed
 * without bus_actor_run. Idempotent. */
void input_processor_actor_stop(struct input_processor_actor *a);

/* Frees the actor. Call after bus_destroy() of the bus it was started on. NULL ok. */
void input_processor_actor_destroy(struct input_processor_actor *a);

#endif
