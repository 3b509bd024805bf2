/* Private to actors/input_processor/actor*.c: the actor's state and the bus handlers that
 * actor_setup.c (create, start, destroy) installs and actor.c implements. */
#ifndef LLB_ACTORS_INPUT_PROCESSOR_ACTOR_INTERNAL_H
#define LLB_ACTORS_INPUT_PROCESSOR_ACTOR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "actors/input_processor/actor.h"
#include "bus/bus.h"

#define DEFAULT_MAX_MODEL_LEN 4096
#define DEFAULT_EXTERNAL_ID "req" /* a GenerateRequest without request_id */
#define MALFORMED_REQUEST_ID "malformed"
#define DEFAULT_TENANT_LIMIT_TTL_MS (30 * 60 * 1000)
/* JetStream's confirmation, retries included: a stream leader election after a cluster node
 * died took 2-8 s in tests/cluster/ (nats-server 2.9, a loaded 2-core host) */
#define INPROC_DURABLE_PUBLISH_TIMEOUT_MS 20000
#define INPROC_DURABLE_START_TIMEOUT_MS 10000  /* the requests stream at start */

struct inproc_actor {
  struct tokenizer *tok;
  struct inproc_t *proc;
  struct bus *bus;
  int32_t max_model_len;
  char tenant[BUS_TOKEN_MAX + 1];
  char engine_id[BUS_TOKEN_MAX + 1]; /* the default engine (DESIGN.md §9: routed otherwise) */
  struct engine_router *router;
  bool durable;
  int32_t stream_replicas; /* of the requests stream, if this actor creates it */
  atomic_uint_fast64_t requests, engine_requests, rejected, malformed, no_reply, aborts, aborts_refused,
      publish_errors, tokenize, stats_malformed, routed_by_prefix, routed_fallback, limited;
  char outputs_subject[BUS_SUBJECT_MAX];
  struct tenant_limits *limits; /* NULL = no per-tenant limits */
  struct jinja_template *jinja; /* the model's chat template; NULL = the named kind */
  char *bos_text, *eos_text;    /* bos_token / eos_token for it ("" when none) */
  int32_t hidden_size;          /* the model's embedding_length: num_cols of image features */
  struct clip_model *clip;      /* --mmproj, for clip_image_plan only; NULL = no images */
  char mmproj_id[96];           /* "<file name>:<bytes>": enters the images' mm_hash */
};

/* Bus handlers (actor.c): GenerateRequests, AbortRequests, tokenize calls, engine stats, and the
 * engines' outputs (to release per-tenant admissions). */
void inproc_on_generate(struct bus *bus, const struct bus_msg *msg, void *user);
void inproc_on_abort(struct bus *bus, const struct bus_msg *msg, void *user);
void inproc_on_tokenize(struct bus *bus, const struct bus_msg *msg, void *user);
void inproc_on_stats(struct bus *bus, const struct bus_msg *msg, void *user);
void inproc_on_engine_outputs(struct bus *bus, const struct bus_msg *msg, void *user);

#endif
