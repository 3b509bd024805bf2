/* The gpu_worker actor (see actor.h): SchedulerOutput in, one step of the model runner,
 * ModelRunnerOutput out, on <prefix>.engine.<eid>.execute. */
#include "actors/gpu_worker/actor.h"
#include "model/forward/lora.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/gpu_worker/model_runner.h"
#include "actors/gpu_worker/runner_sim.h"
#include "base/log.h"
#include "bus/span.h"
#include "model/forward/forward.h"
#include "model/vision/clip.h"
#include "model/gguf/gguf.h"
#include "model/reasoning/reasoning.h"
#include "model/structured/structured_output.h"
#include "model/tokenizer/tokenizer.h"
#include "base/metrics.h"
#include "bus/subject.h"
#include "schemas/control.h"
#include "schemas/model_runner_output.h"
#include "schemas/scheduler_output.h"

struct gpu_worker_actor {
  char engine_id[64];
  char execute_subject[256];
  _Atomic(struct bus_sub *) execute_sub; /* set once subscribed (a handler may run before) */
  struct gguf_file *file;
  struct llama_model *model;
  struct model_runner *runner;
  struct lora_adapters loras;   /* --lora-modules and run-time ones, borrowed by the runner; lora_mu */
  pthread_mutex_t lora_mu;      /* guards loras and loras_changed (update handler, heartbeat, execute) */
  bool loras_changed;           /* the runner has not taken the set yet (on_execute does) */
  bool lora_on;                 /* --lora-modules given or --lora-dir: the runner has LoRA scratch */
  char *lora_dir;               /* --lora-dir, or NULL */
  int32_t max_lora_rank;
  char lora_subject[BUS_SUBJECT_MAX];
  struct bus_sub *lora_sub;     /* <prefix>.lora.update, or NULL */
  struct llb_arena lora_arena;  /* the update handler's decoded LoRAUpdate */
  struct llb_buf lora_reply;    /* its encoded LoRAUpdateReply */
  atomic_uint_fast64_t lora_updates, lora_update_errors;
  struct clip_model *clip; /* --mmproj: the image encoder, or NULL */
  /* used only on the execute subscription's delivery thread */
  struct llb_arena arena; /* decoded SchedulerOutput, reset per message */
  struct llb_buf reply;   /* encoded ModelRunnerOutput, reused */
  atomic_uint_fast64_t steps, step_errors, malformed, no_reply, reply_errors, tokens;
  struct llb_series *mask_seconds, *mask_wait_seconds; /* NULL = not exported */
  FILE *step_log; /* --step-log: one JSON line per step that ran a batch, or NULL */
  struct kv_connector *kv; /* --kv-transfer (issue 36), or NULL */
  struct kv_metric_series *kv_series; /* its counters in the registry, or NULL (not exported) */
  struct llb_str *kv_off_ids; /* without a connector: the ids answered at once (execute thread) */
  int32_t kv_off_cap;
};

/* The structured-output vocabulary from the model's tokenizer, built once (runner_so.h). A
 * model without a usable tokenizer serves unconstrained requests only (logged). */
/* Marker texts as token ids of t (special-token text parsed); a marker of more than
 * REASONING_MAX_MARKER_IDS tokens is left out. */
static void encode_markers(const struct tokenizer *t, const char *const *texts, int32_t *num, int32_t *lens,
                           int32_t (*ids)[REASONING_MAX_MARKER_IDS]) {
  for (*num = 0; *texts && *num < REASONING_MAX_MARKERS; texts++) {
    int32_t *v = NULL;
    int64_t n = 0;
    if (tokenizer_encode(t, *texts, strlen(*texts), false, true, &v, &n) == LLB_STATUS_OK && n > 0 &&
        n <= REASONING_MAX_MARKER_IDS) {
      memcpy(ids[*num], v, (size_t)n * sizeof(int32_t));
      lens[(*num)++] = (int32_t)n;
    }
    free(v);
  }
}

/* Every reasoning parser's markers in this model's tokens: structured output waits for the end
 * of the reasoning (model/reasoning/reasoning.h). */
static void load_reasoning_markers(struct gpu_worker_actor *a, const struct tokenizer *t) {
  for (int p = 1; p <= REASONING_MAX_PARSER; p++) {
    const char *const *starts, *const *ends;
    struct reasoning_marker_ids m = {0};
    if (!reasoning_marker_texts((enum reasoning_parser)p, &starts, &ends)) continue;
    encode_markers(t, starts, &m.num_start, m.start_len, m.start);
    encode_markers(t, ends, &m.num_end, m.end_len, m.end);
    model_runner_set_reasoning_markers(a->runner, (enum reasoning_parser)p, &m);
  }
}

