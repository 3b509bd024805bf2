/* The seq table of subs and a sub's AbortRequest; see api_server_call.h. */
#include "actors/api_server/api_server_call.h"

#include <stdlib.h>

#include "base/log.h"
#include "base/u64map.h"
#include "schemas/control.h"

struct api_server_sub_table {
  struct llb_u64map *by_seq; /* seq -> struct api_server_sub * */
  uint64_t last_seq;
};

llb_status api_server_sub_table_create(struct api_server_sub_table **out) {
  struct api_server_sub_table *t = calloc(1, sizeof *t);
  if (!t) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: out of memory");
  llb_status st = llb_u64map_create(&t->by_seq);
  if (st != LLB_STATUS_OK) {
    free(t);
    return st;
  }
  *out = t;
  return LLB_STATUS_OK;
}

void api_server_sub_table_destroy(struct api_server_sub_table *t) {
  if (!t) return;
  llb_u64map_destroy(t->by_seq);
  free(t);
}

llb_status api_server_sub_table_add(struct api_server_sub_table *t, struct api_server_sub *s) {
  llb_status st = llb_u64map_put(t->by_seq, t->last_seq + 1, s);
  if (st == LLB_STATUS_OK) s->seq = ++t->last_seq;
  return st;
}

llb_status api_server_sub_table_renumber(struct api_server_sub_table *t, struct api_server_sub *s) {
  const uint64_t old_seq = s->seq;
  llb_status st = api_server_sub_table_add(t, s);
  if (st == LLB_STATUS_OK && llb_u64map_get(t->by_seq, old_seq) == s) llb_u64map_remove(t->by_seq, old_seq);
  return st;
}

void api_server_sub_table_remove(struct api_server_sub_table *t, struct api_server_sub *s) {
  if (llb_u64map_get(t->by_seq, s->seq) == s) llb_u64map_remove(t->by_seq, s->seq);
}

struct api_server_sub *api_server_sub_table_find(const struct api_server_sub_table *t, uint64_t seq) {
  return llb_u64map_get(t->by_seq, seq);
}

void api_server_sub_publish_abort(struct bus *bus, const struct api_server_sub *s) {
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
