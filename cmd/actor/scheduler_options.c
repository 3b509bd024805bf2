/* llmbus-scheduler's flags into a scheduler_actor_options (scheduler_options.h). */
#include "cmd/actor/scheduler_options.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "model/gguf/config.h"
#include "model/gguf/gguf.h"

#define DEFAULT_MAX_MODEL_LEN_CAP 4096

/* max_model_len = min(context_length, 4096) unless given, vocab_size unless given. */
static llb_status resolve_from_model(const struct scheduler_flags *f, struct sched_config *out) {
  if (f->max_model_len > 0) out->max_model_len = f->max_model_len;
  if (f->vocab_size > 0) out->vocab_size = f->vocab_size;
  if (f->max_model_len > 0 && f->vocab_size > 0) return LLB_STATUS_OK;
  const char *path = f->model_path ? f->model_path : "";
  if (f->max_model_len > 0 && !path[0]) return LLB_STATUS_OK; /* ids checked >= 0 only */
  struct gguf_file *g = NULL;
  llb_status st = gguf_open(path, &g);
  if (st && f->max_model_len > 0) {
    LLB_LOG_WARN("vocab_size_unknown", "model=%s error=\"%s\": token ids are only checked >= 0", path,
                 llb_err_last());
    return LLB_STATUS_OK;
  }
  if (st) { /* copied first: LLB_ERRF writes the buffer llb_err_last() points to */
    char why[400];
    snprintf(why, sizeof why, "%s", llb_err_last());
    return LLB_ERRF(st, "--max-model-len not given and model '%s' unreadable: %s", path, why);
  }
  struct llama_config c;
  st = llama_config_from_gguf(g, &c);
  gguf_close(g);
  if (st) return st;
  if (f->max_model_len <= 0)
    out->max_model_len = c.context_length < DEFAULT_MAX_MODEL_LEN_CAP ? c.context_length : DEFAULT_MAX_MODEL_LEN_CAP;
  if (f->vocab_size <= 0) out->vocab_size = c.vocab_size;
  return LLB_STATUS_OK;
}

static llb_status resolve_sched(const struct scheduler_flags *f, struct sched_config *c) {
  const char *policy = f->policy ? f->policy : "fcfs";
  if (strcmp(policy, "fcfs") == 0) c->policy = SCHED_POLICY_FCFS;
  else if (strcmp(policy, "priority") == 0) c->policy = SCHED_POLICY_PRIORITY;
  else return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--policy '%s': expected fcfs|priority", policy);
  c->enable_prefix_caching = !f->no_prefix_caching;
  c->async_scheduling = !f->no_async_scheduling;
  c->num_speculative_tokens = f->num_speculative_tokens;
  if (f->num_speculative_tokens > 0 && c->async_scheduling) { /* drafts come with the previous output */
    c->async_scheduling = false;
    LLB_LOG_INFO("async_scheduling_off", "reason=\"speculative decoding schedules the drafts of each step's "
                 "output\" num_speculative_tokens=%d", f->num_speculative_tokens);
  }
  llb_status st = resolve_from_model(f, c);
  if (st) return st;
  c->num_lookahead_tokens = c->block_size;
  if (c->num_blocks < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--num-blocks %d: >= 0 (0: the worker's)", c->num_blocks);
  return LLB_STATUS_OK;
}

llb_status scheduler_actor_options_resolve(const struct scheduler_flags *f, struct scheduler_actor_options *cfg,
                                           bool *blocks_from_worker) {
  llb_status st = resolve_sched(f, &cfg->sched);
  if (st) return st;
  cfg->engine_id = f->engine_id;
  cfg->instance = f->instance;
  if (f->model_path && f->model_path[0]) { /* the file name: the same model on every host */
    const char *slash = strrchr(f->model_path, '/');
    cfg->model_name = slash ? slash + 1 : f->model_path;
  }
  /* the engine's actors beat at the interval this one was given (llmbus serve and the e2e
   * stack pass the same --heartbeat-ms to all) unless --peer-heartbeat-ms says otherwise */
  if (cfg->peer_heartbeat_ms == 0) cfg->peer_heartbeat_ms = f->heartbeat_ms;
  if (cfg->peer_heartbeat_ms < 0) cfg->peer_heartbeat_ms = 0;
  if (cfg->peer_missed_beats < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--peer-missed-beats %d: >= 1", cfg->peer_missed_beats);
  if (cfg->ack_wait_ms < 100)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--ack-wait-ms %lld: >= 100", (long long)cfg->ack_wait_ms);
  if (cfg->max_deliver < 1) return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--max-deliver %d: >= 1", cfg->max_deliver);
  *blocks_from_worker = cfg->sched.num_blocks == 0;
  /* sched_create checks the ranges: now, with a stand-in block count when the worker gives it */
  struct sched_config probe_cfg = cfg->sched;
  if (*blocks_from_worker) probe_cfg.num_blocks = 1 << 20;
  struct scheduler *probe = NULL;
  st = sched_create(&probe_cfg, &probe);
  sched_destroy(probe);
  return st;
}