static void load_structured_vocab(struct gpu_worker_actor *a) {
  struct tokenizer *tok = NULL;
  struct so_vocab *v = NULL;
  const int64_t t0 = llb_now_ns();
  llb_status st = tokenizer_load(a->file, &tok);
  if (!st) st = so_vocab_from_tokenizer(tok, &v);
  if (!st) st = model_runner_set_structured_vocab(a->runner, v);
  if (!st) load_reasoning_markers(a, tok);
  tokenizer_destroy(tok);
  if (st) {
    char q[320];
    LLB_LOG_WARN("structured_output_unavailable", "error=%s", llb_log_quote(q, sizeof q, llb_err_last()));
    return;
  }
  LLB_LOG_INFO("structured_output_vocab", "tokens=%d build_ms=%.1f", so_vocab_size(v),
               (double)(llb_now_ns() - t0) / 1e6);
}

/* The KV connector's counters (issue 36), mirrored into the registry at each scrape. */
struct kv_metric_series {
  struct llb_series *bytes_sent, *bytes_received, *recv_finished, *recv_failed, *fetch_served, *fetch_refused,
      *export_accepted, *export_refused, *retries;
};

static void kv_metrics_collect(struct llb_metrics *r, void *user) {
  (void)r;
  struct gpu_worker_actor *a = user;
  const struct kv_metric_series *k = a->kv_series;
  struct kv_connector_stats s;
  kv_connector_stats(a->kv, &s);
  llb_series_set(k->bytes_sent, (double)s.bytes_sent);
  llb_series_set(k->bytes_received, (double)s.bytes_received);
  llb_series_set(k->recv_finished, (double)s.recvs_finished);
  llb_series_set(k->recv_failed, (double)s.recvs_failed);
  llb_series_set(k->fetch_served, (double)s.fetches_served);
  llb_series_set(k->fetch_refused, (double)s.fetches_refused);
  llb_series_set(k->export_accepted, (double)s.exports);
  llb_series_set(k->export_refused, (double)s.exports_refused);
  llb_series_set(k->retries, (double)s.chunks_retried);
}

static llb_status kv_register_metrics(struct gpu_worker_actor *a, struct llb_metrics *m) {
  static const char *const result[] = {"result"};
  struct llb_metric *sent = llb_metrics_counter(m, "llmbus:kv_transfer_sent_bytes_total",
                                                "KV block bytes this worker served to other engines' workers", 0, NULL),
                    *recv = llb_metrics_counter(m, "llmbus:kv_transfer_received_bytes_total",
                                                "KV block bytes this worker fetched and wrote into its cache", 0, NULL),
                    *recvs = llb_metrics_counter(m, "llmbus:kv_transfer_receives_total",
                                                 "KV receives that ended, by result (finished, failed)", 1, result),
                    *fetches = llb_metrics_counter(m, "llmbus:kv_transfer_fetches_total",
                                                   "KVFetchRequests answered, by result (served, refused)", 1, result),
                    *exports = llb_metrics_counter(m, "llmbus:kv_transfer_exports_total",
                                                   "reqs_to_send taken, by result (accepted, refused)", 1, result),
                    *retries = llb_metrics_counter(m, "llmbus:kv_transfer_chunk_retries_total",
                                                   "Chunk requests sent again (no reply, or not ready yet)", 0, NULL);
  struct kv_metric_series *k = calloc(1, sizeof *k);
  if (!k) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv transfer metrics");
  a->kv_series = k;
  *k = (struct kv_metric_series){
      .bytes_sent = llb_metric_series(sent, NULL), .bytes_received = llb_metric_series(recv, NULL),
      .recv_finished = llb_metric_series(recvs, (const char *const[]){"finished"}),
      .recv_failed = llb_metric_series(recvs, (const char *const[]){"failed"}),
      .fetch_served = llb_metric_series(fetches, (const char *const[]){"served"}),
      .fetch_refused = llb_metric_series(fetches, (const char *const[]){"refused"}),
      .export_accepted = llb_metric_series(exports, (const char *const[]){"accepted"}),
      .export_refused = llb_metric_series(exports, (const char *const[]){"refused"}),
      .retries = llb_metric_series(retries, NULL)};
  if (!k->bytes_sent || !k->bytes_received || !k->recv_finished || !k->recv_failed || !k->fetch_served ||
      !k->fetch_refused || !k->export_accepted || !k->export_refused || !k->retries)
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv transfer metrics");
  return llb_metrics_on_collect(m, kv_metrics_collect, a);
}

