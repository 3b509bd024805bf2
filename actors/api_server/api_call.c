/* The seq table of subs and a sub's AbortRequest; see api_call.h. */
#include "actors/api_server/api_call.h"

#include <stdlib.h>

#include "base/log.h"
#include "schemas/control.h"

#define SUB_TABLE_SIZE 1024 /* buckets, each a chain */

struct api_sub_table {
  struct api_sub *buckets[SUB_TABLE_SIZE];
  uint64_t last_seq;
};

llb_status api_sub_table_create(struct api_sub_table **out) {
  struct api_sub_table *t = calloc(1, sizeof *t);
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: out of memory");
  *out = t;
  return LLB_STATUS_OK;
}

void api_sub_table_destroy(struct api_sub_table *t) { free(t); }

void api_sub_table_add(struct api_sub_table *t, struct api_sub *s) {
  s->seq = ++t->last_seq;
  struct api_sub **b = &t->buckets[s->seq % SUB_TABLE_SIZE];
  s->next = *b;
  *b = s;
}

void api_sub_table_remove(struct api_sub_table *t, struct api_sub *s) {
  for (struct api_sub **p = &t->buckets[s->seq % SUB_TABLE_SIZE]; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      return;
    }
}

struct api_sub *api_sub_table_find(const struct api_sub_table *t, uint64_t seq) {
  for (struct api_sub *s = t->buckets[seq % SUB_TABLE_SIZE]; s; s = s->next)
    if (s->seq == seq) return s;
  return NULL;
}

void api_sub_publish_abort(struct bus *bus, const struct api_sub *s) {
  struct llb_abort_request ab = {.request_id = llb_str_c(s->engine_id)};
  struct llb_buf buf = {0};
  llb_status st = llb_abort_request_encode_buf(&ab, &buf);
  char subject[BUS_SUBJECT_MAX];
  if (st == LLB_STATUS_OK) st = bus_subject_abort(bus_prefix(bus), s->call->tenant, subject, sizeof subject);
  if (st == LLB_STATUS_OK) st = bus_publish(bus, subject, buf.data, buf.len, NULL);
  llb_buf_free(&buf);
  if (st != LLB_STATUS_OK)
    LLB_LOG_WARN("abort_publish_failed", "request_id=%s error=\"%s\"", s->engine_id, llb_err_last());
  else
    LLB_LOG_INFO("request_aborted", "request_id=%s", s->engine_id);
}
