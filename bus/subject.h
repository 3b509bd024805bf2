/* NATS subject names of llmbus (docs/design.md §2), built from a configurable prefix. Every
 * subject an actor, a command or the client library publishes or subscribes is built here (the
 * layout checker, tests/unit/check_layout.py, fails on a subject formatted by hand elsewhere).
 *
 *   <prefix>.generate.<tenant>          client → input_processor (queue group)
 *   <prefix>.abort.<tenant>             client → input_processor
 *   <prefix>.tokenize.<tenant>          client → input_processor (queue group)
 *   <prefix>.engine.<eid>.<kind>        kind: requests|abort|kv|encoder|execute|outputs|stats|
 *                                       dead_letter|resync|history|kv_fetch
 *   <prefix>.health.<actor>.<instance>  heartbeats (every actor; watched by whoever watches all:
 *                                       the api server, `llmbus status`, the supervisors)
 *   <prefix>.health.<actor>.<instance>.metrics  the actor's Prometheus text, for the api server
 *   <prefix>.engine.<eid>.health.<actor>  the same heartbeats of an engine's own actors, for that
 *                                       engine's peers (so each beat reaches its engine, not every
 *                                       actor of every engine: N engines cost O(N), not O(N^2))
 *   <prefix>.trace.<actor>              span batches (OTLP JSON) with --trace-publish
 *   <inbox>.<seq>                       the reply subject of one request under an inbox of
 *                                       bus_new_inbox (api server, client, scheduler's steps)
 *
 * bus_pattern_* build the wildcard subscriptions over these ('*' in place of a tenant, an engine
 * id, an actor, an instance or a sequence number); they are for bus_subscribe, never a publish.
 *
 * Every name is validated as one subject token: 1 to BUS_TOKEN_MAX bytes of ASCII letters,
 * digits, '-' and '_'. That is the one rule for every name an operator or a message gives that
 * reaches a subject, the generated nats.conf, a file name or a log line (prefix tokens, engine
 * ids, tenants, instances, actor names): none of them can carry configuration syntax (quotes,
 * braces, '#'), a path ('/', ".."), a wildcard or a space. The prefix may itself hold several
 * tokens ("acme.llm"), each valid by the same rule; so may an inbox. Errors are
 * LLB_STATUS_INVALID_ARGUMENT with a message naming the bad value (a NULL buf or cap 0 too);
 * LLB_STATUS_TOO_LARGE, buf emptied, when the result does not fit `cap` ("subject needs N bytes,
 * buffer holds M"). Size buffers with BUS_SUBJECT_MAX: it holds every subject built here whose
 * prefix (or inbox) is at most 100 bytes. All functions are pure and thread-safe; output goes
 * to the caller's buffer.
 */
#ifndef LLB_BUS_SUBJECT_H
#define LLB_BUS_SUBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define BUS_DEFAULT_PREFIX "llm"
#define BUS_DEFAULT_TENANT "default"
/* Longest single token accepted. */
#define BUS_TOKEN_MAX 64
/* A buffer of this size holds any subject these functions build from a prefix (or inbox) of at
 * most 100 bytes. */
#define BUS_SUBJECT_MAX 256

/* True if `token` is one valid subject token (see above). */
bool bus_token_valid(const char *token);

/* Longest model name accepted. */
#define BUS_MODEL_NAME_MAX 128

/* What a name is, for bus_name_check. */
enum bus_name_kind {
  BUS_NAME_KIND_TOKEN,  /* a subject token (the rule above): an engine id, a tenant, an instance */
  BUS_NAME_KIND_PREFIX, /* tokens joined by '.' (bus_prefix_check) */
  BUS_NAME_KIND_MODEL,  /* a served model name: 1..BUS_MODEL_NAME_MAX bytes of letters, digits
                           and "._-/:+", not starting with '.', '/' or '-', no "..": what
                           Hugging Face names hold ("org/Model-7B.Q4_K_M"), nothing a
                           configuration, a path walk, a header or a log line could misread */
};

/* The one name validator: checks `value` as a name of `kind`; INVALID_ARGUMENT naming `what`
 * (the flag or field, e.g. "--engine-id"), the value (printable bytes only) and the rule
 * otherwise. Called before anything starts (serve, every actor main, the api server). */
llb_status bus_name_check(enum bus_name_kind kind, const char *what, const char *value);

/* Checks a prefix: one or more valid tokens joined by '.'. NULL is invalid. */
llb_status bus_prefix_check(const char *prefix);

/* "<prefix>.generate.<tenant>" into buf[cap]. prefix NULL means BUS_DEFAULT_PREFIX. */
llb_status bus_subject_generate(const char *prefix, const char *tenant, char *buf, size_t cap);