llb_status gpu_worker_actor_register_metrics(struct gpu_worker_actor *a, struct llb_metrics *m) {
  if (a->kv) {
    llb_status st = kv_register_metrics(a, m);
    if (st) return st;
  }
  /* a mask out of the cache takes microseconds, a fresh one over a large vocabulary milliseconds */
  static const double b[] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
  const int nb = (int)(sizeof b / sizeof b[0]);
  struct llb_metric *h = llb_metrics_histogram(m, "llmbus:structured_output_mask_seconds",
                                               "Helper-thread time per step to bring the constrained requests' "
                                               "matchers up to date and compute their token bitmasks",
                                               b, nb, 0, NULL);
  struct llb_metric *w = llb_metrics_histogram(m, "llmbus:structured_output_mask_wait_seconds",
                                               "Time per step that sampling waited for the bitmasks after the "
                                               "forward pass (the part of the mask time not hidden by it)",
                                               b, nb, 0, NULL);
  a->mask_seconds = h ? llb_metric_series(h, NULL) : NULL;
  a->mask_wait_seconds = w ? llb_metric_series(w, NULL) : NULL;
  return h && w ? LLB_STATUS_OK : LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "structured output metrics");
}

/* --mmproj: the image encoder, whose rows must be the text model's hidden size. */
static llb_status load_mmproj(struct gpu_worker_actor *a, const struct gpu_worker_actor_options *o) {
  const int64_t t0 = llb_now_ns();
  llb_status st = clip_model_load(o->mmproj_path, o->num_threads > 0 ? o->num_threads : 1, &a->clip);
  if (st) return LLB_UPDATE_ERR_STACK(st);
  const int32_t hidden = model_runner_model_config(a->runner)->embedding_length;
  if (clip_model_n_embd_out(a->clip) != hidden)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--mmproj %s projects to %d columns but the model's hidden size "
                    "(embedding_length) is %d: not this model's mmproj", o->mmproj_path,
                    clip_model_n_embd_out(a->clip), hidden);
  model_runner_set_image_encoder(a->runner, a->clip);
  LLB_LOG_INFO("mmproj_loaded", "path=%s projector=%s n_embd_out=%d load_ms=%.1f", o->mmproj_path,
               clip_projector_type_name(clip_model_projector_type(a->clip)), hidden,
               (double)(llb_now_ns() - t0) / 1e6);
  return LLB_STATUS_OK;
}

/* The step-time model of a sim worker, once at start: what its figures mean comes from it. */
static void log_sim_cost(const struct sim_cost_model *given) {
  struct sim_cost_model m;
  if (given) m = *given;
  else sim_cost_model_default(&m);
  char name[300], source[1100];
  LLB_LOG_INFO("gpu_worker_sim", "cost_model=%s source=%s fixed_ms=%.4f token_ms=%.5f weights_ms=%.4f "
               "sampled_row_ms=%.5f random_row_ms=%.5f attention_ns=%.4f context_ns=%.4f first_step_ms=%.4f",
               llb_log_quote(name, sizeof name, m.name), llb_log_quote(source, sizeof source, m.source),
               m.fixed_s * 1e3, m.token_s * 1e3, m.weights_s * 1e3, m.sampled_row_s * 1e3, m.random_row_s * 1e3,
               m.attention_s * 1e9, m.context_s * 1e9, m.first_step_s * 1e3);
}

/* --lora-modules: each adapter loaded against the model, then given to the runner (logged). */
static llb_status load_loras(struct gpu_worker_actor *a, const struct gpu_worker_actor_options *o) {
  llb_status st = lora_adapters_load(o->lora_modules, a->model, o->max_lora_rank, &a->loras);
  if (!st) st = model_runner_set_loras(a->runner, a->loras.ids, (const struct llama_lora *const *)a->loras.adapters,
                                       a->loras.num);
  for (int32_t i = 0; !st && i < a->loras.num; i++)
    LLB_LOG_INFO("lora_adapter", "name=%s lora_int_id=%d rank=%d alpha=%g targets=%d path=%s", a->loras.names[i],
                 a->loras.ids[i], a->loras.beat[i].rank, (double)llama_lora_alpha(a->loras.adapters[i]),
                 llama_lora_num_targets(a->loras.adapters[i]), o->lora_modules->items[i].path);
  return st;
}

