/* vLLM's run-time LoRA updating, behind the API key: POST /v1/load_lora_adapter
 * {"lora_name", "lora_path"} and POST /v1/unload_lora_adapter {"lora_name"} (vLLM
 * entrypoints/openai/api_server.py, serving_models.py: the same bodies and answers: 200 with
 * "Success: LoRA adapter 'N' added successfully." / "... removed successfully.", 400 with vLLM's
 * texts for an adapter already loaded or not found; our JSON error bodies).
 *
 * One LoRAUpdate (schemas/control.h) goes on <prefix>.lora.update to every worker (each subscribes,
 * no queue group) with a reply subject under this module's own inbox; the replies (engine id,
 * status, message) are gathered for as many workers as beat within the health window
 * (lora_registry_num_workers), for at most API_SERVER_LORA_ADMIN_TIMEOUT_S. Success only if every worker
 * loaded (unloaded) it; on a partial failure of a load the adapter is unloaded again everywhere,
 * and the client gets the first failure's message. lora_path is resolved by the workers beneath
 * their --lora-dir (an absolute path must start with that directory, which is stripped): a
 * missing file, one outside the directory or through a symbolic link all get the one text
 * API_SERVER_LORA_ADMIN_NOT_FOUND (no existence oracle). An adapter loaded with tenant T's key belongs to
 * T (the workers announce the owner in their heartbeats; schemas/lora_registry.h); another tenant
 * cannot see, use or unload it. --lora-modules adapters cannot be unloaded (400).
 *
 * The adapters loaded here are kept (and learnt back from the heartbeats after a restart of this
 * server): a worker whose heartbeats lack one (it restarted) is sent it again.
 *
 * Loop thread, except the inbox's delivery (api_server_inbox_on_msg) and the heartbeat hook
 * (delivery threads).
 */
#ifndef LLB_ACTORS_API_SERVER_API_SERVER_LORA_ADMIN_H
#define LLB_ACTORS_API_SERVER_API_SERVER_LORA_ADMIN_H

#include <event2/http.h>
#include <stdbool.h>

#include "actors/api_server/api_server_metrics.h"
#include "base/status.h"
#include "bus/bus.h"

#define API_SERVER_LORA_ADMIN_TIMEOUT_S 30 /* the workers' answers, at most */
#define API_SERVER_LORA_ADMIN_NOT_FOUND "no such adapter file under the LoRA directory"

struct api_server_lora_admin;
struct lora_registry;
struct event_base;

/* For the workers' directory lora_dir (copied); loras (borrowed: the registry the heartbeats
 * feed); window_ms: a worker heard within it is expected to answer (the health window: a worker
 * silent for longer is dead); metrics (borrowed: errors are counted there). Errors:
 * OUT_OF_MEMORY. *out: api_server_lora_admin_destroy. */
llb_status api_server_lora_admin_create(const char *lora_dir, struct lora_registry *loras, int64_t window_ms,
                                 struct api_server_metrics *metrics, struct api_server_lora_admin **out);

/* Its subjects on `bus` (borrowed) and its reply inbox (a new one) subscribed; replies wait for
 * api_server_lora_admin_bind. Errors: those of bus_new_inbox, bus_subscribe. */
llb_status api_server_lora_admin_start(struct api_server_lora_admin *l, struct bus *bus);

/* Loop thread, after start: the inbox's wake event and the resend timer on base. Errors:
 * OUT_OF_MEMORY. */
llb_status api_server_lora_admin_bind(struct api_server_lora_admin *l, struct event_base *base);

/* Loop thread: answers POST /v1/load_lora_adapter (load) or /v1/unload_lora_adapter for `tenant`
 * (borrowed for the call), now or when the workers have answered. */
void api_server_lora_admin_route(struct api_server_lora_admin *l, struct evhttp_request *req, bool load, const char *tenant);

/* Loop thread: the updates under way fail (503, the server is stopping); the wake event freed. */
void api_server_lora_admin_unbind(struct api_server_lora_admin *l);

/* After the bus is destroyed. NULL ok. */
void api_server_lora_admin_destroy(struct api_server_lora_admin *l);

#endif
