/* What the api server hears about its peers on the bus (delivery threads): the engines'
 * SchedulerStats (into the api metrics), and the heartbeats (<prefix>.health.*.*) that /health
 * reads (a ready beat of every watched actor within the window; a beat saying not ready is a
 * scheduler recovering), that show an output processor restarting (a new instance-and-pid
 * after the first one: its predecessor's outputs may be lost, api_server_resend.h) and an input
 * processor beating again after a reconnect. Hostile input: undecodable messages change
 * nothing. State of its own (atomics read by the loop thread). */
#ifndef LLB_ACTORS_API_SERVER_PEER_BEATS_H
#define LLB_ACTORS_API_SERVER_PEER_BEATS_H

#include <event2/http.h>
#include <stdint.h>

#include "actors/api_server/api_server_metrics.h"
#include "base/status.h"
#include "bus/bus.h"

struct api_server_peer_beats;

/* health_actors: the actors /health waits for (comma list, at most 8; "" none);
 * health_window_ms (> 0): how recent a ready beat must be; metrics (borrowed) takes the engine
 * stats. Errors: OUT_OF_MEMORY. */
llb_status api_server_peer_beats_create(const char *health_actors, int64_t health_window_ms, struct api_server_metrics *metrics,
                                 struct api_server_peer_beats **out);
/* The LoRA registry the workers' heartbeats feed (borrowed; NULL = none). Before the
 * heartbeat subscription. */
struct lora_registry;
void api_server_peer_beats_set_loras(struct api_server_peer_beats *p, struct lora_registry *loras);

/* After the bus is destroyed or drained. NULL ok. */
void api_server_peer_beats_destroy(struct api_server_peer_beats *p);

/* Bus handlers (user: the api_server_peer_beats) of <prefix>.engine.*.stats and <prefix>.health.*.*. */
void api_server_peer_beats_on_stats(struct bus *bus, const struct bus_msg *msg, void *user);
void api_server_peer_beats_on_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user);

/* llb_now_ns of the last output processor restart seen (0 none); of the last input processor
 * heartbeat (0 none). Any thread. */
int64_t api_server_peer_beats_op_restart_ns(struct api_server_peer_beats *p);
int64_t api_server_peer_beats_ip_beat_ns(struct api_server_peer_beats *p);

/* GET /health: 200 {"status":"ok"} when every watched actor beat ready within the window,
 * else 503 naming the silent and the recovering ones (loop thread). */
void api_server_peer_beats_route_health(struct api_server_peer_beats *p, struct evhttp_request *req);

#endif
