/* The engine under test for the e2e tests (see stack.h). */
#include "tests/e2e/stack.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bus/subject.h"

#define E2E_ENGINE_ID "0"
#define E2E_STOP_TIMEOUT_MS 90000
#define E2E_HEARTBEAT_MS "500"

/* Heartbeat `actor` names, binary names, and whether the actor takes --model. */
static const struct {
  const char *actor;
  const char *program;
  bool takes_model;
  bool optional;
} e2e_actors[E2E_ACTOR_COUNT] = {
    [E2E_ACTOR_KV_MANAGER] = {"kv_manager", "llmbus-kv-manager", false, false},
    [E2E_ACTOR_GPU_WORKER] = {"gpu_worker", "llmbus-gpu-worker", true, false},
    [E2E_ACTOR_SCHEDULER] = {"scheduler", "llmbus-scheduler", true, false},
    [E2E_ACTOR_OUTPUT_PROCESSOR] = {"output_processor", "llmbus-output-processor", true, false},
    [E2E_ACTOR_INPUT_PROCESSOR] = {"input_processor", "llmbus-input-processor", true, false},
    [E2E_ACTOR_ENCODER_CACHE] = {"encoder_cache", "llmbus-encoder-cache", false, true},
};

/* Marks which actors this stack has: every required one, an optional one when built. */
static void find_actors(struct e2e_stack *s) {
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) {
    char bin[PATH_MAX + 64];
    snprintf(bin, sizeof bin, "%s/cmd/%s", s->build_dir, e2e_actors[i].program);
    s->actors[i].expected = !e2e_actors[i].optional || access(bin, X_OK) == 0;
  }
}

double e2e_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void e2e_unavailable(const char *reason) {
  const char *ci = getenv("CI");
  if (ci && strcmp(ci, "true") == 0) {
    fprintf(stderr, "FAIL: %s (CI=true: prerequisites must be present)\n", reason);
    exit(1);
  }
  printf("SKIP: %s\n", reason);
  fflush(stdout);
  exit(77);
}

const char *e2e_require_model(int argc, char **argv) {
  static char reason[PATH_MAX + 128];
  const char *m = getenv("LLMBUS_MODEL");
  if (!m || !*m) m = argc > 1 ? argv[1] : NULL;
  if (!m || !*m) e2e_unavailable("no model given (argv[1] or LLMBUS_MODEL)");
  if (access(m, R_OK) != 0) {
    snprintf(reason, sizeof reason, "model %s not readable (run ops/fetch-model.sh)", m);
    e2e_unavailable(reason);
  }
  if (!getenv("LLMBUS_BUILD_DIR")) e2e_unavailable("LLMBUS_BUILD_DIR not set (run under ctest)");
  if (!nats_test_server_bin()) e2e_unavailable("no nats-server binary (ops/install-deps.sh)");
  return m;
}

/* --- heartbeats and stats (delivery threads) ------------------------------------------ */

