/* The worker's KV connector (kv_transfer.h): the export registry (kv_export.h) and the fetcher
 * (kv_fetcher.h) around the runner's cache, the kv_fetch service, and the step's lists. */
#include "actors/gpu_worker/kv_transfer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/gpu_worker/kv_export.h"
#include "actors/gpu_worker/kv_fetcher.h"
#include "base/hash.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/kv_transfer.h"

struct kv_connector {
  char engine_id[BUS_TOKEN_MAX + 1];
  struct kv_connector_config cfg;
  struct model_runner *runner;
  struct model_runner_kv_geometry geom;
  struct kv_export_registry *exports;
  struct kv_fetcher *fetcher;
  struct bus *bus;
  _Atomic(struct bus_sub *) sub;
  char subject[BUS_SUBJECT_MAX];
  /* after_step's lists (execute thread): views over the registry's and the fetcher's strings */
  struct llb_str *out_ids;
  int32_t out_cap;
  /* the service (serve_mu): decoded request, block bytes, encoded reply */
  pthread_mutex_t serve_mu;
  struct llb_arena serve_arena;
  uint8_t *serve_data;
  size_t serve_data_cap;
  atomic_uint_fast64_t exports_added, exports_refused, fetches_served, fetches_refused, bytes_sent;
  uint64_t epoch; /* the scheduler's block-accounting epoch of the last step (execute thread) */
  uint64_t incarnation; /* this connector's, on every reply (KVTransferChunk.incarnation), never 0 */
  atomic_uint_fast64_t steps_begun; /* before_step calls with metadata (exports registered) */
  atomic_bool busy;                 /* between such a call and after_step */
};

static llb_status read_block(void *user, int32_t block_id, uint8_t *dst) {
  struct kv_connector *c = user;
  return model_runner_kv_block_read(c->runner, block_id, dst, c->geom.block_bytes);
}

static llb_status write_block(void *user, int32_t block_id, const uint8_t *src) {
  struct kv_connector *c = user;
  return model_runner_kv_block_write(c->runner, block_id, src, c->geom.block_bytes);
}

/* Grows the service's block buffer to `bytes` (under serve_mu). */
static llb_status serve_reserve(struct kv_connector *c, size_t bytes) {
  if (bytes <= c->serve_data_cap) return LLB_STATUS_OK;
  uint8_t *p = realloc(c->serve_data, bytes);
  if (!p) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv fetch: %zu bytes of blocks", bytes);
  c->serve_data = p;
  c->serve_data_cap = bytes;
  return LLB_STATUS_OK;
}

static llb_status make_parts(struct kv_connector *c, const struct kv_connector_config *cfg) {
  struct model_runner_kv_geometry *g = &c->geom;
  const struct kv_export_limits lim = {.num_cache_blocks = g->num_blocks,
                                       .max_reqs = cfg->max_export_reqs ? cfg->max_export_reqs : 4096,
                                       .max_blocks = cfg->max_export_blocks ? cfg->max_export_blocks : g->num_blocks};
  const struct kv_fetcher_config fc = {
      .geometry = *g,
      .fetch_timeout_ms = cfg->fetch_timeout_ms ? cfg->fetch_timeout_ms : 5000,
      .transfer_timeout_ms = cfg->transfer_timeout_ms ? cfg->transfer_timeout_ms : 60000,
      .not_ready_timeout_ms = cfg->not_ready_timeout_ms ? cfg->not_ready_timeout_ms : 10000,
      .max_attempts = cfg->max_attempts ? cfg->max_attempts : 3,
      .retry_ms = cfg->retry_ms ? cfg->retry_ms : 10,
      .num_threads = cfg->fetch_threads ? cfg->fetch_threads : 2,
      .max_chunk_bytes = cfg->max_chunk_bytes};
  llb_status st = kv_export_create(&lim, &c->exports);
  if (!st) st = kv_fetcher_create(&fc, write_block, c, &c->fetcher);
  if (!st) st = serve_reserve(c, g->block_bytes);
  /* the device check: a CUDA runner refuses to read its cache (UNSUPPORTED) */
  if (!st) st = model_runner_kv_block_read(c->runner, 0, c->serve_data, g->block_bytes);
  return st;
}

