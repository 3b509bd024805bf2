/* The engine's KV geometry has one source, the worker (docs/design.md §9, vLLM's num_gpu_blocks):
 * a scheduler and a kv_manager started with --num-blocks 0 adopt the block count the worker
 * allocated (announced in its heartbeat; on a GPU it is sized from device memory), and the
 * engine then serves with exactly that many blocks. Here the worker gets --num-blocks 48:
 * SchedulerStats must report 48 blocks in total, a request must complete with the same
 * tokens as under the default geometry, and a prompt needing more than 48 blocks must be
 * refused by the scheduler (it knows the real capacity, not the default 1024). Heartbeats are
 * untrusted: one of another engine, or with an absurd block count, changes nothing; a worker
 * of this engine announcing another geometry (as a CUDA worker restarted with less free memory
 * would) makes the scheduler and the kv_manager exit 1, for their supervisor to restart them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bus/subject.h"
#include "schemas/control.h"
#include "tests/e2e/stack.h"

#define WORKER_BLOCKS 48
#define STATS_WAIT_MS 30000

static const char *model;
static struct e2e_stack s;

static struct e2e_request greedy(const char *id, const char *prompt) {
  struct e2e_request r = {.request_id = id, .prompt = prompt};
  llb_sampling_params_init(&r.sp);
  r.sp.temperature = 0.0f;
  r.sp.max_tokens = 12;
  return r;
}

/* A gpu_worker heartbeat from nobody in particular: engine `eid`, this geometry. */
static void forge_worker_heartbeat(const char *eid, int32_t num_blocks, int32_t block_size) {
  /* the real worker's pid, so that the stack's own bookkeeping of actor pids is not misled */
  struct llb_heartbeat hb = {.actor = llb_str_c("gpu_worker"), .instance = llb_str_c("forged"),
                             .pid = (int32_t)s.actor_pids[E2E_ACTOR_GPU_WORKER],
                             .ready = true, .engine_id = llb_str_c(eid), .num_gpu_blocks = num_blocks,
                             .block_size = block_size};
  struct llb_buf b = {0};
  assert_int_equal(llb_heartbeat_encode_buf(&hb, &b), LLB_STATUS_OK);
  assert_int_equal(bus_publish(s.bus, "llm.health.gpu_worker.forged", b.data, b.len, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(s.bus, 5000), LLB_STATUS_OK);
  llb_buf_free(&b);
}

/* Waits up to timeout_ms for actor i (started by the stack) to exit; returns its exit code, or
 * -1 if it is still running. */
static int actor_exit_code(int i, int64_t timeout_ms) {
  for (int64_t t = 0; t < timeout_ms; t += 50) {
    int status;
    if (s.actor_pids[i] > 0 && waitpid(s.actor_pids[i], &status, WNOHANG) == s.actor_pids[i]) {
      s.actor_pids[i] = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    usleep(50000);
  }
  return -1;
}

/* Starts the stack with the worker's flags and --num-blocks 0 ("the worker's") for the
 * scheduler and the kv_manager. */
static void start_with_worker_geometry(const char *const *worker_args) {
  static const char *const zero_args[] = {"--num-blocks", "0", NULL};
  struct e2e_stack_options o = {0};
  o.actor_args[E2E_ACTOR_GPU_WORKER] = worker_args;
  o.actor_args[E2E_ACTOR_SCHEDULER] = zero_args;
  o.actor_args[E2E_ACTOR_KV_MANAGER] = zero_args;
  assert_int_equal(e2e_stack_start(&s, model, &o), 0);
}

static void test_scheduler_and_kv_manager_adopt_the_workers_block_count(void **state) {
  (void)state;
  /* the reference: the default geometry (1024 blocks everywhere) */
  struct e2e_result ref, got, big;
  struct e2e_request r = greedy("geometry", "What is a bus?");
  assert_int_equal(e2e_stack_start(&s, model, NULL), 0);
  assert_int_equal(e2e_generate(&s, &r, &ref), 0);
  assert_int_equal(ref.error_code, 0);
  assert_int_equal(e2e_stack_stop(&s), 0);

  static const char *const worker_args[] = {"--num-blocks", "48", NULL};
  start_with_worker_geometry(worker_args);
  assert_int_equal(e2e_generate(&s, &r, &got), 0);
  assert_int_equal(got.error_code, 0);
  assert_true(e2e_same_tokens("worker's geometry vs default", &ref, &got));

  struct llb_scheduler_stats st;
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  fprintf(stderr, "e2e: stats num_total_blocks=%d num_free_blocks=%d\n", st.num_total_blocks, st.num_free_blocks);
  assert_int_equal(st.num_total_blocks, WORKER_BLOCKS);
  assert_true(st.num_free_blocks <= WORKER_BLOCKS);

  /* 48 blocks hold 768 tokens: a 1000-token prompt cannot fit and is refused, not admitted */
  static int32_t ids[1000];
  for (int i = 0; i < 1000; i++) ids[i] = i % 2 ? 905 : 19556;
  struct e2e_request too_big = {.request_id = "too-big", .prompt_token_ids = ids, .num_prompt_token_ids = 1000};
  llb_sampling_params_init(&too_big.sp);
  too_big.sp.max_tokens = 4;
  assert_int_equal(e2e_generate(&s, &too_big, &big), 0);
  e2e_print_result("1000-token prompt, 48 blocks", &big);
  assert_true(big.finished);
  assert_int_not_equal(big.error_code, 0);
  assert_non_null(strstr(big.error_message, "(48 blocks of 16)"));
  assert_int_equal(e2e_stack_check_alive(&s, 10000), 0);

  /* untrusted heartbeats: another engine's geometry, an absurd block count: nothing changes */
  forge_worker_heartbeat("7", 64, 16);
  forge_worker_heartbeat("0", 1 << 30, 16);
  forge_worker_heartbeat("0", 48, 0);
  assert_int_equal(actor_exit_code(E2E_ACTOR_SCHEDULER, 1500), -1);
  assert_int_equal(actor_exit_code(E2E_ACTOR_KV_MANAGER, 100), -1);
  assert_int_equal(e2e_stack_wait_stats(&s, e2e_stack_num_stats(&s), STATS_WAIT_MS, &st), 0);
  assert_int_equal(st.num_total_blocks, WORKER_BLOCKS);
  /* this engine's worker with another geometry: both adopters exit 1 to be restarted */
  forge_worker_heartbeat("0", 64, 16);
  assert_int_equal(actor_exit_code(E2E_ACTOR_SCHEDULER, 10000), 1);
  assert_int_equal(actor_exit_code(E2E_ACTOR_KV_MANAGER, 10000), 1);
  assert_int_equal(e2e_stack_stop(&s), 0);
}

/* Not-ready heartbeat of a scheduler of engine `eid` that is starting (what a restarted
 * scheduler or kv_manager publishes while it waits for the geometry). */
static void forge_scheduler_hello(const char *eid) {
  struct llb_heartbeat hb = {.actor = llb_str_c("scheduler"), .instance = llb_str_c("hello"),
                             .pid = (int32_t)s.actor_pids[E2E_ACTOR_SCHEDULER], .ready = false,
                             .engine_id = llb_str_c(eid)};
  struct llb_buf b = {0};
  assert_int_equal(llb_heartbeat_encode_buf(&hb, &b), LLB_STATUS_OK);
  assert_int_equal(bus_publish(s.bus, "llm.health.scheduler.hello", b.data, b.len, NULL), LLB_STATUS_OK);
  assert_int_equal(bus_flush(s.bus, 5000), LLB_STATUS_OK);
  llb_buf_free(&b);
}

static uint64_t worker_beats(void) {
  pthread_mutex_lock(&s.mu);
  const uint64_t n = s.actors[E2E_ACTOR_GPU_WORKER].num_beats;
  pthread_mutex_unlock(&s.mu);
  return n;
}

/* Waits up to timeout_ms for a worker heartbeat after `before` of them; true if one came. */
static bool worker_beat_after(uint64_t before, int64_t timeout_ms) {
  for (int64_t t = 0; t < timeout_ms; t += 20) {
    if (worker_beats() > before) return true;
    usleep(20000);
  }
  return false;
}

/* A restarted scheduler or kv_manager says hello (a not-ready heartbeat) while it waits for the
 * geometry, and the worker answers with a heartbeat at once instead of at its next interval:
 * here the worker beats every 60 s, and the engine still starts, and a hello gets a beat
 * within seconds. A hello of another engine gets none. */
static void test_worker_answers_a_starting_peers_hello_at_once(void **state) {
  (void)state;
  static const char *const worker_args[] = {"--num-blocks", "48", "--heartbeat-ms", "60000", NULL};
  start_with_worker_geometry(worker_args);
  struct e2e_result got;
  struct e2e_request r = greedy("hello", "What is a bus?");
  assert_int_equal(e2e_generate(&s, &r, &got), 0);
  assert_int_equal(got.error_code, 0);

  usleep(200000); /* past the worker's answer gap */
  uint64_t before = worker_beats();
  forge_scheduler_hello("7");
  assert_false(worker_beat_after(before, 1000));
  before = worker_beats();
  forge_scheduler_hello("0");
  assert_true(worker_beat_after(before, 5000));
  assert_int_equal(e2e_stack_stop(&s), 0);
}

int main(int argc, char **argv) {
  model = e2e_require_model(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate_setup_teardown(test_scheduler_and_kv_manager_adopt_the_workers_block_count, NULL,
                                               e2e_stack_teardown, &s),
      cmocka_unit_test_prestate_setup_teardown(test_worker_answers_a_starting_peers_hello_at_once, NULL,
                                               e2e_stack_teardown, &s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
