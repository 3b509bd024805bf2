# Chaos (issue 13, docs/design.md §6): tests/chaos/chaos.py starts `llmbus serve` with the default
# model and SIGKILLs each actor type once, plus the nats-server, during 40 streamed greedy and
# seeded requests (the short form); `make chaos` runs the long form. Standard library only.
add_test(NAME chaos_short
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/chaos.py --requests 40 --kills 1)
set_tests_properties(chaos_short PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;chaos" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
# Disaggregated prefill/decode (issue 36): the prefill engine's (0) scheduler and worker, the decode
# engine's (1) scheduler, worker and output processor, each SIGKILLed once during 40 requests that
# are all handed from engine 0 to engine 1 after their first token, their KV blocks fetched by
# engine 1's worker (no prefill queue limit: a killed prefill engine's stale load must not send
# them aggregated); 24 KV blocks an engine, so that the decode engine runs out of blocks and
# preempts (8 requests of about 5 blocks each).
add_test(NAME chaos_pd_short
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/chaos.py --requests 40 --kills 1
                 --serve-args "--engines 2 --roles prefill,decode --disagg-min-prompt-tokens 0 --max-prefill-queue-size 0 --num-blocks 24"
                 --victims scheduler@0,gpu_worker@0,scheduler@1,gpu_worker@1,output_processor@1)
set_tests_properties(chaos_pd_short PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;chaos" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
