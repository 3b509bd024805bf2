/* The input processor's wire translation; see actor_wire.h. */
#include "actors/input_processor/actor_wire.h"

#include <string.h>

#include "model/template/chat_render.h"

const char *input_processor_wire_generate_request(const struct llb_generate_request *gr, const char *tenant,
                                         const char *reply_to, struct llb_arena *arena,
                                         struct input_processor_generate_request *req) {
  memset(req, 0, sizeof *req);
  req->request_id = gr->request_id.len ? gr->request_id.data : INPUT_PROCESSOR_DEFAULT_EXTERNAL_ID;
  if (gr->prompt.len) req->prompt = gr->prompt.data;
  if (gr->num_messages > 0) {
    struct chat_message *msgs = llb_arena_alloc(arena, (size_t)gr->num_messages * sizeof *msgs,
                                                _Alignof(struct chat_message));
    if (!msgs) return "messages";
    struct chat_message_extra *extras = llb_arena_alloc(arena, (size_t)gr->num_messages * sizeof *extras,
                                                        _Alignof(struct chat_message_extra));
    if (!extras) return "messages";
    for (int32_t i = 0; i < gr->num_messages; i++) {
      const struct llb_chat_message *m = &gr->messages[i];
      msgs[i].role = m->role.data;
      msgs[i].content = m->content.data;
      extras[i] = (struct chat_message_extra){.tool_calls_json = m->tool_calls.len ? m->tool_calls.data : NULL,
                                              .tool_call_id = m->tool_call_id.len ? m->tool_call_id.data : NULL,
                                              .name = m->name.len ? m->name.data : NULL,
                                              .image_offsets = m->image_offsets,
                                              .num_image_offsets = m->num_image_offsets};
    }
    req->messages = msgs;
    req->message_extras = extras;
    req->num_messages = (size_t)gr->num_messages;
  }
  if (gr->num_prompt_token_ids > 0) {
    req->prompt_token_ids = gr->prompt_token_ids;
    req->num_prompt_token_ids = gr->num_prompt_token_ids;
  }
  if (gr->chat_template.len) req->chat_template = gr->chat_template.data;
  req->raw = gr->raw;
  req->no_generation_prompt = !gr->add_generation_prompt;
  if (gr->tools.len) req->tools_json = gr->tools.data;
  if (gr->chat_template_kwargs.len) req->chat_template_kwargs_json = gr->chat_template_kwargs.data;
  req->continue_final_message = gr->continue_final_message;
  req->sampling_params = gr->sampling_params; /* the decoded view's: lives while the message does */
  req->priority = gr->priority;
  /* Per-tenant prefix-cache salt (docs/design.md §7): no tenant can hit another's blocks. */
  size_t salt_cap = strlen(tenant) + gr->cache_salt.len + 48;
  char *salt = llb_arena_alloc(arena, salt_cap, 1);
  if (!salt) return "cache_salt";
  if (input_processor_cache_salt_compose(tenant, gr->cache_salt.data, gr->cache_salt.len, salt, salt_cap) >= salt_cap)
    return "cache_salt";
  req->cache_salt = salt;
  req->tenant = tenant;
  req->reply_to = reply_to;
  req->structured_outputs = gr->structured_outputs;
  if (gr->num_mm_items > 0) {
    struct input_processor_mm_item *items = llb_arena_alloc(arena, (size_t)gr->num_mm_items * sizeof *items,
                                                   _Alignof(struct input_processor_mm_item));
    if (!items) return "mm_items";
    for (int32_t i = 0; i < gr->num_mm_items; i++) {
      const struct llb_mm_item *m = &gr->mm_items[i];
      items[i] = (struct input_processor_mm_item){.modality = m->modality.data, .data = m->data,
                                         .data_bytes = m->data_bytes, .dtype = m->dtype.data,
                                         .num_rows = m->num_rows, .num_cols = m->num_cols,
                                         .placeholder_offset = m->placeholder_offset};
    }
    req->mm_items = items;
    req->num_mm_items = gr->num_mm_items;
  }
  return NULL;
}

