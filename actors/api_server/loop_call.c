/* Running a function on the loop thread and waiting for it; see loop_call.h. */
#include "actors/api_server/loop_call.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct api_server_loop_call {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  llb_status status;
  char error[512]; /* llb_err_last() of the loop thread when status is not OK */
  api_server_loop_fn fn;
  void *arg;
};

llb_status api_server_loop_call_create(struct api_server_loop_call **out) {
  struct api_server_loop_call *lc = calloc(1, sizeof *lc);
  if (!lc) return LLB_ERRF(LLB_STATUS_OUT_OF_MEMORY, "api_server: out of memory");
  pthread_mutex_init(&lc->mu, NULL);
  pthread_cond_init(&lc->cv, NULL);
  *out = lc;
  return LLB_STATUS_OK;
}

void api_server_loop_call_destroy(struct api_server_loop_call *lc) {
  if (!lc) return;
  pthread_mutex_destroy(&lc->mu);
  pthread_cond_destroy(&lc->cv);
  free(lc);
}

static void on_loop(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  struct api_server_loop_call *lc = arg;
  lc->fn(lc, lc->arg);
}

llb_status api_server_loop_call_run(struct api_server_loop_call *lc, struct event_base *base, api_server_loop_fn fn, void *arg) {
  pthread_mutex_lock(&lc->mu);
  lc->done = false;
  lc->fn = fn;
  lc->arg = arg;
  pthread_mutex_unlock(&lc->mu);
  struct timeval zero = {0, 0};
  if (event_base_once(base, -1, EV_TIMEOUT, on_loop, lc, &zero) != 0)
    return LLB_ERRF(LLB_STATUS_INTERNAL, "event_base_once failed");
  pthread_mutex_lock(&lc->mu);
  while (!lc->done) pthread_cond_wait(&lc->cv, &lc->mu);
  llb_status st = lc->status;
  pthread_mutex_unlock(&lc->mu);
  return st == LLB_STATUS_OK ? st : LLB_ERRF(st, "%s", lc->error);
}

void api_server_loop_call_done(struct api_server_loop_call *lc, llb_status st) {
  pthread_mutex_lock(&lc->mu);
  if (st != LLB_STATUS_OK) snprintf(lc->error, sizeof lc->error, "%s", llb_err_last());
  lc->status = st;
  lc->done = true;
  pthread_cond_broadcast(&lc->cv);
  pthread_mutex_unlock(&lc->mu);
}