llb_status gpu_worker_actor_create(const struct gpu_worker_actor_options *o, struct gpu_worker_actor **out) {
  *out = NULL;
  if (!o || !o->model_path || !o->model_path[0])
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gpu_worker: --model is required");
  const char *eid = o->engine_id ? o->engine_id : "0";
  if (strlen(eid) >= sizeof(((struct gpu_worker_actor *)0)->engine_id))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "gpu_worker: engine id \"%s\" too long", eid);
  struct gpu_worker_actor *a = calloc(1, sizeof(*a));
  if (!a) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "gpu_worker actor");
  snprintf(a->engine_id, sizeof(a->engine_id), "%s", eid);
  llb_arena_init(&a->arena, NULL, 0);
  llb_arena_init(&a->lora_arena, NULL, 0);
  pthread_mutex_init(&a->lora_mu, NULL);
  const bool cuda = o->device == MODEL_RUNNER_DEVICE_CUDA, sim = o->device == MODEL_RUNNER_DEVICE_SIM;
  llb_status st = model_runner_device_check(o->device); /* before reading a byte of the model */
  if (st) goto fail;
  const int nloras = o->lora_modules ? o->lora_modules->num : 0;
  a->lora_on = nloras || (o->lora_dir && o->lora_dir[0]);
  a->max_lora_rank = o->max_lora_rank;
  if (a->lora_on && o->device != MODEL_RUNNER_DEVICE_CPU) {
    st = LLB_ERRF(LLB_STATUS_UNSUPPORTED, "gpu_worker: LoRA adapters (--lora-modules, --lora-dir) run on --device "
                  "cpu only, not %s", model_runner_device_name(o->device));
    goto fail;
  }
  if (o->lora_dir && o->lora_dir[0] && !(a->lora_dir = strdup(o->lora_dir))) {
    st = LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "--lora-dir");
    goto fail;
  }
  if ((st = gguf_open(o->model_path, &a->file))) goto fail;
  if (!cuda && !sim && (st = llama_model_load(a->file, &a->model))) goto fail;
  const struct model_runner_config cfg = {.num_blocks = o->num_blocks, .block_size = o->block_size,
                                          .max_num_batched_tokens = o->max_num_batched_tokens,
                                          .num_threads = o->num_threads,
                                          .num_threads_decode = o->num_threads_decode, .device = o->device,
                                          .gpu_memory_utilization = o->gpu_memory_utilization,
                                          .kv_cache_dtype = o->kv_cache_dtype,
                                          .kv_cache_memory_bytes = o->kv_cache_memory_bytes,
                                          .gguf = a->file, .matmul = o->matmul,
                                          .packed_cache_dir = o->packed_cache_dir, .spec = o->spec,
                                          .max_model_len = o->max_model_len, .sim_cost = o->sim_cost,
                                          .max_lora_rank = a->lora_on ? o->max_lora_rank : 0};
  if ((st = model_runner_create(a->model, &cfg, &a->runner))) goto fail;
  if (nloras && (st = load_loras(a, o))) goto fail;
  if (sim) log_sim_cost(o->sim_cost); /* structured output is refused there: no logits to mask */
  else load_structured_vocab(a);
  if (o->mmproj_path && o->mmproj_path[0] && (st = load_mmproj(a, o))) goto fail;
  if (o->step_log_path && o->step_log_path[0]) {
    if (!(a->step_log = fopen(o->step_log_path, "a"))) {
      st = LLB_ERRF(LLB_STATUS_IO, "--step-log %s: %s", o->step_log_path, strerror(errno));
      goto fail;
    }
    setvbuf(a->step_log, NULL, _IOLBF, 0); /* a line a write: workers may share the file (O_APPEND) */
  }
  if (o->kv_transfer) {
    struct kv_connector_config kc = o->kv_config;
    kc.engine_id = a->engine_id;
    if ((st = kv_connector_create(&kc, a->runner, &a->kv))) goto fail;
  }
  if (cuda) { /* the weights live on the device now */
    gguf_close(a->file);
    a->file = NULL;
  }
  const struct llama_config *c = model_runner_model_config(a->runner);
  LLB_LOG_INFO("gpu_worker_ready",
               "model=%s arch=%s layers=%d vocab=%d kv_cache_mb=%.1f num_blocks=%d block_size=%d "
               "max_num_batched_tokens=%d threads=%d decode_threads=%d device=%s",
               o->model_path, c->architecture, c->block_count, c->vocab_size,
               (double)model_runner_kv_cache_bytes(a->runner) / (1024.0 * 1024.0),
               model_runner_num_blocks(a->runner), o->block_size, o->max_num_batched_tokens, o->num_threads,
               o->num_threads_decode, /* 0: as threads */
               model_runner_device_name(o->device));
  *out = a;
  return LLB_STATUS_OK;
fail:
  gpu_worker_actor_destroy(a);
  return st;
}

const struct llb_lora_adapter *gpu_worker_actor_loras_lock(void *actor, int32_t *num) {
  struct gpu_worker_actor *a = actor;
  pthread_mutex_lock(&a->lora_mu);
  *num = a->loras.num;
  return a->loras.beat;
}

