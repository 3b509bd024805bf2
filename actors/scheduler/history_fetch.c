/* Requests that resume where another left off (docs/design.md §6). Two cases reach admission:
 * - a replay: a request delivered again from the durable stream after a scheduler restart
 *   carries only its prompt;
 * - a resend: a client whose reply route was lost (a nats-server restart) sent the request
 *   again naming the one it replaces (EngineCoreRequest.resume_request_id).
 * Generating their outputs again would take one step per token before the client hears
 * anything new (the output processor and the client drop what they already have). Instead
 * each is admitted with the outputs it had as its first outputs, computed as context in its
 * prefill, as after a preemption; sampling is keyed by output position, so the tokens that
 * follow are the fault-free ones. A resend takes them from the request it replaces when that
 * one still runs here (same prompt, same tenant tag), which is then finished (its outputs can
 * reach nobody; its blocks go to the prefix cache, where the resend finds them). Otherwise
 * the step thread asks the output processor, which holds every token it received, on
 * <prefix>.engine.<eid>.history (request: an AbortRequests with the ids; reply: an
 * EngineCoreOutputs, one output per request it knows, new_token_ids from position 0). No
 * answer within HISTORY_TIMEOUT_MS (it restarted too) leaves them as they are. */
#include "actors/scheduler/history_fetch.h"

#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/scheduler.h"
#include "base/hash.h"
#include "base/log.h"
#include "bus/subject.h"
#include "schemas/engine_core_outputs.h"
#include "schemas/engine_core_request.h"

#define HISTORY_TIMEOUT_MS 300

/* The tenant of a request from its cache salt, which the input processor always composes as
 * "<len>:<tenant>" then the client's salt (input_processor_cache_salt_compose): into out[cap]. */
static bool salt_tenant(const char *salt, char *out, size_t cap) {
  char *end = NULL;
  if (!salt || salt[0] < '0' || salt[0] > '9') return false;
  const unsigned long n = strtoul(salt, &end, 10);
  if (*end != ':' || n >= cap || strnlen(end + 1, n) < n) return false;
  memcpy(out, end + 1, n);
  out[n] = '\0';
  return true;
}

/* Whether m's id and the id it resumes are both of m's tenant: their tags are keyed MACs of
 * the tenant (base/hash.h), checked under the deployment's key (the input processor checked
 * the resend too; an engine takes over nothing on the word of one message). */
static bool resume_same_tenant(const struct req_meta *m, const struct llb_hash_key *key) {
  char tenant[256];
  return salt_tenant(m->cache_salt, tenant, sizeof tenant) &&
         llb_request_id_owned_by(key, m->id, strlen(m->id), tenant) &&
         llb_request_id_owned_by(key, m->resume_of, strlen(m->resume_of), tenant);
}

/* Whose outputs m resumes: its own id for a replay, the replaced one's (of its tenant) for a
 * resend; NULL for a new request, a refused one, a pooling one (no outputs) or one already
 * resumed. */
static const char *history_key(const struct req_meta *m, const struct llb_hash_key *key) {
  if (m->reject_status != LLB_STATUS_OK || m->pooling_params.pooling_type != LLB_POOLING_NONE || m->resume_ids)
    return NULL;
  if (m->resync && m->stream_seq != 0) return m->id;
  return m->resume_of && resume_same_tenant(m, key) ? m->resume_of : NULL;
}

static struct req_meta *find_meta(struct req_meta *list, const struct llb_str *id, const struct llb_hash_key *key) {
  for (struct req_meta *m = list; m; m = m->next) {
    const char *k = history_key(m, key);
    if (k && strlen(k) == id->len && memcmp(k, id->data, id->len) == 0) return m;
  }
  return NULL;
}