static void on_heartbeat(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct e2e_stack *s = user;
  llb_arena_reset(&s->hb_arena);
  struct llb_heartbeat h;
  if (llb_heartbeat_decode(msg->data, msg->len, &s->hb_arena, &h) != LLB_STATUS_OK) {
    fprintf(stderr, "e2e: undecodable heartbeat on %s: %s\n", msg->subject, llb_err_last());
    return;
  }
  /* a stack of several engines (serve --engines N): the state follows engine 0's actors and
   * the shared ones; tests watch the other engines through their SchedulerStats */
  if (h.engine_id.len && strcmp(h.engine_id.data, "0") != 0) return;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) {
    if (strcmp(h.actor.data, e2e_actors[i].actor) != 0) continue;
    struct e2e_actor_state *a = &s->actors[i];
    if (a->first_pid == 0) a->first_pid = h.pid;
    if (h.pid != a->last_pid && a->last_pid != 0) {
      a->pid_changed = true;
      fprintf(stderr, "e2e: %s heartbeat pid changed %d -> %d\n", e2e_actors[i].actor, a->last_pid,
              h.pid);
    }
    a->last_pid = h.pid;
    a->ready = h.ready;
    a->num_beats++;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void on_stats(struct bus *bus, const struct bus_msg *msg, void *user) {
  (void)bus;
  struct e2e_stack *s = user;
  llb_arena_reset(&s->stats_arena);
  struct llb_scheduler_stats st;
  if (llb_scheduler_stats_decode(msg->data, msg->len, &s->stats_arena, &st) != LLB_STATUS_OK) {
    fprintf(stderr, "e2e: undecodable SchedulerStats: %s\n", llb_err_last());
    return;
  }
  st.engine_id = llb_str_c(NULL);
  pthread_mutex_lock(&s->mu);
  s->stats = st;
  s->num_stats++;
  if (st.num_running_reqs > s->max_running) s->max_running = st.num_running_reqs;
  if (st.num_preemptions > s->max_preemptions) s->max_preemptions = st.num_preemptions;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Absolute CLOCK_REALTIME deadline for pthread_cond_timedwait. */
static struct timespec deadline_in(int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  return ts;
}

void e2e_stack_reset_max_running(struct e2e_stack *s) {
  pthread_mutex_lock(&s->mu);
  s->max_running = 0;
  pthread_mutex_unlock(&s->mu);
}

int32_t e2e_stack_max_running(struct e2e_stack *s) {
  pthread_mutex_lock(&s->mu);
  int32_t n = s->max_running;
  pthread_mutex_unlock(&s->mu);
  return n;
}

uint64_t e2e_stack_num_stats(struct e2e_stack *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->num_stats;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int e2e_stack_wait_stats(struct e2e_stack *s, uint64_t after, int64_t timeout_ms,
                         struct llb_scheduler_stats *out) {
  struct timespec dl = deadline_in(timeout_ms);
  pthread_mutex_lock(&s->mu);
  while (s->num_stats <= after)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) break;
  bool ok = s->num_stats > after;
  if (ok) *out = s->stats;
  pthread_mutex_unlock(&s->mu);
  if (!ok) fprintf(stderr, "e2e: no SchedulerStats within %lld ms\n", (long long)timeout_ms);
  return ok ? 0 : -1;
}

/* --- processes -------------------------------------------------------------------------- */

static pid_t spawn_argv(const char *const *argv) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "e2e: fork: %s\n", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "e2e: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

/* Waits up to timeout_ms for `pid` (a child) to exit; *status its wait status. Returns true
 * when it exited. */
static bool wait_child(pid_t pid, int64_t timeout_ms, int *status) {
  double end = e2e_now_s() + (double)timeout_ms / 1000.0;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;
    if (e2e_now_s() > end) return false;
    usleep(20000);
  }
}

static bool process_gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

/* LLMBUS_E2E_DEVICE (e.g. "cuda"): the worker's --device for every e2e test, so that the same
 * tests run the whole stack on a GPU machine (ops/gpu/gpu-check.sh e2e); NULL: the default. */
static const char *e2e_device(void) {
  const char *d = getenv("LLMBUS_E2E_DEVICE");
  return d && d[0] ? d : NULL;
}

static int start_serve(struct e2e_stack *s, const struct e2e_stack_options *o) {
  char bin[PATH_MAX + 32];
  snprintf(bin, sizeof bin, "%s/cmd/llmbus", s->build_dir);
  if (access(bin, X_OK) != 0) {
    fprintf(stderr, "e2e: %s not built\n", bin);
    return -1;
  }
  const char *dev = e2e_device();
  /* no metrics ports: tests run side by side, and a fixed port would be one's only. One input
   * processor: the heartbeats here are tracked per actor name, and a second instance beating
   * with its own pid would look like a restart (tests/chaos/ runs serve's default of two). */
  const char *argv[14 + E2E_MAX_ACTOR_ARGS + 1] = {bin, "serve", "--nats", s->srv.url, "--model", s->model,
                                                   "--http", "127.0.0.1:0", "--metrics-port", "0",
                                                   "--input-processors", "1"};
  int n = 12;
  for (int i = 0; o && o->serve_args && o->serve_args[i] && i < E2E_MAX_ACTOR_ARGS; i++) argv[n++] = o->serve_args[i];
  if (dev) {
    argv[n++] = "--device";
    argv[n++] = dev;
  }
  argv[n] = NULL;
  s->serve_pid = spawn_argv(argv);
  return s->serve_pid > 0 ? 0 : -1;
}

static int start_actors(struct e2e_stack *s, const struct e2e_stack_options *o) {
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) {
    if (!s->actors[i].expected) continue;
    char bin[PATH_MAX + 64];
    snprintf(bin, sizeof bin, "%s/cmd/%s", s->build_dir, e2e_actors[i].program);
    if (access(bin, X_OK) != 0) {
      fprintf(stderr, "e2e: %s not built\n", bin);
      return -1;
    }
    const char *argv[10 + E2E_MAX_ACTOR_ARGS + 1];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--nats";
    argv[n++] = s->srv.url;
    argv[n++] = "--heartbeat-ms";
    argv[n++] = E2E_HEARTBEAT_MS;
    if (e2e_actors[i].takes_model) {
      argv[n++] = "--model";
      argv[n++] = s->model;
    }
    if (i == E2E_ACTOR_GPU_WORKER && e2e_device()) {
      argv[n++] = "--device";
      argv[n++] = e2e_device();
    }
    const char *const *extra = o->actor_args[i];
    for (int k = 0; extra && extra[k]; k++) {
      if (k >= E2E_MAX_ACTOR_ARGS) {
        fprintf(stderr, "e2e: more than %d extra flags for %s\n", E2E_MAX_ACTOR_ARGS,
                e2e_actors[i].program);
        return -1;
      }
      argv[n++] = extra[k];
    }
    argv[n] = NULL;
    fprintf(stderr, "e2e: starting");
    for (int k = 0; k < n; k++) fprintf(stderr, " %s", argv[k]);
    fprintf(stderr, "\n");
    s->actor_pids[i] = spawn_argv(argv);
    if (s->actor_pids[i] <= 0) return -1;
  }
  return 0;
}

