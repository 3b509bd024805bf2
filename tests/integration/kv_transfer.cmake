# Issue 36's KV transfer between workers (actors/gpu_worker/kv_transfer.h): two model runners on a
# tiny random model, blocks exported by one and fetched by the other's connector through an
# embedded nats-server; token identity (greedy and seeded), partial fetch, flipped byte, lost and
# missing replies, expiry, listed blocks only, every CPU KV dtype bit-exact, sim byte counts, and
# the token identity on each architecture of tests/unit/arch_models.h.
llb_add_test(test_kv_transfer
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_transfer.c ${CMAKE_SOURCE_DIR}/tests/unit/arch_models.c
             LIBS llmbus_gpu_worker_actor llmbus_nats_test_server llmbus_test_gguf_writer PkgConfig::CMOCKA m
             LABELS "integration;worker" TIMEOUT 180)
# The wire-cost benchmark (tests/tools/kv_transfer_bench.c; not a test): bytes per token and
# transfer time of a prompt's KV over loopback NATS against its prefill's time.
add_executable(llmbus_kv_transfer_bench ${CMAKE_SOURCE_DIR}/tests/tools/kv_transfer_bench.c)
target_link_libraries(llmbus_kv_transfer_bench PRIVATE llmbus_gpu_worker_actor llmbus_nats_test_server)
target_compile_definitions(llmbus_kv_transfer_bench PRIVATE LLB_DEFAULT_MODEL="${LLB_DEFAULT_MODEL}")
