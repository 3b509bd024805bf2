/* llmbus-input-processor: GenerateRequest → EngineCoreRequest(s) on the bus
 * (actors/input_processor/actor.h). Flags: the common actor flags (cmd/actor_main.h) plus
 * --max-model-len, --tenant and --durable. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "actors/input_processor/actor.h"
#include "cmd/actor_main.h"

struct inproc_main {
  int32_t max_model_len;
  const char *tenant;
  bool durable;
  struct inproc_actor *actor;
};

static llb_status inproc_main_start(struct actor_main *am, void *user) {
  struct inproc_main *m = user;
  struct inproc_actor_options o = {
      .model_path = am->common.model_path,
      .max_model_len = m->max_model_len,
      .tenant = m->tenant,
      .engine_id = am->common.engine_id,
      .durable = m->durable,
  };
  llb_status st = inproc_actor_create(&o, &m->actor);
  if (st != LLB_STATUS_OK) return st;
  return inproc_actor_start(m->actor, am->bus);
}

static void inproc_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct inproc_main *m = user;
  inproc_actor_destroy(m->actor);
  m->actor = NULL;
}

int main(int argc, char **argv) {
  struct inproc_main m = {.max_model_len = 0, .tenant = "*"};
  const struct actor_flag flags[] = {
      {"max-model-len", ACTOR_FLAG_KIND_INT32, &m.max_model_len,
       "context length in tokens (prompt + output); 0 = min(model context, 4096)", NULL},
      {"tenant", ACTOR_FLAG_KIND_STRING, &m.tenant,
       "serve <prefix>.generate.<tenant> and .abort.<tenant>; * = every tenant", NULL},
      {"durable", ACTOR_FLAG_KIND_BOOL, &m.durable,
       "publish EngineCoreRequests into the JetStream requests stream (nats-server -js), each "
       "confirmed stored; the engine's scheduler must run with --durable too", NULL},
  };
  const struct actor_main_spec spec = {
      .actor = "input_processor",
      .program = "llmbus-input-processor",
      .summary = "validates, templates and tokenizes GenerateRequests into EngineCoreRequests",
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .start = inproc_main_start,
      .destroy = inproc_main_destroy,
      .user = &m,
  };
  return actor_main_exec(&spec, argc, argv);
}