/* True when a child we started has exited already (start-up failure). */
static bool a_child_died(struct e2e_stack *s) {
  int status;
  if (s->via_serve) {
    if (s->serve_pid > 0 && waitpid(s->serve_pid, &status, WNOHANG) == s->serve_pid) {
      fprintf(stderr, "e2e: llmbus serve exited early (status 0x%x)\n", status);
      s->serve_pid = 0;
      return true;
    }
    return false;
  }
  for (int i = 0; i < E2E_ACTOR_COUNT; i++)
    if (s->actor_pids[i] > 0 && waitpid(s->actor_pids[i], &status, WNOHANG) == s->actor_pids[i]) {
      fprintf(stderr, "e2e: %s exited early (status 0x%x)\n", e2e_actors[i].program, status);
      s->actor_pids[i] = 0;
      return true;
    }
  return false;
}

static int wait_ready(struct e2e_stack *s, int64_t timeout_ms) {
  double end = e2e_now_s() + (double)timeout_ms / 1000.0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int ready = 0;
    for (int i = 0; i < E2E_ACTOR_COUNT; i++) ready += s->actors[i].ready || !s->actors[i].expected;
    if (ready < E2E_ACTOR_COUNT) {
      struct timespec dl = deadline_in(200);
      pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    }
    pthread_mutex_unlock(&s->mu);
    if (ready == E2E_ACTOR_COUNT) break;
    if (a_child_died(s)) return -1;
    if (e2e_now_s() > end) {
      fprintf(stderr, "e2e: not every actor ready within %lld ms:", (long long)timeout_ms);
      pthread_mutex_lock(&s->mu);
      for (int i = 0; i < E2E_ACTOR_COUNT; i++)
        if (s->actors[i].expected)
          fprintf(stderr, " %s=%s", e2e_actors[i].actor, s->actors[i].ready ? "ready" : "no");
      pthread_mutex_unlock(&s->mu);
      fprintf(stderr, "\n");
      return -1;
    }
  }
  /* The pids the stack became ready with are the reference for restarts. */
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) {
    s->actors[i].first_pid = s->actors[i].last_pid;
    s->actors[i].pid_changed = false;
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

int e2e_stack_start(struct e2e_stack *s, const char *model, const struct e2e_stack_options *o) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  llb_arena_init(&s->hb_arena, NULL, 0);
  llb_arena_init(&s->stats_arena, NULL, 0);
  snprintf(s->model, sizeof s->model, "%s", model);
  const char *bd = getenv("LLMBUS_BUILD_DIR");
  snprintf(s->build_dir, sizeof s->build_dir, "%s", bd ? bd : ".");
  find_actors(s);
  s->via_serve = true;
  for (int i = 0; i < E2E_ACTOR_COUNT; i++)
    if (o && o->actor_args[i]) s->via_serve = false;
  double t0 = e2e_now_s();
  if (nats_test_server_start(&s->srv, 0, true) != 0) return -1; /* JetStream: serve runs durable */
  struct bus_options bo;
  bus_options_init(&bo);
  bo.urls = s->srv.url;
  bo.name = "llmbus-e2e";
  bo.install_signal_handlers = false;
  char stats_subject[BUS_SUBJECT_MAX];
  if (bus_connect(&bo, &s->bus) != LLB_STATUS_OK ||
      bus_subject_engine(BUS_DEFAULT_PREFIX, E2E_ENGINE_ID, "stats", stats_subject, sizeof stats_subject) ||
      bus_subscribe(s->bus, "llm.health.*.*", NULL, on_heartbeat, s, NULL) != LLB_STATUS_OK || /* not .metrics */
      bus_subscribe(s->bus, stats_subject, NULL, on_stats, s, NULL) != LLB_STATUS_OK ||
      bus_flush(s->bus, 5000) != LLB_STATUS_OK) {
    fprintf(stderr, "e2e: client connection: %s\n", llb_err_last());
    goto fail;
  }
  if ((s->via_serve ? start_serve(s, o) : start_actors(s, o)) != 0) goto fail;
  if (wait_ready(s, o && o->ready_timeout_ms > 0 ? o->ready_timeout_ms : 180000) != 0) goto fail;
  fprintf(stderr, "e2e: stack ready (%s) in %.1f s\n", s->via_serve ? "llmbus serve" : "actors",
          e2e_now_s() - t0);
  return 0;
fail:
  e2e_stack_stop(s);
  return -1;
}

