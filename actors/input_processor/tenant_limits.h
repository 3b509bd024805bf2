/* Per-tenant limits of the input processor: requests in flight, requests queued, tokens/s.
 *
 * The input processor is where a request's tenant is known for certain: the subject it
 * arrived on, <prefix>.generate.<tenant>, which only that tenant's account (or the trusted
 * front door, for the key's tenant) can publish on (cmd/supervisor/serve_nats_config.h). So the limits
 * are kept here, per tenant, over the engine requests (children: n > 1 counts n) this
 * input processor admitted:
 *   max_concurrent  admitted and not finished;
 *   max_queued      admitted and no token out yet (waiting in the scheduler or in prefill:
 *                   what a tenant's flood fills and another tenant's TTFT waits behind);
 *   tokens_per_s    a token bucket (capacity burst_tokens, full at start) charged with
 *                   prompt tokens + max_tokens per child, as OpenAI's tokens-per-minute
 *                   limits count a request before it runs. It is charged twice: an estimate
 *                   from the request's sizes before any costly work (tenant_limits_precharge:
 *                   a tenant over its rate costs no template, tokenizer, image or grammar
 *                   work), then the difference to the real count once it is known
 *                   (tenant_limits_admit, or tenant_limits_settle when nothing is admitted).
 * A request over a limit is refused whole with QUEUE_FULL (HTTP 429) naming the limit, and
 * retry_after_ms when the bucket tells it (else 1000: a slot frees when a request ends).
 * A request whose cost exceeds the bucket's capacity could never pass: TOO_LARGE (400).
 * The engine's outputs (<prefix>.engine.*.outputs) move a child from queued to running at its
 * first token and forget it when finished; an entry older than the ttl (a lost request: a
 * scheduler crash) is forgotten too, so the counts heal. With R input processors in a
 * queue group, each keeps its own counts: a tenant gets up to R times the limits.
 *
 * Limits file (the `--tenants` file of `llmbus serve`): one tenant a line, its name, then
 * optional `key=value` limits: max_concurrent=N, max_queued=N, tokens_per_s=R, burst_tokens=B
 * (default 10 x tokens_per_s); '#' starts a comment. requests_per_s=R, burst_requests=B
 * (default max(1, R)) are the api server's, not these counts: HTTP requests a second of the
 * tenant's keys, a token bucket checked on a request's headers before its body is read
 * (actors/api_server/actor.h request_rates). 0 or absent = no such limit. And
 * `loras=a,b`: the LoRA adapters listed for the tenant (docs/design.md §7: an adapter listed for
 * some tenants belongs to those only; tenant_limits_restrict_loras).
 *
 * Thread-safe: admit and the output calls may come from different delivery threads.
 */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_TENANT_LIMITS_H
#define LLB_ACTORS_INPUT_PROCESSOR_TENANT_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define TENANT_LIMITS_MAX_TENANTS 64
#define TENANT_NAME_MAX 64

/* One tenant's limits; 0 = none of that kind. */
struct tenant_limit {
  char name[TENANT_NAME_MAX];
  int32_t max_concurrent;
  int32_t max_queued;
  double tokens_per_s;
  double burst_tokens; /* bucket capacity; 0 with tokens_per_s > 0 = 10 x tokens_per_s */
  double requests_per_s, burst_requests; /* the api server's HTTP request bucket; 0 = none */
  char loras[400];     /* `loras=a,b` as given (each a valid model name), "" = none */
};

/* The tenants of a limits file, in file order. */
struct tenant_limits_config {
  struct tenant_limit tenants[TENANT_LIMITS_MAX_TENANTS];
  int num;
};

/* Reads a limits file (format above). IO when unreadable; INVALID_ARGUMENT naming file and line
 * for a bad tenant name (not a NATS subject token), a duplicate, an unknown key, a value out
 * of range (counts 0..1e6, rates 0..1e9, finite), or no tenant at all. */
llb_status tenant_limits_config_load(const char *path, struct tenant_limits_config *out);

/* Parses one line's text (without '#' comment) into *t; returns 0 for a blank line, 1 for a
 * tenant, -1 with the reason in why[why_cap]. Exposed for tests. */
int tenant_limits_parse_line(const char *line, struct tenant_limit *t, char *why, size_t why_cap);

/* Records each tenant's `loras=` adapters in r (lora_registry_restrict), so that an adapter
 * listed for some tenants resolves for those only. Errors: lora_registry_restrict's. */
struct lora_registry;
llb_status tenant_limits_restrict_loras(const struct tenant_limits_config *cfg, struct lora_registry *r);

struct tenant_limits; /* opaque: the counts */

/* Creates the counts for cfg (copied). ttl_ms: an admitted child not finished after this long
 * is forgotten (> 0). *out: tenant_limits_destroy(). */
llb_status tenant_limits_create(const struct tenant_limits_config *cfg, int64_t ttl_ms, struct tenant_limits **out);

/* Frees. NULL ok. */
void tenant_limits_destroy(struct tenant_limits *tl);

/* Whether `tenant` has any limit (a tenant not in the file has none). */
bool tenant_limits_applies(const struct tenant_limits *tl, const char *tenant);

/* Admits the n children request_ids[0..n) of one request of `tenant` costing cost_tokens in all,
 * of which precharged_tokens were taken already (tenant_limits_precharge; the bucket is charged
 * the difference, or given back what the estimate had too much), at now_ms (a monotonic clock),
 * or refuses the whole request: QUEUE_FULL (message names the tenant and the limit;
 * *retry_after_ms set), or TOO_LARGE (cost above the bucket's capacity). A tenant without limits
 * is always admitted and nothing is recorded. Ids are copied. */
llb_status tenant_limits_admit(struct tenant_limits *tl, const char *tenant, const char *const *request_ids,
                               int32_t n, double cost_tokens, double precharged_tokens, int64_t now_ms,
                               int64_t *retry_after_ms);

/* Before any costly work on a request of `tenant` (a flood refused without spending the
 * template, the tokenizer, an image decoder or a grammar compiler on it): would n more children
 * (0: a call that admits none, /tokenize) break max_concurrent or max_queued, or does the bucket
 * lack estimate_tokens (>= 0: the
 * request's cost as far as its sizes tell)? Refused as tenant_limits_admit refuses; otherwise
 * the estimate is taken from the bucket now (the children are recorded by admit). */
llb_status tenant_limits_precharge(struct tenant_limits *tl, const char *tenant, int32_t n, double estimate_tokens,
                                   int64_t now_ms, int64_t *retry_after_ms);

/* Charges `tenant` delta_tokens more (negative: gives them back) without refusing: the cost of
 * work done once its real size is known (a /tokenize call, a request refused after its work).
 * The bucket may go below zero: later requests wait until it refills. */
void tenant_limits_settle(struct tenant_limits *tl, const char *tenant, double delta_tokens, int64_t now_ms);

/* Forgets admitted children again (their publish failed). Unknown ids are ignored. */
void tenant_limits_release(struct tenant_limits *tl, const char *const *request_ids, int32_t n);

/* One engine output of `request_id`: with tokens, the child is no longer queued; finished, it is
 * forgotten. Ids this input processor did not admit are ignored. Expires old entries first. */
void tenant_limits_on_output(struct tenant_limits *tl, const char *request_id, bool has_tokens, bool finished,
                             int64_t now_ms);

/* Current counts of `tenant` (0 when unknown). */
void tenant_limits_counts(const struct tenant_limits *tl, const char *tenant, int32_t *in_flight,
                          int32_t *queued);

#endif