void gpu_worker_actor_loras_unlock(void *actor) {
  struct gpu_worker_actor *a = actor;
  pthread_mutex_unlock(&a->lora_mu);
}

bool gpu_worker_actor_serves_loras(const struct gpu_worker_actor *a) { return a->lora_on; }

void gpu_worker_actor_destroy(struct gpu_worker_actor *a) {
  if (!a) return;
  kv_connector_destroy(a->kv); /* before the runner whose cache it reads and writes */
  free(a->kv_series);
  free(a->kv_off_ids);
  model_runner_destroy(a->runner);
  lora_adapters_free(&a->loras); /* after the runner that borrowed them */
  free(a->lora_dir);
  llb_arena_destroy(&a->lora_arena);
  llb_buf_free(&a->lora_reply);
  pthread_mutex_destroy(&a->lora_mu);
  clip_model_destroy(a->clip);
  llama_model_destroy(a->model);
  gguf_close(a->file);
  llb_arena_destroy(&a->arena);
  llb_buf_free(&a->reply);
  if (a->step_log) fclose(a->step_log);
  free(a);
}

/* --step-log: the step's shape and how long it took (delivery thread only). */
static void log_step(struct gpu_worker_actor *a, double seconds) {
  const struct sim_step_shape s = model_runner_last_step_shape(a->runner);
  if (!a->step_log || s.num_tokens <= 0) return;
  fprintf(a->step_log,
          "{\"tokens\":%d,\"seqs\":%d,\"sampled\":%d,\"random\":%d,\"attention_pairs\":%.0f,"
          "\"context_tokens\":%.0f,\"seconds\":%.9f,\"first\":%d}\n",
          s.num_tokens, s.num_seqs, s.num_sampled, s.num_random, s.attention_pairs, s.context_tokens, seconds,
          s.first);
}

int32_t gpu_worker_actor_num_blocks(const struct gpu_worker_actor *a) { return model_runner_num_blocks(a->runner); }

struct kv_connector *gpu_worker_actor_kv_connector(const struct gpu_worker_actor *a) { return a->kv; }

/* Before the step: the connector takes the step's transfers and cancels the receives of requests
 * that left. */
static void kv_before_step(struct gpu_worker_actor *a, const struct llb_scheduler_output *so) {
  if (!a->kv) return;
  llb_status st = kv_connector_before_step(a->kv, &so->kv_connector_metadata, so->finished_req_ids,
                                           so->num_finished_req_ids);
  if (!st) st = kv_connector_before_step(a->kv, NULL, so->preempted_req_ids, so->num_preempted_req_ids);
  if (st) LLB_LOG_ERROR("kv_connector_step", "step=%llu err=\"%s\"", (unsigned long long)so->step, llb_err_last());
}

/* Without a connector no transfer can happen: every export ends at once (its blocks are freed)
 * and every receive fails (the scheduler recomputes), so that no request waits for nothing. */
static void kv_refuse_all(struct gpu_worker_actor *a, const struct llb_kv_connector_metadata *m,
                          struct llb_kv_connector_output *out) {
  const int32_t n = m->num_reqs_to_send + m->num_reqs_to_recv;
  if (n > a->kv_off_cap) {
    struct llb_str *p = realloc(a->kv_off_ids, (size_t)n * sizeof *p);
    if (!p) return;
    a->kv_off_ids = p;
    a->kv_off_cap = n;
  }
  for (int32_t i = 0; i < m->num_reqs_to_send; i++) a->kv_off_ids[i] = m->reqs_to_send[i].req_id;
  for (int32_t i = 0; i < m->num_reqs_to_recv; i++) a->kv_off_ids[m->num_reqs_to_send + i] = m->reqs_to_recv[i].req_id;
  out->finished_sending = m->num_reqs_to_send ? a->kv_off_ids : NULL;
  out->num_finished_sending = m->num_reqs_to_send;
  out->failed_recving = m->num_reqs_to_recv ? a->kv_off_ids + m->num_reqs_to_send : NULL;
  out->num_failed_recving = m->num_reqs_to_recv;
  LLB_LOG_WARN("kv_transfer_off", "exports=%d receives=%d: this worker runs without --kv-transfer",
               m->num_reqs_to_send, m->num_reqs_to_recv);
}

/* After the step: the transfers that ended go in the reply. */
static void kv_after_step(struct gpu_worker_actor *a, const struct llb_scheduler_output *so,
                          struct llb_model_runner_output *out) {
  if (a->kv) kv_connector_after_step(a->kv, &out->kv_connector_output);
  else if (so->kv_connector_metadata.num_reqs_to_send || so->kv_connector_metadata.num_reqs_to_recv)
    kv_refuse_all(a, &so->kv_connector_metadata, &out->kv_connector_output);
}

