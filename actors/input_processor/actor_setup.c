/* The input processor's life cycle (see actor.h): model and tokenizer loaded, chat template
 * compiled, router and limits created; subscriptions at start; destroy. Handlers: actor.c. */
#include "actors/input_processor/actor.h"
#include "actors/input_processor/actor_internal.h"

#include <sys/stat.h>

#include "model/clip.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/input_processor/engine_router.h"
#include "actors/input_processor/input_processor.h"
#include "actors/input_processor/structured_check.h"
#include "actors/input_processor/pooling_check.h"
#include "actors/input_processor/tenant_limits.h"
#include "base/log.h"
#include "bus/span.h"
#include "bus/jetstream.h"
#include "actors/input_processor/chat_render.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "schemas/control.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"
#include "schemas/generate_request.h"
#include "schemas/request_output.h"

/* The vocabulary text of token id, malloc'd ("" for a bad id); NULL on OOM. */
static char *token_text_dup(const struct tokenizer *t, int32_t id) {
  size_t n = 0;
  const char *s = id >= 0 ? tokenizer_token_text(t, id, &n) : NULL;
  return strndup(s ? s : "", s ? n : 0);
}

/* Context length of the model: "<general.architecture>.context_length", capped at 4096.
 * A vocab-only GGUF may lack it: then 4096. */
static int32_t default_max_model_len(const struct gguf_file *f) {
  struct gguf_str arch;
  int64_t ctx = 0;
  if (gguf_get_str(f, "general.architecture", &arch) == LLB_STATUS_OK && arch.len < 64) {
    char key[96];
    snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.data);
    if (gguf_get_int(f, key, &ctx) != LLB_STATUS_OK) ctx = 0;
  }
  return ctx > 0 && ctx < DEFAULT_MAX_MODEL_LEN ? (int32_t)ctx : DEFAULT_MAX_MODEL_LEN;
}

/* "<general.architecture>.embedding_length": columns of "embeds" items; 0 if absent. */
static int32_t model_hidden_size(const struct gguf_file *f) {
  struct gguf_str arch;
  int64_t v = 0;
  if (gguf_get_str(f, "general.architecture", &arch) == LLB_STATUS_OK && arch.len < 64) {
    char key[96];
    snprintf(key, sizeof key, "%.*s.embedding_length", (int)arch.len, arch.data);
    if (gguf_get_int(f, key, &v) != LLB_STATUS_OK) v = 0;
  }
  return v > 0 && v < (1 << 20) ? (int32_t)v : 0;
}

/* clip_image_plan as the input processor's planner (mm_images.h). */
static llb_status plan_image(void *ctx, int32_t width, int32_t height, struct inproc_image_plan *out) {
  struct clip_plan p;
  llb_status st = clip_image_plan(ctx, width, height, &p);
  if (st != LLB_STATUS_OK) return st;
  out->text = p.prompt; /* ownership moves to the caller */
  out->rows = p.num_rows;
  p.prompt = NULL;
  clip_plan_free(&p);
  return LLB_STATUS_OK;
}

/* --mmproj: loaded for its plans (the weights stay mapped, never run here); its hidden size
 * must be the model's, as the worker checks. */
static llb_status load_mmproj(struct inproc_actor *a, const char *path, struct inproc_config *cfg) {
  llb_status st = clip_model_load(path, 1, &a->clip);
  if (st != LLB_STATUS_OK) return LLB_UPDATE_ERR_STACK(st);
  if (clip_model_n_embd_out(a->clip) != cfg->hidden_size)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--mmproj %s projects to %d columns but the model's hidden size is %d",
                    path, clip_model_n_embd_out(a->clip), cfg->hidden_size);
  struct stat sb;
  const char *slash = strrchr(path, '/');
  snprintf(a->mmproj_id, sizeof a->mmproj_id, "%.64s:%lld", slash ? slash + 1 : path,
           stat(path, &sb) == 0 ? (long long)sb.st_size : 0LL);
  cfg->image = (struct inproc_image_config){.plan = plan_image, .plan_ctx = a->clip, .mmproj_id = a->mmproj_id};
  return LLB_STATUS_OK;
}