int32_t input_processor_wire_mm_features(const struct input_processor_processed *pr, const struct input_processor_generate_request *req,
                                int32_t hidden_size, struct llb_mm_feature *mm) {
  int32_t k = 0;
  for (; k < pr->num_mm_features && k < INPUT_PROCESSOR_MAX_MM_ITEMS; k++) {
    const struct input_processor_mm_feature *f = &pr->mm_features[k];
    const struct input_processor_mm_item *it = &req->mm_items[f->item];
    mm[k] = (struct llb_mm_feature){.modality = llb_str_c(it->modality), .mm_hash = llb_str_c(f->mm_hash),
                                    .offset = f->offset, .length = f->length, .data = it->data,
                                    .data_bytes = it->data_bytes, .dtype = llb_str_c(it->dtype),
                                    .num_cols = f->is_embed ? hidden_size : it->num_cols,
                                    .is_embed = f->is_embed, .num_is_embed = f->is_embed ? f->length : 0};
  }
  return k;
}

struct llb_engine_core_request input_processor_wire_engine_request(const struct input_processor_engine_request *e,
                                                          const struct input_processor_generate_request *req,
                                                          const struct llb_sampling_params *sp,
                                                          const struct llb_mm_feature *mm, int32_t num_mm,
                                                          const struct llb_pooling_params *pool) {
  return (struct llb_engine_core_request){
      .request_id = llb_str_c(e->request_id),
      .external_id = llb_str_c(e->external_request_id),
      .prompt_token_ids = e->prompt_token_ids,
      .num_prompt_token_ids = (int32_t)e->num_prompt_tokens,
      .sampling_params = sp,
      .eos_token_id = e->eos_token_id,
      .arrival_time = (double)e->arrival_time_ns / 1e9,
      .priority = e->priority,
      .cache_salt = llb_str_c(e->cache_salt),
      .reply_to = llb_str_c(e->reply_to),
      .client_index = e->child_index,
      .parent_request_id = llb_str_c(e->parent_request_id),
      .mm_features = num_mm > 0 ? mm : NULL,
      .num_mm_features = num_mm,
      .structured_outputs = req->structured_outputs,
      .pooling_params = *pool,
      .lora_request = req->lora_request,
  };
}

llb_status input_processor_wire_engine_stats(const struct llb_scheduler_stats *s, const char *subject, char *eid,
                                    size_t eid_cap, struct engine_router_stats *out) {
  /* the subject's <eid> must be the one the message names: llm.engine.<eid>.stats */
  eid[0] = '\0';
  const char *end = strrchr(subject, '.'), *begin = end;
  while (begin && begin > subject && begin[-1] != '.') begin--;
  if (begin && end && end > begin && (size_t)(end - begin) < eid_cap) {
    memcpy(eid, begin, (size_t)(end - begin));
    eid[end - begin] = '\0';
  }
  if (strcmp(eid, s->engine_id.data ? s->engine_id.data : "") != 0)
    return LLB_ERRF(LLB_STATUS_MALFORMED, "engine_id \"%s\" on the stats subject of engine \"%s\"",
                    s->engine_id.data ? s->engine_id.data : "", eid);
  *out = (struct engine_router_stats){
      .engine_id = eid, .model = s->model.data, .instance = s->instance.data,
      .num_running_reqs = s->num_running_reqs, .num_waiting_reqs = s->num_waiting_reqs,
      .kv_cache_usage = s->kv_cache_usage, .num_free_blocks = s->num_free_blocks,
      .num_total_blocks = s->num_total_blocks, .block_size = s->block_size, .max_num_seqs = s->max_num_seqs,
      .max_model_len = s->max_model_len, .stats_interval_ms = s->stats_interval_ms,
      .prefix_cache_queries = s->prefix_cache_queries, .prefix_cache_hits = s->prefix_cache_hits,
      .generation_tokens_total = s->generation_tokens_total, .draining = s->draining,
      .role = (enum engine_router_role)s->role};
  return LLB_STATUS_OK;
}
