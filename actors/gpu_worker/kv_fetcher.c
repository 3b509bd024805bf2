/* The KV connector's background fetcher (kv_fetcher.h). */
#include "actors/gpu_worker/kv_fetcher.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "bus/subject.h"
#include "schemas/kv_transfer.h"

struct job {
  char id[LLB_KV_REQ_ID_MAX + 1];
  char remote_engine[BUS_TOKEN_MAX + 1];
  char remote_id[LLB_KV_REQ_ID_MAX + 1];
  int32_t *blocks; /* [num_blocks] local block ids */
  int32_t num_blocks, first, num_tokens;
  uint64_t generation; /* the export's, from its first reply naming one (0 before); fetch thread only */
  uint64_t incarnation; /* the exporting worker's, from its first reply naming one (0 before); fetch thread only */
  uint64_t steps_at_not_ready; /* its worker_steps at this receive's first NotReady naming them (0: none); fetch thread only */
  int64_t deadline_ns;
  bool cancelled; /* under mu */
  struct job *next;
};

struct id_list {
  char **ids;
  int32_t n, cap;
};

/* One fetch thread and what it alone uses. */
struct worker {
  struct kv_fetcher *f;
  pthread_t tid;
  struct job *running; /* under mu */
  struct llb_buf req_buf;
  struct llb_arena arena;
};

struct kv_fetcher {
  struct kv_fetcher_config cfg;
  kv_fetcher_write_fn write;
  void *user;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: new job, stop */
  struct job *head, *tail;
  int32_t num_queued, num_started;
  bool stop;
  struct worker workers[KV_FETCHER_MAX_THREADS]; /* [cfg.num_threads] */
  struct bus *bus;
  struct id_list finished, failed, taken_finished, taken_failed;
  struct kv_fetcher_stats stats;
};

/* CHUNK_NOT_READY_BUSY: NotReady while a step executes on the exporting worker (the step that
 * carries the export may be queued behind it) */
enum chunk_outcome { CHUNK_WRITTEN, CHUNK_NO_REPLY, CHUNK_NOT_READY, CHUNK_NOT_READY_BUSY, CHUNK_FAILED };

static void list_free(struct id_list *l) {
  for (int32_t i = 0; i < l->n; i++) free(l->ids[i]);
  free(l->ids);
  *l = (struct id_list){0};
}

/* Appends a copy of id (under mu). Out of memory loses the id (logged): the scheduler then
 * waits for it until its own timeout. */
static void list_push(struct id_list *l, const char *id) {
  if (l->n == l->cap) {
    const int32_t cap = l->cap ? 2 * l->cap : 16;
    char **p = realloc(l->ids, (size_t)cap * sizeof *p);
    if (!p) goto oom;
    l->ids = p;
    l->cap = cap;
  }
  if (!(l->ids[l->n] = strdup(id))) goto oom;
  l->n++;
  return;
oom:
  LLB_LOG_ERROR("kv_fetch_report_lost", "req_id=%s: out of memory", id);
}

static void job_free(struct job *j) {
  if (!j) return;
  free(j->blocks);
  free(j);
}

llb_status kv_fetcher_create(const struct kv_fetcher_config *cfg, kv_fetcher_write_fn write, void *user,
                             struct kv_fetcher **out) {
  if (!cfg || !write || cfg->fetch_timeout_ms < 1 || cfg->transfer_timeout_ms < 1 ||
      cfg->not_ready_timeout_ms < 1 || cfg->max_attempts < 1 ||
      cfg->retry_ms < 1 || cfg->geometry.block_bytes < 1 || cfg->geometry.num_blocks < 1 || cfg->num_threads < 1 ||
      cfg->num_threads > KV_FETCHER_MAX_THREADS)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "kv fetcher: timeouts, attempts and geometry must be >= 1, "
                    "threads 1..%d", KV_FETCHER_MAX_THREADS);
  struct kv_fetcher *f = calloc(1, sizeof *f);
  if (!f) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "kv fetcher");
  f->cfg = *cfg;
  f->write = write;
  f->user = user;
  pthread_mutex_init(&f->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&f->cv, &ca);
  pthread_condattr_destroy(&ca);
  for (int32_t i = 0; i < cfg->num_threads; i++) {
    f->workers[i].f = f;
    llb_arena_init(&f->workers[i].arena, NULL, 0);
  }
  *out = f;
  return LLB_STATUS_OK;
}