int e2e_stack_stop(struct e2e_stack *s) {
  int rc = 0;
  double t0 = e2e_now_s();
  pid_t actor_pids[E2E_ACTOR_COUNT] = {0};
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) actor_pids[i] = s->actors[i].last_pid;
  pthread_mutex_unlock(&s->mu);
  int status = 0;
  if (s->serve_pid > 0) {
    kill(s->serve_pid, SIGTERM);
    if (!wait_child(s->serve_pid, E2E_STOP_TIMEOUT_MS, &status)) {
      fprintf(stderr, "e2e: llmbus serve did not exit within %d ms after SIGTERM\n", E2E_STOP_TIMEOUT_MS);
      kill(s->serve_pid, SIGKILL);
      waitpid(s->serve_pid, &status, 0);
      rc = -1;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "e2e: llmbus serve ended with status 0x%x after SIGTERM\n", status);
      rc = -1;
    }
    s->serve_pid = 0;
  }
  /* Own actors: stop the front first so that nothing new enters while the engine drains. */
  for (int i = E2E_ACTOR_COUNT - 1; i >= 0; i--)
    if (s->actor_pids[i] > 0) kill(s->actor_pids[i], SIGTERM);
  for (int i = E2E_ACTOR_COUNT - 1; i >= 0; i--) {
    if (s->actor_pids[i] <= 0) continue;
    if (!wait_child(s->actor_pids[i], E2E_STOP_TIMEOUT_MS, &status)) {
      fprintf(stderr, "e2e: %s did not exit after SIGTERM\n", e2e_actors[i].program);
      kill(s->actor_pids[i], SIGKILL);
      waitpid(s->actor_pids[i], &status, 0);
      rc = -1;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "e2e: %s ended with status 0x%x after SIGTERM\n", e2e_actors[i].program, status);
      rc = -1;
    }
    s->actor_pids[i] = 0;
  }
  /* No actor may outlive the stop (those of serve are its children: reaped by now, or by
   * init a moment later). */
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) {
    if (actor_pids[i] <= 0) continue;
    double end = e2e_now_s() + 5.0;
    while (!process_gone(actor_pids[i]) && e2e_now_s() < end) usleep(20000);
    if (!process_gone(actor_pids[i])) {
      fprintf(stderr, "e2e: %s (pid %d) still exists after the stop\n", e2e_actors[i].actor,
              (int)actor_pids[i]);
      kill(actor_pids[i], SIGKILL);
      rc = -1;
    }
  }
  if (s->bus) {
    bus_destroy(s->bus);
    s->bus = NULL;
  }
  if (s->srv.pid > 0 || s->srv.dir[0]) nats_test_server_stop(&s->srv);
  llb_arena_destroy(&s->hb_arena);
  llb_arena_destroy(&s->stats_arena);
  fprintf(stderr, "e2e: stack stopped in %.1f s (%s)\n", e2e_now_s() - t0, rc == 0 ? "clean" : "NOT clean");
  return rc;
}