/* "<prefix>.abort.<tenant>" into buf[cap]. */
llb_status bus_subject_abort(const char *prefix, const char *tenant, char *buf, size_t cap);

/* "<prefix>.engine.<eid>.<kind>" into buf[cap]; kind must be one of requests, abort, kv,
 * encoder, execute, outputs, stats, dead_letter, resync, history, kv_fetch (INVALID_ARGUMENT
 * otherwise). */
llb_status bus_subject_engine(const char *prefix, const char *eid, const char *kind, char *buf,
                              size_t cap);

/* "<prefix>.engine.<eid>.health.<actor>" into buf[cap]; actor "*" gives the subscription to
 * all of the engine's actors. */
llb_status bus_subject_engine_health(const char *prefix, const char *eid, const char *actor, char *buf, size_t cap);

/* "<prefix>.health.<actor>.<instance>" into buf[cap]. */
llb_status bus_subject_health(const char *prefix, const char *actor, const char *instance,
                              char *buf, size_t cap);

/* "<prefix>.tokenize.<tenant>" into buf[cap]: a tenant's tokenize requests (api server /tokenize
 * and /detokenize, libllmbus-client), answered by the input processor like generate. */
llb_status bus_subject_tokenize(const char *prefix, const char *tenant, char *buf, size_t cap);

/* "<prefix>.health.<actor>.<instance>.metrics" into buf[cap]: where an actor publishes its
 * registry (bus_metrics_publish_start); the api server subscribes bus_pattern_health_metrics. */
llb_status bus_subject_health_metrics(const char *prefix, const char *actor, const char *instance, char *buf,
                                      size_t cap);

/* "<prefix>.trace.<actor>" into buf[cap]: the actor's span batches with --trace-publish
 * (bus_tracing_start). */
llb_status bus_subject_trace(const char *prefix, const char *actor, char *buf, size_t cap);

/* "<prefix>.lora.update" into buf[cap]: LoRAUpdate (schemas/control.h) from the api server to every
 * gpu_worker (a plain subscription, no queue group), each answering on the request's reply
 * subject. Only the front user may publish there (cmd/supervisor/serve_nats_config.c). */
llb_status bus_subject_lora_update(const char *prefix, char *buf, size_t cap);

/* "<prefix>.engine.<eid>.kv_fetch" into buf[cap] (disaggregated prefill/decode, issue 36): request/
 * reply served by engine <eid>'s gpu_worker, which answers a KVFetchRequest with a KVTransferChunk
 * (schemas/kv_transfer.h) of blocks it exports; another engine's worker fetches there. Only the
 * workers may publish or subscribe there: no tenant can (the blocks are other requests' KV). */
llb_status bus_subject_kv_fetch(const char *prefix, const char *eid, char *buf, size_t cap);

/* "<inbox>.<seq>" into buf[cap], seq in decimal (at most 20 digits): the reply subject of one
 * request, under `inbox` from bus_new_inbox (tokens joined by '.', like a prefix; NULL is
 * INVALID_ARGUMENT). The api server and the client number their requests, the scheduler its
 * steps; whoever made the inbox subscribes bus_pattern_replies. */
llb_status bus_subject_reply(const char *inbox, uint64_t seq, char *buf, size_t cap);

/* "<prefix>.<kind>.*" into buf[cap]: every tenant's subject of `kind`, one of generate, abort,
 * tokenize (INVALID_ARGUMENT otherwise); an input processor serving all tenants subscribes them. */
llb_status bus_pattern_tenants(const char *prefix, const char *kind, char *buf, size_t cap);

/* "<prefix>.engine.*.<kind>" into buf[cap]: every engine's subject of `kind` (the kinds of
 * bus_subject_engine): stats for the routers, the api server and `llmbus status`; outputs for the
 * input processor's tenant limits; requests for the JetStream requests stream. */
llb_status bus_pattern_engines(const char *prefix, const char *kind, char *buf, size_t cap);

/* "<prefix>.health.<actor>.*" into buf[cap]: the heartbeats of every instance of `actor`; with
 * actor NULL "<prefix>.health.*.*", every actor's heartbeats (not their .metrics), as the api
 * server, `llmbus status` and `llmbus run` watch them. */
llb_status bus_pattern_health(const char *prefix, const char *actor, char *buf, size_t cap);

/* "<prefix>.health.*.*.metrics" into buf[cap]: every actor's metrics, for the api server's
 * one-scrape /metrics. */
llb_status bus_pattern_health_metrics(const char *prefix, char *buf, size_t cap);

/* "<inbox>.*" into buf[cap]: every reply under `inbox` (see bus_subject_reply). */
llb_status bus_pattern_replies(const char *inbox, char *buf, size_t cap);

#endif