llb_status kv_connector_create(const struct kv_connector_config *cfg, struct model_runner *runner,
                               struct kv_connector **out) {
  if (!cfg || !runner || !cfg->engine_id || !bus_token_valid(cfg->engine_id))
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv connector: an engine id (a subject token) and a runner");
  struct kv_connector *c = calloc(1, sizeof *c);
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv connector");
  snprintf(c->engine_id, sizeof c->engine_id, "%s", cfg->engine_id);
  c->cfg = *cfg;
  c->cfg.engine_id = c->engine_id;
  c->runner = runner;
  c->incarnation = llb_random_u64_nonzero(); /* no other connector (process or restart) draws it */
  model_runner_kv_geometry(runner, &c->geom);
  pthread_mutex_init(&c->serve_mu, NULL);
  llb_arena_init(&c->serve_arena, NULL, 0);
  llb_status st = make_parts(c, cfg);
  if (st) {
    kv_connector_destroy(c);
    return st;
  }
  *out = c;
  return LLB_STATUS_OK;
}

/* Data bytes one chunk may carry: the configured limit, else the server's max_payload less the
 * header's room (the fetcher asks for chunks of the same size). */
static size_t serve_limit(const struct kv_connector *c) {
  size_t b = c->cfg.max_chunk_bytes;
  if (!b && c->bus) {
    const int64_t mp = bus_max_payload(c->bus);
    b = mp > 32 * 1024 ? (size_t)mp - 16 * 1024 : 0;
  }
  if (!b) b = LLB_KV_MAX_CHUNK_DATA_BYTES;
  return b < LLB_KV_MAX_CHUNK_DATA_BYTES ? b : LLB_KV_MAX_CHUNK_DATA_BYTES;
}

/* Fills ch's status, blocks and geometry for fetch q (under serve_mu). */
static void serve_fetch(struct kv_connector *c, const struct llb_kv_fetch_request *q, struct llb_kv_transfer_chunk *ch,
                        char *why, size_t cap) {
  const struct model_runner_kv_geometry *g = &c->geom;
  ch->request_id = q->request_id;
  ch->first_block = q->first_block;
  const size_t bytes = (size_t)q->num_blocks * g->block_bytes, limit = serve_limit(c);
  if (bytes > limit) {
    snprintf(why, cap, "%d blocks of %zu bytes exceed a chunk's %zu: ask for at most %zu", q->num_blocks,
             g->block_bytes, limit, limit / g->block_bytes);
    ch->status = LLB_KV_TRANSFER_ERROR;
    return;
  }
  if (serve_reserve(c, bytes)) {
    snprintf(why, cap, "%s", llb_err_last());
    ch->status = LLB_KV_TRANSFER_ERROR;
    return;
  }
  int32_t num_tokens = 0;
  uint64_t gen = 0;
  ch->status = (int32_t)kv_export_fetch(c->exports, q->request_id.data, q->generation, q->first_block, q->num_blocks,
                                        llb_now_ns(), read_block, c, c->serve_data, g->block_bytes, &num_tokens, &gen,
                                        why, cap);
  ch->generation = ch->status == LLB_KV_TRANSFER_NOT_READY ? 0 : gen;
  if (ch->status != LLB_KV_TRANSFER_OK) return;
  *ch = (struct llb_kv_transfer_chunk){
      .request_id = q->request_id, .first_block = q->first_block, .num_blocks = q->num_blocks,
      .block_size = g->block_size, .num_layers = g->num_layers, .num_kv_heads = g->num_kv_heads,
      .head_dim = g->head_dim, .kv_cache_dtype = (uint8_t)g->dtype, .block_bytes = (uint32_t)g->block_bytes,
      .num_tokens = num_tokens, .data = c->serve_data, .data_len = bytes, .status = LLB_KV_TRANSFER_OK,
      .generation = gen};
}

llb_status kv_connector_serve(struct kv_connector *c, const uint8_t *req, size_t len, struct llb_buf *reply) {
  /* read before the export is looked up: a NotReady naming step n means the exports of steps up
   * to n were registered before the lookup (kv_fetcher.c counts on it) */
  const uint64_t steps = atomic_load(&c->steps_begun);
  const bool busy = atomic_load(&c->busy);
  pthread_mutex_lock(&c->serve_mu);
  llb_arena_reset(&c->serve_arena);
  struct llb_kv_fetch_request q;
  struct llb_kv_transfer_chunk ch = {0};
  char why[512] = "";
  const llb_status bad = llb_kv_fetch_request_decode(req, len, &c->serve_arena, &q);
  if (bad) {
    snprintf(why, sizeof why, "%s", llb_err_last());
    ch = (struct llb_kv_transfer_chunk){.request_id = llb_str_c("?"), .status = LLB_KV_TRANSFER_ERROR};
  } else {
    serve_fetch(c, &q, &ch, why, sizeof why);
  }
  if (ch.status != LLB_KV_TRANSFER_OK) {
    /* the codec's status for an undecodable request, else "not served" */
    ch.error = (struct llb_error_info){.code = bad ? (int32_t)bad : LLB_STATUS_NOT_FOUND, .message = llb_str_c(why)};
    atomic_fetch_add(&c->fetches_refused, 1);
    if (ch.status != LLB_KV_TRANSFER_NOT_READY)
      LLB_LOG_WARN("kv_fetch_refused", "req_id=%s status=%s err=\"%s\"", ch.request_id.data,
                   llb_kv_transfer_status_name(ch.status), why);
  } else {
    atomic_fetch_add(&c->fetches_served, 1);
    atomic_fetch_add(&c->bytes_sent, ch.data_len);
  }
  ch.incarnation = c->incarnation;
  ch.worker_steps = steps;
  ch.worker_busy = busy;
  llb_status st = llb_kv_transfer_chunk_encode_buf(&ch, reply);
  pthread_mutex_unlock(&c->serve_mu);
  return st;
}

