/* llmbus-kv-manager: the kv_manager actor on llm.engine.<eid>.kv (actors/kv_manager). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "actors/kv_manager/actor.h"
#include "base/log.h"
#include "cmd/actor/actor_main.h"

#define KV_GEOMETRY_WAIT_MS 300000 /* a worker loading a large model onto a GPU */

struct kv_main {
  int32_t num_blocks;
  int32_t block_size;
  bool no_prefix_caching;
  struct kv_manager_actor *actor;
};

static llb_status kv_configure(struct actor_main *am, void *user) {
  (void)am;
  struct kv_main *m = user;
  if (m->num_blocks < 0 || m->block_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT,
                    "--num-blocks (%d) must be >= 0 (0: the worker's) and --block-size (%d) >= 1",
                    m->num_blocks, m->block_size);
  return LLB_STATUS_OK;
}

/* --num-blocks 0: the blocks the engine's worker allocated (its heartbeat), same block size. */
static llb_status adopt_worker_geometry(struct actor_main *am, struct kv_main *m) {
  int32_t nb, bs;
  llb_status st = actor_main_wait_kv_geometry(am, KV_GEOMETRY_WAIT_MS, &nb, &bs);
  if (st != LLB_STATUS_OK) return st;
  if (bs != m->block_size)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "the worker's block size is %d, --block-size %d", bs, m->block_size);
  m->num_blocks = nb;
  return LLB_STATUS_OK;
}

static llb_status kv_start(struct actor_main *am, void *user) {
  struct kv_main *m = user;
  llb_status st;
  if (m->num_blocks == 0 && (st = adopt_worker_geometry(am, m)) != LLB_STATUS_OK) return st;
  const struct kv_manager_actor_options o = {
      .engine_id = am->common.engine_id,
      .kv = {.num_blocks = m->num_blocks,
             .block_size = m->block_size,
             .enable_prefix_caching = !m->no_prefix_caching},
  };
  st = kv_manager_actor_create(&o, &m->actor);
  if (st == LLB_STATUS_OK) st = kv_manager_actor_start(m->actor, am->bus);
  return st;
}

static void kv_stop(struct actor_main *am, void *user) {
  (void)am;
  struct kv_main *m = user;
  kv_manager_actor_stop(m->actor);
}

static void kv_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct kv_main *m = user;
  if (m->actor) {
    struct kv_manager_actor_stats c;
    kv_manager_actor_stats(m->actor, &c);
    LLB_LOG_INFO("kv_manager_counters", "steps=%llu malformed=%llu failed=%llu resyncs=%llu",
                 (unsigned long long)c.num_steps, (unsigned long long)c.num_malformed,
                 (unsigned long long)c.num_failed, (unsigned long long)c.num_resyncs);
  }
  kv_manager_actor_destroy(m->actor);
  m->actor = NULL;
}

int main(int argc, char **argv) {
  struct kv_main m = {.num_blocks = 1024, .block_size = 16};
  const struct flag flags[] = {
      {.name = "num-blocks", .kind = FLAG_KIND_INT32, .target = &m.num_blocks,
       .help = "KV cache blocks (same value for scheduler, kv_manager and worker); 0 = the worker's, "
               "from its heartbeat (e.g. sized from GPU memory)"},
      {.name = "block-size", .kind = FLAG_KIND_INT32, .target = &m.block_size,
       .help = "tokens per block"},
      {.name = "no-prefix-caching", .kind = FLAG_KIND_BOOL, .target = &m.no_prefix_caching,
       .help = "disable the prefix cache (lookups miss)"},
  };
  const struct actor_main_spec spec = {
      .actor = "kv_manager",
      .program = "llmbus-kv-manager",
      .summary = "Owns the KV cache blocks of one engine: answers KVStep on "
                 "<prefix>.engine.<eid>.kv.",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .configure = kv_configure,
      .start = kv_start,
      .stop = kv_stop,
      .destroy = kv_destroy,
      .user = &m,
      .engine_scoped = true, /* its beats reach its engine's peers on the engine's subject */
  };
  return actor_main_exec(&spec, argc, argv);
}