int e2e_stack_check_alive(struct e2e_stack *s, int64_t wait_ms) {
  uint64_t beats[E2E_ACTOR_COUNT];
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) beats[i] = s->actors[i].num_beats;
  struct timespec dl = deadline_in(wait_ms);
  for (;;) {
    int fresh = 0;
    for (int i = 0; i < E2E_ACTOR_COUNT; i++) fresh += s->actors[i].num_beats > beats[i] || !s->actors[i].expected;
    if (fresh == E2E_ACTOR_COUNT) break;
    if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) break;
  }
  int rc = 0;
  for (int i = 0; i < E2E_ACTOR_COUNT; i++) {
    const struct e2e_actor_state *a = &s->actors[i];
    if (!a->expected) continue;
    if (a->num_beats <= beats[i]) {
      fprintf(stderr, "e2e: %s sent no heartbeat within %lld ms\n", e2e_actors[i].actor, (long long)wait_ms);
      rc = -1;
    }
    if (a->pid_changed || a->last_pid != a->first_pid) {
      fprintf(stderr, "e2e: %s was restarted (pid %d -> %d)\n", e2e_actors[i].actor, a->first_pid,
              a->last_pid);
      rc = -1;
    }
    if (!a->ready) {
      fprintf(stderr, "e2e: %s says not ready\n", e2e_actors[i].actor);
      rc = -1;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* --- requests --------------------------------------------------------------------------- */

int e2e_submit(struct e2e_stack *s, const struct e2e_request *r, struct e2e_pending *p) {
  memset(p, 0, sizeof *p);
  llb_arena_init(&p->arena, NULL, 0);
  p->result.finish_reason = LLB_FINISH_REASON_NONE;
  struct llb_sampling_params sp = r->sp;
  sp.output_kind = LLB_OUTPUT_KIND_DELTA;
  struct llb_chat_message user_msg = {.role = llb_str_c("user"), .content = llb_str_c(r->prompt)};
  struct llb_generate_request g;
  llb_generate_request_init(&g);
  g.request_id = llb_str_c(r->request_id ? r->request_id : "e2e");
  g.sampling_params = &sp;
  g.mm_items = r->mm_items;
  g.num_mm_items = r->num_mm_items;
  if (r->messages) {
    g.messages = r->messages;
    g.num_messages = r->num_messages;
  } else if (r->prompt_token_ids) {
    g.prompt_token_ids = r->prompt_token_ids;
    g.num_prompt_token_ids = r->num_prompt_token_ids;
  } else if (r->raw) {
    g.prompt = llb_str_c(r->prompt);
    g.raw = true;
  } else {
    g.messages = &user_msg;
    g.num_messages = 1;
  }
  struct llb_buf b = {0};
  char subject[BUS_SUBJECT_MAX];
  int rc = -1;
  if (llb_generate_request_encode_buf(&g, &b) != LLB_STATUS_OK ||
      bus_new_inbox(s->bus, p->inbox, sizeof p->inbox) != LLB_STATUS_OK ||
      bus_subscribe_sync(s->bus, p->inbox, &p->sub) != LLB_STATUS_OK ||
      bus_subject_generate(BUS_DEFAULT_PREFIX, BUS_DEFAULT_TENANT, subject, sizeof subject)) {
    fprintf(stderr, "e2e: submit: %s\n", llb_err_last());
    goto done;
  }
  struct bus_out_msg m = {.subject = subject, .reply = p->inbox, .data = b.data, .len = b.len};
  if (bus_publish_msg(s->bus, &m) != LLB_STATUS_OK) {
    fprintf(stderr, "e2e: publish: %s\n", llb_err_last());
    goto done;
  }
  rc = 0;
done:
  llb_buf_free(&b);
  return rc;
}

int e2e_send_abort(struct e2e_stack *s, const char *request_id) {
  struct llb_abort_request a = {.request_id = llb_str_c(request_id)};
  struct llb_buf b = {0};
  char subject[BUS_SUBJECT_MAX];
  int rc = -1;
  if (llb_abort_request_encode_buf(&a, &b) != LLB_STATUS_OK ||
      bus_subject_abort(BUS_DEFAULT_PREFIX, BUS_DEFAULT_TENANT, subject, sizeof subject) != LLB_STATUS_OK ||
      bus_publish(s->bus, subject, b.data, b.len, NULL) != LLB_STATUS_OK)
    fprintf(stderr, "e2e: abort %s: %s\n", request_id, llb_err_last());
  else
    rc = 0;
  llb_buf_free(&b);
  return rc;
}

/* e2e_next, or 2 (silently) when `quiet` and nothing came within timeout_ms. */
static int next_output(struct e2e_pending *p, int64_t timeout_ms, bool quiet) {
  struct bus_msg *msg = NULL;
  if (bus_sub_next_msg(p->sub, timeout_ms, &msg) != LLB_STATUS_OK) {
    if (quiet) return 2;
    fprintf(stderr, "e2e: no RequestOutput on %s within %lld ms (%d outputs, %d tokens so far)\n",
            p->inbox, (long long)timeout_ms, p->result.num_outputs, p->result.num_tokens);
    return -1;
  }
  llb_arena_reset(&p->arena);
  struct llb_request_output o;
  llb_status st = llb_request_output_decode(msg->data, msg->len, &p->arena, &o);
  bus_msg_destroy(msg);
  if (st != LLB_STATUS_OK) {
    fprintf(stderr, "e2e: undecodable RequestOutput: %s\n", llb_err_last());
    return -1;
  }
  struct e2e_result *r = &p->result;
  snprintf(r->request_id, sizeof r->request_id, "%s", o.request_id.data);
  r->num_outputs++;
  for (int32_t i = 0; i < o.num_outputs; i++) {
    const struct llb_completion_output *c = &o.outputs[i];
    if (c->index != 0) continue;
    for (int32_t t = 0; t < c->num_token_ids && r->num_tokens < E2E_MAX_TOKENS; t++)
      r->token_ids[r->num_tokens++] = c->token_ids[t];
    if (c->finish_reason != LLB_FINISH_REASON_NONE) r->finish_reason = c->finish_reason;
  }
  if (o.error.code != 0) {
    r->error_code = o.error.code;
    snprintf(r->error_message, sizeof r->error_message, "%s", o.error.message.data);
    snprintf(r->error_field, sizeof r->error_field, "%s", o.error.field.data);
  }
  r->num_cached_tokens = o.metrics.num_cached_tokens;
  r->num_prompt_tokens = o.metrics.num_prompt_tokens;
  r->finished = o.finished;
  return o.finished ? 1 : 0;
}

int e2e_next(struct e2e_pending *p, int64_t timeout_ms) { return next_output(p, timeout_ms, false); }

int e2e_poll(struct e2e_pending *p, int64_t timeout_ms) { return next_output(p, timeout_ms, true); }

void e2e_pending_release(struct e2e_pending *p) {
  if (p->sub) bus_unsubscribe(p->sub);
  p->sub = NULL;
  llb_arena_destroy(&p->arena);
}

int e2e_collect(struct e2e_pending *p, int64_t timeout_ms) {
  int r;
  while ((r = e2e_next(p, timeout_ms)) == 0) {
  }
  e2e_pending_release(p);
  return r == 1 ? 0 : -1;
}

int e2e_generate(struct e2e_stack *s, const struct e2e_request *r, struct e2e_result *out) {
  struct e2e_pending *p = calloc(1, sizeof *p);
  if (!p) return -1;
  int rc = e2e_submit(s, r, p);
  if (rc == 0) rc = e2e_collect(p, E2E_WAIT_OUTPUT_MS);
  else e2e_pending_release(p);
  *out = p->result;
  free(p);
  return rc;
}

void e2e_print_result(const char *what, const struct e2e_result *r) {
  fprintf(stderr, "%s: id=%s finished=%d reason=%s outputs=%d cached=%d prompt=%d error=%d '%s' tokens[%d]:",
          what, r->request_id, r->finished, llb_finish_reason_name(r->finish_reason)
                                                ? llb_finish_reason_name(r->finish_reason)
                                                : "none",
          r->num_outputs, r->num_cached_tokens, r->num_prompt_tokens, r->error_code, r->error_message,
          r->num_tokens);
  for (int32_t i = 0; i < r->num_tokens; i++) fprintf(stderr, " %d", r->token_ids[i]);
  fprintf(stderr, "\n");
}

bool e2e_same_tokens(const char *what, const struct e2e_result *a, const struct e2e_result *b) {
  bool same = a->num_tokens == b->num_tokens &&
              memcmp(a->token_ids, b->token_ids, (size_t)a->num_tokens * sizeof(int32_t)) == 0;
  if (!same) {
    fprintf(stderr, "e2e: %s: token ids differ\n", what);
    e2e_print_result("  expected", a);
    e2e_print_result("  observed", b);
  }
  return same;
}

int e2e_stack_teardown(void **state) {
  struct e2e_stack *s = *state;
  return s && s->bus ? e2e_stack_stop(s) : 0;
}
