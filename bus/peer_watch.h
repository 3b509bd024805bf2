/* Peer watch: is the one instance of an actor we depend on (an engine's gpu_worker or
 * kv_manager) still the same process, and still alive? Pure logic (no NATS, no clock of its
 * own): the caller feeds it the Heartbeats it receives (schemas/control.h, already filtered to
 * the actor and engine it watches) and the time, and it answers with a verdict.
 *
 * Rules (docs/design.md §6, docs/fault-tolerance.md):
 * - REPLACED: a beat whose instance id or pid differs from the watched instance's: the watched
 *   process died or was restarted (a supervisor restart gives a new pid, hence a new default
 *   instance id). The new instance is watched from then on; a later beat of the instance it
 *   replaced (an old process still draining) is IGNORED, so two live instances cannot make
 *   the verdict flap on every beat. At most one REPLACED per interval_ms: a beat of yet
 *   another instance sooner is IGNORED (forged beats cannot make the caller recover more
 *   often; a real new instance is reported at its next beat).
 * - MISSING: no beat for MORE than max_missed_beats x interval_ms since the last one (with
 *   the defaults 3 x the heartbeat interval). Reported once, by peer_watch_check.
 * - BACK: a beat of the watched instance after MISSING.
 * - Beats are untrusted input: an empty or over-long instance id, a pid < 1 or a seq not above
 *   the instance's last one (a replay, a reordering) is IGNORED and changes nothing.
 *
 * Threading: none; the caller serializes calls (one lock around the watch).
 */
#ifndef LLB_BUS_PEER_WATCH_H
#define LLB_BUS_PEER_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define PEER_WATCH_INSTANCE_MAX 128 /* longest instance id accepted, bytes without the NUL */

struct peer_watch;

struct peer_watch_config {
  int64_t interval_ms;      /* the peer's heartbeat interval, > 0 */
  int32_t max_missed_beats; /* > 0: missing after more than this many intervals of silence */
};

/* One Heartbeat, as received. Strings are borrowed for the call. */
struct peer_beat {
  const char *instance; /* Heartbeat.instance */
  int32_t pid;          /* Heartbeat.pid */
  uint64_t seq;         /* Heartbeat.seq: increments per beat of one process */
  bool ready;           /* Heartbeat.ready */
};

enum peer_watch_verdict {
  PEER_WATCH_VERDICT_FINE,     /* nothing changed */
  PEER_WATCH_VERDICT_FIRST,    /* the first instance seen (start-up, not a failure) */
  PEER_WATCH_VERDICT_REPLACED, /* another instance than the watched one: the old one is gone */
  PEER_WATCH_VERDICT_MISSING,  /* the watched instance fell silent (reported once) */
  PEER_WATCH_VERDICT_BACK,     /* the watched instance beats again after MISSING */
  PEER_WATCH_VERDICT_IGNORED   /* the beat was refused (see the rules above) */
};

/* What the watch knows; strings valid until the next call on the watch. */
struct peer_watch_view {
  bool seen;                /* a beat was accepted */
  bool missing;             /* silent since the MISSING verdict */
  bool ready;               /* of the last accepted beat */
  const char *instance;     /* the watched instance ("" none) */
  int32_t pid;
  const char *prev_instance; /* the instance it replaced ("" none) */
  int32_t prev_pid;
  int64_t last_beat_ns;     /* caller's clock of the last accepted beat */
};

/* Creates a watch. Caller frees with peer_watch_destroy. Errors: INVALID_ARGUMENT (interval or
 * max_missed_beats < 1, or their product overflows), OUT_OF_MEMORY. */
llb_status peer_watch_create(const struct peer_watch_config *cfg, struct peer_watch **out);

/* NULL ok. */
void peer_watch_destroy(struct peer_watch *w);

/* Records one beat received at now_ns (any monotonic clock, the same for every call). */
enum peer_watch_verdict peer_watch_observe(struct peer_watch *w, const struct peer_beat *b, int64_t now_ns);

/* MISSING once when the watched instance has been silent for more than the limit at now_ns,
 * FINE otherwise (also before any beat: a peer never seen is not missing). */
enum peer_watch_verdict peer_watch_check(struct peer_watch *w, int64_t now_ns);

/* The earliest now_ns at which peer_watch_check could answer MISSING; INT64_MAX when it
 * cannot (nothing seen yet, or already missing). */
int64_t peer_watch_next_check_ns(const struct peer_watch *w);

/* Milliseconds of silence after which a peer is missing (interval x max_missed_beats). */
int64_t peer_watch_missing_after_ms(const struct peer_watch *w);

void peer_watch_get(const struct peer_watch *w, struct peer_watch_view *out);

/* "fine", "first", "replaced", "missing", "back", "ignored". */
const char *peer_watch_verdict_name(enum peer_watch_verdict v);

#endif