/* Waits up to ms on cv (under mu) unless stopping. */
static void wait_ms(struct kv_fetcher *f, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t ns = (int64_t)ts.tv_nsec + ms * 1000000;
  ts.tv_sec += (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  if (!f->stop) pthread_cond_timedwait(&f->cv, &f->mu, &ts);
}

static bool geometry_matches(const struct model_runner_kv_geometry *g, const struct llb_kv_transfer_chunk *c) {
  return c->block_size == g->block_size && c->num_layers == g->num_layers && c->num_kv_heads == g->num_kv_heads &&
         c->head_dim == g->head_dim && c->kv_cache_dtype == (uint8_t)g->dtype && c->block_bytes == g->block_bytes;
}

/* What arrived answers what was asked, in a cache like ours. */
static bool chunk_answers(const struct kv_fetcher *f, const struct job *j, const struct llb_kv_transfer_chunk *c,
                          int32_t first, int32_t k, char *why, size_t cap) {
  const struct model_runner_kv_geometry *g = &f->cfg.geometry;
  if (j->generation != 0 && c->generation != j->generation) {
    snprintf(why, cap, "chunk of export %s generation %llu answers generation %llu", c->request_id.data,
             (unsigned long long)c->generation, (unsigned long long)j->generation);
    return false;
  }
  if (strcmp(c->request_id.data, j->remote_id) != 0 || c->first_block != first || c->num_blocks != k ||
      c->num_tokens != j->num_tokens) {
    snprintf(why, cap, "chunk of %s blocks [%d, +%d) of %d tokens answers %s [%d, +%d) of %d tokens",
             c->request_id.data, c->first_block, c->num_blocks, c->num_tokens, j->remote_id, first, k,
             j->num_tokens);
    return false;
  }
  if (!geometry_matches(g, c)) {
    snprintf(why, cap,
             "geometry mismatch: remote blocks of %d tokens, %d layers, %d kv heads, head_dim %d, dtype %u, %u bytes; "
             "ours %d, %d, %d, %d, %u, %zu",
             c->block_size, c->num_layers, c->num_kv_heads, c->head_dim, c->kv_cache_dtype, c->block_bytes,
             g->block_size, g->num_layers, g->num_kv_heads, g->head_dim, (unsigned)g->dtype, g->block_bytes);
    return false;
  }
  return true;
}

/* Writes the chunk's blocks unless the receive was cancelled (under mu: cancel is synchronous). */
static bool write_blocks(struct kv_fetcher *f, struct job *j, const struct llb_kv_transfer_chunk *c, int32_t done,
                         char *why, size_t cap) {
  bool ok = true;
  pthread_mutex_lock(&f->mu);
  if (j->cancelled || f->stop) {
    snprintf(why, cap, "cancelled");
    ok = false;
  }
  for (int32_t i = 0; ok && i < c->num_blocks; i++) {
    llb_status st = f->write(f->user, j->blocks[done + i], c->data + (size_t)i * c->block_bytes);
    if (st) {
      snprintf(why, cap, "writing local block %d: %s", j->blocks[done + i], llb_err_last());
      ok = false;
    }
  }
  if (ok) f->stats.bytes_received += c->data_len;
  pthread_mutex_unlock(&f->mu);
  return ok;
}

/* Whether reply c comes from the worker that answered this receive before: the first reply
 * naming an incarnation pins it; another one later means the exporting worker restarted and
 * every export it held went with it (a NotReady from its successor would otherwise be asked
 * again until not_ready_timeout_ms); no release is sent then (the successor holds nothing of
 * ours). A reply naming none (an exporter older than the field) is taken as it is. */
static bool same_exporter(struct job *j, const struct llb_kv_transfer_chunk *c, char *why, size_t cap) {
  if (c->incarnation == 0) return true;
  if (j->incarnation == 0) j->incarnation = c->incarnation;
  if (c->incarnation == j->incarnation) return true;
  snprintf(why, cap, "the exporting worker restarted (incarnation %016llx, then %016llx): its exports are gone",
           (unsigned long long)j->incarnation, (unsigned long long)c->incarnation);
  j->generation = 0;
  return false;
}

/* What a NotReady reply c means for the receive (`done` blocks written). The export can no longer
 * come (CHUNK_FAILED) when it was there before (its generation is gone: they are never reused) or
 * when the exporting worker has begun two more steps since this receive's first NotReady: P's
 * scheduler hands a request off, then sends its export with the next step it builds, which with
 * asynchronous scheduling is the second after the one in flight, so an export still missing then
 * was never sent (its scheduler restarted, or dropped the step). Otherwise CHUNK_NOT_READY_BUSY
 * while a step executes there (the export may wait behind it), else CHUNK_NOT_READY. */
static enum chunk_outcome not_ready(struct job *j, const struct llb_kv_transfer_chunk *c, int32_t done, char *why,
                                    size_t cap) {
  char last[256];
  snprintf(last, sizeof last, "%.200s", c->error.message.data);
  if (done > 0 || j->generation != 0) {
    snprintf(why, cap, "the export is gone after %d blocks (%s)", done, last);
    return CHUNK_FAILED;
  }
  if (c->worker_steps != 0 && j->steps_at_not_ready == 0) j->steps_at_not_ready = c->worker_steps;
  if (j->steps_at_not_ready != 0 && c->worker_steps >= j->steps_at_not_ready + 2) {
    snprintf(why, cap, "not exported after the exporting worker began %llu more steps (%s): never sent",
             (unsigned long long)(c->worker_steps - j->steps_at_not_ready), last);
    return CHUNK_FAILED;
  }
  snprintf(why, cap, "%s", last);
  return c->worker_busy ? CHUNK_NOT_READY_BUSY : CHUNK_NOT_READY;
}

/* One request/reply: blocks [done, done + k) of the receive. */
static enum chunk_outcome fetch_chunk(struct worker *w, struct job *j, const char *subject, int32_t done, int32_t k,
                                      char *why, size_t cap) {
  struct kv_fetcher *f = w->f;
  /* the generation once a reply named it: a later export of the same id refuses these fetches. The
   * release ends the export (kv_export.h); `last` only tells an older exporter to end it now */
  const struct llb_kv_fetch_request q = {.request_id = llb_str_c(j->remote_id), .first_block = j->first + done,
                                         .num_blocks = k, .last = done + k == j->num_blocks,
                                         .generation = j->generation};
  llb_status st = llb_kv_fetch_request_encode_buf(&q, &w->req_buf);
  if (st) {
    snprintf(why, cap, "encoding the fetch: %s", llb_err_last());
    return CHUNK_FAILED;
  }
  int64_t left_ms = (j->deadline_ns - llb_now_ns()) / 1000000;
  if (left_ms > f->cfg.fetch_timeout_ms) left_ms = f->cfg.fetch_timeout_ms;
  struct bus_msg *reply = NULL;
  st = bus_request(f->bus, subject, w->req_buf.data, w->req_buf.len, NULL, left_ms > 0 ? left_ms : 1, &reply);
  if (st == LLB_STATUS_TIMEOUT || st == LLB_STATUS_NOT_FOUND) {
    snprintf(why, cap, "%s", llb_err_last());
    return CHUNK_NO_REPLY;
  }
  if (st) {
    snprintf(why, cap, "fetch request: %s", llb_err_last());
    return CHUNK_FAILED;
  }
  llb_arena_reset(&w->arena);
  struct llb_kv_transfer_chunk c;
  st = llb_kv_transfer_chunk_decode(reply->data, reply->len, &w->arena, &c);
  bus_msg_destroy(reply);
  if (st) {
    snprintf(why, cap, "bad chunk: %s", llb_err_last());
    return CHUNK_FAILED;
  }
  if (!same_exporter(j, &c, why, cap)) return CHUNK_FAILED;
  if (j->generation == 0 && c.generation != 0 && !strcmp(c.request_id.data, j->remote_id))
    j->generation = c.generation; /* this receive's export from now on (an error reply names it too) */
  if (c.status == LLB_KV_TRANSFER_NOT_READY) return not_ready(j, &c, done, why, cap);
  if (c.status != LLB_KV_TRANSFER_OK) {
    snprintf(why, cap, "%s: %s", llb_kv_transfer_status_name(c.status), c.error.message.data);
    return CHUNK_FAILED;
  }
  if (!chunk_answers(f, j, &c, j->first + done, k, why, cap) || !write_blocks(f, j, &c, done, why, cap))
    return CHUNK_FAILED;
  return CHUNK_WRITTEN;
}

/* Data bytes of one chunk: the configured limit, or the server's max_payload less the header's
 * room; never over what a message may carry. */
static size_t chunk_bytes(const struct kv_fetcher *f) {
  size_t b = f->cfg.max_chunk_bytes;
  if (!b) {
    const int64_t mp = bus_max_payload(f->bus);
    b = mp > 32 * 1024 ? (size_t)mp - 16 * 1024 : 0;
  }
  return b < LLB_KV_MAX_CHUNK_DATA_BYTES ? b : LLB_KV_MAX_CHUNK_DATA_BYTES;
}

static bool stopping(struct kv_fetcher *f, const struct job *j) {
  pthread_mutex_lock(&f->mu);
  const bool s = f->stop || j->cancelled;
  pthread_mutex_unlock(&f->mu);
  return s;
}

/* Counts a retry and waits ms before it (unless stopping). */
static void retry_after(struct kv_fetcher *f, int64_t ms) {
  pthread_mutex_lock(&f->mu);
  f->stats.chunks_retried++;
  wait_ms(f, ms);
  pthread_mutex_unlock(&f->mu);
}

/* Runs one receive to its end; false with why[] on failure. */
static bool run_job(struct worker *w, struct job *j, char *why, size_t cap) {
  struct kv_fetcher *f = w->f;
  const size_t block_bytes = f->cfg.geometry.block_bytes, limit = chunk_bytes(f);
  const int32_t per = (int32_t)(limit / block_bytes < (size_t)LLB_KV_MAX_BLOCKS_PER_REQ ? limit / block_bytes
                                                                                         : LLB_KV_MAX_BLOCKS_PER_REQ);
  if (per < 1) {
    snprintf(why, cap, "a block of %zu bytes does not fit a chunk of %zu (the bus's max_payload)", block_bytes, limit);
    return false;
  }
  char subject[BUS_SUBJECT_MAX];
  if (bus_subject_kv_fetch(bus_prefix(f->bus), j->remote_engine, subject, sizeof subject)) {
    snprintf(why, cap, "%s", llb_err_last());
    return false;
  }
  int32_t done = 0, attempts = 0;
  int64_t not_ready_since = 0; /* the first NotReady of the current run of them with the exporter idle (0: none) */
  while (done < j->num_blocks) {
    if (stopping(f, j)) {
      snprintf(why, cap, "cancelled after %d of %d blocks", done, j->num_blocks);
      return false;
    }
    if (llb_now_ns() >= j->deadline_ns) {
      char last[256];
      snprintf(last, sizeof last, "%.200s", why);
      snprintf(why, cap, "deadline passed after %d of %d blocks (last: %s)", done, j->num_blocks, last);
      return false;
    }
    const int32_t k = j->num_blocks - done < per ? j->num_blocks - done : per;
    switch (fetch_chunk(w, j, subject, done, k, why, cap)) {
    case CHUNK_WRITTEN:
      done += k;
      attempts = 0;
      not_ready_since = 0;
      break;
    case CHUNK_NO_REPLY:
      if (++attempts >= f->cfg.max_attempts) return false;
      retry_after(f, f->cfg.retry_ms);
      break;
    case CHUNK_NOT_READY_BUSY: /* the clock runs only while the exporting worker idles */
      not_ready_since = 0;
      attempts = 0;
      retry_after(f, f->cfg.retry_ms);
      break;
    case CHUNK_NOT_READY:
      attempts = 0; /* a reply: max_attempts counts unanswered requests in a row */
      if (!not_ready_since) not_ready_since = llb_now_ns();
      if (llb_now_ns() - not_ready_since >= f->cfg.not_ready_timeout_ms * 1000000) {
        char last[256];
        snprintf(last, sizeof last, "%.200s", why);
        snprintf(why, cap, "still not exported after %lld ms of NotReady with its worker idle (%s): its scheduler "
                 "restarted?",
                 (long long)f->cfg.not_ready_timeout_ms, last);
        return false;
      }
      retry_after(f, f->cfg.retry_ms);
      break;
    case CHUNK_FAILED:
      return false;
    }
  }
  return true;
}

/* Tells the exporting worker that this receive, finished or failed, needs nothing more of export
 * generation `gen` (a KVFetchRequest of no blocks, last; published, no reply): it ends the export
 * and its blocks are freed there now, not at its expiry. Best effort: a lost release leaves the
 * expiry to do it. Nothing is sent without a generation (no reply named one: no export was
 * found, or the exporter predates generations and ended it on the last fetch itself). */
static void release_export(struct kv_fetcher *f, const char *remote_engine, const char *remote_id, uint64_t gen) {
  if (gen == 0) return;
  char subject[BUS_SUBJECT_MAX];
  struct llb_buf buf = {0};
  const struct llb_kv_fetch_request q = {.request_id = llb_str_c(remote_id), .num_blocks = 0, .last = true,
                                         .generation = gen};
  if (!f->bus || bus_subject_kv_fetch(bus_prefix(f->bus), remote_engine, subject, sizeof subject) ||
      llb_kv_fetch_request_encode_buf(&q, &buf) || bus_publish(f->bus, subject, buf.data, buf.len, NULL))
    LLB_LOG_DEBUG("kv_release_failed", "remote=%s/%s err=\"%s\"", remote_engine, remote_id, llb_err_last());
  llb_buf_free(&buf);
}

static void *fetch_thread(void *arg) {
  struct worker *w = arg;
  struct kv_fetcher *f = w->f;
  pthread_mutex_lock(&f->mu);
  while (!f->stop) {
    struct job *j = f->head;
    if (!j) {
      pthread_cond_wait(&f->cv, &f->mu);
      continue;
    }
    f->head = j->next;
    if (!f->head) f->tail = NULL;
    f->num_queued--;
    w->running = j;
    pthread_mutex_unlock(&f->mu);
    char why[512] = "";
    const int64_t t0 = llb_now_ns();
    const bool ok = run_job(w, j, why, sizeof why);
    pthread_mutex_lock(&f->mu);
    /* finished or failed: P holds the export until released and this receive wants no more of
     * it. Not when cancelled: the request may fetch it again (a restarted scheduler admits the
     * hand-off anew) */
    const bool release = ok || (!j->cancelled && !f->stop);
    pthread_mutex_unlock(&f->mu);
    if (release) release_export(f, j->remote_engine, j->remote_id, j->generation);
    pthread_mutex_lock(&f->mu);
    w->running = NULL;
    list_push(ok ? &f->finished : &f->failed, j->id);
    (*(ok ? &f->stats.finished : &f->stats.failed))++;
    if (ok)
      LLB_LOG_DEBUG("kv_fetch_finished", "req_id=%s remote=%s/%s blocks=%d ms=%.3f", j->id, j->remote_engine,
                    j->remote_id, j->num_blocks, (double)(llb_now_ns() - t0) / 1e6);
    else
      LLB_LOG_WARN("kv_fetch_failed", "req_id=%s remote=%s/%s blocks=%d err=\"%s\"", j->id, j->remote_engine,
                   j->remote_id, j->num_blocks, why);
    job_free(j);
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

llb_status kv_fetcher_start(struct kv_fetcher *f, struct bus *bus) {
  if (f->num_started) return LLB_STATUS_OK;
  f->bus = bus;
  for (; f->num_started < f->cfg.num_threads; f->num_started++)
    if (pthread_create(&f->workers[f->num_started].tid, NULL, fetch_thread, &f->workers[f->num_started]) != 0) {
      kv_fetcher_stop(f);
      return LLB_ERRF(LLB_STATUS_INTERNAL, "kv fetcher thread");
    }
  return LLB_STATUS_OK;
}


static bool id_is(const char *id, const char *s, size_t len) { return strlen(id) == len && memcmp(id, s, len) == 0; }

/* Under mu: the job of id s[len] a fetch thread runs, or NULL. */
static struct job *running_job(struct kv_fetcher *f, const char *s, size_t len) {
  for (int32_t i = 0; i < f->cfg.num_threads; i++)
    if (f->workers[i].running && id_is(f->workers[i].running->id, s, len)) return f->workers[i].running;
  return NULL;
}

/* Under mu: a receive of id queued or running. */
static bool held(struct kv_fetcher *f, const char *s, size_t len) {
  if (running_job(f, s, len)) return true;
  for (struct job *j = f->head; j; j = j->next)
    if (id_is(j->id, s, len)) return true;
  return false;
}

static llb_status job_make(const struct kv_fetcher *f, const struct llb_kv_recv_request *r, struct job **out) {
  const int32_t nb = f->cfg.geometry.num_blocks;
  for (int32_t i = 0; i < r->num_local_block_ids; i++)
    if (r->local_block_ids[i] < 0 || r->local_block_ids[i] >= nb)
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "receive %.*s: local_block_ids[%d] = %d outside the cache's [0, %d)",
                      (int)r->req_id.len, r->req_id.data, i, r->local_block_ids[i], nb);
  if (r->num_local_block_ids < 1 || r->req_id.len > LLB_KV_REQ_ID_MAX || r->remote_request_id.len > LLB_KV_REQ_ID_MAX ||
      r->remote_engine_id.len > BUS_TOKEN_MAX || r->remote_first_block < 0)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "receive %.*s: bad ids or blocks", (int)r->req_id.len, r->req_id.data);
  struct job *j = calloc(1, sizeof *j);
  if (j) j->blocks = malloc((size_t)r->num_local_block_ids * sizeof *j->blocks);
  if (!j || !j->blocks) {
    job_free(j);
    return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "receive of %d blocks", r->num_local_block_ids);
  }
  snprintf(j->id, sizeof j->id, "%.*s", (int)r->req_id.len, r->req_id.data);
  snprintf(j->remote_engine, sizeof j->remote_engine, "%.*s", (int)r->remote_engine_id.len, r->remote_engine_id.data);
  snprintf(j->remote_id, sizeof j->remote_id, "%.*s", (int)r->remote_request_id.len, r->remote_request_id.data);
  memcpy(j->blocks, r->local_block_ids, (size_t)r->num_local_block_ids * sizeof *j->blocks);
  j->num_blocks = r->num_local_block_ids;
  j->first = r->remote_first_block;
  j->num_tokens = r->num_tokens;
  j->deadline_ns = llb_now_ns() + f->cfg.transfer_timeout_ms * 1000000;
  *out = j;
  return LLB_STATUS_OK;
}