void gpu_worker_actor_stats(const struct gpu_worker_actor *a, struct gpu_worker_actor_stats *out) {
  *out = (struct gpu_worker_actor_stats){
      .steps = atomic_load(&a->steps), .step_errors = atomic_load(&a->step_errors),
      .malformed = atomic_load(&a->malformed), .no_reply = atomic_load(&a->no_reply),
      .reply_errors = atomic_load(&a->reply_errors), .tokens = atomic_load(&a->tokens)};
}

/* Encodes `o` and answers `msg`; a reply that cannot be encoded (too large) is replaced by
 * one carrying that error, so the scheduler never waits for nothing. */
static void send_reply(struct gpu_worker_actor *a, struct bus *bus, const struct bus_msg *msg,
                       const struct llb_model_runner_output *o) {
  llb_status st = llb_model_runner_output_encode_buf(o, &a->reply);
  if (st) {
    char text[512];
    snprintf(text, sizeof(text), "encoding ModelRunnerOutput: %s", llb_err_last());
    const struct llb_model_runner_output e = {
        .version = LLB_SCHEMA_VERSION, .step = o->step,
        .error = {.code = (int32_t)st, .message = llb_str_c(text), .field = llb_str_c("")}};
    atomic_fetch_add(&a->reply_errors, 1);
    LLB_LOG_ERROR("gpu_worker_reply_encode", "step=%llu err=\"%s\"", (unsigned long long)o->step, text);
    if (llb_model_runner_output_encode_buf(&e, &a->reply)) return;
  }
  /* corked, then written by this thread at the uncork (bus_cork): no wake-up of the loop
   * thread on the forward's cores to write the step's one message */
  bus_cork(bus);
  st = bus_respond(bus, msg, a->reply.data, a->reply.len, NULL);
  bus_uncork(bus);
  if (st) {
    atomic_fetch_add(&a->reply_errors, 1);
    LLB_LOG_ERROR("gpu_worker_reply_send", "step=%llu err=\"%s\"", (unsigned long long)o->step, llb_err_last());
  }
}

/* One "gpu_worker.execute" span per traced request of the step, each a child of that
 * request's step span in the scheduler (ScheduledTokens.traceparent): the step serves many
 * requests, and each request's trace shows the forward it was part of. An invalid or
 * unsampled traceparent records nothing. */
static void record_execute_spans(struct bus *bus, const struct llb_scheduler_output *so, int64_t start_ns,
                                 int64_t end_ns, bool failed) {
  if (!bus_tracing_enabled(bus)) return;
  for (int32_t i = 0; i < so->num_scheduled_reqs; i++) {
    const struct llb_scheduled_tokens *t = &so->num_scheduled_tokens[i];
    struct bus_trace_ctx parent;
    if (!t->traceparent.len || bus_traceparent_parse(t->traceparent.data, &parent) != LLB_STATUS_OK) {
      llb_err_clear();
      continue;
    }
    if (!bus_span_recording(bus, &parent)) continue;
    struct bus_span s;
    bus_span_begin(&s, &parent, "gpu_worker.execute", BUS_SPAN_KIND_SERVER);
    s.start_unix_ns = start_ns;
    s.end_unix_ns = end_ns;
    s.error = failed;
    bus_span_attr_int(&s, "llmbus.step", (int64_t)so->step);
    bus_span_attr_int(&s, "llmbus.batch_size", so->num_scheduled_reqs);
    bus_span_attr_int(&s, "llmbus.num_scheduled_tokens", t->num_tokens);
    bus_span_attr_int(&s, "llmbus.total_num_scheduled_tokens", so->total_num_scheduled_tokens);
    bus_span_end(bus, &s);
  }
}

static bool runner_holds(void *runner, const struct llama_lora *adapter) {
  return model_runner_lora_in_use(runner, adapter);
}

/* Before a step (execute thread): the runner takes a set that changed since the last step. */
static void take_loras(struct gpu_worker_actor *a) {
  pthread_mutex_lock(&a->lora_mu);
  if (a->loras_changed) {
    llb_status st = model_runner_set_loras(a->runner, a->loras.ids, (const struct llama_lora *const *)a->loras.adapters,
                                           a->loras.num);
    if (st) { /* checked when loaded: cannot happen; the runner keeps the old set */
      char q[400];
      LLB_LOG_ERROR("lora_set_failed", "error=%s", llb_log_quote(q, sizeof q, llb_err_last()));
    }
    a->loras_changed = st != LLB_STATUS_OK;
  }
  pthread_mutex_unlock(&a->lora_mu);
}