/* A resend whose replaced request still runs here: its outputs become m's and it finishes. */
static bool take_over(struct scheduler *sched, struct sched_engine_outputs *side, struct req_meta *m) {
  const struct sched_request *old = sched_find_request(sched, m->resume_of);
  if (!old || sched_request_is_finished(old) || old->num_prompt_tokens != m->num_prompt ||
      memcmp(old->token_ids, m->prompt, (size_t)m->num_prompt * sizeof(int32_t)) != 0)
    return false; /* history_key checked the tenant tags under the key */
  const int32_t n = sched_request_num_output_tokens(old);
  if (n > 0 && (m->resume_ids = malloc((size_t)n * sizeof *m->resume_ids))) {
    memcpy(m->resume_ids, old->token_ids + old->num_prompt_tokens, (size_t)n * sizeof *m->resume_ids);
    m->num_resume = n;
  }
  const char *ids[1] = {m->resume_of};
  (void)sched_abort_requests(sched, ids, 1, SCHED_FINISH_REASON_ABORT, side);
  m->resync = true; /* its first output carries everything from position 0: the output
                       processor registers it with the history instead of asking for it */
  LLB_LOG_INFO("request_taken_over", "req=%s replaces=%s outputs=%d", m->id, m->resume_of, m->num_resume);
  free(m->resume_of); /* done: nothing to ask the output processor */
  m->resume_of = NULL;
  return true;
}

/* Copies the history of each output into its request's meta; returns how many got one. The
 * reply is untrusted input: ids outside the vocabulary are left to the scheduler's
 * validation (which refuses the request), lengths are bounded by max_tokens there. */
static int32_t take_reply(struct req_meta *list, const struct llb_engine_core_outputs *outs,
                          const struct llb_hash_key *key) {
  int32_t n = 0;
  for (int32_t i = 0; i < outs->num_outputs; i++) {
    const struct llb_engine_core_output *o = &outs->outputs[i];
    struct req_meta *m = find_meta(list, &o->request_id, key);
    if (!m || o->first_output_pos != 0 || o->num_new_token_ids < 1) continue;
    m->resume_ids = malloc((size_t)o->num_new_token_ids * sizeof *m->resume_ids);
    if (!m->resume_ids) continue;
    memcpy(m->resume_ids, o->new_token_ids, (size_t)o->num_new_token_ids * sizeof *m->resume_ids);
    m->num_resume = o->num_new_token_ids;
    m->resync = true; /* a resend's first output too carries everything from position 0 */
    n++;
  }
  return n;
}

int32_t history_fetch(struct bus *bus, const char *engine_id, struct scheduler *sched,
                      struct sched_engine_outputs *side, struct req_meta *list) {
  int32_t num = 0, taken = 0;
  for (struct req_meta *m = list; m; m = m->next) {
    const char *k = history_key(m, sched_hash_key(sched));
    if (k && k == m->resume_of && take_over(sched, side, m)) {
      taken++;
      continue;
    }
    num += k != NULL;
  }
  if (num == 0) return taken;
  struct llb_str *ids = calloc((size_t)num, sizeof *ids);
  if (!ids) return taken;
  int32_t k = 0;
  for (struct req_meta *m = list; m && k < num; m = m->next) {
    const char *key = history_key(m, sched_hash_key(sched));
    if (key) ids[k++] = llb_str_c(key);
  }
  char subject[BUS_SUBJECT_MAX];
  struct llb_buf buf = {0};
  struct bus_msg *reply = NULL;
  const struct llb_abort_requests req = {.version = 1, .request_ids = ids, .num_request_ids = num};
  const int64_t t0 = llb_now_ns();
  llb_status st = bus_subject_engine(bus_prefix(bus), engine_id, "history", subject, sizeof subject);
  if (!st) st = llb_abort_requests_encode_buf(&req, &buf);
  if (!st) st = bus_request(bus, subject, buf.data, buf.len, NULL, HISTORY_TIMEOUT_MS, &reply);
  int32_t got = 0;
  if (!st) {
    struct llb_arena arena;
    llb_arena_init(&arena, NULL, 0);
    struct llb_engine_core_outputs outs;
    st = llb_engine_core_outputs_decode(reply->data, reply->len, &arena, &outs);
    if (!st) got = take_reply(list, &outs, sched_hash_key(sched));
    llb_arena_destroy(&arena);
  }
  char q[300];
  LLB_LOG_INFO("replay_history", "asked=%d with_history=%d status=%s error=%s ms=%.1f", num, got,
               llb_strerror(st), st ? llb_log_quote(q, sizeof q, llb_err_last()) : "\"\"",
               (double)(llb_now_ns() - t0) / 1e6);
  bus_msg_destroy(reply);
  llb_buf_free(&buf);
  free(ids);
  return taken + got;
}