llb_status kv_fetcher_submit(struct kv_fetcher *f, const struct llb_kv_recv_request *r) {
  struct job *j = NULL;
  llb_status st = job_make(f, r, &j);
  pthread_mutex_lock(&f->mu);
  if (!st && held(f, r->req_id.data, r->req_id.len)) {
    job_free(j);
    st = LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "receive %.*s is already running", (int)r->req_id.len, r->req_id.data);
  } else if (st) {
    char id[LLB_KV_REQ_ID_MAX + 1];
    snprintf(id, sizeof id, "%.*s", (int)r->req_id.len, r->req_id.data);
    list_push(&f->failed, id);
    f->stats.failed++;
  } else {
    if (f->tail) f->tail->next = j;
    else f->head = j;
    f->tail = j;
    f->num_queued++;
    pthread_cond_broadcast(&f->cv);
  }
  pthread_mutex_unlock(&f->mu);
  return st;
}

void kv_fetcher_cancel(struct kv_fetcher *f, const char *id, size_t id_len) {
  pthread_mutex_lock(&f->mu);
  struct job *run = running_job(f, id, id_len);
  if (run) {
    run->cancelled = true; /* its fetch thread reports it failed when it sees this */
    pthread_cond_broadcast(&f->cv);
  }
  for (struct job **p = &f->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
    struct job *j = *p;
    if (!id_is(j->id, id, id_len)) continue;
    *p = j->next;
    if (f->tail == j) f->tail = prev;
    f->num_queued--;
    list_push(&f->failed, j->id);
    f->stats.failed++;
    job_free(j);
    break;
  }
  pthread_mutex_unlock(&f->mu);
}