/* After a step (execute thread): unloaded adapters no request of the runner holds are freed. */
static void reap_loras(struct gpu_worker_actor *a) {
  pthread_mutex_lock(&a->lora_mu);
  if (a->loras.num_retired && !a->loras_changed) lora_adapters_reap(&a->loras, runner_holds, a->runner);
  pthread_mutex_unlock(&a->lora_mu);
}

static void on_execute(struct bus *bus, const struct bus_msg *msg, void *user) {
  const int64_t start_unix_ns = llb_wall_ns();
  struct gpu_worker_actor *a = user;
  if (!msg->reply) {
    atomic_fetch_add(&a->no_reply, 1);
    LLB_LOG_WARN("gpu_worker_no_reply", "subject=%s bytes=%zu: a SchedulerOutput needs a reply subject",
                 msg->subject, msg->len);
    return;
  }
  llb_arena_reset(&a->arena);
  struct llb_scheduler_output so;
  llb_status st = llb_scheduler_output_decode(msg->data, msg->len, &a->arena, &so);
  if (st) {
    char text[512];
    snprintf(text, sizeof(text), "%s", llb_err_last());
    atomic_fetch_add(&a->malformed, 1);
    LLB_LOG_WARN("gpu_worker_malformed", "bytes=%zu err=\"%s\"", msg->len, text);
    const struct llb_model_runner_output e = {
        .version = LLB_SCHEMA_VERSION,
        .error = {.code = (int32_t)st, .message = llb_str_c(text), .field = llb_str_c("")}};
    send_reply(a, bus, msg, &e);
    return;
  }
  if (a->lora_on) take_loras(a);
  kv_before_step(a, &so);
  const int64_t t0 = llb_now_ns();
  struct llb_model_runner_output out;
  st = model_runner_execute(a->runner, &so, &out);
  const int64_t t1 = llb_now_ns();
  kv_after_step(a, &so, &out);
  if (a->lora_on) reap_loras(a);
  if (st) {
    atomic_fetch_add(&a->step_errors, 1);
    LLB_LOG_WARN("gpu_worker_step_error", "step=%llu code=%s field=%s err=\"%s\"", (unsigned long long)so.step,
                 llb_strerror(st), out.error.field.data, out.error.message.data);
  } else {
    atomic_fetch_add(&a->steps, 1);
    atomic_fetch_add(&a->tokens, (uint64_t)so.total_num_scheduled_tokens);
    double mask_s, wait_s;
    model_runner_last_mask_seconds(a->runner, &mask_s, &wait_s);
    if (mask_s >= 0 && a->mask_seconds) llb_series_observe(a->mask_seconds, mask_s);
    if (wait_s >= 0 && a->mask_wait_seconds) llb_series_observe(a->mask_wait_seconds, wait_s);
    log_step(a, (double)(t1 - t0) * 1e-9);
    LLB_LOG_DEBUG("gpu_worker_step", "step=%llu reqs=%d tokens=%d sampled=%d step_ms=%.3f",
                  (unsigned long long)so.step, out.num_reqs, so.total_num_scheduled_tokens,
                  out.num_sampled_token_ids, (double)(t1 - t0) / 1e6);
  }
  /* the span ends before the reply leaves, so it ends inside the scheduler's step span */
  const int64_t end_unix_ns = llb_wall_ns();
  send_reply(a, bus, msg, &out);
  record_execute_spans(bus, &so, start_unix_ns, end_unix_ns, st != LLB_STATUS_OK);
  /* no step queued behind this one (synchronous scheduling, or the scheduler is slower than
   * the forward): leave the cores to the processes that bring the next one */
  struct bus_sub *sub = atomic_load(&a->execute_sub);
  if (sub && bus_sub_pending(sub) == 0) model_runner_idle(a->runner);
}

/* Answers a LoRAUpdate with the engine id and st's error (OK: done). */
static void send_lora_reply(struct gpu_worker_actor *a, struct bus *bus, const struct bus_msg *msg, llb_status st) {
  char text[512];
  snprintf(text, sizeof text, "%s", st ? llb_err_last() : "");
  const struct llb_lora_update_reply r = {
      .version = LLB_SCHEMA_VERSION, .engine_id = llb_str_c(a->engine_id),
      .error = {.code = (int32_t)st, .message = llb_str_c(text), .field = llb_str_c("")}};
  if (llb_lora_update_reply_encode_buf(&r, &a->lora_reply) ||
      bus_respond(bus, msg, a->lora_reply.data, a->lora_reply.len, NULL)) {
    char q[400];
    LLB_LOG_ERROR("lora_update_reply", "error=%s", llb_log_quote(q, sizeof q, llb_err_last()));
  }
}

