# Chaos (issue 13, docs/design.md §6): tests/chaos/chaos.py starts `llmbus serve` with the default
# model and SIGKILLs each actor type once, plus the nats-server, during 40 streamed greedy and
# seeded requests (the short form); `make chaos` runs the long form. Standard library only.
add_test(NAME chaos_short
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/chaos.py --requests 40 --kills 1)
set_tests_properties(chaos_short PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;chaos" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