void kv_fetcher_take_done(struct kv_fetcher *f, const char *const **finished, int32_t *num_finished,
                          const char *const **failed, int32_t *num_failed) {
  pthread_mutex_lock(&f->mu);
  list_free(&f->taken_finished);
  list_free(&f->taken_failed);
  f->taken_finished = f->finished;
  f->taken_failed = f->failed;
  f->finished = f->failed = (struct id_list){0};
  pthread_mutex_unlock(&f->mu);
  *finished = (const char *const *)f->taken_finished.ids;
  *num_finished = f->taken_finished.n;
  *failed = (const char *const *)f->taken_failed.ids;
  *num_failed = f->taken_failed.n;
}

int32_t kv_fetcher_pending(struct kv_fetcher *f) {
  pthread_mutex_lock(&f->mu);
  int32_t n = f->num_queued;
  for (int32_t i = 0; i < f->cfg.num_threads; i++) n += f->workers[i].running != NULL;
  pthread_mutex_unlock(&f->mu);
  return n;
}

void kv_fetcher_stats(struct kv_fetcher *f, struct kv_fetcher_stats *out) {
  pthread_mutex_lock(&f->mu);
  *out = f->stats;
  pthread_mutex_unlock(&f->mu);
}

void kv_fetcher_stop(struct kv_fetcher *f) {
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  for (int32_t i = 0; i < f->num_started; i++) pthread_join(f->workers[i].tid, NULL);
  f->num_started = 0;
  pthread_mutex_lock(&f->mu);
  while (f->head) {
    struct job *j = f->head;
    f->head = j->next;
    list_push(&f->failed, j->id);
    f->stats.failed++;
    job_free(j);
  }
  f->tail = NULL;
  f->num_queued = 0;
  pthread_mutex_unlock(&f->mu);
}

void kv_fetcher_destroy(struct kv_fetcher *f) {
  if (!f) return;
  kv_fetcher_stop(f);
  list_free(&f->finished);
  list_free(&f->failed);
  list_free(&f->taken_finished);
  list_free(&f->taken_failed);
  for (int32_t i = 0; i < f->cfg.num_threads; i++) {
    llb_buf_free(&f->workers[i].req_buf);
    llb_arena_destroy(&f->workers[i].arena);
  }
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}