llb_status inproc_actor_create(const struct inproc_actor_options *o, struct inproc_actor **out) {
  *out = NULL;
  if (!o || !o->model_path) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "input processor: model path required");
  const char *tenant = o->tenant ? o->tenant : "*";
  const char *eid = o->engine_id ? o->engine_id : "0";
  if (strcmp(tenant, "*") != 0 && !bus_token_valid(tenant))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "tenant \"%s\" is not one subject token (or *)", tenant);
  if (!bus_token_valid(eid)) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "engine id \"%s\" is not one subject token", eid);
  if (o->max_model_len < 0 || o->max_model_len == 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "max_model_len must be >= 2 (or 0 = the model's), got %d",
                    o->max_model_len);

  struct inproc_actor *a = calloc(1, sizeof *a);
  struct gguf_file *f = NULL;
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "input processor actor");
  snprintf(a->tenant, sizeof a->tenant, "%s", tenant);
  snprintf(a->engine_id, sizeof a->engine_id, "%s", eid);
  struct engine_router_config rc;
  engine_router_config_init(&rc);
  rc.default_engine_id = a->engine_id;
  const char *slash = strrchr(o->model_path, '/');
  rc.model = slash ? slash + 1 : o->model_path; /* engines announce their model's file name */
  a->durable = o->durable;
  a->stream_replicas = o->stream_replicas == 0 ? 1 : o->stream_replicas; /* checked by the stream */
  llb_status st = LLB_STATUS_OK;
  if (!o->router || strcmp(o->router, "cache-aware") == 0) rc.policy = ENGINE_ROUTER_CACHE_AWARE;
  else if (strcmp(o->router, "least-loaded") == 0) rc.policy = ENGINE_ROUTER_LEAST_LOADED;
  else if (strcmp(o->router, "random") == 0) rc.policy = ENGINE_ROUTER_RANDOM;
  else st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--router '%s': expected cache-aware|least-loaded|random", o->router);
  if (st == LLB_STATUS_OK) st = engine_router_create(&rc, &a->router);
  if (st == LLB_STATUS_OK) st = gguf_open(o->model_path, &f);
  if (st != LLB_STATUS_OK) goto fail;
  st = tokenizer_load(f, &a->tok);
  if (st != LLB_STATUS_OK) goto fail;
  struct inproc_config cfg = {0};
  cfg.max_model_len = o->max_model_len ? o->max_model_len : default_max_model_len(f);
  cfg.max_n = INPROC_ACTOR_MAX_N;
  cfg.has_chat_template = chat_template_from_gguf(f, &cfg.chat_template) == LLB_STATUS_OK;
  st = chat_render_load(f, o->chat_template_file, &a->jinja);
  if (st != LLB_STATUS_OK && (o->chat_template_file || st != LLB_STATUS_NOT_FOUND)) {
    if (o->chat_template_file) goto fail; /* an explicit template must work */
    LLB_LOG_WARN("chat_template_unusable", "model=%s err=\"%s\" fallback=%s", o->model_path, llb_err_last(),
                 cfg.has_chat_template ? chat_template_name(cfg.chat_template) : "none");
  }
  cfg.jinja_template = a->jinja;
  a->bos_text = token_text_dup(a->tok, tokenizer_bos_id(a->tok));
  a->eos_text = token_text_dup(a->tok, tokenizer_eos_id(a->tok));
  if (!a->bos_text || !a->eos_text) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "token texts");
    goto fail;
  }
  cfg.bos_token = a->bos_text;
  cfg.eos_token = a->eos_text;
  cfg.hidden_size = model_hidden_size(f);
  a->hidden_size = cfg.hidden_size;
  if (o->mmproj_path && o->mmproj_path[0] && (st = load_mmproj(a, o->mmproj_path, &cfg)) != LLB_STATUS_OK) goto fail;
  a->max_model_len = cfg.max_model_len;
  st = inproc_create(a->tok, &cfg, &a->proc);
  if (st != LLB_STATUS_OK) goto fail;
  if (o->tenant_limits_file) {
    struct tenant_limits_config *tc = calloc(1, sizeof *tc);
    st = tc ? tenant_limits_config_load(o->tenant_limits_file, tc) : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "limits");
    if (st == LLB_STATUS_OK)
      st = tenant_limits_create(tc, o->tenant_limit_ttl_ms > 0 ? o->tenant_limit_ttl_ms : DEFAULT_TENANT_LIMIT_TTL_MS,
                                &a->limits);
    free(tc);
    if (st != LLB_STATUS_OK) goto fail;
  }
  gguf_close(f);
  LLB_LOG_INFO("input_processor_ready", "model=%s max_model_len=%d chat_template=%s vocab=%d",
               o->model_path, a->max_model_len,
               a->jinja ? (o->chat_template_file ? "jinja-file" : "jinja") : cfg.has_chat_template ? "named" : "no",
               tokenizer_vocab_size(a->tok));
  *out = a;
  return LLB_STATUS_OK;
fail:
  gguf_close(f);
  inproc_actor_destroy(a);
  return st;
}

void inproc_actor_destroy(struct inproc_actor *a) {
  if (!a) return;
  inproc_destroy(a->proc);
  tokenizer_destroy(a->tok);
  engine_router_destroy(a->router);
  tenant_limits_destroy(a->limits);
  clip_model_destroy(a->clip);
  jinja_template_destroy(a->jinja);
  free(a->bos_text);
  free(a->eos_text);
  free(a);
}

