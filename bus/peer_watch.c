/* Peer watch: heartbeat observations -> fine / replaced / missing (see peer_watch.h). */
#include "bus/peer_watch.h"

#include <stdlib.h>
#include <string.h>

struct peer_instance {
  char id[PEER_WATCH_INSTANCE_MAX + 1]; /* "" = none */
  int32_t pid;
};

struct peer_watch {
  struct peer_watch_config cfg;
  int64_t missing_after_ns;
  struct peer_instance cur, prev;
  uint64_t last_seq;
  int64_t last_beat_ns;
  int64_t last_replaced_ns; /* 0 = never */
  bool seen, missing, ready;
};

llb_status peer_watch_create(const struct peer_watch_config *cfg, struct peer_watch **out) {
  if (!cfg || !out || cfg->interval_ms < 1 || cfg->max_missed_beats < 1 ||
      cfg->interval_ms > INT64_MAX / 1000000 / cfg->max_missed_beats)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "peer watch: interval_ms and max_missed_beats must be >= 1 "
                    "(and their product in range)");
  struct peer_watch *w = calloc(1, sizeof(*w));
  if (!w) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "peer watch");
  w->cfg = *cfg;
  w->missing_after_ns = cfg->interval_ms * cfg->max_missed_beats * 1000000;
  *out = w;
  return LLB_STATUS_OK;
}

void peer_watch_destroy(struct peer_watch *w) { free(w); }

static bool same_instance(const struct peer_instance *p, const char *id, int32_t pid) {
  return p->id[0] && p->pid == pid && strcmp(p->id, id) == 0;
}

static void accept_beat(struct peer_watch *w, const struct peer_beat *b, int64_t now_ns) {
  w->last_seq = b->seq;
  w->last_beat_ns = now_ns;
  w->ready = b->ready;
  w->missing = false;
  w->seen = true;
}

enum peer_watch_verdict peer_watch_observe(struct peer_watch *w, const struct peer_beat *b, int64_t now_ns) {
  if (!w || !b || !b->instance || b->pid < 1) return PEER_WATCH_VERDICT_IGNORED;
  const size_t n = strnlen(b->instance, PEER_WATCH_INSTANCE_MAX + 1);
  if (n == 0 || n > PEER_WATCH_INSTANCE_MAX) return PEER_WATCH_VERDICT_IGNORED;
  if (!w->seen) {
    memcpy(w->cur.id, b->instance, n + 1);
    w->cur.pid = b->pid;
    accept_beat(w, b, now_ns);
    return PEER_WATCH_VERDICT_FIRST;
  }
  if (same_instance(&w->cur, b->instance, b->pid)) {
    if (b->seq <= w->last_seq) return PEER_WATCH_VERDICT_IGNORED;
    const bool was_missing = w->missing;
    accept_beat(w, b, now_ns);
    return was_missing ? PEER_WATCH_VERDICT_BACK : PEER_WATCH_VERDICT_FINE;
  }
  if (same_instance(&w->prev, b->instance, b->pid)) return PEER_WATCH_VERDICT_IGNORED;
  /* at most one replacement per interval: forged beats naming ever new instances cannot make
   * the caller recover more often than that; a real new instance beats again one interval
   * later and is reported then */
  if (w->last_replaced_ns && now_ns - w->last_replaced_ns < w->cfg.interval_ms * 1000000)
    return PEER_WATCH_VERDICT_IGNORED;
  w->last_replaced_ns = now_ns;
  w->prev = w->cur;
  memcpy(w->cur.id, b->instance, n + 1);
  w->cur.pid = b->pid;
  accept_beat(w, b, now_ns);
  return PEER_WATCH_VERDICT_REPLACED;
}

enum peer_watch_verdict peer_watch_check(struct peer_watch *w, int64_t now_ns) {
  if (!w || !w->seen || w->missing || now_ns - w->last_beat_ns <= w->missing_after_ns)
    return PEER_WATCH_VERDICT_FINE;
  w->missing = true;
  return PEER_WATCH_VERDICT_MISSING;
}

int64_t peer_watch_next_check_ns(const struct peer_watch *w) {
  if (!w || !w->seen || w->missing) return INT64_MAX;
  return w->last_beat_ns + w->missing_after_ns + 1;
}

int64_t peer_watch_missing_after_ms(const struct peer_watch *w) { return w ? w->missing_after_ns / 1000000 : 0; }

void peer_watch_get(const struct peer_watch *w, struct peer_watch_view *out) {
  *out = (struct peer_watch_view){.seen = w->seen, .missing = w->missing, .ready = w->ready,
                                  .instance = w->cur.id, .pid = w->cur.pid,
                                  .prev_instance = w->prev.id, .prev_pid = w->prev.pid,
                                  .last_beat_ns = w->last_beat_ns};
}

const char *peer_watch_verdict_name(enum peer_watch_verdict v) {
  switch (v) {
  case PEER_WATCH_VERDICT_FINE: return "fine";
  case PEER_WATCH_VERDICT_FIRST: return "first";
  case PEER_WATCH_VERDICT_REPLACED: return "replaced";
  case PEER_WATCH_VERDICT_MISSING: return "missing";
  case PEER_WATCH_VERDICT_BACK: return "back";
  case PEER_WATCH_VERDICT_IGNORED: return "ignored";
  }
  return "unknown";
}
