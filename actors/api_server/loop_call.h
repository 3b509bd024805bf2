/* Runs a function on an event loop's thread and waits until it says it is done: the api
 * server's setup and teardown, which touch evhttp and events that belong to the bus loop
 * (libevent objects are not thread-safe). The function may finish later, from another callback
 * on the loop (a teardown that lets the last replies flush first): it calls api_server_loop_call_done
 * once, whenever. The error text of a failed step (llb_err_last is per thread) travels back
 * with its status. One call at a time per api_server_loop_call. */
#ifndef LLB_ACTORS_API_SERVER_LOOP_CALL_H
#define LLB_ACTORS_API_SERVER_LOOP_CALL_H

#include "base/status.h"

struct event_base; /* libevent */
struct api_server_loop_call;

/* What runs on the loop thread; it must call api_server_loop_call_done(lc, status) exactly once. */
typedef void (*api_server_loop_fn)(struct api_server_loop_call *lc, void *arg);

/* Errors: OUT_OF_MEMORY. *out: api_server_loop_call_destroy. */
llb_status api_server_loop_call_create(struct api_server_loop_call **out);
/* When no call is under way. NULL ok. */
void api_server_loop_call_destroy(struct api_server_loop_call *lc);

/* Runs fn(lc, arg) on base's loop thread (from any other thread; the loop must be running)
 * and waits for its api_server_loop_call_done. Returns the status fn gave, with fn's error text;
 * INTERNAL when the loop would not take the call (fn does not run then). */
llb_status api_server_loop_call_run(struct api_server_loop_call *lc, struct event_base *base, api_server_loop_fn fn, void *arg);

/* fn's answer (loop thread): wakes api_server_loop_call_run. A status other than OK carries
 * llb_err_last() of this thread with it. */
void api_server_loop_call_done(struct api_server_loop_call *lc, llb_status st);

#endif
