# prompt_logprobs end to end: `llmbus serve` with the real model and chunked
# prefill, checked against greedy decodes of each prefix. Python's standard library only.
add_test(NAME e2e_prompt_logprobs COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_prompt_logprobs.py)
set_tests_properties(e2e_prompt_logprobs PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e;api" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