bool kv_connector_release(struct kv_connector *c, const uint8_t *msg, size_t len) {
  struct llb_arena arena;
  llb_arena_init(&arena, NULL, 0);
  struct llb_kv_fetch_request q;
  const bool release = llb_kv_fetch_request_decode(msg, len, &arena, &q) == LLB_STATUS_OK && q.last &&
                       q.num_blocks == 0;
  if (release) {
    if (kv_export_release(c->exports, q.request_id.data, q.generation) == LLB_STATUS_OK)
      LLB_LOG_DEBUG("kv_export_released", "req_id=%s generation=%llu", q.request_id.data,
                    (unsigned long long)q.generation);
    else
      LLB_LOG_WARN("kv_release_refused", "req_id=%s err=\"%s\"", q.request_id.data, llb_err_last());
  }
  llb_arena_destroy(&arena);
  return release;
}

static void on_kv_fetch(struct bus *bus, const struct bus_msg *msg, void *user) {
  struct kv_connector *c = user;
  if (kv_connector_release(c, msg->data, msg->len)) return;
  if (!msg->reply) {
    atomic_fetch_add(&c->fetches_refused, 1);
    LLB_LOG_WARN("gpu_worker_no_reply", "subject=%s bytes=%zu: a KVFetchRequest needs a reply subject", msg->subject,
                 msg->len);
    return;
  }
  struct llb_buf reply = {0};
  llb_status st = kv_connector_serve(c, msg->data, msg->len, &reply);
  if (!st) st = bus_respond(bus, msg, reply.data, reply.len, NULL);
  if (st) LLB_LOG_ERROR("kv_fetch_reply", "bytes=%zu err=\"%s\"", reply.len, llb_err_last());
  llb_buf_free(&reply);
}

llb_status kv_connector_start(struct kv_connector *c, struct bus *bus) {
  c->bus = bus;
  llb_status st = bus_subject_kv_fetch(bus_prefix(bus), c->engine_id, c->subject, sizeof c->subject);
  struct bus_sub *sub = NULL;
  if (!st) st = bus_subscribe(bus, c->subject, NULL, on_kv_fetch, c, &sub);
  if (!st) atomic_store(&c->sub, sub);
  if (!st) st = kv_fetcher_start(c->fetcher, bus);
  if (!st)
    LLB_LOG_INFO("gpu_worker_subscribed", "kv_fetch=%s block_bytes=%zu", c->subject, c->geom.block_bytes);
  return st;
}

void kv_connector_stop(struct kv_connector *c) {
  if (!c) return;
  kv_fetcher_stop(c->fetcher);
  struct bus_sub *sub = atomic_exchange(&c->sub, NULL);
  if (sub) (void)bus_unsubscribe(sub); /* fails only when the drain already ended it */
}

static bool str_is(struct llb_str s) { return s.len > 0 && s.data; }