/* Loads or unloads one adapter (LoRAUpdate); the runner takes the set before its next step. */
static llb_status apply_lora_update(struct gpu_worker_actor *a, const struct llb_lora_update *u) {
  char name[LLB_LORA_NAME_MAX + 1], path[LLB_LORA_PATH_MAX + 1], tenant[LLB_LORA_TENANT_MAX + 1];
  snprintf(name, sizeof name, "%.*s", (int)u->lora_name.len, u->lora_name.data);
  snprintf(path, sizeof path, "%.*s", (int)u->lora_path.len, u->lora_path.data);
  snprintf(tenant, sizeof tenant, "%.*s", (int)u->tenant.len, u->tenant.data);
  if (u->op == LLB_LORA_UPDATE_LOAD && !a->lora_dir)
    return LLB_ERRF(LLB_STATUS_UNSUPPORTED, "this worker loads no LoRA adapters at run time (no --lora-dir)");
  pthread_mutex_lock(&a->lora_mu); /* a file read under the lock: adapters are small and loads rare */
  llb_status st = u->op == LLB_LORA_UPDATE_LOAD
                      ? lora_adapters_add(&a->loras, name, a->lora_dir, path, tenant, a->model, a->max_lora_rank)
                      : lora_adapters_remove(&a->loras, name);
  if (!st) a->loras_changed = true;
  const int32_t num = a->loras.num;
  pthread_mutex_unlock(&a->lora_mu);
  char q[400];
  if (st) LLB_LOG_WARN("lora_update_refused", "op=%d name=%s error=%s", u->op, name,
                       llb_log_quote(q, sizeof q, llb_err_last()));
  else LLB_LOG_INFO(u->op == LLB_LORA_UPDATE_LOAD ? "lora_adapter_loaded" : "lora_adapter_unloaded",
                    "name=%s path=%s tenant=%s adapters=%d", name, path, tenant, num);
  return st;
}

static void on_lora_update(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct gpu_worker_actor *a = user;
  if (!msg->reply) {
    atomic_fetch_add(&a->no_reply, 1);
    LLB_LOG_WARN("gpu_worker_no_reply", "subject=%s bytes=%zu: a LoRAUpdate needs a reply subject", msg->subject,
                 msg->len);
    return;
  }
  llb_arena_reset(&a->lora_arena);
  struct llb_lora_update u;
  llb_status st = llb_lora_update_decode(msg->data, msg->len, &a->lora_arena, &u);
  if (st) {
    atomic_fetch_add(&a->malformed, 1);
    char q[400];
    LLB_LOG_WARN("gpu_worker_malformed", "subject=%s bytes=%zu error=%s", msg->subject, msg->len,
                 llb_log_quote(q, sizeof q, llb_err_last()));
  } else {
    st = apply_lora_update(a, &u);
  }
  atomic_fetch_add(st ? &a->lora_update_errors : &a->lora_updates, 1);
  if (!st) (void)bus_heartbeat_now(bus); /* the front doors learn the new set before the answer */
  send_lora_reply(a, bus, msg, st);
}

llb_status gpu_worker_actor_start(struct gpu_worker_actor *a, struct bus *bus) {
  llb_status st = bus_subject_engine(bus_prefix(bus), a->engine_id, "execute", a->execute_subject,
                                     sizeof(a->execute_subject));
  struct bus_sub *sub = NULL;
  if (!st) st = bus_subscribe(bus, a->execute_subject, NULL, on_execute, a, &sub);
  if (st) return st;
  atomic_store(&a->execute_sub, sub);
  LLB_LOG_INFO("gpu_worker_subscribed", "execute=%s", a->execute_subject);
  if (a->kv && (st = kv_connector_start(a->kv, bus))) return st;
  if (!a->lora_dir) return LLB_STATUS_OK;
  st = bus_subject_lora_update(bus_prefix(bus), a->lora_subject, sizeof a->lora_subject);
  if (!st) st = bus_subscribe(bus, a->lora_subject, NULL, on_lora_update, a, &a->lora_sub);
  if (!st) LLB_LOG_INFO("gpu_worker_subscribed", "lora_update=%s", a->lora_subject);
  return st;
}

void gpu_worker_actor_stop(struct gpu_worker_actor *a) {
  if (!a) return;
  struct bus_sub *sub = atomic_exchange(&a->execute_sub, NULL);
  if (sub) (void)bus_unsubscribe(sub); /* fails only when the drain already ended it */
  kv_connector_stop(a->kv);
  if (a->lora_sub) (void)bus_unsubscribe(a->lora_sub);
  a->lora_sub = NULL;
}
