/* llmbus-output-processor: EngineCoreOutputs → RequestOutputs on each client's reply subject
 * (actors/output_processor/actor.h). Flags: the common actor flags (cmd/actor_main.h). */
#include <stdlib.h>

#include "actors/output_processor/actor.h"
#include "cmd/actor_main.h"

static llb_status outproc_main_start(struct actor_main *am, void *user) {
  struct outproc_actor **actor = user;
  struct outproc_actor_options o = {.model_path = am->common.model_path, .engine_id = am->common.engine_id,
                                   .metrics = am->metrics};
  llb_status st = outproc_actor_create(&o, actor);
  if (st != LLB_STATUS_OK) return st;
  return outproc_actor_start(*actor, am->bus);
}

static void outproc_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct outproc_actor **actor = user;
  outproc_actor_destroy(*actor);
  *actor = NULL;
}

int main(int argc, char **argv) {
  struct outproc_actor *actor = NULL;
  const struct actor_main_spec spec = {
      .actor = "output_processor",
      .program = "llmbus-output-processor",
      .summary = "detokenizes EngineCoreOutputs into RequestOutputs for each client",
      .start = outproc_main_start,
      .destroy = outproc_main_destroy,
      .user = &actor,
  };
  return actor_main_exec(&spec, argc, argv);
}
