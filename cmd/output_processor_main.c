/* llmbus-output-processor: EngineCoreOutputs → RequestOutputs on each client's reply subject
 * (actors/output_processor/actor.h). Flags: the common actor flags (cmd/actor/actor_main.h) and
 * --stream-interval N. */
#include <stdlib.h>

#include "actors/output_processor/actor.h"
#include "base/log.h"
#include "cmd/actor/actor_main.h"

static int64_t stream_interval = 1; /* --stream-interval */

static llb_status output_processor_main_start(struct actor_main *am, void *user) {
  struct output_processor_actor **actor = user;
  struct output_processor_actor_options o = {.model_path = am->common.model_path, .engine_id = am->common.engine_id,
                                   .metrics = am->metrics, .stream_interval = stream_interval};
  llb_status st = output_processor_actor_create(&o, actor);
  if (st != LLB_STATUS_OK) return st;
  return output_processor_actor_start(*actor, am->bus);
}

static void output_processor_main_stop(struct actor_main *am, void *user) {
  (void)am;
  struct output_processor_actor **actor = user;
  output_processor_actor_stop(*actor);
}

static void output_processor_main_destroy(struct actor_main *am, void *user) {
  (void)am;
  struct output_processor_actor **actor = user;
  if (*actor) {
    struct output_processor_actor_stats c;
    output_processor_actor_stats(*actor, &c);
    LLB_LOG_INFO("output_processor_counters", "batches=%llu outputs=%llu request_outputs=%llu unknown=%llu "
                 "resyncs_asked=%llu resyncs=%llu duplicates_dropped=%llu publish_errors=%llu histories=%llu "
                 "handoffs_forgotten=%llu handoffs_continued=%llu",
                 (unsigned long long)c.batches,
                 (unsigned long long)c.engine_outputs, (unsigned long long)c.request_outputs,
                 (unsigned long long)c.unknown, (unsigned long long)c.resyncs_asked,
                 (unsigned long long)c.resyncs, (unsigned long long)c.duplicates,
                 (unsigned long long)c.publish_errors, (unsigned long long)c.histories,
                 (unsigned long long)c.handoffs_forgotten, (unsigned long long)c.handoffs_continued);
  }
  output_processor_actor_destroy(*actor);
  *actor = NULL;
}

int main(int argc, char **argv) {
  struct output_processor_actor *actor = NULL;
  static const struct flag flags[] = {
      {.name = "stream-interval", .kind = FLAG_KIND_INT64, .target = &stream_interval, .metavar = "N",
       .min = 1, .max = 1 << 20,
       .help = "tokens per streamed output (vLLM's --stream-interval): fewer messages and SSE events, "
               "each with up to N tokens; the first and the last go out at once"},
  };
  const struct actor_main_spec spec = {
      .flags = flags,
      .num_flags = (int)(sizeof flags / sizeof flags[0]),
      .actor = "output_processor",
      .program = "llmbus-output-processor",
      .summary = "detokenizes EngineCoreOutputs into RequestOutputs for each client",
      .start = output_processor_main_start,
      .stop = output_processor_main_stop,
      .destroy = output_processor_main_destroy,
      .user = &actor,
      .engine_scoped = true, /* its beats reach its engine's peers on the engine's subject */
  };
  return actor_main_exec(&spec, argc, argv);
}