llb_status kv_connector_before_step(struct kv_connector *c, const struct llb_kv_connector_metadata *m,
                                    const struct llb_str *finished, int32_t num_finished) {
  const int64_t now = llb_now_ns();
  kv_export_expire(c->exports, now);
  for (int32_t i = 0; i < num_finished; i++)
    if (str_is(finished[i])) kv_fetcher_cancel(c->fetcher, finished[i].data, finished[i].len);
  if (m && m->epoch != 0 && m->epoch != c->epoch) { /* before the step can reuse their blocks */
    const int32_t n = kv_export_cancel_all(c->exports);
    if (n > 0)
      LLB_LOG_WARN("kv_exports_cancelled", "exports=%d epoch=%llu: the scheduler no longer holds their blocks", n,
                   (unsigned long long)m->epoch);
    c->epoch = m->epoch;
  }
  for (int32_t i = 0; m && i < m->num_reqs_to_send; i++) {
    const struct llb_kv_send_request *q = &m->reqs_to_send[i];
    llb_status st = kv_export_add(c->exports, q, now);
    if (st == LLB_STATUS_OUT_OF_MEMORY) return st;
    atomic_fetch_add(st ? &c->exports_refused : &c->exports_added, 1);
    if (st) LLB_LOG_WARN("kv_export_refused", "req_id=%.*s err=\"%s\"", (int)q->req_id.len, q->req_id.data, llb_err_last());
  }
  for (int32_t i = 0; m && i < m->num_reqs_to_recv; i++) {
    const struct llb_kv_recv_request *q = &m->reqs_to_recv[i];
    llb_status st = kv_fetcher_submit(c->fetcher, q);
    if (st == LLB_STATUS_OUT_OF_MEMORY) return st;
    if (st) LLB_LOG_WARN("kv_recv_refused", "req_id=%.*s err=\"%s\"", (int)q->req_id.len, q->req_id.data, llb_err_last());
  }
  if (m) { /* the step's exports are registered: what a fetch's NotReady counts on */
    atomic_store(&c->busy, true);
    atomic_fetch_add(&c->steps_begun, 1);
  }
  return LLB_STATUS_OK;
}

/* Points out_ids[*n..] at ids (NUL-terminated strings) and returns the first of them. */
static const struct llb_str *put_ids(struct kv_connector *c, int32_t *n, const char *const *ids, int32_t k) {
  const struct llb_str *first = c->out_ids + *n;
  for (int32_t i = 0; i < k; i++) c->out_ids[(*n)++] = llb_str_c(ids[i]);
  return k ? first : NULL;
}

void kv_connector_after_step(struct kv_connector *c, struct llb_kv_connector_output *out) {
  *out = (struct llb_kv_connector_output){0};
  atomic_store(&c->busy, false);
  kv_export_expire(c->exports, llb_now_ns());
  const char *const *sending, *const *recving, *const *failed;
  int32_t num_recving, num_failed;
  const int32_t num_sending = kv_export_take_ended(c->exports, &sending);
  kv_fetcher_take_done(c->fetcher, &recving, &num_recving, &failed, &num_failed);
  const int32_t total = num_sending + num_recving + num_failed;
  if (total > c->out_cap) {
    struct llb_str *p = realloc(c->out_ids, (size_t)total * sizeof *p);
    if (!p) { /* the ids are lost: the scheduler times those requests out */
      LLB_LOG_ERROR("kv_connector_output_lost", "ids=%d: out of memory", total);
      return;
    }
    c->out_ids = p;
    c->out_cap = total;
  }
  int32_t n = 0;
  out->finished_sending = put_ids(c, &n, sending, num_sending);
  out->num_finished_sending = num_sending;
  out->finished_recving = put_ids(c, &n, recving, num_recving);
  out->num_finished_recving = num_recving;
  out->failed_recving = put_ids(c, &n, failed, num_failed);
  out->num_failed_recving = num_failed;
}

bool kv_connector_busy(struct kv_connector *c) {
  int32_t reqs;
  int64_t blocks;
  kv_export_counts(c->exports, &reqs, &blocks);
  return reqs > 0 || kv_fetcher_pending(c->fetcher) > 0;
}

void kv_connector_stats(const struct kv_connector *c, struct kv_connector_stats *out) {
  struct kv_fetcher_stats fs;
  kv_fetcher_stats(c->fetcher, &fs);
  *out = (struct kv_connector_stats){
      .exports = atomic_load(&c->exports_added), .exports_refused = atomic_load(&c->exports_refused),
      .fetches_served = atomic_load(&c->fetches_served), .fetches_refused = atomic_load(&c->fetches_refused),
      .bytes_sent = atomic_load(&c->bytes_sent), .recvs_finished = fs.finished, .recvs_failed = fs.failed,
      .bytes_received = fs.bytes_received, .chunks_retried = fs.chunks_retried};
}

void kv_connector_destroy(struct kv_connector *c) {
  if (!c) return;
  kv_connector_stop(c);
  kv_fetcher_destroy(c->fetcher);
  kv_export_destroy(c->exports);
  free(c->out_ids);
  free(c->serve_data);
  llb_arena_destroy(&c->serve_arena);
  pthread_mutex_destroy(&c->serve_mu);
  free(c);
}
