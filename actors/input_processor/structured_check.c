/* Structured output at intake (see structured_check.h). */
#include "actors/input_processor/structured_check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/structured/structured_output.h"

llb_status input_processor_structured_check(const struct llb_structured_outputs *so, char *msg, size_t cap) {
  msg[0] = '\0';
  struct so_grammar *g = NULL;
  llb_status st = LLB_STATUS_OK;
  switch (so->kind) {
    case LLB_SO_NONE: return LLB_STATUS_OK;
    case LLB_SO_JSON: st = so_grammar_compile_json_schema(so->spec.data, so->spec.len, &g); break;
    case LLB_SO_JSON_OBJECT: st = so_grammar_compile_json_object(&g); break;
    case LLB_SO_CHOICE: st = so_grammar_compile_choice(so->spec.data, so->spec.len, &g); break;
    case LLB_SO_REGEX: st = so_grammar_compile_regex(so->spec.data, so->spec.len, &g); break;
    case LLB_SO_GRAMMAR: st = so_grammar_compile_gbnf(so->spec.data, so->spec.len, &g); break;
    default:
      snprintf(msg, cap, "unknown structured output kind %d", (int)so->kind);
      return LLB_ERRF(LLB_STATUS_INVALID_ARGUMENT, "%s", msg);
  }
  so_grammar_destroy(g);
  if (st != LLB_STATUS_OK) snprintf(msg, cap, "%s", llb_err_last());
  return st;
}

struct so_entry {
  uint8_t id[16]; /* keyed hash of (kind, spec) */
  bool used;
  llb_status status;
  char message[INPUT_PROCESSOR_SO_MESSAGE_BYTES];
};

struct input_processor_so_cache {
  pthread_mutex_t mu;
  struct llb_hash_key key;
  struct so_entry entries[INPUT_PROCESSOR_SO_CACHE_ENTRIES];
  int next; /* the slot the next verdict takes (FIFO) */
};

llb_status input_processor_so_cache_create(const struct llb_hash_key *key, struct input_processor_so_cache **out) {
  struct input_processor_so_cache *c = calloc(1, sizeof *c);
  if (!c) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "grammar verdict cache");
  c->key = *key;
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return LLB_STATUS_OK;
}

void input_processor_so_cache_destroy(struct input_processor_so_cache *c) {
  if (!c) return;
  pthread_mutex_destroy(&c->mu);
  free(c);
}

llb_status input_processor_structured_check_cached(struct input_processor_so_cache *c, const struct llb_structured_outputs *so,
                                          char *msg, size_t cap, bool *compiled) {
  *compiled = false;
  if (!c || so->kind == LLB_SO_NONE) {
    *compiled = so->kind != LLB_SO_NONE;
    return input_processor_structured_check(so, msg, cap);
  }
  const uint32_t kind = (uint32_t)so->kind;
  const struct llb_hash_part parts[2] = {{&kind, sizeof kind}, {so->spec.data, so->spec.len}};
  uint8_t id[16];
  llb_keyed_hash128_parts(&c->key, "llmbus-grammar", parts, 2, id);
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < INPUT_PROCESSOR_SO_CACHE_ENTRIES; i++) {
    const struct so_entry *e = &c->entries[i];
    if (!e->used || memcmp(e->id, id, sizeof id) != 0) continue;
    const llb_status st = e->status;
    snprintf(msg, cap, "%s", e->message);
    pthread_mutex_unlock(&c->mu);
    if (st != LLB_STATUS_OK) return LLB_ERRF(st, "%s", msg); /* the message, as the compiler said it */
    return LLB_STATUS_OK;
  }
  pthread_mutex_unlock(&c->mu);
  *compiled = true;
  llb_status st = input_processor_structured_check(so, msg, cap); /* outside the lock: compiles run in parallel */
  if (st == LLB_STATUS_OUT_OF_MEMORY) return st;
  pthread_mutex_lock(&c->mu);
  struct so_entry *e = &c->entries[c->next];
  c->next = (c->next + 1) % INPUT_PROCESSOR_SO_CACHE_ENTRIES;
  *e = (struct so_entry){.used = true, .status = st};
  memcpy(e->id, id, sizeof id);
  snprintf(e->message, sizeof e->message, "%s", msg);
  pthread_mutex_unlock(&c->mu);
  return st;
}