int32_t inproc_actor_max_model_len(const struct inproc_actor *a) { return a->max_model_len; }

void inproc_actor_get_stats(const struct inproc_actor *a, struct inproc_actor_stats *out) {
  struct inproc_actor *m = (struct inproc_actor *)a; /* atomics: loads only */
  out->requests = atomic_load(&m->requests);
  out->engine_requests = atomic_load(&m->engine_requests);
  out->rejected = atomic_load(&m->rejected);
  out->malformed = atomic_load(&m->malformed);
  out->no_reply = atomic_load(&m->no_reply);
  out->aborts = atomic_load(&m->aborts);
  out->aborts_refused = atomic_load(&m->aborts_refused);
  out->publish_errors = atomic_load(&m->publish_errors);
  out->tokenize = atomic_load(&m->tokenize);
  out->stats_malformed = atomic_load(&m->stats_malformed);
  out->routed_by_prefix = atomic_load(&m->routed_by_prefix);
  out->routed_fallback = atomic_load(&m->routed_fallback);
  out->limited = atomic_load(&m->limited);
}

struct engine_router *inproc_actor_router(struct inproc_actor *a) { return a->router; }

/* The tenant of a generate/abort subject: its last token. */
llb_status inproc_actor_start(struct inproc_actor *a, struct bus *bus) {
  a->bus = bus;
  int64_t maxp = bus_max_payload(bus);
  /* An item travels whole in an EngineCoreRequest and a SchedulerOutput: leave room for
   * the rest of either message. */
  if (maxp > 0) inproc_set_max_mm_item_bytes(a->proc, maxp > 256 * 1024 ? maxp - 128 * 1024 : maxp / 2);
  const char *prefix = bus_prefix(bus);
  char stats_subj[BUS_SUBJECT_MAX];
  snprintf(stats_subj, sizeof stats_subj, "%s.engine.*.stats", prefix); /* the prefix was checked by bus_create */
  llb_status st = LLB_STATUS_OK;
  /* the stream takes <prefix>.engine.*.requests: every engine's */
  if (a->durable && (st = bus_js_requests_stream_ensure(bus, 0, a->stream_replicas,
                                                                INPROC_DURABLE_START_TIMEOUT_MS)))
    return st;
  char gen[BUS_SUBJECT_MAX], abort_subj[BUS_SUBJECT_MAX], tok_subj[BUS_SUBJECT_MAX];
  snprintf(tok_subj, sizeof tok_subj, "%s.tokenize.%s", prefix, a->tenant);
  if (strcmp(a->tenant, "*") == 0) {
    snprintf(gen, sizeof gen, "%s.generate.*", prefix);
    snprintf(abort_subj, sizeof abort_subj, "%s.abort.*", prefix);
  } else {
    st = bus_subject_generate(prefix, a->tenant, gen, sizeof gen);
    if (st == LLB_STATUS_OK) st = bus_subject_abort(prefix, a->tenant, abort_subj, sizeof abort_subj);
    if (st != LLB_STATUS_OK) return st;
  }
  st = bus_subscribe(bus, gen, INPROC_ACTOR_QUEUE_GROUP, inproc_on_generate, a, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, abort_subj, INPROC_ACTOR_QUEUE_GROUP, inproc_on_abort, a, NULL);
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, tok_subj, INPROC_ACTOR_QUEUE_GROUP, inproc_on_tokenize, a, NULL);
  /* every replica hears every engine (no queue group): each routes on its own view */
  if (st == LLB_STATUS_OK) st = bus_subscribe(bus, stats_subj, NULL, inproc_on_stats, a, NULL);
  if (st == LLB_STATUS_OK && a->limits) { /* every engine's outputs: its requests' first tokens and ends */
    if (snprintf(a->outputs_subject, sizeof a->outputs_subject, "%s.engine.*.outputs", prefix) >=
        (int)sizeof a->outputs_subject)
      st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "prefix '%s' too long", prefix);
    if (st == LLB_STATUS_OK) st = bus_subscribe(bus, a->outputs_subject, NULL, inproc_on_engine_outputs, a, NULL);
    if (st == LLB_STATUS_OK) LLB_LOG_INFO("tenant_limits_on", "outputs=%s", a->outputs_subject);
  }
  if (st != LLB_STATUS_OK) return st;
  LLB_LOG_INFO("input_processor_subscribed", "generate=%s abort=%s tokenize=%s stats=%s default_engine=%s", gen,
               abort_subj, tok_subj, stats_subj, a->engine_id);
  return LLB_STATUS_OK;
}
