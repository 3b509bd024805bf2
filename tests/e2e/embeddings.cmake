# /v1/embeddings end to end (vLLM's embed task): the official openai client against `llmbus
# serve`, the vectors checked against the CPU forward's own hidden states, which
# llmbus-test-hidden-states prints (a reference harness, not a test by itself).
set(llb_emb_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_executable(llmbus-test-hidden-states ${CMAKE_CURRENT_LIST_DIR}/hidden_states.c)
target_link_libraries(llmbus-test-hidden-states PRIVATE llmbus_model)
target_include_directories(llmbus-test-hidden-states PRIVATE ${CMAKE_SOURCE_DIR})
add_test(NAME api_test_openai_embeddings
         COMMAND sh -c "if [ ! -x '${llb_emb_py}' ]; then echo 'SKIP: ${llb_emb_py} missing (make venv)'; exit 77; fi; exec '${llb_emb_py}' '${CMAKE_CURRENT_LIST_DIR}/test_openai_embeddings.py'")
set_tests_properties(api_test_openai_embeddings PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e;api"
                     RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL};LLMBUS_HIDDEN_STATES=$<TARGET_FILE:llmbus-test-hidden-states>")
