/* llmbus-encoder-cache: the encoder_cache actor on <prefix>.engine.<eid>.encoder
 * (actors/encoder_cache). */
#include <stdint.h>
#include <stdlib.h>

#include "actors/encoder_cache/actor.h"
#include "base/log.h"
#include "cmd/actor/actor_main.h"

struct ec_main {
  int32_t cache_size;
  struct encoder_cache_actor *actor;
};

static llb_status ec_configure(struct actor_main *am, void *user) {
  (void)am;
  struct ec_main *m = user;
  if (m->cache_size < 1)
    return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "--encoder-cache-size (%d) must be >= 1", m->cache_size);
  return LLB_STATUS_OK;
}

static llb_status ec_start(struct actor_main *am, void *user) {
  struct ec_main *m = user;
  const struct encoder_cache_actor_options o = {.engine_id = am->common.engine_id,
                                                .cache_size = m->cache_size};
  llb_status st = encoder_cache_actor_create(&o, &m->actor);
  if (st == LLB_STATUS_OK) st = encoder_cache_actor_start(m->actor, am->bus);
  return st;
}

static void ec_stop(struct actor_main *am, void *user) {
  (void)am;
  struct ec_main *m = user;
  encoder_cache_actor_stop(m->actor);
}

static void ec_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct ec_main *m = user;
  if (m->actor) {
    struct encoder_cache_actor_stats c;
    encoder_cache_actor_stats(m->actor, &c);
    LLB_LOG_INFO("encoder_cache_counters",
                 "steps=%llu queries=%llu hits=%llu allocated=%llu evicted=%llu resets=%llu "
                 "malformed=%llu failed=%llu",
                 (unsigned long long)c.stats.num_steps, (unsigned long long)c.stats.num_queries,
                 (unsigned long long)c.stats.num_hits, (unsigned long long)c.stats.num_allocated,
                 (unsigned long long)c.stats.num_evicted, (unsigned long long)c.stats.num_resets,
                 (unsigned long long)c.num_malformed, (unsigned long long)c.num_failed);
  }
  encoder_cache_actor_destroy(m->actor);
  m->actor = NULL;
}

int main(int argc, char **argv) {
  struct ec_main m = {.cache_size = 4096};
  const struct flag flags[] = {
      {.name = "encoder-cache-size", .kind = FLAG_KIND_INT32, .target = &m.cache_size,
       .help = "encoder-output cache size in embedding rows (same value for the scheduler)"},
  };
  const struct actor_main_spec spec = {
      .actor = "encoder_cache",
      .program = "llmbus-encoder-cache",
      .summary = "Accounts the multimodal encoder outputs of one engine (references, FIFO "
                 "eviction): answers EncoderStep on <prefix>.engine.<eid>.encoder.",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .configure = ec_configure,
      .start = ec_start,
      .stop = ec_stop,
      .destroy = ec_destroy,
      .user = &m,
      .engine_scoped = true, /* its beats reach its engine's peers on the engine's subject */
  };
  return actor_main_exec(&spec, argc, argv);
}
